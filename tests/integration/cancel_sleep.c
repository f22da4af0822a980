/* pthread_cancel() of a thread blocked in (or looping on) an offloaded call
 * must end that thread, as under Linux, and leave the process's sockets and
 * lanes working for the others (docs/architecture.md, "Thread
 * cancellation").
 *
 * Usage: cancel_sleep LOCAL_IP PORT ROUNDS idle|flood|watch|reap
 *
 * A UDP socket on LOCAL_IP:PORT, an epoll set holding it and a TCP listener
 * on the same port. Each round starts a thread in one call, cancels it
 * 0-3 ms later and joins it; a thread not ended 3 s after its cancel fails
 * the run. Then this thread must still get through a non-blocking recv
 * (MSG_PEEK) and an epoll_wait on the socket within 5 s (alarm): a lock
 * left held by the cancelled thread hangs them.
 *   idle   the calls block (nothing arrives): recv, recvfrom, epoll_wait,
 *          poll, select, accept. Prints "ready", accepts one connection,
 *          the same for a recv on it; then echoes 20 datagrams and 20
 *          messages of the client's (each awaited up to 6 s).
 *   flood  the client floods the UDP port: the thread loops on recv, on
 *          epoll_wait then recv, on poll then recv. Calls that find data
 *          at once never sleep; the cancellation must still act (libc acts
 *          on it in each of them).
 *   watch  two readers of one lane, on PORT and PORT+1, both asleep in
 *          recvfrom; the first to sleep (the lane's watcher, the other
 *          then sleeping passive) is cancelled; prints "ready"; the second
 *          then echoes 50 datagrams to PORT+1 (the client times them). A
 *          cancelled reader that still counted as the lane's watcher left
 *          the other sleeping on its socket alone, its datagrams waiting
 *          for the internal thread's pass (about 10 ms each).
 *   reap   ROUNDS times: a UDP socket on PORT+2, a thread asleep in recv
 *          on it (50 ms to get there), cancelled, joined, the socket
 *          closed; then 1100 sockets opened and closed push the closed
 *          ones out of the graveyard (1024 slots). A socket is destroyed
 *          only when no call pins it, and its destruction closes the
 *          eventfd its sleeper made: the process must have as many open
 *          fds as after the first round. A pin that the cancelled recv
 *          left behind keeps one eventfd per round open.
 * Exit 0 when every check held, 1 otherwise, 2 on a set-up error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum call { C_RECV, C_RECVFROM, C_EPOLL, C_POLL, C_SELECT, C_ACCEPT, C_TCP_RECV, C_FLOOD_RECV, C_FLOOD_EPOLL,
	    C_FLOOD_POLL };
static const char *const call_names[] = { "recv",	"recvfrom",	   "epoll_wait",      "poll",
					  "select",	"accept",	   "tcp recv",	      "flood recv",
					  "flood epoll_wait+recv", "flood poll+recv" };

static int udp_fd, listen_fd, conn_fd, ep_fd;
static enum call blocked_in;

static void *blocker(void *arg)
{
	(void)arg;
	char buf[64];
	struct epoll_event ev;
	struct pollfd p = { .fd = udp_fd, .events = POLLIN };
	fd_set rs;
	for (;;) {
		switch (blocked_in) {
		case C_RECV: case C_FLOOD_RECV: (void)recv(udp_fd, buf, sizeof(buf), 0); break;
		case C_RECVFROM: (void)recvfrom(udp_fd, buf, sizeof(buf), 0, NULL, NULL); break;
		case C_EPOLL: (void)epoll_wait(ep_fd, &ev, 1, -1); break;
		case C_POLL: (void)poll(&p, 1, -1); break;
		case C_SELECT:
			FD_ZERO(&rs);
			FD_SET(udp_fd, &rs);
			(void)select(udp_fd + 1, &rs, NULL, NULL, NULL);
			break;
		case C_ACCEPT: {
			int c = accept(listen_fd, NULL, NULL);
			if (c >= 0)
				close(c);
			break;
		}
		case C_TCP_RECV: (void)recv(conn_fd, buf, sizeof(buf), 0); break;
		case C_FLOOD_EPOLL:
			if (epoll_wait(ep_fd, &ev, 1, -1) > 0)
				(void)recv(udp_fd, buf, sizeof(buf), MSG_DONTWAIT);
			break;
		case C_FLOOD_POLL:
			if (poll(&p, 1, -1) > 0)
				(void)recv(udp_fd, buf, sizeof(buf), MSG_DONTWAIT);
			break;
		}
	}
	return NULL;
}

static bool joined_within(pthread_t t, int seconds)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += seconds;
	return pthread_timedjoin_np(t, NULL, &dl) == 0;
}

static int cancel_rounds(enum call c, int rounds)
{
	blocked_in = c;
	for (int r = 0; r < rounds; r++) {
		pthread_t t;
		if (pthread_create(&t, NULL, blocker, NULL) != 0)
			return 2;
		usleep((useconds_t)(rand() % 3000));
		pthread_cancel(t);
		if (!joined_within(t, 3)) {
			printf("FAIL %s: round %d: the cancelled thread still runs 3 s later\n", call_names[c], r);
			fflush(stdout);
			return 1;
		}
	}
	alarm(5);   /* SIGALRM's default action ends a run whose locks were left held */
	char buf[64];
	(void)recv(udp_fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_PEEK);   /* a datagram of the echoes stays */
	struct epoll_event ev;
	(void)epoll_wait(ep_fd, &ev, 1, 0);
	alarm(0);
	printf("ok %s: %d rounds\n", call_names[c], rounds);
	fflush(stdout);
	return 0;
}

