/* The offload contexts of the process: the netlink view, a user-space stack,
 * and one ring (wrapped as a stack_netif) per interface we can accelerate.
 * Built lazily by the first offloaded socket; see docs/udp.md.
 *
 * Lanes: VMA_RING_ALLOCATION_LOGIC_RX 0 and 1 give the process one context;
 * 10, 20, 30 and 31 give each socket, thread or core a context of its own
 * (a "lane": its own stack, its own ring on every interface, its own lock),
 * up to SOCK_OFFLOAD_MAX_LANES, then lanes are shared round-robin. A TCP
 * socket stays in the lane it started in; a UDP socket may move to the lane
 * of the thread (core) that reads it (VMA_RING_MIGRATION_RATIO_RX,
 * sock_udp_migrate.c; docs/process_model.md, "Threads: lanes").
 *
 * Locking: one lock per lane guards its stack, its rings, their buffers and
 * every RX queue of its sockets (a delivery callback writes a socket's
 * queue from inside stack_input). The application takes it for each
 * progress pass or queue access; the internal thread only ever trylocks it,
 * so it never makes the fast path wait. Threads on sockets of two lanes
 * never wait for each other. */
#ifndef VMA_SOCK_SOCK_OFFLOAD_H
#define VMA_SOCK_SOCK_OFFLOAD_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "engine/engine.h"
#include "extra/extra_xt.h"
#include "net/net.h"
#include "ring/ring.h"
#include "stack/stack.h"
#include "stack/tcp.h"
#include "stats/stats_layout.h"
#include "os/os.h"
#include "os/os_signal.h"

#define SOCK_OFFLOAD_MAX_IFS 8
/* Lanes of one process: each holds a ring (an XSK, a vmad member slot) on
 * every interface, and vma_stats a ring slot per ring. */
#define SOCK_OFFLOAD_MAX_LANES 8

struct sock_offload;
struct sock_tcp;
struct sock_tcp_orphan;
struct sock_tcp_stray;
struct sock_tcp_ports;
struct stats_ring;
struct stats_pool;

/* vma_stats' view of one ring: the ring keeps its own totals on its fast
 * path; the tick copies them here, less the totals seen at the last -z. */
struct sock_offload_if_stats {
	struct stats_ring *ring;
	struct stats_pool *rx_pool, *tx_pool;
	uint32_t zero_epoch;
	struct ring_counters base;
	uint64_t rx_empty_base, tx_empty_base;
	uint64_t ctl_wakeups_base;
};

/* A wait channel (docs/process_model.md, "Wait channels"): an XSK of its
 * own on the lane's queue for one thread, which the lane's stack drains
 * under the lane's lock like its main ring. The TCP connections the thread
 * waits for are steered to it, so their packets wake that thread only.
 * owner: the thread's token (sock_offload_chan_mine), NULL once the thread
 * ended (free for the next thread to take). Written under the lane lock,
 * read without it. */
#define SOCK_OFFLOAD_CHANS 6
struct sock_offload_chan {
	struct ring *ring;
	const void *owner;
	uint64_t tick_rx_packets;    /* its receive count at the internal thread's last tick */
	unsigned gen;                /* moves when its thread ends (its connections left it) */
};

/* Wait fds one lane gives a sleeper at most: its rings', its channels',
 * its drain eventfd. */
#define SOCK_OFFLOAD_WAIT_FDS (2 * SOCK_OFFLOAD_MAX_IFS + 1)

struct sock_offload_if {
	struct sock_offload *ctx;
	struct ring *ring;
	/* Wait channels on this interface (chans_on in the lane). */
	struct sock_offload_chan chans[SOCK_OFFLOAD_CHANS];
	unsigned nchans;
	bool chans_failed;   /* no more channel rings to be had here */
	bool map_full_warned;  /* the steering map's E2BIG, said once (sock_offload_flow_attach) */
	struct stack_netif nif;        /* ctx = ring */
	struct engine_poller poller;
	struct sock_offload_if_stats stats;
	char name[NET_IFNAME_LEN];
	/* VMA_TCP_CTL_THREAD=1: the internal thread watches the ring's wait
	 * fd, one-shot. ctl_rearm_due says a wake-up found the lane locked
	 * and left the fd disarmed for the lane tick to drain and re-arm;
	 * ctl_wakeups counts the wake-ups (vma_stats: interrupts received).
	 * Touched by the internal thread only. */
	int ctl_fd;                    /* -1: not watched */
	bool ctl_rearm_due;
	uint64_t ctl_wakeups;
};

