/* poll/ppoll/select/pselect over fake offloaded fds mixed with pipes. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include "test_iomux_fake.h"

static void setup(void)
{
	iomux_test_cfg();
	ck_assert_int_eq(sock_fd_table_init(1024), 0);
}

static void teardown(void)
{
	sock_fd_table_fini();
	sock_obj_flush_retired();
}

static const struct timespec zero_ts = { 0, 0 };

START_TEST(poll_mix_revents_and_count)
{
	struct fake_sock *f = fake_new(), *g = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct pollfd fds[5] = {
		{ .fd = p[0], .events = POLLIN },
		{ .fd = f->base.fd, .events = POLLIN },
		{ .fd = g->base.fd, .events = POLLIN | POLLOUT },
		{ .fd = -1, .events = POLLIN },
		{ .fd = 999, .events = POLLIN },
	};
	ck_assert(iomux_poll_wanted(fds, 5));
	ck_assert(!iomux_poll_wanted(fds, 1));
	fds[4].revents = 1234;
	/* Nothing offloaded ready: the kernel is asked on the first pass. */
	ck_assert_int_eq(iomux_poll(fds, 5, &zero_ts, NULL), 2);
	ck_assert_int_eq(fds[0].revents, 0);
	ck_assert_int_eq(fds[1].revents, 0);
	ck_assert_int_eq(fds[2].revents, POLLOUT);     /* kernel side writable */
	ck_assert_int_eq(fds[3].revents, 0);
	ck_assert_int_eq(fds[4].revents, POLLNVAL);
	fds[4].fd = -1;
	ck_assert_int_eq(write(p[1], "a", 1), 1);
	fake_set_ready(f, EPOLLIN | EPOLLOUT);
	g_cfg.select_skip_os = 0;   /* always look at the kernel too */
	ck_assert_int_eq(iomux_poll(fds, 5, &zero_ts, NULL), 3);
	ck_assert_int_eq(fds[0].revents, POLLIN);
	ck_assert_int_eq(fds[1].revents, POLLIN);   /* RDNORM only when asked, as Linux */
	ck_assert_int_eq(fds[2].revents, POLLOUT);
	/* Error bits are reported even when not asked. */
	fake_set_ready(f, EPOLLERR);
	ck_assert_int_eq(iomux_poll(fds + 1, 1, &zero_ts, NULL), 1);
	ck_assert_int_eq(fds[1].revents, POLLERR);
	close(p[0]);
	close(p[1]);
	fake_close(f);
	fake_close(g);
}
END_TEST

START_TEST(poll_skip_os_defers_kernel_check)
{
	struct fake_sock *f = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "a", 1), 1);
	struct pollfd fds[2] = { { .fd = p[0], .events = POLLIN }, { .fd = f->base.fd, .events = POLLIN } };
	fake_set_ready(f, EPOLLIN);
	g_cfg.select_skip_os = 3;
	int seen_pipe = 0;
	for (int i = 0; i < 3; i++) {
		int n = iomux_poll(fds, 2, &zero_ts, NULL);
		ck_assert_int_ge(n, 1);
		seen_pipe += fds[0].revents == POLLIN;
	}
	ck_assert_int_eq(seen_pipe, 1);   /* once every VMA_SELECT_SKIP_OS calls */
	close(p[0]);
	close(p[1]);
	fake_close(f);
}
END_TEST

struct delayed {
	struct fake_sock *f;
	int ms;
	int how;
	pthread_t target;
};

static void *delayed_run(void *arg)
{
	struct delayed *d = arg;
	struct timespec ts = { .tv_sec = 0, .tv_nsec = d->ms * 1000000L };
	nanosleep(&ts, NULL);
	if (d->how == 0)
		fake_set_ready(d->f, EPOLLIN);
	else if (d->how == 1)
		fake_ring_packet(d->f);
	else
		pthread_kill(d->target, SIGUSR1);
	return NULL;
}

static void on_usr1(int sig) { (void)sig; }

START_TEST(poll_timeouts_and_ring_wakeup)
{
	struct fake_sock *f = fake_new();
	struct pollfd fds[1] = { { .fd = f->base.fd, .events = POLLIN } };
	struct timespec t0, short_ts = { 0, 50 * 1000000L };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(iomux_poll(fds, 1, &short_ts, NULL), 0);
	ck_assert_int_ge(elapsed_ms_since(&t0), 49);
	ck_assert_int_eq(fds[0].revents, 0);
	ck_assert_int_gt(f->wait_prepare_calls, 0);
	struct delayed d = { .f = f, .ms = 60, .how = 1 };
	pthread_t th;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	ck_assert_int_eq(iomux_poll(fds, 1, NULL, NULL), 1);   /* infinite */
	ck_assert_int_eq(fds[0].revents, POLLIN);   /* RDNORM only when asked, as Linux */
	ck_assert_int_ge(elapsed_ms_since(&t0), 50);
	pthread_join(th, NULL);
	/* Kernel-side data of an offloaded fd wakes the sleep as well. */
	fake_set_ready(f, 0);
	ck_assert_int_eq(write(f->peer, "k", 1), 1);
	ck_assert_int_eq(iomux_poll(fds, 1, NULL, NULL), 1);
	ck_assert_int_eq(fds[0].revents, POLLIN);
	fake_close(f);
}
END_TEST

