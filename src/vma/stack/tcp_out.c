/* TCP transmit: the send buffer, segment building straight into TX frames,
 * and tcp_output, which decides what the windows, cwnd, Nagle and loss
 * recovery allow to leave now. */
#include "stack/tcp_priv.h"
#include "stack/stack_csum.h"
#include "stack/stack_hdr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What one segment carries besides the connection's template. */
struct tcp_emit {
	uint32_t seq, ack;
	uint8_t flags;                   /* ECE and CWR included */
	uint8_t ip_ecn;                  /* the IP header's ECN field (ECT(0) on ECN data) */
	uint16_t wnd;
	uint8_t opts[TCP_MAX_OPT_LEN];
	uint32_t optlen;
};

static inline uint64_t add_carry(uint64_t sum, uint64_t v)
{
	sum += v;
	return sum + (sum < v);
}

/* The headers of a connection from src to dst on nif (template t). */
static void tmpl_build(struct tcp_tmpl *t, struct stack *st, const struct stack_netif *nif, uint32_t src_ip,
		       uint32_t dst_ip, uint16_t sport, uint16_t dport, const uint8_t *dst_mac)
{
	uint8_t *eth = t->hdr, *ip = eth + STACK_ETH_HLEN, *th = ip + STACK_IP4_HLEN;
	memset(t->hdr, 0, sizeof(t->hdr));
	stack_eth_fill_ip4(eth, dst_mac, nif->mac);
	ip[STACK_IP4_VER_IHL] = STACK_IP4_VER_IHL_20;
	stack_put16(ip + STACK_IP4_FRAG, STACK_IP4_DF);
	ip[STACK_IP4_TTL] = st->set.default_ttl ? st->set.default_ttl : 64;
	ip[STACK_IP4_PROTO] = STACK_IP4_PROTO_TCP;
	memcpy(ip + STACK_IP4_SRC, &src_ip, 4);
	memcpy(ip + STACK_IP4_DST, &dst_ip, 4);
	/* every word but version/TOS, total length, id and the checksum */
	t->ip_sum = stack_csum_add(0, ip + STACK_IP4_FRAG, STACK_IP4_CSUM - STACK_IP4_FRAG);
	t->ip_sum = stack_csum_add(t->ip_sum, ip + STACK_IP4_SRC, 8);
	memcpy(th + STACK_TCP_SPORT, &sport, 2);
	memcpy(th + STACK_TCP_DPORT, &dport, 2);
	/* the pseudo header but its length, and the ports */
	t->tcp_sum = stack_csum_add(stack_csum_pseudo(src_ip, dst_ip, STACK_IP4_PROTO_TCP, 0), th, 4);
	t->ip_id = stack_ip4_id_counter(st, src_ip, dst_ip, STACK_IP4_PROTO_TCP);
	t->nif = nif;
}

/* The pcb's template, (re)built when it has none for its interface (the
 * first segment, tcp_set_netif, a move to another engine). */
static const struct tcp_tmpl *pcb_tmpl(struct tcp_pcb *pcb)
{
	if (__builtin_expect(pcb->tmpl.nif != pcb->nif, 0))
		tmpl_build(&pcb->tmpl, pcb->ctx->st, pcb->nif, pcb->local_ip, pcb->remote_ip, pcb->local_port,
			   pcb->remote_port, pcb->dst_mac);
	return &pcb->tmpl;
}

/* An index into the circular send buffer from one under twice its size
 * (an offset plus a count within it): no division on the data path. */
static inline uint32_t sbuf_wrap(const struct tcp_pcb *pcb, uint32_t i)
{
	return i >= pcb->sbuf_size ? i - pcb->sbuf_size : i;
}

/* Copies [seq, seq + len) of the send buffer to dst; returns their sum. */
static inline __attribute__((always_inline)) uint64_t sbuf_copy_out(const struct tcp_pcb *pcb, uint32_t seq, uint8_t *dst, uint32_t len)
{
	uint32_t idx = sbuf_wrap(pcb, pcb->sbuf_off + (seq - pcb->sbuf_seq));
	uint32_t first = tcp_min32(len, pcb->sbuf_size - idx);
	uint64_t sum = stack_csum_copy(0, dst, pcb->sbuf + idx, first);
	if (len > first)
		sum = stack_csum_add_odd(sum, stack_csum_copy(0, dst + first, pcb->sbuf, len - first), first);
	return sum;
}

/* The frame of a segment that carries the last byte of stamped writes
 * (tcp_tx_stamp_request): SCHED as it goes to the ring, SND once the ring
 * took it. The headers are copied first: the frame is the ring's after. */
