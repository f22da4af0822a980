/* A connection moving between two TCP engines (lanes, tcp_pcb_move): the
 * stream goes on intact in both directions, segments that still reach the
 * old engine are passed on through its stray hook, out-of-order data is
 * reneged, and a SYN reopening a moved connection's TIME_WAIT goes to the
 * engine of the listener. The harness's side 1 keeps receiving every frame
 * in its own stack, so after the move everything for the connection comes
 * to the new engine as a stray, the hardest case for the old one. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stack/tcp_priv.h"
#include "test_tcp_harness.h"

#define PORT_A 40000
#define PORT_B 5001

/* The second engine for side 1 ("the new lane"), sending on side 1's wire. */
struct lane {
	struct stack *st;
	struct tcp_ctx *tcp;
	struct stack_netif nif;
	int stray_arg;   /* only its address matters */
};

struct stray {
	struct tcp_seg_origin from;
	void *dest;
	uint32_t len;
	uint8_t seg[2048];
};

static struct stray strays[4096];
static unsigned nstrays;

static void hook(void *arg, void *dest_arg, const struct tcp_seg_origin *from, const uint8_t *seg, uint32_t len)
{
	(void)arg;
	ck_assert_uint_lt(nstrays, 4096);
	ck_assert_uint_le(len, sizeof(strays[0].seg));
	struct stray *s = &strays[nstrays++];
	s->from = *from;
	s->dest = dest_arg;
	s->len = len;
	memcpy(s->seg, seg, len);
}

static void th_init_default(struct th_wire *w, uint64_t seed);

static void lane_init(struct th_wire *w, struct lane *l)
{
	struct stack_settings ss;
	stack_settings_default(&ss);
	l->st = stack_create(&ss);
	ck_assert_ptr_nonnull(l->st);
	l->nif = w->side[1].nif;
	struct tcp_settings set;
	tcp_settings_default(&set);
	set.timestamps = TCP_TS_ON;
	l->tcp = tcp_ctx_create(l->st, &l->nif, &set);
	ck_assert_ptr_nonnull(l->tcp);
	stack_clock_set(l->st, w->now);
	tcp_ctx_set_stray_hook(w->side[1].tcp, hook, NULL);
	tcp_ctx_set_stray_hook(l->tcp, hook, &l->stray_arg);
	nstrays = 0;
}

/* One millisecond: the wire, then what the old engine passed on fed to the
 * lane (only strays meant for it), then the lane's timers. */
static unsigned lane_step(struct th_wire *w, struct lane *l)
{
	th_step(w);
	unsigned fed = 0;
	for (unsigned i = 0; i < nstrays; i++) {
		if (strays[i].dest != &l->stray_arg)
			continue;
		struct ring_buf *b = ring_buf_heap_alloc("stray", strays[i].len);
		ck_assert_ptr_nonnull(b);
		memcpy(b->data, strays[i].seg, strays[i].len);
		b->len = b->tot_len = strays[i].len;
		tcp_input_passed(l->tcp, &l->nif, b, &strays[i].from);
		fed++;
	}
	nstrays = 0;
	stack_timer_tick(l->st, w->now);
	return fed;
}

static void th_init_default(struct th_wire *w, uint64_t seed)
{
	struct tcp_settings set;
	tcp_settings_default(&set);
	set.timestamps = TCP_TS_ON;   /* as Linux's default */
	th_init(w, &set, &set, seed);
}

static bool established(struct th_wire *w)
{
	return w->side[0].connected && w->side[1].pcb;
}

