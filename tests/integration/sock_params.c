/* Helper of avoid_sys_calls.sh and exception_handling.sh: what
 * VMA_AVOID_SYS_CALLS_ON_TCP_FD and VMA_EXCEPTION_HANDLING do to an
 * application's sockets. Runs the same with and without libvma.
 *
 *   sock_params serve PORT
 *       kernel-side peer: TCP echo (a thread per connection) and UDP echo
 *       on PORT, until killed.
 *   sock_params avoid PEER_IP LOCAL_IP PORT N
 *       one TCP connection to PEER_IP:PORT; N rounds of
 *       setsockopt/getsockopt (TCP_NODELAY, SO_KEEPALIVE), fcntl (F_GETFL,
 *       F_SETFL O_NONBLOCK) and ioctl(FIONBIO), each value read back; then
 *       what those values must do (O_NONBLOCK: recv says EAGAIN at once;
 *       blocking: recv waits for SO_RCVTIMEO), the keepalive options and
 *       Linux's errors for bad values; last, a listener on LOCAL_IP:PORT+1
 *       whose options set after listen() must reach a connection the kernel
 *       accepts from this host. The script counts the system calls (strace).
 *   sock_params except PEER_IP LOCAL_IP PORT MODE
 *       SO_PRIORITY (an option our stack does not implement) on an
 *       established TCP connection, on a TCP socket before connect() and on
 *       a bound UDP socket, with VMA_EXCEPTION_HANDLING=MODE in force; with
 *       mode 2 also send(MSG_OOB) on the connection. Checks the calls'
 *       results and, from this namespace's kernel counters, which sockets
 *       the kernel carried (the script runs it in a namespace of its own).
 *
 * Prints "PASS: ..." / "FAIL: ..." per check and "INFO: ..." lines; exits 1
 * when a check failed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures;

static void result(int ok, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(int ok, const char *what, const char *fmt, ...)
{
	if (ok) {
		printf("PASS: %s\n", what);
	} else {
		char detail[256] = "";
		if (fmt) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(detail, sizeof(detail), fmt, ap);
			va_end(ap);
		}
		printf("FAIL: %s%s%s\n", what, fmt ? ": " : "", detail);
		failures++;
	}
	fflush(stdout);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* This namespace's kernel counter (/proc/net/snmp): table "Tcp:" or
 * "Udp:", column name. -1 when it cannot be read. */
static long snmp(const char *table, const char *column)
{
	FILE *f = fopen("/proc/net/snmp", "r");
	if (!f)
		return -1;
	char names[1024], values[1024];
	long v = -1;
	while (v < 0 && fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
		if (strncmp(names, table, strlen(table)) != 0)
			continue;
		char *sn, *sv;
		char *n = strtok_r(names, " \n", &sn);
		char *x = strtok_r(values, " \n", &sv);
		while (n && x) {
			if (strcmp(n, column) == 0) {
				v = atol(x);
				break;
			}
			n = strtok_r(NULL, " \n", &sn);
			x = strtok_r(NULL, " \n", &sv);
		}
	}
	fclose(f);
	return v;
}

/* ---- serve ---- */

static void *serve_conn(void *arg)
{
	int fd = (int)(long)arg;
	char buf[4096];
	ssize_t n;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
		if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
			break;
	close(fd);
	return NULL;
}

static void *serve_udp(void *arg)
{
	int fd = (int)(long)arg;
	char buf[2048];
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
		if (n >= 0)
			sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

static int serve(int port)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || u < 0 || bind(l, (struct sockaddr *)&any, sizeof(any)) != 0 || listen(l, 64) != 0 ||
	    bind(u, (struct sockaddr *)&any, sizeof(any)) != 0) {
		perror("serve");
		return 1;
	}
	pthread_t t;
	pthread_create(&t, NULL, serve_udp, (void *)(long)u);
	printf("serving %d\n", port);
	fflush(stdout);
	for (;;) {
		int fd = accept(l, NULL, NULL);
		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, serve_conn, (void *)(long)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
}

/* ---- client helpers ---- */

