/* The Extra API against a kernel peer (tests/integration/extra_api.sh).
 *
 *   extra_api noapi                         vma_get_api() must be NULL
 *   extra_api PEER_IP CTL_PORT BASE_PORT PEER_MAC
 *
 * The peer (a kernel UDP service in the other namespace) sends, on request
 * "N PORT SIZE" to CTL_PORT, N datagrams of SIZE bytes to our PORT: byte 0..3
 * the index (network order), then (index + i) & 0xff. Each check prints
 * "PASS: ..." or "FAIL: ..."; the exit status is the number of failures. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <mellanox/vma_extra.h>

static struct vma_api_t *api;
static int failures;
static struct sockaddr_in peer_ctl;
static const char *peer_ip;
static uint8_t peer_mac[6];

static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s: ", ok ? "PASS" : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	if (!ok)
		failures++;
}

static int udp_bound(int port)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("socket/bind");
		exit(100);
	}
	struct timeval tv = { .tv_sec = 2 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int big = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	return fd;
}

static void request(int n, int port, int size)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	char msg[64];
	int len = snprintf(msg, sizeof(msg), "%d %d %d", n, port, size);
	sendto(fd, msg, (size_t)len, 0, (struct sockaddr *)&peer_ctl, sizeof(peer_ctl));
	close(fd);
}

/* Whether len bytes at p are datagram idx's payload from offset off on. */
static int payload_ok(const uint8_t *p, size_t len, size_t off, uint32_t idx)
{
	for (size_t i = 0; i < len; i++) {
		size_t at = off + i;
		uint8_t want = at < 4 ? (uint8_t)(idx >> (8 * (3 - at))) : (uint8_t)((idx + at) & 0xff);
		if (p[i] != want)
			return 0;
	}
	return 1;
}

