/* tcp_connrate: TCP connection setup rate, one connection at a time.
 *
 *   tcp_connrate -s IP PORT                 server: accept, close at once, forever
 *   tcp_connrate IP PORT SECONDS [MAX]      client: cycles until SECONDS or MAX
 *
 * A client cycle is socket, connect (blocking), read until the server's FIN,
 * close. The server closes first so its side holds TIME_WAIT: the client's
 * ephemeral ports come back at once and a long run does not run out of them.
 * The client prints
 *   conns=N failed=N secs=X rate=X avg_us=X p50_us=X p99_us=X
 * (cycle times in usec) and exits 0, 1 when no cycle succeeded or on a setup
 * error, 2 on usage. The server prints "ready" once it listens and exits 0
 * on SIGINT or SIGTERM. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* Enough samples for a p99 of a multi-second run without unbounded memory. */
#define CONNRATE_MAX_SAMPLES 1000000L

static volatile sig_atomic_t connrate_stop;

static void connrate_on_signal(int sig)
{
	(void)sig;
	connrate_stop = 1;
}

static int64_t connrate_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int connrate_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int connrate_addr(const char *ip, const char *port, struct sockaddr_in *sa)
{
	long p = strtol(port, NULL, 10);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)p);
	if (p <= 0 || p > 65535 || inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
		fprintf(stderr, "tcp_connrate: bad address %s:%s\n", ip, port);
		return -1;
	}
	return 0;
}

static int connrate_server(const struct sockaddr_in *sa)
{
	/* No SA_RESTART: the signal must break the blocking accept. */
	struct sigaction act = { .sa_handler = connrate_on_signal };
	int one = 1, fd;
	long accepted = 0;

	sigaction(SIGINT, &act, NULL);
	sigaction(SIGTERM, &act, NULL);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 || listen(fd, 1024) < 0) {
		perror("tcp_connrate: listen");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (!connrate_stop) {
		int conn = accept(fd, NULL, NULL);
		if (conn < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				perror("tcp_connrate: accept");
			continue;
		}
		accepted++;
		close(conn);
	}
	printf("accepted=%ld\n", accepted);
	close(fd);
	return 0;
}

/* One cycle; 0 when the connection was set up and closed by the server. */
static int connrate_cycle(const struct sockaddr_in *sa)
{
	char byte;
	ssize_t got;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		close(fd);
		return -1;
	}
	do
		got = read(fd, &byte, 1);
	while (got < 0 && errno == EINTR);
	close(fd);
	return got == 0 ? 0 : -1;
}

static int connrate_client(const struct sockaddr_in *sa, double seconds, long max)
{
	int64_t *samples, start, deadline, t0, t1, sum = 0;
	long conns = 0, failed = 0, cap = max < CONNRATE_MAX_SAMPLES ? max : CONNRATE_MAX_SAMPLES;
	double secs;

	samples = calloc((size_t)cap, sizeof(*samples));
	if (!samples) {
		fprintf(stderr, "tcp_connrate: out of memory\n");
		return 1;
	}
	start = connrate_now_ns();
	deadline = start + (int64_t)(seconds * 1e9);
	for (t0 = start; conns + failed < max && t0 < deadline; t0 = t1) {
		int rc = connrate_cycle(sa);
		t1 = connrate_now_ns();
		if (rc < 0) {
			/* A refused or reset cycle is counted, not retried in a
			 * tight loop forever: give up once failures dominate. */
			if (++failed > 100 && failed > conns) {
				fprintf(stderr, "tcp_connrate: %s (after %ld failures)\n", strerror(errno), failed);
				break;
			}
			continue;
		}
		if (conns < cap)
			samples[conns] = t1 - t0;
		sum += t1 - t0;
		conns++;
	}
	secs = (double)(connrate_now_ns() - start) / 1e9;
	if (conns == 0) {
		printf("conns=0 failed=%ld secs=%.3f\n", failed, secs);
		free(samples);
		return 1;
	}
	{
		long n = conns < cap ? conns : cap;
		qsort(samples, (size_t)n, sizeof(*samples), connrate_cmp);
		printf("conns=%ld failed=%ld secs=%.3f rate=%.1f avg_us=%.2f p50_us=%.2f p99_us=%.2f\n",
		       conns, failed, secs, conns / secs, sum / 1e3 / conns, samples[n / 2] / 1e3,
		       samples[(n * 99) / 100] / 1e3);
	}
	free(samples);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;

	if (argc == 4 && strcmp(argv[1], "-s") == 0)
		return connrate_addr(argv[2], argv[3], &sa) < 0 ? 2 : connrate_server(&sa);
	if (argc == 4 || argc == 5) {
		double seconds = strtod(argv[3], NULL);
		long max = argc == 5 ? strtol(argv[4], NULL, 10) : CONNRATE_MAX_SAMPLES;
		if (connrate_addr(argv[1], argv[2], &sa) < 0 || seconds <= 0 || max <= 0)
			return 2;
		return connrate_client(&sa, seconds, max);
	}
	fprintf(stderr, "usage: tcp_connrate -s IP PORT | tcp_connrate IP PORT SECONDS [MAX]\n");
	return 2;
}
