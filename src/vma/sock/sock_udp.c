/* Offloaded UDP sockets: lifecycle, addresses, options, readiness.
 * The kernel socket under the fd is authoritative for addresses and options:
 * every call goes to it first, and we mirror what the offloaded path needs. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "iomux/iomux.h"
#include "log/vlog.h"
#include "os/os.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_udp_internal.h"
#include "sock/sock_unsupported.h"
#include "extra/extra.h"

#define SOCK_TYPE_MASK 0xf

bool sock_udp_wanted(int domain, int type)
{
	return domain == AF_INET && (type & SOCK_TYPE_MASK) == SOCK_DGRAM && extra_thread_offload_wanted();
}

static struct sockaddr_in sock_udp_sin(uint32_t ip, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = port };
	sin.sin_addr.s_addr = ip;
	return sin;
}

/* ---- RX steering ---- */

/* Whether another membership of the socket than g (another source of the
 * same group) is active: the group's flow is per group and port, shared by
 * them. */
static bool sock_udp_group_flow_shared(const struct sock_udp *s, const struct sock_udp_group *g)
{
	for (unsigned i = 0; i < s->ngroups; i++)
		if (&s->groups[i] != g && s->groups[i].active && s->groups[i].group == g->group)
			return true;
	return false;
}

int sock_udp_group_flow_get_locked(struct sock_udp *s, struct sock_offload *ctx, int slot,
				   const struct sock_udp_group *g)
{
	struct ring_flow flow = { .proto = IPPROTO_UDP, .group = g->group, .local_port = s->local_port,
				  .owner_fd = s->obj.fd, .share = 1 };
	return sock_offload_flow_get_locked(ctx, slot, &flow);
}

void sock_udp_group_flow_put_locked(struct sock_udp *s, struct sock_offload *ctx, int slot,
				    const struct sock_udp_group *g)
{
	struct ring_flow flow = { .proto = IPPROTO_UDP, .group = g->group, .local_port = s->local_port };
	sock_offload_flow_put_locked(ctx, slot, &flow);
}

static void sock_udp_group_detach_locked(struct sock_udp *s, struct sock_udp_group *g)
{
	if (!g->active)
		return;
	/* Dropped with the last source. */
	if (!sock_udp_group_flow_shared(s, g))
		sock_udp_group_flow_put_locked(s, s->ctx, g->if_slot, g);
	g->active = false;
}

static void sock_udp_group_attach_locked(struct sock_udp *s, struct sock_udp_group *g)
{
	if (g->active || !s->pcb || g->if_slot < 0)
		return;
	if (stack_udp_pcb_join(s->pcb, g->group, g->source) < 0)
		return;
	if (!sock_udp_group_flow_shared(s, g) && sock_udp_group_flow_get_locked(s, s->ctx, g->if_slot, g) < 0) {
		stack_udp_pcb_leave(s->pcb, g->group, g->source);
		vlog_debug("fd %d: group steering refused: the kernel serves it", s->obj.fd);
		return;
	}
	g->active = true;
}

/* The flow steered on one interface of ctx. A socket bound to INADDR_ANY
 * is steered for the interface's own address only: the stack accepts
 * nothing else, so datagrams to another address of the interface (a
 * secondary one, or one added later) must stay with the kernel socket.
 * Attach and detach both come here, so they always agree on the key. */
struct ring_flow sock_udp_slot_flow(const struct sock_udp *s, const struct sock_offload *ctx, unsigned slot)
{
	struct ring_flow flow = s->flow;
	if (flow.local_ip == INADDR_ANY)
		flow.local_ip = ctx->ifs[slot].nif.ip;
	return flow;
}

void sock_udp_flow_choose_tuple(struct sock_udp *s)
{
	/* VMA_UDP_3T_RULES=0: a connected socket is steered by its 5-tuple,
	 * so the XDP program sends it only its peer's datagrams (the others
	 * reach the connected kernel socket, which drops them as Linux does).
	 * Not when the port's steering is shared (fork, SO_REUSEPORT): a
	 * 5-tuple has a single owner. Called with no flow attached, so the
	 * key detach computes is always the one attach used. */
	bool five = !g_cfg.udp_3t_rules && s->connected && !s->share && s->remote_ip && s->remote_port;
	s->flow.remote_ip = five ? s->remote_ip : 0;
	s->flow.remote_port = five ? s->remote_port : 0;
}

static void sock_udp_flows_detach_locked(struct sock_udp *s);

static void sock_udp_rx_teardown_locked(struct sock_udp *s)
{
	for (unsigned i = 0; i < s->ngroups; i++)
		sock_udp_group_detach_locked(s, &s->groups[i]);
	sock_udp_flows_detach_locked(s);
	s->flow_want = 0;
	if (s->pcb) {
		stack_udp_pcb_free(s->pcb);
		s->pcb = NULL;
	}
}

