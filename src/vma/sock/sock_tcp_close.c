/* Offloaded TCP sockets: the end of connections. close() hands a
 * connection to the background as an orphan that keeps its pcb and its
 * steering entry until the engine reaches CLOSED (the kernel would answer
 * its last segments with RST); the exit hook sends every open connection's
 * FIN before the rings close. See docs/tcp_sockets.md, "Connect, errors,
 * close" and "Exit, signals, fork". */
#include <stdlib.h>
#include <sys/epoll.h>

#include "log/vlog.h"
#include "sock/sock_tcp_internal.h"

#define SOCK_TCP_EXIT_LOCK_TRIES 100000

/* ---- lists (each lane's ctx->tcp_all) ---- */

void sock_tcp_all_add_locked(struct sock_tcp *s)
{
	if (s->on_all)
		return;
	s->all_prev = NULL;
	s->all_next = s->ctx->tcp_all;
	if (s->ctx->tcp_all)
		s->ctx->tcp_all->all_prev = s;
	s->ctx->tcp_all = s;
	s->all_ctx = s->ctx;
	s->on_all = true;
}

void sock_tcp_all_del_locked(struct sock_tcp *s)
{
	if (!s->on_all)
		return;
	if (s->all_prev)
		s->all_prev->all_next = s->all_next;
	else
		s->all_ctx->tcp_all = s->all_next;
	if (s->all_next)
		s->all_next->all_prev = s->all_prev;
	s->all_prev = s->all_next = NULL;
	s->on_all = false;
}

/* ---- accepted connections steered by their listener's 3-tuple ---- */

static bool sock_tcp_flow_same_key(const struct ring_flow *a, const struct ring_flow *b)
{
	return a->proto == b->proto && a->local_ip == b->local_ip && a->local_port == b->local_port &&
	       a->remote_ip == b->remote_ip && a->remote_port == b->remote_port;
}

/* The 5-tuple first, then the listener's reference goes: no moment in
 * which no entry steers the connection. false: it stays on the 3-tuple. */
static bool sock_tcp_flow_pin_locked(struct sock_offload *ctx, int if_slot, struct ring_flow *flow,
				     uint32_t remote_ip, uint16_t remote_port)
{
	struct ring_flow own = *flow;
	own.remote_ip = remote_ip;
	own.remote_port = remote_port;
	own.share = 0;
	if (sock_offload_flow_get_locked(ctx, if_slot, &own) < 0)
		return false;
	sock_offload_flow_put_locked(ctx, if_slot, flow);
	*flow = own;
	return true;
}

void sock_tcp_pin_listener_flows_locked(struct sock_offload *ctx, const struct ring_flow *lflow)
{
	if (ctx->dead)
		return;
	unsigned pinned = 0;
	for (struct sock_tcp *s = ctx->tcp_all; s; s = s->all_next) {
		if (!s->flow_by_listener || !s->flow_held || (lflow && !sock_tcp_flow_same_key(&s->flow, lflow)))
			continue;
		if (sock_tcp_flow_pin_locked(ctx, s->if_slot, &s->flow, s->remote_ip, s->remote_port)) {
			s->flow_by_listener = false;
			pinned++;
		}
	}
	for (struct sock_tcp_orphan *o = ctx->tcp_orphans; o; o = o->next) {
		if (!o->flow_by_listener || !o->flow_held || !o->pcb ||
		    (lflow && !sock_tcp_flow_same_key(&o->flow, lflow)))
			continue;
		uint32_t lip, rip;
		uint16_t lport, rport;
		tcp_pcb_get_addr(o->pcb, &lip, &lport, &rip, &rport);
		if (sock_tcp_flow_pin_locked(ctx, o->if_slot, &o->flow, rip, rport)) {
			o->flow_by_listener = false;
			pinned++;
		}
	}
	if (pinned)
		vlog_debug("%u accepted connections steered by their own 5-tuple from now on", pinned);
}

/* ---- fork (docs/process_model.md) ---- */

