/* TCP socket semantics, run the same way with and without libvma so the
 * kernel is the reference (tests/integration/tcp_semantics.sh).
 *   tcp_semantics peer                      control server (UDP 9400), listener 9500
 *   tcp_semantics test PEER_IP LOCAL_IP     the checks, against the peer
 * Every connection check runs twice: "client" (we connect to the peer's
 * listener) and "server" (the peer connects to our listener on 9600).
 * The peer obeys "SEQ VERB KEY ARGS" requests and answers "SEQ OK ..." (or
 * "SEQ ERR errno"). KEY names a connection by its non-listener port: our
 * local port when we are the client, the peer's local port when it is. VERBs
 * marked async answer first and then act, so we can read meanwhile.
 * Payload byte at stream offset i is i % 251 (every transfer restarts at 0);
 * RECV answers with the FNV-1a hash of what it read.
 * The script drops SYNs to 9501 in the peer namespace (connect timeout);
 * SILENT KEY 1 makes the peer namespace drop that connection both ways. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../../src/vma/sock/sock_tcp_info.h"   /* the kernel's struct tcp_info, newer than glibc's */
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>

#define CTL_PORT 9400
#define PEER_PORT 9500
#define SILENT_PORT 9501
#define CLOSED_PORT 9599
#define TEST_PORT 9600

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static void fill_pattern(unsigned char *p, size_t n, size_t offset)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((offset + i) % 251);
}

static int is_pattern(const unsigned char *p, size_t n, size_t offset)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)((offset + i) % 251))
			return 0;
	return 1;
}

static uint32_t fnv(uint32_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static uint32_t pattern_hash(size_t n)
{
	unsigned char b[4096];
	uint32_t h = 2166136261u;
	for (size_t off = 0; off < n; off += sizeof(b)) {
		size_t k = n - off < sizeof(b) ? n - off : sizeof(b);
		fill_pattern(b, k, off);
		h = fnv(h, b, k);
	}
	return h;
}

static int port_of(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&a, &l) : getsockname(fd, (struct sockaddr *)&a, &l);
	return rc == 0 ? ntohs(a.sin_port) : -1;
}

static void set_rcvtimeo(int fd, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* ================================ peer ================================ */

struct peer_conn {
	int fd;
	int key;
};
static struct peer_conn conns[512];
static int nconns;
static int peer_listen_fd;

static void peer_accept_pending(void)
{
	for (;;) {
		struct sockaddr_in a;
		socklen_t l = sizeof(a);
		int fd = accept(peer_listen_fd, (struct sockaddr *)&a, &l);
		if (fd < 0)
			return;
		if (nconns == (int)(sizeof(conns) / sizeof(conns[0]))) {
			close(fd);
			continue;
		}
		conns[nconns++] = (struct peer_conn){ fd, ntohs(a.sin_port) };
	}
}

/* The connection named KEY; waits up to 3 s for it to be accepted. */
static int peer_find(int key)
{
	double end = now_s() + 3;
	for (;;) {
		for (int i = 0; i < nconns; i++)
			if (conns[i].key == key)
				return conns[i].fd;
		peer_accept_pending();
		if (now_s() > end)
			return -1;
		usleep(2000);
	}
}

static void peer_forget(int key)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i].key == key) {
			conns[i] = conns[--nconns];
			return;
		}
}

static void peer_silence(int key, int on)
{
	char cmd[1024];
	if (on)
		snprintf(cmd, sizeof(cmd),
			 "env -u LD_PRELOAD nft 'add table inet tsemka; "
			 "add chain inet tsemka in { type filter hook input priority -10; }; "
			 "add chain inet tsemka out { type filter hook output priority -10; }; "
			 "add rule inet tsemka in tcp sport %d drop; add rule inet tsemka in tcp dport %d drop; "
			 "add rule inet tsemka out tcp sport %d drop; add rule inet tsemka out tcp dport %d drop'",
			 key, key, key, key);
	else
		snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD nft delete table inet tsemka 2>/dev/null");
	if (system(cmd) != 0 && on)
		fprintf(stderr, "peer: nft failed: %s\n", cmd);
}

/* Reads up to n bytes (stops at EOF, error or timeout). */
static void peer_recv(int fd, size_t n, int timeout_ms, char *reply, size_t rlen)
{
	static unsigned char b[65536];
	size_t got = 0;
	int eof = 0, err = 0;
	uint32_t h = 2166136261u;
	set_rcvtimeo(fd, timeout_ms);
	while (got < n) {
		size_t want = n - got < sizeof(b) ? n - got : sizeof(b);
		ssize_t r = recv(fd, b, want, 0);
		if (r == 0) {
			eof = 1;
			break;
		}
		if (r < 0) {
			err = errno;
			break;
		}
		h = fnv(h, b, (size_t)r);
		got += (size_t)r;
	}
	snprintf(reply, rlen, "OK %zu %u %d %d", got, h, eof, err);
}

static void peer_send(int fd, size_t n, size_t chunk, int gap_ms)
{
	static unsigned char b[65536];
	size_t off = 0;
	if (chunk > sizeof(b) || chunk == 0)
		chunk = sizeof(b);
	while (off < n) {
		size_t k = n - off < chunk ? n - off : chunk;
		fill_pattern(b, k, off);
		ssize_t r = send(fd, b, k, MSG_NOSIGNAL);
		if (r < 0)
			return;
		off += (size_t)r;
		if (gap_ms)
			usleep((useconds_t)gap_ms * 1000);
	}
}

/* Reads total bytes chunk by chunk with a pause between reads. */
static void peer_drain(int fd, size_t total, size_t chunk, int gap_ms)
{
	static unsigned char b[65536];
	size_t got = 0;
	if (chunk > sizeof(b))
		chunk = sizeof(b);
	set_rcvtimeo(fd, 3000);
	while (got < total) {
		ssize_t r = recv(fd, b, chunk, 0);
		if (r <= 0)
			return;
		got += (size_t)r;
		usleep((useconds_t)gap_ms * 1000);
	}
}

static int run_peer(void)
{
	signal(SIGPIPE, SIG_IGN);
	int ctl = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = sin_of("0.0.0.0", CTL_PORT);
	int one = 1;
	setsockopt(ctl, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ctl, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("peer: bind control");
		return 2;
	}
	peer_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(peer_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a = sin_of("0.0.0.0", PEER_PORT);
	if (bind(peer_listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(peer_listen_fd, 128) < 0) {
		perror("peer: listen");
		return 2;
	}
	int preloaded = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libvma");
	printf("peer ready\n");
	fflush(stdout);
	for (;;) {
		char req[256], reply[256], verb[32];
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		struct pollfd p[2] = { { ctl, POLLIN, 0 }, { peer_listen_fd, POLLIN, 0 } };
		if (poll(p, 2, 1000) <= 0)
			continue;
		if (p[1].revents)
			peer_accept_pending();
		if (!p[0].revents)
			continue;
		ssize_t n = recvfrom(ctl, req, sizeof(req) - 1, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n <= 0)
			continue;
		req[n] = 0;
		unsigned seq = 0;
		long key = 0, x = 0, y = 0, z = 0;
		if (sscanf(req, "%u %31s %ld %ld %ld %ld", &seq, verb, &key, &x, &y, &z) < 2)
			continue;
		int fd = -1, async = 0;
		const char *needs_conn = "SEND SENDS RECV DRAIN SHUTWR SHUTRD CLOSE LINGER0 NAMES INFO SILENT";
		snprintf(reply, sizeof(reply), "OK");
		if (strstr(needs_conn, verb)) {
			fd = peer_find((int)key);
			if (fd < 0) {
				snprintf(reply, sizeof(reply), "ERR no connection %ld", key);
				verb[0] = 0;
			}
		}
		if (!strcmp(verb, "HELLO")) {
			snprintf(reply, sizeof(reply), "OK %d", preloaded);
		} else if (!strcmp(verb, "QUIT")) {
			char r[64];
			int k = snprintf(r, sizeof(r), "%u OK", seq);
			sendto(ctl, r, (size_t)k, 0, (struct sockaddr *)&from, fl);
			return 0;
		} else if (!strcmp(verb, "SEND") || !strcmp(verb, "SENDS") || !strcmp(verb, "DRAIN")) {
			async = 1;
		} else if (!strcmp(verb, "RECV")) {
			peer_recv(fd, (size_t)x, (int)y, reply, sizeof(reply));
		} else if (!strcmp(verb, "SHUTWR") || !strcmp(verb, "SHUTRD")) {
			if (shutdown(fd, verb[4] == 'W' ? SHUT_WR : SHUT_RD) < 0)
				snprintf(reply, sizeof(reply), "ERR %d", errno);
		} else if (!strcmp(verb, "CLOSE") || !strcmp(verb, "LINGER0")) {
			struct linger lg = { 1, 0 };
			if (verb[0] == 'L')
				setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(fd);
			peer_forget((int)key);
		} else if (!strcmp(verb, "NAMES")) {
			struct sockaddr_in l, r;
			socklen_t ll = sizeof(l), rl = sizeof(r);
			getsockname(fd, (struct sockaddr *)&l, &ll);
			getpeername(fd, (struct sockaddr *)&r, &rl);
			char ls[32], rs[32];
			inet_ntop(AF_INET, &l.sin_addr, ls, sizeof(ls));
			inet_ntop(AF_INET, &r.sin_addr, rs, sizeof(rs));
			snprintf(reply, sizeof(reply), "OK %s %d %s %d", ls, ntohs(l.sin_port), rs, ntohs(r.sin_port));
		} else if (!strcmp(verb, "INFO")) {
			int mss = 0;
			struct tcp_info ti;
			socklen_t ml = sizeof(mss), il = sizeof(ti);
			memset(&ti, 0, sizeof(ti));
			getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
			getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il);
			snprintf(reply, sizeof(reply), "OK %d %d %d %u", mss, ti.tcpi_state, ti.tcpi_options,
				 ti.tcpi_rcv_mss);
		} else if (!strcmp(verb, "SILENT")) {
			peer_silence((int)key, (int)x);
		} else if (!strcmp(verb, "CONNECT")) {
			int c = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in to = from;
			to.sin_port = htons((uint16_t)key);
			struct timeval tv = { 3, 0 };
			setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
			int mss = (int)x;   /* CONNECT port [mss]: the SYN's MSS option */
			if (mss > 0)
				setsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
			if (connect(c, (struct sockaddr *)&to, sizeof(to)) < 0) {
				snprintf(reply, sizeof(reply), "ERR %d", errno);
				close(c);
			} else {
				int port = port_of(c, 0);
				conns[nconns++] = (struct peer_conn){ c, port };
				snprintf(reply, sizeof(reply), "OK %d", port);
			}
		} else if (verb[0]) {
			snprintf(reply, sizeof(reply), "ERR unknown verb %s", verb);
		}
		char out[300];
		int k = snprintf(out, sizeof(out), "%u %s", seq, reply);
		sendto(ctl, out, (size_t)k, 0, (struct sockaddr *)&from, fl);
		if (async && !strcmp(verb, "SEND"))
			peer_send(fd, (size_t)x, 65536, 0);
		else if (async && !strcmp(verb, "SENDS"))
			for (long i = 0; i < x; i++) {   /* x sends of y bytes, z ms apart, one stream */
				static unsigned char b[4096];
				size_t sz = (size_t)y < sizeof(b) ? (size_t)y : sizeof(b);
				fill_pattern(b, sz, (size_t)i * sz);
				send(fd, b, sz, MSG_NOSIGNAL);
				usleep((useconds_t)z * 1000);
			}
		else if (async && !strcmp(verb, "DRAIN"))
			peer_drain(fd, (size_t)x, (size_t)y, (int)z);
	}
}

/* ================================ test ================================ */

static int failures, checks;
static const char *role = "";   /* "client" / "server" / "" */
static const char *peer_ip, *local_ip;
static int peer_preloaded;
static int ctl_fd, test_listen_fd = -1;
static unsigned ctl_seq;
static volatile sig_atomic_t sigpipes;

static void result(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;
	checks++;
	if (!ok)
		failures++;
	printf("%s: %s%s%s", ok ? "PASS" : "FAIL", role[0] ? role : "", role[0] ? ": " : "", name);
	if (fmt && fmt[0]) {
		printf(ok ? " (" : ": ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		if (ok)
			printf(")");
	}
	printf("\n");
	fflush(stdout);
}

static const char *errname(int e)
{
	static char other[32];
	switch (e) {
	case 0: return "0";
	case EAGAIN: return "EAGAIN";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EINPROGRESS: return "EINPROGRESS";
	case EALREADY: return "EALREADY";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	case EINVAL: return "EINVAL";
	case EBADF: return "EBADF";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case ECONNABORTED: return "ECONNABORTED";
	case EINTR: return "EINTR";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ESPIPE: return "ESPIPE";
	default: snprintf(other, sizeof(other), "errno %d", e); return other;
	}
}

/* A call that must fail with want_errno. */
static void expect_err(const char *name, long rc, int err, int want_errno)
{
	result(rc == -1 && err == want_errno, name, "expected -1/%s, got %ld/%s", errname(want_errno), rc,
	       rc == -1 ? errname(err) : "-");
}

#define EXPECT_ERR(name, call, want)                          \
	do {                                                  \
		errno = 0;                                    \
		long rc_ = (long)(call);                      \
		expect_err(name, rc_, errno, want);           \
	} while (0)

/* A call that must succeed (return 0). */
static void expect_ok(const char *name, long rc, int err)
{
	result(rc == 0, name, "expected 0, got %ld/%s", rc, rc ? errname(err) : "-");
}

#define EXPECT_OK(name, call)                        \
	do {                                         \
		errno = 0;                           \
		long rc_ = (long)(call);             \
		expect_ok(name, rc_, errno);         \
	} while (0)

static void expect_int(const char *name, long got, long want)
{
	result(got == want, name, "expected %ld, got %ld", want, got);
}

static const char *events_str(unsigned ev)
{
	static char s[128];
	static const struct { unsigned bit; const char *name; } names[] = {
		{ POLLIN, "IN" }, { POLLPRI, "PRI" }, { POLLOUT, "OUT" }, { POLLERR, "ERR" },
		{ POLLHUP, "HUP" }, { POLLNVAL, "NVAL" }, { POLLRDHUP, "RDHUP" },
	};
	s[0] = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (ev & names[i].bit) {
			strcat(s, s[0] ? "|" : "");
			strcat(s, names[i].name);
		}
	if (ev & ~(unsigned)(POLLIN | POLLPRI | POLLOUT | POLLERR | POLLHUP | POLLNVAL | POLLRDHUP))
		sprintf(s + strlen(s), "|%#x", ev & ~(unsigned)(POLLIN | POLLPRI | POLLOUT | POLLERR | POLLHUP |
							  POLLNVAL | POLLRDHUP));
	if (!s[0])
		strcpy(s, "0");
	return s;
}

#define ASKED (POLLIN | POLLPRI | POLLOUT | POLLRDHUP)

/* poll and a level-triggered epoll (both with timeout 0) must report exactly
 * want, and select the sets Linux derives from it (read: IN|HUP|ERR, write:
 * OUT|ERR, except: PRI). */
static void expect_ready(const char *name, int fd, unsigned want)
{
	struct pollfd p = { fd, ASKED, 0 };
	int n = poll(&p, 1, 0);
	unsigned got_poll = n == 1 ? (unsigned)p.revents : 0;
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP, .data.fd = fd };
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	struct epoll_event out = { 0 };
	int m = epoll_wait(ep, &out, 1, 0);
	unsigned got_epoll = m == 1 ? out.events : 0;
	close(ep);
	fd_set rs, ws, es;
	FD_ZERO(&rs);
	FD_ZERO(&ws);
	FD_ZERO(&es);
	FD_SET(fd, &rs);
	FD_SET(fd, &ws);
	FD_SET(fd, &es);
	struct timeval zero = { 0, 0 };
	select(fd + 1, &rs, &ws, &es, &zero);
	int sel_r = FD_ISSET(fd, &rs) != 0, sel_w = FD_ISSET(fd, &ws) != 0, sel_e = FD_ISSET(fd, &es) != 0;
	int want_r = (want & (POLLIN | POLLHUP | POLLERR)) != 0, want_w = (want & (POLLOUT | POLLERR)) != 0,
	    want_e = (want & POLLPRI) != 0;
	char a[128], b[128];
	snprintf(a, sizeof(a), "%s", events_str(got_poll));
	snprintf(b, sizeof(b), "%s", events_str(got_epoll));
	char full[160];
	snprintf(full, sizeof(full), "readiness %s", name);
	result(got_poll == want && got_epoll == want && sel_r == want_r && sel_w == want_w && sel_e == want_e, full,
	       "expected %s (select r%d w%d e%d), got poll %s, epoll %s, select r%d w%d e%d", events_str(want), want_r,
	       want_w, want_e, a, b, sel_r, sel_w, sel_e);
}

/* Waits until poll reports any of events (or timeout); returns revents. */
static unsigned wait_events(int fd, short events, int timeout_ms)
{
	struct pollfd p = { fd, events, 0 };
	return poll(&p, 1, timeout_ms) == 1 ? (unsigned)p.revents : 0;
}

/* Waits until at least n bytes are queued for reading. */
static int wait_bytes(int fd, int n, double seconds)
{
	double end = now_s() + seconds;
	for (;;) {
		int q = -1;
		if (ioctl(fd, FIONREAD, &q) == 0 && q >= n)
			return q;
		if (now_s() > end)
			return q;
		usleep(1000);
	}
}

static int sockerr(int fd)
{
	int e = -1;
	socklen_t l = sizeof(e);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
	return e;
}

static int tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		return -1;
	return ti.tcpi_state;
}