START_TEST(poll_spin_forever_never_sleeps)
{
	g_cfg.select_poll = -1;
	struct fake_sock *f = fake_new();
	struct pollfd fds[1] = { { .fd = f->base.fd, .events = POLLIN } };
	struct timespec t0, short_ts = { 0, 30 * 1000000L };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(iomux_poll(fds, 1, &short_ts, NULL), 0);
	ck_assert_int_ge(elapsed_ms_since(&t0), 29);
	ck_assert_int_eq(f->wait_prepare_calls, 0);
	ck_assert_int_gt(f->progress_calls, 10);
	fake_close(f);
}
END_TEST

/* No busy-polling permit free: one yield before the sleep, as epoll_wait
 * (test_iomux_epoll.c); none with a permit or without polling asked. */
START_TEST(poll_refused_permit_yields_once_before_sleeping)
{
	static struct ring_spin_board board;
	spin_board_use(&board, 0);
	g_cfg.select_poll = -1;
	struct fake_sock *f = fake_new();
	struct pollfd fds[1] = { { .fd = f->base.fd, .events = POLLIN } };
	struct timespec ts = { 0, 30 * 1000000L };
	uint64_t yields = ring_spin_yields();
	ck_assert_int_eq(iomux_poll(fds, 1, &ts, NULL), 0);
	ck_assert_uint_eq(ring_spin_yields() - yields, 1);
	ck_assert_int_ge(f->progress_calls, 2);
	ck_assert_int_gt(f->wait_prepare_calls, 0);
	ck_assert_int_eq(iomux_poll(fds, 1, &zero_ts, NULL), 0);
	g_cfg.select_poll = 0;
	ck_assert_int_eq(iomux_poll(fds, 1, &ts, NULL), 0);
	spin_board_use(&board, 1);
	g_cfg.select_poll = 2000;
	ck_assert_int_eq(iomux_poll(fds, 1, &ts, NULL), 0);
	ck_assert_uint_eq(ring_spin_yields() - yields, 1);
	ring_spin_release();
	spin_board_use(NULL, 0);
	fake_close(f);
}
END_TEST

/* VMA_SELECT_POLL_OS_FORCE: a set of kernel fds alone comes to us (it
 * would go straight to libc otherwise) and is spun on before sleeping. */
START_TEST(os_force_spins_on_kernel_fds_alone)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct pollfd fds[1] = { { .fd = p[0], .events = POLLIN } };
	fd_set r;
	FD_ZERO(&r);
	FD_SET(p[0], &r);
	ck_assert(!iomux_poll_wanted(fds, 1));
	ck_assert(!iomux_select_wanted(p[0] + 1, &r, NULL, NULL));

	g_cfg.select_poll_os_force = 1;
	g_cfg.select_poll = -1;   /* spin until the timeout */
	ck_assert(iomux_poll_wanted(fds, 1));
	ck_assert(iomux_select_wanted(p[0] + 1, &r, NULL, NULL));
	ck_assert(!iomux_poll_wanted(fds, 0));   /* poll(fds, 0, t) is a sleep: the kernel's */

	struct timespec t0, ts = { 0, 60 * 1000000L };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	double cpu0 = thread_cpu_ms();
	ck_assert_int_eq(iomux_poll(fds, 1, &ts, NULL), 0);
	ck_assert_int_ge(elapsed_ms_since(&t0), 59);
	/* Spun, not slept: a sleeping poll uses well under a millisecond,
	 * a spinning one most of the 60 ms even on a loaded machine. */
	ck_assert_msg(thread_cpu_ms() - cpu0 >= 5, "used %.2f ms of CPU", thread_cpu_ms() - cpu0);

	struct late_write lw = { .fd = p[1], .ms = 20 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, late_write_run, &lw), 0);
	ts.tv_sec = 2;
	ck_assert_int_eq(iomux_poll(fds, 1, &ts, NULL), 1);
	ck_assert_int_eq(fds[0].revents, POLLIN);
	pthread_join(th, NULL);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(poll_eintr_and_sigmask)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	struct fake_sock *f = fake_new();
	struct pollfd fds[1] = { { .fd = f->base.fd, .events = POLLIN } };
	struct delayed d = { .f = f, .ms = 50, .how = 2, .target = pthread_self() };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	errno = 0;
	ck_assert_int_eq(iomux_poll(fds, 1, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINTR);
	pthread_join(th, NULL);
	sigset_t block, old, none;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigemptyset(&none);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	pthread_join(th, NULL);
	struct timespec short_ts = { 0, 30 * 1000000L };
	ck_assert_int_eq(iomux_poll(fds, 1, &short_ts, &block), 0);
	ck_assert_int_eq(iomux_poll(fds, 1, NULL, &none), -1);
	ck_assert_int_eq(errno, EINTR);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	fake_close(f);
}
END_TEST

