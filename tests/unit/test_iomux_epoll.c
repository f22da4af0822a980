/* epoll over fake offloaded fds and pipes: trigger modes, merging, ctl
 * errno, timeouts, wakeups, EINTR, several sets, nesting, close. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include "test_iomux_fake.h"
#include "iomux/iomux_internal.h"

static int ep_new(void)
{
	int fd = epoll_create1(EPOLL_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(iomux_epoll_create(fd), 0);
	ck_assert_ptr_nonnull(iomux_epoll_lookup(fd));
	return fd;
}

static void ep_close(int epfd)
{
	sock_obj_retire(sock_fd_take(epfd));
	close(epfd);
}

static int ctl(int epfd, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };
	return iomux_epoll_ctl(iomux_epoll_lookup(epfd), op, fd, &ev);
}

static int wait_ev(int epfd, struct epoll_event *evs, int max, int timeout)
{
	return iomux_epoll_wait(iomux_epoll_lookup(epfd), evs, max, timeout, NULL);
}

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

/* Added while still a kernel fd, offloaded afterwards (epoll_ctl before
 * connect): user-space readiness must reach the set, level and edge, in
 * two sets; a plain kernel fd added alongside is unaffected. */
START_TEST(fd_added_before_offload_is_promoted)
{
	int ep1 = ep_new(), ep2 = ep_new();
	struct fake_sock *f = fake_new();
	f->base.ops = &fake_kernel_ops;
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep1, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	ck_assert_int_eq(ctl(ep2, EPOLL_CTL_ADD, f->base.fd, EPOLLIN | EPOLLOUT | EPOLLET, 2), 0);
	ck_assert_int_eq(ctl(ep1, EPOLL_CTL_ADD, p[0], EPOLLIN, 3), 0);
	/* As a kernel fd: the kernel socket's own readiness (writable). */
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLOUT);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 0);
	/* Notifications before the promotion are the kernel's business. */
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 0);

	__atomic_store_n(&f->ready, 0, __ATOMIC_RELEASE);
	fake_promote(f);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 0);
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 0);
	fake_set_ready(f, EPOLLIN | EPOLLOUT);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLIN);
	ck_assert_uint_eq(evs[0].data.u64, 1);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 1);   /* level: stays */
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLIN | EPOLLOUT);
	ck_assert_uint_eq(evs[0].data.u64, 2);
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 0);   /* edge: once */
	/* A packet found by progress reaches it too (it is on the offl list). */
	fake_ring_packet(f);
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 1);
	/* The plain kernel fd in the same set still reports (f quiet, so
	 * VMA_SELECT_SKIP_OS does not defer the kernel check). */
	__atomic_store_n(&f->ready, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 3);
	fake_close(f);
	ck_assert_int_eq(wait_ev(ep1, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 3);
	ck_assert_int_eq(wait_ev(ep2, evs, 4, 0), 0);
	close(p[0]);
	close(p[1]);
	ep_close(ep1);
	ep_close(ep2);
}
END_TEST

/* An undecided socket in a set that is closed first: the watch goes with
 * the set; a later promotion finds nobody. */
START_TEST(set_closed_before_promotion)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	f->base.ops = &fake_kernel_ops;
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	ck_assert_ptr_nonnull(f->base.watchers);
	ep_close(ep);
	ck_assert_ptr_null(f->base.watchers);
	fake_promote(f);
	fake_set_ready(f, EPOLLIN);
	fake_close(f);
}
END_TEST