static uint32_t index_of(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Kernel UDP InDatagrams of this namespace. */
static long kernel_udp_in(void)
{
	FILE *f = fopen("/proc/net/snmp", "r");
	char line[512];
	long v = -1;
	int seen = 0;
	while (f && fgets(line, sizeof(line), f)) {
		/* The second "Udp:" line holds the values; InDatagrams first. */
		if (strncmp(line, "Udp:", 4) == 0 && ++seen == 2) {
			if (sscanf(line + 4, "%ld", &v) != 1)
				v = -1;
			break;
		}
	}
	if (f)
		fclose(f);
	return v;
}

/* ---- the receive callback ---- */

#define CB_N 40
#define CB_SIZE 200
struct cb_state {
	int seen, bad_info, bad_data, wrong_thread;
	pthread_t reader;
	int port;
	void *held[CB_N];
	int nheld;
	uint32_t max_queue_seen;
};

static vma_recv_callback_retval_t on_datagram(int fd, size_t sz_iov, struct iovec iov[], struct vma_info_t *info,
					      void *context)
{
	(void)fd;
	struct cb_state *st = context;
	st->seen++;
	if (!pthread_equal(pthread_self(), st->reader))
		st->wrong_thread++;
	if (info->struct_sz != sizeof(struct vma_info_t) || info->payload_sz != CB_SIZE || !info->src || !info->dst ||
	    info->src->sin_addr.s_addr != inet_addr(peer_ip) || ntohs(info->dst->sin_port) != st->port ||
	    info->sw_timestamp.tv_sec == 0 || !info->packet_id)
		st->bad_info++;
	if (info->socket_ready_queue_pkt_count > st->max_queue_seen)
		st->max_queue_seen = info->socket_ready_queue_pkt_count;
	size_t off = 0;
	uint32_t idx = sz_iov && iov[0].iov_len >= 4 ? index_of(iov[0].iov_base) : 0xffffffff;
	for (size_t i = 0; i < sz_iov; i++) {
		if (!payload_ok(iov[i].iov_base, iov[i].iov_len, off, idx))
			st->bad_data++;
		off += iov[i].iov_len;
	}
	if (off != CB_SIZE)
		st->bad_data++;
	/* Even: read it; 1 mod 4: drop it; 3 mod 4: keep it. */
	if (idx % 2 == 0)
		return VMA_PACKET_RECV;
	if (idx % 4 == 1)
		return VMA_PACKET_DROP;
	st->held[st->nheld++] = info->packet_id;
	return VMA_PACKET_HOLD;
}

static void test_callback(int port)
{
	struct cb_state st = { .reader = pthread_self(), .port = port };
	int fd = udp_bound(port);
	check(api->register_recv_callback(fd, on_datagram, &st) == 0, "register_recv_callback on an offloaded UDP socket");
	request(CB_N, port, CB_SIZE);
	uint8_t buf[2048];
	int got = 0, bad = 0, odd = 0;
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0)
			break;
		got++;
		uint32_t idx = index_of(buf);
		if (idx % 2)
			odd++;
		if (r != CB_SIZE || !payload_ok(buf, (size_t)r, 0, idx))
			bad++;
		if (st.seen == CB_N && got == CB_N / 2)
			break;
	}
	check(st.seen == CB_N, "callback saw each datagram (%d of %d)", st.seen, CB_N);
	check(st.wrong_thread == 0, "callback ran in the reading thread (%d elsewhere)", st.wrong_thread);
	check(st.bad_info == 0, "vma_info filled: size, packet id, addresses, payload size, timestamp (%d bad)",
	      st.bad_info);
	check(st.bad_data == 0, "callback's iov holds the payload intact (%d bad)", st.bad_data);
	check(got == CB_N / 2 && odd == 0 && bad == 0,
	      "VMA_PACKET_RECV datagrams read, DROP and HOLD ones not (%d read, %d odd, %d damaged)", got, odd, bad);
	printf("  callback: the socket's queue held up to %u datagrams when shown one\n", st.max_queue_seen);
	check(st.nheld == CB_N / 4, "VMA_PACKET_HOLD kept %d datagrams", st.nheld);
	struct vma_packet_t pkts[CB_N];
	for (int i = 0; i < st.nheld; i++)
		pkts[i] = (struct vma_packet_t){ .packet_id = st.held[i], .sz_iov = 0 };
	check(api->free_packets(fd, pkts, (size_t)st.nheld) == 0, "free_packets returns the held datagrams");
	errno = 0;
	int r = st.nheld ? api->free_packets(fd, pkts, 1) : -1;
	check(r == -1 && errno == ENOENT, "free_packets of a packet freed already: ENOENT (%d, %s)", r, strerror(errno));
	/* Unregistered: datagrams go straight to the queue again. */
	check(api->register_recv_callback(fd, NULL, NULL) == 0, "register_recv_callback(NULL) unregisters");
	int before = st.seen;
	request(4, port, CB_SIZE);
	got = 0;
	while (got < 4 && recv(fd, buf, sizeof(buf), 0) > 0)
		got++;
	check(got == 4 && st.seen == before, "after unregistering, all 4 datagrams are read, none shown (%d, %d)", got,
	      st.seen - before);
	close(fd);
}

/* ---- zero-copy receive ---- */

