/* The TCP engine's life cycle: context, pcbs, the demux table and the calls a
 * socket layer makes (bind, listen, connect, close...). */
#include "stack/tcp_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void tcp_settings_default(struct tcp_settings *out)
{
	memset(out, 0, sizeof(*out));
	out->timestamps = TCP_TS_OFF;      /* VMA_TCP_TIMESTAMP_OPTION default 0 */
	out->window_scaling = true;
	out->sack = true;
	out->cc_algo = TCP_CC_NEWRENO;
	out->timer_resolution_ms = 100;
	out->rcv_buf = 256u * 1024;
	out->snd_buf = 256u * 1024;
	out->ooo_max_bytes = 512u * 1024;
	out->delack_ms = 40;
	out->rto_initial_ms = 1000;        /* RFC 6298 2.1 */
	out->rto_min_ms = 200;             /* below RFC 6298's 1 s, as Linux does */
	out->rto_max_ms = 120000;
	out->max_retries = 15;
	out->syn_retries = 6;
	out->time_wait_ms = 60000;
	out->keepalive_idle_ms = 7200000;
	out->keepalive_intvl_ms = 75000;
	out->keepalive_probes = 9;
	out->challenge_ack_per_sec = 1000;
	out->none_cwnd_segments = 64;
}

static const char *const state_names[] = {
	"CLOSED", "LISTEN", "SYN_SENT", "SYN_RCVD", "ESTABLISHED", "FIN_WAIT_1",
	"FIN_WAIT_2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT"
};

const char *tcp_state_name(enum tcp_state s)
{
	return (unsigned)s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : "?";
}

uint32_t tcp_effective_mss(const struct tcp_ctx *ctx)
{
	uint32_t mtu = ctx->set.mtu ? ctx->set.mtu : ctx->nif->mtu;
	uint32_t mss = ctx->set.mss ? ctx->set.mss : (mtu > 40 ? mtu - 40 : 536);
	/* Leave room for 40 option bytes in a frame of our own MTU. */
	if (mtu > 80 && mss > mtu - 40)
		mss = mtu - 40;
	return mss < 64 ? 64 : mss;
}

struct tcp_ctx *tcp_ctx_create(struct stack *st, const struct stack_netif *nif,
			       const struct tcp_settings *set)
{
	if (!st || !nif || st->tcp)
		return NULL;
	struct tcp_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return NULL;
	ctx->st = st;
	ctx->nif = nif;
	ctx->set = *set;
	if (!ctx->set.timer_resolution_ms)
		ctx->set.timer_resolution_ms = 100;
	if (!ctx->set.rto_min_ms)
		ctx->set.rto_min_ms = 1;
	if (ctx->set.rto_max_ms < ctx->set.rto_min_ms)
		ctx->set.rto_max_ms = ctx->set.rto_min_ms;
	if (!ctx->set.rcv_buf)
		ctx->set.rcv_buf = 65535;
	if (!ctx->set.snd_buf)
		ctx->set.snd_buf = 65535;
	if (!ctx->set.none_cwnd_segments)
		ctx->set.none_cwnd_segments = 64;
	ctx->isn_key[0] = set->isn_secret[0];
	ctx->isn_key[1] = set->isn_secret[1];
	ctx->now_ms = st->now_ms;
	st->tcp = ctx;
	return ctx;
}

static void pcb_free_now(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;

	for (struct tcp_pcb **pp = &ctx->pcbs; *pp; pp = &(*pp)->next) {
		if (*pp == pcb) {
			*pp = pcb->next;
			break;
		}
	}
	ctx->npcbs--;
	tcp_ooo_free(pcb);
	free(pcb->sbuf);
	free(pcb);
}

void tcp_ctx_destroy(struct tcp_ctx *ctx)
{
	if (!ctx)
		return;
	while (ctx->pcbs)
		pcb_free_now(ctx->pcbs);
	if (ctx->st->tcp == ctx)
		ctx->st->tcp = NULL;
	free(ctx);
}

