/* The records of what is in flight: one per transmitted segment, from
 * snd_una to snd_max in sequence order, with the time of its latest
 * transmission and whether it was SACKed, deemed lost or resent. RACK
 * (tcp_rack.c) reads them in order of transmission: the records in flight
 * are also linked oldest first, and a resent record moves to the end of
 * that list, as Linux's tsorted_sent_queue. The send buffer stays a flat
 * byte ring; these records only describe how it was cut.
 *
 * The ring is sized from the send buffer (a record per 512 bytes, at
 * least 64): when it is full, no new data leaves until an ACK frees some,
 * as Linux's per-skb memory charge bounds tiny segments in flight. */
#include "stack/tcp_priv.h"

#include <stdlib.h>
#include <string.h>

static uint32_t txq_cap_for(uint32_t sbuf_size)
{
	uint32_t want = sbuf_size / 512u, cap = 64;
	while (cap < want && cap < TCP_TXQ_MAX)
		cap <<= 1;
	return cap;
}

bool tcp_txq_init(struct tcp_txq *q, uint32_t sbuf_size)
{
	memset(q, 0, sizeof(*q));
	q->thead = q->ttail = TCP_TXQ_NONE;
	uint32_t cap = txq_cap_for(sbuf_size);
	q->seg = malloc(cap * sizeof(*q->seg));
	if (!q->seg)
		return false;
	q->mask = cap - 1;
	return true;
}

void tcp_txq_free(struct tcp_txq *q)
{
	free(q->seg);
	q->seg = NULL;
	q->count = 0;
	q->thead = q->ttail = TCP_TXQ_NONE;
	q->lost_bytes = q->lost_segs = q->sacked_segs = 0;
}

static uint16_t txq_index(const struct tcp_txq *q, const struct tcp_txseg *r)
{
	return (uint16_t)(r - q->seg);
}

/* i: r's index, when the caller knows it (no division by the record size). */
static void link_tail_at(struct tcp_txq *q, struct tcp_txseg *r, uint16_t i)
{
	r->tnext = TCP_TXQ_NONE;
	r->tprev = q->ttail;
	if (q->ttail != TCP_TXQ_NONE)
		q->seg[q->ttail].tnext = i;
	else
		q->thead = i;
	q->ttail = i;
}

static void link_tail(struct tcp_txq *q, struct tcp_txseg *r)
{
	link_tail_at(q, r, txq_index(q, r));
}

static void txq_unlink(struct tcp_txq *q, struct tcp_txseg *r)
{
	if (r->tprev == TCP_TXQ_NONE && q->thead != txq_index(q, r))
		return;   /* not on the list */
	if (r->tprev != TCP_TXQ_NONE)
		q->seg[r->tprev].tnext = r->tnext;
	else
		q->thead = r->tnext;
	if (r->tnext != TCP_TXQ_NONE)
		q->seg[r->tnext].tprev = r->tprev;
	else
		q->ttail = r->tprev;
	r->tprev = r->tnext = TCP_TXQ_NONE;
}

static bool on_list(const struct tcp_txq *q, const struct tcp_txseg *r)
{
	return r->tprev != TCP_TXQ_NONE || q->thead == txq_index(q, r);
}

bool tcp_txq_resize(struct tcp_txq *q, uint32_t sbuf_size)
{
	uint32_t cap = txq_cap_for(sbuf_size);
	if (!q->seg || cap == q->mask + 1 || cap < q->count)
		return false;
	struct tcp_txseg *ns = malloc(cap * sizeof(*ns));
	if (!ns)
		return false;
	/* Records move to [0, count): every link is renumbered the same way. */
	for (uint32_t k = 0; k < q->count; k++) {
		struct tcp_txseg r = *tcp_txq_at(q, k);
		if (r.tprev != TCP_TXQ_NONE)
			r.tprev = (uint16_t)((r.tprev - q->head) & q->mask);
		if (r.tnext != TCP_TXQ_NONE)
			r.tnext = (uint16_t)((r.tnext - q->head) & q->mask);
		ns[k] = r;
	}
	if (q->thead != TCP_TXQ_NONE) {
		q->thead = (uint16_t)((q->thead - q->head) & q->mask);
		q->ttail = (uint16_t)((q->ttail - q->head) & q->mask);
	}
	free(q->seg);
	q->seg = ns;
	q->mask = cap - 1;
	q->head = 0;
	return true;
}

