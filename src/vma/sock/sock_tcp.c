/* Offloaded TCP sockets: creation, the engine's callbacks, connect,
 * readiness, close/release and the ops tables (background closes and the
 * exit hook: sock_tcp_close.c). See docs/tcp_sockets.md.
 *
 * A socket starts on the kernel path (sock_tcp_kernel_ops: every data call
 * is the kernel's). connect()/listen() decide: when the rules and the route
 * say offload, the ops switch to sock_tcp_offload_ops for good. The kernel
 * socket under the fd keeps the port reserved and is made a listener, the
 * one TCP state in which it reports no readiness of its own (iomux always
 * adds the kernel fd's events to ours). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "iomux/iomux.h"
#include "log/vlog.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_tcp_internal.h"
#include "extra/extra.h"

#define SOCK_TYPE_MASK 0xf

bool sock_tcp_wanted(int domain, int type)
{
	return domain == AF_INET && (type & SOCK_TYPE_MASK) == SOCK_STREAM && extra_thread_offload_wanted();
}

void sock_tcp_put_addr(struct sockaddr *addr, socklen_t *len, uint32_t ip, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = port };
	sin.sin_addr.s_addr = ip;
	if (!addr || !len)
		return;
	size_t n = *len < sizeof(sin) ? *len : sizeof(sin);
	memcpy(addr, &sin, n);
	*len = sizeof(sin);
}

void sock_tcp_flow_put_locked(struct sock_tcp *s)
{
	if (s->flow_held)
		sock_offload_flow_put_locked(s->ctx, s->if_slot, &s->flow);
	s->flow_held = false;
	s->flow_by_listener = false;
	s->flow_share = false;
}

void sock_tcp_rxq_clear_locked(struct sock_tcp *s)
{
	struct ring_buf *b = s->rxq_head;
	while (b) {
		struct ring_buf *next = b->link;
		ring_buf_free(b);
		b = next;
	}
	if (s->stats && s->rxq_bytes)
		stats_socket_ready_remove(s->stats, s->rxq_bytes);
	s->rxq_head = s->rxq_tail = NULL;
	s->rxq_bytes = 0;
	s->rxq_frames = 0;
	if (s->pcb)
		tcp_rcv_held_set(s->pcb, sock_tcp_frames_held(s));
}

/* Lock held: buf (one buffer, len > 0) goes on the receive queue, copied
 * into the last queued frame when it is small (or the queue holds more
 * frame memory than the receive buffer) and fits there. */
void sock_tcp_rxq_append_locked(struct sock_tcp *s, struct ring_buf *buf)
{
	struct ring_buf *tail = s->rxq_tail;
	if (tail && tail->refcount == 1) {
		uint32_t room = (uint32_t)(tail->head + tail->size - (tail->data + tail->len));
		uint32_t rcvbuf = s->rcvbuf ? s->rcvbuf : SOCK_TCP_RCVBUF_DEFAULT;
		bool small = buf->len <= SOCK_TCP_COALESCE_MAX ||
			     (uint64_t)s->rxq_frames * tail->size > rcvbuf;
		if (small && buf->len <= room) {
			memcpy(tail->data + tail->len, buf->data, buf->len);
			tail->len += buf->len;
			tail->tot_len = tail->len;
			/* Linux's coalescing keeps the newer receive stamp too. */
			tail->rx_time_ns = buf->rx_time_ns;
			ring_buf_free(buf);
			if (s->ctx)
				s->ctx->rx_coalesced++;
			return;
		}
	}
	buf->link = NULL;
	if (tail)
		tail->link = buf;
	else
		s->rxq_head = buf;
	s->rxq_tail = buf;
	s->rxq_frames++;
}

/* Lock held: segments the engine queued outside a progress pass (SYN,
 * FIN, RST, window update) leave now instead of at the next pass. */
void sock_tcp_tx_kick_locked(struct sock_tcp *s)
{
	struct sock_offload *ctx = s->ctx;
	if (!ctx || ctx->dead)
		return;
	for (unsigned i = 0; i < ctx->nifs; i++) {
		if (s->if_slot >= 0 && (unsigned)s->if_slot != i)
			continue;
		struct ring *tx = sock_offload_tx_ring(ctx, (int)i);
		if (ring_tx_pending(tx))
			sock_offload_tx_send_done_locked(ctx, tx, false);
	}
}

/* ---- notifications (run after the unlock) ---- */

static void sock_tcp_wake(void *arg)
{
	struct sock_tcp *s = arg;
	uint32_t bits = __atomic_exchange_n(&s->notify_bits, 0, __ATOMIC_ACQ_REL);
	__atomic_store_n(&s->wake_pending, false, __ATOMIC_RELEASE);
	unsigned edges = __atomic_exchange_n(&s->notify_edges, 0, __ATOMIC_ACQ_REL);
	if (bits)
		iomux_notify_n(&s->obj, bits, edges);
	sock_base_wake_sleepers(&s->base);
	/* A child waiting for accept() wakes its listener's watchers instead
	 * (handled by the accept callback). */
}

void sock_tcp_notify_locked(struct sock_tcp *s, uint32_t ev)
{
	/* SocketXtreme reports it through the lane's next socketxtreme_poll. */
	if (__builtin_expect(g_cfg.socketxtreme, 0))
		extra_xt_tcp_event_locked(s, ev);
	__atomic_or_fetch(&s->notify_bits, ev, __ATOMIC_RELEASE);
	sock_offload_poll_wake_if_locked(s->ctx);
	bool watched = sock_base_watched(&s->base);
	if (watched && !s->wake_pending) {
		s->wake_pending = true;
		sock_offload_defer_locked(s->ctx, &s->wake_node);
	}
}

