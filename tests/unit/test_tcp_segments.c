/* The engine fed crafted segments: the test plays the peer by hand against
 * side 1 (a listener on port 80), and reads side 1's answers from the wire. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;
static const uint16_t PEER = 0x1234, SRV = 80;
static uint32_t srv_iss;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sb = sa;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

static void inject(uint32_t seq, uint32_t ack, uint8_t flags, const void *data, unsigned len)
{
	th_inject(w, 1, htons(PEER), htons(SRV), seq, ack, flags, 65535, NULL, 0, data, len);
}

static struct th_tcp last_reply(void)
{
	struct th_tcp t;
	ck_assert_uint_gt(w->ncaptured, 0);
	ck_assert(th_parse(w->captured[w->ncaptured - 1], &t));
	return t;
}

/* Handshake by hand with the given initial sequence number; side 1 accepts. */
static void handshake(uint32_t isn, const uint8_t *opts, unsigned optlen)
{
	th_init(w, &sa, &sb, 3);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	th_inject(w, 1, htons(PEER), htons(SRV), isn, 0, 0x02, 65535, opts, optlen, NULL, 0);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.flags, 0x12);
	ck_assert_uint_eq(t.ack, isn + 1);
	srv_iss = t.seq;
	th_capture_clear(w);
	inject(isn + 1, srv_iss + 1, 0x10, NULL, 0);
	ck_assert(w->side[1].connected);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
}

static bool both_connected(struct th_wire *x) { return x->side[0].connected && x->side[1].connected; }
static bool got_stream(struct th_wire *x) { return x->side[1].rx_bytes == 200000; }

/* Netifs that trust L4 checksums (VMA_RX_SW_CSUM auto on a veth) carry a
 * whole connection whose every segment has a wrong checksum; netifs that
 * verify drop every one (counted) and never connect. */
START_TEST(trusted_netif_accepts_unfinished_checksums)
{
	th_init(w, &sa, &sb, 3);
	w->spoil_l4_csum = true;
	w->side[0].nif.rx_l4_csum_trusted = w->side[1].nif.rx_l4_csum_trusted = true;
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4000, SRV);
	ck_assert(th_run_until(w, both_connected, 100));
	w->side[0].tx_goal = 200000;
	ck_assert_msg(th_run_until(w, got_stream, 20000), "got %llu", (unsigned long long)w->side[1].rx_bytes);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->rx_bad_checksum, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_bad_checksum, 0);
	tcp_abort(w->side[0].pcb);
	th_run(w, 10);
	th_fini(w);

	th_init(w, &sa, &sb, 3);
	w->spoil_l4_csum = true;
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4001, SRV);
	ck_assert(!th_run_until(w, both_connected, 2000));
	ck_assert_uint_gt(tcp_ctx_counters(w->side[1].tcp)->rx_bad_checksum, 0);
	ck_assert(!w->side[1].connected);
}
END_TEST

START_TEST(sequence_wrap)
{
	uint32_t isn = 0xfffffc00u;
	handshake(isn, NULL, 0);
	uint8_t data[1400];
	uint32_t seq = isn + 1;
	for (int i = 0; i < 4; i++) {
		for (unsigned k = 0; k < sizeof(data); k++)
			data[k] = th_pattern(w->side[1].rx_bytes + k);
		inject(seq, srv_iss + 1, 0x18, data, sizeof(data));
		seq += sizeof(data);
	}
	ck_assert_uint_eq(w->side[1].rx_bytes, 5600);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	w->capture = true;
	th_run(w, 100);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, isn + 1 + 5600);   /* wrapped past 2^32 */
}
END_TEST

START_TEST(window_edge_trimmed)
{
	sb.rcv_buf = 4000;
	sb.window_scaling = false;
	handshake(1000, NULL, 0);
	static uint8_t data[1460 * 4];
	for (unsigned k = 0; k < sizeof(data); k++)
		data[k] = th_pattern(k);
	w->side[1].hold_recved = true;
	for (int i = 0; i < 4; i++)
		inject(1001 + 1460 * i, srv_iss + 1, 0x10, data + 1460 * i, 1460);
	ck_assert_uint_eq(w->side[1].rx_bytes, 4000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, 1001 + 4000);
	ck_assert_uint_eq(t.wnd, 0);
}
END_TEST

