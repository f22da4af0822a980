/* A UDP echo server whose socket is made by one thread and read by another
 * (tests/integration/udp_migrate.sh: VMA_RING_MIGRATION_RATIO_RX).
 *
 *   udp_migrate PORT recv|epoll [pin]
 *
 * The main thread (pinned to CPU 0 with "pin") creates the socket, binds it
 * to 0.0.0.0:PORT, prints "ready PID FD" and reads commands on stdin:
 *   go N [forks K]
 *            start the worker thread (pinned to CPU 1 with "pin"), which
 *            receives and echoes until it has seen datagrams 0..N-1, then
 *            the main thread prints
 *            "done got G dup D bad B recv_calls C forks_ok F" (G distinct
 *            numbers). The worker gives up after 5 s without a datagram.
 *            Each duplicate is reported on stderr with the calls and times
 *            (CLOCK_MONOTONIC us) of both reads, and then the forks' times.
 *            With forks K the main thread meanwhile forks K children, 5 ms
 *            apart, each of which exits 0 at once (F: how many did):
 *            forks racing the socket's move between lanes.
 *   quit     exit 0.
 * The main thread never receives: the worker makes every receive call, so
 * under VMA_RING_ALLOCATION_LOGIC_RX 20 (31 with "pin") the socket is read
 * from another lane than the one it was made in.
 *
 * Datagram k: "%08u:" k, then bytes (k * 31 + i) & 0xff up to its size,
 * 32 + (k % 5) * 50 bytes in all; a datagram that does not match its own
 * number's pattern counts as bad. recv: blocking recvfrom (SO_RCVTIMEO 5 s);
 * epoll: epoll_wait (5 s) then recvfrom MSG_DONTWAIT until EAGAIN. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_N 100000
#define IDLE_MS 5000

static int sock_fd = -1;
static int use_epoll;
static int pin;
static unsigned want_n;
static unsigned char *seen;
static unsigned got, dups, bad, calls;
/* For a duplicate's report on stderr: the call that first returned each
 * number, and when (CLOCK_MONOTONIC us), beside the forks' times. */
static unsigned *first_call;
static long long *first_us;

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void pin_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
		fprintf(stderr, "udp_migrate: cannot pin to CPU %d\n", cpu);
		exit(2);
	}
}

/* Whether buf (len bytes) is datagram k intact; k from its header. */
static int check_datagram(const unsigned char *buf, ssize_t len, unsigned *k)
{
	if (len < 9 || buf[8] != ':' || sscanf((const char *)buf, "%8u", k) != 1)
		return 0;
	if (len != 32 + (ssize_t)(*k % 5) * 50)
		return 0;
	for (ssize_t i = 9; i < len; i++)
		if (buf[i] != (unsigned char)((*k * 31 + (unsigned)i) & 0xff))
			return 0;
	return 1;
}

/* One datagram: checked, counted, echoed. Returns recvfrom's result. */
static ssize_t serve_one(int flags)
{
	unsigned char buf[2048];
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	calls++;
	ssize_t n = recvfrom(sock_fd, buf, sizeof(buf), flags, (struct sockaddr *)&from, &flen);
	if (n < 0)
		return n;
	unsigned k;
	if (!check_datagram(buf, n, &k) || k >= want_n) {
		bad++;
	} else if (seen[k]) {
		dups++;
		fprintf(stderr, "udp_migrate: datagram %u again at call %u, %lld us (first at call %u, %lld us)\n", k,
			calls, now_us(), first_call[k], first_us[k]);
	} else {
		seen[k] = 1;
		first_call[k] = calls;
		first_us[k] = now_us();
		got++;
	}
	if (sendto(sock_fd, buf, (size_t)n, 0, (struct sockaddr *)&from, flen) != n)
		fprintf(stderr, "udp_migrate: echo failed: %s\n", strerror(errno));
	return n;
}

static void *worker(void *arg)
{
	(void)arg;
	if (pin)
		pin_to(1);
	if (!use_epoll) {
		while (got < want_n)
			if (serve_one(0) < 0) {
				if (errno != EAGAIN && errno != EINTR)
					fprintf(stderr, "udp_migrate: recvfrom: %s\n", strerror(errno));
				if (errno == EAGAIN)
					break;   /* SO_RCVTIMEO: nothing for 5 s */
			}
		return NULL;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = sock_fd };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sock_fd, &ev) != 0) {
		fprintf(stderr, "udp_migrate: epoll: %s\n", strerror(errno));
		return NULL;
	}
	while (got < want_n) {
		int r = epoll_wait(ep, &ev, 1, IDLE_MS);
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "udp_migrate: epoll_wait: %s\n", strerror(errno));
			break;
		}
		while (got < want_n && serve_one(MSG_DONTWAIT) >= 0)
			;
	}
	close(ep);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "recv") != 0 && strcmp(argv[2], "epoll") != 0)) {
		fprintf(stderr, "usage: udp_migrate PORT recv|epoll [pin]\n");
		return 2;
	}
	use_epoll = strcmp(argv[2], "epoll") == 0;
	pin = argc > 3 && strcmp(argv[3], "pin") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pin)
		pin_to(0);
	sock_fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (sock_fd < 0) {
		perror("socket");
		return 1;
	}
	/* Room for what queues while nobody reads (root: beyond rmem_max). */
	int rcvbuf = 8 << 20;
	if (setsockopt(sock_fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0)
		setsockopt(sock_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	struct timeval tv = { .tv_sec = IDLE_MS / 1000 };
	setsockopt(sock_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
	if (bind(sock_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
		perror("bind");
		return 1;
	}
	printf("ready %d %d\n", (int)getpid(), sock_fd);
	char line[128];
	while (fgets(line, sizeof(line), stdin)) {
		unsigned n, forks = 0, forks_ok = 0;
		long long fork_us[64];
		if (sscanf(line, "go %u forks %u", &n, &forks) >= 1 && n > 0 && n <= MAX_N) {
			want_n = n;
			free(seen);
			free(first_call);
			free(first_us);
			seen = calloc(n, 1);
			first_call = calloc(n, sizeof(*first_call));
			first_us = calloc(n, sizeof(*first_us));
			got = dups = bad = calls = 0;
			pthread_t t;
			if (!seen || !first_call || !first_us || pthread_create(&t, NULL, worker, NULL) != 0) {
				printf("error\n");
				continue;
			}
			for (unsigned i = 0; i < forks; i++) {
				usleep(5000);
				long long t0 = now_us();
				pid_t pid = fork();
				if (pid == 0)
					_exit(0);
				fork_us[i < 64 ? i : 63] = t0;
				int st = -1;
				if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
					forks_ok++;
			}
			pthread_join(t, NULL);
			for (unsigned i = 0; dups && i < forks && i < 64; i++)
				fprintf(stderr, "udp_migrate: fork %u at %lld us\n", i, fork_us[i]);
			printf("done got %u dup %u bad %u recv_calls %u forks_ok %u\n", got, dups, bad, calls, forks_ok);
		} else if (strncmp(line, "quit", 4) == 0) {
			break;
		} else {
			printf("error\n");
		}
	}
	free(seen);
	close(sock_fd);
	return 0;
}
