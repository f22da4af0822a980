/* Every member of the Extra API once, with the result docs/extra_api.md
 * documents, from a program that does not share our build: built twice,
 * against <mellanox/vma_extra.h> (api_members) and against declarations of
 * its own written from the documented values and layouts (api_members_local,
 * -DAPI_LOCAL_DECLS), as a program built against libvma's own header would
 * be. Without the library vma_get_api() is NULL and it falls back to plain
 * sockets, as the manual tells applications to.
 *
 *   api_members CTL_ADDR CTL_PORT BIND_ADDR PORT
 *
 * The kernel peer at CTL_ADDR:CTL_PORT sends "n port size" datagrams on
 * request (4-byte sequence number, then byte k = seq + k). Prints PASS/FAIL
 * lines, "api_members: ok (extra api | fallback)"; exit 0 when all passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#ifndef API_LOCAL_DECLS
#include <mellanox/vma_extra.h>
#define API_BUILD "header"
#else
/* ---- the documented ABI, declared here (seed 003, the public 9.x header) ---- */
#define API_BUILD "local declarations"
#define SO_VMA_GET_API 2800
#define SO_VMA_USER_DATA 2801
#define MSG_VMA_ZCOPY_FORCE 0x01000000
#define MSG_VMA_ZCOPY 0x00040000
#define VMA_SND_FLAGS_DUMMY 0x400
#define VMA_SOCKETXTREME_PACKET (1ULL << 32)
#define VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED (1ULL << 33)
typedef enum { VMA_PACKET_DROP, VMA_PACKET_RECV, VMA_PACKET_HOLD } vma_recv_callback_retval_t;
struct vma_buff_t {
	struct vma_buff_t *next;
	void *payload;
	uint16_t len;
};
struct vma_packet_desc_t {
	size_t num_bufs;
	uint16_t total_len;
	struct vma_buff_t *buff_lst;
};
struct vma_completion_t {
	struct vma_packet_desc_t packet;
	uint64_t events;
	uint64_t user_data;
	struct sockaddr_in src;
	int listen_fd;
};
struct __attribute__((packed)) vma_packet_t {
	void *packet_id;
	size_t sz_iov;
	struct iovec iov[];
};
struct __attribute__((packed)) vma_packets_t {
	size_t n_packet_num;
	struct vma_packet_t pkts[];
};
struct __attribute__((packed)) vma_info_t {
	size_t struct_sz;
	void *packet_id;
	struct sockaddr_in *src;
	struct sockaddr_in *dst;
	size_t payload_sz;
	uint32_t socket_ready_queue_pkt_count;
	uint32_t socket_ready_queue_byte_count;
	struct timespec hw_timestamp;
	struct timespec sw_timestamp;
};
typedef vma_recv_callback_retval_t (*vma_recv_callback_t)(int fd, size_t sz_iov, struct iovec iov[],
							  struct vma_info_t *vma_info, void *context);