START_TEST(select_sets_counts_and_timeout)
{
	struct fake_sock *f = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	int nfds = (p[1] > f->base.fd ? p[1] : f->base.fd) + 1;
	fd_set r, w, e;
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_ZERO(&e);
	FD_SET(p[0], &r);
	FD_SET(f->base.fd, &r);
	FD_SET(f->base.fd, &e);
	ck_assert(iomux_select_wanted(nfds, &r, &w, &e));
	ck_assert(!iomux_select_wanted(FD_SETSIZE + 1, &r, &w, &e));
	fake_set_ready(f, EPOLLIN);
	g_cfg.select_skip_os = 0;
	ck_assert_int_eq(write(p[1], "a", 1), 1);
	FD_SET(p[1], &w);
	struct timespec left, ts = { 1, 0 };
	ck_assert_int_eq(iomux_select(nfds, &r, &w, &e, &ts, NULL, &left), 3);
	ck_assert(FD_ISSET(p[0], &r));
	ck_assert(FD_ISSET(f->base.fd, &r));
	ck_assert(FD_ISSET(p[1], &w));
	ck_assert(!FD_ISSET(f->base.fd, &e));
	ck_assert_int_eq(left.tv_sec, 0);
	ck_assert_int_gt(left.tv_nsec, 900000000);
	/* Nothing ready: sets cleared, 0, timeout used up. */
	fake_set_ready(f, 0);
	char c;
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	FD_ZERO(&r);
	FD_SET(p[0], &r);
	FD_SET(f->base.fd, &r);
	FD_ZERO(&w);
	struct timespec short_ts = { 0, 20 * 1000000L };
	ck_assert_int_eq(iomux_select(nfds, &r, &w, NULL, &short_ts, NULL, &left), 0);
	ck_assert(!FD_ISSET(p[0], &r));
	ck_assert(!FD_ISSET(f->base.fd, &r));
	ck_assert_int_eq(left.tv_sec, 0);
	ck_assert_int_eq(left.tv_nsec, 0);
	/* A closed fd in a set: EBADF, sets untouched. */
	int dead = dup(p[0]);
	close(dead);
	FD_ZERO(&r);
	FD_SET(f->base.fd, &r);
	FD_SET(dead, &r);
	int n2 = (dead > nfds - 1 ? dead : nfds - 1) + 1;
	ck_assert_int_eq(iomux_select(n2, &r, NULL, NULL, &zero_ts, NULL, NULL), -1);
	ck_assert_int_eq(errno, EBADF);
	ck_assert(FD_ISSET(dead, &r));
	ck_assert_int_eq(iomux_select(-1, &r, NULL, NULL, &zero_ts, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	struct timespec bad = { -1, 0 };
	ck_assert_int_eq(iomux_select(n2, &r, NULL, NULL, &bad, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	close(p[0]);
	close(p[1]);
	fake_close(f);
}
END_TEST

START_TEST(poll_many_fds_beyond_stack_array)
{
	enum { N = 200 };
	struct fake_sock *f = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct pollfd fds[N];
	for (int i = 0; i < N; i++)
		fds[i] = (struct pollfd){ .fd = i % 2 ? p[0] : f->base.fd, .events = POLLIN };
	struct delayed d = { .f = f, .ms = 30, .how = 1 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	ck_assert_int_eq(iomux_poll(fds, N, NULL, NULL), N / 2);
	pthread_join(th, NULL);
	ck_assert_int_eq(fds[0].revents, POLLIN);   /* RDNORM only when asked, as Linux */
	ck_assert_int_eq(fds[1].revents, 0);
	close(p[0]);
	close(p[1]);
	fake_close(f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("iomux_poll");
	TCase *tc = tcase_create("poll");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, poll_mix_revents_and_count);
	tcase_add_test(tc, poll_skip_os_defers_kernel_check);
	tcase_add_test(tc, poll_timeouts_and_ring_wakeup);
	tcase_add_test(tc, poll_spin_forever_never_sleeps);
	tcase_add_test(tc, poll_refused_permit_yields_once_before_sleeping);
	tcase_add_test(tc, os_force_spins_on_kernel_fds_alone);
	tcase_add_test(tc, poll_eintr_and_sigmask);
	tcase_add_test(tc, select_sets_counts_and_timeout);
	tcase_add_test(tc, poll_many_fds_beyond_stack_array);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