static int emit_stamped(struct tcp_pcb *pcb, const struct stack_netif *nif, struct ring_buf *b, uint32_t end,
			uint32_t data_len)
{
	uint8_t hdr[STACK_ETH_HLEN + STACK_IP4_HLEN + TCP_HLEN + TCP_MAX_OPT_LEN];
	uint32_t hdr_len = tcp_min32(b->len - data_len, (uint32_t)sizeof(hdr));
	memcpy(hdr, b->data, hdr_len);
	tcp_tx_stamp_transmit(pcb, end, TCP_TX_STAMP_SCHED, hdr, hdr_len);
	int r = nif->tx_send(nif->ctx, b);
	if (r == 0)
		tcp_tx_stamp_transmit(pcb, end, TCP_TX_STAMP_SND, hdr, hdr_len);
	return r;
}

/* One frame: the template's headers, this segment's fields and options,
 * and data_len bytes of data_pcb's send buffer copied and summed in one
 * pass. stamp_pcb: the segment's data ends stamped writes. Inlined into
 * tcp_send_segment, the per-segment caller; emit_other serves the rest. */
static inline __attribute__((always_inline)) int emit(struct tcp_ctx *ctx, const struct stack_netif *nif, const struct tcp_tmpl *t,
		const struct tcp_emit *e, const struct tcp_pcb *data_pcb, uint32_t data_len,
		struct tcp_pcb *stamp_pcb)
{
	uint32_t thlen = TCP_HLEN + e->optlen;
	uint32_t total = STACK_ETH_HLEN + STACK_IP4_HLEN + thlen + data_len;
	struct ring_buf *b = nif->tx_alloc(nif->ctx);

	if (!b) {
		ctx->cnt.tx_no_buf++;
		return -ENOBUFS;
	}
	if (b->size - (uint32_t)(b->data - b->head) < total) {
		ring_buf_free(b);
		ctx->cnt.tx_no_buf++;
		return -EMSGSIZE;
	}
	uint8_t *eth = b->data, *ip = eth + STACK_ETH_HLEN, *th = ip + STACK_IP4_HLEN;
	/* Fields in network order, each stored once and summed from the
	 * register: reading back bytes just stored in pieces stalls the CPU
	 * (a store-forwarding miss per field cost more than the rest). */
	uint16_t ver_tos = htons((uint16_t)(STACK_IP4_VER_IHL_20 << 8 | e->ip_ecn));
	uint16_t tot_len = htons((uint16_t)(STACK_IP4_HLEN + thlen + data_len));
	uint16_t id = htons((*t->ip_id)++);
	uint32_t seq = htonl(e->seq), ack = htonl(e->ack);
	uint16_t doff_flags = htons((uint16_t)((thlen / 4) << 12 | e->flags)), wnd = htons(e->wnd);
	memcpy(eth, t->hdr, TCP_TMPL_LEN);
	memcpy(ip + STACK_IP4_VER_IHL, &ver_tos, 2);
	memcpy(ip + STACK_IP4_TOT_LEN, &tot_len, 2);
	memcpy(ip + STACK_IP4_ID, &id, 2);
	if (ctx->st->set.tx_ip_checksum) {
		/* the template's sum plus the three words this segment wrote */
		uint16_t c = stack_csum_finish(t->ip_sum + ver_tos + tot_len + id);
		memcpy(ip + STACK_IP4_CSUM, &c, 2);
	}
	memcpy(th + STACK_TCP_SEQ, &seq, 4);
	memcpy(th + STACK_TCP_ACK, &ack, 4);
	memcpy(th + STACK_TCP_DOFF, &doff_flags, 2);
	memcpy(th + STACK_TCP_WND, &wnd, 2);
	/* the header is a multiple of 4 bytes: the data's sum adds as it is */
	uint64_t sum = t->tcp_sum + htons((uint16_t)(thlen + data_len)) + seq + ack + doff_flags + wnd;
	/* the timestamps alone (nearly every segment) are copied and summed
	 * unrolled; other options (a SYN's, SACK blocks) as they were */
	_Static_assert(TCP_TS_OPT_LEN == 12, "stack_csum_copy12 copies the timestamps option");
	if (e->optlen == TCP_TS_OPT_LEN) {
		sum = stack_csum_copy12(sum, th + TCP_HLEN, e->opts);
	} else if (e->optlen) {
		memcpy(th + TCP_HLEN, e->opts, e->optlen);
		sum = stack_csum_add(sum, e->opts, e->optlen);
	}
	if (data_len)
		sum = add_carry(sum, sbuf_copy_out(data_pcb, e->seq, th + thlen, data_len));
	uint16_t c = stack_csum_finish(sum);
	memcpy(th + STACK_TCP_CSUM, &c, 2);
	b->len = b->tot_len = total;
	ctx->cnt.tx_segments++;
	ctx->st->cnt.tx_frames++;
	if (__builtin_expect(stamp_pcb != NULL, 0))
		return emit_stamped(stamp_pcb, nif, b, e->seq + data_len, data_len);
	return nif->tx_send(nif->ctx, b);
}

/* A segment without data that no send buffer feeds: resets, SYN cookies. */
static __attribute__((noinline)) int emit_other(struct tcp_ctx *ctx, const struct stack_netif *nif,
						  const struct tcp_tmpl *t, const struct tcp_emit *e)
{
	return emit(ctx, nif, t, e, NULL, 0, NULL);
}