START_TEST(level_triggered_stays_until_not_ready)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 77), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_set_ready(f, EPOLLIN);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
		ck_assert_uint_eq(evs[0].events, EPOLLIN);
		ck_assert_uint_eq(evs[0].data.u64, 77);
	}
	fake_set_ready(f, 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

/* "Rx Ready [os/offload]": a call that asked the kernel too (SKIP_OS 0)
 * counts os only when a kernel fd was reported, not when the kernel
 * reported only a ring's wait fd (internal) beside offloaded events. */
START_TEST(os_ready_counts_kernel_fds_only)
{
	g_cfg.select_skip_os = 0;
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	int ep = ep_new();
	struct iomux_epoll *set = (struct iomux_epoll *)iomux_epoll_lookup(ep);
	struct fake_sock *f = fake_new();
	/* Progress reads packets elsewhere: the ring's wait fd stays
	 * signalled, as a ring whose packets another thread took. */
	f->packet_fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_ge(f->packet_fd, 0);
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 2), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 1), 0);   /* a sleep arms the ring fd */
	ck_assert_int_eq(eventfd_write(f->ring_fd, 1), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 1);
	ck_assert_uint_eq(set->stats->c.os_ready, 0);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 2);
	ck_assert_uint_eq(set->stats->c.os_ready, 1);
	fake_close(f);
	ep_close(ep);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(edge_triggered_fires_once_per_rise)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN | EPOLLET, 5), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 5);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_set_ready(f, EPOLLIN);   /* a new datagram: a new edge */
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	/* A packet found by progress() notifies too. */
	fake_ring_packet(f);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(oneshot_disarms_until_mod)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN | EPOLLONESHOT, 9), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	/* Kernel-side data must not fire a disarmed item either. */
	ck_assert_int_eq(write(f->peer, "x", 1), 1);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_MOD, f->base.fd, EPOLLIN | EPOLLONESHOT, 10), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 10);
	ck_assert_uint_eq(evs[0].events, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(mix_of_pipe_and_offloaded_with_maxevents)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new(), *g = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 100), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 200), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, g->base.fd, EPOLLIN, 300), 0);
	ck_assert_int_eq(write(p[1], "a", 1), 1);
	fake_set_ready(f, EPOLLIN);
	fake_set_ready(g, EPOLLIN);
	g_cfg.select_skip_os = 0;   /* look at the kernel on every call */
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 3);
	uint64_t sum = 0;
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(evs[i].events, EPOLLIN);
		sum += evs[i].data.u64;
	}
	ck_assert_uint_eq(sum, 600);
	/* maxevents 1: level-triggered offloaded items take turns. */
	ck_assert_int_eq(wait_ev(ep, evs, 1, 0), 1);
	uint64_t first = evs[0].data.u64;
	ck_assert_int_eq(wait_ev(ep, evs, 1, 0), 1);
	ck_assert_uint_ne(evs[0].data.u64, first);
	/* Only the pipe once the sockets drain. */
	fake_set_ready(f, 0);
	fake_set_ready(g, 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 100);
	close(p[0]);
	close(p[1]);
	fake_close(f);
	fake_close(g);
	ep_close(ep);
}
END_TEST

START_TEST(kernel_side_merges_with_user_side)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN | EPOLLPRI, 1), 0);
	ck_assert_int_eq(write(f->peer, "k", 1), 1);   /* arrives through the kernel */
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLIN);
	fake_set_ready(f, EPOLLIN | EPOLLPRI);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);   /* one event for one fd */
	ck_assert_uint_eq(evs[0].events, EPOLLIN | EPOLLPRI);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(only_asked_events_but_err_hup_always)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	fake_set_ready(f, EPOLLOUT);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 0);
	fake_set_ready(f, EPOLLOUT | EPOLLERR | EPOLLHUP);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLERR | EPOLLHUP);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_MOD, f->base.fd, EPOLLIN | EPOLLOUT | EPOLLRDNORM, 2), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	/* The kernel side (a datagram socketpair) is writable too: same bits. */
	ck_assert_uint_eq(evs[0].events, EPOLLOUT | EPOLLERR | EPOLLHUP);
	fake_set_ready(f, EPOLLIN);
	/* Offloaded readiness alone (VMA_SELECT_SKIP_OS defers the kernel)... */
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLIN | EPOLLRDNORM);
	/* ...then merged with the kernel side's bits. */
	g_cfg.select_skip_os = 0;
	ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].events, EPOLLIN | EPOLLRDNORM | EPOLLOUT);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(ctl_errno_as_linux)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	errno = 0;
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), -1);
	ck_assert_int_eq(errno, EEXIST);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 1), 0);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 1), -1);
	ck_assert_int_eq(errno, EEXIST);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_MOD, p[1], EPOLLOUT, 1), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_DEL, p[1], 0, 0), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, 999, EPOLLIN, 1), -1);
	ck_assert_int_eq(errno, EBADF);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, ep, EPOLLIN, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ctl(ep, 42, p[0], EPOLLIN, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	struct epoll_event evs[2];
	ck_assert_int_eq(wait_ev(ep, evs, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* DEL: the offloaded fd no longer reports, and can be added again. */
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_DEL, f->base.fd, 0, 0), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 0);
	ck_assert_ptr_null(f->base.watchers);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 3), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 3);
	close(p[0]);
	close(p[1]);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(close_removes_from_sets)
{
	int ep = ep_new(), ep2 = ep_new();
	struct fake_sock *f = fake_new();
	int fd = f->base.fd;
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 1), 0);
	ck_assert_int_eq(ctl(ep2, EPOLL_CTL_ADD, fd, EPOLLIN, 2), 0);
	fake_set_ready(f, EPOLLIN);
	fake_close(f);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 0);
	ck_assert_int_eq(wait_ev(ep2, evs, 2, 0), 0);
	/* The number comes back for a new socket: not "already there". */
	struct fake_sock *g = fake_new();
	ck_assert_int_eq(g->base.fd, fd);
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 4), 0);
	fake_set_ready(g, EPOLLIN);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 4);
	/* Closing the epoll fd unlinks it from the socket. */
	ep_close(ep);
	ck_assert_ptr_null(g->base.watchers);
	fake_close(g);
	ep_close(ep2);
}
END_TEST

