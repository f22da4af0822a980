/* engine/: timers, pollers, event fds, affinity parsing, the thread. */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "config/cfg_params.h"
#include "engine/engine.h"

static uint64_t fake_now;
static uint64_t fake_clock(void) { return fake_now; }
static const char *no_env(const char *name) { (void)name; return NULL; }

static void setup(void)
{
	cfg_params_load(&g_cfg, no_env);
	fake_now = 1000;
	engine_set_clock(fake_clock);
}

static void at(uint64_t ms) { fake_now = 1000 + ms; engine_tick(); }

/* ---- ordering ---- */
static char fired[64];
static int nfired;
static void record(void *arg) { fired[nfired++] = *(const char *)arg; }

START_TEST(timers_fire_in_deadline_then_arming_order)
{
	struct engine_timer a, b, c, d;
	engine_timer_init(&a); engine_timer_init(&b); engine_timer_init(&c); engine_timer_init(&d);
	ck_assert_int_eq(engine_timer_add(&b, 30, 0, record, "B"), 0);
	ck_assert_int_eq(engine_timer_add(&a, 10, 0, record, "A"), 0);
	ck_assert_int_eq(engine_timer_add(&c, 20, 0, record, "C"), 0);
	ck_assert_int_eq(engine_timer_add(&d, 10, 0, record, "D"), 0);
	at(9);
	ck_assert_int_eq(nfired, 0);
	at(10);
	ck_assert_int_eq(nfired, 2);
	ck_assert(memcmp(fired, "AD", 2) == 0);
	ck_assert(!engine_timer_armed(&a));
	ck_assert(engine_timer_armed(&b));
	fake_now = 1000 + 12;
	ck_assert_int_eq(engine_tick(), 8);    /* C is due at 20 */
	at(35);
	ck_assert_int_eq(nfired, 4);
	ck_assert(memcmp(fired, "ADCB", 4) == 0);
	fake_now = 1000 + 40;
	ck_assert_int_eq(engine_tick(), -1);
}
END_TEST

static int counter;
static void count(void *arg) { (void)arg; counter++; }

START_TEST(periodic_timer_fires_every_period_and_skips_missed_ones)
{
	struct engine_timer t;
	engine_timer_init(&t);
	ck_assert_int_eq(engine_timer_add(&t, 20, 20, count, NULL), 0);
	at(19); ck_assert_int_eq(counter, 0);
	at(20); ck_assert_int_eq(counter, 1);
	at(40); ck_assert_int_eq(counter, 2);
	at(59); ck_assert_int_eq(counter, 2);
	at(60); ck_assert_int_eq(counter, 3);
	at(200); ck_assert_int_eq(counter, 4);    /* late: once, not seven times */
	ck_assert_uint_eq(t.deadline_ms, 1000 + 220);
	ck_assert(engine_timer_cancel(&t));
	ck_assert(!engine_timer_cancel(&t));
	at(400); ck_assert_int_eq(counter, 4);
}
END_TEST

START_TEST(period_below_resolution_is_raised)
{
	g_cfg.timer_resolution_msec = 10;
	struct engine_timer t;
	engine_timer_init(&t);
	ck_assert_int_eq(engine_timer_add(&t, 0, 3, count, NULL), 0);
	ck_assert_uint_eq(t.period_ms, 10);
	at(0); ck_assert_int_eq(counter, 1);
	at(9); ck_assert_int_eq(counter, 1);
	at(10); ck_assert_int_eq(counter, 2);
	g_cfg.tcp_timer_resolution_msec = 5;
	ck_assert_uint_eq(engine_tcp_timer_period_ms(), 10);
	g_cfg.tcp_timer_resolution_msec = 100;
	ck_assert_uint_eq(engine_tcp_timer_period_ms(), 100);
}
END_TEST