/* The window to advertise now (its right edge moved per receiver SWS
 * avoidance). */
static uint32_t rcv_window(struct tcp_pcb *pcb)
{
	uint32_t avail = pcb->rcv_buf > pcb->rcv_unread ? pcb->rcv_buf - pcb->rcv_unread : 0;
	avail = tcp_min32(avail, 65535u << pcb->rcv_wscale);
	avail &= ~((1u << pcb->rcv_wscale) - 1);
	uint32_t cur = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : 0;
	/* Receiver silly-window avoidance (RFC 9293 3.8.6.2.2): move the right
	 * edge only by a useful amount; never move it left. */
	if (avail > cur && (avail - cur >= tcp_min32(pcb->rcv_buf / 2, pcb->mss) || !cur))
		pcb->rcv_adv = pcb->rcv_nxt + avail;
	if (SEQ_LT(pcb->rcv_adv, pcb->rcv_nxt))
		pcb->rcv_adv = pcb->rcv_nxt;
	return pcb->rcv_adv - pcb->rcv_nxt;
}

static uint32_t build_opts(struct tcp_pcb *pcb, uint8_t flags, uint32_t len, uint8_t *o)
{
	uint32_t n = 0;

	if (flags & TCP_SYN) {
		bool synack = flags & TCP_ACK;
		const struct tcp_settings *s = &pcb->ctx->set;
		o[n++] = 2; o[n++] = 4;
		stack_put16(o + n, (uint16_t)pcb->adv_mss);
		n += 2;
		if (synack ? pcb->ws_ok : s->window_scaling) {
			o[n++] = 1; o[n++] = 3; o[n++] = 3; o[n++] = pcb->rcv_wscale;
		}
		bool sack = synack ? pcb->sack_ok : s->sack;
		bool ts = synack ? pcb->ts_ok : s->timestamps != TCP_TS_OFF;
		if (sack && !ts) {
			o[n++] = 1; o[n++] = 1; o[n++] = 4; o[n++] = 2;
		}
		if (ts) {
			if (sack) {
				o[n++] = 4; o[n++] = 2;
			} else {
				o[n++] = 1; o[n++] = 1;
			}
			o[n++] = 8; o[n++] = 10;
			stack_put32(o + n, (uint32_t)pcb->ctx->now_ms);
			stack_put32(o + n + 4, synack ? pcb->ts_recent : 0);
			n += 8;
		}
		return n;
	}
	if (pcb->ts_ok) {
		stack_put32(o + n, TCP_TS_OPT_HEAD);
		n += 4;
		stack_put32(o + n, (uint32_t)pcb->ctx->now_ms);
		stack_put32(o + n + 4, pcb->ts_recent);
		n += 8;
	}
	bool dsack = pcb->dsack_pending && !len && (flags & TCP_ACK);
	if (pcb->sack_ok && (pcb->ooo || dsack) && !(flags & TCP_RST)) {
		struct tcp_range r[TCP_SACK_MAX_BLOCKS];
		unsigned max = pcb->ts_ok ? 3 : 4, nb = 0;
		if (dsack) {
			r[nb++] = pcb->dsack;
			pcb->dsack_pending = false;
		}
		nb += tcp_rcv_sack_blocks(pcb, dsack ? &pcb->dsack : NULL, r + nb, max - nb);
		if (nb) {
			o[n++] = 1; o[n++] = 1; o[n++] = 5; o[n++] = (uint8_t)(2 + 8 * nb);
			for (unsigned i = 0; i < nb; i++) {
				stack_put32(o + n, r[i].start);
				stack_put32(o + n + 4, r[i].end);
				n += 8;
			}
		}
	}
	return n;
}

