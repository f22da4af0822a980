/* The verbs ring backend: one RAW_PACKET QP of an rdma-core device per
 * ring, with an RX CQ on a completion channel (the wait fd), a TX CQ that
 * is only polled, one MR over the frames and one ibv_create_flow rule per
 * flow. docs/verbs.md describes it; it has run against softverbs
 * (tests/softverbs), never on a NIC.
 *
 * Frames: RX frame i is rx_pool descriptor i and the wr_id of its receive
 * WQE; TX frame j (after the RX frames) is tx_pool descriptor j. A send's
 * wr_id is its SQ slot: a completion returns every slot up to it (the
 * unsignalled ones before it complete with it). Nothing here touches a
 * frame between its post and its completion. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include "log/vlog.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_flow.h"
#include "ring/ring_verbs.h"

/* IP headers land on 4-byte boundaries behind the 14-byte Ethernet header. */
#define RING_VERBS_HEADROOM 2u
#define RING_VERBS_MIN_FRAME 2048u
#define RING_VERBS_MAX_FRAME 16384u
#define RING_VERBS_POLL_MAX 64u
/* ibv_ack_cq_events takes a mutex: acks go in batches. */
#define RING_VERBS_ACK_BATCH 64u
/* The adaptive doorbell of docs/ring.md (as the xdp backend). */
#define RING_VERBS_TX_BURST_GAP_NS 10000u
#define RING_VERBS_TX_HOLD_MAX_NS 50000u

struct ring_verbs_flow {
	struct ring_flow flow;
	struct ibv_flow *ib;      /* NULL: handed to the kernel (to_kernel) */
};

struct ring_verbs {
	struct ring base;
	struct ring_verbs *next_ring;   /* ring_verbs_rings */
	struct ring_verbs_config vcfg;
	pid_t owner;              /* a forked child never destroys its parent's objects */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *channel;
	struct ibv_cq *rx_cq;
	struct ibv_cq *tx_cq;
	struct ibv_qp *qp;
	uint8_t port;
	uint8_t *mem;
	size_t mem_len;
	uint32_t frame_size;
	struct ring_sizes sizes;  /* rx_descs: RQ depth; tx_frames: SQ depth */
	uint32_t max_inline;
	/* receive */
	uint32_t *rq_fifo;        /* frames posted, in posting order */
	uint32_t rq_head, rq_posted;
	uint32_t rq_reserve;      /* VMA_CQ_KEEP_QP_FULL: WQEs always posted */
	uint32_t *rx_free;        /* frames neither posted nor held */
	uint32_t rx_free_count;
	struct ibv_recv_wr *rwr;
	struct ibv_sge *rsge;
	struct ibv_wc wc[RING_VERBS_POLL_MAX];
	struct ibv_wc stash[RING_VERBS_POLL_MAX];   /* polled by wait_arm */
	uint32_t stash_head, stash_count;
	/* The wait fd: an epoll set of the completion channel and an eventfd
	 * raised while the stash holds completions. A CQ poll consumes what
	 * it finds, and a completion wait_arm finds must keep the wait fd
	 * readable for whoever sleeps on it later (level-triggered, as an
	 * AF_XDP socket with frames in its RX ring is). */
	int wait_ep;
	int stash_fd;
	bool stash_signaled;
	uint32_t events_unacked;
	/* send */
	uint32_t *tx_free;
	uint32_t tx_free_count;
	struct ibv_send_wr *swr;  /* one per SQ slot */
	struct ibv_sge *ssge;
	int32_t *sq_frame;        /* TX frame of a slot; -1 when inline or free */
	uint32_t sq_head;         /* oldest slot posted and not completed */
	uint32_t sq_posted, sq_queued, unsignaled;
	uint64_t tx_last_send_ns, tx_held_since_ns;
	/* interrupt moderation */
	uint16_t mod_count, mod_period_us;
	bool aim_off;
	uint64_t aim_last_ns, aim_last_packets;
	struct ring_verbs_flow *flows;
	unsigned flow_count, flow_cap;
	bool warned_rx, warned_tx;
};

static struct ring_verbs *ring_verbs_of(struct ring *ring)
{
	return (struct ring_verbs *)ring;
}

/* The process's verbs rings, for flows moving between them; this lock
 * guards every ring's flow table (attach, detach and close are not on the
 * packet path). */
static pthread_mutex_t ring_verbs_flows_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring_verbs *ring_verbs_rings;

/* In a forked child the rings (and their rules) are the parent's: none of
 * them is the child's to take a flow from. */
static void ring_verbs_atfork_child(void)
{
	pthread_mutex_init(&ring_verbs_flows_lock, NULL);
	ring_verbs_rings = NULL;
}

static pthread_once_t ring_verbs_atfork_once = PTHREAD_ONCE_INIT;

static void ring_verbs_atfork_register(void)
{
	pthread_atfork(NULL, NULL, ring_verbs_atfork_child);
}

static void ring_verbs_unlink(struct ring_verbs *r)
{
	for (struct ring_verbs **p = &ring_verbs_rings; *p; p = &(*p)->next_ring) {
		if (*p == r) {
			*p = r->next_ring;
			break;
		}
	}
}

static uint64_t ring_verbs_clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- pools ---- */

static void ring_verbs_rx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_verbs *r = ring_buf_pool_owner(pool);
	if (r)
		r->rx_free[r->rx_free_count++] = (uint32_t)(buf - pool->bufs);
}

