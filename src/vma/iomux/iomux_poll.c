/* poll/ppoll/select/pselect with offloaded fds: the epoll loop shape with
 * no state kept between calls. The application's pollfd array is the
 * scratch space (revents are ours to write); only the sleep needs a copy
 * with the rings' wait fds appended: a stack array up to
 * IOMUX_POLL_STACK_FDS entries, beyond that a per-thread buffer that grows
 * (realloc) at sleep time, never inside the spin, and is kept for reuse. */
#include <errno.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <stdlib.h>
#include <string.h>
#include "config/cfg_params.h"
#include "iomux/iomux_internal.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "ring/ring_spin.h"
#include "sock/sock_offload.h"

#define IOMUX_POLL_STACK_FDS 64
#define IOMUX_POLL_WAIT_FDS 32
#define IOMUX_POLL_WAIT_PER_SOCK (2 * SOCK_OFFLOAD_WAIT_FDS)
/* Lanes one sleep registers with (poll_watch); a set over more sleeps at
 * most IOMUX_POLL_CAPPED_NS at a time. */
#define IOMUX_POLL_WATCH_MAX 16
#define IOMUX_POLL_CAPPED_NS (1000 * 1000)

static __thread struct pollfd *iomux_poll_buf OS_TLS_HOT;
static __thread size_t iomux_poll_buf_cap OS_TLS_HOT;
static pthread_key_t iomux_poll_key;
static pthread_once_t iomux_poll_key_once = PTHREAD_ONCE_INIT;

static void iomux_poll_buf_free(void *p)
{
	free(p);
}

static void iomux_poll_key_make(void)
{
	(void)pthread_key_create(&iomux_poll_key, iomux_poll_buf_free);
}

/* This thread's wake eventfd for poll_watch, closed at thread exit. */
static __thread int iomux_poll_wake OS_TLS_HOT = -1;
static pthread_key_t iomux_poll_wake_key;
static pthread_once_t iomux_poll_wake_once = PTHREAD_ONCE_INIT;

static void iomux_poll_wake_close(void *p)
{
	os_close_nocancel((int)(intptr_t)p - 1);
}

static void iomux_poll_wake_key_make(void)
{
	(void)pthread_key_create(&iomux_poll_wake_key, iomux_poll_wake_close);
}

static int poll_wake_fd(void)
{
	if (iomux_poll_wake >= 0)
		return iomux_poll_wake;
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -1;
	pthread_once(&iomux_poll_wake_once, iomux_poll_wake_key_make);
	(void)pthread_setspecific(iomux_poll_wake_key, (void *)(intptr_t)(fd + 1));
	iomux_poll_wake = fd;
	return fd;
}

/* The sockets of fds watch (on) or stop watching the thread's wake fd, one
 * call per lane. Returns false when some could not (sleep capped). */
static bool poll_watch_all(struct pollfd *fds, nfds_t nfds, int wake, bool on)
{
	const void *lanes[IOMUX_POLL_WATCH_MAX];
	int nlanes = 0;
	bool all = true;
	for (nfds_t i = 0; i < nfds; i++) {
		struct sock_obj *obj = fds[i].fd >= 0 ? sock_fd_get(fds[i].fd) : NULL;
		if (!iomux_obj_offloaded(obj) || !obj->ops->poll_watch)
			continue;
		const void *key = obj->ops->lane_key ? obj->ops->lane_key(obj) : NULL;
		bool seen = false;
		for (int k = 0; k < nlanes && !seen; k++)
			seen = lanes[k] == key;
		if (seen)
			continue;
		if (on && key && nlanes == IOMUX_POLL_WATCH_MAX) {
			all = false;
			continue;
		}
		if (key && nlanes < IOMUX_POLL_WATCH_MAX)
			lanes[nlanes++] = key;
		if (obj->ops->poll_watch(obj, wake, on) != 0)
			all = false;
	}
	return all;
}

