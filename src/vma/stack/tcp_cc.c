/* Congestion control: NewReno (RFC 5681/6582), Cubic (RFC 9438), "none"
 * (a fixed cwnd, for links the operator knows are uncongested) and BBR
 * (tcp_bbr.c, which sets cwnd itself on every ACK), chosen by
 * VMA_TCP_CC_ALGO. Windows are in bytes; Cubic reasons in segments. */
#include "stack/tcp_priv.h"

#define CUBIC_C    0.4
#define CUBIC_BETA 0.7

static double cube_root(double x)
{
	if (x <= 0)
		return 0;
	double r = x > 1 ? x / 3 : 1;
	for (int i = 0; i < 60; i++)
		r = r - (r * r * r - x) / (3 * r * r);
	return r;
}

uint32_t tcp_cc_initial_window(uint32_t mss)
{
	/* RFC 6928 (IW10, as Linux): a request/response of up to ~14 KB fits
	 * in the first flight instead of waiting a round trip for ACKs */
	return tcp_min32(10 * mss, tcp_max32(2 * mss, 14600));
}

void tcp_cc_init(struct tcp_pcb *pcb)
{
	pcb->ssthresh = 0x7fffffffu;
	pcb->bytes_acked_ca = 0;
	pcb->cc.epoch_start_ms = 0;
	pcb->cc.w_max = 0;
	if (pcb->cc_algo == TCP_CC_NONE)
		pcb->cwnd = pcb->ctx->set.none_cwnd_segments * pcb->mss;
	else
		pcb->cwnd = tcp_cc_initial_window(pcb->mss);
	pcb->rate_sampling = pcb->cc_algo == TCP_CC_BBR;
	if (pcb->rate_sampling)
		tcp_bbr_init(pcb);
}

static void cubic_on_ack(struct tcp_pcb *pcb, uint32_t acked)
{
	struct tcp_cc_state *c = &pcb->cc;
	double mss = pcb->mss, cwnd = pcb->cwnd / mss;
	uint64_t now = pcb->ctx->now_ms;

	if (!c->epoch_start_ms) {
		c->epoch_start_ms = now ? now : 1;
		c->cwnd_at_epoch = cwnd;
		if (c->w_max < cwnd) {
			c->w_max = cwnd;
			c->k = 0;
		} else {
			c->k = cube_root((c->w_max - cwnd) / CUBIC_C);
		}
		c->w_est = cwnd;
	}
	double rtt = (pcb->srtt_ms ? pcb->srtt_ms : 1) / 1000.0;
	double t = (double)(now - c->epoch_start_ms) / 1000.0 + rtt;
	double target = CUBIC_C * (t - c->k) * (t - c->k) * (t - c->k) + c->w_max;
	/* Reno-friendly region (RFC 9438 4.3) */
	double alpha = 3.0 * (1 - CUBIC_BETA) / (1 + CUBIC_BETA);
	c->w_est += alpha * ((double)acked / mss) / cwnd;
	if (c->w_est > target)
		target = c->w_est;
	if (target > 1.5 * cwnd)
		target = 1.5 * cwnd;
	if (target > cwnd) {
		pcb->bytes_acked_ca += (uint32_t)((target - cwnd) / cwnd * acked);
		if (pcb->bytes_acked_ca >= pcb->mss) {
			pcb->cwnd += pcb->bytes_acked_ca;
			pcb->bytes_acked_ca = 0;
		}
	}
}

enum tcp_cc_algo tcp_cc_algo_of(const struct tcp_pcb *pcb)
{
	return (enum tcp_cc_algo)pcb->cc_algo;
}

void tcp_set_cc_algo(struct tcp_pcb *pcb, enum tcp_cc_algo algo)
{
	if (pcb->cc_algo == algo)
		return;
	pcb->cc_algo = (uint8_t)algo;
	switch (pcb->state) {
	case TCP_CLOSED: case TCP_LISTEN: case TCP_SYN_SENT: case TCP_SYN_RCVD:
		return;   /* tcp_cc_init runs when the connection is established */
	default:
		break;
	}
	/* A live connection changes its algorithm, as Linux's
	 * tcp_reinit_congestion_control: cwnd and ssthresh stay (BBR has no
	 * use for ssthresh), the new algorithm's state starts afresh. */
	uint32_t cwnd = pcb->cwnd, ssthresh = pcb->ssthresh;
	tcp_cc_init(pcb);
	if (algo != TCP_CC_NONE)
		pcb->cwnd = cwnd;
	if (algo != TCP_CC_BBR && algo != TCP_CC_NONE)
		pcb->ssthresh = ssthresh;
}

void tcp_cc_restart_after_idle(struct tcp_pcb *pcb)
{
	enum tcp_cc_algo algo = pcb->cc_algo;
	if (!pcb->ctx->set.slow_start_after_idle || algo == TCP_CC_BBR || algo == TCP_CC_NONE || !pcb->data_sent_ms ||
	    pcb->snd_una != pcb->snd_max || pcb->in_recovery || pcb->in_loss)
		return;
	uint64_t rto = pcb->rto_ms ? pcb->rto_ms : 1;
	if (pcb->ctx->now_ms <= pcb->data_sent_ms + rto)
		return;
	uint64_t idle = pcb->ctx->now_ms - pcb->data_sent_ms;
	/* What cwnd had reached is remembered as ssthresh (at least 3/4 of
	 * it), so slow start climbs back there quickly once the path answers. */
	uint32_t cwnd = pcb->cwnd, restart = tcp_min32(tcp_cc_initial_window(pcb->mss), cwnd);
	uint32_t keep = (cwnd >> 1) + (cwnd >> 2);
	if (pcb->ssthresh < keep)
		pcb->ssthresh = keep;
	for (uint64_t left = idle - rto; left > 0 && cwnd > restart; left = left > rto ? left - rto : 0)
		cwnd >>= 1;
	pcb->cwnd = cwnd > restart ? cwnd : restart;
	pcb->bytes_acked_ca = 0;
	pcb->cc.epoch_start_ms = 0;   /* Cubic's curve starts anew from here */
	pcb->cwnd_limited = false;
	pcb->max_flight = 0;
}

