/* Loss detection and the window in recovery, as Linux does them:
 * - RACK (RFC 8985 section 6): a segment is lost once a segment sent after
 *   it was delivered (cumulatively or selectively acknowledged) and a
 *   reordering window has passed since that one's round trip; the window
 *   is min_rtt / 4 (0 while no reordering was seen and DupThresh segments
 *   are SACKed, or in recovery), widened by a step per round that brings a
 *   D-SACK for data we resent, back to one step after 16 recoveries;
 * - TLP (RFC 8985 section 7, Linux's timing): with data out and no ACK for
 *   PTO = 2 * srtt + 2 ms (+ rto_min when one segment is out, for the
 *   peer's delayed ACK), bounded by the RTO, one segment (new data, else the
 *   last one sent) draws an ACK or SACK that lets RACK see a lost tail; a
 *   loss the probe repaired alone still reduces cwnd once;
 * - PRR (RFC 6937, as Linux's tcp_cwnd_reduction): in recovery, cwnd
 *   follows what the ACKs deliver so the window comes down to ssthresh
 *   evenly over one round trip instead of stopping at once.
 * RACK needs SACK: without it, three duplicate ACKs (or early retransmit)
 * start recovery and partial ACKs mark the next segment lost (NewReno). */
#include "stack/tcp_priv.h"

#include <string.h>

#define TCP_RACK_DUPTHRESH 3u
#define TCP_RACK_PERSIST   16u      /* recoveries a widened window lasts */
#define TCP_TLP_SLACK_US   2000u    /* Linux's TCP_TIMEOUT_MIN: timer slack of the probe */
#define TCP_TLP_NO_RTT_US  1000000u /* no RTT sample yet: Linux's TCP_TIMEOUT_INIT */

/* Transmission o1 left after o2 (RFC 8985's RACK_sent_after: the
 * records count transmissions, so no tie on the clock needs the sequence
 * numbers to break it). */
static bool sent_after(uint32_t o1, uint32_t o2)
{
	return (int32_t)(o1 - o2) > 0;
}

static uint32_t min_rtt_us(const struct tcp_pcb *pcb)
{
	if (pcb->min_rtt_us != UINT32_MAX)
		return pcb->min_rtt_us;
	return pcb->min_rtt_ms != UINT32_MAX ? pcb->min_rtt_ms * 1000u : 0;
}

static uint32_t srtt_us(const struct tcp_pcb *pcb)
{
	return pcb->srtt_us ? pcb->srtt_us : pcb->srtt_ms * 1000u;
}

void tcp_rack_init(struct tcp_pcb *pcb)
{
	memset(&pcb->rack, 0, sizeof(pcb->rack));
	pcb->rack.reo_wnd_mult = 1;
	pcb->rack.fack = pcb->snd_una;
}

/* The latest-sent segment one ACK delivered (RFC 8985 6.2 step 2). The
 * fields are filled one by one and xmit_us and order kept apart: a struct
 * stored in pieces and read back whole stalls the CPU's store forwarding. */
struct rack_acc {
	bool any;
	uint32_t xmit_us, rtt_us, order;
};