/* The ppoll of a poll()/select() sleep is a cancellation point, as in
 * libc: a pthread_cancel() ends the thread there. The sockets' lanes must
 * then forget its wake fd, which the thread's exit closes: a lane writing
 * it later would write eight bytes into whatever file got the number. */
struct poll_cancel {
	struct pollfd *fds;
	nfds_t nfds;
	int wake;
	int prev_sleep_fd;
};

static void poll_sleep_cancelled(void *arg)
{
	struct poll_cancel *c = arg;
	os_signal_sleep_disarm(c->prev_sleep_fd);
	if (c->wake >= 0)
		poll_watch_all(c->fds, c->nfds, c->wake, false);
}

static void poll_sleep(struct pollfd *buf, int total, const struct timespec *left, const sigset_t *mask,
		       struct poll_cancel *c, int *r, int *err)
{
	pthread_cleanup_push(poll_sleep_cancelled, c);
	*r = OS_CALL(ppoll, buf, (nfds_t)total, left, mask);
	*err = errno;
	pthread_cleanup_pop(0);
}

/* Whether an offloaded fd of the set is ready now (user-space bits). */
static bool poll_offloaded_ready(const struct pollfd *fds, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		struct sock_obj *obj = fds[i].fd >= 0 ? sock_fd_get(fds[i].fd) : NULL;
		if (iomux_obj_offloaded(obj) &&
		    (iomux_obj_ready(obj) & ((uint32_t)(uint16_t)fds[i].events | POLLERR | POLLHUP)))
			return true;
	}
	return false;
}

static struct pollfd *poll_buf_get(size_t need, struct pollfd *stack)
{
	if (need <= IOMUX_POLL_STACK_FDS)
		return stack;
	if (need > iomux_poll_buf_cap) {
		struct pollfd *p = realloc(iomux_poll_buf, need * sizeof(*p));
		if (!p)
			return NULL;
		iomux_poll_buf = p;
		iomux_poll_buf_cap = need;
		pthread_once(&iomux_poll_key_once, iomux_poll_key_make);
		pthread_setspecific(iomux_poll_key, p);
	}
	return iomux_poll_buf;
}

static struct stats_iomux *stats_for(bool is_select)
{
	static struct stats_iomux *slots[2];
	struct stats_iomux *s = __atomic_load_n(&slots[is_select], __ATOMIC_ACQUIRE);
	if (!s) {
		s = stats_iomux_slot_get(is_select ? STATS_IOMUX_SELECT : STATS_IOMUX_POLL, -1);
		__atomic_store_n(&slots[is_select], s, __ATOMIC_RELEASE);
	}
	return s;
}

/* Whether fd has user-space readiness (an offloaded socket). An epoll fd
 * met on the way is marked exposed: it is now watched by a kernel poll. */
static bool fd_is_offloaded(int fd)
{
	struct sock_obj *obj = sock_fd_get(fd);
	if (!obj)
		return false;
	if (obj->ops->poll_ready)
		return true;
	if (obj->ops == &iomux_epoll_ops)
		iomux_epoll_mark_exposed(obj);
	return false;
}

bool iomux_poll_wanted(const struct pollfd *fds, nfds_t nfds)
{
	/* A bad array or count is the kernel's to refuse (EFAULT, EINVAL). */
	if (!fds || nfds > sock_fd_table_size())
		return false;
	bool wanted = false;
	for (nfds_t i = 0; i < nfds; i++)
		wanted |= fd_is_offloaded(fds[i].fd);
	/* VMA_SELECT_POLL_OS_FORCE: kernel fds alone are spun on too (for
	 * VMA_SELECT_POLL) before sleeping; an empty set is a plain sleep. */
	return wanted || (nfds > 0 && g_cfg.select_poll_os_force);
}