static const struct ring_buf_pool_ops ring_verbs_rx_pool_ops = { .recycle = ring_verbs_rx_recycle };

/* A TX frame freed without being sent (an error path, a chain's tail). */
static void ring_verbs_tx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_verbs *r = ring_buf_pool_owner(pool);
	if (r)
		r->tx_free[r->tx_free_count++] = (uint32_t)(buf - pool->bufs);
}

static const struct ring_buf_pool_ops ring_verbs_tx_pool_ops = { .recycle = ring_verbs_tx_recycle };

/* ---- interrupt moderation ---- */

static void ring_verbs_moderate(struct ring_verbs *r, uint16_t count, uint16_t period_us)
{
	struct ibv_modify_cq_attr attr = { .attr_mask = IBV_CQ_ATTR_MODERATE,
					   .moderate = { .cq_count = count, .cq_period = period_us } };

	if (count == r->mod_count && period_us == r->mod_period_us)
		return;
	int err = ibv_modify_cq(r->rx_cq, &attr);
	if (err) {
		vlog_debug("ring: %s: the device refuses CQ moderation (%s); interrupts are not moderated",
			   r->base.ifname, strerror(err));
		r->aim_off = true;
		return;
	}
	r->mod_count = count;
	r->mod_period_us = period_us;
}

/* Adaptive moderation (VMA_CQ_AIM_*): from the packet rate of the last
 * interval, the count and period that keep the interrupts near the target
 * rate; below the target rate no moderation, so a lone packet wakes its
 * sleeper at once. */
static void ring_verbs_aim(struct ring_verbs *r, uint64_t now_ns)
{
	if (!r->vcfg.cq_moderation || !r->vcfg.aim_interval_ms || r->aim_off)
		return;
	if (!r->aim_last_ns || now_ns < r->aim_last_ns) {
		r->aim_last_ns = now_ns;
		r->aim_last_packets = r->base.counters.rx_packets;
		return;
	}
	uint64_t elapsed = now_ns - r->aim_last_ns;
	if (elapsed < (uint64_t)r->vcfg.aim_interval_ms * 1000000u)
		return;
	uint64_t rate = (r->base.counters.rx_packets - r->aim_last_packets) * 1000000000u / elapsed;
	uint64_t count = 0, period = 0;
	if (r->vcfg.aim_rate && rate > r->vcfg.aim_rate) {
		count = rate / r->vcfg.aim_rate;
		if (count > r->vcfg.aim_max_count)
			count = r->vcfg.aim_max_count;
		period = 1000000u / r->vcfg.aim_rate;
		if (period > r->vcfg.aim_max_period_us)
			period = r->vcfg.aim_max_period_us;
	}
	ring_verbs_moderate(r, (uint16_t)(count > 0xffff ? 0xffff : count), (uint16_t)(period > 0xffff ? 0xffff : period));
	r->aim_last_ns = now_ns;
	r->aim_last_packets = r->base.counters.rx_packets;
}

/* ---- receive ---- */

/* Posts free frames while the RQ has room: one chained ibv_post_recv. */
static void ring_verbs_refill(struct ring_verbs *r)
{
	uint32_t depth = r->sizes.rx_descs;
	uint32_t room = depth - r->rq_posted;
	uint32_t n = r->rx_free_count < room ? r->rx_free_count : room;
	struct ring_buf_pool *pool = r->base.rx_pool;

	if (!n)
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t frame = r->rx_free[--r->rx_free_count];
		const struct ring_buf *b = &pool->bufs[frame];
		r->rsge[i] = (struct ibv_sge){ .addr = (uintptr_t)b->head, .length = b->size, .lkey = r->mr->lkey };
		r->rwr[i] = (struct ibv_recv_wr){ .wr_id = frame, .sg_list = &r->rsge[i], .num_sge = 1,
						  .next = i + 1 < n ? &r->rwr[i + 1] : NULL };
		r->rq_fifo[(r->rq_head + r->rq_posted + i) % depth] = frame;
	}
	struct ibv_recv_wr *bad = NULL;
	int err = ibv_post_recv(r->qp, r->rwr, &bad);
	uint32_t posted = n;
	if (err) {
		posted = bad ? (uint32_t)(bad - r->rwr) : 0;
		for (uint32_t i = posted; i < n; i++)
			r->rx_free[r->rx_free_count++] = (uint32_t)r->rwr[i].wr_id;
		if (!r->warned_rx)
			vlog_warn("ring: %s: ibv_post_recv refused %u of %u receive buffers (%s)", r->base.ifname,
				  n - posted, n, strerror(err));
		r->warned_rx = true;
	}
	r->rq_posted += posted;
	r->base.counters.rx_refills++;
}

static void ring_verbs_rx_wc(struct ring_verbs *r, const struct ibv_wc *wc, struct ring_buf **bufs, unsigned *got,
			     uint64_t now_ns)
{
	struct ring_buf_pool *pool = r->base.rx_pool;
	uint32_t frame = (uint32_t)wc->wr_id;

	if (r->rq_posted) {
		r->rq_head = (r->rq_head + 1) % r->sizes.rx_descs;
		r->rq_posted--;
	}
	if (frame >= r->sizes.rx_frames)
		return;
	if (wc->status != IBV_WC_SUCCESS) {
		/* LOC_LEN_ERR: a frame longer than our buffers; FLUSH: the QP
		 * went to the error state. Either way the frame comes back. */
		r->base.counters.rx_dropped++;
		r->rx_free[r->rx_free_count++] = frame;
		if (!r->warned_rx)
			vlog_warn("ring: %s: receive completion error: %s%s", r->base.ifname,
				  ibv_wc_status_str(wc->status),
				  wc->status == IBV_WC_WR_FLUSH_ERR ? " (the queue pair is in error; restart the "
								      "process to offload again)" : "");
		r->warned_rx = true;
		return;
	}
	struct ring_buf *buf = &pool->bufs[frame];
	ring_buf_pool_take_inline(pool, buf, RING_BUF_F_RX);
	buf->len = buf->tot_len = wc->byte_len;
	buf->rx_time_ns = now_ns;
	bufs[(*got)++] = buf;
	r->base.counters.rx_bytes += wc->byte_len;
}

