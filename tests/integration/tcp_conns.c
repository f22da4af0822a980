/* Many concurrent TCP connections on one epoll server, for tcp_conns.sh.
 *
 *   tcp_conns server ADDR PORT N [-e] [-r READYFILE]   (-e: edge-triggered)
 *   tcp_conns client ADDR PORT N
 *
 * The client opens N connections at once (non-blocking connect), sends a
 * distinct newline-terminated message on each, reads the echo and compares it,
 * then closes the even-numbered ones gracefully and the odd-numbered ones with
 * SO_LINGER {1, 0} (RST). It prints the setup rate and exits 0 only if every
 * connection and echo was right.
 * The server accepts in a non-blocking loop, echoes, and counts how each
 * connection ended (EOF or ECONNRESET). It exits when N connections have
 * ended, or after 30 s without progress, printing
 *   server accepted A echoed E eof F reset R other O
 * and exits 0 only for accepted = echoed = N, eof = reset = N/2, other = 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAX 256
#define IDLE_LIMIT_SEC 30

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void raise_fd_limit(int n)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
		rl.rlim_cur = (rlim_t)n + 64;
		if (rl.rlim_max < rl.rlim_cur)
			rl.rlim_max = rl.rlim_cur;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			perror("tcp_conns: setrlimit(RLIMIT_NOFILE)");
	}
}

static struct sockaddr_in parse_addr(const char *addr, const char *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "tcp_conns: bad address %s\n", addr);
		exit(2);
	}
	return sa;
}

static void set_nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* ---------------- server ---------------- */

struct server_conn {
	int fd;
	char pending[MSG_MAX]; /* received, not yet echoed */
	size_t pending_len;
	int saw_newline_echoed;
};

struct server_counts {
	int accepted, echoed, eof, reset, other;
};

static void server_close(int ep, struct server_conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

/* Echoes what is pending; returns 0, or -1 with errno on a hard error. */
static int server_flush(struct server_conn *c, struct server_counts *cnt)
{
	while (c->pending_len > 0) {
		ssize_t w = send(c->fd, c->pending, c->pending_len, MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN ? 0 : -1;
		if (!c->saw_newline_echoed && memchr(c->pending, '\n', (size_t)w)) {
			c->saw_newline_echoed = 1;
			cnt->echoed++;
		}
		memmove(c->pending, c->pending + w, c->pending_len - (size_t)w);
		c->pending_len -= (size_t)w;
	}
	return 0;
}

/* Reads until EAGAIN (required for edge-triggered); returns 1 when the
 * connection ended and was counted. */
static int server_service(struct server_conn *c, struct server_counts *cnt)
{
	for (;;) {
		if (c->pending_len == sizeof(c->pending))
			return 0; /* the peer reads its echo before sending more */
		ssize_t r = recv(c->fd, c->pending + c->pending_len, sizeof(c->pending) - c->pending_len, 0);
		if (r > 0) {
			c->pending_len += (size_t)r;
			if (server_flush(c, cnt) == 0)
				continue;
			r = -1;
		}
		if (r == 0) {
			cnt->eof++;
			return 1;
		}
		if (errno == EAGAIN)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == ECONNRESET) {
			cnt->reset++;
		} else {
			fprintf(stderr, "tcp_conns: server recv/send: %s\n", strerror(errno));
			cnt->other++;
		}
		return 1;
	}
}

static int run_server(struct sockaddr_in sa, int n, int edge, const char *ready_file)
{
	raise_fd_limit(n);
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 4096)) {
		perror("tcp_conns: listen socket");
		return 1;
	}
	set_nonblocking(ls);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev)) {
		perror("tcp_conns: epoll");
		return 1;
	}
	if (ready_file) {
		FILE *f = fopen(ready_file, "w");
		if (f)
			fclose(f);
	}
	struct server_counts cnt = { 0 };
	double last_progress = now_sec(), first_accept = 0, last_accept = 0;
	struct epoll_event events[256];
	while (cnt.eof + cnt.reset + cnt.other < n) {
		int k = epoll_wait(ep, events, 256, 1000);
		if (k < 0 && errno != EINTR) {
			perror("tcp_conns: epoll_wait");
			return 1;
		}
		if (k > 0)
			last_progress = now_sec();
		else if (now_sec() - last_progress > IDLE_LIMIT_SEC) {
			fprintf(stderr, "tcp_conns: server: no progress for %d s\n", IDLE_LIMIT_SEC);
			break;
		}
		for (int i = 0; i < k; i++) {
			struct server_conn *c = events[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					c = calloc(1, sizeof(*c));
					c->fd = fd;
					struct epoll_event cev = { .events = EPOLLIN | EPOLLRDHUP | (edge ? EPOLLET : 0),
								   .data.ptr = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev)) {
						perror("tcp_conns: epoll_ctl ADD");
						return 1;
					}
					cnt.accepted++;
					last_accept = now_sec();
					if (cnt.accepted == 1)
						first_accept = last_accept;
				}
				if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) {
					perror("tcp_conns: accept4");
					cnt.other++;
				}
				continue;
			}
			if (server_service(c, &cnt))
				server_close(ep, c);
		}
	}
	printf("server accepted %d echoed %d eof %d reset %d other %d accept_span %.3f\n", cnt.accepted,
	       cnt.echoed, cnt.eof, cnt.reset, cnt.other, last_accept - first_accept);
	fflush(stdout);
	int ok = cnt.accepted == n && cnt.echoed == n && cnt.eof == n / 2 && cnt.reset == n - n / 2 &&
		 cnt.other == 0;
	return ok ? 0 : 1;
}

