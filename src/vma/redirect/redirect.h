/* Shared by the files that define the interposed libc symbols (libvma.so
 * only). Each of them starts with `#undef _FORTIFY_SOURCE` before any
 * header: under fortification glibc turns read(), recv(), poll()... into
 * inline functions, and we must define the real external symbols. */
#ifndef VMA_REDIRECT_REDIRECT_H
#define VMA_REDIRECT_REDIRECT_H

#include <errno.h>
#include <stdbool.h>
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_call.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_offload.h"

/* The only symbols libvma.so exports (with the Extra API's later). */
#define REDIRECT_EXPORT __attribute__((visibility("default")))

/* `call`, counting signal handlers from `entry`: the counts the interposed
 * symbol read first thing (os_signal_call_enter). Its value. */
#define REDIRECT_MARKED_CALL(entry, call) \
	({ \
		struct os_sig_call outer_ = os_signal_call_enter(entry); \
		__auto_type marked_ = (call); \
		os_signal_call_exit(outer_); \
		marked_; \
	})

/* Where an interposed call that libc makes a cancellation point (recv,
 * send, read, write, poll, select, epoll_wait, accept, connect) is answered
 * in user space: a pthread_cancel() pending for the thread acts here, before
 * anything is locked or counted, as it would in libc's function. Without it
 * a thread looping on calls we answer at once (an epoll_wait that always
 * has events, a recv that always finds data) could never be cancelled.
 * One load of the thread's cancel word when nothing is pending. */
#define REDIRECT_CANCEL_POINT() pthread_testcancel()

/* The hot-path shape of every fd call: resolve-if-needed (one predictable
 * branch), one table load; when the fd's object has `op`: `fortify` (a
 * fortified call's check, __chk_fail when false), a cancellation point
 * when `declinable` (the data calls, all cancellation points), then `call` with the
 * object as obj_, pinned for the call (close() in another thread cannot
 * free it under us; sock_obj_call_begin: nor does a cancellation inside
 * the call leak it), whose result is returned, unless `declinable` and the
 * kind declined (SOCK_OP_KERNEL); otherwise libc's `name` with the
 * application's arguments. No lock, no allocation. A missing original
 * yields -1/ENOSYS. The signal counts are read first (os_signal_call_enter:
 * a handler from then on interrupts a blocking call). */
#define REDIRECT_OBJ_CALL(op, name, fd, declinable, fortify, call, ...) \
	do { \
		struct os_sig_mark entry_ = os_signal_mark(); \
		os_libc_ensure(); \
		struct sock_obj *obj_ = sock_fd_get(fd); \
		if (obj_ && obj_->ops->op) { \
			if (__builtin_expect(!(fortify), 0)) \
				__chk_fail(); \
			if (declinable) \
				REDIRECT_CANCEL_POINT(); \
			sock_obj_call_begin(obj_); \
			__auto_type ret_ = REDIRECT_MARKED_CALL(entry_, call); \
			sock_obj_call_end(obj_); \
			if (!(declinable) || __builtin_expect(ret_ != SOCK_OP_KERNEL, 1)) \
				return ret_; \
		} \
		sock_offload_flush_mine(); /* the kernel may block: sock_offload.h */ \
		__typeof__(os_libc.name) orig_ = OS_FN_RESOLVED(name); \
		if (__builtin_expect(!orig_, 0)) \
			return redirect_enosys(); \
		return orig_(fd, __VA_ARGS__); \
	} while (0)

/* A control call (bind, setsockopt, ioctl...): the op of the same name with
 * the application's arguments (it answers the call, kernel part included). */
#define REDIRECT_FD_CALL(name, fd, ...) \
	REDIRECT_OBJ_CALL(name, name, fd, 0, 1, obj_->ops->name(obj_, __VA_ARGS__), __VA_ARGS__)

/* A data call: its one conversion (sock/sock_call.h) to the kind's recvmsg
 * or sendmsg op, which may decline it. */
#define REDIRECT_SOCK_CALL(op, name, fd, call, ...) REDIRECT_OBJ_CALL(op, name, fd, 1, 1, call, __VA_ARGS__)

/* A call with no object involvement: straight to the original. */
#define REDIRECT_PASS(name, ...) \
	do { \
		os_libc_ensure(); \
		sock_offload_flush_mine(); \
		__typeof__(os_libc.name) orig_ = OS_FN_RESOLVED(name); \
		if (__builtin_expect(!orig_, 0)) \
			return redirect_enosys(); \
		return orig_(__VA_ARGS__); \
	} while (0)

static inline int redirect_enosys(void)
{
	return os_enosys();
}

/* The kernel just handed out `fd` (pipe, dup, epoll_create...): any entry
 * left for that number is stale (its fd was closed behind our back, e.g.
 * by fclose() or a raw syscall) and must not meet the new file. */
static inline void redirect_fd_fresh(int fd)
{
	if (__builtin_expect(sock_fd_get(fd) != NULL, 0))
		sock_fd_drop(fd);
}

/* Registers a passthrough object for a new socket fd when it is of a kind
 * libvma tracks; otherwise only clears a stale entry. `how` names the call
 * for the debug log. Never fails the application's call. */
void redirect_track_socket(int fd, int domain, int type, int protocol, const char *how);

#include "redirect/redirect_signal.h"

#endif