static inline void rack_delivered(struct tcp_pcb *pcb, struct rack_acc *acc, const struct tcp_txseg *r)
{
	struct tcp_rack *k = &pcb->rack;
	uint32_t rtt = (uint32_t)pcb->ctx->now_us - r->xmit_us;
	pcb->delivered_segs++;
	/* step 3: delivered below the highest delivered without having been
	 * resent, so the network reordered it */
	if (SEQ_GT(r->end, k->fack))
		k->fack = r->end;
	else if (SEQ_LT(r->end, k->fack) && !(r->flags & TCP_TXSEG_RETRANS)) {
		k->reordering_seen = true;
		pcb->reord_seen++;   /* per segment (Linux counts per ACK that shows some) */
	}
	tcp_rate_delivered(pcb, r, r->flags & TCP_TXSEG_RETRANS ? -1 : (int32_t)rtt);
	if (r->flags & TCP_TXSEG_RETRANS) {
		/* The ACK may be for an earlier transmission when it came too
		 * fast for this one (Linux's tcp_rack_advance: under min_rtt).
		 * A tail loss probe is exempt: its original left at least a PTO
		 * (2 * srtt + 2 ms) before it, so an ACK of the original would
		 * have come before the probe was sent. Our min_rtt is no true
		 * floor either: it is sampled on the busy connection (our clock
		 * is read once per poll pass, the frames queue behind a burst),
		 * and a probe on the idle path after a burst was answered in
		 * 16-20 us where min_rtt said 38-60 (tcp_wire, 9708): with the
		 * old min_rtt / 2 bound its SACK was ignored and the lost tail
		 * waited for the RTO instead of RACK. RFC 8985 also has the
		 * echoed timestamp decide, but a receiver echoes the last
		 * in-order segment's TSval (RFC 7323 4.3), never the one of a
		 * retransmission that arrived above a hole: that rule would hide
		 * every tail loss probe from RACK. */
		if (!(r->flags & TCP_TXSEG_PROBE) && rtt < min_rtt_us(pcb))
			return;
	} else if (rtt && rtt < pcb->min_rtt_us) {
		pcb->min_rtt_us = rtt;
	}
	if (!acc->any || sent_after(r->order, acc->order)) {
		acc->any = true;
		acc->xmit_us = r->xmit_us;
		acc->rtt_us = rtt;
		acc->order = r->order;
	}
}

/* The records newly SACKed, in sequence order: a record counts once the
 * scoreboard covers all of it. Out of line: the cumulative ACK's path
 * (tcp_rack_on_ack) saves no registers for these loops. */
static __attribute__((noinline)) void rack_on_sack(struct tcp_pcb *pcb, struct rack_acc *acc,
						   const struct tcp_range *newly, unsigned nnew)
{
	struct tcp_txq *q = &pcb->txq;
	for (unsigned i = 0; i < nnew; i++) {
		uint32_t s = SEQ_LT(newly[i].start, pcb->snd_una) ? pcb->snd_una : newly[i].start, e = newly[i].end;
		for (uint32_t off = SEQ_LT(s, e) ? tcp_txq_find(q, s) : q->count; off < q->count; off++) {
			struct tcp_txseg *r = tcp_txq_at(q, off);
			uint32_t run_end;
			if (!SEQ_LT(r->start, e))
				break;
			if (r->flags & TCP_TXSEG_SACKED)
				continue;
			if ((SEQ_LT(r->start, s) || SEQ_GT(r->end, e)) &&
			    !(tcp_sack_is_sacked(pcb, r->start, &run_end) && SEQ_GEQ(run_end, r->end)))
				continue;
			tcp_txq_mark_sacked(q, r);
			rack_delivered(pcb, acc, r);
		}
	}
}

void tcp_rack_on_ack(struct tcp_pcb *pcb, const struct tcp_range *newly, unsigned nnew)
{
	struct tcp_txq *q = &pcb->txq;
	struct tcp_rack *k = &pcb->rack;
	struct rack_acc acc;
	acc.any = false;
	acc.xmit_us = acc.rtt_us = acc.order = 0;   /* read only once any is set */
	if (!q->seg)
		return;
	/* cumulatively acknowledged: lowest first, as step 3 wants */
	while (q->count && SEQ_LEQ(tcp_txq_at(q, 0)->end, pcb->snd_una)) {
		struct tcp_txseg *r = tcp_txq_at(q, 0);
		if (!(r->flags & TCP_TXSEG_SACKED))
			rack_delivered(pcb, &acc, r);
		tcp_txq_pop(q);
	}
	if (q->count)
		tcp_txq_trim(q, pcb->snd_una);
	if (nnew)
		rack_on_sack(pcb, &acc, newly, nnew);
	if (!acc.any)
		return;
	k->rtt_us = acc.rtt_us;
	if (!k->have || sent_after(acc.order, k->order)) {
		k->xmit_us = acc.xmit_us;
		k->order = acc.order;
		k->have = true;
	}
}

