/* A signal that comes while a blocking call goes to sleep must interrupt it.
 *
 * Usage: signal_sleep LOCAL_IP PORT ROUNDS MAX_DELAY_US
 *
 * A UDP socket bound to LOCAL_IP:PORT (offloaded under libvma) never
 * receives anything. For each call (epoll_wait, poll, blocking recv, and
 * a blocking recv on a socket made for that round) this
 * thread calls it ROUNDS times; another thread sends it SIGUSR2 (a handler
 * without SA_RESTART) a random 0..MAX_DELAY_US after each call starts, so
 * that over the rounds the signal falls on every point of the call's way
 * into the kernel sleep, the last user-space look included. Linux returns
 * -1/EINTR each time. A call still blocked 100 ms after its signal missed
 * it: the sender then sends a second one (so the test never hangs) and the
 * round counts as missed. With VMA_SELECT_POLL=0 and VMA_RX_POLL=0 the
 * calls go to sleep at once, which puts the window at a few microseconds.
 *
 * Prints a line per call with its misses (where the handler interrupted
 * the thread, for the first three). Exit 0 when each call returned
 * -1/EINTR and at most one round per call missed its signal (a handler
 * that runs in the first instructions of our interposed symbol, before it
 * reads the counts, is as one that runs in libc's wrapper before the system
 * call under Linux); a handler that ran in this program before the call
 * is not counted. Before the fix of 2026-11-29 the recv on a fresh socket
 * missed about one signal in seven (the first sleep made its eventfd
 * after the last look) and poll about one in a thousand; until 2026-11-30
 * the counts were read in the call's body, after the fd lookup (poll:
 * after the look over its 301 fds), and half the runs of this test had a
 * miss there (two, in one CI run). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ucontext.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled;
static pthread_t target;
static unsigned max_delay_us;
static int gen_started, gen_returned;   /* __atomic: round numbers */
static int quit;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* When the round's first handler ran (0: not yet): a miss whose handler ran
 * before the call started is not ours. */
int main(int argc, char **argv);
static volatile double first_handled_us;
static void *volatile first_handled_pc;   /* where that handler interrupted the thread */

static void on_signal(int sig, siginfo_t *info, void *context)
{
	(void)sig;
	(void)info;
	if (first_handled_us == 0) {
		first_handled_us = now_us();
#if defined(__x86_64__)
		first_handled_pc = (void *)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
#else
		(void)context;
#endif
	}
	handled++;
}

static bool pc_in_program(void *pc)
{
	Dl_info here, there;
	return pc && dladdr((void *)main, &here) && dladdr(pc, &there) && here.dli_fbase == there.dli_fbase;
}

static const char *pc_name(void *pc, char *buf, size_t size)
{
	Dl_info d;
	if (pc && dladdr(pc, &d))
		snprintf(buf, size, "%s+%#lx (%s)", d.dli_fname, (unsigned long)((char *)pc - (char *)d.dli_fbase),
			 d.dli_sname ? d.dli_sname : "?");
	else
		snprintf(buf, size, "%p", pc);
	return buf;
}

static unsigned missed_rounds;

static void *sender(void *arg)
{
	(void)arg;
	int seen = 0;
	unsigned seed = 12345;
	while (!__atomic_load_n(&quit, __ATOMIC_ACQUIRE)) {
		int g = __atomic_load_n(&gen_started, __ATOMIC_ACQUIRE);
		if (g == seen)
			continue;
		seen = g;
		double t0 = now_us(), delay = max_delay_us ? rand_r(&seed) % (max_delay_us + 1) : 0;
		while (now_us() - t0 < delay)
			;
		pthread_kill(target, SIGUSR2);
		double sent = now_us();
		while (__atomic_load_n(&gen_returned, __ATOMIC_ACQUIRE) != g) {
			if (now_us() - sent > 100000) {
				/* Missed: wake it so the test goes on. */
				__atomic_add_fetch(&missed_rounds, 1, __ATOMIC_RELAXED);
				pthread_kill(target, SIGUSR2);
				sent = now_us();
			}
			usleep(50);
		}
	}
	return NULL;
}

#define EXTRA_MAX 1000
static struct pollfd pfds[1 + EXTRA_MAX];
static int npfds = 1;

enum call_kind { CALL_EPOLL, CALL_POLL, CALL_RECV, CALL_RECV_FRESH };

static struct sockaddr_in fresh_addr;

/* A socket for one round, made before the round starts: the first
 * blocking call on a socket does more on its way to sleep (its wake
 * eventfd is made then). */
