/* The adaptive doorbell (ring/ring_hold.h): lone sends ring at once, a
 * burst's frames wait at most HOLD_MAX once another send comes, and two
 * tails in a row left held while their sender was away (a thread that ends
 * a burst and then computes or spins on a queue of its own) stop the
 * holding for 1 s, then 2 s, 4 s... so such a sender pays two late tails per
 * stop, not one per burst; a fast sender's odd stranded burst (preempted)
 * changes nothing. Times are made up: the policy reads no clock of its own. */
#include <check.h>
#include <stdint.h>

#include "ring/ring_hold.h"

#define US 1000ull
#define MS 1000000ull
#define S 1000000000ull

static uint64_t fake_now;
static uint64_t fake_clock(void) { return fake_now; }

enum verdict { RING, KEEP };
static uint64_t held_count;

/* A send call at t that queued a frame: rung at once, or kept (and
 * counted as held). */
static enum verdict send_at(struct ring_hold *h, uint64_t t)
{
	fake_now = t;
	uint64_t before = held_count;
	bool ring = ring_hold_send_done(h, t, true, false, &held_count);
	ck_assert_uint_eq(held_count, before + (ring ? 0 : 1));
	return ring ? RING : KEEP;
}

/* The same for a send whose sender has more input waiting (more). */
static enum verdict send_more_at(struct ring_hold *h, uint64_t t)
{
	fake_now = t;
	uint64_t before = held_count;
	bool ring = ring_hold_send_done(h, t, true, true, &held_count);
	ck_assert_uint_eq(held_count, before + (ring ? 0 : 1));
	return ring ? RING : KEEP;
}

/* Whoever rings the doorbell for what is held, at t. */
static void flush_at(struct ring_hold *h, uint64_t t)
{
	fake_now = t;
	ring_hold_flushing(h, fake_clock);
}

START_TEST(lone_sends_ring_and_bursts_wait_within_the_bound)
{
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	ck_assert_int_eq(send_at(&h, t), RING);              /* the first ever */
	ck_assert_int_eq(send_at(&h, t + 100 * US), RING);   /* lone */
	t += 100 * US;
	ck_assert_int_eq(send_at(&h, t + 2 * US), KEEP);     /* a burst */
	ck_assert_int_eq(send_at(&h, t + 4 * US), KEEP);
	/* Sends 8 us apart keep the burst going; the oldest held one may
	 * not wait 50 us. */
	uint64_t u = t + 4 * US;
	enum verdict v;
	do {
		u += 8 * US;
		v = send_at(&h, u);
	} while (v == KEEP && u < t + 200 * US);
	ck_assert_int_eq(v, RING);
	ck_assert_uint_ge(u - (t + 2 * US), RING_HOLD_MAX_NS);
	ck_assert_uint_lt(u - (t + 2 * US), RING_HOLD_MAX_NS + 8 * US);
	flush_at(&h, u);
	/* Nothing queued (a full batch rang in the send): nothing to do. */
	uint64_t before = held_count;
	ck_assert(!ring_hold_send_done(&h, u + 1 * US, false, false, &held_count));
	ck_assert_uint_eq(held_count, before);
	ck_assert_uint_eq(ring_hold_strandings(&h), 0);
}
END_TEST

/* A lone send (long after the previous one) waits when its sender has
 * more input waiting and is quick (one of its last three sends came less
 * than QUICK_GAP after the one before); the replies to it join, 12 us apart
 * (slower than a burst), within HOLD_MAX; the last one (no more input)
 * joins by the burst rule and the sender's next poll flushes all: one
 * doorbell. A sender whose replies come 25 us apart holds none for its
 * input. A hint does not bypass the hold-off that stranded tails started. */
