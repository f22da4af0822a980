/* The predicted segment (Linux's tcp_rcv_established header prediction,
 * written for this engine): on an ESTABLISHED connection nearly every
 * segment is the next one in order, carries an ACK, finds an open window
 * on both sides, and has no option but timestamps. Such a segment needs
 * none of the checks RFC 9293 has for the unusual (RST, SYN, a sequence
 * number off rcv_nxt, SACK, ECN, persist): only PAWS, the ACK of new data,
 * the window update and the in-order payload, through the same steps the
 * full path uses (tcp_in.c).
 * Anything else, or a connection in the middle of something (recovery, a
 * probe, SACKed data, a segment past the window or the receive share), takes
 * the full path, which sees the segment untouched; so does a pure ACK of
 * nothing new (a duplicate ACK). */
#include "stack/tcp_priv.h"

/* The timestamps option alone, aligned as RFC 7323 appendix A has every
 * stack send it: NOP, NOP, kind 8, length 10. */
static bool ts_only(const uint8_t *o, uint32_t len, uint32_t *val, uint32_t *ecr)
{
	if (len != TCP_TS_OPT_LEN || stack_get32(o) != TCP_TS_OPT_HEAD)
		return false;
	*val = stack_get32(o + 4);
	*ecr = stack_get32(o + 8);
	return true;
}

bool tcp_fast_path(struct tcp_pcb *pcb, struct tcp_rx *rx, uint32_t hlen)
{
	struct tcp_seg *seg = &rx->seg;
	struct tcp_ctx *ctx = pcb->ctx;

	/* the prediction: an ACK (PSH allowed), the next sequence number, an
	 * open window (persist and zero windows are the full path's), an ACK
	 * within what was sent */
	uint32_t new_wnd = seg->wnd << pcb->snd_wscale;
	if ((seg->flags & ~TCP_PSH) != TCP_ACK || seg->ecn_flags || seg->ip_ecn == TCP_IP_CE ||
	    seg->seq != pcb->rcv_nxt || !new_wnd || !pcb->snd_wnd || SEQ_LT(seg->ack, pcb->snd_una) ||
	    SEQ_GT(seg->ack, pcb->snd_max))
		return false;
	/* a pure ACK that acknowledges nothing new is a duplicate ACK (or a
	 * probe's answer): the full path counts it */
	if (!seg->len && seg->ack == pcb->snd_una)
		return false;
	/* nothing under way that the full path alone follows */
	if (pcb->in_recovery || pcb->in_loss || pcb->nsacked || pcb->txq.lost_segs || pcb->tlp_high)
		return false;
	if (seg->len && (pcb->detached || SEQ_GT(seg->seq + seg->len, pcb->rcv_adv) ||
			 ring_buf_pool_holder_full(seg->buf->pool, pcb->rcv_held)))
		return false;
	uint32_t val = 0, ecr = 0;
	if (pcb->ts_ok ? !ts_only(rx->hdr + TCP_HLEN, hlen - TCP_HLEN, &val, &ecr) || SEQ_LT(val, pcb->ts_recent) :
			 hlen != TCP_HLEN)
		return false;   /* other options, or PAWS: the full path counts it */
	seg->opt.has_mss = seg->opt.has_ws = seg->opt.sack_perm = false;
	seg->opt.has_ts = pcb->ts_ok;
	seg->opt.ts_val = val;
	seg->opt.ts_ecr = ecr;
	seg->opt.nsack = 0;

	tcp_segment_arrived(pcb, seg);
	if (pcb->keepalive) {
		pcb->keepalive_at = ctx->now_ms + pcb->ka_idle_ms;
		pcb->keepalive_sent = 0;
	}
	/* TS.Recent from a segment covering Last.ACK.sent (RFC 7323 4.3) */
	if (pcb->ts_ok && SEQ_LEQ(seg->seq, pcb->last_ack_sent) &&
	    SEQ_LT(pcb->last_ack_sent, seg->seq + seg->len + (seg->len ? 0 : 1)))
		pcb->ts_recent = val;
	if (SEQ_GT(seg->ack, pcb->snd_una)) {
		uint32_t acked = seg->ack - pcb->snd_una;
		uint32_t data_acked = tcp_ack_new(pcb, seg);
		tcp_rack_on_ack(pcb, NULL, 0);
		tcp_rack_update_round(pcb);
		tcp_ack_loss_and_window(pcb, acked, acked, false);
		ctx->cnt.rx_fast_acks++;
		if (!tcp_ack_done(pcb, data_acked))
			return true;   /* closed by the sent callback */
	}
	/* send window update (RFC 9293 3.10.7.4, fifth check): a receiver
	 * that does not round its window (ours moves its edge by an MSS at a
	 * time) changes it on most segments of a request/response exchange */
	if (SEQ_LT(pcb->snd_wl1, seg->seq) || (pcb->snd_wl1 == seg->seq && SEQ_LEQ(pcb->snd_wl2, seg->ack))) {
		pcb->snd_wnd = new_wnd;
		pcb->snd_wl1 = seg->seq;
		pcb->snd_wl2 = seg->ack;
		if (new_wnd > pcb->max_snd_wnd)
			pcb->max_snd_wnd = new_wnd;
	}
	if (seg->len) {
		ctx->cnt.rx_fast_data++;
		if (!tcp_data_in_order(pcb, seg))
			return true;   /* closed by the recv callback */
	}
	if (!tcp_output_idle(pcb))
		tcp_output(pcb);
	return true;
}
