/* Offloaded UDP sockets moving between lanes (VMA_RING_MIGRATION_RATIO_RX).
 *
 * With VMA_RING_ALLOCATION_LOGIC_RX 20 (a lane per thread) or 31 (per core)
 * a UDP socket starts in the lane of the thread that called socket(). When
 * another thread (core) does the reading, every read takes the other lane's
 * lock and polls its ring: the lanes stop being independent. So every
 * VMA_RING_MIGRATION_RATIO_RX receive calls we look at who made them; when
 * all the calls of a window came from one thread (core) whose lane is not
 * the socket's, the socket moves there: its receive side (pcb, steering,
 * queued datagrams) and, since a socket sends on its lane, its send side.
 *
 * A move (sock_udp_move), with the old and the new lane locked:
 *  1. a pcb like the socket's in the new lane's stack, steered on the new
 *     lane's rings while the old lane is still steered. Both ask vmad for the
 *     port with the same kernel socket, which vmad allows (a share group of
 *     the two slots): no datagram falls to the kernel in between;
 *  2. the old lane's steering dropped: from here the XDP program sends the
 *     port to the new ring only;
 *  3. the old rings drained: what the program had already put there for the
 *     socket reaches its queue through the old pcb, in order;
 *  4. the old pcb stays bound in the old stack for SOCK_UDP_STRAY_GRACE_MS
 *     as a "stray" catcher. What reaches the old lane for the socket after
 *     step 3 — a packet the program steered there before step 2 but that
 *     landed after the drain (the program read the map before we updated
 *     it; its frame appears at the end of its NAPI pass), or a backlog
 *     longer than the drain's bound — is copied to the heap and handed over
 *     (sock_udp_strays_take_locked) instead of being dropped as "no pcb" by
 *     the old lane's poller. Until then the socket's readers also poll and
 *     arm the old lane (sock_udp_stray_lane), so strays come even if no
 *     thread of the old lane polls any more;
 *  5. every queued datagram copied out of the old ring's frames into a pool
 *     the socket owns: those frames may only go back to their ring under the
 *     old lane's lock, which a reader of the new lane does not hold;
 *  6. s->ctx switched; a pending wake-up moves to the new lane and readers,
 *     epoll sets and poll()/select() sleepers armed on the old lane are woken
 *     so they look again, at the new lane.
 * TCP sockets never move (a connection's state is its lane's TCP engine's). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "ring/ring_mgr.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_udp_internal.h"
#include "extra/extra.h"

/* How long the old lane keeps the socket's pcb after a move. The packets it
 * catches were steered before the move and land within one NAPI pass of it
 * (microseconds); a second is far beyond that even on a loaded host, and
 * also bounds how often one socket can move (once per grace). */
#define SOCK_UDP_STRAY_GRACE_MS 1000
/* After a refused move (steering refused, a port shared in a lane, no
 * memory): the next try. */
#define SOCK_UDP_MIG_RETRY_MS 1000
/* Passes (of VMA_CQ_POLL_BATCH_MAX frames per ring) over the old rings at
 * step 3: enough for a full backlog of the socket's datagrams, whose order
 * this keeps (strays come later than datagrams the new lane already has).
 * The socket's flow is already gone from the old rings, so only other
 * sockets' traffic can keep them busy: the bound stops that from holding
 * the two lanes for long; what is left reaches the socket as strays. */
#define SOCK_UDP_MIG_DRAIN_PASSES 256

struct sock_udp_stray {
	struct sock_udp_stray *next;
	uint32_t len;
	struct stack_udp_rx_info info;
	uint64_t rx_time_ns;
	uint8_t data[];
};

static void sock_udp_stray_wake(void *arg);

static void sock_udp_migrate_configure(struct sock_udp *s)
{
	sock_mig_window_configure(&s->mig, s->ring_logic);
}

void sock_udp_migrate_init(struct sock_udp *s)
{
	sock_udp_migrate_configure(s);
	s->stray_wake_node = (struct sock_offload_wake){ .fn = sock_udp_stray_wake, .arg = s };
}

