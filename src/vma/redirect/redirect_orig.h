/* The C library's own versions of the functions libvma interposes.
 *
 * libvma's code that needs the kernel (the passthrough socket, the kernel
 * socket under an offloaded one) calls these, never the plain names, which
 * inside libvma.so resolve to our own wrappers. Resolution is lazy, once
 * per process and lock-free; it works before our constructor has run and
 * when libvma.so was dlopen()ed (RTLD_NEXT still finds libc). A function
 * this libc lacks stays NULL: use REDIRECT_ORIG_FN and treat NULL as ENOSYS. */
#ifndef VMA_REDIRECT_REDIRECT_ORIG_H
#define VMA_REDIRECT_REDIRECT_ORIG_H

#include <features.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define REDIRECT_HAVE_CLOSE_RANGE __GLIBC_PREREQ(2, 34)
#define REDIRECT_HAVE_EPOLL_PWAIT2 __GLIBC_PREREQ(2, 35)

/* The fortified entry points: glibc declares them only under
 * _FORTIFY_SOURCE, which the interposition files must not use. Same
 * prototypes as bits/unistd.h, bits/socket2.h and bits/poll2.h. */
extern ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
extern ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
extern ssize_t __recvfrom_chk(int fd, void *__restrict buf, size_t n, size_t buflen, int flags,
			      __SOCKADDR_ARG addr, socklen_t *__restrict addr_len);
extern int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, __SIZE_TYPE__ fdslen);
extern int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		       const __sigset_t *ss, __SIZE_TYPE__ fdslen);
/* glibc's "buffer overflow detected" abort, exported since GLIBC_2.3.4. */
extern void __chk_fail(void) __attribute__((noreturn));

/* One pointer per function, typed from the libc header's own declaration. */
struct redirect_orig {
#define REDIRECT_ORIG(name) __typeof__(name) *name;
#include "redirect/redirect_orig.def"
#undef REDIRECT_ORIG
};

extern struct redirect_orig redirect_orig;
/* Nonzero once redirect_resolve_originals() has filled the table. */
extern int redirect_orig_resolved;

/* Fills the table with dlsym(RTLD_NEXT, ...). Idempotent and safe to race:
 * every caller stores the same values, then publishes the flag. Calls no
 * interposed function and logs nothing (the logger may not be up). */
void redirect_resolve_originals(void);
/* Names this libc lacks, comma-separated, for a debug line at init. */
void redirect_orig_missing(char *buf, size_t size);

static inline bool redirect_orig_ready(void)
{
	return __atomic_load_n(&redirect_orig_resolved, __ATOMIC_ACQUIRE) != 0;
}

#define REDIRECT_ENSURE_ORIGINALS() \
	do { \
		if (__builtin_expect(!redirect_orig_ready(), 0)) \
			redirect_resolve_originals(); \
	} while (0)

/* The original `name` (may be NULL when this libc lacks it). A relaxed load
 * is a plain mov on the targets we run on, and keeps racing resolvers
 * well-defined. */
#define REDIRECT_ORIG_FN(name) __atomic_load_n(&redirect_orig.name, __ATOMIC_RELAXED)

#endif