struct sock_offload_flow_ref {
	int if_slot;
	struct ring *ring;   /* where it is attached: a wait channel, or NULL for the interface's ring */
	struct ring_flow flow;
	unsigned refs;
};

/* Work that must run after the lock is dropped (iomux_notify, waking a
 * sleeping reader): a delivery callback queues it, the unlock runs it. The
 * node lives in the socket, which queues it at most once at a time (its
 * wake_pending flag), so the list never fills: a burst that makes a
 * thousand sockets ready in one pass wakes every one of them. */
typedef void (*sock_offload_notify_fn)(void *arg);
struct sock_offload_wake {
	struct sock_offload_wake *next;
	sock_offload_notify_fn fn;
	void *arg;
};
#define SOCK_OFFLOAD_LOOP_FRAMES 64

#define SOCK_OFFLOAD_POLL_SLEEPERS 32

struct sock_offload {
	struct net_ctx *net;           /* lane 0's, shared by the other lanes */
	unsigned lane;                 /* 0 .. SOCK_OFFLOAD_MAX_LANES - 1 */
	struct stack *stack;
	unsigned nifs;
	struct sock_offload_if ifs[SOCK_OFFLOAD_MAX_IFS];
	/* VMA_RING_WAIT_CHANNELS and the lane can have them (lane 0 of the
	 * default logic, xdp rings of one queue, no TCP control thread). */
	bool chans_on;
	/* The first thread that would have taken a channel; a second one
	 * makes them active (sock_offload_chan_mine_locked). Atomic. */
	const void *chan_first;
	bool chans_active;
	/* The context lock, of the kind VMA_THREAD_MODE asks (sock_offload_lock
	 * below): a spin lock (0, 1), a mutex (2), or a spin lock that yields
	 * the CPU after a short spin (3: more threads than cores, where a
	 * spinner would burn the time slice of the holder it waits for). */
	pthread_spinlock_t lock;
	pthread_mutex_t mutex;
	int lock_mode;
	/* A ring deferred its TX doorbell (ring_defer_kicks): the thread that
	 * drops the lock rings it, so no other thread of the lane waits on
	 * the lock while the kernel transmits. In flight: doorbells being
	 * rung after an unlock, which the exit waits for before the rings
	 * close. */
	bool tx_kick_owed;
	unsigned tx_kicks_in_flight;
	unsigned rx_batch;             /* VMA_CQ_POLL_BATCH_MAX, capped */
	/* Set under lock at exit (rings closed) or in a forked child: every
	 * socket then serves its calls from the kernel socket. */
	bool dead;
	/* Written by the internal thread after it delivered packets; read
	 * (reset) by every wait_prepare and slept on with the rings' wait fds,
	 * so a sleeper whose packets the internal thread took still wakes. */
	int drain_wake_fd;
	bool drain_signalled;   /* drain_wake_fd written since the last reset */
	/* poll()/select() sleepers on a socket of this lane: each sleeps on
	 * an eventfd of its own thread, written (and the list emptied) when a
	 * socket of the lane changes readiness. Another thread of the lane
	 * may take the packet that made the socket ready off the ring before
	 * the sleeper's ring fd says so: without this it slept through it.
	 * Guarded by lock. */
	int poll_wake[SOCK_OFFLOAD_POLL_SLEEPERS];
	unsigned npoll_wake;
	/* Blocking receives (UDP, TCP) of this lane that found nothing
	 * (docs/process_model.md, "One ring, many readers"). Watchers poll
	 * the lane's rings or sleep on their wait fds; while one does, the
	 * others sleep on their socket's wake fd alone (rx_passive), which
	 * a delivery to the socket writes, so a packet wakes the watcher
	 * and the reader it is for, not every sleeper of the lane. The last
	 * watcher to leave writes one passive sleeper's fd: it watches next.
	 * Guarded by lock (sock_offload_watch_locked and the rest below). */
	unsigned rx_watchers;
	int rx_passive[SOCK_OFFLOAD_POLL_SLEEPERS];
	unsigned nrx_passive;
	/* The thread busy-polling the lane (sock_offload_spin_turn): a token
	 * of it, and the end of its lease. Lock-free. */
	const void *spin_owner;
	uint64_t spin_until_ns;
	/* epoll sets of this lane alone whose kernel epoll holds the lane's
	 * wait fds (iomux_wait.c, "one ring, many sets"): the last one never
	 * rests them. Atomic. */
	unsigned epoll_armed_sets;
	struct engine_timer tick;
	/* Attached flows with their users (several sockets on one port or
	 * group share the steering entry). Guarded by lock. */
	struct sock_offload_flow_ref *flows;
	unsigned nflows, cap_flows;
	unsigned kernel_flows;      /* of them, connections handed to the kernel (to_kernel) */
	/* IP_MULTICAST_LOOP: copies of our own multicast sends, fed back in. */
	struct ring_buf_pool *loop_pool;
	struct ring_buf *loop_frames[SOCK_OFFLOAD_LOOP_FRAMES];
	unsigned nloop;
	struct sock_offload_wake *wake_head, **wake_tail;   /* FIFO; tail NULL when empty */
	/* The TCP engine on stack (NULL when it could not be created: TCP
	 * sockets then stay with the kernel). Its routine scan (keepalive,
	 * TIME_WAIT) runs every tcp_period_ms; RTO, tail-loss probe, delayed
	 * ACK and persist run as soon as tcp_ctx_next_deadline_ms is reached.
	 * Application threads run them during progress when due
	 * (VMA_INTERNAL_THREAD_TCP_TIMER_HANDLING=0), the internal thread's
	 * 10 ms tick otherwise. */
	struct tcp_ctx *tcp;
	uint32_t tcp_period_ms;
	uint64_t timers_next_ms;
	bool timers_by_app;
	/* With timers_by_app: the earliest of timers_next_ms and the engine's
	 * next fine deadline, published by every unlock for the look without
	 * the lock (sock_offload_idle_peek): a lane whose timers are not due
	 * may be skipped. 0 (due) until the first unlock. */
	uint64_t timers_due_ms;
	uint64_t tick_routine_ms;      /* next stats refresh / send backstop */
	/* VMA_TCP_CTL_THREAD (docs/engine.md, "TCP control thread"): the
	 * internal thread also drains this lane's rings, on every packet
	 * arrival (1; also VMA_INTERNAL_THREAD_ARM_CQ) or at every tick of
	 * VMA_TIMER_RESOLUTION_MSEC (2), whether or not the application
	 * polled them. */
	bool ctl_on_arrival;
	bool ctl_on_tick;
	/* VMA_RX_CQ_DRAIN_RATE_NSEC (0: off) and when a progress pass last
	 * polled the rings (CLOCK_MONOTONIC ns, kept only while it is on). */
	uint64_t rx_drain_rate_ns;
	uint64_t rx_polled_ns;
	/* Offloaded TCP sockets holding a pcb, and connections closed by the
	 * application still finishing (sock_tcp_close.c). Guarded by lock. */
	struct sock_tcp *tcp_all;
	struct sock_tcp_orphan *tcp_orphans;
	/* Idle local ports for active opens (sock_tcp_port.h); NULL until the
	 * first connect. Guarded by lock. */
	struct sock_tcp_ports *tcp_ports;
	/* Receive-frame protection (docs/security.md), guarded by lock: TCP
	 * segments copied into the frame of the one before (sock_tcp.c);
	 * datagrams refused because their socket held its share of frames. */
	uint64_t rx_coalesced, udp_frame_pressure_drops;
	/* TCP segments other lanes passed on for connections that moved here
	 * (sock_tcp_move.c): a lock-free list, newest first, fed to the engine
	 * at the next progress pass; and the ones this lane could not pass on
	 * or feed (no memory, no destination). */
	struct sock_tcp_stray *tcp_strays;
	uint64_t tcp_strays_dropped;
	/* The lane's stack counters as last zeroed (vma_stats -z). */
	struct stats_lane_counters lane_base;
	uint32_t lane_zero_epoch;
	/* SocketXtreme (VMA_SOCKETXTREME=1, src/vma/extra/extra_xtreme.c):
	 * the lane's sockets with completions to report, and the frames
	 * socketxtreme_poll lent to the application. Guarded by lock. */
	struct extra_xt_lane xtreme;
};