int tcp_send_segment(struct tcp_pcb *pcb, uint32_t seq, uint32_t len, uint8_t flags)
{
	struct tcp_emit e;

	e.ip_ecn = 0;
	if (pcb->state != TCP_SYN_SENT || !(flags & TCP_SYN))
		flags |= TCP_ACK;
	e.seq = seq;
	e.ack = (flags & TCP_ACK) ? pcb->rcv_nxt : 0;
	if (flags & TCP_SYN) {
		/* ECN setup (RFC 3168 6.1.1): our SYN asks with ECE and CWR when
		 * tcp_ecn is 1; a SYN-ACK agrees with ECE */
		if (!(flags & TCP_ACK) ? pcb->ctx->set.ecn == 1 : pcb->ecn_ok)
			flags |= (flags & TCP_ACK) ? TCP_ECE : (TCP_ECE | TCP_CWR);
	} else if (pcb->ecn_ok) {
		if (pcb->ecn_demand_cwr)
			flags |= TCP_ECE;   /* until the peer's CWR */
		/* ECT only on new data: never on pure ACKs or retransmissions
		 * (RFC 3168 6.1.4, 6.1.5); the first one after a reduction
		 * carries CWR */
		if (len && SEQ_GEQ(seq, pcb->snd_max)) {
			e.ip_ecn = TCP_IP_ECT0;
			if (pcb->ecn_queue_cwr) {
				flags |= TCP_CWR;
				pcb->ecn_queue_cwr = false;
			}
		}
	}
	e.flags = flags;
	uint32_t win = rcv_window(pcb);
	e.wnd = (flags & TCP_SYN) ? (uint16_t)tcp_min32(win, 65535) : (uint16_t)(win >> pcb->rcv_wscale);
	if ((flags & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK))
		pcb->rcv_adv = pcb->rcv_nxt + e.wnd;   /* a SYN's window is never scaled */
	e.optlen = build_opts(pcb, flags, len, e.opts);
	if (flags & TCP_ACK) {
		pcb->last_ack_sent = pcb->rcv_nxt;
		/* quick-ACK mode spends one per ACK that was due (Linux's
		 * tcp_dec_quickack_mode) */
		if (pcb->quick && (pcb->ack_now || pcb->delack_at))
			pcb->quick--;
		/* data within a delayed-ACK time of the peer's: a request/response
		 * exchange (Linux's pingpong heuristic) */
		if (len && pcb->last_data_rx_ms &&
		    pcb->ctx->now_ms - pcb->last_data_rx_ms < pcb->ctx->set.delack_ms)
			pcb->pingpong = true;
		pcb->ack_now = pcb->ack_delayed = pcb->ack_pushed = pcb->ack_batch = pcb->ack_batch_sack = false;
		pcb->delack_at = 0;
		pcb->segs_unacked = 0;
		pcb->ofo_held_acks = 0;
	}
	if (len && pcb->sbuf_len && SEQ_LT(seq, pcb->snd_max)) {
		pcb->retransmits++, pcb->ctx->cnt.tx_retransmits++;
		pcb->bytes_retrans += len;
		if (pcb->undo_armed)
			pcb->undo_retrans = (pcb->undo_retrans < 0 ? 0 : pcb->undo_retrans) +
					    (int32_t)((len + pcb->mss - 1) / pcb->mss);
	} else if (len) {
		pcb->ctx->cnt.tx_payload_bytes += len;
	} else if (!(flags & (TCP_SYN | TCP_FIN))) {
		pcb->ctx->cnt.tx_pure_acks++;
	}
	if (len) {
		if (pcb->snd_una == pcb->snd_max && SEQ_GEQ(seq, pcb->snd_max))
			pcb->una_since_ms = pcb->ctx->now_ms;   /* a new flight: TCP_USER_TIMEOUT counts from here */
		pcb->last_data_tx_ms = pcb->ctx->now_ms;
		pcb->bytes_sent += len;
		pcb->data_segs_out++;
	}
	pcb->segs_out++;
	/* New data past snd_max may end stamped writes (first transmission
	 * only: a resent segment is not stamped again). */
	struct tcp_pcb *stamp = NULL;
	if (__builtin_expect(pcb->tx_stamps != NULL, 0) && len && SEQ_GT(seq + len, pcb->snd_max) &&
	    pcb->tx_stamps->sent < pcb->tx_stamps->count)
		stamp = pcb;
	int rc = emit(pcb->ctx, pcb->nif, pcb_tmpl(pcb), &e, pcb, len, stamp);
	if (rc == 0 && (len || (flags & TCP_FIN)) && !(flags & TCP_SYN)) {
		tcp_txq_sent(pcb, seq, seq + len + !!(flags & TCP_FIN), flags & TCP_FIN);
		if (pcb->in_recovery)
			pcb->prr_out += len ? len : 1;
	}
	return rc;
}

void tcp_send_ack(struct tcp_pcb *pcb)
{
	tcp_send_segment(pcb, pcb->snd_nxt, 0, 0);
}

void tcp_send_rst(struct tcp_pcb *pcb)
{
	struct tcp_emit e = { .seq = pcb->snd_nxt, .ack = pcb->rcv_nxt, .flags = TCP_RST | TCP_ACK };
	pcb->ctx->cnt.tx_rsts++;
	emit_other(pcb->ctx, pcb->nif, pcb_tmpl(pcb), &e);
}

/* A segment to the sender of rx that no connection sends (a reset, a SYN
 * cookie's SYN-ACK): its headers built for it alone. */
static void reply(struct tcp_ctx *ctx, const struct tcp_rx *rx, const struct tcp_emit *e)
{
	struct tcp_tmpl t;
	const struct stack_netif *nif = rx->nif ? rx->nif : ctx->nif;
	tmpl_build(&t, ctx->st, nif, rx->ip->dst, rx->ip->src, rx->dport, rx->sport, rx->src_mac);
	emit_other(ctx, nif, &t, e);
}

