/* The in-memory wire for the TCP engine tests (see test_tcp_harness.h). */
#include "test_tcp_harness.h"

#include <arpa/inet.h>
#include <check.h>
#include <string.h>

#include "stack/stack_csum.h"

#define BUF_SIZE  2048

unsigned th_pool_bufs = 4096;

static uint64_t rnd(struct th_wire *w)
{
	/* xorshift64*: deterministic per seed */
	w->rng ^= w->rng >> 12;
	w->rng ^= w->rng << 25;
	w->rng ^= w->rng >> 27;
	return w->rng * 0x2545F4914F6CDD1Dull;
}

static bool chance(struct th_wire *w, unsigned ppm)
{
	return ppm && rnd(w) % 1000000u < ppm;
}

static struct th_wire *wire_of(struct th_side *s)
{
	return (struct th_wire *)((char *)(s - s->index) - offsetof(struct th_wire, side));
}

static struct ring_buf *side_tx_alloc(void *ctx)
{
	return ring_buf_alloc(((struct th_side *)ctx)->pool);
}

static void enqueue(struct th_wire *w, struct ring_buf *b, int to, uint64_t at)
{
	ck_assert_uint_lt(w->n, TH_WIRE_MAX);
	w->q[w->n++] = (struct th_frame){ b, at, w->order++, to };
}

static int side_tx_send(void *ctx, struct ring_buf *b)
{
	struct th_side *s = ctx;
	struct th_wire *w = wire_of(s);
	int to = 1 - s->index;

	s->frames_sent++;
	if (w->capture) {
		ck_assert_uint_lt(w->ncaptured, 256);
		w->captured[w->ncaptured++] = b;
		return 0;
	}
	struct th_tcp t;
	if (w->drop_ack_once[s->index] && th_parse(b, &t) && !t.len && !(t.flags & 0x07) &&
	    t.ack == w->drop_ack_once[s->index]) {
		w->drop_ack_once[s->index] = 0;
		ring_buf_free(b);
		return 0;
	}
	if (th_parse(b, &t) && t.len) {
		long nth = (long)++w->data_frames[s->index];
		for (int i = 0; i < 8; i++) {
			if (w->drop_nth_data[s->index][i] == nth) {
				ring_buf_free(b);
				return 0;
			}
		}
	}
	if (w->drop_all || chance(w, w->drop_ppm)) {
		ring_buf_free(b);
		return 0;
	}
	uint64_t at = w->now + w->delay_ms;
	if (w->rate_bytes_per_ms) {
		uint64_t *free_us = &w->link_free_us[s->index];
		uint64_t start = *free_us > w->now * 1000u ? *free_us : w->now * 1000u;
		*free_us = start + (uint64_t)b->len * 1000u / w->rate_bytes_per_ms;
		at = (*free_us + 999u) / 1000u + w->delay_ms;
	}
	if (chance(w, w->reorder_ppm))
		at += 1 + rnd(w) % 4;
	if (chance(w, w->dup_ppm)) {
		struct ring_buf *c = ring_buf_alloc(s->pool);
		if (c) {
			memcpy(c->data, b->data, b->len);
			c->len = c->tot_len = b->len;
			enqueue(w, c, to, at + rnd(w) % 3);
		}
	}
	enqueue(w, b, to, at);
	return 0;
}

