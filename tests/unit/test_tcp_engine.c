/* TCP engine over the in-memory wire: handshakes, closes, streams under
 * loss, timers and congestion control. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
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
	sa.time_wait_ms = 2000;
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

static bool b_got_all_and_fin(struct th_wire *x)
{
	return x->side[1].rx_bytes == x->side[0].tx_goal && x->side[1].fin;
}

static bool no_pcbs(struct th_wire *x)
{
	return !tcp_ctx_pcb_count(x->side[0].tcp) && !tcp_ctx_pcb_count(x->side[1].tcp);
}

static void open_pair(void)
{
	th_init(w, &sa, &sb, 42);
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_int_eq(tcp_pcb_state(w->side[0].pcb), TCP_ESTABLISHED);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
}

START_TEST(handshake_transfer_close_client_first)
{
	open_pair();
	w->side[0].tx_goal = 100000;
	w->side[1].tx_goal = 50000;
	th_run(w, 200);
	ck_assert_uint_eq(w->side[1].rx_bytes, 100000);
	ck_assert_uint_eq(w->side[0].rx_bytes, 50000);
	ck_assert_uint_eq(w->side[0].rx_bad + w->side[1].rx_bad, 0);
	struct tcp_pcb *a = w->side[0].pcb, *b = w->side[1].pcb;
	ck_assert_int_eq(tcp_close(a), 0);
	th_run(w, 20);
	ck_assert(w->side[1].fin);
	ck_assert_int_eq(tcp_pcb_state(b), TCP_CLOSE_WAIT);
	ck_assert_int_eq(tcp_close(b), 0);
	th_run(w, 20);
	/* A sits in TIME_WAIT (pcb still counted), B is gone; listener remains. */
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 1);
	ck_assert_int_eq(tcp_pcb_state(a), TCP_TIME_WAIT);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);
	th_run(w, 2100);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 0);
}
END_TEST

START_TEST(close_server_first)
{
	open_pair();
	struct tcp_pcb *a = w->side[0].pcb;
	tcp_close(w->side[1].pcb);
	th_run(w, 20);
	ck_assert(w->side[0].fin);
	ck_assert_int_eq(tcp_pcb_state(a), TCP_CLOSE_WAIT);
	tcp_close(a);
	th_run(w, 20);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 0);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 2); /* listener + TIME_WAIT */
	th_run(w, 2100);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);
}
END_TEST

START_TEST(simultaneous_open_and_close)
{
	th_init(w, &sa, &sb, 7);
	struct tcp_pcb *a = th_connect(w, 0, 5000, 6000);
	struct tcp_pcb *b = th_connect(w, 1, 6000, 5000);
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_int_eq(tcp_pcb_state(a), TCP_ESTABLISHED);
	ck_assert_int_eq(tcp_pcb_state(b), TCP_ESTABLISHED);
	w->side[0].tx_goal = 3000;
	th_run(w, 50);
	ck_assert_uint_eq(w->side[1].rx_bytes, 3000);
	tcp_close(a);
	tcp_close(b);
	th_run(w, 2);   /* both FINs cross on the wire */
	ck_assert_int_eq(tcp_pcb_state(a), TCP_CLOSING);
	th_run(w, 20);
	ck_assert_int_eq(tcp_pcb_state(a), TCP_TIME_WAIT);
	ck_assert_int_eq(tcp_pcb_state(b), TCP_TIME_WAIT);
	ck_assert(th_run_until(w, no_pcbs, 2500));
}
END_TEST

static void stream(unsigned loss_ppm, unsigned dup_ppm, unsigned reorder_ppm, uint64_t ms)
{
	open_pair();
	w->drop_ppm = loss_ppm;
	w->dup_ppm = dup_ppm;
	w->reorder_ppm = reorder_ppm;
	w->side[0].tx_goal = 8u << 20;
	w->side[0].close_when_sent = true;
	ck_assert_msg(th_run_until(w, b_got_all_and_fin, ms), "got %llu of %llu",
		      (unsigned long long)w->side[1].rx_bytes, (unsigned long long)w->side[0].tx_goal);
	ck_assert_uint_eq(w->side[1].rx_bytes, 8u << 20);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	tcp_close(w->side[1].pcb);
	w->drop_ppm = w->dup_ppm = w->reorder_ppm = 0;
	th_run(w, 3000);
	/* side 0 only shut down its writing side: after TIME_WAIT its pcb stays
	 * CLOSED (unfindable) until the app closes it, as a Linux socket does */
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 1);
	ck_assert_int_eq(tcp_pcb_state(w->side[0].pcb), TCP_CLOSED);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);   /* the listener */
	tcp_close(w->side[0].pcb);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 0);
}

