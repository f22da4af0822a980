/* Which thread (core) reads a socket: the window of receive calls that
 * VMA_RING_MIGRATION_RATIO_RX defines, shared by the UDP and TCP socket
 * kinds (sock_udp_migrate.c, sock_tcp_move.c; docs/process_model.md).
 *
 * Under logic 20 (a lane per thread) or 31 (per core, following the
 * reader) every `ratio` receive calls are a window: each call notes who
 * made it (its thread, or with 31 its core: sched_getcpu, no syscall).
 * A window all of whose calls came from one caller ends "clean": the
 * socket kind then considers moving to that caller's lane. Heuristic
 * counters: plain relaxed atomics, a lost update only shifts a window. */
#ifndef VMA_SOCK_SOCK_MIGRATE_H
#define VMA_SOCK_SOCK_MIGRATE_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include "os/os.h"

struct sock_mig_window {
	unsigned ratio;              /* calls per window; 0: the socket never moves */
	bool per_core;               /* logic 31: the caller is its core, else its thread */
	unsigned calls;
	uint64_t key;                /* the caller that opened the window */
	bool mixed;                  /* another caller came in it */
	bool busy;                   /* a thread is considering a move (atomic flag) */
	uint64_t not_before_ms;      /* after a refused move: do not retry before */
};

/* Sets ratio and per_core from a socket's logic (its own, or -1: the
 * process's VMA_RING_ALLOCATION_LOGIC_RX) and VMA_RING_MIGRATION_RATIO_RX.
 * 10 and 30 never move (nothing to follow), nor does a ratio of -1 or 0. */
void sock_mig_window_configure(struct sock_mig_window *w, int own_logic);

/* One byte per thread: its address names the calling thread without a
 * gettid syscall. */
extern __thread char sock_mig_thread_tag OS_TLS_HOT;

/* Counts one receive call. True at the end of a window, with *mixed
 * saying whether more than one caller made its calls. */
static inline bool sock_mig_window_note(struct sock_mig_window *w, bool *mixed)
{
	unsigned ratio = __atomic_load_n(&w->ratio, __ATOMIC_RELAXED);
	if (__builtin_expect(ratio == 0, 1))
		return false;
	uint64_t key;
	if (w->per_core) {
		int cpu = sched_getcpu();   /* vDSO / rseq: no syscall */
		key = (uint64_t)(cpu + 1);
	} else {
		key = (uint64_t)(uintptr_t)&sock_mig_thread_tag;
	}
	unsigned calls = __atomic_load_n(&w->calls, __ATOMIC_RELAXED);
	if (calls == 0) {
		__atomic_store_n(&w->key, key, __ATOMIC_RELAXED);
		__atomic_store_n(&w->mixed, false, __ATOMIC_RELAXED);
	} else if (key != __atomic_load_n(&w->key, __ATOMIC_RELAXED)) {
		__atomic_store_n(&w->mixed, true, __ATOMIC_RELAXED);
	}
	if (++calls < ratio) {
		__atomic_store_n(&w->calls, calls, __ATOMIC_RELAXED);
		return false;
	}
	__atomic_store_n(&w->calls, 0, __ATOMIC_RELAXED);
	*mixed = __atomic_load_n(&w->mixed, __ATOMIC_RELAXED);
	return true;
}

/* One thread at a time considers a move: true when this one may. */
static inline bool sock_mig_window_claim(struct sock_mig_window *w)
{
	return !__atomic_exchange_n(&w->busy, true, __ATOMIC_ACQUIRE);
}

static inline void sock_mig_window_release(struct sock_mig_window *w)
{
	__atomic_store_n(&w->busy, false, __ATOMIC_RELEASE);
}

/* A forked child: the thread that was considering a move is not there. */
static inline void sock_mig_window_after_fork(struct sock_mig_window *w)
{
	w->busy = false;
	w->calls = 0;
}

#endif
