/* The TCP engine against a hostile peer (issue 12):
 * - SACK blocks for many out-of-order patterns equal a reference computed
 *   here from the bytes received (RFC 2018 order, RFC 2883 D-SACK first, as
 *   many blocks as fit with and without timestamps), and building them costs
 *   one pass over the out-of-order queue (it was cubic in its length);
 * - challenge ACKs and ACKs for unacceptable segments are held to one per
 *   pcb per interval, challenge ACKs also to a per-process budget that is
 *   random each second (RFC 5961 section 7, CVE-2016-5696), while ACKs a
 *   legitimate sender needs (retransmitted data, out-of-order data) are not.
 * The test plays side 1's peer by hand unless a case says otherwise. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;
static const uint16_t PEER = 0x1234, SRV = 80;
static uint32_t srv_iss, peer_nxt;
static bool peer_ts;                 /* the peer sends timestamps */
static const uint32_t PEER_TSVAL = 0x10000;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sb = sa;
	peer_ts = false;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

static void inject_ts(uint32_t seq, uint32_t ack, uint8_t flags, uint32_t tsval, const void *data,
		      unsigned len)
{
	uint8_t o[12] = { 1, 1, 8, 10 };
	o[4] = (uint8_t)(tsval >> 24); o[5] = (uint8_t)(tsval >> 16);
	o[6] = (uint8_t)(tsval >> 8);  o[7] = (uint8_t)tsval;
	th_inject(w, 1, htons(PEER), htons(SRV), seq, ack, flags, 65535, peer_ts ? o : NULL,
		  peer_ts ? 12 : 0, data, len);
}

static void inject(uint32_t seq, uint32_t ack, uint8_t flags, const void *data, unsigned len)
{
	inject_ts(seq, ack, flags, PEER_TSVAL, data, len);
}

static struct th_tcp last_reply(void)
{
	struct th_tcp t;
	ck_assert_uint_gt(w->ncaptured, 0);
	ck_assert(th_parse(w->captured[w->ncaptured - 1], &t));
	return t;
}

/* Handshake by hand: side 1 listens on SRV and accepts; SACK offered. */
static void handshake(uint32_t isn)
{
	th_init(w, &sa, &sb, 3);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	uint8_t syn_opts[16] = { 1, 1, 4, 2 };
	unsigned n = 4;
	if (peer_ts) {
		const uint8_t ts[] = { 4, 2, 8, 10, 0, 1, 0, 0, 0, 0, 0, 0 };
		memcpy(syn_opts, ts, sizeof(ts));
		n = sizeof(ts);
	}
	th_inject(w, 1, htons(PEER), htons(SRV), isn, 0, 0x02, 65535, syn_opts, n, NULL, 0);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.flags, 0x12);
	srv_iss = t.seq;
	th_capture_clear(w);
	peer_nxt = isn + 1;
	inject(peer_nxt, srv_iss + 1, 0x10, NULL, 0);
	ck_assert(w->side[1].connected);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
	th_capture_clear(w);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The option kind of a reply (its kind byte), or NULL; asserts the option
 * list is well formed up to it (lengths of at least 2, within the header). */