START_TEST(moved_connection_streams_both_ways)
{
	struct th_wire w;
	struct lane l;
	th_init_default(&w, 7);
	lane_init(&w, &l);
	th_listen(&w.side[1], PORT_B);
	th_connect(&w, 0, PORT_A, PORT_B);
	ck_assert(th_run_until(&w, established, 100));
	w.side[0].tx_goal = 4u << 20;
	w.side[1].tx_goal = 3u << 20;
	th_run(&w, 5);   /* mid-stream, data in flight both ways */
	ck_assert_uint_gt(w.side[1].rx_bytes, 0);
	unsigned before = tcp_ctx_pcb_count(w.side[1].tcp);
	stack_clock_set(l.st, w.now);
	ck_assert_int_eq(tcp_pcb_move(w.side[1].pcb, l.tcp, &l.nif), 0);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w.side[1].tcp), before - 1);
	ck_assert_uint_eq(tcp_ctx_pcb_count(l.tcp), 1);
	ck_assert_uint_eq(tcp_ctx_counters(l.tcp)->curr_estab, 1);
	unsigned fed = 0;
	for (int ms = 0; ms < 20000 && (w.side[0].rx_bytes < w.side[1].tx_goal ||
					 w.side[1].rx_bytes < w.side[0].tx_goal); ms++)
		fed += lane_step(&w, &l);
	ck_assert_uint_eq(w.side[1].rx_bytes, w.side[0].tx_goal);
	ck_assert_uint_eq(w.side[0].rx_bytes, w.side[1].tx_goal);
	ck_assert_uint_eq(w.side[0].rx_bad + w.side[1].rx_bad, 0);
	ck_assert_int_eq(w.side[0].err, 0);
	ck_assert_int_eq(w.side[1].err, 0);
	const struct tcp_counters *old = tcp_ctx_counters(w.side[1].tcp);
	ck_assert_uint_gt(fed, 100);
	ck_assert_uint_eq(old->rx_strays_passed, fed);
	ck_assert_uint_eq(old->moved_out, 1);
	ck_assert_uint_eq(tcp_ctx_counters(l.tcp)->moved_in, 1);
	ck_assert_uint_eq(old->tx_rsts, 0);
	ck_assert_uint_eq(old->rx_no_pcb, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w.side[0].tcp)->rx_rst_accepted, 0);
	stack_destroy(l.st);
	th_fini(&w);
}
END_TEST

/* Our timestamps come from the new engine's clock from now on: never
 * below what the peer already saw (PAWS would drop our segments). */
START_TEST(moved_connection_timestamps_never_go_back)
{
	struct th_wire w;
	struct lane l;
	th_init_default(&w, 3);
	lane_init(&w, &l);
	th_listen(&w.side[1], PORT_B);
	th_connect(&w, 0, PORT_A, PORT_B);
	ck_assert(th_run_until(&w, established, 100));
	ck_assert(w.side[1].pcb->ts_ok);
	w.side[1].tx_goal = 1u << 20;
	th_run(&w, 3);
	stack_clock_set(l.st, w.now);
	ck_assert_int_eq(tcp_pcb_move(w.side[1].pcb, l.tcp, &l.nif), 0);
	for (int ms = 0; ms < 5000 && w.side[0].rx_bytes < w.side[1].tx_goal; ms++)
		lane_step(&w, &l);
	ck_assert_uint_eq(w.side[0].rx_bytes, w.side[1].tx_goal);
	ck_assert_uint_eq(tcp_ctx_counters(w.side[0].tcp)->rx_paws_rejected, 0);
	stack_destroy(l.st);
	th_fini(&w);
}
END_TEST

/* Frames of the old engine's ring cannot follow: a hole's out-of-order
 * data is reneged (never again SACKed) and the peer resends it. */
START_TEST(out_of_order_data_is_reneged_at_the_move)
{
	struct th_wire w;
	struct lane l;
	th_init_default(&w, 11);
	lane_init(&w, &l);
	th_listen(&w.side[1], PORT_B);
	th_connect(&w, 0, PORT_A, PORT_B);
	ck_assert(th_run_until(&w, established, 100));
	w.drop_nth_data[0][0] = 2;   /* a hole early in the stream */
	w.side[0].tx_goal = 1u << 20;
	for (int ms = 0; ms < 50 && !w.side[1].pcb->ooo; ms++)
		th_step(&w);
	ck_assert_ptr_nonnull(w.side[1].pcb->ooo);
	uint64_t ooo = w.side[1].pcb->ooo_count;
	stack_clock_set(l.st, w.now);
	ck_assert_int_eq(tcp_pcb_move(w.side[1].pcb, l.tcp, &l.nif), 0);
	ck_assert_ptr_null(w.side[1].pcb->ooo);
	ck_assert_uint_eq(tcp_ctx_counters(w.side[1].tcp)->rx_ooo_reneged, ooo);
	for (int ms = 0; ms < 20000 && w.side[1].rx_bytes < w.side[0].tx_goal; ms++)
		lane_step(&w, &l);
	ck_assert_uint_eq(w.side[1].rx_bytes, w.side[0].tx_goal);
	ck_assert_uint_eq(w.side[1].rx_bad, 0);
	stack_destroy(l.st);
	th_fini(&w);
}
END_TEST

