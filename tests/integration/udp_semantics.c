/* UDP socket semantics, run the same way with and without libvma so the
 * kernel is the reference (tests/integration/udp_semantics.sh).
 *   udp_semantics peer OWN_IP                request server on ports 9100/9101
 *   udp_semantics test PEER_IP LOCAL_IP IFNAME
 * The peer obeys "SEND count size port tos ttl alt delay_ms group" requests:
 * it sends count datagrams of size bytes (byte i of datagram k = k*7+i) to the
 * requester's address (or to group) at port, from 9100 (alt 0) or 9101
 * (alt 1), after delay_ms. Other datagrams are echoed back. "QUIT" ends it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>

#define PEER_PORT 9100
#define PEER_ALT_PORT 9101

static int failures;
static struct sockaddr_in peer_addr;
static const char *local_ip;
static int ctl_fd;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (cond) {                                                \
			printf("PASS: ");                                  \
		} else {                                                   \
			printf("FAIL(line %d, errno %d): ", __LINE__, errno); \
			failures++;                                        \
		}                                                          \
		printf(__VA_ARGS__);                                       \
		printf("\n");                                              \
		fflush(stdout);                                            \
	} while (0)

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

static int udp_bound(const char *ip, int port, int reuse)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	int one = 1;
	if (reuse)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = sin_of(ip, port);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("bind");
		exit(2);
	}
	return fd;
}

static void pattern(unsigned char *p, size_t n, unsigned k)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(k * 7 + i);
}

static int is_pattern(const unsigned char *p, size_t n, unsigned k)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(k * 7 + i))
			return 0;
	return 1;
}

/* ---- peer ---- */

static int run_peer(const char *own_ip)
{
	int main_fd = udp_bound("0.0.0.0", PEER_PORT, 1);
	int alt_fd = udp_bound("0.0.0.0", PEER_ALT_PORT, 1);
	/* The testbed has no default route: multicast leaves by our address. */
	struct in_addr ifa;
	inet_pton(AF_INET, own_ip, &ifa);
	setsockopt(main_fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa));
	setsockopt(alt_fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa));
	static unsigned char buf[70000];
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(main_fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &fl);
		if (n < 0)
			continue;
		buf[n] = 0;
		if (n == 4 && !memcmp(buf, "QUIT", 4))
			return 0;
		unsigned count, size, port, tos, ttl, alt, delay;
		char group[32] = "";
		if (sscanf((char *)buf, "SEND %u %u %u %u %u %u %u %31s", &count, &size, &port, &tos, &ttl, &alt,
			   &delay, group) < 7) {
			sendto(main_fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
			continue;
		}
		int fd = alt ? alt_fd : main_fd;
		int t = (int)tos, l = (int)ttl;
		setsockopt(fd, IPPROTO_IP, IP_TOS, &t, sizeof(t));
		setsockopt(fd, IPPROTO_IP, IP_TTL, &l, sizeof(l));
		setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &l, sizeof(l));
		struct sockaddr_in to = from;
		to.sin_port = htons((uint16_t)port);
		if (group[0] && strcmp(group, "-"))
			inet_pton(AF_INET, group, &to.sin_addr);
		if (delay)
			usleep(delay * 1000);
		for (unsigned k = 0; k < count; k++) {
			pattern(buf, size, k);
			while (sendto(fd, buf, size, 0, (struct sockaddr *)&to, sizeof(to)) < 0 && errno == EAGAIN)
				;
		}
	}
}

/* ---- test side ---- */

static void request(unsigned count, unsigned size, int port, int tos, int ttl, int alt, int delay_ms,
		    const char *group)
{
	char req[128];
	int n = snprintf(req, sizeof(req), "SEND %u %u %d %d %d %d %d %s", count, size, port, tos, ttl, alt,
			 delay_ms, group ? group : "-");
	sendto(ctl_fd, req, (size_t)n, 0, (struct sockaddr *)&peer_addr, sizeof(peer_addr));
}

/* Waits (MSG_PEEK|MSG_DONTWAIT, no iomux) until a datagram is queued on fd. */
static int wait_data(int fd, double seconds)
{
	double end = now_s() + seconds;
	char c;
	while (now_s() < end) {
		if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
			return 1;
		usleep(1000);
	}
	return 0;
}