/* Waits (up to 2 s) for the TCP state; returns the last seen. */
static int wait_state(int fd, int want)
{
	double end = now_s() + 2;
	int s;
	while ((s = tcp_state(fd)) != want && now_s() < end)
		usleep(1000);
	return s;
}

/* ---- control channel ---- */

static char ctl_reply[256];

static void ask_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ask_send(const char *fmt, ...)
{
	char req[256];
	int k = snprintf(req, sizeof(req), "%u ", ++ctl_seq);
	va_list ap;
	va_start(ap, fmt);
	k += vsnprintf(req + k, sizeof(req) - (size_t)k, fmt, ap);
	va_end(ap);
	send(ctl_fd, req, (size_t)k, 0);
}

/* The reply to the last request, without "SEQ " ("" after 10 s of silence). */
static const char *ask_wait(void)
{
	double end = now_s() + 10;
	char buf[256];
	while (now_s() < end) {
		ssize_t n = recv(ctl_fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = 0;
		unsigned seq;
		int off = 0;
		if (sscanf(buf, "%u %n", &seq, &off) >= 1 && seq == ctl_seq) {
			snprintf(ctl_reply, sizeof(ctl_reply), "%s", buf + off);
			return ctl_reply;
		}
	}
	printf("INFO: peer did not answer request %u\n", ctl_seq);
	ctl_reply[0] = 0;
	return ctl_reply;
}

#define ASK(...) (ask_send(__VA_ARGS__), ask_wait())

struct peer_recv {
	size_t got;
	uint32_t hash;
	int eof, err;
};

static struct peer_recv parse_recv(const char *r)
{
	struct peer_recv pr = { 0, 0, 0, -1 };
	if (sscanf(r, "OK %zu %u %d %d", &pr.got, &pr.hash, &pr.eof, &pr.err) != 4)
		pr.err = -1;
	return pr;
}

/* ---- connections ---- */

static int is_client(void)
{
	return !strcmp(role, "client");
}

/* A connected socket in the current role; *key names it for the peer. */
static int open_conn(int *key)
{
	if (is_client()) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in to = sin_of(peer_ip, PEER_PORT);
		if (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
			result(0, "connect to the peer", "%s", errname(errno));
			close(fd);
			return -1;
		}
		*key = port_of(fd, 0);
		return fd;
	}
	const char *r = ASK("CONNECT %d", TEST_PORT);
	if (sscanf(r, "OK %d", key) != 1) {
		result(0, "peer connects to us", "peer said '%s'", r);
		return -1;
	}
	set_rcvtimeo(test_listen_fd, 3000);
	int fd = accept(test_listen_fd, NULL, NULL);
	set_rcvtimeo(test_listen_fd, 0);
	if (fd < 0) {
		result(0, "accept the peer's connection", "%s", errname(errno));
		return -1;
	}
	if (port_of(fd, 1) != *key) {
		result(0, "accepted connection is the peer's", "peer port %d, want %d", port_of(fd, 1), *key);
		close(fd);
		return -1;
	}
	return fd;
}

static void close_conn(int fd, int key)
{
	close(fd);
	ASK("LINGER0 %d", key);
}

static ssize_t send_pattern(int fd, size_t n, int flags)
{
	static unsigned char b[65536];
	size_t off = 0;
	while (off < n) {
		size_t k = n - off < sizeof(b) ? n - off : sizeof(b);
		fill_pattern(b, k, off);
		ssize_t r = send(fd, b, k, flags);
		if (r <= 0)
			return off ? (ssize_t)off : r;
		off += (size_t)r;
	}
	return (ssize_t)off;
}

/* Reads exactly n bytes (blocking, 5 s cap); returns 1 if they are the pattern. */
static int recv_pattern(int fd, size_t n, size_t *got)
{
	static unsigned char b[65536];
	int ok = 1;
	*got = 0;
	set_rcvtimeo(fd, 5000);
	while (*got < n) {
		size_t k = n - *got < sizeof(b) ? n - *got : sizeof(b);
		ssize_t r = recv(fd, b, k, 0);
		if (r <= 0)
			break;
		ok = ok && is_pattern(b, (size_t)r, *got);
		*got += (size_t)r;
	}
	set_rcvtimeo(fd, 0);
	return ok && *got == n;
}

/* ================================ checks ================================ */

static size_t fill_until_eagain(int fd);
static void check_tcp_info(int fd);
static void test_blocking_write_full(void);

static void check_names(int fd, int key)
{
	struct sockaddr_in l, r;
	socklen_t ll = sizeof(l), rl = sizeof(r);
	char ls[32] = "?", rs[32] = "?";
	int okl = getsockname(fd, (struct sockaddr *)&l, &ll) == 0, okr = getpeername(fd, (struct sockaddr *)&r, &rl) == 0;
	inet_ntop(AF_INET, &l.sin_addr, ls, sizeof(ls));
	inet_ntop(AF_INET, &r.sin_addr, rs, sizeof(rs));
	int want_lport = is_client() ? key : TEST_PORT, want_rport = is_client() ? PEER_PORT : key;
	result(okl && ll == sizeof(l) && l.sin_family == AF_INET && !strcmp(ls, local_ip) &&
		       ntohs(l.sin_port) == want_lport,
	       "getsockname", "expected %s:%d, got %s:%d", local_ip, want_lport, ls, ntohs(l.sin_port));
	result(okr && rl == sizeof(r) && !strcmp(rs, peer_ip) && ntohs(r.sin_port) == want_rport, "getpeername",
	       "expected %s:%d, got %s:%d", peer_ip, want_rport, rs, ntohs(r.sin_port));
	char pl[32] = "", pr[32] = "";
	int plp = 0, prp = 0;
	sscanf(ASK("NAMES %d", key), "OK %31s %d %31s %d", pl, &plp, pr, &prp);
	result(!strcmp(pl, rs) && plp == ntohs(r.sin_port) && !strcmp(pr, ls) && prp == ntohs(l.sin_port),
	       "the peer sees the mirror addresses", "expected %s:%d %s:%d, got %s:%d %s:%d", rs, ntohs(r.sin_port),
	       ls, ntohs(l.sin_port), pl, plp, pr, prp);
}

static void test_connect_client(void)
{
	struct sockaddr_in peer = sin_of(peer_ip, PEER_PORT);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	expect_ready("fresh socket", fd, POLLOUT | POLLHUP);
	int mss = 0;
	socklen_t ml = sizeof(mss);
	getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
	expect_int("TCP_MAXSEG of a fresh socket", mss, 536);
	EXPECT_OK("blocking connect", connect(fd, (struct sockaddr *)&peer, sizeof(peer)));
	int key = port_of(fd, 0);
	check_names(fd, key);
	EXPECT_ERR("connect again after success", connect(fd, (struct sockaddr *)&peer, sizeof(peer)), EISCONN);
	expect_int("TCP_INFO state after connect", tcp_state(fd), TCP_ESTABLISHED);
	close_conn(fd, key);

	/* Refused, blocking and non-blocking. */
	struct sockaddr_in closed = sin_of(peer_ip, CLOSED_PORT);
	int rc;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	EXPECT_ERR("blocking connect to a closed port", connect(fd, (struct sockaddr *)&closed, sizeof(closed)),
		   ECONNREFUSED);
	expect_int("SO_ERROR after a refused blocking connect", sockerr(fd), 0);
	errno = 0;
	rc = connect(fd, (struct sockaddr *)&peer, sizeof(peer));
	expect_ok("connect again on the refused socket, to the listener (Linux retries)", rc, errno);
	if (rc == 0)
		close_conn(fd, port_of(fd, 0));
	else
		close(fd);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	EXPECT_ERR("non-blocking connect to a closed port", connect(fd, (struct sockaddr *)&closed, sizeof(closed)),
		   EINPROGRESS);
	unsigned ev = wait_events(fd, POLLOUT, 2000);
	result(ev == (POLLOUT | POLLERR | POLLHUP), "refused: poll(POLLOUT) revents", "expected OUT|ERR|HUP, got %s",
	       events_str(ev));
	expect_ready("refused connect", fd, POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP);
	int e = sockerr(fd);
	result(e == ECONNREFUSED, "refused: SO_ERROR", "expected ECONNREFUSED, got %s", errname(e));
	expect_int("SO_ERROR is cleared by reading it", sockerr(fd), 0);
	close(fd);

	/* Non-blocking success: the first connect after completion returns 0, then EISCONN. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	EXPECT_ERR("non-blocking connect", connect(fd, (struct sockaddr *)&peer, sizeof(peer)), EINPROGRESS);
	ev = wait_events(fd, POLLOUT, 2000);
	result(ev == POLLOUT, "non-blocking connect completes: poll(POLLOUT)", "expected OUT, got %s",
	       events_str(ev));
	expect_int("SO_ERROR after a successful connect", sockerr(fd), 0);
	errno = 0;
	rc = connect(fd, (struct sockaddr *)&peer, sizeof(peer));
	result(rc == 0, "connect after non-blocking completion returns 0 (as Linux)", "expected 0, got %d/%s", rc,
	       errname(errno));
	EXPECT_ERR("connect once more", connect(fd, (struct sockaddr *)&peer, sizeof(peer)), EISCONN);
	close_conn(fd, port_of(fd, 0));

	/* An epoll set that holds the socket before connect sees the connect complete. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ep = epoll_create1(0);
	struct epoll_event eev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.fd = fd }, eout = { 0 };
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &eev);
	connect(fd, (struct sockaddr *)&peer, sizeof(peer));
	int n = epoll_wait(ep, &eout, 1, 2000);
	result(n == 1 && eout.events == EPOLLOUT, "epoll_ctl ADD before connect: EPOLLOUT when connected",
	       "expected 1 event OUT, got %d event(s) %s", n, n == 1 ? events_str(eout.events) : "-");
	close(ep);
	close_conn(fd, port_of(fd, 0));

	/* Silent peer (SYNs to 9501 dropped): EALREADY while pending, ETIMEDOUT with TCP_SYNCNT 1. */
	struct sockaddr_in silent = sin_of(peer_ip, SILENT_PORT);
	int nb = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int one = 1, got = 0;
	socklen_t gl = sizeof(got);
	setsockopt(nb, IPPROTO_TCP, TCP_SYNCNT, &one, sizeof(one));
	getsockopt(nb, IPPROTO_TCP, TCP_SYNCNT, &got, &gl);
	expect_int("TCP_SYNCNT reads back", got, 1);
	EXPECT_ERR("non-blocking connect to a silent peer", connect(nb, (struct sockaddr *)&silent, sizeof(silent)),
		   EINPROGRESS);
	EXPECT_ERR("second connect while in progress", connect(nb, (struct sockaddr *)&silent, sizeof(silent)),
		   EALREADY);
	expect_ready("connect in progress", nb, 0);
	expect_int("TCP_INFO state while connecting", tcp_state(nb), TCP_SYN_SENT);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_SYNCNT, &one, sizeof(one));
	double t0 = now_s();
	errno = 0;
	rc = connect(fd, (struct sockaddr *)&silent, sizeof(silent));
	int err = errno;
	double dt = now_s() - t0;
	result(rc == -1 && err == ETIMEDOUT && dt > 2 && dt < 5, "blocking connect to a silent peer, TCP_SYNCNT 1",
	       "expected -1/ETIMEDOUT after ~3 s, got %d/%s after %.2f s", rc, errname(err), dt);
	close(fd);
	ev = wait_events(nb, POLLOUT, 2000);
	result(ev == (POLLOUT | POLLERR | POLLHUP), "timed out: poll(POLLOUT) revents", "expected OUT|ERR|HUP, got %s",
	       events_str(ev));
	e = sockerr(nb);
	result(e == ETIMEDOUT, "timed out: SO_ERROR", "expected ETIMEDOUT, got %s", errname(e));
	close(nb);
}

static void test_accept_server(void)
{
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = sin_of("0.0.0.0", TEST_PORT + 1);
	bind(lfd, (struct sockaddr *)&a, sizeof(a));
	EXPECT_OK("listen", listen(lfd, 16));
	expect_ready("idle listener", lfd, 0);
	EXPECT_ERR("accept on a non-blocking listener with nothing pending", accept(lfd, NULL, NULL), EAGAIN);
	int key = 0;
	const char *r = ASK("CONNECT %d", TEST_PORT + 1);
	sscanf(r, "OK %d", &key);
	unsigned ev = wait_events(lfd, POLLIN, 2000);
	result(ev == POLLIN, "pending connection: listener poll(POLLIN)", "expected IN, got %s", events_str(ev));
	expect_ready("listener with a pending connection", lfd, POLLIN);
	struct sockaddr_in from;
	memset(&from, 0xab, sizeof(from));
	socklen_t fl = sizeof(from) + 8;
	int fd = accept4(lfd, (struct sockaddr *)&from, &fl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	result(fd >= 0, "accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)", "expected an fd, got %d/%s", fd, fd < 0 ? errname(errno) : "-");
	char fs[32] = "?";
	inet_ntop(AF_INET, &from.sin_addr, fs, sizeof(fs));
	result(fl == sizeof(from) && from.sin_family == AF_INET && !strcmp(fs, peer_ip) && ntohs(from.sin_port) == key,
	       "accept4 fills the peer address", "expected %s:%d len %zu, got %s:%d len %u", peer_ip, key,
	       sizeof(from), fs, ntohs(from.sin_port), fl);
	result((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0, "accept4: O_NONBLOCK visible via F_GETFL", "flags %#x",
	       fcntl(fd, F_GETFL));
	result(fcntl(fd, F_GETFD) == FD_CLOEXEC, "accept4: FD_CLOEXEC visible via F_GETFD", "got %#x",
	       fcntl(fd, F_GETFD));
	result((fcntl(lfd, F_GETFL) & O_NONBLOCK) != 0, "listener keeps O_NONBLOCK", "flags %#x", fcntl(lfd, F_GETFL));
	char c;
	EXPECT_ERR("accepted non-blocking socket: recv EAGAIN", recv(fd, &c, 1, 0), EAGAIN);
	expect_ready("idle listener after accept", lfd, 0);
	close_conn(fd, key);

	/* Plain accept: no flags inherited from the non-blocking listener. */
	r = ASK("CONNECT %d", TEST_PORT + 1);
	sscanf(r, "OK %d", &key);
	wait_events(lfd, POLLIN, 2000);
	fd = accept(lfd, NULL, NULL);
	result(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK) && fcntl(fd, F_GETFD) == 0,
	       "plain accept: blocking, no FD_CLOEXEC", "fd %d, F_GETFL %#x, F_GETFD %#x", fd, fcntl(fd, F_GETFL),
	       fcntl(fd, F_GETFD));
	expect_int("accepted: TCP_INFO state", tcp_state(fd), TCP_ESTABLISHED);
	close_conn(fd, key);
	close(lfd);

	/* An epoll set that holds the socket before listen sees the incoming connection. */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	int ep = epoll_create1(0);
	struct epoll_event eev = { .events = EPOLLIN, .data.fd = lfd }, eout = { 0 };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &eev);
	a = sin_of("0.0.0.0", TEST_PORT + 2);
	bind(lfd, (struct sockaddr *)&a, sizeof(a));
	listen(lfd, 16);
	r = ASK("CONNECT %d", TEST_PORT + 2);
	sscanf(r, "OK %d", &key);
	int n = epoll_wait(ep, &eout, 1, 2000);
	result(n == 1 && eout.events == EPOLLIN, "epoll_ctl ADD before listen: EPOLLIN for a connection",
	       "expected 1 event IN, got %d event(s) %s", n, n == 1 ? events_str(eout.events) : "-");
	fd = accept(lfd, NULL, NULL);
	close(ep);
	if (fd >= 0)
		close(fd);
	ASK("LINGER0 %d", key);
	close(lfd);
}