static int tcp_connect(const char *ip, int port)
{
	struct sockaddr_in peer = addr_of(ip, port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&peer, sizeof(peer)) != 0) {
		printf("INFO: connect to %s:%d: %s\n", ip, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* rounds request/reply exchanges of 64 bytes; 1 when every reply came back
 * whole. The socket must be blocking. */
static int tcp_echo(int fd, int rounds)
{
	char out[64], in[64];
	for (int r = 0; r < rounds; r++) {
		memset(out, 'a' + r % 26, sizeof(out));
		if (send(fd, out, sizeof(out), MSG_NOSIGNAL) != (ssize_t)sizeof(out))
			return 0;
		size_t got = 0;
		while (got < sizeof(in)) {
			ssize_t n = recv(fd, in + got, sizeof(in) - got, 0);
			if (n <= 0)
				return 0;
			got += (size_t)n;
		}
		if (memcmp(in, out, sizeof(in)) != 0)
			return 0;
	}
	return 1;
}

static int udp_echo(int fd, const struct sockaddr_in *peer, int rounds)
{
	char out[64], in[128];
	for (int r = 0; r < rounds; r++) {
		memset(out, 'A' + r % 26, sizeof(out));
		if (sendto(fd, out, sizeof(out), 0, (const struct sockaddr *)peer, sizeof(*peer)) != (ssize_t)sizeof(out))
			return 0;
		ssize_t n = recv(fd, in, sizeof(in), 0);
		if (n != (ssize_t)sizeof(out) || memcmp(in, out, sizeof(out)) != 0)
			return 0;
	}
	return 1;
}

static int get_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);
	if (getsockopt(fd, level, name, &v, &l) != 0)
		return -1000 - errno;
	return v;
}

static void set_timeout(int fd, int name, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, name, &tv, sizeof(tv));
}

/* ---- avoid ---- */

static void expect_set_error(int fd, int level, int name, const void *val, socklen_t len, int want, const char *what)
{
	errno = 0;
	int rc = setsockopt(fd, level, name, val, len);
	int e = errno;
	result(rc == -1 && e == want, what, "got %d (%s), want -1 (%s)", rc, rc ? strerror(e) : "-", strerror(want));
}

/* Options set on a listener after listen() (which libvma may then keep to
 * itself) reach a connection the kernel accepts on its port: one from this
 * host, which never crosses the ring. Linux passes them on to the accepted
 * socket. */
