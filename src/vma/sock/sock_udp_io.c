/* Offloaded UDP sockets: the data path (receive and send). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "engine/engine.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_call.h"
#include "sock/sock_prefetch.h"
#include "sock/sock_udp_internal.h"
#include "extra/extra.h"
#include "ring/ring_spin.h"

#define SOCK_UDP_OS_EMPTY (-2)
#define SOCK_UDP_NEIGH_TIMEOUT_MS 1000
#define SOCK_UDP_TX_RETRIES 100000

/* ---- receive ---- */

/* One non-blocking read of the kernel socket: the result, or
 * SOCK_UDP_OS_EMPTY when it has nothing. */
static ssize_t sock_udp_os_try(struct sock_udp *s, struct msghdr *msg, int flags)
{
	/* Closed under this call (a blocked recv whose fd another thread
	 * closed): the number may already name another file, which the
	 * kernel would read or answer ENOTSOCK for. */
	if (__atomic_load_n(&s->released, __ATOMIC_ACQUIRE)) {
		errno = EBADF;
		return -1;
	}
	ssize_t r = os_recvmsg_nocancel(s->obj.fd, msg, flags);   /* not a cancellation point: os.h */
	if (r >= 0) {
		s->stats->c.rx_os_packets++;
		s->stats->c.rx_os_bytes += (uint64_t)r;
		s->stats->c.rx_poll_os_hit++;
		return r;
	}
	if (errno == EAGAIN)
		return SOCK_UDP_OS_EMPTY;
	s->stats->c.rx_os_errors++;
	return r;
}

static void sock_udp_fill_cmsgs(struct sock_udp *s, const struct sock_udp_entry *e, struct msghdr *msg)
{
	size_t used = 0;
	/* Linux's order: SO_TIMESTAMP(NS), SCM_TIMESTAMPING, then IP's. */
	if (__builtin_expect(sock_base_rx_stamps_on(&s->base), 0))
		sock_base_put_rx_stamps(&s->base, msg, &used, e->rx_time_ns);
	if (s->pktinfo) {
		struct in_pktinfo pi = { .ipi_ifindex = e->info.ifindex };
		int slot = sock_offload_if_slot(s->ctx, e->info.ifindex);
		pi.ipi_spec_dst.s_addr = slot >= 0 ? s->ctx->ifs[slot].nif.ip : e->info.dst_ip;
		pi.ipi_addr.s_addr = e->info.dst_ip;
		sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_PKTINFO, &pi, sizeof(pi));
	}
	if (s->recvttl) {
		int ttl = e->info.ttl;
		sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl));
	}
	if (s->recvtos) {
		uint8_t tos = e->info.tos;
		sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	}
	msg->msg_controllen = used;
}

/* Copies the front datagram out (lock held, queue not empty). */
static ssize_t sock_udp_dequeue_locked(struct sock_udp *s, struct msghdr *msg, int flags)
{
	struct sock_udp_entry *e = sock_udp_queue_front(&s->queue);
	size_t copied = sock_udp_copy_out(e->buf, e->len, msg->msg_iov, msg->msg_iovlen);
	msg->msg_flags = copied < e->len ? MSG_TRUNC : 0;
	if (msg->msg_name) {
		struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = e->info.src_port };
		sin.sin_addr.s_addr = e->info.src_ip;
		size_t n = msg->msg_namelen < sizeof(sin) ? msg->msg_namelen : sizeof(sin);
		memcpy(msg->msg_name, &sin, n);
		msg->msg_namelen = sizeof(sin);
	}
	if (msg->msg_control || msg->msg_controllen)
		sock_udp_fill_cmsgs(s, e, msg);
	ssize_t ret = (flags & MSG_TRUNC) ? (ssize_t)e->len : (ssize_t)copied;
	if (!(flags & MSG_PEEK)) {
		/* A peek is not a received packet: it is counted when read. */
		s->stats->c.rx_packets++;
		s->stats->c.rx_bytes += copied;
		stats_socket_ready_remove(s->stats, e->len);
		sock_udp_queue_pop(&s->queue);
	}
	return ret;
}


