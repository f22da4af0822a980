/* The look at a lane without its lock (sock_offload_idle_peek) and the
 * timers it must not sleep through. With the documented default
 * VMA_INTERNAL_THREAD_TCP_TIMER_HANDLING=0 application passes run the TCP
 * timers, so a lane is idle only while none is due: every unlock publishes
 * the earliest deadline (timers_due_ms), and the look compares it with the
 * clock (engine_deadline_passed). Before, any lane with such timers counted
 * as busy, and by default no lane was ever skipped. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "config/cfg_params.h"
#include "engine/engine.h"
#include "sock/sock_offload.h"
#include "stack/tcp_priv.h"

static uint64_t fake_ms;
static uint64_t fake_clock(void) { return fake_ms; }

static struct sock_offload lane;
static struct stack *st;

static void setup(void)
{
	cfg_params_load(&g_cfg, NULL);   /* the documented defaults */
	memset(&lane, 0, sizeof(lane));
	lane.nifs = 0;                   /* no ring: only the timers decide */
	lane.lock_mode = 1;
	pthread_spin_init(&lane.lock, PTHREAD_PROCESS_PRIVATE);
	fake_ms = 10000;
	engine_set_clock(fake_clock);
	struct stack_settings ss;
	stack_settings_default(&ss);
	st = stack_create(&ss);
	ck_assert_ptr_nonnull(st);
	struct stack_netif nif = { .ip = 0x0100a8c0, .mtu = 1500 };
	struct tcp_settings set;
	tcp_settings_default(&set);
	lane.tcp = tcp_ctx_create(st, &nif, &set);
	ck_assert_ptr_nonnull(lane.tcp);
}

static void teardown(void)
{
	engine_set_clock(NULL);
	tcp_ctx_destroy(lane.tcp);
	stack_destroy(st);
}

/* An unlock as any lock holder's: it publishes the lane's deadline. */
static void lock_and_unlock(void)
{
	sock_offload_lock(&lane);
	sock_offload_unlock_plain(&lane);
}

START_TEST(default_timer_handling_runs_timers_in_app_passes)
{
	ck_assert_int_eq(g_cfg.internal_thread_tcp_timer_handling, 0);
	ck_assert(!engine_tcp_timer_immediate());
}
END_TEST

START_TEST(idle_until_the_published_deadline)
{
	lane.timers_by_app = true;
	/* Nothing published yet: due at once, so the lane is looked at. */
	ck_assert(!sock_offload_idle_peek(&lane));
	lane.timers_next_ms = fake_ms + 100;   /* the routine scan's grid */
	lock_and_unlock();
	ck_assert_uint_eq(lane.timers_due_ms, fake_ms + 100);
	ck_assert(sock_offload_idle_peek(&lane));
	fake_ms += 99;
	ck_assert(sock_offload_idle_peek(&lane));
	fake_ms += 1;
	ck_assert(!sock_offload_idle_peek(&lane));
}
END_TEST

START_TEST(a_fine_deadline_armed_under_the_lock_is_seen)
{
	lane.timers_by_app = true;
	lane.timers_next_ms = fake_ms + 100;
	sock_offload_lock(&lane);
	/* A delayed ACK armed while the lock is held (as tcp_input would). */
	tcp_deadline(lane.tcp, fake_ms + 40);
	sock_offload_unlock_plain(&lane);
	ck_assert_uint_eq(lane.timers_due_ms, fake_ms + 40);
	fake_ms += 39;
	ck_assert(sock_offload_idle_peek(&lane));
	fake_ms += 1;
	ck_assert(!sock_offload_idle_peek(&lane));
}
END_TEST

START_TEST(internal_thread_timers_never_keep_a_lane_busy)
{
	lane.timers_by_app = false;   /* VMA_INTERNAL_THREAD_TCP_TIMER_HANDLING=1 */
	ck_assert(sock_offload_idle_peek(&lane));
	fake_ms += 1000000;
	ck_assert(sock_offload_idle_peek(&lane));
}
END_TEST

START_TEST(other_work_keeps_a_lane_busy_whatever_the_timers)
{
	lane.timers_by_app = false;
	lane.drain_signalled = true;
	ck_assert(!sock_offload_idle_peek(&lane));
	lane.drain_signalled = false;
	lane.rx_drain_rate_ns = 1000;
	ck_assert(!sock_offload_idle_peek(&lane));
}
END_TEST

/* The real clock: a deadline of now, or 2 ms ahead once reached, has come
 * at once (CLOCK_MONOTONIC_COARSE, read first before, lagged in CI). */
START_TEST(deadline_passed_on_the_real_clock)
{
	engine_set_clock(NULL);
	uint64_t now = engine_now_ms();
	ck_assert(!engine_deadline_passed(UINT64_MAX));
	ck_assert(engine_deadline_passed(now));
	ck_assert(engine_deadline_passed(now - 1000));
	ck_assert(!engine_deadline_passed(now + 60000));
	/* Within a coarse clock's lag (a jiffy or more behind). */
	uint64_t soon = engine_now_ms() + 2;
	while (engine_now_ms() < soon)
		;
	ck_assert(engine_deadline_passed(soon));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sock_idle_peek");
	TCase *tc = tcase_create("idle_peek");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, default_timer_handling_runs_timers_in_app_passes);
	tcase_add_test(tc, idle_until_the_published_deadline);
	tcase_add_test(tc, a_fine_deadline_armed_under_the_lock_is_seen);
	tcase_add_test(tc, internal_thread_timers_never_keep_a_lane_busy);
	tcase_add_test(tc, other_work_keeps_a_lane_busy_whatever_the_timers);
	tcase_add_test(tc, deadline_passed_on_the_real_clock);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
