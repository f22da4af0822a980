/* Receive coalescing across one ring poll batch (VMA_GRO_STREAMS_MAX).
 *
 * Between tcp_rx_batch_begin and tcp_rx_batch_end, in-order payload is not
 * handed to recv segment by segment: it is appended to a per-pcb pending
 * chain and delivered in one recv per pcb when the batch ends, so a socket
 * layer wakes its reader and takes its lock once per poll instead of once per
 * segment. At most gro_streams_max pcbs hold pending data; the oldest is
 * flushed when another one needs a slot. The ACK in-order data asks for
 * waits too: it leaves after the pcb's delivery (riding on the reader's
 * reply if it wrote one), one per pcb per batch, as Linux ACKs a GRO
 * aggregate once; so does the SACK for out-of-order data past the first
 * three duplicate ACKs of a hole (Linux's SACK compression); an ACK for a
 * filled hole or a duplicate leaves at once. The window and counters are
 * per segment: the window already counts pending bytes as unread. */
#include "stack/tcp_priv.h"

#include <stddef.h>

static void unlink_pcb(struct tcp_ctx *ctx, struct tcp_pcb *pcb)
{
	struct tcp_pcb **pp = &ctx->batch_first, *prev = NULL;
	while (*pp && *pp != pcb) {
		prev = *pp;
		pp = &(*pp)->batch_next;
	}
	if (!*pp)
		return;
	*pp = pcb->batch_next;
	if (ctx->batch_last == pcb)
		ctx->batch_last = prev;
	pcb->batch_next = NULL;
	pcb->in_batch = false;
	ctx->batch_count--;
}

/* Takes pcb's pending chain off the list; NULL when it has none. */
static struct ring_buf *take(struct tcp_pcb *pcb)
{
	if (!pcb->in_batch)
		return NULL;
	struct ring_buf *chain = pcb->batch_head;
	unlink_pcb(pcb->ctx, pcb);
	pcb->batch_head = pcb->batch_tail = NULL;
	if (chain && chain->next)
		stack_buf_chain_fix_tot_len(chain);   /* one buffer's is right */
	return chain;
}

static void hand_over(struct tcp_pcb *pcb, struct ring_buf *chain)
{
	if (pcb->rd_shut || !pcb->cb.recv || pcb->dead) {
		/* closed or shut for reading since it arrived: nobody reads it */
		pcb->rcv_unread -= tcp_min32(chain->tot_len, pcb->rcv_unread);
		ring_buf_free(chain);
		return;
	}
	pcb->ctx->cnt.rx_batch_deliveries++;
	pcb->cb.recv(pcb->cb_arg, pcb, chain);
}

void tcp_batch_flush_pcb(struct tcp_pcb *pcb)
{
	struct ring_buf *chain = take(pcb);
	if (chain)
		hand_over(pcb, chain);
	/* The batch's ACK, unless the reader's reply (or a window update)
	 * already carried it. */
	if (pcb->ack_batch && !pcb->dead) {
		bool sack = pcb->ack_batch_sack;
		pcb->ack_batch = pcb->ack_batch_sack = false;
		if (pcb->last_ack_sent != pcb->rcv_nxt || sack) {
			pcb->ack_now = true;
			tcp_output(pcb);
		}
	}
}

void tcp_batch_drop_pcb(struct tcp_pcb *pcb)
{
	struct ring_buf *chain = take(pcb);
	ring_buf_free(chain);
}

/* All slots taken: the oldest stream goes out (out of line, rare); false
 * when its recv closed pcb. */
static __attribute__((noinline)) bool make_room(struct tcp_pcb *pcb)
{
	tcp_batch_flush_pcb(pcb->ctx->batch_first);
	return !pcb->dead;
}

/* Links pcb at the end of the batch list; false when making room closed it. */
static inline bool join(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (ctx->batch_count >= ctx->set.gro_streams_max && !make_room(pcb))
		return false;
	pcb->in_batch = true;
	pcb->batch_next = NULL;
	pcb->batch_head = pcb->batch_tail = NULL;
	if (ctx->batch_last)
		ctx->batch_last->batch_next = pcb;
	else
		ctx->batch_first = pcb;
	ctx->batch_last = pcb;
	ctx->batch_count++;
	return true;
}

bool tcp_batch_ack_later(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (!ctx->batch_depth || !ctx->set.gro_streams_max || pcb->rd_shut || !pcb->cb.recv)
		return false;
	if (!pcb->in_batch && !join(pcb))
		return true;   /* closed by another stream's recv: nothing to ACK */
	pcb->ack_batch = pcb->ack_batch_sack = true;
	return true;
}

bool tcp_batch_add(struct tcp_pcb *pcb, struct ring_buf *chain)
{
	struct tcp_ctx *ctx = pcb->ctx;

	if (!ctx->batch_depth || !ctx->set.gro_streams_max)
		return false;
	if (!pcb->in_batch) {
		if (!join(pcb)) {
			ring_buf_free(chain);   /* its recv closed this pcb */
			return true;
		}
		pcb->batch_head = pcb->batch_tail = chain;
	} else if (!pcb->batch_head) {
		pcb->batch_head = pcb->batch_tail = chain;   /* joined for its ACK only */
	} else {
		/* Only the head's tot_len is kept current here; the whole chain
		 * is fixed once when it is handed over. */
		pcb->batch_tail->next = chain;
		pcb->batch_head->tot_len += chain->tot_len;
		ctx->cnt.rx_batch_merged++;
	}
	while (pcb->batch_tail->next)
		pcb->batch_tail = pcb->batch_tail->next;
	return true;
}

void tcp_rx_batch_begin(struct tcp_ctx *ctx)
{
	if (ctx)
		ctx->batch_depth++;
}

void tcp_rx_batch_end(struct tcp_ctx *ctx)
{
	if (!ctx || !ctx->batch_depth || --ctx->batch_depth)
		return;
	/* Callbacks may close any pcb (which drops its pending data) or write,
	 * so the list is re-read after every delivery; frees wait for the end. */
	ctx->depth++;
	while (ctx->batch_first)
		tcp_batch_flush_pcb(ctx->batch_first);
	ctx->depth--;
	if (!ctx->depth)
		tcp_reap(ctx);
}