const struct tcp_counters *tcp_ctx_counters(const struct tcp_ctx *ctx)
{
	return &ctx->cnt;
}

unsigned tcp_ctx_pcb_count(const struct tcp_ctx *ctx)
{
	return ctx->npcbs;
}

struct tcp_pcb *tcp_pcb_alloc(struct tcp_ctx *ctx)
{
	struct tcp_pcb *pcb = calloc(1, sizeof(*pcb));
	if (!pcb)
		return NULL;
	pcb->sbuf = malloc(ctx->set.snd_buf);
	if (!pcb->sbuf) {
		free(pcb);
		return NULL;
	}
	pcb->ctx = ctx;
	pcb->sbuf_size = ctx->set.snd_buf;
	pcb->rcv_buf = ctx->set.rcv_buf;
	pcb->nodelay = ctx->set.nodelay;
	pcb->quickack = ctx->set.quickack;
	pcb->mss = tcp_effective_mss(ctx);
	pcb->rto_ms = ctx->set.rto_initial_ms ? ctx->set.rto_initial_ms : 1000;
	pcb->next = ctx->pcbs;
	ctx->pcbs = pcb;
	ctx->npcbs++;
	return pcb;
}

struct tcp_pcb *tcp_pcb_new(struct tcp_ctx *ctx)
{
	return ctx ? tcp_pcb_alloc(ctx) : NULL;
}

void tcp_set_callbacks(struct tcp_pcb *pcb, const struct tcp_callbacks *cb, void *arg)
{
	if (cb)
		pcb->cb = *cb;
	else
		memset(&pcb->cb, 0, sizeof(pcb->cb));
	pcb->cb_arg = arg;
}

/* Exact 4-tuple first, then a listener on the address or on INADDR_ANY. */
struct tcp_pcb *tcp_pcb_lookup(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport,
			       uint32_t rip, uint16_t rport)
{
	struct tcp_pcb *listener = NULL;

	for (struct tcp_pcb *p = ctx->pcbs; p; p = p->next) {
		if (p->dead || p->local_port != lport)
			continue;
		if (p->state == TCP_LISTEN) {
			if (p->local_ip == lip || (!p->local_ip && !listener))
				listener = p;
			continue;
		}
		if (p->state != TCP_CLOSED && p->remote_port == rport && p->remote_ip == rip &&
		    p->local_ip == lip)
			return p;
	}
	return listener;
}

int tcp_bind(struct tcp_pcb *pcb, uint32_t ip, uint16_t port)
{
	if (pcb->bound || !port || pcb->state != TCP_CLOSED)
		return -EINVAL;
	for (struct tcp_pcb *p = pcb->ctx->pcbs; p; p = p->next) {
		if (p != pcb && !p->dead && p->bound && p->local_port == port && !p->remote_port &&
		    (p->local_ip == ip || !p->local_ip || !ip))
			return -EADDRINUSE;
	}
	pcb->local_ip = ip;
	pcb->local_port = port;
	pcb->bound = true;
	return 0;
}

int tcp_listen(struct tcp_pcb *pcb, unsigned backlog)
{
	if (!pcb->bound || (pcb->state != TCP_CLOSED && pcb->state != TCP_LISTEN))
		return -EINVAL;
	pcb->state = TCP_LISTEN;
	pcb->backlog = backlog ? backlog : 1;
	return 0;
}

