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

static bool connected(struct th_wire *x) { return x->side[0].connected && x->side[1].connected; }
static bool got_all(struct th_wire *x) { return x->side[1].rx_bytes == STREAM_BYTES; }

struct lossy_result { uint64_t ms, rexmit_segs, rtos, fast; };

static struct lossy_result run_lossy(enum tcp_cc_algo algo, uint64_t seed)
{
	struct tcp_settings s;
	struct lossy_result r;

	tcp_settings_default(&s);
	s.timer_resolution_ms = 1;
	s.cc_algo = algo;
	w = calloc(1, sizeof(*w));
	ck_assert_ptr_nonnull(w);
	th_init(w, &s, &s, seed);
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
	w->drop_ppm = w->dup_ppm = 0;
	tcp_abort(w->side[0].pcb);
	tcp_abort(w->side[1].pcb);
	th_run(w, 10);
	th_fini(w);
	free(w);
	printf("%s seed %llu: %llu ms (%.1f MB/s), %llu segments retransmitted (%.2f%% of %u), "
	       "%llu RTOs, %llu recoveries\n", algo == TCP_CC_CUBIC ? "cubic" : "newreno",
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

START_TEST(newreno_lossy_efficient) { check_efficient(TCP_CC_NEWRENO); }
END_TEST
START_TEST(cubic_lossy_efficient) { check_efficient(TCP_CC_CUBIC); }
END_TEST

int main(void)
{
	Suite *su = suite_create("tcp_lossy");
	TCase *t = tcase_create("lossy");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, newreno_lossy_efficient);
	tcase_add_test(t, cubic_lossy_efficient);
	suite_add_tcase(su, t);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
