/* os/: the one way from libvma's code to the kernel, below every other
 * module (docs/architecture.md).
 *
 * libvma.so exports socket(), close(), recvfrom()... (redirect/): inside
 * the library those plain names are our own wrappers, and a module that
 * called them would re-enter the fd table, the lazy init, even the lane it
 * is building. So every module reaches libc's own versions of the functions
 * libvma interposes through this table, never by name (tests/unit/
 * check_libc_calls.sh fails on a core object that leaves one of them
 * undefined). Functions libvma does not interpose are called by name.
 *
 * Resolution is lazy, once per process and lock-free; it works before our
 * constructor has run, in unit tests (not interposed: libc's own symbols)
 * and when libvma.so was dlopen()ed (RTLD_NEXT still finds libc). A
 * function this libc lacks stays NULL: OS_CALL answers -1 with ENOSYS. */
#ifndef VMA_OS_OS_H
#define VMA_OS_OS_H

#include <errno.h>
#include <features.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define OS_HAVE_CLOSE_RANGE __GLIBC_PREREQ(2, 34)
#define OS_HAVE_COND_CLOCKWAIT __GLIBC_PREREQ(2, 30)

/* Our spin locks (a lane's, an epoll set's) spin this many pauses before
 * they yield the core: about 6 us where a pause takes 22 ns (the
 * development machine's Xeon), longer than any holder keeps them. A holder
 * preempted while others spin (more threads than cores) then costs each
 * waiter those microseconds, not its whole time slice. 4096 pauses (90 us
 * there) was too long: four threads of one lane on two cores spent 46% of
 * their time spinning (tests/bench/mp_bench.sh, threads x4). */
#define OS_SPIN_PAUSES_MAX 256

/* Thread-locals read on every socket call or epoll pass: initial-exec, so an
 * access is one %fs-relative load instead of a __tls_get_addr call (the
 * default in a -fPIC library). Preloaded, or dlopened with a few dozen
 * bytes of these, libvma fits glibc's static TLS surplus (os_sig_tls is
 * initial-exec too). */
#define OS_TLS_HOT __attribute__((tls_model("initial-exec")))

static inline void os_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}
#define OS_HAVE_EPOLL_PWAIT2 __GLIBC_PREREQ(2, 35)

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

/* One pointer per interposed function, typed from libc's own declaration. */
struct os_libc {
#define OS_LIBC(name) __typeof__(name) *name;
#include "os/os_libc.def"
#undef OS_LIBC
};

extern struct os_libc os_libc;
/* Nonzero once os_libc_resolve() has filled the table. */
extern int os_libc_resolved;

/* Fills the table with dlsym(RTLD_NEXT, ...). Idempotent and safe to race:
 * every caller stores the same values, then publishes the flag. Calls no
 * interposed function and logs nothing (the logger itself comes here). */
void os_libc_resolve(void);
/* Names this libc lacks, comma-separated, for a debug line at init. */
void os_libc_missing(char *buf, size_t size);

static inline bool os_libc_ready(void)
{
	return __atomic_load_n(&os_libc_resolved, __ATOMIC_ACQUIRE) != 0;
}

/* One predictable branch once resolved. */
static inline void os_libc_ensure(void)
{
	if (__builtin_expect(!os_libc_ready(), 0))
		os_libc_resolve();
}

static inline int os_enosys(void)
{
	errno = ENOSYS;
	return -1;
}

/* libc's `name` after os_libc_ensure(): NULL when this libc lacks it. A
 * relaxed load is a plain mov on the targets we run on, and keeps racing
 * resolvers well-defined. */
#define OS_FN_RESOLVED(name) __atomic_load_n(&os_libc.name, __ATOMIC_RELAXED)

/* libc's `name` (resolving the table first if needed); NULL when this libc
 * lacks it. */
#define OS_FN(name) (os_libc_ensure(), OS_FN_RESOLVED(name))

/* Calls libc's `name` with the arguments: its result, or -1 with errno
 * ENOSYS when this libc lacks it. For the functions returning an integer
 * (all but signal, which callers take with OS_FN). */
#define OS_CALL(name, ...) \
	({ \
		__typeof__(os_libc.name) os_fn_ = OS_FN(name); \
		__builtin_expect(os_fn_ != NULL, 1) ? os_fn_(__VA_ARGS__) : os_enosys(); \
	})

/* ---- calls that are never cancellation points ----
 * libc's read, write, close, sendto, recvfrom and eventfd_read/write are
 * cancellation points: a pthread_cancel() pending for the thread ends it
 * inside them. Where libvma makes them for itself (its eventfds, the
 * rings' doorbells), often with a lane or an epoll set locked, such an end
 * would leave the lock held and every other thread of the process stuck on
 * it. These are the raw system calls, which never act on a cancellation
 * (and skip libc's two atomic operations around each such call). A
 * pending cancellation acts at the interposed call's entry or in its sleep
 * (docs/architecture.md, "Thread cancellation"). */
static inline long os_write_nocancel(int fd, const void *buf, size_t len)
{
	return syscall(SYS_write, fd, buf, len);
}

static inline int os_efd_write(int fd, uint64_t value)
{
	return os_write_nocancel(fd, &value, sizeof(value)) == (long)sizeof(value) ? 0 : -1;
}

static inline int os_efd_read(int fd, uint64_t *value)
{
	return syscall(SYS_read, fd, value, sizeof(*value)) == (long)sizeof(*value) ? 0 : -1;
}

static inline int os_close_nocancel(int fd)
{
	return (int)syscall(SYS_close, fd);
}

/* A look at a kernel socket that must not block nor end the thread: a
 * receive counted as a lane's watcher reads its kernel socket every
 * VMA_RX_UDP_POLL_OS_RATIO polls, and a cancellation acting there would
 * leave it counted (its sleep's cleanup handler does not run). */
static inline long os_recvmsg_nocancel(int fd, struct msghdr *msg, int flags)
{
	return syscall(SYS_recvmsg, fd, msg, flags | MSG_DONTWAIT);
}

static inline long os_sendto_nocancel(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
				      socklen_t tolen)
{
	return syscall(SYS_sendto, fd, buf, len, flags | MSG_DONTWAIT, to, tolen);
}

static inline void os_sleep_us_nocancel(long us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
	(void)syscall(SYS_nanosleep, &ts, NULL);
}

/* pthread_cond_wait with cancellation off: a cancellation acting in it
 * returns with the mutex locked and unwinds, leaving it held. For waits
 * inside an application call on a mutex other threads need. */
static inline void os_cond_wait_nocancel(pthread_cond_t *cond, pthread_mutex_t *mutex)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
	(void)OS_CALL(pthread_cond_wait, cond, mutex);   /* libc's: ours would flush held sends under the mutex */
	pthread_setcancelstate(state, NULL);
}

/* An AF_XDP doorbell: a zero-length sendto (TX) or recvfrom (RX wake-up). */
static inline long os_xsk_kick_tx(int fd)
{
	return syscall(SYS_sendto, fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
}

static inline long os_xsk_kick_rx(int fd)
{
	return syscall(SYS_recvfrom, fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
}

#endif
