/* BBR congestion control (version 1; VMA_TCP_CC_ALGO=3), written from its
 * published description (Cardwell, Cheng, Gunn, Hassas Yeganeh, Jacobson:
 * "BBR: Congestion-Based Congestion Control", ACM Queue 14(5), 2016, and
 * draft-cardwell-iccrg-bbr-congestion-control-00). The sender keeps a model
 * of the path instead of reading loss as congestion:
 * - BtlBw: the largest delivery rate (tcp_priv.h's rate samples) sampled in the last 10
 *   round trips; samples taken while the application left the pipe idle
 *   count only when they raise it;
 * - RTprop: the smallest round trip of the last 10 s;
 * and keeps cwnd at cwnd_gain bandwidth-delay products, plus what ACKs
 * arriving in bursts show the flight must cover on top (as Linux's BBR). It starts by
 * doubling (STARTUP) until three rounds bring less than 25% more
 * bandwidth, lets the queue it built drain (DRAIN), then cruises
 * (PROBE_BW, a gain cycle of 1.25, 0.75 and six of 1); every 10 s without
 * a lower round trip it drops to 4 segments for 200 ms and a round
 * (PROBE_RTT) to see the path's floor again. A random loss does not shrink
 * cwnd: in recovery the first round conserves packets (cwnd = what is in
 * flight plus what was delivered), then the model's cwnd applies, and
 * recovery's end restores cwnd as it was before.
 *
 * Here the stack does not pace (transmissions go out as cwnd and the
 * window allow); the pacing gains steer the PROBE_BW cycle and the rate
 * TCP_INFO reports (tcpi_pacing_rate), and DRAIN holds cwnd at one BDP
 * instead of pacing slower. docs/tcp.md. */
#include "stack/tcp_priv.h"

#include <string.h>

#define BBR_UNIT           256u            /* gains in 1/256 */
#define BBR_HIGH_GAIN      739u            /* 2 / ln 2: doubles the rate each round */
#define BBR_DRAIN_GAIN     89u             /* its inverse: drains STARTUP's queue in a round */
#define BBR_CWND_GAIN      512u            /* 2: room for delayed and aggregated ACKs */
#define BBR_FULL_BW_GAIN   320u            /* 1.25: growth that says the pipe is not full yet */
#define BBR_FULL_BW_ROUNDS 3u
#define BBR_MIN_RTT_WIN_US 10000000ull     /* RTprop's window */
#define BBR_PROBE_RTT_US   200000ull
#define BBR_MIN_CWND_SEGS  4u
#define BBR_CYCLE_LEN      8u
#define BBR_EXTRA_ACKED_ROUNDS 5u          /* rounds per window of the aggregation max */
#define BBR_EXTRA_ACKED_MAX_US 100000u     /* aggregation allowance: at most 100 ms of bandwidth */
#define BBR_ACK_EPOCH_MAX  (1u << 20)      /* bytes before an epoch restarts anyway */

static const uint16_t bbr_cycle_gain[BBR_CYCLE_LEN] = { 320, 192, 256, 256, 256, 256, 256, 256 };

uint64_t tcp_bbr_bw(const struct tcp_pcb *pcb)
{
	const struct tcp_bbr *b = &pcb->cc.bbr;
	uint64_t m = 0;
	for (unsigned i = 0; i < TCP_BBR_BW_ROUNDS; i++)
		if (b->bw_round[i] > m)
			m = b->bw_round[i];
	return m;
}

/* gain / 256 bandwidth-delay products, in bytes; before the model has both
 * halves, the initial window. */
static uint32_t bbr_bdp(const struct tcp_pcb *pcb, uint64_t bw, unsigned gain)
{
	const struct tcp_bbr *b = &pcb->cc.bbr;
	if (!bw || b->min_rtt_us == UINT32_MAX)
		return tcp_cc_initial_window(pcb->mss);
	uint64_t bdp = bw * b->min_rtt_us / 1000000u * gain / BBR_UNIT;
	return bdp > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)bdp;
}

/* What ACK aggregation hides from the model (once the pipe is known to
 * be full): the largest excess seen recently, at most 100 ms of bandwidth. */
