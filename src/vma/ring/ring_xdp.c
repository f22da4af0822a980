/* The AF_XDP ring backend: this process's XSK on the shared UMEM of one
 * (interface, queue), as a member of the domain vmad owns
 * (docs/process_model.md, ring_domain.h).
 *
 * vmad hands us, at join: the domain's memfd (header, frame states, frames),
 * the UMEM socket (to map the queue's one fill and one completion ring) and
 * our own XSK with its RX and TX rings; root members also get the 5-tuple
 * flow map, so connection set-up needs no round trip. Our RX and TX rings
 * are ours alone and lock-free; the fill ring, the completion ring and the
 * free TX frames are shared by every member and change under the domain
 * lock, taken once per batch (refills of rx_batch frames, TX frames cached
 * RING_XDP_TX_CACHE at a time, completions reaped when there are any).
 *
 * RX frame i is rx_pool descriptor i; TX frame rx_frames + j is tx_pool
 * descriptor j. Each process has its own descriptors; the state word of a
 * frame in the domain says which member holds it.
 * need_wakeup is on: the RX and TX paths make a syscall only when the
 * kernel asks for one. In copy mode (veth, generic XDP) the kernel always
 * asks on TX and the syscall does the transmit, so sends are batched under
 * the adaptive doorbell policy of tx_send_done (docs/ring.md). */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/if_xdp.h>

#include <bpf/bpf.h>

#include "log/vlog.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_domain.h"
#include "ring/ring_flow.h"
#include "ring/ring_spin.h"
#include "ring/ring_xdp_maps.h"
#include "ring/ring_xsk.h"
#include "vmad/vmad_client.h"
#include "os/os.h"
#include "ring/ring_hold.h"

/* The kernel's copy-mode transmit handles at most 32 descriptors per call
 * (then EAGAIN); one doorbell may need a few calls. */
#define RING_XDP_TX_KERNEL_BUDGET 32u
/* TX frames taken from (and given back to) the domain per lock. */
#define RING_XDP_TX_CACHE 32u

struct ring_xdp {
	struct ring base;
	struct vmad_membership member;
	struct ring_domain dom;
	unsigned slot;
	pid_t owner;              /* a forked child never tears down its parent's ring */
	bool native;
	struct ring_xsk_ring rx;
	struct ring_xsk_ring tx;
	int xsk_fd;               /* RX ring, the wait fd */
	int xsk_tx_fd;            /* TX ring, the doorbell (ring_domain_member_sockets) */
	struct ring_sizes sizes;
	uint64_t *refill;         /* freed RX frames not yet back in the fill ring */
	uint32_t refill_count;
	uint32_t *tx_cache;       /* TX frame numbers this process holds, free to use */
	uint32_t tx_cache_count;
	uint64_t rx_unknown;      /* delivered while we had it: dropped */
	uint32_t tx_unflushed;    /* queued, the kernel not yet kicked about them */
	struct ring_hold hold;    /* the adaptive doorbell (ring_hold.h) */
	/* ring_defer_kicks: the owner's flag raised with a doorbell owed, the
	 * doorbell tx_kick rings after the owner's unlock (atomic: any thread
	 * may ring it), and a mark that the kernel left descriptors behind
	 * then, so the next locked flush kicks again. */
	bool *kick_owner_flag;
	uint32_t kick_owed;
	uint32_t kick_short;
	uint32_t kick_requests;   /* tx_kick calls not yet served by a sendto */
	uint64_t kick_end_ns;     /* when the last deferred kick's sendto returned (ring_hold_rang) */
	uint64_t fill_empty_seen; /* kernel's count at the last read_counters */
	struct ring_flow *flows;  /* attached by this ring, detached on close */
	unsigned flow_count;
	unsigned flow_cap;
};

static struct ring_xdp *ring_xdp_of(struct ring *ring)
{
	return (struct ring_xdp *)ring;
}

