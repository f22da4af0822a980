/* The verbs ring backend's packet path: one RAW_PACKET QP of an rdma-core
 * device per ring, with an RX CQ on a completion channel (behind the wait
 * fd), a TX CQ that is only polled and one MR over the frames; the rules
 * are ring_verbs_flow.c's, opening and closing ring_verbs_open.c's.
 * docs/verbs.md describes it; it has run against softverbs
 * (tests/softverbs), never on a NIC.
 *
 * Frames: RX frame i is rx_pool descriptor i and the wr_id of its receive
 * WQE; TX frame j (after the RX frames) is tx_pool descriptor j. A send's
 * wr_id is its SQ slot: a completion returns every slot up to it (the
 * unsignalled ones before it complete with it). Nothing here touches a
 * frame between its post and its completion. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>

#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_flow.h"
#include "ring/ring_verbs.h"

/* ibv_ack_cq_events takes a mutex: acks go in batches. */
#define RING_VERBS_ACK_BATCH 64u

uint64_t ring_verbs_clock_ns(clockid_t clock)
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

const struct ring_buf_pool_ops ring_verbs_rx_pool_ops = { .recycle = ring_verbs_rx_recycle };

/* A TX frame freed without being sent (an error path, a chain's tail). */
static void ring_verbs_tx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_verbs *r = ring_buf_pool_owner(pool);
	if (r)
		r->tx_free[r->tx_free_count++] = (uint32_t)(buf - pool->bufs);
}

const struct ring_buf_pool_ops ring_verbs_tx_pool_ops = { .recycle = ring_verbs_tx_recycle };

/* ---- interrupt moderation ---- */

void ring_verbs_moderate(struct ring_verbs *r, uint16_t count, uint16_t period_us)
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

void ring_verbs_refill(struct ring_verbs *r)
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
	if (posted)
		r->rq_dry_seen = false;
}

/* After a burst: an RQ left with nothing posted and nothing to post (the
 * sockets hold every frame) drops what comes until a frame is freed; the
 * RX pool counts each such time as found empty. */
static void ring_verbs_note_dry(struct ring_verbs *r)
{
	if (r->rq_posted || r->rx_free_count || r->rq_dry_seen)
		return;
	r->rq_dry_seen = true;
	r->rq_dry++;
	ring_buf_pool_count_empty(r->base.rx_pool, 1);
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
			(void)os_efd_read(r->stash_fd, &value);
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
		ring_verbs_note_dry(r);
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
			ring_buf_pool_count_empty(ring->rx_pool, 1);   /* refused: no frame to spare */
			r->base.counters.rx_bytes -= b->len;
			ring_buf_free(b);
		}
		if (r->rx_free_count && r->sizes.rx_descs - r->rq_posted >= r->sizes.rx_batch)
			ring_verbs_refill(r);
		if (!got)
			goto again;   /* all dropped: the CQ may hold more */
	}
	ring->counters.rx_packets += got;
	ring_verbs_note_dry(r);
	ring_verbs_aim(r, now_ns);
	return (int)got;
}

/* ---- send ---- */

/* The doorbell: one ibv_post_send for the chain of queued WRs. With
 * force_signal the last one asks for a completion (closing, or no free
 * frame left), so every frame comes back. */
void ring_verbs_doorbell(struct ring_verbs *r, bool force_signal)
{
	uint32_t depth = r->sizes.tx_frames;

	ring_hold_flushing(&r->hold, ring_hold_now_ns);
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
void ring_verbs_reap(struct ring_verbs *r)
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

static int ring_verbs_tx_send(struct ring *ring, struct ring_buf *buf)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	uint32_t depth = r->sizes.tx_frames;
	int err = 0;

	if (buf->pool != ring->tx_pool)
		err = -EINVAL;
	else if (buf->next)
		err = ring_buf_linearize(buf);
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

static void ring_verbs_tx_send_done(struct ring *ring, bool more)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	/* The adaptive doorbell of docs/ring.md, as the xdp backend's. */
	if (ring_hold_send_done(&r->hold, ring_hold_now_ns(), r->sq_queued != 0, more, &ring->counters.tx_held)) {
		ring_verbs_tx_flush(ring);
		ring_hold_rang(&r->hold, ring_hold_now_ns());
	}
}

static unsigned ring_verbs_tx_pending(const struct ring *ring)
{
	return ((const struct ring_verbs *)ring)->sq_queued;
}

/* ---- sleeping ---- */

void ring_verbs_ack_events(struct ring_verbs *r)
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
		if (!r->stash_signaled && os_efd_write(r->stash_fd, 1) == 0)
			r->stash_signaled = true;
		return 1;
	}
	return 0;
}

static void ring_verbs_read_counters(struct ring *ring, struct ring_counters *out)
{
	*out = ring->counters;
	out->rx_fill_empty = ring_verbs_of(ring)->rq_dry;
	out->tx_stranded = ring_hold_strandings(&ring_verbs_of(ring)->hold);
}

const struct ring_ops ring_verbs_ops = {
	.name = "verbs",
	.rx_burst = ring_verbs_rx_burst,
	.tx_alloc = ring_verbs_tx_alloc,
	.tx_send = ring_verbs_tx_send,
	.tx_flush = ring_verbs_tx_flush,
	.tx_send_done = ring_verbs_tx_send_done,
	.tx_pending = ring_verbs_tx_pending,
	.attach_flow = ring_verbs_attach_flow,
	.detach_flow = ring_verbs_detach_flow,
	.forget_flow = ring_verbs_forget_flow,
	.share_admit = ring_verbs_share_admit,
	.wait_arm = ring_verbs_wait_arm,
	.read_counters = ring_verbs_read_counters,
	.close = ring_verbs_close,
	.forget = ring_verbs_forget,
};