/* The reduction of the last recovery was needless: back to the window
 * before it (Linux's tcp_undo_cwnd_reduction: the larger cwnd and
 * ssthresh). */
static void tcp_undo_reduction(struct tcp_pcb *pcb)
{
	pcb->undo_armed = false;
	if (pcb->cc_algo == TCP_CC_NONE)
		return;
	if (pcb->cwnd < pcb->prior_cwnd)
		pcb->cwnd = pcb->prior_cwnd;
	if (pcb->ssthresh < pcb->prior_ssthresh)
		pcb->ssthresh = pcb->prior_ssthresh;
	pcb->bytes_acked_ca = 0;
	pcb->ctx->cnt.tx_dsack_undos++;
}

/* A D-SACK below prior_una and above the undo marker counts as one
 * retransmission proven needless, whichever copy it reports (Linux's
 * "dumb counting" in tcp_check_dsack). Out of recovery the undo comes at
 * once; in recovery at its end (tcp_recovery_exit). */
static void tcp_undo_dsack(struct tcp_pcb *pcb, const struct tcp_range *d, uint32_t prior_una)
{
	if (!pcb->undo_armed || pcb->undo_retrans <= 0 || SEQ_GT(d->end, prior_una) ||
	    !SEQ_GT(d->end, pcb->undo_marker))
		return;
	int32_t segs = (int32_t)((d->end - d->start + pcb->mss - 1) / pcb->mss);
	pcb->undo_retrans = pcb->undo_retrans > segs ? pcb->undo_retrans - segs : 0;
	if (!pcb->undo_retrans && !pcb->in_recovery && !pcb->in_loss)
		tcp_undo_reduction(pcb);
}

void tcp_rack_dsack(struct tcp_pcb *pcb, const struct tcp_range *d, uint32_t prior_una)
{
	struct tcp_rack *k = &pcb->rack;
	pcb->ctx->cnt.rx_dsacks++;
	pcb->dsack_dups += (d->end - d->start + pcb->mss - 1) / pcb->mss;
	tcp_undo_dsack(pcb, d, prior_una);
	/* A duplicate of a probe, or more duplicates than we ever resent (the
	 * network duplicates too), says nothing about reordering (as Linux). */
	if (pcb->tlp_high && pcb->tlp_retrans && d->end == pcb->tlp_high)
		return;
	pcb->dsack_bytes += d->end - d->start;
	if (pcb->dsack_bytes > pcb->bytes_retrans)
		return;
	/* RFC 8985 6.2 step 4: one step wider per round trip with D-SACKs */
	if (k->dsack_round_on)
		return;
	k->dsack_round_on = true;
	k->dsack_round = pcb->snd_max;
	if (k->reo_wnd_mult < 255)
		k->reo_wnd_mult++;
	k->reo_wnd_persist = TCP_RACK_PERSIST;
}

uint32_t tcp_rack_reo_wnd_us(const struct tcp_pcb *pcb)
{
	const struct tcp_rack *k = &pcb->rack;
	if (!k->reordering_seen &&
	    (pcb->in_recovery || pcb->in_loss || pcb->txq.sacked_segs >= TCP_RACK_DUPTHRESH))
		return 0;
	uint64_t w = (uint64_t)k->reo_wnd_mult * min_rtt_us(pcb) / 4u;
	uint32_t cap = srtt_us(pcb);
	return w < cap ? (uint32_t)w : cap;
}

