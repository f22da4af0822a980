/* Loss recovery efficiency: 16 MiB through the in-memory wire dropping 1%
 * and duplicating 1% of frames in both directions (the routed testbed's
 * "impair 1 1"). The receiver reports duplicates with D-SACK as Linux does,
 * so spurious fast retransmits, needless RTOs and resending SACKed data all
 * show up as retransmitted bytes above the ~1% that was really lost. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_tcp_harness.h"

#define STREAM_BYTES (16u << 20)

static struct th_wire *w;

/* Send buffers of the wires start_wire makes: their size and how far
 * auto-tuning may grow them (0: not at all, the stack's default). */
static uint32_t wire_snd_buf, wire_snd_buf_max, wire_rcv_buf;

/* A wire whose both ends run algo on a 1 ms timer. */
static void start_wire(enum tcp_cc_algo algo, uint64_t seed)
{
	struct tcp_settings s;
	tcp_settings_default(&s);
	s.timer_resolution_ms = 1;
	s.cc_algo = algo;
	if (wire_snd_buf)
		s.snd_buf = wire_snd_buf;
	if (wire_rcv_buf)
		s.rcv_buf = wire_rcv_buf;
	s.snd_buf_max = wire_snd_buf_max;
	w = calloc(1, sizeof(*w));
	ck_assert_ptr_nonnull(w);
	th_init(w, &s, &s, seed);
}

/* Both ends aborted on a clean wire, the wire's frames and buffers freed
 * (th_fini asserts none leaked). */
static void end_wire(void)
{
	w->drop_ppm = w->dup_ppm = 0;
	tcp_abort(w->side[0].pcb);
	tcp_abort(w->side[1].pcb);
	/* aborted pcbs are freed: the harness's writer must not touch them
	 * (a test may end with its transfer unfinished) */
	for (int i = 0; i < 2; i++)
		w->side[i].pcb = NULL;
	th_run(w, 20);
	th_fini(w);
	free(w);
	w = NULL;
}

static bool connected(struct th_wire *x) { return x->side[0].connected && x->side[1].connected; }
static bool got_all(struct th_wire *x) { return x->side[1].rx_bytes == STREAM_BYTES; }

struct lossy_result { uint64_t ms, rexmit_segs, rtos, fast; };

static struct lossy_result run_lossy(enum tcp_cc_algo algo, uint64_t seed)
{
	struct lossy_result r;

	start_wire(algo, seed);
	/* 0: frames arrive on the next 1 ms step, a sub-ms path like the
	 * testbed's, where every RTO (rto_min 200 ms) dominates the run time */
	w->delay_ms = getenv("LOSSY_DELAY") ? (unsigned)atoi(getenv("LOSSY_DELAY")) : 0;
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, connected, 100));
	w->drop_ppm = 10000;
	w->dup_ppm = 10000;
	w->side[0].tx_goal = STREAM_BYTES;
	uint64_t t0 = w->now;
	ck_assert_msg(th_run_until(w, got_all, 600000), "got %llu", (unsigned long long)w->side[1].rx_bytes);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[0].tcp);
	r.ms = w->now - t0;
	r.rexmit_segs = c->tx_retransmits;
	r.rtos = c->tx_rto_expiries;
	r.fast = c->tx_fast_retransmits;
	end_wire();
	printf("%s seed %llu: %llu ms (%.1f MB/s), %llu segments retransmitted (%.2f%% of %u), "
	       "%llu RTOs, %llu recoveries\n", algo == TCP_CC_CUBIC ? "cubic" : algo == TCP_CC_BBR ? "bbr" : "newreno",
	       (unsigned long long)seed, (unsigned long long)r.ms, STREAM_BYTES / 1e3 / (double)r.ms,
	       (unsigned long long)r.rexmit_segs, 100.0 * (double)r.rexmit_segs * 1448 / STREAM_BYTES,
	       STREAM_BYTES / 1448, (unsigned long long)r.rtos, (unsigned long long)r.fast);
	return r;
}