static int nothing_arrives(int fd, double seconds)
{
	usleep((useconds_t)(seconds * 1e6));
	char c;
	errno = 0;
	return recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

static void test_peek_trunc_fionread(void)
{
	int fd = udp_bound("0.0.0.0", 9200, 0);
	unsigned char a[512], b[512];
	request(1, 100, 9200, 0, 64, 0, 0, NULL);
	CHECK(wait_data(fd, 3), "datagram arrives");
	int avail = -1;
	CHECK(ioctl(fd, FIONREAD, &avail) == 0 && avail == 100, "FIONREAD = next datagram size (%d, want 100)", avail);
	ssize_t p = recv(fd, a, sizeof(a), MSG_PEEK);
	ssize_t r = read(fd, b, sizeof(b));
	CHECK(p == 100 && r == 100 && !memcmp(a, b, 100) && is_pattern(b, 100, 0),
	      "MSG_PEEK then read give the same 100 bytes (%zd, %zd)", p, r);

	request(1, 200, 9200, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	struct iovec iov = { a, 50 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	r = recvmsg(fd, &m, MSG_TRUNC | MSG_PEEK);
	CHECK(r == 200 && (m.msg_flags & MSG_TRUNC), "MSG_TRUNC|MSG_PEEK returns the real length 200 (%zd), flag set", r);
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	r = recvmsg(fd, &m, 0);
	CHECK(r == 50 && (m.msg_flags & MSG_TRUNC) && is_pattern(a, 50, 0),
	      "short buffer: 50 bytes, MSG_TRUNC in msg_flags (%zd, flags %#x)", r, m.msg_flags);
	errno = 0;
	CHECK(recv(fd, a, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "truncated datagram's rest is discarded (EAGAIN)");

	request(2, 300, 9200, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	usleep(100000);
	avail = -1;
	CHECK(ioctl(fd, FIONREAD, &avail) == 0 && avail == 300, "FIONREAD with 2 queued = first size (%d)", avail);
	recv(fd, a, sizeof(a), 0);
	recv(fd, a, sizeof(a), 0);
	avail = -1;
	CHECK(ioctl(fd, FIONREAD, &avail) == 0 && avail == 0, "FIONREAD empty = 0 (%d)", avail);

	/* Zero-length datagram. */
	request(1, 0, 9200, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	r = recv(fd, a, sizeof(a), 0);
	CHECK(r == 0, "0-byte datagram received as 0 (%zd)", r);
	close(fd);
}

/* n receive entries, entry i one iovec over bufs + i * size. */
static void mmsg_vec(struct mmsghdr *v, struct iovec *iov, unsigned char *bufs, int n, size_t size)
{
	memset(v, 0, (size_t)n * sizeof(*v));
	for (int i = 0; i < n; i++) {
		iov[i] = (struct iovec){ bufs + (size_t)i * size, size };
		v[i].msg_hdr.msg_iov = &iov[i];
		v[i].msg_hdr.msg_iovlen = 1;
	}
}

static void test_mmsg_scatter(void)
{
	int fd = udp_bound("0.0.0.0", 9201, 0);
	request(5, 64, 9201, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	usleep(200000);
	struct mmsghdr v[8];
	unsigned char bufs[8][128];
	struct iovec iov[8];
	mmsg_vec(v, iov, bufs[0], 8, sizeof(bufs[0]));
	int n = recvmmsg(fd, v, 8, MSG_DONTWAIT, NULL);
	int ok = n == 5;
	for (int i = 0; ok && i < 5; i++)
		ok = v[i].msg_len == 64 && is_pattern(bufs[i], 64, (unsigned)i);
	CHECK(ok, "recvmmsg(vlen 8) returns the 5 queued datagrams in order (%d)", n);

	/* sendmmsg to the echoing peer, 4 datagrams of 10..13 bytes. */
	struct sockaddr_in to = peer_addr;
	for (int i = 0; i < 4; i++) {
		memset(bufs[i], 'a' + i, 10 + i);
		iov[i] = (struct iovec){ bufs[i], (size_t)(10 + i) };
		v[i].msg_hdr = (struct msghdr){ .msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = &iov[i],
						.msg_iovlen = 1 };
	}
	n = sendmmsg(fd, v, 4, 0);
	ok = n == 4;
	for (int i = 0; i < 4; i++)
		ok = ok && v[i].msg_len == (unsigned)(10 + i);
	CHECK(ok, "sendmmsg sends 4, msg_len set (%d)", n);
	int got = 0;
	for (int i = 0; i < 4; i++) {
		unsigned char b[64];
		struct timeval tv = { 2, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		ssize_t r = recv(fd, b, sizeof(b), 0);
		got += r == 10 + i && b[0] == 'a' + i;
	}
	CHECK(got == 4, "the 4 echoes come back in order (%d)", got);

	/* writev/readv scatter on a connected socket. */
	connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr));
	unsigned char out[45], in[60];
	pattern(out, 45, 3);
	struct iovec wv[3] = { { out, 5 }, { out + 5, 15 }, { out + 20, 25 } };
	CHECK(writev(fd, wv, 3) == 45, "writev of 3 pieces sends 45 bytes");
	memset(in, 0, sizeof(in));
	struct iovec rv[3] = { { in, 10 }, { in + 10, 20 }, { in + 30, 30 } };
	ssize_t r = readv(fd, rv, 3);
	CHECK(r == 45 && is_pattern(in, 45, 3) && in[45] == 0, "readv scatters the 45-byte echo over 10+20+30 (%zd)", r);
	close(fd);
}

static void test_cmsgs(const char *ifname)
{
	int fd = udp_bound("0.0.0.0", 9202, 0);
	int one = 1;
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
	setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &one, sizeof(one));
	request(1, 32, 9202, 0x28, 33, 0, 0, NULL);
	wait_data(fd, 3);
	unsigned char b[64];
	char ctl[512];
	struct iovec iov = { b, sizeof(b) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct timeval wall;
	gettimeofday(&wall, NULL);
	ssize_t r = recvmsg(fd, &m, 0);
	int have_pi = 0, have_ts = 0, tos = -1, ttl = -1;
	struct in_pktinfo pi = { 0 };
	struct timeval tv = { 0, 0 };
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			have_pi = 1;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMP) {
			memcpy(&tv, CMSG_DATA(c), sizeof(tv));
			have_ts = 1;
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
			tos = *(unsigned char *)CMSG_DATA(c);
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
			memcpy(&ttl, CMSG_DATA(c), sizeof(ttl));
		}
	}
	char addr[32];
	inet_ntop(AF_INET, &pi.ipi_addr, addr, sizeof(addr));
	CHECK(r == 32 && have_pi && !strcmp(addr, local_ip) && pi.ipi_ifindex == (int)if_nametoindex(ifname),
	      "IP_PKTINFO: ipi_addr %s ifindex %d (want %s, %u)", addr, pi.ipi_ifindex, local_ip,
	      if_nametoindex(ifname));
	double skew = (double)(wall.tv_sec - tv.tv_sec) + (double)(wall.tv_usec - tv.tv_usec) / 1e6;
	CHECK(have_ts && skew > -0.5 && skew < 5, "SO_TIMESTAMP cmsg present, %.3f s before the call", skew);
	CHECK(tos == 0x28, "IP_RECVTOS gives 0x28 (%#x)", tos);
	CHECK(ttl == 33, "IP_RECVTTL gives 33 (%d)", ttl);
	CHECK(!(m.msg_flags & MSG_CTRUNC), "no MSG_CTRUNC with room");

	/* SO_TIMESTAMPNS alone, and a too-small control buffer. */
	int zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &zero, sizeof(zero));
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &zero, sizeof(zero));
	setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &zero, sizeof(zero));
	setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &zero, sizeof(zero));
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	request(2, 32, 9202, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	m = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	r = recvmsg(fd, &m, 0);
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	struct timespec ts = { 0, 0 }, real;
	if (c && c->cmsg_type == SCM_TIMESTAMPNS)
		memcpy(&ts, CMSG_DATA(c), sizeof(ts));
	clock_gettime(CLOCK_REALTIME, &real);
	double d = (double)(real.tv_sec - ts.tv_sec) + (double)(real.tv_nsec - ts.tv_nsec) / 1e9;
	CHECK(r == 32 && c && c->cmsg_type == SCM_TIMESTAMPNS && d > -0.5 && d < 5,
	      "SO_TIMESTAMPNS cmsg present and sane (%.3f s)", d);
	wait_data(fd, 3);
	m = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = 4 };
	r = recvmsg(fd, &m, 0);
	CHECK(r == 32 && (m.msg_flags & MSG_CTRUNC), "control buffer too small: MSG_CTRUNC (flags %#x)", m.msg_flags);
	close(fd);
}

