/* Load generator for mp_server (mp_procs.sh).
 *
 *   mp_client --server ADDR --port P [--conns C] [--requests N | --seconds S]
 *             [--size B] [--udp] [--reconnect] [--connect-retries K]
 *             [--timeout-ms T]
 *
 * C threads, one connection each (default 8), each doing N request/echo
 * round trips (default 100), or as many as fit in S seconds. A request is
 * B bytes (default 64, at least 16): sequence number (8 bytes), connection
 * index (4), a per-run nonce (4), then a pattern derived from all three, so
 * an echo that belongs to another connection, another request or another
 * run is told apart from a corrupted one. Every echoed byte is compared.
 *
 * --reconnect  every request on a new connection (connect, send, receive,
 *              close): exercises how accepts spread over workers and
 *              fork-per-connection servers.
 * --udp        each "connection" is a UDP socket; a reply not back within
 *              2 s is a failed request (no retry); a late reply to an
 *              earlier request is skipped.
 * --connect-retries K (0..3, default 0)
 *              a TCP connect refused, reset or not answered within 3 s is
 *              tried again up to K times (100 ms apart). Only meant for the
 *              moment a worker of a prefork server has just been killed:
 *              the count of retries is printed, so a test can bound it.
 * --timeout-ms T  reply timeout (default 5000 for TCP, 2000 for UDP).
 *
 * Output: one line
 *   ok|error requests R failed F conns C rate X req/s retries K
 * (R echoed intact, F failed or never run, C connections established,
 * K connect retries), exit 0 only if every request of every connection was
 * echoed intact, 1 otherwise, 2 on bad usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR_SIZE 16
#define MAX_SIZE 65507 /* largest UDP payload; TCP uses the same bound */
#define MAX_CONNS 4096
#define CONNECT_TIMEOUT_MS 3000
#define MAX_ERRORS_SHOWN 20

static struct {
	struct sockaddr_in server;
	int conns;
	long requests;
	double seconds;
	size_t size;
	int udp, reconnect, connect_retries, timeout_ms;
} opt = { .conns = 8, .requests = 100, .size = 64 };

static uint32_t nonce;
static volatile sig_atomic_t stop_flag;
static double run_deadline;
static int errors_shown;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

struct conn_state {
	pthread_t tid;
	uint32_t idx;
	long ok, failed, connected, retries;
	unsigned char *tx, *rx;
};

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Only the first errors are printed: one broken server would otherwise
 * bury the summary under thousands of identical lines. */
static void err(struct conn_state *c, uint64_t seq, const char *fmt, ...)
{
	pthread_mutex_lock(&err_lock);
	if (errors_shown++ < MAX_ERRORS_SHOWN) {
		char buf[256];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(buf, sizeof(buf), fmt, ap);
		va_end(ap);
		fprintf(stderr, "mp_client: conn %u seq %llu: %s\n", c->idx, (unsigned long long)seq, buf);
	} else if (errors_shown == MAX_ERRORS_SHOWN + 1) {
		fprintf(stderr, "mp_client: further errors not shown\n");
	}
	pthread_mutex_unlock(&err_lock);
}

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int keep_going(struct conn_state *c, long seq)
{
	if (stop_flag)
		return 0;
	(void)c;
	if (opt.seconds > 0)
		return now_sec() < run_deadline;
	return seq < opt.requests;
}

static void fill(unsigned char *buf, uint32_t idx, uint64_t seq)
{
	memcpy(buf, &seq, 8);
	memcpy(buf + 8, &idx, 4);
	memcpy(buf + 12, &nonce, 4);
	uint32_t x = (uint32_t)seq * 2654435761u ^ idx * 40503u ^ nonce;
	for (size_t i = HDR_SIZE; i < opt.size; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 16);
	}
}

/* 0 if the echo is what was sent; else says how it differs. */
static int verify(struct conn_state *c, uint64_t seq)
{
	if (!memcmp(c->tx, c->rx, opt.size))
		return 0;
	uint64_t rseq;
	uint32_t ridx, rnonce;
	memcpy(&rseq, c->rx, 8);
	memcpy(&ridx, c->rx + 8, 4);
	memcpy(&rnonce, c->rx + 12, 4);
	if (ridx != c->idx || rseq != seq || rnonce != nonce) {
		err(c, seq, "echo carries conn %u seq %llu nonce %08x (sent nonce %08x): mixed up", ridx,
		    (unsigned long long)rseq, rnonce, nonce);
	} else {
		size_t i = HDR_SIZE;
		while (c->tx[i] == c->rx[i])
			i++;
		err(c, seq, "echo differs at byte %zu of %zu", i, opt.size);
	}
	return -1;
}

