/* The TCP engine's life cycle: context, pcbs, the demux table and the calls a
 * socket layer makes (bind, listen, connect, close...). */
#include "stack/tcp_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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
	out->invalid_ack_interval_ms = 500;   /* Linux tcp_invalid_ratelimit */
	out->none_cwnd_segments = 64;
	out->slow_start_after_idle = true;
	out->gro_streams_max = 32;
}

/* announce: the MSS our SYN carries (the route's advmss wins); else the
 * bound on what we send (the path MTU). */
static uint32_t mss_limit(const struct tcp_ctx *ctx, const struct stack_netif *nif, uint32_t mss_clamp,
			  const struct tcp_route_metrics *rm, bool announce)
{
	/* VMA_MTU may lower the interface's MTU, never raise it: the ring's
	 * frames bound the interface's (ring_xdp.c). */
	uint32_t if_mtu = nif && nif->mtu ? nif->mtu : ctx->set.mtu;
	if (ctx->set.mtu && ctx->set.mtu < if_mtu)
		if_mtu = ctx->set.mtu;
	/* The route's mtu metric is the path MTU (Linux's dst_mtu). */
	uint32_t mtu = if_mtu;
	if (rm && rm->mtu >= 68 && (!mtu || rm->mtu < mtu))
		mtu = rm->mtu;
	uint32_t mss;
	if (announce && rm && rm->advmss)
		mss = rm->advmss;
	else
		mss = ctx->set.mss ? ctx->set.mss : (mtu > 40 ? mtu - 40 : 536);
	/* Announced: never more than a frame of our interface receives
	 * (Linux would announce any advmss; our rings could not take it).
	 * Sent: never more than the path carries. */
	uint32_t bound = announce ? if_mtu : mtu;
	if (bound > 80 && mss > bound - 40)
		mss = bound - 40;
	if (mss_clamp && mss > mss_clamp)
		mss = mss_clamp;
	return mss < 64 ? 64 : mss;
}

uint32_t tcp_mss_for(const struct tcp_ctx *ctx, const struct stack_netif *nif, uint32_t mss_clamp,
		     const struct tcp_route_metrics *rm)
{
	return mss_limit(ctx, nif, mss_clamp, rm, true);
}

uint32_t tcp_path_mss_for(const struct tcp_ctx *ctx, const struct stack_netif *nif, uint32_t mss_clamp,
			  const struct tcp_route_metrics *rm)
{
	return mss_limit(ctx, nif, mss_clamp, rm, false);
}

uint32_t tcp_local_mss(const struct tcp_pcb *pcb)
{
	return tcp_mss_for(pcb->ctx, pcb->nif, pcb->mss_clamp, &pcb->route);
}

uint32_t tcp_path_mss(const struct tcp_pcb *pcb)
{
	return tcp_path_mss_for(pcb->ctx, pcb->nif, pcb->mss_clamp, &pcb->route);
}

void tcp_mss_reset(struct tcp_pcb *pcb)
{
	pcb->adv_mss = tcp_local_mss(pcb);
	pcb->mss = tcp_path_mss(pcb);
}

void tcp_set_route_metrics(struct tcp_pcb *pcb, const struct tcp_route_metrics *rm)
{
	pcb->route = rm ? *rm : (struct tcp_route_metrics){ 0, 0 };
	if (pcb->state == TCP_CLOSED || pcb->state == TCP_LISTEN)
		tcp_mss_reset(pcb);
}

void tcp_ctx_set_route_hook(struct tcp_ctx *ctx, tcp_route_fn fn, void *arg)
{
	ctx->route_fn = fn;
	ctx->route_arg = arg;
}

void tcp_ctx_set_conn_hook(struct tcp_ctx *ctx, tcp_conn_fn fn, void *arg)
{
	ctx->conn_fn = fn;
	ctx->conn_arg = arg;
}

/* On once, then off once: at TIME_WAIT or when it leaves the table,
 * whichever comes first. */
static void conn_hook_tell(struct tcp_pcb *pcb, bool on)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (pcb->conn_told == on)
		return;
	pcb->conn_told = on;
	if (ctx->conn_fn)
		ctx->conn_fn(ctx->conn_arg, pcb->local_ip, pcb->local_port, pcb->remote_ip, pcb->remote_port,
			     &pcb->conn_cookie, on);
}

/* As Linux's tcp_select_initial_window: ilog2(space) - 15, within 0..14. */
uint8_t tcp_wscale_for(uint32_t rcv_buf)
{
	int ws = rcv_buf ? 31 - __builtin_clz(rcv_buf) - 15 : 0;
	return (uint8_t)(ws < 0 ? 0 : ws > (int)TCP_MAX_WSCALE ? (int)TCP_MAX_WSCALE : ws);
}

uint8_t tcp_pcb_wscale(const struct tcp_pcb *pcb)
{
	uint32_t space = pcb->rcv_buf;
	/* the largest window auto-tuning may reach (Linux: tcp_rmem[2], rmem_max) */
	if (!pcb->rcv_buf_locked)
		space = tcp_max32(space, tcp_max32(pcb->ctx->set.rcv_wscale_space, pcb->ctx->set.rcv_buf_max));
	return tcp_wscale_for(space);
}

/* ---- receive-buffer auto-tuning (Linux's tcp_rcv_space_adjust) ----
 * Once per receiver RTT: when the app consumed more than in any earlier
 * RTT, the window becomes twice that plus 16 segments (more when the rate
 * is still climbing), so the sender is never limited by our window while
 * the app keeps up; never above rcv_buf_max, never shrunk. */
void tcp_rcv_rtt_update(struct tcp_pcb *pcb, uint32_t sample_us, bool win_dep)
{
	if (!sample_us)
		sample_us = 1;
	if (!pcb->rcv_rtt_us)
		pcb->rcv_rtt_us = sample_us;
	else if (win_dep)
		pcb->rcv_rtt_us = tcp_min32(pcb->rcv_rtt_us, sample_us);
	else
		pcb->rcv_rtt_us = (uint32_t)(((uint64_t)pcb->rcv_rtt_us * 7 + sample_us) / 8);
}