void sock_tcp_snd_refresh_locked(struct sock_tcp *s)
{
	if (!s->pcb)
		return;
	s->snd_free = tcp_sndbuf_free(s->pcb);
	s->snd_used = tcp_sndbuf_used(s->pcb);
	/* sk_stream_is_writeable: free space at least half of what is queued
	 * (a third of the buffer), and TCP_NOTSENT_LOWAT's rule for poll. */
	s->snd_room = s->snd_free > 0 && tcp_sndbuf_lowat_room(s->pcb) > 0;
	bool now = s->snd_free > 0 && s->snd_free >= s->snd_used / 2 && tcp_sndbuf_lowat_writable(s->pcb);
	bool rose = now && !s->writeable;
	s->writeable = now;
	if (s->stats)
		s->stats->tcp_state = (uint32_t)tcp_pcb_state(s->pcb);
	if (rose && s->established)
		sock_tcp_notify_locked(s, EPOLLOUT);
}

/* ---- engine callbacks (lock held, from stack_input or a timer) ---- */

static void sock_tcp_recv_cb(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	struct sock_tcp *s = arg;
	if (!buf) {
		s->peer_fin = true;
		s->shut_rcv = true;
		sock_tcp_notify_locked(s, EPOLLIN | EPOLLRDHUP);
		return;
	}
	uint32_t left = buf->tot_len;
	uint32_t total = left;
	/* Split the chain into single buffers: each is read and freed on its
	 * own, and MSG_PEEK walks them without touching anything. */
	while (buf) {
		struct ring_buf *next = buf->next;
		buf->next = NULL;
		if (buf->len > left)
			buf->len = left;
		left -= buf->len;
		buf->tot_len = buf->len;
		if (buf->len == 0) {
			ring_buf_free(buf);
		} else if (__builtin_expect(s->xcb && s->xcb->fn, 0)) {
			/* The Extra API's receive callback sees it first. */
			extra_tcp_stage_locked(s, buf);
			total -= buf->len;
		} else {
			sock_tcp_rxq_append_locked(s, buf);
		}
		buf = next;
	}
	tcp_rcv_held_set(pcb, sock_tcp_frames_held(s));
	s->rxq_bytes += total - left;
	if (s->stats)
		stats_socket_ready_add(s->stats, total - left);
	sock_tcp_notify_locked(s, EPOLLIN);
}

static void sock_tcp_sent_cb(void *arg, struct tcp_pcb *pcb, uint32_t acked)
{
	(void)pcb;
	(void)acked;
	sock_tcp_snd_refresh_locked(arg);
}

static void sock_tcp_err_cb(void *arg, int err)
{
	struct sock_tcp *s = arg;
	s->pcb = NULL;                 /* the engine freed it */
	s->reset = true;
	s->connecting = false;
	s->shut_rcv = s->shut_send = true;
	s->err = err > 0 ? err : -err;
	s->writeable = false;
	sock_tcp_all_del_locked(s);
	sock_tcp_flow_put_locked(s);
	if (s->stats)
		s->stats->tcp_state = STATS_TCP_CLOSED;
	sock_tcp_notify_locked(s, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLRDHUP);
}

static void sock_tcp_connected_cb(void *arg, struct tcp_pcb *pcb)
{
	struct sock_tcp *s = arg;
	s->connecting = false;
	s->established = true;
	tcp_pcb_get_addr(pcb, &s->local_ip, &s->local_port, &s->remote_ip, &s->remote_port);
	s->writeable = false;
	sock_tcp_snd_refresh_locked(s);
	sock_tcp_notify_locked(s, EPOLLOUT);
}

/* Linux's skb of a TCP send is at most about 64 KiB: the payload a stamp
 * loops back (without OPT_TSONLY) is at most the last this many bytes of
 * the send call. */
#define SOCK_TCP_TSTAMP_PAYLOAD_MAX 65536u

/* A transmit stamp of a send call's last byte is due (SO_TIMESTAMPING):
 * one note on the error queue, shaped as Linux's. Without OPT_TSONLY it
 * carries what Linux loops back: for SCHED and SND the packet from its
 * Ethernet header (here: the headers of the segment that carried the
 * byte, then the call's bytes, as one unsegmented buffer), for ACK the
 * call's bytes Linux still held in its retransmit queue. */
static void sock_tcp_tx_stamp_cb(void *arg, struct tcp_pcb *pcb, unsigned kind, uint32_t start, uint32_t end,
				 const uint8_t *hdr, uint32_t hdr_len)
{
	struct sock_tcp *s = arg;
	uint32_t flags = __atomic_load_n(&s->base.tstamp.flags, __ATOMIC_ACQUIRE);
	uint32_t data_len = end - start;
	if (data_len > SOCK_TCP_TSTAMP_PAYLOAD_MAX) {
		data_len = SOCK_TCP_TSTAMP_PAYLOAD_MAX;
		start = end - data_len;
	}
	bool payload = !(flags & SOF_TIMESTAMPING_OPT_TSONLY);
	if (!hdr)
		hdr_len = 0;
	struct sock_tstamp_note *n = sock_tstamp_note_new(payload ? hdr_len + data_len : 0);
	if (!n)
		return;
	n->stamp_ns = sock_tstamp_now_ns();
	n->kind = kind == TCP_TX_STAMP_SCHED ? SCM_TSTAMP_SCHED : kind == TCP_TX_STAMP_SND ? SCM_TSTAMP_SND
										     : SCM_TSTAMP_ACK;
	/* OPT_ID: the byte's offset from the sequence number the option
	 * started at (snd_una, or write_seq with OPT_ID_TCP). */
	n->key = end - 1 - s->base.tstamp.key_next;
	if (payload) {
		if (hdr_len)
			memcpy(n->data, hdr, hdr_len);
		/* Bytes an earlier ACK already took are gone, as Linux trims
		 * its buffer on a partial acknowledgment. */
		n->len = hdr_len + tcp_sndbuf_peek(pcb, start, data_len, n->data + hdr_len);
	}
	uint64_t limit = s->rcvbuf ? s->rcvbuf : SOCK_TCP_RCVBUF_DEFAULT;
	if (sock_tstamp_queue(&s->base.tstamp, n, limit))
		sock_tcp_notify_locked(s, EPOLLERR);
}