/* recvmmsg on a stream, as Linux's do_recvmmsg: one recvmsg per entry, the
 * timeout checked after each (what is left written back), {0, 0} stops
 * after the first, an invalid one is EINVAL. 300 bytes queued. */
static void test_recvmmsg_timeout(int fd, int key)
{
	unsigned char bufs[4][100];
	struct iovec iov[4];
	struct mmsghdr v[4];
	memset(v, 0, sizeof(v));
	for (int i = 0; i < 4; i++) {
		iov[i] = (struct iovec){ bufs[i], sizeof(bufs[i]) };
		v[i].msg_hdr.msg_iov = &iov[i];
		v[i].msg_hdr.msg_iovlen = 1;
	}
	struct timespec bad = { 0, 1000000000L };
	EXPECT_ERR("recvmmsg with tv_nsec 1e9", recvmmsg(fd, v, 4, MSG_DONTWAIT, &bad), EINVAL);
	ASK("SEND %d 300", key);
	wait_bytes(fd, 300, 3);
	usleep(20000);
	struct timespec zero = { 0, 0 };
	int n = recvmmsg(fd, v, 4, MSG_DONTWAIT, &zero);
	result(n == 1 && v[0].msg_len == 100 && is_pattern(bufs[0], 100, 0),
	       "recvmmsg with a {0, 0} timeout stops after the first entry", "got %d (first %u bytes)", n,
	       v[0].msg_len);
	struct timespec left = { 5, 0 };
	n = recvmmsg(fd, v, 4, MSG_DONTWAIT, &left);
	result(n == 2 && v[0].msg_len == 100 && v[1].msg_len == 100 && is_pattern(bufs[0], 100, 100) &&
		       is_pattern(bufs[1], 100, 200) && left.tv_sec >= 4 && left.tv_sec <= 5,
	       "recvmmsg takes the rest, entry by entry, and writes back what is left of its timeout",
	       "got %d, timeout left %ld.%09ld", n, (long)left.tv_sec, left.tv_nsec);
}

static void test_data(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	if (!is_client())
		check_names(fd, key);
	expect_ready("connected idle", fd, POLLOUT);
	struct tcp_info ti;
	socklen_t il = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	int rc = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il);
	result(rc == 0 && ti.tcpi_state == TCP_ESTABLISHED && ti.tcpi_snd_mss >= 500 && ti.tcpi_snd_mss <= 1460,
	       "TCP_INFO: ESTABLISHED, snd_mss sane", "state %u, snd_mss %u", ti.tcpi_state, ti.tcpi_snd_mss);

	/* 100 bytes each way, then 256 KiB each way. */
	ask_send("RECV %d 100 3000", key);
	ssize_t s = send_pattern(fd, 100, 0);
	struct peer_recv pr = parse_recv(ask_wait());
	result(s == 100 && pr.got == 100 && pr.hash == pattern_hash(100), "send 100 bytes",
	       "sent %zd, peer got %zu hash %s", s, pr.got, pr.hash == pattern_hash(100) ? "ok" : "BAD");
	ask_send("RECV %d %d 5000", key, 262144);
	s = send_pattern(fd, 262144, 0);
	pr = parse_recv(ask_wait());
	result(s == 262144 && pr.got == 262144 && pr.hash == pattern_hash(262144), "send 256 KiB",
	       "sent %zd, peer got %zu hash %s", s, pr.got, pr.hash == pattern_hash(262144) ? "ok" : "BAD");
	ASK("SEND %d %d", key, 262144);
	size_t got;
	int ok = recv_pattern(fd, 262144, &got);
	result(ok, "receive 256 KiB", "expected 262144 pattern bytes, got %zu%s", got, ok ? "" : " (or corrupt)");
	check_tcp_info(fd);

	/* MSG_DONTWAIT, MSG_PEEK, FIONREAD / SIOCINQ / SIOCOUTQ. */
	unsigned char a[2048], b[2048];
	EXPECT_ERR("MSG_DONTWAIT with nothing queued", recv(fd, a, sizeof(a), MSG_DONTWAIT), EAGAIN);
	result(!(fcntl(fd, F_GETFL) & O_NONBLOCK), "MSG_DONTWAIT leaves the socket blocking", NULL);
	ASK("SEND %d 1000", key);
	int q = wait_bytes(fd, 1000, 3);
	usleep(20000);
	ioctl(fd, FIONREAD, &q);
	expect_int("FIONREAD = queued bytes", q, 1000);
	expect_ready("data pending", fd, POLLIN | POLLOUT);
	ssize_t p = recv(fd, a, 64, MSG_PEEK);
	ssize_t p2 = recv(fd, a + 64, 10, MSG_PEEK);
	ioctl(fd, SIOCINQ, &q);
	result(p == 64 && p2 == 10 && is_pattern(a, 64, 0) && is_pattern(a + 64, 10, 0) && q == 1000,
	       "MSG_PEEK returns the head twice, consumes nothing", "peeks %zd %zd, SIOCINQ %d", p, p2, q);
	ssize_t r = read(fd, b, 300);
	ioctl(fd, FIONREAD, &q);
	result(r == 300 && !memcmp(a, b, 64) && is_pattern(b, 300, 0) && q == 700,
	       "read after MSG_PEEK gets the same bytes", "read %zd, FIONREAD then %d (want 700)", r, q);
	r = recv(fd, b, sizeof(b), 0);
	result(r == 700 && is_pattern(b, 700, 300), "the rest in order", "got %zd", r);
	int outq = -1;
	ioctl(fd, SIOCOUTQ, &outq);
	expect_int("SIOCOUTQ when idle", outq, 0);
	test_recvmmsg_timeout(fd, key);

	/* MSG_WAITALL assembles 5 sends 40 ms apart. */
	ASK("SENDS %d 5 100 40", key);
	double t0 = now_s();
	r = recv(fd, b, 500, MSG_WAITALL);
	double dt = now_s() - t0;
	result(r == 500 && is_pattern(b, 500, 0) && dt > 0.1, "MSG_WAITALL assembles 5 x 100 bytes",
	       "expected 500 after ~0.16 s, got %zd after %.3f s", r, dt);

	/* SO_RCVTIMEO. */
	set_rcvtimeo(fd, 200);
	t0 = now_s();
	errno = 0;
	r = recv(fd, b, 10, 0);
	int err = errno;
	dt = now_s() - t0;
	result(r == -1 && err == EAGAIN && dt > 0.15 && dt < 1.5, "SO_RCVTIMEO 200 ms",
	       "expected -1/EAGAIN after ~0.2 s, got %zd/%s after %.3f s", r, errname(err), dt);
	struct timeval tv;
	socklen_t tl = sizeof(tv);
	getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl);
	result(tv.tv_sec == 0 && tv.tv_usec == 200000, "SO_RCVTIMEO reads back", "%ld.%06ld", (long)tv.tv_sec,
	       (long)tv.tv_usec);
	close_conn(fd, key);
	test_blocking_write_full();
}

static uint32_t notsent_bytes(int fd)
{
	struct sock_tcp_info ti;
	socklen_t il = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il);
	return ti.tcpi_notsent_bytes;
}

/* Issue 13 item 8: TCP_NOTSENT_LOWAT bounds the bytes queued but not yet
 * sent; send queues while they are below the mark, poll says writable
 * while twice them are (Linux tcp_stream_memory_free). The peer does not
 * read, so what is unsent stays so. */
static void test_notsent_lowat(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int v = -1;
	socklen_t vl = sizeof(v);
	getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl);
	expect_int("TCP_NOTSENT_LOWAT default", v, 0);
	int sb = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	const int mark = 16384;
	setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &mark, sizeof(mark));
	vl = sizeof(v);
	getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl);
	expect_int("TCP_NOTSENT_LOWAT 16384 reads back", v, mark);
	size_t total = fill_until_eagain(fd);
	uint32_t unsent = notsent_bytes(fd);
	/* A peer that does not read still opens its window as its receive
	 * buffer grows, in ACKs it may delay by 40 ms or more, longer than the
	 * fill's patience: the bytes that waited unsent then leave (TCP_INFO
	 * takes in that ACK). Fill again until the window stays shut. */
	for (int again = 0; again < 20 && unsent < (uint32_t)mark; again++) {
		total += fill_until_eagain(fd);
		unsent = notsent_bytes(fd);
	}
	/* Linux fills the buffer it started below the mark: up to 64 KiB more */
	result(unsent >= (uint32_t)mark && unsent <= (uint32_t)mark + 65536 + 1500,
	       "TCP_NOTSENT_LOWAT 16384: send stops at the mark", "unsent %u after %zu bytes queued (want 16384..83000)",
	       unsent, total);
	expect_ready("TCP_NOTSENT_LOWAT: not writable at the mark", fd, 0);
	/* Between the mark and twice the unsent bytes: send queues, poll still says no. */
	int between = (int)unsent + 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &between, sizeof(between));
	expect_ready("TCP_NOTSENT_LOWAT above the unsent bytes, below twice them: poll not writable", fd, 0);
	static unsigned char b[1000];
	ssize_t r = send(fd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL);
	result(r > 0, "...but send queues", "send gave %zd/%s", r, r < 0 ? errname(errno) : "-");
	if (r > 0)
		total += (size_t)r;
	unsent = notsent_bytes(fd);
	int wide = (int)unsent * 2 + 2;
	setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &wide, sizeof(wide));
	expect_ready("TCP_NOTSENT_LOWAT above twice the unsent bytes: writable", fd, POLLOUT);
	setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &mark, sizeof(mark));
	ask_send("DRAIN %d %zu 65536 0", key, total);
	ask_wait();
	unsigned ev = wait_events(fd, POLLOUT, 3000);
	unsent = notsent_bytes(fd);
	result((ev & POLLOUT) && unsent < (uint32_t)mark / 2, "TCP_NOTSENT_LOWAT: writable once the peer reads",
	       "poll %s, unsent %u", events_str(ev), unsent);
	close_conn(fd, key);
}

/* Issue 13 item 2: a blocking write on a full send buffer returns when all
 * of it is queued, however slowly the peer reads. */
struct slow_drain {
	int key;
	size_t total;
};

static void *slow_drain_later(void *arg)
{
	const struct slow_drain *d = arg;
	usleep(200000);
	char req[96];
	int k = snprintf(req, sizeof(req), "%u DRAIN %d %zu 4096 2", 900000 + d->key, d->key, d->total);
	send(ctl_fd, req, (size_t)k, 0);   /* its reply is not waited for (ask_wait skips other numbers) */
	return NULL;
}

static void test_blocking_write_full(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int sb = 32768;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	size_t total = fill_until_eagain(fd);
	for (int i = 0; i < 20 && wait_events(fd, POLLOUT, 300); i++)
		total += fill_until_eagain(fd);
	static unsigned char b[61000];
	memset(b, 'w', sizeof(b));
	struct slow_drain d = { key, total + sizeof(b) };
	pthread_t th;
	pthread_create(&th, NULL, slow_drain_later, &d);
	double t0 = now_s();
	errno = 0;
	ssize_t r = write(fd, b, sizeof(b));
	int err = errno;
	double dt = now_s() - t0;
	pthread_join(th, NULL);
	/* The defect was a short count. Whether the write had to wait
	 * depends on ACKs that opened room after the fill (a fast peer):
	 * printed, not judged. */
	printf("INFO: %s: the blocking write waited %.3f s\n", role, dt);
	result(r == (ssize_t)sizeof(b), "blocking write of 61000 on a full send buffer: all of it",
	       "expected 61000 after the peer starts reading (~0.2 s), got %zd/%s after %.3f s (%zu queued before)", r,
	       r < 0 ? errname(err) : "-", dt, total);
	usleep((useconds_t)(d.total / 4096 * 2500) + 200000);   /* let the drain finish before the reset */
	close_conn(fd, key);
}