static const uint8_t *opt_find(const struct th_tcp *t, uint8_t want)
{
	for (unsigned i = 0; i < t->optlen;) {
		uint8_t kind = t->opts[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		ck_assert_uint_lt(i + 1, t->optlen);
		uint8_t len = t->opts[i + 1];
		ck_assert_uint_ge(len, 2);
		ck_assert_uint_le(i + len, t->optlen);
		if (kind == want)
			return t->opts + i;
		i += len;
	}
	return NULL;
}

/* The SACK blocks of a reply, as offsets from base. */
static unsigned sack_blocks(const struct th_tcp *t, uint32_t base, uint32_t blk[][2])
{
	unsigned n = 0;
	const uint8_t *o = opt_find(t, 5);
	if (o) {
		uint8_t len = o[1];
		ck_assert_uint_eq((len - 2) % 8, 0);
		for (unsigned b = 0; b < (len - 2u) / 8u; b++) {
			blk[n][0] = get32(o + 2 + 8 * b) - base;
			blk[n][1] = get32(o + 6 + 8 * b) - base;
			n++;
		}
	}
	return n;
}

/* ---- SACK blocks against a reference ---- */

#define REGION 40   /* bytes above the hole at offset 0, the hole never sent */

struct ref {
	bool have[REGION];
	int recent[3];   /* offsets of the last three segments that brought new bytes */
};

/* Adds a SACK block unless one with that start is there; from: the first
 * SACK (not D-SACK) block. */
static void ref_put(uint32_t out[][2], unsigned *n, unsigned from, uint32_t s, uint32_t e)
{
	for (unsigned k = from; k < *n; k++)
		if (out[k][0] == s)
			return;
	out[*n][0] = s;
	out[*n][1] = e;
	(*n)++;
}

/* The run of received bytes around off (have[off] must be set). */
static void ref_run(const struct ref *r, int off, uint32_t *s, uint32_t *e)
{
	int a = off, b = off;
	while (a > 0 && r->have[a - 1])
		a--;
	while (b < REGION && r->have[b])
		b++;
	*s = (uint32_t)a;
	*e = (uint32_t)b;
}

/* RFC 2018 section 4 / RFC 2883: what the ACK for segment [off, off+len)
 * must carry, computed from scratch. Updates the model. */
static unsigned ref_expect(struct ref *r, int off, int len, unsigned max, uint32_t out[][2],
			   bool *dup)
{
	bool fresh = false;
	for (int i = off; i < off + len; i++) {
		fresh |= !r->have[i];
		r->have[i] = true;
	}
	unsigned n = 0;
	*dup = !fresh;
	if (!fresh) {
		out[n][0] = (uint32_t)off;   /* D-SACK: the duplicate itself, first */
		out[n][1] = (uint32_t)(off + len);
		n++;
	} else {
		r->recent[2] = r->recent[1];
		r->recent[1] = r->recent[0];
		r->recent[0] = off;
	}
	uint32_t s, e;
	if (!fresh && n < max) {
		/* RFC 2883 section 4: then the queued run holding the duplicate */
		ref_run(r, off, &s, &e);
		out[n][0] = s;
		out[n][1] = e;
		n++;
	}
	for (int i = 0; i < 3 && n < max; i++) {
		if (r->recent[i] < 0)
			continue;
		ref_run(r, r->recent[i], &s, &e);
		ref_put(out, &n, *dup, s, e);
	}
	for (int i = 1; i < REGION && n < max; i++) {
		if (!r->have[i] || r->have[i - 1])
			continue;
		ref_run(r, i, &s, &e);
		ref_put(out, &n, *dup, s, e);
	}
	return n;
}

static uint64_t rng_state;
static unsigned rnd(unsigned n)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (unsigned)((rng_state * 0x2545F4914F6CDD1Dull) >> 33) % n;
}

/* _i: 0 without timestamps (4 blocks fit), 1 with (3 blocks). The sequence
 * space wraps during the run. */
START_TEST(sack_blocks_match_reference)
{
	peer_ts = _i == 1;
	if (peer_ts)
		sb.timestamps = TCP_TS_ON;
	unsigned max = peer_ts ? 3 : 4;
	sb.ooo_max_bytes = 16u << 20;
	handshake(0xfffff000u);
	rng_state = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
	static const uint8_t zeros[REGION] = { 0 };
	unsigned checked = 0, dsacks = 0, full = 0;
	for (int trial = 0; trial < 300; trial++) {
		struct ref r = { .recent = { -1, -1, -1 } };
		uint32_t base = peer_nxt;
		int segs = 1 + (int)rnd(24);
		/* some trials only one byte long segments on every other byte:
		 * more runs than blocks */
		bool sparse = trial % 5 == 4;
		for (int k = 0; k < segs; k++) {
			int len = sparse ? 1 : 1 + (int)rnd(8);
			int off = sparse ? 1 + 2 * (int)rnd((REGION - 1) / 2) : 1 + (int)rnd(REGION - len);
			uint32_t exp[8][2], got[8][2];
			bool dup;
			unsigned ne = ref_expect(&r, off, len, max, exp, &dup);
			th_capture_clear(w);
			inject(base + (uint32_t)off, srv_iss + 1, 0x10, zeros, (unsigned)len);
			ck_assert_uint_eq(w->ncaptured, 1);   /* every out-of-order segment: an ACK now */
			struct th_tcp t = last_reply();
			ck_assert_uint_eq(t.ack, base);
			ck_assert_uint_le(t.optlen, 40);
			unsigned ng = sack_blocks(&t, base, got);
			if (ng != ne) {   /* both lists, for the log */
				for (unsigned b = 0; b < ng; b++)
					fprintf(stderr, "got [%u,%u) ", got[b][0], got[b][1]);
				for (unsigned b = 0; b < ne; b++)
					fprintf(stderr, "expected [%u,%u) ", exp[b][0], exp[b][1]);
				fprintf(stderr, "\n");
			}
			ck_assert_msg(ng == ne, "trial %d seg %d [%d,+%d): %u blocks, expected %u",
				      trial, k, off, len, ng, ne);
			for (unsigned b = 0; b < ne; b++)
				ck_assert_msg(got[b][0] == exp[b][0] && got[b][1] == exp[b][1],
					      "trial %d seg %d block %u: [%u,%u) expected [%u,%u)", trial, k, b,
					      got[b][0], got[b][1], exp[b][0], exp[b][1]);
			checked++;
			dsacks += dup;
			full += ne == max;
		}
		/* fill the hole: everything is delivered, in order */
		th_capture_clear(w);
		inject(base, srv_iss + 1, 0x10, zeros, REGION);
		struct th_tcp t = last_reply();
		ck_assert_uint_eq(t.ack, base + REGION);
		uint32_t none[8][2];
		ck_assert_uint_eq(sack_blocks(&t, base, none), 0);
		peer_nxt = base + REGION;
	}
	ck_assert_uint_eq(w->side[1].rx_bytes, 300u * REGION);
	/* the patterns did exercise D-SACKs and full options */
	ck_assert_uint_gt(checked, 2000);
	ck_assert_uint_gt(dsacks, 100);
	ck_assert_uint_gt(full, 100);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 0);
	ck_assert(peer_nxt < 0xfffff000u);   /* wrapped */
}
END_TEST