static const struct tcp_callbacks sock_tcp_callbacks = {
	.recv = sock_tcp_recv_cb,
	.sent = sock_tcp_sent_cb,
	.err = sock_tcp_err_cb,
	.connected = sock_tcp_connected_cb,
	.accept = sock_tcp_accept_cb,
	.admit = sock_tcp_admit_cb,
	.child_born = sock_tcp_child_born_cb,
	.child_lost = sock_tcp_child_lost_cb,
	.tx_stamp = sock_tcp_tx_stamp_cb,
};

void sock_tcp_apply_options_locked(struct sock_tcp *s)
{
	struct tcp_pcb *pcb = s->pcb;
	if (!pcb)
		return;
	/* A listener's values reach the children of later SYNs. */
	tcp_set_mss_clamp(pcb, s->maxseg);
	if (s->syncnt)
		tcp_set_syn_retries(pcb, s->syncnt);
	tcp_set_nodelay(pcb, s->nodelay);
	tcp_set_cork(pcb, s->cork);
	tcp_set_quickack(pcb, s->quickack);
	/* SO_RCVBUF (the value asked: Linux offers half of its doubled
	 * buffer as the window) fixes the window and ends auto-tuning */
	if (s->rcvbuf || s->sndbuf)
		tcp_set_bufsizes(pcb, s->rcvbuf, s->sndbuf);
	tcp_set_user_timeout(pcb, s->user_timeout_ms);
	if (s->keep_params_set)
		tcp_set_keepalive_params(pcb, s->keep_idle_s * 1000u, s->keep_intvl_s * 1000u, s->keep_cnt);
	tcp_set_keepalive(pcb, s->keepalive);
	tcp_set_notsent_lowat(pcb, s->notsent_lowat);
	if (s->cc_set)
		tcp_set_cc_algo(pcb, (enum tcp_cc_algo)s->cc_algo);
}

void sock_tcp_pcb_setup_locked(struct sock_tcp *s, struct tcp_pcb *pcb)
{
	s->pcb = pcb;
	tcp_set_callbacks(pcb, &sock_tcp_callbacks, s);
	if (s->if_slot >= 0)
		tcp_set_netif(pcb, &s->ctx->ifs[s->if_slot].nif);
	sock_tcp_apply_options_locked(s);
}

/* ---- connect ---- */

static bool sock_tcp_is_connected(const struct sock_tcp *s)
{
	return !s->connecting;
}

int sock_tcp_wait_connected(struct sock_tcp *s, struct sock_offload *ctx, int timeo_ms)
{
	uint64_t deadline = timeo_ms ? engine_now_ms() + (uint64_t)timeo_ms : 0;
	struct os_sig_mark sigmark = os_signal_call_mark();
	unsigned spins = 0;
	for (;;) {
		ctx = sock_tcp_lock(s, ctx);
		if (s->connecting)
			sock_offload_progress_locked(ctx);
		bool connecting = s->connecting;
		sock_offload_unlock(ctx);
		if (!connecting)
			return 0;
		/* Linux: EINTR leaves the handshake going (a later connect
		 * says EALREADY); SA_RESTART waits on unless SO_SNDTIMEO. */
		if (os_signal_interrupts(&sigmark, !deadline))
			return -1;
		if (sock_tcp_spin_again(&spins, deadline))
			continue;
		if (sock_tcp_sleep(s, ctx, deadline, 0, sock_tcp_is_connected, &sigmark) < 0)
			return -1;
		spins = 0;
	}
}

/* Where a connect to dst goes. 0: offloaded on *slot with src, mac and the
 * route's MTU/advmss metrics; 1: the kernel's. */
static int sock_tcp_route(struct sock_tcp *s, struct sock_offload *ctx, const struct sockaddr_in *dst,
			  int *slot, uint32_t *src, uint8_t mac[6], struct tcp_route_metrics *rm)
{
	struct sockaddr_in local = { .sin_family = AF_INET };
	socklen_t ll = sizeof(local);
	if (s->port.fd >= 0) {
		local.sin_addr.s_addr = s->port.ip;
		local.sin_port = s->port.port;
	} else if (s->kernel_configured) {
		/* Untouched, the kernel socket is unbound: 0.0.0.0:0. */
		OS_CALL(getsockname, s->obj.fd, (struct sockaddr *)&local, &ll);
	}
	if (cfg_rules_match(CFG_ROLE_TCP_CLIENT, &local, dst) != CFG_TRANSPORT_VMA)
		return 1;
	struct net_route_query q = { .dst = dst->sin_addr.s_addr };
	struct net_route_result r;
	if (net_route_lookup(ctx->net, &q, &r) < 0 || r.kind != NET_ROUTE_UNICAST)
		return 1;
	*slot = sock_offload_if_slot(ctx, r.ifindex);
	if (*slot < 0)
		return 1;
	uint32_t nif_ip = ctx->ifs[*slot].nif.ip;
	*src = local.sin_addr.s_addr ? local.sin_addr.s_addr : (r.src ? r.src : nif_ip);
	if (*src != nif_ip)
		return 1;   /* a secondary address: the stack answers for the primary only */
	if (net_neigh_resolve(ctx->net, r.ifindex, r.next_hop, mac, SOCK_TCP_NEIGH_TIMEOUT_MS) < 0)
		return 1;
	/* r.mtu is the route's metric or the link's: the engine keeps the
	 * smaller of it and the interface's. */
	*rm = (struct tcp_route_metrics){ .mtu = r.mtu, .advmss = r.advmss };
	return 0;
}