void th_init(struct th_wire *w, const struct tcp_settings *a, const struct tcp_settings *b, uint64_t seed)
{
	memset(w, 0, sizeof(*w));
	w->rng = seed ? seed : 1;
	w->delay_ms = 1;
	w->now = 1000;
	for (int i = 0; i < 2; i++) {
		struct th_side *s = &w->side[i];
		struct stack_settings ss;
		stack_settings_default(&ss);
		s->index = i;
		s->pool = ring_buf_pool_create(i ? "b" : "a", th_pool_bufs, BUF_SIZE);
		ck_assert_ptr_nonnull(s->pool);
		s->st = stack_create(&ss);
		ck_assert_ptr_nonnull(s->st);
		uint8_t mac[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(s->nif.mac, mac, 6);
		s->nif.ip = htonl(0x0a000001u + (uint32_t)i);
		s->nif.netmask = htonl(0xffffff00u);
		s->nif.mtu = 1500;
		s->nif.ifindex = 1;
		s->nif.ctx = s;
		s->nif.tx_alloc = side_tx_alloc;
		s->nif.tx_send = side_tx_send;
		s->tcp = tcp_ctx_create(s->st, &s->nif, i ? b : a);
		ck_assert_ptr_nonnull(s->tcp);
		stack_timer_tick(s->st, w->now);
	}
}

void th_capture_clear(struct th_wire *w)
{
	for (unsigned i = 0; i < w->ncaptured; i++)
		ring_buf_free(w->captured[i]);
	w->ncaptured = 0;
}

void th_fini(struct th_wire *w)
{
	th_capture_clear(w);
	for (unsigned i = 0; i < w->n; i++)
		ring_buf_free(w->q[i].buf);
	w->n = 0;
	for (int i = 0; i < 2; i++) {
		stack_destroy(w->side[i].st);   /* also destroys the tcp ctx */
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(ring_buf_pool_in_use(w->side[i].pool), 0);
		ring_buf_pool_destroy(w->side[i].pool);
	}
}

void th_step(struct th_wire *w)
{
	for (;;) {
		int best = -1;
		for (unsigned i = 0; i < w->n; i++)
			if (w->q[i].at <= w->now && (best < 0 || w->q[i].order < w->q[best].order))
				best = (int)i;
		if (best < 0)
			break;
		struct th_frame f = w->q[best];
		w->q[best] = w->q[--w->n];
		struct th_side *dst = &w->side[f.to];
		if (w->spoil_l4_csum && f.buf->len >= 14 + 20 + 20) {
			uint8_t *tcp = f.buf->data + 14 + (f.buf->data[14] & 0x0f) * 4;
			tcp[16] ^= 0x5a;
		}
		stack_input(dst->st, &dst->nif, f.buf);
	}
	w->now++;
	for (int i = 0; i < 2; i++) {
		stack_timer_tick(w->side[i].st, w->now);
		th_pump(&w->side[i]);
	}
}

void th_run(struct th_wire *w, uint64_t ms)
{
	for (uint64_t i = 0; i < ms; i++)
		th_step(w);
}

bool th_run_until(struct th_wire *w, bool (*done)(struct th_wire *), uint64_t ms)
{
	for (uint64_t i = 0; i < ms; i++) {
		if (done(w))
			return true;
		th_step(w);
	}
	return done(w);
}

void th_spend_quickacks(struct th_wire *w, int from)
{
	struct th_side *s = &w->side[from], *r = &w->side[!from];
	uint64_t goal = s->tx_bytes + 40u * 1460u;
	s->tx_goal = goal;
	th_pump(s);
	for (unsigned i = 0; i < 200 && r->rx_bytes < goal; i++)
		th_step(w);
	ck_assert_uint_eq(r->rx_bytes, goal);
	th_run(w, 20);   /* the flight's timers (TLP, RTO) pass or stop */
}

uint8_t th_pattern(uint64_t off)
{
	uint64_t x = off * 0x9E3779B97F4A7C15ull;
	return (uint8_t)(x >> 56) ^ (uint8_t)(off >> 13);
}

void th_pump(struct th_side *s)
{
	if (!s->pcb || s->tx_bytes >= s->tx_goal) {
		if (s->pcb && s->close_when_sent && s->tx_goal && s->tx_bytes >= s->tx_goal) {
			s->close_when_sent = false;
			tcp_shutdown(s->pcb, false, true);
		}
		return;
	}
	uint8_t chunk[8192];
	while (s->tx_bytes < s->tx_goal) {
		uint32_t n = (uint32_t)(s->tx_goal - s->tx_bytes < sizeof(chunk) ? s->tx_goal - s->tx_bytes : sizeof(chunk));
		for (uint32_t i = 0; i < n; i++)
			chunk[i] = th_pattern(s->tx_bytes + i);
		int rc = tcp_write(s->pcb, chunk, n, 0);
		if (rc <= 0)
			break;
		s->tx_bytes += (uint64_t)rc;
	}
}

static void cb_recv(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	struct th_side *s = arg;
	if (!buf) {
		s->fin = true;
		return;
	}
	uint32_t total = buf->tot_len;
	for (struct ring_buf *b = buf; b; b = b->next) {
		for (uint32_t i = 0; i < b->len; i++)
			if (b->data[i] != th_pattern(s->rx_bytes + i))
				s->rx_bad++;
		s->rx_bytes += b->len;
	}
	ring_buf_free(buf);
	if (s->hold_recved)
		s->held += total;
	else
		tcp_recved(pcb, total);
}

static void cb_err(void *arg, int err)
{
	struct th_side *s = arg;
	s->err = err;
	s->pcb = NULL;
}

static void cb_connected(void *arg, struct tcp_pcb *pcb)
{
	struct th_side *s = arg;
	s->connected = true;
	s->pcb = pcb;
}

static int cb_accept(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	struct th_side *s = arg;
	(void)listener;
	s->pcb = child;
	s->connected = true;
	tcp_set_callbacks(child, &th_callbacks, s);
	return 0;
}

const struct tcp_callbacks th_callbacks = {
	.recv = cb_recv, .err = cb_err, .connected = cb_connected, .accept = cb_accept,
};

struct tcp_pcb *th_listen(struct th_side *s, uint16_t port)
{
	struct tcp_pcb *l = tcp_pcb_new(s->tcp);
	ck_assert_ptr_nonnull(l);
	tcp_set_callbacks(l, &th_callbacks, s);
	ck_assert_int_eq(tcp_bind(l, 0, htons(port)), 0);
	ck_assert_int_eq(tcp_listen(l, 16), 0);
	return l;
}

struct tcp_pcb *th_connect(struct th_wire *w, int from, uint16_t lport, uint16_t rport)
{
	struct th_side *s = &w->side[from], *peer = &w->side[1 - from];
	struct tcp_pcb *p = tcp_pcb_new(s->tcp);
	ck_assert_ptr_nonnull(p);
	tcp_set_callbacks(p, &th_callbacks, s);
	ck_assert_int_eq(tcp_bind(p, s->nif.ip, htons(lport)), 0);
	ck_assert_int_eq(tcp_connect(p, peer->nif.ip, htons(rport), 0, peer->nif.mac), 0);
	return p;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void th_inject(struct th_wire *w, int to, uint16_t sport, uint16_t dport, uint32_t seq,
	       uint32_t ack, uint8_t flags, uint16_t wnd, const uint8_t *opts, unsigned optlen,
	       const void *payload, unsigned len)
{
	struct th_side *src = &w->side[1 - to], *dst = &w->side[to];
	struct ring_buf *b = ring_buf_alloc(src->pool);
	ck_assert_ptr_nonnull(b);
	unsigned padded = (optlen + 3) & ~3u;
	unsigned thlen = 20 + padded;
	uint8_t *eth = b->data, *ip = eth + 14, *th = ip + 20;
	memcpy(eth, dst->nif.mac, 6);
	memcpy(eth + 6, src->nif.mac, 6);
	eth[12] = 0x08; eth[13] = 0;
	memset(ip, 0, 20);
	ip[0] = 0x45;
	put16(ip + 2, (uint16_t)(20 + thlen + len));
	put16(ip + 6, 0x4000);
	ip[8] = 64; ip[9] = 6;
	memcpy(ip + 12, &src->nif.ip, 4);
	memcpy(ip + 16, &dst->nif.ip, 4);
	uint16_t c = stack_csum_finish(stack_csum_add(0, ip, 20));
	memcpy(ip + 10, &c, 2);
	memset(th, 0, thlen);
	memcpy(th, &sport, 2); memcpy(th + 2, &dport, 2);
	put32(th + 4, seq); put32(th + 8, ack);
	th[12] = (uint8_t)((thlen / 4) << 4);
	th[13] = flags;
	put16(th + 14, wnd);
	if (optlen)
		memcpy(th + 20, opts, optlen);
	if (len)
		memcpy(th + thlen, payload, len);
	uint32_t sip, dip;
	memcpy(&sip, &src->nif.ip, 4);
	memcpy(&dip, &dst->nif.ip, 4);
	uint64_t sum = stack_csum_pseudo(sip, dip, 6, (uint16_t)(thlen + len));
	c = stack_csum_finish(stack_csum_add(sum, th, thlen + len));
	memcpy(th + 16, &c, 2);
	b->len = b->tot_len = 14 + 20 + thlen + len;
	stack_input(dst->st, &dst->nif, b);
}

bool th_parse(const struct ring_buf *f, struct th_tcp *o)
{
	const uint8_t *ip = f->data + 14;
	if (f->len < 54 || ip[9] != 6)
		return false;
	unsigned ihl = (ip[0] & 15u) * 4u;
	unsigned tot = (unsigned)(ip[2] << 8 | ip[3]);
	const uint8_t *th = ip + ihl;
	unsigned thlen = (th[12] >> 4) * 4u;
	o->seq = get32(th + 4);
	o->ack = get32(th + 8);
	o->flags = th[13];
	o->wnd = (uint16_t)(th[14] << 8 | th[15]);
	o->optlen = thlen - 20;
	memcpy(o->opts, th + 20, o->optlen);
	o->len = tot - ihl - thlen;
	return true;
}