START_TEST(old_duplicate_acked_not_redelivered)
{
	handshake(5000, NULL, 0);
	uint8_t d[100];
	for (unsigned k = 0; k < 100; k++)
		d[k] = th_pattern(k);
	inject(5001, srv_iss + 1, 0x18, d, 100);
	th_capture_clear(w);
	inject(5001, srv_iss + 1, 0x18, d, 100);
	ck_assert_uint_eq(w->side[1].rx_bytes, 100);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, 5101);
	ck_assert_uint_eq(t.flags & 0x10, 0x10);
}
END_TEST

START_TEST(bad_options_survive)
{
	th_init(w, &sa, &sb, 3);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	const uint8_t zero_len[] = { 2, 0, 0, 0 };
	const uint8_t one_len[] = { 3, 1, 0, 0 };
	const uint8_t overflow[] = { 1, 1, 8, 30 };
	const uint8_t mss_ok_then_bad[] = { 2, 4, 0x02, 0x00, 8, 0, 0, 0 };
	const uint8_t *cases[] = { zero_len, one_len, overflow, mss_ok_then_bad };
	unsigned lens[] = { 4, 4, 4, 8 };
	for (unsigned i = 0; i < 4; i++) {
		th_capture_clear(w);
		th_inject(w, 1, htons((uint16_t)(PEER + i)), htons(SRV), 100, 0, 0x02, 65535,
			  cases[i], lens[i], NULL, 0);
		struct th_tcp t = last_reply();
		ck_assert_uint_eq(t.flags, 0x12);
	}
	/* the MSS parsed before the broken option is honoured: 512 */
	struct tcp_pcb_info in;
	(void)in;
}
END_TEST

START_TEST(rst_validation_rfc5961)
{
	handshake(7000, NULL, 0);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	/* in window, not exact: challenge ACK, connection stays */
	inject(7001 + 100, 0, 0x04, NULL, 0);
	ck_assert_uint_eq(c->tx_challenge_acks, 1);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.flags, 0x10);
	ck_assert_uint_eq(t.ack, 7001);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
	/* out of window: silently ignored */
	th_capture_clear(w);
	inject(7001 + 10000000, 0, 0x04, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);
	/* SYN in ESTABLISHED: challenge ACK, but not twice within the pcb's
	 * interval (invalid_ack_interval_ms, 500 ms) */
	inject(9999, 0, 0x02, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_uint_eq(c->tx_challenge_acks, 1);
	ck_assert_uint_eq(c->tx_challenge_acks_limited, 1);
	th_run(w, 500);
	th_capture_clear(w);
	inject(9999, 0, 0x02, NULL, 0);
	ck_assert_uint_eq(c->tx_challenge_acks, 2);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
	/* ACK of data never sent: ACK back (a challenge, RFC 5961 5.2), dropped */
	th_run(w, 500);
	th_capture_clear(w);
	inject(7001, srv_iss + 5000, 0x10, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(c->tx_challenge_acks, 3);
	/* exact RST resets */
	inject(7001, 0, 0x04, NULL, 0);
	ck_assert_int_eq(w->side[1].err, ECONNRESET);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);
}
END_TEST

START_TEST(rst_and_syn_to_listener_and_no_pcb)
{
	th_init(w, &sa, &sb, 3);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	inject(1, 0, 0x04, NULL, 0);           /* RST to a listener: ignored */
	ck_assert_uint_eq(w->ncaptured, 0);
	inject(1, 777, 0x10, NULL, 0);         /* ACK to a listener: RST seq=ack */
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.flags, 0x04);
	ck_assert_uint_eq(t.seq, 777);
	th_capture_clear(w);
	th_inject(w, 1, htons(PEER), htons(81), 50, 0, 0x02, 65535, NULL, 0, NULL, 0);
	t = last_reply();                      /* closed port: RST|ACK ack=seq+1 */
	ck_assert_uint_eq(t.flags, 0x14);
	ck_assert_uint_eq(t.ack, 51);
	/* SYN_RCVD: RST with exact seq returns to LISTEN */
	th_capture_clear(w);
	inject(1000, 0, 0x02, NULL, 0);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 2);
	inject(1001, 0, 0x04, NULL, 0);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);
}
END_TEST