bool iomux_select_wanted(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
	/* Beyond FD_SETSIZE the sets are the caller's own larger bitmaps:
	 * left to the kernel, which knows their real size. */
	if (nfds <= 0 || nfds > FD_SETSIZE)
		return false;
	bool wanted = false, any = false;
	for (int fd = 0; fd < nfds; fd++) {
		if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))))
			continue;
		any = true;
		wanted |= fd_is_offloaded(fd);
	}
	/* As for poll: VMA_SELECT_POLL_OS_FORCE spins on kernel fds alone. */
	return wanted || (any && g_cfg.select_poll_os_force);
}

/* One pass: the kernel's view when os is set (else nothing for kernel
 * fds), then the offloaded sockets' user-space bits ORed in. Returns the
 * number of entries with revents, -1 on a kernel error, and in *offl the
 * entries that had user-space bits. */
static int poll_pass(struct pollfd *fds, nfds_t nfds, bool os, bool progress, int *offl)
{
	*offl = 0;
	if (os) {
		if (OS_CALL(poll, fds, nfds, 0) < 0)
			return -1;
	} else {
		for (nfds_t i = 0; i < nfds; i++)
			fds[i].revents = 0;
	}
	int count = 0;
	for (nfds_t i = 0; i < nfds; i++) {
		struct sock_obj *obj = fds[i].fd >= 0 ? sock_fd_get(fds[i].fd) : NULL;
		if (iomux_obj_offloaded(obj)) {
			if (progress && obj->ops->progress)
				obj->ops->progress(obj);
			uint32_t bits = iomux_obj_ready(obj) &
					((uint32_t)(uint16_t)fds[i].events | POLLERR | POLLHUP);
			if (bits) {
				fds[i].revents |= (short)bits;
				(*offl)++;
			}
		}
		count += fds[i].revents != 0;
	}
	return count;
}

/* Copies fds into buf and appends the armed rings' wait fds. Returns the
 * total, or -1 when data arrived while arming. */
static int sleep_set(struct pollfd *fds, nfds_t nfds, struct pollfd *buf)
{
	memcpy(buf, fds, nfds * sizeof(*fds));
	int total = (int)nfds;
	for (nfds_t i = 0; i < nfds; i++) {
		struct sock_obj *obj = fds[i].fd >= 0 ? sock_fd_get(fds[i].fd) : NULL;
		if (!iomux_obj_offloaded(obj) || !obj->ops->wait_prepare)
			continue;
		int wfds[IOMUX_POLL_WAIT_PER_SOCK];
		int n = obj->ops->wait_prepare(obj, wfds, IOMUX_POLL_WAIT_PER_SOCK);
		if (n < 0)
			return -1;
		for (int k = 0; k < n; k++) {
			bool dup = false;
			for (int j = (int)nfds; j < total && !dup; j++)
				dup = buf[j].fd == wfds[k];
			if (!dup && total < (int)nfds + IOMUX_POLL_WAIT_FDS)
				buf[total++] = (struct pollfd){ .fd = wfds[k], .events = POLLIN };
		}
	}
	return total;
}