/* Sleeps on the rings' wait fds, the kernel socket and our wake eventfd
 * (sock_base_sleep_*); or, passive, on the kernel socket and the wake fd
 * alone while another receive watches the lane. The rings are those of the lane the socket is in
 * when we arm; a move while we sleep writes our wake eventfd (the deferred
 * wake of sock_udp_migrate.c), so we never sleep on a lane the socket left. */
static int sock_udp_sleep(struct sock_udp *s, uint64_t deadline_ms, const struct os_sig_mark *since,
			  struct sock_offload **watching, bool *kernel_ready)
{
	struct sock_base_sleep z;
	*kernel_ready = false;
	if (sock_base_sleep_begin(&s->base, &z, deadline_ms, -1, since) < 0)
		return -1;
	/* The lane's rings and drain eventfd, and the same of the lane the
	 * socket just left (strays). */
	int fds[2 * SOCK_OFFLOAD_WAIT_FDS];
	struct sock_offload *ctx = sock_udp_lock(s);
	if (!ctx)
		return sock_base_sleep_cancel(&s->base);   /* gone to the kernel path: the caller looks again */
	/* Prepared even when passive: it sends what is held and gives the
	 * rings their frames back before anyone sleeps. */
	int n = s->queue.count || sock_udp_has_strays(s)
			? -1 : sock_offload_wait_prepare_locked(ctx, fds, SOCK_OFFLOAD_WAIT_FDS);
	bool passive = n >= 0 && sock_offload_passive_begin_locked(ctx, watching, s->base.wake_fd,
								       sock_udp_stray_lane(s) != NULL);
	sock_offload_unlock(ctx);
	if (passive) {
		int r = sock_base_sleep_passive(&s->base, &z, POLLIN, ctx, watching);
		*kernel_ready = z.kernel_ready;
		return r;
	}
	struct sock_offload *old = n >= 0 ? sock_udp_stray_lane(s) : NULL;
	if (old) {
		int m = sock_offload_wait_prepare(old, fds + n, SOCK_OFFLOAD_WAIT_FDS);
		n = m < 0 ? -1 : n + m;
	}
	if (n < 0)
		return sock_base_sleep_cancel(&s->base);
	z.watching = watching;
	int r = sock_base_sleep_end(&s->base, &z, fds, n, POLLIN);
	*kernel_ready = z.kernel_ready;
	return r;
}

int sock_udp_rx_poll_budget(const struct sock_udp *s)
{
	/* Unlocked reads: a join or bind racing with this call only decides
	 * whether this one call polls by the old or the new budget. */
	if (__atomic_load_n(&s->flow_slots, __ATOMIC_RELAXED))
		return g_cfg.rx_poll;
	unsigned n = __atomic_load_n(&s->ngroups, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < n && i < SOCK_UDP_MAX_GROUPS; i++)
		if (__atomic_load_n(&s->groups[i].active, __ATOMIC_RELAXED))
			return g_cfg.rx_poll;
	/* Nothing is steered to the ring for this socket yet (not bound to
	 * an offloaded address, no group joined): polling the ring cannot
	 * find its data, so VMA_RX_POLL_INIT decides (0: sleep at once). */
	return g_cfg.rx_poll_init;
}

/* recvmsg(MSG_ERRQUEUE): our transmit stamps first, then whatever the
 * kernel socket queued (its own sends' stamps, ICMP errors). Never blocks,
 * as Linux's error-queue read. */
static ssize_t sock_udp_recv_errqueue(struct sock_udp *s, struct msghdr *msg, int flags)
{
	const struct sock_tstamp_ip_cmsgs ip = { .pktinfo = s->pktinfo, .ttl = s->recvttl, .tos = s->recvtos };
	ssize_t r = sock_tstamp_errq_recv(&s->base.tstamp, msg, &ip);
	if (r != SOCK_TSTAMP_ERRQ_EMPTY)
		return r;
	return OS_CALL(recvmsg, s->obj.fd, msg, flags);
}