/* Starts an offloaded active open. Returns 0 (SYN sent), 1 (kernel path:
 * nothing changed), -1 with errno. */
/* The kernel chose a port whose 4-tuple one of our own closing connections
 * still holds (the kernel never sees those): trade the kernel socket for a
 * fresh, unbound one under the same fd number, keeping FD_CLOEXEC and
 * O_NONBLOCK. Options set on the old kernel socket are not carried over
 * (the offloaded path keeps its own copies). */
static int sock_tcp_replace_kernel_socket(struct sock_tcp *s)
{
	int fd_flags = OS_CALL(fcntl, s->obj.fd, F_GETFD, 0);
	int fl_flags = OS_CALL(fcntl, s->obj.fd, F_GETFL, 0);
	int fresh = OS_CALL(socket, AF_INET, SOCK_STREAM, 0);
	if (fresh < 0)
		return -1;
	int r = OS_CALL(dup3, fresh, s->obj.fd, fd_flags > 0 && (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0);
	os_close_nocancel(fresh);
	if (r < 0)
		return -1;
	if (fl_flags > 0 && (fl_flags & O_NONBLOCK))
		OS_CALL(fcntl, s->obj.fd, F_SETFL, (void *)(long)O_NONBLOCK);
	return 0;
}

#define SOCK_TCP_PORT_RETRIES 16

/* ---- reserved local ports (sock_tcp_port.h) ---- */

static void sock_tcp_port_close_locked(struct sock_offload *ctx, struct sock_tcp_port *p)
{
	struct ring_flow flow = { .proto = IPPROTO_TCP, .local_ip = p->ip, .local_port = p->port };
	sock_offload_flow_put_locked(ctx, p->if_slot, &flow);
	os_close_nocancel(p->fd);
	p->fd = -1;
}

/* Reserves up to SOCK_TCP_PORTS_BATCH ports of src from the kernel into
 * the idle ports, each with its 3-tuple steered to slot. Lock held (the
 * syscalls run under it: this is the rare refill). */
static void sock_tcp_ports_reserve_locked(struct sock_offload *ctx, int slot, uint32_t src)
{
	for (unsigned i = 0; i < SOCK_TCP_PORTS_BATCH; i++) {
		struct sock_tcp_port p = { .ip = src, .if_slot = slot };
		p.fd = OS_CALL(socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (p.fd < 0)
			return;
		struct sockaddr_in want = { .sin_family = AF_INET };
		want.sin_addr.s_addr = src;
		struct sockaddr_in got = { .sin_family = AF_INET };
		socklen_t gl = sizeof(got);
		/* Listening: the one state with no readiness of its own (see the top). */
		if (OS_CALL(bind, p.fd, (struct sockaddr *)&want, sizeof(want)) != 0 ||
		    OS_CALL(getsockname, p.fd, (struct sockaddr *)&got, &gl) != 0 ||
		    OS_CALL(listen, p.fd, 1) != 0) {
			os_close_nocancel(p.fd);
			return;
		}
		p.port = got.sin_port;
		struct ring_flow flow = { .proto = IPPROTO_TCP, .local_ip = src, .local_port = p.port,
					  .owner_fd = p.fd };
		if (sock_offload_flow_get_locked(ctx, slot, &flow) < 0 || !sock_tcp_ports_give(ctx->tcp_ports, &p)) {
			if (flow.local_port)
				sock_offload_flow_put_locked(ctx, slot, &flow);
			os_close_nocancel(p.fd);
			return;
		}
	}
}

/* Lock held: an idle port of src for s (reserving a batch when there is
 * none), dup3()ed under s's fd. false: none could be had (s keeps its own
 * kernel socket and binds it as before). */
static bool sock_tcp_port_take_locked(struct sock_tcp *s, struct sock_offload *ctx, int slot, uint32_t src)
{
	if (!ctx->tcp_ports && !(ctx->tcp_ports = calloc(1, sizeof(*ctx->tcp_ports))))
		return false;
	struct sock_tcp_port p;
	if (!sock_tcp_ports_take(ctx->tcp_ports, src, &p)) {
		sock_tcp_ports_reserve_locked(ctx, slot, src);
		if (!sock_tcp_ports_take(ctx->tcp_ports, src, &p))
			return false;
	}
	if (p.nonblock != s->base.nonblocking) {
		int fl = OS_CALL(fcntl, p.fd, F_GETFL, 0);
		if (fl != -1 && OS_CALL(fcntl, p.fd, F_SETFL,
							(void *)(long)(s->base.nonblocking ? fl | O_NONBLOCK : fl & ~O_NONBLOCK)) == 0)
			p.nonblock = s->base.nonblocking;
	}
	if (p.nonblock != s->base.nonblocking ||
	    OS_CALL(dup3, p.fd, s->obj.fd, s->cloexec ? O_CLOEXEC : 0) < 0) {
		sock_tcp_port_close_locked(ctx, &p);
		return false;
	}
	s->port = p;
	return true;
}

void sock_tcp_port_release_locked(struct sock_tcp *s, bool handed)
{
	struct sock_offload *ctx = s->ctx;
	if (s->port.fd < 0)
		return;
	struct sock_tcp_port p = s->port;
	s->port.fd = -1;
	if (!sock_offload_usable(ctx) || ctx->dead) {
		os_close_nocancel(p.fd);
		return;
	}
	/* The app's F_SETFL went to the shared file: it now has s's flag. */
	p.nonblock = s->base.nonblocking;
	if (handed || !ctx->tcp_ports || !sock_tcp_ports_give(ctx->tcp_ports, &p))
		sock_tcp_port_close_locked(ctx, &p);
}

void sock_tcp_ports_after_fork_child(struct sock_offload *old)
{
	struct sock_tcp_port p;
	while (old->tcp_ports && sock_tcp_ports_pop(old->tcp_ports, &p))
		os_close_nocancel(p.fd);
	for (struct sock_tcp *s = old->tcp_all; s; s = s->all_next)
		if (s->port.fd >= 0) {
			os_close_nocancel(s->port.fd);
			s->port.fd = -1;
		}
}

static int sock_tcp_connect_offload(struct sock_tcp *s, struct sock_offload *ctx, const struct sockaddr_in *dst)
{
	int slot;
	uint32_t src;
	uint8_t mac[6];
	struct tcp_route_metrics rm;
	if (sock_tcp_route(s, ctx, dst, &slot, &src, mac, &rm) != 0)
		return 1;
	bool autobound = false;
	bool fd_on_idle_port = false;   /* the fd still shares an idle port's socket */
	int port_retries = 0;
retry_port:;
	struct sockaddr_in local = { .sin_family = AF_INET };
	socklen_t ll = sizeof(local);
	bool reserved = false;
	if (!s->kernel_configured && s->port.fd < 0) {
		sock_offload_lock(ctx);
		reserved = sock_tcp_port_take_locked(s, ctx, slot, src);
		sock_offload_unlock(ctx);
	}
	if (!reserved && fd_on_idle_port && sock_tcp_replace_kernel_socket(s) != 0)
		return -1;
	fd_on_idle_port = false;
	if (reserved) {
		autobound = true;
		local.sin_addr.s_addr = src;
		local.sin_port = s->port.port;
	} else if (s->port.fd >= 0) {
		/* A failed connect's retry keeps its reserved port, as Linux keeps its bound one. */
		local.sin_addr.s_addr = src;
		local.sin_port = s->port.port;
	} else if (OS_CALL(getsockname, s->obj.fd, (struct sockaddr *)&local, &ll), local.sin_port == 0) {
		autobound = true;
		/* The kernel picks and reserves the port. */
		struct sockaddr_in want = { .sin_family = AF_INET };
		want.sin_addr.s_addr = src;
		if (OS_CALL(bind, s->obj.fd, (struct sockaddr *)&want, sizeof(want)) != 0)
			return -1;
		ll = sizeof(local);
		OS_CALL(getsockname, s->obj.fd, (struct sockaddr *)&local, &ll);
	}
	sock_offload_lock(ctx);
	s->ctx = ctx;
	s->if_slot = slot;
	struct tcp_pcb *pcb = tcp_pcb_new(ctx->tcp);
	int err = pcb ? 0 : -ENOBUFS;
	if (pcb) {
		sock_tcp_pcb_setup_locked(s, pcb);
		err = tcp_bind(pcb, src, local.sin_port);
	}
	if (err == 0) {
		s->flow = (struct ring_flow){ .proto = IPPROTO_TCP, .local_ip = src, .local_port = local.sin_port };
		/* A reserved port's 3-tuple already steers it: one more
		 * reference, no map update (pinned to a 5-tuple before a fork). */
		if (!g_cfg.tcp_3t_rules && s->port.fd < 0) {
			s->flow.remote_ip = dst->sin_addr.s_addr;
			s->flow.remote_port = dst->sin_port;
		}
		s->flow.owner_fd = s->obj.fd;
		err = sock_offload_flow_get_locked(ctx, slot, &s->flow);
		s->flow_held = err == 0;
		s->flow_by_listener = s->flow_held && s->port.fd >= 0 && !g_cfg.tcp_3t_rules;
	}
	if (err < 0) {
		if (pcb) {
			tcp_set_callbacks(pcb, NULL, NULL);
			tcp_abort(pcb);
		}
		s->pcb = NULL;
		sock_offload_unlock(ctx);
		vlog_debug("fd %d: TCP offload refused (%s): the kernel connects", s->obj.fd, strerror(-err));
		return 1;
	}
	sock_offload_unlock(ctx);
	/* From here the kernel socket only holds the port (see the top); a
	 * reserved one listens already. */
	if (s->port.fd < 0)
		OS_CALL(listen, s->obj.fd, 1);
	sock_offload_lock(ctx);
	s->local_ip = src;
	s->local_port = local.sin_port;
	s->remote_ip = dst->sin_addr.s_addr;
	s->remote_port = dst->sin_port;
	s->connecting = true;
	s->established = false;
	s->connect_reported = false;
	s->failed_reported = false;
	s->reset = false;
	s->shut_rcv = s->shut_send = s->peer_fin = false;
	s->err = 0;
	s->mode = SOCK_TCP_ACTIVE;
	sock_offload_clock_locked(ctx);
	if (s->pcb)
		tcp_set_route_metrics(s->pcb, &rm);
	err = s->pcb ? tcp_connect(s->pcb, dst->sin_addr.s_addr, dst->sin_port, src, mac) : -ECONNABORTED;
	if (err == -EADDRNOTAVAIL && autobound && port_retries < SOCK_TCP_PORT_RETRIES) {
		/* Our closing connection holds that tuple: another port. */
		vlog_debug("fd %d: port %u still used by a closing connection: retrying with another", s->obj.fd,
			   ntohs(local.sin_port));
		s->connecting = false;
		sock_tcp_disconnect_locked(s, true);
		s->shut_send = false;
		s->mode = SOCK_TCP_KERNEL;
		bool had_reserved = s->port.fd >= 0;
		/* Back as the newest idle port: the next one is older. */
		sock_tcp_port_release_locked(s, false);
		sock_offload_unlock(ctx);
		port_retries++;
		fd_on_idle_port = had_reserved;
		if (had_reserved || sock_tcp_replace_kernel_socket(s) == 0)
			goto retry_port;
		errno = EADDRNOTAVAIL;
		return -1;
	}
	if (err < 0) {
		s->connecting = false;
		sock_tcp_disconnect_locked(s, true);
		s->reset = true;
		s->shut_rcv = true;
	} else {
		sock_tcp_all_add_locked(s);
		sock_tcp_tx_kick_locked(s);   /* the SYN */
	}
	sock_offload_unlock(ctx);
	__atomic_store_n(&s->obj.ops, &sock_tcp_offload_ops, __ATOMIC_RELEASE);
	/* Epoll sets that took the fd in as a kernel fd watch it from now on. */
	iomux_promote(&s->obj);
	if (s->stats) {
		s->stats->offloaded = 1;
		s->stats->local_addr = s->local_ip;
		s->stats->local_port = s->local_port;
		s->stats->peer_addr = s->remote_ip;
		s->stats->peer_port = s->remote_port;
		s->stats->ring_id = sock_offload_ring_id(ctx, slot);
	}
	if (err < 0) {
		errno = -err;
		return -1;
	}
	return 0;
}

static int sock_tcp_connect(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = NULL;
	if (s->mode == SOCK_TCP_KERNEL && !s->os_only)
		ctx = sock_offload_get_for_socket(s->ctx, obj->fd, s->ring_logic, s->ring_user_id);
	if (s->mode == SOCK_TCP_KERNEL) {
		if (!ctx || s->os_only || !addr || len < sizeof(struct sockaddr_in) || addr->sa_family != AF_INET)
			return OS_CALL(connect, obj->fd, addr, len);
		int r = sock_tcp_connect_offload(s, ctx, (const struct sockaddr_in *)addr);
		if (r > 0) {
			s->os_only = true;
			return OS_CALL(connect, obj->fd, addr, len);
		}
		if (r < 0)
			return -1;
		if (s->base.nonblocking) {
			errno = EINPROGRESS;
			return -1;
		}
		if (sock_tcp_wait_connected(s, ctx, s->base.sndtimeo_ms) < 0) {
			if (errno == EAGAIN)
				errno = EINPROGRESS;
			return -1;
		}
		goto result;
	}
	if (!(ctx = sock_tcp_ctx(s)))
		return OS_CALL(connect, obj->fd, addr, len);
	if (s->mode == SOCK_TCP_LISTENER) {
		errno = EISCONN;
		return -1;
	}
	if (addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC) {
		/* Linux: disconnect (RST) */
		sock_offload_lock(ctx);
		sock_tcp_disconnect_locked(s, true);
		sock_tcp_rxq_clear_locked(s);
		s->connecting = s->established = false;
		s->reset = true;
		sock_offload_unlock(ctx);
		return 0;
	}
	if (s->failed_reported && !s->connecting) {
		/* Linux runs the handshake again on a socket whose failed
		 * connect was reported by connect() itself. */
		if (!addr || len < sizeof(struct sockaddr_in) || addr->sa_family != AF_INET) {
			errno = addr && addr->sa_family != AF_INET ? EAFNOSUPPORT : EINVAL;
			return -1;
		}
		s->failed_reported = false;
		int r = sock_tcp_connect_offload(s, ctx, (const struct sockaddr_in *)addr);
		if (r > 0)
			errno = ENETUNREACH;   /* the kernel socket only holds our port now */
		if (r != 0)
			return -1;
		if (s->base.nonblocking) {
			errno = EINPROGRESS;
			return -1;
		}
	}
	if (s->connecting) {
		if (s->base.nonblocking) {
			errno = EALREADY;
			return -1;
		}
		if (sock_tcp_wait_connected(s, ctx, s->base.sndtimeo_ms) < 0) {
			if (errno == EAGAIN)
				errno = EALREADY;
			return -1;
		}
	}
result:
	ctx = sock_tcp_lock(s, ctx);
	int err = 0;
	if (s->established && !s->reset) {
		/* The first connect() after a non-blocking one completed says 0. */
		err = s->connect_reported ? EISCONN : 0;
		s->connect_reported = true;
	} else if (s->reset && !s->established) {
		err = s->err > 0 ? s->err : ECONNABORTED;
		s->err = 0;
		s->failed_reported = true;
	} else if (s->established) {
		err = EISCONN;
	}
	sock_offload_unlock(ctx);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* ---- readiness ---- */

static uint32_t sock_tcp_poll_ready(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->released)
		return 0;
	if (!sock_tcp_ctx(s))   /* forked child, or after the exit hook: the connection is gone here */
		return s->mode == SOCK_TCP_ACTIVE ? EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP : 0;
	if (s->mode == SOCK_TCP_LISTENER)
		return __atomic_load_n(&s->acceptq_len, __ATOMIC_RELAXED) ? EPOLLIN : 0;
	if (s->mode != SOCK_TCP_ACTIVE)
		return 0;
	uint32_t ev = 0;
	bool shut_rcv = __atomic_load_n(&s->shut_rcv, __ATOMIC_RELAXED);
	bool shut_send = __atomic_load_n(&s->shut_send, __ATOMIC_RELAXED);
	if (shut_rcv && shut_send)
		ev |= EPOLLHUP;
	if (shut_rcv)
		ev |= EPOLLIN | EPOLLRDHUP;
	if (!__atomic_load_n(&s->connecting, __ATOMIC_RELAXED)) {
		if (__atomic_load_n(&s->rxq_bytes, __ATOMIC_RELAXED))
			ev |= EPOLLIN;
		/* Bytes the receive callback has not seen: this poll shows them. */
		else if (__builtin_expect(s->xcb != NULL, 0) && __atomic_load_n(&s->xcb->frames, __ATOMIC_RELAXED))
			ev |= EPOLLIN;
		if (shut_send || __atomic_load_n(&s->writeable, __ATOMIC_RELAXED))
			ev |= EPOLLOUT;
	}
	if (__atomic_load_n(&s->err, __ATOMIC_RELAXED) > 0)
		ev |= EPOLLERR;
	return ev | sock_base_errq_events(&s->base);
}

static int sock_tcp_progress(struct sock_obj *obj)
{
	/* A process that polls a listener it shares after fork accepts. */
	sock_tcp_fork_check(sock_tcp_of(obj));
	struct sock_offload *ctx = sock_tcp_ctx(sock_tcp_of(obj));
	int n = ctx ? sock_offload_progress_try(ctx) : 0;
	/* The poll/select/epoll caller is the thread the receive callback
	 * runs in (extra_tcp.c). */
	if (__builtin_expect(sock_tcp_of(obj)->xcb != NULL, 0))
		extra_tcp_run_callbacks(sock_tcp_of(obj));
	return n;
}

/* None while a fork left the socket to join (progress does that). */
static const void *sock_tcp_lane_key(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->fork_dormant || s->inherited)
		return NULL;
	/* A socket with a receive callback gets a progress call of its own:
	 * that is where its callback runs. */
	if (__builtin_expect(s->xcb != NULL, 0))
		return NULL;
	return sock_tcp_ctx(s);
}

static int sock_tcp_poll_watch(struct sock_obj *obj, int wake_fd, bool on)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx)
		return on ? -1 : 0;
	ctx = sock_tcp_lock(s, ctx);
	bool ok = sock_offload_poll_watch_locked(ctx, wake_fd, on);
	sock_offload_unlock(ctx);
	return ok ? 0 : -1;
}