/* The lane of a new socket fd (-1: not known) opened by the calling thread,
 * under VMA_RING_ALLOCATION_LOGIC_RX, building it on first use. NULL when
 * offload is off (VMA_OFFLOADED_SOCKETS=0), impossible (no netlink, no ring
 * on any interface: warned once) or after fork in a child. A lane that
 * cannot be built (no more rings) falls back to an existing one. */
struct sock_offload *sock_offload_get_for(int fd);
/* The same under a logic of the socket's own (SO_VMA_RING_ALLOC_LOGIC; -1:
 * the process's VMA_RING_ALLOCATION_LOGIC_RX); user_id keys logic 11. */
struct sock_offload *sock_offload_get_for_logic(int fd, int logic, uint32_t user_id);
/* For a socket made earlier in lane current (NULL: none) that now connects
 * or listens: current under the per-socket logic, else the lane of the
 * calling thread (or core); logic and user_id as for get_for_logic. */
struct sock_offload *sock_offload_get_for_socket(struct sock_offload *current, int fd, int logic,
						 uint32_t user_id);

/* SO_VMA_RING_ALLOC_LOGIC: libvma's Extra API option (level SOL_SOCKET)
 * giving one socket its own ring allocation logic. Its value has the layout
 * of libvma's struct vma_ring_alloc_logic_attr (20 bytes): comp_mask, the
 * logic (0, 1, 10, 11, 20, 30, 31), a ring profile key (no profiles here:
 * ignored), the user id of logic 11 (read when comp_mask has bit 1), and
 * ingress/egress bits (a socket receives and sends in one lane: ignored). */