/* ---- the socket's own pools ---- */

static int sock_udp_heap_free_slot(const struct sock_udp *s)
{
	for (int i = 0; i < SOCK_UDP_HEAPS; i++)
		if (!s->heaps[i])
			return i;
	return -1;
}

void sock_udp_heaps_reap_locked(struct sock_udp *s)
{
	for (int i = 0; i < SOCK_UDP_HEAPS; i++) {
		if (s->heaps[i] && ring_buf_pool_in_use(s->heaps[i]) == 0) {
			ring_buf_pool_destroy(s->heaps[i]);
			s->heaps[i] = NULL;
		}
	}
}

/* The receive queue limit, as sock_udp_deliver applies it. */
static uint64_t sock_udp_rx_limit(const struct sock_udp *s)
{
	return s->rcvbuf > (uint64_t)g_cfg.rx_bytes_min ? s->rcvbuf : (uint64_t)g_cfg.rx_bytes_min;
}

static void sock_udp_count_drop(struct sock_udp *s, uint32_t len)
{
	s->stats->c.rx_ready_pkts_dropped++;
	s->stats->c.rx_ready_bytes_dropped += len;
}

/* ---- strays: what the old lane still receives for the socket ---- */

/* The old pcb's receive callback after a move: the old lane's lock is held,
 * the socket's queue belongs to the new lane. The datagram is copied to the
 * heap (rare: only packets in flight at the move, or a backlog beyond the
 * move's drain, come here), its frame goes back to the old ring at once, and
 * the copy waits on a lock-free list for the next reader of the new lane. */