uint32_t tcp_rack_detect_loss_walk(struct tcp_pcb *pcb)
{
	struct tcp_txq *q = &pcb->txq;
	const struct tcp_rack *k = &pcb->rack;
	pcb->rack_at = 0;
	/* nothing in flight sent before RACK's segment (every ACK of a
	 * ping-pong, of an in-order bulk flow): nothing to look at */
	if (!q->seg || !k->have || q->thead == TCP_TXQ_NONE || !sent_after(k->order, q->seg[q->thead].order))
		return 0;
	uint32_t reo = tcp_rack_reo_wnd_us(pcb), now = (uint32_t)pcb->ctx->now_us, n = 0;
	int64_t wait = 0;
	/* Oldest transmission first; the first one not sent before the RACK
	 * segment ends the walk (the rest left later). */
	for (uint16_t i = q->thead; i != TCP_TXQ_NONE;) {
		struct tcp_txseg *r = &q->seg[i];
		i = r->tnext;
		if (!sent_after(k->order, r->order))
			break;
		int64_t remaining = (int64_t)(int32_t)(r->xmit_us - now) + k->rtt_us + reo;
		if (remaining <= 0) {
			tcp_txq_mark_lost(pcb, r);
			n++;
		} else if (remaining > wait) {
			wait = remaining;
		}
	}
	if (wait)
		pcb->rack_at = tcp_deadline(pcb->ctx, pcb->ctx->now_ms + (uint64_t)(wait + 999) / 1000u);
	pcb->ctx->cnt.tx_rack_lost += n;
	return n;
}

uint32_t tcp_recovery_pipe(const struct tcp_pcb *pcb)
{
	uint32_t flight = pcb->snd_max - pcb->snd_una;
	uint32_t out = pcb->sack_ok ? tcp_sack_bytes(pcb) : tcp_min32(flight, pcb->dupacks * pcb->mss);
	out += pcb->txq.lost_bytes;
	return flight > out ? flight - out : 0;
}

void tcp_recovery_enter(struct tcp_pcb *pcb)
{
	pcb->ctx->cnt.tx_fast_retransmits++;
	pcb->in_recovery = true;
	pcb->recover = pcb->snd_max;
	pcb->prior_cwnd = pcb->cwnd;
	pcb->prr_delivered = pcb->prr_out = 0;
	pcb->prior_ssthresh = pcb->ssthresh;
	pcb->undo_armed = true;
	pcb->undo_marker = pcb->snd_una;
	pcb->undo_retrans = -1;
	tcp_cc_set_ssthresh(pcb);
	if (pcb->ecn_ok)
		pcb->ecn_queue_cwr = true;   /* the window is being reduced: tell an ECN peer */
	pcb->rtt_timing = false;
	pcb->tlp_at = 0;                  /* no probe in recovery */
	pcb->tlp_high = 0;
	/* until an ACK delivers something: the first retransmission only */
	if (pcb->cc_algo == TCP_CC_BBR)
		tcp_bbr_recovery_enter(pcb);
	else if (pcb->cc_algo != TCP_CC_NONE)
		pcb->cwnd = tcp_recovery_pipe(pcb) + pcb->mss;
}

void tcp_recovery_exit(struct tcp_pcb *pcb)
{
	struct tcp_rack *k = &pcb->rack;
	pcb->in_recovery = false;
	pcb->dupacks = 0;
	if (pcb->cc_algo == TCP_CC_NONE)
		tcp_cc_init(pcb);
	else if (pcb->cc_algo == TCP_CC_BBR)
		tcp_bbr_restore_cwnd(pcb);
	else
		pcb->cwnd = pcb->ssthresh;   /* PRR's end (Linux's tcp_end_cwnd_reduction) */
	if (pcb->undo_armed && !pcb->undo_retrans)
		tcp_undo_reduction(pcb);     /* every retransmission D-SACKed */
	if (k->reo_wnd_persist)
		k->reo_wnd_persist--;
	if (!k->reo_wnd_persist)
		k->reo_wnd_mult = 1;   /* 16 recoveries without a D-SACK round */
}