/* ---- callbacks changing timers ---- */
static struct engine_timer victim, self_timer;
static void cancel_victim(void *arg) { (void)arg; counter++; ck_assert(engine_timer_cancel(&victim)); }
static void victim_fired(void *arg) { (void)arg; ck_abort_msg("cancelled timer fired"); }
static void cancel_self(void *arg) { (void)arg; counter++; ck_assert(engine_timer_cancel_sync(&self_timer)); }
static void rearm_self(void *arg)
{
	counter++;
	ck_assert_int_eq(engine_timer_rearm(&self_timer, (uint32_t)(uintptr_t)arg, 0), 0);
}

START_TEST(callback_cancels_another_due_timer)
{
	struct engine_timer first;
	engine_timer_init(&first);
	engine_timer_init(&victim);
	engine_timer_add(&first, 10, 0, cancel_victim, NULL);
	engine_timer_add(&victim, 10, 0, victim_fired, NULL);
	at(10);
	ck_assert_int_eq(counter, 1);
	ck_assert(!engine_timer_armed(&victim));
}
END_TEST

START_TEST(periodic_callback_cancels_itself)
{
	engine_timer_init(&self_timer);
	engine_timer_add(&self_timer, 10, 10, cancel_self, NULL);
	at(10); at(20); at(30);
	ck_assert_int_eq(counter, 1);
	ck_assert(!engine_timer_armed(&self_timer));
}
END_TEST

START_TEST(callback_rearms_itself)
{
	engine_timer_init(&self_timer);
	engine_timer_add(&self_timer, 10, 0, rearm_self, (void *)(uintptr_t)5);
	at(10); ck_assert_int_eq(counter, 1);
	at(14); ck_assert_int_eq(counter, 1);
	at(15); ck_assert_int_eq(counter, 2);
	ck_assert(engine_timer_armed(&self_timer));
	/* Re-armed with delay 0: due again, but not within the same tick. */
	engine_timer_add(&self_timer, 0, 0, rearm_self, (void *)(uintptr_t)0);
	ck_assert_int_eq(engine_tick(), 0);
	ck_assert_int_eq(counter, 3);
	engine_tick();
	ck_assert_int_eq(counter, 4);
	engine_timer_cancel(&self_timer);
}
END_TEST

static uint64_t last_deadline;
static int order_errors;
static void check_order(void *arg)
{
	struct engine_timer *t = arg;
	if (t->deadline_ms < last_deadline)
		order_errors++;
	last_deadline = t->deadline_ms;
	counter++;
}

START_TEST(thousands_of_timers_fire_sorted)
{
	enum { N = 5000 };
	struct engine_timer *timers = calloc(N, sizeof(*timers));
	srand(7);
	for (int i = 0; i < N; i++) {
		engine_timer_init(&timers[i]);
		ck_assert_int_eq(engine_timer_add(&timers[i], (uint32_t)(rand() % 1000), 0, check_order, &timers[i]), 0);
	}
	int cancelled = 0;
	for (int i = 0; i < N; i += 3)
		cancelled += engine_timer_cancel(&timers[i]);
	ck_assert_int_eq(cancelled, (N + 2) / 3);
	for (uint64_t ms = 0; ms <= 1000; ms += 7)
		at(ms);
	at(999);   /* the last delays (995..999) */
	ck_assert_int_eq(order_errors, 0);
	ck_assert_int_eq(counter, N - cancelled);
	free(timers);
}
END_TEST

/* ---- pollers ---- */
static int poll_calls[2], poll_budget[2];
static int poller_fn(void *arg, int budget)
{
	int i = (int)(intptr_t)arg;
	poll_calls[i]++;
	poll_budget[i] = budget;
	return 3;
}