static void sock_udp_stray_deliver(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
				   const struct stack_udp_rx_info *info)
{
	(void)pcb;
	struct sock_udp *s = arg;
	struct sock_udp_stray *st = s->released ? NULL : malloc(sizeof(*st) + len);
	if (!st) {
		if (!s->released)
			sock_udp_count_drop(s, len);
		ring_buf_free(buf);
		return;
	}
	st->len = len;
	st->info = *info;
	st->rx_time_ns = buf->rx_time_ns;
	struct iovec iov = { .iov_base = st->data, .iov_len = len };
	sock_udp_copy_out(buf, len, &iov, 1);
	ring_buf_free(buf);
	struct sock_udp_stray *head = __atomic_load_n(&s->strays, __ATOMIC_RELAXED);
	do {
		st->next = head;
	} while (!__atomic_compare_exchange_n(&s->strays, &head, st, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	if (!s->stray_wake_pending) {
		s->stray_wake_pending = true;
		sock_offload_defer_locked(s->stray_ctx, &s->stray_wake_node);
	}
}

/* After the old lane's unlock: readers and epoll sets of the socket look
 * again (poll_ready counts strays). */
static void sock_udp_stray_wake(void *arg)
{
	struct sock_udp *s = arg;
	s->stray_wake_pending = false;
	iomux_notify(&s->obj, EPOLLIN);
	sock_base_wake_sleepers(&s->base);
}

void sock_udp_strays_take_locked(struct sock_udp *s)
{
	int slot = sock_udp_heap_free_slot(s);
	if (slot < 0) {
		sock_udp_heaps_reap_locked(s);
		slot = sock_udp_heap_free_slot(s);
		if (slot < 0)
			return;   /* every pool still queued: the next read takes them */
	}
	struct sock_udp_stray *list = __atomic_exchange_n(&s->strays, NULL, __ATOMIC_ACQUIRE);
	if (!list)
		return;
	/* The list is newest first: queue them in arrival order. */
	struct sock_udp_stray *fifo = NULL;
	uint32_t max_len = 0;
	while (list) {
		struct sock_udp_stray *next = list->next;
		list->next = fifo;
		fifo = list;
		if (list->len > max_len)
			max_len = list->len;
		list = next;
	}
	unsigned size = sock_udp_copy_buf_size(max_len), count = 0, n = 0;
	for (struct sock_udp_stray *st = fifo; st; st = st->next)
		count += sock_udp_copy_bufs(st->len, size);
	struct ring_buf_pool *pool = ring_buf_pool_create("udp_stray", count, size);
	uint64_t limit = sock_udp_rx_limit(s);
	while (fifo) {
		struct sock_udp_stray *st = fifo;
		fifo = st->next;
		struct iovec iov = { .iov_base = st->data, .iov_len = st->len };
		struct sock_udp_entry e = { .len = st->len, .info = st->info, .rx_time_ns = st->rx_time_ns };
		e.buf = pool ? sock_udp_chain_from_iov(pool, st->len, &iov, 1) : NULL;
		if (e.buf && sock_udp_queue_push(&s->queue, &e, limit)) {
			stats_socket_ready_add(s->stats, st->len);
			n++;
		} else {
			ring_buf_free(e.buf);
			sock_udp_count_drop(s, st->len);
		}
		free(st);
	}
	if (pool && ring_buf_pool_in_use(pool))
		s->heaps[slot] = pool;
	else
		ring_buf_pool_destroy(pool);
	vlog_debug("fd %d: %u datagrams the lane it left still received handed over", s->obj.fd, n);
}

/* Drops the old lane's pcb of the last move, if any. No lock held. */
static void sock_udp_stray_reap(struct sock_udp *s)
{
	struct sock_offload *ctx = __atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE);
	/* Exit or a forked child: that stack is not ours to touch any more. */
	if (!sock_offload_usable(ctx))
		return;
	sock_offload_lock(ctx);
	if (__atomic_load_n(&s->stray_ctx, __ATOMIC_RELAXED) == ctx) {
		/* A last look at the old rings: what is still there for the
		 * socket (a backlog nobody polled in the grace) goes over as
		 * strays rather than to "no pcb". */
		for (int pass = 0; !s->released && pass < SOCK_UDP_MIG_DRAIN_PASSES; pass++)
			if (sock_offload_progress_locked(ctx) == 0)
				break;
		stack_udp_pcb_free(s->stray_pcb);
		s->stray_pcb = NULL;
		__atomic_store_n(&s->stray_ctx, NULL, __ATOMIC_RELEASE);
	}
	/* A stray wake-up still queued (for strays just handed over) runs at
	 * this unlock: nothing of the socket stays linked in the old lane. */
	sock_offload_unlock(ctx);
}

void sock_udp_migrate_release(struct sock_udp *s)
{
	/* released is set: no move starts any more, so no new old-lane pcb. */
	sock_udp_stray_reap(s);
	struct sock_udp_stray *list = __atomic_exchange_n(&s->strays, NULL, __ATOMIC_ACQUIRE);
	while (list) {
		struct sock_udp_stray *next = list->next;
		free(list);
		list = next;
	}
}

void sock_udp_migrate_after_fork_child(struct sock_udp *s)
{
	/* The old-lane pcb is the parent's (dead here); the strays and the
	 * pools are plain heap memory of ours, and nothing queued refers to
	 * the pools any more (the caller dropped the queue). */
	s->stray_pcb = NULL;
	s->stray_ctx = NULL;
	s->stray_wake_pending = false;
	struct sock_udp_stray *list = s->strays;
	s->strays = NULL;
	while (list) {
		struct sock_udp_stray *next = list->next;
		free(list);
		list = next;
	}
	for (int i = 0; i < SOCK_UDP_HEAPS; i++) {
		ring_buf_pool_destroy(s->heaps[i]);
		s->heaps[i] = NULL;
	}
	/* The thread that was considering a move is not in the child. */
	sock_mig_window_after_fork(&s->mig);
}

/* ---- the move ---- */

/* The slot of ctx `to` for the interface of slot `slot` of `from` (lanes
 * have rings on the same interfaces, not necessarily in the same order). */
static int sock_udp_map_slot(const struct sock_offload *from, const struct sock_offload *to, int slot)
{
	if (slot < 0 || (unsigned)slot >= from->nifs)
		return -1;
	return sock_offload_if_slot(to, from->ifs[slot].nif.ifindex);
}

static uint32_t sock_udp_map_slots(const struct sock_offload *from, const struct sock_offload *to, uint32_t mask)
{
	uint32_t out = 0;
	for (unsigned slot = 0; slot < from->nifs; slot++) {
		if (!(mask & (1u << slot)))
			continue;
		int t = sock_udp_map_slot(from, to, (int)slot);
		if (t >= 0)
			out |= 1u << t;
	}
	return out;
}

/* Whether group entry i is the first active one of its group: the group's
 * flow (per group and port) is held once for all its sources. */
static bool sock_udp_group_first(const struct sock_udp *s, unsigned i)
{
	for (unsigned k = 0; k < i; k++)
		if (s->groups[k].active && s->groups[k].group == s->groups[i].group)
			return false;
	return true;
}

/* Another socket of ours on the same port in either lane: one stack then
 * holds two pcbs on the port and delivers it to one of them, and the old
 * lane's steering entry is still needed by the other. Such sockets (one
 * process's SO_REUSEPORT or SO_REUSEADDR group) stay where they are. */
static bool sock_udp_port_shared(const struct sock_udp *s, const struct sock_offload *from,
				 const struct sock_offload *to)
{
	if (!s->local_port)
		return false;
	unsigned size = sock_fd_table_size();
	for (unsigned fd = 0; fd < size; fd++) {
		struct sock_obj *obj = sock_fd_get((int)fd);
		if (!obj || obj == &s->obj || obj->ops != &sock_udp_ops)
			continue;
		const struct sock_udp *o = sock_udp_of(obj);
		if (o->released || o->local_port != s->local_port)
			continue;
		const struct sock_offload *c = __atomic_load_n(&o->ctx, __ATOMIC_ACQUIRE);
		if (c == from || c == to)
			return true;
	}
	return false;
}

/* Drops every queued datagram (counted): the copy at a move had no memory. */
static void sock_udp_queue_drop_all(struct sock_udp *s)
{
	struct sock_udp_entry *e;
	while ((e = sock_udp_queue_front(&s->queue)) != NULL) {
		stats_socket_ready_remove(s->stats, e->len);
		sock_udp_count_drop(s, e->len);
		sock_udp_queue_pop(&s->queue);
	}
}

/* Moves s from lane `from` to lane `to` (see the top of the file). Returns
 * 0, or a negative errno with the socket where it was, unchanged. */
static int sock_udp_move(struct sock_udp *s, struct sock_offload *from, struct sock_offload *to)
{
	struct stack_udp_pcb *pcb = NULL;
	uint32_t want = 0, slots = 0;
	int gslot[SOCK_UDP_MAX_GROUPS];
	bool gheld[SOCK_UDP_MAX_GROUPS];
	unsigned carried = 0;
	int err = 0;

	sock_offload_move_begin(from, to);
	/* Checked under both locks: release, a connect() to a kernel-only
	 * peer, exit or another move may have come first. */
	if (__atomic_load_n(&s->ctx, __ATOMIC_RELAXED) != from || s->released || s->os_only || s->fork_dormant ||
	    s->inherited || s->stray_pcb || from->dead || to->dead) {
		err = -EAGAIN;
		goto out;
	}
	/* The Extra API's staged, held and lent (SocketXtreme) datagrams sit
	 * in frames of this lane's rings, which only this lane's lock may
	 * free; a socket on the lane's SocketXtreme list is reported there. */
	if (s->recv_cb || (s->cb_stage && s->cb_stage->count) || extra_udp_holding(s) || s->base.xt.listed || s->base.xt.lent) {
		err = -EBUSY;
		goto out;
	}
	int heap = sock_udp_heap_free_slot(s);
	if (heap < 0) {
		sock_udp_heaps_reap_locked(s);
		heap = sock_udp_heap_free_slot(s);
		if (heap < 0) {
			err = -EBUSY;   /* copies of earlier moves still queued */
			goto out;
		}
	}

	/* 1. The receive side in the new lane, steered there too. */
	for (unsigned i = 0; i < s->ngroups; i++) {
		gslot[i] = sock_udp_map_slot(from, to, s->groups[i].if_slot);
		gheld[i] = false;
	}
	if (s->pcb) {
		pcb = sock_udp_pcb_make_locked(s, to);
		if (!pcb) {
			err = -ENOMEM;
			goto out;
		}
		for (unsigned i = 0; i < s->ngroups; i++) {
			const struct sock_udp_group *g = &s->groups[i];
			if (g->active && stack_udp_pcb_join(pcb, g->group, g->source) < 0) {
				err = -ENOMEM;
				goto undo;
			}
		}
		want = sock_udp_map_slots(from, to, s->flow_want);
		uint32_t need = sock_udp_map_slots(from, to, s->flow_slots);
		slots = sock_udp_flows_attach_in_locked(s, to, want, from);
		if ((slots & need) != need) {
			err = -EBUSY;   /* steered in the old lane, refused in the new one */
			goto undo;
		}
		for (unsigned i = 0; i < s->ngroups; i++) {
			const struct sock_udp_group *g = &s->groups[i];
			if (!g->active || !sock_udp_group_first(s, i))
				continue;
			err = gslot[i] < 0 ? -ENODEV : sock_udp_group_flow_get_locked(s, to, gslot[i], g);
			if (err < 0)
				goto undo;
			gheld[i] = true;
		}
	}

	/* 2. The old lane lets the port and the groups go. */
	for (unsigned i = 0; i < s->ngroups; i++)
		if (s->groups[i].active && sock_udp_group_first(s, i))
			sock_udp_group_flow_put_locked(s, from, s->groups[i].if_slot, &s->groups[i]);
	sock_udp_flows_detach_in_locked(s, from, s->flow_slots);

	/* 3. What the old rings already hold for the socket joins its queue
	 * (other sockets of the old lane get theirs as in any pass). */
	for (int pass = 0; pass < SOCK_UDP_MIG_DRAIN_PASSES; pass++)
		if (sock_offload_progress_locked(from) == 0)
			break;

	/* 4. The old pcb catches what is still in flight to the old ring. */
	if (s->pcb) {
		stack_udp_pcb_set_recv(s->pcb, sock_udp_stray_deliver, s);
		s->stray_pcb = s->pcb;
		s->stray_since_ms = engine_now_ms();
		__atomic_store_n(&s->stray_ctx, from, __ATOMIC_RELEASE);
	}

	/* 5. Nothing queued may stay in the old ring's frames. */
	carried = s->queue.count;
	struct ring_buf_pool *pool;
	if (sock_udp_queue_rehome(&s->queue, "udp_moved", &pool) != 0) {
		vlog_warn("fd %d: no memory to carry %u queued datagrams to lane %u: dropped", s->obj.fd, carried,
			  to->lane);
		sock_udp_queue_drop_all(s);
	} else if (pool) {
		s->heaps[heap] = pool;
	}
	/* Earlier copies were copied again: their pools are free now. */
	sock_udp_heaps_reap_locked(s);

	/* 6. The switch. */
	s->pcb = pcb;
	s->flow_want = want;
	s->flow_slots = slots;
	for (unsigned i = 0; i < s->ngroups; i++)
		s->groups[i].if_slot = gslot[i];
	s->route.valid = false;
	if (s->wake_pending) {
		sock_offload_undefer_locked(from, &s->wake_node);
		s->wake_pending = false;
	}
	__atomic_store_n(&s->ctx, to, __ATOMIC_RELEASE);
	s->stats->ring_migrations++;
	s->stats->ring_id = sock_offload_ring_id(to, 0);
	/* Whoever waits on the socket looks again, now at the new lane: a
	 * reader asleep on the old lane's rings, an epoll set (its kernel
	 * epoll holds the old lane's wait fds). */
	if (s->queue.count || s->obj.watchers || __atomic_load_n(&s->base.sleepers, __ATOMIC_ACQUIRE) > 0) {
		s->wake_pending = true;
		sock_offload_defer_locked(to, &s->wake_node);
	}
	goto out;

undo:
	for (unsigned i = 0; i < s->ngroups; i++)
		if (gheld[i])
			sock_udp_group_flow_put_locked(s, to, gslot[i], &s->groups[i]);
	sock_udp_flows_detach_in_locked(s, to, slots);
	stack_udp_pcb_free(pcb);
out:
	sock_offload_move_end(from, to, err == 0);
	if (err == 0)
		vlog_debug("fd %d: moved from lane %u to lane %u (%u queued datagrams carried)", s->obj.fd,
			   from->lane, to->lane, carried);
	return err;
}

static void sock_udp_consider_move(struct sock_udp *s, uint64_t now)
{
	if (s->released || s->os_only || s->fork_dormant || s->inherited)
		return;
	if (now < s->mig.not_before_ms)
		return;
	/* One old-lane pcb at a time: the last move's must have served its
	 * grace first (a socket moves at most once per grace). */
	if (__atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE))
		return;
	struct sock_offload *from = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	/* The lane a new socket of this thread (core) would get now: built
	 * here if the thread has none yet, as socket() would. */
	struct sock_offload *to = sock_offload_get_for_logic(s->obj.fd, s->ring_logic, s->ring_user_id);
	if (!sock_offload_usable(from) || !sock_offload_usable(to) || to == from)
		return;
	int err = sock_udp_port_shared(s, from, to) ? -EADDRINUSE : sock_udp_move(s, from, to);
	if (err < 0 && err != -EAGAIN) {
		s->mig.not_before_ms = now + SOCK_UDP_MIG_RETRY_MS;
		vlog_debug("fd %d: stays in lane %u, not moved to lane %u (%s)", s->obj.fd, from->lane, to->lane,
			   strerror(-err));
	}
}