static ssize_t sock_udp_recv_wait(struct sock_udp *s, struct msghdr *msg, int flags,
				  struct sock_offload **watching);

ssize_t sock_udp_op_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags)
{
	struct sock_offload *watching = NULL;
	ssize_t r = sock_udp_recv_wait(sock_udp_of(obj), msg, flags, &watching);
	/* With data, the claim on the lane stays until its lease lapses:
	 * the thread is back for more in microseconds (sock_offload.h). */
	if (r <= 0)
		sock_offload_spin_leave();
	if (__builtin_expect(watching != NULL, 0))   /* left without data: an error, EINTR, a timeout */
		sock_offload_unwatch(&watching);
	return r;
}

/* The receive; *watching is the lane this call counts as a watcher of
 * (the caller drops it). */
static ssize_t sock_udp_recv_wait(struct sock_udp *s, struct msghdr *msg, int flags,
				  struct sock_offload **watching)
{
	/* From the interposed symbol's entry (os_signal_call_enter). */
	struct os_sig_mark sigmark = os_signal_call_mark();
	sock_udp_fork_check(s);
	if (__builtin_expect(flags & (MSG_ERRQUEUE | MSG_OOB), 0) && (flags & MSG_ERRQUEUE) && !s->released)
		return sock_udp_recv_errqueue(s, msg, flags);
	if (!sock_udp_ctx(s) || (flags & (MSG_ERRQUEUE | MSG_OOB)))
		return SOCK_OP_KERNEL;
	/* Before this call's first lock: a move, if this call ends a window,
	 * happens here, never while we hold a lane. */
	sock_udp_migrate_note(s);
	bool nonblock = s->base.nonblocking || (flags & MSG_DONTWAIT);
	int ratio = g_cfg.rx_udp_poll_os_ratio;
	int rx_poll = sock_udp_rx_poll_budget(s);
	uint64_t deadline = s->base.rcvtimeo_ms ? engine_now_ms() + (uint64_t)s->base.rcvtimeo_ms : 0;
	long spins = 0;
	bool slept = false, yielded = false;
	for (;;) {
		/* The socket moved lanes: the watch of the old one goes. */
		if (__builtin_expect(*watching != NULL, 0) && *watching != __atomic_load_n(&s->ctx, __ATOMIC_RELAXED))
			sock_offload_unwatch(watching);
		/* VMA_RX_UDP_POLL_OS_RATIO counts ring polls: a pass that
		 * found the lane busy polled nothing (such passes are fast,
		 * and counting them made the kernel socket's read most of a
		 * waiting reader's work). */
		if (ratio > 0 && s->os_poll_count + 1 >= (unsigned)ratio) {
			s->os_poll_count = 0;
			ssize_t r = sock_udp_os_try(s, msg, flags);
			if (r != SOCK_UDP_OS_EMPTY)
				return r;
		}
		/* A polling pass with nothing queued for us does not wait for
		 * a lane another thread holds: that thread is polling the
		 * rings for every socket of the lane, and what it finds for us
		 * is in our queue at the next pass (threads of one lane, as
		 * under the default VMA_RING_ALLOCATION_LOGIC_RX=0, would
		 * otherwise queue at the lock on every pass). */
		bool busy = false;
		struct sock_offload *ctx = spins && !__atomic_load_n(&s->queue.count, __ATOMIC_RELAXED) &&
						   !sock_udp_has_strays(s)
						   ? sock_udp_trylock(s, &busy)
						   : sock_udp_lock(s);
		if (busy)
			goto polled;
		s->os_poll_count++;
		if (__builtin_expect(!ctx, 0)) {
			if (s->released) {
				errno = EBADF;
				return -1;
			}
			/* The lane went (exit, fork): the kernel socket serves. A
			 * handler that ran meanwhile (the one that tore the lane
			 * down, held back until our unlock) must not be slept
			 * through in the kernel. */
			if (os_signal_interrupts(&sigmark, !deadline))
				return -1;
			/* Not a watcher while blocked in the kernel: the lane's
			 * passive sleepers must not count on us. */
			sock_offload_unwatch(watching);
			return OS_CALL(recvmsg, s->obj.fd, msg, flags);
		}
		if (__builtin_expect(sock_udp_has_strays(s), 0))
			sock_udp_strays_take_locked(s);
		if (!s->queue.count) {
			/* A lane with nothing to receive and no timer due is
			 * not processed: a pass costs a clock read, and a
			 * thread waiting for its next datagram passes
			 * several times per request (sock_offload_idle_peek). */
			if (!sock_offload_idle_peek(ctx))
				sock_offload_progress_locked(ctx);
		} else
			sock_offload_rx_drain_locked(ctx, &s->stats->c.rx_drain_polls);
		if (s->queue.count) {
			ssize_t r = sock_udp_dequeue_locked(s, msg, flags);
			sock_offload_unwatch_locked(ctx, watching);
			sock_offload_unlock(ctx);
			/* A hit is data found by polling, not after sleeping. */
			if (!slept)
				s->stats->c.rx_poll_hit++;
			return r;
		}
		if (!nonblock)
			sock_offload_watch_locked(ctx, watching);
		sock_offload_unlock(ctx);
	polled:
		/* Datagrams staged for the receive callback: shown to it now,
		 * in this thread; those it queues are read on the next pass. */
		if (__builtin_expect(s->cb_stage != NULL, 0) && extra_udp_run_callbacks(s) > 0)
			continue;
		struct sock_offload *old = sock_udp_stray_lane(s);
		if (old) {
			/* Nothing here yet: what the lane the socket left may
			 * still hold for it comes over as strays. */
			sock_offload_progress_try(old);
			if (sock_udp_has_strays(s))
				continue;
		}
		if (s->released) {
			errno = EBADF;
			return -1;
		}
		if (nonblock) {
			s->stats->c.rx_poll_miss++;
			ssize_t r = sock_udp_os_try(s, msg, flags);
			if (r != SOCK_UDP_OS_EMPTY)
				return r;
			s->stats->c.rx_eagain++;
			errno = EAGAIN;
			return -1;
		}
		/* Linux: EINTR, or a restart under SA_RESTART unless SO_RCVTIMEO. */
		if (os_signal_interrupts(&sigmark, !deadline))
			return -1;
		bool may_poll = rx_poll < 0 || spins++ < rx_poll;
		/* One spinner per lane (sock_offload_spin_turn). */
		struct sock_offload *lane = may_poll ? sock_udp_ctx(s) : NULL;
		if (may_poll && ring_spin_permit() && (!lane || sock_offload_spin_turn(lane))) {
			if (deadline && (spins & 1023) == 0 && engine_now_ms() >= deadline) {
				errno = EAGAIN;
				return -1;
			}
			/* VMA_RX_POLL_YIELD: other polling threads (or the
			 * sender we wait for) may need this core. */
			if (g_cfg.rx_poll_yield)
				sched_yield();
			continue;
		}
		/* Refused a busy-polling permit: one yield per call, then one
		 * more look before the sleep (ring_spin_yield). */
		if (may_poll && ring_spin_yield(&yielded))
			continue;
		/* Polling ran out: one miss per call that goes to sleep. The
		 * sleep's poll() watches the kernel socket too, so it is read
		 * only when poll() saw it ready (before, a read before each
		 * sleep and one after cost two syscalls a sleep that almost
		 * always found nothing: the rings carry our traffic). */
		s->stats->c.rx_poll_miss++;
		sock_offload_spin_leave();
		bool kernel_ready;
		if (sock_udp_sleep(s, deadline, &sigmark, watching, &kernel_ready) < 0)
			return -1;
		slept = true;
		spins = 0;
		if (kernel_ready) {
			ssize_t r = sock_udp_os_try(s, msg, flags);
			if (r != SOCK_UDP_OS_EMPTY)
				return r;
		}
	}
}