static uint32_t bbr_aggregation_cwnd(const struct tcp_pcb *pcb)
{
	const struct tcp_bbr *b = &pcb->cc.bbr;
	if (!b->full_bw_reached)
		return 0;
	uint32_t extra = b->extra_acked[0] > b->extra_acked[1] ? b->extra_acked[0] : b->extra_acked[1];
	uint64_t cap = tcp_bbr_bw(pcb) * BBR_EXTRA_ACKED_MAX_US / 1000000u;
	return extra < cap ? extra : (uint32_t)cap;
}

/* cwnd's goal: the gain's BDPs, what ACK aggregation needs on top, and
 * three segments for the ones the receiver's delayed ACKs and the
 * sender's batches hold back; two more in the probing phase, so it can put
 * more in flight than it had. */
static uint32_t bbr_target_cwnd(const struct tcp_pcb *pcb, unsigned gain)
{
	const struct tcp_bbr *b = &pcb->cc.bbr;
	uint32_t t = bbr_bdp(pcb, tcp_bbr_bw(pcb), gain) + bbr_aggregation_cwnd(pcb) + 3 * pcb->mss;
	if (b->mode == TCP_BBR_PROBE_BW && b->cycle_idx == 0)
		t += 2 * pcb->mss;
	return t;
}

uint64_t tcp_bbr_pacing_rate(const struct tcp_pcb *pcb)
{
	const struct tcp_bbr *b = &pcb->cc.bbr;
	uint64_t bw = tcp_bbr_bw(pcb);
	if (!bw) {
		/* no sample yet: the initial window per smoothed round trip */
		uint32_t rtt = pcb->srtt_us ? pcb->srtt_us : pcb->srtt_ms ? pcb->srtt_ms * 1000u : 1000u;
		bw = (uint64_t)tcp_cc_initial_window(pcb->mss) * 1000000u / rtt;
	}
	return bw * b->pacing_gain / BBR_UNIT;
}

static void enter_startup(struct tcp_bbr *b)
{
	b->mode = TCP_BBR_STARTUP;
	b->pacing_gain = BBR_HIGH_GAIN;
	b->cwnd_gain = BBR_HIGH_GAIN;
}

static void enter_probe_bw(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	b->mode = TCP_BBR_PROBE_BW;
	b->cwnd_gain = BBR_CWND_GAIN;
	/* a phase picked per connection, never the draining one, so flows
	 * sharing a bottleneck do not probe in step */
	b->cycle_idx = (uint8_t)((2u + pcb->iss % 7u) % BBR_CYCLE_LEN);
	b->pacing_gain = bbr_cycle_gain[b->cycle_idx];
	b->cycle_stamp_us = pcb->ctx->now_us;
}

void tcp_bbr_init(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	memset(b, 0, sizeof(*b));
	b->min_rtt_us = UINT32_MAX;
	b->min_rtt_stamp_us = pcb->ctx->now_us;
	b->next_round_delivered = (uint32_t)pcb->rate.delivered;
	enter_startup(b);
}

void tcp_bbr_save_cwnd(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	if (!pcb->in_recovery && !pcb->in_loss && b->mode != TCP_BBR_PROBE_RTT)
		b->prior_cwnd = pcb->cwnd;
	else if (pcb->cwnd > b->prior_cwnd)
		b->prior_cwnd = pcb->cwnd;
}

void tcp_bbr_recovery_enter(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	/* packet conservation for one round: cwnd follows the flight, and
	 * each ACK lets out what it delivered (tcp_bbr_on_ack) */
	b->conserve = true;
	b->next_round_delivered = (uint32_t)pcb->rate.delivered;
	pcb->cwnd = tcp_max32(tcp_recovery_pipe(pcb), pcb->mss);
}

void tcp_bbr_restore_cwnd(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	b->conserve = false;
	if (pcb->cwnd < b->prior_cwnd)
		pcb->cwnd = b->prior_cwnd;
}

/* A new round starts when a segment sent after the last round's start is
 * delivered; the bandwidth filter takes the sample into this round's slot. */