/* n one-byte segments past a hole (every other byte when gapped), then one
 * more: how many queue entries that last segment's insertion and its ACK's
 * SACK blocks visited. */
static uint64_t steps_after_queue(unsigned n, bool gapped)
{
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d = 0;
	uint32_t stride = gapped ? 2 : 1;
	for (unsigned i = 0; i < n; i++) {
		inject(peer_nxt + 1 + stride * i, srv_iss + 1, 0x10, &d, 1);
		if (w->ncaptured > 200)
			th_capture_clear(w);
	}
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, n);
	th_capture_clear(w);
	uint64_t before = c->ooo_walk_steps;
	inject(peer_nxt + 1 + stride * n, srv_iss + 1, 0x10, &d, 1);
	uint64_t steps = c->ooo_walk_steps - before;
	struct th_tcp t = last_reply();
	uint32_t blk[8][2];
	unsigned nb = sack_blocks(&t, peer_nxt, blk);
	if (gapped) {
		/* the three newest bytes, newest first, then the lowest run */
		ck_assert_uint_eq(nb, 4);
		ck_assert_uint_eq(blk[0][0], 1 + 2 * n);
		ck_assert_uint_eq(blk[1][0], 1 + 2 * (n - 1));
		ck_assert_uint_eq(blk[2][0], 1 + 2 * (n - 2));
		ck_assert_uint_eq(blk[3][0], 1);
		ck_assert_uint_eq(blk[3][1], 2);
	} else {
		ck_assert_uint_eq(nb, 1);
		ck_assert_uint_eq(blk[0][0], 1);
		ck_assert_uint_eq(blk[0][1], n + 2);
	}
	/* the hole filled: all of it arrives in order */
	uint8_t fill[1] = { 0 };
	inject(peer_nxt, srv_iss + 1, 0x10, fill, 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, gapped ? 2 : n + 2);
	th_fini(w);
	memset(w, 0, sizeof(*w));
	return steps;
}

/* Building the SACK blocks is one pass over the out-of-order queue: 16 times
 * the segments cost 16 times the work (it was 4096 times: 1.6 ms per ACK
 * with 128 segments queued). Counted in ooo_walk_steps, not timed. */
START_TEST(sack_cost_linear_in_queue_length)
{
	/* 4096 queued must stay under five eighths of the pool (frame pressure) */
	th_pool_bufs = 4 * 4096 + 1024;
	sb.ooo_max_bytes = 64u << 20;
	for (int gapped = 0; gapped < 2; gapped++) {
		uint64_t small = steps_after_queue(256, gapped);
		uint64_t big = steps_after_queue(4096, gapped);
		ck_assert_msg(big <= 4096 + 16, "%s: %llu steps for one ACK with 4096 queued",
			      gapped ? "gapped" : "contiguous", (unsigned long long)big);
		ck_assert_msg(small <= 256 + 16, "%llu steps with 256 queued", (unsigned long long)small);
		ck_assert_msg(big * 4 <= small * 16 * 5, "%llu vs %llu steps: not linear",
			      (unsigned long long)big, (unsigned long long)small);
	}
	th_init(w, &sa, &sb, 3);   /* for teardown */
}
END_TEST

/* ---- challenge ACKs and ACKs for unacceptable segments ---- */

enum flood_kind {
	FLOOD_RST_IN_WINDOW,    /* RFC 5961 3.2 challenge */
	FLOOD_SYN_IN_WINDOW,    /* RFC 5961 4.2 challenge */
	FLOOD_SYN_OUT_OF_WINDOW,
	FLOOD_ACK_OUT_OF_WINDOW, /* RFC 9293 3.10.7.4 duplicate ACK */
	FLOOD_ACK_UNSENT,       /* RFC 5961 5.2 */
	FLOOD_ACK_TOO_OLD,      /* RFC 5961 5.2 */
	FLOOD_PAWS,             /* RFC 7323 5.3 */
	FLOOD_KINDS
};