#define SOCK_OFFLOAD_SO_RING_ALLOC_LOGIC 2810
#define SOCK_OFFLOAD_RING_ATTR_USER_ID (1u << 1)
struct sock_offload_ring_logic_attr {
	uint32_t comp_mask;
	int32_t ring_alloc_logic;
	uint32_t ring_profile_key;
	uint32_t user_id;
	uint32_t direction_bits;
};
/* Parses an SO_VMA_RING_ALLOC_LOGIC value: 0 with *logic and *user_id set,
 * or -EINVAL (short, or an unknown logic), -EFAULT (NULL). */
int sock_offload_parse_ring_logic(const void *val, socklen_t len, int *logic, uint32_t *user_id);
/* The logic in force for a socket whose own is `logic` (-1: none). */
int sock_offload_logic_of(int logic);
/* Lane 0: non-NULL only while offload is up and this process owns it. */
extern struct sock_offload *sock_offload_live;

/* Whether a socket whose lane is ctx may use it: this process's, not shut
 * down by exit, not the parent's copy in a forked child. */
static inline bool sock_offload_usable(const struct sock_offload *ctx)
{
	return ctx && !__atomic_load_n(&ctx->dead, __ATOMIC_ACQUIRE);
}

/* The lanes of this process (built so far): n of them into out. */
unsigned sock_offload_lanes(struct sock_offload **out, unsigned max);
/* The id vma_stats shows for the ring of if_slot in ctx: the ifindex in
 * lane 0, lane << 16 | ifindex in the others. */
uint32_t sock_offload_ring_id(const struct sock_offload *ctx, int if_slot);

/* Lock held: registers (on) or removes the calling poll() sleeper's
 * eventfd. False when the list is full (the caller then caps its sleep). */
bool sock_offload_poll_watch_locked(struct sock_offload *ctx, int wake_fd, bool on);
/* Lock held: a socket of the lane became ready: wakes every registered
 * poll() sleeper once (each registers again before it sleeps again). */
void sock_offload_poll_wake_locked(struct sock_offload *ctx);

/* ---- one ring, many readers (rx_watchers above) ----
 * A blocking receive keeps in *watching (NULL at its start) the lane it
 * counts as a watcher of: from its first pass that found nothing until it
 * returns (sock_offload_unwatch*) or sleeps passive. */
/* A passive sleep lasts at most this long, then the reader looks at the
 * rings itself: a watcher that never came back (a thread cancelled in its
 * sleep) costs latency, never a hang. */
