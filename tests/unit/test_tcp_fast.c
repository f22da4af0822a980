/* The predicted-segment fast path (tcp_fast.c) and the per-connection
 * header templates (tcp_out.c): a clean stream and a ping-pong go through
 * the fast path on both sides; every segment off the prediction (out of
 * order, FIN, ECE, a zero window, options beyond timestamps, PAWS, past the
 * window) takes the full path with its usual effect; a segment built from
 * the template has valid IPv4 and TCP checksums, consecutive IPv4 ids, and
 * follows the connection to another interface. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "stack/stack_csum.h"
#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;
static const uint16_t PEER = 0x3456, SRV = 80;
static const uint32_t PEER_ISN = 9000;
static uint32_t srv_iss, peer_nxt, tsval = 0x1000;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sa.timestamps = TCP_TS_ON;
	sb = sa;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

static bool connected(struct th_wire *x) { return x->side[0].connected && x->side[1].connected; }
static bool got_stream(struct th_wire *x) { return x->side[1].rx_bytes == 1u << 20; }

/* A clean stream and a ping-pong: nearly every data segment and every ACK of
 * new data take the fast path (only the first ones, before the connection
 * settles, and the FIN may not). */
START_TEST(clean_stream_and_pingpong_take_the_fast_path)
{
	th_init(w, &sa, &sb, 5);
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4000, SRV);
	ck_assert(th_run_until(w, connected, 100));
	w->side[0].tx_goal = 1u << 20;
	ck_assert(th_run_until(w, got_stream, 20000));
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	const struct tcp_counters *a = tcp_ctx_counters(w->side[0].tcp), *b = tcp_ctx_counters(w->side[1].tcp);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_ge(b->rx_fast_data * 100, (uint64_t)in.data_segs_in * 95);
	ck_assert_uint_ge(a->rx_fast_acks * 100, a->rx_segments * 95);
	ck_assert_uint_eq(a->rx_fast_data, 0);   /* side 0 received no data */
	/* ping-pong of 100 bytes: each message carries the ACK of the last */
	uint64_t fa = a->rx_fast_data, fb = b->rx_fast_data;
	uint8_t msg[100];
	for (int i = 0; i < 50; i++) {
		uint64_t want = w->side[1].rx_bytes + sizeof(msg);
		for (unsigned k = 0; k < sizeof(msg); k++)
			msg[k] = th_pattern(w->side[0].tx_bytes + k);
		ck_assert_int_eq(tcp_write(w->side[0].pcb, msg, sizeof(msg), 0), (int)sizeof(msg));
		w->side[0].tx_bytes += sizeof(msg);
		w->side[0].tx_goal = w->side[0].tx_bytes;
		th_run(w, 2);
		ck_assert_uint_eq(w->side[1].rx_bytes, want);
		ck_assert_int_eq(tcp_write(w->side[1].pcb, msg, sizeof(msg), 0), (int)sizeof(msg));
		th_run(w, 2);
	}
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	ck_assert_uint_ge(b->rx_fast_data - fb, 48);
	ck_assert_uint_ge(a->rx_fast_data - fa, 48);
	ck_assert_uint_ge(a->rx_fast_acks, 48);
	tcp_abort(w->side[0].pcb);
	th_run(w, 5);
}
END_TEST

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* A segment from the peer to side 1 with the aligned timestamps option
 * (ts: its TSval) and extra option bytes after it (extra, n). */
static void peer_send(uint32_t seq, uint8_t flags, uint16_t wnd, uint32_t ts, const uint8_t *extra, unsigned n,
		      const void *data, unsigned len)
{
	uint8_t o[40] = { 1, 1, 8, 10 };
	put32(o + 4, ts);
	put32(o + 8, 0);
	if (n)
		memcpy(o + 12, extra, n);
	th_inject(w, 1, htons(PEER), htons(SRV), seq, srv_iss + 1, flags, wnd, o, 12 + n, data, len);
}

static void handshake(void)
{
	th_init(w, &sa, &sb, 3);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	const uint8_t syn_opts[] = { 2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0x10, 0, 0, 0, 0, 0 };
	th_inject(w, 1, htons(PEER), htons(SRV), PEER_ISN, 0, 0x02, 65535, syn_opts, sizeof(syn_opts), NULL, 0);
	struct th_tcp t;
	ck_assert(th_parse(w->captured[w->ncaptured - 1], &t));
	ck_assert_uint_eq(t.flags, 0x12);
	srv_iss = t.seq;
	th_capture_clear(w);
	peer_nxt = PEER_ISN + 1;
	peer_send(peer_nxt, 0x10, 65535, tsval, NULL, 0, NULL, 0);
	ck_assert(w->side[1].connected);
}

static void data(uint8_t flags, uint16_t wnd, uint32_t ts, const uint8_t *extra, unsigned n, unsigned len)
{
	uint8_t d[1000];
	for (unsigned k = 0; k < len; k++)
		d[k] = th_pattern(w->side[1].rx_bytes + k);
	peer_send(peer_nxt, flags, wnd, ts, extra, n, d, len);
}

/* Off the prediction, each segment takes the full path and has its usual
 * effect; back on it, the fast path again. */