static void flood_one(enum flood_kind k)
{
	switch (k) {
	case FLOOD_RST_IN_WINDOW: inject(peer_nxt + 1000, 0, 0x04, NULL, 0); break;
	case FLOOD_SYN_IN_WINDOW: inject(peer_nxt + 10, 0, 0x02, NULL, 0); break;
	case FLOOD_SYN_OUT_OF_WINDOW: inject(peer_nxt - 0x40000000u, 0, 0x02, NULL, 0); break;
	case FLOOD_ACK_OUT_OF_WINDOW: inject(peer_nxt + 0x40000000u, srv_iss + 1, 0x10, NULL, 0); break;
	case FLOOD_ACK_UNSENT: inject(peer_nxt, srv_iss + 100000, 0x10, NULL, 0); break;
	case FLOOD_ACK_TOO_OLD: inject(peer_nxt, srv_iss + 1 - 0x20000000u, 0x10, NULL, 0); break;
	case FLOOD_PAWS: inject_ts(peer_nxt, srv_iss + 1, 0x10, PEER_TSVAL - 1, NULL, 0); break;
	default: ck_abort();
	}
}

/* 10 segments a millisecond for 2 s on one connection: one ACK per 500 ms
 * (the first at once), the rest counted as held; the connection is fine. */
START_TEST(flood_gets_one_ack_per_interval)
{
	enum flood_kind k = (enum flood_kind)_i;
	peer_ts = k == FLOOD_PAWS;
	if (peer_ts)
		sb.timestamps = TCP_TS_ON;
	handshake(7000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint64_t sent_at[16];
	unsigned sent = 0, total = 0;
	uint64_t start = w->now;
	while (w->now < start + 2000) {
		for (int i = 0; i < 10; i++, total++)
			flood_one(k);
		for (unsigned f = 0; f < w->ncaptured; f++) {
			struct th_tcp t;
			ck_assert(th_parse(w->captured[f], &t));
			ck_assert_uint_eq(t.flags, 0x10);
			ck_assert_uint_eq(t.ack, peer_nxt);
			ck_assert_uint_lt(sent, 16);
			sent_at[sent++] = w->now;
		}
		th_capture_clear(w);
		th_run(w, 1);
	}
	ck_assert_uint_eq(sent, 4);
	ck_assert_uint_eq(sent_at[0], start);
	for (unsigned i = 1; i < sent; i++)
		ck_assert_uint_ge(sent_at[i] - sent_at[i - 1], 500);
	bool challenge = k != FLOOD_ACK_OUT_OF_WINDOW && k != FLOOD_PAWS;
	if (challenge) {
		ck_assert_uint_eq(c->tx_challenge_acks, sent);
		ck_assert_uint_eq(c->tx_challenge_acks_limited, total - sent);
		ck_assert_uint_eq(c->tx_invalid_acks_limited, 0);
	} else {
		ck_assert_uint_eq(c->tx_challenge_acks, 0);
		ck_assert_uint_eq(c->tx_invalid_acks_limited, total - sent);
	}
	ck_assert_uint_eq(c->tx_challenge_acks_over_budget, 0);
	/* the connection is untouched: in-order data is taken and ACKed */
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
	ck_assert_int_eq(w->side[1].err, 0);
	uint8_t d[100];
	for (unsigned i = 0; i < sizeof(d); i++)
		d[i] = th_pattern(i);
	inject(peer_nxt, srv_iss + 1, 0x18, d, sizeof(d));
	th_run(w, 50);
	ck_assert_uint_eq(w->side[1].rx_bytes, 100);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	ck_assert_uint_eq(last_reply().ack, peer_nxt + 100);
}
END_TEST

/* With the per-pcb interval off, a flood of in-window RSTs meets the
 * process budget: between 500 and 1499 challenge ACKs each second, a
 * different number from one second to the next; the budget is the
 * process's, so another ctx (another lane) gets nothing once it is spent. */
START_TEST(challenge_budget_random_per_second)
{
	sa.invalid_ack_interval_ms = sb.invalid_ack_interval_ms = 0;
	handshake(7000);
	/* side 0 also holds a connection (its own ctx), from the same peer */
	th_listen(&w->side[0], SRV);
	th_inject(w, 0, htons(PEER), htons(SRV), 500, 0, 0x02, 65535, NULL, 0, NULL, 0);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.flags, 0x12);
	uint32_t iss0 = t.seq;
	th_inject(w, 0, htons(PEER), htons(SRV), 501, iss0 + 1, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert(w->side[0].connected);
	th_capture_clear(w);

	/* a second of the test clock nothing else used */
	w->now += 86400000u - w->now % 1000u - 1;
	th_step(w);
	ck_assert_uint_eq(w->now % 1000u, 0);
	const struct tcp_counters *c1 = tcp_ctx_counters(w->side[1].tcp);
	const struct tcp_counters *c0 = tcp_ctx_counters(w->side[0].tcp);
	enum { SECONDS = 6, PER_SECOND = 1600 };
	uint64_t got[SECONDS];
	uint64_t prev = c1->tx_challenge_acks;
	for (int s = 0; s < SECONDS; s++) {
		uint64_t second_start = w->now;
		for (int i = 0; i < PER_SECOND; i++) {
			inject(peer_nxt + 1000, 0, 0x04, NULL, 0);
			if (w->ncaptured > 200)
				th_capture_clear(w);
		}
		got[s] = c1->tx_challenge_acks - prev;
		prev = c1->tx_challenge_acks;
		ck_assert_msg(got[s] >= 500 && got[s] < 1500, "second %d: %llu challenge ACKs", s,
			      (unsigned long long)got[s]);
		/* spent: side 0's ctx gets none this second either */
		th_capture_clear(w);
		uint64_t over0 = c0->tx_challenge_acks_over_budget;
		th_inject(w, 0, htons(PEER), htons(SRV), 501 + 1000, 0, 0x04, 65535, NULL, 0, NULL, 0);
		ck_assert_uint_eq(w->ncaptured, 0);
		ck_assert_uint_eq(c0->tx_challenge_acks_over_budget, over0 + 1);
		th_run(w, second_start + 1000 - w->now);
	}
	bool all_same = true;
	for (int s = 1; s < SECONDS; s++)
		all_same &= got[s] == got[0];
	ck_assert_msg(!all_same, "the same budget (%llu) every second", (unsigned long long)got[0]);
	ck_assert_uint_eq(c1->tx_challenge_acks_over_budget + c1->tx_challenge_acks,
			  (uint64_t)SECONDS * PER_SECOND);
	ck_assert_uint_eq(c1->tx_challenge_acks_limited, 0);
	ck_assert_uint_eq(c0->tx_challenge_acks, 0);
	/* a new second: challenge ACKs again, on both ctxs */
	th_capture_clear(w);
	inject(peer_nxt + 1000, 0, 0x04, NULL, 0);
	th_inject(w, 0, htons(PEER), htons(SRV), 501 + 1000, 0, 0x04, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 2);
	ck_assert_uint_eq(c0->tx_challenge_acks, 1);
}
END_TEST

/* While the interval holds back answers to a flood, what a real sender needs
 * still gets its ACK at once: retransmitted data (with its D-SACK), a
 * retransmitted FIN, and out-of-order data (duplicate ACKs with SACK). */
START_TEST(legitimate_acks_not_held)
{
	handshake(20000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d[300];
	for (unsigned i = 0; i < sizeof(d); i++)
		d[i] = th_pattern(i);
	inject(peer_nxt, srv_iss + 1, 0x18, d, 100);
	peer_nxt += 100;
	th_run(w, 50);
	th_capture_clear(w);
	for (int i = 0; i < 50; i++)
		flood_one(FLOOD_ACK_OUT_OF_WINDOW);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(c->tx_invalid_acks_limited, 49);
	/* the same millisecond: a retransmission of the 100 bytes, five times */
	for (int i = 0; i < 5; i++) {
		th_capture_clear(w);
		inject(peer_nxt - 100, srv_iss + 1, 0x18, d, 100);
		ck_assert_uint_eq(w->ncaptured, 1);
		struct th_tcp t = last_reply();
		ck_assert_uint_eq(t.ack, peer_nxt);
		uint32_t blk[8][2];
		ck_assert_uint_eq(sack_blocks(&t, peer_nxt - 100, blk), 1);   /* D-SACK */
		ck_assert_uint_eq(blk[0][0], 0);
		ck_assert_uint_eq(blk[0][1], 100);
	}
	/* out-of-order data: a duplicate ACK with SACK for each segment */
	for (int i = 0; i < 5; i++) {
		th_capture_clear(w);
		inject(peer_nxt + 100 + 20 * (uint32_t)i, srv_iss + 1, 0x10, d + 200 + 20 * i, 20);
		ck_assert_uint_eq(w->ncaptured, 1);
		struct th_tcp t = last_reply();
		ck_assert_uint_eq(t.ack, peer_nxt);
		uint32_t blk[8][2];
		ck_assert_uint_eq(sack_blocks(&t, peer_nxt, blk), 1);
		ck_assert_uint_eq(blk[0][0], 100);
		ck_assert_uint_eq(blk[0][1], 120 + 20 * (uint32_t)i);
	}
	ck_assert_uint_eq(c->tx_invalid_acks_limited, 49);
	/* the hole, then the peer's FIN; the FIN retransmitted (our ACK lost)
	 * right after more flooding: answered */
	inject(peer_nxt, srv_iss + 1, 0x10, d + 100, 100);
	peer_nxt += 200;
	inject(peer_nxt, srv_iss + 1, 0x11, NULL, 0);
	ck_assert(w->side[1].fin);
	for (int i = 0; i < 10; i++)
		flood_one(FLOOD_ACK_OUT_OF_WINDOW);
	th_capture_clear(w);
	inject(peer_nxt, srv_iss + 1, 0x11, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(last_reply().ack, peer_nxt + 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, 300);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

/* End to end: the receiver's interval is kept engaged by a spoofed flood of
 * out-of-window ACKs during a transfer that loses a segment; its duplicate
 * ACKs still trigger fast retransmit (with and without SACK), no RTO. */
static bool got_all(struct th_wire *x)
{
	return x->side[1].rx_bytes == x->side[0].tx_goal;
}

START_TEST(fast_retransmit_during_flood)
{
	sa.sack = sb.sack = _i == 0;
	th_init(w, &sa, &sb, 5);
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4000, SRV);
	th_run(w, 20);
	ck_assert(w->side[0].connected && w->side[1].connected);
	w->drop_nth_data[0][0] = 20;
	w->side[0].tx_goal = 200000;
	const struct tcp_counters *c1 = tcp_ctx_counters(w->side[1].tcp);
	bool done = false;
	for (int ms = 0; ms < 150 && !done; ms++) {
		struct tcp_pcb_info in;
		tcp_pcb_get_info(w->side[1].pcb, &in);
		th_inject(w, 1, htons(4000), htons(SRV), in.rcv_nxt + 0x40000000u, 0, 0x10, 65535, NULL, 0,
			  NULL, 0);
		th_step(w);
		done = got_all(w);
	}
	ck_assert_msg(done, "%llu of 200000 bytes in 150 ms", (unsigned long long)w->side[1].rx_bytes);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	const struct tcp_counters *c0 = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_ge(c0->tx_fast_retransmits, 1);
	ck_assert_uint_eq(c0->tx_rto_expiries, 0);
	ck_assert_uint_gt(c1->tx_invalid_acks_limited, 0);
}
END_TEST


/* ---- receive frames (issue 12 item 1) ---- */

/* One-byte segments past a hole, each in a buffer of its own. Before: up to
 * ooo_max_bytes per connection (256 buffers of 2 KiB), so two such peers
 * took every buffer of a 512-buffer ring, for ever. Now a connection's
 * out-of-order queue stops at frame pressure (5/8 of the pool held)
 * and a queue that made no progress for TCP_OOO_RENEGE_MS under pressure is
 * dropped, its SACK blocks with it; the hole filled later still works. */
START_TEST(ooo_holes_stop_at_pressure_and_stale_queues_are_reneged)
{
	th_pool_bufs = 256;   /* pressure at 160 held */
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d = 0x5a;
	for (unsigned i = 0; i < 300; i++) {
		inject(peer_nxt + 1 + i, srv_iss + 1, 0x10, &d, 1);
		if (w->ncaptured > 200)
			th_capture_clear(w);
	}
	th_capture_clear(w);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_msg(in.ooo_segments >= 150 && in.ooo_segments <= 160, "%u queued", in.ooo_segments);
	ck_assert_uint_eq(c->rx_ooo_pressure_dropped, 300 - in.ooo_segments);
	uint32_t queued = in.ooo_segments;
	/* progress within the renege interval keeps the queue */
	th_run(w, TCP_OOO_RENEGE_MS / 2);
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, queued);
	ck_assert_uint_eq(c->rx_ooo_reneged, 0);
	th_run(w, TCP_OOO_RENEGE_MS + 600);
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 0);
	ck_assert_uint_eq(c->rx_ooo_reneged, queued);
	/* the hole, then the rest resent in order: every byte arrives, and no
	 * ACK reports a block we no longer hold */
	th_capture_clear(w);
	uint8_t run[301];
	memset(run, 0x5a, sizeof(run));
	inject(peer_nxt, srv_iss + 1, 0x10, run, sizeof(run));
	th_run(w, 500);   /* the delayed ACK */
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, peer_nxt + 301);
	uint32_t none[8][2];
	ck_assert_uint_eq(sack_blocks(&t, peer_nxt, none), 0);
	ck_assert_uint_eq(w->side[1].rx_bytes, 301);
}
END_TEST