void sock_tcp_fork_release_locked(struct sock_offload *ctx)
{
	unsigned handed = 0;
	/* The child may join a listener's share group, which spreads the
	 * 3-tuple's segments by hash: every connection gets its own entry. */
	sock_tcp_pin_listener_flows_locked(ctx, NULL);
	sock_tcp_pin_embryos_locked(ctx);
	struct sock_tcp *s = ctx->tcp_all;
	while (s) {
		struct sock_tcp *next = s->all_next;
		if (s->ctx == ctx && s->mode == SOCK_TCP_LISTENER)
			sock_tcp_listen_fork_release_locked(s);
		else if (s->ctx == ctx && s->mode == SOCK_TCP_ACTIVE && sock_tcp_handoff_locked(s) == 0)
			handed++;
		s = next;
	}
	if (handed)
		vlog_debug("fork: %u established connections handed to the kernel for the child", handed);
}

void sock_tcp_after_fork_child(struct sock_offload *old)
{
	/* Every listed socket is the parent's: connections stay the parent's
	 * (their calls here get the kernel socket), listeners are adopted by
	 * this process at its first accept or poll. */
	sock_tcp_ports_after_fork_child(old);
	struct sock_tcp *s = old->tcp_all;
	while (s) {
		struct sock_tcp *next = s->all_next;
		s->on_all = false;
		s->all_prev = s->all_next = NULL;
		if (s->mode == SOCK_TCP_LISTENER)
			sock_tcp_listen_forget_parent(s);
		s = next;
	}
	old->tcp_all = NULL;
	old->tcp_orphans = NULL;
}

/* ---- background closes ---- */

static void sock_tcp_orphan_err_cb(void *arg, int err)
{
	(void)err;
	struct sock_tcp_orphan *o = arg;
	o->pcb = NULL;
}

static const struct tcp_callbacks sock_tcp_orphan_callbacks = {
	.err = sock_tcp_orphan_err_cb,
};

void sock_tcp_disconnect_locked(struct sock_tcp *s, bool abort)
{
	sock_tcp_all_del_locked(s);
	if (s->ctx && !s->ctx->dead)
		sock_offload_clock_locked(s->ctx);   /* the FIN's retransmission timer */
	struct tcp_pcb *pcb = s->pcb;
	s->pcb = NULL;
	s->shut_send = true;
	if (!pcb) {
		sock_tcp_flow_put_locked(s);
		return;
	}
	enum tcp_state st = tcp_pcb_state(pcb);
	struct sock_tcp_orphan *o = NULL;
	if (!abort && st != TCP_SYN_SENT && st != TCP_CLOSED)
		o = calloc(1, sizeof(*o));
	if (!o) {
		/* Linux: unread data or SO_LINGER {1, 0} reset the connection. */
		tcp_set_callbacks(pcb, &sock_tcp_orphan_callbacks, NULL);
		tcp_abort(pcb);
		sock_tcp_tx_kick_locked(s);
		sock_tcp_flow_put_locked(s);
		return;
	}
	/* The pcb lives on until its handshake ends and keeps its steering
	 * entry: the kernel would answer its last segments with RST. */
	o->pcb = pcb;
	o->if_slot = s->if_slot;
	o->flow = s->flow;
	o->flow_held = s->flow_held;
	o->flow_by_listener = s->flow_by_listener;
	o->flow_share = s->flow_share;
	s->flow_held = false;
	s->flow_by_listener = false;
	s->flow_share = false;
	o->deadline_ms = engine_now_ms() + SOCK_TCP_ORPHAN_TIMEOUT_MS;
	tcp_set_callbacks(pcb, &sock_tcp_orphan_callbacks, o);
	tcp_shutdown(pcb, true, true);
	sock_tcp_tx_kick_locked(s);
	o->next = s->ctx->tcp_orphans;
	s->ctx->tcp_orphans = o;
}

