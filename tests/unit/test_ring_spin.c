/* Busy-polling permits (ring/ring_spin.c): at most the limit of threads
 * hold one, a permit goes back before a sleep, a lease its holder stopped
 * renewing (a killed process) is taken over, a process sharing the
 * board (fork) counts against the same limit, and a holder the scheduler
 * switched away from often backs off, again after its backoff while that
 * goes on. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring/ring_spin.h"

static struct ring_spin_board *board;

static void setup(void)
{
	board = mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(board, MAP_FAILED);
	ring_spin_board_set(board, 2);
	/* The tests share one process (CK_NOFORK): no thread state left by
	 * the one before, and no backoff because a loaded machine preempted
	 * us (CI under ASan: one test lost its permit, the next two inherited
	 * the 50 ms backoff). */
	ring_spin_after_fork_child();
	ring_spin_contention_check(false);
}

static void teardown(void)
{
	ring_spin_usage_source(NULL);
	ring_spin_board_set(NULL, -1);
	ring_spin_contention_check(true);
	munmap(board, sizeof(*board));
}

/* A thread that asks for a permit, reports, and holds it (or not) until
 * told to release. */
struct asker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int step;     /* 0 ask, 1 asked, 2 release, 3 released */
	bool granted;
};

static void *asker_main(void *arg)
{
	struct asker *a = arg;
	bool granted = ring_spin_permit();
	pthread_mutex_lock(&a->mu);
	a->granted = granted;
	a->step = 1;
	pthread_cond_broadcast(&a->cv);
	while (a->step != 2)
		pthread_cond_wait(&a->cv, &a->mu);
	ring_spin_release();
	a->step = 3;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static bool asker_start(struct asker *a)
{
	memset(a, 0, sizeof(*a));
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	pthread_create(&a->thread, NULL, asker_main, a);
	pthread_mutex_lock(&a->mu);
	while (a->step != 1)
		pthread_cond_wait(&a->cv, &a->mu);
	bool granted = a->granted;
	pthread_mutex_unlock(&a->mu);
	return granted;
}

static void asker_stop(struct asker *a)
{
	pthread_mutex_lock(&a->mu);
	a->step = 2;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL);
}

START_TEST(no_more_holders_than_the_limit)
{
	struct asker a, b, c;
	ck_assert(asker_start(&a));
	ck_assert(asker_start(&b));
	ck_assert_int_eq(ring_spin_holders(), 2);
	ck_assert(!asker_start(&c));   /* both permits held: sleep instead */
	asker_stop(&c);
	asker_stop(&a);                /* released before its sleep */
	ck_assert_int_eq(ring_spin_holders(), 1);
	ck_assert(asker_start(&c));
	asker_stop(&b);
	asker_stop(&c);
	ck_assert_int_eq(ring_spin_holders(), 0);
}
END_TEST

START_TEST(a_holder_keeps_its_permit_across_calls)
{
	ck_assert(ring_spin_permit());
	for (int i = 0; i < 1000; i++)
		ck_assert(ring_spin_permit());
	ck_assert_int_eq(ring_spin_holders(), 1);
	ring_spin_release();
	ring_spin_release();   /* twice is harmless */
	ck_assert_int_eq(ring_spin_holders(), 0);
}
END_TEST

START_TEST(a_lease_not_renewed_is_taken_over)
{
	/* Two slots held by a process that died: leases that ended. */
	board->slots[0].lease_end_ns = 1;
	board->slots[1].lease_end_ns = 2;
	ck_assert_int_eq(ring_spin_holders(), 0);
	ck_assert(ring_spin_permit());
	ck_assert_int_eq(board->slots[0].pid, getpid());
	ring_spin_release();
	/* Live leases of another process: none for us. */
	board->slots[0].lease_end_ns = UINT64_MAX;
	board->slots[1].lease_end_ns = UINT64_MAX;
	ck_assert(!ring_spin_permit());
	board->slots[0].lease_end_ns = 0;
	board->slots[1].lease_end_ns = 0;
}
END_TEST

START_TEST(a_forked_child_shares_the_limit)
{
	ck_assert(ring_spin_permit());   /* one of two */
	ck_assert_int_eq(board->slots[0].pid, getpid());
	/* Our lease lasts RING_SPIN_LEASE_NS (20 ms) unrenewed: a fork, a
	 * child and a waitpid under ASan on a loaded host can take longer.
	 * Made endless here; the child's view of it is what is tested (a
	 * child that kept our slot instead of claiming its own sees one
	 * holder, not two, and answers 'n'). The endless value also means a
	 * child's release could not zero our slot by mistake: the checks
	 * after waitpid say the child gave its own slot back and ours is
	 * still ours, not that such a release is impossible. */
	board->slots[0].lease_end_ns = UINT64_MAX;
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		ring_spin_after_fork_child();   /* the parent's permit is not ours */
		int ok = ring_spin_permit() && ring_spin_holders() == 2;
		struct asker other;
		ok = ok && !asker_start(&other);   /* the parent holds the other */
		asker_stop(&other);
		ring_spin_release();
		char c = ok ? 'y' : 'n';
		if (write(pipefd[1], &c, 1) != 1)
			_exit(2);
		_exit(0);
	}
	char c = 0;
	ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
	int status;
	waitpid(pid, &status, 0);
	ck_assert_int_eq(c, 'y');
	ck_assert_int_eq(ring_spin_holders(), 1);   /* ours, still */
	ck_assert_int_eq(board->slots[0].pid, getpid());
	ring_spin_release();
	board->slots[0].lease_end_ns = 0;   /* the release's compare failed: our endless lease */
	close(pipefd[0]);
	close(pipefd[1]);
}
END_TEST