/* TCP_INFO in the kernel's full layout after 256 KiB each way. */
static void check_tcp_info(int fd)
{
	/* A fresh socket is the kernel's under libvma too: its length is the kernel's. */
	unsigned char big[SOCK_TCP_INFO_MAX];
	int fresh = socket(AF_INET, SOCK_STREAM, 0);
	socklen_t kernel_len = sizeof(big);
	getsockopt(fresh, IPPROTO_TCP, TCP_INFO, big, &kernel_len);
	close(fresh);
	socklen_t len = sizeof(big);
	memset(big, 0, sizeof(big));
	int rc = getsockopt(fd, IPPROTO_TCP, TCP_INFO, big, &len);
	result(rc == 0 && len == kernel_len && len >= sizeof(struct sock_tcp_info), "TCP_INFO: the kernel's full length",
	       "expected %u (the kernel's, at least %zu), got %u", kernel_len, sizeof(struct sock_tcp_info), len);
	unsigned char part[16];
	memset(part, 0xee, sizeof(part));
	socklen_t plen = 8;
	rc = getsockopt(fd, IPPROTO_TCP, TCP_INFO, part, &plen);
	result(rc == 0 && plen == 8 && part[0] == TCP_ESTABLISHED && part[8] == 0xee, "TCP_INFO: an 8-byte buffer gets a prefix",
	       "len %u, state %u, byte after %#x", plen, part[0], part[8]);
	struct sock_tcp_info ti;
	memcpy(&ti, big, sizeof(ti));
	uint32_t mss = ti.tcpi_snd_mss;
	printf("INFO: %s: TCP_INFO rtt %u us, rttvar %u, min_rtt %u, rto %u, ato %u, advmss %u, pmtu %u, rcv_space %u, "
	       "rcv_ssthresh %u, segs out/in %u/%u, data segs out/in %u/%u, delivered %u, pacing %llu\n",
	       role, ti.tcpi_rtt, ti.tcpi_rttvar, ti.tcpi_min_rtt, ti.tcpi_rto, ti.tcpi_ato, ti.tcpi_advmss, ti.tcpi_pmtu,
	       ti.tcpi_rcv_space, ti.tcpi_rcv_ssthresh, ti.tcpi_segs_out, ti.tcpi_segs_in, ti.tcpi_data_segs_out,
	       ti.tcpi_data_segs_in, ti.tcpi_delivered, (unsigned long long)ti.tcpi_pacing_rate);
	result(ti.tcpi_bytes_acked >= 262144 + 100 && ti.tcpi_bytes_sent + 1 >= ti.tcpi_bytes_acked &&
		       ti.tcpi_bytes_received >= 262144,
	       "TCP_INFO: bytes acked (with the SYN) / sent / received", "acked %llu, sent %llu, received %llu",
	       (unsigned long long)ti.tcpi_bytes_acked, (unsigned long long)ti.tcpi_bytes_sent,
	       (unsigned long long)ti.tcpi_bytes_received);
	result(mss && ti.tcpi_data_segs_out >= 262144 / mss && ti.tcpi_data_segs_in >= 262144 / mss &&
		       ti.tcpi_segs_out >= ti.tcpi_data_segs_out && ti.tcpi_segs_in >= ti.tcpi_data_segs_in,
	       "TCP_INFO: segments and data segments both ways", "segs %u/%u, data segs %u/%u (mss %u)",
	       ti.tcpi_segs_out, ti.tcpi_segs_in, ti.tcpi_data_segs_out, ti.tcpi_data_segs_in, mss);
	result(ti.tcpi_rcv_mss == mss && ti.tcpi_advmss == mss && ti.tcpi_pmtu >= mss + 40,
	       "TCP_INFO: rcv_mss and advmss equal snd_mss, pmtu covers it", "snd_mss %u, rcv_mss %u, advmss %u, pmtu %u",
	       mss, ti.tcpi_rcv_mss, ti.tcpi_advmss, ti.tcpi_pmtu);
	result(ti.tcpi_snd_wnd > 0 && ti.tcpi_rcv_wnd > 0 && ti.tcpi_notsent_bytes == 0,
	       "TCP_INFO: windows known, nothing unsent", "snd_wnd %u, rcv_wnd %u, notsent %u", ti.tcpi_snd_wnd,
	       ti.tcpi_rcv_wnd, ti.tcpi_notsent_bytes);
	/* Nothing resent on this loss-free link but for resends the peer
	 * proved needless: a veth without NAPI (no XDP program on it, as with
	 * the verbs backend's software device) hands frames to the per-CPU
	 * backlog of the CPU that sent them, so a sender that transmits from
	 * two CPUs (the writer, and the softirq of an ACK) can be reordered
	 * and RACK resends; a tail loss probe resends when an ACK is late.
	 * Either way the receiver must report each such resend as a
	 * duplicate (D-SACK): the count of duplicates (tcpi_dsack_dups, ours
	 * too) covers the resends. A real loss is never D-SACKed. */
	int spurious_only = ti.tcpi_dsack_dups >= ti.tcpi_total_retrans;
	result(ti.tcpi_rtt > 0 && ti.tcpi_rtt < 200000 && ti.tcpi_min_rtt < 200000 && ti.tcpi_rto >= 200000 &&
		       ti.tcpi_max_pacing_rate == UINT64_MAX &&
		       (ti.tcpi_reordering == 3 || (ti.tcpi_reord_seen > 0 && ti.tcpi_reordering > 3)) &&
		       (ti.tcpi_total_retrans == 0 || spurious_only) && (ti.tcpi_bytes_retrans == 0 || spurious_only),
	       "TCP_INFO: RTT sampled, RTO at least 200 ms, no pacing cap, reordering 3, nothing resent but needless resends",
	       "rtt %u, min_rtt %u, rto %u, max_pacing %llu, reordering %u, retrans %u / %llu bytes, reordering seen %u, "
	       "D-SACKed %u",
	       ti.tcpi_rtt, ti.tcpi_min_rtt, ti.tcpi_rto, (unsigned long long)ti.tcpi_max_pacing_rate, ti.tcpi_reordering,
	       ti.tcpi_total_retrans, (unsigned long long)ti.tcpi_bytes_retrans, ti.tcpi_reord_seen, ti.tcpi_dsack_dups);
	if (ti.tcpi_total_retrans)
		printf("INFO: %s: %u resent on a loss-free link, %u reported duplicate by the peer\n", role,
		       ti.tcpi_total_retrans, ti.tcpi_dsack_dups);
}

/* TCP_MAXSEG of a connection; *ts the option bytes timestamps take from
 * each segment (12 or 0), *snd_mss (when asked) TCP_INFO's tcpi_snd_mss. */
static int connected_mss(int fd, int *ts, unsigned *snd_mss)
{
	struct tcp_info ti;
	socklen_t il = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il);
	*ts = (ti.tcpi_options & TCPI_OPT_TIMESTAMPS) ? 12 : 0;
	if (snd_mss)
		*snd_mss = ti.tcpi_snd_mss;
	int mss = 0;
	socklen_t ml = sizeof(mss);
	getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
	return mss;
}

/* TCP_CONGESTION: the names the engine has are ours (getsockopt answers
 * what the connection runs), a name nobody has fails as on Linux. */
static void check_congestion_option(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	int r = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "nosuchcc", 8);
	expect_int("TCP_CONGESTION nosuchcc fails", r, -1);
	expect_int("TCP_CONGESTION nosuchcc: ENOENT", errno, ENOENT);
	r = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "cubic", 5);
	expect_int("TCP_CONGESTION cubic", r, 0);
	struct sockaddr_in to = sin_of(peer_ip, PEER_PORT);
	connect(fd, (struct sockaddr *)&to, sizeof(to));
	char name[16] = { 0 };
	socklen_t nl = sizeof(name);
	r = getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &nl);
	result(r == 0 && !strcmp(name, "cubic"), "TCP_CONGESTION reads back cubic once connected",
	       "getsockopt %d, '%s'", r, name);
	/* "none" (VMA_TCP_CC_ALGO=2's fixed window) is the engine's alone: the
	 * kernel refuses it, an offloaded connection runs it and says so (the
	 * kernel socket under it still holds cubic, so this is the check that
	 * fails when getsockopt asks the kernel) */
	int preloaded = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libvma");
	errno = 0;
	r = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "none", 4);
	memset(name, 0, sizeof(name));
	nl = sizeof(name);
	getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &nl);
	if (preloaded)
		result(r == 0 && !strcmp(name, "none"), "TCP_CONGESTION none on an offloaded connection",
		       "setsockopt %d (%s), reads back '%s'", r, r ? errname(errno) : "-", name);
	else
		result(r == -1 && errno == ENOENT && !strcmp(name, "cubic"), "TCP_CONGESTION none: ENOENT on the kernel",
		       "setsockopt %d (%s), reads back '%s'", r, r ? errname(errno) : "-", name);
	close_conn(fd, port_of(fd, 0));
}