int tcp_connect(struct tcp_pcb *pcb, uint32_t ip, uint16_t port, uint32_t local_ip,
		const uint8_t dst_mac[6])
{
	if (!pcb->bound || pcb->state != TCP_CLOSED)
		return pcb->state == TCP_SYN_SENT ? -EALREADY : (pcb->bound ? -EISCONN : -EINVAL);
	if (!ip || !port)
		return -EINVAL;
	if (local_ip)
		pcb->local_ip = local_ip;
	if (!pcb->local_ip)
		pcb->local_ip = pcb->ctx->nif->ip;
	pcb->remote_ip = ip;
	pcb->remote_port = port;
	memcpy(pcb->dst_mac, dst_mac, 6);
	pcb->iss = tcp_isn(pcb->ctx, pcb->local_ip, pcb->local_port, ip, port);
	pcb->snd_una = pcb->snd_nxt = pcb->snd_max = pcb->iss;
	pcb->sbuf_seq = pcb->iss + 1;
	pcb->state = TCP_SYN_SENT;
	pcb->rcv_wscale = 0;
	while (pcb->ctx->set.window_scaling && pcb->rcv_wscale < TCP_MAX_WSCALE &&
	       (65535u << pcb->rcv_wscale) < pcb->rcv_buf)
		pcb->rcv_wscale++;
	pcb->rtt_start_ms = pcb->ctx->now_ms;
	tcp_cc_init(pcb);
	int rc = tcp_send_segment(pcb, pcb->iss, 0, TCP_SYN);
	pcb->snd_nxt = pcb->snd_max = pcb->iss + 1;
	tcp_arm_rto(pcb);
	return rc == -ENOBUFS ? 0 : 0; /* a lost SYN is retransmitted by the timer */
}

static void queue_fin(struct tcp_pcb *pcb)
{
	if (pcb->fin_queued)
		return;
	pcb->fin_queued = true;
	pcb->wr_shut = true;
	if (pcb->state == TCP_ESTABLISHED || pcb->state == TCP_SYN_RCVD)
		pcb->state = TCP_FIN_WAIT_1;
	else if (pcb->state == TCP_CLOSE_WAIT)
		pcb->state = TCP_LAST_ACK;
	tcp_output(pcb);
}

int tcp_shutdown(struct tcp_pcb *pcb, bool rd, bool wr)
{
	if (pcb->state == TCP_LISTEN || pcb->state == TCP_CLOSED || pcb->state == TCP_SYN_SENT)
		return -ENOTCONN;
	if (rd)
		pcb->rd_shut = true;
	if (wr)
		queue_fin(pcb);
	return 0;
}

static void abort_children(struct tcp_pcb *listener)
{
	for (struct tcp_pcb *p = listener->ctx->pcbs; p; p = p->next) {
		if (p->parent == listener && !p->dead) {
			p->parent = NULL;
			tcp_send_rst(p);
			tcp_pcb_release(p);
		}
	}
}

int tcp_close(struct tcp_pcb *pcb)
{
	memset(&pcb->cb, 0, sizeof(pcb->cb));
	pcb->detached = true;
	switch (pcb->state) {
	case TCP_LISTEN:
		abort_children(pcb);
		/* fall through */
	case TCP_CLOSED:
	case TCP_SYN_SENT:
		tcp_pcb_release(pcb);
		return 0;
	case TCP_SYN_RCVD:
	case TCP_ESTABLISHED:
	case TCP_CLOSE_WAIT:
		queue_fin(pcb);
		return 0;
	default:
		return 0; /* already closing: the engine frees it when done */
	}
}

void tcp_abort(struct tcp_pcb *pcb)
{
	memset(&pcb->cb, 0, sizeof(pcb->cb));
	if (pcb->state == TCP_LISTEN)
		abort_children(pcb);
	else if (pcb->state != TCP_CLOSED && pcb->state != TCP_SYN_SENT &&
		 pcb->state != TCP_TIME_WAIT)
		tcp_send_rst(pcb);
	tcp_pcb_release(pcb);
}

void tcp_pcb_release(struct tcp_pcb *pcb)
{
	if (pcb->dead)
		return;
	if (pcb->parent) {
		pcb->parent->pending_children--;
		pcb->parent = NULL;
	}
	pcb->state = TCP_CLOSED;
	memset(&pcb->cb, 0, sizeof(pcb->cb));
	if (pcb->ctx->depth) {
		pcb->dead = true; /* freed by tcp_reap when the engine unwinds */
		return;
	}
	pcb_free_now(pcb);
}