void tcp_rcv_space_adjust(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;
	uint32_t rtt = pcb->rcv_rtt_us;
	if (pcb->rcv_buf_locked || !ctx->set.rcv_buf_max || !rtt)
		return;
	if (!pcb->rcvq_time_us) {
		pcb->rcvq_time_us = ctx->now_us;
		pcb->rcvq_seq = pcb->rcv_copied;
		return;
	}
	if (ctx->now_us - pcb->rcvq_time_us < rtt)
		return;
	uint32_t copied = pcb->rcv_copied - pcb->rcvq_seq;
	if (copied > pcb->rcvq_space) {
		uint64_t space = pcb->rcvq_space ? pcb->rcvq_space : 1;
		uint64_t win = 2ull * copied + 16ull * pcb->adv_mss;
		win += 2 * (win * (copied - space) / space);
		uint32_t nb = (uint32_t)(win < ctx->set.rcv_buf_max ? win : ctx->set.rcv_buf_max);
		if (nb > pcb->rcv_buf) {
			pcb->rcv_buf = nb;
			ctx->cnt.rx_rcvbuf_grown++;
		}
		pcb->rcvq_space = copied;
	}
	pcb->rcvq_seq = pcb->rcv_copied;
	pcb->rcvq_time_us = ctx->now_us;
}

/* Linux's tcp_incr_quickack: as many immediate ACKs as half the window
 * holds segments, at least 2, at most max. */
void tcp_quickack_grant(struct tcp_pcb *pcb, uint32_t max)
{
	uint32_t mss = pcb->rcv_mss ? pcb->rcv_mss : tcp_min32(pcb->adv_mss, 536);
	uint32_t wnd = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : pcb->rcv_buf;
	uint32_t n = wnd / (2 * (mss ? mss : 536));
	if (n < 2)
		n = 2;
	if (n > max)
		n = max;
	if (n > pcb->quick)
		pcb->quick = (uint8_t)n;
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
	ctx->deadline_min = UINT64_MAX;
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
	/* Not the ISN key itself (that one may be drawn lazily), but as secret. */
	if (getrandom(ctx->hash_key, sizeof(ctx->hash_key), GRND_NONBLOCK) != sizeof(ctx->hash_key)) {
		ctx->hash_key[0] = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)ctx;
		ctx->hash_key[1] = 0xbf58476d1ce4e5b9ull ^ st->now_ms;
	}
	ctx->now_ms = st->now_ms;
	ctx->now_us = st->now_ms * 1000;
	st->tcp = ctx;
	return ctx;
}

/* ---- demux tables ----
 * Connections are keyed by the 4-tuple, bound-but-unconnected pcbs (and so
 * listeners) by local port alone, so a listener on INADDR_ANY and one on a
 * given address share a chain. The hash is keyed by a random secret so a peer
 * cannot aim many tuples at one chain. */
#define TCP_HASH_MIN_BUCKETS 64u
#define TCP_HASH_MAX_BUCKETS (1u << 20)

static uint32_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (uint32_t)x;
}

static uint32_t conn_hash(const struct tcp_ctx *ctx, uint32_t lip, uint16_t lport,
			  uint32_t rip, uint16_t rport)
{
	uint64_t a = ((uint64_t)lip << 32 | rip) ^ ctx->hash_key[0];
	uint64_t b = ((uint64_t)lport << 16 | rport) ^ ctx->hash_key[1];
	return mix64(a ^ mix64(b));
}

static uint32_t port_hash(const struct tcp_ctx *ctx, uint16_t lport)
{
	return mix64(lport ^ ctx->hash_key[1]);
}

static uint32_t pcb_hash(const struct tcp_pcb *p, uint8_t table)
{
	return table == TCP_HASH_CONN ?
	       conn_hash(p->ctx, p->local_ip, p->local_port, p->remote_ip, p->remote_port) :
	       port_hash(p->ctx, p->local_port);
}

static struct tcp_hash *table_of(struct tcp_ctx *ctx, uint8_t table)
{
	return table == TCP_HASH_CONN ? &ctx->conns : &ctx->ports;
}

/* Doubles the bucket array; on allocation failure chains just get longer. */
static void hash_grow(struct tcp_ctx *ctx, uint8_t table)
{
	struct tcp_hash *h = table_of(ctx, table);
	uint32_t n = h->bucket ? (h->mask + 1) * 2 : TCP_HASH_MIN_BUCKETS;
	if (n > TCP_HASH_MAX_BUCKETS)
		return;
	struct tcp_pcb **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (uint32_t i = 0; h->bucket && i <= h->mask; i++) {
		struct tcp_pcb *p = h->bucket[i];
		while (p) {
			struct tcp_pcb *next = p->hnext;
			uint32_t k = pcb_hash(p, table) & (n - 1);
			p->hnext = nb[k];
			nb[k] = p;
			p = next;
		}
	}
	free(h->bucket);
	h->bucket = nb;
	h->mask = n - 1;
}

static void pcb_unhash(struct tcp_pcb *pcb)
{
	if (pcb->hashed == TCP_HASH_NONE)
		return;
	if (pcb->hashed == TCP_HASH_CONN)
		conn_hook_tell(pcb, false);
	pcb->ctx->last_conn = NULL;
	struct tcp_hash *h = table_of(pcb->ctx, pcb->hashed);
	bool found = false;
	for (struct tcp_pcb **pp = &h->bucket[pcb_hash(pcb, pcb->hashed) & h->mask]; *pp;
	     pp = &(*pp)->hnext) {
		if (*pp == pcb) {
			*pp = pcb->hnext;
			found = true;
			break;
		}
	}
	/* pcb tables: a hashed pcb is in the chain of its key */
	VMA_ASSERT(found && h->count > 0);
	(void)found;
	pcb->hnext = NULL;
	pcb->hashed = TCP_HASH_NONE;
	h->count--;
}

