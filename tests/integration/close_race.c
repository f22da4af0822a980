/* close() racing a blocked call on the same fd, under libvma
 * (tests/integration/close_race.sh; issue 12 item 7).
 *   close_race LOCAL_IP ROUNDS
 * Each round, a reader thread blocks in recv() on an offloaded UDP socket
 * (or accept() on an offloaded TCP listener). A signal whose handler waits
 * holds the reader inside the call while the main thread closes the fd and
 * then opens and closes SOCKETS_CHURN sockets, more than libvma's graveyard
 * of retired objects holds, so an object nothing pins would be freed (and
 * its memory reused by the churn's sockets) under the reader's feet. When
 * the handler returns, the call must end cleanly (-1 with EBADF, as libvma
 * documents for a socket closed under a blocked call) within a second.
 * Prints "ok ROUNDS" and exits 0, or a FAIL line and exits 1. Run it under
 * the ASan build too (asan_offload.sh): a use after free is a report. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SOCKETS_CHURN 1100

static sem_t in_handler, churned;
static volatile int reader_fd = -1, reader_kind;
static volatile long reader_rc;
static volatile int reader_errno, reader_done;

static void on_hold(int sig)
{
	(void)sig;
	int e = errno;
	sem_post(&in_handler);
	while (sem_wait(&churned) != 0)
		;
	errno = e;
}

static void *reader(void *arg)
{
	(void)arg;
	char b[64];
	long rc = reader_kind ? accept(reader_fd, NULL, NULL) : recv(reader_fd, b, sizeof(b), 0);
	reader_errno = errno;
	reader_rc = rc;
	__atomic_store_n(&reader_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int open_socket(int kind, const char *ip)
{
	int fd = socket(AF_INET, kind ? SOCK_STREAM : SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, ip, &a.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || (kind && listen(fd, 16) != 0)) {
		printf("FAIL: cannot open the %s socket: %s\n", kind ? "listening" : "UDP", strerror(errno));
		exit(1);
	}
	return fd;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s LOCAL_IP ROUNDS\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rounds = atoi(argv[2]);
	sem_init(&in_handler, 0, 0);
	sem_init(&churned, 0, 0);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_hold;
	sa.sa_flags = SA_RESTART;   /* the call goes on after the handler */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	for (int r = 0; r < rounds; r++) {
		int kind = r & 1;
		reader_kind = kind;
		reader_fd = open_socket(kind, argv[1]);
		__atomic_store_n(&reader_done, 0, __ATOMIC_RELEASE);
		pthread_t th;
		pthread_create(&th, NULL, reader, NULL);
		usleep(20000);   /* the reader is inside the call */
		pthread_kill(th, SIGUSR1);
		while (sem_wait(&in_handler) != 0)
			;
		close(reader_fd);
		for (int i = 0; i < SOCKETS_CHURN; i++)
			close(socket(AF_INET, SOCK_DGRAM, 0));
		sem_post(&churned);
		double end = now_s() + 1.0;
		while (!__atomic_load_n(&reader_done, __ATOMIC_ACQUIRE) && now_s() < end)
			usleep(1000);
		if (!__atomic_load_n(&reader_done, __ATOMIC_ACQUIRE)) {
			printf("FAIL: round %d: %s on a closed fd still blocked 1 s after the close\n", r,
			       kind ? "accept" : "recv");
			return 1;
		}
		pthread_join(th, NULL);
		if (reader_rc != -1 || reader_errno != EBADF) {
			printf("FAIL: round %d: %s on a closed fd gave %ld/%s, want -1/EBADF\n", r,
			       kind ? "accept" : "recv", reader_rc, strerror(reader_errno));
			return 1;
		}
	}
	printf("ok %d\n", rounds);
	return 0;
}