void sock_udp_migrate_window_end(struct sock_udp *s, bool mixed)
{
	/* One thread considers a move at a time; a window that ends in
	 * another meanwhile is simply not looked at. */
	if (!sock_mig_window_claim(&s->mig))
		return;
	uint64_t now = engine_now_ms();
	if (__atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE) && now - s->stray_since_ms >= SOCK_UDP_STRAY_GRACE_MS)
		sock_udp_stray_reap(s);
	if (!mixed)
		sock_udp_consider_move(s, now);
	sock_mig_window_release(&s->mig);
}

int sock_udp_set_ring_logic(struct sock_udp *s, int logic, uint32_t user_id)
{
	s->ring_user_id = user_id;
	__atomic_store_n(&s->ring_logic, logic, __ATOMIC_RELEASE);
	sock_udp_migrate_configure(s);
	if (s->released || s->os_only || s->fork_dormant || s->inherited)
		return 0;   /* not in a lane of ours: nothing to move */
	if (!sock_mig_window_claim(&s->mig))
		return -EBUSY;
	int err = 0;
	struct sock_offload *from = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	struct sock_offload *to = sock_offload_get_for_logic(s->obj.fd, logic, user_id);
	if (sock_offload_usable(from) && sock_offload_usable(to) && to != from) {
		if (__atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE) &&
		    engine_now_ms() - s->stray_since_ms >= SOCK_UDP_STRAY_GRACE_MS)
			sock_udp_stray_reap(s);
		if (__atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE))
			err = -EBUSY;
		else
			err = sock_udp_port_shared(s, from, to) ? -EADDRINUSE : sock_udp_move(s, from, to);
		if (err == -EAGAIN)
			err = -EBUSY;
	}
	sock_mig_window_release(&s->mig);
	return err;
}
