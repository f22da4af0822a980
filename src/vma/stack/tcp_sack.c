/* SACK (RFC 2018): the sender's scoreboard of what the peer holds above
 * snd_una, and the receiver's out-of-order queue with the blocks it reports.
 * The out-of-order queue is bounded by buffer memory (ring_buf.size), so a
 * peer spraying tiny segments cannot pin more than ooo_max_bytes. */
#include "stack/tcp_priv.h"

#include <string.h>

/* ---- sender scoreboard: sorted, disjoint ranges above snd_una ---- */

/* Adds [start, end); the parts not covered before go to newly (while
 * *nnew < max), lowest first. */
static void scoreboard_add(struct tcp_pcb *pcb, uint32_t start, uint32_t end, struct tcp_range *newly,
			   unsigned *nnew, unsigned max)
{
	struct tcp_range *r = pcb->sacked;
	unsigned n = pcb->nsacked, i = 0;

	while (i < n && SEQ_LT(r[i].end, start))
		i++;
	/* what this block adds: the gaps between the ranges it touches */
	unsigned nnew_before = *nnew;
	uint32_t at = start;
	for (unsigned k = i; k < n && SEQ_LT(r[k].start, end) && SEQ_LT(at, end); k++) {
		if (SEQ_LT(at, r[k].start) && *nnew < max)
			newly[(*nnew)++] = (struct tcp_range){ at, r[k].start };
		if (SEQ_GT(r[k].end, at))
			at = r[k].end;
	}
	if (SEQ_LT(at, end) && *nnew < max)
		newly[(*nnew)++] = (struct tcp_range){ at, end };
	/* merge every range touching [start, end) into slot i */
	unsigned j = i;
	while (j < n && SEQ_LEQ(r[j].start, end)) {
		if (SEQ_LT(r[j].start, start))
			start = r[j].start;
		if (SEQ_GT(r[j].end, end))
			end = r[j].end;
		j++;
	}
	if (j == i) {
		if (n == TCP_SCOREBOARD_MAX) {
			*nnew = nnew_before;   /* not kept after all */
			return;   /* full: the sender just retransmits a bit more */
		}
		memmove(r + i + 1, r + i, (n - i) * sizeof(*r));
		n++;
	} else if (j > i + 1) {
		memmove(r + i + 1, r + j, (n - j) * sizeof(*r));
		n -= j - i - 1;
	}
	r[i].start = start;
	r[i].end = end;
	pcb->nsacked = n;
}

void tcp_sack_trim(struct tcp_pcb *pcb)
{
	unsigned k = 0;
	for (unsigned i = 0; i < pcb->nsacked; i++) {
		struct tcp_range x = pcb->sacked[i];
		if (SEQ_LEQ(x.end, pcb->snd_una))
			continue;
		if (SEQ_LT(x.start, pcb->snd_una))
			x.start = pcb->snd_una;
		pcb->sacked[k++] = x;
	}
	pcb->nsacked = k;
}

unsigned tcp_sack_update(struct tcp_pcb *pcb, const struct tcp_opts *o, uint32_t ack, struct tcp_range *newly,
			 unsigned max, struct tcp_range *dsack)
{
	uint32_t blk[TCP_SACK_MAX_BLOCKS][2];
	unsigned nb = 0, nnew = 0;

	dsack->start = dsack->end = 0;
	for (unsigned i = 0; i < o->nsack && i < TCP_SACK_MAX_BLOCKS; i++) {
		uint32_t s = o->sack[i][0], e = o->sack[i][1];
		if (!SEQ_LT(s, e))
			continue;
		/* RFC 2883: a first block below the cumulative ACK, or inside
		 * the second one, reports a duplicate (D-SACK) */
		if (i == 0 && (SEQ_LEQ(e, ack) ||
			       (o->nsack > 1 && SEQ_GEQ(s, o->sack[1][0]) && SEQ_LEQ(e, o->sack[1][1])))) {
			dsack->start = s;
			dsack->end = e;
			continue;
		}
		/* Only blocks inside what we sent and above snd_una are believable. */
		if (SEQ_LEQ(e, pcb->snd_una) || SEQ_GT(e, pcb->snd_max))
			continue;
		if (SEQ_LT(s, pcb->snd_una))
			s = pcb->snd_una;
		/* lowest first, so what each adds comes out in sequence order */
		unsigned k = nb++;
		while (k && SEQ_GT(blk[k - 1][0], s)) {
			blk[k][0] = blk[k - 1][0];
			blk[k][1] = blk[k - 1][1];
			k--;
		}
		blk[k][0] = s;
		blk[k][1] = e;
	}
	for (unsigned i = 0; i < nb; i++)
		scoreboard_add(pcb, blk[i][0], blk[i][1], newly, &nnew, max);
	return nnew;
}