static void pcb_hash_into(struct tcp_pcb *pcb, uint8_t table)
{
	pcb_unhash(pcb);
	struct tcp_hash *h = table_of(pcb->ctx, table);
	if (!h->bucket || h->count >= 2 * (h->mask + 1))
		hash_grow(pcb->ctx, table);
	if (!h->bucket) {
		/* no memory for even the first table: the pcb cannot be found, so
		 * its peer will see RSTs; better than crashing */
		return;
	}
	uint32_t k = pcb_hash(pcb, table) & h->mask;
	pcb->ctx->last_conn = NULL;
	pcb->hnext = h->bucket[k];
	h->bucket[k] = pcb;
	pcb->hashed = table;
	h->count++;
	if (table == TCP_HASH_CONN && pcb->state != TCP_TIME_WAIT)
		conn_hook_tell(pcb, true);
}

void tcp_pcb_hash_conn(struct tcp_pcb *pcb)
{
	pcb_hash_into(pcb, TCP_HASH_CONN);
}

static void pcb_free_now(struct tcp_pcb *pcb)
{
	struct tcp_ctx *ctx = pcb->ctx;

	VMA_ASSERT(ctx->npcbs > 0 && (pcb->prev || ctx->pcbs == pcb));
	pcb_unhash(pcb);
	if (pcb->prev)
		pcb->prev->next = pcb->next;
	else
		ctx->pcbs = pcb->next;
	if (pcb->next)
		pcb->next->prev = pcb->prev;
	ctx->npcbs--;
	tcp_estab_count(pcb, false);
	tcp_batch_drop_pcb(pcb);
	tcp_ooo_free(pcb);
	free(pcb->sbuf);
	tcp_txq_free(&pcb->txq);
	free(pcb->tx_stamps);
	free(pcb);
}