START_TEST(pollers_skip_when_the_app_polled_and_get_the_budget)
{
	g_cfg.progress_engine_interval = 10;
	g_cfg.progress_engine_wce_max = 77;
	struct engine_poller p0 = { 0 }, p1 = { 0 };
	ck_assert_int_eq(engine_poller_register(&p0, poller_fn, (void *)0), 0);
	ck_assert_int_eq(engine_poller_register(&p1, poller_fn, (void *)1), 0);
	engine_note_app_poll(&p0);
	at(9);
	ck_assert_int_eq(poll_calls[0] + poll_calls[1], 0);
	at(10);
	ck_assert_int_eq(poll_calls[0], 0);
	ck_assert_int_eq(poll_calls[1], 1);
	ck_assert_int_eq(poll_budget[1], 77);
	ck_assert_int_eq(p1.last_work, 3);
	at(20);    /* p0's note was consumed by the previous tick */
	ck_assert_int_eq(poll_calls[0], 1);
	ck_assert_int_eq(poll_budget[0], 77);
	ck_assert_int_eq(poll_calls[1], 2);
	engine_note_app_poll(&p1);
	at(30);
	ck_assert_int_eq(poll_calls[0], 2);
	ck_assert_int_eq(poll_calls[1], 2);
	engine_poller_unregister(&p0);
	at(40);
	ck_assert_int_eq(poll_calls[0], 2);
	ck_assert_int_eq(poll_calls[1], 3);
	engine_poller_unregister(&p1);
}
END_TEST

START_TEST(interval_zero_disables_pollers)
{
	g_cfg.progress_engine_interval = 0;
	struct engine_poller p0 = { 0 };
	engine_poller_register(&p0, poller_fn, (void *)0);
	for (int ms = 0; ms < 1000; ms += 10)
		at((uint64_t)ms);
	ck_assert_int_eq(poll_calls[0], 0);
}
END_TEST

/* ---- affinity ---- */
START_TEST(affinity_values_parse_like_taskset)
{
	cpu_set_t set;
	ck_assert_int_eq(engine_affinity_parse("-1", &set), 0);
	ck_assert_int_eq(engine_affinity_parse("", &set), 0);
	ck_assert_int_eq(engine_affinity_parse("0x5", &set), 1);
	ck_assert_int_eq(CPU_COUNT(&set), 2);
	ck_assert(CPU_ISSET(0, &set) && CPU_ISSET(2, &set));
	ck_assert_int_eq(engine_affinity_parse("0x00000007", &set), 1);
	ck_assert_int_eq(CPU_COUNT(&set), 3);
	ck_assert_int_eq(engine_affinity_parse(" 0,2,7-9 ", &set), 1);
	ck_assert_int_eq(CPU_COUNT(&set), 5);
	ck_assert(CPU_ISSET(0, &set) && CPU_ISSET(2, &set) && CPU_ISSET(7, &set) && CPU_ISSET(9, &set));
	ck_assert_int_eq(engine_affinity_parse("14", &set), 1);
	ck_assert_int_eq(CPU_COUNT(&set), 1);
	ck_assert(CPU_ISSET(14, &set));
	const char *bad[] = { "0x", "0x0", "0xg", "3-1", "a", "1,", ",1", "1-", "99999", "0x1 2", "-2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(engine_affinity_parse(bad[i], &set) == -1, "accepted '%s'", bad[i]);
		ck_assert_int_eq(CPU_COUNT(&set), 0);
	}
}
END_TEST

/* ---- the real thread ---- */
struct fd_probe {
	int fd;
	uint64_t value;
	uint32_t revents;
	long tid;
	int sigint_blocked;
	int cpus;
	int calls;
};

static void fd_ready(int fd, uint32_t revents, void *arg)
{
	struct fd_probe *probe = arg;
	uint64_t v = 0;
	ck_assert_int_eq(read(fd, &v, sizeof(v)), 8);
	probe->value = v;
	probe->revents = revents;
	probe->tid = syscall(SYS_gettid);
	sigset_t mask;
	pthread_sigmask(SIG_BLOCK, NULL, &mask);
	probe->sigint_blocked = sigismember(&mask, SIGINT) && sigismember(&mask, SIGTERM);
	cpu_set_t cpus;
	sched_getaffinity(0, sizeof(cpus), &cpus);
	probe->cpus = CPU_COUNT(&cpus);
	__atomic_add_fetch(&probe->calls, 1, __ATOMIC_RELEASE);
}

static bool wait_for(const int *flag, int want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= want)
			return true;
		usleep(1000);
	}
	return false;
}