/* RFC 9293 3.5.2: the reset for a segment that belongs to no connection. */
void tcp_send_rst_reply(struct tcp_ctx *ctx, const struct tcp_rx *rx)
{
	const struct tcp_seg *seg = &rx->seg;
	struct tcp_emit e = { .flags = TCP_RST };

	if (!rx->src_mac || (seg->flags & TCP_RST))
		return;
	if (seg->flags & TCP_ACK) {
		e.seq = seg->ack;
	} else {
		e.ack = seg->seq + tcp_seg_space(seg);
		e.flags = TCP_RST | TCP_ACK;
	}
	ctx->cnt.tx_rsts++;
	reply(ctx, rx, &e);
}

void tcp_send_synack_cookie(struct tcp_ctx *ctx, const struct tcp_rx *rx, uint32_t iss, uint32_t ack, uint32_t mss,
			    uint16_t wnd)
{
	/* No window scale, SACK or timestamps: nothing would remember that
	 * we offered them. */
	struct tcp_emit e = { .seq = iss, .ack = ack, .flags = TCP_SYN | TCP_ACK, .wnd = wnd,
			      .opts = { 2, 4 }, .optlen = 4 };

	if (!rx->src_mac)
		return;
	stack_put16(e.opts + 2, (uint16_t)mss);
	ctx->cnt.tx_syncookies++;
	reply(ctx, rx, &e);
}

/* ---- transmit stamps (SO_TIMESTAMPING on a stream) ---- */

static struct tcp_tx_stamp_rec *tx_stamp_rec(struct tcp_tx_stamps *t, unsigned i)
{
	return &t->rec[(t->head + i) % TCP_TX_STAMPS_MAX];
}

static void tx_stamp_pop_done(struct tcp_tx_stamps *t)
{
	while (t->count && t->sent && !t->rec[t->head].owed) {
		t->head = (t->head + 1) % TCP_TX_STAMPS_MAX;
		t->count--;
		t->sent--;
	}
}

static void tx_stamp_due(struct tcp_pcb *pcb, struct tcp_tx_stamp_rec *r, unsigned kind, const uint8_t *hdr,
			 uint32_t hdr_len)
{
	if (!(r->owed & kind))
		return;
	r->owed &= (uint8_t)~kind;
	if (pcb->cb.tx_stamp)
		pcb->cb.tx_stamp(pcb->cb_arg, pcb, kind, r->end - r->len, r->end, hdr, hdr_len);
}

void tcp_tx_stamp_transmit(struct tcp_pcb *pcb, uint32_t end, unsigned kind, const uint8_t *hdr, uint32_t hdr_len)
{
	struct tcp_tx_stamps *t = pcb->tx_stamps;
	unsigned i = t->sent;
	for (; i < t->count; i++) {
		struct tcp_tx_stamp_rec *r = tx_stamp_rec(t, i);
		if (SEQ_GT(r->end, end))
			break;
		tx_stamp_due(pcb, r, kind, hdr, hdr_len);
	}
	/* SND is the last stage of a transmission: those records are sent. */
	if (kind == TCP_TX_STAMP_SND) {
		t->sent = i;
		tx_stamp_pop_done(t);
	}
}

void tcp_tx_stamp_acked(struct tcp_pcb *pcb)
{
	struct tcp_tx_stamps *t = pcb->tx_stamps;
	VMA_ASSERT(t->count <= TCP_TX_STAMPS_MAX && t->sent <= t->count && t->head < TCP_TX_STAMPS_MAX);
	while (t->count && SEQ_LEQ(t->rec[t->head].end, pcb->snd_una)) {
		tx_stamp_due(pcb, &t->rec[t->head], TCP_TX_STAMP_ACK, NULL, 0);
		t->head = (t->head + 1) % TCP_TX_STAMPS_MAX;
		t->count--;
		if (t->sent)
			t->sent--;
	}
}

bool tcp_tx_stamp_request(struct tcp_pcb *pcb, unsigned kinds, uint32_t len)
{
	kinds &= TCP_TX_STAMP_SCHED | TCP_TX_STAMP_SND | TCP_TX_STAMP_ACK;
	if (!pcb->sbuf_len || !kinds)
		return false;
	if (!pcb->tx_stamps) {
		pcb->tx_stamps = calloc(1, sizeof(*pcb->tx_stamps));
		if (!pcb->tx_stamps)
			return false;
	}
	struct tcp_tx_stamps *t = pcb->tx_stamps;
	uint32_t end = pcb->sbuf_seq + pcb->sbuf_len;
	struct tcp_tx_stamp_rec *r;
	if (t->count == TCP_TX_STAMPS_MAX) {
		/* Full: the newest record stamps this later byte instead. */
		r = tx_stamp_rec(t, t->count - 1);
		if (t->sent == t->count)
			t->sent--;
	} else {
		r = tx_stamp_rec(t, t->count++);
	}
	r->end = end;
	r->len = tcp_min32(len, pcb->sbuf_len);
	r->owed = (uint8_t)kinds;
	/* Already on the wire (a write completed after its data left): the
	 * transmit stamps are due now. */
	if (SEQ_GEQ(pcb->snd_max, end)) {
		tcp_tx_stamp_transmit(pcb, end, TCP_TX_STAMP_SCHED, NULL, 0);
		tcp_tx_stamp_transmit(pcb, end, TCP_TX_STAMP_SND, NULL, 0);
		if (SEQ_GEQ(pcb->snd_una, end))
			tcp_tx_stamp_acked(pcb);
	}
	return true;
}