static void ring_xdp_refill(struct ring_xdp *r)
{
	uint32_t n = r->refill_count;

	if (!n)
		return;
	ring_domain_lock(&r->dom);
	uint32_t done = ring_domain_fill_locked(&r->dom, r->slot, r->refill, n);
	ring_domain_unlock(&r->dom);
	r->refill_count -= done;
	if (r->refill_count)
		memmove(r->refill, r->refill + done, r->refill_count * sizeof(*r->refill));
	r->base.counters.rx_refills++;
}

/* rx_pool's recycle hook: the last reference to an RX frame went away. */
static void ring_xdp_rx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_xdp *r = ring_buf_pool_owner(pool);

	if (!r) /* the ring is closed: vmad takes the frame back */
		return;
	r->refill[r->refill_count++] = buf->handle;
	if (r->refill_count == r->sizes.rx_frames)
		ring_xdp_refill(r); /* never overrun the staging array */
}

static const struct ring_buf_pool_ops ring_xdp_rx_pool_ops = {
	.recycle = ring_xdp_rx_recycle,
};

/* tx_pool's recycle hook: a TX frame freed without being sent (an error
 * path, a dropped chain part) goes back to this process's cache. */
static void ring_xdp_tx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_xdp *r = ring_buf_pool_owner(pool);

	if (!r)
		return;
	r->tx_cache[r->tx_cache_count++] = r->sizes.rx_frames + (uint32_t)(buf - pool->bufs);
}

static const struct ring_buf_pool_ops ring_xdp_tx_pool_ops = {
	.recycle = ring_xdp_tx_recycle,
};

static void ring_xdp_kick_rx(struct ring_xdp *r)
{
	if (ring_xsk_needs_wakeup(&r->dom.fill)) {
		os_xsk_kick_rx(r->xsk_fd);
		r->base.counters.rx_wakeups++;
	}
}

static void ring_xdp_reap_completions(struct ring_xdp *r)
{
	if (!ring_domain_has_completions(&r->dom))
		return;
	ring_domain_lock(&r->dom);
	uint32_t n = ring_domain_reap_locked(&r->dom);
	ring_domain_unlock(&r->dom);
	r->base.counters.tx_completions += n;
}

static int ring_xdp_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct ring_buf_pool *pool = ring->rx_pool;
	const uint32_t fill_word = RING_DOMAIN_STATE(RING_DOMAIN_ST_FILL, 0);
	const uint32_t held_word = RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, r->slot);
	struct timespec now;
	uint32_t idx;

	if (r->refill_count >= r->sizes.rx_batch)
		ring_xdp_refill(r);
	uint32_t n = ring_xsk_cons_peek(&r->rx, max, &idx);
	if (!n) {
		/* Idle: give back whatever was freed, however few. */
		if (r->refill_count)
			ring_xdp_refill(r);
		ring_xdp_kick_rx(r);
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	uint32_t got = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *desc = ring_xsk_desc(&r->rx, idx + i);
		uint32_t frame = ring_domain_frame_of(&r->dom, desc->addr);
		if (__builtin_expect(frame >= r->sizes.rx_frames ||
					     ring_domain_get_state(&r->dom, frame) != fill_word, 0)) {
			/* Someone holds it: retaking it would corrupt them. */
			r->rx_unknown++;
			continue;
		}
		ring_domain_set_state(&r->dom, frame, held_word);
		struct ring_buf *buf = &pool->bufs[frame];
		ring_buf_pool_take_inline(pool, buf, RING_BUF_F_RX);
		buf->data = r->dom.frames + desc->addr;
		buf->len = desc->len;
		buf->tot_len = desc->len;
		buf->rx_time_ns = now_ns;
		bufs[got++] = buf;
		ring->counters.rx_bytes += desc->len;
	}
	ring_xsk_cons_release(&r->rx, n);
	ring->counters.rx_packets += got;
	return (int)got;
}

static void ring_xdp_kick_tx(struct ring_xdp *r, bool may_defer);