ssize_t sock_udp_recvmsg_common(struct sock_udp *s, struct msghdr *msg, int flags)
{
	return SOCK_CALL_OR_KERNEL(sock_udp_op_recvmsg(&s->obj, msg, flags), OS_CALL(recvmsg, s->obj.fd, msg, flags));
}

/* ---- send ---- */

/* Fills s->route for dst:port. Returns 0 (offloaded), 1 (kernel path), or
 * -1 with errno (an error Linux would give before sending). */
static int sock_udp_route(struct sock_udp *s, struct sock_offload *ctx, uint32_t dst, uint16_t port)
{
	struct sock_udp_route *rt = &s->route;
	uint64_t gen = net_generation(ctx->net);
	if (rt->valid && rt->dst == dst && rt->port == port && rt->generation == gen && rt->lane == ctx)
		return rt->via_os;
	struct sock_udp_route fresh = { .valid = true, .lane = ctx, .via_os = true, .dst = dst, .port = port,
					.generation = gen, .if_slot = -1 };
	struct sockaddr_in remote = { .sin_family = AF_INET, .sin_port = port };
	remote.sin_addr.s_addr = dst;
	struct net_route_query q = { .dst = dst, .mc_ifindex = s->mc_ifindex, .mc_if_addr = s->mc_if_addr };
	struct net_route_result r;
	if (cfg_rules_match(CFG_ROLE_UDP_SENDER, NULL, &remote) != CFG_TRANSPORT_VMA ||
	    net_route_lookup(ctx->net, &q, &r) < 0)
		goto done;
	switch (r.kind) {
	case NET_ROUTE_BROADCAST:
		if (!s->broadcast) {
			errno = EACCES;
			return -1;
		}
		goto done;   /* broadcast stays with the kernel */
	case NET_ROUTE_LOCAL:
		goto done;
	case NET_ROUTE_MULTICAST:
		fresh.multicast = true;
		net_mcast_mac(dst, fresh.mac);
		break;
	case NET_ROUTE_UNICAST:
		if (sock_offload_if_slot(ctx, r.ifindex) < 0 ||
		    net_neigh_resolve(ctx->net, r.ifindex, r.next_hop, fresh.mac, SOCK_UDP_NEIGH_TIMEOUT_MS) < 0)
			goto done;
		break;
	}
	fresh.if_slot = sock_offload_if_slot(ctx, r.ifindex);
	if (fresh.if_slot < 0)
		goto done;
	fresh.src = (s->local_ip && !IN_MULTICAST(ntohl(s->local_ip))) ? s->local_ip
		  : r.src ? r.src : ctx->ifs[fresh.if_slot].nif.ip;
	fresh.via_os = false;
done:
	*rt = fresh;
	return rt->via_os;
}

