/* Busy-polling permits: how many threads may spin on the rings at once.
 *
 * libvma's blocking calls poll the rings for VMA_RX_POLL / VMA_SELECT_POLL
 * before they sleep. With more waiting threads than CPUs (a pre-fork server
 * with 4 workers on 2 cores, a thread pool) every one of them spins, the
 * threads that have work (and the peer on the same host) wait for a time
 * slice, and the rate falls far below the kernel's. So a thread spins only
 * while it holds a permit: one of VMA_POLL_THREADS_MAX slots on a board
 * every process on the interface shares (it lives in the ring domain's
 * shared header, docs/process_model.md "Busy polling"). A thread without a
 * permit sleeps at once and is woken by the ring's interrupt, as with
 * VMA_RX_POLL=0.
 *
 * Nor does a holder keep spinning where the scheduler shows that other
 * threads wait for its CPU (RING_SPIN_CPU_SHARE_MIN and
 * RING_SPIN_SWITCHES_MAX below).
 *
 * A permit is a lease: its holder renews it while it keeps polling or
 * working between calls, and gives it back before it sleeps in the kernel.
 * A holder that dies, stops or leaves libvma's calls for good loses the
 * lease RING_SPIN_LEASE_NS after its last renewal, so a SIGKILLed process
 * never keeps a slot. No lock: one compare-and-swap per claim or renewal. */
#ifndef VMA_RING_RING_SPIN_H
#define VMA_RING_RING_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define RING_SPIN_SLOTS 64
/* A permit not renewed for this long is free for the taking. */
#define RING_SPIN_LEASE_NS (20 * 1000 * 1000)
/* A holder that got less than RING_SPIN_CPU_SHARE_MIN percent of a CPU
 * over a window of RING_SPIN_WINDOW_NS was preempted for other runnable
 * threads (more of them than CPUs: the peer on the same host, workers
 * without a permit, other programs): spinning then takes their CPU. It
 * gives its permit back and sleeps instead for RING_SPIN_BACKOFF_NS. On
 * cores left to the application, a holder keeps spinning. */
#define RING_SPIN_WINDOW_NS (2 * 1000 * 1000)
#define RING_SPIN_CPU_SHARE_MIN 75
/* Nor does a holder keep spinning that the scheduler switched away from,
 * while it could run, more than this many times since its previous look
 * (a window, or the backoff it comes back from: ring_spin.c), however much
 * CPU it kept: each such switch is a thread that woke (a peer's request, a
 * worker with work) and found no idle CPU, or a yield that let one in.
 * Two spinning ends of a sockperf ping-pong on two cores are preempted a
 * few times per window (softirq work, kernel threads): a bar of 2 already
 * cost them (4-6 us against 2.8 us per round trip), 8 does not
 * (docs/benchmarks.md "Spinning on a crowded machine"). */
#define RING_SPIN_SWITCHES_MAX 8
#define RING_SPIN_BACKOFF_NS (50 * 1000 * 1000)

struct ring_spin_slot {
	uint64_t lease_end_ns; /* CLOCK_MONOTONIC; 0 = free */
	int32_t pid;           /* the holder, for vma_stats and debugging */
	int32_t tid;
};

/* In shared memory (the ring domain header). */
struct ring_spin_board {
	struct ring_spin_slot slots[RING_SPIN_SLOTS];
};

/* The number of threads that may spin at once, from VMA_POLL_THREADS_MAX
 * (0: the CPUs this process may run on) and the board's size; -1 when
 * there is no limit. Read at the first adoption. */
int ring_spin_limit(void);

/* Makes the process use the board at offset off of memfd (a second,
 * private mapping that outlives every ring: a thread may still hold a
 * permit while the ring that brought the board closes). The first call
 * wins; later ones do nothing. Without a board every thread may spin. */
void ring_spin_board_adopt(int memfd, uint64_t off);
/* For tests: a board in memory the caller owns (NULL: none), and the limit. */
void ring_spin_board_set(struct ring_spin_board *board, int limit);

/* May the calling thread keep spinning? Claims a permit when it has none,
 * renews the one it holds when half its lease has passed. False: there is
 * none free; sleep instead. */
bool ring_spin_permit(void);
/* The calling thread is about to sleep in the kernel: its permit goes back. */
void ring_spin_release(void);
/* The calling thread was just refused a permit and would now sleep in the
 * kernel: it gives its CPU to the threads that wait for one (sched_yield),
 * once per blocking call (*yielded, false at the call's start), and then
 * looks at its rings once more before it sleeps: true when it yielded now
 * (look again), false when it had already (sleep). Refused means crowded:
 * more waiting threads than CPUs, or the scheduler already took this CPU
 * away for others (the contention check),
 * as with 4 workers and their load generator on 2 cores. There, what the
 * thread waits for is often what a runnable thread on this CPU (the peer,
 * another worker) is about to produce: after the yield it finds it without
 * a sleep and a wake-up, which cost both sides more than the yield. A
 * thread that holds a permit (cores left to the application) never gets
 * here. */
bool ring_spin_yield(bool *yielded);
/* The calling thread's yields so far (tests). */
uint64_t ring_spin_yields(void);
/* In a forked child: the forking thread's permit is the parent's. */
void ring_spin_after_fork_child(void);
/* Permits held now (live leases) on the board, for stats and tests. */
int ring_spin_holders(void);
/* Tests: false turns off the contention check (RING_SPIN_CPU_SHARE_MIN,
 * RING_SPIN_SWITCHES_MAX), so
 * a test preempted on a loaded machine keeps its permit and tests what it
 * means to. */
void ring_spin_contention_check(bool on);
/* Tests: where the contention check reads the calling thread's CPU time
 * and involuntary context switches (0, or -1 when it cannot); NULL: the
 * kernel's (CLOCK_THREAD_CPUTIME_ID, getrusage RUSAGE_THREAD). */
void ring_spin_usage_source(int (*source)(uint64_t *cpu_ns, uint64_t *switches));

#endif