/* Refills this process's TX frame cache from the domain. */
static void ring_xdp_tx_cache_fill(struct ring_xdp *r)
{
	ring_domain_lock(&r->dom);
	r->base.counters.tx_completions += ring_domain_reap_locked(&r->dom);
	r->tx_cache_count += ring_domain_tx_take_locked(&r->dom, r->slot, r->tx_cache + r->tx_cache_count,
							RING_XDP_TX_CACHE);
	ring_domain_unlock(&r->dom);
}

static struct ring_buf *ring_xdp_tx_alloc(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct ring_buf_pool *pool = ring->tx_pool;

	if (!r->tx_cache_count) {
		ring_xdp_tx_cache_fill(r);
		if (!r->tx_cache_count) {
			/* Held frames complete only once the kernel has them. */
			ring_xdp_kick_tx(r, false);
			ring_xdp_tx_cache_fill(r);
		}
	}
	if (!r->tx_cache_count) {
		pool->counters.empty++;
		ring->counters.tx_no_buffer++;
		return NULL;
	}
	uint32_t frame = r->tx_cache[--r->tx_cache_count];
	struct ring_buf *buf = &pool->bufs[frame - r->sizes.rx_frames];
	ring_buf_pool_take_inline(pool, buf, RING_BUF_F_TX);
	return buf;
}

/* Rings the doorbell for what is queued; with may_defer on a ring whose
 * owner defers kicks, only notes that it is owed (tx_kick rings it). */
static void ring_xdp_kick_tx(struct ring_xdp *r, bool may_defer)
{
	ring_hold_flushing(&r->hold, ring_hold_now_ns);
	if (__atomic_load_n(&r->kick_short, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&r->kick_short, 0, __ATOMIC_RELAXED);
		r->tx_unflushed += ring_xsk_prod_outstanding(&r->tx);
	}
	if (!r->tx_unflushed)
		return;
	if (!ring_xsk_needs_wakeup(&r->tx)) {
		r->tx_unflushed = 0;   /* the kernel is consuming on its own */
		return;
	}
	if (may_defer && r->kick_owner_flag) {
		r->base.counters.tx_doorbells++;
		__atomic_store_n(&r->kick_owed, 1, __ATOMIC_RELEASE);
		*r->kick_owner_flag = true;
		r->tx_unflushed = 0;
		return;
	}
	/* EAGAIN: the per-call budget ran out (copy mode) or the device is
	 * busy; call again while that makes progress. */
	uint32_t tries = r->tx_unflushed / RING_XDP_TX_KERNEL_BUDGET + 2;
	do {
		r->base.counters.tx_doorbells++;
		if (os_xsk_kick_tx(r->xsk_tx_fd) >= 0 || errno != EAGAIN)
			break;
	} while (--tries);
	/* Whatever the kernel left stays counted, so the next flush (a
	 * poller, a sleeper, the internal thread) kicks again: no frame
	 * waits forever. */
	r->tx_unflushed = ring_xsk_prod_outstanding(&r->tx);
}

static int ring_xdp_tx_send(struct ring *ring, struct ring_buf *buf)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	int err = 0;

	if (buf->pool != ring->tx_pool)
		err = -EINVAL;
	else if (buf->next)
		err = ring_buf_linearize(buf);
	if (!err && (buf->data < buf->head || buf->data + buf->len > buf->head + buf->size || !buf->len))
		err = -EMSGSIZE;
	if (!err && ring_xsk_prod_free(&r->tx, 1) < 1) {
		ring->counters.tx_no_buffer++;
		err = -ENOBUFS;
	}
	if (err) {
		ring_buf_free(buf);
		return err;
	}
	uint32_t idx = r->tx.cached_prod;
	struct xdp_desc *desc = ring_xsk_desc(&r->tx, idx);
	uint64_t addr = (uint64_t)(buf->data - r->dom.frames);
	desc->addr = addr;
	desc->len = buf->len;
	desc->options = 0;
	/* The frame leaves this process: whoever reaps its completion puts
	 * it back on the domain's free stack. */
	ring_domain_set_state(&r->dom, ring_domain_frame_of(&r->dom, addr),
			      RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, r->slot));
	buf->refcount = 0;
	ring->tx_pool->counters.free_now++;
	ring_xsk_prod_submit(&r->tx, 1);
	ring->counters.tx_packets++;
	ring->counters.tx_bytes += buf->len;
	if (++r->tx_unflushed >= r->sizes.tx_batch)
		ring_xdp_kick_tx(r, true);
	return 0;
}