/* Steers the socket's 3-tuple on every interface of want: alone, or in the
 * port's share group when several processes read the socket (fork) or it
 * has SO_REUSEPORT. from: the lane the socket is moving from (both
 * locked), else NULL. A shared port whose only user there is this socket
 * is attached as a takeover (ring.h): the rule moves to the new lane's ring
 * instead of a second one joining the share group beside it (on verbs each
 * would get a copy of a frame, and the old ring, drained after it left the
 * group, would take its copy as well: duplicates). */
uint32_t sock_udp_flows_attach_in_locked(struct sock_udp *s, struct sock_offload *ctx, uint32_t want,
					 struct sock_offload *from)
{
	uint32_t got = 0;
	for (unsigned slot = 0; slot < ctx->nifs; slot++) {
		if (!(want & (1u << slot)))
			continue;
		struct ring_flow flow = sock_udp_slot_flow(s, ctx, slot);
		flow.owner_fd = s->obj.fd;
		flow.share = s->share;
		if (from && flow.share)
			flow.takeover = sock_offload_flow_refs_locked(
						from, sock_offload_if_slot(from, ctx->ifs[slot].nif.ifindex), &flow) == 1;
		int err = sock_offload_flow_get_locked(ctx, (int)slot, &flow);
		if (err < 0)
			vlog_debug("fd %d: steering on %s refused (%s): the kernel serves it", s->obj.fd,
				   ctx->ifs[slot].name, strerror(-err));
		else
			got |= 1u << slot;
	}
	return got;
}

void sock_udp_flows_detach_in_locked(struct sock_udp *s, struct sock_offload *ctx, uint32_t slots)
{
	for (unsigned slot = 0; slot < ctx->nifs; slot++)
		if (slots & (1u << slot)) {
			struct ring_flow flow = sock_udp_slot_flow(s, ctx, slot);
			sock_offload_flow_put_locked(ctx, (int)slot, &flow);
		}
}

static void sock_udp_flows_attach_locked(struct sock_udp *s)
{
	s->flow_slots |= sock_udp_flows_attach_in_locked(s, s->ctx, s->flow_want & ~s->flow_slots, NULL);
}

static void sock_udp_flows_detach_locked(struct sock_udp *s)
{
	sock_udp_flows_detach_in_locked(s, s->ctx, s->flow_slots);
	s->flow_slots = 0;
}

struct stack_udp_pcb *sock_udp_pcb_make_locked(struct sock_udp *s, struct sock_offload *ctx)
{
	struct stack_udp_pcb *pcb = stack_udp_pcb_new(ctx->stack);
	if (!pcb)
		return NULL;
	stack_udp_pcb_set_recv(pcb, sock_udp_deliver, s);
	stack_udp_pcb_set_reuseport(pcb, s->reuseport);
	if (stack_udp_pcb_bind(pcb, s->local_ip, s->local_port) < 0) {
		stack_udp_pcb_free(pcb);
		return NULL;
	}
	if (s->connected)
		stack_udp_pcb_connect(pcb, s->remote_ip, s->remote_port, s->local_ip);
	return pcb;
}

static void sock_udp_rx_setup_locked(struct sock_udp *s)
{
	struct sock_offload *ctx = s->ctx;
	struct sockaddr_in local = sock_udp_sin(s->local_ip, s->local_port);
	if (s->local_port == 0 || cfg_rules_match(CFG_ROLE_UDP_RECEIVER, &local, NULL) != CFG_TRANSPORT_VMA)
		return;
	uint32_t slots = 0;
	bool multicast = IN_MULTICAST(ntohl(s->local_ip));
	if (s->local_ip == INADDR_ANY) {
		slots = (1u << ctx->nifs) - 1;
	} else if (!multicast) {
		int slot = sock_offload_if_slot_by_ip(ctx, s->local_ip);
		if (slot < 0)
			return;   /* loopback or a kernel-only interface */
		slots = 1u << slot;
	}
	/* SO_REUSEPORT: sockets of other processes may share the port (its
	 * steering is a share group), and those of this lane share its
	 * datagrams (the pcb's reuseport group). */
	int reuseport = 0;
	socklen_t rl = sizeof(reuseport);
	s->reuseport = OS_CALL(getsockopt, s->obj.fd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) == 0 && reuseport;
	s->pcb = sock_udp_pcb_make_locked(s, ctx);
	if (!s->pcb)
		return;
	s->flow = (struct ring_flow){ .proto = IPPROTO_UDP, .local_ip = s->local_ip, .local_port = s->local_port };
	s->flow_want = slots;
	if (s->reuseport)
		s->share = true;
	sock_udp_flow_choose_tuple(s);
	sock_udp_flows_attach_locked(s);
	for (unsigned i = 0; i < s->ngroups; i++)
		sock_udp_group_attach_locked(s, &s->groups[i]);
}

