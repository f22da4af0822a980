/* Busy-polling permits shared by every process on an interface (see
 * ring_spin.h and docs/process_model.md "Busy polling"). */
#include "config.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "ring/ring_spin.h"
#include "os/os.h"

static struct ring_spin_board *spin_board;
static int spin_limit = -1;

/* The calling thread's permit: a slot index and the lease end it wrote
 * there (its proof of ownership for the renewing compare-and-swap). */
static __thread int spin_slot OS_TLS_HOT = -1;
static __thread uint64_t spin_lease_end OS_TLS_HOT;
static __thread uint32_t spin_calls OS_TLS_HOT;
static __thread pid_t spin_tid OS_TLS_HOT;
/* Contention: a holder compares, over windows of RING_SPIN_WINDOW_NS, the
 * CPU time it got with the time that passed, and counts the times the
 * scheduler switched away from it while it could run. Well under the
 * time, or switched away often, means other threads wanted this CPU; the
 * holder then sleeps instead of spinning for RING_SPIN_BACKOFF_NS.
 * The CPU share counts from the claim (the first window after it only
 * samples). The switches count from the thread's previous look, across a
 * backoff: a thread without a permit yields once per call before it
 * sleeps (ring_spin_yield), and a yield that let another thread run is
 * such a switch; so while the CPUs stay crowded, the first look after it
 * claims a permit again sends it back to sleeping, and it spins again
 * only once a backoff passed with few of them. */
static __thread uint64_t spin_window_start_ns OS_TLS_HOT, spin_window_cpu_ns OS_TLS_HOT;
static __thread bool spin_window_sampled OS_TLS_HOT;
static __thread uint64_t spin_switches_seen OS_TLS_HOT;
static __thread bool spin_switches_known OS_TLS_HOT;
static __thread uint64_t spin_backoff_until_ns OS_TLS_HOT;
static bool spin_contention_on = true;

void ring_spin_contention_check(bool on)
{
	__atomic_store_n(&spin_contention_on, on, __ATOMIC_RELAXED);
}

static uint64_t ring_spin_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time and involuntary context switches (the
 * scheduler switched away while it could run: a preemption, or a yield
 * that let another thread in). Two syscalls, once per window. */
static int ring_spin_thread_usage_os(uint64_t *cpu_ns, uint64_t *switches)
{
	struct timespec ts;
	struct rusage ru;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0 || getrusage(RUSAGE_THREAD, &ru) != 0)
		return -1;
	*cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	*switches = (uint64_t)ru.ru_nivcsw;
	return 0;
}

static int (*spin_usage)(uint64_t *, uint64_t *) = ring_spin_thread_usage_os;

void ring_spin_usage_source(int (*source)(uint64_t *cpu_ns, uint64_t *switches))
{
	__atomic_store_n(&spin_usage, source ? source : ring_spin_thread_usage_os, __ATOMIC_RELEASE);
}

/* Holder, every RING_SPIN_WINDOW_NS: true when the last window gave this
 * thread less than RING_SPIN_CPU_SHARE_MIN percent of a CPU, or the
 * scheduler switched away from it more than RING_SPIN_SWITCHES_MAX times
 * since its previous look. */
static bool ring_spin_contended(uint64_t now)
{
	if (now - spin_window_start_ns < RING_SPIN_WINDOW_NS)
		return false;
	uint64_t cpu, switches;
	if (__atomic_load_n(&spin_usage, __ATOMIC_ACQUIRE)(&cpu, &switches) != 0) {
		spin_window_start_ns = now;
		spin_window_sampled = false;
		return false;
	}
	bool starved = spin_window_sampled &&
		       (cpu - spin_window_cpu_ns) * 100 < (now - spin_window_start_ns) * RING_SPIN_CPU_SHARE_MIN;
	bool crowded = spin_switches_known && switches - spin_switches_seen > RING_SPIN_SWITCHES_MAX;
	spin_window_start_ns = now;
	spin_window_cpu_ns = cpu;
	spin_window_sampled = true;
	spin_switches_seen = switches;
	spin_switches_known = true;
	return starved || crowded;
}

static int ring_spin_limit_from_cfg(void)
{
	int want = g_cfg.poll_threads_max;
	if (want < 0)
		return -1;
	if (want == 0) {
		cpu_set_t set;
		want = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
		if (want < 1)
			want = 1;
	}
	return want > RING_SPIN_SLOTS ? RING_SPIN_SLOTS : want;
}

int ring_spin_limit(void)
{
	return __atomic_load_n(&spin_board, __ATOMIC_ACQUIRE) ? spin_limit : -1;
}

void ring_spin_board_set(struct ring_spin_board *board, int limit)
{
	spin_limit = limit > RING_SPIN_SLOTS ? RING_SPIN_SLOTS : limit;
	spin_slot = -1;
	__atomic_store_n(&spin_board, board, __ATOMIC_RELEASE);
}