static void test_sockopts(void)
{
	int key, fd;
	if (is_client())
		check_congestion_option();
	/* TCP_MAXSEG before the handshake clamps the MSS both ways. */
	if (is_client()) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		int m = 1000, got = 0;
		socklen_t gl = sizeof(got);
		setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &m, sizeof(m));
		getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &got, &gl);
		expect_int("TCP_MAXSEG 1000 reads back before connect", got, 1000);
		struct sockaddr_in to = sin_of(peer_ip, PEER_PORT);
		connect(fd, (struct sockaddr *)&to, sizeof(to));
		key = port_of(fd, 0);
	} else {
		int m = 1000;
		setsockopt(test_listen_fd, IPPROTO_TCP, TCP_MAXSEG, &m, sizeof(m));
		fd = open_conn(&key);
		m = 0;
		setsockopt(test_listen_fd, IPPROTO_TCP, TCP_MAXSEG, &m, sizeof(m));
		if (fd < 0)
			return;
	}
	int ts = 0;
	unsigned snd_mss = 0;
	int mss = connected_mss(fd, &ts, &snd_mss);
	result(mss == 1000 - ts && (int)snd_mss == 1000 - ts, "TCP_MAXSEG 1000: connected MSS",
	       "expected %d (timestamps %s), got TCP_MAXSEG %d, snd_mss %u", 1000 - ts, ts ? "on" : "off", mss,
	       snd_mss);
	int pmss = 0, pstate = 0, popts = 0;
	sscanf(ASK("INFO %d", key), "OK %d %d %d", &pmss, &pstate, &popts);
	int pts = (popts & TCPI_OPT_TIMESTAMPS) ? 12 : 0;
	result(pmss == 1000 - pts, "TCP_MAXSEG 1000: the peer's MSS toward us", "expected %d, got %d", 1000 - pts,
	       pmss);
	result(pts == ts, "both ends agree on timestamps", "we %d, peer %d", ts, pts);

	/* Issue 13 item 3: an accepted connection whose peer's SYN announced a
	 * smaller MSS than ours (1100) reports it, less the timestamps, as
	 * Linux; it was 536. */
	if (!is_client()) {
		const char *r = ASK("CONNECT %d 1100", TEST_PORT);
		int pkey = 0;
		int afd = -1;
		if (sscanf(r, "OK %d", &pkey) == 1) {
			set_rcvtimeo(test_listen_fd, 3000);
			afd = accept(test_listen_fd, NULL, NULL);
			set_rcvtimeo(test_listen_fd, 0);
		}
		if (afd >= 0) {
			int ats = 0;
			int amss = connected_mss(afd, &ats, NULL);
			result(amss == 1100 - ats, "TCP_MAXSEG after accept, the peer's SYN announcing 1100",
			       "expected %d, got %d", 1100 - ats, amss);
			close_conn(afd, pkey);
		} else {
			result(0, "TCP_MAXSEG after accept, the peer's SYN announcing 1100", "no connection: '%s'", r);
		}
	}

	static const struct { int level, name, value, want; const char *what; } opts[] = {
		{ IPPROTO_TCP, TCP_NODELAY, 1, 1, "TCP_NODELAY 1" },
		{ IPPROTO_TCP, TCP_NODELAY, 0, 0, "TCP_NODELAY 0" },
		{ IPPROTO_TCP, TCP_QUICKACK, 1, 1, "TCP_QUICKACK 1" },
		{ IPPROTO_TCP, TCP_QUICKACK, 0, 0, "TCP_QUICKACK 0" },
		{ SOL_SOCKET, SO_KEEPALIVE, 1, 1, "SO_KEEPALIVE 1" },
		{ IPPROTO_TCP, TCP_KEEPIDLE, 7, 7, "TCP_KEEPIDLE 7" },
		{ IPPROTO_TCP, TCP_KEEPINTVL, 3, 3, "TCP_KEEPINTVL 3" },
		{ IPPROTO_TCP, TCP_KEEPCNT, 4, 4, "TCP_KEEPCNT 4" },
		{ SOL_SOCKET, SO_KEEPALIVE, 0, 0, "SO_KEEPALIVE 0" },
		{ SOL_SOCKET, SO_RCVBUF, 65536, 131072, "SO_RCVBUF 65536 (doubled)" },
		{ SOL_SOCKET, SO_SNDBUF, 65536, 131072, "SO_SNDBUF 65536 (doubled)" },
		{ SOL_SOCKET, SO_REUSEADDR, 1, 1, "SO_REUSEADDR 1" },
	};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = opts[i].value, got = -1;
		socklen_t gl = sizeof(got);
		errno = 0;
		int rc = setsockopt(fd, opts[i].level, opts[i].name, &v, sizeof(v));
		int e = errno;
		getsockopt(fd, opts[i].level, opts[i].name, &got, &gl);
		char name[80];
		snprintf(name, sizeof(name), "%s set and read back", opts[i].what);
		result(rc == 0 && got == opts[i].want, name, "expected set 0 / %d, got set %d%s%s / %d", opts[i].want, rc,
		       rc ? "/" : "", rc ? errname(e) : "", got);
	}
	int zero = 0, tiny = 10;
	EXPECT_ERR("TCP_KEEPIDLE 0", setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &zero, sizeof(zero)), EINVAL);
	EXPECT_ERR("TCP_KEEPCNT 0", setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &zero, sizeof(zero)), EINVAL);
	EXPECT_ERR("TCP_MAXSEG 10", setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &tiny, sizeof(tiny)), EINVAL);
	int type = 0;
	socklen_t tl = sizeof(type);
	getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl);
	expect_int("SO_TYPE", type, SOCK_STREAM);
	close_conn(fd, key);
	test_notsent_lowat();
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void test_shutdown(void)
{
	unsigned char b[256];
	ssize_t r;
	/* The peer half-closes: we read its data, then EOF, and can still send. */
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	ASK("SEND %d 30", key);
	ASK("SHUTWR %d", key);
	wait_events(fd, POLLRDHUP, 2000);
	expect_ready("after the peer's FIN", fd, POLLIN | POLLOUT | POLLRDHUP);
	expect_int("TCP_INFO state after the peer's FIN", wait_state(fd, TCP_CLOSE_WAIT), TCP_CLOSE_WAIT);
	r = recv(fd, b, sizeof(b), 0);
	result(r == 30 && is_pattern(b, 30, 0), "data before the peer's FIN", "expected 30, got %zd", r);
	expect_int("recv at EOF", recv(fd, b, sizeof(b), 0), 0);
	expect_int("recv at EOF again", recv(fd, b, sizeof(b), MSG_DONTWAIT), 0);
	{
		/* Linux's recvmmsg counts an empty read as a message: every
		 * entry gets the EOF. */
		struct iovec iv[3] = { { b, 10 }, { b + 10, 10 }, { b + 20, 10 } };
		struct mmsghdr mv[3];
		memset(mv, 0, sizeof(mv));
		for (int i = 0; i < 3; i++) {
			mv[i].msg_hdr.msg_iov = &iv[i];
			mv[i].msg_hdr.msg_iovlen = 1;
			mv[i].msg_len = 77;
		}
		int n = recvmmsg(fd, mv, 3, 0, NULL);
		result(n == 3 && mv[0].msg_len == 0 && mv[1].msg_len == 0 && mv[2].msg_len == 0,
		       "recvmmsg at EOF fills every entry with an empty read", "got %d (%u %u %u)", n, mv[0].msg_len,
		       mv[1].msg_len, mv[2].msg_len);
	}
	ask_send("RECV %d 50 3000", key);
	ssize_t s = send_pattern(fd, 50, 0);
	struct peer_recv pr = parse_recv(ask_wait());
	result(s == 50 && pr.got == 50 && pr.hash == pattern_hash(50) && !pr.eof,
	       "half-closed: we still send, the peer receives", "sent %zd, peer got %zu (eof %d)", s, pr.got, pr.eof);
	shutdown(fd, SHUT_WR);
	pr = parse_recv(ASK("RECV %d 1 2000", key));
	result(pr.got == 0 && pr.eof, "our SHUT_WR: the peer reads EOF", "got %zu, eof %d, err %s", pr.got, pr.eof,
	       errname(pr.err));
	usleep(50000);
	/* Linux keeps POLLOUT after SHUT_WR so that a writer gets its EPIPE. */
	expect_ready("both directions shut", fd, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	close(fd);
	ASK("CLOSE %d", key);

	/* Our SHUT_WR: the peer reads EOF, we still read, send fails with EPIPE + SIGPIPE. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	EXPECT_OK("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	pr = parse_recv(ASK("RECV %d 1 2000", key));
	result(pr.got == 0 && pr.eof, "the peer reads EOF after our SHUT_WR", "got %zu, eof %d, err %s", pr.got,
	       pr.eof, errname(pr.err));
	expect_int("TCP_INFO state after our FIN is acked", wait_state(fd, TCP_FIN_WAIT2), TCP_FIN_WAIT2);
	expect_ready("after our SHUT_WR, idle", fd, POLLOUT);
	ASK("SEND %d 20", key);
	wait_bytes(fd, 20, 2);
	r = recv(fd, b, sizeof(b), 0);
	result(r == 20 && is_pattern(b, 20, 0), "after SHUT_WR we still receive", "expected 20, got %zd", r);
	struct sigaction sa = { .sa_handler = on_sigpipe }, old;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, &old);
	sigpipes = 0;
	EXPECT_ERR("send after SHUT_WR", send(fd, b, 10, 0), EPIPE);
	expect_int("send after SHUT_WR raised SIGPIPE", sigpipes, 1);
	EXPECT_ERR("send(MSG_NOSIGNAL) after SHUT_WR", send(fd, b, 10, MSG_NOSIGNAL), EPIPE);
	expect_int("MSG_NOSIGNAL: no SIGPIPE", sigpipes, 1);
	EXPECT_ERR("write after SHUT_WR", write(fd, b, 10), EPIPE);
	expect_int("write after SHUT_WR raised SIGPIPE", sigpipes, 2);
	sigaction(SIGPIPE, &old, NULL);
	close_conn(fd, key);

	/* SHUT_RD: reads return 0 at once, nothing goes to the peer, sending still works. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	EXPECT_OK("shutdown(SHUT_RD)", shutdown(fd, SHUT_RD));
	expect_ready("after SHUT_RD", fd, POLLIN | POLLOUT | POLLRDHUP);
	double t0 = now_s();
	r = recv(fd, b, sizeof(b), 0);
	result(r == 0 && now_s() - t0 < 0.5, "recv after SHUT_RD returns 0 at once", "got %zd after %.3f s", r,
	       now_s() - t0);
	pr = parse_recv(ASK("RECV %d 1 300", key));
	result(pr.got == 0 && !pr.eof && pr.err == EAGAIN, "SHUT_RD sends nothing to the peer",
	       "peer: got %zu, eof %d, err %s", pr.got, pr.eof, errname(pr.err));
	ask_send("RECV %d 40 3000", key);
	s = send_pattern(fd, 40, 0);
	pr = parse_recv(ask_wait());
	result(s == 40 && pr.got == 40 && pr.hash == pattern_hash(40), "after SHUT_RD we still send",
	       "sent %zd, peer got %zu", s, pr.got);
	ASK("SEND %d 10", key);
	usleep(100000);
	r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	result(r == 10 && is_pattern(b, 10, 0), "data arriving after SHUT_RD is still readable (as Linux)",
	       "expected 10, got %zd/%s", r, r < 0 ? errname(errno) : "-");
	expect_int("TCP_INFO state after SHUT_RD", tcp_state(fd), TCP_ESTABLISHED);
	close_conn(fd, key);
}

static void test_resets(void)
{
	unsigned char b[256];
	/* Peer aborts: readiness, SO_ERROR (cleared by reading), then recv 0 and EPIPE. */
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	ASK("LINGER0 %d", key);
	wait_events(fd, POLLERR, 2000);
	expect_ready("after the peer's RST", fd, POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP);
	expect_int("TCP_INFO state after RST", tcp_state(fd), TCP_CLOSE);
	int e = sockerr(fd);
	result(e == ECONNRESET, "SO_ERROR after the peer's RST", "expected ECONNRESET, got %s", errname(e));
	expect_int("SO_ERROR is cleared by reading it", sockerr(fd), 0);
	expect_ready("after RST, error consumed", fd, POLLIN | POLLOUT | POLLHUP | POLLRDHUP);
	expect_int("recv after RST with the error consumed", recv(fd, b, sizeof(b), 0), 0);
	EXPECT_ERR("send after RST", send(fd, b, 1, MSG_NOSIGNAL), EPIPE);
	close(fd);

	/* Peer aborts with data queued here: recv returns the data, then ECONNRESET, then 0; send EPIPE. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	ASK("SEND %d 10", key);
	wait_bytes(fd, 10, 2);
	ASK("LINGER0 %d", key);
	wait_events(fd, POLLERR, 2000);
	ssize_t r = recv(fd, b, sizeof(b), 0);
	result(r == 10 && is_pattern(b, 10, 0), "queued data is still read after the peer's RST",
	       "expected 10, got %zd/%s", r, r < 0 ? errname(errno) : "-");
	EXPECT_ERR("then recv reports the RST", recv(fd, b, sizeof(b), 0), ECONNRESET);
	expect_int("then recv returns 0", recv(fd, b, sizeof(b), 0), 0);
	EXPECT_ERR("send after the RST was reported", send(fd, b, 1, MSG_NOSIGNAL), EPIPE);
	close(fd);

	/* Peer aborts while we are blocked in recv. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	ask_send("LINGER0 %d", key);
	set_rcvtimeo(fd, 3000);
	EXPECT_ERR("blocked recv when the peer aborts", recv(fd, b, sizeof(b), 0), ECONNRESET);
	ask_wait();
	close(fd);

	/* We close with unread data: the peer sees ECONNRESET. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	ASK("SEND %d 100", key);
	wait_bytes(fd, 100, 2);
	close(fd);
	struct peer_recv pr = parse_recv(ASK("RECV %d 1 2000", key));
	result(pr.got == 0 && pr.err == ECONNRESET, "close with unread data: the peer gets ECONNRESET",
	       "peer: got %zu, eof %d, err %s", pr.got, pr.eof, errname(pr.err));
	ASK("CLOSE %d", key);

	/* Our SO_LINGER {1,0}: same for the peer. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	struct linger lg = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	struct linger lgot = { 0, 0 };
	socklen_t ll = sizeof(lgot);
	getsockopt(fd, SOL_SOCKET, SO_LINGER, &lgot, &ll);
	result(lgot.l_onoff == 1 && lgot.l_linger == 0, "SO_LINGER {1,0} reads back", "got {%d,%d}", lgot.l_onoff,
	       lgot.l_linger);
	close(fd);
	pr = parse_recv(ASK("RECV %d 1 2000", key));
	result(pr.got == 0 && pr.err == ECONNRESET, "our SO_LINGER {1,0} close: the peer gets ECONNRESET",
	       "peer: got %zu, eof %d, err %s", pr.got, pr.eof, errname(pr.err));
	ASK("CLOSE %d", key);
}

/* Fills the send buffer (non-blocking) until EAGAIN; returns bytes sent. */
static size_t fill_until_eagain(int fd)
{
	static unsigned char b[16384];
	size_t total = 0;
	memset(b, 'f', sizeof(b));
	for (int idle = 0; idle < 20;) {
		ssize_t r = send(fd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r > 0) {
			total += (size_t)r;
			idle = 0;
		} else if (r < 0 && errno == EAGAIN) {
			idle++;   /* the peer's window may still be opening: let in-flight ACKs land */
			usleep(2000);
		} else {
			break;
		}
	}
	return total;
}

static void test_full_pipe(void)
{
	/* SO_SNDTIMEO on a blocking socket whose peer does not read. */
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int sb = 32768;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	struct timeval tv = { 0, 300000 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	static unsigned char b[65536];
	size_t total = 0;
	ssize_t r = 0;
	double t0 = 0, dt = 0;
	int err = 0;
	for (int i = 0; i < 2000; i++) {
		t0 = now_s();
		errno = 0;
		r = send(fd, b, sizeof(b), MSG_NOSIGNAL);
		err = errno;
		dt = now_s() - t0;
		if (r <= 0)
			break;
		total += (size_t)r;
	}
	result(r == -1 && err == EAGAIN && dt > 0.25 && dt < 1.5, "SO_SNDTIMEO 300 ms on a full pipe",
	       "expected -1/EAGAIN after ~0.3 s, got %zd/%s after %.3f s (%zu bytes went)", r, errname(err), dt,
	       total);
	expect_ready("full send buffer", fd, 0);
	close_conn(fd, key);

	/* Edge-triggered EPOLLOUT: one edge when the peer drains, not one per ACK. */
	fd = open_conn(&key);
	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	fcntl(fd, F_SETFL, O_NONBLOCK);
	/* Full means: not writable for 300 ms (delayed ACKs of the last bytes may free room meanwhile). */
	total = fill_until_eagain(fd);
	for (int i = 0; i < 20 && wait_events(fd, POLLOUT, 300); i++)
		total += fill_until_eagain(fd);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.fd = fd };
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	struct epoll_event out;
	int early = epoll_wait(ep, &out, 1, 0);
	expect_int("EPOLLET|EPOLLOUT on a full buffer: no event", early, 0);
	if (early) {   /* say whether the buffer really had room again */
		unsigned ev_now = wait_events(fd, POLLOUT, 0);
		size_t more = fill_until_eagain(fd);
		printf("INFO: %s: the early EPOLLOUT: poll said %s, then %zu more bytes were accepted\n", role,
		       events_str(ev_now), more);
		total += more;
	}
	ask_send("DRAIN %d %zu 2048 2", key, total);
	ask_wait();
	int edges = 0;
	double end = now_s() + (double)total / 2048 * 0.0025 + 0.5;
	while (now_s() < end)
		if (epoll_wait(ep, &out, 1, 50) == 1 && (out.events & EPOLLOUT))
			edges++;
	result(edges == 1, "EPOLLET|EPOLLOUT while the peer drains slowly: one edge",
	       "expected 1 wakeup, got %d (%zu bytes drained)", edges, total);
	r = send(fd, b, 1000, MSG_NOSIGNAL);
	result(r == 1000, "writable after the edge", "send gave %zd", r);
	close(ep);
	close_conn(fd, key);
}

static void test_keepalive(void)
{
	if (peer_preloaded) {
		printf("INFO: %s: keepalive against a silent peer skipped (the peer is under libvma, nft cannot silence it)\n",
		       role);
		return;
	}
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int one = 1, two = 2;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &two, sizeof(two));
	ASK("SILENT %d 1", key);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	set_rcvtimeo(fd, 8000);
	char c;
	double t0 = now_s();
	errno = 0;
	ssize_t r = recv(fd, &c, 1, 0);
	int err = errno;
	double dt = now_s() - t0;
	result(r == -1 && err == ETIMEDOUT && dt > 2 && dt < 5.5,
	       "keepalive (idle 1, intvl 1, cnt 2) against a silent peer",
	       "expected -1/ETIMEDOUT after ~3 s, got %zd/%s after %.2f s", r, errname(err), dt);
	expect_int("TCP_INFO state after keepalive timeout", tcp_state(fd), TCP_CLOSE);
	ASK("SILENT %d 0", key);
	close_conn(fd, key);
}

static void test_sendfile(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	char path[] = "/tmp/tcp_semantics.XXXXXX";
	int file = mkstemp(path);
	unlink(path);
	static unsigned char b[65536];
	const size_t size = 1 << 20;
	for (size_t off = 0; off < size; off += sizeof(b)) {
		fill_pattern(b, sizeof(b), off);
		if (write(file, b, sizeof(b)) != (ssize_t)sizeof(b))
			break;
	}
	ask_send("RECV %d %zu 5000", key, size);
	off_t off = 0;
	size_t sent = 0;
	while (sent < size) {
		ssize_t r = sendfile(fd, file, &off, size - sent);
		if (r <= 0)
			break;
		sent += (size_t)r;
	}
	struct peer_recv pr = parse_recv(ask_wait());
	result(sent == size && off == (off_t)size && pr.got == size && pr.hash == pattern_hash(size),
	       "sendfile of 1 MiB arrives intact", "sent %zu, offset %lld, peer got %zu hash %s", sent, (long long)off,
	       pr.got, pr.hash == pattern_hash(size) ? "ok" : "BAD");
	close(file);
	close_conn(fd, key);
}

/* Issue 13 item 4: tcp_semantics.sh sets `ip route replace 198.18.0.0/24
 * dev B mtu 1400 advmss 1300` in the test namespace and TCP_SEM_ROUTE=1
 * for this section. As Linux: our SYN / SYN-ACK announces 1300 (the peer's
 * TCP_MAXSEG), we send within the path MTU (1400 - 40, less timestamps). */
static void test_route_mss(void)
{
	if (!getenv("TCP_SEM_ROUTE")) {
		printf("INFO: %s: routemss needs the route set by tcp_semantics.sh (TCP_SEM_ROUTE)\n", role);
		return;
	}
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int ts = 0;
	int mss = connected_mss(fd, &ts, NULL);
	result(mss == 1360 - ts, "route mtu 1400: our TCP_MAXSEG is the path MTU's", "expected %d, got %d", 1360 - ts,
	       mss);
	int pmss = 0, pstate = 0, popts = 0;
	unsigned prcv = 0;
	sscanf(ASK("INFO %d", key), "OK %d %d %d %u", &pmss, &pstate, &popts, &prcv);
	int pts = (popts & TCPI_OPT_TIMESTAMPS) ? 12 : 0;
	result(pmss == 1300 - pts, "route advmss 1300: the MSS our SYN announced (the peer's TCP_MAXSEG)",
	       "expected %d, got %d", 1300 - pts, pmss);
	const size_t size = 256 * 1024;
	ask_send("RECV %d %zu 5000", key, size);
	ssize_t sent = send_pattern(fd, size, MSG_NOSIGNAL);
	struct peer_recv pr = parse_recv(ask_wait());
	sscanf(ASK("INFO %d", key), "OK %d %d %d %u", &pmss, &pstate, &popts, &prcv);
	result(sent == (ssize_t)size && pr.got == size && prcv >= 1000 && prcv <= (unsigned)(1360 - pts),
	       "route mtu 1400: the segments we send fit it (the peer's tcpi_rcv_mss)",
	       "sent %zd, peer got %zu, its rcv_mss %u (at most %d)", sent, pr.got, prcv, 1360 - pts);
	close_conn(fd, key);
}

/* Reads everything the pipe holds (non-blocking read end), checking it is
 * the pattern from *off on; returns 0 on a mismatch. */
static int pipe_drain_pattern(int rd, size_t *off)
{
	static unsigned char b[65536];
	int ok = 1;
	for (;;) {
		ssize_t r = read(rd, b, sizeof(b));
		if (r <= 0)
			return ok;
		ok = ok && is_pattern(b, (size_t)r, *off);
		*off += (size_t)r;
	}
}

/* splice(2) between the connection and a pipe, both ways: the kernel
 * socket under an offloaded fd holds no connection, so libvma must move the
 * bytes itself (issue 13 item 5). */
static void test_splice(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	const size_t size = 1 << 20;
	static unsigned char b[65536];
	int p[2];
	if (pipe2(p, O_NONBLOCK) < 0) {
		result(0, "pipe2", "%s", errname(errno));
		close_conn(fd, key);
		return;
	}
	loff_t off = 0;

	/* pipe -> socket: the pipe is fed in 40000-byte writes, SPLICE_F_MORE
	 * while more is to come. */
	ask_send("RECV %d %zu 5000", key, size);
	size_t queued = 0, sent = 0;
	ssize_t r = 0;
	int err = 0;
	while (sent < size) {
		if (queued == sent) {
			size_t k = size - queued < 40000 ? size - queued : 40000;
			fill_pattern(b, k, queued);
			if (write(p[1], b, k) != (ssize_t)k)
				break;
			queued += k;
		}
		errno = 0;
		r = splice(p[0], NULL, fd, NULL, queued - sent, queued < size ? SPLICE_F_MORE : 0);
		err = errno;
		if (r <= 0)
			break;
		sent += (size_t)r;
	}
	struct peer_recv pr = parse_recv(ask_wait());
	result(sent == size && pr.got == size && pr.hash == pattern_hash(size),
	       "splice pipe -> socket of 1 MiB arrives intact", "spliced %zu (last %zd/%s), peer got %zu hash %s", sent, r,
	       r < 0 ? errname(err) : "-", pr.got, pr.hash == pattern_hash(size) ? "ok" : "BAD");
	EXPECT_ERR("splice from an empty pipe (O_NONBLOCK): EAGAIN", splice(p[0], NULL, fd, NULL, 4096, 0), EAGAIN);
	if (write(p[1], b, 100) != 100)
		result(0, "write 100 bytes into the pipe", "%s", errname(errno));
	EXPECT_ERR("splice pipe -> socket with an offset on the pipe: ESPIPE", splice(p[0], &off, fd, NULL, 100, 0),
		   ESPIPE);
	EXPECT_ERR("splice pipe -> socket with an offset on the socket: EINVAL", splice(p[0], NULL, fd, &off, 100, 0),
		   EINVAL);
	int queued_in_pipe = -1;
	ioctl(p[0], FIONREAD, &queued_in_pipe);
	expect_int("the refused splices left the pipe's bytes", queued_in_pipe, 100);
	if (read(p[0], b, sizeof(b)) != 100)
		result(0, "read the 100 bytes back", "%s", errname(errno));

	/* socket -> pipe: the peer sends 1 MiB, each splice is drained from
	 * the pipe and checked. */
	ask_send("SEND %d %zu", key, size);
	ask_wait();
	size_t got = 0;
	int intact = 1;
	r = 0;
	err = 0;
	while (got < size) {
		errno = 0;
		r = splice(fd, NULL, p[1], NULL, size - got, 0);
		err = errno;
		if (r <= 0)
			break;
		size_t before = got;
		intact = pipe_drain_pattern(p[0], &got) && intact;
		if (got - before != (size_t)r) {
			intact = 0;
			break;
		}
	}
	result(got == size && intact, "splice socket -> pipe of 1 MiB arrives intact",
	       "got %zu of %zu (last %zd/%s), pattern %s", got, size, r, r < 0 ? errname(err) : "-", intact ? "ok" : "BAD");

	/* A full pipe: EAGAIN under SPLICE_F_NONBLOCK and the socket keeps its bytes. */
	ask_send("SEND %d 3000", key);
	ask_wait();
	wait_bytes(fd, 3000, 3);
	size_t filler = 0;
	memset(b, 'x', sizeof(b));
	for (ssize_t w; (w = write(p[1], b, sizeof(b))) > 0;)
		filler += (size_t)w;
	EXPECT_ERR("splice socket -> full pipe (SPLICE_F_NONBLOCK): EAGAIN",
		   splice(fd, NULL, p[1], NULL, 3000, SPLICE_F_NONBLOCK), EAGAIN);
	int inq = -1;
	ioctl(fd, FIONREAD, &inq);
	expect_int("the socket keeps its 3000 bytes", inq, 3000);
	while (read(p[0], b, sizeof(b)) > 0)
		;
	EXPECT_ERR("splice socket -> pipe with an offset on the pipe: ESPIPE", splice(fd, NULL, p[1], &off, 3000, 0),
		   ESPIPE);
	EXPECT_ERR("splice socket -> pipe with an offset on the socket: EINVAL", splice(fd, &off, p[1], NULL, 3000, 0),
		   EINVAL);
	got = 0;
	r = splice(fd, NULL, p[1], NULL, 3000, 0);
	intact = r == 3000 && pipe_drain_pattern(p[0], &got) && got == 3000;
	result(intact, "then the 3000 bytes splice out intact", "splice gave %zd, pipe held %zu", r, got);

	/* Non-blocking socket with nothing queued: EAGAIN; after the peer's FIN: 0. */
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	EXPECT_ERR("splice from an empty O_NONBLOCK socket: EAGAIN", splice(fd, NULL, p[1], NULL, 4096, 0), EAGAIN);
	fcntl(fd, F_SETFL, fl);
	ASK("SHUTWR %d", key);
	set_rcvtimeo(fd, 3000);
	errno = 0;
	r = splice(fd, NULL, p[1], NULL, 4096, 0);
	result(r == 0, "splice at EOF returns 0", "got %zd/%s", r, r < 0 ? errname(errno) : "-");
	set_rcvtimeo(fd, 0);

	/* pipe -> a full O_NONBLOCK socket: EAGAIN, and the pipe keeps its bytes. */
	int sb = 32768;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	/* Full: nothing more goes in after a pause (the peer's window closed). */
	size_t stuffed = fill_until_eagain(fd);
	for (int i = 0; i < 50; i++) {
		usleep(100000);
		size_t more = fill_until_eagain(fd);
		stuffed += more;
		if (!more)
			break;
	}
	if (write(p[1], b, 100) != 100)
		result(0, "write 100 bytes into the pipe", "%s", errname(errno));
	/* A peer that still opens its window by a few bytes now and then may
	 * let the 100 bytes in (our stack frees send space per byte acked,
	 * Linux per buffer): either way no byte may be lost. */
	errno = 0;
	r = splice(p[0], NULL, fd, NULL, 100, 0);
	err = errno;
	queued_in_pipe = -1;
	ioctl(p[0], FIONREAD, &queued_in_pipe);
	result((r == -1 && err == EAGAIN && queued_in_pipe == 100) || (r == 100 && queued_in_pipe == 0),
	       "splice pipe -> full O_NONBLOCK socket: EAGAIN with the pipe's bytes kept (or all sent)",
	       "splice gave %zd/%s, pipe holds %d", r, r < 0 ? errname(err) : "-", queued_in_pipe);
	while (read(p[0], b, sizeof(b)) > 0)
		;
	fcntl(fd, F_SETFL, fl);
	size_t expect_drained = stuffed + (r > 0 ? (size_t)r : 0);
	pr = parse_recv(ASK("RECV %d %zu 3000", key, expect_drained));
	result(pr.got == expect_drained, "the peer gets every byte sent before and by the splice",
	       "expected %zu, got %zu", expect_drained, pr.got);

	/* Neither end a pipe: EINVAL. */
	char path[] = "/tmp/tcp_semantics.XXXXXX";
	int file = mkstemp(path);
	unlink(path);
	EXPECT_ERR("splice socket -> regular file: EINVAL", splice(fd, NULL, file, NULL, 100, 0), EINVAL);
	close(file);
	close(p[0]);
	close(p[1]);
	close_conn(fd, key);
}

/* ---- signals: every blocking call, with and without SA_RESTART ----
 * SIGWINCH has a handler with SA_RESTART, SIGUSR2 one without. A sender
 * thread (every signal blocked in it) delivers them to the test thread at
 * set times, or to the process (kill) so that the kernel picks the only
 * thread that takes them. Linux (signal(7)): a handler without SA_RESTART
 * makes a blocked call fail with EINTR; with SA_RESTART accept, connect,
 * recv* and send* go on (not with SO_RCVTIMEO/SO_SNDTIMEO), while
 * epoll_wait, poll and select always fail with EINTR. "Restart then
 * interrupt" proves a restart: SIGWINCH at 0.1 s, SIGUSR2 at 0.5 s, the
 * call must fail only at 0.5 s. A watchdog shuts the socket down 3 s after
 * the last signal so a call that missed it fails instead of hanging. */
static volatile sig_atomic_t sig_restart_hits, sig_intr_hits, sig_term_hits;

static void on_sig_restart(int sig)
{
	(void)sig;
	sig_restart_hits++;
}

static void on_sig_intr(int sig)
{
	(void)sig;
	sig_intr_hits++;
}

static void on_sig_term(int sig)
{
	(void)sig;
	sig_term_hits++;
}

struct sig_plan {
	pthread_t target;
	int restart_ms, intr_ms, intr_sig;   /* -1: not sent */
	int to_process;                      /* kill(getpid()) instead of pthread_kill */
	int watch_fd;                        /* shut down if the call outlives the signals by 3 s */
	volatile int done;
	int watchdog_fired;
};

static void sig_sleep_until(double t)
{
	for (double d = t - now_s(); d > 0; d = t - now_s()) {
		struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
		nanosleep(&ts, NULL);
	}
}

static void sig_deliver(struct sig_plan *p, int sig)
{
	if (p->to_process)
		kill(getpid(), sig);
	else
		pthread_kill(p->target, sig);
}

static void *sig_sender(void *arg)
{
	struct sig_plan *p = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	double t0 = now_s(), last = t0;
	if (p->restart_ms >= 0) {
		sig_sleep_until(t0 + p->restart_ms / 1000.0);
		if (!p->done)
			sig_deliver(p, SIGWINCH);
		last = now_s();
	}
	if (p->intr_ms >= 0) {
		sig_sleep_until(t0 + p->intr_ms / 1000.0);
		if (!p->done)
			sig_deliver(p, p->intr_sig);
		last = now_s();
	}
	while (!p->done && now_s() < last + 3)
		usleep(10000);
	if (!p->done && p->watch_fd >= 0) {
		p->watchdog_fired = 1;
		shutdown(p->watch_fd, SHUT_RDWR);
	}
	return NULL;
}

enum sig_want {
	SIG_WANT_EINTR_EARLY,   /* -1/EINTR at the first signal (0.1 s) */
	SIG_WANT_EINTR_LATE,    /* -1/EINTR at the second (0.5 s): restarted after the first */
};

struct sig_call {
	int kind;   /* what to call, below */
	int fd;
	const struct sockaddr_in *to;
};
enum { SC_CONNECT, SC_ACCEPT, SC_RECV, SC_RECVMSG, SC_RECVMMSG, SC_READ, SC_SEND, SC_WRITEV, SC_EPOLL, SC_POLL,
       SC_SELECT };

static long sig_do_call(const struct sig_call *c)
{
	static unsigned char big[65536];
	char b[64];
	struct iovec iov = { .iov_base = big, .iov_len = sizeof(big) };
	switch (c->kind) {
	case SC_CONNECT: return connect(c->fd, (const struct sockaddr *)c->to, sizeof(*c->to));
	case SC_ACCEPT: return accept(c->fd, NULL, NULL);
	case SC_RECV: return recv(c->fd, b, sizeof(b), 0);
	case SC_READ: return read(c->fd, b, sizeof(b));
	case SC_RECVMSG: {
		struct iovec v = { .iov_base = b, .iov_len = sizeof(b) };
		struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
		return recvmsg(c->fd, &m, 0);
	}
	case SC_RECVMMSG: {
		struct iovec v = { .iov_base = b, .iov_len = sizeof(b) };
		struct mmsghdr mm = { .msg_hdr = { .msg_iov = &v, .msg_iovlen = 1 } };
		return recvmmsg(c->fd, &mm, 1, 0, NULL);
	}
	case SC_SEND: return send(c->fd, big, sizeof(big), MSG_NOSIGNAL);
	case SC_WRITEV: return writev(c->fd, &iov, 1);
	case SC_EPOLL: {
		int ep = epoll_create1(0);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = c->fd }, out;
		epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
		int n = epoll_wait(ep, &out, 1, 4000);
		int e = errno;
		close(ep);
		errno = e;
		return n;
	}
	case SC_POLL: {
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		return poll(&pfd, 1, 4000);
	}
	case SC_SELECT: {
		fd_set r;
		FD_ZERO(&r);
		FD_SET(c->fd, &r);
		struct timeval tv = { 4, 0 };
		return select(c->fd + 1, &r, NULL, NULL, &tv);
	}
	}
	return -2;
}