/* The call family as Linux serves it: read() of nothing returns 0 and
 * leaves the datagram queued, recvfrom copies the address length back,
 * recvmmsg's timeout is checked after each datagram (what is left written
 * back, {0, 0} stops after the first, an invalid one is EINVAL), and
 * SO_TIMESTAMP(NS) is one setting: the last set wins, off clears both. */
static void test_call_family(void)
{
	int fd = udp_bound("0.0.0.0", 9208, 0);
	unsigned char b[128];
	request(1, 20, 9208, 0, 64, 0, 0, NULL);
	CHECK(wait_data(fd, 3), "datagram arrives");
	CHECK(read(fd, b, 0) == 0, "read(fd, buf, 0) returns 0");
	struct sockaddr_in from;
	socklen_t fl = sizeof(from) + 8;
	ssize_t r = recvfrom(fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
	CHECK(r == 20 && is_pattern(b, 20, 0) && fl == sizeof(from) && from.sin_port == htons(PEER_PORT),
	      "the datagram read(0) left queued, with the sender's address (%zd, addrlen %u)", r, fl);

	struct mmsghdr v[4];
	unsigned char bufs[4][64];
	struct iovec iov[4];
	mmsg_vec(v, iov, bufs[0], 4, sizeof(bufs[0]));
	struct timespec bad = { 0, 1000000000L };
	errno = 0;
	CHECK(recvmmsg(fd, v, 4, MSG_DONTWAIT, &bad) == -1 && errno == EINVAL, "recvmmsg: tv_nsec 1e9 is EINVAL");
	request(3, 30, 9208, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	usleep(100000);
	struct timespec zero = { 0, 0 };
	int n = recvmmsg(fd, v, 4, MSG_DONTWAIT, &zero);
	CHECK(n == 1 && v[0].msg_len == 30, "recvmmsg with a {0, 0} timeout stops after the first datagram (%d)", n);
	struct timespec left = { 5, 0 };
	n = recvmmsg(fd, v, 4, MSG_WAITFORONE, &left);
	CHECK(n == 2 && is_pattern(bufs[0], 30, 1) && is_pattern(bufs[1], 30, 2) && left.tv_sec >= 4 &&
		      left.tv_sec <= 5,
	      "recvmmsg returns the other 2 and writes back what is left of its timeout (%d, %ld.%09ld)", n,
	      (long)left.tv_sec, left.tv_nsec);

	int one = 1, zero_i = 0;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	char ctl[256];
	int stamps = 0, ns = 0;
	request(1, 10, 9208, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	struct iovec io = { b, sizeof(b) };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	r = recvmsg(fd, &m, 0);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && (c->cmsg_type == SCM_TIMESTAMP || c->cmsg_type == SCM_TIMESTAMPNS)) {
			stamps++;
			ns += c->cmsg_type == SCM_TIMESTAMPNS;
		}
	CHECK(r == 10 && stamps == 1 && ns == 1, "SO_TIMESTAMP then SO_TIMESTAMPNS: one stamp, in ns (%d, %d)", stamps,
	      ns);
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &zero_i, sizeof(zero_i));
	request(1, 10, 9208, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	m = (struct msghdr){ .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	r = recvmsg(fd, &m, 0);
	CHECK(r == 10 && m.msg_controllen == 0, "SO_TIMESTAMP off clears SO_TIMESTAMPNS too (controllen %zu)",
	      (size_t)m.msg_controllen);
	close(fd);
}

static void test_rcvbuf_flood(void)
{
	int fd = udp_bound("0.0.0.0", 9203, 0);
	int small = 4096, got = 0;
	socklen_t gl = sizeof(got);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &gl);
	CHECK(got == 8192, "SO_RCVBUF 4096 reads back as the kernel's doubled 8192 (%d)", got);
	request(3000, 1000, 9203, 0, 64, 0, 0, NULL);
	usleep(1500000);
	unsigned char b[2000];
	int n = 0;
	while (recv(fd, b, sizeof(b), MSG_DONTWAIT) == 1000)
		n++;
	printf("INFO: flood: %d of 3000 kept\n", n);
	CHECK(n > 0 && n < 3000, "flood of 3000 x 1000 B into a small buffer: some kept, rest dropped (%d)", n);
	request(1, 77, 9203, 0, 64, 0, 0, NULL);
	CHECK(wait_data(fd, 3) && recv(fd, b, sizeof(b), 0) == 77, "traffic after the flood is fine");
	close(fd);
}

static void test_fd_reuse(void)
{
	int fd = udp_bound("0.0.0.0", 9204, 0);
	request(1, 10, 9204, 0, 64, 0, 0, NULL);
	unsigned char b[64];
	CHECK(wait_data(fd, 3) && recv(fd, b, sizeof(b), 0) == 10, "socket on 9204 receives");
	int old = fd;
	close(fd);
	int p[2];
	CHECK(pipe(p) == 0 && p[0] == old, "pipe reuses the closed socket's fd %d (%d)", old, p[0]);
	CHECK(write(p[1], "pipe!", 5) == 5 && read(p[0], b, sizeof(b)) == 5 && !memcmp(b, "pipe!", 5),
	      "I/O on the pipe at the reused fd works");
	close(p[0]);
	close(p[1]);
	int f = open("/proc/self/stat", O_RDONLY);
	CHECK(f == old && read(f, b, sizeof(b)) > 0, "a file at the reused fd reads");
	close(f);
	fd = udp_bound("0.0.0.0", 9204, 0);
	request(1, 11, 9204, 0, 64, 0, 0, NULL);
	CHECK(wait_data(fd, 3) && recv(fd, b, sizeof(b), 0) == 11, "a new socket on the same port receives");
	close(fd);
}

static void test_connect(void)
{
	int fd = udp_bound("0.0.0.0", 9205, 0);
	struct sockaddr_in alt = peer_addr;
	alt.sin_port = htons(PEER_ALT_PORT);
	CHECK(connect(fd, (struct sockaddr *)&alt, sizeof(alt)) == 0, "connect to the peer's alt port");
	request(1, 20, 9205, 0, 64, 0, 0, NULL);   /* from 9100: filtered */
	request(1, 21, 9205, 0, 64, 1, 0, NULL);   /* from 9101: accepted */
	unsigned char b[64];
	struct timeval tv = { 2, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssize_t r = recv(fd, b, sizeof(b), 0);
	CHECK(r == 21, "connected: only the connected peer's datagram (%zd, want 21)", r);
	CHECK(nothing_arrives(fd, 0.3), "the other peer port's datagram was filtered");
	struct sockaddr_in name;
	socklen_t nl = sizeof(name);
	CHECK(getpeername(fd, (struct sockaddr *)&name, &nl) == 0 && name.sin_port == htons(PEER_ALT_PORT),
	      "getpeername gives the connected port");
	struct sockaddr un = { .sa_family = AF_UNSPEC };
	CHECK(connect(fd, &un, sizeof(un)) == 0, "connect(AF_UNSPEC) disconnects");
	nl = sizeof(name);
	errno = 0;
	CHECK(getpeername(fd, (struct sockaddr *)&name, &nl) < 0 && errno == ENOTCONN, "getpeername then ENOTCONN");
	nl = sizeof(name);
	CHECK(getsockname(fd, (struct sockaddr *)&name, &nl) == 0 && name.sin_port == htons(9205),
	      "local port kept after disconnect");
	request(1, 22, 9205, 0, 64, 0, 0, NULL);
	r = recv(fd, b, sizeof(b), 0);
	CHECK(r == 22, "unconnected again: datagrams from any peer (%zd)", r);
	errno = 0;
	CHECK(send(fd, b, 1, 0) < 0 && errno == EDESTADDRREQ, "send without a peer: EDESTADDRREQ");
	close(fd);
}

static void test_send_errors(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	static unsigned char big[65508];
	struct sockaddr_in to = peer_addr;
	to.sin_port = htons(9999);
	errno = 0;
	CHECK(sendto(fd, big, 65508, 0, (struct sockaddr *)&to, sizeof(to)) < 0 && errno == EMSGSIZE,
	      "65508 bytes: EMSGSIZE");
	CHECK(sendto(fd, big, 65507, 0, (struct sockaddr *)&to, sizeof(to)) == 65507, "65507 bytes sent");
	struct sockaddr_in bc;
	char net_bc[32];
	snprintf(net_bc, sizeof(net_bc), "%.*s255", (int)(strrchr(local_ip, '.') - local_ip + 1), local_ip);
	bc = sin_of(net_bc, 9999);
	errno = 0;
	CHECK(sendto(fd, big, 10, 0, (struct sockaddr *)&bc, sizeof(bc)) < 0 && errno == EACCES,
	      "%s without SO_BROADCAST: EACCES", net_bc);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one));
	CHECK(sendto(fd, big, 10, 0, (struct sockaddr *)&bc, sizeof(bc)) == 10, "with SO_BROADCAST: sent");
	int tos = 0x10, v = 0;
	socklen_t vl = sizeof(v);
	setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	CHECK(getsockopt(fd, IPPROTO_IP, IP_TOS, &v, &vl) == 0 && v == 0x10, "IP_TOS reads back (%#x)", v);
	int ttl = 7;
	vl = sizeof(v);
	setsockopt(fd, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl));
	CHECK(getsockopt(fd, IPPROTO_IP, IP_TTL, &v, &vl) == 0 && v == 7, "IP_TTL reads back (%d)", v);
	close(fd);
}

