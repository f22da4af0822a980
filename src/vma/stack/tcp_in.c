/* TCP receive: header checks, demux, and segment arrival per RFC 9293
 * 3.10.7 with RFC 5961 (RST/SYN/ACK validation), RFC 7323 (PAWS) and the
 * ACK side of loss recovery (RFC 5681/6582/6675). */
#include "stack/tcp_priv.h"
#include "stack/stack_csum.h"

#include <errno.h>
#include <string.h>

static bool callback_killed(struct tcp_pcb *pcb)
{
	return pcb->dead;
}

/* ---- ACKs for segments we reject (RFC 9293 3.10.7.4, RFC 5961) ----
 * A peer, or an off-path attacker who guessed a 4-tuple, can make us answer
 * segments we refuse. Two limits, as Linux:
 * - per pcb, one such ACK per invalid_ack_interval_ms (500 ms, Linux's
 *   tcp_invalid_ratelimit), shared by challenge ACKs and ACKs for
 *   unacceptable segments: it breaks ACK loops and caps what one
 *   connection can draw;
 * - challenge ACKs (RFC 5961 3.2, 4.2, 5.2) also spend a process-wide budget
 *   per second (RFC 5961 section 7) whose size is drawn at random in
 *   [base/2, base*3/2) each second: with a fixed count, an attacker
 *   exhausting it from its own connection learns whether its spoofed
 *   segments drew challenges on someone else's (CVE-2016-5696).
 * An unacceptable segment carrying data or a FIN (and no SYN) is always
 * answered: it may be a retransmission whose sender needs our ACK (and
 * D-SACK) now, and data cannot loop. Duplicate ACKs for in-window
 * out-of-order data never come here. */

static bool invalid_ack_held(const struct tcp_pcb *pcb)
{
	uint32_t interval = pcb->ctx->set.invalid_ack_interval_ms;
	return interval && pcb->invalid_acked && pcb->ctx->now_ms - pcb->invalid_ack_ms < interval;
}

static void invalid_ack_mark(struct tcp_pcb *pcb)
{
	pcb->invalid_acked = true;
	pcb->invalid_ack_ms = pcb->ctx->now_ms;
}

/* (second + 1) << 32 | challenge ACKs left in that second. One for the
 * process: every ctx (one per lane, each on its own thread) draws on it. */
static uint64_t challenge_budget;