#define ZC_N 3000
#define ZC_SIZE 300
static void test_zcopy(int port)
{
	int fd = udp_bound(port);
	request(ZC_N, port, ZC_SIZE);
	uint8_t buf[4096];
	int got = 0, zc = 0, bad = 0, freed_bad = 0;
	for (;;) {
		int flags = MSG_VMA_ZCOPY_FORCE;
		struct sockaddr_in from;
		socklen_t fromlen = sizeof(from);
		int r = api->recvfrom_zcopy(fd, buf, sizeof(buf), &flags, (struct sockaddr *)&from, &fromlen);
		if (r < 0)
			break;
		got++;
		if (!(flags & MSG_VMA_ZCOPY)) {
			bad++;
			continue;
		}
		zc++;
		struct vma_packets_t *pk = (struct vma_packets_t *)buf;
		struct vma_packet_t *p = &pk->pkts[0];
		size_t total = 0;
		uint32_t idx = p->sz_iov ? index_of(p->iov[0].iov_base) : 0;
		for (size_t i = 0; i < p->sz_iov; i++) {
			if (!payload_ok(p->iov[i].iov_base, p->iov[i].iov_len, total, idx))
				bad++;
			total += p->iov[i].iov_len;
		}
		if (pk->n_packet_num != 1 || total != ZC_SIZE || r != ZC_SIZE || from.sin_addr.s_addr != inet_addr(peer_ip))
			bad++;
		if (api->free_packets(fd, p, 1) != 0)
			freed_bad++;
		if (got == ZC_N)
			break;
	}
	/* 3000 datagrams through a ring of 512 receive frames: every frame
	 * lent out came back, or the ring would have run dry. */
	check(got == ZC_N && zc == ZC_N && bad == 0,
	      "recvfrom_zcopy: %d of %d datagrams, %d by zero copy, bytes intact (%d bad)", got, ZC_N, zc, bad);
	check(freed_bad == 0, "free_packets returned every frame (%d failures)", freed_bad);

	/* Copy fallback: no room for the description, no FORCE. */
	request(2, port, ZC_SIZE);
	int flags = 0;
	int r = api->recvfrom_zcopy(fd, buf, 16, &flags, NULL, NULL);
	check(r == 16 && !(flags & MSG_VMA_ZCOPY) && payload_ok(buf, 16, 0, index_of(buf)),
	      "recvfrom_zcopy with a 16-byte buffer copies (%d bytes, flags %#x)", r, flags);
	flags = MSG_VMA_ZCOPY_FORCE;
	errno = 0;
	r = api->recvfrom_zcopy(fd, buf, 16, &flags, NULL, NULL);
	check(r == -1 && errno == EINVAL, "...and refuses under MSG_VMA_ZCOPY_FORCE (%d, %s)", r, strerror(errno));
	/* The second datagram: held, then the socket closed with it held. */
	flags = 0;
	r = api->recvfrom_zcopy(fd, buf, sizeof(buf), &flags, NULL, NULL);
	check(r == ZC_SIZE && (flags & MSG_VMA_ZCOPY), "recvfrom_zcopy without FORCE lends the frame (%d, %#x)", r,
	      flags);
	struct vma_packet_t bogus = { .packet_id = buf, .sz_iov = 0 };
	errno = 0;
	check(api->free_packets(fd, &bogus, 1) == -1 && errno == ENOENT, "free_packets of a foreign id: ENOENT");
	close(fd);
}

/* ---- rules and thread offload ---- */

#define RULE_N 20
static int receive_count(int fd, int n)
{
	char buf[2048];
	int got = 0;
	while (got < n && recv(fd, buf, sizeof(buf), 0) > 0)
		got++;
	return got;
}

static void test_conf_rule(int port_os, int port_vma)
{
	char rule[128];
	snprintf(rule, sizeof(rule), "use os udp_receiver *:%d", port_os);
	check(api->add_conf_rule(rule) == 0, "add_conf_rule(\"%s\")", rule);
	errno = 0;
	check(api->add_conf_rule("use perhaps udp_receiver *:1") != 0 && errno == EINVAL,
	      "add_conf_rule of a bad line fails with EINVAL");
	int fd_os = udp_bound(port_os), fd_vma = udp_bound(port_vma);
	long k0 = kernel_udp_in();
	request(RULE_N, port_vma, 100);
	int got_vma = receive_count(fd_vma, RULE_N);
	long k1 = kernel_udp_in();
	request(RULE_N, port_os, 100);
	int got_os = receive_count(fd_os, RULE_N);
	long k2 = kernel_udp_in();
	check(got_vma == RULE_N && k1 - k0 == 0, "a port no rule names: %d datagrams, kernel InDatagrams +%ld", got_vma,
	      k1 - k0);
	check(got_os == RULE_N && k2 - k1 >= RULE_N, "the port the added rule gives to os: %d datagrams, kernel +%ld",
	      got_os, k2 - k1);
	close(fd_os);
	close(fd_vma);
}

struct thread_case {
	int port, rings_off, errno_off, got, rings_on;
	long kernel_delta;
};

static void *thread_offload_body(void *arg)
{
	struct thread_case *c = arg;
	api->thread_offload(0, pthread_self());
	int fd = udp_bound(c->port);
	errno = 0;
	c->rings_off = api->get_socket_rings_num(fd);
	c->errno_off = errno;
	long k0 = kernel_udp_in();
	request(RULE_N, c->port, 100);
	c->got = receive_count(fd, RULE_N);
	c->kernel_delta = kernel_udp_in() - k0;
	close(fd);
	api->thread_offload(1, pthread_self());
	fd = udp_bound(c->port);
	c->rings_on = api->get_socket_rings_num(fd);
	close(fd);
	return NULL;
}