static void check_efficient(enum tcp_cc_algo algo)
{
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct lossy_result r = run_lossy(algo, seed);
		/* ~1% of the data frames are really lost: resending much more
		 * than that means spurious or go-back-N retransmissions */
		ck_assert_msg(r.rexmit_segs * 1448 < STREAM_BYTES / 100 * 3,
			      "%llu segments retransmitted", (unsigned long long)r.rexmit_segs);
		/* lost retransmissions (RACK), losses with few segments out and
		 * lost tail ACKs (tail loss probe) are recovered without the
		 * timer (before them: 1-3 RTOs per run and up to 664 ms instead
		 * of 66). As Linux (RFC 8985 section 7), a retransmission lost
		 * when nothing is sent after it (the stream's last recovery)
		 * waits for the RTO: at most one per run, 200 ms more. */
		ck_assert_msg(r.rtos <= 1, "%llu RTOs (seed %llu, %llu ms)", (unsigned long long)r.rtos, (unsigned long long)seed, (unsigned long long)r.ms);
		ck_assert_msg(r.ms < 200 + 250 * r.rtos, "%llu ms", (unsigned long long)r.ms);
	}
}

/* ---- a bottleneck: BBR (VMA_TCP_CC_ALGO=3) against the loss-based ones ----
 * 4000 frame bytes per ms each way (32 Mbit/s) and 5 ms each way: a
 * 1514-byte frame carries 1448 bytes, so the payload can go at 3826 bytes
 * per ms, and one bandwidth-delay product is about 40 KB (28 segments). */
#define LINK_DELAY_MS     5u
static unsigned link_bytes_per_ms = 4000;
#define LINK_PAYLOAD_BPMS (link_bytes_per_ms * 1448.0 / 1514.0)

struct bottleneck_result {
	double goodput_bpms;            /* payload bytes per ms, connect to last byte */
	uint64_t rexmit_segs;
	struct tcp_pcb_info end;        /* the sender at the end */
	uint32_t min_cwnd_late;         /* smallest cwnd after watch_from_ms (bytes) */
	uint32_t max_cwnd_after_min;    /* largest cwnd after that smallest one */
};

static uint64_t bn_goal;
static bool bn_got_all(struct th_wire *x) { return x->side[1].rx_bytes == bn_goal; }

static struct bottleneck_result run_bottleneck(enum tcp_cc_algo algo, uint64_t seed, unsigned loss_ppm,
					       uint64_t bytes, uint64_t watch_from_ms)
{
	struct bottleneck_result r = { 0 };
	start_wire(algo, seed);
	w->delay_ms = LINK_DELAY_MS;
	w->rate_bytes_per_ms = link_bytes_per_ms;
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, connected, 1000));
	w->drop_ppm = w->dup_ppm = loss_ppm;
	bn_goal = bytes;
	w->side[0].tx_goal = bytes;
	uint64_t t0 = w->now;
	r.min_cwnd_late = UINT32_MAX;
	while (!bn_got_all(w) && w->now - t0 < 60000) {
		th_step(w);
		if (getenv("BN_TRACE") && (w->now - t0) % 25 == 0) {
			struct tcp_pcb_info in;
			tcp_pcb_get_info(w->side[0].pcb, &in);
			printf("t %llu cwnd %u flight %u rec %d pacing %llu rate %llu snd_buf %u used %u\n",
			       (unsigned long long)(w->now - t0), in.cwnd, in.flight, in.in_recovery,
			       (unsigned long long)in.pacing_rate, (unsigned long long)in.delivery_rate, in.snd_buf, in.snd_buf_used);
		}
		if (w->now - t0 < watch_from_ms)
			continue;
		struct tcp_pcb_info in;
		tcp_pcb_get_info(w->side[0].pcb, &in);
		if (in.cwnd < r.min_cwnd_late) {
			r.min_cwnd_late = in.cwnd;
			r.max_cwnd_after_min = 0;
		}
		if (in.cwnd > r.max_cwnd_after_min)
			r.max_cwnd_after_min = in.cwnd;
	}
	ck_assert_msg(bn_got_all(w), "got %llu of %llu", (unsigned long long)w->side[1].rx_bytes,
		      (unsigned long long)bytes);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	r.goodput_bpms = (double)bytes / (double)(w->now - t0);
	r.rexmit_segs = tcp_ctx_counters(w->side[0].tcp)->tx_retransmits;
	tcp_pcb_get_info(w->side[0].pcb, &r.end);
	end_wire();
	printf("bottleneck %s loss %u ppm seed %llu: %.0f bytes/ms (%.2f of the link), %llu resent, "
	       "cwnd %u, snd_buf %u, delivery rate %llu B/s, pacing rate %llu B/s, min_rtt %u us, srtt %u us\n",
	       algo == TCP_CC_BBR ? "bbr" : algo == TCP_CC_CUBIC ? "cubic" : "newreno", loss_ppm,
	       (unsigned long long)seed, r.goodput_bpms, r.goodput_bpms / LINK_PAYLOAD_BPMS,
	       (unsigned long long)r.rexmit_segs, r.end.cwnd, r.end.snd_buf, (unsigned long long)r.end.delivery_rate,
	       (unsigned long long)r.end.pacing_rate, r.end.min_rtt_us, r.end.srtt_us);
	return r;
}