static int echo_udp(int fd, int count)
{
	char buf[64];
	for (int i = 0; i < count; i++) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 6000) != 1) {
			printf("FAIL udp echo %d: nothing in 6 s\n", i);
			return 1;
		}
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		if (n < 0 || sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len) != n) {
			printf("FAIL udp echo %d: %s\n", i, strerror(errno));
			return 1;
		}
	}
	return 0;
}

static int echo_tcp(int fd, int count)
{
	char buf[64];
	for (int i = 0; i < count; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 6000) != 1) {
			printf("FAIL tcp echo %d: nothing in 6 s\n", i);
			return 1;
		}
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0 || send(fd, buf, (size_t)n, 0) != n) {
			printf("FAIL tcp echo %d: %s\n", i, n == 0 ? "peer closed" : strerror(errno));
			return 1;
		}
	}
	return 0;
}

/* watch: the second reader, in blocking recvfrom on its own socket. */
static int watch_fd;
static void *second_reader(void *arg)
{
	(void)arg;
	intptr_t bad = 0;
	char buf[64];
	for (int i = 0; i < 50 && !bad; i++) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(watch_fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		bad = n < 0 || sendto(watch_fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len) != n;
	}
	return (void *)bad;
}

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Retirements enough to evict every socket closed before (the graveyard
 * holds SOCK_OBJ_GRAVE_SLOTS = 1024). */
static void flush_graveyard(void)
{
	for (int i = 0; i < 1100; i++) {
		int fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd >= 0)
			close(fd);
	}
}

static int bound_udp(const char *ip, int port);

static int reap_round(const char *ip, int port)
{
	udp_fd = bound_udp(ip, port);
	blocked_in = C_RECV;
	pthread_t t;
	if (pthread_create(&t, NULL, blocker, NULL) != 0)
		return 2;
	usleep(50000);
	pthread_cancel(t);
	if (!joined_within(t, 3)) {
		printf("FAIL reap: the cancelled thread still runs 3 s later\n");
		return 1;
	}
	close(udp_fd);
	return 0;
}

static int reap_rounds(const char *ip, int port, int rounds)
{
	int bad = reap_round(ip, port);
	flush_graveyard();
	int base = open_fds();
	for (int r = 1; r < rounds && !bad; r++)
		bad = reap_round(ip, port);
	flush_graveyard();
	int after = open_fds();
	printf("%s reap: %d rounds, open fds %d after the first, %d after the last\n",
	       !bad && after == base ? "ok" : "FAIL", rounds, base, after);
	return bad ? bad : after != base;
}

static int bound_udp(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("udp bind");
		exit(2);
	}
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: cancel_sleep LOCAL_IP PORT ROUNDS idle|flood|watch|reap\n");
		return 2;
	}
	const char *ip = argv[1], *phase = argv[4];
	int port = atoi(argv[2]), rounds = atoi(argv[3]);
	srand((unsigned)getpid());
	udp_fd = bound_udp(ip, port);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(listen_fd, 16) != 0) {
		perror("tcp listen");
		return 2;
	}
	ep_fd = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = udp_fd };
	epoll_ctl(ep_fd, EPOLL_CTL_ADD, udp_fd, &ev);
	int bad = 0;
	if (strcmp(phase, "idle") == 0) {
		for (enum call c = C_RECV; c <= C_ACCEPT && !bad; c++)
			bad |= cancel_rounds(c, rounds);
		printf("ready\n");
		fflush(stdout);
		conn_fd = accept(listen_fd, NULL, NULL);
		if (conn_fd < 0) {
			perror("accept");
			return 2;
		}
		bad = bad || cancel_rounds(C_TCP_RECV, rounds) || echo_udp(udp_fd, 20) || echo_tcp(conn_fd, 20);
	} else if (strcmp(phase, "flood") == 0) {
		printf("ready\n");
		fflush(stdout);
		sleep(1);
		for (enum call c = C_FLOOD_RECV; c <= C_FLOOD_POLL && !bad; c++)
			bad |= cancel_rounds(c, rounds);
	} else if (strcmp(phase, "watch") == 0) {
		watch_fd = bound_udp(ip, port + 1);
		pthread_t second, first;
		blocked_in = C_RECVFROM;
		/* The first to sleep watches the lane; the second, asleep while
		 * it does, sleeps on its socket alone (passive). */
		pthread_create(&first, NULL, blocker, NULL);
		usleep(100000);
		pthread_create(&second, NULL, second_reader, NULL);
		usleep(100000);
		pthread_cancel(first);
		if (!joined_within(first, 3)) {
			printf("FAIL watch: the cancelled reader still runs 3 s later\n");
			return 1;
		}
		printf("ready\n");
		fflush(stdout);
		void *r = NULL;
		pthread_join(second, &r);
		bad = r != NULL;
	} else if (strcmp(phase, "reap") == 0) {
		bad = reap_rounds(ip, port + 2, rounds);
		if (bad == 2)
			return 2;
		printf("ready\n");
		fflush(stdout);
	} else {
		fprintf(stderr, "cancel_sleep: unknown phase %s\n", phase);
		return 2;
	}
	printf("%s\n", bad ? "FAIL" : "done");
	return bad ? 1 : 0;
}