void sock_udp_sync_local(struct sock_udp *s)
{
	if (!sock_udp_ctx(s))
		return;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	memset(&sin, 0, sizeof(sin));
	if (OS_CALL(getsockname, s->obj.fd, (struct sockaddr *)&sin, &len) != 0)
		return;
	/* Rebuilt whole: the address, the connected peer or the groups may
	 * have changed, and this is not the packet path. */
	struct sock_offload *ctx = sock_udp_lock(s);
	if (!ctx)
		return;
	sock_udp_rx_teardown_locked(s);
	s->local_ip = sin.sin_addr.s_addr;
	s->local_port = sin.sin_port;
	sock_udp_rx_setup_locked(s);
	s->route.valid = false;
	sock_offload_unlock(ctx);
	s->stats->local_addr = s->local_ip;
	s->stats->local_port = s->local_port;
}

int sock_udp_autobind(struct sock_udp *s)
{
	struct sockaddr_in any = sock_udp_sin(INADDR_ANY, 0);
	if (OS_CALL(bind, s->obj.fd, (struct sockaddr *)&any, sizeof(any)) != 0 && errno != EINVAL)
		return -1;
	sock_udp_sync_local(s);
	return 0;
}

/* ---- delivery (lock held, from stack_input) ---- */

void sock_udp_wake(void *arg)
{
	struct sock_udp *s = arg;
	s->wake_pending = false;
	iomux_notify_n(&s->obj, EPOLLIN, __atomic_exchange_n(&s->wake_edges, 0, __ATOMIC_ACQ_REL));
	sock_base_wake_sleepers(&s->base);
}

/* A port whose sharers all see every datagram (verbs share groups): the
 * spread picks the one that keeps it. Groups and broadcasts go to all. */
static bool sock_udp_share_admitted(struct sock_udp *s, const struct stack_udp_rx_info *info)
{
	struct sock_offload *ctx = s->ctx;
	if (!ctx || IN_MULTICAST(ntohl(info->dst_ip)))
		return true;
	int slot = sock_offload_if_slot(ctx, info->ifindex);
	if (slot < 0)
		return true;
	struct ring_flow three = sock_udp_slot_flow(s, ctx, (unsigned)slot);
	if (info->dst_ip != three.local_ip && three.local_ip)
		return true;   /* a broadcast */
	return ring_share_admit(ctx->ifs[slot].ring, &three, info->src_ip, info->src_port);
}

void sock_udp_deliver(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
		      const struct stack_udp_rx_info *info)
{
	(void)pcb;
	struct sock_udp *s = arg;
	struct sock_udp_entry e = { .buf = buf, .len = len, .info = *info, .rx_time_ns = buf->rx_time_ns };
	/* The Extra API's receive callback sees the datagram before it is
	 * queued: one pointer test when none is registered. */
	if (__builtin_expect(s->recv_cb != NULL, 0)) {
		extra_udp_stage_locked(s, &e);
		return;
	}
	if (__builtin_expect(s->share, 0) && !sock_udp_share_admitted(s, info)) {
		ring_buf_free(buf);   /* another sharer's: it got its copy */
		return;
	}
	uint64_t limit = s->rcvbuf > (uint64_t)g_cfg.rx_bytes_min ? s->rcvbuf : (uint64_t)g_cfg.rx_bytes_min;
	/* Frames: a socket holds at most its share of the ring's receive
	 * frames, smaller as the ring runs short (docs/security.md). */
	/* Frames the application holds (Extra API) count too. */
	bool over_share = ring_buf_pool_holder_full(buf->pool, s->queue.count + s->base.xt.lent);
	if (s->released || over_share || !sock_udp_queue_push(&s->queue, &e, limit)) {
		if (over_share && s->ctx)
			s->ctx->udp_frame_pressure_drops++;
		ring_buf_free(buf);
		s->stats->c.rx_ready_pkts_dropped++;
		s->stats->c.rx_ready_bytes_dropped += len;
		return;
	}
	stats_socket_ready_add(s->stats, len);
	if (__builtin_expect(g_cfg.socketxtreme, 0))
		extra_xt_udp_ready_locked(s);
	sock_offload_poll_wake_if_locked(s->ctx);
	bool notify = sock_base_watched(&s->base);
	if (notify)
		__atomic_add_fetch(&s->wake_edges, 1, __ATOMIC_RELAXED);
	if (notify && !s->wake_pending) {
		s->wake_pending = true;
		sock_offload_defer_locked(s->ctx, &s->wake_node);
	}
}

/* ---- control ops ---- */

static int sock_udp_bind(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len)
{
	struct sock_udp *s = sock_udp_of(obj);
	int ret = OS_CALL(bind, obj->fd, addr, len);
	if (ret == 0) {
		int saved = errno;
		sock_udp_sync_local(s);
		errno = saved;
	}
	return ret;
}

