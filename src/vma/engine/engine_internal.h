/* State shared by the engine's files; not for other modules. */
#ifndef VMA_ENGINE_ENGINE_INTERNAL_H
#define VMA_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <sys/types.h>
#include "engine/engine.h"

enum engine_thread_state { ENGINE_THREAD_NONE = 0, ENGINE_THREAD_RUNNING, ENGINE_THREAD_STOPPED };

struct engine_fd_entry {
	int fd;
	uint32_t id;             /* never 0: epoll data 0 is the wake fd */
	uint32_t events;         /* as registered, for engine_fd_rearm */
	engine_fd_fn fn;
	void *arg;
};

struct engine_state {
	/* Guards timers, pollers and fds. Never held while a callback runs. */
	pthread_mutex_t lock;
	pthread_cond_t callback_done;   /* a callback returned */

	struct engine_timer **heap;
	size_t heap_len, heap_cap;
	uint64_t seq;
	int ticking;                    /* one engine_tick at a time */

	/* Which callback runs now and on which thread, so the *_sync calls
	 * wait for it unless they are made from inside it. */
	const struct engine_timer *running_timer;
	pthread_t running_timer_thread;
	const struct engine_poller *running_poller;
	pthread_t running_poller_thread;
	uint32_t running_fd_id;
	pthread_t running_fd_thread;

	struct engine_poller *pollers;
	uint32_t pass;
	struct engine_timer progress;

	struct engine_fd_entry *fds;
	size_t fd_len, fd_cap;
	uint32_t next_fd_id;

	/* Guards starting and stopping the thread. */
	pthread_mutex_t start_lock;
	int thread_state;               /* enum engine_thread_state, atomic */
	pthread_t thread;
	int epoll_fd, wake_fd, done_fd;
	int affinity_set;               /* cpu_affinity is valid */
	cpu_set_t cpu_affinity;
	int stop;                       /* atomic: the thread must return */
	int signal_request;             /* atomic: run the exit hooks, then return */
	int shutting_down;              /* atomic: no restart, no new hooks */
	int shutdown_called;            /* atomic: engine_shutdown ran */

	uint32_t generation;            /* bumped in each fork child */
	pid_t forked_pid;               /* child already handled */
};

extern struct engine_state engine;

/* Creates the epoll and eventfds if needed. Call with engine.lock held.
 * Returns 0 or -errno. */
int engine_fds_open_locked(void);
/* Wakes the thread from epoll_wait. Async-signal-safe. */
void engine_wake(void);
/* Closes an fd of ours without going through libvma's close(). */
void engine_close_raw(int fd);
/* Runs exit hooks not run yet, newest first. In signal context only the
 * ENGINE_HOOK_SIGNAL_SAFE ones. */
void engine_run_exit_hooks(bool signal_context);

#endif