static int poll_core(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *mask,
		     struct stats_iomux *st)
{
	st->c.calls++;
	/* As epoll_wait (iomux_wait.c): no clock read when the first pass
	 * finds something; the sleep is timed only for VMA_CPU_USAGE_STATS. */
	int64_t start = g_cfg.cpu_usage_stats ? iomux_now_ns() : 0, slept = 0;
	int64_t deadline = INT64_MAX;
	static unsigned int skip_os_count, os_ratio_count; /* approximate across threads */
	struct pollfd stack[IOMUX_POLL_STACK_FDS];
	int n, offl;
	struct os_sig_mark sigmark = os_signal_call_mark();
	bool yielded = false;
	for (unsigned int pass = 0;; pass++) {
		n = poll_pass(fds, nfds, false, true, &offl);
		int skip = g_cfg.select_skip_os, ratio = g_cfg.select_poll_os_ratio;
		bool os;
		if (n > 0)
			os = skip == 0 || ++skip_os_count >= (unsigned int)skip;
		else
			os = pass == 0 || (ratio > 0 && ++os_ratio_count >= (unsigned int)ratio);
		if (os) {
			skip_os_count = n > 0 ? 0 : skip_os_count;
			os_ratio_count = 0;
			n = poll_pass(fds, nfds, true, false, &offl);
			if (n < 0)
				goto out;
		}
		if (n > 0) {
			st->c.offload_ready += offl > 0;
			st->c.os_ready += n > offl;
			st->c.poll_hit += slept == 0;
			goto out;
		}
		int64_t now;
		if (pass == 0) {
			now = start = start ? start : iomux_now_ns();
			if (timeout)
				deadline = iomux_deadline_from(start, (int64_t)timeout->tv_sec * 1000000000 +
									 timeout->tv_nsec);
		} else {
			now = iomux_now_ns();
		}
		if (now >= deadline)
			goto out;
		/* A handler ran while we polled in user space: poll and select
		 * are never restarted (signal(7)). */
		if (os_signal_interrupts(&sigmark, false)) {
			n = -1;
			goto out;
		}
		bool refused = false;
		if (slept == 0 && iomux_spinning(start, now, &refused))
			continue;
		/* No busy-polling permit: one yield per call, then one more
		 * look before the sleep (ring_spin_yield). */
		if (refused && ring_spin_yield(&yielded))
			continue;

		struct pollfd *buf = poll_buf_get(nfds + IOMUX_POLL_WAIT_FDS + 1, stack);   /* + the wake fd */
		if (!buf) {
			errno = ENOMEM;
			n = -1;
			goto out;
		}
		int total = sleep_set(fds, nfds, buf);
		if (total < 0)
			continue;
		/* Registered with the sockets' lanes before the last look at
		 * them: a socket made ready by another thread of its lane from
		 * now on writes the wake fd (the ring fd may not say so: that
		 * thread took the packet off the ring). */
		int wake = poll_wake_fd();
		bool capped = wake < 0 || !poll_watch_all(fds, nfds, wake, true);
		if (wake >= 0)
			buf[total++] = (struct pollfd){ .fd = wake, .events = POLLIN };
		if (poll_offloaded_ready(fds, nfds)) {
			if (wake >= 0)
				poll_watch_all(fds, nfds, wake, false);
			continue;
		}
		/* This thread's held sends leave before it sleeps (sock_offload.h). */
		sock_offload_flush_mine();
		/* A handler held back while sleep_set had a lane locked (or the
		 * flush above) ran at its unlock, after the check above: ppoll
		 * would not see it. One that runs after this look writes the
		 * wake fd. */
		int prev_sleep_fd = os_signal_sleep_arm(wake);   /* -1: none */
		if (os_signal_interrupts(&sigmark, false)) {
			os_signal_sleep_disarm(prev_sleep_fd);
			if (wake >= 0) {
				poll_watch_all(fds, nfds, wake, false);
				eventfd_t drained;
				(void)os_efd_read(wake, &drained);
				errno = EINTR;
			}
			n = -1;
			goto out;
		}
		st->c.poll_miss += slept == 0;
		struct timespec left, *leftp = NULL;
		if (deadline != INT64_MAX || capped) {
			int64_t ns = deadline == INT64_MAX ? INT64_MAX : deadline - iomux_now_ns();
			ns = ns < 0 ? 0 : ns;
			if (capped && ns > IOMUX_POLL_CAPPED_NS)
				ns = IOMUX_POLL_CAPPED_NS;
			left = (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
			leftp = &left;
		}
		ring_spin_release();
		int64_t t0 = g_cfg.cpu_usage_stats ? iomux_now_ns() : 0;
		struct poll_cancel cancel = { .fds = fds, .nfds = nfds, .wake = wake, .prev_sleep_fd = prev_sleep_fd };
		int r, saved;
		poll_sleep(buf, total, leftp, mask, &cancel, &r, &saved);
		slept += (g_cfg.cpu_usage_stats ? iomux_now_ns() - t0 : 0) + 1;
		os_signal_sleep_disarm(prev_sleep_fd);
		if (wake >= 0) {
			poll_watch_all(fds, nfds, wake, false);
			eventfd_t drained;
			if (buf[total - 1].revents || os_signal_caught_since(&sigmark))
				(void)os_efd_read(wake, &drained);
		}
		errno = saved;
		if (r == 0 && capped && iomux_now_ns() < deadline)
			continue;   /* the cap, not the caller's timeout */
		if (r < 0) {
			n = -1;
			goto out;
		}
		if (r == 0) {
			poll_pass(fds, nfds, false, false, &offl);
			n = 0;
			goto out;
		}
		bool app_ready = false;
		for (nfds_t i = 0; i < nfds; i++)
			app_ready |= buf[i].revents != 0;
		if (app_ready) {
			/* Kernel answer plus what the offloaded side has now. */
			n = poll_pass(fds, nfds, false, true, &offl);
			for (nfds_t i = 0; i < nfds; i++) {
				n += fds[i].revents == 0 && buf[i].revents != 0;
				fds[i].revents |= buf[i].revents;
			}
			st->c.os_ready++;
			goto out;
		}
		/* Only a ring woke us: poll it. */
	}
out:
	/* The sends that answer these may share a doorbell (sock_offload.h). */
	sock_offload_events_returned(n);
	iomux_stats_finish(st, n, start, slept);
	return n;
}

static bool timespec_valid(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

int iomux_poll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *mask)
{
	if (!timespec_valid(timeout)) {
		errno = EINVAL;
		return -1;
	}
	os_libc_ensure();
	return poll_core(fds, nfds, timeout, mask, stats_for(false));
}

/* Linux's select classes (fs/select.c): HUP and ERR make a read set bit,
 * ERR a write set bit, PRI an exception bit. */
#define IOMUX_SEL_IN (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define IOMUX_SEL_OUT (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)
#define IOMUX_SEL_EX (POLLPRI)

int iomux_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		 const sigset_t *mask, struct timespec *remaining)
{
	if (nfds < 0 || nfds > FD_SETSIZE || !timespec_valid(timeout)) {
		errno = EINVAL;
		return -1;
	}
	os_libc_ensure();
	/* Only select() writes the time left back (pselect does not). */
	int64_t deadline = remaining ? iomux_deadline(timeout ? (int64_t)timeout->tv_sec * 1000000000 +
									 timeout->tv_nsec : -1)
				     : INT64_MAX;
	struct pollfd pfd[FD_SETSIZE];
	nfds_t count = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) | (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
				   (e && FD_ISSET(fd, e) ? POLLPRI : 0));
		if (ev)
			pfd[count++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	int n = poll_core(pfd, count, timeout, mask, stats_for(true));
	if (remaining && deadline != INT64_MAX) {
		int64_t ns = deadline - iomux_now_ns();
		ns = ns < 0 ? 0 : ns;
		*remaining = (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
	}
	if (n < 0)
		return -1;
	for (nfds_t i = 0; i < count; i++) {
		if (pfd[i].revents & POLLNVAL) {
			errno = EBADF;
			return -1;
		}
	}
	int bits = 0;
	for (nfds_t i = 0; i < count; i++) {
		int fd = pfd[i].fd;
		short rev = pfd[i].revents;
		if (r && FD_ISSET(fd, r) && !(rev & IOMUX_SEL_IN))
			FD_CLR(fd, r);
		if (w && FD_ISSET(fd, w) && !(rev & IOMUX_SEL_OUT))
			FD_CLR(fd, w);
		if (e && FD_ISSET(fd, e) && !(rev & IOMUX_SEL_EX))
			FD_CLR(fd, e);
		bits += (r && FD_ISSET(fd, r)) + (w && FD_ISSET(fd, w)) + (e && FD_ISSET(fd, e));
	}
	return bits;
}