void ring_spin_board_adopt(int memfd, uint64_t off)
{
	if (__atomic_load_n(&spin_board, __ATOMIC_ACQUIRE))
		return;
	int limit = ring_spin_limit_from_cfg();
	if (limit < 0)
		return;   /* VMA_POLL_THREADS_MAX=-1: no board, every thread spins */
	long page = sysconf(_SC_PAGESIZE);
	size_t len = (size_t)((off + sizeof(struct ring_spin_board) + (uint64_t)page - 1) & ~((uint64_t)page - 1));
	uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (map == MAP_FAILED) {
		vlog_debug("busy-polling permits: cannot map the board (%m); every thread polls");
		return;
	}
	spin_limit = limit;
	struct ring_spin_board *expected = NULL;
	if (!__atomic_compare_exchange_n(&spin_board, &expected, (struct ring_spin_board *)(map + off), false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		munmap(map, len);   /* another ring's thread adopted one first */
		return;
	}
	vlog_debug("busy-polling permits: at most %d threads poll at once", limit);
}

static bool ring_spin_claim(struct ring_spin_board *board, uint64_t now)
{
	uint64_t end = now + RING_SPIN_LEASE_NS;
	for (int i = 0; i < spin_limit; i++) {
		struct ring_spin_slot *slot = &board->slots[i];
		uint64_t cur = __atomic_load_n(&slot->lease_end_ns, __ATOMIC_RELAXED);
		if (cur > now)
			continue;
		if (!__atomic_compare_exchange_n(&slot->lease_end_ns, &cur, end, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			continue;
		if (!spin_tid)
			spin_tid = (pid_t)gettid();
		__atomic_store_n(&slot->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
		__atomic_store_n(&slot->tid, (int32_t)spin_tid, __ATOMIC_RELAXED);
		spin_slot = i;
		spin_lease_end = end;
		spin_window_start_ns = now;
		spin_window_sampled = false;   /* sampled at the first window's end */
		return true;
	}
	return false;
}

bool ring_spin_permit(void)
{
	struct ring_spin_board *board = __atomic_load_n(&spin_board, __ATOMIC_ACQUIRE);
	if (!board)
		return true;
	/* A holder looks at the clock once every 32 polls: a poll takes far
	 * less than RING_SPIN_LEASE_NS / 64. */
	if (spin_slot >= 0 && (++spin_calls & 31) != 0)
		return true;
	uint64_t now = ring_spin_now_ns();
	if (spin_slot >= 0 && __atomic_load_n(&spin_contention_on, __ATOMIC_RELAXED) && ring_spin_contended(now)) {
		ring_spin_release();
		spin_backoff_until_ns = now + RING_SPIN_BACKOFF_NS;
		return false;
	}
	if (now < spin_backoff_until_ns)
		return false;
	if (spin_slot >= 0) {
		if (now + RING_SPIN_LEASE_NS / 2 < spin_lease_end)
			return true;
		uint64_t end = now + RING_SPIN_LEASE_NS, mine = spin_lease_end;
		if (__atomic_compare_exchange_n(&board->slots[spin_slot].lease_end_ns, &mine, end, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			spin_lease_end = end;
			return true;
		}
		spin_slot = -1;   /* we stalled past the lease and someone took it */
	}
	return ring_spin_claim(board, now);
}

void ring_spin_release(void)
{
	if (spin_slot < 0)
		return;
	struct ring_spin_board *board = __atomic_load_n(&spin_board, __ATOMIC_ACQUIRE);
	if (board) {
		uint64_t mine = spin_lease_end;
		__atomic_compare_exchange_n(&board->slots[spin_slot].lease_end_ns, &mine, 0, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_RELAXED);
	}
	spin_slot = -1;
}

/* Per thread: a shared counter would move one cache line between the
 * threads of a crowded server on nearly every request. */
static __thread uint64_t spin_yields;

bool ring_spin_yield(bool *yielded)
{
	if (*yielded)
		return false;
	*yielded = true;
	spin_yields++;
	sched_yield();
	return true;
}

uint64_t ring_spin_yields(void)
{
	return spin_yields;
}

void ring_spin_after_fork_child(void)
{
	spin_slot = -1;
	spin_backoff_until_ns = 0;
	spin_tid = 0;
	spin_switches_known = false;   /* a new task's counts start at 0 */
}

int ring_spin_holders(void)
{
	struct ring_spin_board *board = __atomic_load_n(&spin_board, __ATOMIC_ACQUIRE);
	if (!board)
		return 0;
	uint64_t now = ring_spin_now_ns();
	int n = 0;
	for (int i = 0; i < RING_SPIN_SLOTS; i++)
		n += __atomic_load_n(&board->slots[i].lease_end_ns, __ATOMIC_RELAXED) > now;
	return n;
}