static void ring_xdp_tx_flush(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	ring_xdp_kick_tx(r, true);
	ring_xdp_reap_completions(r);
}

/* Without the owner's lock: the doorbell a deferred kick owes. sendto on
 * one XSK from several threads is safe (the kernel serialises it). */
static void ring_xdp_tx_kick(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	if (!__atomic_exchange_n(&r->kick_owed, 0, __ATOMIC_ACQ_REL))
		return;
	/* Combining: while one thread is in the sendto, others only count
	 * their request and go on (in the kernel they would wait on the
	 * socket's mutex). The kicker serves every request it saw before its
	 * sendto, whose descriptors were published before, and kicks again
	 * for requests that came meanwhile. */
	if (__atomic_fetch_add(&r->kick_requests, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	int saved = errno;
	for (;;) {
		uint32_t seen = __atomic_load_n(&r->kick_requests, __ATOMIC_ACQUIRE);
		uint32_t tries = ring_xsk_prod_outstanding(&r->tx) / RING_XDP_TX_KERNEL_BUDGET + 2;
		do {
			if (os_xsk_kick_tx(r->xsk_tx_fd) >= 0 || errno != EAGAIN)
				break;
		} while (--tries);
		if (__atomic_compare_exchange_n(&r->kick_requests, &seen, 0, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			break;
	}
	if (ring_xsk_prod_outstanding(&r->tx))
		__atomic_store_n(&r->kick_short, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&r->kick_end_ns, ring_hold_now_ns(), __ATOMIC_RELAXED);
	errno = saved;
}

static void ring_xdp_defer_kicks(struct ring *ring, bool *owed)
{
	ring_xdp_of(ring)->kick_owner_flag = owed;
}

static void ring_xdp_tx_send_done(struct ring *ring, bool more)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	/* Nothing unflushed: tx_send rang already (batch full). */
	/* The doorbell of the previous send may have been rung after the
	 * lane's unlock (ring_xdp_tx_kick): its end counts as the sender's. */
	ring_hold_rang(&r->hold, __atomic_load_n(&r->kick_end_ns, __ATOMIC_RELAXED));
	if (ring_hold_send_done(&r->hold, ring_hold_now_ns(), r->tx_unflushed != 0, more, &ring->counters.tx_held)) {
		ring_xdp_tx_flush(ring);
		if (!r->kick_owner_flag)
			ring_hold_rang(&r->hold, ring_hold_now_ns());
	}
}

static unsigned ring_xdp_tx_pending(const struct ring *ring)
{
	const struct ring_xdp *r = (const struct ring_xdp *)ring;
	return r->tx_unflushed + __atomic_load_n(&r->kick_short, __ATOMIC_ACQUIRE);
}

static int ring_xdp_flow_remember(struct ring_xdp *r, const struct ring_flow *flow)
{
	if (r->flow_count == r->flow_cap) {
		unsigned cap = r->flow_cap ? r->flow_cap * 2 : 8;
		struct ring_flow *grown = realloc(r->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		r->flows = grown;
		r->flow_cap = cap;
	}
	r->flows[r->flow_count++] = *flow;
	return 0;
}

static int ring_xdp_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	union ring_flow_key key;
	int kind = ring_flow_key(flow, &key);
	int err;

	if (kind < 0)
		return kind;
	if (flow->to_kernel) {
		if (kind != RING_FLOW_5TUPLE)
			return -EINVAL;
		for (unsigned i = 0; i < r->flow_count; i++) {
			if (ring_flow_same(&r->flows[i], flow)) {
				r->flows[i].to_kernel = 1;
				if (r->member.flows5_fd < 0)
					return vmad_client_flow(&r->member, VMAD_OP_FLOW_ADD, flow, VMAD_FLOW_EXCLUSIVE,
								flow->owner_fd);
				__u32 value = RING_XDP_KERNEL_OF(r->slot);
				return bpf_map_update_elem(r->member.flows5_fd, &key, &value, BPF_EXIST) == 0 ? 0 : -errno;
			}
		}
		return -ENOENT;
	}
	err = ring_xdp_flow_remember(r, flow);
	if (err)
		return err;
	bool takeover = kind == RING_FLOW_5TUPLE && flow->takeover;
	if (kind == RING_FLOW_5TUPLE && r->member.flows5_fd >= 0) {
		/* Root member: straight into the map, no round trip (vmad
		 * removes what our slot left behind when we go). A takeover
		 * rewrites the entry another lane of ours wrote. */
		__u32 value = r->slot;
		err = bpf_map_update_elem(r->member.flows5_fd, &key, &value, takeover ? BPF_ANY : BPF_NOEXIST) == 0
			      ? 0
			      : -errno;
	} else {
		err = vmad_client_flow(&r->member, VMAD_OP_FLOW_ADD, flow,
				       takeover ? VMAD_FLOW_TAKEOVER
					       : flow->share ? VMAD_FLOW_SHARE : VMAD_FLOW_EXCLUSIVE,
				       flow->owner_fd);
	}
	if (err) {
		r->flow_count--;
		return err == -E2BIG ? -ENOSPC : err;
	}
	return 0;
}

static int ring_xdp_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	union ring_flow_key key;
	int kind = ring_flow_key(flow, &key);

	if (kind < 0)
		return kind;
	for (unsigned i = 0; i < r->flow_count; i++) {
		if (!ring_flow_same(&r->flows[i], flow))
			continue;
		r->flows[i] = r->flows[--r->flow_count];
		if (kind == RING_FLOW_5TUPLE && r->member.flows5_fd >= 0)
			return bpf_map_delete_elem(r->member.flows5_fd, &key) == 0 ? 0 : -errno;
		return vmad_client_flow(&r->member, VMAD_OP_FLOW_DEL, flow, 0, -1);
	}
	return -ENOENT;
}

static int ring_xdp_forget_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	for (unsigned i = 0; i < r->flow_count; i++) {
		if (ring_flow_same(&r->flows[i], flow)) {
			r->flows[i] = r->flows[--r->flow_count];
			return 0;
		}
	}
	return -ENOENT;
}

static int ring_xdp_wait_arm(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	if (ring_xsk_cons_avail(&r->rx))
		return 1;
	/* Frames freed since the last burst must reach the kernel before we
	 * sleep, or it may have nothing to receive the awaited packet into. */
	if (r->refill_count)
		ring_xdp_refill(r);
	/* Without a fill-ring kick the kernel may never deliver the packet
	 * that poll() is about to wait for. */
	ring_xdp_kick_rx(r);
	return ring_xsk_cons_avail(&r->rx) ? 1 : 0;
}

static bool ring_xdp_rx_maybe(const struct ring *ring)
{
	const struct ring_xdp *r = (const struct ring_xdp *)ring;

	/* The shared indices, not the owner's cached ones: the consumer
	 * index moves only when the owner has handed frames on. Frames freed
	 * but not yet given back to the fill ring count too: an idle burst
	 * gives them back, and a fill ring the sockets' queues emptied would
	 * otherwise keep the RX ring empty, and this answer "no", for as long
	 * as a thread polls (the owner's count, read without its lock: a
	 * stale answer costs one burst or waits for the next look). */
	return __atomic_load_n(r->rx.producer, __ATOMIC_ACQUIRE) != __atomic_load_n(r->rx.consumer, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&r->refill_count, __ATOMIC_RELAXED) != 0 || ring_xsk_needs_wakeup(&r->dom.fill);
}

static void ring_xdp_read_counters(struct ring *ring, struct ring_counters *out)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct xdp_statistics st;

	*out = ring->counters;
	out->tx_stranded = ring_hold_strandings(&r->hold);
	if (ring_xsk_statistics(r->xsk_fd, &st) == 0) {
		out->rx_dropped = st.rx_dropped + st.rx_invalid_descs + st.rx_ring_full;
		out->rx_fill_empty = st.rx_fill_ring_empty_descs;
		/* The kernel counts the packets it could not receive for want
		 * of a frame: that is the RX pool's "empty". */
		if (st.rx_fill_ring_empty_descs > r->fill_empty_seen) {
			ring_buf_pool_count_empty(ring->rx_pool, st.rx_fill_ring_empty_descs - r->fill_empty_seen);
			r->fill_empty_seen = st.rx_fill_ring_empty_descs;
		}
	}
}