uint32_t tcp_sndbuf_peek(const struct tcp_pcb *pcb, uint32_t seq, uint32_t len, uint8_t *dst)
{
	uint32_t end = seq + len, held_end = pcb->sbuf_seq + pcb->sbuf_len;
	if (SEQ_LT(seq, pcb->sbuf_seq))
		seq = pcb->sbuf_seq;
	if (SEQ_GT(end, held_end))
		end = held_end;
	if (!pcb->sbuf || !SEQ_LT(seq, end))
		return 0;
	sbuf_copy_out(pcb, seq, dst, end - seq);
	return end - seq;
}

uint32_t tcp_snd_una(const struct tcp_pcb *pcb)
{
	return pcb->snd_una;
}

uint32_t tcp_write_seq(const struct tcp_pcb *pcb)
{
	return pcb->sbuf_seq + pcb->sbuf_len;
}

uint32_t tcp_flight(const struct tcp_pcb *pcb)
{
	return pcb->snd_nxt - pcb->snd_una;
}

void tcp_arm_rto(struct tcp_pcb *pcb)
{
	uint64_t rto = (uint64_t)pcb->rto_ms << pcb->backoff;
	if (rto > pcb->ctx->set.rto_max_ms)
		rto = pcb->ctx->set.rto_max_ms;
	if (pcb->user_timeout_ms) {
		/* as Linux's tcp_clamp_rto_to_user_timeout: the expiry that ends
		 * the connection comes at the user timeout, not one backoff later */
		uint64_t end = pcb->una_since_ms + pcb->user_timeout_ms;
		uint64_t left = end > pcb->ctx->now_ms ? end - pcb->ctx->now_ms : 1;
		if (left < rto)
			rto = left;
	}
	pcb->rto_at = tcp_deadline(pcb->ctx, pcb->ctx->now_ms + rto);
}

int tcp_write(struct tcp_pcb *pcb, const void *data, uint32_t len, unsigned flags)
{
	switch (pcb->state) {
	case TCP_SYN_SENT: case TCP_SYN_RCVD: case TCP_ESTABLISHED: case TCP_CLOSE_WAIT:
		break;
	case TCP_CLOSED: case TCP_LISTEN:
		return -ENOTCONN;
	default:
		return -EPIPE;
	}
	if (pcb->wr_shut)
		return -EPIPE;
	uint32_t room = pcb->sbuf_size - pcb->sbuf_len;
	if (room <= len)
		pcb->snd_nospace = true;   /* full now: an ACK may grow it (tcp_sndbuf_expand) */
	if (!room)
		return -EAGAIN;
	uint32_t n = tcp_min32(room, len);
	uint32_t idx = sbuf_wrap(pcb, pcb->sbuf_off + pcb->sbuf_len);
	uint32_t first = tcp_min32(n, pcb->sbuf_size - idx);
	memcpy(pcb->sbuf + idx, data, first);
	if (n > first)
		memcpy(pcb->sbuf, (const uint8_t *)data + first, n - first);   /* wrapped */
	pcb->sbuf_len += n;
	VMA_ASSERT(pcb->sbuf_len <= pcb->sbuf_size);
	if (flags & TCP_WRITE_MORE)
		return (int)n;
	if (flags & TCP_WRITE_PUSH) {
		bool nd = pcb->nodelay;
		pcb->nodelay = true;
		tcp_output(pcb);
		pcb->nodelay = nd;
	} else {
		tcp_output(pcb);
	}
	return (int)n;
}

/* Resends the records deemed lost, lowest first, while the window allows
 * (in the loss state after an RTO only those below snd_nxt: the rest is
 * resent from snd_nxt anyway). SACKed parts of a record are skipped; a
 * record once started goes whole. */
static void resend_lost(struct tcp_pcb *pcb, uint32_t *pipe)
{
	struct tcp_txq *q = &pcb->txq;
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	uint32_t seg_max = tcp_seg_max(pcb);
	uint32_t off = q->lost_hint;

	for (; off < q->count && q->lost_segs; off++) {
		struct tcp_txseg *r = tcp_txq_at(q, off);
		if (!(r->flags & TCP_TXSEG_LOST))
			continue;
		if (*pipe >= pcb->cwnd || (pcb->in_loss && SEQ_GEQ(r->start, pcb->snd_nxt)))
			break;
		pcb->rtt_timing = false;   /* Karn */
		if (r->flags & TCP_TXSEG_FIN) {
			if (tcp_send_segment(pcb, data_end, 0, TCP_FIN) != 0)
				break;
			*pipe += 1;
			continue;
		}
		uint32_t seq = r->start, end = r->end;
		bool failed = false;
		while (SEQ_LT(seq, end)) {
			uint32_t run_end;
			if (pcb->nsacked && tcp_sack_is_sacked(pcb, seq, &run_end)) {
				seq = run_end;
				continue;
			}
			uint32_t stop = pcb->nsacked && SEQ_LT(run_end, end) ? run_end : end;
			uint32_t len = tcp_min32(stop - seq, seg_max);
			if (SEQ_GT(seq + len, data_end))
				len = SEQ_GT(data_end, seq) ? data_end - seq : 0;
			if (!len || tcp_send_segment(pcb, seq, len, 0) != 0) {
				failed = true;
				break;
			}
			*pipe += len;
			seq += len;
		}
		if (failed)
			break;
	}
	q->lost_hint = off;
}

