/* The internal thread ("vma-internal"): timers, periodic draining of rings
 * nobody polled, event fds (ring wait fds, netlink), and the process
 * lifecycle (exit hooks, SIGINT/SIGTERM, fork). See docs/engine.md.
 *
 * Everything here is callable from any thread. Callbacks run without any
 * engine lock held, so they may add, cancel or re-arm timers (themselves
 * included), register pollers and fds. The engine does all its kernel work
 * through libc's own functions (os/os.h), so it never enters libvma's own
 * interposed symbols. */
#ifndef VMA_ENGINE_ENGINE_H
#define VMA_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

/* ---- Timers ---------------------------------------------------------- */

typedef void (*engine_timer_fn)(void *arg);

/* Embedded by its owner (no allocation when it fires). Zero it or call
 * engine_timer_init before first use; the fields are the engine's. */
struct engine_timer {
	uint64_t deadline_ms;
	uint64_t seq;            /* ties on deadline fire in arming order */
	uint32_t period_ms;      /* 0 = one-shot */
	int32_t heap_index;      /* -1 when not armed */
	uint32_t generation;     /* fork generation it was armed in */
	engine_timer_fn fn;
	void *arg;
};

void engine_timer_init(struct engine_timer *timer);
/* Arms (or re-arms, replacing the previous deadline and period) to fire
 * first after delay_ms, then every period_ms (0 = once). Delays and periods
 * shorter than VMA_TIMER_RESOLUTION_MSEC are accepted for the first firing
 * but a nonzero period is raised to the resolution. Returns 0 or -ENOMEM. */
int engine_timer_add(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms,
		     engine_timer_fn fn, void *arg);
/* Re-arms an armed or expired timer with its own fn/arg. */
int engine_timer_rearm(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms);
/* Disarms; false if it was not armed. Does not wait for a callback that is
 * running right now on another thread (use engine_timer_cancel_sync). */
bool engine_timer_cancel(struct engine_timer *timer);
/* Disarms and waits until its callback is not running on another thread,
 * so the caller may free the timer. Safe from inside its own callback. */
bool engine_timer_cancel_sync(struct engine_timer *timer);
bool engine_timer_armed(const struct engine_timer *timer);

/* ---- Pollers: "drain me if nobody polled me since the last tick" ---- */

/* Handles at most budget completions; returns how many it handled. */
typedef int (*engine_poller_fn)(void *arg, int budget);

struct engine_poller {
	struct engine_poller *next;
	engine_poller_fn fn;
	void *arg;
	int app_polled;          /* set by engine_note_app_poll, cleared per tick */
	uint32_t pass;           /* last progress pass that visited it */
	uint32_t generation;
	bool registered;
	int last_work;           /* what fn returned the last time it ran */
};

/* Called every VMA_PROGRESS_ENGINE_INTERVAL ms (never when it is 0) with a
 * budget of VMA_PROGRESS_ENGINE_WCE_MAX, unless the application polled the
 * ring since the previous tick. Returns 0 (also when the interval is 0: the
 * poller is then kept but never called). */
int engine_poller_register(struct engine_poller *poller, engine_poller_fn fn, void *arg);
/* Unregisters and waits until fn is not running on another thread. */
void engine_poller_unregister(struct engine_poller *poller);

/* The application's fast path: one plain store, no lock, no atomic RMW. */
static inline void engine_note_app_poll(struct engine_poller *poller)
{
	__atomic_store_n(&poller->app_polled, 1, __ATOMIC_RELAXED);
}

/* ---- Event fds --------------------------------------------------------- */

typedef void (*engine_fd_fn)(int fd, uint32_t revents, void *arg);

/* Watches fd (EPOLLIN, ...) from the internal thread, starting it if needed.
 * The fd must stay open until engine_fd_del. Returns 0, -EEXIST, -EBADF,
 * or another -errno (the thread could not start). */
int engine_fd_add(int fd, uint32_t events, engine_fd_fn fn, void *arg);
/* Stops watching; waits until its callback is not running on another
 * thread. Returns 0 or -ENOENT. */
int engine_fd_del(int fd);
/* Re-enables an fd added with EPOLLONESHOT after its callback ran: the
 * kernel looks at the fd's state again at once, so a callback that left it
 * ready is called again on the next turn. Returns 0, -ENOENT or -errno. */
