/* TCP timers, driven by stack_timer_tick (at their deadline, or at the
 * VMA_TCP_TIMER_RESOLUTION_MSEC grid):
 * delayed ACK, retransmission (RFC 6298, exponential backoff to rto_max),
 * persist (zero-window probes), keepalive and TIME_WAIT. Every deadline is
 * an absolute time on the caller's clock, so tests are deterministic. */
#include "stack/tcp_priv.h"

#include <errno.h>

void tcp_rtt_sample(struct tcp_pcb *pcb, uint32_t r)
{
	const struct tcp_settings *s = &pcb->ctx->set;

	if (r < pcb->min_rtt_ms)
		pcb->min_rtt_ms = r;
	if (!pcb->srtt_ms && !pcb->rttvar_ms) {
		pcb->srtt_ms = r ? r : 1;
		pcb->rttvar_ms = r / 2;
	} else {
		uint32_t diff = pcb->srtt_ms > r ? pcb->srtt_ms - r : r - pcb->srtt_ms;
		pcb->rttvar_ms = (3 * pcb->rttvar_ms + diff) / 4;
		pcb->srtt_ms = (7 * pcb->srtt_ms + r) / 8;
		/* never 0 once sampled (Linux keeps srtt_us >= 1): on a sub-ms
		 * path the ms average rounds down to 0, which read as "no sample"
		 * and stopped the tail loss probe (an RTO instead) */
		if (!pcb->srtt_ms)
			pcb->srtt_ms = 1;
	}
	uint32_t rto = pcb->srtt_ms + tcp_max32(1, 4 * pcb->rttvar_ms);
	pcb->rto_ms = tcp_min32(tcp_max32(rto, s->rto_min_ms), s->rto_max_ms);
}

void tcp_rtt_sample_us(struct tcp_pcb *pcb, uint64_t rtt_us)
{
	uint32_t r = rtt_us > UINT32_MAX / 8 ? UINT32_MAX / 8 : (uint32_t)rtt_us;
	if (!r)
		r = 1;
	if (r < pcb->min_rtt_us)
		pcb->min_rtt_us = r;
	if (!pcb->srtt_us) {
		pcb->srtt_us = r;
		pcb->rttvar_us = r / 2;
	} else {
		uint32_t diff = pcb->srtt_us > r ? pcb->srtt_us - r : r - pcb->srtt_us;
		pcb->rttvar_us = (3 * pcb->rttvar_us + diff) / 4;
		pcb->srtt_us = (7 * pcb->srtt_us + r) / 8;
	}
}

static void on_rto(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;

	pcb->rto_at = 0;
	ctx->cnt.tx_rto_expiries++;
	pcb->total_rto++;
	uint32_t limit = (pcb->state == TCP_SYN_SENT || pcb->state == TCP_SYN_RCVD) ?
			 pcb->syn_retries : ctx->set.max_retries;
	/* TCP_USER_TIMEOUT replaces the retry count (as Linux's
	 * retransmits_timed_out): the oldest unacknowledged byte waited too long */
	bool user_timeout = pcb->user_timeout_ms && pcb->snd_una != pcb->snd_max &&
			    ctx->now_ms - pcb->una_since_ms >= pcb->user_timeout_ms;
	if (user_timeout)
		ctx->cnt.tx_user_timeouts++;
	if (user_timeout || (!pcb->user_timeout_ms && pcb->backoff >= limit)) {
		if (pcb->state != TCP_SYN_SENT && pcb->state != TCP_SYN_RCVD)
			tcp_send_rst(pcb);
		tcp_pcb_fail(pcb, ETIMEDOUT);
		return;
	}
	if (pcb->state == TCP_SYN_SENT || pcb->state == TCP_SYN_RCVD) {
		pcb->backoff++;
		tcp_send_segment(pcb, pcb->iss, 0, TCP_SYN);
		pcb->retransmits++;
		ctx->cnt.tx_retransmits++;
		tcp_arm_rto(pcb);
		return;
	}
	pcb->tlp_at = 0;
	pcb->tlp_high = 0;
	pcb->rack_at = 0;
	if (pcb->snd_una == pcb->snd_max)
		return;
	tcp_cc_on_rto(pcb);
	pcb->undo_armed = false;   /* no undo of an RTO's window here (Linux's tcp_try_undo_loss: not done) */
	pcb->backoff++;
	pcb->snd_nxt = pcb->snd_una;
	/* The scoreboard stays (as Linux without reneging evidence): resending
	 * what the peer already SACKed would only draw D-SACKs. */
	pcb->in_recovery = false;
	/* ...unless it looks reneged: the ACK stops at SACKed data, or this
	 * is a repeated expiry (RFC 2018 section 8) */
	if (pcb->backoff > 1 || (pcb->nsacked && pcb->sacked[0].start == pcb->snd_una))
		pcb->nsacked = 0;
	/* The loss state (Linux's TCP_CA_Loss) until snd_una passes what was
	 * sent: everything from snd_una goes again, RACK starts no recovery. */
	pcb->in_loss = true;
	tcp_txq_rto_reset(pcb);
	pcb->dupacks = 0;
	pcb->rtt_timing = false;   /* Karn */
	pcb->recover = pcb->snd_max;
	tcp_output(pcb);
	tcp_arm_rto(pcb);
}