START_TEST(a_send_with_more_input_waits_for_the_replies_to_it)
{
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	ck_assert_int_eq(send_at(&h, t), RING);
	ck_assert_int_eq(send_at(&h, t + 100 * US), RING);
	ck_assert_int_eq(send_more_at(&h, t + 125 * US), RING);   /* 100, then 25 us apart */
	ck_assert_int_eq(send_more_at(&h, t + 150 * US), RING);
	ck_assert_int_eq(send_more_at(&h, t + 175 * US), RING);
	ck_assert_int_eq(send_at(&h, t + 177 * US), KEEP);        /* a burst */
	flush_at(&h, t + 178 * US);
	/* Replies 25 us apart of which each doorbell took 15 (ring_hold_rang):
	 * the sender's own gap is 10 us, quick. */
	{
		struct ring_hold q = { 0 };
		uint64_t u = 20 * S;
		for (int i = 0; i < 4; i++, u += 25 * US) {
			ck_assert_int_eq(send_at(&q, u), RING);
			ring_hold_rang(&q, u + 15 * US);
		}
		ck_assert_int_eq(send_more_at(&q, u), KEEP);
	}
	t += 1 * MS;
	ck_assert_int_eq(send_more_at(&h, t), KEEP);            /* lone, but more */
	ck_assert_int_eq(send_more_at(&h, t + 12 * US), KEEP);  /* a 12 us gap */
	ck_assert_int_eq(send_at(&h, t + 17 * US), KEEP);       /* the last: burst */
	flush_at(&h, t + 18 * US);
	ck_assert_uint_eq(ring_hold_strandings(&h), 0);
	/* After a pair of sends 1 us apart (quick), a hinted send holds and
	 * the oldest held may not wait HOLD_MAX (50 us), whether the next
	 * sends are hinted ones 12 us apart or a burst's 8 us apart. */
	for (int burst = 0; burst < 2; burst++) {
		uint64_t step = burst ? 8 : 12;
		t += 1 * MS;
		ck_assert_int_eq(send_at(&h, t - 2 * US), RING);
		ck_assert_int_eq(send_at(&h, t - 1 * US), KEEP);
		flush_at(&h, t - 1 * US);
		ck_assert_int_eq(send_more_at(&h, t), KEEP);
		uint64_t u = step;
		for (; u < RING_HOLD_MAX_NS / US; u += step)
			ck_assert_int_eq(burst ? send_at(&h, t + u * US) : send_more_at(&h, t + u * US), KEEP);
		ck_assert_int_eq(burst ? send_at(&h, t + u * US) : send_more_at(&h, t + u * US), RING);
		flush_at(&h, t + u * US);
	}
	/* Without the hint the same lone send rings. */
	t += 1 * MS;
	ck_assert_int_eq(send_at(&h, t), RING);
	/* Two tails stranded stop the holding, hinted sends included (a
	 * send whose full batch rang already, 1 us before, makes the gap). */
	for (int i = 0; i < 2; i++) {
		t += 1 * MS;
		ck_assert(!ring_hold_send_done(&h, t - 30 * US, false, false, &held_count));
		ck_assert(!ring_hold_send_done(&h, t - 29 * US, false, false, &held_count));
		ck_assert_int_eq(send_more_at(&h, t), KEEP);
		flush_at(&h, t + 10 * MS);   /* the internal thread's pass */
	}
	ck_assert_uint_eq(ring_hold_strandings(&h), 2);
	t += 20 * MS;
	ck_assert_int_eq(send_more_at(&h, t), RING);
	ck_assert_int_eq(send_more_at(&h, t + 1 * US), RING);
}
END_TEST

START_TEST(a_tail_flushed_by_its_sender_is_no_stranding)
{
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	for (int round = 0; round < 100; round++, t += 1 * MS) {
		ck_assert_int_eq(send_at(&h, t), RING);
		ck_assert_int_eq(send_at(&h, t + 3 * US), KEEP);
		/* Its next receive, poll or sleep flushes at once. */
		flush_at(&h, t + 10 * US);
	}
	ck_assert_uint_eq(ring_hold_strandings(&h), 0);
	ck_assert_int_eq(send_at(&h, t), RING);
	ck_assert_int_eq(send_at(&h, t + 3 * US), KEEP);
}
END_TEST

/* One burst of two whose tail the internal thread finds at t + 10 ms. */
static void stranded_burst(struct ring_hold *h, uint64_t t)
{
	ck_assert_int_eq(send_at(h, t), RING);
	ck_assert_int_eq(send_at(h, t + 3 * US), KEEP);
	flush_at(h, t + 10 * MS);
}

START_TEST(two_tails_the_internal_thread_finds_stop_the_holding)
{
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	stranded_burst(&h, t);
	ck_assert_uint_eq(ring_hold_strandings(&h), 1);
	/* One is not enough: the next burst is held again... */
	t += 20 * MS;
	stranded_burst(&h, t);
	ck_assert_uint_eq(ring_hold_strandings(&h), 2);
	/* ...and its tail, the second in a row, stops the holding for 1 s:
	 * every send rings, bursts included. */
	uint64_t stop = t + 10 * MS, u = stop + 10 * MS;
	ck_assert_int_eq(send_at(&h, u), RING);
	ck_assert_int_eq(send_at(&h, u + 2 * US), RING);
	ck_assert_int_eq(send_at(&h, stop + S - 3 * US), RING);
	ck_assert_int_eq(send_at(&h, stop + S - 1 * US), RING);
	/* Then the holding comes back; two more strandings stop it for 2 s,
	 * two more for 4. */
	t = stop + S + 1 * MS;
	stranded_burst(&h, t);
	t += 20 * MS;
	stranded_burst(&h, t);
	stop = t + 10 * MS;
	ck_assert_int_eq(send_at(&h, stop + 2 * S - 1 * MS), RING);
	ck_assert_int_eq(send_at(&h, stop + 2 * S - 1 * MS + 2 * US), RING);
	t = stop + 2 * S + 1 * MS;
	stranded_burst(&h, t);
	t += 20 * MS;
	stranded_burst(&h, t);
	stop = t + 10 * MS;
	ck_assert_int_eq(send_at(&h, stop + 4 * S - 1 * MS), RING);
	ck_assert_int_eq(send_at(&h, stop + 4 * S - 1 * MS + 2 * US), RING);
	ck_assert_uint_eq(ring_hold_strandings(&h), 6);
}
END_TEST