START_TEST(stream_clean) { stream(0, 0, 0, 60000); }
END_TEST
START_TEST(stream_loss_dup_reorder) { stream(10000, 10000, 20000, 600000); }
END_TEST
START_TEST(stream_loss_5pct) { stream(50000, 0, 0, 1200000); }
END_TEST
START_TEST(stream_cubic_lossy)
{
	sa.cc_algo = sb.cc_algo = TCP_CC_CUBIC;
	stream(10000, 10000, 20000, 600000);
}
END_TEST

START_TEST(rto_backoff_doubles_to_cap_and_resets)
{
	sa.rto_max_ms = 1600;
	open_pair();
	struct tcp_pcb *a = w->side[0].pcb;
	struct tcp_pcb_info in;
	w->drop_all = true;
	w->side[0].tx_goal = 1000;
	th_run(w, 1);
	tcp_pcb_get_info(a, &in);
	uint32_t rto = in.rto_ms;
	ck_assert_uint_eq(rto, 200);   /* rto_min with a ~2 ms RTT */
	/* As Linux: one tail loss probe at PTO, which for a single segment is
	 * 2 * srtt + rto_min (the peer's delayed ACK), bounded by the RTO: so
	 * at the RTO's time, in its place, with no backoff; then the RTO,
	 * counted from the probe that resent the segment, and its doublings */
	uint64_t last = w->side[0].frames_sent, t0 = w->now;
	while (w->side[0].frames_sent == last)
		th_step(w);
	last = w->side[0].frames_sent;
	ck_assert_uint_eq(w->now - t0, 200);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->tx_tail_probes, 1);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->tx_rto_expiries, 0);
	tcp_pcb_get_info(a, &in);
	ck_assert_uint_eq(in.backoff, 0);
	uint64_t expect[] = { 200, 400, 800, 1600, 1600 };
	for (unsigned i = 0; i < 5; i++) {
		uint64_t start = w->now;
		while (w->side[0].frames_sent == last)
			th_step(w);
		last = w->side[0].frames_sent;
		uint64_t gap = w->now - start;
		ck_assert_msg(gap >= expect[i] - 10 && gap <= expect[i] + 11, "retry %u after %llu ms",
			      i, (unsigned long long)gap);
		tcp_pcb_get_info(a, &in);
		ck_assert_uint_eq(in.backoff, i + 1);
	}
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->tx_tail_probes, 1);
	w->drop_all = false;
	th_run(w, 2000);
	tcp_pcb_get_info(a, &in);
	ck_assert_uint_eq(in.backoff, 0);
	ck_assert_uint_eq(w->side[1].rx_bytes, 1000);
}
END_TEST

/* The receiver's last ACK for a flight is lost: nothing else would come
 * back, so without a tail loss probe only the RTO (200 ms, then cwnd 1)
 * would move. The probe at PTO (2*srtt + 2 ms, as Linux, off the 10 ms
 * timer grid) draws the ACK and a D-SACK of the probe: no RTO, cwnd
 * untouched (the probe repaired no loss). */
