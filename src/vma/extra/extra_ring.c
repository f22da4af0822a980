/* The Extra API's ring calls: which rings a socket uses (their fds), the
 * headers a connected socket sends with, and memory registration, which the
 * xdp backend has no use for (docs/extra_api.md).
 *
 * A "ring fd" here is the ring's wait fd (the AF_XDP socket on the xdp
 * backend): poll it for POLLIN to learn that the ring has packets. */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>

#include "extra/extra.h"
#include "net/net.h"
#include "os/os.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"
#include "sock/sock_udp_internal.h"
#include "stack/stack_csum.h"

/* The lane of an offloaded socket and the interface slots it receives on,
 * read under the lane lock; -1 with errno (EBADF, EINVAL: not offloaded). */
static int extra_socket_slots(int fd, struct sock_offload **lane, uint32_t *slots)
{
	if (fd < 0) {
		errno = EBADF;
		return -1;
	}
	struct sock_obj *obj = sock_fd_get(fd);
	if (!obj) {
		errno = EINVAL;
		return -1;
	}
	int rc = -1;
	errno = EINVAL;
	sock_obj_pin(obj);
	if (obj->ops == &sock_udp_ops) {
		struct sock_udp *s = sock_udp_of(obj);
		struct sock_offload *ctx = sock_udp_ctx(s) ? sock_udp_lock(s) : NULL;
		if (ctx) {
			uint32_t m = s->flow_slots;
			for (unsigned i = 0; i < s->ngroups; i++)
				if (s->groups[i].active && s->groups[i].if_slot >= 0)
					m |= 1u << s->groups[i].if_slot;
			/* Not steered yet (unbound): every ring of its lane
			 * is where its traffic will arrive. */
			*slots = m ? m : (1u << ctx->nifs) - 1;
			*lane = ctx;
			sock_offload_unlock(ctx);
			rc = 0;
		}
	} else if (obj->ops == &sock_tcp_kernel_ops) {
		/* Not listening or connected yet (the manual takes the ring fd
		 * right after bind()): the rings of the lane listen() or
		 * connect() will put it in, on the interface of its address
		 * (every one for INADDR_ANY or unbound). */
		struct sock_tcp *t = (struct sock_tcp *)obj;
		struct sock_offload *ctx = t->mode == SOCK_TCP_KERNEL && !t->os_only && !t->released
						   ? sock_offload_get_for_socket(t->ctx, fd, t->ring_logic, t->ring_user_id)
						   : NULL;
		struct sockaddr_in local = { .sin_family = AF_INET };
		socklen_t ll = sizeof(local);
		if (sock_offload_usable(ctx) &&
		    OS_CALL(getsockname, fd, (struct sockaddr *)&local, &ll) == 0) {
			int slot = local.sin_addr.s_addr == INADDR_ANY ? -1
								       : sock_offload_if_slot_by_ip(ctx, local.sin_addr.s_addr);
			if (local.sin_addr.s_addr == INADDR_ANY || slot >= 0) {
				*slots = slot >= 0 ? 1u << slot : (1u << ctx->nifs) - 1;
				*lane = ctx;
				rc = 0;
			}
		}
	} else if (obj->ops == &sock_tcp_offload_ops) {
		struct sock_tcp *t = (struct sock_tcp *)obj;
		struct sock_offload *ctx = __atomic_load_n(&t->ctx, __ATOMIC_ACQUIRE);
		if (sock_offload_usable(ctx) && !t->released && !t->os_only) {
			ctx = sock_tcp_lock(t, ctx);
			uint32_t m = t->listen_slots;
			if (t->pcb && t->if_slot >= 0)
				m |= 1u << t->if_slot;
			*slots = m;
			*lane = ctx;
			sock_offload_unlock(ctx);
			rc = 0;
		}
	}
	sock_obj_unpin(obj);
	return rc;
}

int extra_get_socket_rings_num(int fd)
{
	struct sock_offload *ctx;
	uint32_t slots;
	if (extra_socket_slots(fd, &ctx, &slots) < 0)
		return -1;
	return __builtin_popcount(slots);
}

int extra_get_socket_rings_fds(int fd, int *ring_fds, int ring_fds_sz)
{
	if (!ring_fds || ring_fds_sz <= 0) {
		errno = EINVAL;
		return -1;
	}
	struct sock_offload *ctx;
	uint32_t slots;
	if (extra_socket_slots(fd, &ctx, &slots) < 0)
		return -1;
	int n = 0;
	for (unsigned i = 0; i < ctx->nifs && n < ring_fds_sz; i++)
		if ((slots & (1u << i)) && ctx->ifs[i].ring)
			ring_fds[n++] = ring_wait_fd(ctx->ifs[i].ring);
	return n;
}

/* The slot of ctx whose interface the route to dst leaves by, with the
 * route; -1 when the kernel alone reaches dst. */
static int extra_route_slot(struct sock_offload *ctx, uint32_t dst, const struct sock_udp *s,
			    struct net_route_result *r)
{
	struct net_route_query q = { .dst = dst };
	if (s) {
		q.mc_ifindex = s->mc_ifindex;
		q.mc_if_addr = s->mc_if_addr;
	}
	if (net_route_lookup(ctx->net, &q, r) < 0)
		return -1;
	return sock_offload_if_slot(ctx, r->ifindex);
}