START_TEST(segments_off_the_prediction_take_the_full_path)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	struct tcp_pcb *p = w->side[1].pcb;
	struct tcp_pcb_info in;

	data(0x18, 65535, ++tsval, NULL, 0, 100);            /* predicted */
	peer_nxt += 100;
	ck_assert_uint_eq(c->rx_fast_data, 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, 100);

	data(0x18, 40000, ++tsval, NULL, 0, 100);            /* the window moved: still fast */
	peer_nxt += 100;
	ck_assert_uint_eq(c->rx_fast_data, 2);
	tcp_pcb_get_info(p, &in);
	ck_assert_uint_eq(in.snd_wnd, 40000);

	const uint8_t sack[] = { 1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2 };
	data(0x18, 40000, ++tsval, sack, sizeof(sack), 100);  /* more options: full path */
	peer_nxt += 100;
	ck_assert_uint_eq(c->rx_fast_data, 2);
	ck_assert_uint_eq(w->side[1].rx_bytes, 300);

	peer_send(peer_nxt, 0x10, 0, ++tsval, NULL, 0, NULL, 0);   /* a zero window */
	tcp_pcb_get_info(p, &in);
	ck_assert_uint_eq(in.snd_wnd, 0);
	data(0x18, 0, ++tsval, NULL, 0, 100);                /* data while it stays shut */
	peer_nxt += 100;
	ck_assert_uint_eq(c->rx_fast_data, 2);
	ck_assert_uint_eq(w->side[1].rx_bytes, 400);

	peer_send(peer_nxt + 500, 0x18, 40000, ++tsval, NULL, 0, "x", 1);   /* out of order */
	ck_assert_uint_eq(c->rx_fast_data, 2);
	tcp_pcb_get_info(p, &in);
	ck_assert_uint_eq(in.ooo_segments, 1);

	data(0x18, 40000, tsval - 5, NULL, 0, 100);          /* PAWS: dropped, counted */
	ck_assert_uint_eq(c->rx_fast_data, 2);
	ck_assert_uint_eq(c->rx_paws_rejected, 1);
	ck_assert_uint_eq(w->side[1].rx_bytes, 400);

	data(0x58, 40000, ++tsval, NULL, 0, 100);            /* ECE */
	peer_nxt += 100;
	ck_assert_uint_eq(c->rx_fast_data, 2);
	ck_assert_uint_eq(w->side[1].rx_bytes, 500);

	data(0x19, 40000, ++tsval, NULL, 0, 100);            /* FIN */
	peer_nxt += 101;
	ck_assert_uint_eq(c->rx_fast_data, 2);
	ck_assert(w->side[1].fin);
	ck_assert_int_eq(tcp_pcb_state(p), TCP_CLOSE_WAIT);
	ck_assert_uint_eq(w->side[1].rx_bytes, 600);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

static uint16_t ip_sum(const uint8_t *ip)
{
	return stack_csum_fold(stack_csum_add(0, ip, 20));
}

/* Segments from the connection's template: valid checksums, the tuple's
 * IPv4 ids one after the other, DF and the default TTL; after the
 * connection moves to another interface, that one's MAC. */
START_TEST(template_headers_and_interface_change)
{
	handshake();
	struct tcp_pcb *p = w->side[1].pcb;
	w->capture = true;
	th_capture_clear(w);
	static uint8_t buf[3 * 1400];
	ck_assert_int_eq(tcp_write(p, buf, sizeof(buf), 0), (int)sizeof(buf));
	ck_assert_uint_ge(w->ncaptured, 3);
	uint16_t id0 = 0;
	for (unsigned i = 0; i < 3; i++) {
		const uint8_t *eth = w->captured[i]->data, *ip = eth + 14, *th = ip + 20;
		uint32_t len = (uint32_t)(ip[2] << 8 | ip[3]);
		ck_assert_int_eq(memcmp(eth + 6, w->side[1].nif.mac, 6), 0);
		ck_assert_uint_eq(ip[0], 0x45);
		ck_assert_uint_eq(ip_sum(ip), 0xffff);
		ck_assert_uint_eq(ip[6] & 0x40, 0x40);   /* DF */
		ck_assert_uint_eq(ip[8], 64);
		uint16_t id = (uint16_t)(ip[4] << 8 | ip[5]);
		if (i)
			ck_assert_uint_eq(id, (uint16_t)(id0 + i));
		else
			id0 = id;
		uint32_t sip, dip;
		memcpy(&sip, ip + 12, 4);
		memcpy(&dip, ip + 16, 4);
		ck_assert_uint_eq(stack_csum_fold(stack_csum_add(stack_csum_pseudo(sip, dip, 6, (uint16_t)(len - 20)), th,
								 len - 20)), 0xffff);
		ck_assert_uint_eq(w->captured[i]->len, 14 + len);
	}
	/* another interface: its MAC, the same tuple */
	struct stack_netif other = w->side[1].nif;
	other.mac[5] = 0x77;
	tcp_set_netif(p, &other);
	th_capture_clear(w);
	ck_assert_int_eq(tcp_write(p, buf, 100, TCP_WRITE_PUSH), 100);
	ck_assert_uint_ge(w->ncaptured, 1);
	const uint8_t *eth = w->captured[w->ncaptured - 1]->data;
	ck_assert_int_eq(memcmp(eth + 6, other.mac, 6), 0);
	ck_assert_uint_eq(ip_sum(eth + 14), 0xffff);
	th_capture_clear(w);
	tcp_abort(p);
	th_capture_clear(w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_fast");
	TCase *t = tcase_create("fast");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, clean_stream_and_pingpong_take_the_fast_path);
	tcase_add_test(t, segments_off_the_prediction_take_the_full_path);
	tcase_add_test(t, template_headers_and_interface_change);
	suite_add_tcase(s, t);
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