/* VMA_RX_PREFETCH_BYTES_BEFORE_POLL: the RQ fills in posting order, so the
 * next frame to arrive is known. */
static void ring_verbs_prefetch_next(const struct ring_verbs *r)
{
	if (!r->rq_posted)
		return;
	const uint8_t *p = r->base.rx_pool->bufs[r->rq_fifo[r->rq_head]].head;
	for (unsigned off = 0; off < r->vcfg.prefetch_before_poll; off += 64)
		__builtin_prefetch(p + off);
}

static int ring_verbs_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	unsigned got = 0;
	uint64_t now_ns = 0;

	/* VMA_RX_WRE_BATCHING: free frames go back once the RQ is short of
	 * a batch, in one chained post. */
	if (r->rx_free_count && r->sizes.rx_descs - r->rq_posted >= r->sizes.rx_batch)
		ring_verbs_refill(r);
again:
	if (r->stash_count) {
		now_ns = ring_verbs_clock_ns(CLOCK_REALTIME);
		while (got < max && r->stash_count) {
			ring_verbs_rx_wc(r, &r->stash[r->stash_head++], bufs, &got, now_ns);
			r->stash_count--;
		}
		if (!r->stash_count && r->stash_signaled) {
			eventfd_t value;
			(void)eventfd_read(r->stash_fd, &value);
			r->stash_signaled = false;
		}
	}
	if (got < max) {
		if (r->vcfg.prefetch_before_poll)
			ring_verbs_prefetch_next(r);
		int want = (int)(max - got < RING_VERBS_POLL_MAX ? max - got : RING_VERBS_POLL_MAX);
		int n = ibv_poll_cq(r->rx_cq, want, r->wc);
		if (n > 0 && !now_ns)
			now_ns = ring_verbs_clock_ns(CLOCK_REALTIME);
		for (int i = 0; i < n; i++)
			ring_verbs_rx_wc(r, &r->wc[i], bufs, &got, now_ns);
	}
	if (!got) {
		/* Idle: give back whatever was freed, however few. */
		if (r->rx_free_count)
			ring_verbs_refill(r);
		return 0;
	}
	if (r->vcfg.keep_qp_full) {
		/* VMA_CQ_KEEP_QP_FULL: the RQ never falls below its reserve;
		 * when the free frames cannot keep it there (sockets hold the
		 * rest), the frames just received are reposted and their
		 * packets dropped, so the NIC always has somewhere to write. */
		while (got && r->rq_posted + r->rx_free_count < r->rq_reserve) {
			struct ring_buf *b = bufs[--got];
			r->base.counters.rx_dropped++;
			r->base.counters.rx_bytes -= b->len;
			ring_buf_free(b);
		}
		if (r->rx_free_count && r->sizes.rx_descs - r->rq_posted >= r->sizes.rx_batch)
			ring_verbs_refill(r);
		if (!got)
			goto again;   /* all dropped: the CQ may hold more */
	}
	ring->counters.rx_packets += got;
	ring_verbs_aim(r, now_ns);
	return (int)got;
}

/* ---- send ---- */

/* The doorbell: one ibv_post_send for the chain of queued WRs. With
 * force_signal the last one asks for a completion (closing, or no free
 * frame left), so every frame comes back. */
static void ring_verbs_doorbell(struct ring_verbs *r, bool force_signal)
{
	uint32_t depth = r->sizes.tx_frames;

	r->tx_held_since_ns = 0;
	if (!r->sq_queued)
		return;
	uint32_t first = (r->sq_head + r->sq_posted) % depth;
	uint32_t last = (first + r->sq_queued - 1) % depth;
	if (force_signal && !(r->swr[last].send_flags & IBV_SEND_SIGNALED)) {
		r->swr[last].send_flags |= IBV_SEND_SIGNALED;
		r->unsignaled = 0;
	}
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(r->qp, &r->swr[first], &bad);
	uint32_t posted = r->sq_queued;
	if (err) {
		posted = 0;
		for (struct ibv_send_wr *w = &r->swr[first]; w && w != bad; w = w->next)
			posted++;
		for (uint32_t k = posted; k < r->sq_queued; k++) {
			uint32_t s = (first + k) % depth;
			r->tx_free[r->tx_free_count++] = (uint32_t)r->sq_frame[s];
			r->sq_frame[s] = -1;
			r->base.counters.tx_no_buffer++;
		}
		if (!r->warned_tx)
			vlog_warn("ring: %s: ibv_post_send refused %u of %u frames (%s); they are dropped",
				  r->base.ifname, r->sq_queued - posted, r->sq_queued, strerror(err));
		r->warned_tx = true;
	}
	/* Inline frames were copied into their WQEs: free again already. */
	for (uint32_t k = 0; k < posted; k++) {
		uint32_t s = (first + k) % depth;
		if ((r->swr[s].send_flags & IBV_SEND_INLINE) && r->sq_frame[s] >= 0) {
			r->tx_free[r->tx_free_count++] = (uint32_t)r->sq_frame[s];
			r->sq_frame[s] = -1;
		}
	}
	r->sq_posted += posted;
	r->sq_queued = 0;
	r->base.counters.tx_doorbells++;
}