START_TEST(fd_in_two_sets)
{
	int a = ep_new(), b = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(a, EPOLL_CTL_ADD, f->base.fd, EPOLLIN | EPOLLET, 11), 0);
	ck_assert_int_eq(ctl(b, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 22), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(a, evs, 2, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 11);
	ck_assert_int_eq(wait_ev(b, evs, 2, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 22);
	ck_assert_int_eq(wait_ev(a, evs, 2, 0), 0);   /* ET: consumed */
	ck_assert_int_eq(wait_ev(b, evs, 2, 0), 1);   /* LT: still */
	fake_close(f);
	ep_close(a);
	ep_close(b);
}
END_TEST

START_TEST(nested_epoll_sees_offloaded_readiness)
{
	int inner = ep_new(), outer = ep_new();
	struct fake_sock *f = fake_new();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct epoll_event evs[4];
	ck_assert_int_eq(ctl(inner, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 1), 0);
	ck_assert_int_eq(ctl(inner, EPOLL_CTL_ADD, p[0], EPOLLIN, 2), 0);
	ck_assert_int_eq(ctl(outer, EPOLL_CTL_ADD, inner, EPOLLIN, 50), 0);
	ck_assert_int_eq(wait_ev(outer, evs, 4, 0), 0);
	fake_set_ready(f, EPOLLIN);
	ck_assert_int_eq(wait_ev(outer, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 50);
	ck_assert_uint_eq(evs[0].events, EPOLLIN);
	ck_assert_int_eq(wait_ev(inner, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 1);
	/* Drained: the inner set stops looking readable. */
	fake_set_ready(f, 0);
	ck_assert_int_eq(wait_ev(inner, evs, 4, 0), 0);
	ck_assert_int_eq(wait_ev(outer, evs, 4, 0), 0);
	/* Kernel fds of the inner set propagate as in Linux. */
	ck_assert_int_eq(write(p[1], "z", 1), 1);
	ck_assert_int_eq(wait_ev(outer, evs, 4, 0), 1);
	ck_assert_uint_eq(evs[0].data.u64, 50);
	close(p[0]);
	close(p[1]);
	fake_close(f);
	ep_close(outer);
	ep_close(inner);
}
END_TEST

struct delayed {
	struct fake_sock *f;
	int ms;
	int how;   /* 0 notify, 1 ring packet, 2 signal */
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

START_TEST(timeouts_zero_short_and_woken)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	struct timespec t0;
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 0);
	ck_assert_int_lt(elapsed_ms_since(&t0), 20);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 60), 0);
	long long ms = elapsed_ms_since(&t0);
	ck_assert_int_ge(ms, 59);
	ck_assert_int_lt(ms, 1000);
	ck_assert_int_gt(f->wait_prepare_calls, 0);   /* VMA_SELECT_POLL=0: slept */
	/* Infinite, woken by a notify from another thread. */
	for (int how = 0; how < 2; how++) {
		fake_set_ready(f, 0);
		struct delayed d = { .f = f, .ms = 80, .how = how };
		pthread_t th;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
		ck_assert_int_eq(wait_ev(ep, evs, 2, -1), 1);
		ck_assert_uint_eq(evs[0].data.u64, 8);
		ck_assert_int_ge(elapsed_ms_since(&t0), 70);
		pthread_join(th, NULL);
	}
	fake_close(f);
	ep_close(ep);
}
END_TEST