START_TEST(only_synchronized_connections_move)
{
	struct th_wire w;
	struct lane l;
	th_init_default(&w, 5);
	lane_init(&w, &l);
	struct tcp_pcb *lis = th_listen(&w.side[1], PORT_B);
	ck_assert_int_eq(tcp_pcb_move(lis, l.tcp, &l.nif), -EINVAL);
	struct tcp_pcb *c = th_connect(&w, 0, PORT_A, PORT_B);   /* SYN_SENT */
	ck_assert_int_eq(tcp_pcb_move(c, l.tcp, &l.nif), -EINVAL);
	ck_assert(th_run_until(&w, established, 100));
	ck_assert_int_eq(tcp_pcb_move(w.side[1].pcb, w.side[1].tcp, &w.side[1].nif), -EINVAL);
	ck_assert_int_eq(tcp_pcb_move(w.side[1].pcb, NULL, &l.nif), -EINVAL);
	ck_assert_uint_eq(tcp_ctx_pcb_count(l.tcp), 0);
	stack_destroy(l.st);
	th_fini(&w);
}
END_TEST

/* The client's new incarnation of PORT_A -> PORT_B after a TIME_WAIT: a
 * SYN (32-byte header into th) with a seq far above the old one and a
 * newer timestamp, and where it comes from. */
static void reopening_syn(const struct th_wire *w, uint8_t th[32], struct tcp_seg_origin *from)
{
	uint32_t now = (uint32_t)w->now + 100000;
	uint8_t opts[12] = { 1, 1, 8, 10 };
	opts[4] = (uint8_t)(now >> 24); opts[5] = (uint8_t)(now >> 16);
	opts[6] = (uint8_t)(now >> 8); opts[7] = (uint8_t)now;
	memset(th, 0, 32);
	uint16_t sport = htons(PORT_A), dport = htons(PORT_B);
	memcpy(th, &sport, 2);
	memcpy(th + 2, &dport, 2);
	th[4] = 0x12;
	th[12] = (uint8_t)(8 << 4);
	th[13] = TCP_SYN;
	th[14] = 0xff; th[15] = 0xff;
	memcpy(th + 20, opts, 12);
	*from = (struct tcp_seg_origin){ .src = w->side[0].nif.ip, .dst = w->side[1].nif.ip, .ttl = 64, .ifindex = 1 };
	memcpy(from->src_mac, w->side[0].nif.mac, 6);
}

/* Feeds that SYN to engine tcp (which frees what it is fed: a copy). */
static void feed_reopening_syn(const struct th_wire *w, struct tcp_ctx *tcp, const struct stack_netif *nif,
			       uint8_t th[32], struct tcp_seg_origin *from)
{
	reopening_syn(w, th, from);
	struct ring_buf *b = ring_buf_heap_alloc("syn", 64);
	ck_assert_ptr_nonnull(b);
	memcpy(b->data, th, 32);
	b->len = b->tot_len = 32;
	tcp_input_passed(tcp, nif, b, from);
}

/* A pre-fork server's worker closes its copy of the listener at a reload
 * while its connections end in TIME_WAIT; other workers still listen
 * (not in this engine). A SYN reopening one of those tuples ends the
 * TIME_WAIT and is dropped, not reset: its retransmission follows the
 * port's steering to a worker that listens, as Linux's global TIME_WAIT
 * and listener lookup would take it. With a listener here it is taken. */