static bool challenge_budget_take(struct tcp_ctx *ctx)
{
	uint32_t base = ctx->set.challenge_ack_per_sec;
	if (!base)
		return true;
	uint32_t sec = (uint32_t)(ctx->now_ms / 1000u) + 1u;
	uint64_t cur = __atomic_load_n(&challenge_budget, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t next;
		uint32_t cur_sec = (uint32_t)(cur >> 32);
		/* a lane whose clock lags a little spends the newer second's budget
		 * rather than starting its own second again */
		if (!cur_sec || (int32_t)(sec - cur_sec) > 0) {
			/* a new second: a budget the peer cannot predict, this ACK taken */
			uint32_t half = (base + 1) / 2;
			uint64_t r = tcp_keyed_hash(ctx->hash_key, sec, (uint64_t)(uintptr_t)ctx);
			uint32_t n = half + (uint32_t)(r % base);
			next = (uint64_t)sec << 32 | (n - 1);
		} else if (!(uint32_t)cur) {
			return false;
		} else {
			next = cur - 1;
		}
		if (__atomic_compare_exchange_n(&challenge_budget, &cur, next, false,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return true;
	}
}

static void challenge_ack(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (invalid_ack_held(pcb)) {
		ctx->cnt.tx_challenge_acks_limited++;
		return;
	}
	if (!challenge_budget_take(ctx)) {
		ctx->cnt.tx_challenge_acks_over_budget++;
		return;
	}
	invalid_ack_mark(pcb);
	ctx->cnt.tx_challenge_acks++;
	tcp_send_ack(pcb);
}

/* Whether an unacceptable segment gets its ACK (or repeated SYN-ACK) now. */
static bool invalid_ack_allowed(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
	if ((seg->len || (seg->flags & TCP_FIN)) && !(seg->flags & TCP_SYN))
		return true;
	if (invalid_ack_held(pcb)) {
		pcb->ctx->cnt.tx_invalid_acks_limited++;
		return false;
	}
	invalid_ack_mark(pcb);
	return true;
}

static void negotiate(struct tcp_pcb *pcb, const struct tcp_seg *seg, bool we_offered)
{
	const struct tcp_settings *s = &pcb->ctx->set;
	uint32_t peer_mss = seg->opt.has_mss && seg->opt.mss ? seg->opt.mss : 536;
	pcb->peer_mss = peer_mss;
	if (!we_offered)
		pcb->adv_mss = tcp_local_mss(pcb);
	/* As Linux: the peer's MSS within our path MTU; what we announced
	 * bounds what we receive, not what we send. */
	pcb->mss = tcp_min32(tcp_path_mss(pcb), peer_mss);
	if (pcb->mss < 64)
		pcb->mss = 64;
	pcb->ws_ok = s->window_scaling && seg->opt.has_ws;
	pcb->snd_wscale = pcb->ws_ok ? seg->opt.ws : 0;
	if (!we_offered)   /* passive: our shift is chosen now */
		pcb->rcv_wscale = pcb->ws_ok ? tcp_pcb_wscale(pcb) : 0;
	else if (!pcb->ws_ok)
		pcb->rcv_wscale = 0;
	pcb->sack_ok = s->sack && seg->opt.sack_perm;
	/* ECN (RFC 3168 6.1.1): a SYN asks with ECE and CWR, its SYN-ACK
	 * agrees with ECE alone. As Linux's tcp_ecn: 2 accepts, 1 also asks. */
	if (!we_offered)
		pcb->ecn_ok = s->ecn && (seg->ecn_flags & (TCP_ECE | TCP_CWR)) == (TCP_ECE | TCP_CWR);
	else
		pcb->ecn_ok = s->ecn == 1 && (seg->ecn_flags & (TCP_ECE | TCP_CWR)) == TCP_ECE;
	pcb->ts_ok = s->timestamps != TCP_TS_OFF && seg->opt.has_ts;
	if (pcb->ts_ok)
		pcb->ts_recent = seg->opt.ts_val;
	pcb->irs = seg->seq;
	pcb->rcv_nxt = seg->seq + 1;
	pcb->rcv_adv = pcb->rcv_nxt;
	pcb->snd_wnd = seg->wnd;    /* never scaled in a SYN (RFC 7323 2.2) */
	pcb->max_snd_wnd = pcb->snd_wnd;
	pcb->snd_wl1 = seg->seq;
	pcb->snd_wl2 = seg->ack;
	tcp_cc_init(pcb);
}

/* Linux's sk_acceptq_is_full: backlog + 1 may wait. */
static bool accept_queue_full(const struct tcp_pcb *lis)
{
	return lis->accept_queued > lis->backlog;
}

/* The window of a cookie SYN-ACK (unscaled: the option is not offered). */
static uint16_t cookie_window(const struct tcp_pcb *lis)
{
	return (uint16_t)tcp_min32(lis->rcv_buf ? lis->rcv_buf : 65535, 65535);
}

static void established(struct tcp_pcb *pcb);
static void process_data(struct tcp_pcb *pcb, struct tcp_seg *seg);

/* An ACK to a listener that may end a handshake we answered with a cookie.
 * True when it was one (a connection made, or dropped because the accept
 * queue is full); false to answer it with a reset. */
static bool cookie_ack(struct tcp_pcb *lis, struct tcp_rx *rx)
{
	struct tcp_ctx *ctx = lis->ctx;
	struct tcp_seg *seg = &rx->seg;
	const struct stack_ip4_info *ip = rx->ip;
	uint16_t sport = rx->sport, dport = rx->dport;
	uint32_t mss;
	if (!tcp_syncookie_check(ctx, ip->dst, dport, ip->src, sport, seg->seq - 1, seg->ack - 1, &mss)) {
		ctx->cnt.rx_syncookies_bad++;
		return false;
	}
	if (accept_queue_full(lis)) {
		ctx->cnt.rx_accept_queue_full++;
		return true;   /* dropped: the peer's retransmission finds room later */
	}
	struct tcp_pcb *c = tcp_pcb_alloc(ctx, lis, rx->nif);
	if (!c)
		return true;
	ctx->cnt.rx_syncookies_ok++;
	c->local_ip = ip->dst;
	c->local_port = dport;
	c->remote_ip = ip->src;
	c->remote_port = sport;
	c->bound = true;
	memcpy(c->dst_mac, rx->src_mac, 6);
	/* What the cookie SYN-ACK offered: MSS only, no scaling, SACK or
	 * timestamps (the SYN's other options are forgotten). */
	c->peer_mss = mss;
	c->adv_mss = mss;
	c->mss = mss;
	c->ws_ok = false;
	c->snd_wscale = c->rcv_wscale = 0;
	c->sack_ok = false;
	c->ts_ok = false;
	c->irs = seg->seq - 1;
	c->rcv_nxt = seg->seq;
	c->rcv_adv = c->rcv_nxt + cookie_window(lis);
	c->iss = seg->ack - 1;
	c->snd_una = c->snd_sml = c->snd_nxt = c->snd_max = seg->ack;
	c->sbuf_seq = seg->ack;
	c->snd_wnd = seg->wnd;
	c->max_snd_wnd = c->snd_wnd;
	c->snd_wl1 = seg->seq;
	c->snd_wl2 = seg->ack;
	tcp_cc_init(c);
	tcp_pcb_hash_conn(c);
	established(c);
	int rc = lis->cb.accept ? lis->cb.accept(lis->cb_arg, lis, c) : -ECONNREFUSED;
	if (callback_killed(c))
		return true;
	if (rc < 0) {
		tcp_send_rst(c);
		tcp_pcb_release(c);
		return true;
	}
	lis->accept_queued++;
	process_data(c, seg);
	if (!c->dead)
		tcp_output(c);
	return true;
}

/* isn: NULL, or the ISN to use (a tuple reopened from TIME_WAIT). */
static void listen_input(struct tcp_pcb *lis, struct tcp_rx *rx, const uint32_t *isn)
{
	struct tcp_ctx *ctx = lis->ctx;
	struct tcp_seg *seg = &rx->seg;
	const struct stack_netif *nif = rx->nif;
	const struct stack_ip4_info *ip = rx->ip;
	uint16_t sport = rx->sport, dport = rx->dport;

	if (seg->flags & TCP_RST)
		return;
	/* A port whose sharers all see its new flows (verbs): one takes
	 * each, the others keep quiet (no reset for a cookie ACK either). */
	if (lis->cb.admit && !lis->cb.admit(lis->cb_arg, nif, ip->src, sport)) {
		ctx->cnt.rx_share_other++;
		return;
	}
	if (seg->flags & TCP_ACK) {
		if (!(seg->flags & TCP_SYN) && cookie_ack(lis, rx))
			return;
		tcp_send_rst_reply(ctx, rx);
		return;
	}
	if (!(seg->flags & TCP_SYN))
		return;
	if (accept_queue_full(lis)) {
		/* Linux drops the SYN too: the peer's retransmission comes
		 * back when the application has accepted. */
		ctx->cnt.rx_accept_queue_full++;
		return;
	}
	if (ctx->set.max_syn_rate) {
		if (ctx->now_ms - lis->syn_window_start_ms >= 1000 || !lis->syn_window_start_ms) {
			lis->syn_window_start_ms = ctx->now_ms ? ctx->now_ms : 1;
			lis->syn_in_window = 0;
		}
		if (lis->syn_in_window >= ctx->set.max_syn_rate) {
			ctx->cnt.rx_syn_rate_limited++;
			return;
		}
		lis->syn_in_window++;
	}
	if (lis->pending_children >= lis->backlog) {
		/* SYN queue full (a flood, or a slow handshake mix): answer
		 * without keeping state; the ACK's cookie makes the connection. */
		ctx->cnt.rx_backlog_full++;
		uint32_t peer_mss = seg->opt.has_mss && seg->opt.mss ? seg->opt.mss : 536;
		struct tcp_route_metrics rm = { 0, 0 };
		if (ctx->route_fn)
			ctx->route_fn(ctx->route_arg, ip->src, &rm);
		uint32_t mss = tcp_min32(peer_mss, tcp_path_mss_for(ctx, nif, lis->mss_clamp, &rm));
		uint32_t cookie = tcp_syncookie_make(ctx, ip->dst, dport, ip->src, sport, seg->seq, mss);
		tcp_send_synack_cookie(ctx, rx, cookie, seg->seq + 1, tcp_mss_for(ctx, nif, lis->mss_clamp, &rm),
				       cookie_window(lis));
		return;
	}
	/* The child inherits the listener's settings; it answers on the
	 * interface its SYN came in on. */
	struct tcp_pcb *c = tcp_pcb_alloc(ctx, lis, nif);
	if (!c)
		return;
	c->local_ip = ip->dst;
	c->local_port = dport;
	c->remote_ip = ip->src;
	c->remote_port = sport;
	c->bound = true;
	memcpy(c->dst_mac, rx->src_mac, 6);
	c->parent = lis;
	lis->pending_children++;
	/* Linux's tcp_synack_retries: a half-open child lives about a minute,
	 * not the two of an active open. */
	if (c->syn_retries > TCP_SYNACK_RETRIES)
		c->syn_retries = TCP_SYNACK_RETRIES;
	tcp_pcb_hash_conn(c);
	tcp_set_state(c, TCP_SYN_RCVD);
	if (ctx->route_fn)
		ctx->route_fn(ctx->route_arg, c->remote_ip, &c->route);
	negotiate(c, seg, false);
	if (lis->cb.child_born) {
		lis->cb.child_born(lis->cb_arg, lis, c);
		if (callback_killed(c))
			return;
	}
	c->iss = isn ? *isn : tcp_isn(ctx, c->local_ip, dport, c->remote_ip, sport);
	c->una_since_ms = ctx->now_ms;
	c->snd_una = c->snd_sml = c->iss;
	c->sbuf_seq = c->iss + 1;
	tcp_send_segment(c, c->iss, 0, TCP_SYN);
	c->snd_nxt = c->snd_max = c->iss + 1;
	c->rtt_timing = true;
	c->rtt_seq = c->iss + 1;
	c->rtt_start_ms = ctx->now_ms;
	c->rtt_start_us = ctx->now_us;
	tcp_arm_rto(c);
}

static void established(struct tcp_pcb *pcb)
{
	pcb->syn_acked = true;
	tcp_set_state(pcb, TCP_ESTABLISHED);
	/* auto-tuning's first measure: what the initial window carries (Linux's
	 * tcp_init_buffer_space: at most 10 segments) */
	pcb->rcvq_space = tcp_min32(pcb->rcv_buf, 10 * pcb->adv_mss);
	pcb->backoff = 0;
	pcb->rto_at = 0;
	pcb->recover = pcb->snd_una;
	tcp_rack_init(pcb);
	if (pcb->keepalive)
		pcb->keepalive_at = pcb->ctx->now_ms + pcb->ka_idle_ms;
}

static void syn_sent_input(struct tcp_pcb *pcb, struct tcp_rx *rx)
{
	struct tcp_seg *seg = &rx->seg;
	bool ack_ok = false;

	if (seg->flags & TCP_ACK) {
		if (SEQ_LEQ(seg->ack, pcb->iss) || SEQ_GT(seg->ack, pcb->snd_max)) {
			tcp_send_rst_reply(pcb->ctx, rx);
			return;
		}
		ack_ok = true;
	}
	if (seg->flags & TCP_RST) {
		if (ack_ok) {
			pcb->ctx->cnt.rx_rst_accepted++;
			tcp_pcb_fail(pcb, ECONNREFUSED);
		}
		return;
	}
	if (!(seg->flags & TCP_SYN))
		return;
	negotiate(pcb, seg, true);
	if (ack_ok) {
		if (pcb->ts_ok && seg->opt.ts_ecr)
			tcp_rtt_sample(pcb, (uint32_t)pcb->ctx->now_ms - seg->opt.ts_ecr);
		else if (!pcb->backoff)
			tcp_rtt_sample(pcb, (uint32_t)(pcb->ctx->now_ms - pcb->rtt_start_ms));
		if (!pcb->backoff)
			tcp_rtt_sample_us(pcb, pcb->ctx->now_us - pcb->rtt_start_us);
		pcb->snd_una = seg->ack;
		established(pcb);
		tcp_send_ack(pcb);
		if (pcb->cb.connected) {
			pcb->cb.connected(pcb->cb_arg, pcb);
			if (callback_killed(pcb))
				return;
		}
		tcp_output(pcb);
		return;
	}
	/* Simultaneous open (RFC 9293 figure 7). */
	tcp_set_state(pcb, TCP_SYN_RCVD);
	tcp_send_segment(pcb, pcb->iss, 0, TCP_SYN);
	tcp_arm_rto(pcb);
}

/* RFC 9293 3.10.7.4 first check, the four acceptance cases. */
static bool seq_acceptable(const struct tcp_pcb *pcb, uint32_t seq, uint32_t len)
{
	uint32_t wnd = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : 0;
	uint32_t end = pcb->rcv_nxt + wnd;

	if (!len)
		return wnd ? SEQ_LEQ(pcb->rcv_nxt, seq) && SEQ_LT(seq, end) : seq == pcb->rcv_nxt;
	if (!wnd)
		return false;
	return (SEQ_LEQ(pcb->rcv_nxt, seq) && SEQ_LT(seq, end)) ||
	       (SEQ_LEQ(pcb->rcv_nxt, seq + len - 1) && SEQ_LT(seq + len - 1, end));
}

static void fin_acked_transitions(struct tcp_pcb *pcb)
{
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	if (!pcb->fin_sent || !SEQ_GT(pcb->snd_una, data_end))
		return;
	pcb->rto_at = 0;
	if (pcb->state == TCP_FIN_WAIT_1)
		tcp_set_state(pcb, TCP_FIN_WAIT_2);
	else if (pcb->state == TCP_CLOSING)
		tcp_enter_time_wait(pcb);
	else if (pcb->state == TCP_LAST_ACK)
		tcp_pcb_done(pcb);
}

/* Without SACK (NewReno, RFC 6582): the segment at snd_una is lost (three
 * duplicate ACKs, early retransmit, or a partial ACK in recovery). */
static void newreno_mark_lost(struct tcp_pcb *pcb)
{
	struct tcp_txq *q = &pcb->txq;
	if (q->seg && q->count) {
		tcp_txq_mark_lost(pcb, tcp_txq_at(q, 0));
		return;
	}
	/* not tracked (no memory for the records): resend it here */
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	uint32_t len = tcp_min32(tcp_seg_max(pcb), SEQ_LT(pcb->snd_una, data_end) ? data_end - pcb->snd_una : 0);
	if (len)
		tcp_send_segment(pcb, pcb->snd_una, len, 0);
	else if (pcb->fin_sent)
		tcp_send_segment(pcb, data_end, 0, TCP_FIN);
}

/* ECE (RFC 3168 6.1.2): the network marked our data; react as to a loss
 * (ssthresh and cwnd reduced) at most once per window of data, and say so
 * with CWR on our next new segment. In recovery the loss response stands. */
static void ecn_echo(struct tcp_pcb *pcb)
{
	if (pcb->ecn_cwr_active || pcb->in_recovery || pcb->snd_una == pcb->snd_max)
		return;
	tcp_cc_on_loss(pcb);
	pcb->undo_armed = false;   /* a mark is no loss a D-SACK could disprove (Linux's tcp_enter_cwr) */
	pcb->ecn_cwr_active = true;
	pcb->ecn_high = pcb->snd_max;
	pcb->ecn_queue_cwr = true;
	pcb->ctx->cnt.tx_ecn_cwnd_reduced++;
}

/* Loss detection and the window after an ACK (Linux's
 * tcp_fastretrans_alert and tcp_cong_control): recovery or the loss state
 * ends once snd_una reaches recover; RACK (with SACK) or duplicate ACKs
 * (without) find losses; in recovery PRR sets cwnd, outside it the
 * congestion control grows it. */
void tcp_ack_loss_and_window(struct tcp_pcb *pcb, uint32_t acked, uint32_t delivered, bool dupack)
{
	bool ended = false;
	bool bbr = pcb->cc_algo == TCP_CC_BBR;
	tcp_rate_on_ack(pcb, delivered);
	if (pcb->in_recovery && SEQ_GEQ(pcb->snd_una, pcb->recover)) {
		tcp_recovery_exit(pcb);   /* full ACK (RFC 6582 3.2 step 3) */
		ended = true;
	}
	if (pcb->in_loss && SEQ_GEQ(pcb->snd_una, pcb->recover)) {
		pcb->in_loss = false;
		if (bbr)
			tcp_bbr_restore_cwnd(pcb);
	}
	uint32_t newly_lost = 0;
	if (pcb->sack_ok) {
		newly_lost = tcp_rack_detect_loss(pcb);
	} else if (dupack) {
		/* Duplicate ACK (RFC 5681 section 2). Early retransmit (RFC
		 * 5827): with fewer than four segments out, three duplicate
		 * ACKs can never come, and only the RTO would. */
		pcb->dupacks++;
		uint32_t out_segs = (pcb->snd_max - pcb->snd_una + pcb->mss - 1) / pcb->mss;
		if (!pcb->in_recovery && !pcb->in_loss &&
		    (pcb->dupacks >= 3 || (out_segs < 4 && pcb->dupacks + 1 >= out_segs))) {
			newly_lost = 1;
			if (!pcb->txq.seg)
				tcp_recovery_enter(pcb);   /* the fallback resends at once */
			newreno_mark_lost(pcb);
		}
	} else if (acked) {
		pcb->dupacks = 0;
		if (pcb->in_recovery)
			newreno_mark_lost(pcb);   /* partial ACK: the next hole is lost too */
	}
	if (!pcb->in_recovery && !pcb->in_loss && pcb->txq.lost_segs && !ended)
		tcp_recovery_enter(pcb);
	if (bbr)
		tcp_bbr_on_ack(pcb, delivered, newly_lost);
	else if (pcb->in_recovery)
		tcp_prr_ack(pcb, delivered, newly_lost, acked != 0);
	else if (acked && !ended)
		tcp_cc_on_ack(pcb, acked);
	if (bbr)
		pcb->rs.have = pcb->rs.valid = false;
}

uint32_t tcp_ack_new(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
	struct tcp_ctx *ctx = pcb->ctx;
	uint32_t data_acked = 0;
	pcb->una_since_ms = ctx->now_ms;   /* the oldest unacknowledged byte left later */
	bool timed = pcb->rtt_timing && SEQ_GEQ(seg->ack, pcb->rtt_seq);
	if (pcb->ts_ok && seg->opt.has_ts && seg->opt.ts_ecr)
		tcp_rtt_sample(pcb, (uint32_t)ctx->now_ms - seg->opt.ts_ecr);
	else if (timed)
		tcp_rtt_sample(pcb, (uint32_t)(ctx->now_ms - pcb->rtt_start_ms));
	if (timed) {
		tcp_rtt_sample_us(pcb, ctx->now_us - pcb->rtt_start_us);
		pcb->rtt_timing = false;
	}
	pcb->backoff = 0;
	pcb->snd_una = seg->ack;
	if (pcb->ecn_cwr_active && SEQ_GEQ(pcb->snd_una, pcb->ecn_high))
		pcb->ecn_cwr_active = false;   /* a window after the reduction: ECE counts again */
	if (SEQ_LT(pcb->snd_nxt, pcb->snd_una))
		pcb->snd_nxt = pcb->snd_una;
	if (pcb->nsacked)
		tcp_sack_trim(pcb);
	if (__builtin_expect(pcb->tx_stamps != NULL, 0))
		tcp_tx_stamp_acked(pcb);   /* before their bytes leave the buffer */
	if (SEQ_GT(seg->ack, pcb->sbuf_seq))
		data_acked = tcp_min32(seg->ack - pcb->sbuf_seq, pcb->sbuf_len);
	tcp_sbuf_drop(pcb, data_acked);
	pcb->bytes_acked += data_acked;
	return data_acked;
}

bool tcp_ack_done(struct tcp_pcb *pcb, uint32_t data_acked)
{
	if (pcb->snd_una == pcb->snd_max) {
		/* all acknowledged (every ACK of a ping-pong): no RTO, no
		 * probe, without tcp_arm_tlp's walk through its conditions */
		pcb->rto_at = 0;
		pcb->tlp_at = 0;
	} else {
		tcp_arm_rto(pcb);
		tcp_arm_tlp(pcb);
	}
	if (__builtin_expect(pcb->snd_nospace, 0) && data_acked)
		tcp_sndbuf_expand(pcb);
	if (data_acked && pcb->cb.sent) {
		pcb->cb.sent(pcb->cb_arg, pcb, data_acked);
		if (callback_killed(pcb))
			return false;
	}
	return true;
}

/* ACK processing (step five). false: the segment is done with. */
static bool process_ack(struct tcp_pcb *pcb, struct tcp_seg *seg)
{
	if (SEQ_GT(seg->ack, pcb->snd_max)) {
		challenge_ack(pcb);   /* RFC 5961 5.2: discarded, an ACK sent back */
		return false;
	}
	if (SEQ_LT(seg->ack, pcb->snd_una - pcb->max_snd_wnd)) {
		challenge_ack(pcb);   /* RFC 5961 5.2 */
		return false;
	}
	/* TS.Recent (RFC 7323 section 4.3) only from a segment whose ACK is
	 * acceptable and that covers Last.ACK.sent, as Linux (which stores it
	 * after tcp_ack): a forged or broken ACK of unsent data with a TSval far
	 * ahead would otherwise be echoed from now on, and PAWS would drop the
	 * peer's real segments. */
	uint32_t seg_space = tcp_seg_space(seg);
	if (pcb->ts_ok && seg->opt.has_ts && SEQ_LEQ(seg->seq, pcb->last_ack_sent) &&
	    SEQ_LT(pcb->last_ack_sent, seg->seq + seg_space + (seg_space ? 0 : 1)))
		pcb->ts_recent = seg->opt.ts_val;
	uint32_t new_wnd = seg->wnd << pcb->snd_wscale;
	uint32_t prior_sacked = pcb->nsacked ? tcp_sack_bytes(pcb) : 0;
	struct tcp_range newly[TCP_SCOREBOARD_MAX + TCP_SACK_MAX_BLOCKS], dsack = { 0, 0 };
	unsigned nnew = 0;
	if (pcb->sack_ok && seg->opt.nsack)
		nnew = tcp_sack_update(pcb, &seg->opt, seg->ack, newly, sizeof(newly) / sizeof(newly[0]), &dsack);
	if (pcb->ecn_ok && (seg->ecn_flags & TCP_ECE) && !(seg->flags & TCP_SYN))
		ecn_echo(pcb);
	uint32_t acked = 0, data_acked = 0, prior_una = pcb->snd_una;
	if (SEQ_GT(seg->ack, pcb->snd_una)) {
		acked = seg->ack - pcb->snd_una;
		data_acked = tcp_ack_new(pcb, seg);
	}
	if (acked || nnew)
		tcp_rack_on_ack(pcb, newly, nnew);
	tcp_rack_update_round(pcb);
	bool dsack_tlp = false;
	if (dsack.start != dsack.end) {
		dsack_tlp = pcb->tlp_high && pcb->tlp_retrans && dsack.end == pcb->tlp_high;
		tcp_rack_dsack(pcb, &dsack, prior_una);
	}
	uint32_t sacked_now = pcb->nsacked ? tcp_sack_bytes(pcb) : 0;
	int64_t delivered = (int64_t)acked + (int64_t)sacked_now - (int64_t)prior_sacked;
	/* Without SACK, a duplicate ACK (RFC 5681 section 2) stands for one
	 * segment delivered. */
	bool dupack = !acked && !pcb->sack_ok && seg->ack == pcb->snd_una && pcb->snd_max != pcb->snd_una &&
		      !seg->len && !(seg->flags & (TCP_SYN | TCP_FIN)) && new_wnd == pcb->snd_wnd;
	if (dupack)
		delivered = pcb->mss;
	if (acked || nnew || dupack || pcb->in_recovery)
		tcp_ack_loss_and_window(pcb, acked, delivered > 0 ? (uint32_t)delivered : 0, dupack);
	if (pcb->tlp_high)
		tcp_tlp_ack(pcb, seg->ack, acked != 0, dsack_tlp, acked || seg->len || new_wnd != pcb->snd_wnd || nnew);
	if (acked && !tcp_ack_done(pcb, data_acked))
		return false;
	/* send window update (RFC 9293 3.10.7.4, fifth check) */
	if (SEQ_LT(pcb->snd_wl1, seg->seq) ||
	    (pcb->snd_wl1 == seg->seq && SEQ_LEQ(pcb->snd_wl2, seg->ack))) {
		bool opened = !pcb->snd_wnd && new_wnd;
		pcb->snd_wnd = new_wnd;
		pcb->snd_wl1 = seg->seq;
		pcb->snd_wl2 = seg->ack;
		if (new_wnd > pcb->max_snd_wnd)
			pcb->max_snd_wnd = new_wnd;
		if (opened) {
			pcb->persist_at = 0;
			pcb->persist_backoff = 0;
		}
	}
	fin_acked_transitions(pcb);
	return !pcb->dead;
}

/* An out-of-order segment arrived. One we queued, or a duplicate, brings
 * the sender news (a SACK or D-SACK block): its duplicate ACK leaves now
 * (RFC 5681 section 4.2). One refused by the connection's cap or the ring's
 * frame pressure (a peer spraying segments past a hole) gets a
 * duplicate ACK now for the first TCP_OFO_QUICK_ACKS at this rcv_nxt, then
 * one per millisecond or per TCP_OFO_ACK_BATCH segments, carried by the
 * delayed-ACK deadline (as Linux's SACK compression). */
static void tcp_ofo_ack(struct tcp_pcb *pcb, bool news)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (pcb->ofo_ack_rcv_nxt != pcb->rcv_nxt) {
		pcb->ofo_ack_rcv_nxt = pcb->rcv_nxt;
		pcb->ofo_quick_acks = 0;
	}
	if (pcb->ofo_quick_acks < TCP_OFO_QUICK_ACKS || ++pcb->ofo_held_acks >= TCP_OFO_ACK_BATCH) {
		pcb->ofo_quick_acks++;
		pcb->ack_now = true;
		return;
	}
	/* News for the sender's scoreboard (a segment queued, a D-SACK): one
	 * ACK for the rx batch, as Linux sends one per GRO aggregate and
	 * compresses the SACKs of a train past a hole (an ACK per segment
	 * doubled the frames and the sender's work through a lossy path);
	 * outside a batch at once. */
	if (news) {
		if (!tcp_batch_ack_later(pcb))
			pcb->ack_now = true;
		return;
	}
	uint64_t at = ctx->now_ms + 1;
	if (!pcb->delack_at || pcb->delack_at > at)
		pcb->delack_at = tcp_deadline(ctx, at);
}

static void deliver(struct tcp_pcb *pcb, struct ring_buf *chain)
{
	uint32_t bytes = chain->tot_len;
	if (pcb->rd_shut || !pcb->cb.recv) {
		ring_buf_free(chain);   /* nobody will read it: the window stays open */
		return;
	}
	pcb->rcv_unread += bytes;
	if (tcp_batch_add(pcb, chain))
		return;
	pcb->cb.recv(pcb->cb_arg, pcb, chain);
}

/* The receiver's RTT for auto-tuning (Linux's tcp_rcv_rtt_measure_ts and
 * tcp_rcv_rtt_measure): the echo of our timestamp on a full segment (ms
 * clock: at least 1 ms), else the time the peer takes to send a window. */
static void rcv_rtt_measure(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (pcb->rcv_buf_locked || !ctx->set.rcv_buf_max)
		return;
	if (pcb->ts_ok && seg->opt.has_ts && seg->opt.ts_ecr && seg->len >= pcb->rcv_mss) {
		uint32_t delta = (uint32_t)ctx->now_ms - seg->opt.ts_ecr;
		if (delta < 3600u * 1000u)
			tcp_rcv_rtt_update(pcb, (delta ? delta : 1) * 1000u, false);
	}
	if (pcb->rcv_rtt_time_us) {
		if (SEQ_LT(pcb->rcv_nxt, pcb->rcv_rtt_seq))
			return;
		tcp_rcv_rtt_update(pcb, (uint32_t)tcp_min32((uint32_t)(ctx->now_us - pcb->rcv_rtt_time_us), UINT32_MAX / 8),
				   true);
	}
	uint32_t wnd = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : pcb->rcv_buf;
	pcb->rcv_rtt_seq = pcb->rcv_nxt + wnd;
	pcb->rcv_rtt_time_us = ctx->now_us ? ctx->now_us : 1;
}

bool tcp_data_in_order(struct tcp_pcb *pcb, struct tcp_seg *seg)
{
	struct tcp_ctx *ctx = pcb->ctx;
	struct ring_buf *b = seg->buf;
	seg->buf = NULL;
	pcb->rcv_nxt += seg->len;
	pcb->bytes_received += seg->len;
	ctx->cnt.rx_payload_bytes += seg->len;
	bool filled_hole = pcb->ooo != NULL;
	if (filled_hole) {
		uint32_t from = pcb->rcv_nxt;
		struct ring_buf *more = tcp_ooo_take_ready(pcb);
		if (more) {
			b->next = more;
			stack_buf_chain_fix_tot_len(b);
			/* every advance of rcv_nxt is received bytes (Linux's tcp_rcv_nxt_update) */
			uint32_t taken = pcb->rcv_nxt - from;
			pcb->bytes_received += taken;
			ctx->cnt.rx_payload_bytes += taken;
		}
	}
	pcb->segs_unacked++;
	rcv_rtt_measure(pcb, seg);
	uint32_t ack_bytes = tcp_max32(pcb->rcv_mss, tcp_min32(TCP_ACK_MIN_BYTES, pcb->mss));
	bool two_full = pcb->segs_unacked >= 2 && pcb->rcv_nxt - pcb->last_ack_sent > ack_bytes;
	/* quick-ACK mode (connection start, after idle): at once,
	 * unless interactive, where the reply carries the ACK */
	bool quick = pcb->quick && !pcb->pingpong;
	if (quick && !pcb->ack_now && !two_full && !filled_hole && !pcb->quickack)
		ctx->cnt.tx_quick_acks++;
	/* Inside an rx batch the ACK waits for its end (one for the whole
	 * batch, as Linux ACKs a GRO aggregate once), unless it tells of a
	 * filled hole (the sender's recovery needs it now) or quick-ACK mode
	 * wants every segment ACKed (a starting sender's cwnd grows per ACK). */
	bool batched = ctx->batch_depth && ctx->set.gro_streams_max && !filled_hole && !quick && !pcb->rd_shut &&
		       pcb->cb.recv;
	if (pcb->quickack || filled_hole || two_full || quick) {
		if (batched)
			pcb->ack_batch = true;
		else
			pcb->ack_now = true;
	} else if (!pcb->delack_at) {
		pcb->delack_at = tcp_deadline(ctx, ctx->now_ms + ctx->set.delack_ms);
	}
	if (seg->flags & TCP_PSH)
		pcb->ack_pushed = true;
	deliver(pcb, b);
	return !callback_killed(pcb);
}

/* Steps six to eight: payload and FIN. Takes seg->buf when it keeps it. */
static void process_data(struct tcp_pcb *pcb, struct tcp_seg *seg)
{
	struct tcp_ctx *ctx = pcb->ctx;
	bool fin = seg->flags & TCP_FIN;
	bool data_state = pcb->state == TCP_ESTABLISHED || pcb->state == TCP_FIN_WAIT_1 ||
			  pcb->state == TCP_FIN_WAIT_2;

	if (seg->len && data_state && pcb->ecn_ok) {
		/* RFC 3168 6.1.3: CWR ends our echo (ACK it at once: the sender's
		 * cwnd may be tiny); CE starts it, with quick ACKs as Linux */
		if (seg->ecn_flags & TCP_CWR) {
			pcb->ecn_demand_cwr = false;
			pcb->ack_now = true;
		}
		if (seg->ip_ecn == TCP_IP_CE) {
			ctx->cnt.rx_ecn_ce++;
			if (!pcb->ecn_demand_cwr) {
				tcp_quickack_grant(pcb, 2);
				pcb->pingpong = false;
				pcb->ecn_demand_cwr = true;
			}
		}
	}
	if (seg->len && data_state) {
		if (pcb->detached) {
			/* closed by the app: nobody can read this (RFC 9293 3.10.7.4 note; as Linux) */
			tcp_send_rst(pcb);
			tcp_pcb_release(pcb);
			return;
		}
		struct ring_buf *b = seg->buf;
		if (SEQ_LT(seg->seq, pcb->rcv_nxt)) {
			uint32_t skip = pcb->rcv_nxt - seg->seq;
			ctx->cnt.rx_duplicate_bytes += skip;
			tcp_rcv_dsack_note(pcb, seg->seq, pcb->rcv_nxt);
			pcb->ack_now = true;   /* the D-SACK tells the sender at once */
			b->data += skip;
			b->len -= skip;
			seg->seq = pcb->rcv_nxt;
			seg->len -= skip;
		}
		uint32_t edge = pcb->rcv_adv;
		if (SEQ_GT(seg->seq + seg->len, edge)) {
			seg->len = edge - seg->seq;   /* over the window edge: trimmed */
			b->len = seg->len;
			fin = false;
		}
		b->tot_len = b->len;
		if (!seg->len) {
			/* nothing left */
		} else if (seg->seq == pcb->rcv_nxt && ring_buf_pool_holder_full(b->pool, pcb->rcv_held)) {
			/* The socket already holds its share of the ring's frames
			 * (an application that does not read, a peer sending tiny
			 * segments): refused unacknowledged, as Linux does under
			 * memory pressure; the peer resends once the app read. */
			ctx->cnt.rx_rcvq_pressure_dropped++;
			pcb->ack_now = true;
			fin = false;
		} else if (seg->seq == pcb->rcv_nxt) {
			if (!tcp_data_in_order(pcb, seg))
				return;
		} else {
			bool queued = tcp_ooo_insert(pcb, b, seg->seq);
			if (queued) {
				seg->buf = NULL;
				tcp_rcv_sack_note(pcb, seg->seq, seg->seq + seg->len);
			}
			tcp_ofo_ack(pcb, queued || pcb->dsack_pending);   /* a duplicate ACK tells the sender */
			fin = false;
		}
	} else if (seg->len) {
		pcb->ack_now = true;
		fin = false;
	}
	if (fin && seg->seq + seg->len == pcb->rcv_nxt) {
		switch (pcb->state) {
		case TCP_ESTABLISHED: case TCP_FIN_WAIT_1: case TCP_FIN_WAIT_2: case TCP_SYN_RCVD:
			break;
		case TCP_TIME_WAIT:
			tcp_enter_time_wait(pcb);   /* restart 2 MSL */
			pcb->ack_now = true;
			return;
		default:
			pcb->ack_now = true;        /* a retransmitted FIN */
			return;
		}
		pcb->rcv_nxt++;
		pcb->fin_rcvd = true;
		pcb->ack_now = true;
		if (pcb->state == TCP_ESTABLISHED || pcb->state == TCP_SYN_RCVD)
			tcp_set_state(pcb, TCP_CLOSE_WAIT);
		else if (pcb->state == TCP_FIN_WAIT_1)
			tcp_set_state(pcb, TCP_CLOSING);
		else
			tcp_enter_time_wait(pcb);
		tcp_send_ack(pcb);
		tcp_batch_flush_pcb(pcb);   /* the data before the FIN first */
		if (!pcb->dead && pcb->cb.recv && !pcb->rd_shut)
			pcb->cb.recv(pcb->cb_arg, pcb, NULL);
	}
}

static void synchronized_input(struct tcp_pcb *pcb, struct tcp_rx *rx)
{
	struct tcp_ctx *ctx = pcb->ctx;
	struct tcp_seg *seg = &rx->seg;
	bool rst = seg->flags & TCP_RST;
	uint32_t seg_space = tcp_seg_space(seg);

	if (pcb->state == TCP_SYN_RCVD && (seg->flags & TCP_SYN) && seg->seq == pcb->irs) {
		if (!(seg->flags & TCP_ACK) || rst) {
			if (!rst && invalid_ack_allowed(pcb, seg))
				tcp_send_segment(pcb, pcb->iss, 0, TCP_SYN);   /* SYN retransmitted */
			return;
		}
		/* Simultaneous open: the peer's SYN-ACK; its SYN is already counted. */
		seg->flags &= (uint8_t)~TCP_SYN;
		seg->seq++;
		seg_space--;
	}
	/* PAWS (RFC 7323 5.3) */
	if (pcb->ts_ok && seg->opt.has_ts && !rst && SEQ_LT(seg->opt.ts_val, pcb->ts_recent)) {
		ctx->cnt.rx_paws_rejected++;
		if (invalid_ack_allowed(pcb, seg))
			tcp_send_ack(pcb);
		return;
	}
	if (!seq_acceptable(pcb, seg->seq, seg_space)) {
		ctx->cnt.rx_out_of_window++;
		if (SEQ_LT(seg->seq, pcb->rcv_nxt)) {
			ctx->cnt.rx_duplicate_bytes += seg->len;
			if (seg->len)
				tcp_rcv_dsack_note(pcb, seg->seq, seg->seq + seg->len);
		}
		if (!rst) {
			if (pcb->state == TCP_TIME_WAIT && (seg->flags & TCP_FIN))
				tcp_enter_time_wait(pcb);
			if (pcb->state == TCP_SYN_RCVD && (seg->flags & TCP_SYN) && seg->seq == pcb->irs) {
				if (invalid_ack_allowed(pcb, seg))
					tcp_send_segment(pcb, pcb->iss, 0, TCP_SYN);   /* SYN retransmitted */
			} else if (seg->flags & TCP_SYN) {
				challenge_ack(pcb);   /* RFC 5961 4.2: whatever its sequence number */
			} else if (invalid_ack_allowed(pcb, seg)) {
				tcp_send_ack(pcb);
			}
		}
		return;
	}
	if (pcb->keepalive) {
		pcb->keepalive_at = ctx->now_ms + pcb->ka_idle_ms;
		pcb->keepalive_sent = 0;
	}
	if (rst) {
		/* RFC 5961 3.2: only the exact next sequence number resets. */
		if (seg->seq != pcb->rcv_nxt) {
			ctx->cnt.rx_rst_ignored++;
			challenge_ack(pcb);
			return;
		}
		ctx->cnt.rx_rst_accepted++;
		if (pcb->state == TCP_SYN_RCVD && pcb->parent) {
			tcp_pcb_release(pcb);   /* back to LISTEN (the listener stays) */
			return;
		}
		if (pcb->state == TCP_TIME_WAIT) {
			tcp_pcb_done(pcb);   /* the app's side is already over */
			return;
		}
		if ((pcb->state == TCP_CLOSING || pcb->state == TCP_LAST_ACK) && pcb->detached) {
			tcp_pcb_release(pcb);
			return;
		}
		tcp_pcb_fail(pcb, pcb->state == TCP_SYN_RCVD ? ECONNREFUSED : ECONNRESET);
		return;
	}
	if (seg->flags & TCP_SYN) {
		/* RFC 5961 4.2: a SYN in a synchronized state only earns a challenge. */
		challenge_ack(pcb);
		return;
	}
	if (!(seg->flags & TCP_ACK))
		return;
	if (pcb->state == TCP_SYN_RCVD) {
		if (!SEQ_GT(seg->ack, pcb->snd_una) || SEQ_GT(seg->ack, pcb->snd_max)) {
			tcp_send_rst_reply(ctx, rx);
			return;
		}
		if (pcb->parent && accept_queue_full(pcb->parent)) {
			/* Linux drops the handshake's last ACK: the child stays
			 * half-open, our SYN-ACK retransmission draws the ACK
			 * again once the application accepted. */
			ctx->cnt.rx_accept_queue_full++;
			return;
		}
		/* The SYN-ACK's RTT, as Linux's tcp_synack_rtt_meas: from the
		 * echoed timestamp when there is one (a retransmitted SYN-ACK
		 * too), else from the timed SYN-ACK unless it was resent. A
		 * side that only receives gets no other sample, and its FIN
		 * would wait for the initial 1 s RTO. */
		if (pcb->ts_ok && seg->opt.has_ts && seg->opt.ts_ecr)
			tcp_rtt_sample(pcb, (uint32_t)ctx->now_ms - seg->opt.ts_ecr);
		else if (pcb->rtt_timing && !pcb->backoff)
			tcp_rtt_sample(pcb, (uint32_t)(ctx->now_ms - pcb->rtt_start_ms));
		if (pcb->rtt_timing && !pcb->backoff)
			tcp_rtt_sample_us(pcb, ctx->now_us - pcb->rtt_start_us);
		pcb->rtt_timing = false;
		pcb->snd_una = seg->ack;
		pcb->snd_wnd = seg->wnd << pcb->snd_wscale;
		pcb->max_snd_wnd = pcb->snd_wnd;
		pcb->snd_wl1 = seg->seq;
		pcb->snd_wl2 = seg->ack;
		bool fin_pending = pcb->fin_queued;
		established(pcb);
		if (fin_pending)
			tcp_set_state(pcb, TCP_FIN_WAIT_1);
		struct tcp_pcb *lis = pcb->parent;
		if (lis) {
			lis->pending_children--;
			pcb->parent = NULL;
			int rc = lis->cb.accept ? lis->cb.accept(lis->cb_arg, lis, pcb) : -ECONNREFUSED;
			if (callback_killed(pcb))
				return;
			if (rc < 0) {
				tcp_send_rst(pcb);
				tcp_pcb_release(pcb);
				return;
			}
			lis->accept_queued++;
		} else if (pcb->cb.connected) {
			pcb->cb.connected(pcb->cb_arg, pcb);
			if (callback_killed(pcb))
				return;
		}
	}
	if (!process_ack(pcb, seg))
		return;
	if (pcb->state == TCP_TIME_WAIT && !(seg->flags & TCP_FIN))
		return;
	process_data(pcb, seg);
	if (!pcb->dead)
		tcp_output(pcb);
}

/* A SYN in TIME_WAIT may start a new incarnation when it cannot be an old
 * duplicate: a newer timestamp, or (without timestamps) a sequence number
 * above the old connection's. */
static bool tw_syn_reopens(const struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
	if ((seg->flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) != TCP_SYN)
		return false;
	/* As Linux's tcp_timewait_state_process: not PAWS-rejected, and a
	 * newer timestamp or a sequence number above the old connection's
	 * (a client reconnecting within the same ms repeats its TSval) */
	if (pcb->ts_ok && seg->opt.has_ts && SEQ_LT(seg->opt.ts_val, pcb->ts_recent))
		return false;
	return SEQ_GT(seg->seq, pcb->rcv_nxt) ||
	       (pcb->ts_ok && seg->opt.has_ts && SEQ_GT(seg->opt.ts_val, pcb->ts_recent));
}

static bool listener_gone(const struct tcp_ctx *ctx, uint32_t ip, uint16_t port)
{
	for (unsigned i = 0; i < TCP_GONE_LISTENERS; i++)
		if (ctx->gone[i].port == port && (ctx->gone[i].ip == 0 || ctx->gone[i].ip == ip) &&
		    ctx->now_ms < ctx->gone[i].until_ms)
			return true;
	return false;
}

/* A segment for a connection (or listener) in another engine: the whole
 * TCP segment [h, h + len) goes to the stray hook. */
static void pass_stray(struct tcp_ctx *ctx, void *dest_arg, const struct tcp_rx *rx)
{
	const struct stack_ip4_info *ip = rx->ip;
	struct tcp_seg_origin from = { .src = ip->src, .dst = ip->dst, .ttl = ip->ttl, .tos = ip->tos,
				       .ifindex = ip->ifindex };
	memcpy(from.src_mac, rx->src_mac, 6);
	ctx->cnt.rx_strays_passed++;
	ctx->stray_fn(ctx->stray_arg, dest_arg, &from, rx->hdr, rx->len);
}

void tcp_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *pkt,
	       const struct stack_ip4_info *ip, const uint8_t *src_mac)
{
	struct tcp_ctx *ctx = st->tcp;

	ctx->cnt.rx_segments++;
	if (!src_mac) {
		ctx->cnt.rx_fragmented++;
		ring_buf_free(pkt);
		return;
	}
	const uint8_t *h = pkt->data;
	uint32_t len = pkt->len;
	uint32_t hlen = len >= TCP_HLEN ? stack_tcp_hlen(h) : 0;
	if (ip->dst_is_multi || len < TCP_HLEN || hlen < TCP_HLEN || hlen > len) {
		ctx->cnt.rx_bad_header++;
		ring_buf_free(pkt);
		return;
	}
	if (!ip->l4_csum_trusted &&
	    stack_csum_fold(stack_csum_add(stack_csum_pseudo(ip->src, ip->dst, STACK_IP4_PROTO_TCP, (uint16_t)len), h,
					   len)) != 0xffff) {
		ctx->cnt.rx_bad_checksum++;
		ring_buf_free(pkt);
		return;
	}
	/* Filled field by field: zeroing the whole (options included) per
	 * segment cost more than the fast path saves. The options are set by
	 * the fast path or tcp_opts_parse. */
	struct tcp_rx rx;
	rx.nif = nif;
	rx.ip = ip;
	rx.src_mac = src_mac;
	rx.hdr = h;
	rx.len = len;
	struct tcp_seg *seg = &rx.seg;
	memcpy(&rx.sport, h + STACK_TCP_SPORT, 2);
	memcpy(&rx.dport, h + STACK_TCP_DPORT, 2);
	seg->seq = stack_get32(h + STACK_TCP_SEQ);
	seg->ack = stack_get32(h + STACK_TCP_ACK);
	seg->flags = h[STACK_TCP_FLAGS] & 0x3f;
	seg->ecn_flags = h[STACK_TCP_FLAGS] & (TCP_ECE | TCP_CWR);
	seg->ip_ecn = ip->tos & TCP_IP_ECN_MASK;
	seg->wnd = stack_get16(h + STACK_TCP_WND);
	pkt->data += hlen;
	pkt->len = pkt->tot_len = len - hlen;
	seg->len = pkt->len;
	seg->buf = pkt;

	if (!rx.sport || !rx.dport) {
		ctx->cnt.rx_bad_header++;
		ring_buf_free(pkt);
		return;
	}
	struct tcp_pcb *pcb = tcp_pcb_lookup(ctx, ip->dst, rx.dport, ip->src, rx.sport);
	ctx->depth++;
	/* The predicted segment of an established connection needs none of
	 * what follows (Linux's header prediction). */
	if (pcb && pcb->state == TCP_ESTABLISHED && tcp_fast_path(pcb, &rx, hlen))
		goto done;
	tcp_opts_parse(h + TCP_HLEN, hlen - TCP_HLEN, &seg->opt);
	uint32_t reopen_isn;
	const uint32_t *isn = NULL;
	if (pcb && pcb->state == TCP_TIME_WAIT && tw_syn_reopens(pcb, seg)) {
		/* A new connection on the tuple (RFC 6191, as Linux): TIME_WAIT
		 * ends and the listener, if any, takes the SYN; our new sequence
		 * space starts above the old one. */
		reopen_isn = pcb->snd_nxt + 65535 + 2;
		isn = &reopen_isn;
		bool moved_in = pcb->moved_in;
		tcp_pcb_done(pcb);
		pcb = tcp_pcb_lookup(ctx, ip->dst, rx.dport, ip->src, rx.sport);
		if (moved_in && ctx->stray_fn && (!pcb || pcb->state != TCP_LISTEN)) {
			/* The connection had moved here from the engine of its
			 * listener: the new one starts there, and so do the
			 * segments that follow its SYN. */
			tcp_handed_note(ctx, ip->dst, rx.dport, ip->src, rx.sport, TCP_HANDED_TO_LISTENER, NULL);
			pass_stray(ctx, NULL, &rx);
			pcb = NULL;
			goto done;
		}
		if (!pcb || pcb->state != TCP_LISTEN) {
			/* Our listener is gone, maybe not the port's: a worker
			 * of a pre-fork server that closed its copy at a reload
			 * while others still listen (Linux's TIME_WAIT and
			 * listener are global, so it would find theirs). With
			 * the TIME_WAIT ends its steering entry: the SYN's
			 * retransmission goes where the port's steering says.
			 * Also a TIME_WAIT of an active open (no listener ever):
			 * Linux answers that SYN with its TIME_WAIT ACK, not an
			 * RST, so the peer retries there too. */
			ctx->cnt.rx_syn_listener_gone++;
			goto done;
		}
	}
	const struct tcp_handed *hd = NULL;
	if ((!pcb || pcb->state == TCP_CLOSED || pcb->state == TCP_LISTEN) && ctx->handed_next &&
	    !(seg->flags & TCP_SYN) && (hd = tcp_handed_find(ctx, ip->dst, rx.dport, ip->src, rx.sport)) != NULL) {
		if (hd->kind != TCP_HANDED_KERNEL && ctx->stray_fn)
			pass_stray(ctx, hd->dest_arg, &rx);
		else
			ctx->cnt.rx_handed_off++;
	} else if (!pcb || pcb->state == TCP_CLOSED) {
		if ((seg->flags & (TCP_SYN | TCP_ACK | TCP_RST)) == TCP_SYN && listener_gone(ctx, ip->dst, rx.dport)) {
			ctx->cnt.rx_syn_listener_gone++;
		} else {
			ctx->cnt.rx_no_pcb++;
			tcp_send_rst_reply(ctx, &rx);
		}
	} else if (pcb->state == TCP_LISTEN) {
		listen_input(pcb, &rx, isn);
	} else {
		tcp_segment_arrived(pcb, seg);
		if (pcb->state == TCP_SYN_SENT)
			syn_sent_input(pcb, &rx);
		else
			synchronized_input(pcb, &rx);
	}
done:
	ctx->depth--;
	if (!ctx->depth)
		tcp_reap(ctx);
	ring_buf_free(seg->buf);
}

void tcp_input_passed(struct tcp_ctx *ctx, const struct stack_netif *nif, struct ring_buf *buf,
		      const struct tcp_seg_origin *from)
{
	/* The engine that passed it verified the checksum. */
	struct stack_ip4_info ip = { .src = from->src, .dst = from->dst, .ttl = from->ttl, .tos = from->tos,
				     .proto = 6, .l4_csum_trusted = true, .ifindex = from->ifindex };
	tcp_input(ctx->st, nif, buf, &ip, from->src_mac);
}
