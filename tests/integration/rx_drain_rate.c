/* Receiver of rx_drain_rate.sh (VMA_RX_CQ_DRAIN_RATE_NSEC), run under
 * libvma: a slow reader, so data waits in the socket's queue while more
 * arrives on the ring.
 *
 *   rx_drain_rate udp PORT COUNT GAP_US RELEASE
 *     binds UDP PORT, prints "ready PID", then reads COUNT datagrams, one
 *     per recv(), sleeping GAP_US in raw nanosleep before each.
 *   rx_drain_rate tcp PORT BYTES CHUNK GAP_US RELEASE
 *     listens on PORT, prints "ready PID", accepts one connection and reads
 *     BYTES from it, at most CHUNK per recv(), sleeping GAP_US before each;
 *     byte i of the stream must be (i * 7) & 0xff.
 * Then prints "got N in MS ms" (MS from the first read to the last) and
 * waits (at most 30 s) until the file RELEASE
 * exists, so vma_stats can read the socket's counters before it closes.
 * Exit 0 ok, 1 failure, 2 usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RECV_TIMEOUT_S 10
#define RELEASE_WAIT_MS 30000

/* Straight to the kernel: not a libvma entry point, not even libc's. */
static void raw_sleep_us(long us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L };
	while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
		;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void wait_release(const char *path)
{
	for (int ms = 0; ms < RELEASE_WAIT_MS && access(path, F_OK) != 0; ms += 10)
		raw_sleep_us(10000);
}

static int bound_socket(int type, int port)
{
	int fd = socket(AF_INET, type, 0);
	int one = 1;
	struct timeval tv = { .tv_sec = RECV_TIMEOUT_S };
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || (type == SOCK_STREAM && listen(fd, 4) != 0)) {
		perror("socket setup");
		return -1;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	return fd;
}

static int read_datagrams(int port, long count, long gap_us, const char *release)
{
	int fd = bound_socket(SOCK_DGRAM, port);
	if (fd < 0)
		return 2;
	long got = 0, first_ms = 0;
	char buf[2048];
	while (got < count) {
		raw_sleep_us(gap_us);
		if (recv(fd, buf, sizeof(buf), 0) < 0) {
			fprintf(stderr, "recv after %ld datagrams: %s\n", got, strerror(errno));
			break;
		}
		if (got++ == 0)
			first_ms = now_ms();
	}
	printf("got %ld in %ld ms\n", got, now_ms() - first_ms);
	fflush(stdout);
	wait_release(release);
	close(fd);
	return got == count ? 0 : 1;
}

static int read_stream(int port, long bytes, long chunk, long gap_us, const char *release)
{
	int lfd = bound_socket(SOCK_STREAM, port);
	if (lfd < 0)
		return 2;
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0) {
		perror("accept");
		return 1;
	}
	char buf[65536];
	if (chunk <= 0 || chunk > (long)sizeof(buf))
		chunk = sizeof(buf);
	long got = 0, first_ms = 0;
	int bad = 0;
	while (got < bytes) {
		raw_sleep_us(gap_us);
		ssize_t n = recv(fd, buf, (size_t)chunk, 0);
		if (n <= 0) {
			fprintf(stderr, "recv after %ld bytes: %s\n", got, n < 0 ? strerror(errno) : "EOF");
			break;
		}
		for (ssize_t i = 0; i < n; i++)
			bad += (unsigned char)buf[i] != (unsigned char)(((got + i) * 7) & 0xff);
		if (got == 0)
			first_ms = now_ms();
		got += n;
	}
	printf("got %ld in %ld ms%s\n", got, now_ms() - first_ms, bad ? " (corrupt)" : "");
	fflush(stdout);
	wait_release(release);
	close(fd);
	close(lfd);
	return got == bytes && !bad ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "udp") == 0)
		return read_datagrams(atoi(argv[2]), atol(argv[3]), atol(argv[4]), argv[5]);
	if (argc == 7 && strcmp(argv[1], "tcp") == 0)
		return read_stream(atoi(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]), argv[6]);
	fprintf(stderr, "usage: %s udp PORT COUNT GAP_US RELEASE | tcp PORT BYTES CHUNK GAP_US RELEASE\n", argv[0]);
	return 2;
}