static int alarms;
static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void test_blocking(void)
{
	int fd = udp_bound("0.0.0.0", 9206, 0);
	unsigned char b[64];
	errno = 0;
	CHECK(recv(fd, b, sizeof(b), MSG_DONTWAIT) < 0 && errno == EAGAIN, "MSG_DONTWAIT empty: EAGAIN");
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	errno = 0;
	CHECK(recv(fd, b, sizeof(b), 0) < 0 && errno == EAGAIN, "O_NONBLOCK via fcntl: EAGAIN");
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "F_GETFL shows O_NONBLOCK");
	fcntl(fd, F_SETFL, fl);
	int on = 1, off = 0;
	ioctl(fd, FIONBIO, &on);
	errno = 0;
	CHECK(recvfrom(fd, b, sizeof(b), 0, NULL, NULL) < 0 && errno == EAGAIN, "FIONBIO on: EAGAIN");
	ioctl(fd, FIONBIO, &off);
	struct timeval tv = { 0, 200000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	double t = now_s();
	errno = 0;
	ssize_t r = recv(fd, b, sizeof(b), 0);
	double dt = now_s() - t;
	CHECK(r < 0 && errno == EAGAIN && dt > 0.15 && dt < 1.5, "SO_RCVTIMEO 200 ms: EAGAIN after %.3f s", dt);
	struct timeval got;
	socklen_t gl = sizeof(got);
	getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &got, &gl);
	CHECK(got.tv_sec == 0 && got.tv_usec == 200000, "SO_RCVTIMEO reads back");

	/* A signal with SA_RESTART and no timeout: the recv restarts. */
	struct timeval none = { 0, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 0 }, { 0, 300000 } };
	alarms = 0;
	request(1, 12, 9206, 0, 64, 0, 900, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	CHECK(r == 12 && alarms == 1, "SA_RESTART handler ran (%d) and recv restarted (%zd, errno %d)", alarms, r,
	      errno);
	/* Without SA_RESTART: EINTR. */
	sa.sa_flags = 0;
	sigaction(SIGALRM, &sa, NULL);
	tv = (struct timeval){ 3, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setitimer(ITIMER_REAL, &it, NULL);
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EINTR, "no SA_RESTART: EINTR (%zd, errno %d)", r, errno);
	/* SA_RESTART but SO_RCVTIMEO set: Linux gives EINTR too. */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	CHECK(r < 0 && errno == EINTR, "SA_RESTART with SO_RCVTIMEO: EINTR (%zd, errno %d)", r, errno);
	struct itimerval stop = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &stop, NULL);
	signal(SIGALRM, SIG_DFL);
	close(fd);
}