#define SOCK_OFFLOAD_PASSIVE_CAP_MS 100
void sock_offload_watch_locked(struct sock_offload *ctx, struct sock_offload **watching);
void sock_offload_unwatch_locked(struct sock_offload *ctx, struct sock_offload **watching);
/* No lock held; preserves errno. */
void sock_offload_unwatch(struct sock_offload **watching);
/* Lock held, about to sleep: true when another watcher covers the lane, so
 * the caller sleeps on wake_fd (its socket's) and its kernel socket alone,
 * then calls sock_offload_passive_end. Never for a socket whose strays come
 * from another lane (the caller passes has_strays_lane). */
bool sock_offload_passive_begin_locked(struct sock_offload *ctx, struct sock_offload **watching, int wake_fd,
				       bool has_strays_lane);
/* No lock held; preserves errno: out of the list (unless a leaving
 * watcher took it out to watch next), a watcher again. */
void sock_offload_passive_end(struct sock_offload *ctx, struct sock_offload **watching, int wake_fd);
/* ---- one busy-poller per lane ----
 * Only one thread at a time can poll a lane (its lock): a second thread
 * spinning on it found the lane busy on nearly every pass and burnt a CPU
 * the others needed (docs/process_model.md, "One ring, many sets"). A
 * call about to spin on a lane (epoll_wait on a set of one lane, a
 * blocking receive) takes its turn: while another thread's live claim
 * holds the lane it sleeps instead, and the spinner's deliveries wake it.
 * A claim is renewed as its holder spins and lapses after
 * SOCK_OFFLOAD_SPIN_LEASE_NS (a spinner descheduled that long, or gone,
 * no longer holds the lane). One claim per thread; lock-free. */
#define SOCK_OFFLOAD_SPIN_LEASE_NS 1000000ull
/* True: this thread may spin on ctx now (it holds the claim). */
bool sock_offload_spin_turn(struct sock_offload *ctx);
/* Drops this thread's claim, if any: when it stops spinning. */
void sock_offload_spin_leave(void);
/* Whether another thread spins on ctx now (a live claim not ours). */
bool sock_offload_spun_by_other(struct sock_offload *ctx);

static inline void sock_offload_poll_wake_if_locked(struct sock_offload *ctx)
{
	if (__builtin_expect(ctx && ctx->npoll_wake != 0, 0))
		sock_offload_poll_wake_locked(ctx);
}

#define SOCK_OFFLOAD_LOCK_MUTEX 2
#define SOCK_OFFLOAD_LOCK_YIELD 3
#define SOCK_OFFLOAD_LOCK_SPINS 64
/* Mode 0 and 1 spin longer before they yield (os.h). */
#define SOCK_OFFLOAD_LOCK_SPINS_LONG OS_SPIN_PAUSES_MAX

/* Every lock of a lane holds back the application's signal handlers in
 * this thread until the unlock (os/os_signal.h): a handler that sends
 * or closes on an offloaded fd would otherwise wait for this very lock. */
static inline bool sock_offload_trylock(struct sock_offload *ctx)
{
	os_signal_defer_begin();
	bool got = ctx->lock_mode == SOCK_OFFLOAD_LOCK_MUTEX ? pthread_mutex_trylock(&ctx->mutex) == 0
							       : pthread_spin_trylock(&ctx->lock) == 0;
	if (!got)
		os_signal_defer_end();
	return got;
}

static inline void sock_offload_lock(struct sock_offload *ctx)
{
	os_signal_defer_begin();
	if (ctx->lock_mode == SOCK_OFFLOAD_LOCK_MUTEX) {
		pthread_mutex_lock(&ctx->mutex);
	} else {
		unsigned limit = ctx->lock_mode == SOCK_OFFLOAD_LOCK_YIELD ? SOCK_OFFLOAD_LOCK_SPINS
									   : SOCK_OFFLOAD_LOCK_SPINS_LONG;
		for (unsigned spins = 0; pthread_spin_trylock(&ctx->lock) != 0; spins++) {
			if (spins < limit) {
				os_cpu_relax();
			} else {
				sched_yield();
			}
		}
	}
}

/* Wakes whoever sleeps on the lane's drain eventfd (sleepers look at their
 * sockets again). */
