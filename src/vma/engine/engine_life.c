/* Process lifecycle: exit hooks, shutdown (destructor/atexit and the
 * SIGINT/SIGTERM path), and the fork child.
 *
 * What runs where:
 *  - engine_shutdown (normal context): stops and joins the thread, closes
 *    the engine's fds, runs the remaining hooks on the calling thread.
 *  - engine_shutdown_from_signal (signal handler): only atomics and
 *    async-signal-safe calls. It asks the internal thread to run the hooks (a normal
 *    thread context, where hooks may lock and allocate) and waits a bounded
 *    time; hooks marked SIGNAL_SAFE that are still pending run inline.
 * Each hook is claimed with a compare-and-swap, so whichever path comes
 * first runs it, exactly once. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "engine/engine_internal.h"
#include "log/vlog.h"
#include "os/os.h"

struct engine_exit_hook {
	engine_exit_fn fn;
	void *arg;
	unsigned flags;
	uint32_t generation;
	int claimed;             /* atomic: 0 pending, 1 run (or skipped) */
};

static pthread_mutex_t engine_hook_lock = PTHREAD_MUTEX_INITIALIZER;
static struct engine_exit_hook engine_hooks[ENGINE_EXIT_HOOKS_MAX];
static int engine_hook_count;   /* published with release after the slot */

int engine_exit_hook_add(engine_exit_fn fn, void *arg, unsigned flags)
{
	if (!fn)
		return -EINVAL;
	pthread_mutex_lock(&engine_hook_lock);
	int ret = 0;
	int count = engine_hook_count;
	if (__atomic_load_n(&engine.shutting_down, __ATOMIC_ACQUIRE))
		ret = -ESHUTDOWN;
	else if (count == ENGINE_EXIT_HOOKS_MAX)
		ret = -ENOSPC;
	else {
		engine_hooks[count] = (struct engine_exit_hook){ fn, arg, flags, engine.generation, 0 };
		__atomic_store_n(&engine_hook_count, count + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&engine_hook_lock);
	return ret;
}

void engine_run_exit_hooks(bool signal_context)
{
	uint32_t generation = __atomic_load_n(&engine.generation, __ATOMIC_ACQUIRE);
	for (int i = __atomic_load_n(&engine_hook_count, __ATOMIC_ACQUIRE); i-- > 0;) {
		struct engine_exit_hook *hook = &engine_hooks[i];
		bool inherited = hook->generation != generation && !(hook->flags & ENGINE_HOOK_FORK_SAFE);
		if (signal_context && !inherited && !(hook->flags & ENGINE_HOOK_SIGNAL_SAFE))
			continue;
		int expected = 0;
		if (!__atomic_compare_exchange_n(&hook->claimed, &expected, 1, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			continue;
		/* The parent's rings, XDP program and sockets are not ours. */
		if (!inherited)
			hook->fn(hook->arg);
	}
}

static void engine_stop_thread(void)
{
	pthread_mutex_lock(&engine.start_lock);
	if (__atomic_load_n(&engine.thread_state, __ATOMIC_ACQUIRE) == ENGINE_THREAD_RUNNING) {
		__atomic_store_n(&engine.stop, 1, __ATOMIC_RELEASE);
		if (pthread_equal(pthread_self(), engine.thread)) {
			/* From one of our own callbacks: the loop ends when it
			 * returns; nobody is left to join it. */
			pthread_detach(engine.thread);
		} else {
			engine_wake();
			pthread_join(engine.thread, NULL);
		}
		__atomic_store_n(&engine.thread_state, ENGINE_THREAD_STOPPED, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&engine.start_lock);
}

void engine_shutdown(void)
{
	if (__atomic_exchange_n(&engine.shutdown_called, 1, __ATOMIC_ACQ_REL))
		return;
	__atomic_store_n(&engine.shutting_down, 1, __ATOMIC_RELEASE);
	bool own_callback = engine_on_thread();
	engine_stop_thread();
	engine_run_exit_hooks(false);
	if (!own_callback) {
		pthread_mutex_lock(&engine.lock);
		int fds[3] = { engine.epoll_fd, engine.wake_fd, engine.done_fd };
		__atomic_store_n(&engine.wake_fd, -1, __ATOMIC_RELEASE);
		engine.epoll_fd = engine.done_fd = -1;
		engine.fd_len = 0;
		pthread_mutex_unlock(&engine.lock);
		for (int i = 0; i < 3; i++)
			engine_close_raw(fds[i]);
	}
	vlog_debug("internal thread stopped, exit hooks run");
}

static void engine_wait_done_from_signal(void)
{
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);   /* async-signal-safe */
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long spent = (now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L;
		long left = ENGINE_SIGNAL_WAIT_MS - spent;
		if (left <= 0)
			break;
		struct pollfd pfd = { .fd = engine.done_fd, .events = POLLIN };
		struct timespec timeout = { left / 1000, (left % 1000) * 1000000L };
		long n = OS_CALL(ppoll, &pfd, 1, &timeout, NULL);
		if (n > 0)
			return;
		if (n == 0 || errno != EINTR)
			break;
	}
	vlog_warn("exit hooks did not finish within %d ms of the signal; continuing", ENGINE_SIGNAL_WAIT_MS);
}

void engine_shutdown_from_signal(void)
{
	int saved = errno;
	__atomic_store_n(&engine.shutting_down, 1, __ATOMIC_RELEASE);
	if (engine_running() && !pthread_equal(pthread_self(), engine.thread)) {
		if (!__atomic_exchange_n(&engine.signal_request, 1, __ATOMIC_ACQ_REL))
			engine_wake();
		engine_wait_done_from_signal();
	}
	engine_run_exit_hooks(true);
	errno = saved;
}

void engine_after_fork_child(void)
{
	pid_t self = (pid_t)getpid();
	if (engine.forked_pid == self)
		return;
	engine.forked_pid = self;
	/* Only the forking thread exists here: a lock another thread (the
	 * internal thread included) held at fork time stays held forever. */
	pthread_mutex_init(&engine.lock, NULL);
	pthread_cond_init(&engine.callback_done, NULL);
	pthread_mutex_init(&engine.start_lock, NULL);
	pthread_mutex_init(&engine_hook_lock, NULL);
	__atomic_store_n(&engine.generation, engine.generation + 1, __ATOMIC_RELEASE);

	/* Forget the parent's registrations without touching them: their
	 * fds and memory are the parent's objects (shared epoll instance,
	 * netlink socket, ring wait fds). Our copies of the engine's own fds
	 * are closed; closing a copy does not affect the parent's. */
	engine.heap_len = 0;
	engine.pollers = NULL;
	engine.fd_len = 0;
	engine.running_timer = NULL;
	engine.running_poller = NULL;
	engine.running_fd_id = 0;
	engine.ticking = 0;
	engine_close_raw(engine.epoll_fd);
	engine_close_raw(engine.wake_fd);
	engine_close_raw(engine.done_fd);
	engine.epoll_fd = engine.wake_fd = engine.done_fd = -1;
	engine.thread_state = ENGINE_THREAD_NONE;
	engine.stop = 0;
	engine.signal_request = 0;
	/* The child has a lifecycle of its own. */
	engine.shutting_down = 0;
	engine.shutdown_called = 0;
}
