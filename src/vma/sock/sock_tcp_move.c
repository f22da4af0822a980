/* Offloaded TCP connections moving between lanes (docs/process_model.md,
 * "TCP connections follow the thread that accepts them").
 *
 * Under VMA_RING_ALLOCATION_LOGIC_RX 20, 30 or 31 (a lane per thread or
 * core) a listener lives in the lane of the thread that called listen(),
 * and every connection it accepts was born in that lane's TCP engine. A
 * server whose threads each accept from the one listener would then run
 * every connection in one lane: one lock, one ring, one thread processing
 * the packets of all the others. So accept() moves the connection to the
 * lane of the thread (core) that accepted it, before the application has
 * its fd (nobody else can be using it), with both lanes locked:
 *
 *  1. steering: a 5-tuple entry naming the new lane's ring (it takes over
 *     the entry the old lane had, or is added over the listener's 3-tuple
 *     that steered the connection until now);
 *  2. the old lane's rings drained: what the XDP program put there before
 *     the entry changed reaches the connection, still in the old engine;
 *  3. the pcb moves to the new lane's engine (tcp_pcb_move); its queued
 *     in-order bytes, in the old ring's frames, are copied into one heap
 *     buffer; the socket joins the new lane's lists.
 * A segment the program steered to the old ring before step 1 but that
 * lands after step 2 (within one NAPI pass of the update) reaches the old
 * engine, which passes it on (its stray hook): a copy goes on the new
 * lane's list of strays, fed to its engine at its next progress pass. The
 * same path takes a SYN that reopens a moved connection's TIME_WAIT to
 * the engine of the port's listener.
 *
 * Later, under logic 20 or 31 with VMA_RING_MIGRATION_RATIO_RX, a
 * connection also follows the thread (core) that reads it, as a UDP
 * socket does (sock_migrate.h): a server whose acceptor thread hands
 * connections to worker threads gets each in its worker's lane. Such a
 * move is the same, with other threads perhaps using the connection
 * meanwhile: every place that works on a connection's lane state locks it
 * with sock_tcp_lock, which follows a move, and the move wakes whoever
 * waits on the connection so they arm the new lane.
 *
 * Logic 10 (a lane per socket) and 11 keep accepted connections in their
 * listener's lane; logic 0 and 1 have one lane. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "ring/ring_mgr.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"

/* Passes over the old lane's rings (VMA_CQ_POLL_BATCH_MAX frames each) at
 * step 2. The connection's entry already names the new ring, so only other
 * sockets' traffic keeps them busy; what a longer backlog still holds for
 * the connection goes over as strays. */
#define SOCK_TCP_MOVE_DRAIN_PASSES 16

struct sock_tcp_stray {
	struct sock_tcp_stray *next;
	struct tcp_seg_origin from;
	uint64_t rx_time_ns;
	uint32_t len;
	uint8_t seg[];
};

/* The lane of the offloaded listener of ip:port (ip: the destination of a
 * SYN), or NULL. Read without its lane's lock: a listener's port and mode
 * do not change once it listens, and a stale answer only misroutes a
 * reopening SYN, which the peer sends again. */
static struct sock_offload *sock_tcp_listener_lane(uint32_t ip, uint16_t port)
{
	unsigned size = sock_fd_table_size();
	for (unsigned fd = 0; fd < size; fd++) {
		struct sock_obj *obj = sock_fd_get((int)fd);
		if (!obj || obj->ops != &sock_tcp_offload_ops)
			continue;
		const struct sock_tcp *l = sock_tcp_of(obj);
		if (l->released || l->mode != SOCK_TCP_LISTENER || l->local_port != port ||
		    (l->listen_flow.local_ip != INADDR_ANY && l->listen_flow.local_ip != ip))
			continue;
		struct sock_offload *ctx = __atomic_load_n(&l->ctx, __ATOMIC_ACQUIRE);
		if (sock_offload_usable(ctx))
			return ctx;
	}
	return NULL;
}