/* Send completions: each returns its slot and the unsignalled ones before. */
static void ring_verbs_reap(struct ring_verbs *r)
{
	struct ibv_wc wc[32];
	int n;

	do {
		n = ibv_poll_cq(r->tx_cq, 32, wc);
		for (int i = 0; i < n; i++) {
			uint32_t slot = (uint32_t)wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!r->warned_tx)
					vlog_warn("ring: %s: send completion error: %s", r->base.ifname,
						  ibv_wc_status_str(wc[i].status));
				r->warned_tx = true;
			}
			while (r->sq_posted) {
				uint32_t s = r->sq_head;
				if (r->sq_frame[s] >= 0)
					r->tx_free[r->tx_free_count++] = (uint32_t)r->sq_frame[s];
				r->sq_frame[s] = -1;
				r->sq_head = (s + 1) % r->sizes.tx_frames;
				r->sq_posted--;
				r->base.counters.tx_completions++;
				if (s == slot)
					break;
			}
		}
	} while (n == 32);
}

static struct ring_buf *ring_verbs_tx_alloc(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ring_buf_pool *pool = ring->tx_pool;

	if (!r->tx_free_count) {
		ring_verbs_reap(r);
		if (!r->tx_free_count && r->sq_queued) {
			ring_verbs_doorbell(r, true);
			ring_verbs_reap(r);
		}
		if (!r->tx_free_count) {
			pool->counters.empty++;
			ring->counters.tx_no_buffer++;
			return NULL;
		}
	}
	struct ring_buf *buf = &pool->bufs[r->tx_free[--r->tx_free_count]];
	ring_buf_pool_take_inline(pool, buf, RING_BUF_F_TX);
	return buf;
}

/* A chain goes out as one frame: its parts are copied behind the first. */
static int ring_verbs_linearize(struct ring_buf *buf)
{
	uint32_t len = buf->len;
	const uint8_t *end = buf->head + buf->size;

	for (struct ring_buf *seg = buf->next; seg; seg = seg->next) {
		if (buf->data + len + seg->len > end)
			return -EMSGSIZE;
		memcpy(buf->data + len, seg->data, seg->len);
		len += seg->len;
	}
	ring_buf_free(buf->next);
	buf->next = NULL;
	buf->len = buf->tot_len = len;
	return 0;
}

static int ring_verbs_tx_send(struct ring *ring, struct ring_buf *buf)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	uint32_t depth = r->sizes.tx_frames;
	int err = 0;

	if (buf->pool != ring->tx_pool)
		err = -EINVAL;
	else if (buf->next)
		err = ring_verbs_linearize(buf);
	if (!err && (buf->data < buf->head || buf->data + buf->len > buf->head + buf->size || !buf->len))
		err = -EMSGSIZE;
	if (!err && r->sq_posted + r->sq_queued == depth) {
		ring_verbs_reap(r);
		if (r->sq_posted + r->sq_queued == depth) {
			ring->counters.tx_no_buffer++;
			err = -ENOBUFS;
		}
	}
	if (err) {
		ring_buf_free(buf);
		return err;
	}
	uint32_t slot = (r->sq_head + r->sq_posted + r->sq_queued) % depth;
	struct ibv_sge *sge = &r->ssge[slot];
	struct ibv_send_wr *wr = &r->swr[slot];
	*sge = (struct ibv_sge){ .addr = (uintptr_t)buf->data, .length = buf->len, .lkey = r->mr->lkey };
	unsigned flags = buf->len <= r->max_inline ? IBV_SEND_INLINE : 0;
	/* Signalled every tx_batch-th WR, and always once free frames run
	 * short: a completion returns every frame before it, and none is
	 * left waiting on WRs nobody will complete. */
	if (++r->unsignaled >= r->sizes.tx_batch || r->tx_free_count < r->sizes.tx_batch) {
		flags |= IBV_SEND_SIGNALED;
		r->unsignaled = 0;
	}
	*wr = (struct ibv_send_wr){ .wr_id = slot, .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				    .send_flags = flags };
	if (r->sq_queued)
		r->swr[(slot + depth - 1) % depth].next = wr;
	r->sq_frame[slot] = (int32_t)(buf - ring->tx_pool->bufs);
	r->sq_queued++;
	/* The frame is the ring's until its completion. */
	buf->refcount = 0;
	ring->tx_pool->counters.free_now++;
	ring->counters.tx_packets++;
	ring->counters.tx_bytes += buf->len;
	if (r->sq_queued >= r->sizes.tx_batch)
		ring_verbs_doorbell(r, false);
	return 0;
}

static void ring_verbs_tx_flush(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);

	ring_verbs_doorbell(r, false);
	ring_verbs_reap(r);
}

static void ring_verbs_tx_send_done(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	uint64_t now = ring_verbs_clock_ns(CLOCK_MONOTONIC);
	uint64_t prev = r->tx_last_send_ns;

	r->tx_last_send_ns = now;
	if (!r->sq_queued)
		return;
	if (now - prev >= RING_VERBS_TX_BURST_GAP_NS ||
	    (r->tx_held_since_ns && now - r->tx_held_since_ns >= RING_VERBS_TX_HOLD_MAX_NS)) {
		ring_verbs_tx_flush(ring);
		return;
	}
	if (!r->tx_held_since_ns)
		r->tx_held_since_ns = now;
	ring->counters.tx_held++;
}