static void avoid_listener(const char *local_ip, int port)
{
	struct sockaddr_in a = addr_of(local_ip, port);
	int one = 1, idle = 9;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 4) != 0) {
		result(0, "listener on the local address", "%s", strerror(errno));
		return;
	}
	setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(l, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(l, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	result(get_int(l, IPPROTO_TCP, TCP_KEEPIDLE) == 9, "listener: TCP_KEEPIDLE 9 set after listen() reads back",
	       "read %d", get_int(l, IPPROTO_TCP, TCP_KEEPIDLE));
	int c = tcp_connect(local_ip, port);
	int s = c >= 0 ? accept(l, NULL, NULL) : -1;
	int nodelay = get_int(s, IPPROTO_TCP, TCP_NODELAY), keepalive = get_int(s, SOL_SOCKET, SO_KEEPALIVE);
	int kidle = get_int(s, IPPROTO_TCP, TCP_KEEPIDLE);
	result(s >= 0 && nodelay == 1 && keepalive == 1 && kidle == 9,
	       "a connection accepted from this host has the listener's TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE",
	       "accept %d, read %d, %d, %d", s, nodelay, keepalive, kidle);
	if (s >= 0)
		close(s);
	if (c >= 0)
		close(c);
	close(l);
}

static int avoid(const char *peer_ip, const char *local_ip, int port, int rounds)
{
	int fd = tcp_connect(peer_ip, port);
	if (fd < 0) {
		result(0, "connect to the echo peer", NULL);
		return 1;
	}
	long segs0 = snmp("Tcp:", "InSegs");
	result(tcp_echo(fd, 20), "20 echoes before the calls", NULL);

	/* The calls the script counts: 2 setsockopt + 2 getsockopt + 4 fcntl
	 * + 1 ioctl per round. */
	int bad_nodelay = 0, bad_keepalive = 0, bad_fcntl = 0, bad_fionbio = 0;
	for (int i = 0; i < rounds; i++) {
		int v = i & 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v));
		bad_nodelay += get_int(fd, IPPROTO_TCP, TCP_NODELAY) != v;
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v));
		bad_keepalive += get_int(fd, SOL_SOCKET, SO_KEEPALIVE) != v;
		int fl = fcntl(fd, F_GETFL);
		fcntl(fd, F_SETFL, v ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
		bad_fcntl += ((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0) != v;
		int on = !v;
		ioctl(fd, FIONBIO, &on);
		bad_fionbio += ((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0) != on;
	}
	printf("INFO: made %d setsockopt, %d getsockopt, %d fcntl, %d ioctl calls\n", 2 * rounds, 2 * rounds,
	       4 * rounds, rounds);
	result(!bad_nodelay, "TCP_NODELAY reads back what was set, every round", "%d rounds wrong", bad_nodelay);
	result(!bad_keepalive, "SO_KEEPALIVE reads back what was set, every round", "%d rounds wrong", bad_keepalive);
	result(!bad_fcntl, "F_GETFL shows the O_NONBLOCK F_SETFL set, every round", "%d rounds wrong", bad_fcntl);
	result(!bad_fionbio, "F_GETFL shows the O_NONBLOCK FIONBIO set, every round", "%d rounds wrong", bad_fionbio);
	int fl = fcntl(fd, F_GETFL);
	result(fl >= 0 && (fl & O_ACCMODE) == O_RDWR, "F_GETFL: the access mode is O_RDWR", "flags %#x", fl);

	/* What the values do. */
	char b[16];
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	double t0 = now_s();
	errno = 0;
	ssize_t r = recv(fd, b, sizeof(b), 0);
	int e = errno;
	result(r == -1 && e == EAGAIN && now_s() - t0 < 0.1, "O_NONBLOCK by fcntl: recv says EAGAIN at once",
	       "recv %zd (%s) after %.3f s", r, strerror(e), now_s() - t0);
	int off = 0, on = 1;
	ioctl(fd, FIONBIO, &off);
	set_timeout(fd, SO_RCVTIMEO, 300);
	t0 = now_s();
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	e = errno;
	double waited = now_s() - t0;
	result(r == -1 && e == EAGAIN && waited >= 0.25, "blocking by FIONBIO 0: recv waits for SO_RCVTIMEO (300 ms)",
	       "recv %zd (%s) after %.3f s", r, strerror(e), waited);
	ioctl(fd, FIONBIO, &on);
	t0 = now_s();
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	e = errno;
	result(r == -1 && e == EAGAIN && now_s() - t0 < 0.1, "O_NONBLOCK by FIONBIO 1: recv says EAGAIN at once",
	       "recv %zd (%s) after %.3f s", r, strerror(e), now_s() - t0);
	ioctl(fd, FIONBIO, &off);
	set_timeout(fd, SO_RCVTIMEO, 0);

	static const struct {
		int level, name, value;
		const char *what;
	} opts[] = {
		{ IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY 1" },  { IPPROTO_TCP, TCP_QUICKACK, 1, "TCP_QUICKACK 1" },
		{ IPPROTO_TCP, TCP_QUICKACK, 0, "TCP_QUICKACK 0" }, { SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE 1" },
		{ IPPROTO_TCP, TCP_KEEPIDLE, 7, "TCP_KEEPIDLE 7" }, { IPPROTO_TCP, TCP_KEEPINTVL, 3, "TCP_KEEPINTVL 3" },
		{ IPPROTO_TCP, TCP_KEEPCNT, 4, "TCP_KEEPCNT 4" },
	};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = opts[i].value;
		int rc = setsockopt(fd, opts[i].level, opts[i].name, &v, sizeof(v));
		int got = get_int(fd, opts[i].level, opts[i].name);
		char what[64];
		snprintf(what, sizeof(what), "%s set and read back", opts[i].what);
		result(rc == 0 && got == v, what, "set %d, read %d", rc, got);
	}
	int zero = 0, big = 40000, cnt = 128, one = 1;
	expect_set_error(fd, IPPROTO_TCP, TCP_KEEPIDLE, &zero, sizeof(zero), EINVAL, "TCP_KEEPIDLE 0: EINVAL");
	expect_set_error(fd, IPPROTO_TCP, TCP_KEEPINTVL, &big, sizeof(big), EINVAL, "TCP_KEEPINTVL 40000: EINVAL");
	expect_set_error(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt), EINVAL, "TCP_KEEPCNT 128: EINVAL");
	expect_set_error(fd, IPPROTO_TCP, TCP_NODELAY, &one, 2, EINVAL, "TCP_NODELAY with a 2-byte value: EINVAL");
	expect_set_error(fd, SOL_SOCKET, SO_KEEPALIVE, NULL, sizeof(int), EFAULT, "SO_KEEPALIVE from NULL: EFAULT");
	result(get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE) == 7, "a refused value leaves TCP_KEEPIDLE alone", "read %d",
	       get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE));
	int small = 0;
	socklen_t sl = 1;
	int rc = getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &small, &sl);
	result(rc == 0 && sl == 1 && small == 1, "TCP_NODELAY read into 1 byte", "rc %d, len %u, value %d", rc,
	       (unsigned)sl, small);

	result(tcp_echo(fd, 20), "20 echoes after the calls", NULL);
	long segs = snmp("Tcp:", "InSegs") - segs0;
	printf("INFO: kernel TcpInSegs +%ld over the connection's 40 echoes\n", segs);
	printf("INFO: offloaded %s\n", segs < 20 ? "yes" : "no");
	close(fd);
	avoid_listener(local_ip, port + 1);
	return failures ? 1 : 0;
}

/* ---- except ---- */

/* The rounds of each exchange, and the kernel's counter growth below which
 * the exchange did not go through the kernel. */
#define EXCH_ROUNDS 50
#define EXCH_KERNEL_MIN EXCH_ROUNDS
#define EXCH_OFFLOAD_MAX 10