static int sock_udp_connect(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len)
{
	struct sock_udp *s = sock_udp_of(obj);
	int ret = OS_CALL(connect, obj->fd, addr, len);
	if (ret != 0)
		return ret;
	if (addr->sa_family == AF_UNSPEC) {
		s->connected = false;
		s->remote_ip = 0;
		s->remote_port = 0;
		struct sock_offload *ctx = sock_udp_lock(s);
		if (ctx) {
			if (s->pcb)
				stack_udp_pcb_disconnect(s->pcb);
			sock_offload_unlock(ctx);
		}
	} else if (len >= sizeof(struct sockaddr_in) && addr->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)addr;
		s->connected = true;
		s->remote_ip = sin->sin_addr.s_addr;
		s->remote_port = sin->sin_port;
		s->stats->peer_addr = s->remote_ip;
		s->stats->peer_port = s->remote_port;
		struct sockaddr_in local = sock_udp_sin(s->local_ip, s->local_port);
		if (sock_udp_ctx(s) && cfg_rules_match(CFG_ROLE_UDP_CONNECT, &local, sin) != CFG_TRANSPORT_VMA) {
			struct sock_offload *ctx = sock_udp_lock(s);
			if (ctx) {
				sock_udp_rx_teardown_locked(s);
				sock_offload_unlock(ctx);
			}
			s->os_only = true;
			s->stats->offloaded = 0;
		}
	}
	sock_udp_sync_local(s);
	errno = 0;
	return 0;
}

static int sock_udp_group_if_slot(const struct sock_offload *ctx, uint32_t group, int ifindex, uint32_t if_addr)
{
	if (ifindex > 0)
		return sock_offload_if_slot(ctx, ifindex);
	if (if_addr != INADDR_ANY)
		return sock_offload_if_slot_by_ip(ctx, if_addr);
	struct net_route_query q = { .dst = group };
	struct net_route_result r;
	if (net_route_lookup(ctx->net, &q, &r) < 0)
		return -1;
	return sock_offload_if_slot(ctx, r.ifindex);
}

static void sock_udp_membership(struct sock_udp *s, bool join, uint32_t group, uint32_t source, int ifindex,
				uint32_t if_addr)
{
	struct sock_offload *ctx;
	int slot;
	/* The slot is an index of the lane's interfaces: looked up (a route
	 * lookup, not under the lane lock) for the lane the socket is in, and
	 * again if it moved before we locked. */
	for (;;) {
		struct sock_offload *seen = sock_udp_ctx(s);
		if (!seen)
			return;
		slot = join ? sock_udp_group_if_slot(seen, group, ifindex, if_addr) : -1;
		ctx = sock_udp_lock(s);
		if (!ctx)
			return;
		if (ctx == seen)
			break;
		sock_offload_unlock(ctx);
	}
	if (join) {
		if (s->ngroups < SOCK_UDP_MAX_GROUPS) {
			struct sock_udp_group *g = &s->groups[s->ngroups++];
			*g = (struct sock_udp_group){ .group = group, .source = source, .if_slot = slot };
			sock_udp_group_attach_locked(s, g);
			stats_mc_group_ref(s->obj.fd, group);
		}
	} else {
		for (unsigned i = 0; i < s->ngroups; i++) {
			struct sock_udp_group *g = &s->groups[i];
			if (g->group != group || (source && g->source != source))
				continue;
			sock_udp_group_detach_locked(s, g);
			if (s->pcb)
				stack_udp_pcb_leave(s->pcb, g->group, g->source);
			stats_mc_group_unref(s->obj.fd, group);
			s->groups[i--] = s->groups[--s->ngroups];
		}
	}
	sock_offload_unlock(ctx);
}

/* Mirrors an option the kernel just accepted: the base takes the
 * SOL_SOCKET options all kinds share, UDP the rest. */
