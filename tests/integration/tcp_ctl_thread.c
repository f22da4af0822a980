/* Server side of tcp_ctl_thread.sh (VMA_TCP_CTL_THREAD), run under libvma.
 *
 *   tcp_ctl_thread sleep PORT SLEEP_MS CONNS
 *     listens on PORT, prints "ready PID", then sleeps SLEEP_MS in raw
 *     nanosleep: no libvma call, so only the internal thread can answer the
 *     SYNs meanwhile. Then accepts CONNS connections; on each reads one
 *     line and echoes it; prints "served CONNS".
 *   tcp_ctl_thread poll PORT ROUNDS
 *     listens, prints "ready PID", waits in blocking poll() for the
 *     connection, then ROUNDS times: blocking poll() on it, read a line,
 *     echo it. With the internal thread draining the ring, the data may
 *     reach the socket before this thread looks: it must still wake.
 * Exit 0 ok, 1 failure, 2 usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POLL_TIMEOUT_MS 10000

/* Straight to the kernel: not a libvma entry point, not even libc's. */
static void raw_sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
		;
}

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 64) != 0) {
		perror("listen");
		return -1;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	return fd;
}

static int wait_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, POLL_TIMEOUT_MS);
	if (n != 1) {
		fprintf(stderr, "poll(fd %d): %s\n", fd, n == 0 ? "timed out" : strerror(errno));
		return -1;
	}
	return 0;
}

/* Reads one '\n'-terminated line (at most size - 1 bytes) and sends it back. */
static int echo_line(int fd, int use_poll)
{
	char line[256];
	size_t got = 0;
	while (got == 0 || line[got - 1] != '\n') {
		if (use_poll && wait_readable(fd) < 0)
			return -1;
		ssize_t n = recv(fd, line + got, sizeof(line) - 1 - got, 0);
		if (n <= 0 || got + (size_t)n >= sizeof(line) - 1) {
			fprintf(stderr, "recv: %s\n", n < 0 ? strerror(errno) : "short line or EOF");
			return -1;
		}
		got += (size_t)n;
	}
	if (send(fd, line, got, MSG_NOSIGNAL) != (ssize_t)got) {
		perror("send");
		return -1;
	}
	return 0;
}

static int serve_after_sleep(int port, long sleep_ms, int conns)
{
	int lfd = listen_on(port);
	if (lfd < 0)
		return 2;
	raw_sleep_ms(sleep_ms);
	int fds[64];
	if (conns > 64)
		conns = 64;
	for (int i = 0; i < conns; i++) {
		fds[i] = accept(lfd, NULL, NULL);
		if (fds[i] < 0 || echo_line(fds[i], 0) < 0) {
			fprintf(stderr, "connection %d: %s\n", i, fds[i] < 0 ? strerror(errno) : "echo failed");
			return 1;
		}
	}
	printf("served %d\n", conns);
	fflush(stdout);
	for (int i = 0; i < conns; i++)
		close(fds[i]);
	close(lfd);
	return 0;
}

static int serve_with_poll(int port, int rounds)
{
	int lfd = listen_on(port);
	if (lfd < 0)
		return 2;
	if (wait_readable(lfd) < 0)
		return 1;
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0) {
		perror("accept");
		return 1;
	}
	for (int i = 0; i < rounds; i++)
		if (echo_line(fd, 1) < 0) {
			fprintf(stderr, "round %d failed\n", i);
			return 1;
		}
	printf("rounds %d\n", rounds);
	fflush(stdout);
	close(fd);
	close(lfd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "sleep") == 0)
		return serve_after_sleep(atoi(argv[2]), atol(argv[3]), atoi(argv[4]));
	if (argc == 4 && strcmp(argv[1], "poll") == 0)
		return serve_with_poll(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: %s sleep PORT SLEEP_MS CONNS | poll PORT ROUNDS\n", argv[0]);
	return 2;
}