void tcp_prr_ack(struct tcp_pcb *pcb, uint32_t delivered, uint32_t newly_lost, bool una_advanced)
{
	if (!delivered || pcb->cc_algo == TCP_CC_NONE || !pcb->prior_cwnd)
		return;
	pcb->prr_delivered += delivered;
	uint32_t pipe = tcp_recovery_pipe(pcb);
	int64_t sndcnt;
	if (pipe > pcb->ssthresh) {
		/* proportional: ssthresh / prior_cwnd of what was delivered */
		uint64_t share = ((uint64_t)pcb->ssthresh * pcb->prr_delivered + pcb->prior_cwnd - 1) / pcb->prior_cwnd;
		sndcnt = (int64_t)share - pcb->prr_out;
	} else {
		/* slow start back up to ssthresh, bounded by what was delivered
		 * (the reduction bound; one more segment on a cumulative ACK) */
		int64_t bound = (int64_t)pcb->prr_delivered - pcb->prr_out;
		if (bound < (int64_t)delivered)
			bound = delivered;
		if (una_advanced && !newly_lost)
			bound += pcb->mss;
		sndcnt = (int64_t)(pcb->ssthresh - pipe);
		if (bound < sndcnt)
			sndcnt = bound;
	}
	/* the first ACK of recovery always lets the first retransmission go */
	if (!pcb->prr_out && sndcnt < (int64_t)pcb->mss)
		sndcnt = pcb->mss;
	pcb->cwnd = pipe + (uint32_t)(sndcnt > 0 ? sndcnt : 0);
}

void tcp_rack_timeout(struct tcp_pcb *pcb)
{
	pcb->rack_at = 0;
	switch (pcb->state) {
	case TCP_ESTABLISHED: case TCP_CLOSE_WAIT: case TCP_FIN_WAIT_1: case TCP_CLOSING:
	case TCP_LAST_ACK:
		break;
	default:
		return;
	}
	uint32_t n = tcp_rack_detect_loss(pcb);
	if (!n)
		return;
	if (!pcb->in_recovery && !pcb->in_loss) {
		tcp_recovery_enter(pcb);
		tcp_prr_ack(pcb, pcb->mss, n, false);
	}
	tcp_output(pcb);
}

/* ---- tail loss probe ---- */

void tcp_arm_tlp(struct tcp_pcb *pcb)
{
	pcb->tlp_at = 0;
	switch (pcb->state) {
	case TCP_ESTABLISHED: case TCP_CLOSE_WAIT: case TCP_FIN_WAIT_1: case TCP_CLOSING:
	case TCP_LAST_ACK:
		break;
	default:
		return;
	}
	/* As Linux: SACK peers only, not in recovery or after an RTO, one probe
	 * per episode */
	if (!pcb->sack_ok || pcb->tlp_high || pcb->in_recovery || pcb->in_loss || pcb->backoff ||
	    pcb->snd_una == pcb->snd_max || !pcb->rto_at)
		return;
	uint64_t pto_us;
	uint32_t srtt = srtt_us(pcb);
	if (srtt) {
		bool one = pcb->txq.seg ? pcb->txq.count == 1 : pcb->snd_max - pcb->snd_una <= pcb->mss;
		pto_us = 2ull * srtt + (one ? pcb->ctx->set.rto_min_ms * 1000ull : TCP_TLP_SLACK_US);
	} else {
		pto_us = TCP_TLP_NO_RTT_US;
	}
	uint64_t at = pcb->ctx->now_ms + (pto_us + 999) / 1000u;
	if (at > pcb->rto_at)
		at = pcb->rto_at;   /* the probe takes the RTO's place, as Linux */
	pcb->tlp_at = tcp_deadline(pcb->ctx, at);
}

/* After a probe the RTO counts from the oldest segment's latest
 * transmission (Linux's tcp_rearm_rto from the probe timer). */
static void rearm_rto_after_probe(struct tcp_pcb *pcb)
{
	struct tcp_txq *q = &pcb->txq;
	if (!q->seg || !q->count) {
		tcp_arm_rto(pcb);
		return;
	}
	uint32_t age_ms = ((uint32_t)pcb->ctx->now_us - tcp_txq_at(q, 0)->xmit_us) / 1000u;
	tcp_arm_rto(pcb);
	uint64_t at = pcb->rto_at > age_ms ? pcb->rto_at - age_ms : 0;
	if (at <= pcb->ctx->now_ms)
		at = pcb->ctx->now_ms + 1;
	pcb->rto_at = tcp_deadline(pcb->ctx, at);
}