/* One blocking call under a plan of signals; checks the outcome. A send
 * interrupted after it queued bytes returns their count (Linux, with or
 * without SA_RESTART), which counts as interrupted. */
static void sig_case(const char *name, const struct sig_call *c, int restart_ms, int intr_ms, int intr_sig,
		     int to_process, enum sig_want want)
{
	sig_restart_hits = sig_intr_hits = sig_term_hits = 0;
	struct sig_plan plan = { .target = pthread_self(), .restart_ms = restart_ms, .intr_ms = intr_ms,
				 .intr_sig = intr_sig, .to_process = to_process, .watch_fd = c->fd };
	pthread_t th;
	if (pthread_create(&th, NULL, sig_sender, &plan) != 0) {
		result(0, name, "pthread_create failed");
		return;
	}
	double t0 = now_s();
	errno = 0;
	long rc = sig_do_call(c);
	int err = errno;
	double dt = now_s() - t0;
	plan.done = 1;
	pthread_join(th, NULL);
	int partial = (c->kind == SC_SEND || c->kind == SC_WRITEV) && rc > 0 && rc < 65536;
	int failed_eintr = (rc == -1 && err == EINTR) || partial;
	double lo = want == SIG_WANT_EINTR_EARLY ? 0.08 : 0.45, hi = want == SIG_WANT_EINTR_EARLY ? 0.45 : 1.5;
	int hits = sig_restart_hits + sig_intr_hits + sig_term_hits;
	int want_hits = (restart_ms >= 0) + (intr_ms >= 0);
	if (partial) {
		/* Bytes moved before the first signal: Linux returns their
		 * count then, SA_RESTART or not. */
		lo = 0.08;
		want_hits = 1;
	}
	result(failed_eintr && dt >= lo && dt < hi && hits == want_hits && !plan.watchdog_fired, name,
	       "expected -1/EINTR after %.1f-%.1f s with %d handler run(s), got %ld/%s after %.3f s, %d handler "
	       "run(s)%s",
	       lo, hi, want_hits, rc, rc == -1 ? errname(err) : "-", dt, hits,
	       plan.watchdog_fired ? " (the call only returned when the watchdog shut the socket down)" : "");
}