static bool sock_tcp_orphan_settled(const struct sock_tcp_orphan *o)
{
	if (!o->pcb)
		return true;
	enum tcp_state st = tcp_pcb_state(o->pcb);
	return st == TCP_FIN_WAIT_2 || st == TCP_TIME_WAIT || st == TCP_CLOSED;
}

/* Walks the orphans: frees the finished ones; with reset_unsettled (exit)
 * resets every one whose FIN is not acknowledged yet. */
static void sock_tcp_orphans_reap_locked(struct sock_offload *ctx, uint64_t now_ms, bool reset_unsettled)
{
	struct sock_tcp_orphan **pp = &ctx->tcp_orphans;
	while (*pp) {
		struct sock_tcp_orphan *o = *pp;
		bool done = false;
		if (!o->pcb) {
			done = true;
		} else if (now_ms >= o->deadline_ms || (reset_unsettled && !sock_tcp_orphan_settled(o))) {
			tcp_abort(o->pcb);
			done = true;
		} else if (tcp_pcb_state(o->pcb) == TCP_CLOSED) {
			tcp_close(o->pcb);
			done = true;
		}
		if (!done) {
			if (o->flow_held && o->flow_share && tcp_pcb_state(o->pcb) == TCP_TIME_WAIT) {
				/* Its entry would hold a slot of the 5-tuple map
				 * for the whole TIME_WAIT: at a thousand
				 * connections a second those fill it in seconds,
				 * and live connections find none (2026-12-02). */
				sock_offload_flow_put_locked(ctx, o->if_slot, &o->flow);
				o->flow_held = false;
			}
			pp = &o->next;
			continue;
		}
		if (o->flow_held)
			sock_offload_flow_put_locked(ctx, o->if_slot, &o->flow);
		*pp = o->next;
		free(o);
	}
}

void sock_tcp_end_time_waits_locked(struct sock_offload *ctx, uint32_t local_ip, uint16_t local_port)
{
	/* Their steering entries would bring this process the SYNs of peers
	 * reusing those ports, for up to the TIME_WAIT's length, and it has no
	 * listener to answer them: released, they follow the port's share
	 * group to a process that listens, as the kernel's global TIME_WAIT
	 * table and listener would have them. */
	unsigned ended = 0;
	for (struct sock_tcp_orphan *o = ctx->tcp_orphans; o; o = o->next) {
		if (!o->pcb || tcp_pcb_state(o->pcb) != TCP_TIME_WAIT)
			continue;
		uint32_t lip, rip;
		uint16_t lport, rport;
		tcp_pcb_get_addr(o->pcb, &lip, &lport, &rip, &rport);
		if (lport != local_port || (local_ip != INADDR_ANY && lip != local_ip))
			continue;
		tcp_abort(o->pcb);   /* no segment from TIME_WAIT */
		o->pcb = NULL;
		ended++;
	}
	if (ended) {
		sock_tcp_orphans_reap_locked(ctx, engine_now_ms(), false);
		vlog_debug("port %u: %u TIME_WAITs ended with this process's listener", ntohs(local_port), ended);
	}
}

void sock_tcp_tick_locked(struct sock_offload *ctx, uint64_t now_ms)
{
	if (ctx->tcp_orphans)
		sock_tcp_orphans_reap_locked(ctx, now_ms, false);
}

/* How long exit waits for the FINs of its orphans to be acknowledged:
 * SOCK_TCP_EXIT_FIN_RTOS retransmission timeouts of the slowest orphan
 * whose FIN is not acknowledged yet, at least SOCK_TCP_EXIT_GRACE_MS and
 * at most SOCK_TCP_EXIT_FIN_MAX_MS (below the 2 s a signal's exit path
 * waits for the hooks). */