/* SO_TIMESTAMPING on a send: the interface the stack sends through, with
 * its frames watched so the first one (what Linux's error queue returns
 * without OPT_TSONLY: the frame from its Ethernet header) is copied. */
#define SOCK_UDP_FRAME_IP_END (STACK_ETH_HLEN + STACK_IP4_HLEN)
struct sock_udp_tx_watch {
	struct stack_netif nif;
	const struct stack_netif *real;
	bool want_frame;
	unsigned char *frame;        /* malloc'd copy of the first frame */
	uint32_t frame_len;
};

static struct ring_buf *sock_udp_watch_alloc(void *arg)
{
	const struct sock_udp_tx_watch *w = arg;
	return w->real->tx_alloc(w->real->ctx);
}

static int sock_udp_watch_send(void *arg, struct ring_buf *frame)
{
	struct sock_udp_tx_watch *w = arg;
	if (w->want_frame && !w->frame) {
		w->frame = malloc(frame->len);
		if (w->frame) {
			memcpy(w->frame, frame->data, frame->len);
			w->frame_len = frame->len;
		}
	}
	return w->real->tx_send(w->real->ctx, frame);
}

static const struct stack_netif *sock_udp_watch_begin(struct sock_udp_tx_watch *w, const struct stack_netif *real,
						      uint32_t flags)
{
	*w = (struct sock_udp_tx_watch){ .nif = *real, .real = real,
					 .want_frame = !(flags & SOF_TIMESTAMPING_OPT_TSONLY) };
	w->nif.ctx = w;
	w->nif.tx_alloc = sock_udp_watch_alloc;
	w->nif.tx_send = sock_udp_watch_send;
	return &w->nif;
}

