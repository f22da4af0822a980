/* Locks per VMA_THREAD_MODE, time helpers and the readiness bits shared by
 * epoll and poll/select. */
#include <sched.h>
#include <stdint.h>
#include "config/cfg_params.h"
#include "iomux/iomux_internal.h"
#include "ring/ring_spin.h"
#include "os/os.h"
#include "os/os_signal.h"


/* Read on every lock and unlock: the mode is fixed at startup, so a lock
 * never sees two different modes. */
void iomux_lock_init(struct iomux_lock *l)
{
	l->spin = 0;
	pthread_mutex_init(&l->mutex, NULL);
}

/* Like a lane lock, an epoll set's lock holds back the application's
 * signal handlers in this thread until the unlock (os/os_signal.h). */
void iomux_lock(struct iomux_lock *l)
{
	os_signal_defer_begin();
	switch (g_cfg.thread_mode) {
	case 0:
		return;
	case 2:
		pthread_mutex_lock(&l->mutex);
		return;
	default:
		for (unsigned spins = 0; __atomic_exchange_n(&l->spin, 1, __ATOMIC_ACQUIRE);) {
			while (__atomic_load_n(&l->spin, __ATOMIC_RELAXED)) {
				/* The holder may be descheduled (more threads than
				 * cores): mode 3 gives the core away at once, mode 1
				 * after a spin longer than any holder keeps it. */
				if (g_cfg.thread_mode == 3 || ++spins > OS_SPIN_PAUSES_MAX)
					sched_yield();
				else
					os_cpu_relax();
			}
		}
	}
}

void iomux_unlock(struct iomux_lock *l)
{
	switch (g_cfg.thread_mode) {
	case 0:
		break;
	case 2:
		pthread_mutex_unlock(&l->mutex);
		break;
	default:
		__atomic_store_n(&l->spin, 0, __ATOMIC_RELEASE);
	}
	os_signal_defer_end();
}

#define IOMUX_WATCH_STRIPES 64
static struct iomux_lock iomux_watch_locks[IOMUX_WATCH_STRIPES] = {
	[0 ... IOMUX_WATCH_STRIPES - 1] = IOMUX_LOCK_INIT
};

struct iomux_lock *iomux_watch_lock(const struct sock_obj *obj)
{
	uintptr_t h = (uintptr_t)obj >> 6;
	return &iomux_watch_locks[(h ^ (h >> 7)) % IOMUX_WATCH_STRIPES];
}

uint32_t iomux_obj_ready(struct sock_obj *obj)
{
	uint32_t bits = obj->ops->poll_ready(obj);
	if (bits & EPOLLIN)
		bits |= EPOLLRDNORM;
	if (bits & EPOLLOUT)
		bits |= EPOLLWRNORM | EPOLLWRBAND;
	return bits;
}

int64_t iomux_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t iomux_deadline_from(int64_t start, int64_t timeout_ns)
{
	if (timeout_ns < 0)
		return INT64_MAX;
	return timeout_ns > INT64_MAX - start ? INT64_MAX : start + timeout_ns;
}

int64_t iomux_deadline(int64_t timeout_ns)
{
	return timeout_ns < 0 ? INT64_MAX : iomux_deadline_from(iomux_now_ns(), timeout_ns);
}

int iomux_ms_left(int64_t deadline)
{
	if (deadline == INT64_MAX)
		return -1;
	int64_t left = deadline - iomux_now_ns();
	if (left <= 0)
		return 0;
	int64_t ms = (left + 999999) / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

bool iomux_spinning(int64_t start, int64_t now, bool *refused)
{
	*refused = false;
	int usec = g_cfg.select_poll;
	if (usec >= 0 && now - start >= (int64_t)usec * 1000)
		return false;
	/* Within VMA_SELECT_POLL, and a CPU is free to spin on
	 * (VMA_POLL_THREADS_MAX): otherwise the caller sleeps. */
	if (ring_spin_permit())
		return true;
	*refused = true;
	return false;
}

void iomux_stats_finish(struct stats_iomux *st, int n, int64_t start, int64_t sleep_ns)
{
	if (n < 0)
		st->c.errors++;
	else if (n == 0)
		st->c.timeouts++;
	if (!g_cfg.cpu_usage_stats)
		return;
	int64_t total = iomux_now_ns() - start;
	st->c.total_ns += (uint64_t)total;
	if (total > sleep_ns)
		st->c.polling_ns += (uint64_t)(total - sleep_ns);
}