/* Waits for fd to be ready for `events` until `until`; 1 ready, 0 timeout. */
static int wait_fd(int fd, short events, double until)
{
	for (;;) {
		int left = (int)((until - now_sec()) * 1000);
		if (left <= 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return 0;
		if (stop_flag)
			return 0;
	}
}

/* One connect attempt with a timeout; returns the blocking fd or -1. */
static int connect_once(struct conn_state *c, uint64_t seq, int last)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err(c, seq, "socket: %s", strerror(errno));
		return -1;
	}
	int e = 0;
	if (connect(fd, (struct sockaddr *)&opt.server, sizeof(opt.server)) && errno != EINPROGRESS) {
		e = errno;
	} else if (!wait_fd(fd, POLLOUT, now_sec() + CONNECT_TIMEOUT_MS / 1000.0)) {
		e = ETIMEDOUT;
	} else {
		socklen_t l = sizeof(e);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
	}
	if (e) {
		if (last)
			err(c, seq, "connect: %s", strerror(e));
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int connect_retry(struct conn_state *c, uint64_t seq)
{
	for (int attempt = 0;; attempt++) {
		int last = attempt >= opt.connect_retries || stop_flag;
		int fd = connect_once(c, seq, last);
		if (fd >= 0) {
			c->connected++;
			return fd;
		}
		if (last)
			return -1;
		c->retries++;
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Sends the request and reads the whole echo before the reply deadline;
 * 0 on success, -1 (reported) on error or timeout. */
static int tcp_round_trip(struct conn_state *c, int fd, uint64_t seq)
{
	double until = now_sec() + opt.timeout_ms / 1000.0;
	size_t off = 0;
	while (off < opt.size) {
		if (!wait_fd(fd, POLLOUT, until)) {
			err(c, seq, "send timed out");
			return -1;
		}
		ssize_t w = send(fd, c->tx + off, opt.size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (w < 0) {
			err(c, seq, "send: %s", strerror(errno));
			return -1;
		}
		off += (size_t)w;
	}
	off = 0;
	while (off < opt.size) {
		if (!wait_fd(fd, POLLIN, until)) {
			err(c, seq, "no echo within %d ms (%zu of %zu bytes)", opt.timeout_ms, off, opt.size);
			return -1;
		}
		ssize_t r = recv(fd, c->rx + off, opt.size - off, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0) {
			err(c, seq, "recv: %s (%zu of %zu bytes)", r ? strerror(errno) : "EOF", off, opt.size);
			return -1;
		}
		off += (size_t)r;
	}
	return verify(c, seq);
}

static void run_tcp(struct conn_state *c)
{
	long seq = 0;
	if (opt.reconnect) {
		for (; keep_going(c, seq); seq++) {
			fill(c->tx, c->idx, (uint64_t)seq);
			int fd = connect_retry(c, (uint64_t)seq);
			if (fd < 0) {
				c->failed++;
				continue;
			}
			if (tcp_round_trip(c, fd, (uint64_t)seq))
				c->failed++;
			else
				c->ok++;
			close(fd);
		}
		return;
	}
	int fd = connect_retry(c, 0);
	if (fd < 0) {
		c->failed++; /* the rest are counted as never run */
		return;
	}
	for (; keep_going(c, seq); seq++) {
		fill(c->tx, c->idx, (uint64_t)seq);
		if (tcp_round_trip(c, fd, (uint64_t)seq) == 0) {
			c->ok++;
			continue;
		}
		c->failed++;
		/* A timed-out or broken stream is out of step: stop this
		 * connection; its remaining requests count as not run. */
		break;
	}
	close(fd);
}

/* One UDP request: send, then wait up to the timeout for its reply,
 * skipping late replies to earlier requests. */
static int udp_round_trip(struct conn_state *c, int fd, uint64_t seq)
{
	if (sendto(fd, c->tx, opt.size, 0, (struct sockaddr *)&opt.server, sizeof(opt.server)) !=
	    (ssize_t)opt.size) {
		err(c, seq, "sendto: %s", strerror(errno));
		return -1;
	}
	double until = now_sec() + opt.timeout_ms / 1000.0;
	for (;;) {
		if (!wait_fd(fd, POLLIN, until)) {
			err(c, seq, "no UDP reply within %d ms", opt.timeout_ms);
			return -1;
		}
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t r = recvfrom(fd, c->rx, opt.size, MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from, &fl);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r < 0) {
			err(c, seq, "recvfrom: %s", strerror(errno));
			return -1;
		}
		if (from.sin_addr.s_addr != opt.server.sin_addr.s_addr || from.sin_port != opt.server.sin_port) {
			err(c, seq, "reply from %s:%d, not the server", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
			return -1;
		}
		uint64_t rseq;
		uint32_t ridx, rnonce;
		memcpy(&rseq, c->rx, 8);
		memcpy(&ridx, c->rx + 8, 4);
		memcpy(&rnonce, c->rx + 12, 4);
		if (r == (ssize_t)opt.size && ridx == c->idx && rnonce == nonce && rseq < seq)
			continue; /* the reply to a request already counted failed */
		if (r != (ssize_t)opt.size) {
			err(c, seq, "reply of %zd bytes, sent %zu", r, opt.size);
			return -1;
		}
		return verify(c, seq);
	}
}

static int udp_socket(struct conn_state *c, uint64_t seq)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		err(c, seq, "socket: %s", strerror(errno));
	else
		c->connected++;
	return fd;
}

static void run_udp(struct conn_state *c)
{
	int fd = opt.reconnect ? -1 : udp_socket(c, 0);
	if (!opt.reconnect && fd < 0) {
		c->failed++;
		return;
	}
	for (long seq = 0; keep_going(c, seq); seq++) {
		if (opt.reconnect && (fd = udp_socket(c, (uint64_t)seq)) < 0) {
			c->failed++;
			continue;
		}
		fill(c->tx, c->idx, (uint64_t)seq);
		if (udp_round_trip(c, fd, (uint64_t)seq))
			c->failed++;
		else
			c->ok++;
		if (opt.reconnect)
			close(fd);
	}
	if (!opt.reconnect)
		close(fd);
}

static void *conn_main(void *p)
{
	struct conn_state *c = p;
	if (opt.udp)
		run_udp(c);
	else
		run_tcp(c);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: mp_client --server ADDR --port P [--conns C] [--requests N | --seconds S]\n"
			"                 [--size B] [--udp] [--reconnect] [--connect-retries 0..3] [--timeout-ms T]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "server", required_argument, NULL, 'a' },
		{ "port", required_argument, NULL, 'p' },
		{ "conns", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 't' },
		{ "size", required_argument, NULL, 's' },
		{ "udp", no_argument, NULL, 'u' },
		{ "reconnect", no_argument, NULL, 'r' },
		{ "connect-retries", required_argument, NULL, 'R' },
		{ "timeout-ms", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *server = NULL;
	int port = 0, ch;
	while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (ch) {
		case 'a': server = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'c': opt.conns = atoi(optarg); break;
		case 'n': opt.requests = atol(optarg); break;
		case 't': opt.seconds = atof(optarg); break;
		case 's': opt.size = (size_t)atol(optarg); break;
		case 'u': opt.udp = 1; break;
		case 'r': opt.reconnect = 1; break;
		case 'R': opt.connect_retries = atoi(optarg); break;
		case 'T': opt.timeout_ms = atoi(optarg); break;
		default: usage();
		}
	}
	if (optind != argc || !server || port <= 0 || port > 65535 || opt.conns < 1 || opt.conns > MAX_CONNS ||
	    opt.requests < 1 || opt.seconds < 0 || opt.size < HDR_SIZE || opt.size > MAX_SIZE ||
	    opt.connect_retries < 0 || opt.connect_retries > 3 || opt.timeout_ms < 0)
		usage();
	if (!opt.timeout_ms)
		opt.timeout_ms = opt.udp ? 2000 : 5000;
	opt.server.sin_family = AF_INET;
	opt.server.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, server, &opt.server.sin_addr) != 1) {
		fprintf(stderr, "mp_client: bad --server address %s\n", server);
		return 2;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	nonce = (uint32_t)getpid() * 2246822519u ^ (uint32_t)ts.tv_nsec;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct conn_state *cs = calloc((size_t)opt.conns, sizeof(*cs));
	if (!cs) {
		perror("mp_client: calloc");
		return 1;
	}
	double start = now_sec();
	run_deadline = start + opt.seconds;
	int started = 0;
	for (int i = 0; i < opt.conns; i++) {
		cs[i].idx = (uint32_t)i;
		cs[i].tx = malloc(opt.size);
		cs[i].rx = malloc(opt.size);
		/* Small stacks: thousands of connection threads stay cheap. */
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 256 * 1024);
		int e = (!cs[i].tx || !cs[i].rx) ? ENOMEM : pthread_create(&cs[i].tid, &attr, conn_main, &cs[i]);
		pthread_attr_destroy(&attr);
		if (e) {
			fprintf(stderr, "mp_client: starting connection %d: %s\n", i, strerror(e));
			break;
		}
		started++;
	}
	long ok = 0, failed = 0, connected = 0, retries = 0;
	for (int i = 0; i < started; i++) {
		pthread_join(cs[i].tid, NULL);
		ok += cs[i].ok;
		failed += cs[i].failed;
		connected += cs[i].connected;
		retries += cs[i].retries;
	}
	double elapsed = now_sec() - start;
	/* In a counted run, requests that never ran (a connection that broke,
	 * a thread that never started, a stop signal) are failures too. */
	if (opt.seconds <= 0) {
		long expected = (long)opt.conns * opt.requests;
		if (ok + failed < expected)
			failed = expected - ok;
	}
	int pass = failed == 0 && ok > 0 && !stop_flag;
	printf("%s requests %ld failed %ld conns %ld rate %.0f req/s retries %ld\n", pass ? "ok" : "error", ok,
	       failed, connected, elapsed > 0 ? ok / elapsed : 0.0, retries);
	for (int i = 0; i < opt.conns; i++) {
		free(cs[i].tx);
		free(cs[i].rx);
	}
	free(cs);
	return pass ? 0 : 1;
}