/* A wake-up written out of the set's lock may land after the drain it was
 * meant for: the wake eventfd is then readable with no wake-up pending.
 * The sleep that reports it must drain it, or every later sleep ends at
 * once and the call spins until its timeout. */
START_TEST(stale_wake_fd_is_drained_by_the_sleep)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	struct iomux_epoll *e = (struct iomux_epoll *)iomux_epoll_lookup(ep);
	ck_assert_int_ge(e->wake_fd, 0);
	ck_assert(!e->wake_signalled);
	uint64_t one = 1;
	ck_assert_int_eq(write(e->wake_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
	unsigned before = f->progress_calls;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 60), 0);
	ck_assert_int_ge(elapsed_ms_since(&t0), 59);
	/* A pass before the sleep, one after the stale wake-up, one at the
	 * end; spinning on a readable fd made thousands. */
	ck_assert_uint_lt(f->progress_calls - before, 10);
	fake_close(f);
	ep_close(ep);
}
END_TEST

/* epoll_wait reads its offloaded sockets in batches of 16 under the set
 * lock: a packet on the last socket of a set of 16, 32 or 40 is found by
 * the polling pass, and a sleep arms every socket's ring, so a packet on
 * the last one wakes the sleeper. */
START_TEST(every_socket_of_a_large_set_progressed_and_armed)
{
	static const int sizes[] = { 16, 32, 40 };
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		int count = sizes[k];
		int ep = ep_new();
		struct fake_sock *f[40];
		for (int i = 0; i < count; i++) {
			f[i] = fake_new();
			ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f[i]->base.fd, EPOLLIN, (uint64_t)i), 0);
		}
		struct fake_sock *last = f[count - 1];
		struct epoll_event evs[4];
		fake_ring_packet(last);
		ck_assert_int_eq(wait_ev(ep, evs, 4, 0), 1);
		ck_assert_uint_eq(evs[0].data.u64, (uint64_t)(count - 1));
		for (int i = 0; i < count; i++)
			ck_assert_int_gt(f[i]->progress_calls, 0);
		fake_set_ready(last, 0);
		struct delayed d = { .f = last, .ms = 50, .how = 1 };
		pthread_t th;
		ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
		ck_assert_int_eq(wait_ev(ep, evs, 4, 5000), 1);
		ck_assert_uint_eq(evs[0].data.u64, (uint64_t)(count - 1));
		pthread_join(th, NULL);
		for (int i = 0; i < count; i++)
			ck_assert_int_gt(f[i]->wait_prepare_calls, 0);
		for (int i = 0; i < count; i++)
			fake_close(f[i]);
		ep_close(ep);
	}
}
END_TEST

/* A ring over several queues waits on an epoll set of its members: that
 * fd cannot be added exclusively (EINVAL), and a sleeper must still wake
 * when a packet lands in a member. */