void sock_tcp_stray_hook(void *arg, void *dest_arg, const struct tcp_seg_origin *from, const uint8_t *seg,
			 uint32_t len)
{
	struct sock_offload *here = arg;
	struct sock_offload *dest = dest_arg;
	if (!dest) {
		uint16_t dport;
		memcpy(&dport, seg + 2, 2);
		dest = sock_tcp_listener_lane(from->dst, dport);
	}
	/* Rare (segments in flight at a move): a heap copy is fine here. */
	struct sock_tcp_stray *st = sock_offload_usable(dest) && dest != here ? malloc(sizeof(*st) + len) : NULL;
	if (!st) {
		here->tcp_strays_dropped++;
		return;
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);   /* vDSO */
	st->rx_time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	st->from = *from;
	st->len = len;
	memcpy(st->seg, seg, len);
	struct sock_tcp_stray *head = __atomic_load_n(&dest->tcp_strays, __ATOMIC_RELAXED);
	do {
		st->next = head;
	} while (!__atomic_compare_exchange_n(&dest->tcp_strays, &head, st, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	/* A thread asleep on the destination lane looks again. */
	sock_offload_drain_signal(dest);
}

void sock_tcp_strays_input_locked(struct sock_offload *ctx)
{
	struct sock_tcp_stray *list = __atomic_exchange_n(&ctx->tcp_strays, NULL, __ATOMIC_ACQUIRE);
	struct sock_tcp_stray *fifo = NULL;
	while (list) {   /* newest first: back to arrival order */
		struct sock_tcp_stray *next = list->next;
		list->next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo) {
		struct sock_tcp_stray *st = fifo;
		fifo = st->next;
		int slot = sock_offload_if_slot(ctx, st->from.ifindex);
		struct ring_buf *buf = slot >= 0 && ctx->tcp && !ctx->dead ? ring_buf_heap_alloc("tcp_stray", st->len)
									   : NULL;
		if (buf) {
			memcpy(buf->data, st->seg, st->len);
			buf->len = buf->tot_len = st->len;
			buf->rx_time_ns = st->rx_time_ns;
			tcp_input_passed(ctx->tcp, &ctx->ifs[slot].nif, buf, &st->from);
		} else {
			ctx->tcp_strays_dropped++;
		}
		free(st);
	}
}

void sock_tcp_strays_free(struct sock_offload *ctx)
{
	struct sock_tcp_stray *list = __atomic_exchange_n(&ctx->tcp_strays, NULL, __ATOMIC_ACQUIRE);
	while (list) {
		struct sock_tcp_stray *next = list->next;
		free(list);
		list = next;
	}
}

/* The queued in-order bytes, in frames of the old lane's ring (which only
 * that lane's lock may free), copied into one heap buffer. */
static int sock_tcp_rxq_rehome_locked(struct sock_tcp *s)
{
	uint32_t bytes = 0;
	for (struct ring_buf *b = s->rxq_head; b; b = b->link)
		bytes += b->len;
	if (!bytes)
		return 0;
	struct ring_buf *copy = ring_buf_heap_alloc("tcp_moved", bytes);
	if (!copy)
		return -ENOMEM;
	struct ring_buf *b = s->rxq_head;
	while (b) {
		struct ring_buf *next = b->link;
		memcpy(copy->data + copy->len, b->data, b->len);
		copy->len += b->len;
		copy->rx_time_ns = b->rx_time_ns;   /* the newest, as coalescing keeps */
		b->link = NULL;
		ring_buf_free(b);
		b = next;
	}
	copy->tot_len = copy->len;
	s->rxq_head = s->rxq_tail = copy;
	s->rxq_frames = 1;
	return 0;
}

/* Moves connection s from lane `from` to lane `to` (see the top of the
 * file). 0, or a negative errno with the connection where it was. */
static int sock_tcp_move(struct sock_tcp *s, struct sock_offload *from, struct sock_offload *to)
{
	int err = 0;

	sock_offload_move_begin(from, to);
	if (s->ctx != from || s->released || s->mode != SOCK_TCP_ACTIVE || !s->pcb || s->if_slot < 0 ||
	    !s->established || s->connecting || s->fork_dormant || s->inherited || from->dead || to->dead ||
	    !from->tcp || !to->tcp) {
		err = -EAGAIN;
		goto out;
	}
	enum tcp_state state = tcp_pcb_state(s->pcb);
	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT) {
		err = -EAGAIN;
		goto out;
	}
	/* The Extra API: frames lent to the application (SocketXtreme,
	 * recvfrom_zcopy, VMA_PACKET_HOLD) and buffers waiting for the
	 * receive callback are this lane's rings', which only this lane's
	 * lock may free; a connection on the lane's SocketXtreme list is
	 * reported there. */
	if (s->base.xt.listed || s->base.xt.lent || (s->xcb && (s->xcb->fn || s->xcb->frames))) {
		err = -EBUSY;
		goto out;
	}
	int to_slot = sock_offload_if_slot(to, from->ifs[s->if_slot].nif.ifindex);
	if (to_slot < 0) {
		err = -ENODEV;
		goto out;
	}
	if (!ring_can_hand_over_flows(from->ifs[s->if_slot].ring) || !ring_can_hand_over_flows(to->ifs[to_slot].ring)) {
		err = -EOPNOTSUPP;
		goto out;
	}

	/* 1. The connection's own entry, naming the new lane. */
	struct ring_flow own = { .proto = IPPROTO_TCP, .local_ip = s->local_ip, .local_port = s->local_port,
				 .remote_ip = s->remote_ip, .remote_port = s->remote_port,
				 .owner_fd = s->flow_held ? s->flow.owner_fd : -1 };
	own.takeover = s->flow_held && !s->flow_by_listener;
	err = sock_offload_flow_get_locked(to, to_slot, &own);
	if (err < 0)
		goto out;
	own.takeover = 0;
	if (s->flow_held) {
		if (s->flow_by_listener)
			sock_offload_flow_put_locked(from, s->if_slot, &s->flow);
		else
			sock_offload_flow_forget_locked(from, s->if_slot, &s->flow);
	}
	/* Until the switch the socket holds no entry of the old lane's: an
	 * error callback during the drain must not give one back. */
	s->flow_held = false;
	s->flow_by_listener = false;
	s->flow_share = false;   /* the group's hash names the old lane */

	/* 2. What the old rings hold for the connection reaches it there. */
	for (int pass = 0; pass < SOCK_TCP_MOVE_DRAIN_PASSES; pass++)
		if (sock_offload_progress_locked(from) == 0)
			break;
	if (!s->pcb) {   /* reset meanwhile: nothing left to move */
		sock_offload_flow_put_locked(to, to_slot, &own);
		err = -ECONNRESET;
		goto out;
	}

	/* 3. Its queue, the pcb and the socket. The new lane's clock is read
	 * after the old one's last pass: timestamps never go back. */
	sock_offload_clock_locked(to);
	err = sock_tcp_rxq_rehome_locked(s);
	if (err == 0)
		err = tcp_pcb_move(s->pcb, to->tcp, &to->ifs[to_slot].nif);
	if (err) {
		/* No memory for the copy (or a state the engine cannot move,
		 * which the checks above rule out): steered to the new lane
		 * already, the connection cannot go on in the old one. */
		vlog_warn("fd %d: cannot move the connection to lane %u (%s): it is reset", s->obj.fd, to->lane,
			  strerror(-err));
		sock_tcp_rxq_clear_locked(s);
		struct tcp_pcb *pcb = s->pcb;
		tcp_set_callbacks(pcb, NULL, NULL);
		tcp_abort(pcb);
		s->pcb = NULL;
		s->reset = true;
		s->shut_rcv = s->shut_send = true;
		s->err = ECONNRESET;
		sock_offload_flow_put_locked(to, to_slot, &own);
		sock_tcp_all_del_locked(s);
		goto out;
	}
	tcp_rcv_held_set(s->pcb, sock_tcp_frames_held(s));
	sock_tcp_all_del_locked(s);
	if (s->wake_pending)
		sock_offload_undefer_locked(from, &s->wake_node);
	__atomic_store_n(&s->ctx, to, __ATOMIC_RELEASE);
	sock_tcp_all_add_locked(s);
	s->if_slot = to_slot;
	s->flow = own;
	s->flow_held = true;
	if (s->wake_pending)
		sock_offload_defer_locked(to, &s->wake_node);
	if (s->stats) {
		s->stats->ring_migrations++;
		s->stats->ring_id = sock_offload_ring_id(to, to_slot);
	}
	/* Whoever waits on the connection looks again, now at the new lane
	 * (a hint: epoll and the sleepers check readiness themselves): a
	 * reader asleep on the old lane's rings (its eventfd), epoll sets
	 * (their kernel epoll holds the old lane's wait fds until they arm
	 * again), at the new lane's unlock. */
	sock_tcp_notify_locked(s, EPOLLIN | EPOLLOUT);
out:
	sock_offload_move_end(from, to, err == 0);
	if (err == 0)
		vlog_debug("fd %d: connection moved from lane %u to lane %u", s->obj.fd, from->lane, to->lane);
	return err;
}

/* After a move that could not be made (steering refused, no memory): the
 * next try. */
#define SOCK_TCP_MIG_RETRY_MS 1000

void sock_tcp_migrate_window_end(struct sock_tcp *s)
{
	if (!sock_mig_window_claim(&s->mig))
		return;
	uint64_t now = engine_now_ms();
	struct sock_offload *from = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	if (now >= s->mig.not_before_ms && !s->released && s->mode == SOCK_TCP_ACTIVE && s->established &&
	    sock_offload_usable(from)) {
		/* The lane a new socket of this thread (core) would get: built
		 * here if the thread has none yet, as socket() would. */
		struct sock_offload *to = sock_offload_get_for_logic(s->obj.fd, s->ring_logic, s->ring_user_id);
		if (sock_offload_usable(to) && to != from) {
			int err = sock_tcp_move(s, from, to);
			if (err < 0 && err != -EAGAIN) {
				s->mig.not_before_ms = now + SOCK_TCP_MIG_RETRY_MS;
				vlog_debug("fd %d: connection stays in lane %u, not moved to lane %u (%s)", s->obj.fd,
					   from->lane, to->lane, strerror(-err));
			}
		}
	}
	sock_mig_window_release(&s->mig);
}

void sock_tcp_move_accepted(struct sock_tcp *l, struct sock_tcp *c)
{
	int logic = sock_offload_logic_of(l->ring_logic);
	if (logic != RING_MGR_PER_THREAD && logic != RING_MGR_PER_CORE && logic != RING_MGR_PER_CORE_MIGRATING)
		return;
	struct sock_offload *from = __atomic_load_n(&c->ctx, __ATOMIC_ACQUIRE);
	struct sock_offload *to = sock_offload_get_for_logic(c->obj.fd, l->ring_logic, l->ring_user_id);
	if (!sock_offload_usable(from) || !sock_offload_usable(to) || to == from)
		return;
	int err = sock_tcp_move(c, from, to);
	if (err < 0 && err != -EAGAIN)
		vlog_debug("fd %d: accepted connection stays in lane %u, not moved to lane %u (%s)", c->obj.fd,
			   from->lane, to->lane, strerror(-err));
}