/* ---------------- client ---------------- */

struct client_conn {
	int fd;
	int index;
	int connected;
	char msg[MSG_MAX];
	size_t msg_len;
	char echo[MSG_MAX];
	size_t echo_len;
};

static void make_message(struct client_conn *c)
{
	/* Lengths 30..229 so echoes of different connections never look alike. */
	int len = snprintf(c->msg, sizeof(c->msg), "conn %04d token %08x ", c->index,
			   (unsigned)(c->index * 2654435761u));
	int target = 30 + (c->index * 37) % 200;
	for (; len < target - 1; len++)
		c->msg[len] = (char)('a' + (c->index + len) % 26);
	c->msg[len++] = '\n';
	c->msg_len = (size_t)len;
}

/* Waits (epoll) until every connection is past 'stage'; returns failures. */
static int client_wait(int ep, struct client_conn *conns, int n, int want_echo)
{
	int remaining = 0, failures = 0;
	for (int i = 0; i < n; i++) {
		struct epoll_event ev = { .events = want_echo ? EPOLLIN : EPOLLOUT, .data.ptr = &conns[i] };
		if (conns[i].fd < 0)
			continue;
		if (epoll_ctl(ep, EPOLL_CTL_MOD, conns[i].fd, &ev)) {
			perror("tcp_conns: epoll_ctl MOD");
			return n;
		}
		remaining++;
	}
	double last_progress = now_sec();
	struct epoll_event events[256];
	while (remaining > 0) {
		int k = epoll_wait(ep, events, 256, 1000);
		if (k > 0)
			last_progress = now_sec();
		else if (now_sec() - last_progress > IDLE_LIMIT_SEC) {
			fprintf(stderr, "tcp_conns: client: %d connections stuck %s\n", remaining,
				want_echo ? "waiting for the echo" : "connecting");
			return failures + remaining;
		}
		for (int i = 0; i < k; i++) {
			struct client_conn *c = events[i].data.ptr;
			struct epoll_event none = { .events = 0, .data.ptr = c };
			if (!want_echo) {
				int err = 0;
				socklen_t len = sizeof(err);
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
				if (c->connected)
					continue;
				c->connected = 1;
				remaining--;
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &none);
				if (err) {
					fprintf(stderr, "tcp_conns: connect #%d: %s\n", c->index, strerror(err));
					failures++;
				}
				continue;
			}
			ssize_t r = recv(c->fd, c->echo + c->echo_len, sizeof(c->echo) - c->echo_len, 0);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r > 0)
				c->echo_len += (size_t)r;
			if (r > 0 && c->echo_len < c->msg_len)
				continue;
			remaining--;
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &none);
			if (r <= 0 || c->echo_len != c->msg_len || memcmp(c->echo, c->msg, c->msg_len)) {
				fprintf(stderr, "tcp_conns: echo #%d wrong (%s, %zu of %zu bytes)\n", c->index,
					r < 0 ? strerror(errno) : r == 0 ? "EOF" : "content", c->echo_len, c->msg_len);
				failures++;
			}
		}
	}
	return failures;
}