START_TEST(fd_callback_fires_on_the_internal_thread)
{
	engine_set_clock(NULL);
	snprintf(g_cfg.internal_thread_affinity, sizeof(g_cfg.internal_thread_affinity), "0");
	char dir[] = "/tmp/engine-cpuset-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char tasks[64];
	snprintf(tasks, sizeof(tasks), "%s/tasks", dir);
	FILE *f = fopen(tasks, "w");
	fclose(f);
	snprintf(g_cfg.internal_thread_cpuset, sizeof(g_cfg.internal_thread_cpuset), "%s", dir);

	struct fd_probe probe = { .fd = eventfd(0, EFD_NONBLOCK) };
	ck_assert_int_eq(engine_start(), 0);
	ck_assert_int_eq(engine_start(), 0);
	ck_assert(engine_running());
	ck_assert(!engine_on_thread());
	ck_assert_int_eq(engine_fd_add(probe.fd, EPOLLIN, fd_ready, &probe), 0);
	ck_assert_int_eq(engine_fd_add(probe.fd, EPOLLIN, fd_ready, &probe), -EEXIST);
	ck_assert_int_eq(engine_fd_add(-1, EPOLLIN, fd_ready, &probe), -EBADF);
	uint64_t five = 5;
	ck_assert_int_eq(write(probe.fd, &five, 8), 8);
	ck_assert(wait_for(&probe.calls, 1, 2000));
	ck_assert_uint_eq(probe.value, 5);
	ck_assert(probe.revents & EPOLLIN);
	ck_assert_int_ne(probe.tid, syscall(SYS_gettid));
	ck_assert(probe.sigint_blocked);
	ck_assert_int_eq(probe.cpus, 1);

	char path[96], name[32] = "";
	snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", probe.tid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(name, sizeof(name), f));
	fclose(f);
	ck_assert_str_eq(name, "vma-internal\n");
	long written = 0;
	f = fopen(tasks, "r");
	ck_assert_int_eq(fscanf(f, "%ld", &written), 1);
	fclose(f);
	ck_assert_int_eq(written, probe.tid);

	ck_assert_int_eq(engine_fd_del(probe.fd), 0);
	ck_assert_int_eq(engine_fd_del(probe.fd), -ENOENT);
	ck_assert_int_eq(write(probe.fd, &five, 8), 8);
	usleep(50000);
	ck_assert_int_eq(probe.calls, 1);
	close(probe.fd);
	engine_shutdown();
	ck_assert(!engine_running());
	unlink(tasks);
	rmdir(dir);
}
END_TEST

/* Leaves the eventfd readable: a level-triggered watch would report it
 * again and again (VMA_TCP_CTL_THREAD=1 when the lane is locked). */
static void fd_left_ready(int fd, uint32_t revents, void *arg)
{
	(void)fd;
	(void)revents;
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELEASE);
}

START_TEST(oneshot_fd_stays_quiet_until_rearmed)
{
	engine_set_clock(NULL);
	int calls = 0;
	int fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_eq(engine_start(), 0);
	ck_assert_int_eq(engine_fd_rearm(fd), -ENOENT);
	ck_assert_int_eq(engine_fd_add(fd, EPOLLIN | EPOLLONESHOT, fd_left_ready, &calls), 0);
	uint64_t one = 1;
	ck_assert_int_eq(write(fd, &one, 8), 8);
	ck_assert(wait_for(&calls, 1, 2000));
	usleep(50000);
	ck_assert_int_eq(__atomic_load_n(&calls, __ATOMIC_ACQUIRE), 1);
	/* Still readable: re-arming reports it at once, once. */
	ck_assert_int_eq(engine_fd_rearm(fd), 0);
	ck_assert(wait_for(&calls, 2, 2000));
	usleep(50000);
	ck_assert_int_eq(__atomic_load_n(&calls, __ATOMIC_ACQUIRE), 2);
	/* Drained, then re-armed: quiet until the next write. */
	uint64_t v;
	ck_assert_int_eq(read(fd, &v, 8), 8);
	ck_assert_int_eq(engine_fd_rearm(fd), 0);
	usleep(50000);
	ck_assert_int_eq(__atomic_load_n(&calls, __ATOMIC_ACQUIRE), 2);
	ck_assert_int_eq(write(fd, &one, 8), 8);
	ck_assert(wait_for(&calls, 3, 2000));
	ck_assert_int_eq(engine_fd_del(fd), 0);
	ck_assert_int_eq(engine_fd_rearm(fd), -ENOENT);
	close(fd);
	engine_shutdown();
}
END_TEST