int tcp_output(struct tcp_pcb *pcb)
{
	if (tcp_output_idle(pcb))
		return 0;
	switch (pcb->state) {
	case TCP_ESTABLISHED: case TCP_CLOSE_WAIT: case TCP_FIN_WAIT_1: case TCP_CLOSING:
	case TCP_LAST_ACK:
		break;
	case TCP_FIN_WAIT_2: case TCP_TIME_WAIT: case TCP_SYN_RCVD:
		if (pcb->ack_now)
			tcp_send_ack(pcb);
		return 0;
	default:
		return 0;
	}
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	uint32_t pipe = pcb->in_recovery ? tcp_recovery_pipe(pcb) : tcp_flight(pcb);
	bool sent_any = false;
	bool above_lowat = pcb->notsent_lowat != UINT32_MAX && tcp_sndbuf_notsent(pcb) >= pcb->notsent_lowat;

	if (SEQ_LT(pcb->snd_nxt, data_end) && pcb->snd_una == pcb->snd_max)
		tcp_cc_restart_after_idle(pcb);
	if ((pcb->in_recovery || pcb->in_loss) && pcb->txq.lost_segs) {
		uint64_t before = pcb->segs_out;
		resend_lost(pcb, &pipe);
		sent_any = pcb->segs_out != before;
	}
	for (;;) {
		uint32_t seq = pcb->snd_nxt;
		uint32_t run_end;
		while (pcb->nsacked && SEQ_LT(seq, data_end) && tcp_sack_is_sacked(pcb, seq, &run_end))
			seq = pcb->snd_nxt = run_end;
		if (SEQ_GEQ(seq, data_end))
			break;
		uint32_t avail = data_end - seq;
		uint32_t wnd_edge = pcb->snd_una + pcb->snd_wnd;
		uint32_t by_wnd = SEQ_GT(wnd_edge, seq) ? wnd_edge - seq : 0;
		/* in recovery PRR's cwnd admits whole segments */
		uint32_t by_cwnd = pcb->cwnd > pipe ? (pcb->in_recovery ? UINT32_MAX : pcb->cwnd - pipe) : 0;
		uint32_t seg_max = tcp_seg_max(pcb);
		uint32_t len = tcp_min32(tcp_min32(avail, seg_max), tcp_min32(by_wnd, by_cwnd));
		if (pcb->nsacked && SEQ_LT(seq, tcp_sack_highest(pcb)))
			len = tcp_min32(len, run_end - seq);   /* stop at the next SACKed run */
		if (!len)
			break;
		/* Nagle (RFC 9293 3.7.4) in Minshall's form, as Linux: a small
		 * segment waits only while an earlier small one is unacknowledged,
		 * so the tail of a bulk write behind full segments leaves at once;
		 * a FIN waiting behind the data or the last bytes before it may go. */
		if (len < seg_max && len == avail && !pcb->nodelay &&
		    SEQ_GT(pcb->snd_sml, pcb->snd_una) && SEQ_LEQ(pcb->snd_sml, pcb->snd_nxt) &&
		    !pcb->fin_queued)
			break;
		/* TCP_CORK: the partial tail waits for more (a FIN behind it
		 * sends it, as Linux's close pushes); the ceiling starts once
		 * nothing is in flight to bring an ACK. */
		if (pcb->cork && !pcb->cork_push && len < seg_max && len == avail && !pcb->fin_queued) {
			if (!pcb->cork_at && !tcp_flight(pcb))
				pcb->cork_at = tcp_deadline(pcb->ctx, pcb->ctx->now_ms + TCP_CORK_CEILING_MS);
			break;
		}
		if (len < seg_max && len < avail && tcp_flight(pcb) && len < pcb->max_snd_wnd / 2)
			break;   /* window-limited: wait for a full segment's worth (sender SWS) */
		if (SEQ_GT(seq + len, pcb->snd_max) && !tcp_txq_room(&pcb->txq))
			break;   /* as many segments in flight as records: wait for ACKs */
		/* PSH on the last segment of the data (Linux's push at the end of
		 * a write) and on the last one cwnd or the window let out while
		 * more waits: we now wait for an ACK, and a Linux receiver
		 * delays its ACK of an unpushed lone segment up to 40 ms but
		 * ACKs a pushed one as soon as its reader takes it (a flight
		 * whose ACK was lost otherwise waits for that timer). */
		bool limited = len < avail &&
			       ((pcb->in_recovery ? pipe + len >= pcb->cwnd : by_cwnd - len < seg_max) ||
				by_wnd - len < seg_max);
		if (tcp_send_segment(pcb, seq, len, seq + len == data_end || limited ? TCP_PSH : 0) != 0)
			break;
		if (!pcb->rtt_timing && SEQ_GEQ(seq, pcb->snd_max)) {
			pcb->rtt_timing = true;
			pcb->rtt_seq = seq + len;
			pcb->rtt_start_ms = pcb->ctx->now_ms;
			pcb->rtt_start_us = pcb->ctx->now_us;
		}
		pcb->snd_nxt = seq + len;
		pcb->data_sent_ms = pcb->ctx->now_ms ? pcb->ctx->now_ms : 1;
		if (len < seg_max)
			pcb->snd_sml = pcb->snd_nxt;
		if (SEQ_GT(pcb->snd_nxt, pcb->snd_max))
			pcb->snd_max = pcb->snd_nxt;
		pipe += len;
		sent_any = true;
		if (!pcb->rto_at)
			tcp_arm_rto(pcb);
	}
	if (pcb->fin_queued && pcb->snd_nxt == data_end &&
	    (SEQ_LT(data_end, pcb->snd_max) || tcp_txq_room(&pcb->txq)) &&
	    tcp_send_segment(pcb, data_end, 0, TCP_FIN) == 0) {
		pcb->fin_sent = true;
		pcb->snd_nxt = data_end + 1;
		if (SEQ_GT(pcb->snd_nxt, pcb->snd_max))
			pcb->snd_max = pcb->snd_nxt;
		sent_any = true;
		if (!pcb->rto_at)
			tcp_arm_rto(pcb);
	}
	/* Persist (RFC 9293 3.8.6.1): data waits on a zero window and nothing
	 * is in flight to bring a window update back. */
	if (!pcb->snd_wnd && SEQ_LT(pcb->snd_nxt, data_end) && pcb->snd_nxt == pcb->snd_una) {
		if (!pcb->persist_at)
			pcb->persist_at = tcp_deadline(pcb->ctx, pcb->ctx->now_ms +
						       tcp_max32(pcb->rto_ms, pcb->ctx->set.rto_min_ms));
		pcb->rto_at = 0;
		pcb->tlp_at = 0;
	}
	if (sent_any && pcb->rto_at)
		tcp_arm_tlp(pcb);   /* measured from the last segment of the flight */
	tcp_rate_check_app_limited(pcb, pipe, data_end);
	tcp_cc_note_usage(pcb, pipe, sent_any);
	/* A writer held by TCP_NOTSENT_LOWAT waits for transmission, not for an
	 * ACK: tell it now (an ACK that opened the window acked nothing new). */
	if (above_lowat && sent_any && tcp_sndbuf_notsent(pcb) < pcb->notsent_lowat && pcb->cb.sent)
		pcb->cb.sent(pcb->cb_arg, pcb, 0);
	if (!sent_any && pcb->ack_now)
		tcp_send_ack(pcb);
	return 0;
}