uint32_t tcp_sack_bytes(const struct tcp_pcb *pcb)
{
	uint32_t n = 0;
	for (unsigned i = 0; i < pcb->nsacked; i++)
		n += pcb->sacked[i].end - pcb->sacked[i].start;
	return n;
}

uint32_t tcp_sack_highest(const struct tcp_pcb *pcb)
{
	return pcb->nsacked ? pcb->sacked[pcb->nsacked - 1].end : pcb->snd_una;
}

/* true: seq is SACKed and *run_end is the end of that range. false: *run_end
 * is where the next SACKed range starts (or the highest SACKed byte). */
bool tcp_sack_is_sacked(const struct tcp_pcb *pcb, uint32_t seq, uint32_t *run_end)
{
	for (unsigned i = 0; i < pcb->nsacked; i++) {
		if (SEQ_LT(seq, pcb->sacked[i].start)) {
			*run_end = pcb->sacked[i].start;
			return false;
		}
		if (SEQ_LT(seq, pcb->sacked[i].end)) {
			*run_end = pcb->sacked[i].end;
			return true;
		}
	}
	*run_end = tcp_sack_highest(pcb);
	if (SEQ_LEQ(*run_end, seq))
		*run_end = seq + 0x7fffffffu;   /* nothing SACKed beyond: unbounded */
	return false;
}

/* ---- receiver: out-of-order queue (single buffers, seq in scratch[0]) ----
 *
 * The queue is a list sorted by starting sequence number; buffers may
 * overlap. A "run" is a maximal set of queued buffers that touch or overlap:
 * what one SACK block reports. Nothing here walks the queue more than once
 * per call (a peer spraying tiny segments past a hole made the old block
 * builder cubic in the queue length, on every ACK). The common arrival, a
 * segment above everything queued (in-order data past a hole), costs O(1):
 * ooo_tail and ooo_max_end answer it without a walk. */

#define OOO_SEQ(b) ((b)->scratch[0])
#define OOO_END(b) (OOO_SEQ(b) + (b)->len)

/* Takes the reference on success; false means the caller still owns buf
 * (a duplicate: every byte is queued already, reported as a D-SACK; or
 * over the memory bound). */