/* Random loss is no congestion: BBR keeps the link busy through 1% drops
 * and 1% duplicates each way, where a loss-based sender halves its window
 * at every loss episode and leaves the link idle. */
START_TEST(bbr_keeps_a_lossy_bottleneck_busy)
{
	for (uint64_t seed = 1; seed <= 2; seed++) {
		struct bottleneck_result bbr = run_bottleneck(TCP_CC_BBR, seed, 10000, 8u << 20, UINT64_MAX);
		struct bottleneck_result reno = run_bottleneck(TCP_CC_NEWRENO, seed, 10000, 8u << 20, UINT64_MAX);
		struct bottleneck_result cubic = run_bottleneck(TCP_CC_CUBIC, seed, 10000, 8u << 20, UINT64_MAX);
		ck_assert_msg(bbr.goodput_bpms >= 0.8 * LINK_PAYLOAD_BPMS, "bbr %.0f bytes/ms of %.0f",
			      bbr.goodput_bpms, LINK_PAYLOAD_BPMS);
		ck_assert_msg(bbr.goodput_bpms >= 1.5 * reno.goodput_bpms && bbr.goodput_bpms >= 1.5 * cubic.goodput_bpms,
			      "bbr %.0f, newreno %.0f, cubic %.0f bytes/ms", bbr.goodput_bpms, reno.goodput_bpms,
			      cubic.goodput_bpms);
		/* what it resends is what was lost (about 1%), not more */
		ck_assert_msg(bbr.rexmit_segs * 1448 < (8u << 20) / 100 * 3, "%llu resent",
			      (unsigned long long)bbr.rexmit_segs);
	}
}
END_TEST

/* Without loss the model finds the path: the delivery rate is the link's,
 * the round-trip floor is the propagation delay, and cwnd settles near two
 * bandwidth-delay products instead of filling the bottleneck's queue (the
 * loss-based senders grow until the send buffer stops them). */