/* Under no pressure a stale queue stays (an honest sender may take long to
 * fill a hole on a calm ring). */
START_TEST(ooo_queue_kept_without_pressure)
{
	th_pool_bufs = 4096;
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d = 1;
	for (unsigned i = 0; i < 100; i++)
		inject(peer_nxt + 1 + 2 * i, srv_iss + 1, 0x10, &d, 1);
	th_capture_clear(w);
	th_run(w, 3 * TCP_OOO_RENEGE_MS);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 100);
	ck_assert_uint_eq(c->rx_ooo_reneged, 0);
	ck_assert_uint_eq(c->rx_ooo_pressure_dropped, 0);
}
END_TEST

/* Frames short because another holder keeps them (a peer pinning them with
 * small segments past holes on other connections): this connection's
 * full-size segments past its own hole are still kept, up to its share of
 * the ring (an eighth under pressure), small ones refused. Before, every
 * out-of-order segment was refused under pressure, and one loss on an
 * honest bulk flow cost it its whole window (hostile.sh "holes" on the verbs
 * pass: 0.02-0.09x of its baseline). */
START_TEST(ooo_full_segments_kept_within_share_under_pressure)
{
	th_pool_bufs = 256;   /* pressure at 160 held, share 32 frames */
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	/* the ring the segments arrive on: the injecting side's pool */
	struct ring_buf_pool *ring = w->side[0].pool;
	struct ring_buf *held[170];
	for (unsigned i = 0; i < 170; i++)
		ck_assert_ptr_nonnull(held[i] = ring_buf_alloc(ring));
	ck_assert(ring_buf_pool_pressured(ring));
	static uint8_t d[41 * 1000];
	for (unsigned k = 0; k < sizeof(d); k++)
		d[k] = th_pattern(k);
	inject(peer_nxt + 40000, srv_iss + 1, 0x10, d + 40000, 1);   /* small: refused */
	ck_assert_uint_eq(c->rx_ooo_pressure_dropped, 1);
	for (unsigned i = 1; i <= 40; i++)
		inject(peer_nxt + 1000 * i, srv_iss + 1, 0x10, d + 1000 * i, 1000);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 32);
	ck_assert_uint_eq(c->rx_ooo_pressure_dropped, 1 + 8);
	/* the hole: the 32 queued follow it in order */
	inject(peer_nxt, srv_iss + 1, 0x10, d, 1000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 33 * 1000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	for (unsigned i = 0; i < 170; i++)
		ring_buf_free(held[i]);
}
END_TEST