void tcp_ctx_destroy(struct tcp_ctx *ctx)
{
	if (!ctx)
		return;
	while (ctx->pcbs)
		pcb_free_now(ctx->pcbs);
	free(ctx->conns.bucket);
	free(ctx->ports.bucket);
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

struct tcp_pcb *tcp_pcb_alloc(struct tcp_ctx *ctx, const struct tcp_pcb *tmpl,
			      const struct stack_netif *nif)
{
	const struct tcp_settings *s = &ctx->set;
	struct tcp_pcb *pcb = calloc(1, sizeof(*pcb));
	if (!pcb)
		return NULL;
	uint32_t snd_buf = tmpl ? tmpl->sbuf_size : s->snd_buf;
	pcb->sbuf = malloc(snd_buf);
	if (!pcb->sbuf) {
		free(pcb);
		return NULL;
	}
	/* without records (no memory) the pcb works, with no RACK */
	tcp_txq_init(&pcb->txq, snd_buf);
	pcb->ctx = ctx;
	pcb->nif = nif ? nif : (tmpl ? tmpl->nif : ctx->nif);
	pcb->sbuf_size = snd_buf;
	if (tmpl) {
		pcb->rcv_buf = tmpl->rcv_buf;
		pcb->nodelay = tmpl->nodelay;
		pcb->quickack = tmpl->quickack;
		pcb->keepalive = tmpl->keepalive;
		pcb->ka_idle_ms = tmpl->ka_idle_ms;
		pcb->ka_intvl_ms = tmpl->ka_intvl_ms;
		pcb->ka_probes = tmpl->ka_probes;
		pcb->syn_retries = tmpl->syn_retries;
		pcb->mss_clamp = tmpl->mss_clamp;
		pcb->notsent_lowat = tmpl->notsent_lowat;
		pcb->rcv_buf_locked = tmpl->rcv_buf_locked;
		pcb->snd_buf_locked = tmpl->snd_buf_locked;
		pcb->cc_algo = tmpl->cc_algo;
		pcb->user_timeout_ms = tmpl->user_timeout_ms;
	} else {
		pcb->cc_algo = (uint8_t)s->cc_algo;
		pcb->notsent_lowat = s->notsent_lowat ? s->notsent_lowat : UINT32_MAX;
		pcb->rcv_buf = s->rcv_buf;
		pcb->nodelay = s->nodelay;
		pcb->quickack = s->quickack;
		pcb->ka_idle_ms = s->keepalive_idle_ms;
		pcb->ka_intvl_ms = s->keepalive_intvl_ms;
		pcb->ka_probes = s->keepalive_probes;
		pcb->syn_retries = s->syn_retries;
	}
	tcp_mss_reset(pcb);
	pcb->rto_ms = ctx->set.rto_initial_ms ? ctx->set.rto_initial_ms : 1000;
	pcb->min_rtt_ms = UINT32_MAX;
	pcb->min_rtt_us = UINT32_MAX;
	pcb->next = ctx->pcbs;
	if (ctx->pcbs)
		ctx->pcbs->prev = pcb;
	ctx->pcbs = pcb;
	ctx->npcbs++;
	return pcb;
}

struct tcp_pcb *tcp_pcb_new(struct tcp_ctx *ctx)
{
	return ctx ? tcp_pcb_alloc(ctx, NULL, NULL) : NULL;
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
	uint64_t steps = 0;

	ctx->cnt.lookups++;
	struct tcp_pcb *last = ctx->last_conn;
	if (last && last->remote_port == rport && last->local_port == lport && last->remote_ip == rip &&
	    last->local_ip == lip && !last->dead && last->state != TCP_CLOSED) {
		VMA_ASSERT(last->hashed == TCP_HASH_CONN && last->ctx == ctx);
		ctx->cnt.lookup_steps++;
		return last;
	}
	if (ctx->conns.bucket) {
		struct tcp_pcb *p = ctx->conns.bucket[conn_hash(ctx, lip, lport, rip, rport) & ctx->conns.mask];
		for (; p; p = p->hnext) {
			steps++;
			VMA_ASSERT(p->hashed == TCP_HASH_CONN && p->ctx == ctx);
			if (p->remote_port == rport && p->local_port == lport && p->remote_ip == rip &&
			    p->local_ip == lip && !p->dead && p->state != TCP_CLOSED) {
				ctx->cnt.lookup_steps += steps;
				ctx->last_conn = p;
				return p;
			}
		}
	}
	unsigned group = 0;   /* listeners of listener's address with SO_REUSEPORT */
	if (ctx->ports.bucket) {
		struct tcp_pcb *p = ctx->ports.bucket[port_hash(ctx, lport) & ctx->ports.mask];
		for (; p; p = p->hnext) {
			steps++;
			if (p->dead || p->local_port != lport || p->state != TCP_LISTEN)
				continue;
			if (listener && p->reuseport && p->local_ip == listener->local_ip) {
				group++;
				continue;
			}
			if (p->local_ip == lip || (!p->local_ip && !listener)) {
				listener = p;
				group = p->reuseport;
			}
		}
	}
	if (group > 1) {
		/* The group's member for this peer: the same for all its
		 * segments (a SYN cookie's ACK finds the listener of its SYN). */
		unsigned k = conn_hash(ctx, lip, lport, rip, rport) % group;
		struct tcp_pcb *p = ctx->ports.bucket[port_hash(ctx, lport) & ctx->ports.mask];
		for (; p; p = p->hnext) {
			if (!p->dead && p->local_port == lport && p->state == TCP_LISTEN && p->reuseport &&
			    p->local_ip == listener->local_ip && k-- == 0) {
				listener = p;
				break;
			}
		}
	}
	ctx->cnt.lookup_steps += steps;
	return listener;
}

void tcp_pcb_set_reuseport(struct tcp_pcb *pcb, bool on)
{
	pcb->reuseport = on;
}

int tcp_bind(struct tcp_pcb *pcb, uint32_t ip, uint16_t port)
{
	struct tcp_ctx *ctx = pcb->ctx;

	if (pcb->bound || !port || pcb->state != TCP_CLOSED)
		return -EINVAL;
	if (ctx->ports.bucket) {
		struct tcp_pcb *p = ctx->ports.bucket[port_hash(ctx, port) & ctx->ports.mask];
		for (; p; p = p->hnext) {
			if (p != pcb && !p->dead && p->local_port == port &&
			    (p->local_ip == ip || !p->local_ip || !ip) && !(p->reuseport && pcb->reuseport))
				return -EADDRINUSE;
		}
	}
	pcb->local_ip = ip;
	pcb->local_port = port;
	pcb->bound = true;
	pcb_hash_into(pcb, TCP_HASH_PORT);
	return 0;
}

int tcp_listen(struct tcp_pcb *pcb, unsigned backlog)
{
	if (!pcb->bound || (pcb->state != TCP_CLOSED && pcb->state != TCP_LISTEN))
		return -EINVAL;
	tcp_set_state(pcb, TCP_LISTEN);
	/* 0 as Linux: every SYN is answered with a cookie, one connection
	 * may wait to be accepted. */
	pcb->backlog = backlog;
	return 0;
}

void tcp_listen_accepted(struct tcp_pcb *lis)
{
	if (lis && lis->accept_queued)
		lis->accept_queued--;
}

int tcp_connect(struct tcp_pcb *pcb, uint32_t ip, uint16_t port, uint32_t local_ip,
		const uint8_t dst_mac[6])
{
	if (!pcb->bound || pcb->state != TCP_CLOSED || pcb->remote_port)
		return pcb->state == TCP_SYN_SENT ? -EALREADY : (pcb->bound ? -EISCONN : -EINVAL);
	if (!ip || !port)
		return -EINVAL;
	uint32_t lip = local_ip ? local_ip : (pcb->local_ip ? pcb->local_ip : pcb->nif->ip);
	struct tcp_pcb *same = tcp_pcb_lookup(pcb->ctx, lip, pcb->local_port, ip, port);
	uint32_t reuse_isn = 0;
	bool reuse = false;
	if (same && same->state == TCP_TIME_WAIT) {
		/* The kernel socket under us chose this port without knowing our
		 * TIME_WAIT: reuse the tuple (as Linux tcp_tw_reuse), the new
		 * sequence space above the old one so its duplicates miss. */
		reuse_isn = same->snd_nxt + 65535 + 2;
		reuse = true;
		tcp_pcb_done(same);
	} else if (same && same->state != TCP_LISTEN) {
		return -EADDRNOTAVAIL;   /* the 4-tuple is taken (as Linux connect) */
	}
	pcb->local_ip = lip;
	pcb->remote_ip = ip;
	pcb->remote_port = port;
	tcp_pcb_hash_conn(pcb);
	memcpy(pcb->dst_mac, dst_mac, 6);
	pcb->iss = reuse ? reuse_isn : tcp_isn(pcb->ctx, pcb->local_ip, pcb->local_port, ip, port);
	pcb->snd_una = pcb->snd_nxt = pcb->snd_max = pcb->snd_sml = pcb->iss;
	pcb->sbuf_seq = pcb->iss + 1;
	tcp_set_state(pcb, TCP_SYN_SENT);
	pcb->rcv_wscale = pcb->ctx->set.window_scaling ? tcp_pcb_wscale(pcb) : 0;
	tcp_mss_reset(pcb);
	pcb->una_since_ms = pcb->ctx->now_ms;
	pcb->rtt_start_ms = pcb->ctx->now_ms;
	pcb->rtt_start_us = pcb->ctx->now_us;
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
		tcp_set_state(pcb, TCP_FIN_WAIT_1);
	else if (pcb->state == TCP_CLOSE_WAIT)
		tcp_set_state(pcb, TCP_LAST_ACK);
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
	for (struct tcp_pcb *p = listener->ctx->pcbs, *next; p; p = next) {
		next = p->next;   /* p may be freed below */
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
	if (pcb->counted_estab)
		pcb->ctx->cnt.estab_resets++;
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
		struct tcp_pcb *lis = pcb->parent;
		lis->pending_children--;
		pcb->parent = NULL;
		if (lis->cb.child_lost)
			lis->cb.child_lost(lis->cb_arg, lis, pcb);
	}
	tcp_set_state(pcb, TCP_CLOSED);
	memset(&pcb->cb, 0, sizeof(pcb->cb));
	tcp_batch_drop_pcb(pcb);
	pcb_unhash(pcb);
	if (pcb->ctx->depth) {
		pcb->dead = true; /* freed by tcp_reap when the engine unwinds */
		pcb->ctx->ndead++;
		return;
	}
	pcb_free_now(pcb);
}

void tcp_pcb_done(struct tcp_pcb *pcb)
{
	if (pcb->detached || pcb->parent) {
		tcp_pcb_release(pcb);
		return;
	}
	pcb_unhash(pcb);
	tcp_set_state(pcb, TCP_CLOSED);
	pcb->rto_at = pcb->delack_at = pcb->persist_at = pcb->keepalive_at = pcb->timewait_at = 0;
	pcb->tlp_at = pcb->rack_at = 0;
	pcb->keepalive = false;
	tcp_ooo_free(pcb);
}

void tcp_pcb_fail(struct tcp_pcb *pcb, int err)
{
	/* Data that arrived before the error is the app's to read first. */
	tcp_batch_flush_pcb(pcb);
	if (pcb->dead)
		return;
	void (*fn)(void *, int) = pcb->cb.err;
	void *arg = pcb->cb_arg;

	if (pcb->counted_estab)
		pcb->ctx->cnt.estab_resets++;
	tcp_pcb_release(pcb);
	if (fn)
		fn(arg, err);
}

void tcp_reap(struct tcp_ctx *ctx)
{
	/* Dead pcbs are rare (closes); skip the walk on the per-segment path. */
	if (!ctx->ndead)
		return;
	for (struct tcp_pcb *p = ctx->pcbs, *next; p; p = next) {
		next = p->next;
		if (p->dead)
			pcb_free_now(p);
	}
	ctx->ndead = 0;
}

void tcp_enter_time_wait(struct tcp_pcb *pcb)
{
	tcp_set_state(pcb, TCP_TIME_WAIT);
	/* Over for the peer too (both FINs are through): the conn hook's
	 * business ends here, not 2 MSL later. */
	conn_hook_tell(pcb, false);
	/* Nothing will be sent from it again (our FIN is acknowledged): a
	 * connection-rate workload keeps thousands of pcbs here for 2 MSL, so
	 * they should not each hold a send buffer (one mmap each at 256 KiB). */
	if (pcb->sbuf && !pcb->sbuf_len) {
		free(pcb->sbuf);
		pcb->sbuf = NULL;
		pcb->sbuf_size = 0;
		pcb->sbuf_off = 0;
		tcp_txq_free(&pcb->txq);
	}
	pcb->rto_at = pcb->persist_at = pcb->keepalive_at = pcb->delack_at = 0;
	pcb->tlp_at = pcb->rack_at = pcb->cork_at = 0;
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

void tcp_set_cork(struct tcp_pcb *pcb, bool on)
{
	if (pcb->cork == on)
		return;
	pcb->cork = on;
	if (!on) {
		pcb->cork_at = 0;
		tcp_output(pcb);
	}
}

bool tcp_corked(const struct tcp_pcb *pcb)
{
	return pcb->cork;
}

void tcp_push(struct tcp_pcb *pcb)
{
	bool nd = pcb->nodelay;

	pcb->nodelay = true;
	pcb->cork_push = true;
	tcp_output(pcb);
	pcb->cork_push = false;
	pcb->nodelay = nd;
}

void tcp_set_quickack(struct tcp_pcb *pcb, bool on)
{
	pcb->quickack = on;
}

void tcp_set_keepalive(struct tcp_pcb *pcb, bool on)
{
	if (on && pcb->keepalive)
		return;   /* already on: the running timer is kept (as Linux) */
	pcb->keepalive = on;
	pcb->keepalive_sent = 0;
	pcb->keepalive_at = on ? pcb->ctx->now_ms + pcb->ka_idle_ms : 0;
}

void tcp_set_netif(struct tcp_pcb *pcb, const struct stack_netif *nif)
{
	if (!nif)
		return;
	pcb->nif = nif;
	if (pcb->state == TCP_CLOSED || pcb->state == TCP_LISTEN)
		tcp_mss_reset(pcb);
}

/* Re-homes the circular send buffer linearly into a new one of size bytes. */
static bool sbuf_resize(struct tcp_pcb *pcb, uint32_t size)
{
	uint8_t *nb = malloc(size);
	if (!nb)
		return false;
	uint32_t first = tcp_min32(pcb->sbuf_len, pcb->sbuf_size - pcb->sbuf_off);
	memcpy(nb, pcb->sbuf + pcb->sbuf_off, first);
	memcpy(nb + first, pcb->sbuf, pcb->sbuf_len - first);
	free(pcb->sbuf);
	pcb->sbuf = nb;
	pcb->sbuf_size = size;
	pcb->sbuf_off = 0;
	return true;
}

void tcp_sndbuf_expand(struct tcp_pcb *pcb)
{
	uint32_t max = pcb->ctx->set.snd_buf_max;
	pcb->snd_nospace = false;
	/* BBR only: its cwnd is its model's (two BDPs and the ACK aggregation).
	 * Linux grows the buffer under every congestion control; ours did so
	 * for NewReno and Cubic on 2026-11-30, with their cwnd growing only
	 * while it limits the sender, and through the 1%+1% lossy router
	 * (tests/bench/lossy_bench.sh) they fell from 381-440 MB/s to 238-265
	 * (a loss-based flight grown to the buffer meets more of the drops per
	 * round trip); on the clean veth path it changed nothing measurable.
	 * 128 KiB already holds several of the testbed's bandwidth-delay
	 * products; an application that wants more sets SO_SNDBUF. */
	if (pcb->cc_algo != TCP_CC_BBR || pcb->snd_buf_locked || !pcb->sbuf || pcb->sbuf_size >= max)
		return;
	/* cwnd full: a larger buffer would only hold more unsent bytes. With
	 * holes (lost, or SACKed above a loss) the buffer fills while the
	 * pipe is below cwnd, and the writer waits for the repair. */
	if (tcp_recovery_pipe(pcb) >= pcb->cwnd)
		return;
	uint64_t want = 4ull * pcb->cwnd;
	if (want <= pcb->sbuf_size)
		return;
	if (want < 2ull * pcb->sbuf_size)
		want = 2ull * pcb->sbuf_size;   /* few resizes: each copies the buffer */
	if (want > max)
		want = max;
	if (sbuf_resize(pcb, (uint32_t)want))
		tcp_txq_resize(&pcb->txq, (uint32_t)want);
}

void tcp_set_bufsizes(struct tcp_pcb *pcb, uint32_t rcv_buf, uint32_t snd_buf)
{
	if (rcv_buf) {
		pcb->rcv_buf = rcv_buf;
		pcb->rcv_buf_locked = true;   /* SO_RCVBUF: no auto-tuning (Linux's SOCK_RCVBUF_LOCK) */
	}
	if (snd_buf)
		pcb->snd_buf_locked = true;   /* SO_SNDBUF: no auto-tuning (Linux's SOCK_SNDBUF_LOCK) */
	if (snd_buf && pcb->sbuf) {
		uint32_t size = tcp_max32(snd_buf, pcb->sbuf_len);
		if (size && size != pcb->sbuf_size && sbuf_resize(pcb, size))   /* on failure the old buffer stays */
			tcp_txq_resize(&pcb->txq, size);   /* and so may the records */
	}
}

void tcp_set_user_timeout(struct tcp_pcb *pcb, uint32_t ms)
{
	pcb->user_timeout_ms = ms;
	if (pcb->rto_at)
		tcp_arm_rto(pcb);   /* the deadline may now come before the RTO */
}

void tcp_set_keepalive_params(struct tcp_pcb *pcb, uint32_t idle_ms, uint32_t intvl_ms,
			      uint32_t probes)
{
	struct tcp_ctx *ctx = pcb->ctx;
	if (idle_ms)
		pcb->ka_idle_ms = idle_ms;
	if (intvl_ms)
		pcb->ka_intvl_ms = intvl_ms;
	if (probes)
		pcb->ka_probes = probes;
	if (idle_ms && pcb->keepalive && pcb->keepalive_at && !pcb->keepalive_sent) {
		/* as Linux: the idle time counts from the last segment received */
		uint64_t since = pcb->last_ack_rx_ms ? pcb->last_ack_rx_ms : ctx->now_ms;
		uint64_t at = since + pcb->ka_idle_ms;
		pcb->keepalive_at = at > ctx->now_ms ? at : ctx->now_ms;
	}
}

void tcp_set_syn_retries(struct tcp_pcb *pcb, uint32_t retries)
{
	if (retries)
		pcb->syn_retries = retries;
}

void tcp_set_mss_clamp(struct tcp_pcb *pcb, uint32_t mss)
{
	pcb->mss_clamp = mss;
	if (pcb->state == TCP_CLOSED || pcb->state == TCP_LISTEN)
		tcp_mss_reset(pcb);
	else if (mss && pcb->mss > mss && mss >= 64)
		pcb->mss = mss;   /* Linux lowers a live connection's MSS too */
}

uint32_t tcp_sndbuf_used(const struct tcp_pcb *pcb)
{
	return pcb->sbuf_len;
}

uint32_t tcp_sndbuf_notsent(const struct tcp_pcb *pcb)
{
	/* snd_max, not snd_nxt: bytes an RTO put back for resending were sent */
	uint32_t data_end = pcb->sbuf_seq + pcb->sbuf_len;
	return SEQ_GT(data_end, pcb->snd_max) ? data_end - pcb->snd_max : 0;
}

void tcp_set_notsent_lowat(struct tcp_pcb *pcb, uint32_t lowat)
{
	if (!lowat)
		lowat = pcb->ctx->set.notsent_lowat;
	pcb->notsent_lowat = lowat ? lowat : UINT32_MAX;
}

uint32_t tcp_sndbuf_lowat_room(const struct tcp_pcb *pcb)
{
	if (pcb->notsent_lowat == UINT32_MAX)
		return UINT32_MAX;
	uint32_t notsent = tcp_sndbuf_notsent(pcb);
	if (notsent >= pcb->notsent_lowat)
		return 0;
	return tcp_max32(pcb->notsent_lowat - notsent, pcb->mss);
}

bool tcp_sndbuf_lowat_writable(const struct tcp_pcb *pcb)
{
	return pcb->notsent_lowat == UINT32_MAX || 2ull * tcp_sndbuf_notsent(pcb) < pcb->notsent_lowat;
}

enum tcp_state tcp_pcb_state(const struct tcp_pcb *pcb)
{
	return pcb->state;
}

uint32_t tcp_sndbuf_free(const struct tcp_pcb *pcb)
{
	return pcb->sbuf_size - pcb->sbuf_len;
}

unsigned tcp_listener_half_open(struct tcp_pcb *lis, void (*fn)(void *arg, const struct tcp_pcb *child), void *arg)
{
	unsigned n = 0;
	if (!lis->pending_children)
		return 0;
	for (struct tcp_pcb *p = lis->ctx->pcbs; p; p = p->next) {
		if (p->parent != lis || p->state != TCP_SYN_RCVD || p->dead)
			continue;
		fn(arg, p);
		n++;
	}
	return n;
}

void tcp_pcb_get_addr(const struct tcp_pcb *pcb, uint32_t *local_ip, uint16_t *local_port,
		      uint32_t *remote_ip, uint16_t *remote_port)
{
	if (local_ip) *local_ip = pcb->local_ip;
	if (local_port) *local_port = pcb->local_port;
	if (remote_ip) *remote_ip = pcb->remote_ip;
	if (remote_port) *remote_port = pcb->remote_port;
}

static void tcp_pcb_export_fill(const struct tcp_pcb *pcb, struct tcp_pcb_export *o)
{
	memset(o, 0, sizeof(*o));
	o->snd_queue_seq = pcb->sbuf_seq;
	o->snd_nxt = pcb->snd_nxt;
	o->rcv_nxt = pcb->rcv_nxt;
	o->snd_wl1 = pcb->snd_wl1;
	o->snd_wnd = pcb->snd_wnd;
	o->max_snd_wnd = pcb->max_snd_wnd;
	/* the peer's FIN takes a sequence number past what we advertised */
	o->rcv_wnd = SEQ_GT(pcb->rcv_adv, pcb->rcv_nxt) ? pcb->rcv_adv - pcb->rcv_nxt : 0;
	o->mss = pcb->mss;
	o->snd_wscale = pcb->snd_wscale;
	o->rcv_wscale = pcb->rcv_wscale;
	o->ws_ok = pcb->ws_ok;
	o->ts_ok = pcb->ts_ok;
	o->sack_ok = pcb->sack_ok;
	o->ts_now = (uint32_t)pcb->ctx->now_ms;
	uint32_t first = pcb->sbuf_size - pcb->sbuf_off;
	if (first > pcb->sbuf_len)
		first = pcb->sbuf_len;
	o->snd_data[0] = pcb->sbuf ? pcb->sbuf + pcb->sbuf_off : NULL;
	o->snd_len[0] = first;
	o->snd_data[1] = pcb->sbuf;
	o->snd_len[1] = pcb->sbuf_len - first;
}

int tcp_pcb_export(const struct tcp_pcb *pcb, struct tcp_pcb_export *o)
{
	if (pcb->dead || pcb->state != TCP_ESTABLISHED || pcb->fin_queued || pcb->fin_sent || pcb->fin_rcvd ||
	    pcb->ooo || pcb->in_batch || pcb->rd_shut || pcb->wr_shut)
		return -EINVAL;
	tcp_pcb_export_fill(pcb, o);
	return 0;
}

int tcp_pcb_export_closed(const struct tcp_pcb *pcb, struct tcp_pcb_export *o)
{
	if (pcb->dead || pcb->in_batch || !pcb->fin_queued)
		return -EINVAL;
	switch (pcb->state) {
	case TCP_ESTABLISHED: case TCP_CLOSE_WAIT: case TCP_FIN_WAIT_1: case TCP_CLOSING: case TCP_LAST_ACK:
		break;
	default:
		return -EINVAL;   /* our FIN is acknowledged, or there is no connection */
	}
	tcp_pcb_export_fill(pcb, o);
	return 0;
}

const struct tcp_handed *tcp_handed_find(const struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip,
					 uint16_t rport)
{
	/* Newest first: a tuple moved again, or reused, is found as it is now. */
	for (unsigned k = 1; k <= TCP_HANDED_RECENT && k <= ctx->handed_next; k++) {
		const struct tcp_handed *h = &ctx->handed[(ctx->handed_next - k) % TCP_HANDED_RECENT];
		if (h->lport == lport && h->rport == rport && h->lip == lip && h->rip == rip)
			return h->kind == TCP_HANDED_KERNEL || ctx->now_ms - h->at_ms < TCP_MOVED_GRACE_MS ? h : NULL;
	}
	return NULL;
}

void tcp_handed_note(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint8_t kind,
		     void *dest_arg)
{
	ctx->handed[ctx->handed_next++ % TCP_HANDED_RECENT] = (struct tcp_handed){
		.lip = lip, .rip = rip, .lport = lport, .rport = rport, .kind = kind, .dest_arg = dest_arg,
		.at_ms = ctx->now_ms,
	};
	if (!ctx->handed_next)   /* wrapped: 0 means "none yet" to tcp_input */
		ctx->handed_next = TCP_HANDED_RECENT;
}

void tcp_pcb_forget(struct tcp_pcb *pcb)
{
	tcp_handed_note(pcb->ctx, pcb->local_ip, pcb->local_port, pcb->remote_ip, pcb->remote_port,
			TCP_HANDED_KERNEL, NULL);
	memset(&pcb->cb, 0, sizeof(pcb->cb));
	tcp_pcb_release(pcb);
}

void tcp_ctx_listener_gone(struct tcp_ctx *ctx, uint32_t ip, uint16_t port, uint32_t ms)
{
	unsigned pick = 0;   /* the same port's record, else the oldest */
	for (unsigned i = 0; i < TCP_GONE_LISTENERS; i++) {
		if (ctx->gone[i].port == port && ctx->gone[i].ip == ip) {
			pick = i;
			break;
		}
		if (ctx->gone[i].until_ms < ctx->gone[pick].until_ms)
			pick = i;
	}
	ctx->gone[pick].ip = ip;
	ctx->gone[pick].port = port;
	ctx->gone[pick].until_ms = ctx->now_ms + ms;
}

void tcp_ctx_set_stray_hook(struct tcp_ctx *ctx, tcp_stray_fn fn, void *arg)
{
	ctx->stray_fn = fn;
	ctx->stray_arg = arg;
}

int tcp_pcb_move(struct tcp_pcb *pcb, struct tcp_ctx *to, const struct stack_netif *nif)
{
	struct tcp_ctx *from = pcb->ctx;
	if (!to || !nif || to == from || from->depth || to->depth || pcb->in_batch || pcb->dead || pcb->parent ||
	    (pcb->state != TCP_ESTABLISHED && pcb->state != TCP_CLOSE_WAIT) || pcb->hashed != TCP_HASH_CONN)
		return -EINVAL;
	/* Out of the old engine: its demux, its list, its counters. */
	pcb_unhash(pcb);
	if (pcb->prev)
		pcb->prev->next = pcb->next;
	else
		from->pcbs = pcb->next;
	if (pcb->next)
		pcb->next->prev = pcb->prev;
	from->npcbs--;
	bool estab = pcb->counted_estab;
	tcp_estab_count(pcb, false);
	from->cnt.moved_out++;
	/* Out-of-order frames belong to the old ring: reneged (never again
	 * reported in a SACK block; the peer resends them). */
	if (pcb->ooo) {
		from->cnt.rx_ooo_reneged += pcb->ooo_count;
		tcp_ooo_free(pcb);
		memset(pcb->sack_recent, 0, sizeof(pcb->sack_recent));
	}
	pcb->dsack_pending = false;
	/* What still reaches the old engine for the connection goes on. */
	tcp_handed_note(from, pcb->local_ip, pcb->local_port, pcb->remote_ip, pcb->remote_port, TCP_HANDED_MOVED,
			to->stray_arg);

	/* Into the new one. */
	pcb->ctx = to;
	pcb->nif = nif;
	pcb->moved_in = true;
	pcb->prev = NULL;
	pcb->next = to->pcbs;
	if (to->pcbs)
		to->pcbs->prev = pcb;
	to->pcbs = pcb;
	to->npcbs++;
	pcb_hash_into(pcb, TCP_HASH_CONN);
	tcp_estab_count(pcb, estab);
	to->cnt.moved_in++;
	/* Its timers are absolute times on the same clock: the new engine
	 * learns of the earliest one. */
	const uint64_t fine[] = { pcb->rto_at, pcb->delack_at, pcb->persist_at, pcb->tlp_at, pcb->rack_at };
	for (unsigned i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		if (fine[i])
			tcp_deadline(to, fine[i]);
	return 0;
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
	o->ws_ok = pcb->ws_ok;
	o->rcv_mss = pcb->rcv_mss;
	o->adv_mss = pcb->adv_mss;
	o->snd_buf = pcb->sbuf_size;
	o->delivery_rate = tcp_rate_last_bps(pcb);
	o->delivery_app_limited = pcb->rate.last_app_limited;
	if (pcb->cc_algo == TCP_CC_BBR)
		o->pacing_rate = tcp_bbr_pacing_rate(pcb);
	uint32_t mss = pcb->mss ? pcb->mss : 536;
	uint32_t out = pcb->snd_max - pcb->snd_una;
	const struct tcp_txq *q = &pcb->txq;
	if (q->seg) {
		/* the transmission records: segments as Linux counts packets */
		o->unacked = q->count;
		o->sacked = q->sacked_segs;
		o->lost = pcb->in_loss ? q->count - q->sacked_segs : q->lost_segs;
	} else {
		o->unacked = (out + mss - 1) / mss;
		o->sacked = (tcp_sack_bytes(pcb) + mss - 1) / mss;
		o->lost = pcb->in_recovery || pcb->backoff;
	}
	o->rcv_space = pcb->rcv_buf;
	o->snd_buf_used = pcb->sbuf_len;
	o->rcv_unread = pcb->rcv_unread;
	o->probes = pcb->keepalive_sent + pcb->persist_backoff;
	uint64_t now = pcb->ctx->now_ms;
	o->last_data_recv_ms = (uint32_t)(now - (pcb->last_data_rx_ms ? pcb->last_data_rx_ms : now));
	o->last_ack_recv_ms = (uint32_t)(now - (pcb->last_ack_rx_ms ? pcb->last_ack_rx_ms : now));
	o->last_data_sent_ms = (uint32_t)(now - (pcb->last_data_tx_ms ? pcb->last_data_tx_ms : now));
	o->bytes_acked = pcb->bytes_acked + (pcb->syn_acked ? 1 : 0);   /* RFC 4898 counts the SYN */
	o->bytes_received = pcb->bytes_received;
	o->segs_in = pcb->segs_in;
	o->segs_out = pcb->segs_out;
	o->bytes_sent = pcb->bytes_sent;
	o->bytes_retrans = pcb->bytes_retrans;
	o->data_segs_in = pcb->data_segs_in;
	o->data_segs_out = pcb->data_segs_out;
	o->rcv_ooopack = pcb->rcv_ooopack;
	o->reord_seen = pcb->reord_seen;
	o->dsack_dups = pcb->dsack_dups;
	o->total_rto = pcb->total_rto;
	o->notsent = tcp_sndbuf_notsent(pcb);
	o->pmtu = pcb->nif ? pcb->nif->mtu : 0;
	o->delack_ms = pcb->ctx->set.delack_ms;
	o->delivered = q->seg ? (uint32_t)pcb->delivered_segs : (uint32_t)((pcb->bytes_acked + mss - 1) / mss);
	o->rcv_wnd_max = tcp_min32(pcb->rcv_buf, 65535u << pcb->rcv_wscale);
	o->min_rtt_ms = pcb->min_rtt_ms;
	o->srtt_us = pcb->srtt_us;
	o->rttvar_us = pcb->rttvar_us;
	o->min_rtt_us = pcb->min_rtt_us;
	o->ecn_ok = pcb->ecn_ok;
	o->rcv_rtt_us = pcb->rcv_rtt_us;
	o->user_timeout_ms = pcb->user_timeout_ms;
}
