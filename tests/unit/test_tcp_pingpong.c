/* The request/response hot path (sockperf --tcp ping-pong): once the
 * exchange is seen to be interactive (data sent within a delayed-ACK time of
 * the peer's, Linux's "pingpong"), the ACK of a request rides on the
 * response and no pure ACK is sent; a small write leaves at once when no
 * small segment is unacknowledged (Minshall's Nagle); outside ping-pong the
 * app reading a pushed segment ACKs it at once. Frames are counted exactly. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;

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

static bool both_connected(struct th_wire *x)
{
	return x->side[0].connected && x->side[1].connected;
}

static struct tcp_pcb *cli, *srv;

/* spent: the client sent a bulk first, so the server is out of its
 * quick-ACK mode (connection start) and delays ACKs */
static void open_pair_mode(bool spent)
{
	th_init(w, &sa, &sb, 5);
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	th_run(w, 5);
	if (spent)
		th_spend_quickacks(w, 0);
	cli = w->side[0].pcb;
	srv = w->side[1].pcb;
	w->side[0].pcb = w->side[1].pcb = NULL;   /* the harness pump stays out */
	w->capture = true;
}

static void open_pair(void)
{
	open_pair_mode(false);
}

/* Delivers the single captured frame to the other side; returns it parsed. */
static struct th_tcp pass_one(int to)
{
	struct th_tcp t;
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert(th_parse(w->captured[0], &t));
	struct ring_buf *f = w->captured[0];
	w->ncaptured = 0;
	stack_input(w->side[to].st, &w->side[to].nif, f);
	return t;
}

static void ping_pong(bool nodelay)
{
	sa.nodelay = sb.nodelay = nodelay;
	open_pair();
	const struct tcp_counters *c0 = tcp_ctx_counters(w->side[0].tcp);
	const struct tcp_counters *c1 = tcp_ctx_counters(w->side[1].tcp);
	uint8_t msg[64];
	memset(msg, 0x5a, sizeof(msg));
	/* Round 0: nobody has seen a reply yet, so each side's read ACKs at once. */
	ck_assert_int_eq(tcp_write(cli, msg, 64, 0), 64);
	ck_assert_uint_eq(pass_one(1).len, 64);
	ck_assert_uint_eq(pass_one(0).len, 0);
	ck_assert_int_eq(tcp_write(srv, msg, 64, 0), 64);
	ck_assert_uint_eq(pass_one(0).len, 64);
	ck_assert_uint_eq(pass_one(1).len, 0);
	w->now += 1;
	uint64_t acks0 = c0->tx_pure_acks, acks1 = c1->tx_pure_acks;
	for (unsigned round = 1; round < 50; round++) {
		struct tcp_pcb_info ci, si;
		tcp_pcb_get_info(cli, &ci);
		ck_assert_int_eq(tcp_write(cli, msg, 64, 0), 64);
		struct th_tcp req = pass_one(1);                 /* left at once */
		ck_assert_uint_eq(req.len, 64);
		ck_assert_msg(w->ncaptured == 0, "round %u: %u frames", round, w->ncaptured);   /* server's ACK is delayed */
		tcp_pcb_get_info(srv, &si);
		ck_assert_int_eq(tcp_write(srv, msg, 64, 0), 64);
		struct th_tcp rsp = pass_one(0);
		ck_assert_uint_eq(rsp.len, 64);
		ck_assert_uint_eq(rsp.ack, req.seq + 64);       /* the ACK rides on the response */
		ck_assert_uint_eq(w->ncaptured, 0);
		w->now += 1;                                     /* 1 ms per round: under delack */
		stack_timer_tick(w->side[0].st, w->now);
		stack_timer_tick(w->side[1].st, w->now);
		ck_assert_uint_eq(w->ncaptured, 0);
	}
	ck_assert_uint_eq(c0->tx_pure_acks, acks0);
	ck_assert_uint_eq(c1->tx_pure_acks, acks1);
	ck_assert_uint_eq(w->side[0].rx_bytes, 50 * 64);
	ck_assert_uint_eq(w->side[1].rx_bytes, 50 * 64);
	/* the last response is still unacknowledged by the client: the delack timer sends it */
	w->now += 200;
	stack_timer_tick(w->side[0].st, w->now);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(c0->tx_delayed_acks, 1);
	th_capture_clear(w);
}

START_TEST(ack_rides_on_response_nodelay) { ping_pong(true); }
END_TEST

START_TEST(ack_rides_on_response_nagle) { ping_pong(false); }
END_TEST