/* ---- wait channels (docs/process_model.md, "Wait channels") ---- */

bool sock_tcp_chan_claim_due(struct sock_offload *ctx, const struct sock_tcp *s)
{
	if (!ctx || !ctx->chans_on || s->mode != SOCK_TCP_ACTIVE || !s->flow_held || s->released)
		return false;
	struct sock_offload_chan *mine = sock_offload_chan_mine_peek(ctx, s->if_slot);
	if (!mine)
		return sock_offload_chan_may_get(ctx, s->if_slot);
	return s->chan != mine || s->chan_gen != mine->gen;
}

void sock_tcp_chan_claim_locked(struct sock_offload *ctx, struct sock_tcp *s)
{
	if (!sock_tcp_chan_claim_due(ctx, s) || s->ctx != ctx || !s->pcb || s->inherited || s->fork_dormant)
		return;
	struct sock_offload_chan *mine = sock_offload_chan_mine_locked(ctx, s->if_slot);
	if (!mine || (s->chan == mine && s->chan_gen == mine->gen))
		return;
	if (s->flow_by_listener) {
		/* Until now the listener's 3-tuple steered it: an entry of its
		 * own, naming the channel. */
		struct ring_flow own = { .proto = IPPROTO_TCP, .local_ip = s->local_ip, .local_port = s->local_port,
					 .remote_ip = s->remote_ip, .remote_port = s->remote_port,
					 .owner_fd = s->flow.owner_fd };
		if (sock_offload_flow_get_on_locked(ctx, s->if_slot, mine->ring, &own) < 0)
			return;
		sock_offload_flow_put_locked(ctx, s->if_slot, &s->flow);
		s->flow = own;
		s->flow_by_listener = false;
	} else if (sock_offload_flow_rehome_locked(ctx, s->if_slot, &s->flow, mine->ring) < 0) {
		return;
	}
	s->chan = mine;
	s->chan_gen = mine->gen;
}