START_TEST(ring_wait_fd_that_is_an_epoll_set_wakes_a_sleeper)
{
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	int inner = epoll_create1(EPOLL_CLOEXEC);
	ck_assert_int_ge(inner, 0);
	struct epoll_event member = { .events = EPOLLIN, .data.fd = f->ring_fd };
	ck_assert_int_eq(epoll_ctl(inner, EPOLL_CTL_ADD, f->ring_fd, &member), 0);
	f->packet_fd = f->ring_fd;
	f->ring_fd = inner;   /* wait_prepare hands out the set */
	struct epoll_event evs[2];
	struct timespec t0;
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	struct delayed d = { .f = f, .ms = 80, .how = 1 };
	pthread_t th;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 3000), 1);
	ck_assert_uint_eq(evs[0].data.u64, 8);
	long long ms = elapsed_ms_since(&t0);
	ck_assert_int_ge(ms, 70);
	ck_assert_int_lt(ms, 1000);   /* woken by the packet, not the timeout */
	pthread_join(th, NULL);
	fake_close(f);
	ep_close(ep);
}
END_TEST

START_TEST(spin_forever_until_timeout)
{
	g_cfg.select_poll = -1;
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	struct timespec t0;
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 30), 0);
	ck_assert_int_ge(elapsed_ms_since(&t0), 29);
	ck_assert_int_eq(f->wait_prepare_calls, 0);   /* never slept */
	ck_assert_int_gt(f->progress_calls, 10);
	/* A packet on the ring is found by spinning. */
	struct delayed d = { .f = f, .ms = 20, .how = 1 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 2000), 1);
	pthread_join(th, NULL);
	ck_assert_int_eq(f->wait_prepare_calls, 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

/* No busy-polling permit free (more waiting threads than CPUs): a call
 * that would sleep first gives its CPU away once and looks again
 * (ring_spin_yield); a call that does not sleep, one that did not ask to
 * poll, and one that holds a permit do not yield. */
START_TEST(refused_permit_yields_once_before_sleeping)
{
	static struct ring_spin_board board;
	spin_board_use(&board, 0);
	g_cfg.select_poll = -1;
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	uint64_t yields = ring_spin_yields();
	ck_assert_int_eq(wait_ev(ep, evs, 2, 30), 0);
	ck_assert_uint_eq(ring_spin_yields() - yields, 1);
	ck_assert_int_eq(f->progress_calls, 2);        /* the first look, the one after the yield */
	ck_assert_int_eq(f->wait_prepare_calls, 1);    /* then it slept */
	/* A packet already there: found by the first look, no yield. */
	fake_ring_packet(f);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 30), 1);
	fake_set_ready(f, 0);
	/* No sleep (timeout 0), or no polling asked (VMA_SELECT_POLL=0). */
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 0);
	g_cfg.select_poll = 0;
	ck_assert_int_eq(wait_ev(ep, evs, 2, 5), 0);
	ck_assert_uint_eq(ring_spin_yields() - yields, 1);
	/* A permit free: the thread polls for VMA_SELECT_POLL, then sleeps. */
	spin_board_use(&board, 1);
	g_cfg.select_poll = 2000;
	f->wait_prepare_calls = 0;
	ck_assert_int_eq(wait_ev(ep, evs, 2, 20), 0);
	ck_assert_int_eq(f->wait_prepare_calls, 1);
	ck_assert_uint_eq(ring_spin_yields() - yields, 1);
	ring_spin_release();
	spin_board_use(NULL, 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

/* VMA_SELECT_POLL_OS_FORCE: a set of kernel fds alone is spun on (for
 * VMA_SELECT_POLL) before sleeping, instead of sleeping at once. */
START_TEST(os_force_spins_on_kernel_fds_alone)
{
	g_cfg.select_poll = -1;   /* spin until the timeout */
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	int ep = ep_new();
	struct iomux_epoll *set = (struct iomux_epoll *)iomux_epoll_lookup(ep);
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, p[0], EPOLLIN, 5), 0);

	/* Off: the kernel-only set sleeps, whatever VMA_SELECT_POLL says. */
	double cpu0 = thread_cpu_ms();
	ck_assert_int_eq(wait_ev(ep, evs, 2, 60), 0);
	ck_assert_msg(thread_cpu_ms() - cpu0 < 5, "used %.2f ms of CPU", thread_cpu_ms() - cpu0);

	g_cfg.select_poll_os_force = 1;
	cpu0 = thread_cpu_ms();
	ck_assert_int_eq(wait_ev(ep, evs, 2, 60), 0);
	ck_assert_msg(thread_cpu_ms() - cpu0 >= 5, "used %.2f ms of CPU", thread_cpu_ms() - cpu0);

	/* Data arriving meanwhile is found by polling: a hit, no sleep. */
	uint64_t hits = set->stats->c.poll_hit;
	struct late_write lw = { .fd = p[1], .ms = 20 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, late_write_run, &lw), 0);
	ck_assert_int_eq(wait_ev(ep, evs, 2, 2000), 1);
	ck_assert_uint_eq(evs[0].data.u64, 5);
	ck_assert_uint_eq(set->stats->c.poll_hit, hits + 1);
	pthread_join(th, NULL);
	ep_close(ep);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(signal_interrupts_with_eintr)
{
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	int ep = ep_new();
	struct fake_sock *f = fake_new();
	struct epoll_event evs[2];
	ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 8), 0);
	struct delayed d = { .f = f, .ms = 50, .how = 2, .target = pthread_self() };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	errno = 0;
	ck_assert_int_eq(wait_ev(ep, evs, 2, 5000), -1);
	ck_assert_int_eq(errno, EINTR);
	pthread_join(th, NULL);
	/* epoll_pwait's mask blocks it: the wait times out instead. */
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigset_t old;
	pthread_sigmask(SIG_BLOCK, &block, &old);
	ck_assert_int_eq(pthread_create(&th, NULL, delayed_run, &d), 0);
	pthread_join(th, NULL);   /* SIGUSR1 now pending */
	sigset_t unblocked;
	sigemptyset(&unblocked);
	ck_assert_int_eq(iomux_epoll_wait(iomux_epoll_lookup(ep), evs, 2, 50, &block), 0);
	ck_assert_int_eq(iomux_epoll_wait(iomux_epoll_lookup(ep), evs, 2, 2000, &unblocked), -1);
	ck_assert_int_eq(errno, EINTR);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	fake_close(f);
	ep_close(ep);
}
END_TEST