/* RX buffers the application still holds (sockets' queues). */
static unsigned ring_xdp_held(struct ring_xdp *r)
{
	if (!r->base.rx_pool || !r->base.tx_pool)
		return 0;
	return ring_buf_pool_in_use(r->base.rx_pool) + ring_buf_pool_in_use(r->base.tx_pool);
}

static void ring_xdp_destroy(struct ring_xdp *r)
{
	bool ours = r->owner == getpid();

	if (ours && r->dom.sh) {
		ring_xdp_kick_tx(r, false);   /* held frames still leave */
		ring_xdp_refill(r);
		ring_domain_lock(&r->dom);
		ring_domain_tx_give_locked(&r->dom, r->tx_cache, r->tx_cache_count);
		ring_domain_unlock(&r->dom);
		r->tx_cache_count = 0;
		if (r->rx_unknown)
			vlog_warn("ring: %s: queue %u: %llu RX descriptors for frames we held were ignored",
				  r->base.ifname, r->base.queue, (unsigned long long)r->rx_unknown);
	}
	unsigned held = ring_xdp_held(r);
	ring_xsk_unmap_ring(&r->rx);
	ring_xsk_unmap_ring(&r->tx);
	if (held) {
		/* vmad takes the frames back when we leave; the memory stays
		 * mapped here so the holders never touch an unmapped page. */
		vlog_debug("ring: %s: queue %u closed while %u buffers are still held; the mapping stays",
			   r->base.ifname, r->base.queue, held);
		ring_buf_pool_orphan(r->base.rx_pool);
		ring_buf_pool_orphan(r->base.tx_pool);
		ring_xsk_unmap_ring(&r->dom.fill);
		ring_xsk_unmap_ring(&r->dom.comp);
	} else {
		/* Said so the clean-exit test (tcp_semantics.sh) can tell a
		 * close that found nothing held from no close at all. */
		vlog_debug("ring: %s: queue %u closed, every buffer back", r->base.ifname, r->base.queue);
		if (r->dom.sh)
			ring_domain_detach(&r->dom);
		ring_buf_pool_destroy(r->base.rx_pool);
		ring_buf_pool_destroy(r->base.tx_pool);
	}
	/* Closing the connection ends the membership: vmad drops our XSK and
	 * flows and takes back any frame we still had. The memfd and UMEM
	 * socket were closed by ring_domain_detach or stay with the mapping. */
	if (ours)
		vmad_client_leave(&r->member);
	else
		vmad_client_forget(&r->member);
	free(r->refill);
	free(r->tx_cache);
	free(r->flows);
	free(r);
}