static void sock_udp_note_option(struct sock_udp *s, int level, int name, const void *val, socklen_t len)
{
	int v = 0;
	/* Linux restarts a UDP socket's OPT_ID counter at 0. */
	if (sock_base_note_option(&s->base, level, name, val, len))
		s->base.tstamp.key_next = 0;
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_RCVBUF:
		case SO_RCVBUFFORCE: {
			int kernel = 0;
			socklen_t kl = sizeof(kernel);
			if (OS_CALL(getsockopt, s->obj.fd, SOL_SOCKET, SO_RCVBUF, &kernel, &kl) == 0)
				s->rcvbuf = (uint64_t)kernel;
			s->stats->rx_ready_bytes_limit = s->rcvbuf;
			break;
		}
		case SO_BROADCAST:
			if (sock_opt_int(val, len, &v) == 0)
				s->broadcast = v != 0;
			break;
		}
		return;
	}
	if (level != IPPROTO_IP)
		return;
	switch (name) {
	case IP_TOS:
		if (sock_opt_int(val, len, &v) == 0)
			s->tos = v & 0xff;
		break;
	case IP_TTL:
		if (sock_opt_int(val, len, &v) == 0)
			s->ttl = v;
		break;
	case IP_MULTICAST_TTL:
		if (sock_opt_int(val, len, &v) == 0)
			s->mc_ttl = v < 0 ? 1 : v;
		break;
	case IP_MULTICAST_LOOP:
		if (sock_opt_int(val, len, &v) == 0)
			s->mc_loop = v != 0;
		s->stats->mc_loop = s->mc_loop;
		break;
	case IP_PKTINFO:
		if (sock_opt_int(val, len, &v) == 0)
			s->pktinfo = v != 0;
		break;
	case IP_RECVTOS:
		if (sock_opt_int(val, len, &v) == 0)
			s->recvtos = v != 0;
		break;
	case IP_RECVTTL:
		if (sock_opt_int(val, len, &v) == 0)
			s->recvttl = v != 0;
		break;
	case IP_MULTICAST_IF:
		if (len >= sizeof(struct ip_mreqn)) {
			const struct ip_mreqn *m = val;
			s->mc_ifindex = m->imr_ifindex;
			s->mc_if_addr = m->imr_address.s_addr;
		} else if (len >= sizeof(struct in_addr)) {
			s->mc_ifindex = 0;
			s->mc_if_addr = ((const struct in_addr *)val)->s_addr;
		}
		s->stats->mc_tx_if = s->mc_if_addr;
		s->route.valid = false;
		break;
	case IP_ADD_MEMBERSHIP:
	case IP_DROP_MEMBERSHIP: {
		const struct ip_mreqn *m = val;   /* ip_mreq is its prefix */
		int ifindex = len >= sizeof(struct ip_mreqn) ? m->imr_ifindex : 0;
		sock_udp_membership(s, name == IP_ADD_MEMBERSHIP, m->imr_multiaddr.s_addr, 0, ifindex,
				    m->imr_address.s_addr);
		break;
	}
	case IP_ADD_SOURCE_MEMBERSHIP:
	case IP_DROP_SOURCE_MEMBERSHIP: {
		const struct ip_mreq_source *m = val;
		sock_udp_membership(s, name == IP_ADD_SOURCE_MEMBERSHIP, m->imr_multiaddr.s_addr,
				    m->imr_sourceaddr.s_addr, 0, m->imr_interface.s_addr);
		break;
	}
	}
}

/* Options the offloaded path implements (sock_udp_note_option), that
 * only matter to the kernel socket's bind, or that cannot change what it
 * does; any other is VMA_EXCEPTION_HANDLING's. */
static bool sock_udp_opt_supported(int level, int name)
{
	if (sock_base_opt_supported(level, name))
		return true;
	if (level == SOL_SOCKET)
		return name == SO_BROADCAST;
	if (level != IPPROTO_IP)
		return false;
	switch (name) {
	case IP_TOS:
	case IP_TTL:
	case IP_MULTICAST_TTL:
	case IP_MULTICAST_LOOP:
	case IP_MULTICAST_IF:
	case IP_PKTINFO:
	case IP_RECVTOS:
	case IP_RECVTTL:
	case IP_ADD_MEMBERSHIP:
	case IP_DROP_MEMBERSHIP:
	case IP_ADD_SOURCE_MEMBERSHIP:
	case IP_DROP_SOURCE_MEMBERSHIP:
	case IP_BIND_ADDRESS_NO_PORT:
		return true;
	}
	return false;
}

/* Why s cannot move to the kernel path right now (NULL: it can):
 * datagrams we already took for it would never reach the application. */
static const char *sock_udp_stuck(const struct sock_udp *s)
{
	if (__atomic_load_n(&s->queue.count, __ATOMIC_RELAXED) || sock_udp_has_strays(s) ||
	    __atomic_load_n(&s->stray_ctx, __ATOMIC_RELAXED))
		return "datagrams it received wait in user space";
	return NULL;
}

/* Moves s to the kernel path for good, as a udp_connect "use os" rule
 * does: its steering goes, so the kernel socket receives everything. */
static void sock_udp_to_kernel(struct sock_udp *s)
{
	struct sock_offload *ctx = sock_udp_lock(s);
	if (!ctx)
		return;
	/* A datagram that arrived since sock_udp_stuck looked keeps the
	 * socket offloaded rather than being lost. */
	bool queued = s->queue.count || sock_udp_has_strays(s) || s->stray_ctx;
	if (!queued) {
		sock_udp_rx_teardown_locked(s);
		s->os_only = true;
	}
	sock_offload_unlock(ctx);
	if (queued) {
		vlog_debug("fd %d: stays offloaded: datagrams arrived for it meanwhile", s->obj.fd);
		return;
	}
	s->stats->offloaded = 0;
}

/* Acts on VMA_EXCEPTION_HANDLING's verdict; false when the call must fail
 * (errno set). */
static bool sock_udp_carry_on(struct sock_udp *s, enum sock_unsupported_verdict v)
{
	if (v == SOCK_UNSUPPORTED_TO_KERNEL)
		sock_udp_to_kernel(s);
	return v != SOCK_UNSUPPORTED_FAIL;
}

static bool sock_udp_unsupported_call(struct sock_udp *s, const char *what)
{
	return sock_udp_carry_on(s, sock_unsupported(s->obj.fd, what, sock_udp_stuck(s), EOPNOTSUPP));
}