/* A socket's lane notifies from another thread while the application
 * removes the socket from its set (an acceptor thread's lane still serving
 * a connection handed to a worker, which closes it: mp_server's
 * threads-handoff). A notify between EPOLL_CTL_DEL taking the item out and
 * unlinking its watch put the item back on the ready list, which then held
 * freed memory: a later epoll_wait looped in a cycle (mp_procs m in CI). */
struct notifier {
	struct fake_sock *f;
	int stop;
	long rounds;
};

static void *notify_run(void *arg)
{
	struct notifier *n = arg;
	while (!__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE)) {
		iomux_notify(&n->f->base, EPOLLIN);
		n->rounds++;
	}
	return NULL;
}

/* EPOLLEXCLUSIVE (iomux_notify_n), with the sets' sleepers set by hand so
 * the choice is deterministic: an edge goes to every set without the flag
 * and to one exclusive set with a sleeper not yet woken; `edges` edges to
 * as many such sets; a set already woken only when no other sleeps; all
 * exclusive sets when none sleeps; errors and hang-ups to every set. */
static int excl_on_ready(int n, const int *sets)
{
	int count = 0;
	for (int i = 0; i < n; i++) {
		struct iomux_epoll *ep = (struct iomux_epoll *)iomux_epoll_lookup(sets[i]);
		iomux_lock(&ep->lock);
		count += ep->ready_head != NULL;
		iomux_unlock(&ep->lock);
	}
	return count;
}

static void excl_reset(int n, const int *sets, int sleepers)
{
	struct epoll_event evs[4];
	for (int i = 0; i < n; i++) {
		struct iomux_epoll *ep = (struct iomux_epoll *)iomux_epoll_lookup(sets[i]);
		iomux_lock(&ep->lock);
		ep->sleepers = 0;
		iomux_unlock(&ep->lock);
		/* Harvests (and so drains the wake fd and the ready list:
		 * the fake is not ready at this point). */
		wait_ev(sets[i], evs, 4, 0);
		iomux_lock(&ep->lock);
		ck_assert_ptr_null(ep->ready_head);
		ck_assert(!ep->wake_signalled);
		ep->sleepers = sleepers;
		iomux_unlock(&ep->lock);
	}
}

