/* Wait channels (docs/process_model.md, "Wait channels"): under the
 * default ring logic, the packets of a connection wake the thread that
 * waits for it, not another thread of the process.
 *
 * Usage: wait_chan LOCAL_IP PORT
 *
 * A listener on LOCAL_IP:PORT; the main thread accepts two connections
 * and hands the first to thread "quiet", the second to thread "busy"
 * (each adds its connection to an epoll set of its own and echoes what it
 * reads: the acceptor is not the waiter, so the connection must follow the
 * thread that waits for it). The client (tests/integration/wait_chan.sh)
 * sends one message on the quiet connection, then thousands of round trips
 * on the busy one, then a second message on the quiet one.
 *
 * quiet counts its voluntary context switches (its sleeps in epoll_wait)
 * between its two echoes, i.e. while only the busy connection had traffic,
 * and prints "quiet_wakeups N"; busy prints "busy_echoes N". A thread
 * that sleeps on the lane's one ring (no channels) is woken by the busy
 * connection's packets every time its set stops resting that ring (every
 * 2 ms at most): hundreds of wake-ups a second. On its own channel it
 * sleeps through them. Prints "ready" once listening; exit 0 when both
 * threads ended their connection cleanly, 1 otherwise, 2 on a set-up
 * error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct echoer {
	const char *name;
	int fd;
	long echoes;
	long wakeups_between;   /* quiet: voluntary switches between echoes 1 and 2 */
	long wakeups_all;       /* voluntary switches from the first echo to the end */
	int rc;
};

static long voluntary_switches(void)
{
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", (long)syscall(SYS_gettid));
	FILE *f = fopen(path, "r");
	long n = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

static void *echo_loop(void *arg)
{
	struct echoer *e = arg;
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = e->fd };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, e->fd, &ev) != 0) {
		e->rc = 2;
		return NULL;
	}
	long first_at = -1;
	char buf[4096];
	for (;;) {
		struct epoll_event got;
		int n = epoll_wait(ep, &got, 1, 30000);
		if (n <= 0) {
			fprintf(stderr, "%s: epoll_wait returned %d\n", e->name, n);
			e->rc = 1;
			break;
		}
		ssize_t r = recv(e->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r == 0)
			break;   /* the client's close */
		if (r < 0)
			continue;
		if (send(e->fd, buf, (size_t)r, MSG_NOSIGNAL) != r) {
			e->rc = 1;
			break;
		}
		e->echoes++;
		/* The counts are read after the echo: the switches of the
		 * echo's own send are not the other connection's doing. */
		if (e->echoes == 1)
			first_at = voluntary_switches();
		else if (e->echoes == 2 && first_at >= 0)
			e->wakeups_between = voluntary_switches() - first_at;
	}
	if (first_at >= 0)
		e->wakeups_all = voluntary_switches() - first_at;
	close(ep);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: wait_chan LOCAL_IP PORT\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &a.sin_addr);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 8) != 0) {
		perror("listen");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	struct echoer quiet = { .name = "quiet", .wakeups_between = -1 }, busy = { .name = "busy" };
	quiet.fd = accept(l, NULL, NULL);
	busy.fd = accept(l, NULL, NULL);
	if (quiet.fd < 0 || busy.fd < 0) {
		perror("accept");
		return 2;
	}
	pthread_t tq, tb;
	pthread_create(&tq, NULL, echo_loop, &quiet);
	pthread_create(&tb, NULL, echo_loop, &busy);
	pthread_join(tq, NULL);
	pthread_join(tb, NULL);
	printf("quiet_echoes %ld\nquiet_wakeups %ld\nbusy_echoes %ld\nbusy_wakeups %ld\n", quiet.echoes,
	       quiet.wakeups_between, busy.echoes, busy.wakeups_all);
	close(quiet.fd);
	close(busy.fd);
	close(l);
	return quiet.rc || busy.rc ? 1 : 0;
}