static void sock_tcp_wait_claim(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!sock_tcp_chan_claim_due(ctx, s))
		return;
	ctx = sock_tcp_lock(s, ctx);
	sock_tcp_chan_claim_locked(ctx, s);
	sock_offload_unlock(ctx);
}

static int sock_tcp_wait_prepare(struct sock_obj *obj, int *fds, int max)
{
	sock_tcp_wait_claim(obj);
	return sock_offload_wait_prepare(sock_tcp_ctx(sock_tcp_of(obj)), fds, max);
}

/* ---- lifecycle ---- */

static bool sock_tcp_fin_settled(const struct sock_tcp *s)
{
	if (!s->pcb)
		return true;
	enum tcp_state st = tcp_pcb_state(s->pcb);
	return st == TCP_FIN_WAIT_2 || st == TCP_TIME_WAIT || st == TCP_CLOSED;
}

/* SO_LINGER {1, t}: the close waits up to t for our FIN to be acknowledged. */
static void sock_tcp_linger_wait(struct sock_tcp *s, struct sock_offload *ctx)
{
	ctx = sock_tcp_lock(s, ctx);
	bool go = s->pcb && s->mode == SOCK_TCP_ACTIVE && s->established && !s->rxq_bytes;
	if (go) {
		sock_offload_clock_locked(ctx);
		tcp_shutdown(s->pcb, false, true);
		s->shut_send = true;
		sock_tcp_tx_kick_locked(s);
	}
	sock_offload_unlock(ctx);
	if (!go)
		return;
	uint64_t deadline = engine_now_ms() + (uint64_t)s->linger_s * 1000;
	for (;;) {
		ctx = sock_tcp_lock(s, ctx);
		sock_offload_progress_locked(ctx);
		bool done = sock_tcp_fin_settled(s);
		sock_offload_unlock(ctx);
		if (done)
			return;
		if (sock_tcp_sleep(s, ctx, deadline, 0, sock_tcp_fin_settled, NULL) < 0 && errno != EINTR)
			return;
		if (engine_now_ms() >= deadline)
			return;
	}
}