uint32_t tcp_txq_find(const struct tcp_txq *q, uint32_t seq)
{
	uint32_t lo = 0, hi = q->count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (SEQ_GT(tcp_txq_at(q, mid)->end, seq))
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void clear_lost(struct tcp_txq *q, struct tcp_txseg *r)
{
	if (!(r->flags & TCP_TXSEG_LOST))
		return;
	VMA_ASSERT(q->lost_segs > 0 && q->lost_bytes >= r->end - r->start);
	r->flags &= (uint8_t)~TCP_TXSEG_LOST;
	q->lost_bytes -= r->end - r->start;
	q->lost_segs--;
}

void tcp_txq_mark_lost(struct tcp_pcb *pcb, struct tcp_txseg *r)
{
	struct tcp_txq *q = &pcb->txq;
	if (r->flags & (TCP_TXSEG_LOST | TCP_TXSEG_SACKED))
		return;
	txq_unlink(q, r);
	r->flags |= TCP_TXSEG_LOST;
	q->lost_bytes += r->end - r->start;
	q->lost_segs++;
	uint32_t off = (txq_index(q, r) - q->head) & q->mask;
	if (off < q->lost_hint)
		q->lost_hint = off;
	if (r->flags & TCP_TXSEG_RETRANS)
		pcb->ctx->cnt.tx_lost_rexmits++;
}

void tcp_txq_mark_sacked(struct tcp_txq *q, struct tcp_txseg *r)
{
	if (r->flags & TCP_TXSEG_SACKED)
		return;
	clear_lost(q, r);
	txq_unlink(q, r);
	r->flags |= TCP_TXSEG_SACKED;
	q->sacked_segs++;
}

static void append(struct tcp_pcb *pcb, uint32_t start, uint32_t end, bool fin, uint32_t now)
{
	struct tcp_txq *q = &pcb->txq;
	VMA_ASSERT(q->count <= q->mask);   /* callers check tcp_txq_room */
	if (q->count > q->mask)
		return;   /* never overwrite */
	/* the records cover [snd_una, snd_max) without gaps */
	VMA_ASSERT(!q->count || tcp_txq_at(q, q->count - 1)->end == start);
	uint16_t i = (uint16_t)((q->head + q->count++) & q->mask);
	struct tcp_txseg *r = &q->seg[i];
	r->start = start;
	r->end = end;
	r->xmit_us = now;
	r->order = ++q->order;
	r->flags = fin ? TCP_TXSEG_FIN : 0;
	tcp_rate_stamp(pcb, r, now);
	link_tail_at(q, r, i);
}

/* A retransmission: each record it touches was sent again now. Out of
 * line, so the path of new data (tcp_txq_sent) saves no registers for it. */
static __attribute__((noinline)) void txq_resent(struct tcp_pcb *pcb, uint32_t start, uint32_t end, bool fin,
						   uint32_t now)
{
	struct tcp_txq *q = &pcb->txq;
	/* It may reach past snd_max (cut on other boundaries after an RTO):
	 * the new part gets its record, after the resent ones in order of
	 * transmission. */
	uint32_t resent_end = SEQ_GT(end, pcb->snd_max) ? pcb->snd_max : end;
	for (uint32_t k = tcp_txq_find(q, start); k < q->count; k++) {
		struct tcp_txseg *r = tcp_txq_at(q, k);
		if (!SEQ_LT(r->start, resent_end))
			break;
		if (r->flags & TCP_TXSEG_SACKED)
			continue;
		clear_lost(q, r);
		r->flags = (uint8_t)((r->flags & ~(TCP_TXSEG_PROBE | TCP_TXSEG_APP_LIMITED)) | TCP_TXSEG_RETRANS);
		r->xmit_us = now;
		tcp_rate_stamp(pcb, r, now);
		r->order = ++q->order;
		if (on_list(q, r))
			txq_unlink(q, r);
		link_tail(q, r);
	}
	if (resent_end != end)
		append(pcb, resent_end, end, fin, now);
}

void tcp_txq_sent(struct tcp_pcb *pcb, uint32_t start, uint32_t end, bool fin)
{
	struct tcp_txq *q = &pcb->txq;
	uint32_t now = (uint32_t)pcb->ctx->now_us;
	if (!q->seg)
		return;
	if (SEQ_GEQ(start, pcb->snd_max)) {
		append(pcb, start, end, fin, now);
		return;
	}
	txq_resent(pcb, start, end, fin, now);
}

void tcp_txq_rto_reset(struct tcp_pcb *pcb)
{
	struct tcp_txq *q = &pcb->txq;
	q->thead = q->ttail = TCP_TXQ_NONE;
	q->lost_bytes = q->lost_segs = q->sacked_segs = 0;
	q->lost_hint = 0;
	for (uint32_t k = 0; k < q->count; k++) {
		struct tcp_txseg *r = tcp_txq_at(q, k);
		r->flags &= (uint8_t)~TCP_TXSEG_LOST;
		uint32_t run_end;
		if ((r->flags & TCP_TXSEG_SACKED) && pcb->nsacked && tcp_sack_is_sacked(pcb, r->start, &run_end) &&
		    SEQ_GEQ(run_end, r->end)) {
			q->sacked_segs++;
			r->tprev = r->tnext = TCP_TXQ_NONE;
			continue;
		}
		r->flags &= (uint8_t)~TCP_TXSEG_SACKED;
		link_tail(q, r);
	}
}

void tcp_txq_pop(struct tcp_txq *q)
{
	VMA_ASSERT(q->count > 0 && q->head <= q->mask);
	struct tcp_txseg *r = tcp_txq_at(q, 0);
	clear_lost(q, r);
	if (r->flags & TCP_TXSEG_SACKED)
		q->sacked_segs--;
	txq_unlink(q, r);
	q->head = (q->head + 1) & q->mask;
	q->count--;
	if (q->lost_hint)
		q->lost_hint--;
}

void tcp_txq_trim(struct tcp_txq *q, uint32_t una)
{
	struct tcp_txseg *r = tcp_txq_at(q, 0);
	if (!SEQ_GT(una, r->start))
		return;
	if (r->flags & TCP_TXSEG_LOST)
		q->lost_bytes -= una - r->start;
	r->start = una;
}