static void sig_install(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/* Every blocking call on one blocking socket c: plain interrupt, restart
 * then interrupt (restartable calls), SA_RESTART still interrupting
 * (epoll/poll/select, and a call with a timeout set), and a signal sent to
 * the process. */
static void sig_calls_on(const char *what, struct sig_call c, int restartable)
{
	char name[160];
	snprintf(name, sizeof(name), "%s: a handler without SA_RESTART interrupts it", what);
	sig_case(name, &c, -1, 100, SIGUSR2, 0, SIG_WANT_EINTR_EARLY);
	if (restartable) {
		snprintf(name, sizeof(name), "%s: an SA_RESTART handler restarts it (EINTR only at the next signal)",
			 what);
		sig_case(name, &c, 100, 500, SIGUSR2, 0, SIG_WANT_EINTR_LATE);
	} else {
		snprintf(name, sizeof(name), "%s: never restarted, even by an SA_RESTART handler", what);
		sig_case(name, &c, -1, 100, SIGWINCH, 0, SIG_WANT_EINTR_EARLY);
	}
	snprintf(name, sizeof(name), "%s: a signal sent to the process interrupts it", what);
	sig_case(name, &c, -1, 100, SIGUSR2, 1, SIG_WANT_EINTR_EARLY);
}

/* A handler that sends on an offloaded socket, delivered while this thread
 * is inside our stack (it holds a lane's lock most of the time it spends in
 * a receive that polls). Linux has no such lock; we must not deadlock. */
static int reentry_fd = -1;
static volatile sig_atomic_t reentry_sent, reentry_failed;

static void on_sig_reentry(int sig)
{
	(void)sig;
	int e = errno;
	char c = 'r';
	if (send(reentry_fd, &c, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
		reentry_sent++;
	else
		reentry_failed++;
	errno = e;
}

struct reentry_plan {
	pthread_t target;
	int count;
	volatile int done, main_done;
};

static void *reentry_sender(void *arg)
{
	struct reentry_plan *p = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (int i = 0; i < p->count; i++) {
		pthread_kill(p->target, SIGUSR1);
		usleep(500);
	}
	p->done = 1;
	for (int i = 0; i < 500 && !p->main_done; i++)
		usleep(10000);
	if (!p->main_done) {
		printf("FAIL: %s: a handler sending on an offloaded socket inside our stack: the thread is stuck "
		       "5 s after the last signal (deadlock)\n", role);
		fflush(stdout);
		_exit(1);
	}
	return NULL;
}

static void test_signal_reentry(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	reentry_fd = fd;
	reentry_sent = reentry_failed = 0;
	sig_install(SIGUSR1, on_sig_reentry, SA_RESTART);
	struct reentry_plan plan = { .target = pthread_self(), .count = 2000 };
	pthread_t th;
	pthread_create(&th, NULL, reentry_sender, &plan);
	char b[64];
	while (!plan.done) {
		recv(fd, b, sizeof(b), MSG_DONTWAIT);   /* a pass over the rings, under the lane's lock */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		poll(&pfd, 1, 0);
	}
	plan.main_done = 1;
	pthread_join(th, NULL);
	sig_install(SIGUSR1, SIG_DFL, 0);
	int sent = reentry_sent, failed = reentry_failed;
	/* Signals sent while one is pending merge: fewer handler runs than sends. */
	result(sent >= 100 && failed == 0, "2000 signals whose handler sends on an offloaded socket",
	       "expected every handler's send to go (>= 100 runs), got %d sent, %d failed", sent, failed);
	struct peer_recv pr = parse_recv(ASK("RECV %d %d 3000", key, sent));
	unsigned char *exp = malloc((size_t)sent + 1);
	memset(exp, 'r', (size_t)sent + 1);
	uint32_t want = fnv(2166136261u, exp, (size_t)sent);
	free(exp);
	result(pr.got == (size_t)sent && pr.hash == want, "the peer gets the handlers' bytes, in one piece",
	       "expected %d bytes, got %zu (hash %s)", sent, pr.got, pr.hash == want ? "ok" : "differs");
	close_conn(fd, key);
}

static void test_signals(void)
{
	sig_install(SIGWINCH, on_sig_restart, SA_RESTART);
	sig_install(SIGUSR2, on_sig_intr, 0);
	char what[96];
	if (is_client()) {
		/* connect: SYNs to 9501 are dropped, so it stays blocked. */
		struct sockaddr_in silent = sin_of(peer_ip, SILENT_PORT);
		for (int k = 0; k < 3; k++) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			struct sig_call c = { SC_CONNECT, fd, &silent };
			const char *names[] = { "connect: a handler without SA_RESTART interrupts it",
						"connect: an SA_RESTART handler restarts it (EINTR only at the next signal)",
						"connect: a signal sent to the process interrupts it" };
			if (k == 0)
				sig_case(names[k], &c, -1, 100, SIGUSR2, 0, SIG_WANT_EINTR_EARLY);
			else if (k == 1)
				sig_case(names[k], &c, 100, 500, SIGUSR2, 0, SIG_WANT_EINTR_LATE);
			else
				sig_case(names[k], &c, -1, 100, SIGUSR2, 1, SIG_WANT_EINTR_EARLY);
			if (k == 0) {
				/* The handshake goes on after EINTR (a blocking
				 * connect would wait for it again). */
				fcntl(fd, F_SETFL, O_NONBLOCK);
				EXPECT_ERR("connect again after EINTR: in progress",
					   connect(fd, (struct sockaddr *)&silent, sizeof(silent)), EALREADY);
			}
			close(fd);
		}
	} else {
		struct sig_call c = { SC_ACCEPT, test_listen_fd, NULL };
		sig_calls_on("accept", c, 1);
		set_rcvtimeo(test_listen_fd, 3000);
		sig_case("accept with SO_RCVTIMEO: an SA_RESTART handler interrupts it", &c, -1, 100, SIGWINCH, 0,
			 SIG_WANT_EINTR_EARLY);
		set_rcvtimeo(test_listen_fd, 0);
	}

	/* A connection in our role that the peer neither writes to nor reads. */
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	static const struct { int kind; const char *name; int restartable; } rx[] = {
		{ SC_RECV, "recv", 1 },	      { SC_READ, "read", 1 }, { SC_RECVMSG, "recvmsg", 1 },
		{ SC_EPOLL, "epoll_wait", 0 }, { SC_POLL, "poll", 0 }, { SC_SELECT, "select", 0 },
	};
	for (size_t i = 0; i < sizeof(rx) / sizeof(rx[0]); i++) {
		snprintf(what, sizeof(what), "%s on a quiet connection", rx[i].name);
		sig_calls_on(what, (struct sig_call){ rx[i].kind, fd, NULL }, rx[i].restartable);
	}
	set_rcvtimeo(fd, 3000);
	sig_case("recv with SO_RCVTIMEO: an SA_RESTART handler interrupts it", &(struct sig_call){ SC_RECV, fd, NULL },
		 -1, 100, SIGWINCH, 0, SIG_WANT_EINTR_EARLY);
	set_rcvtimeo(fd, 0);
	/* send: the peer does not read; our buffer is full first. */
	int sb = 32768;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	size_t filled = fill_until_eagain(fd);
	for (int i = 0; i < 20 && wait_events(fd, POLLOUT, 300); i++)
		filled += fill_until_eagain(fd);
	sig_calls_on("send on a full buffer", (struct sig_call){ SC_SEND, fd, NULL }, 1);
	filled += fill_until_eagain(fd);
	sig_calls_on("writev on a full buffer", (struct sig_call){ SC_WRITEV, fd, NULL }, 1);
	filled += fill_until_eagain(fd);
	struct timeval tv = { 3, 0 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	sig_case("send with SO_SNDTIMEO: an SA_RESTART handler interrupts it", &(struct sig_call){ SC_SEND, fd, NULL },
		 -1, 100, SIGWINCH, 0, SIG_WANT_EINTR_EARLY);
	close_conn(fd, key);

	/* UDP: a socket on our address that nobody sends to. */
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ua = sin_of(local_ip, is_client() ? 9701 : 9702);
	if (bind(u, (struct sockaddr *)&ua, sizeof(ua)) != 0) {
		result(0, "bind a UDP socket", "%s", errname(errno));
	} else {
		sig_calls_on("UDP recv", (struct sig_call){ SC_RECV, u, NULL }, 1);
		sig_calls_on("UDP recvmmsg", (struct sig_call){ SC_RECVMMSG, u, NULL }, 1);
		sig_calls_on("epoll_wait on a UDP socket", (struct sig_call){ SC_EPOLL, u, NULL }, 0);
	}
	close(u);

	/* The server of the report: an epoll loop that served one request and
	 * then waits with no timeout must see its flag at the first SIGTERM. */
	if (!is_client()) {
		int k2, c = open_conn(&k2);
		if (c < 0)
			return;
		sig_install(SIGTERM, on_sig_term, 0);
		int ep = epoll_create1(0);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = c }, out[4];
		epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
		ev.data.fd = test_listen_fd;
		epoll_ctl(ep, EPOLL_CTL_ADD, test_listen_fd, &ev);
		ASK("SEND %d 100", k2);
		int served = 0, loops = 0;
		double t_sig = 0;
		struct sig_plan plan = { .target = pthread_self(), .restart_ms = -1, .intr_ms = -1, .watch_fd = -1 };
		pthread_t th;
		int started = 0;
		while (!sig_term_hits && loops++ < 50) {
			int n = epoll_wait(ep, out, 4, 2500);
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0)
				break;   /* a lost SIGTERM: Linux would have woken us */
			char b[256];
			ssize_t r = recv(c, b, sizeof(b), MSG_DONTWAIT);
			if (r > 0 && (served += (int)r) >= 100 && !started) {
				send(c, b, 1, MSG_NOSIGNAL);
				plan.intr_ms = 100;
				plan.intr_sig = SIGTERM;
				plan.to_process = 1;
				t_sig = now_s() + 0.1;
				started = pthread_create(&th, NULL, sig_sender, &plan) == 0;
			}
		}
		double dt = now_s() - t_sig;
		plan.done = 1;
		if (started)
			pthread_join(th, NULL);
		result(served == 100 && sig_term_hits == 1 && dt < 0.5, "epoll server leaves its loop at the first SIGTERM",
		       "served %d bytes, %d SIGTERM(s) seen, loop left %.3f s after the signal", served,
		       (int)sig_term_hits, dt);
		sig_install(SIGTERM, SIG_DFL, 0);
		close(ep);
		close_conn(c, k2);
	}
	sig_install(SIGWINCH, SIG_DFL, 0);
	sig_install(SIGUSR2, SIG_DFL, 0);
	(void)filled;
	test_signal_reentry();
}

/* ---- SO_TIMESTAMPING (issue 13 item 6) ----
 * Receive stamps on a connection: Linux reports the stamp of the last
 * segment a recvmsg read from. */
#define TS_OPT_ID_TCP (1 << 16)   /* newer than some headers */

static double wall_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* recvmsg of up to n bytes; *stamp the SCM_TIMESTAMPING software stamp in
 * seconds (0: none), *zero_rest whether ts[1] and ts[2] are zero. */
static ssize_t ts_recv(int fd, size_t n, double *stamp, int *zero_rest)
{
	unsigned char b[4096];
	char ctl[256];
	struct iovec iov = { b, n < sizeof(b) ? n : sizeof(b) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	*stamp = 0;
	*zero_rest = 0;
	ssize_t r = recvmsg(fd, &m, 0);
	for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_TIMESTAMPING ||
		    c->cmsg_len != CMSG_LEN(sizeof(struct scm_timestamping)))
			continue;
		struct scm_timestamping t;
		memcpy(&t, CMSG_DATA(c), sizeof(t));
		*stamp = (double)t.ts[0].tv_sec + (double)t.ts[0].tv_nsec / 1e9;
		*zero_rest = !t.ts[1].tv_sec && !t.ts[1].tv_nsec && !t.ts[2].tv_sec && !t.ts[2].tv_nsec;
	}
	return r;
}

/* recvmsg of up to n bytes; *ns the SO_TIMESTAMPNS (or SO_TIMESTAMP) stamp
 * in seconds (0: none), *type the cmsg type found, *tsing whether an
 * SCM_TIMESTAMPING followed it. */
static ssize_t ts_recv_so(int fd, size_t n, double *stamp, int *type, int *tsing)
{
	unsigned char b[4096];
	char ctl[256];
	struct iovec iov = { b, n < sizeof(b) ? n : sizeof(b) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	*stamp = 0;
	*type = 0;
	*tsing = 0;
	ssize_t r = recvmsg(fd, &m, 0);
	for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET)
			continue;
		if (c->cmsg_type == SO_TIMESTAMPNS && c->cmsg_len == CMSG_LEN(sizeof(struct timespec))) {
			struct timespec t;
			memcpy(&t, CMSG_DATA(c), sizeof(t));
			*stamp = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
			*type = c->cmsg_type;
		} else if (c->cmsg_type == SO_TIMESTAMP && c->cmsg_len == CMSG_LEN(sizeof(struct timeval))) {
			struct timeval t;
			memcpy(&t, CMSG_DATA(c), sizeof(t));
			*stamp = (double)t.tv_sec + (double)t.tv_usec / 1e6;
			*type = c->cmsg_type;
		} else if (c->cmsg_type == SO_TIMESTAMPING && *type) {
			*tsing = 1;
		}
	}
	return r;
}

/* SO_TIMESTAMPNS / SO_TIMESTAMP on a connection: the receive time of the
 * last segment read (tcp_recv_timestamp), before any SCM_TIMESTAMPING. */
static void test_rx_timestamp_cmsgs(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int one = 1;
	int set_rc = setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	usleep(200000);   /* Linux turns receive stamping on from a work item */
	double t0 = wall_s(), st;
	int type, tsing;
	ASK("SEND %d 100", key);
	wait_bytes(fd, 100, 3);
	ssize_t r = ts_recv_so(fd, 100, &st, &type, &tsing);
	double t1 = wall_s();
	result(set_rc == 0 && r == 100 && type == SO_TIMESTAMPNS && st >= t0 - 0.001 && st <= t1 + 0.001,
	       "RX: SO_TIMESTAMPNS cmsg with the segment's receive time", "set %d, read %zd, cmsg type %d, stamp %+.6f s",
	       set_rc, r, type, st - t0);
	/* Both sends in one read: the later segment's time. */
	t0 = wall_s();
	ASK("SENDS %d 2 100 150", key);
	usleep(400000);
	wait_bytes(fd, 200, 3);
	r = ts_recv_so(fd, 200, &st, &type, &tsing);
	result(r == 200 && type == SO_TIMESTAMPNS && st - t0 > 0.1 && st <= wall_s(),
	       "RX: SO_TIMESTAMPNS of one read of two segments is the last one's", "read %zd, type %d, %+.6f s", r,
	       type, st - t0);
	/* SO_TIMESTAMP replaces it (microseconds); SOFTWARE reporting adds
	 * SCM_TIMESTAMPING after it, the segment being stamped for this socket. */
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one));
	int flags = SOF_TIMESTAMPING_SOFTWARE;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
	t0 = wall_s();
	ASK("SEND %d 60", key);
	wait_bytes(fd, 60, 3);
	r = ts_recv_so(fd, 60, &st, &type, &tsing);
	int ok = r == 60 && type == SO_TIMESTAMP && tsing && st >= t0 - 0.001 && st <= wall_s() + 0.001;
	double st_on = st;
	int type_on = type, tsing_on = tsing;
	int zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &zero, sizeof(zero));
	ASK("SEND %d 40", key);
	wait_bytes(fd, 40, 3);
	ssize_t r_off = ts_recv_so(fd, 40, &st, &type, &tsing);
	result(ok && r_off == 40 && type == 0, "RX: SO_TIMESTAMP cmsg, then SCM_TIMESTAMPING with SOFTWARE; none once off",
	       "read %zd, type %d, timestamping %d, %+.6f s; off: read %zd, type %d", r, type_on, tsing_on, st_on - t0,
	       r_off, type);
	close_conn(fd, key);
}

/* One entry of the error queue. */
struct ts_entry {
	ssize_t len;            /* payload bytes; -1: nothing queued (errno) */
	int err, msg_flags;
	int has_ee, has_ts;
	struct sock_extended_err ee;
	double stamp;           /* ts[0] */
	int zero_rest;          /* ts[1], ts[2] zero */
	unsigned char data[4096];
};

static void ts_errq_read(int fd, struct ts_entry *e)
{
	char ctl[512];
	struct iovec iov = { e->data, sizeof(e->data) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	memset(e, 0, offsetof(struct ts_entry, data));
	errno = 0;
	e->len = recvmsg(fd, &m, MSG_ERRQUEUE);
	e->err = errno;
	if (e->len < 0)
		return;
	e->msg_flags = m.msg_flags;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct sock_extended_err))) {
			memcpy(&e->ee, CMSG_DATA(c), sizeof(e->ee));
			e->has_ee = 1;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING &&
			   c->cmsg_len == CMSG_LEN(sizeof(struct scm_timestamping))) {
			struct scm_timestamping t;
			memcpy(&t, CMSG_DATA(c), sizeof(t));
			e->stamp = (double)t.ts[0].tv_sec + (double)t.ts[0].tv_nsec / 1e9;
			e->zero_rest = !t.ts[1].tv_sec && !t.ts[1].tv_nsec && !t.ts[2].tv_sec && !t.ts[2].tv_nsec;
			e->has_ts = 1;
		}
	}
}

/* Waits up to ms for POLLERR (an error-queue entry). */
static int wait_pollerr(int fd, int ms)
{
	double end = now_s() + ms / 1000.0;
	do {
		struct pollfd p = { fd, 0, 0 };
		if (poll(&p, 1, 10) > 0 && (p.revents & POLLERR))
			return 1;
	} while (now_s() < end);
	return 0;
}

static const char *ts_kind(unsigned info)
{
	return info == SCM_TSTAMP_SCHED ? "SCHED" : info == SCM_TSTAMP_SND ? "SND" : info == SCM_TSTAMP_ACK ? "ACK" : "?";
}

/* Transmit stamps (timestamping.rst): each send's last byte gets SCHED,
 * SND and ACK entries on the error queue; OPT_ID keys them by byte offset. */