static void sock_tcp_release(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->released)
		return;
	iomux_forget(obj);
	struct sock_offload *ctx = s->ctx;
	/* A socket of the parent's context (fork) is the parent's to end. */
	if (sock_offload_usable(ctx) && s->mode != SOCK_TCP_KERNEL) {
		ctx = sock_tcp_lock(s, ctx);
		if (s->mode == SOCK_TCP_LISTENER)
			sock_tcp_listener_close_locked(s, true);
		else
			sock_tcp_disconnect_locked(s, s->rxq_bytes > 0 || (s->linger_on && s->linger_s == 0));
		sock_tcp_rxq_clear_locked(s);
		sock_tcp_port_release_locked(s, false);
		extra_tcp_release_locked(s);
		extra_xt_forget_locked(ctx, &s->base.xt);
		s->released = true;
		if (s->wake_pending)
			sock_offload_undefer_locked(ctx, &s->wake_node);
		sock_offload_unlock(ctx);
	}
	s->released = true;
	if (s->port.fd >= 0) {
		/* A forked child's copy, or after the exit hook: not ours to reuse. */
		os_close_nocancel(s->port.fd);
		s->port.fd = -1;
	}
	if (s->stats && !stats_slot_is_dummy(s->stats))
		stats_socket_slot_put(s->stats);
	/* Not NULL: a call blocked on this socket (pinned) still counts. */
	s->stats = stats_socket_sink();
}