static int mc_socket(int port, const char *group, const char *source)
{
	int fd = udp_bound("0.0.0.0", port, 1);
	int rc;
	if (source) {
		struct ip_mreq_source m = { 0 };
		inet_pton(AF_INET, group, &m.imr_multiaddr);
		inet_pton(AF_INET, source, &m.imr_sourceaddr);
		inet_pton(AF_INET, local_ip, &m.imr_interface);
		rc = setsockopt(fd, IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, &m, sizeof(m));
	} else {
		struct ip_mreq m = { 0 };
		inet_pton(AF_INET, group, &m.imr_multiaddr);
		inet_pton(AF_INET, local_ip, &m.imr_interface);
		rc = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m));
	}
	CHECK(rc == 0, "join %s%s%s on port %d", group, source ? " source " : "", source ? source : "", port);
	return fd;
}

static int count_pattern(int fd, unsigned size, double wait)
{
	unsigned char b[2000];
	int n = 0;
	wait_data(fd, wait);
	usleep(200000);
	while (recv(fd, b, sizeof(b), MSG_DONTWAIT) == (ssize_t)size)
		n++;
	return n;
}

static void test_multicast(const char *peer_ip)
{
	int r1 = mc_socket(9210, "239.1.1.2", NULL), r2 = mc_socket(9210, "239.1.1.2", NULL);
	request(3, 40, 9210, 0, 4, 0, 0, "239.1.1.2");
	int n1 = count_pattern(r1, 40, 3), n2 = count_pattern(r2, 40, 3);
	CHECK(n1 == 3 && n2 == 3, "two receivers on one group each get all 3 (%d, %d)", n1, n2);
	close(r1);
	close(r2);

	int ss = mc_socket(9211, "232.1.1.1", peer_ip);
	int wrong = mc_socket(9212, "232.1.1.1", "198.18.0.99");
	request(2, 41, 9211, 0, 4, 0, 0, "232.1.1.1");
	request(2, 41, 9212, 0, 4, 0, 0, "232.1.1.1");
	int n = count_pattern(ss, 41, 3);
	CHECK(n == 2, "source-specific join: both datagrams from the source (%d)", n);
	CHECK(nothing_arrives(wrong, 0.3), "join with another source: nothing");
	struct ip_mreq_source m = { 0 };
	inet_pton(AF_INET, "232.1.1.1", &m.imr_multiaddr);
	inet_pton(AF_INET, peer_ip, &m.imr_sourceaddr);
	inet_pton(AF_INET, local_ip, &m.imr_interface);
	CHECK(setsockopt(ss, IPPROTO_IP, IP_DROP_SOURCE_MEMBERSHIP, &m, sizeof(m)) == 0, "drop source membership");
	request(2, 41, 9211, 0, 4, 0, 0, "232.1.1.1");
	CHECK(nothing_arrives(ss, 0.5), "after the drop: nothing");
	close(ss);
	close(wrong);

	/* IP_MULTICAST_LOOP with a member in this process. */
	int member = mc_socket(9213, "239.1.1.3", NULL);
	int tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct in_addr ifa;
	inet_pton(AF_INET, local_ip, &ifa);
	setsockopt(tx, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa));
	int mttl = 3, v = 0;
	socklen_t vl = sizeof(v);
	setsockopt(tx, IPPROTO_IP, IP_MULTICAST_TTL, &mttl, sizeof(mttl));
	CHECK(getsockopt(tx, IPPROTO_IP, IP_MULTICAST_TTL, &v, &vl) == 0 && v == 3, "IP_MULTICAST_TTL reads back (%d)",
	      v);
	struct sockaddr_in g = sin_of("239.1.1.3", 9213);
	unsigned char p[50];
	pattern(p, 50, 0);
	int loop = 1;
	setsockopt(tx, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop));
	sendto(tx, p, 50, 0, (struct sockaddr *)&g, sizeof(g));
	CHECK(count_pattern(member, 50, 2) == 1, "IP_MULTICAST_LOOP 1: the local member gets the send");
	loop = 0;
	setsockopt(tx, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop));
	sendto(tx, p, 50, 0, (struct sockaddr *)&g, sizeof(g));
	CHECK(nothing_arrives(member, 0.5), "IP_MULTICAST_LOOP 0: the local member gets nothing");
	close(tx);
	close(member);
}