static unsigned ring_verbs_tx_pending(const struct ring *ring)
{
	return ((const struct ring_verbs *)ring)->sq_queued;
}

/* ---- flows ---- */

static struct ring_verbs_flow *ring_verbs_flow_find(struct ring_verbs *r, const struct ring_flow *flow)
{
	for (unsigned i = 0; i < r->flow_count; i++)
		if (ring_flow_same(&r->flows[i].flow, flow))
			return &r->flows[i];
	return NULL;
}

/* Whether a 3-tuple of this ring would catch the 5-tuple's segments. */
static bool ring_verbs_flow_covered(struct ring_verbs *r, const struct ring_flow *five)
{
	for (unsigned i = 0; i < r->flow_count; i++) {
		const struct ring_flow *f = &r->flows[i].flow;
		if (r->flows[i].ib && !f->group && !f->remote_port && f->proto == five->proto &&
		    f->local_port == five->local_port && (!f->local_ip || f->local_ip == five->local_ip))
			return true;
	}
	return false;
}

static int ring_verbs_flow_to_kernel(struct ring_verbs *r, const struct ring_flow *flow, int kind)
{
	struct ring_verbs_flow *f = ring_verbs_flow_find(r, flow);

	if (kind != RING_FLOW_5TUPLE)
		return -EINVAL;
	if (!f)
		return -ENOENT;
	if (!f->ib)
		return 0;
	/* A rule steers to a QP or drops: "back to the kernel" is no rule
	 * at all, which only works when no 3-tuple of ours catches it. */
	if (ring_verbs_flow_covered(r, flow))
		return -EOPNOTSUPP;
	int err = ibv_destroy_flow(f->ib);
	if (err)
		return ring_verbs_flow_errno(err);
	f->ib = NULL;
	f->flow.to_kernel = 1;
	return 0;
}

static int ring_verbs_attach_flow_locked(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ring_verbs_rule rule;
	int kind = ring_verbs_rule_build(flow, ring->mac, r->port, &rule);

	if (kind < 0)
		return kind;
	if (flow->to_kernel)
		return ring_verbs_flow_to_kernel(r, flow, kind);
	if (ring_verbs_flow_find(r, flow))
		return -EEXIST;
	if (flow->share && kind != RING_FLOW_GROUP) {
		/* Two QPs with one rule is undefined on hardware: a port other
		 * processes may share is left to the kernel socket. */
		static bool told;
		if (!told)
			vlog_info("ring: %s: ports shared across processes or by SO_REUSEPORT are served by the "
				  "kernel on the verbs backend (docs/verbs.md)", ring->ifname);
		told = true;
		return -EOPNOTSUPP;
	}
	if (r->flow_count == r->flow_cap) {
		unsigned cap = r->flow_cap ? r->flow_cap * 2 : 16;
		struct ring_verbs_flow *grown = realloc(r->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		r->flows = grown;
		r->flow_cap = cap;
	}
	/* Another ring of this process steering the same unicast flow: the
	 * socket is moving lanes (its old lane's rings are drained next).
	 * Ours goes in one better, theirs goes, ours takes the usual
	 * priority: no moment with two equal rules (duplicates) or none
	 * (frames to the kernel). */
	struct ring_verbs_flow *theirs = NULL;
	if (kind != RING_FLOW_GROUP) {
		for (struct ring_verbs *o = ring_verbs_rings; o && !theirs; o = o->next_ring) {
			if (o == r)
				continue;
			struct ring_verbs_flow *f = ring_verbs_flow_find(o, flow);
			if (f && f->ib)
				theirs = f;
		}
	}
	struct ibv_flow *ib;
	if (theirs) {
		struct ring_verbs_rule better = rule;
		better.attr.priority--;
		struct ibv_flow *bridge = ibv_create_flow(r->qp, &better.attr);
		if (!bridge)
			return ring_verbs_flow_errno(errno);
		ibv_destroy_flow(theirs->ib);
		theirs->ib = NULL;   /* its ring's detach then has nothing to undo */
		ib = ibv_create_flow(r->qp, &rule.attr);
		if (!ib) {
			ib = bridge;   /* keep the better one: steering still right */
		} else {
			ibv_destroy_flow(bridge);
		}
	} else {
		ib = ibv_create_flow(r->qp, &rule.attr);
		if (!ib)
			return ring_verbs_flow_errno(errno);
	}
	r->flows[r->flow_count++] = (struct ring_verbs_flow){ .flow = *flow, .ib = ib };
	return 0;
}

static int ring_verbs_detach_flow_locked(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ring_verbs_flow *f = ring_verbs_flow_find(r, flow);

	if (!f)
		return -ENOENT;
	int err = f->ib ? ibv_destroy_flow(f->ib) : 0;
	*f = r->flows[--r->flow_count];
	return err ? -err : 0;
}

static int ring_verbs_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	int err = ring_verbs_attach_flow_locked(ring, flow);
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	return err;
}

static int ring_verbs_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	int err = ring_verbs_detach_flow_locked(ring, flow);
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	return err;
}

/* ---- sleeping ---- */

static void ring_verbs_ack_events(struct ring_verbs *r)
{
	if (r->events_unacked) {
		ibv_ack_cq_events(r->rx_cq, r->events_unacked);
		r->events_unacked = 0;
	}
}