static int sock_udp_setsockopt(struct sock_obj *obj, int level, int name, const void *val, socklen_t len)
{
	struct sock_udp *s = sock_udp_of(obj);
	int ret;
	if (sock_base_setsockopt_own(&s->base, level, name, val, len, &ret))
		return ret;
	if (level == SOL_SOCKET && name == SOCK_OFFLOAD_SO_RING_ALLOC_LOGIC) {
		/* Ours alone: the kernel does not know it. */
		int logic;
		uint32_t user_id;
		int err = sock_offload_parse_ring_logic(val, len, &logic, &user_id);
		if (!err)
			err = sock_udp_set_ring_logic(s, logic, user_id);
		if (err) {
			errno = -err;
			return -1;
		}
		return 0;
	}
	if (__builtin_expect(!sock_udp_opt_supported(level, name), 0) && sock_udp_ctx(s) &&
	    !sock_udp_carry_on(s, sock_unsupported_option(obj->fd, level, name, sock_udp_stuck(s))))
		return -1;
	ret = OS_CALL(setsockopt, obj->fd, level, name, val, len);
	if (ret == 0 && val) {
		int saved = errno;
		sock_udp_note_option(s, level, name, val, len);
		errno = saved;
	}
	return ret;
}

/* Only SO_VMA_USER_DATA is ours; the kernel socket answers the rest. */
static int sock_udp_getsockopt(struct sock_obj *obj, int level, int name, void *val, socklen_t *len)
{
	int ret;
	if (sock_base_getsockopt_own(&sock_udp_of(obj)->base, level, name, val, len, &ret))
		return ret;
	return OS_CALL(getsockopt, obj->fd, level, name, val, len);
}

static int sock_udp_fcntl(struct sock_obj *obj, int cmd, void *arg)
{
	struct sock_udp *s = sock_udp_of(obj);
	if (cmd == F_SETFL && ((long)arg & O_ASYNC) && sock_udp_ctx(s) &&
	    !sock_udp_unsupported_call(s, "fcntl(F_SETFL, O_ASYNC) (signal-driven I/O)"))
		return -1;
	int ret = OS_CALL(fcntl, obj->fd, cmd, arg);
	if (ret != -1 && cmd == F_SETFL)
		sock_base_set_nonblocking(&s->base, ((long)arg & O_NONBLOCK) != 0, s->stats);
	return ret;
}

static int sock_udp_ioctl(struct sock_obj *obj, unsigned long req, void *arg)
{
	struct sock_udp *s = sock_udp_of(obj);
	struct sock_offload *ctx = req == FIONREAD && arg ? sock_udp_lock(s) : NULL;
	if (ctx) {
		if (__builtin_expect(sock_udp_has_strays(s), 0))
			sock_udp_strays_take_locked(s);
		if (!s->queue.count)
			sock_offload_progress_locked(ctx);
		struct sock_udp_entry *e = sock_udp_queue_front(&s->queue);
		int next = e ? (int)e->len : -1;
		sock_offload_unlock(ctx);
		if (next >= 0) {
			*(int *)arg = next;
			return 0;
		}
	}
	if (req == FIOASYNC && arg && *(int *)arg && sock_udp_ctx(s) &&
	    !sock_udp_unsupported_call(s, "ioctl(FIOASYNC) (signal-driven I/O)"))
		return -1;
	int ret = OS_CALL(ioctl, obj->fd, req, arg);
	if (ret == 0 && req == FIONBIO && arg)
		sock_base_set_nonblocking(&s->base, *(int *)arg != 0, s->stats);
	return ret;
}

/* ---- readiness ---- */

static uint32_t sock_udp_poll_ready(struct sock_obj *obj)
{
	struct sock_udp *s = sock_udp_of(obj);
	uint32_t ev = EPOLLOUT;
	/* Strays (datagrams the lane the socket left received) count: the
	 * next read takes them. */
	if (__atomic_load_n(&s->queue.count, __ATOMIC_RELAXED) || sock_udp_has_strays(s))
		ev |= EPOLLIN;
	/* Datagrams the callback has not seen yet (staged by the internal
	 * thread): the progress pass before this shows them to it. */
	else if (__builtin_expect(s->cb_stage != NULL, 0) && __atomic_load_n(&s->cb_stage->count, __ATOMIC_RELAXED))
		ev |= EPOLLIN;
	return ev | sock_base_errq_events(&s->base);
}

static int sock_udp_progress(struct sock_obj *obj)
{
	/* A process that polls a socket it shares after fork reads it. */
	sock_udp_fork_check(sock_udp_of(obj));
	struct sock_udp *s = sock_udp_of(obj);
	struct sock_offload *ctx = sock_udp_ctx(s);
	if (!ctx)
		return 0;
	int n = sock_offload_progress_try(ctx);
	/* Strays of a recent move (sock_udp_stray_lane). */
	struct sock_offload *old = sock_udp_stray_lane(s);
	if (old)
		n += sock_offload_progress_try(old);
	/* The poll/select/epoll caller is the application thread the Extra
	 * API's receive callback runs in. */
	if (__builtin_expect(s->cb_stage != NULL, 0))
		extra_udp_run_callbacks(s);
	return n;
}