/* The socket layer says how many frames it holds of the connection's data
 * (tcp_rcv_held_set): at the ring's holder cap an in-order segment is
 * refused unacknowledged; once the application read, the resent segment is
 * taken. Before, nothing bounded the frames one unread socket held but the
 * window, one frame per segment however small. */
START_TEST(in_order_refused_while_the_socket_holds_its_share)
{
	th_pool_bufs = 512;
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	struct tcp_pcb *pcb = w->side[1].pcb;
	uint8_t d[10];
	memset(d, 0x42, sizeof(d));
	tcp_rcv_held_set(pcb, 512);   /* the calm cap of a 512-buffer pool: all of it */
	inject(peer_nxt, srv_iss + 1, 0x18, d, sizeof(d));
	ck_assert_uint_eq(c->rx_rcvq_pressure_dropped, 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, peer_nxt);   /* not acknowledged */
	tcp_rcv_held_set(pcb, 511);
	th_capture_clear(w);
	inject(peer_nxt, srv_iss + 1, 0x18, d, sizeof(d));
	ck_assert_uint_eq(c->rx_rcvq_pressure_dropped, 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, sizeof(d));
}
END_TEST

static unsigned pure_acks_captured(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < w->ncaptured; i++) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[i], &t));
		n += t.flags == 0x10 && !t.len;
	}
	return n;
}