/* Threads that go to sleep on a fresh socket at the same moment: the
 * socket gets one wake eventfd, not one per racing sleeper with all but one
 * leaked. Counted as the eventfds this process holds around each race
 * (sockets stay open: a closed one's eventfd goes when it is retired). */
struct first_sleep {
	int fd;
	pthread_barrier_t *gate;
};

static void *first_sleep_reader(void *arg)
{
	struct first_sleep *f = arg;
	char b[16];
	pthread_barrier_wait(f->gate);
	recv(f->fd, b, sizeof(b), 0);   /* SO_RCVTIMEO: EAGAIN */
	return NULL;
}

static int count_eventfds(void)
{
	int n = 0;
	char path[64], target[64];
	for (int fd = 0; fd < 512; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t k = readlink(path, target, sizeof(target) - 1);
		if (k <= 0)
			continue;
		target[k] = 0;
		n += strcmp(target, "anon_inode:[eventfd]") == 0;
	}
	return n;
}

static void test_first_sleepers(void)
{
	enum { SOCKETS = 40, THREADS = 4 };
	int fds[SOCKETS], worst = 0, slept = 0;
	pthread_barrier_t gate;
	for (int i = 0; i < SOCKETS; i++) {
		int before = count_eventfds();
		int fd = fds[i] = udp_bound(local_ip, 0, 0);
		struct timeval tv = { 0, 200000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		pthread_barrier_init(&gate, NULL, THREADS);
		pthread_t th[THREADS];
		struct first_sleep f = { fd, &gate };
		for (int t = 0; t < THREADS; t++)
			pthread_create(&th[t], NULL, first_sleep_reader, &f);
		for (int t = 0; t < THREADS; t++)
			pthread_join(th[t], NULL);
		pthread_barrier_destroy(&gate);
		int grew = count_eventfds() - before;
		worst = grew > worst ? grew : worst;
		slept += grew > 0;
	}
	for (int i = 0; i < SOCKETS; i++)
		close(fds[i]);
	CHECK(worst <= 1, "%d sockets, %d first sleepers at once on each: at most one wake eventfd per socket "
	      "(most a socket gained: %d; sockets that gained one: %d)", SOCKETS, THREADS, worst, slept);
}

/* ---- SO_TIMESTAMPING (issue 13 item 6) ---- */

#define TS_PORT 9207
#define TS_DISCARD_PORT 9   /* nobody listens on the peer: no echo comes back */
#define TS_OPT_ID_TCP (1 << 16)   /* newer than some headers */

struct ts_msg {
	ssize_t r;
	int flags;
	int have_ts, ts_len_ok, have_err, have_other;
	struct timespec ts[3];
	struct sock_extended_err ee;
	struct sockaddr_in offender;
	int first_type;              /* the first cmsg's type */
	unsigned char data[2048];
};

static double ts_seconds(const struct timespec *t)
{
	return (double)t->tv_sec + (double)t->tv_nsec / 1e9;
}

static double wall_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return ts_seconds(&t);
}

/* One recvmsg with room for payload (up to room bytes) and control. */
static void ts_recv(int fd, int flags, size_t room, struct ts_msg *out)
{
	char ctl[512];
	memset(out, 0, sizeof(*out));
	struct iovec iov = { out->data, room };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	out->first_type = -1;
	out->r = recvmsg(fd, &m, flags);
	if (out->r < 0)
		return;
	out->flags = m.msg_flags;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (out->first_type < 0)
			out->first_type = c->cmsg_type;
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
			out->have_ts = 1;
			out->ts_len_ok = c->cmsg_len == CMSG_LEN(sizeof(struct scm_timestamping));
			memcpy(out->ts, CMSG_DATA(c), sizeof(out->ts));
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) {
			out->have_err = 1;
			memcpy(&out->ee, CMSG_DATA(c), sizeof(out->ee));
			memcpy(&out->offender, CMSG_DATA(c) + sizeof(out->ee), sizeof(out->offender));
		} else {
			out->have_other = 1;
		}
	}
}

static int ts_set(int fd, int flags)
{
	return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags));
}

static int ts_sane(const struct ts_msg *m, double before, double after)
{
	double t = ts_seconds(&m->ts[0]);
	return m->have_ts && m->ts_len_ok && t >= before - 0.001 && t <= after + 0.001 && m->ts[1].tv_sec == 0 &&
	       m->ts[1].tv_nsec == 0 && m->ts[2].tv_sec == 0 && m->ts[2].tv_nsec == 0;
}