void sock_offload_drain_signal(struct sock_offload *ctx);

/* Lock held: rings the doorbells owed now, for a caller that keeps the
 * lock across many passes (the exit's FIN exchange). */
void sock_offload_tx_kick_locked(struct sock_offload *ctx);

/* Rings the doorbells the lane's rings deferred (tx_kick_owed), then
 * leaves the flight the unlock entered. */
void sock_offload_tx_kick_owed(struct sock_offload *ctx);

/* Sends held by the burst rule (docs/ring.md, "Doorbells") leave when the
 * thread that sent them next polls, or with the internal thread's next
 * pass (up to VMA_PROGRESS_ENGINE_INTERVAL, 10 ms, and twice that for a
 * polled ring). A thread that ends a burst and then blocks elsewhere (in
 * nanosleep, a condition variable, a read of a pipe) would leave its last
 * sends waiting that long. So each thread notes the lanes on which its
 * sends left frames held (bit = lane number), and every call of ours that
 * may block, ours or the kernel's, flushes those first
 * (sock_offload_flush_mine: one TLS load when none). */
extern __thread unsigned sock_offload_held_mine OS_TLS_HOT;
void sock_offload_flush_mine_slow(void);
static inline void sock_offload_flush_mine(void)
{
	if (__builtin_expect(sock_offload_held_mine != 0, 0))
		sock_offload_flush_mine_slow();
}

/* Events the calling thread's last epoll_wait, poll or select returned
 * that its sends have not yet answered (one send call per event): while
 * some are left, a send's frames may wait for the replies to them
 * (sock_offload_tx_more). Set when such a call returns, decremented by
 * each send that asks, 0 when the thread next calls one (which flushes). */
extern __thread unsigned sock_offload_events_left OS_TLS_HOT;
static inline void sock_offload_events_returned(int n)
{
	sock_offload_events_left = n > 0 ? (unsigned)n : 0;
}
/* For a send call: whether the thread has more input waiting that it
 * handles next, so its replies would join this one's frames in one
 * doorbell (ring_hold.h): more events of its last epoll_wait/poll/select,
 * or queued_here (the socket holds more received data or datagrams). */
static inline bool sock_offload_tx_more(bool queued_here)
{
	unsigned left = sock_offload_events_left;
	if (left)
		sock_offload_events_left = --left;
	return queued_here || left != 0;
}

/* The ring the calling thread transmits on through interface if_slot of
 * ctx: its wait channel's own XSK when it has one there, else the
 * interface's ring (sock_offload.c says why). Lock held. */
struct ring *sock_offload_tx_ring(struct sock_offload *ctx, int if_slot);

/* Lock held: the send on ring is complete (ring_tx_send_done: the doorbell
 * now, or held in a burst or for the replies to the input waiting, more),
 * and a hold is noted for this thread. */
static inline void sock_offload_tx_send_done_locked(struct sock_offload *ctx, struct ring *ring, bool more)
{
	ring_tx_send_done(ring, more);
	if (ring_tx_pending(ring))
		sock_offload_held_mine |= 1u << ctx->lane;
}

/* Lock held: stores timers_due_ms. */
void sock_offload_timers_publish_locked(struct sock_offload *ctx);

/* Drops the lock without running deferred work (sock_offload_unlock does),
 * except the TX doorbells owed: those are rung by every unlock, before a
 * signal handler held back meanwhile may run. */
static inline void sock_offload_unlock_plain(struct sock_offload *ctx)
{
	if (ctx->timers_by_app)
		sock_offload_timers_publish_locked(ctx);
	bool kick = ctx->tx_kick_owed;
	if (__builtin_expect(kick, 0)) {
		ctx->tx_kick_owed = false;
		__atomic_add_fetch(&ctx->tx_kicks_in_flight, 1, __ATOMIC_ACQ_REL);
	}
	if (ctx->lock_mode == SOCK_OFFLOAD_LOCK_MUTEX)
		pthread_mutex_unlock(&ctx->mutex);
	else
		pthread_spin_unlock(&ctx->lock);
	if (kick)
		sock_offload_tx_kick_owed(ctx);
	os_signal_defer_end();
}

/* The socket's wake eventfd in *slot, created by the first sleeper: two
 * threads that go to sleep at once agree on one (the loser closes its
 * own). -1 when eventfd fails (the sleeper then relies on its capped
 * sleep). */