START_TEST(small_write_leaves_at_once_nagle_holds_second)
{
	open_pair_mode(true);
	uint64_t base = w->side[1].rx_bytes;
	ck_assert_int_eq(tcp_write(cli, "hello", 5, 0), 5);
	ck_assert_uint_eq(w->ncaptured, 1);               /* nothing in flight: sent */
	struct ring_buf *first = w->captured[0];
	w->ncaptured = 0;
	ck_assert_int_eq(tcp_write(cli, "world", 5, 0), 5);
	ck_assert_int_eq(tcp_write(cli, "!!", 2, 0), 2);
	ck_assert_uint_eq(w->ncaptured, 0);               /* Nagle: one small segment in flight */
	stack_input(w->side[1].st, &w->side[1].nif, first);
	struct th_tcp t = pass_one(0);                    /* read by the app: ACKed at once */
	ck_assert_uint_eq(t.len, 0);
	ck_assert_uint_eq(pass_one(1).len, 7);           /* the held bytes go as one segment */
	ck_assert_uint_eq(pass_one(0).len, 0);
	ck_assert_uint_eq(w->side[1].rx_bytes, base + 12);
	/* with the app not reading, the ACK waits for the delack timer */
	w->side[1].hold_recved = true;
	const struct tcp_counters *c1 = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_int_eq(tcp_write(cli, "again", 5, 0), 5);
	ck_assert_uint_eq(pass_one(1).len, 5);
	ck_assert_uint_eq(w->ncaptured, 0);
	w->now += 30;
	stack_timer_tick(w->side[1].st, w->now);
	ck_assert_uint_eq(w->ncaptured, 0);
	w->now += 20;
	stack_timer_tick(w->side[1].st, w->now);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(c1->tx_delayed_acks, 1);
	th_capture_clear(w);
}
END_TEST

/* Full segments in flight do not hold a small tail (Minshall): a 2.3-segment
 * write leaves as 3 segments at once (within the initial window). */
START_TEST(tail_behind_full_segments_not_held)
{
	open_pair();
	static uint8_t buf[1460 * 2 + 500];
	ck_assert_int_eq(tcp_write(cli, buf, sizeof(buf), 0), (int)sizeof(buf));
	ck_assert_uint_eq(w->ncaptured, 3);
	struct th_tcp t;
	ck_assert(th_parse(w->captured[2], &t));
	ck_assert_uint_eq(t.len, 500);
	th_capture_clear(w);
}
END_TEST

START_TEST(write_more_holds_push_sends)
{
	sa.nodelay = true;
	open_pair();
	ck_assert_int_eq(tcp_write(cli, "abc", 3, TCP_WRITE_MORE), 3);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_int_eq(tcp_write(cli, "def", 3, TCP_WRITE_MORE), 3);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_uint_eq(tcp_sndbuf_used(cli), 6);
	ck_assert_int_eq(tcp_write(cli, "g", 1, 0), 1);
	struct th_tcp t = pass_one(1);
	ck_assert_uint_eq(t.len, 7);
	ck_assert(t.flags & 0x08);                        /* PSH on the last segment */
	ck_assert_uint_eq(pass_one(0).len, 0);            /* the ACK, back to the client */
	/* PUSH overrides Nagle on a pcb without nodelay */
	tcp_set_nodelay(cli, false);
	ck_assert_int_eq(tcp_write(cli, "x", 1, 0), 1);
	ck_assert_uint_eq(w->ncaptured, 1);
	th_capture_clear(w);
	ck_assert_int_eq(tcp_write(cli, "y", 1, 0), 1);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_int_eq(tcp_write(cli, "z", 1, TCP_WRITE_PUSH), 1);
	ck_assert_uint_eq(w->ncaptured, 1);
	th_capture_clear(w);
}
END_TEST

START_TEST(full_segments_not_held_by_nagle)
{
	open_pair();
	static uint8_t big[1460 * 3];
	ck_assert_int_eq(tcp_write(cli, big, sizeof(big), 0), (int)sizeof(big));
	ck_assert_uint_eq(w->ncaptured, 3);
	th_capture_clear(w);
}
END_TEST

/* RFC 6928: the first flight is 10 full segments (then ACKs clock more). */
START_TEST(initial_window_ten_segments)
{
	open_pair();
	static uint8_t big[1460 * 20];
	ck_assert_int_eq(tcp_write(cli, big, sizeof(big), 0), (int)sizeof(big));
	ck_assert_uint_eq(w->ncaptured, 10);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(cli, &in);
	ck_assert_uint_eq(in.cwnd, 14600);
	ck_assert_uint_eq(in.unacked, 10);
	th_capture_clear(w);
}
END_TEST

/* TCP_CORK as nginx uses it for every response (cork, header, body,
 * uncork): header and body leave as one segment, also on a kept-alive
 * connection where Nagle alone would hold the body behind the header
 * until the peer's delayed ACK (40 ms a response). */