/* A usage source for the contention check: all the CPU time there was
 * (the share check passes), and as many involuntary switches as the test says. */
static uint64_t fake_switches;

static int fake_usage(uint64_t *cpu_ns, uint64_t *switches)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	*switches = __atomic_load_n(&fake_switches, __ATOMIC_RELAXED);
	return 0;
}

/* One window (RING_SPIN_WINDOW_NS) passes with `switched` involuntary switches;
 * then enough permit calls for the holder to look at the clock: how many
 * of them were refused. */
static int window_then_ask(uint64_t switched)
{
	usleep(RING_SPIN_WINDOW_NS / 1000 + 1000);
	__atomic_add_fetch(&fake_switches, switched, __ATOMIC_RELAXED);
	int refused = 0;
	for (int i = 0; i < 64; i++)
		refused += !ring_spin_permit();
	return refused;
}

START_TEST(a_holder_preempted_often_stops_spinning)
{
	ring_spin_usage_source(fake_usage);
	ring_spin_contention_check(true);
	ck_assert(ring_spin_permit());
	ck_assert_int_eq(window_then_ask(0), 0);   /* the first window only starts the count */
	/* A holder looks once every 32 calls: refused from that look on. */
	ck_assert_int_ge(window_then_ask(RING_SPIN_SWITCHES_MAX + 1), 32);
	/* It gave its permit back and backs off: the board has no holder. */
	ck_assert_int_eq(ring_spin_holders(), 0);
	ck_assert(!ring_spin_permit());
}
END_TEST

START_TEST(a_holder_preempted_a_few_times_keeps_spinning)
{
	ring_spin_usage_source(fake_usage);
	ring_spin_contention_check(true);
	ck_assert(ring_spin_permit());
	for (int w = 0; w < 3; w++)
		ck_assert_int_eq(window_then_ask(RING_SPIN_SWITCHES_MAX), 0);
	ck_assert_int_eq(ring_spin_holders(), 1);
	ring_spin_release();
}
END_TEST

/* The switches count across the backoff: a thread that yielded into
 * other threads while it slept instead spins again only after a backoff
 * with few of them. */
static int backoff_then_claim(uint64_t switched)
{
	usleep(RING_SPIN_BACKOFF_NS / 1000 + 5000);
	__atomic_add_fetch(&fake_switches, switched, __ATOMIC_RELAXED);
	int refused = !ring_spin_permit();   /* the claim */
	return refused + window_then_ask(0);
}

START_TEST(a_crowded_machine_keeps_a_backed_off_thread_sleeping)
{
	ring_spin_usage_source(fake_usage);
	ring_spin_contention_check(true);
	ck_assert(ring_spin_permit());
	ck_assert_int_eq(window_then_ask(0), 0);
	ck_assert_int_ge(window_then_ask(RING_SPIN_SWITCHES_MAX + 1), 32);
	/* Still crowded during the backoff: the first look sends it back. */
	ck_assert_int_ge(backoff_then_claim(RING_SPIN_SWITCHES_MAX + 1), 32);
	ck_assert_int_eq(ring_spin_holders(), 0);
	/* A quiet backoff: it spins again and keeps its permit. */
	ck_assert_int_eq(backoff_then_claim(RING_SPIN_SWITCHES_MAX), 0);
	ck_assert_int_eq(window_then_ask(0), 0);
	ck_assert_int_eq(ring_spin_holders(), 1);
	ring_spin_release();
}
END_TEST

START_TEST(without_a_board_every_thread_polls)
{
	ring_spin_board_set(NULL, -1);
	struct asker a, b, c;
	ck_assert(asker_start(&a));
	ck_assert(asker_start(&b));
	ck_assert(asker_start(&c));
	asker_stop(&a);
	asker_stop(&b);
	asker_stop(&c);
	ck_assert_int_eq(ring_spin_limit(), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_spin");
	TCase *tc = tcase_create("permits");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, no_more_holders_than_the_limit);
	tcase_add_test(tc, a_holder_keeps_its_permit_across_calls);
	tcase_add_test(tc, a_lease_not_renewed_is_taken_over);
	tcase_add_test(tc, a_forked_child_shares_the_limit);
	tcase_add_test(tc, without_a_board_every_thread_polls);
	tcase_add_test(tc, a_holder_preempted_often_stops_spinning);
	tcase_add_test(tc, a_holder_preempted_a_few_times_keeps_spinning);
	tcase_add_test(tc, a_crowded_machine_keeps_a_backed_off_thread_sleeping);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