/* Queues the stamps of one sent datagram: SCM_TSTAMP_SCHED (taken before
 * the stack built it) then SCM_TSTAMP_SND (now: its frames are on the
 * ring), each a copy of the frame unless OPT_TSONLY; the OPT_ID counter
 * advances per datagram, as Linux's does for a UDP send that asked for a
 * stamp. */
static void sock_udp_tx_stamped(struct sock_udp *s, struct sock_udp_tx_watch *w, uint32_t flags, uint64_t sched_ns,
				int ifindex)
{
	uint64_t snd_ns = sock_tstamp_now_ns();
	uint32_t key = s->base.tstamp.key_next++;
	uint64_t limit = s->rcvbuf;
	bool queued = false;
	static const uint32_t kinds[] = { SCM_TSTAMP_SCHED, SCM_TSTAMP_SND };
	for (unsigned i = 0; i < 2; i++) {
		uint32_t gen = kinds[i] == SCM_TSTAMP_SCHED ? SOF_TIMESTAMPING_TX_SCHED : SOF_TIMESTAMPING_TX_SOFTWARE;
		if (!(flags & gen))
			continue;
		bool with_frame = w->want_frame && w->frame && w->frame_len >= SOCK_UDP_FRAME_IP_END;
		struct sock_tstamp_note *n = sock_tstamp_note_new(with_frame ? w->frame_len : 0);
		if (!n)
			continue;
		n->stamp_ns = kinds[i] == SCM_TSTAMP_SCHED ? sched_ns : snd_ns;
		n->kind = kinds[i];
		n->key = key;
		if (with_frame) {
			memcpy(n->data, w->frame, w->frame_len);
			n->has_packet = true;
			n->ifindex = ifindex;
			/* What OPT_CMSG reports, from the IP header as sent. */
			const unsigned char *ip = w->frame + STACK_ETH_HLEN;
			memcpy(&n->src_ip, ip + 12, 4);
			memcpy(&n->dst_ip, ip + 16, 4);
			n->ttl = ip[8];
			n->tos = ip[1];
		}
		queued |= sock_tstamp_queue(&s->base.tstamp, n, limit);
	}
	free(w->frame);
	w->frame = NULL;
	if (queued)
		iomux_notify(&s->obj, EPOLLERR);
}