START_TEST(cork_sends_header_and_body_as_one_segment)
{
	open_pair();
	static const char header[234] = "HTTP/1.1 200 OK";
	for (int response = 0; response < 2; response++) {
		tcp_set_cork(cli, true);
		ck_assert(tcp_corked(cli));
		ck_assert_int_eq(tcp_write(cli, header, sizeof(header), 0), (int)sizeof(header));
		ck_assert_uint_eq(w->ncaptured, 0);       /* corked: the partial segment waits */
		ck_assert_int_eq(tcp_write(cli, "hello\n", 6, 0), 6);
		ck_assert_uint_eq(w->ncaptured, 0);
		tcp_set_cork(cli, false);
		struct th_tcp t = pass_one(1);
		ck_assert_uint_eq(t.len, 240);
		ck_assert_uint_eq(pass_one(0).len, 0);    /* read at once: ACKed */
	}
	ck_assert_uint_eq(w->ncaptured, 0);
}
END_TEST

/* Full segments leave while corked; only the partial tail waits. */
START_TEST(cork_lets_full_segments_go)
{
	open_pair();
	static uint8_t buf[1460 * 2 + 100];
	tcp_set_cork(cli, true);
	ck_assert_int_eq(tcp_write(cli, buf, sizeof(buf), 0), (int)sizeof(buf));
	ck_assert_uint_eq(w->ncaptured, 2);
	struct th_tcp t;
	ck_assert(th_parse(w->captured[1], &t));
	ck_assert_uint_eq(t.len, 1460);
	th_capture_clear(w);
	tcp_set_cork(cli, false);                         /* Minshall: no small segment out */
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert(th_parse(w->captured[0], &t));
	ck_assert_uint_eq(t.len, 100);
	th_capture_clear(w);
}
END_TEST

/* Linux's ceiling: corked data with nothing in flight leaves after 200 ms
 * even if the application never uncorks; the cork stays on. */
START_TEST(cork_ceiling_sends_after_200_ms)
{
	open_pair();
	const struct tcp_counters *c0 = tcp_ctx_counters(w->side[0].tcp);
	tcp_set_cork(cli, true);
	ck_assert_int_eq(tcp_write(cli, "0123456789", 10, 0), 10);
	ck_assert_uint_eq(w->ncaptured, 0);
	uint64_t due = w->now + TCP_CORK_CEILING_MS;
	w->now += 190;
	stack_timer_tick(w->side[0].st, w->now);
	ck_assert_uint_eq(w->ncaptured, 0);
	/* the tick's scan kept the ceiling as a deadline: a caller sleeping
	 * until the next deadline wakes for it */
	ck_assert_uint_le(tcp_ctx_next_deadline_ms(w->side[0].tcp), due);
	w->now += 20;
	stack_timer_tick(w->side[0].st, w->now);
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert_uint_eq(c0->tx_cork_ceiling, 1);
	struct th_tcp t = pass_one(1);
	ck_assert_uint_eq(t.len, 10);
	ck_assert_uint_eq(pass_one(0).len, 0);
	ck_assert(tcp_corked(cli));
	ck_assert_int_eq(tcp_write(cli, "ab", 2, 0), 2);
	ck_assert_uint_eq(w->ncaptured, 0);
	th_capture_clear(w);
}
END_TEST

/* TCP_NODELAY set on a corked socket pushes what waits (tcp_push), and the
 * cork stays; a FIN sends the corked tail with it. */
START_TEST(push_and_fin_send_corked_data)
{
	open_pair();
	tcp_set_cork(cli, true);
	ck_assert_int_eq(tcp_write(cli, "abc", 3, 0), 3);
	ck_assert_uint_eq(w->ncaptured, 0);
	tcp_push(cli);
	struct th_tcp t = pass_one(1);
	ck_assert_uint_eq(t.len, 3);
	ck_assert_uint_eq(pass_one(0).len, 0);
	ck_assert(tcp_corked(cli));
	ck_assert_int_eq(tcp_write(cli, "defg", 4, 0), 4);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_int_eq(tcp_shutdown(cli, false, true), 0);
	ck_assert_uint_ge(w->ncaptured, 1);
	ck_assert(th_parse(w->captured[0], &t));
	ck_assert_uint_eq(t.len, 4);
	th_capture_clear(w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_pingpong");
	TCase *t = tcase_create("hot_path");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, ack_rides_on_response_nodelay);
	tcase_add_test(t, ack_rides_on_response_nagle);
	tcase_add_test(t, small_write_leaves_at_once_nagle_holds_second);
	tcase_add_test(t, write_more_holds_push_sends);
	tcase_add_test(t, tail_behind_full_segments_not_held);
	tcase_add_test(t, initial_window_ten_segments);
	tcase_add_test(t, full_segments_not_held_by_nagle);
	tcase_add_test(t, cork_sends_header_and_body_as_one_segment);
	tcase_add_test(t, cork_lets_full_segments_go);
	tcase_add_test(t, cork_ceiling_sends_after_200_ms);
	tcase_add_test(t, push_and_fin_send_corked_data);
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