START_TEST(bbr_models_the_path)
{
	struct bottleneck_result bbr = run_bottleneck(TCP_CC_BBR, 7, 0, 8u << 20, UINT64_MAX);
	struct bottleneck_result reno = run_bottleneck(TCP_CC_NEWRENO, 7, 0, 8u << 20, UINT64_MAX);
	double link_bps = LINK_PAYLOAD_BPMS * 1000.0;
	ck_assert_msg(bbr.goodput_bpms >= 0.9 * LINK_PAYLOAD_BPMS, "%.0f bytes/ms", bbr.goodput_bpms);
	ck_assert_msg(bbr.end.delivery_rate >= 0.85 * link_bps && bbr.end.delivery_rate <= 1.05 * link_bps,
		      "delivery rate %llu B/s, link %.0f", (unsigned long long)bbr.end.delivery_rate, link_bps);
	/* rate samples are taken for BBR only (they cost a ping-pong) */
	ck_assert_uint_eq(reno.end.delivery_rate, 0);
	/* 2 x 5 ms and a frame's time on the link, on a 1 ms clock */
	ck_assert_msg(bbr.end.min_rtt_us >= 10000 && bbr.end.min_rtt_us <= 13000, "min_rtt %u", bbr.end.min_rtt_us);
	double bdp = link_bps * bbr.end.min_rtt_us / 1e6;
	/* two BDPs, and what the 1 ms clock's bunched ACKs add (aggregation) */
	ck_assert_msg(bbr.end.cwnd >= bdp && bbr.end.cwnd <= 3 * bdp, "cwnd %u, bdp %.0f", bbr.end.cwnd, bdp);
	ck_assert_msg(bbr.end.pacing_rate >= 0.6 * link_bps && bbr.end.pacing_rate <= 1.4 * link_bps,
		      "pacing rate %llu", (unsigned long long)bbr.end.pacing_rate);
	/* the queue it keeps: its round trip stays well under NewReno's */
	ck_assert_msg(bbr.end.srtt_us < reno.end.srtt_us, "srtt bbr %u, newreno %u", bbr.end.srtt_us, reno.end.srtt_us);
}
END_TEST

/* Ten seconds without a lower round trip: PROBE_RTT drops cwnd to four
 * segments for 200 ms and a round, then the window comes back. */
START_TEST(bbr_probes_the_round_trip_every_ten_seconds)
{
	struct bottleneck_result bbr = run_bottleneck(TCP_CC_BBR, 3, 0, 46u << 20, 9000);
	ck_assert_msg(bbr.min_cwnd_late <= 4 * bbr.end.mss, "smallest cwnd after 9 s: %u", bbr.min_cwnd_late);
	ck_assert_msg(bbr.max_cwnd_after_min >= 20 * bbr.end.mss, "cwnd after the probe: %u", bbr.max_cwnd_after_min);
	ck_assert_msg(bbr.goodput_bpms >= 0.85 * LINK_PAYLOAD_BPMS, "%.0f bytes/ms", bbr.goodput_bpms);
}
END_TEST

/* The send buffer grows with cwnd, as Linux's (tcp_wmem[2]), unless the
 * application sized it: on a path whose bandwidth-delay product (20000
 * bytes/ms x 12 ms, about 230 KB) exceeds the 128 KiB the sockets start
 * with, BBR through 1% loss is held back by the buffer, and a hole at its
 * head stops the writer until the repair. */
START_TEST(send_buffer_grows_with_cwnd_unless_set)
{
	link_bytes_per_ms = 20000;
	wire_snd_buf = 128u * 1024;
	wire_rcv_buf = 4u << 20;   /* a receiver's window as Linux's grows it: not the limit here */
	wire_snd_buf_max = 4u << 20;
	struct bottleneck_result grown = run_bottleneck(TCP_CC_BBR, 5, 10000, 16u << 20, UINT64_MAX);
	wire_snd_buf_max = 0;
	struct bottleneck_result fixed = run_bottleneck(TCP_CC_BBR, 5, 10000, 16u << 20, UINT64_MAX);
	double link = LINK_PAYLOAD_BPMS;
	link_bytes_per_ms = 4000;
	wire_snd_buf = wire_rcv_buf = 0;
	ck_assert_uint_eq(fixed.end.snd_buf, 128u * 1024);
	ck_assert_msg(grown.end.snd_buf >= 4 * 128u * 1024 && grown.end.snd_buf <= 4u << 20, "snd_buf %u",
		      grown.end.snd_buf);
	ck_assert_msg(grown.goodput_bpms >= 0.8 * link, "grown: %.0f bytes/ms of %.0f", grown.goodput_bpms, link);
	ck_assert_msg(grown.goodput_bpms >= 1.3 * fixed.goodput_bpms, "grown %.0f, fixed %.0f bytes/ms",
		      grown.goodput_bpms, fixed.goodput_bpms);
}
END_TEST