static int fresh_socket(void)
{
	int f = socket(AF_INET, SOCK_DGRAM, 0);
	int one = 1;
	setsockopt(f, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (f < 0 || bind(f, (struct sockaddr *)&fresh_addr, sizeof(fresh_addr)) != 0) {
		perror("fresh socket");
		exit(2);
	}
	return f;
}

static long do_call(enum call_kind k, int fd, int ep)
{
	char b[64];
	switch (k) {
	case CALL_EPOLL: {
		struct epoll_event out;
		return epoll_wait(ep, &out, 1, -1);
	}
	case CALL_POLL: {
		pfds[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
		return poll(pfds, (nfds_t)npfds, -1);
	}
	case CALL_RECV:
	case CALL_RECV_FRESH:
		return recv(fd, b, sizeof(b), 0);
	}
	return -2;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s LOCAL_IP PORT ROUNDS MAX_DELAY_US [EXTRA_SOCKETS]\n", argv[0]);
		return 2;
	}
	int rounds = atoi(argv[3]);
	max_delay_us = (unsigned)atoi(argv[4]);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;   /* no SA_RESTART: every call fails with EINTR */
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);

	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &a.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("socket/bind");
		return 2;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		perror("epoll");
		return 2;
	}
	/* More idle sockets in the set make its way to sleep longer than a
	 * signal's delivery, so that the signal can fall on its end. */
	int extra = argc == 6 ? atoi(argv[5]) : 0;
	if (extra > EXTRA_MAX)
		extra = EXTRA_MAX;
	for (int i = 0; i < extra; i++) {
		int x = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in xa = a;
		xa.sin_port = htons((uint16_t)(atoi(argv[2]) + 1 + i));
		struct epoll_event xev = { .events = EPOLLIN, .data.fd = x };
		if (x < 0 || bind(x, (struct sockaddr *)&xa, sizeof(xa)) != 0 || epoll_ctl(ep, EPOLL_CTL_ADD, x, &xev) != 0) {
			perror("extra socket");
			return 2;
		}
		pfds[1 + i] = (struct pollfd){ .fd = x, .events = POLLIN };
	}
	npfds = 1 + extra;
	target = pthread_self();
	pthread_t th;
	if (pthread_create(&th, NULL, sender, NULL) != 0)
		return 2;

	static const char *names[] = { "epoll_wait", "poll", "recv", "recv fresh" };
	int fail = 0, g = 0;
	fresh_addr = a;
	fresh_addr.sin_port = htons((uint16_t)(atoi(argv[2]) + 1 + EXTRA_MAX));
	for (int k = CALL_EPOLL; k <= CALL_RECV_FRESH; k++) {
		unsigned missed = 0, before_call = 0, wrong = 0;
		double worst = 0;
		for (int i = 0; i < rounds; i++) {
			int call_fd = k == CALL_RECV_FRESH ? fresh_socket() : fd;
			int h0 = handled;
			unsigned m0 = __atomic_load_n(&missed_rounds, __ATOMIC_RELAXED);
			first_handled_us = 0;
			first_handled_pc = NULL;
			g++;
			/* Before the sender may send: errno is libc's
			 * __errno_location, and a handler that ran there would
			 * not count as one in this program. */
			errno = 0;
			double t0 = now_us();
			__atomic_store_n(&gen_started, g, __ATOMIC_RELEASE);
			long rc = do_call((enum call_kind)k, call_fd, ep);
			int err = errno;
			double dt = now_us() - t0;
			__atomic_store_n(&gen_returned, g, __ATOMIC_RELEASE);
			/* The sender may still be sending: wait for the handler
			 * so its run does not fall into the next round. */
			while (handled == h0)
				;
			if (call_fd != fd)
				close(call_fd);
			if (__atomic_load_n(&missed_rounds, __ATOMIC_RELAXED) != m0) {
				/* A handler that ran in this program, before it
				 * called, is slept through under Linux too. */
				if (pc_in_program(first_handled_pc)) {
					before_call++;
				} else if (missed++ < 3) {
					char where[160];
					printf("%s round %d: slept through the signal handled %.1f us after the call "
					       "started, at %s\n",
					       names[k], i, first_handled_us - t0,
					       pc_name(first_handled_pc, where, sizeof(where)));
				}
			}
			if (rc != -1 || err != EINTR) {
				if (wrong++ < 3)
					printf("%s round %d: returned %ld, %s, after %.0f us\n", names[k], i, rc,
					       rc == -1 ? strerror(err) : "-", dt);
			}
			if (dt > worst)
				worst = dt;
		}
		printf("%-10s rounds %d, missed %u (and %u handled before the call), not -1/EINTR %u, slowest "
		       "return %.0f us\n",
		       names[k], rounds, missed, before_call, wrong, worst);
		/* One is allowed: a handler that ran in our entry's first
		 * instructions, before its first look, is as one that runs in
		 * libc's wrapper before the system call under Linux. */
		fail |= missed > 1 || wrong != 0;
	}
	__atomic_store_n(&quit, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail;
}