static void test_thread_offload(int port)
{
	struct thread_case c = { .port = port };
	pthread_t t;
	pthread_create(&t, NULL, thread_offload_body, &c);
	pthread_join(t, NULL);
	check(c.rings_off == -1 && c.errno_off == EINVAL,
	      "thread_offload(0): the thread's new socket is not offloaded (rings %d, %s)", c.rings_off,
	      strerror(c.errno_off));
	check(c.got == RULE_N && c.kernel_delta >= RULE_N, "...its %d datagrams came through the kernel (+%ld)", c.got,
	      c.kernel_delta);
	check(c.rings_on >= 1, "thread_offload(1): the next socket is offloaded again (%d rings)", c.rings_on);
	int fd = udp_bound(port + 1);
	check(api->get_socket_rings_num(fd) >= 1, "other threads were not affected");
	close(fd);
}

/* ---- rings, header, memory, dump ---- */

static void test_rings(int port)
{
	int fd = udp_bound(port);
	int n = api->get_socket_rings_num(fd);
	int fds[8] = { -1, -1, -1, -1, -1, -1, -1, -1 };
	int m = api->get_socket_rings_fds(fd, fds, 8);
	check(n >= 1 && m == n && fcntl(fds[0], F_GETFD) >= 0, "get_socket_rings_num %d, get_socket_rings_fds %d (fd %d)",
	      n, m, fds[0]);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9) };
	to.sin_addr.s_addr = inet_addr(peer_ip);
	int tx = api->get_socket_tx_ring_fd(fd, (struct sockaddr *)&to, sizeof(to));
	check(tx >= 0 && tx == fds[0], "get_socket_tx_ring_fd to the peer: %d", tx);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	errno = 0;
	tx = api->get_socket_tx_ring_fd(fd, (struct sockaddr *)&to, sizeof(to));
	check(tx == -1 && errno == ENODATA, "get_socket_tx_ring_fd to loopback: ENODATA (%d)", tx);
	static char mem[8192];
	uint32_t key = 7;
	check(api->register_memory_on_ring(fds[0], mem, sizeof(mem), &key) == 0 && key == 0,
	      "register_memory_on_ring accepted on a ring fd");
	check(api->deregister_memory_on_ring(fds[0], mem, sizeof(mem)) == 0, "deregister_memory_on_ring accepted");
	errno = 0;
	check(api->register_memory_on_ring(fd, mem, sizeof(mem), &key) == -1 && errno == EINVAL,
	      "register_memory_on_ring on a socket fd: EINVAL");

	uint16_t len = 0;
	errno = 0;
	check(api->get_socket_network_header(fd, mem, &len) == -1 && errno == ENOBUFS, "network header, len 0: ENOBUFS");
	len = sizeof(mem);
	errno = 0;
	check(api->get_socket_network_header(fd, mem, &len) == -1 && errno == ENOTCONN,
	      "network header of an unconnected socket: ENOTCONN");
	to.sin_addr.s_addr = inet_addr(peer_ip);
	to.sin_port = htons(4242);
	connect(fd, (struct sockaddr *)&to, sizeof(to));
	len = 0;
	int r = api->get_socket_network_header(fd, NULL, &len);
	check(r == 0 && len == 42, "network header size: %u", len);
	uint8_t h[64];
	len = sizeof(h);
	r = api->get_socket_network_header(fd, h, &len);
	struct sockaddr_in self;
	socklen_t sl = sizeof(self);
	getsockname(fd, (struct sockaddr *)&self, &sl);
	uint32_t sum = 0;
	for (int i = 14; i < 34; i += 2)
		sum += (uint32_t)h[i] << 8 | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	uint32_t src, dst;
	memcpy(&src, h + 26, 4);
	memcpy(&dst, h + 30, 4);
	check(r == 0 && len == 42 && memcmp(h, peer_mac, 6) == 0 && h[12] == 8 && h[13] == 0 && h[14] == 0x45 &&
		      h[23] == IPPROTO_UDP && sum == 0xffff && dst == inet_addr(peer_ip) && src != 0 &&
		      memcmp(h + 34, &self.sin_port, 2) == 0 && h[36] == 0x10 && h[37] == 0x92,
	      "network header: peer MAC, IPv4/UDP, valid IP checksum, addresses and ports");
	check(api->dump_fd_stats(fd, 3) == 0, "dump_fd_stats(fd, INFO)");
	check(api->dump_fd_stats(0, 5) == 0, "dump_fd_stats(0, DEBUG): every fd");
	errno = 0;
	check(api->dump_fd_stats(fd, 42) == -1 && errno == EINVAL, "dump_fd_stats with level 42: EINVAL");
	close(fd);
}

