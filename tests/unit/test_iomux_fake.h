/* A test-only offloaded kind: its kernel side is one end of an AF_UNIX
 * datagram socketpair (so kernel-side data can be injected from the peer),
 * its "ring" is an eventfd: writing the eventfd is a packet arriving, and
 * progress() turns it into EPOLLIN readiness plus an iomux_notify(). The
 * test can also set the readiness bits directly. */
#ifndef TEST_IOMUX_FAKE_H
#define TEST_IOMUX_FAKE_H

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "config/cfg_params.h"
#include "iomux/iomux.h"
#include "ring/ring_spin.h"

struct fake_sock {
	struct sock_obj base;
	uint32_t ready;        /* atomic: EPOLL* bits user space knows */
	int ring_fd;           /* eventfd: the ring's wait fd */
	int packet_fd;         /* where packets land: ring_fd, or an eventfd
				* inside it when ring_fd is an epoll set (a
				* multi-queue ring's wait fd) */
	int peer;              /* other end of the kernel side */
	int progress_calls;
	int wait_prepare_calls;
};

static uint32_t fake_poll_ready(struct sock_obj *obj)
{
	return __atomic_load_n(&((struct fake_sock *)obj)->ready, __ATOMIC_ACQUIRE);
}

static int fake_progress(struct sock_obj *obj)
{
	struct fake_sock *f = (struct fake_sock *)obj;
	__atomic_add_fetch(&f->progress_calls, 1, __ATOMIC_RELAXED);
	uint64_t v;
	if (read(f->packet_fd, &v, sizeof(v)) != sizeof(v))
		return 0;
	__atomic_or_fetch(&f->ready, EPOLLIN, __ATOMIC_RELEASE);
	iomux_notify(obj, EPOLLIN);
	return (int)v;
}

static int fake_wait_prepare(struct sock_obj *obj, int *fds, int max)
{
	struct fake_sock *f = (struct fake_sock *)obj;
	__atomic_add_fetch(&f->wait_prepare_calls, 1, __ATOMIC_RELAXED);
	if (max < 1)
		return 0;
	fds[0] = f->ring_fd;
	return 1;
}

static void fake_release(struct sock_obj *obj) { iomux_forget(obj); }

static void fake_destroy(struct sock_obj *obj)
{
	struct fake_sock *f = (struct fake_sock *)obj;
	if (f->packet_fd != f->ring_fd)
		close(f->packet_fd);
	close(f->ring_fd);
	close(f->peer);
	free(f);
}

static const struct sock_ops fake_ops = {
	.kind = "fake-offloaded",
	.poll_ready = fake_poll_ready,
	.progress = fake_progress,
	.wait_prepare = fake_wait_prepare,
	.release = fake_release,
	.destroy = fake_destroy,
};

/* The same socket before it is offloaded: a kernel fd that may become
 * offloaded (a TCP socket before connect/listen). */
static const struct sock_ops fake_kernel_ops __attribute__((unused)) = {
	.kind = "fake-undecided",
	.flags = SOCK_OPS_F_MAY_OFFLOAD,
	.release = fake_release,
	.destroy = fake_destroy,
};

/* connect()/listen() offloaded it: switch the ops, then tell iomux. */
static inline void fake_promote(struct fake_sock *f)
{
	__atomic_store_n(&f->base.ops, &fake_ops, __ATOMIC_RELEASE);
	iomux_promote(&f->base);
}

static struct fake_sock *fake_new(void)
{
	struct fake_sock *f = calloc(1, sizeof(*f));
	int sv[2];
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, sv), 0);
	f->base.ops = &fake_ops;
	f->base.fd = sv[0];
	f->peer = sv[1];
	f->ring_fd = eventfd(0, EFD_NONBLOCK);
	ck_assert_int_ge(f->ring_fd, 0);
	f->packet_fd = f->ring_fd;
	ck_assert_int_eq(sock_fd_set(sv[0], &f->base), 0);
	return f;
}

/* Readiness rises in user space, as a socket would report it. */
static void fake_set_ready(struct fake_sock *f, uint32_t bits)
{
	__atomic_store_n(&f->ready, bits, __ATOMIC_RELEASE);
	if (bits)
		iomux_notify(&f->base, bits);
}

/* A packet lands on the ring: only progress() will see it. */
static void fake_ring_packet(struct fake_sock *f)
{
	uint64_t one = 1;
	ck_assert_int_eq(write(f->packet_fd, &one, sizeof(one)), sizeof(one));
}

/* close() as redirect does it: leave the table, retire, close the fd. */
static void fake_close(struct fake_sock *f)
{
	int fd = f->base.fd;
	struct sock_obj *obj = sock_fd_take(fd);
	ck_assert_ptr_eq(obj, &f->base);
	sock_obj_retire(obj);
	close(fd);
}

/* Busy-polling permits for the tests of ring_spin_yield: a board of limit
 * slots (0: none to be had, the CPUs are crowded), the contention check off
 * so that a loaded test machine does not take a permit back; NULL undoes. */
static inline void spin_board_use(struct ring_spin_board *board, int limit)
{
	if (board)
		memset(board, 0, sizeof(*board));
	ring_spin_board_set(board, board ? limit : -1);
	ring_spin_contention_check(board == NULL);
}

static void iomux_test_cfg(void)
{
	memset(&g_cfg, 0, sizeof(g_cfg));
	g_cfg.thread_mode = 1;
	g_cfg.select_poll = 0;
	g_cfg.select_poll_os_ratio = 10;
	g_cfg.select_skip_os = 4;
}

/* CPU time this thread used so far, in ms: spinning uses it, sleeping not. */
static double thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Writes one byte to fd after ms (a kernel fd becoming readable later). */
struct late_write {
	int fd;
	int ms;
};

static void *late_write_run(void *arg)
{
	struct late_write *lw = arg;
	struct timespec ts = { lw->ms / 1000, (long)(lw->ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
	ck_assert_int_eq(write(lw->fd, "x", 1), 1);
	return NULL;
}

static long long elapsed_ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000LL + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

#endif