/* TCP_CONGESTION on a live connection (tcp_set_cc_algo): NewReno to BBR
 * mid-stream keeps cwnd and starts BBR's model, which then carries the
 * lossy link as BBR from the start does; a listener's algorithm goes to
 * its children. */
START_TEST(congestion_control_changes_mid_stream)
{
	start_wire(TCP_CC_NEWRENO, 9);
	w->delay_ms = LINK_DELAY_MS;
	w->rate_bytes_per_ms = link_bytes_per_ms;
	struct tcp_pcb *lis = th_listen(&w->side[1], 80);
	tcp_set_cc_algo(lis, TCP_CC_CUBIC);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, connected, 1000));
	ck_assert_int_eq(tcp_cc_algo_of(w->side[1].pcb), TCP_CC_CUBIC);
	ck_assert_int_eq(tcp_cc_algo_of(w->side[0].pcb), TCP_CC_NEWRENO);
	w->drop_ppm = w->dup_ppm = 10000;
	bn_goal = 16u << 20;
	w->side[0].tx_goal = bn_goal;
	th_run(w, 1000);
	struct tcp_pcb_info before, after;
	tcp_pcb_get_info(w->side[0].pcb, &before);
	ck_assert_uint_eq(before.pacing_rate, 0);
	uint64_t at_switch = w->side[1].rx_bytes;
	tcp_set_cc_algo(w->side[0].pcb, TCP_CC_BBR);
	tcp_pcb_get_info(w->side[0].pcb, &after);
	ck_assert_uint_eq(after.cwnd, before.cwnd);
	ck_assert_int_eq(tcp_cc_algo_of(w->side[0].pcb), TCP_CC_BBR);
	th_run(w, 1000);
	tcp_pcb_get_info(w->side[0].pcb, &after);
	double newreno_bpms = (double)at_switch / 1000.0, bbr_bpms = (double)(w->side[1].rx_bytes - at_switch) / 1000.0;
	printf("switch: newreno %.0f bytes/ms for 1 s, then bbr %.0f (link %.0f)\n", newreno_bpms, bbr_bpms,
	       LINK_PAYLOAD_BPMS);
	ck_assert_uint_gt(after.pacing_rate, 0);
	ck_assert_uint_gt(after.delivery_rate, 0);
	ck_assert_msg(bbr_bpms >= 0.9 * LINK_PAYLOAD_BPMS && bbr_bpms >= 1.2 * newreno_bpms,
		      "newreno %.0f, then bbr %.0f bytes/ms", newreno_bpms, bbr_bpms);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	end_wire();
}
END_TEST

START_TEST(newreno_lossy_efficient) { check_efficient(TCP_CC_NEWRENO); }
END_TEST
START_TEST(cubic_lossy_efficient) { check_efficient(TCP_CC_CUBIC); }
END_TEST
START_TEST(bbr_lossy_efficient) { check_efficient(TCP_CC_BBR); }
END_TEST

int main(void)
{
	Suite *su = suite_create("tcp_lossy");
	TCase *t = tcase_create("lossy");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, newreno_lossy_efficient);
	tcase_add_test(t, cubic_lossy_efficient);
	tcase_add_test(t, bbr_lossy_efficient);
	tcase_add_test(t, bbr_keeps_a_lossy_bottleneck_busy);
	tcase_add_test(t, bbr_models_the_path);
	tcase_add_test(t, bbr_probes_the_round_trip_every_ten_seconds);
	tcase_add_test(t, send_buffer_grows_with_cwnd_unless_set);
	tcase_add_test(t, congestion_control_changes_mid_stream);
	suite_add_tcase(su, t);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