START_TEST(tail_loss_probe_recovers_lost_last_ack)
{
	open_pair();
	struct tcp_pcb *a = w->side[0].pcb;
	struct tcp_pcb_info in;
	th_run(w, 20);
	th_spend_quickacks(w, 0);
	uint64_t base = w->side[0].tx_bytes;
	tcp_pcb_get_info(a, &in);
	/* one flight of 10 full segments in one write: the receiver, out of
	 * quick-ACK mode, ACKs every second one, so the lost last ACK covers
	 * two and PTO has no delayed-ACK allowance */
	uint32_t goal = 10 * (in.mss - (in.ts_ok ? 12 : 0));
	static uint8_t data[16384];
	ck_assert_uint_le(goal, sizeof(data));
	uint32_t end = in.snd_una + goal, cwnd0 = in.cwnd;
	ck_assert_uint_ge(cwnd0, goal);
	ck_assert_uint_eq(tcp_ctx_next_deadline_ms(w->side[0].tcp), UINT64_MAX);
	w->drop_ack_once[1] = end;
	for (uint32_t i = 0; i < goal; i++)
		data[i] = th_pattern(base + i);
	w->side[0].tx_goal = w->side[0].tx_bytes = base + goal;   /* no pump */
	uint64_t t0 = w->now;
	ck_assert_int_eq(tcp_write(a, data, goal, 0), (int)goal);
	tcp_pcb_get_info(a, &in);
	ck_assert_uint_eq(in.snd_nxt, end);   /* all of it left at once */
	while (w->side[1].rx_bytes < base + goal && w->now < t0 + 100)
		th_step(w);
	uint64_t t_rx = w->now;
	ck_assert_uint_lt(t_rx, t0 + 100);
	/* the engine says when to call it: the probe, well before the RTO */
	uint64_t due = tcp_ctx_next_deadline_ms(w->side[0].tcp);
	ck_assert_uint_gt(due, t_rx - 2);
	ck_assert_uint_le(due, t_rx + 12);
	for (;;) {
		tcp_pcb_get_info(a, &in);
		if (in.snd_una == end || w->now > t_rx + 1000)
			break;
		th_step(w);
	}
	const struct tcp_counters *c = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_eq(in.snd_una, end);
	ck_assert_msg(w->now - t_rx <= 13, "recovered %llu ms after the last ACK was lost",
		      (unsigned long long)(w->now - t_rx));
	ck_assert_uint_eq(c->tx_tail_probes, 1);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	ck_assert_uint_eq(c->tx_fast_retransmits, 0);
	ck_assert_uint_eq(c->tx_retransmits, 1);
	ck_assert_uint_ge(in.cwnd, cwnd0);
	ck_assert_uint_eq(in.backoff, 0);
	ck_assert_uint_eq(w->side[1].rx_bytes, base + goal);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	th_run(w, 300);   /* nothing more: no RTO behind the probe */
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	ck_assert_uint_eq(c->tx_tail_probes, 1);
	ck_assert_uint_eq(tcp_ctx_next_deadline_ms(w->side[0].tcp), UINT64_MAX);
}
END_TEST