void tcp_recved(struct tcp_pcb *pcb, uint32_t len)
{
	pcb->rcv_unread -= tcp_min32(len, pcb->rcv_unread);
	pcb->rcv_copied += len;
	tcp_rcv_space_adjust(pcb);
	if (pcb->state != TCP_ESTABLISHED && pcb->state != TCP_FIN_WAIT_1 &&
	    pcb->state != TCP_FIN_WAIT_2)
		return;
	/* A pure window update only when the window the peer knows is at most
	 * half of what we could offer now (as Linux): otherwise the new edge
	 * rides on the next ACK or data segment, and a ping-pong of small
	 * messages never pays for an extra ACK. rcv_window (run by the send)
	 * applies receiver SWS avoidance. */
	uint32_t known = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : 0;
	uint32_t avail = pcb->rcv_buf > pcb->rcv_unread ? pcb->rcv_buf - pcb->rcv_unread : 0;
	avail = tcp_min32(avail, 65535u << pcb->rcv_wscale);
	if (avail > known && avail - known >= tcp_min32(pcb->rcv_buf / 2, pcb->mss) &&
	    known <= avail / 2) {
		tcp_send_ack(pcb);
		return;
	}
	/* Bulk transfer (not interactive): once the app has read everything up
	 * to a pushed segment, its ACK goes now; waiting for the delack timer
	 * would stall a sender whose Nagle holds the tail (as Linux). */
	if (pcb->delack_at && pcb->ack_pushed && !pcb->pingpong && !pcb->rcv_unread)
		tcp_send_ack(pcb);
}

void tcp_rcv_held_set(struct tcp_pcb *pcb, uint32_t frames)
{
	pcb->rcv_held = frames;
}