enum {
	VMA_EXTRA_API_REGISTER_RECV_CALLBACK = 1 << 0, VMA_EXTRA_API_RECVFROM_ZCOPY = 1 << 1,
	VMA_EXTRA_API_FREE_PACKETS = 1 << 2, VMA_EXTRA_API_ADD_CONF_RULE = 1 << 3,
	VMA_EXTRA_API_THREAD_OFFLOAD = 1 << 4, VMA_EXTRA_API_DUMP_FD_STATS = 1 << 5,
	VMA_EXTRA_API_SOCKETXTREME_POLL = 1 << 6, VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_PACKETS = 1 << 7,
	VMA_EXTRA_API_SOCKETXTREME_REF_VMA_BUFF = 1 << 8, VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_BUFF = 1 << 9,
	VMA_EXTRA_API_GET_SOCKET_RINGS_NUM = 1 << 10, VMA_EXTRA_API_GET_SOCKET_RINGS_FDS = 1 << 11,
	VMA_EXTRA_API_GET_SOCKET_TX_RING_FD = 1 << 12, VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER = 1 << 13,
	VMA_EXTRA_API_GET_RING_DIRECT_DESCRIPTORS = 1 << 14, VMA_EXTRA_API_REGISTER_MEMORY_ON_RING = 1 << 15,
	VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING = 1 << 16, VMA_EXTRA_API_ADD_RING_PROFILE = 1 << 17,
	VMA_EXTRA_API_MODIFY_RING = 1 << 18, VMA_EXTRA_API_IOCTL = 1 << 19, VMA_EXTRA_API_GET_DPCP_DEVICES = 1 << 20,
};
/* Members this program passes only NULL to are declared with void *. */
struct __attribute__((packed)) vma_api_t {
	int (*register_recv_callback)(int s, vma_recv_callback_t callback, void *context);
	int (*recvfrom_zcopy)(int s, void *buf, size_t len, int *flags, struct sockaddr *from, socklen_t *fromlen);
	int (*free_packets)(int s, struct vma_packet_t *pkts, size_t count);
	int (*add_conf_rule)(const char *config_line);
	int (*thread_offload)(int offload, pthread_t tid);
	int (*socketxtreme_poll)(int fd, struct vma_completion_t *completions, unsigned int ncompletions, int flags);
	int (*get_socket_rings_num)(int fd);
	int (*get_socket_rings_fds)(int fd, int *ring_fds, int ring_fds_sz);
	int (*get_socket_tx_ring_fd)(int sock_fd, struct sockaddr *to, socklen_t tolen);
	int (*socketxtreme_free_vma_packets)(struct vma_packet_desc_t *packets, int num);
	int (*socketxtreme_ref_vma_buff)(struct vma_buff_t *buff);
	int (*socketxtreme_free_vma_buff)(struct vma_buff_t *buff);
	int (*dump_fd_stats)(int fd, int log_level);
	int (*vma_add_ring_profile)(void *profile, int *key);
	int (*get_socket_network_header)(int fd, void *ptr, uint16_t *len);
	int (*get_ring_direct_descriptors)(int fd, void *data);
	int (*register_memory_on_ring)(int fd, void *addr, size_t length, uint32_t *key);
	int (*deregister_memory_on_ring)(int fd, void *addr, size_t length);
	int (*vma_modify_ring)(void *mr_data);
	uint64_t vma_extra_supported_mask;
	int (*ioctl)(void *cmsg_hdr, size_t cmsg_len);
	int (*get_dpcp_devices)(uintptr_t **devices, size_t *devices_num);
};
_Static_assert(offsetof(struct vma_api_t, vma_extra_supported_mask) == 152, "vma_api_t layout");
_Static_assert(sizeof(struct vma_completion_t) == 64, "vma_completion_t layout");
static inline struct vma_api_t *vma_get_api(void)
{
	struct vma_api_t *api = NULL;
	socklen_t len = sizeof(api);
	if (getsockopt(-1, SOL_SOCKET, SO_VMA_GET_API, &api, &len) < 0)
		return NULL;
	return api;
}
#endif

#define AM_SIZE 120
static int am_failures;
static struct sockaddr_in am_ctl;

static void am_check(bool ok, const char *what)
{
	printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		am_failures++;
}

static bool am_intact(const uint8_t *p, size_t n)
{
	if (n != AM_SIZE)
		return false;
	uint32_t seq;
	memcpy(&seq, p, 4);
	seq = ntohl(seq);
	for (size_t k = 4; k < n; k++)
		if (p[k] != (uint8_t)(seq + k))
			return false;
	return true;
}

static int am_socket(const char *addr, int port)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, addr, &me.sin_addr);
	struct timeval tv = { .tv_sec = 2 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0)
		perror("api_members: bind");
	return fd;
}