/* None while the socket also watches the lane it left (strays): its
 * progress and arming then cover two lanes; nor while a fork left it to
 * join (progress does that). */
static const void *sock_udp_lane_key(struct sock_obj *obj)
{
	struct sock_udp *s = sock_udp_of(obj);
	if (s->fork_dormant || s->inherited || sock_udp_stray_lane(s))
		return NULL;
	/* A socket with a receive callback gets a progress call of its own:
	 * that is where its callback runs. */
	if (__builtin_expect(s->cb_stage != NULL, 0))
		return NULL;
	return __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
}

static int sock_udp_poll_watch(struct sock_obj *obj, int wake_fd, bool on)
{
	struct sock_offload *ctx = sock_udp_lock(sock_udp_of(obj));
	if (!ctx)
		return on ? -1 : 0;
	bool ok = sock_offload_poll_watch_locked(ctx, wake_fd, on);
	sock_offload_unlock(ctx);
	return ok ? 0 : -1;
}

static int sock_udp_wait_prepare(struct sock_obj *obj, int *fds, int max)
{
	/* The rings of the lane the socket is in now: a sleeper armed on the
	 * lane it left is woken by the move (sock_udp_migrate.c). */
	struct sock_udp *s = sock_udp_of(obj);
	struct sock_offload *ctx = sock_udp_lock(s);
	if (!ctx)
		return 0;
	int n = sock_offload_wait_prepare_locked(ctx, fds, max);
	sock_offload_unlock(ctx);
	/* And the rings of the lane it just left (strays), room permitting. */
	struct sock_offload *old = n >= 0 && n < max ? sock_udp_stray_lane(s) : NULL;
	if (old) {
		int m = sock_offload_wait_prepare(old, fds + n, max - n);
		n = m < 0 ? -1 : n + m;
	}
	return n;
}

/* ---- lifecycle ---- */

static void sock_udp_release(struct sock_obj *obj)
{
	struct sock_udp *s = sock_udp_of(obj);
	if (s->released)
		return;
	/* Leaves every epoll set before the fd number can be reused. */
	iomux_forget(obj);
	/* In a forked child or after exit the rings are gone or the parent's:
	 * nothing of them is touched (the memory stays; the process ends). */
	struct sock_offload *ctx = sock_udp_lock_lane(s);
	if (ctx) {
		/* Set under the lane lock: a move that had not started yet
		 * sees it and gives up. */
		s->released = true;
		if (s->wake_pending)
			sock_offload_undefer_locked(ctx, &s->wake_node);
		sock_udp_rx_teardown_locked(s);
		sock_udp_queue_clear(&s->queue);
		extra_udp_release_locked(s);
		extra_xt_forget_locked(ctx, &s->base.xt);
		sock_udp_heaps_reap_locked(s);
		sock_offload_unlock(ctx);
	}
	s->released = true;
	sock_tstamp_clear(&s->base.tstamp);
	/* The old lane's pcb of a recent move, and strays nobody read. */
	sock_udp_migrate_release(s);
	for (unsigned i = 0; i < s->ngroups; i++)
		stats_mc_group_unref(obj->fd, s->groups[i].group);
	s->ngroups = 0;
	stats_socket_slot_put(s->stats);
	/* Not NULL: a call blocked on this socket (pinned) still counts. */
	s->stats = stats_socket_sink();
}

static int sock_udp_close(struct sock_obj *obj)
{
	sock_udp_release(obj);
	return OS_CALL(close, obj->fd);
}

static void sock_udp_destroy(struct sock_obj *obj)
{
	struct sock_udp *s = sock_udp_of(obj);
	if (sock_offload_usable(s->ctx)) {
		sock_udp_queue_fini(&s->queue);
		/* Empty since release cleared the queue. */
		sock_udp_heaps_reap_locked(s);
	}
	if (s->base.wake_fd >= 0)
		os_close_nocancel(s->base.wake_fd);
	extra_udp_destroy(s);
	free(s);
}

const struct sock_ops sock_udp_ops = {
	.kind = "udp",
	.bind = sock_udp_bind,
	.connect = sock_udp_connect,
	.setsockopt = sock_udp_setsockopt,
	.getsockopt = sock_udp_getsockopt,
	.fcntl = sock_udp_fcntl,
	.ioctl = sock_udp_ioctl,
	.recvmsg = sock_udp_op_recvmsg,
	.sendmsg = sock_udp_op_sendmsg,
	.sendmmsg = sock_udp_op_sendmmsg,
	.poll_ready = sock_udp_poll_ready,
	.progress = sock_udp_progress,
	.wait_prepare = sock_udp_wait_prepare,
	.lane_key = sock_udp_lane_key,
	.poll_watch = sock_udp_poll_watch,
	.close = sock_udp_close,
	.release = sock_udp_release,
	.dump = sock_udp_op_dump,
	.destroy = sock_udp_destroy,
};