ssize_t sock_udp_sendmsg_common(struct sock_udp *s, const struct msghdr *msg, int flags, bool flush)
{
	struct sock_offload *ctx = sock_udp_ctx(s);
	/* VMA_SND_FLAGS_DUMMY (the Extra API): the datagram is built into
	 * frames of the ring and taken back, never sent (extra_dummy.c). */
	bool dummy = (flags & VMA_SND_FLAGS_DUMMY) != 0;
	if (!ctx || msg->msg_controllen ||
	    (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_CONFIRM | VMA_SND_FLAGS_DUMMY)))
		goto kernel;
	int via;
	uint32_t dst;
	uint16_t port;
	if (msg->msg_name) {
		const struct sockaddr_in *to = msg->msg_name;
		if (msg->msg_namelen < sizeof(*to) || to->sin_family != AF_INET || to->sin_port == 0)
			goto kernel;   /* the kernel gives the exact error */
		dst = to->sin_addr.s_addr;
		port = to->sin_port;
	} else if (s->connected) {
		dst = s->remote_ip;
		port = s->remote_port;
	} else {
		goto kernel;   /* EDESTADDRREQ */
	}
	size_t total = 0;
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		total += msg->msg_iov[i].iov_len;
	if (total > STACK_UDP_MAX_PAYLOAD) {
		errno = EMSGSIZE;
		return -1;
	}
	if (s->local_port == 0 && sock_udp_autobind(s) != 0)
		return -1;
	/* The route (an interface slot of one lane, maybe a neighbour lookup
	 * that waits) is found without the lock, for the lane the socket is
	 * in; if it moved before we locked, again for the new one. */
	for (;;) {
		via = sock_udp_route(s, ctx, dst, port);
		if (via != 0)
			break;
		struct sock_offload *held = sock_udp_lock(s);
		if (held == ctx)
			break;
		if (held)
			sock_offload_unlock(held);
		ctx = sock_udp_ctx(s);
		if (!ctx)
			goto kernel;
	}
	if (via < 0)
		return -1;
	if (via > 0)
		goto kernel;
	/* Here ctx is locked and still the socket's lane. */

	const struct sock_udp_route *rt = &s->route;
	struct stack_udp_tx tx = { .src_ip = rt->src, .dst_ip = dst, .src_port = s->local_port, .dst_port = port,
				   .tos = (uint8_t)s->tos };
	tx.ttl = (uint8_t)(rt->multicast ? s->mc_ttl : (s->ttl < 0 ? 0 : s->ttl));
	memcpy(tx.dst_mac, rt->mac, 6);
	bool nonblock = s->base.nonblocking || (flags & MSG_DONTWAIT);
	struct sock_offload_if *ifc = &ctx->ifs[rt->if_slot];
	/* VMA_TX_PREFETCH_BYTES: the payload the stack is about to copy. */
	if (msg->msg_iovlen > 0 && msg->msg_iov)
		sock_prefetch(msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, g_cfg.tx_prefetch_bytes);
	int r;
	const struct stack_netif *nif = &ifc->nif;
	/* SO_TIMESTAMPING: one flag test when off. TX_ACK is TCP's alone:
	 * Linux neither stamps nor counts a datagram for it. */
	uint32_t ts_flags = s->base.tstamp.flags & (SOCK_TSTAMP_TX_RECORD & ~(uint32_t)SOF_TIMESTAMPING_TX_ACK);
	struct sock_udp_tx_watch watch;
	struct extra_dummy_netif dummy_nif;
	uint64_t sched_ns = 0;
	if (__builtin_expect(dummy, 0)) {
		ts_flags = 0;   /* nothing sent: nothing stamped */
		nif = extra_dummy_netif(&dummy_nif, nif);
	} else if (__builtin_expect(ts_flags != 0, 0)) {
		ts_flags = s->base.tstamp.flags;
		nif = sock_udp_watch_begin(&watch, nif, ts_flags);
		if (ts_flags & SOF_TIMESTAMPING_TX_SCHED)
			sched_ns = sock_tstamp_now_ns();
	}
	for (int attempt = 0;; attempt++) {
		r = stack_udp_send(ctx->stack, nif, &tx, msg->msg_iov, (int)msg->msg_iovlen);
		if (r != -ENOBUFS || (nonblock && attempt > 0) || attempt >= SOCK_UDP_TX_RETRIES)
			break;
		ring_tx_flush(sock_offload_tx_ring(ctx, rt->if_slot));   /* rings the doorbell and reaps completions */
	}
	if (flush)
		/* Now, or later in a burst or with the replies to the
		 * datagrams still queued here (docs/ring.md). */
		sock_offload_tx_send_done_locked(ctx, sock_offload_tx_ring(ctx, rt->if_slot),
						 sock_offload_tx_more(__atomic_load_n(&s->queue.count, __ATOMIC_RELAXED) != 0));
	if (r >= 0 && rt->multicast && s->mc_loop && !dummy)
		sock_offload_mc_loop_locked(ctx, rt->if_slot, &tx, msg->msg_iov, (int)msg->msg_iovlen);
	int ifindex = ifc->nif.ifindex;
	sock_offload_unlock(ctx);
	if (__builtin_expect(ts_flags != 0, 0)) {
		if (r >= 0)
			sock_udp_tx_stamped(s, &watch, ts_flags, sched_ns, ifindex);
		else
			free(watch.frame);
	}
	if (r == -ENOBUFS && nonblock && !g_cfg.tx_nonblocked_eagains && !dummy) {
		/* Dropped, reported sent (VMA_TX_NONBLOCKED_EAGAINS=0): counted
		 * with the EAGAINs it hid, not as a dummy. */
		s->stats->c.tx_eagain++;
		return (ssize_t)total;
	}
	if (r < 0) {
		if (r == -ENOBUFS && nonblock) {
			s->stats->c.tx_eagain++;
			errno = EAGAIN;
		} else {
			s->stats->c.tx_errors++;
			errno = -r;
		}
		return -1;
	}
	if (__builtin_expect(dummy, 0)) {
		s->stats->c.tx_dummy++;
		return r;
	}
	s->stats->c.tx_packets++;
	s->stats->c.tx_bytes += (uint64_t)r;
	return r;