START_TEST(a_sender_back_after_the_bound_finds_its_tail_stranded)
{
	/* A thread spinning on a queue of its own: a pair of sends, then
	 * nothing of ours for 1 ms; the held second one leaves only with the
	 * next pair's first send. */
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	ck_assert_int_eq(send_at(&h, t), RING);
	ck_assert_int_eq(send_at(&h, t + 2 * US), KEEP);
	ck_assert_int_eq(send_at(&h, t + 1 * MS), RING);   /* finds it stranded */
	flush_at(&h, t + 1 * MS);                          /* the doorbell it rings */
	ck_assert_uint_eq(ring_hold_strandings(&h), 1);
	ck_assert_int_eq(send_at(&h, t + 1 * MS + 2 * US), KEEP);
	ck_assert_int_eq(send_at(&h, t + 2 * MS), RING);   /* the second in a row */
	flush_at(&h, t + 2 * MS);
	ck_assert_uint_eq(ring_hold_strandings(&h), 2);
	/* The next pairs ring both sends at once. */
	for (int i = 2; i < 20; i++) {
		uint64_t p = t + (uint64_t)i * MS;
		ck_assert_int_eq(send_at(&h, p), RING);
		ck_assert_int_eq(send_at(&h, p + 2 * US), RING);
	}
	ck_assert_uint_eq(ring_hold_strandings(&h), 2);
}
END_TEST

START_TEST(a_fast_senders_odd_stranded_burst_changes_nothing)
{
	/* Sends 5 us apart, the sender preempted for 2 ms now and then with a
	 * burst held: each such burst is stranded, but the bursts between
	 * them are flushed in time (age), so the holding goes on. */
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	ck_assert_int_eq(send_at(&h, t), RING);
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < 100; i++) {
			t += 5 * US;
			if (send_at(&h, t) == RING)
				flush_at(&h, t);
		}
		t += 2 * MS;   /* preempted with frames held */
		ck_assert_int_eq(send_at(&h, t), RING);
		flush_at(&h, t);
	}
	ck_assert_uint_eq(ring_hold_strandings(&h), 5);
	ck_assert_int_eq(send_at(&h, t + 5 * US), KEEP);
}
END_TEST

START_TEST(the_hold_off_stops_doubling_at_64_s)
{
	struct ring_hold h = { 0 };
	uint64_t t = 10 * S;
	for (int i = 0; i < 10; i++) {
		/* Past any hold-off: two stranded bursts in a row. */
		t += 100 * S;
		stranded_burst(&h, t);
		t += 20 * MS;
		stranded_burst(&h, t);
	}
	ck_assert_uint_eq(ring_hold_strandings(&h), 20);
	uint64_t stop = t + 10 * MS;
	ck_assert_int_eq(send_at(&h, stop + 64 * S - 1 * MS), RING);
	ck_assert_int_eq(send_at(&h, stop + 64 * S - 1 * MS + 2 * US), RING);
	ck_assert_int_eq(send_at(&h, stop + 64 * S + 1 * MS), RING);
	ck_assert_int_eq(send_at(&h, stop + 64 * S + 1 * MS + 2 * US), KEEP);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_hold");
	TCase *tc = tcase_create("hold");
	tcase_add_test(tc, lone_sends_ring_and_bursts_wait_within_the_bound);
	tcase_add_test(tc, a_tail_flushed_by_its_sender_is_no_stranding);
	tcase_add_test(tc, a_send_with_more_input_waits_for_the_replies_to_it);
	tcase_add_test(tc, two_tails_the_internal_thread_finds_stop_the_holding);
	tcase_add_test(tc, a_sender_back_after_the_bound_finds_its_tail_stranded);
	tcase_add_test(tc, a_fast_senders_odd_stranded_burst_changes_nothing);
	tcase_add_test(tc, the_hold_off_stops_doubling_at_64_s);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