static void test_tx_timestamping(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int flags = SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_TX_ACK |
		    SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY;
	int set_rc = setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
	struct ts_entry e;
	ts_errq_read(fd, &e);
	ssize_t empty_len = e.len;
	int empty_err = e.err;
	static const size_t sizes[3] = { 1000, 2000, 500 };
	static const unsigned keys[3] = { 999, 2999, 3499 };
	double t0 = wall_s();
	size_t off = 0;
	for (int i = 0; i < 3; i++) {
		static unsigned char b[4096];
		fill_pattern(b, sizes[i], off);
		send(fd, b, sizes[i], MSG_NOSIGNAL);
		off += sizes[i];
		usleep(60000);   /* each send leaves (and is acknowledged) alone */
	}
	usleep(100000);
	struct pollfd p = { fd, POLLIN, 0 };
	int pr = poll(&p, 1, 0);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN }, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	int en = epoll_wait(ep, &out, 1, 0);
	int queued_ok = pr == 1 && (p.revents & POLLERR) && en == 1 && (out.events & EPOLLERR);
	unsigned queued_revents = p.revents, queued_events = en == 1 ? out.events : 0;
	char list[512] = "";
	int n = 0, shape_ok = 1, stamps_ok = 1, order_ok = 1;
	double last[3] = { 0, 0, 0 }, t1 = wall_s();
	unsigned got_info[16], got_key[16];
	for (; n < 16; n++) {
		ts_errq_read(fd, &e);
		if (e.len < 0)
			break;
		got_info[n] = e.ee.ee_info;
		got_key[n] = e.ee.ee_data;
		size_t k = strlen(list);
		snprintf(list + k, sizeof(list) - k, "%s%s/%u", n ? " " : "", ts_kind(e.ee.ee_info), e.ee.ee_data);
		if (e.len != 0 || !(e.msg_flags & MSG_ERRQUEUE) || !e.has_ee || !e.has_ts || !e.zero_rest ||
		    e.ee.ee_errno != ENOMSG || e.ee.ee_origin != SO_EE_ORIGIN_TIMESTAMPING)
			shape_ok = 0;
		if (e.stamp < t0 - 0.001 || e.stamp > t1 + 0.001)
			stamps_ok = 0;
		for (int i = 0; i < 3; i++)
			if (e.ee.ee_data == keys[i] && e.ee.ee_info <= SCM_TSTAMP_ACK) {
				if (e.stamp < last[i])
					stamps_ok = 0;
				last[i] = e.stamp;
			}
	}
	printf("INFO: TX entries (%s): %s\n", role, list);
	/* Per send: SCHED, SND, ACK, keyed by the last byte's offset; each
	 * kind in send order. How one send's ACK interleaves with the next
	 * send's SCHED/SND depends on when the peer acknowledges (a fast
	 * peer's ACK may come after the next send), as on Linux. */
	if (n != 9)
		order_ok = 0;
	int next_of_kind[3] = { 0, 0, 0 };     /* SCHED, SND, ACK: sends seen */
	for (int i = 0; i < n && i < 9; i++) {
		unsigned kind = got_info[i] == SCM_TSTAMP_SCHED ? 0 : got_info[i] == SCM_TSTAMP_SND ? 1 :
				got_info[i] == SCM_TSTAMP_ACK ? 2 : 3;
		if (kind > 2 || next_of_kind[kind] > 2 || got_key[i] != keys[next_of_kind[kind]])
			order_ok = 0;
		else if (kind > 0 && next_of_kind[kind - 1] <= next_of_kind[kind])
			order_ok = 0;   /* SND before its SCHED, or ACK before its SND */
		else
			next_of_kind[kind]++;
	}
	result(set_rc == 0 && order_ok, "TX: SCHED, SND, ACK per send with OPT_ID byte offsets 999, 2999, 3499",
	       "set %d, %d entries: %s", set_rc, n, list);
	result(n && shape_ok, "TX: entry shape (no payload with OPT_TSONLY, MSG_ERRQUEUE, ENOMSG, "
	       "SO_EE_ORIGIN_TIMESTAMPING, SCM_TIMESTAMPING software stamp only)", "%d entries", n);
	result(n && stamps_ok, "TX: stamps between the first send and now, each send's SCHED <= SND <= ACK",
	       "first send at %.6f, read at %.6f", t0, t1);
	ts_errq_read(fd, &e);
	p.revents = 0;
	pr = poll(&p, 1, 0);
	result(empty_len < 0 && empty_err == EAGAIN && queued_ok && e.len < 0 && e.err == EAGAIN &&
	       !(p.revents & POLLERR),
	       "TX: POLLERR / EPOLLERR exactly while stamps are queued; the empty queue reads EAGAIN at once",
	       "before: %zd %s; queued: revents 0x%x, epoll 0x%x; drained: %zd %s, revents 0x%x", empty_len,
	       errname(empty_err), queued_revents, queued_events, e.len, errname(e.err), p.revents);

	/* Without OPT_TSONLY Linux loops the packet back: SND from the
	 * Ethernet header, ACK the payload it still held. */
	flags &= ~SOF_TIMESTAMPING_OPT_TSONLY;
	flags &= ~SOF_TIMESTAMPING_TX_SCHED;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
	static unsigned char b[1000];
	fill_pattern(b, sizeof(b), off);
	send(fd, b, sizeof(b), MSG_NOSIGNAL);
	usleep(150000);
	struct ts_entry snd, ack;
	ts_errq_read(fd, &snd);
	ts_errq_read(fd, &ack);
	size_t hdrs = snd.len > 1000 ? (size_t)snd.len - 1000 : 0;
	printf("INFO: TX payloads (%s): SND %zd bytes, ACK %zd bytes\n", role, snd.len, ack.len);
	result(snd.len > 0 && snd.ee.ee_info == SCM_TSTAMP_SND && snd.ee.ee_data == 4499 && hdrs >= 54 && hdrs <= 94 &&
	       !memcmp(snd.data + hdrs, b, sizeof(b)),
	       "TX: SND without OPT_TSONLY carries the packet (headers, then the send's bytes)", "%s/%u, %zd bytes",
	       ts_kind(snd.ee.ee_info), snd.ee.ee_data, snd.len);
	result(ack.len == 1000 && ack.ee.ee_info == SCM_TSTAMP_ACK && ack.ee.ee_data == 4499 && !memcmp(ack.data, b, 1000),
	       "TX: ACK without OPT_TSONLY carries the send's bytes", "%s/%u, %zd bytes", ts_kind(ack.ee.ee_info),
	       ack.ee.ee_data, ack.len);
	close(ep);
	close_conn(fd, key);
}

/* OPT_ID counts from snd_una when set, OPT_ID_TCP from write_seq: with
 * bytes unacknowledged (the peer's window full) they differ by those. */
static void test_tx_timestamping_opt_id_base(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	for (int tcp_base = 0; tcp_base < 2; tcp_base++) {
		/* The fill can end with the peer's window still open: a Linux
		 * receiver whose reader sleeps delays its ACKs (its window
		 * would not grow), so once our 128 KiB send buffer is all in
		 * flight nothing moves for the fill's 40 ms; the delayed ACK
		 * then takes all of it and SIOCOUTQ reads 0 (CI, and here with
		 * a 20 ms pause: 92 segments in flight, window 365 KB). Fill
		 * again until bytes stay queued, as the window then shuts. */
		size_t filled = 0;
		int outq = -1, outq_after = -1;
		for (int fills = 0; fills < 40 && outq <= 0; fills++) {
			filled += fill_until_eagain(fd);
			ioctl(fd, SIOCOUTQ, &outq);
		}
		/* ACKs of segments still in flight may land between reading
		 * SIOCOUTQ and the set (CI: 32 KiB did, on the kernel too):
		 * the base is somewhere between the two reads around it. */
		int flags = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
			    SOF_TIMESTAMPING_OPT_TSONLY | (tcp_base ? TS_OPT_ID_TCP : 0);
		setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
		ioctl(fd, SIOCOUTQ, &outq_after);
		struct sock_tcp_info ti;
		socklen_t til = sizeof(ti);
		memset(&ti, 0, sizeof(ti));
		getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &til);
		printf("INFO: OPT_ID%s round: filled %zu bytes, SIOCOUTQ %d then %d (snd_wnd %u, cwnd %u, unacked %u, "
		       "notsent %u, probes %u, backoff %u)\n",
		       tcp_base ? "_TCP" : "", filled, outq, outq_after, ti.tcpi_snd_wnd, ti.tcpi_snd_cwnd, ti.tcpi_unacked,
		       ti.tcpi_notsent_bytes, ti.tcpi_probes, ti.tcpi_backoff);
		ask_send("DRAIN %d %zu 65536 0", key, filled + 200);
		ask_wait();
		static unsigned char b[200];
		memset(b, 'f', sizeof(b));
		set_rcvtimeo(fd, 0);
		ssize_t r = send(fd, b, sizeof(b), MSG_NOSIGNAL);
		struct ts_entry e;
		e.len = -1;
		if (wait_pollerr(fd, 3000))
			ts_errq_read(fd, &e);
		unsigned want = tcp_base ? 199u : (unsigned)outq + 199u;
		unsigned want_low = tcp_base ? 199u : (unsigned)outq_after + 199u;
		result(r == 200 && outq > 0 && e.len == 0 && e.ee.ee_info == SCM_TSTAMP_SND && e.ee.ee_data <= want &&
			       e.ee.ee_data >= want_low,
		       tcp_base ? "TX: OPT_ID_TCP counts from write_seq (bytes queued when set not counted)"
				: "TX: OPT_ID counts from snd_una (bytes unacknowledged when set counted)",
		       "SIOCOUTQ %d before the set, %d after, entry %s/%u (len %zd), want key %u..%u", outq,
		       outq_after, ts_kind(e.ee.ee_info), e.ee.ee_data, e.len, want_low, want);
		flags = 0;
		setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
		/* The peer answers a command only after its drain: a drain
		 * still reading (200 ms did not always do on a loaded host)
		 * would take the next round's fill with its last 64 KiB read. */
		ASK("INFO %d", key);
		while (ts_errq_read(fd, &e), e.len >= 0)
			;
	}
	close_conn(fd, key);
}

static void test_timestamping(void)
{
	int key, fd = open_conn(&key);
	if (fd < 0)
		return;
	int flags = TS_OPT_ID_TCP;
	EXPECT_ERR("SO_TIMESTAMPING OPT_ID_TCP without OPT_ID",
		   setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags)), EINVAL);
	flags = SOF_TIMESTAMPING_OPT_ID;
	EXPECT_ERR("SO_TIMESTAMPING OPT_ID on a listener",
		   setsockopt(test_listen_fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags)), EINVAL);
	flags = 1 << 30;
	EXPECT_ERR("SO_TIMESTAMPING with an unknown bit", setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags,
								     sizeof(flags)), EINVAL);
	flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
		SOF_TIMESTAMPING_RAW_HARDWARE;
	EXPECT_OK("SO_TIMESTAMPING RX_SOFTWARE|SOFTWARE|OPT_ID|RAW_HARDWARE on a connection",
		  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags)));
	int got = -1;
	socklen_t gl = sizeof(got);
	getsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &got, &gl);
	expect_int("SO_TIMESTAMPING reads back", got, flags);
	/* Linux turns its receive stamping on from a work item. */
	usleep(200000);

	/* Two sends 150 ms apart, each read alone. */
	double t0 = wall_s();
	ASK("SENDS %d 2 100 150", key);
	double s1, s2, s3;
	int z1, z2, z3;
	wait_bytes(fd, 100, 3);
	ssize_t r1 = ts_recv(fd, 100, &s1, &z1);
	wait_bytes(fd, 100, 3);
	ssize_t r2 = ts_recv(fd, 100, &s2, &z2);
	double t1 = wall_s();
	result(r1 == 100 && s1 >= t0 - 0.001 && s1 <= t1 + 0.001 && z1, "RX: SCM_TIMESTAMPING with a software stamp",
	       "read %zd, stamp %.6f s after the request, ts[1]/ts[2] zero %d", r1, s1 - t0, z1);
	result(r2 == 100 && s2 - s1 > 0.1 && s2 <= t1 + 0.001 && z2, "RX: the second send's stamp is ~150 ms later",
	       "read %zd, %+.6f s", r2, s2 - s1);

	/* Both sends in one read: the later segment's stamp. */
	t0 = wall_s();
	ASK("SENDS %d 2 100 150", key);
	usleep(400000);
	wait_bytes(fd, 200, 3);
	ssize_t r3 = ts_recv(fd, 200, &s3, &z3);
	result(r3 == 200 && s3 - t0 > 0.1 && s3 <= wall_s(), "RX: one read of two segments gets the last one's stamp",
	       "read %zd, stamp %.6f s after the request", r3, s3 - t0);

	/* Reporting off: no control message. */
	flags = SOF_TIMESTAMPING_RX_SOFTWARE;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
	ASK("SEND %d 50", key);
	wait_bytes(fd, 50, 3);
	r3 = ts_recv(fd, 50, &s3, &z3);
	result(r3 == 50 && s3 == 0, "RX: RX_SOFTWARE without SOFTWARE reports nothing", "read %zd, stamp %.6f", r3, s3);
	close_conn(fd, key);
	test_rx_timestamp_cmsgs();
	test_tx_timestamping();
	test_tx_timestamping_opt_id_base();
}

/* Whether name is one of the comma-separated names of list. */
static int name_in_list(const char *name, const char *list)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return 1;
		if (!end)
			break;
		p = end + 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "peer"))
		return run_peer();
	if (argc < 4 || strcmp(argv[1], "test")) {
		fprintf(stderr, "usage: %s peer | test PEER_IP LOCAL_IP [SECTION[,SECTION...]]\n", argv[0]);
		return 2;
	}
	peer_ip = argv[2];
	local_ip = argv[3];
	const char *only = argc > 4 ? argv[4] : NULL;
	ctl_fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ctl = sin_of(peer_ip, CTL_PORT);
	connect(ctl_fd, (struct sockaddr *)&ctl, sizeof(ctl));
	set_rcvtimeo(ctl_fd, 500);
	int hello = -1;
	for (int i = 0; i < 20 && sscanf(ASK("HELLO"), "OK %d", &hello) != 1; i++)
		;
	if (hello < 0) {
		printf("FAIL: the peer does not answer on UDP %d\n", CTL_PORT);
		return 1;
	}
	peer_preloaded = hello;
	printf("INFO: peer %s\n", peer_preloaded ? "under libvma" : "on the kernel");
	test_listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(test_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = sin_of("0.0.0.0", TEST_PORT);
	if (bind(test_listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(test_listen_fd, 64) < 0) {
		printf("FAIL: listen on %d: %s\n", TEST_PORT, strerror(errno));
		return 1;
	}

	static const struct { const char *name; void (*fn)(void); int both; } sections[] = {
		{ "connect", test_connect_client, 0 }, { "accept", test_accept_server, 0 },
		{ "data", test_data, 1 },	       { "sockopts", test_sockopts, 1 },
		{ "shutdown", test_shutdown, 1 },      { "resets", test_resets, 1 },
		{ "fullpipe", test_full_pipe, 1 },     { "keepalive", test_keepalive, 1 },
		{ "sendfile", test_sendfile, 1 },      { "splice", test_splice, 1 },
		{ "routemss", test_route_mss, 1 },     { "signals", test_signals, 1 },
		{ "timestamping", test_timestamping, 1 },
	};
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
		if (only && !name_in_list(sections[i].name, only))
			continue;
		if (sections[i].both) {
			role = "client";
			sections[i].fn();
			role = "server";
			sections[i].fn();
		} else {
			role = sections[i].fn == test_connect_client ? "client" : "server";
			sections[i].fn();
		}
		role = "";
	}
	ASK("QUIT");
	close(test_listen_fd);
	printf("%s: %d checks, %d failure(s)\n", failures ? "FAILED" : "OK", checks, failures);
	return failures ? 1 : 0;
}