START_TEST(sack_blocks_for_out_of_order)
{
	const uint8_t sackok[] = { 1, 1, 4, 2 };
	handshake(2000, sackok, 4);
	uint8_t d[100] = { 0 };
	inject(2001 + 200, srv_iss + 1, 0x10, d, 100);
	inject(2001 + 400, srv_iss + 1, 0x10, d, 100);
	struct th_tcp t = last_reply();
	ck_assert_uint_eq(t.ack, 2001);
	/* NOP NOP SACK len 18: most recent block first */
	ck_assert_uint_eq(t.optlen, 20);
	ck_assert_uint_eq(t.opts[2], 5);
	ck_assert_uint_eq(t.opts[3], 18);
	uint32_t s0 = (uint32_t)t.opts[4] << 24 | t.opts[5] << 16 | t.opts[6] << 8 | t.opts[7];
	uint32_t s1 = (uint32_t)t.opts[12] << 24 | t.opts[13] << 16 | t.opts[14] << 8 | t.opts[15];
	ck_assert_uint_eq(s0, 2401);
	ck_assert_uint_eq(s1, 2201);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 2);
}
END_TEST

START_TEST(ooo_queue_memory_bound)
{
	sb.ooo_max_bytes = 20 * 2048;
	handshake(3000, NULL, 0);
	uint8_t d[10];
	for (unsigned k = 0; k < 10; k++)
		d[k] = th_pattern(k);
	for (int i = 1; i <= 100; i++)
		inject(3001 + 20 * (uint32_t)i, srv_iss + 1, 0x10, d, 10);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 20);
	ck_assert_uint_le(in.ooo_bytes_held, 20 * 2048);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_ooo_dropped, 80);
}
END_TEST

/* Full-size segments past a hole, inside the window offered, are kept
 * beyond ooo_max_bytes (as Linux keeps them within its receive buffer): a
 * sender's window is not a spray; then the hole's segment delivers all. */
START_TEST(ooo_full_segments_in_window_kept)
{
	sb.ooo_max_bytes = 20 * 2048;
	sb.rcv_buf = 256 * 1024;
	handshake(3000, NULL, 0);
	static uint8_t d[1000 * 61];
	for (unsigned k = 0; k < sizeof(d); k++)
		d[k] = th_pattern(k);
	for (int i = 1; i <= 60; i++)
		inject(3001 + 1000 * (uint32_t)i, srv_iss + 1, 0x10, d + 1000 * i, 1000);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.ooo_segments, 60);
	ck_assert_uint_gt(in.ooo_bytes_held, 20 * 2048);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_ooo_dropped, 0);
	inject(3001, srv_iss + 1, 0x10, d, 1000);
	ck_assert_uint_eq(w->side[1].rx_bytes, sizeof(d));
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	/* TCP_INFO's bytes_received counts what the queue handed over too */
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.bytes_received, sizeof(d));
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_payload_bytes, sizeof(d));
}
END_TEST

START_TEST(paws_rejects_old_timestamp)
{
	sb.timestamps = TCP_TS_ON;
	const uint8_t ts[] = { 1, 1, 8, 10, 0, 0, 0x10, 0, 0, 0, 0, 0 };
	handshake(4000, ts, 12);
	ck_assert(w->side[1].connected);
	uint8_t old[] = { 1, 1, 8, 10, 0, 0, 0x0f, 0, 0, 0, 0, 0 };
	uint8_t d[10] = { 0 };
	th_inject(w, 1, htons(PEER), htons(SRV), 4001, srv_iss + 1, 0x10, 65535, old, 12, d, 10);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_paws_rejected, 1);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_segments");
	TCase *t = tcase_create("crafted");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, trusted_netif_accepts_unfinished_checksums);
	tcase_add_test(t, sequence_wrap);
	tcase_add_test(t, window_edge_trimmed);
	tcase_add_test(t, old_duplicate_acked_not_redelivered);
	tcase_add_test(t, bad_options_survive);
	tcase_add_test(t, rst_validation_rfc5961);
	tcase_add_test(t, rst_and_syn_to_listener_and_no_pcb);
	tcase_add_test(t, sack_blocks_for_out_of_order);
	tcase_add_test(t, ooo_queue_memory_bound);
	tcase_add_test(t, ooo_full_segments_in_window_kept);
	tcase_add_test(t, paws_rejects_old_timestamp);
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