static void on_persist(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;

	pcb->persist_at = 0;
	if (pcb->snd_wnd || !SEQ_LT(pcb->snd_nxt, data_end))
		return;
	/* An already-acknowledged sequence number: the peer must answer with an
	 * ACK carrying its current window (RFC 9293 3.10.7.4). */
	tcp_send_segment(pcb, pcb->snd_una - 1, 0, 0);
	ctx->cnt.tx_persist_probes++;
	if (pcb->persist_backoff < 16)
		pcb->persist_backoff++;
	uint64_t wait = (uint64_t)tcp_max32(pcb->rto_ms, ctx->set.rto_min_ms) << pcb->persist_backoff;
	pcb->persist_at = tcp_deadline(ctx, ctx->now_ms + (wait > ctx->set.rto_max_ms ? ctx->set.rto_max_ms : wait));
}

static void on_cork_ceiling(struct tcp_pcb *pcb)
{
	pcb->cork_at = 0;
	if (!pcb->cork)
		return;
	pcb->ctx->cnt.tx_cork_ceiling++;
	pcb->cork_push = true;
	tcp_output(pcb);
	pcb->cork_push = false;
}

static void on_keepalive(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;

	if (pcb->state != TCP_ESTABLISHED && pcb->state != TCP_CLOSE_WAIT) {
		pcb->keepalive_at = ctx->now_ms + pcb->ka_intvl_ms;
		return;
	}
	if (pcb->keepalive_sent >= pcb->ka_probes) {
		tcp_send_rst(pcb);
		tcp_pcb_fail(pcb, ETIMEDOUT);
		return;
	}
	tcp_send_segment(pcb, pcb->snd_nxt - 1, 0, 0);
	ctx->cnt.tx_keepalives++;
	pcb->keepalive_sent++;
	pcb->keepalive_at = ctx->now_ms + pcb->ka_intvl_ms;
}

static inline void fold_deadline(uint64_t *min, uint64_t at)
{
	if (at && at < *min)
		*min = at;
}

uint64_t tcp_ctx_next_deadline_ms(const struct tcp_ctx *ctx)
{
	return ctx->deadline_min;
}

/* Runs due timers. Fine deadlines (RTO, TLP, recovery probe, delayed ACK,
 * persist) run whenever they are due, so a caller polling at its deadline
 * (tcp_ctx_next_deadline_ms) fires them on time; the scan also refreshes
 * that deadline. Keepalive, TIME_WAIT and poll keep the resolution grid. */
void tcp_timer_tick(struct tcp_ctx *ctx, uint64_t now_ms)
{
	ctx->now_ms = now_ms;
	if (now_ms * 1000 > ctx->now_us)
		ctx->now_us = now_ms * 1000;   /* a caller with a ms clock only */
	bool routine = now_ms >= ctx->next_fast_ms;
	if (!routine && now_ms < ctx->deadline_min)
		return;
	bool slow = false;
	if (routine) {
		ctx->next_fast_ms = now_ms + ctx->set.timer_resolution_ms;
		slow = now_ms >= ctx->next_slow_ms;
		if (slow)
			ctx->next_slow_ms = now_ms + 500;
	}

	/* Handlers re-arm through tcp_deadline, lowering this again. */
	ctx->deadline_min = UINT64_MAX;
	uint64_t next = UINT64_MAX;
	ctx->depth++;
	for (struct tcp_pcb *pcb = ctx->pcbs; pcb; pcb = pcb->next) {
		if (pcb->dead)
			continue;
		if (routine && pcb->timewait_at && now_ms >= pcb->timewait_at) {
			tcp_pcb_done(pcb);
			continue;
		}
		if (pcb->delack_at && now_ms >= pcb->delack_at) {
			ctx->cnt.tx_delayed_acks++;
			pcb->pingpong = false;   /* no reply came in time */
			tcp_send_ack(pcb);
		}
		if (pcb->rack_at && now_ms >= pcb->rack_at)
			tcp_rack_timeout(pcb);
		/* a probe due with the RTO goes first: it took the RTO's place */
		if (!pcb->dead && pcb->tlp_at && now_ms >= pcb->tlp_at)
			tcp_tlp_fire(pcb);
		if (!pcb->dead && pcb->rto_at && now_ms >= pcb->rto_at)
			on_rto(pcb);
		if (!pcb->dead && pcb->persist_at && now_ms >= pcb->persist_at)
			on_persist(pcb);
		if (!pcb->dead && pcb->cork_at && now_ms >= pcb->cork_at)
			on_cork_ceiling(pcb);
		if (!pcb->dead && routine && pcb->keepalive && pcb->keepalive_at &&
		    now_ms >= pcb->keepalive_at)
			on_keepalive(pcb);
		if (!pcb->dead && slow && pcb->ooo)
			tcp_ooo_renege_stale(pcb);
		if (!pcb->dead && slow && pcb->cb.poll)
			pcb->cb.poll(pcb->cb_arg, pcb);
		if (!pcb->dead) {
			fold_deadline(&next, pcb->rto_at);
			fold_deadline(&next, pcb->tlp_at);
			fold_deadline(&next, pcb->rack_at);
			fold_deadline(&next, pcb->delack_at);
			fold_deadline(&next, pcb->persist_at);
			fold_deadline(&next, pcb->cork_at);
		}
	}
	fold_deadline(&ctx->deadline_min, next);
	ctx->depth--;
	if (!ctx->depth)
		tcp_reap(ctx);
}