static int ring_verbs_wait_arm(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ibv_cq *cq;
	void *cq_ctx;

	if (r->stash_count)
		return 1;
	/* Events since the last arm: taken (the channel is readable until
	 * they are) and acknowledged in batches. */
	while (ibv_get_cq_event(r->channel, &cq, &cq_ctx) == 0)
		if (++r->events_unacked >= RING_VERBS_ACK_BATCH)
			ring_verbs_ack_events(r);
	if (r->rx_free_count)
		ring_verbs_refill(r);
	ring_verbs_aim(r, ring_verbs_clock_ns(CLOCK_REALTIME));
	int err = ibv_req_notify_cq(r->rx_cq, 0);
	if (err)
		return -err;
	/* Arm, then poll: a completion that came before the arm raises no
	 * event, so it must be seen here. */
	int n = ibv_poll_cq(r->rx_cq, RING_VERBS_POLL_MAX, r->stash);
	if (n > 0) {
		r->stash_head = 0;
		r->stash_count = (uint32_t)n;
		if (!r->stash_signaled && eventfd_write(r->stash_fd, 1) == 0)
			r->stash_signaled = true;
		return 1;
	}
	return 0;
}

static void ring_verbs_read_counters(struct ring *ring, struct ring_counters *out)
{
	*out = ring->counters;
}

/* ---- close ---- */

static unsigned ring_verbs_held(const struct ring_verbs *r)
{
	return (r->base.rx_pool ? ring_buf_pool_in_use(r->base.rx_pool) : 0) +
	       (r->base.tx_pool ? ring_buf_pool_in_use(r->base.tx_pool) : 0);
}

/* Sends still queued leave, and the completions of those in flight are
 * awaited a little (a NIC needs microseconds), before the QP goes. */
static void ring_verbs_drain_tx(struct ring_verbs *r)
{
	ring_verbs_doorbell(r, true);
	uint64_t deadline = ring_verbs_clock_ns(CLOCK_MONOTONIC) + 100000000u;
	while (r->sq_posted && ring_verbs_clock_ns(CLOCK_MONOTONIC) < deadline) {
		unsigned before = r->sq_posted;
		ring_verbs_reap(r);
		if (r->sq_posted == before && r->unsignaled)
			break;   /* only unsignalled WRs left: nothing more will come */
	}
}

static void ring_verbs_destroy(struct ring_verbs *r)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	ring_verbs_unlink(r);
	while (r->flow_count) {
		struct ring_verbs_flow *f = &r->flows[--r->flow_count];
		if (f->ib)
			ibv_destroy_flow(f->ib);
	}
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	if (r->qp) {
		ring_verbs_drain_tx(r);
		if (ibv_destroy_qp(r->qp))
			vlog_warn("ring: %s: ibv_destroy_qp failed", r->base.ifname);
	}
	if (r->rx_cq) {
		/* ibv_destroy_cq waits for every event to be acknowledged. */
		ring_verbs_ack_events(r);
		ibv_destroy_cq(r->rx_cq);
	}
	if (r->tx_cq)
		ibv_destroy_cq(r->tx_cq);
	if (r->channel)
		ibv_destroy_comp_channel(r->channel);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ctx)
		ibv_close_device(r->ctx);
	if (r->wait_ep >= 0)
		close(r->wait_ep);
	if (r->stash_fd >= 0)
		close(r->stash_fd);
	unsigned held = ring_verbs_held(r);
	if (held) {
		/* The holders keep pointing into the frames: they stay. */
		vlog_warn("ring: %s: closed while %u buffers are still held; their memory stays allocated",
			  r->base.ifname, held);
		ring_buf_pool_set_owner(r->base.rx_pool, NULL);
		ring_buf_pool_set_owner(r->base.tx_pool, NULL);
	} else {
		vlog_debug("ring: %s: verbs ring closed, every buffer back", r->base.ifname);
		ring_buf_pool_destroy(r->base.rx_pool);
		ring_buf_pool_destroy(r->base.tx_pool);
		if (r->mem)
			munmap(r->mem, r->mem_len);
	}
	free(r->rq_fifo);
	free(r->rx_free);
	free(r->rwr);
	free(r->rsge);
	free(r->tx_free);
	free(r->swr);
	free(r->ssge);
	free(r->sq_frame);
	free(r->flows);
	free(r);
}

static void ring_verbs_close(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);

	if (r->owner != getpid()) {
		/* A forked child's copy: the objects are the parent's. */
		free(r->flows);
		free(r);
		return;
	}
	ring_verbs_destroy(r);
}

static void ring_verbs_forget(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);

	/* Destroying anything through the inherited device context would
	 * destroy the parent's QP and rules: the child lets go of its
	 * copies, and the frames stay mapped for the objects pointing there. */
	ring_buf_pool_set_owner(r->base.rx_pool, NULL);
	ring_buf_pool_set_owner(r->base.tx_pool, NULL);
	/* Our own fds (not verbs objects) are the child's copies: closed. */
	if (r->wait_ep >= 0)
		close(r->wait_ep);
	if (r->stash_fd >= 0)
		close(r->stash_fd);
	r->wait_ep = r->stash_fd = -1;
	r->base.wait_fd = -1;
}