bool tcp_ooo_insert(struct tcp_pcb *pcb, struct ring_buf *buf, uint32_t seq)
{
	uint32_t end = seq + buf->len;
	struct ring_buf **pp = &pcb->ooo;
	uint32_t steps = 0;
	/* How far the queued buffers starting below seq reach: with cover, the
	 * highest end among them (they all start below seq, so [seq, that end)
	 * is covered when it is above seq). */
	bool cover = false;
	uint32_t reach = seq;

	if (pcb->ooo && SEQ_GT(seq, OOO_SEQ(pcb->ooo_tail))) {
		/* above every queued start: append, no walk */
		pp = &pcb->ooo_tail->link;
		cover = true;
		reach = pcb->ooo_max_end;
	} else {
		while (*pp && SEQ_LT(OOO_SEQ(*pp), seq)) {
			if (!cover || SEQ_GT(OOO_END(*pp), reach))
				reach = OOO_END(*pp);
			cover = true;
			pp = &(*pp)->link;
			steps++;
		}
	}
	/* Every byte already queued (by one buffer or several touching ones):
	 * a duplicate, reported to the sender (RFC 2883). */
	uint32_t upto = cover && SEQ_GT(reach, seq) ? reach : seq;
	for (const struct ring_buf *q = *pp; q && SEQ_LT(upto, end) && SEQ_LEQ(OOO_SEQ(q), upto); q = q->link) {
		if (SEQ_GT(OOO_END(q), upto))
			upto = OOO_END(q);
		steps++;
	}
	pcb->ctx->cnt.ooo_walk_steps += steps;
	if (SEQ_GEQ(upto, end)) {
		tcp_rcv_dsack_note(pcb, seq, end);
		return false;
	}
	/* Buffer memory bounds what small segments may pin (a peer spraying
	 * 1-byte segments past a hole); a segment of at least TCP_OOO_FULL_SEG
	 * bytes inside the window we offered is kept as Linux keeps it (its
	 * receive buffer bounds the out-of-order queue): dropping it made a
	 * Linux sender resend most of its window after each loss. The ring's
	 * frame pressure still refuses it (below). */
	if (pcb->ooo_mem + buf->size > pcb->ctx->set.ooo_max_bytes && buf->len < TCP_OOO_FULL_SEG) {
		pcb->ctx->cnt.rx_ooo_dropped++;
		return false;
	}
	/* The ring is short of frames: in-order data first (the sender
	 * resends what we refuse here, and SACK never reported it). A
	 * full-size segment is still kept within this connection's share of
	 * the ring (receive admission: an eighth of the frames under pressure,
	 * a thirty-second when critical): the frames are short because other
	 * connections hold them (a peer pinning them with small segments past
	 * holes), and refusing every connection's out-of-order data made one
	 * loss on an honest bulk flow cost it its whole window. */
	if (ring_buf_pool_pressured(buf->pool) &&
	    (buf->len < TCP_OOO_FULL_SEG || ring_buf_pool_holder_full(buf->pool, pcb->ooo_count))) {
		pcb->ctx->cnt.rx_ooo_pressure_dropped++;
		pcb->ooo_starved = true;
		return false;
	}
	/* Drop queued segments the new one covers entirely. */
	while (*pp && SEQ_LEQ(OOO_END(*pp), end) && SEQ_GEQ(OOO_SEQ(*pp), seq)) {
		struct ring_buf *gone = *pp;
		*pp = gone->link;
		gone->link = NULL;
		pcb->ooo_mem -= gone->size;
		pcb->ooo_count--;
		ring_buf_free(gone);
	}
	if (!pcb->ooo) {
		pcb->ooo_progress_ms = pcb->ctx->now_ms;
		pcb->ooo_starved = false;
	}
	/* buffer ownership: a queued buffer is ours alone, on no other list */
	VMA_ASSERT(buf->refcount == 1 && !buf->link && !buf->next);
	OOO_SEQ(buf) = seq;
	buf->link = *pp;
	*pp = buf;
	if (!buf->link)
		pcb->ooo_tail = buf;
	/* Ends below rcv_nxt left with the buffers tcp_ooo_take_ready took, and
	 * every buffer still queued starts above rcv_nxt: the maximum stays
	 * the maximum of what is queued. */
	if (pcb->ooo_count == 0 || SEQ_GT(end, pcb->ooo_max_end))
		pcb->ooo_max_end = end;
	pcb->ooo_mem += buf->size;
	pcb->ooo_count++;
	pcb->rcv_ooopack++;
	return true;
}

/* Chain of the queued bytes now in order at rcv_nxt (trimmed of overlap),
 * or NULL. Advances rcv_nxt past them. */
struct ring_buf *tcp_ooo_take_ready(struct tcp_pcb *pcb)
{
	struct ring_buf *head = NULL, **tail = &head;

	while (pcb->ooo && SEQ_LEQ(OOO_SEQ(pcb->ooo), pcb->rcv_nxt)) {
		struct ring_buf *b = pcb->ooo;
		VMA_ASSERT(pcb->ooo_count > 0 && pcb->ooo_mem >= b->size && b->refcount == 1);
		pcb->ooo = b->link;
		b->link = NULL;
		pcb->ooo_mem -= b->size;
		pcb->ooo_count--;
		uint32_t skip = pcb->rcv_nxt - OOO_SEQ(b);
		if (skip >= b->len) {
			ring_buf_free(b);
			continue;
		}
		b->data += skip;
		b->len -= skip;
		b->next = NULL;
		pcb->rcv_nxt += b->len;
		*tail = b;
		tail = &b->next;
	}
	if (!pcb->ooo)
		pcb->ooo_tail = NULL;
	if (head) {
		stack_buf_chain_fix_tot_len(head);
		pcb->ooo_progress_ms = pcb->ctx->now_ms;
		pcb->ooo_starved = false;
	}
	return head;
}

void tcp_ooo_renege_stale(struct tcp_pcb *pcb)
{
	if (!pcb->ooo || pcb->ctx->now_ms - pcb->ooo_progress_ms < TCP_OOO_RENEGE_MS ||
	    !(pcb->ooo_starved || ring_buf_pool_pressured(pcb->ooo->pool)))
		return;
	pcb->ooo_starved = false;
	pcb->ctx->cnt.rx_ooo_reneged += pcb->ooo_count;
	tcp_ooo_free(pcb);
	/* Never report again what we no longer hold: the sender keeps every
	 * SACKed byte until it is cumulatively acknowledged (RFC 2018 section 8)
	 * and resends it. */
	memset(pcb->sack_recent, 0, sizeof(pcb->sack_recent));
}