static int run_client(struct sockaddr_in sa, int n)
{
	raise_fd_limit(n);
	struct client_conn *conns = calloc((size_t)n, sizeof(*conns));
	int ep = epoll_create1(0), failures = 0;
	double t0 = now_sec();
	for (int i = 0; i < n; i++) {
		struct client_conn *c = &conns[i];
		c->index = i;
		make_message(c);
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (c->fd < 0) {
			fprintf(stderr, "tcp_conns: socket #%d: %s\n", i, strerror(errno));
			return 1;
		}
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) && errno != EINPROGRESS) {
			fprintf(stderr, "tcp_conns: connect #%d: %s\n", i, strerror(errno));
			failures++;
		}
		struct epoll_event ev = { .events = 0, .data.ptr = c };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev)) {
			perror("tcp_conns: epoll_ctl ADD");
			return 1;
		}
	}
	failures += client_wait(ep, conns, n, 0);
	double setup = now_sec() - t0;
	printf("client connected %d in %.3f s: %.0f connections/s\n", n, setup, setup > 0 ? n / setup : 0.0);
	if (failures) {
		printf("client FAILED: %d connections did not come up\n", failures);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		if (send(conns[i].fd, conns[i].msg, conns[i].msg_len, MSG_NOSIGNAL) != (ssize_t)conns[i].msg_len) {
			fprintf(stderr, "tcp_conns: send #%d: %s\n", i, strerror(errno));
			failures++;
		}
	}
	failures += client_wait(ep, conns, n, 1);
	int resets = 0;
	for (int i = 0; i < n; i++) {
		if (i % 2) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };
			if (setsockopt(conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg))) {
				perror("tcp_conns: SO_LINGER");
				failures++;
			}
			resets++;
		}
		if (close(conns[i].fd)) {
			fprintf(stderr, "tcp_conns: close #%d: %s\n", i, strerror(errno));
			failures++;
		}
	}
	printf("client echoed %d closed %d (fin %d, linger-0 rst %d) in %.3f s total, failures %d\n", n, n,
	       n - resets, resets, now_sec() - t0, failures);
	fflush(stdout);
	/* Leave time for the graceful closes to complete before exit. */
	sleep(1);
	free(conns);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: tcp_conns server ADDR PORT N [-e] [-r READYFILE] | client ADDR PORT N\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_in sa = parse_addr(argv[2], argv[3]);
	int n = atoi(argv[4]);
	if (n < 2 || n > 60000) {
		fprintf(stderr, "tcp_conns: N must be 2..60000\n");
		return 2;
	}
	if (strcmp(argv[1], "client") == 0)
		return run_client(sa, n);
	int edge = 0;
	const char *ready_file = NULL;
	for (int i = 5; i < argc; i++) {
		if (strcmp(argv[i], "-e") == 0)
			edge = 1;
		else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
			ready_file = argv[++i];
		else
			return 2;
	}
	return run_server(sa, n, edge, ready_file);
}