static const struct ring_ops ring_verbs_ops = {
	.name = "verbs",
	.rx_burst = ring_verbs_rx_burst,
	.tx_alloc = ring_verbs_tx_alloc,
	.tx_send = ring_verbs_tx_send,
	.tx_flush = ring_verbs_tx_flush,
	.tx_send_done = ring_verbs_tx_send_done,
	.tx_pending = ring_verbs_tx_pending,
	.attach_flow = ring_verbs_attach_flow,
	.detach_flow = ring_verbs_detach_flow,
	.wait_arm = ring_verbs_wait_arm,
	.read_counters = ring_verbs_read_counters,
	.close = ring_verbs_close,
	.forget = ring_verbs_forget,
};

/* ---- open ---- */

static int ring_verbs_alloc(struct ring_verbs *r)
{
	uint32_t rx_frames = r->sizes.rx_frames, tx_frames = r->sizes.tx_frames, descs = r->sizes.rx_descs;
	char name[32];

	r->mem_len = (size_t)(rx_frames + tx_frames) * r->frame_size;
	r->mem = MAP_FAILED;
	if (r->sizes.huge_pages)
		r->mem = mmap(NULL, r->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (r->mem == MAP_FAILED)
		r->mem = mmap(NULL, r->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->mem == MAP_FAILED) {
		r->mem = NULL;
		return -ENOMEM;
	}
	r->rq_fifo = calloc(descs, sizeof(*r->rq_fifo));
	r->rx_free = calloc(rx_frames, sizeof(*r->rx_free));
	r->rwr = calloc(descs, sizeof(*r->rwr));
	r->rsge = calloc(descs, sizeof(*r->rsge));
	r->tx_free = calloc(tx_frames, sizeof(*r->tx_free));
	r->swr = calloc(tx_frames, sizeof(*r->swr));
	r->ssge = calloc(tx_frames, sizeof(*r->ssge));
	r->sq_frame = calloc(tx_frames, sizeof(*r->sq_frame));
	snprintf(name, sizeof(name), "%.15s:v rx", r->base.ifname);
	r->base.rx_pool = ring_buf_pool_create_over(name, rx_frames, r->mem, r->frame_size, RING_VERBS_HEADROOM, 0,
						    &ring_verbs_rx_pool_ops, r);
	snprintf(name, sizeof(name), "%.15s:v tx", r->base.ifname);
	r->base.tx_pool = ring_buf_pool_create_over(name, tx_frames, r->mem + (size_t)rx_frames * r->frame_size,
						    r->frame_size, RING_VERBS_HEADROOM,
						    (uint64_t)rx_frames * r->frame_size, &ring_verbs_tx_pool_ops, r);
	if (!r->rq_fifo || !r->rx_free || !r->rwr || !r->rsge || !r->tx_free || !r->swr || !r->ssge || !r->sq_frame ||
	    !r->base.rx_pool || !r->base.tx_pool)
		return -ENOMEM;
	/* LIFO free lists: frame 0 goes out first. */
	for (uint32_t i = 0; i < rx_frames; i++)
		r->rx_free[r->rx_free_count++] = rx_frames - 1 - i;
	for (uint32_t j = 0; j < tx_frames; j++) {
		r->tx_free[r->tx_free_count++] = tx_frames - 1 - j;
		r->sq_frame[j] = -1;
	}
	return 0;
}

/* Sizes within what the device takes. */
static void ring_verbs_clamp(struct ring_verbs *r)
{
	struct ibv_device_attr attr;

	if (ibv_query_device(r->ctx, &attr) != 0)
		return;
	uint32_t max_wr = attr.max_qp_wr > 0 ? (uint32_t)attr.max_qp_wr : 1;
	uint32_t max_cqe = attr.max_cqe > 0 ? (uint32_t)attr.max_cqe : 1;
	uint32_t limit = max_wr < max_cqe ? max_wr : max_cqe;
	if (r->sizes.rx_descs > limit)
		r->sizes.rx_descs = limit;
	if (r->sizes.tx_frames > limit)
		r->sizes.tx_frames = limit;
}

static int ring_verbs_create(struct ring_verbs *r, const char **what)
{
	int err;

	*what = "cannot allocate a protection domain";
	if (!(r->pd = ibv_alloc_pd(r->ctx)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot allocate the frames";
	if ((err = ring_verbs_alloc(r)))
		return err;
	*what = "cannot register the frames (memory region)";
	if (!(r->mr = ibv_reg_mr(r->pd, r->mem, r->mem_len, IBV_ACCESS_LOCAL_WRITE)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot create a completion channel";
	if (!(r->channel = ibv_create_comp_channel(r->ctx)))
		return -(errno ? errno : ENOMEM);
	int fl = fcntl(r->channel->fd, F_GETFL);
	if (fl < 0 || fcntl(r->channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	*what = "cannot create the completion queues";
	if (!(r->rx_cq = ibv_create_cq(r->ctx, (int)r->sizes.rx_descs, r, r->channel, 0)) ||
	    !(r->tx_cq = ibv_create_cq(r->ctx, (int)r->sizes.tx_frames, r, NULL, 0)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot create the raw packet queue pair (needs CAP_NET_RAW)";
	struct ibv_qp_init_attr qp_attr = {
		.send_cq = r->tx_cq, .recv_cq = r->rx_cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = r->sizes.tx_frames, .max_recv_wr = r->sizes.rx_descs, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = r->vcfg.tx_max_inline },
	};
	if (!(r->qp = ibv_create_qp(r->pd, &qp_attr)))
		return -(errno ? errno : ENOMEM);
	r->max_inline = qp_attr.cap.max_inline_data < r->vcfg.tx_max_inline ? qp_attr.cap.max_inline_data
									    : r->vcfg.tx_max_inline;
	*what = "cannot bring the queue pair up";
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = r->port };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE | IBV_QP_PORT)))
		return -err;
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE)))
		return -err;
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE)))
		return -err;
	ring_verbs_refill(r);
	if (r->vcfg.cq_moderation)
		ring_verbs_moderate(r, (uint16_t)(r->vcfg.cq_mod_count > 0xffff ? 0xffff : r->vcfg.cq_mod_count),
				    (uint16_t)(r->vcfg.cq_mod_period_us > 0xffff ? 0xffff : r->vcfg.cq_mod_period_us));
	*what = "cannot make the wait fd";
	r->wait_ep = epoll_create1(EPOLL_CLOEXEC);
	r->stash_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wait_ep < 0 || r->stash_fd < 0)
		return -errno;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = r->channel->fd };
	if (epoll_ctl(r->wait_ep, EPOLL_CTL_ADD, r->channel->fd, &ev) < 0)
		return -errno;
	ev.data.fd = r->stash_fd;
	if (epoll_ctl(r->wait_ep, EPOLL_CTL_ADD, r->stash_fd, &ev) < 0)
		return -errno;
	r->base.wait_fd = r->wait_ep;
	return 0;
}