/* Segments past a hole that the ring's frame pressure refuses bring the
 * sender nothing: after three immediate duplicate ACKs, one per 44 (TCP_OFO_ACK_BATCH)
 * or per millisecond (Linux's SACK compression). Before, each got an ACK of
 * its own: a peer spraying 100k segments/s had us send 100k ACKs/s. */
START_TEST(refused_ooo_segments_get_compressed_acks)
{
	th_pool_bufs = 256;   /* pressure (160 held) before the connection's own cap */
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d = 7;
	unsigned i = 0;
	for (; c->rx_ooo_pressure_dropped == 0; i++) {
		th_capture_clear(w);
		inject(peer_nxt + 1 + i, srv_iss + 1, 0x10, &d, 1);
		if (c->rx_ooo_pressure_dropped == 0)
			ck_assert_uint_eq(pure_acks_captured(), 1);   /* queued: news, at once */
	}
	th_capture_clear(w);
	for (unsigned k = 0; k < 199; k++, i++)
		inject(peer_nxt + 1 + i, srv_iss + 1, 0x10, &d, 1);
	ck_assert_uint_eq(c->rx_ooo_pressure_dropped, 200);
	/* 1 (the first refused) + 199 in the same millisecond: 3 at once,
	 * then one per 44 */
	unsigned n = pure_acks_captured();
	ck_assert_msg(n >= 3 && n <= 3 + 200 / 44 + 1, "%u ACKs for 200 refused segments", n);
	/* and the held one leaves within a millisecond or two */
	th_capture_clear(w);
	inject(peer_nxt + 1 + i, srv_iss + 1, 0x10, &d, 1);
	ck_assert_uint_eq(pure_acks_captured(), 0);
	th_run(w, 2);
	ck_assert_uint_eq(pure_acks_captured(), 1);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, peer_nxt);
}
END_TEST