int sock_offload_wake_fd_get(int *slot);
/* The congestion control of a TCP socket that did not name one
 * (VMA_TCP_CC_ALGO). */
enum tcp_cc_algo sock_offload_tcp_cc_default(void);
/* (Re)initialises the lock of the kind VMA_THREAD_MODE names. */
void sock_offload_lock_init(struct sock_offload *ctx);
/* Drops the lock, then runs what delivery callbacks deferred. */
void sock_offload_unlock(struct sock_offload *ctx);
/* Lock held: runs w->fn(w->arg) at the next unlock. w must not be queued
 * already (the caller's wake_pending flag says so; fn clears it). */
void sock_offload_defer_locked(struct sock_offload *ctx, struct sock_offload_wake *w);
/* Lock held: takes w off the list if it is still queued there (a socket
 * being released: its memory must not stay linked). */
void sock_offload_undefer_locked(struct sock_offload *ctx, struct sock_offload_wake *w);

/* One non-blocking pass over every ring: rx_burst a batch, stack_input each
 * frame, tx_flush. Lock held. Returns the frames processed. */
int sock_offload_progress_locked(struct sock_offload *ctx);
/* The same, taking the lock. */
int sock_offload_progress(struct sock_offload *ctx);
/* The same if the lock is free; 0 at once when another thread holds it
 * (it is polling the rings, or will at its unlock). For poll loops. */
int sock_offload_progress_try(struct sock_offload *ctx);
/* Without the lane lock: whether a pass over the lane would find nothing to
 * do: no frame in its RX rings, no send held, no stray segment, no drain
 * signal, and no timers that only application passes run. Reads fields
 * the lock guards, racily on purpose: a stale "busy" costs one pass, and a
 * stale "idle" is what a pass that ended a moment earlier would have seen
 * (callers that then sleep have the lane's wait fds in their wait set, so
 * what arrives after the look signals them). Rings that cannot tell
 * (ring_rx_maybe) are never idle. */
bool sock_offload_idle_peek(const struct sock_offload *ctx);
/* VMA_RX_CQ_DRAIN_RATE_NSEC, lock held: a receive call that found data
 * already queued also polls the rings when their last poll is older than
 * the rate, and counts it in *polls (NULL: not counted). Returns whether it
 * polled. Off (the default), it is one compare. */
bool sock_offload_rx_drain_due_locked(struct sock_offload *ctx, uint64_t *polls);
static inline bool sock_offload_rx_drain_locked(struct sock_offload *ctx, uint64_t *polls)
{
	if (__builtin_expect(ctx->rx_drain_rate_ns == 0, 1))
		return false;
	return sock_offload_rx_drain_due_locked(ctx, polls);
}
/* Lock held: brings the stack's clock (and the TCP engine's) to now
 * before a call that stamps segments (connect, write) outside a pass. */
void sock_offload_clock_locked(struct sock_offload *ctx);

/* The slot of ifindex among the offloaded interfaces, or -1. */
int sock_offload_if_slot(const struct sock_offload *ctx, int ifindex);
/* The slot whose interface owns address ip, or -1. */
int sock_offload_if_slot_by_ip(const struct sock_offload *ctx, uint32_t ip);

/* Reference-counted steering: the first user attaches, the last detaches.
 * Lock held. Returns 0 or a negative errno. */
int sock_offload_flow_get_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow);
void sock_offload_flow_put_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow);
/* How many sockets of the lane hold flow on interface if_slot (0: none). */
unsigned sock_offload_flow_refs_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow);
/* A 5-tuple another lane took over (attached with takeover): this lane's
 * reference goes without detaching, since the entry names the other lane. */
void sock_offload_flow_forget_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow);
/* The connection of flow (held once) now belongs to a kernel socket
 * (sock_tcp_handoff.c): its entry sends its packets to the kernel, and the
 * reference moves from the socket to the context until the GC below finds
 * the kernel's connection gone. 0 or -errno. */
int sock_offload_flow_to_kernel_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow);
/* Drops the to_kernel entries whose connection alive() says is gone. */
void sock_offload_kernel_flows_gc_locked(struct sock_offload *ctx, bool (*alive)(const struct ring_flow *flow));