static void ring_xdp_close(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	/* Root members' 5-tuples are removed here; vmad drops the rest with
	 * the membership in any case. */
	if (r->owner == getpid()) {
		while (r->flow_count) {
			struct ring_flow flow = r->flows[r->flow_count - 1];
			if (ring_xdp_detach_flow(ring, &flow) == -ENOENT)
				break;
		}
	}
	ring_xdp_destroy(r);
}

static void ring_xdp_forget(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	/* The parent's RX and TX rings: unmapped so the parent's XSK is
	 * released when the parent goes; the frames stay mapped for the
	 * inherited objects that point into them. */
	ring_xsk_unmap_ring(&r->rx);
	ring_xsk_unmap_ring(&r->tx);
	ring_buf_pool_set_owner(r->base.rx_pool, NULL);
	ring_buf_pool_set_owner(r->base.tx_pool, NULL);
	/* The UMEM socket and its rings too: a child holding them would keep
	 * the queue's UMEM bound after vmad let it go. */
	ring_xsk_unmap_ring(&r->dom.fill);
	ring_xsk_unmap_ring(&r->dom.comp);
	if (r->dom.umem_fd >= 0)
		os_close_nocancel(r->dom.umem_fd);
	if (r->dom.memfd >= 0)
		os_close_nocancel(r->dom.memfd);
	r->dom.umem_fd = r->dom.memfd = -1;
	vmad_client_forget(&r->member);
	r->xsk_fd = r->xsk_tx_fd = -1;
	r->base.wait_fd = -1;
}

