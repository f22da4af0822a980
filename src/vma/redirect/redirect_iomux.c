/* Readiness calls. Until offloaded sockets exist every fd in a set is a
 * kernel fd, so these go straight to libc; the iomux part will split sets
 * into our objects and kernel fds here (see DESIGN.md, "Readiness"). */
#undef _FORTIFY_SOURCE
#include "redirect/redirect.h"

REDIRECT_EXPORT int select(int nfds, fd_set *__restrict r, fd_set *__restrict w, fd_set *__restrict e,
			   struct timeval *__restrict timeout)
{
	REDIRECT_PASS(select, nfds, r, w, e, timeout);
}

REDIRECT_EXPORT int pselect(int nfds, fd_set *__restrict r, fd_set *__restrict w, fd_set *__restrict e,
			    const struct timespec *__restrict timeout, const __sigset_t *__restrict mask)
{
	REDIRECT_PASS(pselect, nfds, r, w, e, timeout, mask);
}

REDIRECT_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	REDIRECT_PASS(poll, fds, nfds, timeout);
}

REDIRECT_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const __sigset_t *mask)
{
	REDIRECT_PASS(ppoll, fds, nfds, timeout, mask);
}

REDIRECT_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, __SIZE_TYPE__ fdslen)
{
	REDIRECT_PASS(__poll_chk, fds, nfds, timeout, fdslen);
}

REDIRECT_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
				const __sigset_t *mask, __SIZE_TYPE__ fdslen)
{
	REDIRECT_PASS(__ppoll_chk, fds, nfds, timeout, mask, fdslen);
}

static int redirect_new_epoll_fd(int epfd)
{
	if (epfd >= 0)
		redirect_fd_fresh(epfd);
	return epfd;
}

REDIRECT_EXPORT int epoll_create(int size)
{
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.epoll_create) orig = REDIRECT_ORIG_FN(epoll_create);
	return orig ? redirect_new_epoll_fd(orig(size)) : redirect_enosys();
}

REDIRECT_EXPORT int epoll_create1(int flags)
{
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.epoll_create1) orig = REDIRECT_ORIG_FN(epoll_create1);
	return orig ? redirect_new_epoll_fd(orig(flags)) : redirect_enosys();
}

REDIRECT_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	REDIRECT_PASS(epoll_ctl, epfd, op, fd, event);
}

REDIRECT_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	REDIRECT_PASS(epoll_wait, epfd, events, maxevents, timeout);
}

REDIRECT_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
				const __sigset_t *mask)
{
	REDIRECT_PASS(epoll_pwait, epfd, events, maxevents, timeout, mask);
}

#if REDIRECT_HAVE_EPOLL_PWAIT2
REDIRECT_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
				 const struct timespec *timeout, const __sigset_t *mask)
{
	REDIRECT_PASS(epoll_pwait2, epfd, events, maxevents, timeout, mask);
}
#endif