/* ---- wait channels (docs/process_model.md, "Wait channels") ----
 * The calling thread's channel on interface if_slot of ctx, opened (or a
 * channel whose thread ended taken over) if it has none yet; NULL when
 * the lane has none for it. Lock held. */
struct sock_offload_chan *sock_offload_chan_mine_locked(struct sock_offload *ctx, int if_slot);
/* The same without the lock and never creating: what the calling thread
 * last got from the call above, if it was for ctx. */
struct sock_offload_chan *sock_offload_chan_mine_peek(const struct sock_offload *ctx, int if_slot);
/* Whether the calling thread, which has no channel on if_slot, may get
 * one there: the look before taking the lock to ask. */
bool sock_offload_chan_may_get(const struct sock_offload *ctx, int if_slot);
/* A number that moves each time the calling thread gains a channel: a
 * sleeper that armed a lane's wait fds before one of its sockets took the
 * thread a channel arms again (iomux rings_arm). */
unsigned sock_offload_chan_epoch(void);
/* Whether fd is the wait fd of one of the calling thread's channels on ctx
 * (an epoll set never rests it: nobody else polls it). */
bool sock_offload_chan_fd_mine(const struct sock_offload *ctx, int fd);
/* Steers the 5-tuple flow (held once, by one socket) to ring, or to the
 * interface's own ring when ring is NULL: the entry is rewritten, the
 * old ring forgets it, then gets one pass so what it already holds comes
 * in now. Lock held. 0 or -errno (nothing changed). */
int sock_offload_flow_rehome_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow,
				    struct ring *ring);
/* Attaches flow (a new 5-tuple) to ring, one of ctx's wait channels on
 * if_slot, with one reference: sock_offload_flow_get_locked for a channel. */
int sock_offload_flow_get_on_locked(struct sock_offload *ctx, int if_slot, struct ring *ring,
				    const struct ring_flow *flow);

/* Arms every ring's wait fd and stores up to max of them. Lock held.
 * Returns the count, or -1 when a ring already has packets (do not sleep). */
int sock_offload_wait_prepare_locked(struct sock_offload *ctx, int *fds, int max);
/* The same, taking the lock; 0 when ctx is NULL (the socket is on the
 * kernel path). The wait_prepare op of every offloaded kind. */
int sock_offload_wait_prepare(struct sock_offload *ctx, int *fds, int max);
/* Whether a blocking call interrupted by a signal handler restarts
 * (SA_RESTART on every installed handler). */
bool sock_offload_signal_restarts(void);

/* Lock held: delivers a copy of a multicast datagram just sent on if_slot
 * to this process's own member sockets (IP_MULTICAST_LOOP). Other
 * processes on the host do not see it (the frame never met the kernel). */
void sock_offload_mc_loop_locked(struct sock_offload *ctx, int if_slot, const struct stack_udp_tx *tx,
				 const struct iovec *iov, int iovcnt);

/* Held around a socket's move between lanes (sock_udp_migrate.c), outside
 * the two lanes' locks, and by fork's prepare handler: a child never copies
 * a socket half moved, whatever lanes fork managed to lock. */
void sock_offload_move_lock(void);
void sock_offload_move_unlock(void);
/* A socket's move from lane `from` to lane `to`: the move lock, then both
 * lanes' locks in ascending lane order (as fork's prepare handler takes
 * them: two moves in opposite directions cannot deadlock). The end drops
 * them and, when the socket did move, wakes the poll()/select() sleepers
 * armed on the lane it left (its drain eventfd): they look again. */
void sock_offload_move_begin(struct sock_offload *from, struct sock_offload *to);
void sock_offload_move_end(struct sock_offload *from, struct sock_offload *to, bool moved);

/* fork() (pthread_atfork handlers, docs/process_model.md). Prepare: the
 * listening and bound sockets a child may inherit stop being steered here
 * (each process joins the port's share group when it accepts or reads),
 * and the context lock is held across the fork. Child: the parent's context
 * and rings are forgotten, never closed; the child builds its own on first
 * use, and adopts inherited listeners and bound sockets when it uses them. */
void sock_offload_before_fork(void);
void sock_offload_after_fork_parent(void);
void sock_offload_after_fork_child(void);

#endif