kernel:;
	if (__builtin_expect(flags & VMA_SND_FLAGS_DUMMY, 0)) {
		/* The kernel would send it for real (Linux ignores MSG_SYN on
		 * UDP): refused, as libvma refuses a dummy on its OS path. */
		errno = EINVAL;
		return -1;
	}
	ssize_t kr = OS_CALL(sendmsg, s->obj.fd, msg, flags);
	if (s->stats) {
		if (kr >= 0) {
			s->stats->c.tx_os_packets++;
			s->stats->c.tx_os_bytes += (uint64_t)kr;
		} else if (errno == EAGAIN) {
			s->stats->c.tx_os_eagain++;
		} else {
			s->stats->c.tx_os_errors++;
		}
	}
	return kr;
}

ssize_t sock_udp_op_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags)
{
	return sock_udp_sendmsg_common(sock_udp_of(obj), msg, flags, true);
}

int sock_udp_op_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	struct sock_udp *s = sock_udp_of(obj);
	struct sock_offload *ctx = sock_udp_ctx(s);
	if (!ctx && (flags & VMA_SND_FLAGS_DUMMY)) {
		errno = EINVAL;   /* never a real send (sock_udp_sendmsg_common) */
		return -1;
	}
	if (!ctx)
		return SOCK_OP_KERNEL;
	if (vlen > IOV_MAX)
		vlen = IOV_MAX;
	unsigned int sent = 0;
	for (; sent < vlen; sent++) {
		ssize_t r = sock_udp_sendmsg_common(s, &vec[sent].msg_hdr, flags, false);
		if (r < 0)
			break;
		vec[sent].msg_len = (unsigned int)r;
	}
	/* One doorbell for the batch (deferred too when the calls come in a
	 * burst), on the lane the socket is in now: sends a move left held on
	 * the old lane leave with that lane's next pass or tick backstop. */
	ctx = sock_udp_lock(s);
	if (ctx) {
		for (unsigned i = 0; i < ctx->nifs; i++) {
			struct ring *tx = sock_offload_tx_ring(ctx, (int)i);
			if (ring_tx_pending(tx))
				sock_offload_tx_send_done_locked(ctx, tx, false);
		}
		sock_offload_unlock(ctx);
	}
	if (sent == 0 && vlen > 0)
		return -1;
	return (int)sent;
}