void tcp_tlp_fire(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	uint32_t seg_max = tcp_seg_max(pcb);

	pcb->tlp_at = 0;
	if (pcb->in_recovery || pcb->in_loss || pcb->snd_una == pcb->snd_max || !pcb->rto_at)
		return;
	if (pcb->tlp_high) {
		rearm_rto_after_probe(pcb);
		return;
	}
	pcb->tlp_retrans = false;
	uint32_t wnd_edge = pcb->snd_una + pcb->snd_wnd;
	bool sent = false;
	/* new data first (it tells more), whatever cwnd says */
	if (pcb->snd_nxt == pcb->snd_max && SEQ_LT(pcb->snd_nxt, data_end) && !pcb->fin_sent &&
	    SEQ_GT(wnd_edge, pcb->snd_nxt) && tcp_txq_room(&pcb->txq)) {
		uint32_t seq = pcb->snd_nxt;
		uint32_t len = tcp_min32(tcp_min32(data_end - seq, seg_max), wnd_edge - seq);
		/* PSH: the probe is there to bring an ACK, and a Linux receiver
		 * ACKs a full-sized pushed segment as soon as its reader takes
		 * it; unpushed, a lone in-order segment waits for its delayed
		 * ACK (40 ms), which is what a flight whose only ACK was lost
		 * then costs (the rest arrived: nothing for a SACK to report). */
		if (tcp_send_segment(pcb, seq, len, TCP_PSH) == 0) {
			pcb->snd_nxt = pcb->snd_max = seq + len;
			if (len < seg_max)
				pcb->snd_sml = pcb->snd_nxt;
			sent = true;
		}
	}
	if (!sent) {
		/* else the last segment sent again */
		pcb->rtt_timing = false;   /* Karn */
		struct tcp_txq *q = &pcb->txq;
		const struct tcp_txseg *last = q->seg && q->count ? tcp_txq_at(q, q->count - 1) : NULL;
		if (last && (last->flags & TCP_TXSEG_FIN)) {
			sent = tcp_send_segment(pcb, data_end, 0, TCP_FIN) == 0;
		} else {
			uint32_t sent_end = last ? last->end : (pcb->fin_sent ? data_end : pcb->snd_max);
			if (SEQ_GT(sent_end, pcb->snd_una)) {
				uint32_t len = tcp_min32(sent_end - pcb->snd_una, seg_max);
				sent = tcp_send_segment(pcb, sent_end - len, len, TCP_PSH) == 0;
			} else if (pcb->fin_sent) {
				sent = tcp_send_segment(pcb, data_end, 0, TCP_FIN) == 0;
			}
		}
		pcb->tlp_retrans = sent;
		/* the probe is the latest transmission of the last record */
		if (sent && q->seg && q->count)
			tcp_txq_at(q, q->count - 1)->flags |= TCP_TXSEG_PROBE;
	}
	if (sent) {
		pcb->tlp_high = pcb->snd_nxt;
		ctx->cnt.tx_tail_probes++;
	}
	rearm_rto_after_probe(pcb);
}

void tcp_tlp_ack(struct tcp_pcb *pcb, uint32_t ack, bool una_advanced, bool dsack_tlp, bool not_dup)
{
	if (!pcb->tlp_high || SEQ_LT(ack, pcb->tlp_high))
		return;
	if (!pcb->tlp_retrans || dsack_tlp) {
		pcb->tlp_high = 0;   /* new data probed, or both copies arrived: no loss */
	} else if (SEQ_GT(ack, pcb->tlp_high)) {
		/* the probe repaired a loss: one reduction, as a recovery would */
		pcb->tlp_high = 0;
		if (pcb->cc_algo != TCP_CC_NONE && pcb->cc_algo != TCP_CC_BBR) {
			tcp_cc_set_ssthresh(pcb);
			pcb->cwnd = pcb->ssthresh;
		}
		if (pcb->ecn_ok)
			pcb->ecn_queue_cwr = true;
		pcb->ctx->cnt.tx_tlp_recoveries++;
	} else if (!una_advanced && !not_dup) {
		pcb->tlp_high = 0;   /* a pure duplicate ACK: both arrived */
	}
}