static void test_timestamping_flags(void)
{
	int fd = udp_bound("0.0.0.0", 0, 0);
	int bad_bit = 1 << 30;
	errno = 0;
	CHECK(ts_set(fd, bad_bit) < 0 && errno == EINVAL, "SO_TIMESTAMPING with an unknown bit: EINVAL");
	errno = 0;
	CHECK(ts_set(fd, SOF_TIMESTAMPING_OPT_STATS) < 0 && errno == EINVAL,
	      "SO_TIMESTAMPING OPT_STATS without OPT_TSONLY: EINVAL");
	errno = 0;
	CHECK(ts_set(fd, TS_OPT_ID_TCP) < 0 && errno == EINVAL, "SO_TIMESTAMPING OPT_ID_TCP without OPT_ID: EINVAL");
	short small = SOF_TIMESTAMPING_SOFTWARE;
	errno = 0;
	CHECK(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &small, sizeof(small)) < 0 && errno == EINVAL,
	      "SO_TIMESTAMPING with a 2-byte value: EINVAL");
	int hw = SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_RX_HARDWARE | SOF_TIMESTAMPING_RAW_HARDWARE;
	CHECK(ts_set(fd, hw) == 0, "hardware flags are accepted");
	int got = -1;
	socklen_t len = sizeof(got);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &got, &len) == 0 && got == hw && len == sizeof(got),
	      "getsockopt reads the flags back (%#x)", got);
	struct so_timestamping both = { .flags = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE };
	CHECK(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &both, sizeof(both)) == 0,
	      "struct so_timestamping form accepted");
	struct so_timestamping back = { -1, -1 };
	len = sizeof(back);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &back, &len) == 0 && len == sizeof(back) &&
	      back.flags == both.flags && back.bind_phc == 0,
	      "getsockopt in struct form (%#x, phc %d, len %u)", back.flags, back.bind_phc, len);
	close(fd);
}

static void test_timestamping_rx(void)
{
	int fd = udp_bound("0.0.0.0", TS_PORT, 0);
	int one = 1;
	CHECK(ts_set(fd, SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE) == 0,
	      "SO_TIMESTAMPING RX_SOFTWARE|SOFTWARE set");
	/* Linux switches its receive stamping on from a work item: a datagram
	 * right after the call may come unstamped (our stamps are always on). */
	usleep(200000);
	double before = wall_s();
	request(2, 40, TS_PORT, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	usleep(100000);
	struct ts_msg a, b;
	ts_recv(fd, 0, 1500, &a);
	ts_recv(fd, 0, 1500, &b);
	double after = wall_s();
	CHECK(a.r == 40 && ts_sane(&a, before, after), "RX: SCM_TIMESTAMPING with a software stamp (%.6f s before the "
	      "read), ts[1] and ts[2] zero (%zd bytes)", after - ts_seconds(&a.ts[0]), a.r);
	CHECK(b.r == 40 && ts_sane(&b, before, after) && ts_seconds(&b.ts[0]) >= ts_seconds(&a.ts[0]),
	      "RX: the second datagram's stamp is not older (%+.6f s)", ts_seconds(&b.ts[0]) - ts_seconds(&a.ts[0]));

	/* With SO_TIMESTAMPNS too: both, in Linux's order. */
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	request(1, 41, TS_PORT, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	ts_recv(fd, 0, 1500, &a);
	CHECK(a.r == 41 && a.have_ts && a.have_other && a.first_type == SCM_TIMESTAMPNS,
	      "RX: SO_TIMESTAMPNS comes first, then SCM_TIMESTAMPING (first type %d)", a.first_type);
	int zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &zero, sizeof(zero));

	/* Generation without reporting: no stamp. */
	ts_set(fd, SOF_TIMESTAMPING_RX_SOFTWARE);
	request(1, 42, TS_PORT, 0, 64, 0, 0, NULL);
	wait_data(fd, 3);
	ts_recv(fd, 0, 1500, &a);
	CHECK(a.r == 42 && !a.have_ts, "RX: RX_SOFTWARE without SOFTWARE reports nothing");
	close(fd);
}

static int ts_sendto_peer(int fd, const void *buf, size_t len)
{
	struct sockaddr_in to = peer_addr;
	to.sin_port = htons(TS_DISCARD_PORT);
	return (int)sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to));
}