START_TEST(syn_reopening_time_wait_without_listener_is_dropped)
{
	for (int listening = 0; listening < 2; listening++) {
		struct th_wire w;
		th_init_default(&w, 11);
		struct tcp_pcb *lis = th_listen(&w.side[1], PORT_B);
		struct tcp_pcb *c = th_connect(&w, 0, PORT_A, PORT_B);
		ck_assert(th_run_until(&w, established, 100));
		struct tcp_pcb *srv = w.side[1].pcb;
		ck_assert_int_eq(tcp_close(srv), 0);   /* the server closes first */
		w.side[1].pcb = NULL;
		th_run(&w, 50);
		ck_assert(w.side[0].fin);
		ck_assert_int_eq(tcp_close(c), 0);
		w.side[0].pcb = NULL;
		th_run(&w, 50);
		ck_assert_int_eq(tcp_pcb_state(srv), TCP_TIME_WAIT);
		if (!listening)
			ck_assert_int_eq(tcp_close(lis), 0);
		unsigned pcbs = tcp_ctx_pcb_count(w.side[1].tcp);
		uint64_t rsts = tcp_ctx_counters(w.side[1].tcp)->tx_rsts;
		w.capture = true;
		uint8_t th[32];
		struct tcp_seg_origin from;
		feed_reopening_syn(&w, w.side[1].tcp, &w.side[1].nif, th, &from);
		const struct tcp_counters *cnt = tcp_ctx_counters(w.side[1].tcp);
		ck_assert_uint_eq(cnt->tx_rsts, rsts);
		if (listening) {
			/* the listener's SYN-ACK; the old TIME_WAIT gave way to a half-open child */
			ck_assert_uint_eq(w.ncaptured, 1);
			struct th_tcp seg;
			ck_assert(th_parse(w.captured[0], &seg));
			ck_assert_uint_eq(seg.flags & (TCP_SYN | TCP_ACK | TCP_RST), TCP_SYN | TCP_ACK);
			ck_assert_uint_eq(cnt->rx_syn_listener_gone, 0);
		} else {
			ck_assert_uint_eq(w.ncaptured, 0);   /* nothing answered */
			ck_assert_uint_eq(cnt->rx_syn_listener_gone, 1);
			ck_assert_uint_eq(tcp_ctx_pcb_count(w.side[1].tcp), pcbs - 1);   /* TIME_WAIT over */
		}
		th_fini(&w);
	}
}
END_TEST

/* A share group's member closed its copy of the listener; SYNs the
 * steering brought before it changed are dropped for the given time, not
 * reset (others serve the port). Not ACKs (a handshake this engine never
 * answered: reset), not other ports, not after the time. */
START_TEST(syn_for_a_gone_listener_is_dropped_for_a_while)
{
	struct th_wire w;
	th_init_default(&w, 13);
	struct tcp_pcb *lis = th_listen(&w.side[1], PORT_B);
	ck_assert_int_eq(tcp_close(lis), 0);
	tcp_ctx_listener_gone(w.side[1].tcp, 0, htons(PORT_B), 1000);
	const struct tcp_counters *cnt = tcp_ctx_counters(w.side[1].tcp);
	w.capture = true;
	th_inject(&w, 1, htons(PORT_A), htons(PORT_B), 1000, 0, TCP_SYN, 65535, NULL, 0, NULL, 0);
	th_step(&w);
	ck_assert_uint_eq(cnt->rx_syn_listener_gone, 1);
	ck_assert_uint_eq(cnt->tx_rsts, 0);
	ck_assert_uint_eq(w.ncaptured, 0);
	th_inject(&w, 1, htons(PORT_A), htons(PORT_B), 1001, 777, TCP_ACK, 65535, NULL, 0, NULL, 0);
	th_inject(&w, 1, htons(PORT_A), htons(PORT_B + 1), 1000, 0, TCP_SYN, 65535, NULL, 0, NULL, 0);
	th_step(&w);
	ck_assert_uint_eq(cnt->rx_syn_listener_gone, 1);
	ck_assert_uint_eq(cnt->tx_rsts, 2);
	th_capture_clear(&w);
	th_run(&w, 1000);
	th_inject(&w, 1, htons(PORT_A + 1), htons(PORT_B), 1000, 0, TCP_SYN, 65535, NULL, 0, NULL, 0);
	th_step(&w);
	ck_assert_uint_eq(cnt->rx_syn_listener_gone, 1);
	ck_assert_uint_eq(cnt->tx_rsts, 3);
	ck_assert_uint_eq(w.ncaptured, 1);
	struct th_tcp seg;
	ck_assert(th_parse(w.captured[0], &seg));
	ck_assert(seg.flags & TCP_RST);
	th_fini(&w);
}
END_TEST

