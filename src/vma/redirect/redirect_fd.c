/* Calls that end or copy descriptors. The rule: an entry leaves the table
 * BEFORE the kernel can hand its number to someone else. Once close() is
 * in the kernel, another thread's socket()/accept()/open() may get the same
 * number at once; if we cleared afterwards we could wipe (and retire) that
 * thread's brand-new object. Clearing first means a racing lookup of the
 * old fd sees "untracked" and goes to the kernel, which answers EBADF or
 * serves the call on the still-open fd: correct either way. */
#undef _FORTIFY_SOURCE
#include <stdarg.h>
#include "config/cfg_params.h"
#include "redirect/redirect.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

REDIRECT_EXPORT int close(int fd)
{
	os_libc_ensure();
	/* Taken even when the close then fails: on Linux close() releases the
	 * number whatever it returns (EINTR, EIO), and EBADF means the entry
	 * was stale already. */
	struct sock_obj *obj = sock_fd_take(fd);
	int ret;
	if (obj && obj->ops->close) {
		ret = obj->ops->close(obj);
	} else {
		__typeof__(os_libc.close) orig = OS_FN_RESOLVED(close);
		ret = orig ? orig(fd) : redirect_enosys();
	}
	if (obj) {
		int saved = errno;
		sock_obj_retire(obj);
		errno = saved;
	}
	return ret;
}

#if OS_HAVE_CLOSE_RANGE
REDIRECT_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	os_libc_ensure();
	__typeof__(os_libc.close_range) orig = OS_FN_RESOLVED(close_range);
	if (!orig)
		return redirect_enosys();
	/* Arguments the kernel will refuse close nothing: keep our entries.
	 * CLOEXEC only marks the fds. Otherwise drop first (see top). */
	bool valid = first <= last && !((unsigned int)flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC));
	if (valid && !((unsigned int)flags & CLOSE_RANGE_CLOEXEC))
		sock_fd_drop_range(first, last);
	return orig(first, last, flags);
}
#endif

REDIRECT_EXPORT int dup(int oldfd)
{
	os_libc_ensure();
	__typeof__(os_libc.dup) orig = OS_FN_RESOLVED(dup);
	if (!orig)
		return redirect_enosys();
	/* The duplicate is left to the kernel (untracked): it shares the open
	 * file with oldfd, and offloaded state cannot follow two numbers. */
	int newfd = orig(oldfd);
	if (newfd >= 0)
		redirect_fd_fresh(newfd);
	return newfd;
}

/* dup2 and dup3: the kernel closes newfd implicitly, so its entry must go.
 * VMA_CLOSE_ON_DUP2=1 (default): drop it first, as close() does, then
 * forward. =0: forward first, and drop only when the kernel did replace
 * newfd (a failed dup2 leaves the socket as it was). */
static int redirect_dup_onto(int oldfd, int newfd, int flags, bool is_dup3)
{
	os_libc_ensure();
	bool replaces = oldfd != newfd;
	if (replaces && g_cfg.close_on_dup2)
		sock_fd_drop(newfd);
	int ret;
	if (is_dup3) {
		__typeof__(os_libc.dup3) orig = OS_FN_RESOLVED(dup3);
		ret = orig ? orig(oldfd, newfd, flags) : redirect_enosys();
	} else {
		__typeof__(os_libc.dup2) orig = OS_FN_RESOLVED(dup2);
		ret = orig ? orig(oldfd, newfd) : redirect_enosys();
	}
	if (ret >= 0 && replaces) {
		int saved = errno;
		sock_fd_drop(newfd);
		errno = saved;
	}
	return ret;
}

REDIRECT_EXPORT int dup2(int oldfd, int newfd)
{
	return redirect_dup_onto(oldfd, newfd, 0, false);
}

REDIRECT_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return redirect_dup_onto(oldfd, newfd, flags, true);
}

/* fcntl's third argument is fetched as a pointer, as glibc does, so both
 * integer commands (F_SETFL) and pointer ones (F_GETLK, F_SETOWN_EX) pass
 * through unchanged. F_DUPFD* make a fresh untracked fd, like dup(). */
static int redirect_fcntl_common(int fd, int cmd, void *arg, bool is_64)
{
	os_libc_ensure();
	struct sock_obj *obj = sock_fd_get(fd);
	int ret;
	if (obj && obj->ops->fcntl && cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC) {
		sock_obj_pin(obj);
		ret = obj->ops->fcntl(obj, cmd, arg);
		sock_obj_unpin(obj);
	} else if (is_64) {
		__typeof__(os_libc.fcntl64) orig = OS_FN_RESOLVED(fcntl64);
		ret = orig ? orig(fd, cmd, arg) : redirect_enosys();
	} else {
		__typeof__(os_libc.fcntl) orig = OS_FN_RESOLVED(fcntl);
		ret = orig ? orig(fd, cmd, arg) : redirect_enosys();
	}
	if (ret >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		redirect_fd_fresh(ret);
	return ret;
}

REDIRECT_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return redirect_fcntl_common(fd, cmd, arg, false);
}

REDIRECT_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return redirect_fcntl_common(fd, cmd, arg, true);
}

REDIRECT_EXPORT int pipe(int fds[2])
{
	os_libc_ensure();
	__typeof__(os_libc.pipe) orig = OS_FN_RESOLVED(pipe);
	if (!orig)
		return redirect_enosys();
	int ret = orig(fds);
	if (ret == 0) {
		redirect_fd_fresh(fds[0]);
		redirect_fd_fresh(fds[1]);
	}
	return ret;
}

REDIRECT_EXPORT int pipe2(int fds[2], int flags)
{
	os_libc_ensure();
	__typeof__(os_libc.pipe2) orig = OS_FN_RESOLVED(pipe2);
	if (!orig)
		return redirect_enosys();
	int ret = orig(fds, flags);
	if (ret == 0) {
		redirect_fd_fresh(fds[0]);
		redirect_fd_fresh(fds[1]);
	}
	return ret;
}