START_TEST(fast_retransmit_after_three_dupacks)
{
	sa.sack = sb.sack = false;
	open_pair();
	w->drop_nth_data[0][0] = 30;
	w->side[0].tx_goal = 400000;
	th_run(w, 3000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_eq(w->side[1].rx_bytes, 400000);
	ck_assert_uint_eq(c->tx_fast_retransmits, 1);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	ck_assert_uint_eq(c->tx_retransmits, 1);
}
END_TEST

START_TEST(sack_resends_only_holes)
{
	open_pair();
	w->drop_nth_data[0][0] = 40;
	w->drop_nth_data[0][1] = 44;
	w->drop_nth_data[0][2] = 47;
	w->side[0].tx_goal = 400000;
	th_run(w, 3000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_eq(w->side[1].rx_bytes, 400000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	ck_assert_uint_eq(c->tx_retransmits, 3);
	ck_assert_uint_eq(c->tx_fast_retransmits, 1);
}
END_TEST

static void loss_reduces_cwnd(enum tcp_cc_algo algo, double factor_lo, double factor_hi)
{
	sa.cc_algo = sb.cc_algo = algo;
	open_pair();
	struct tcp_pcb *a = w->side[0].pcb;
	struct tcp_pcb_info in;
	w->side[0].tx_goal = 64u << 20;
	th_run(w, 30);
	tcp_pcb_get_info(a, &in);
	uint32_t before = in.cwnd;
	ck_assert_uint_gt(before, 10 * in.mss);
	long next = (long)w->data_frames[0] + 1;
	w->drop_nth_data[0][0] = next;
	struct tcp_pcb_info prev = in;
	while (!in.in_recovery && w->now < 100000) {
		prev = in;
		th_step(w);
		tcp_pcb_get_info(a, &in);
	}
	ck_assert(in.in_recovery);
	/* NewReno: half the flight size (RFC 5681 eq. 4); Cubic: beta * cwnd */
	double base = algo == TCP_CC_CUBIC ? prev.cwnd : prev.flight;
	double f = (double)in.ssthresh / base;
	ck_assert_msg(f >= factor_lo && f <= factor_hi, "ssthresh/cwnd = %f", f);
	th_run(w, 200);
	tcp_pcb_get_info(a, &in);
	ck_assert(!in.in_recovery);
	uint32_t after_rec = in.cwnd;
	th_run(w, 500);
	tcp_pcb_get_info(a, &in);
	/* Grows again where cwnd limits the sender. Where the peer's window
	 * does (Cubic keeps 0.7 of a cwnd slow start took past the 256 KiB
	 * window), it stays, as Linux's (tcp_is_cwnd_limited). */
	if (after_rec + in.mss <= in.snd_wnd)
		ck_assert_msg(in.cwnd > after_rec, "cwnd %u after recovery %u, below the window %u: must grow",
			      in.cwnd, after_rec, in.snd_wnd);
	else
		ck_assert_msg(in.cwnd == after_rec, "cwnd %u after recovery %u, above the window %u: must stay",
			      in.cwnd, after_rec, in.snd_wnd);
	w->side[0].tx_goal = w->side[0].tx_bytes;
}

/* An application-limited sender (a few small writes per round trip) never
 * fills cwnd, so cwnd stays where it started, as Linux's
 * (tcp_is_cwnd_limited); a bulk sender's grows (loss_reduces_cwnd). Before,
 * slow start added every acknowledged byte: 200 writes of 1000 bytes took
 * cwnd from 10 segments to over 200 KB, a burst the path never carried. */
static void app_limited_keeps_cwnd(enum tcp_cc_algo algo)
{
	sa.cc_algo = sb.cc_algo = algo;
	open_pair();
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[0].pcb, &in);
	uint32_t initial = in.cwnd;
	ck_assert_uint_ge(initial, 2 * in.mss);
	for (int i = 0; i < 200; i++) {
		w->side[0].tx_goal += 1000;
		th_run(w, 5);
	}
	th_run(w, 100);
	ck_assert_uint_eq(w->side[1].rx_bytes, w->side[0].tx_goal);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	tcp_pcb_get_info(w->side[0].pcb, &in);
	ck_assert_msg(in.cwnd == initial, "cwnd %u, started at %u: grew while the application held the sender", in.cwnd,
		      initial);
	/* Then a bulk write: cwnd limits it now, and grows. */
	w->side[0].tx_goal += 4u << 20;
	th_run(w, 200);
	tcp_pcb_get_info(w->side[0].pcb, &in);
	ck_assert_uint_gt(in.cwnd, initial);
}

START_TEST(newreno_app_limited_keeps_cwnd) { app_limited_keeps_cwnd(TCP_CC_NEWRENO); }
END_TEST
START_TEST(cubic_app_limited_keeps_cwnd) { app_limited_keeps_cwnd(TCP_CC_CUBIC); }
END_TEST

/* A cwnd built by a bulk transfer, then an idle spell of many RTOs: the
 * next write starts from the initial window again (Linux's
 * tcp_slow_start_after_idle, on by default), with ssthresh keeping 3/4 of
 * the old cwnd; with the setting off, or under BBR, cwnd stays. */
static void idle_then_write(enum tcp_cc_algo algo, bool restart, uint32_t *cwnd_before, uint32_t *cwnd_after,
			    uint32_t *initial, uint32_t *ssthresh_after)
{
	sa.cc_algo = sb.cc_algo = algo;
	sa.slow_start_after_idle = restart;
	open_pair();
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[0].pcb, &in);
	*initial = in.cwnd;
	w->side[0].tx_goal += 4u << 20;
	th_run(w, 300);
	ck_assert_uint_eq(w->side[1].rx_bytes, w->side[0].tx_goal);
	tcp_pcb_get_info(w->side[0].pcb, &in);
	*cwnd_before = in.cwnd;
	ck_assert_uint_gt(*cwnd_before, 4 * *initial);
	th_run(w, 3000);   /* idle: many RTOs (200 ms at least) */
	w->side[0].tx_goal += 1000;
	th_run(w, 1);
	tcp_pcb_get_info(w->side[0].pcb, &in);
	*cwnd_after = in.cwnd;
	*ssthresh_after = in.ssthresh;
	th_run(w, 100);
	ck_assert_uint_eq(w->side[1].rx_bytes, w->side[0].tx_goal);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}

START_TEST(newreno_restarts_from_the_initial_window_after_idle)
{
	uint32_t before, after, initial, ssthresh;
	idle_then_write(TCP_CC_NEWRENO, true, &before, &after, &initial, &ssthresh);
	ck_assert_msg(after == initial, "cwnd %u after idle (was %u, initial %u)", after, before, initial);
	ck_assert_uint_ge(ssthresh, before / 2 + before / 4);
}
END_TEST

START_TEST(cubic_restarts_from_the_initial_window_after_idle)
{
	uint32_t before, after, initial, ssthresh;
	idle_then_write(TCP_CC_CUBIC, true, &before, &after, &initial, &ssthresh);
	ck_assert_msg(after == initial, "cwnd %u after idle (was %u, initial %u)", after, before, initial);
}
END_TEST

START_TEST(no_restart_after_idle_when_turned_off)
{
	uint32_t before, after, initial, ssthresh;
	idle_then_write(TCP_CC_NEWRENO, false, &before, &after, &initial, &ssthresh);
	ck_assert_msg(after >= before, "cwnd %u after idle, was %u: the setting is off", after, before);
}
END_TEST

START_TEST(bbr_keeps_its_cwnd_after_idle)
{
	uint32_t before, after, initial, ssthresh;
	idle_then_write(TCP_CC_BBR, true, &before, &after, &initial, &ssthresh);
	ck_assert_msg(after > initial, "cwnd %u after idle (was %u, initial %u): BBR has its own model", after,
		      before, initial);
}
END_TEST

START_TEST(newreno_halves) { loss_reduces_cwnd(TCP_CC_NEWRENO, 0.45, 0.55); }
END_TEST
START_TEST(cubic_reduces_to_0_7) { loss_reduces_cwnd(TCP_CC_CUBIC, 0.69, 0.71); }
END_TEST

START_TEST(none_keeps_cwnd_fixed)
{
	sa.cc_algo = sb.cc_algo = TCP_CC_NONE;
	sa.none_cwnd_segments = 20;
	open_pair();
	struct tcp_pcb_info in;
	w->drop_ppm = 20000;
	w->side[0].tx_goal = 2u << 20;
	for (int i = 0; i < 200; i++) {
		th_run(w, 10);
		tcp_pcb_get_info(w->side[0].pcb, &in);
		if (!in.in_recovery)
			ck_assert_uint_eq(in.cwnd, 20 * in.mss);
	}
	w->drop_ppm = 0;
}
END_TEST

START_TEST(zero_window_persist)
{
	sb.rcv_buf = 20000;
	sb.window_scaling = false;
	open_pair();
	w->side[1].hold_recved = true;
	w->side[0].tx_goal = 100000;
	th_run(w, 3000);
	struct tcp_pcb_info dbg;
	tcp_pcb_get_info(w->side[0].pcb, &dbg);
	ck_assert_msg(dbg.snd_wnd == 0, "snd_wnd %u una %u nxt %u flight %u", dbg.snd_wnd, dbg.snd_una, dbg.snd_nxt, dbg.flight);
	ck_assert_uint_eq(w->side[1].rx_bytes, 20000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[0].tcp);
	uint64_t probes = c->tx_persist_probes;
	ck_assert_uint_ge(probes, 3);
	ck_assert_uint_le(probes, 6);       /* backoff: 200+400+800+1600 in 3 s */
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	w->side[1].hold_recved = false;
	tcp_recved(w->side[1].pcb, (uint32_t)w->side[1].held);
	th_run(w, 5000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 100000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

START_TEST(options_negotiated)
{
	sa.timestamps = TCP_TS_ON;
	sb.timestamps = TCP_TS_OFF;
	sb.window_scaling = false;
	open_pair();
	struct tcp_pcb_info ia, ib;
	tcp_pcb_get_info(w->side[0].pcb, &ia);
	tcp_pcb_get_info(w->side[1].pcb, &ib);
	ck_assert(!ia.ts_ok && !ib.ts_ok);
	ck_assert_uint_eq(ia.snd_wscale + ia.rcv_wscale + ib.snd_wscale + ib.rcv_wscale, 0);
	ck_assert(ia.sack_ok && ib.sack_ok);
	ck_assert_uint_eq(ia.mss, 1460);
}
END_TEST

START_TEST(options_both_on)
{
	sa.timestamps = sb.timestamps = TCP_TS_ON;
	sa.rcv_buf = sb.rcv_buf = 1u << 20;
	open_pair();
	struct tcp_pcb_info ia, ib;
	tcp_pcb_get_info(w->side[0].pcb, &ia);
	tcp_pcb_get_info(w->side[1].pcb, &ib);
	ck_assert(ia.ts_ok && ib.ts_ok);
	ck_assert_uint_eq(ia.rcv_wscale, 5);
	ck_assert_uint_eq(ib.snd_wscale, 5);
	ck_assert_uint_eq(ib.rcv_wscale, 5);
	w->side[0].tx_goal = 1u << 20;
	th_run(w, 2000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 1u << 20);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

/* The side that accepted has one RTT sample from the handshake (the
 * SYN-ACK's), with timestamps or without, so a receiver that never sends
 * data resends its FIN at the 200 ms minimum, not the initial 1 s RTO. */
static void accepted_side_samples_the_synack_rtt(enum tcp_ts_mode ts)
{
	sa.timestamps = sb.timestamps = ts;
	th_init(w, &sa, &sb, 42);
	w->delay_ms = 20;
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 500));
	struct tcp_pcb_info ib;
	tcp_pcb_get_info(w->side[1].pcb, &ib);
	ck_assert(ib.ts_ok == (ts == TCP_TS_ON));
	ck_assert_msg(ib.srtt_ms >= 30 && ib.srtt_ms <= 60, "srtt %u ms after a 40 ms handshake RTT", ib.srtt_ms);
	ck_assert_uint_eq(ib.rto_ms, 200);
}

START_TEST(synack_rtt_with_timestamps) { accepted_side_samples_the_synack_rtt(TCP_TS_ON); }
END_TEST

START_TEST(synack_rtt_without_timestamps) { accepted_side_samples_the_synack_rtt(TCP_TS_OFF); }
END_TEST

/* Exit's handoff (tcp_pcb_export_closed): a closed connection whose data
 * and FIN are unacknowledged exports its data without the FIN; once the
 * FIN is acknowledged there is nothing to hand over. The open-connection
 * export refuses a closed one. */
START_TEST(export_closed_until_the_fin_is_acknowledged)
{
	open_pair();
	struct tcp_pcb *a = w->side[0].pcb;
	w->drop_all = true;
	ck_assert_int_eq(tcp_write(a, "0123456789", 10, 0), 10);
	tcp_shutdown(a, true, true);
	th_run(w, 5);
	ck_assert_int_eq(tcp_pcb_state(a), TCP_FIN_WAIT_1);
	struct tcp_pcb_export ex;
	ck_assert_int_eq(tcp_pcb_export(a, &ex), -EINVAL);
	ck_assert_int_eq(tcp_pcb_export_closed(a, &ex), 0);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(a, &in);
	ck_assert_uint_eq(ex.snd_queue_seq, in.snd_una);
	ck_assert_uint_eq(ex.snd_len[0] + ex.snd_len[1], 10);
	ck_assert(!memcmp(ex.snd_data[0], "0123456789", ex.snd_len[0]));
	ck_assert_uint_eq(ex.snd_nxt, in.snd_una + 11);   /* the data and our FIN */
	ck_assert_uint_eq(ex.rcv_nxt, in.rcv_nxt);
	w->drop_all = false;
	th_run(w, 2000);
	ck_assert_int_ne(tcp_pcb_state(a), TCP_FIN_WAIT_1);
	ck_assert_int_eq(tcp_pcb_export_closed(a, &ex), -EINVAL);
}
END_TEST

/* Transmit stamps (tcp_tx_stamp_request): what the tx_stamp callback saw. */
struct stamp_ev { unsigned kind; uint32_t start, end, hdr_len; };
static struct stamp_ev stamps[256];
static unsigned nstamps;

static void record_stamp(void *arg, struct tcp_pcb *pcb, unsigned kind, uint32_t start, uint32_t end,
			 const uint8_t *hdr, uint32_t hdr_len)
{
	(void)arg;
	(void)pcb;
	(void)hdr;
	if (nstamps < 256)
		stamps[nstamps++] = (struct stamp_ev){ kind, start, end, hdr_len };
}

static uint64_t stamp_off;

static void write_pattern(struct tcp_pcb *pcb, uint32_t len)
{
	uint8_t b[2048];
	for (uint32_t i = 0; i < len; i++)
		b[i] = th_pattern(stamp_off + i);
	ck_assert_int_eq(tcp_write(pcb, b, len, TCP_WRITE_MORE), (int)len);
	stamp_off += len;
}

static void stamps_open(void)
{
	open_pair();
	static struct tcp_callbacks cb;
	cb = th_callbacks;
	cb.tx_stamp = record_stamp;
	tcp_set_callbacks(w->side[0].pcb, &cb, &w->side[0]);
	nstamps = 0;
	stamp_off = 0;
}

/* Each stamped write: SCHED, SND when its segment leaves (with the
 * segment's headers), ACK when acknowledged, keyed by its last byte. */
START_TEST(tx_stamps_per_write)
{
	stamps_open();
	struct tcp_pcb *pcb = w->side[0].pcb;
	uint32_t base = tcp_write_seq(pcb);
	ck_assert_uint_eq(base, tcp_snd_una(pcb));
	const unsigned all = TCP_TX_STAMP_SCHED | TCP_TX_STAMP_SND | TCP_TX_STAMP_ACK;
	write_pattern(pcb, 1000);
	ck_assert(tcp_tx_stamp_request(pcb, all, 1000));
	ck_assert_uint_eq(nstamps, 0);   /* nothing left yet */
	tcp_output(pcb);
	ck_assert_uint_eq(nstamps, 2);
	ck_assert_uint_eq(stamps[0].kind, TCP_TX_STAMP_SCHED);
	ck_assert_uint_eq(stamps[1].kind, TCP_TX_STAMP_SND);
	ck_assert_uint_eq(stamps[1].end, base + 1000);
	ck_assert_uint_eq(stamps[1].start, base);
	ck_assert_uint_gt(stamps[1].hdr_len, 53);
	uint8_t peek[1000];
	ck_assert_uint_eq(tcp_sndbuf_peek(pcb, base, 1000, peek), 1000);
	ck_assert_uint_eq(peek[999], th_pattern(999));
	th_run(w, 100);
	ck_assert_uint_eq(nstamps, 3);
	ck_assert_uint_eq(stamps[2].kind, TCP_TX_STAMP_ACK);
	ck_assert_uint_eq(stamps[2].end, base + 1000);
	/* Only ACK asked; a write that spans segments is stamped at its end. */
	write_pattern(pcb, 1500);
	write_pattern(pcb, 1500);
	ck_assert(tcp_tx_stamp_request(pcb, TCP_TX_STAMP_ACK, 3000));
	tcp_output(pcb);
	ck_assert_uint_eq(nstamps, 3);
	th_run(w, 100);
	ck_assert_uint_eq(nstamps, 4);
	ck_assert_uint_eq(stamps[3].kind, TCP_TX_STAMP_ACK);
	ck_assert_uint_eq(stamps[3].end, base + 4000);
	ck_assert_uint_eq(stamps[3].start, base + 1000);
	/* Asked after the byte left: transmit stamps at once, no headers. */
	write_pattern(pcb, 10);
	tcp_output(pcb);
	ck_assert(tcp_tx_stamp_request(pcb, all, 10));
	ck_assert_uint_eq(nstamps, 6);
	ck_assert_uint_eq(stamps[5].kind, TCP_TX_STAMP_SND);
	ck_assert_uint_eq(stamps[5].hdr_len, 0);
	th_run(w, 100);
	ck_assert_uint_eq(nstamps, 7);
	ck_assert_uint_eq(w->side[1].rx_bytes, 4010);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	tcp_abort(pcb);
	tcp_abort(w->side[1].pcb);
	th_run(w, 10);
}
END_TEST

/* More stamped writes unacknowledged than the ring holds: the newest
 * record moves on, so the last write is still stamped; a resent segment
 * is not stamped again. */
START_TEST(tx_stamps_ring_full_and_resend)
{
	stamps_open();
	struct tcp_pcb *pcb = w->side[0].pcb;
	uint32_t base = tcp_write_seq(pcb);
	for (unsigned i = 0; i < TCP_TX_STAMPS_MAX + 6; i++) {
		write_pattern(pcb, 10);
		ck_assert(tcp_tx_stamp_request(pcb, TCP_TX_STAMP_SND | TCP_TX_STAMP_ACK, 10));
	}
	w->drop_all = true;   /* the first flight is lost: the RTO resends it */
	tcp_output(pcb);
	ck_assert_uint_eq(nstamps, TCP_TX_STAMPS_MAX);
	ck_assert_uint_eq(stamps[TCP_TX_STAMPS_MAX - 1].end, base + 10 * (TCP_TX_STAMPS_MAX + 6));
	ck_assert_uint_eq(stamps[TCP_TX_STAMPS_MAX - 2].end, base + 10 * (TCP_TX_STAMPS_MAX - 1));
	th_run(w, 5);
	w->drop_all = false;
	th_run(w, 3000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 10 * (TCP_TX_STAMPS_MAX + 6));
	ck_assert_uint_eq(nstamps, 2 * TCP_TX_STAMPS_MAX);   /* no second SND */
	for (unsigned i = TCP_TX_STAMPS_MAX; i < nstamps; i++)
		ck_assert_uint_eq(stamps[i].kind, TCP_TX_STAMP_ACK);
	tcp_abort(pcb);
	tcp_abort(w->side[1].pcb);
	th_run(w, 10);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_engine");
	TCase *t = tcase_create("engine");
	tcase_set_timeout(t, 600);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, handshake_transfer_close_client_first);
	tcase_add_test(t, newreno_app_limited_keeps_cwnd);
	tcase_add_test(t, newreno_restarts_from_the_initial_window_after_idle);
	tcase_add_test(t, cubic_restarts_from_the_initial_window_after_idle);
	tcase_add_test(t, no_restart_after_idle_when_turned_off);
	tcase_add_test(t, bbr_keeps_its_cwnd_after_idle);
	tcase_add_test(t, cubic_app_limited_keeps_cwnd);
	tcase_add_test(t, close_server_first);
	tcase_add_test(t, simultaneous_open_and_close);
	tcase_add_test(t, stream_clean);
	tcase_add_test(t, stream_loss_dup_reorder);
	tcase_add_test(t, stream_loss_5pct);
	tcase_add_test(t, stream_cubic_lossy);
	tcase_add_test(t, rto_backoff_doubles_to_cap_and_resets);
	tcase_add_test(t, tail_loss_probe_recovers_lost_last_ack);
	tcase_add_test(t, fast_retransmit_after_three_dupacks);
	tcase_add_test(t, sack_resends_only_holes);
	tcase_add_test(t, newreno_halves);
	tcase_add_test(t, cubic_reduces_to_0_7);
	tcase_add_test(t, none_keeps_cwnd_fixed);
	tcase_add_test(t, zero_window_persist);
	tcase_add_test(t, options_negotiated);
	tcase_add_test(t, options_both_on);
	tcase_add_test(t, synack_rtt_with_timestamps);
	tcase_add_test(t, synack_rtt_without_timestamps);
	tcase_add_test(t, export_closed_until_the_fin_is_acknowledged);
	tcase_add_test(t, tx_stamps_per_write);
	tcase_add_test(t, tx_stamps_ring_full_and_resend);
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