/* In-order tiny segments are acknowledged once more than 536 bytes (or a
 * full segment's worth) are unacknowledged, or by the delayed-ACK timer, as
 * Linux: not every second segment. After the quick-ACK mode of the
 * connection start (16 segments ACKed at once, as Linux), 100 one-byte
 * segments: no ACK at once, one from the timer. Before: 50. */
START_TEST(tiny_in_order_segments_acked_by_bytes)
{
	handshake(1000);
	uint8_t d = 9;
	th_capture_clear(w);
	for (unsigned i = 0; i < 16; i++)
		inject(peer_nxt + i, srv_iss + 1, 0x10, &d, 1);
	ck_assert_uint_eq(pure_acks_captured(), 16);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_quick_acks, 16);
	peer_nxt += 16;
	th_capture_clear(w);
	for (unsigned i = 0; i < 100; i++)
		inject(peer_nxt + i, srv_iss + 1, 0x10, &d, 1);
	ck_assert_uint_eq(pure_acks_captured(), 0);
	th_run(w, 100);
	ck_assert_uint_eq(pure_acks_captured(), 1);
	ck_assert_uint_eq(last_reply().ack, peer_nxt + 100);
	ck_assert_uint_eq(w->side[1].rx_bytes, 116);
	/* full-size data is still acknowledged every second segment (within
	 * the RTO of the last data: no new quick-ACK mode) */
	peer_nxt += 100;
	static uint8_t big[1000];
	th_capture_clear(w);
	for (unsigned i = 0; i < 4; i++)
		inject(peer_nxt + 1000 * i, srv_iss + 1, 0x10, big, sizeof(big));
	ck_assert_uint_eq(pure_acks_captured(), 2);
}
END_TEST

/* The TSecr of a reply (0 when it has no timestamps). */
static uint32_t ts_ecr_of(const struct th_tcp *t)
{
	const uint8_t *o = opt_find(t, 8);
	return o && o[1] == 10 ? get32(o + 6) : 0;
}

/* Issue 13 item 1: TS.Recent is taken only from a segment whose ACK is
 * acceptable (RFC 7323 section 4.3, as Linux). Before, an ACK of data never
 * sent carrying a TSval far ahead set TS.Recent: we echoed the bogus value
 * and PAWS dropped the peer's next real segment. */
START_TEST(ts_recent_not_taken_from_an_unacceptable_ack)
{
	peer_ts = true;
	sb.timestamps = TCP_TS_ON;
	handshake(1000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint8_t d[10];
	memset(d, 0x33, sizeof(d));
	th_capture_clear(w);
	inject_ts(peer_nxt, srv_iss + 1 + 100000, 0x18, PEER_TSVAL + 100000, d, sizeof(d));
	struct th_tcp t = last_reply();   /* the challenge ACK echoes the old value */
	ck_assert_uint_eq(t.ack, peer_nxt);
	ck_assert_uint_eq(ts_ecr_of(&t), PEER_TSVAL);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
	th_capture_clear(w);
	inject_ts(peer_nxt, srv_iss + 1, 0x18, PEER_TSVAL + 1, d, sizeof(d));
	ck_assert_uint_eq(c->rx_paws_rejected, 0);
	ck_assert_uint_eq(w->side[1].rx_bytes, sizeof(d));
	th_run(w, 300);
	t = last_reply();
	ck_assert_uint_eq(t.ack, peer_nxt + sizeof(d));
	ck_assert_uint_eq(ts_ecr_of(&t), PEER_TSVAL + 1);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_hostile");
	TCase *t = tcase_create("sack");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_loop_test(t, sack_blocks_match_reference, 0, 2);
	tcase_add_test(t, sack_cost_linear_in_queue_length);
	suite_add_tcase(s, t);
	TCase *a = tcase_create("acks");
	tcase_add_checked_fixture(a, setup, teardown);
	tcase_set_timeout(a, 60);
	tcase_add_loop_test(a, flood_gets_one_ack_per_interval, 0, FLOOD_KINDS);
	tcase_add_test(a, challenge_budget_random_per_second);
	tcase_add_test(a, legitimate_acks_not_held);
	tcase_add_test(a, ts_recent_not_taken_from_an_unacceptable_ack);
	tcase_add_loop_test(a, fast_retransmit_during_flood, 0, 2);
	suite_add_tcase(s, a);
	TCase *f = tcase_create("frames");
	tcase_add_checked_fixture(f, setup, teardown);
	tcase_set_timeout(f, 60);
	tcase_add_test(f, ooo_holes_stop_at_pressure_and_stale_queues_are_reneged);
	tcase_add_test(f, ooo_queue_kept_without_pressure);
	tcase_add_test(f, ooo_full_segments_kept_within_share_under_pressure);
	tcase_add_test(f, in_order_refused_while_the_socket_holds_its_share);
	tcase_add_test(f, refused_ooo_segments_get_compressed_acks);
	tcase_add_test(f, tiny_in_order_segments_acked_by_bytes);
	suite_add_tcase(s, f);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