struct ring *ring_verbs_open_why(const char *ifname, unsigned queue, const struct ring_config *cfg, char *why,
				 size_t why_len)
{
	unsigned ifindex = if_nametoindex(ifname);
	struct ring_verbs *r;
	const char *what = "";
	int err;

	why[0] = '\0';
	if (!ifindex) {
		snprintf(why, why_len, "no such interface");
		errno = ENODEV;
		return NULL;
	}
	ring_verbs_process_init(cfg);
	pthread_once(&ring_verbs_atfork_once, ring_verbs_atfork_register);
	r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(why, why_len, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	r->base.ops = &ring_verbs_ops;
	snprintf(r->base.ifname, sizeof(r->base.ifname), "%s", ifname);
	r->base.ifindex = ifindex;
	r->base.queue = queue;
	r->base.wait_fd = -1;
	r->wait_ep = r->stash_fd = -1;
	r->owner = getpid();
	if (cfg)
		r->vcfg = cfg->verbs;
	err = ring_verbs_device_open(ifname, ifindex, &r->ctx, &r->port, why, why_len);
	if (err)
		goto fail;
	ring_read_link(&r->base);
	if (!r->base.mtu)
		r->base.mtu = 1500;
	r->frame_size = RING_VERBS_MIN_FRAME;
	while (r->frame_size < r->base.mtu + 14 + 4 + RING_VERBS_HEADROOM && r->frame_size < RING_VERBS_MAX_FRAME)
		r->frame_size <<= 1;
	if (r->base.mtu + 14 + RING_VERBS_HEADROOM > r->frame_size)
		r->base.mtu = r->frame_size - 14 - RING_VERBS_HEADROOM;
	ring_sizes_compute(cfg, r->frame_size, &r->sizes);
	/* As many frames spare as posted: what sockets hold must not empty
	 * the RQ (under the memory cap the shared sizing may post them all). */
	if (r->sizes.rx_descs > r->sizes.rx_frames / 2)
		r->sizes.rx_descs = r->sizes.rx_frames / 2;
	ring_verbs_clamp(r);
	/* The SQ must hold the unsignalled tail and more. */
	if (r->sizes.tx_batch > r->sizes.tx_frames / 2)
		r->sizes.tx_batch = r->sizes.tx_frames / 2 ? r->sizes.tx_frames / 2 : 1;
	if (r->sizes.rx_batch > r->sizes.rx_descs / 2)
		r->sizes.rx_batch = r->sizes.rx_descs / 2 ? r->sizes.rx_descs / 2 : 1;
	/* An eighth of the RQ, at least two batches: what keep-QP-full keeps
	 * posted whatever the sockets hold (they may hold most of the pool,
	 * docs/ring.md "Receive admission"; dropping whenever the RQ is not
	 * full would drop everything while they do). */
	r->rq_reserve = r->sizes.rx_descs / 8 > 2 * r->sizes.rx_batch ? r->sizes.rx_descs / 8 : 2 * r->sizes.rx_batch;
	if (r->rq_reserve > r->sizes.rx_descs)
		r->rq_reserve = r->sizes.rx_descs;
	err = ring_verbs_create(r, &what);
	if (err) {
		snprintf(why, why_len, "%s: %s", what, strerror(-err));
		goto fail;
	}
	pthread_mutex_lock(&ring_verbs_flows_lock);
	r->next_ring = ring_verbs_rings;
	ring_verbs_rings = r;
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	vlog_debug("ring: %s: verbs ring on %s port %u (%u rx frames, %u rx WQEs, %u tx frames of %u bytes, "
		   "inline up to %u bytes)", ifname, ibv_get_device_name(r->ctx->device), r->port,
		   r->sizes.rx_frames, r->sizes.rx_descs, r->sizes.tx_frames, r->frame_size, r->max_inline);
	return &r->base;
fail:
	ring_verbs_destroy(r);
	errno = -err;
	return NULL;
}

struct ring *ring_verbs_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	char why[192];
	struct ring *ring = ring_verbs_open_why(ifname, queue, cfg, why, sizeof(why));

	if (!ring) {
		int err = errno;
		vlog_warn("ring: %s: verbs backend unavailable (%s); traffic stays on the kernel path", ifname, why);
		errno = err;
	}
	return ring;
}