static void test_timestamping_tx(void)
{
	int fd = udp_bound(local_ip, 0, 0);
	unsigned char out[100];
	pattern(out, sizeof(out), 5);
	struct ts_msg a, b, c;

	/* OPT_TSONLY with OPT_ID: empty payload, counter 0 then 1. */
	CHECK(ts_set(fd, SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
			      SOF_TIMESTAMPING_OPT_TSONLY) == 0, "TX: SO_TIMESTAMPING TX_SOFTWARE|OPT_ID|OPT_TSONLY set");
	struct pollfd p = { fd, 0, 0 };
	CHECK(poll(&p, 1, 0) == 0, "TX: no POLLERR before a send (%#x)", p.revents);
	double before = wall_s();
	ts_sendto_peer(fd, out, 60);
	ts_sendto_peer(fd, out, 70);
	p.revents = 0;
	int pr = poll(&p, 1, 1000);
	CHECK(pr == 1 && (p.revents & POLLERR), "TX: poll reports POLLERR for the error queue (%#x)", p.revents);
	ts_recv(fd, MSG_ERRQUEUE, 1500, &a);
	ts_recv(fd, MSG_ERRQUEUE, 1500, &b);
	double after = wall_s();
	CHECK(a.r == 0 && (a.flags & MSG_ERRQUEUE) && ts_sane(&a, before, after) && a.have_err &&
	      a.ee.ee_errno == ENOMSG && a.ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING && a.ee.ee_info == SCM_TSTAMP_SND &&
	      a.ee.ee_data == 0 && a.first_type == SO_TIMESTAMPING,
	      "TX: error queue: 0 bytes, SCM_TIMESTAMPING then IP_RECVERR ENOMSG/TIMESTAMPING/SND, key 0 (r %zd, "
	      "flags %#x, errno %u origin %u info %u data %u)", a.r, a.flags, a.ee.ee_errno, a.ee.ee_origin,
	      a.ee.ee_info, a.ee.ee_data);
	CHECK(b.r == 0 && ts_sane(&b, before, after) && b.ee.ee_data == 1 &&
	      ts_seconds(&b.ts[0]) >= ts_seconds(&a.ts[0]),
	      "TX: second stamp: key 1, not older (%u, %+.6f s)", b.ee.ee_data,
	      ts_seconds(&b.ts[0]) - ts_seconds(&a.ts[0]));
	errno = 0;
	ts_recv(fd, MSG_ERRQUEUE | MSG_DONTWAIT, 1500, &c);
	CHECK(c.r < 0 && errno == EAGAIN, "TX: error queue drained: EAGAIN");
	p.revents = 0;
	CHECK(poll(&p, 1, 0) == 0, "TX: no POLLERR once drained (%#x)", p.revents);
	close(fd);

	/* With the packet and TX_SCHED: SCHED then SND, each carrying the frame
	 * from its Ethernet header; a short buffer truncates. */
	fd = udp_bound(local_ip, 0, 0);
	ts_set(fd, SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_SOFTWARE |
			   SOF_TIMESTAMPING_OPT_ID);
	ts_sendto_peer(fd, out, sizeof(out));
	ts_sendto_peer(fd, out, 30);
	usleep(50000);
	ts_recv(fd, MSG_ERRQUEUE, 1500, &a);
	ts_recv(fd, MSG_ERRQUEUE, 1500, &b);
	const size_t hdrs = 14 + 20 + 8;
	int frame_ok = a.r == (ssize_t)(hdrs + sizeof(out)) && a.data[12] == 0x08 && a.data[13] == 0x00 &&
		       a.data[14] == 0x45 && a.data[23] == 17 && !memcmp(a.data + hdrs, out, sizeof(out));
	CHECK(frame_ok && a.ee.ee_info == SCM_TSTAMP_SCHED && a.ee.ee_data == 0 && a.offender.sin_family == 0,
	      "TX: SCHED stamp first, with the Ethernet frame as sent (%zd bytes, info %u)", a.r, a.ee.ee_info);
	CHECK(b.r == a.r && !memcmp(a.data, b.data, (size_t)a.r) && b.ee.ee_info == SCM_TSTAMP_SND && b.ee.ee_data == 0 &&
	      ts_seconds(&b.ts[0]) >= ts_seconds(&a.ts[0]),
	      "TX: then the SND stamp of the same datagram (%zd bytes, info %u)", b.r, b.ee.ee_info);
	ts_recv(fd, MSG_ERRQUEUE, 10, &a);
	CHECK(a.r == 10 && (a.flags & MSG_TRUNC) && (a.flags & MSG_ERRQUEUE) && a.ee.ee_data == 1,
	      "TX: a 10-byte buffer gets 10 bytes and MSG_TRUNC (%zd, flags %#x)", a.r, a.flags);
	ts_recv(fd, MSG_ERRQUEUE, 1500, &a);
	CHECK(a.r == (ssize_t)(hdrs + 30) && a.ee.ee_info == SCM_TSTAMP_SND && a.ee.ee_data == 1,
	      "TX: second datagram's SND (%zd bytes)", a.r);

	/* epoll reports EPOLLERR; the queue is bounded by the receive buffer. */
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	ts_sendto_peer(fd, out, 20);
	struct epoll_event got = { 0 };
	int n = epoll_wait(ep, &got, 1, 1000);
	CHECK(n == 1 && (got.events & EPOLLERR), "TX: epoll_wait reports EPOLLERR (%d, %#x)", n, got.events);
	close(ep);
	int queued = 0;
	ts_set(fd, SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_TSONLY);
	for (int i = 0; i < 3000; i++)
		ts_sendto_peer(fd, out, 20);
	usleep(100000);
	while (ts_recv(fd, MSG_ERRQUEUE | MSG_DONTWAIT, 1500, &a), a.r >= 0)
		queued++;
	CHECK(queued > 50 && queued < 3000, "TX: 3000 unread stamps: the error queue holds a bounded number (%d)",
	      queued);
	close(fd);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "peer"))
		return run_peer(argv[2]);
	if (argc < 5 || strcmp(argv[1], "test")) {
		fprintf(stderr, "usage: %s peer OWN_IP | test PEER_IP LOCAL_IP IFNAME\n", argv[0]);
		return 2;
	}
	peer_addr = sin_of(argv[2], PEER_PORT);
	local_ip = argv[3];
	ctl_fd = socket(AF_INET, SOCK_DGRAM, 0);
	test_peek_trunc_fionread();
	test_mmsg_scatter();
	test_cmsgs(argv[4]);
	test_call_family();
	test_rcvbuf_flood();
	test_fd_reuse();
	test_connect();
	test_send_errors();
	test_blocking();
	test_first_sleepers();
	test_multicast(argv[2]);
	test_timestamping_flags();
	test_timestamping_rx();
	test_timestamping_tx();
	close(ctl_fd);
	printf("%s: %d failure(s)\n", failures ? "FAILED" : "OK", failures);
	return failures ? 1 : 0;
}