static uint64_t sock_tcp_exit_fin_wait_ms(const struct sock_offload *ctx)
{
	uint64_t wait = SOCK_TCP_EXIT_GRACE_MS;
	for (const struct sock_tcp_orphan *o = ctx->tcp_orphans; o; o = o->next) {
		if (sock_tcp_orphan_settled(o))
			continue;
		struct tcp_pcb_info info;
		tcp_pcb_get_info(o->pcb, &info);
		uint64_t rto = (uint64_t)info.rto_ms << (info.backoff < 4 ? info.backoff : 4);
		if (rto * SOCK_TCP_EXIT_FIN_RTOS > wait)
			wait = rto * SOCK_TCP_EXIT_FIN_RTOS;
	}
	return wait < SOCK_TCP_EXIT_FIN_MAX_MS ? wait : SOCK_TCP_EXIT_FIN_MAX_MS;
}

void sock_tcp_exit(void *arg)
{
	struct sock_offload *ctx = arg;
	bool locked = false;
	for (int i = 0; i < SOCK_TCP_EXIT_LOCK_TRIES && !locked; i++)
		locked = sock_offload_trylock(ctx);
	if (!locked)
		return;   /* a thread died holding it: the rings close anyway */
	if (ctx->dead || !ctx->tcp) {
		sock_offload_unlock_plain(ctx);
		return;
	}
	while (ctx->tcp_all) {
		struct sock_tcp *s = ctx->tcp_all;
		if (s->mode == SOCK_TCP_LISTENER)
			sock_tcp_listener_close_locked(s, false);   /* the rings close next */
		else
			sock_tcp_disconnect_locked(s, s->rxq_bytes > 0);
		sock_tcp_all_del_locked(s);
	}
	uint64_t start = engine_now_ms();
	uint64_t exchange_deadline = start + SOCK_TCP_EXIT_GRACE_MS;
	uint64_t acked_deadline = start + sock_tcp_exit_fin_wait_ms(ctx);
	bool handed_over = false;
	for (;;) {
		sock_offload_progress_locked(ctx);
		stack_timer_tick(ctx->stack, engine_now_ms());
		/* The lock stays held for the whole exchange: ring what the
		 * pass queued now, not at an unlock that is seconds away. */
		sock_offload_tx_kick_locked(ctx);
		/* Both FINs exchanged: once the rings close, a peer FIN still
		 * on its way would meet the kernel and draw an RST. Waiting
		 * for the peer's FIN is worth SOCK_TCP_EXIT_GRACE_MS (it waits
		 * on the peer's application); our own FIN, while it is not
		 * acknowledged, is worth a few retransmissions: reset, it
		 * would end a peer that already has every byte with
		 * ECONNRESET. */
		bool exchanged = true, acked = true;
		for (struct sock_tcp_orphan *o = ctx->tcp_orphans; o; o = o->next) {
			if (!o->pcb)
				continue;
			enum tcp_state st = tcp_pcb_state(o->pcb);
			exchanged = exchanged && (st == TCP_TIME_WAIT || st == TCP_CLOSED);
			acked = acked && sock_tcp_orphan_settled(o);
		}
		uint64_t now = engine_now_ms();
		if (exchanged || (acked && now >= exchange_deadline))
			break;
		if (now >= exchange_deadline && !handed_over) {
			/* What is still unacknowledged goes to the kernel, which
			 * finishes it after we exit, as its own closed sockets;
			 * without CAP_NET_ADMIN it stays here until the deadline. */
			handed_over = true;
			unsigned handed = 0;
			for (struct sock_tcp_orphan *o = ctx->tcp_orphans; o; o = o->next)
				if (!sock_tcp_orphan_settled(o) && sock_tcp_handoff_orphan_locked(ctx, o) == 0)
					handed++;
			if (handed)
				vlog_details("exit: %u closed connection(s) with data or a FIN unacknowledged handed to the kernel",
					     handed);
			continue;   /* the handed ones are settled: look again */
		}
		if (now >= acked_deadline)
			break;
	}
	sock_tcp_orphans_reap_locked(ctx, engine_now_ms(), true);
	sock_offload_progress_locked(ctx);   /* the RSTs leave */
	sock_offload_unlock_plain(ctx);
}