static void update_bw(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	const struct tcp_rate_sample *rs = &pcb->rs;
	b->round_start = false;
	if (!rs->valid)
		return;
	if ((int32_t)(rs->prior_delivered - b->next_round_delivered) >= 0) {
		b->next_round_delivered = (uint32_t)pcb->rate.delivered;
		b->round_count++;
		b->round_start = true;
		b->conserve = false;
		b->bw_round[b->round_count % TCP_BBR_BW_ROUNDS] = 0;
	}
	uint64_t bps = tcp_rate_last_bps(pcb);
	uint64_t *slot = &b->bw_round[b->round_count % TCP_BBR_BW_ROUNDS];
	if ((!rs->app_limited || bps >= tcp_bbr_bw(pcb)) && bps > *slot)
		*slot = bps;
}

/* ACK aggregation: when ACKs arrive in bursts (a receiver that ACKs a
 * batch once, a link or a sender working in batches), more is delivered in
 * a moment than the bandwidth explains and the flight must cover the gaps
 * between the bursts. An epoch runs while the ACKed bytes stay ahead of
 * bandwidth x time since it began; the excess is the aggregation. */
static void update_ack_aggregation(struct tcp_pcb *pcb, uint32_t delivered)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	if (!delivered || !pcb->rs.valid)
		return;
	if (b->round_start && ++b->extra_acked_rounds >= BBR_EXTRA_ACKED_ROUNDS) {
		b->extra_acked_rounds = 0;
		b->extra_acked_idx ^= 1;
		b->extra_acked[b->extra_acked_idx] = 0;
	}
	uint64_t now = pcb->ctx->now_us;
	uint64_t expected = tcp_bbr_bw(pcb) * (now - b->ack_epoch_us) / 1000000u;
	if (b->ack_epoch_acked <= expected || b->ack_epoch_acked + delivered >= BBR_ACK_EPOCH_MAX) {
		b->ack_epoch_acked = 0;
		b->ack_epoch_us = now;
		expected = 0;
	}
	b->ack_epoch_acked += delivered;
	uint64_t extra = b->ack_epoch_acked - expected;
	if (extra > pcb->cwnd)
		extra = pcb->cwnd;
	if (extra > b->extra_acked[b->extra_acked_idx])
		b->extra_acked[b->extra_acked_idx] = (uint32_t)extra;
}

/* STARTUP ends when three rounds in a row (not app-limited) did not
 * raise the bandwidth by a quarter. */
static void check_full_bw(struct tcp_pcb *pcb)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	if (b->full_bw_reached || !b->round_start || pcb->rs.app_limited)
		return;
	uint64_t bw = tcp_bbr_bw(pcb);
	if (bw >= b->full_bw * BBR_FULL_BW_GAIN / BBR_UNIT) {
		b->full_bw = bw;
		b->full_bw_cnt = 0;
		return;
	}
	if (++b->full_bw_cnt >= BBR_FULL_BW_ROUNDS)
		b->full_bw_reached = true;
}

static void check_drain(struct tcp_pcb *pcb, uint32_t inflight)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	if (b->mode == TCP_BBR_STARTUP && b->full_bw_reached) {
		b->mode = TCP_BBR_DRAIN;
		b->pacing_gain = BBR_DRAIN_GAIN;
		/* A paced BBR drains by sending at 1 / 2.885 of the rate with
		 * cwnd kept at STARTUP's; unpaced, only cwnd can drain the
		 * queue: it is held at one BDP until the flight is down to it. */
		b->cwnd_gain = BBR_UNIT;
	}
	if (b->mode == TCP_BBR_DRAIN && inflight <= bbr_target_cwnd(pcb, BBR_UNIT))
		enter_probe_bw(pcb);
}

/* PROBE_BW's phases last a round trip's floor each; the probing one (1.25)
 * also waits until the flight reaches its goal or a loss says the pipe is
 * full, the draining one (0.75) ends early once the flight is down to one
 * BDP. */
static void update_cycle(struct tcp_pcb *pcb, uint32_t inflight, uint32_t newly_lost)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	if (b->mode != TCP_BBR_PROBE_BW)
		return;
	uint64_t now = pcb->ctx->now_us;
	bool full_length = b->min_rtt_us != UINT32_MAX && now - b->cycle_stamp_us > b->min_rtt_us;
	bool next;
	if (b->pacing_gain == BBR_UNIT)
		next = full_length;
	else if (b->pacing_gain > BBR_UNIT)
		next = full_length && (newly_lost || inflight >= bbr_bdp(pcb, tcp_bbr_bw(pcb), b->pacing_gain));
	else
		next = full_length || inflight <= bbr_bdp(pcb, tcp_bbr_bw(pcb), BBR_UNIT);
	if (!next)
		return;
	b->cycle_idx = (uint8_t)((b->cycle_idx + 1) % BBR_CYCLE_LEN);
	b->pacing_gain = bbr_cycle_gain[b->cycle_idx];
	b->cycle_stamp_us = now;
}