static const struct ring_ops ring_xdp_ops = {
	.name = "xdp",
	.rx_burst = ring_xdp_rx_burst,
	.tx_alloc = ring_xdp_tx_alloc,
	.tx_send = ring_xdp_tx_send,
	.tx_flush = ring_xdp_tx_flush,
	.tx_send_done = ring_xdp_tx_send_done,
	.tx_pending = ring_xdp_tx_pending,
	.tx_kick = ring_xdp_tx_kick,
	.defer_kicks = ring_xdp_defer_kicks,
	.attach_flow = ring_xdp_attach_flow,
	.detach_flow = ring_xdp_detach_flow,
	.forget_flow = ring_xdp_forget_flow,
	.wait_arm = ring_xdp_wait_arm,
	.rx_maybe = ring_xdp_rx_maybe,
	.read_counters = ring_xdp_read_counters,
	.close = ring_xdp_close,
	.forget = ring_xdp_forget,
};

/* Maps the domain and our rings, and lays the pools over the frames. */
static int ring_xdp_map(struct ring_xdp *r)
{
	int err = ring_domain_attach(&r->dom, r->member.memfd, r->member.umem_fd);
	char name[32];

	/* The domain owns those two fds now (closed by detach). */
	r->member.memfd = r->member.umem_fd = -1;
	if (err)
		return err;
	const struct ring_domain_shared *sh = r->dom.sh;
	ring_spin_board_adopt(r->dom.memfd, offsetof(struct ring_domain_shared, spin));
	r->sizes.rx_frames = sh->rx_frames;
	r->sizes.tx_frames = sh->tx_frames;
	r->sizes.rx_descs = sh->rx_descs;
	if (r->sizes.rx_batch > sh->rx_frames / 2)
		r->sizes.rx_batch = sh->rx_frames / 2;
	if (r->sizes.tx_batch > sh->tx_descs)
		r->sizes.tx_batch = sh->tx_descs;
	r->xsk_fd = r->member.xsk_fd;
	r->xsk_tx_fd = r->member.xsk_tx_fd;
	err = ring_xsk_map_ring(r->xsk_fd, RING_XSK_RX, sh->rx_descs, &r->rx);
	if (!err)
		err = ring_xsk_map_ring(r->xsk_tx_fd, RING_XSK_TX, sh->tx_descs, &r->tx);
	if (err)
		return err;
	r->refill = calloc(sh->rx_frames, sizeof(*r->refill));
	r->tx_cache = calloc(sh->tx_frames, sizeof(*r->tx_cache));
	snprintf(name, sizeof(name), "%.15s:%u rx", r->base.ifname, r->base.queue);
	r->base.rx_pool = ring_buf_pool_create_over(name, sh->rx_frames, r->dom.frames, sh->frame_size, 0, 0,
						    &ring_xdp_rx_pool_ops, r);
	snprintf(name, sizeof(name), "%.15s:%u tx", r->base.ifname, r->base.queue);
	r->base.tx_pool = ring_buf_pool_create_over(name, sh->tx_frames,
						    r->dom.frames + (size_t)sh->rx_frames * sh->frame_size,
						    sh->frame_size, sh->frame_headroom,
						    (uint64_t)sh->rx_frames * sh->frame_size, &ring_xdp_tx_pool_ops, r);
	if (!r->refill || !r->tx_cache || !r->base.rx_pool || !r->base.tx_pool)
		return -ENOMEM;
	r->base.wait_fd = r->xsk_fd;
	return 0;
}