void tcp_ooo_free(struct tcp_pcb *pcb)
{
	while (pcb->ooo) {
		struct ring_buf *b = pcb->ooo;
		pcb->ooo = b->link;
		b->link = NULL;
		ring_buf_free(b);
	}
	pcb->ooo_tail = NULL;
	pcb->ooo_mem = 0;
	pcb->ooo_count = 0;
}

/* RFC 2018 section 4: the first block reports the segment that arrived last. */
void tcp_rcv_sack_note(struct tcp_pcb *pcb, uint32_t seq, uint32_t end)
{
	memmove(pcb->sack_recent + 1, pcb->sack_recent, 2 * sizeof(pcb->sack_recent[0]));
	pcb->sack_recent[0].start = seq;
	pcb->sack_recent[0].end = end;
}

/* A duplicate [seq, end) arrived (RFC 2883): reported as the first block of
 * the next ACK, so the sender can tell duplication from loss (as Linux). */
void tcp_rcv_dsack_note(struct tcp_pcb *pcb, uint32_t seq, uint32_t end)
{
	if (!pcb->sack_ok || !SEQ_LT(seq, end))
		return;
	pcb->dsack.start = seq;
	pcb->dsack.end = end;
	pcb->dsack_pending = true;
}

static void sack_put(struct tcp_range *out, unsigned *n, struct tcp_range run)
{
	for (unsigned k = 0; k < *n; k++)
		if (out[k].start == run.start)
			return;
	out[(*n)++] = run;
}

/* RFC 2018 section 4: the run holding the segment that arrived last comes
 * first, then those of the two before it (most recent first), then other
 * runs, lowest first, while blocks fit. After a D-SACK (RFC 2883 section 4)
 * the run holding the duplicate, if queued, comes first. One pass over the
 * queue: each run is built as the sorted buffers are met, and kept if it
 * holds one of those segments or is among the lowest runs. */
unsigned tcp_rcv_sack_blocks(struct tcp_pcb *pcb, const struct tcp_range *dsack,
			     struct tcp_range *out, unsigned max)
{
	enum { NWANT = 4 };
	uint32_t want_seq[NWANT];
	struct tcp_range want_run[NWANT];
	bool want[NWANT], found[NWANT] = { false };
	unsigned wanted = 0;
	/* lowest runs: max of them are enough even if every wanted run is among them */
	struct tcp_range low[TCP_SACK_MAX_BLOCKS + NWANT];
	unsigned nlow = 0, nlow_max, n = 0;
	uint32_t steps = 0;

	if (max > TCP_SACK_MAX_BLOCKS)
		max = TCP_SACK_MAX_BLOCKS;
	nlow_max = max + NWANT;
	want[0] = dsack && SEQ_LT(dsack->start, dsack->end);
	want_seq[0] = dsack ? dsack->start : 0;
	for (unsigned i = 1; i < NWANT; i++) {
		want[i] = pcb->sack_recent[i - 1].start != pcb->sack_recent[i - 1].end;
		want_seq[i] = pcb->sack_recent[i - 1].start;
	}
	for (unsigned i = 0; i < NWANT; i++)
		wanted += want[i];
	const struct ring_buf *b = pcb->ooo;
	while (b && (wanted || nlow < nlow_max)) {
		struct tcp_range run = { OOO_SEQ(b), OOO_END(b) };
		for (b = b->link, steps++; b && SEQ_LEQ(OOO_SEQ(b), run.end); b = b->link, steps++)
			if (SEQ_GT(OOO_END(b), run.end))
				run.end = OOO_END(b);
		for (unsigned i = 0; i < NWANT; i++) {
			if (want[i] && !found[i] && SEQ_LEQ(run.start, want_seq[i]) &&
			    SEQ_LT(want_seq[i], run.end)) {
				want_run[i] = run;
				found[i] = true;
				wanted--;
			}
		}
		if (nlow < nlow_max)
			low[nlow++] = run;
	}
	pcb->ctx->cnt.ooo_walk_steps += steps;
	for (unsigned i = 0; i < NWANT && n < max; i++)
		if (found[i])
			sack_put(out, &n, want_run[i]);
	for (unsigned i = 0; i < nlow && n < max; i++)
		sack_put(out, &n, low[i]);
	return n;
}