START_TEST(exclusive_edges_wake_one_sleeping_set_each)
{
	enum { N = 4 };
	int sets[N + 1];
	struct fake_sock *f = fake_new();
	for (int i = 0; i <= N; i++) {
		sets[i] = ep_new();
		/* sets[N] holds the fd without the flag. */
		ck_assert_int_eq(ctl(sets[i], EPOLL_CTL_ADD, f->base.fd, EPOLLIN | (i < N ? EPOLLEXCLUSIVE : 0), i), 0);
	}
	struct iomux_epoll *plain = (struct iomux_epoll *)iomux_epoll_lookup(sets[N]);

	/* One edge, every exclusive set asleep: one of them, and the plain set. */
	excl_reset(N + 1, sets, 1);
	iomux_notify_n(&f->base, EPOLLIN, 1);
	ck_assert_int_eq(excl_on_ready(N, sets), 1);
	ck_assert_ptr_nonnull(plain->ready_head);
	/* The next edge skips the set just woken (its wake is pending). */
	iomux_notify_n(&f->base, EPOLLIN, 1);
	ck_assert_int_eq(excl_on_ready(N, sets), 2);

	/* Three edges at once: three sets. */
	excl_reset(N + 1, sets, 1);
	iomux_notify_n(&f->base, EPOLLIN, 3);
	ck_assert_int_eq(excl_on_ready(N, sets), 3);
	/* Six more than there are sleepers: the fourth, then nobody new. */
	iomux_notify_n(&f->base, EPOLLIN, 6);
	ck_assert_int_eq(excl_on_ready(N, sets), 4);

	/* Only sets[2] sleeps: it gets every edge, whatever the rotation. */
	for (int round = 0; round < N; round++) {
		excl_reset(N + 1, sets, 0);
		((struct iomux_epoll *)iomux_epoll_lookup(sets[2]))->sleepers = 1;
		iomux_notify_n(&f->base, EPOLLIN, 1);
		ck_assert_int_eq(excl_on_ready(N, sets), 1);
		ck_assert_ptr_nonnull(((struct iomux_epoll *)iomux_epoll_lookup(sets[2]))->ready_head);
	}

	/* sets[1]'s thread polls in its pass (inside epoll_wait, awake, its
	 * ready list empty) and nobody sleeps: it takes the edge as a sleeper
	 * would, without a wake-up, and the sets whose thread is busy in the
	 * application do not get it. Once the edge is on its ready list it is
	 * no longer idle: the next edge finds nobody and goes to every set. */
	for (int round = 0; round < N; round++) {
		excl_reset(N + 1, sets, 0);
		struct iomux_epoll *poller = (struct iomux_epoll *)iomux_epoll_lookup(sets[1]);
		__atomic_store_n(&poller->waiters, 1, __ATOMIC_RELAXED);
		iomux_notify_n(&f->base, EPOLLIN, 1);
		ck_assert_int_eq(excl_on_ready(N, sets), 1);
		ck_assert_ptr_nonnull(poller->ready_head);
		ck_assert(!poller->wake_signalled);
		iomux_notify_n(&f->base, EPOLLIN, 1);
		ck_assert_int_eq(excl_on_ready(N, sets), N);
		__atomic_store_n(&poller->waiters, 0, __ATOMIC_RELAXED);
	}
	/* One set polls, another sleeps: two edges, one each. */
	excl_reset(N + 1, sets, 0);
	{
		struct iomux_epoll *poller = (struct iomux_epoll *)iomux_epoll_lookup(sets[0]);
		struct iomux_epoll *sleeper = (struct iomux_epoll *)iomux_epoll_lookup(sets[3]);
		__atomic_store_n(&poller->waiters, 1, __ATOMIC_RELAXED);
		sleeper->waiters = sleeper->sleepers = 1;
		iomux_notify_n(&f->base, EPOLLIN, 2);
		ck_assert_int_eq(excl_on_ready(N, sets), 2);
		ck_assert_ptr_nonnull(poller->ready_head);
		ck_assert_ptr_nonnull(sleeper->ready_head);
		ck_assert(sleeper->wake_signalled);
		poller->waiters = sleeper->waiters = 0;
	}

	/* Nobody sleeps: every exclusive set, as under Linux. */
	excl_reset(N + 1, sets, 0);
	iomux_notify_n(&f->base, EPOLLIN, 1);
	ck_assert_int_eq(excl_on_ready(N, sets), N);

	/* A hang-up reaches every set even with sleepers. */
	excl_reset(N + 1, sets, 1);
	iomux_notify_n(&f->base, EPOLLIN | EPOLLHUP, 1);
	ck_assert_int_eq(excl_on_ready(N, sets), N);

	excl_reset(N + 1, sets, 0);
	for (int i = 0; i <= N; i++)
		ep_close(sets[i]);
	fake_close(f);
}
END_TEST