static void test_unsupported_and_errors(void)
{
	uint64_t want = VMA_EXTRA_API_REGISTER_RECV_CALLBACK | VMA_EXTRA_API_RECVFROM_ZCOPY | VMA_EXTRA_API_FREE_PACKETS |
			VMA_EXTRA_API_ADD_CONF_RULE | VMA_EXTRA_API_THREAD_OFFLOAD | VMA_EXTRA_API_DUMP_FD_STATS |
			VMA_EXTRA_API_GET_SOCKET_RINGS_NUM | VMA_EXTRA_API_GET_SOCKET_RINGS_FDS |
			VMA_EXTRA_API_GET_SOCKET_TX_RING_FD | VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER |
			VMA_EXTRA_API_REGISTER_MEMORY_ON_RING | VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING;
	check(api->vma_extra_supported_mask == want, "capability mask %#llx", (unsigned long long)api->vma_extra_supported_mask);
	struct vma_completion_t comp;
	errno = 0;
	check(api->socketxtreme_poll(0, &comp, 1, 0) == -1 && errno == EOPNOTSUPP, "socketxtreme_poll: EOPNOTSUPP");
	errno = 0;
	check(api->socketxtreme_free_vma_packets(NULL, 0) == -1 && errno == EOPNOTSUPP &&
		      api->socketxtreme_ref_vma_buff(NULL) == -1 && api->socketxtreme_free_vma_buff(NULL) == -1 &&
		      api->vma_add_ring_profile(NULL, NULL) == -1 && api->get_ring_direct_descriptors(0, NULL) == -1 &&
		      api->vma_modify_ring(NULL) == -1 && api->ioctl(NULL, 0) == -1 &&
		      api->get_dpcp_devices(NULL, NULL) == -1 && errno == EOPNOTSUPP,
	      "the other members answer -1/EOPNOTSUPP");
	int tcp = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	check(api->register_recv_callback(tcp, on_datagram, NULL) == -1 && errno == EINVAL,
	      "register_recv_callback on a TCP socket neither connected nor accepted: EINVAL");
	close(tcp);
	errno = 0;
	check(api->register_recv_callback(-1, on_datagram, NULL) == -1 && errno == EBADF,
	      "register_recv_callback(-1): EBADF");
	errno = 0;
	check(api->get_socket_rings_num(1) == -1 && errno == EINVAL, "get_socket_rings_num(stdout): EINVAL");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && strcmp(argv[1], "noapi") == 0) {
		api = vma_get_api();
		check(api == NULL, "without libvma, vma_get_api() is NULL");
		return failures;
	}
	if (argc != 5) {
		fprintf(stderr, "usage: %s noapi | PEER_IP CTL_PORT BASE_PORT PEER_MAC\n", argv[0]);
		return 100;
	}
	peer_ip = argv[1];
	peer_ctl = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	peer_ctl.sin_addr.s_addr = inet_addr(peer_ip);
	int base = atoi(argv[3]);
	unsigned m[6];
	if (sscanf(argv[4], "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6)
		return 100;
	for (int i = 0; i < 6; i++)
		peer_mac[i] = (uint8_t)m[i];
	api = vma_get_api();
	check(api != NULL, "vma_get_api() under libvma");
	if (!api)
		return failures;
	test_unsupported_and_errors();
	test_callback(base);
	test_zcopy(base + 1);
	test_conf_rule(base + 2, base + 3);
	test_thread_offload(base + 4);
	test_rings(base + 6);
	printf("extra_api: %d failures\n", failures);
	return failures;
}