void tcp_cc_note_usage(struct tcp_pcb *pcb, uint32_t pipe, bool sent)
{
	/* No room left for a full segment: cwnd held the sender back. */
	bool limited = (uint64_t)pipe + pcb->mss > pcb->cwnd;
	if (!sent && !limited)
		return;
	/* One verdict per window of data: a cwnd-limited moment holds until
	 * what was in flight then is acknowledged; otherwise the window's
	 * largest flight is kept. */
	if (SEQ_GEQ(pcb->snd_una, pcb->cwnd_usage_seq) || limited || (!pcb->cwnd_limited && pipe > pcb->max_flight)) {
		pcb->cwnd_limited = limited;
		pcb->max_flight = pipe;
		pcb->cwnd_usage_seq = pcb->snd_nxt;
	}
}

/* As Linux's tcp_is_cwnd_limited: cwnd grows only when it is what limits
 * the sender, so that an application-limited flow (request/response, a
 * paced writer) does not build a cwnd it never tested against the path
 * and then send it all at once. Slow start still grows a cwnd below twice
 * the largest flight of the window. */
static bool tcp_cc_cwnd_limited(const struct tcp_pcb *pcb)
{
	if (pcb->cwnd_limited)
		return true;
	if (pcb->cwnd < pcb->ssthresh)
		return pcb->cwnd < 2 * (uint64_t)pcb->max_flight;
	return false;
}

void tcp_cc_on_ack(struct tcp_pcb *pcb, uint32_t acked)
{
	enum tcp_cc_algo algo = pcb->cc_algo;

	if (algo == TCP_CC_NONE || !acked || !tcp_cc_cwnd_limited(pcb))
		return;
	if (pcb->cwnd < pcb->ssthresh) {
		/* slow start counts every byte acknowledged up to ssthresh, the
		 * rest goes to congestion avoidance (Linux's tcp_slow_start): an
		 * ACK for many segments (a receiver that ACKs a GRO batch once)
		 * must not slow the ramp (RFC 5681's L = 1 SMSS would) */
		uint32_t grown = tcp_min32(pcb->cwnd + acked, pcb->ssthresh);
		acked -= grown - pcb->cwnd;
		pcb->cwnd = grown;
		if (!acked)
			return;
	}
	if (algo == TCP_CC_CUBIC) {
		cubic_on_ack(pcb, acked);
		return;
	}
	pcb->bytes_acked_ca += acked;
	if (pcb->bytes_acked_ca >= pcb->cwnd) {
		pcb->bytes_acked_ca -= pcb->cwnd;
		pcb->cwnd += pcb->mss;
	}
}

static uint32_t reduced_ssthresh(struct tcp_pcb *pcb)
{
	if (pcb->cc_algo == TCP_CC_CUBIC) {
		double cwnd = (double)pcb->cwnd / pcb->mss;
		/* fast convergence (RFC 9438 4.7) */
		if (cwnd < pcb->cc.w_max)
			pcb->cc.w_max = cwnd * (1 + CUBIC_BETA) / 2;
		else
			pcb->cc.w_max = cwnd;
		pcb->cc.epoch_start_ms = 0;
		return tcp_max32((uint32_t)(pcb->cwnd * CUBIC_BETA), 2 * pcb->mss);
	}
	return tcp_max32((pcb->snd_max - pcb->snd_una) / 2, 2 * pcb->mss);   /* RFC 5681 (4) */
}

void tcp_cc_set_ssthresh(struct tcp_pcb *pcb)
{
	if (pcb->cc_algo == TCP_CC_NONE)
		return;
	if (pcb->cc_algo == TCP_CC_BBR) {
		tcp_bbr_save_cwnd(pcb);   /* a loss is no congestion signal to BBR */
		return;
	}
	pcb->ssthresh = reduced_ssthresh(pcb);
	pcb->bytes_acked_ca = 0;
}

void tcp_cc_on_loss(struct tcp_pcb *pcb)
{
	/* BBR (version 1) does not answer ECE either */
	if (pcb->cc_algo == TCP_CC_NONE || pcb->cc_algo == TCP_CC_BBR)
		return;
	pcb->ssthresh = reduced_ssthresh(pcb);
	pcb->cwnd = pcb->ssthresh;
	pcb->bytes_acked_ca = 0;
}

void tcp_cc_on_rto(struct tcp_pcb *pcb)
{
	if (pcb->cc_algo == TCP_CC_NONE)
		return;
	if (pcb->cc_algo == TCP_CC_BBR) {
		/* one segment until ACKs come back (the loss state), then the
		 * model's cwnd; the loss state's end restores the one before */
		tcp_bbr_save_cwnd(pcb);
		pcb->cc.bbr.conserve = false;
		pcb->cwnd = pcb->mss;
		return;
	}
	if (!pcb->backoff)   /* RFC 5681: ssthresh from the first expiry only */
		pcb->ssthresh = reduced_ssthresh(pcb);
	pcb->cwnd = pcb->mss;
	pcb->bytes_acked_ca = 0;
}