static int sock_tcp_close(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (ctx && s->linger_on && s->linger_s > 0 && !s->base.nonblocking)
		sock_tcp_linger_wait(s, ctx);
	sock_tcp_release(obj);
	return OS_CALL(close, obj->fd);
}

static void sock_tcp_destroy(struct sock_obj *obj)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->base.wake_fd >= 0)
		os_close_nocancel(s->base.wake_fd);
	sock_tstamp_clear(&s->base.tstamp);
	free(s->xcb);
	free(s);
}

/* The kernel binds; a connect afterwards keeps that socket (no reserved port). */
static int sock_tcp_bind(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	s->kernel_configured = true;
	return OS_CALL(bind, obj->fd, addr, len);
}

const struct sock_ops sock_tcp_kernel_ops = {
	.kind = "tcp",
	.flags = SOCK_OPS_F_MAY_OFFLOAD,
	.bind = sock_tcp_bind,
	.connect = sock_tcp_connect,
	.listen = sock_tcp_op_listen,
	.setsockopt = sock_tcp_op_setsockopt,
	.getsockopt = sock_tcp_op_getsockopt,   /* SO_VMA_USER_DATA; the rest is the kernel's */
	.fcntl = sock_tcp_op_fcntl,    /* mirrors O_NONBLOCK and options for the offload */
	.ioctl = sock_tcp_op_ioctl,
	.close = sock_tcp_close,
	.release = sock_tcp_release,
	.destroy = sock_tcp_destroy,
	.dump = sock_tcp_op_dump,
};

const struct sock_ops sock_tcp_offload_ops = {
	.kind = "tcp",
	.flags = SOCK_OPS_F_ACCEPT_TRACKS,
	.bind = sock_tcp_bind,
	.connect = sock_tcp_connect,
	.listen = sock_tcp_op_listen,
	.accept4 = sock_tcp_op_accept4,
	.shutdown = sock_tcp_op_shutdown,
	.getsockname = sock_tcp_op_getsockname,
	.getpeername = sock_tcp_op_getpeername,
	.setsockopt = sock_tcp_op_setsockopt,
	.getsockopt = sock_tcp_op_getsockopt,
	.fcntl = sock_tcp_op_fcntl,
	.ioctl = sock_tcp_op_ioctl,
	.recvmsg = sock_tcp_op_recvmsg,
	.sendmsg = sock_tcp_op_sendmsg,
	.sendfile = sock_tcp_op_sendfile,
	.sendfile64 = sock_tcp_op_sendfile64,
	.splice = sock_tcp_op_splice,
	.poll_ready = sock_tcp_poll_ready,
	.progress = sock_tcp_progress,
	.wait_prepare = sock_tcp_wait_prepare,
	.lane_key = sock_tcp_lane_key,
	.wait_claim = sock_tcp_wait_claim,
	.poll_watch = sock_tcp_poll_watch,
	.close = sock_tcp_close,
	.release = sock_tcp_release,
	.destroy = sock_tcp_destroy,
	.dump = sock_tcp_op_dump,
};

struct sock_tcp *sock_tcp_alloc(int fd, int domain, int type, int protocol)
{
	struct sock_tcp *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	sock_base_init(&s->base, &sock_tcp_kernel_ops, fd, domain, type, protocol);
	s->if_slot = -1;
	s->port.fd = -1;
	s->cloexec = (type & SOCK_CLOEXEC) != 0;
	s->ring_logic = -1;
	sock_mig_window_configure(&s->mig, -1);
	s->wake_node = (struct sock_offload_wake){ .fn = sock_tcp_wake, .arg = s };
	s->nodelay = g_cfg.tcp_nodelay != 0;
	s->quickack = g_cfg.tcp_quickack != 0;
	/* The mirror's defaults that match a fresh kernel socket: SO_KEEPALIVE
	 * off, TCP_NODELAY off unless VMA_TCP_NODELAY turned it on (the kernel
	 * socket does not know that one). */
	s->opts_known = SOCK_TCP_OPT_KEEPALIVE | (s->nodelay ? 0 : SOCK_TCP_OPT_NODELAY);
	s->kernel_fl = -1;
	s->keep_idle_s = 7200;
	s->keep_intvl_s = 75;
	s->keep_cnt = 9;
	return s;
}

struct sock_obj *sock_tcp_new(int fd, int domain, int type, int protocol)
{
	os_libc_ensure();
	struct sock_offload *ctx = sock_offload_get_for(fd);
	if (!ctx || !ctx->tcp)
		return NULL;
	struct sock_tcp *s = sock_tcp_alloc(fd, domain, type, protocol);
	if (!s)
		return NULL;
	s->ctx = ctx;
	s->stats = stats_socket_slot_get(fd, STATS_PROTO_TCP);
	s->stats->offloaded = 0;
	s->stats->blocking = !s->base.nonblocking;
	return &s->obj;
}