static void am_ask(int fd, int port, int n)
{
	char req[64];
	int len = snprintf(req, sizeof(req), "%d %d %d", n, port, AM_SIZE);
	sendto(fd, req, (size_t)len, 0, (struct sockaddr *)&am_ctl, sizeof(am_ctl));
}

static long am_cb_seen;
static vma_recv_callback_retval_t am_cb(int fd, size_t sz_iov, struct iovec iov[], struct vma_info_t *info, void *ctx)
{
	(void)fd;
	(void)ctx;
	if (sz_iov == 1 && info->struct_sz == sizeof(struct vma_info_t) && info->payload_sz == AM_SIZE &&
	    am_intact(iov[0].iov_base, iov[0].iov_len) && info->src->sin_addr.s_addr == am_ctl.sin_addr.s_addr)
		am_cb_seen++;
	return VMA_PACKET_RECV;
}

/* Without libvma: the same exchange with plain sockets. */
static int am_fallback(const char *addr, int port)
{
	int fd = am_socket(addr, port);
	am_ask(fd, port, 10);
	uint8_t buf[2048];
	int got = 0;
	for (int i = 0; i < 10; i++) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0)
			break;
		got += am_intact(buf, (size_t)r);
	}
	am_check(got == 10, "fallback: 10 datagrams by recv() on a plain socket");
	close(fd);
	printf("api_members (%s): %s\n", API_BUILD, am_failures ? "FAILED" : "ok (fallback)");
	return am_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s CTL_ADDR CTL_PORT BIND_ADDR PORT\n", argv[0]);
		return 2;
	}
	am_ctl = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &am_ctl.sin_addr);
	const char *addr = argv[3];
	int port = atoi(argv[4]);
	struct vma_api_t *api = vma_get_api();
	if (!api)
		return am_fallback(addr, port);
	uint64_t mask = api->vma_extra_supported_mask;
	bool xtreme = (mask & VMA_EXTRA_API_SOCKETXTREME_POLL) != 0;
	const uint64_t always = VMA_EXTRA_API_REGISTER_RECV_CALLBACK | VMA_EXTRA_API_RECVFROM_ZCOPY |
				VMA_EXTRA_API_FREE_PACKETS | VMA_EXTRA_API_ADD_CONF_RULE | VMA_EXTRA_API_THREAD_OFFLOAD |
				VMA_EXTRA_API_DUMP_FD_STATS | VMA_EXTRA_API_GET_SOCKET_RINGS_NUM |
				VMA_EXTRA_API_GET_SOCKET_RINGS_FDS | VMA_EXTRA_API_GET_SOCKET_TX_RING_FD |
				VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER | VMA_EXTRA_API_REGISTER_MEMORY_ON_RING |
				VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING;
	const uint64_t xt = VMA_EXTRA_API_SOCKETXTREME_POLL | VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_PACKETS |
			    VMA_EXTRA_API_SOCKETXTREME_REF_VMA_BUFF | VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_BUFF;
	am_check(mask == (always | (xtreme ? xt : 0)), "capability mask: the documented members, SocketXtreme's with "
						       "VMA_SOCKETXTREME=1");

	/* register_recv_callback */
	int fd = am_socket(addr, port);
	am_check(api->register_recv_callback(fd, am_cb, NULL) == 0, "register_recv_callback: 0");
	am_ask(fd, port, 10);
	uint8_t buf[4096];
	int got = 0;
	for (int i = 0; i < 10; i++) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0)
			break;
		got += am_intact(buf, (size_t)r);
	}
	am_check(got == 10 && am_cb_seen == 10, "callback saw 10 datagrams (vma_info filled), RECV let recv() read them");
	am_check(api->register_recv_callback(fd, NULL, NULL) == 0, "register_recv_callback(NULL): unregistered");
	am_check(api->register_recv_callback(-1, am_cb, NULL) == -1 && errno == EBADF, "register_recv_callback(-1): EBADF");

	/* recvfrom_zcopy + free_packets */
	am_ask(fd, port, 10);
	int zc = 0;
	for (int i = 0; i < 10; i++) {
		int flags = MSG_VMA_ZCOPY_FORCE;
		int r = api->recvfrom_zcopy(fd, buf, sizeof(buf), &flags, NULL, NULL);
		if (r < 0)
			break;
		struct vma_packets_t *pk = (struct vma_packets_t *)buf;
		if ((flags & MSG_VMA_ZCOPY) && pk->n_packet_num == 1 && pk->pkts[0].sz_iov == 1 &&
		    am_intact(pk->pkts[0].iov[0].iov_base, pk->pkts[0].iov[0].iov_len))
			zc++;
		if (api->free_packets(fd, &pk->pkts[0], 1) != 0)
			zc = -100;
		if (i == 9)
			am_check(api->free_packets(fd, &pk->pkts[0], 1) == -1 && errno == ENOENT,
				 "free_packets of a freed packet: ENOENT");
	}
	am_check(zc == 10, "recvfrom_zcopy: 10 datagrams lent in place (MSG_VMA_ZCOPY), free_packets 0");
	int flags = MSG_VMA_ZCOPY_FORCE | MSG_DONTWAIT;
	am_check(api->recvfrom_zcopy(fd, buf, sizeof(buf), &flags, NULL, NULL) == -1 && errno == EAGAIN,
		 "recvfrom_zcopy with nothing queued, MSG_DONTWAIT: EAGAIN");

	/* rings, header, memory, stats */
	int nrings = api->get_socket_rings_num(fd);
	int ring = -1;
	am_check(nrings >= 1 && api->get_socket_rings_fds(fd, &ring, 1) == 1 && ring >= 0,
		 "get_socket_rings_num >= 1, get_socket_rings_fds gives a ring fd");
	am_check(api->get_socket_tx_ring_fd(fd, (struct sockaddr *)&am_ctl, sizeof(am_ctl)) == ring,
		 "get_socket_tx_ring_fd toward the peer: that ring");
	int cfd = socket(AF_INET, SOCK_DGRAM, 0);
	connect(cfd, (struct sockaddr *)&am_ctl, sizeof(am_ctl));
	uint16_t hlen = 0;
	uint8_t hdr[64];
	am_check(api->get_socket_network_header(cfd, NULL, &hlen) == 0 && hlen == 42, "network header size: 42");
	hlen = sizeof(hdr);
	am_check(api->get_socket_network_header(cfd, hdr, &hlen) == 0 && hdr[12] == 0x08 && hdr[23] == 17 &&
			 memcmp(hdr + 30, &am_ctl.sin_addr, 4) == 0,
		 "network header: IPv4, UDP, to the peer");
	uint32_t key = 1;
	am_check(api->register_memory_on_ring(ring, buf, sizeof(buf), &key) == 0 && key == 0 &&
			 api->deregister_memory_on_ring(ring, buf, sizeof(buf)) == 0,
		 "register/deregister_memory_on_ring: 0, key 0");
	am_check(api->dump_fd_stats(fd, 3) == 0 && api->dump_fd_stats(fd, 9) == -1 && errno == EINVAL,
		 "dump_fd_stats: 0; level 9: EINVAL");

	/* add_conf_rule, thread_offload: later sockets */
	/* (What a rule does to later sockets: tests/integration/extra_api.sh.) */
	am_check(api->add_conf_rule("use os udp_receiver *:19999") == 0, "add_conf_rule: 0");
	am_check(api->add_conf_rule("use sometimes udp_receiver") == -1 && errno == EINVAL,
		 "add_conf_rule of a bad line: -1 EINVAL");
	am_check(api->thread_offload(0, pthread_self()) == 0, "thread_offload(0): 0");
	int kfd = socket(AF_INET, SOCK_DGRAM, 0);
	am_check(api->thread_offload(1, pthread_self()) == 0, "thread_offload(1): 0");
	am_check(api->get_socket_rings_num(kfd) == -1 && errno == EINVAL && api->free_packets(kfd, NULL, 0) == -1 &&
			 errno == EINVAL,
		 "a socket made under thread_offload(0) is the kernel's (EINVAL)");

	/* dummy send and user data */
	am_check(send(cfd, buf, 64, VMA_SND_FLAGS_DUMMY) == 64, "dummy send on an offloaded socket: 64");
	am_check(send(kfd, buf, 64, VMA_SND_FLAGS_DUMMY) == -1 && errno == EINVAL, "dummy send on a kernel socket: EINVAL");
	uint64_t ud = 0x1234;
	am_check(setsockopt(fd, SOL_SOCKET, SO_VMA_USER_DATA, &ud, sizeof(ud)) == 0, "SO_VMA_USER_DATA: 0");

	/* SocketXtreme */
	struct vma_completion_t comps[4];
	if (xtreme) {
		am_ask(fd, port, 10);
		int pk = 0, ok = 0;
		for (time_t end = time(NULL) + 3; pk < 10 && time(NULL) < end;) {
			int n = api->socketxtreme_poll(ring, comps, 4, 0);
			for (int i = 0; i < n; i++) {
				if (!(comps[i].events & VMA_SOCKETXTREME_PACKET))
					continue;
				pk++;
				struct vma_buff_t *b = comps[i].packet.buff_lst;
				ok += comps[i].user_data == ud && b && !b->next && am_intact(b->payload, b->len) &&
				      comps[i].src.sin_addr.s_addr == am_ctl.sin_addr.s_addr;
				if (pk == 1) {
					am_check(api->socketxtreme_ref_vma_buff(b) == 2, "socketxtreme_ref_vma_buff: 2");
					am_check(api->socketxtreme_free_vma_buff(b) == 1, "socketxtreme_free_vma_buff: 1");
				}
				ok -= api->socketxtreme_free_vma_packets(&comps[i].packet, 1) != 0;
			}
		}
		am_check(pk == 10 && ok == 10, "socketxtreme_poll: 10 PACKET completions, user_data, bytes in place, freed");
		am_check(api->socketxtreme_poll(fd, comps, 4, 0) == -1 && errno == EBADFD, "socketxtreme_poll(socket fd): EBADFD");
	} else {
		am_check(api->socketxtreme_poll(ring, comps, 4, 0) == -1 && errno == EOPNOTSUPP &&
				 api->socketxtreme_free_vma_packets(NULL, 0) == -1 && errno == EOPNOTSUPP &&
				 api->socketxtreme_ref_vma_buff(NULL) == -1 && errno == EOPNOTSUPP &&
				 api->socketxtreme_free_vma_buff(NULL) == -1 && errno == EOPNOTSUPP,
			 "SocketXtreme without VMA_SOCKETXTREME=1: EOPNOTSUPP");
	}

	/* Not supported on the xdp backend: -1 EOPNOTSUPP, bits clear. */
	int pkey;
	am_check(api->vma_add_ring_profile(NULL, &pkey) == -1 && errno == EOPNOTSUPP &&
			 api->get_ring_direct_descriptors(ring, NULL) == -1 && errno == EOPNOTSUPP &&
			 api->vma_modify_ring(NULL) == -1 && errno == EOPNOTSUPP && api->ioctl(NULL, 0) == -1 &&
			 errno == EOPNOTSUPP && api->get_dpcp_devices(NULL, NULL) == -1 && errno == EOPNOTSUPP,
		 "ring profiles, direct descriptors, modify_ring, ioctl, dpcp: EOPNOTSUPP");
	close(kfd);
	close(cfd);
	close(fd);
	printf("api_members (%s): %s\n", API_BUILD, am_failures ? "FAILED" : "ok (extra api)");
	return am_failures ? 1 : 0;
}
