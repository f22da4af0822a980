/* SACK (RFC 2018): the sender's scoreboard of what the peer holds above
 * snd_una, and the receiver's out-of-order queue with the blocks it reports.
 * The out-of-order queue is bounded by buffer memory (ring_buf.size), so a
 * peer spraying tiny segments cannot pin more than ooo_max_bytes. */
#include "stack/tcp_priv.h"

#include <string.h>

/* ---- sender scoreboard: sorted, disjoint ranges above snd_una ---- */

static void scoreboard_add(struct tcp_pcb *pcb, uint32_t start, uint32_t end)
{
	struct tcp_range *r = pcb->sacked;
	unsigned n = pcb->nsacked, i = 0;

	while (i < n && SEQ_LT(r[i].end, start))
		i++;
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
		if (n == TCP_SCOREBOARD_MAX)
			return;   /* full: the sender just retransmits a bit more */
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

void tcp_sack_update(struct tcp_pcb *pcb, const struct tcp_opts *o)
{
	for (unsigned i = 0; i < o->nsack; i++) {
		uint32_t s = o->sack[i][0], e = o->sack[i][1];
		/* Only blocks inside what we sent and above snd_una are believable;
		 * a D-SACK (RFC 2883) below snd_una is ignored. */
		if (!SEQ_LT(s, e) || SEQ_LEQ(e, pcb->snd_una) || SEQ_GT(e, pcb->snd_max))
			continue;
		if (SEQ_LT(s, pcb->snd_una))
			s = pcb->snd_una;
		scoreboard_add(pcb, s, e);
	}
}

uint32_t tcp_sack_bytes(const struct tcp_pcb *pcb)
{
	uint32_t n = 0;
	for (unsigned i = 0; i < pcb->nsacked; i++)
		n += pcb->sacked[i].end - pcb->sacked[i].start;
	return n;
}

uint32_t tcp_sack_bytes_above(const struct tcp_pcb *pcb, uint32_t seq)
{
	uint32_t n = 0;
	for (unsigned i = 0; i < pcb->nsacked; i++) {
		uint32_t s = pcb->sacked[i].start, e = pcb->sacked[i].end;
		if (SEQ_LEQ(e, seq))
			continue;
		n += e - (SEQ_GT(s, seq) ? s : seq);
	}
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

/* ---- receiver: out-of-order queue (single buffers, seq in scratch[0]) ---- */

#define OOO_SEQ(b) ((b)->scratch[0])

/* Takes the reference on success; false means the caller still owns buf. */
bool tcp_ooo_insert(struct tcp_pcb *pcb, struct ring_buf *buf, uint32_t seq)
{
	uint32_t end = seq + buf->len;
	struct ring_buf **pp = &pcb->ooo;

	while (*pp && SEQ_LT(OOO_SEQ(*pp), seq))
		pp = &(*pp)->link;
	/* Covered entirely by one neighbour: a duplicate. */
	for (struct ring_buf *b = pcb->ooo; b; b = b->link)
		if (SEQ_LEQ(OOO_SEQ(b), seq) && SEQ_GEQ(OOO_SEQ(b) + b->len, end)) {
			tcp_rcv_dsack_note(pcb, seq, end);
			return false;
		}
	if (pcb->ooo_mem + buf->size > pcb->ctx->set.ooo_max_bytes) {
		pcb->ctx->cnt.rx_ooo_dropped++;
		return false;
	}
	/* Drop queued segments the new one covers entirely. */
	while (*pp && SEQ_LEQ(OOO_SEQ(*pp) + (*pp)->len, end) && SEQ_GEQ(OOO_SEQ(*pp), seq)) {
		struct ring_buf *gone = *pp;
		*pp = gone->link;
		gone->link = NULL;
		pcb->ooo_mem -= gone->size;
		pcb->ooo_count--;
		ring_buf_free(gone);
	}
	OOO_SEQ(buf) = seq;
	buf->link = *pp;
	*pp = buf;
	pcb->ooo_mem += buf->size;
	pcb->ooo_count++;
	return true;
}

/* Chain of the queued bytes now in order at rcv_nxt (trimmed of overlap),
 * or NULL. Advances rcv_nxt past them. */
struct ring_buf *tcp_ooo_take_ready(struct tcp_pcb *pcb)
{
	struct ring_buf *head = NULL, **tail = &head;

	while (pcb->ooo && SEQ_LEQ(OOO_SEQ(pcb->ooo), pcb->rcv_nxt)) {
		struct ring_buf *b = pcb->ooo;
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
	if (head)
		stack_buf_chain_fix_tot_len(head);
	return head;
}

void tcp_ooo_free(struct tcp_pcb *pcb)
{
	while (pcb->ooo) {
		struct ring_buf *b = pcb->ooo;
		pcb->ooo = b->link;
		b->link = NULL;
		ring_buf_free(b);
	}
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

/* The contiguous queued run that contains [s, e). */
static bool ooo_run_around(const struct tcp_pcb *pcb, uint32_t s, struct tcp_range *run)
{
	bool found = false;
	for (const struct ring_buf *b = pcb->ooo; b; b = b->link) {
		uint32_t bs = OOO_SEQ(b), be = bs + b->len;
		if (!found) {
			if (SEQ_LEQ(bs, s) && SEQ_GT(be, s)) {
				found = true;
				run->start = bs;
				run->end = be;
			}
			continue;
		}
		if (SEQ_GT(bs, run->end))
			break;
		if (SEQ_GT(be, run->end))
			run->end = be;
	}
	if (!found)
		return false;
	/* extend left over earlier buffers that touch it */
	for (bool grew = true; grew;) {
		grew = false;
		for (const struct ring_buf *b = pcb->ooo; b; b = b->link) {
			uint32_t bs = OOO_SEQ(b), be = bs + b->len;
			if (SEQ_LT(bs, run->start) && SEQ_GEQ(be, run->start)) {
				run->start = bs;
				grew = true;
			}
		}
	}
	return true;
}

unsigned tcp_rcv_sack_blocks(struct tcp_pcb *pcb, struct tcp_range *out, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < 3 && n < max; i++) {
		struct tcp_range run;
		if (pcb->sack_recent[i].start == pcb->sack_recent[i].end)
			continue;
		if (!ooo_run_around(pcb, pcb->sack_recent[i].start, &run))
			continue;
		bool dup = false;
		for (unsigned k = 0; k < n; k++)
			dup |= out[k].start == run.start;
		if (!dup)
			out[n++] = run;
	}
	/* Fill the rest with other runs, lowest first. */
	for (const struct ring_buf *b = pcb->ooo; b && n < max; b = b->link) {
		struct tcp_range run;
		if (!ooo_run_around(pcb, OOO_SEQ(b), &run))
			continue;
		bool dup = false;
		for (unsigned k = 0; k < n; k++)
			dup |= out[k].start == run.start;
		if (!dup)
			out[n++] = run;
	}
	return n;
}