struct sock_obj *sock_udp_new(int fd, int domain, int type, int protocol)
{
	os_libc_ensure();
	struct sock_offload *ctx = sock_offload_get_for(fd);
	if (!ctx)
		return NULL;
	struct sock_udp *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (sock_udp_queue_init(&s->queue, SOCK_UDP_QUEUE_ENTRIES) != 0) {
		free(s);
		return NULL;
	}
	sock_base_init(&s->base, &sock_udp_ops, fd, domain, type, protocol);
	s->ctx = ctx;
	s->tos = 0;
	s->ttl = -1;
	s->mc_ttl = 1;
	s->mc_loop = g_cfg.tx_mc_loopback != 0;
	s->wake_node = (struct sock_offload_wake){ .fn = sock_udp_wake, .arg = s };
	s->ring_logic = -1;
	sock_udp_migrate_init(s);
	int kernel = 0;
	socklen_t kl = sizeof(kernel);
	if (OS_CALL(getsockopt, fd, SOL_SOCKET, SO_RCVBUF, &kernel, &kl) == 0)
		s->rcvbuf = (uint64_t)kernel;
	/* The kernel socket loops multicast back by default; keep it in step
	 * with what the offloaded path does (VMA_TX_MC_LOOPBACK). */
	int loop = s->mc_loop;
	OS_CALL(setsockopt, fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop));
	s->stats = stats_socket_slot_get(fd, STATS_PROTO_UDP);
	s->stats->offloaded = 1;
	s->stats->blocking = !s->base.nonblocking;
	s->stats->mc_loop = s->mc_loop;
	s->stats->rx_ready_bytes_limit = s->rcvbuf;
	s->stats->ring_id = sock_offload_ring_id(ctx, 0);
	return &s->obj;
}

/* ---- fork (docs/process_model.md) ---- */

void sock_udp_fork_release_locked(struct sock_offload *ctx)
{
	unsigned size = sock_fd_table_size();
	for (unsigned fd = 0; fd < size; fd++) {
		struct sock_obj *obj = sock_fd_get((int)fd);
		if (!obj || obj->ops != &sock_udp_ops)
			continue;
		struct sock_udp *s = sock_udp_of(obj);
		if (s->ctx != ctx || s->released || !s->flow_slots)
			continue;
		sock_udp_flows_detach_locked(s);
		s->fork_dormant = true;
	}
}

void sock_udp_after_fork_child(struct sock_offload *old)
{
	unsigned size = sock_fd_table_size();
	if (!old)
		return;
	for (unsigned fd = 0; fd < size; fd++) {
		struct sock_obj *obj = sock_fd_get((int)fd);
		if (!obj || obj->ops != &sock_udp_ops)
			continue;
		struct sock_udp *s = sock_udp_of(obj);
		if (s->ctx != old || s->released)
			continue;
		/* What the copy points at (pcb, queued frames, flows) is the
		 * parent's: dropped, never freed. The queue's entry array is
		 * our own heap's copy: freed without its entries, whose frames
		 * are the parent's (LeakSanitizer reported it lost in every
		 * child). The eventfd is shared with the parent: ours is
		 * closed, a fresh one made at need. */
		s->pcb = NULL;
		s->flow_slots = 0;
		for (unsigned i = 0; i < s->ngroups; i++)
			s->groups[i].active = false;
		free(s->queue.entries);
		sock_udp_queue_init(&s->queue, SOCK_UDP_QUEUE_ENTRIES);
		s->base.sleepers = 0;
		s->wake_pending = false;
		if (s->base.wake_fd >= 0)
			os_close_nocancel(s->base.wake_fd);
		s->base.wake_fd = -1;
		s->route.valid = false;
		s->fork_dormant = false;
		s->inherited = true;
		sock_udp_migrate_after_fork_child(s);
	}
}

void sock_udp_fork_join(struct sock_udp *s)
{
	if (s->released || s->os_only)
		return;
	/* A dormant socket stays in its lane (a move skips dormant and
	 * inherited sockets), so s->ctx is stable here. */
	struct sock_offload *ctx = s->inherited ? sock_offload_get_for_logic(s->obj.fd, s->ring_logic, s->ring_user_id)
					       : s->ctx;
	if (!ctx)
		return;   /* no context here: the kernel socket serves it */
	sock_offload_lock(ctx);
	if (s->inherited) {
		__atomic_store_n(&s->ctx, ctx, __ATOMIC_RELEASE);
		s->stats->ring_id = sock_offload_ring_id(ctx, 0);
		s->inherited = false;
		s->share = true;
		sock_udp_rx_setup_locked(s);
	} else if (s->fork_dormant && s->ctx == ctx && !ctx->dead) {
		s->share = true;
		sock_udp_flow_choose_tuple(s);   /* shared now: back to the 3-tuple */
		sock_udp_flows_attach_locked(s);
	}
	s->fork_dormant = false;
	sock_offload_unlock(ctx);
}