START_TEST(bad_affinity_and_missing_cpuset_still_start)
{
	engine_set_clock(NULL);
	snprintf(g_cfg.internal_thread_affinity, sizeof(g_cfg.internal_thread_affinity), "0xzz");
	snprintf(g_cfg.internal_thread_cpuset, sizeof(g_cfg.internal_thread_cpuset), "/nonexistent/cpuset");
	ck_assert_int_eq(engine_start(), 0);
	struct engine_timer t;
	engine_timer_init(&t);
	engine_timer_add(&t, 1, 0, count, NULL);
	ck_assert(wait_for(&counter, 1, 2000));
	engine_shutdown();
}
END_TEST

static uint64_t smoke_start, smoke_fired_at;
static int smoke_done;
static void smoke_fire(void *arg)
{
	(void)arg;
	smoke_fired_at = engine_now_ms();
	__atomic_store_n(&smoke_done, 1, __ATOMIC_RELEASE);
}
static int periodic_count;
static void periodic_tick(void *arg) { (void)arg; __atomic_add_fetch(&periodic_count, 1, __ATOMIC_RELAXED); }

START_TEST(real_time_smoke)
{
	engine_set_clock(NULL);
	ck_assert_int_eq(engine_start(), 0);
	struct engine_timer once, periodic;
	engine_timer_init(&once);
	engine_timer_init(&periodic);
	smoke_start = engine_now_ms();
	/* Added after the thread went to sleep with nothing to do: the add
	 * must wake it. */
	usleep(20000);
	smoke_start = engine_now_ms();
	engine_timer_add(&once, 30, 0, smoke_fire, NULL);
	engine_timer_add(&periodic, 10, 10, periodic_tick, NULL);
	ck_assert(wait_for(&smoke_done, 1, 3000));
	ck_assert_uint_ge(smoke_fired_at - smoke_start, 30);
	ck_assert_uint_le(smoke_fired_at - smoke_start, 1000);
	usleep(200000);
	engine_timer_cancel_sync(&periodic);
	int n = __atomic_load_n(&periodic_count, __ATOMIC_RELAXED);
	ck_assert_int_ge(n, 5);
	ck_assert_int_le(n, 30);
	usleep(30000);
	ck_assert_int_eq(__atomic_load_n(&periodic_count, __ATOMIC_RELAXED), n);
	engine_shutdown();
}
END_TEST

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("timers");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, timers_fire_in_deadline_then_arming_order);
	tcase_add_test(tc, periodic_timer_fires_every_period_and_skips_missed_ones);
	tcase_add_test(tc, period_below_resolution_is_raised);
	tcase_add_test(tc, callback_cancels_another_due_timer);
	tcase_add_test(tc, periodic_callback_cancels_itself);
	tcase_add_test(tc, callback_rearms_itself);
	tcase_add_test(tc, thousands_of_timers_fire_sorted);
	tcase_add_test(tc, pollers_skip_when_the_app_polled_and_get_the_budget);
	tcase_add_test(tc, interval_zero_disables_pollers);
	tcase_add_test(tc, affinity_values_parse_like_taskset);
	tcase_add_test(tc, fd_callback_fires_on_the_internal_thread);
	tcase_add_test(tc, oneshot_fd_stays_quiet_until_rearmed);
	tcase_add_test(tc, bad_affinity_and_missing_cpuset_still_start);
	tcase_add_test(tc, real_time_smoke);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(engine_suite());
	srunner_run_all(runner, CK_NORMAL);
	int failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