int extra_get_socket_tx_ring_fd(int fd, struct sockaddr *to, socklen_t tolen)
{
	struct sock_offload *ctx;
	uint32_t slots;
	if (extra_socket_slots(fd, &ctx, &slots) < 0)
		return -1;
	if (!to || tolen < (socklen_t)sizeof(struct sockaddr_in) || to->sa_family != AF_INET) {
		errno = EINVAL;
		return -1;
	}
	struct net_route_result r;
	int slot = extra_route_slot(ctx, ((const struct sockaddr_in *)to)->sin_addr.s_addr, NULL, &r);
	if (slot < 0 || !ctx->ifs[slot].ring) {
		errno = ENODATA;   /* the kernel's interface: no ring of ours */
		return -1;
	}
	return ring_wait_fd(ctx->ifs[slot].ring);
}

/* ---- the network header ---- */

#define EXTRA_NET_HEADER_LEN (14 + 20 + 8)
#define EXTRA_NEIGH_WAIT_MS 200

int extra_get_socket_network_header(int fd, void *ptr, uint16_t *len)
{
	if (!len) {
		errno = EINVAL;
		return -1;
	}
	struct sock_obj *obj = fd >= 0 ? sock_fd_get(fd) : NULL;
	if (!obj) {
		errno = fd < 0 ? EBADF : EINVAL;
		return -1;
	}
	if (obj->ops != &sock_udp_ops) {
		/* TCP's header carries per-segment state: not offered. */
		errno = obj->ops == &sock_tcp_offload_ops ? EOPNOTSUPP : ENOTCONN;
		return -1;
	}
	if (!ptr) {
		*len = EXTRA_NET_HEADER_LEN;
		return 0;
	}
	if (*len < EXTRA_NET_HEADER_LEN) {
		errno = ENOBUFS;
		return -1;
	}
	sock_obj_pin(obj);
	struct sock_udp *s = sock_udp_of(obj);
	struct sock_offload *ctx = sock_udp_ctx(s);
	int rc = -1;
	errno = ENOTCONN;
	if (!ctx || !s->connected)
		goto out;
	struct net_route_result r;
	int slot = extra_route_slot(ctx, s->remote_ip, s, &r);
	if (slot < 0)
		goto out;   /* the kernel sends this socket's datagrams */
	uint8_t dst_mac[6];
	if (IN_MULTICAST(ntohl(s->remote_ip))) {
		uint32_t g = ntohl(s->remote_ip);
		const uint8_t m[6] = { 0x01, 0x00, 0x5e, (uint8_t)((g >> 16) & 0x7f), (uint8_t)(g >> 8), (uint8_t)g };
		memcpy(dst_mac, m, 6);
	} else if (net_neigh_resolve(ctx->net, r.ifindex, r.next_hop, dst_mac, EXTRA_NEIGH_WAIT_MS) != 0) {
		goto out;   /* no neighbour: nothing we could send with */
	}
	uint8_t h[EXTRA_NET_HEADER_LEN];
	memcpy(h, dst_mac, 6);
	memcpy(h + 6, ctx->ifs[slot].nif.mac, 6);
	h[12] = 0x08;
	h[13] = 0x00;
	struct iphdr ip = {
		.version = 4, .ihl = 5,
		.tos = (uint8_t)s->tos,
		.tot_len = htons(20 + 8),
		.frag_off = htons(IP_DF),
		.ttl = (uint8_t)(IN_MULTICAST(ntohl(s->remote_ip)) ? (s->mc_ttl >= 0 ? s->mc_ttl : 1)
								    : (s->ttl >= 0 ? s->ttl : 64)),
		.protocol = IPPROTO_UDP,
		.saddr = s->local_ip != INADDR_ANY ? s->local_ip : r.src,
		.daddr = s->remote_ip,
	};
	ip.check = stack_csum_finish(stack_csum_add(0, &ip, sizeof(ip)));
	memcpy(h + 14, &ip, sizeof(ip));
	struct udphdr udp = { .source = s->local_port, .dest = s->remote_port, .len = htons(8), .check = 0 };
	memcpy(h + 34, &udp, sizeof(udp));
	memcpy(ptr, h, sizeof(h));
	*len = EXTRA_NET_HEADER_LEN;
	rc = 0;
out:
	sock_obj_unpin(obj);
	return rc;
}

/* ---- memory registration ---- */

/* Whether fd is the wait fd of one of our rings. */
static bool extra_is_ring_fd(int fd)
{
	struct sock_offload *lanes[SOCK_OFFLOAD_MAX_LANES];
	unsigned n = sock_offload_lanes(lanes, SOCK_OFFLOAD_MAX_LANES);
	for (unsigned l = 0; l < n; l++)
		for (unsigned i = 0; i < lanes[l]->nifs; i++)
			if (lanes[l]->ifs[i].ring && ring_wait_fd(lanes[l]->ifs[i].ring) == fd)
				return true;
	return false;
}

/* The xdp backend sends from and receives into its UMEM only: memory the
 * application registers is accepted (checked, keyed 0) and never used. */
int extra_register_memory_on_ring(int fd, void *addr, size_t length, uint32_t *key)
{
	if (!addr || !length || !key || !extra_is_ring_fd(fd)) {
		errno = EINVAL;
		return -1;
	}
	*key = 0;
	return 0;
}

int extra_deregister_memory_on_ring(int fd, void *addr, size_t length)
{
	if (!addr || !length || !extra_is_ring_fd(fd)) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}