static void expect_set(int fd, int mode, const char *what)
{
	int prio = 3;
	errno = 0;
	int rc = setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio));
	int e = errno;
	if (mode == 2)
		result(rc == -1 && e == ENOPROTOOPT, what, "got %d (%s), want -1 (ENOPROTOOPT)", rc,
		       rc ? strerror(e) : "-");
	else
		result(rc == 0, what, "got %d (%s), want 0", rc, strerror(e));
}

/* The kernel's counter grew as the path says it must. */
static void expect_path(long grew, int kernel, const char *what)
{
	result(kernel ? grew >= EXCH_KERNEL_MIN : grew < EXCH_OFFLOAD_MAX, what, "kernel counter +%ld over %d echoes",
	       grew, EXCH_ROUNDS);
}

static int except(const char *peer_ip, const char *local_ip, int port, int mode)
{
	int to_kernel = mode == 0 || mode == 1;

	/* An established offloaded connection cannot go back to the kernel:
	 * modes 0 and 1 carry on as -1. */
	int fd = tcp_connect(peer_ip, port);
	if (fd < 0) {
		result(0, "connect to the echo peer", NULL);
		return 1;
	}
	long c0 = snmp("Tcp:", "InSegs");
	result(tcp_echo(fd, EXCH_ROUNDS), "connection: echoes", NULL);
	expect_path(snmp("Tcp:", "InSegs") - c0, 0, "connection: offloaded");
	printf("INFO: SO_PRIORITY on the connection (fd %d)\n", fd);
	fflush(stdout);
	expect_set(fd, mode, "connection: setsockopt(SO_PRIORITY)");
	if (mode == 2) {
		errno = 0;
		ssize_t r = send(fd, "u", 1, MSG_OOB | MSG_NOSIGNAL);
		int e = errno;
		result(r == -1 && e == EOPNOTSUPP, "connection: send(MSG_OOB) fails with EOPNOTSUPP", "got %zd (%s)", r,
		       r < 0 ? strerror(e) : "-");
	}
	c0 = snmp("Tcp:", "InSegs");
	result(tcp_echo(fd, EXCH_ROUNDS), "connection: echoes after the option", NULL);
	expect_path(snmp("Tcp:", "InSegs") - c0, 0, "connection: still offloaded");
	close(fd);

	/* A TCP socket before connect(): modes 0 and 1 leave it to the kernel. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	expect_set(fd, mode, "new TCP socket: setsockopt(SO_PRIORITY)");
	struct sockaddr_in peer = addr_of(peer_ip, port);
	int rc = connect(fd, (struct sockaddr *)&peer, sizeof(peer));
	result(rc == 0, "new TCP socket: connect", "%s", strerror(errno));
	c0 = snmp("Tcp:", "InSegs");
	result(rc == 0 && tcp_echo(fd, EXCH_ROUNDS), "new TCP socket: echoes", NULL);
	expect_path(snmp("Tcp:", "InSegs") - c0, to_kernel,
		    to_kernel ? "new TCP socket: carried by the kernel" : "new TCP socket: offloaded");
	int prio = get_int(fd, SOL_SOCKET, SO_PRIORITY);
	result(prio == (mode == 2 ? 0 : 3), "new TCP socket: SO_PRIORITY reads back", "read %d", prio);
	close(fd);

	/* A bound UDP socket moves to the kernel unless a datagram waits. */
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in local = addr_of(local_ip, 0);
	rc = bind(fd, (struct sockaddr *)&local, sizeof(local));
	set_timeout(fd, SO_RCVTIMEO, 2000);
	long u0 = snmp("Udp:", "InDatagrams");
	result(rc == 0 && udp_echo(fd, &peer, EXCH_ROUNDS), "UDP socket: echoes", NULL);
	expect_path(snmp("Udp:", "InDatagrams") - u0, 0, "UDP socket: offloaded");
	expect_set(fd, mode, "UDP socket: setsockopt(SO_PRIORITY)");
	u0 = snmp("Udp:", "InDatagrams");
	result(udp_echo(fd, &peer, EXCH_ROUNDS), "UDP socket: echoes after the option", NULL);
	expect_path(snmp("Udp:", "InDatagrams") - u0, to_kernel,
		    to_kernel ? "UDP socket: carried by the kernel" : "UDP socket: still offloaded");
	close(fd);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		return serve(atoi(argv[2]));
	if (argc == 6 && strcmp(argv[1], "avoid") == 0)
		return avoid(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc == 6 && strcmp(argv[1], "except") == 0)
		return except(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr,
		"usage: %s serve PORT | avoid PEER_IP LOCAL_IP PORT N | except PEER_IP LOCAL_IP PORT MODE\n",
		argv[0]);
	return 2;
}