/* The server closes first, so its moved connection ends in TIME_WAIT in
 * the new engine, which has no listener: a SYN reopening the tuple goes
 * to whichever engine has the listener (dest NULL), and so do the
 * segments that follow it, instead of being answered with RST. */
START_TEST(syn_reopening_moved_time_wait_goes_to_the_listener)
{
	struct th_wire w;
	struct lane l;
	th_init_default(&w, 9);
	lane_init(&w, &l);
	th_listen(&w.side[1], PORT_B);
	struct tcp_pcb *c = th_connect(&w, 0, PORT_A, PORT_B);
	ck_assert(th_run_until(&w, established, 100));
	struct tcp_pcb *moved = w.side[1].pcb;
	stack_clock_set(l.st, w.now);
	ck_assert_int_eq(tcp_pcb_move(moved, l.tcp, &l.nif), 0);
	ck_assert_int_eq(tcp_close(moved), 0);
	w.side[1].pcb = NULL;
	for (int ms = 0; ms < 50; ms++)
		lane_step(&w, &l);
	ck_assert(w.side[0].fin);
	ck_assert_int_eq(tcp_close(c), 0);
	w.side[0].pcb = NULL;
	for (int ms = 0; ms < 50; ms++)
		lane_step(&w, &l);
	ck_assert_int_eq(tcp_pcb_state(moved), TCP_TIME_WAIT);
	nstrays = 0;
	/* The SYN reaches the lane (its 5-tuple entry still names it). */
	w.capture = true;
	uint8_t th[32];
	struct tcp_seg_origin from;
	feed_reopening_syn(&w, l.tcp, &l.nif, th, &from);
	ck_assert_uint_eq(nstrays, 1);
	ck_assert_ptr_null(strays[0].dest);
	ck_assert_uint_eq(strays[0].len, 32);
	ck_assert_uint_eq(strays[0].seg[13], TCP_SYN);
	ck_assert_uint_eq(tcp_ctx_counters(l.tcp)->tx_rsts, 0);
	ck_assert_uint_eq(w.ncaptured, 0);   /* the lane answered nothing */
	/* The handshake's ACK that follows, still steered to the lane, also
	 * goes to the listener. */
	struct ring_buf *b = ring_buf_heap_alloc("ack", 64);
	ck_assert_ptr_nonnull(b);
	memcpy(b->data, th, 20);
	b->data[12] = 5 << 4;
	b->data[13] = TCP_ACK;
	b->len = b->tot_len = 20;
	tcp_input_passed(l.tcp, &l.nif, b, &from);
	ck_assert_uint_eq(nstrays, 2);
	ck_assert_ptr_null(strays[1].dest);
	ck_assert_uint_eq(tcp_ctx_counters(l.tcp)->tx_rsts, 0);
	ck_assert_uint_eq(w.ncaptured, 0);
	stack_destroy(l.st);
	th_fini(&w);
}
END_TEST

START_TEST(heap_buffer_frees_itself)
{
	struct ring_buf *b = ring_buf_heap_alloc("t", 100);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(b->size, 100);
	ck_assert_uint_eq(b->refcount, 1);
	ck_assert_ptr_eq(b->data, b->head);
	memset(b->data, 0xab, 100);
	ring_buf_ref(b);
	ring_buf_free(b);
	ck_assert_uint_eq(b->refcount, 1);
	ring_buf_free(b);   /* the allocation goes: ASan reports a leak otherwise */
	ck_assert_ptr_null(ring_buf_heap_alloc("t", 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tcp_move");
	TCase *tc = tcase_create("move");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, moved_connection_streams_both_ways);
	tcase_add_test(tc, moved_connection_timestamps_never_go_back);
	tcase_add_test(tc, out_of_order_data_is_reneged_at_the_move);
	tcase_add_test(tc, only_synchronized_connections_move);
	tcase_add_test(tc, syn_reopening_moved_time_wait_goes_to_the_listener);
	tcase_add_test(tc, syn_reopening_time_wait_without_listener_is_dropped);
	tcase_add_test(tc, syn_for_a_gone_listener_is_dropped_for_a_while);
	tcase_add_test(tc, heap_buffer_frees_itself);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