START_TEST(del_racing_notify_leaves_nothing_on_ready_list)
{
	int ep = ep_new();
	struct iomux_epoll *set = (struct iomux_epoll *)iomux_epoll_lookup(ep);
	struct fake_sock *f = fake_new();
	__atomic_store_n(&f->ready, EPOLLIN, __ATOMIC_RELEASE);
	struct notifier n = { .f = f };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, notify_run, &n), 0);
	int64_t end = iomux_now_ns() + 300 * 1000000LL;
	int dirty = 0, cycles = 0;
	while (iomux_now_ns() < end || cycles < 1000) {
		ck_assert_int_eq(ctl(ep, EPOLL_CTL_ADD, f->base.fd, EPOLLIN, 7), 0);
		ck_assert_int_eq(ctl(ep, EPOLL_CTL_DEL, f->base.fd, 0, 0), 0);
		/* The set's only member is gone and no notify can still hold it. */
		iomux_lock(&set->lock);
		if (set->ready_head || set->ready_tail) {
			dirty++;
			set->ready_head = set->ready_tail = NULL;   /* do not walk freed memory */
		}
		iomux_unlock(&set->lock);
		cycles++;
	}
	__atomic_store_n(&n.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	ck_assert_msg(dirty == 0, "%d of %d EPOLL_CTL_DEL left a freed item on the ready list", dirty, cycles);
	ck_assert_int_gt(n.rounds, 0);
	struct epoll_event evs[2];
	ck_assert_int_eq(wait_ev(ep, evs, 2, 0), 0);
	fake_close(f);
	ep_close(ep);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("iomux_epoll");
	TCase *tc = tcase_create("epoll");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, level_triggered_stays_until_not_ready);
	tcase_add_test(tc, os_ready_counts_kernel_fds_only);
	tcase_add_test(tc, fd_added_before_offload_is_promoted);
	tcase_add_test(tc, set_closed_before_promotion);
	tcase_add_test(tc, edge_triggered_fires_once_per_rise);
	tcase_add_test(tc, oneshot_disarms_until_mod);
	tcase_add_test(tc, mix_of_pipe_and_offloaded_with_maxevents);
	tcase_add_test(tc, kernel_side_merges_with_user_side);
	tcase_add_test(tc, only_asked_events_but_err_hup_always);
	tcase_add_test(tc, ctl_errno_as_linux);
	tcase_add_test(tc, close_removes_from_sets);
	tcase_add_test(tc, fd_in_two_sets);
	tcase_add_test(tc, exclusive_edges_wake_one_sleeping_set_each);
	tcase_add_test(tc, nested_epoll_sees_offloaded_readiness);
	tcase_add_test(tc, ring_wait_fd_that_is_an_epoll_set_wakes_a_sleeper);
	tcase_add_test(tc, timeouts_zero_short_and_woken);
	tcase_add_test(tc, stale_wake_fd_is_drained_by_the_sleep);
	tcase_add_test(tc, every_socket_of_a_large_set_progressed_and_armed);
	tcase_add_test(tc, spin_forever_until_timeout);
	tcase_add_test(tc, refused_permit_yields_once_before_sleeping);
	tcase_add_test(tc, os_force_spins_on_kernel_fds_alone);
	tcase_add_test(tc, signal_interrupts_with_eintr);
	tcase_add_test(tc, del_racing_notify_leaves_nothing_on_ready_list);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