int engine_fd_rearm(int fd);

/* ---- The thread -------------------------------------------------------- */

/* Starts the internal thread once (lazy, thread-safe): name "vma-internal",
 * all asynchronous signals blocked, affinity VMA_INTERNAL_THREAD_AFFINITY,
 * cpuset VMA_INTERNAL_THREAD_CPUSET. Returns 0, -ESHUTDOWN after
 * engine_shutdown, or -errno when the thread cannot be created (one warning;
 * the application's own polling still drives everything). */
int engine_start(void);
bool engine_running(void);
/* True on the internal thread itself. */
bool engine_on_thread(void);

/* Parses VMA_INTERNAL_THREAD_AFFINITY: "-1" or "" (none), a hexadecimal
 * mask "0x5", or a list "0,2,7-9". Fills *set (a cpu_set_t) and returns 1,
 * returns 0 for "none", -1 for a malformed value. */
int engine_affinity_parse(const char *text, void *cpu_set);

/* Runs every timer due now and one progress pass if due; returns the
 * milliseconds to the next deadline (-1: none). The thread calls it; tests
 * drive it directly with a test clock. */
int engine_tick(void);

/* Milliseconds on CLOCK_MONOTONIC, or the test clock. */
uint64_t engine_now_ms(void);
/* The same clock in microseconds (a test clock hook's ms times 1000). */
uint64_t engine_now_us(void);
/* True when due_ms (engine_now_ms time; UINT64_MAX never) has come: one
 * vDSO clock read, for a look without a lock on every pass. */
bool engine_deadline_passed(uint64_t due_ms);
/* Replaces the clock (NULL restores CLOCK_MONOTONIC). For tests. */
void engine_set_clock(uint64_t (*now_ms)(void));

/* VMA_TIMER_RESOLUTION_MSEC (10 before the parameters are loaded). */
uint32_t engine_timer_resolution_ms(void);
/* VMA_TCP_TIMER_RESOLUTION_MSEC, raised to VMA_TIMER_RESOLUTION_MSEC. */
uint32_t engine_tcp_timer_period_ms(void);
/* VMA_INTERNAL_THREAD_TCP_TIMER_HANDLING == 1 (immediate). */
bool engine_tcp_timer_immediate(void);
/* VMA_INTERNAL_THREAD_ARM_CQ: rings then engine_fd_add their wait fd. */
bool engine_arm_cq(void);

/* ---- Lifecycle --------------------------------------------------------- */

typedef void (*engine_exit_fn)(void *arg);

/* The hook also runs in a child process that inherited it by fork. */
#define ENGINE_HOOK_FORK_SAFE 0x1u
/* The hook is async-signal-safe: it may run inside the signal handler when
 * the internal thread cannot run it (see engine_shutdown_from_signal). */
#define ENGINE_HOOK_SIGNAL_SAFE 0x2u

#define ENGINE_EXIT_HOOKS_MAX 64

/* Registers fn(arg) to run once at shutdown, in reverse order of
 * registration. Returns 0, -ENOSPC, or -ESHUTDOWN once shutdown began. */
int engine_exit_hook_add(engine_exit_fn fn, void *arg, unsigned flags);

/* Stops and joins the thread, then runs the exit hooks not run yet. Later
 * calls do nothing. For the destructor / atexit; not from a callback. */
void engine_shutdown(void);

/* Async-signal-safe (SIGINT/SIGTERM with VMA_HANDLE_SIGINTR). When the
 * internal thread is up, it is asked to run the exit hooks and this waits
 * for it at most ENGINE_SIGNAL_WAIT_MS (the interrupted thread may hold a
 * lock a hook needs). Otherwise only ENGINE_HOOK_SIGNAL_SAFE hooks run here;
 * the rest are left to engine_shutdown. Idempotent. */
#define ENGINE_SIGNAL_WAIT_MS 2000
void engine_shutdown_from_signal(void);

/* In the child after fork: the parent's thread does not exist here. Every
 * timer, poller, fd and exit hook registered before the fork belongs to the
 * parent: none of them runs in the child (hooks only if FORK_SAFE), and
 * nothing of the parent's is touched. The child's own registrations start
 * a fresh thread lazily. Runs once per child process. */
void engine_after_fork_child(void);

#endif
