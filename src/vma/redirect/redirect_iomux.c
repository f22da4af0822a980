/* Readiness calls. A set of kernel fds only costs one table lookup per fd
 * and goes straight to libc; a set with an offloaded fd, and every epoll
 * fd we created, goes to iomux/ (see docs/iomux.md). */
#undef _FORTIFY_SOURCE
#include "iomux/iomux.h"
#include "redirect/redirect.h"

/* select's timeval as the kernel reads it: usec may exceed a second. */
static bool redirect_tv_to_ts(const struct timeval *tv, struct timespec *ts)
{
	if (tv->tv_sec < 0 || tv->tv_usec < 0)
		return false;
	ts->tv_sec = tv->tv_sec + tv->tv_usec / 1000000;
	ts->tv_nsec = (tv->tv_usec % 1000000) * 1000;
	return true;
}

REDIRECT_EXPORT int select(int nfds, fd_set *__restrict r, fd_set *__restrict w, fd_set *__restrict e,
			   struct timeval *__restrict timeout)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	struct timespec ts;
	if (iomux_select_wanted(nfds, r, w, e) && (!timeout || redirect_tv_to_ts(timeout, &ts))) {
		REDIRECT_CANCEL_POINT();
		struct timespec left;
		int ret = REDIRECT_MARKED_CALL(entry, iomux_select(nfds, r, w, e, timeout ? &ts : NULL, NULL,
								   timeout ? &left : NULL));
		if (timeout) {   /* Linux writes back the time not slept */
			timeout->tv_sec = left.tv_sec;
			timeout->tv_usec = left.tv_nsec / 1000;
		}
		return ret;
	}
	REDIRECT_PASS(select, nfds, r, w, e, timeout);
}

REDIRECT_EXPORT int pselect(int nfds, fd_set *__restrict r, fd_set *__restrict w, fd_set *__restrict e,
			    const struct timespec *__restrict timeout, const __sigset_t *__restrict mask)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	if (iomux_select_wanted(nfds, r, w, e)) {
		REDIRECT_CANCEL_POINT();
		return REDIRECT_MARKED_CALL(entry, iomux_select(nfds, r, w, e, timeout, mask, NULL));
	}
	REDIRECT_PASS(pselect, nfds, r, w, e, timeout, mask);
}

REDIRECT_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	if (iomux_poll_wanted(fds, nfds)) {
		REDIRECT_CANCEL_POINT();
		struct timespec ts = { .tv_sec = timeout / 1000, .tv_nsec = (long)(timeout % 1000) * 1000000 };
		return REDIRECT_MARKED_CALL(entry, iomux_poll(fds, nfds, timeout < 0 ? NULL : &ts, NULL));
	}
	REDIRECT_PASS(poll, fds, nfds, timeout);
}

REDIRECT_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const __sigset_t *mask)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	if (iomux_poll_wanted(fds, nfds)) {
		REDIRECT_CANCEL_POINT();
		return REDIRECT_MARKED_CALL(entry, iomux_poll(fds, nfds, timeout, mask));
	}
	REDIRECT_PASS(ppoll, fds, nfds, timeout, mask);
}

REDIRECT_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, __SIZE_TYPE__ fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return poll(fds, nfds, timeout);
}

REDIRECT_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
				const __sigset_t *mask, __SIZE_TYPE__ fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return ppoll(fds, nfds, timeout, mask);
}

/* Every epoll fd gets our object (a set may receive offloaded fds later);
 * should that fail it stays a plain kernel epoll fd. */
static int redirect_new_epoll_fd(int epfd)
{
	if (epfd >= 0) {
		redirect_fd_fresh(epfd);
		(void)iomux_epoll_create(epfd);
	}
	return epfd;
}

REDIRECT_EXPORT int epoll_create(int size)
{
	os_libc_ensure();
	__typeof__(os_libc.epoll_create) orig = OS_FN_RESOLVED(epoll_create);
	return orig ? redirect_new_epoll_fd(orig(size)) : redirect_enosys();
}

REDIRECT_EXPORT int epoll_create1(int flags)
{
	os_libc_ensure();
	__typeof__(os_libc.epoll_create1) orig = OS_FN_RESOLVED(epoll_create1);
	return orig ? redirect_new_epoll_fd(orig(flags)) : redirect_enosys();
}

REDIRECT_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	os_libc_ensure();
	struct sock_obj *ep = iomux_epoll_lookup(epfd);
	if (ep)
		return iomux_epoll_ctl(ep, op, fd, event);
	REDIRECT_PASS(epoll_ctl, epfd, op, fd, event);
}

REDIRECT_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	struct sock_obj *ep = iomux_epoll_lookup(epfd);
	if (ep) {
		REDIRECT_CANCEL_POINT();
		return REDIRECT_MARKED_CALL(entry, iomux_epoll_wait(ep, events, maxevents, timeout, NULL));
	}
	REDIRECT_PASS(epoll_wait, epfd, events, maxevents, timeout);
}

REDIRECT_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
				const __sigset_t *mask)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	struct sock_obj *ep = iomux_epoll_lookup(epfd);
	if (ep) {
		REDIRECT_CANCEL_POINT();
		return REDIRECT_MARKED_CALL(entry, iomux_epoll_wait(ep, events, maxevents, timeout, mask));
	}
	REDIRECT_PASS(epoll_pwait, epfd, events, maxevents, timeout, mask);
}

#if OS_HAVE_EPOLL_PWAIT2
REDIRECT_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
				 const struct timespec *timeout, const __sigset_t *mask)
{
	struct os_sig_mark entry = os_signal_mark();   /* first: redirect.h */
	os_libc_ensure();
	struct sock_obj *ep = iomux_epoll_lookup(epfd);
	if (ep) {
		REDIRECT_CANCEL_POINT();
		if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000)) {
			errno = EINVAL;
			return -1;
		}
		int ms = -1;
		if (timeout) {   /* rounded up to the millisecond we can sleep */
			long long total = (long long)timeout->tv_sec * 1000 + (timeout->tv_nsec + 999999) / 1000000;
			ms = total > 0x7fffffff ? 0x7fffffff : (int)total;
		}
		return REDIRECT_MARKED_CALL(entry, iomux_epoll_wait(ep, events, maxevents, ms, mask));
	}
	REDIRECT_PASS(epoll_pwait2, epfd, events, maxevents, timeout, mask);
}
#endif