void tcp_pcb_fail(struct tcp_pcb *pcb, int err)
{
	void (*fn)(void *, int) = pcb->cb.err;
	void *arg = pcb->cb_arg;

	tcp_pcb_release(pcb);
	if (fn)
		fn(arg, err);
}

void tcp_reap(struct tcp_ctx *ctx)
{
	struct tcp_pcb **pp = &ctx->pcbs;

	while (*pp) {
		struct tcp_pcb *p = *pp;
		if (p->dead) {
			*pp = p->next;
			p->next = NULL;
			ctx->npcbs--;
			tcp_ooo_free(p);
			free(p->sbuf);
			free(p);
		} else {
			pp = &p->next;
		}
	}
}

void tcp_enter_time_wait(struct tcp_pcb *pcb)
{
	pcb->state = TCP_TIME_WAIT;
	pcb->rto_at = pcb->persist_at = pcb->keepalive_at = pcb->delack_at = 0;
	pcb->timewait_at = pcb->ctx->now_ms + pcb->ctx->set.time_wait_ms;
	if (!pcb->timewait_at)
		pcb->timewait_at = 1;
}

void tcp_set_nodelay(struct tcp_pcb *pcb, bool on)
{
	pcb->nodelay = on;
	if (on)
		tcp_output(pcb);
}

void tcp_set_quickack(struct tcp_pcb *pcb, bool on)
{
	pcb->quickack = on;
}

void tcp_set_keepalive(struct tcp_pcb *pcb, bool on)
{
	pcb->keepalive = on;
	pcb->keepalive_sent = 0;
	pcb->keepalive_at = on ? pcb->ctx->now_ms + pcb->ctx->set.keepalive_idle_ms : 0;
}

enum tcp_state tcp_pcb_state(const struct tcp_pcb *pcb)
{
	return pcb->state;
}

uint32_t tcp_sndbuf_free(const struct tcp_pcb *pcb)
{
	return pcb->sbuf_size - pcb->sbuf_len;
}

void tcp_pcb_get_addr(const struct tcp_pcb *pcb, uint32_t *local_ip, uint16_t *local_port,
		      uint32_t *remote_ip, uint16_t *remote_port)
{
	if (local_ip) *local_ip = pcb->local_ip;
	if (local_port) *local_port = pcb->local_port;
	if (remote_ip) *remote_ip = pcb->remote_ip;
	if (remote_port) *remote_port = pcb->remote_port;
}

void tcp_pcb_get_info(const struct tcp_pcb *pcb, struct tcp_pcb_info *o)
{
	memset(o, 0, sizeof(*o));
	o->state = pcb->state;
	o->mss = pcb->mss;
	o->cwnd = pcb->cwnd;
	o->ssthresh = pcb->ssthresh;
	o->snd_wnd = pcb->snd_wnd;
	o->rcv_wnd = pcb->rcv_adv - pcb->rcv_nxt;
	o->flight = tcp_flight(pcb);
	o->srtt_ms = pcb->srtt_ms;
	o->rttvar_ms = pcb->rttvar_ms;
	o->rto_ms = pcb->rto_ms;
	o->backoff = pcb->backoff;
	o->snd_wscale = pcb->snd_wscale;
	o->rcv_wscale = pcb->rcv_wscale;
	o->ts_ok = pcb->ts_ok;
	o->sack_ok = pcb->sack_ok;
	o->in_recovery = pcb->in_recovery;
	o->snd_una = pcb->snd_una;
	o->snd_nxt = pcb->snd_nxt;
	o->rcv_nxt = pcb->rcv_nxt;
	o->ooo_segments = pcb->ooo_count;
	o->ooo_bytes_held = pcb->ooo_mem;
	o->retransmits = pcb->retransmits;
}