struct ring *ring_xdp_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	return ring_xdp_open_member(ifname, queue, cfg, -1, 1);
}

int ring_xdp_slot(const struct ring *ring)
{
	return ring->ops == &ring_xdp_ops ? (int)((const struct ring_xdp *)ring)->slot : -1;
}

struct ring *ring_xdp_open_member(const char *ifname, unsigned queue, const struct ring_config *cfg, int want_slot,
				  unsigned span)
{
	const struct vmad_join_slot join_slot = { .want_slot = want_slot, .span = span };
	struct ring_xdp *r;
	unsigned ifindex = if_nametoindex(ifname);
	char why[192];
	int err;

	if (!ifindex) {
		vlog_warn("ring: %s: no such interface; traffic stays on the kernel path", ifname);
		errno = ENODEV;
		return NULL;
	}
	if (queue >= RING_XDP_MAX_QUEUES) {
		vlog_warn("ring: %s: queue %u out of range (max %u); traffic stays on the kernel path",
			  ifname, queue, RING_XDP_MAX_QUEUES - 1);
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->base.ops = &ring_xdp_ops;
	snprintf(r->base.ifname, sizeof(r->base.ifname), "%s", ifname);
	r->base.ifindex = ifindex;
	r->base.queue = queue;
	r->base.wait_fd = -1;
	r->xsk_fd = r->xsk_tx_fd = -1;
	r->owner = getpid();
	r->member = (struct vmad_membership){ .conn = -1, .memfd = -1, .umem_fd = -1, .xsk_fd = -1,
					      .xsk_tx_fd = -1, .flows5_fd = -1 };
	ring_sizes_compute(cfg, RING_XDP_FRAME_SIZE, &r->sizes);
	ring_read_link(&r->base);
	/* A frame longer than a UMEM frame holds is left to the kernel by the
	 * steering program: our stack must never send or ask for one (the TCP
	 * MSS and UDP fragments follow this MTU, whatever VMA_MTU says). */
	if (!r->base.mtu || r->base.mtu > RING_XDP_MAX_RX_FRAME - 14)
		r->base.mtu = RING_XDP_MAX_RX_FRAME - 14;

	why[0] = '\0';
	err = vmad_client_join(ifname, queue, &r->sizes, &join_slot, &r->member, why, sizeof(why));
	if (err) {
		vlog_warn("ring: %s: cannot join the interface's ring domain: %s; traffic stays on the kernel path",
			  ifname, why[0] ? why : strerror(-err));
		free(r);
		errno = -err;
		return NULL;
	}
	r->slot = r->member.slot;
	r->native = (r->member.flags & VMAD_JOIN_F_NATIVE) != 0;
	err = ring_xdp_map(r);
	if (err) {
		vlog_warn("ring: %s: cannot map the ring domain of queue %u: %s; traffic stays on the kernel path",
			  ifname, queue, strerror(-err));
		ring_xdp_destroy(r);
		errno = -err;
		return NULL;
	}
	vlog_debug("ring: %s: queue %u joined as member %u (xdp %s mode, %u rx + %u tx frames of %u bytes, "
		   "%u rx descriptors)",
		   ifname, queue, r->slot, r->native ? "native" : "skb", r->sizes.rx_frames, r->sizes.tx_frames,
		   RING_XDP_FRAME_SIZE, r->sizes.rx_descs);
	return &r->base;
}
