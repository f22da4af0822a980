/* What a blocking call of ours needs to know about signals, per thread:
 * the handlers of the application that ran in it, and whether it holds a
 * lock of ours (handlers are then held back). libvma's own handler
 * (redirect/redirect_signal.c, libvma.so only) writes these; the modules
 * that block or lock (sock/, iomux/, extra/) read them. Here, below them
 * all, so that they and their unit tests link without the interposed
 * symbols (where nothing counts, the counts stay 0 and no call is ever
 * interrupted by them).
 *
 * libvma puts its handler in front of every handler the application
 * installs, so that a blocking call that polls in user space learns that a
 * handler ran in its thread: Linux interrupts a blocked call with EINTR
 * there, or restarts it (SA_RESTART). */
#ifndef VMA_OS_OS_SIGNAL_H
#define VMA_OS_OS_SIGNAL_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* Handlers of the application this thread ran: all, and those without
 * SA_RESTART. Written only by the thread itself (in its handlers). */
struct os_sig_mark {
	unsigned caught;
	unsigned interrupting;
};

/* Per thread; initial-exec so the handler reads it without a call, and
 * small so a dlopen()ed libvma still fits glibc's static TLS surplus. */
struct os_sig_thread {
	struct os_sig_mark count;
	/* Locks of ours this thread holds (a lane, an epoll set): an
	 * application handler that ran now and called send() or close() on an
	 * offloaded fd would wait for a lock its own thread holds. Handlers
	 * that arrive meanwhile are held back and delivered again by the
	 * outermost unlock, as the kernel holds signals back in its critical
	 * sections. */
	unsigned defer_depth;
	uint64_t deferred;    /* bit sig-1: a handler waits for defer_depth 0 */
	int info_sig;         /* the first held-back signal's siginfo is kept */
	siginfo_t info;
	/* The eventfd the thread's coming kernel sleep waits on, plus one
	 * (0: none): os_signal_sleep_arm. */
	int sleep_fd1;
	/* The counts when the thread's running interposed call began, if
	 * one is running (os_signal_call_enter). */
	struct os_sig_mark call_mark;
	bool in_call;
};
extern __thread struct os_sig_thread os_sig_tls __attribute__((tls_model("initial-exec")));

/* Plain atomic loads of the thread's own fields (a handler of this thread
 * may write them between two of our instructions). */
static inline struct os_sig_mark os_signal_mark(void)
{
	struct os_sig_mark m = {
		__atomic_load_n(&os_sig_tls.count.caught, __ATOMIC_RELAXED),
		__atomic_load_n(&os_sig_tls.count.interrupting, __ATOMIC_RELAXED),
	};
	return m;
}

/* A blocking call counts handlers from when the application called it,
 * as Linux's call is interrupted by a signal that comes once it entered
 * the kernel: the interposed symbol takes os_signal_mark() first thing
 * and enters it here before the fd lookup, the look over a poll set and
 * the rest of our way in; the call's body takes os_signal_call_mark().
 * Nested calls (a handler's own) save and restore the outer one's. */
struct os_sig_call {
	struct os_sig_mark mark;
	bool in_call;
};

static inline struct os_sig_call os_signal_call_enter(struct os_sig_mark entry)
{
	struct os_sig_call prev = { os_sig_tls.call_mark, os_sig_tls.in_call };
	os_sig_tls.call_mark = entry;
	__asm__ __volatile__("" ::: "memory");
	os_sig_tls.in_call = true;
	__asm__ __volatile__("" ::: "memory");
	return prev;
}

static inline void os_signal_call_exit(struct os_sig_call prev)
{
	__asm__ __volatile__("" ::: "memory");
	os_sig_tls.in_call = prev.in_call;
	os_sig_tls.call_mark = prev.mark;
}

/* Outside an interposed call (the Extra API, unit tests): now. */
static inline struct os_sig_mark os_signal_call_mark(void)
{
	if (os_sig_tls.in_call)
		return os_sig_tls.call_mark;
	return os_signal_mark();
}

/* Delivers the held-back signals again (os_signal.c). */
void os_signal_run_deferred(void);

/* In a forked child: the locks the fork handlers took are made anew, not
 * unlocked, and signals held back were the parent's. */
static inline void os_signal_after_fork_child(void)
{
	os_sig_tls.defer_depth = 0;
	os_sig_tls.deferred = 0;
	os_sig_tls.info_sig = 0;
	os_sig_tls.sleep_fd1 = 0;
	os_sig_tls.in_call = false;
}

/* Around every lock of ours (no call, two TLS accesses). */
static inline void os_signal_defer_begin(void)
{
	os_sig_tls.defer_depth++;
	__asm__ __volatile__("" ::: "memory");
}

static inline void os_signal_defer_end(void)
{
	__asm__ __volatile__("" ::: "memory");
	if (--os_sig_tls.defer_depth == 0 &&
	    __builtin_expect(__atomic_load_n(&os_sig_tls.deferred, __ATOMIC_RELAXED) != 0, 0))
		os_signal_run_deferred();
}

/* Whether a handler ran in this thread since mark was taken. */
static inline bool os_signal_caught_since(const struct os_sig_mark *mark)
{
	return __atomic_load_n(&os_sig_tls.count.caught, __ATOMIC_RELAXED) != mark->caught;
}

/* What a blocking call does when a handler ran in its thread since *mark,
 * as Linux decides it (signal(7)): returns true with errno EINTR when the
 * call must fail (a handler without SA_RESTART, or a call Linux never
 * restarts: restartable false for epoll_wait, poll, select, a call with a
 * timeout, or one that already moved data); otherwise the call goes on and
 * *mark moves to now. One branch when no handler ran. */
bool os_signal_interrupts_slow(struct os_sig_mark *mark, bool restartable);
static inline bool os_signal_interrupts(struct os_sig_mark *mark, bool restartable)
{
	if (__builtin_expect(!os_signal_caught_since(mark), 1))
		return false;
	return os_signal_interrupts_slow(mark, restartable);
}

/* A blocking call that is about to sleep in the kernel names, before its
 * last os_signal_interrupts look, an eventfd that sleep waits on. A handler
 * that runs from then on (one held back by a lock of ours and re-raised at
 * its unlock included) writes it: a signal handled in user space is not
 * seen by a later system call, so without this the sleep would last until
 * its next wake-up or timeout instead of returning at once. The caller
 * drains the eventfd after the sleep (after os_signal_sleep_disarm) when a
 * handler ran. Returns the previous value for disarm: a handler may itself
 * block. fd -1 arms nothing (the caller still disarms). */
static inline int os_signal_sleep_arm(int fd)
{
	int prev = os_sig_tls.sleep_fd1;
	__atomic_store_n(&os_sig_tls.sleep_fd1, fd + 1, __ATOMIC_RELAXED);
	__asm__ __volatile__("" ::: "memory");
	return prev;
}

static inline void os_signal_sleep_disarm(int prev)
{
	__asm__ __volatile__("" ::: "memory");
	__atomic_store_n(&os_sig_tls.sleep_fd1, prev, __ATOMIC_RELAXED);
}

/* For libvma's handler, after it counted an application handler: wakes
 * the sleep armed in this thread, if any (async-signal-safe). */
void os_signal_wake_sleep(void);

#endif