/* RTprop, and PROBE_RTT when it went 10 s without a new floor. */
static void update_min_rtt(struct tcp_pcb *pcb, uint32_t inflight)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	const struct tcp_rate_sample *rs = &pcb->rs;
	uint64_t now = pcb->ctx->now_us;
	bool expired = now - b->min_rtt_stamp_us > BBR_MIN_RTT_WIN_US;
	if (rs->have && rs->rtt_us >= 0 && ((uint32_t)rs->rtt_us <= b->min_rtt_us || expired)) {
		b->min_rtt_us = rs->rtt_us ? (uint32_t)rs->rtt_us : 1;
		b->min_rtt_stamp_us = now;
	}
	if (expired && b->mode != TCP_BBR_PROBE_RTT) {
		tcp_bbr_save_cwnd(pcb);
		b->mode = TCP_BBR_PROBE_RTT;
		b->pacing_gain = BBR_UNIT;
		b->cwnd_gain = BBR_UNIT;
		b->probe_rtt_done_us = 0;
	}
	if (b->mode != TCP_BBR_PROBE_RTT)
		return;
	/* the small flight's samples show the floor, not the bandwidth */
	uint64_t until = pcb->rate.delivered + inflight;
	pcb->rate.app_limited = until ? until : 1;
	if (!b->probe_rtt_done_us) {
		if (inflight <= BBR_MIN_CWND_SEGS * pcb->mss) {
			b->probe_rtt_done_us = now + BBR_PROBE_RTT_US;
			b->probe_rtt_round_done = false;
			b->next_round_delivered = (uint32_t)pcb->rate.delivered;
		}
		return;
	}
	if (b->round_start)
		b->probe_rtt_round_done = true;
	if (b->probe_rtt_round_done && now > b->probe_rtt_done_us) {
		b->min_rtt_stamp_us = now;
		tcp_bbr_restore_cwnd(pcb);
		if (b->full_bw_reached)
			enter_probe_bw(pcb);
		else
			enter_startup(b);
	}
}

static void set_cwnd(struct tcp_pcb *pcb, uint32_t delivered, uint32_t newly_lost, uint32_t inflight)
{
	struct tcp_bbr *b = &pcb->cc.bbr;
	uint32_t min_cwnd = BBR_MIN_CWND_SEGS * pcb->mss;
	uint32_t cwnd = pcb->cwnd;
	if (newly_lost) {
		uint32_t lost = newly_lost * pcb->mss;
		cwnd = cwnd > lost + pcb->mss ? cwnd - lost : pcb->mss;
	}
	if (b->conserve) {
		/* the first round of recovery: what left is what arrived */
		pcb->cwnd = tcp_max32(cwnd, inflight + delivered);
		return;
	}
	uint32_t target = bbr_target_cwnd(pcb, b->cwnd_gain);
	if (b->full_bw_reached)
		cwnd = tcp_min32(cwnd + delivered, target);
	else if (cwnd < target || pcb->rate.delivered < tcp_cc_initial_window(pcb->mss))
		cwnd += delivered;
	cwnd = tcp_max32(cwnd, min_cwnd);
	if (b->mode == TCP_BBR_PROBE_RTT)
		cwnd = tcp_min32(cwnd, min_cwnd);
	pcb->cwnd = cwnd;
}

void tcp_bbr_on_ack(struct tcp_pcb *pcb, uint32_t delivered, uint32_t newly_lost)
{
	uint32_t inflight = pcb->in_recovery ? tcp_recovery_pipe(pcb) : tcp_flight(pcb);
	update_bw(pcb);
	update_ack_aggregation(pcb, delivered);
	update_cycle(pcb, inflight, newly_lost);
	check_full_bw(pcb);
	check_drain(pcb, inflight);
	update_min_rtt(pcb, inflight);
	set_cwnd(pcb, delivered, newly_lost, inflight);
}
