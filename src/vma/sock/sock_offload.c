/* The process-wide offload context (see sock_offload.h, docs/udp.md). */
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "engine/engine_net.h"
#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring_mgr.h"
#include "sock/sock_offload.h"
#include "extra/extra.h"
#include "sock/sock_prefetch.h"
#include "sock/sock_migrate.h"
#include "sock/sock_tcp.h"
#include "sock/sock_udp.h"
#include "stats/stats.h"
#include "vmad/vmad_peers.h"

#define SOCK_OFFLOAD_RX_BATCH_MAX 64
#define SOCK_OFFLOAD_TICK_MS 100
/* How late the statistics refresh of a lane may be before a thread that
 * holds the lane does it (sock_offload_progress_locked). */
#define SOCK_OFFLOAD_STATS_OVERDUE_MS 100
/* The internal thread's tick period: a TCP deadline (RTO, tail loss probe,
 * delayed ACK) is run within this of being due even when no application
 * thread polls. A tick with nothing due is a trylock and two compares. */
#define SOCK_OFFLOAD_FINE_TICK_MS 10
/* How long the exit hook waits for a thread inside a progress pass. */
#define SOCK_OFFLOAD_EXIT_LOCK_TRIES 100000

struct sock_offload *sock_offload_live;
/* This process's lanes; [0] is built first and owns the netlink view. A
 * forked child builds new ones (its own stacks and ring memberships) and
 * leaves the parent's copies untouched: inherited sockets still point at
 * them, marked dead. Written under the init lock; nlanes read atomically. */
static struct sock_offload *sock_offload_lane[SOCK_OFFLOAD_MAX_LANES];
static unsigned sock_offload_nlanes;
static pthread_mutex_t sock_offload_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool sock_offload_tried;
/* Which lane an allocation key (thread, core) was given; a key not here
 * gets a new lane while there is room (lane 0 first), else one round-robin. */
#define SOCK_OFFLOAD_LANE_KEYS 256
struct sock_offload_lane_key {
	uint64_t key;
	unsigned lane;
	bool used;
};
static struct sock_offload_lane_key sock_offload_lane_keys[SOCK_OFFLOAD_LANE_KEYS];
static bool sock_offload_lane0_claimed;
static bool sock_offload_lanes_full;   /* a lane could not be built: share from now on */
static unsigned sock_offload_lane_rr;
/* Bumped in a forked child: the threads' cached lanes are the parent's. */
static unsigned sock_offload_generation;
static __thread struct sock_offload *sock_offload_thread_lane OS_TLS_HOT;
static __thread unsigned sock_offload_thread_gen OS_TLS_HOT;
/* The lanes fork() found live and locked in the prepare handler. */
static struct sock_offload *sock_offload_fork_locked[SOCK_OFFLOAD_MAX_LANES];
static unsigned sock_offload_nfork_locked;
/* Moves of sockets between lanes (sock_offload_move_lock) and fork. */
static pthread_mutex_t sock_offload_move_mutex = PTHREAD_MUTEX_INITIALIZER;
static bool sock_offload_fork_has_move;

void sock_offload_lock_init(struct sock_offload *ctx)
{
	pthread_mutexattr_t attr;

	ctx->lock_mode = g_cfg.thread_mode;
	pthread_spin_init(&ctx->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_mutexattr_init(&attr);
	/* glibc's adaptive mutex spins a little before it sleeps. */
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&ctx->mutex, &attr);
	pthread_mutexattr_destroy(&attr);
}

static void sock_offload_unlock_raw(struct sock_offload *ctx);
static int sock_offload_chans_poll_locked(struct sock_offload *ctx, bool all);
static int sock_offload_chans_tick_locked(struct sock_offload *ctx);

int sock_offload_wake_fd_get(int *slot)
{
	int fd = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (fd >= 0)
		return fd;
	int fresh = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fresh < 0)
		return -1;
	int expected = -1;
	if (__atomic_compare_exchange_n(slot, &expected, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return fresh;
	os_close_nocancel(fresh);
	return expected;
}

struct sock_offload_candidate {
	int ifindex;
	char name[NET_IFNAME_LEN];
	uint8_t mac[6];
	unsigned mtu;
	uint32_t ip, netmask;
};

struct sock_offload_scan {
	struct sock_offload_candidate c[SOCK_OFFLOAD_MAX_IFS];
	unsigned n;
};

static void sock_offload_scan_links(const struct net_snapshot *snap, void *arg)
{
	struct sock_offload_scan *scan = arg;
	for (size_t i = 0; i < snap->nlinks && scan->n < SOCK_OFFLOAD_MAX_IFS; i++) {
		const struct net_link *l = &snap->links[i];
		if (!(l->flags & IFF_UP) || (l->flags & IFF_LOOPBACK) || l->mac_len != 6)
			continue;
		const struct net_addr *primary = NULL;
		for (size_t a = 0; a < snap->naddrs; a++) {
			if (snap->addrs[a].ifindex == l->ifindex) {
				primary = &snap->addrs[a];
				break;
			}
		}
		if (!primary)
			continue;
		struct sock_offload_candidate *c = &scan->c[scan->n++];
		c->ifindex = l->ifindex;
		memcpy(c->name, l->name, sizeof(c->name));
		memcpy(c->mac, l->mac, 6);
		c->mtu = l->mtu;
		c->ip = primary->addr;
		c->netmask = primary->prefix ? htonl(~0u << (32 - primary->prefix)) : 0;
	}
}

/* The calling thread's wait channels (sock_offload_chan_mine_locked):
 * the address of chan_token names the thread. */
static __thread char chan_token OS_TLS_HOT;   /* its address names the thread */
static __thread const struct sock_offload *chan_lane OS_TLS_HOT;   /* the lane chan_mine is for */
static __thread struct sock_offload_chan *chan_mine[SOCK_OFFLOAD_MAX_IFS] OS_TLS_HOT;

/* The ring the calling thread transmits on through ifc: its wait channel
 * when it has one there, else the interface's ring. One XSK's doorbell
 * (in copy mode, the sendto that transmits) sends every frame queued on
 * it: with one TX ring for the lane, a thread's doorbell took the other
 * threads' replies too and woke their clients from its CPU, a wake-up
 * across CPUs (an IPI that preempted the other thread) for four in ten
 * replies of a two-thread server (docs/process_model.md, "Wait channels"). */
static inline struct ring *sock_offload_if_tx_ring(const struct sock_offload_if *ifc)
{
	if (__builtin_expect(chan_lane == ifc->ctx, 0)) {
		struct sock_offload_chan *c = chan_mine[ifc - ifc->ctx->ifs];
		if (c)
			return c->ring;
	}
	return ifc->ring;
}

struct ring *sock_offload_tx_ring(struct sock_offload *ctx, int if_slot)
{
	return sock_offload_if_tx_ring(&ctx->ifs[if_slot]);
}

/* Whether sends are held on ifc's ring or the calling thread's own TX
 * ring there. A look, without the lock. */
static bool sock_offload_if_held_mine(const struct sock_offload_if *ifc)
{
	return ring_tx_pending(ifc->ring) || ring_tx_pending(sock_offload_if_tx_ring(ifc));
}

/* Lock held: the sends held on ifc's ring and the calling thread's own
 * TX ring leave; with all, every channel's too. */
static void sock_offload_if_flush_held_locked(struct sock_offload_if *ifc, bool all)
{
	if (ring_tx_pending(ifc->ring))
		ring_tx_flush(ifc->ring);
	if (all) {
		unsigned n = __atomic_load_n(&ifc->nchans, __ATOMIC_RELAXED);
		for (unsigned j = 0; j < n; j++)
			if (ring_tx_pending(ifc->chans[j].ring))
				ring_tx_flush(ifc->chans[j].ring);
		return;
	}
	struct ring *mine = sock_offload_if_tx_ring(ifc);
	if (mine != ifc->ring && ring_tx_pending(mine))
		ring_tx_flush(mine);
}

/* Every TX ring of ifc: its own and its channels' (doorbells owed). */
static void sock_offload_if_tx_kick(struct sock_offload_if *ifc)
{
	ring_tx_kick(ifc->ring);
	unsigned n = __atomic_load_n(&ifc->nchans, __ATOMIC_ACQUIRE);
	for (unsigned j = 0; j < n; j++)
		ring_tx_kick(ifc->chans[j].ring);
}

static struct ring_buf *sock_offload_nif_tx_alloc(void *ifc)
{
	return ring_tx_alloc(sock_offload_if_tx_ring(ifc));
}

static int sock_offload_nif_tx_send(void *ifc, struct ring_buf *frame)
{
	return ring_tx_send(sock_offload_if_tx_ring(ifc), frame);
}

/* Hands one rx burst to the stack; TCP payload of the burst is coalesced
 * per connection (VMA_GRO_STREAMS_MAX). Lock held. */
static void sock_offload_input_batch(struct sock_offload *ctx, struct sock_offload_if *ifc, struct ring_buf **bufs,
				     int n)
{
	int ahead = g_cfg.rx_prefetch_bytes;
	if (ctx->tcp)
		tcp_rx_batch_begin(ctx->tcp);
	if (n > 0)
		sock_prefetch(bufs[0]->data, bufs[0]->len, ahead);
	for (int i = 0; i < n; i++) {
		/* VMA_RX_PREFETCH_BYTES: the next frame of the burst comes
		 * into the cache while the stack works on this one. */
		if (i + 1 < n)
			sock_prefetch(bufs[i + 1]->data, bufs[i + 1]->len, ahead);
		stack_input(ctx->stack, &ifc->nif, bufs[i]);
	}
	if (ctx->tcp)
		tcp_rx_batch_end(ctx->tcp);
}

/* Runs the stack's timers (IP reassembly, TCP) when due: the routine pass
 * every tcp_period_ms, and the TCP engine alone as soon as one of its
 * deadlines (RTO, tail loss probe, delayed ACK, persist) is reached, so they
 * fire on time rather than on the tcp_period_ms grid. Lock held. */
static void sock_offload_timers_locked(struct sock_offload *ctx, uint64_t now)
{
	if (now < ctx->timers_next_ms) {
		if (ctx->tcp && now >= tcp_ctx_next_deadline_ms(ctx->tcp)) {
			stack_clock_set(ctx->stack, now);
			tcp_timer_tick(ctx->tcp, now);
		}
		return;
	}
	ctx->timers_next_ms = now + ctx->tcp_period_ms;
	stack_timer_tick(ctx->stack, now);
	if (ctx->tcp)
		sock_tcp_tick_locked(ctx, now);
}

/* Internal thread, lock held: up to budget packets of ifc's ring into the
 * stack, then out with what they provoked (ACKs, SYN-ACKs, echoes). */
static int sock_offload_drain_if_locked(struct sock_offload *ctx, struct sock_offload_if *ifc, int budget)
{
	struct ring_buf *bufs[SOCK_OFFLOAD_RX_BATCH_MAX];
	int done = 0;
	stack_clock_set_us(ctx->stack, engine_now_us());
	while (done < budget) {
		int n = ring_rx_burst(ifc->ring, bufs, ctx->rx_batch);
		if (n <= 0)
			break;
		sock_offload_input_batch(ctx, ifc, bufs, n);
		done += n;
	}
	ring_tx_flush(sock_offload_if_tx_ring(ifc));
	return done;
}

/* After the internal thread delivered packets, lock dropped. A
 * poll()/select() sleeper on a ring's wait fd may have been woken by them
 * and found the ring empty when it looked again: the eventfd every sleeper
 * also waits on tells it to look at the sockets instead. */
bool sock_offload_poll_watch_locked(struct sock_offload *ctx, int wake_fd, bool on)
{
	for (unsigned i = 0; i < ctx->npoll_wake; i++) {
		if (ctx->poll_wake[i] != wake_fd)
			continue;
		if (!on)
			ctx->poll_wake[i] = ctx->poll_wake[--ctx->npoll_wake];
		return true;
	}
	if (!on)
		return true;
	if (ctx->npoll_wake == SOCK_OFFLOAD_POLL_SLEEPERS)
		return false;
	ctx->poll_wake[ctx->npoll_wake++] = wake_fd;
	return true;
}

void sock_offload_poll_wake_locked(struct sock_offload *ctx)
{
	int saved = errno;
	for (unsigned i = 0; i < ctx->npoll_wake; i++)
		os_efd_write(ctx->poll_wake[i], 1);
	ctx->npoll_wake = 0;
	errno = saved;
}

void sock_offload_watch_locked(struct sock_offload *ctx, struct sock_offload **watching)
{
	if (*watching)
		return;   /* this lane's already, or the one the socket left (dropped unlocked) */
	ctx->rx_watchers++;
	*watching = ctx;
}

void sock_offload_unwatch_locked(struct sock_offload *ctx, struct sock_offload **watching)
{
	if (*watching != ctx)
		return;
	*watching = NULL;
	if (--ctx->rx_watchers == 0 && ctx->nrx_passive) {
		/* Written under the lock: its reader takes its entry out
		 * under it before it returns, so the fd is still the
		 * socket's (an fd number closed and reused would get our
		 * eight bytes otherwise). */
		int saved = errno;
		os_efd_write(ctx->rx_passive[--ctx->nrx_passive], 1);
		errno = saved;
	}
}

void sock_offload_unwatch(struct sock_offload **watching)
{
	struct sock_offload *ctx = *watching;
	if (!ctx)
		return;
	int saved = errno;
	sock_offload_lock(ctx);
	sock_offload_unwatch_locked(ctx, watching);
	sock_offload_unlock(ctx);
	errno = saved;
}

bool sock_offload_passive_begin_locked(struct sock_offload *ctx, struct sock_offload **watching, int wake_fd,
				       bool has_strays_lane)
{
	if (*watching != ctx || ctx->rx_watchers < 2 || ctx->nrx_passive == SOCK_OFFLOAD_POLL_SLEEPERS ||
	    wake_fd < 0 || has_strays_lane)
		return false;
	ctx->rx_watchers--;
	*watching = NULL;
	ctx->rx_passive[ctx->nrx_passive++] = wake_fd;
	return true;
}

void sock_offload_passive_end(struct sock_offload *ctx, struct sock_offload **watching, int wake_fd)
{
	int saved = errno;
	sock_offload_lock(ctx);
	for (unsigned i = 0; i < ctx->nrx_passive; i++) {
		if (ctx->rx_passive[i] == wake_fd) {
			ctx->rx_passive[i] = ctx->rx_passive[--ctx->nrx_passive];
			break;
		}
	}
	sock_offload_watch_locked(ctx, watching);
	sock_offload_unlock(ctx);
	errno = saved;
}

/* Moves each time the calling thread gains a channel (sock_offload_chan_epoch). */
static __thread unsigned chan_epoch OS_TLS_HOT;

unsigned sock_offload_chan_epoch(void)
{
	return chan_epoch;
}

static bool sock_offload_chan_any_mine(const struct sock_offload *ctx)
{
	if (chan_lane != ctx)
		return false;
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (chan_mine[i])
			return true;
	return false;
}

/* ---- one busy-poller per lane (sock_offload.h) ---- */
static __thread char spin_token OS_TLS_HOT;                 /* its address names the thread */
static __thread struct sock_offload *spin_claimed OS_TLS_HOT;
static __thread unsigned spin_passes OS_TLS_HOT;

/* A pass renews the lease once in SOCK_OFFLOAD_SPIN_RENEW_EVERY: a pass
 * takes well under a microsecond, the lease a millisecond. */
#define SOCK_OFFLOAD_SPIN_RENEW_EVERY 32

static bool sock_offload_spin_claim(struct sock_offload *ctx, uint64_t now_ns)
{
	const void *owner = __atomic_load_n(&ctx->spin_owner, __ATOMIC_ACQUIRE);
	if (owner != &spin_token) {
		if (owner && now_ns < __atomic_load_n(&ctx->spin_until_ns, __ATOMIC_ACQUIRE))
			return false;
		if (!__atomic_compare_exchange_n(&ctx->spin_owner, &owner, &spin_token, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			return false;
	}
	__atomic_store_n(&ctx->spin_until_ns, now_ns + SOCK_OFFLOAD_SPIN_LEASE_NS, __ATOMIC_RELEASE);
	return true;
}

static uint64_t sock_offload_spin_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool sock_offload_spun_by_other(struct sock_offload *ctx)
{
	const void *owner = __atomic_load_n(&ctx->spin_owner, __ATOMIC_ACQUIRE);
	return owner && owner != &spin_token &&
	       sock_offload_spin_now_ns() < __atomic_load_n(&ctx->spin_until_ns, __ATOMIC_ACQUIRE);
}

bool sock_offload_spin_turn(struct sock_offload *ctx)
{
	/* A thread with a wait channel spins on it: what it waits for comes
	 * there, which the lane's spinner does not poll. */
	if (ctx->chans_on && sock_offload_chan_any_mine(ctx))
		return true;
	if (spin_claimed == ctx && (++spin_passes % SOCK_OFFLOAD_SPIN_RENEW_EVERY) != 0)
		return true;
	if (spin_claimed != ctx)
		sock_offload_spin_leave();
	spin_claimed = sock_offload_spin_claim(ctx, sock_offload_spin_now_ns()) ? ctx : NULL;
	return spin_claimed == ctx;
}

void sock_offload_spin_leave(void)
{
	struct sock_offload *ctx = spin_claimed;
	if (!ctx)
		return;
	spin_claimed = NULL;
	const void *expected = &spin_token;
	__atomic_compare_exchange_n(&ctx->spin_owner, &expected, NULL, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void sock_offload_drain_signal(struct sock_offload *ctx)
{
	if (ctx->drain_wake_fd < 0)
		return;
	/* The write first: a sleeper that sees the flag then finds the
	 * count to reset, and one that missed the flag still wakes on it. */
	os_efd_write(ctx->drain_wake_fd, 1);
	__atomic_store_n(&ctx->drain_signalled, true, __ATOMIC_RELEASE);
}

static void sock_offload_drain_wake(struct sock_offload *ctx, int done)
{
	if (done > 0)
		sock_offload_drain_signal(ctx);
}

/* Engine side: drains a ring nobody polled, never waiting for the lock. */
static int sock_offload_engine_drain(void *arg, int budget)
{
	struct sock_offload_if *ifc = arg;
	struct sock_offload *ctx = ifc->ctx;
	if (!sock_offload_trylock(ctx))
		return 0;
	int done = ctx->dead ? 0 : sock_offload_drain_if_locked(ctx, ifc, budget), chans_done = 0;
	/* Nobody polled the lane: its channels either. Their packets wake
	 * their sockets' waiters only (as in sock_offload_tick). */
	if (!ctx->dead && ctx->chans_on && ifc == &ctx->ifs[0])
		chans_done = sock_offload_chans_poll_locked(ctx, true);
	sock_offload_unlock_raw(ctx);
	sock_offload_drain_wake(ctx, done);
	return done + chans_done;
}

/* ---- VMA_TCP_CTL_THREAD=1: the internal thread wakes on packet arrival ----
 *
 * The ring's wait fd sits in the internal thread's epoll set with
 * EPOLLONESHOT: after one report it stays quiet until engine_fd_rearm,
 * which makes the kernel look at the fd's state again (a ring still
 * holding packets is reported at once: level-triggered per re-arm). That
 * choice is what keeps the thread from spinning. A wake-up that finds the
 * lane locked (an application thread is in a pass; it polls the rings
 * itself) leaves the fd disarmed: re-arming it there, or a plain
 * level-triggered registration, would report the same packets over and
 * over while the lock is held; edge-triggered would report nothing more
 * for packets already there. The lane tick then drains and re-arms. */

/* Lock held: drains, then arms the ring so its wait fd signals the next
 * packet (frames freed go back to the fill ring; the kernel is kicked if
 * it asks). */
static int sock_offload_ctl_drain_locked(struct sock_offload *ctx, struct sock_offload_if *ifc)
{
	int done = sock_offload_drain_if_locked(ctx, ifc, g_cfg.progress_engine_wce_max);
	ring_wait_arm(ifc->ring);
	return done;
}

static void sock_offload_ctl_wakeup(int fd, uint32_t revents, void *arg)
{
	struct sock_offload_if *ifc = arg;
	struct sock_offload *ctx = ifc->ctx;
	(void)revents;
	ifc->ctl_wakeups++;
	if (!sock_offload_trylock(ctx)) {
		ifc->ctl_rearm_due = true;
		return;
	}
	bool live = !ctx->dead;
	int done = live ? sock_offload_ctl_drain_locked(ctx, ifc) : 0;
	sock_offload_unlock_raw(ctx);
	sock_offload_drain_wake(ctx, done);
	if (live)
		engine_fd_rearm(fd);
}

/* At lane build, before the lane is published. */
static void sock_offload_ctl_watch(struct sock_offload *ctx, struct sock_offload_if *ifc)
{
	int fd = ring_wait_fd(ifc->ring);
	if (fd < 0)
		return;
	/* Armed first; packets already there are reported as soon as the fd
	 * is added (the kernel looks at its state then). */
	ring_wait_arm(ifc->ring);
	int err = engine_fd_add(fd, EPOLLIN | EPOLLONESHOT, sock_offload_ctl_wakeup, ifc);
	if (err < 0) {
		vlog_warn("VMA_TCP_CTL_THREAD: the internal thread cannot watch the ring of %s (%s); only its "
			  "timer drains it", ifc->name, strerror(-err));
		ctx->ctl_on_tick = true;
		return;
	}
	ifc->ctl_fd = fd;
}

/* Exit, every lane locked: the rings are about to close, and an XSK's
 * file outlives our fd (vmad holds a copy), so its registration would too. */
static void sock_offload_ctl_unwatch(struct sock_offload *ctx)
{
	for (unsigned i = 0; i < ctx->nifs; i++) {
		if (ctx->ifs[i].ctl_fd >= 0)
			engine_fd_del(ctx->ifs[i].ctl_fd);
		ctx->ifs[i].ctl_fd = -1;
	}
}

uint32_t sock_offload_ring_id(const struct sock_offload *ctx, int if_slot)
{
	return ctx->lane << 16 | (uint32_t)ctx->ifs[if_slot].nif.ifindex;
}

static void sock_offload_stats_attach(struct sock_offload *ctx, unsigned slot)
{
	struct sock_offload_if *ifc = &ctx->ifs[slot];
	struct sock_offload_if_stats *st = &ifc->stats;
	uint32_t id = sock_offload_ring_id(ctx, (int)slot);
	st->ring = stats_ring_slot_get(id, ifc->name);
	st->rx_pool = stats_pool_slot_get(id, STATS_POOL_RX);
	st->tx_pool = stats_pool_slot_get(id, STATS_POOL_TX);
	st->zero_epoch = stats_zero_epoch();
}

static void sock_offload_stats_pool(struct stats_pool *slot, const struct ring_buf_pool *pool,
				    uint64_t *empty_base, bool rebase)
{
	struct ring_buf_pool_counters pc;
	ring_buf_pool_read_counters(pool, &pc);
	if (rebase)
		*empty_base = pc.empty;
	slot->size = pc.free_now;
	slot->no_buffer_errors = pc.empty - *empty_base;
}

/* The lane's protection counters now (struct stats_lane_counters). */
static void sock_offload_lane_read_locked(const struct sock_offload *ctx, struct stats_lane_counters *o)
{
	memset(o, 0, sizeof(*o));
	o->udp_frame_pressure_drops = ctx->udp_frame_pressure_drops;
	o->tcp_coalesced = ctx->rx_coalesced;
	if (ctx->tcp) {
		const struct tcp_counters *t = tcp_ctx_counters(ctx->tcp);
		o->tcp_frame_pressure_drops = t->rx_rcvq_pressure_dropped;
		o->tcp_ooo_drops = t->rx_ooo_dropped + t->rx_ooo_pressure_dropped;
		o->tcp_ooo_reneged = t->rx_ooo_reneged;
		o->tcp_syncookies_sent = t->tx_syncookies;
		o->tcp_syncookies_ok = t->rx_syncookies_ok;
		o->tcp_syncookies_bad = t->rx_syncookies_bad;
		o->tcp_accept_queue_full = t->rx_accept_queue_full;
		o->tcp_syn_rate_limited = t->rx_syn_rate_limited;
		o->tcp_challenge_acks = t->tx_challenge_acks;
		o->tcp_challenge_acks_limited = t->tx_challenge_acks_limited + t->tx_challenge_acks_over_budget;
		o->tcp_invalid_acks_limited = t->tx_invalid_acks_limited;
		o->tcp_rst_ignored = t->rx_rst_ignored;
		o->tcp_out_of_window = t->rx_out_of_window;
		o->tcp_bad_segments = t->rx_bad_checksum + t->rx_bad_header;
	}
	const struct stack_counters *c = stack_counters(ctx->stack);
	o->malformed_frames = c->rx_drop_eth_truncated + c->rx_drop_ip_bad_header + c->rx_drop_ip_bad_length +
			      c->rx_drop_ip_bad_checksum + c->rx_drop_ip_bad_source + c->rx_drop_reass_bad +
			      c->rx_drop_reass_overlap + c->rx_drop_reass_too_big + c->rx_drop_udp_bad_length +
			      c->rx_drop_udp_bad_checksum;
	o->reass_evicted = c->rx_drop_reass_overflow;
}

static void sock_offload_lane_publish_locked(struct sock_offload *ctx, struct stats_ring *slot, uint32_t epoch)
{
	struct stats_lane_counters now;
	sock_offload_lane_read_locked(ctx, &now);
	if (ctx->lane_zero_epoch != epoch) {
		ctx->lane_base = now;
		ctx->lane_zero_epoch = epoch;
	}
	const uint64_t *cur = (const uint64_t *)&now, *base = (const uint64_t *)&ctx->lane_base;
	uint64_t *out = (uint64_t *)&slot->lane;
	for (size_t i = 0; i < sizeof(now) / sizeof(uint64_t); i++)
		out[i] = cur[i] - base[i];
	slot->has_lane = 1;
}

/* Called with the lock held: reading an XDP ring's counters also settles
 * its RX pool's count of missed frames. */
static void sock_offload_stats_refresh_locked(struct sock_offload *ctx)
{
	uint32_t epoch = stats_zero_epoch();
	for (unsigned i = 0; i < ctx->nifs; i++) {
		struct sock_offload_if_stats *st = &ctx->ifs[i].stats;
		struct ring *ring = ctx->ifs[i].ring;
		struct ring_counters rc;
		ring_read_counters(ring, &rc);
		/* The interface's wait channels are part of its ring for
		 * vma_stats: what they received counts there. */
		for (unsigned j = 0; j < ctx->ifs[i].nchans; j++) {
			struct ring_counters cc;
			ring_read_counters(ctx->ifs[i].chans[j].ring, &cc);
			rc.rx_packets += cc.rx_packets;
			rc.rx_bytes += cc.rx_bytes;
			rc.rx_dropped += cc.rx_dropped;
			rc.rx_fill_empty += cc.rx_fill_empty;
			rc.rx_wakeups += cc.rx_wakeups;
			rc.rx_refills += cc.rx_refills;
			/* and what their threads sent through them */
			rc.tx_packets += cc.tx_packets;
			rc.tx_bytes += cc.tx_bytes;
			rc.tx_doorbells += cc.tx_doorbells;
			rc.tx_held += cc.tx_held;
			rc.tx_stranded += cc.tx_stranded;
		}
		bool rebase = st->zero_epoch != epoch;
		if (rebase) {
			st->base = rc;
			st->zero_epoch = epoch;
		}
		struct stats_ring_counters *out = &st->ring->c;
		out->rx_packets = rc.rx_packets - st->base.rx_packets;
		out->rx_bytes = rc.rx_bytes - st->base.rx_bytes;
		out->tx_packets = rc.tx_packets - st->base.tx_packets;
		out->tx_bytes = rc.tx_bytes - st->base.tx_bytes;
		out->cq_packets_dropped = rc.rx_dropped - st->base.rx_dropped;
		out->tx_doorbells = rc.tx_doorbells - st->base.tx_doorbells;
		out->tx_held = rc.tx_held - st->base.tx_held;
		out->tx_stranded = rc.tx_stranded - st->base.tx_stranded;
		out->interrupts_requested = rc.rx_wakeups - st->base.rx_wakeups;
		if (rebase)
			st->ctl_wakeups_base = ctx->ifs[i].ctl_wakeups;
		out->interrupts_received = ctx->ifs[i].ctl_wakeups - st->ctl_wakeups_base;
		struct ring_buf_pool_counters pc;
		ring_buf_pool_read_counters(ring_rx_pool(ring), &pc);
		st->ring->cq_buffer_pool_size = pc.size;
		sock_offload_stats_pool(st->rx_pool, ring_rx_pool(ring), &st->rx_empty_base, rebase);
		sock_offload_stats_pool(st->tx_pool, ring_tx_pool(ring), &st->tx_empty_base, rebase);
		if (i == 0 && ctx->stack)
			sock_offload_lane_publish_locked(ctx, st->ring, epoch);
	}
}

/* The lane tick's part of VMA_TCP_CTL_THREAD, lock held: mode 2 drains
 * every ring, mode 1 the rings whose wake-up found the lane locked (each
 * then marked in rearm). Returns the packets delivered. */
static int sock_offload_ctl_tick_locked(struct sock_offload *ctx, bool *rearm)
{
	int done = 0;
	for (unsigned i = 0; i < ctx->nifs; i++) {
		struct sock_offload_if *ifc = &ctx->ifs[i];
		rearm[i] = ifc->ctl_fd >= 0 && ifc->ctl_rearm_due;
		if (rearm[i]) {
			ifc->ctl_rearm_due = false;
			done += sock_offload_ctl_drain_locked(ctx, ifc);
		} else if (ctx->ctl_on_tick) {
			done += sock_offload_drain_if_locked(ctx, ifc, g_cfg.progress_engine_wce_max);
		}
	}
	return done;
}

static void sock_offload_tick(void *arg)
{
	struct sock_offload *ctx = arg;
	bool rearm[SOCK_OFFLOAD_MAX_IFS] = { false };
	int drained = 0, chans_drained = 0;
	if (!sock_offload_trylock(ctx))
		return;   /* the next tick will do; reassembly timeouts are coarse */
	if (!ctx->dead) {
		uint64_t now = engine_now_ms();
		if (ctx->ctl_on_tick || ctx->ctl_on_arrival)
			drained = sock_offload_ctl_tick_locked(ctx, rearm);
		/* The channels of threads busy elsewhere (in the application,
		 * in a kernel call): their packets wait a tick or two. What
		 * that delivers wakes only its sockets' waiters (the deferred
		 * notifications at the unlock), not every sleeper of the lane
		 * through the drain fd: their owner is busy, and the lane's
		 * other threads have nothing to look at. */
		if (ctx->chans_on)
			chans_drained = sock_offload_chans_tick_locked(ctx);
		sock_offload_timers_locked(ctx, now);
		if (now >= ctx->tick_routine_ms) {
			uint32_t period = ctx->tcp_period_ms < SOCK_OFFLOAD_TICK_MS ? ctx->tcp_period_ms :
										    SOCK_OFFLOAD_TICK_MS;
			ctx->tick_routine_ms = now + period;
			/* Backstop for sends held in a burst when the progress
			 * engine is off or keeps being skipped. */
			for (unsigned i = 0; i < ctx->nifs; i++)
				sock_offload_if_flush_held_locked(&ctx->ifs[i], true);
			sock_offload_stats_refresh_locked(ctx);
		}
	}
	/* Packets delivered: deferred notifications to run, sleepers to wake. */
	if (drained || chans_drained)
		sock_offload_unlock_raw(ctx);
	else
		sock_offload_unlock_plain(ctx);
	sock_offload_drain_wake(ctx, drained);
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (rearm[i])
			engine_fd_rearm(ctx->ifs[i].ctl_fd);
}

unsigned sock_offload_lanes(struct sock_offload **out, unsigned max)
{
	unsigned n = __atomic_load_n(&sock_offload_nlanes, __ATOMIC_ACQUIRE);
	if (n > max)
		n = max;
	for (unsigned i = 0; i < n; i++)
		out[i] = sock_offload_lane[i];
	return n;
}

/* Registered by lane 0 with itself as arg; a forked child's copy of the
 * parent's hook finds arg is not its lane 0 and leaves the parent's rings. */
static void sock_offload_exit(void *arg)
{
	struct sock_offload *lanes[SOCK_OFFLOAD_MAX_LANES];
	bool locked[SOCK_OFFLOAD_MAX_LANES];
	unsigned n = 1;

	lanes[0] = arg;
	if (arg == sock_offload_lane[0])
		n = sock_offload_lanes(lanes, SOCK_OFFLOAD_MAX_LANES);
	/* A thread interrupted inside a progress pass may never release the
	 * lock (signal exit): wait a bounded time, then close anyway. */
	for (unsigned k = 0; k < n; k++) {
		locked[k] = false;
		for (int i = 0; i < SOCK_OFFLOAD_EXIT_LOCK_TRIES && !locked[k]; i++)
			locked[k] = sock_offload_trylock(lanes[k]);
		__atomic_store_n(&lanes[k]->dead, true, __ATOMIC_RELEASE);
		sock_offload_ctl_unwatch(lanes[k]);
	}
	__atomic_store_n(&sock_offload_live, NULL, __ATOMIC_RELEASE);
	/* A thread that just dropped a lane's lock may be ringing a deferred
	 * doorbell: a sendto, microseconds. Bounded, like the lock wait. */
	for (unsigned k = 0; k < n; k++)
		for (int i = 0; i < SOCK_OFFLOAD_EXIT_LOCK_TRIES &&
				__atomic_load_n(&lanes[k]->tx_kicks_in_flight, __ATOMIC_ACQUIRE); i++)
			sched_yield();
	if (arg == sock_offload_lane[0])
		ring_mgr_close_all();
	for (unsigned k = 0; k < n; k++) {
		sock_tcp_strays_free(lanes[k]);
		if (locked[k])
			sock_offload_unlock_plain(lanes[k]);
	}
}

/* Every lane's connections get their FIN (or RST) before the rings close. */
static void sock_offload_tcp_exit(void *arg)
{
	struct sock_offload *lanes[SOCK_OFFLOAD_MAX_LANES];
	if (arg != sock_offload_lane[0])
		return;
	unsigned n = sock_offload_lanes(lanes, SOCK_OFFLOAD_MAX_LANES);
	for (unsigned k = 0; k < n; k++)
		sock_tcp_exit(lanes[k]);
	/* The FINs are out: vmad has nobody to probe when we are gone (as
	 * before the peers list, an exiting process's peers learn from its
	 * FIN). */
	vmad_peers_mark_clean();
}

static void sock_offload_settings(struct stack_settings *st)
{
	stack_settings_default(st);
	st->tx_ip_checksum = g_cfg.tx_ip_checksum != 0;
}

/* VMA_TCP_TIMESTAMP_OPTION=2 follows net.ipv4.tcp_timestamps. */
static enum tcp_ts_mode sock_offload_ts_mode(void)
{
	if (g_cfg.tcp_timestamp_option != 2)
		return g_cfg.tcp_timestamp_option ? TCP_TS_ON : TCP_TS_OFF;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_timestamps", "re");
	int v = 1;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 1;
		fclose(f);
	}
	return v ? TCP_TS_ON : TCP_TS_OFF;
}

/* A number from /proc/sys (def when absent or unreadable); up to n values
 * on one line (tcp_rmem's min, default, max). */
static unsigned sock_offload_sysctl(const char *path, unsigned long *v, unsigned n)
{
	FILE *f = fopen(path, "re");
	unsigned got = 0;
	if (f) {
		while (got < n && fscanf(f, "%lu", &v[got]) == 1)
			got++;
		fclose(f);
	}
	return got;
}

/* Linux's receive side, from the namespace's sysctls: the initial window is
 * half of tcp_rmem[1], auto-tuning grows it to half of tcp_rmem[2] (the
 * default 50% window/buffer ratio), and the window scale is chosen from
 * max(tcp_rmem[2], rmem_max); ECN as net.ipv4.tcp_ecn (Linux's default 2:
 * accepted when asked, not asked for). */
static void sock_offload_tcp_linux_settings(struct tcp_settings *set)
{
	unsigned long rmem[3] = { 4096, 131072, 6291456 }, rmem_max = 212992, ecn = 2, ssai = 1;
	unsigned long wmem[3] = { 4096, 16384, 4194304 };
	if (sock_offload_sysctl("/proc/sys/net/ipv4/tcp_rmem", rmem, 3) != 3) {
		rmem[1] = 131072;
		rmem[2] = 6291456;
	}
	sock_offload_sysctl("/proc/sys/net/core/rmem_max", &rmem_max, 1);
	sock_offload_sysctl("/proc/sys/net/ipv4/tcp_ecn", &ecn, 1);
	if (rmem[1] < 4096 || rmem[1] > (1ul << 30))
		rmem[1] = 131072;
	if (rmem[2] < rmem[1] || rmem[2] > (1ul << 30))
		rmem[2] = rmem[1];
	set->rcv_buf = (uint32_t)(rmem[1] / 2);
	set->rcv_buf_max = (uint32_t)(rmem[2] / 2);
	/* the send buffer grows up to tcp_wmem[2], as Linux's (tcp_sndbuf_expand) */
	if (sock_offload_sysctl("/proc/sys/net/ipv4/tcp_wmem", wmem, 3) != 3 || wmem[2] > (1ul << 30))
		wmem[2] = 4194304;
	set->snd_buf_max = (uint32_t)wmem[2];
	set->rcv_wscale_space = (uint32_t)(rmem[2] > rmem_max ? rmem[2] : (rmem_max > (1ul << 30) ? 1ul << 30 : rmem_max));
	set->ecn = ecn == 1 ? 1 : ecn == 0 ? 0 : 2;
	sock_offload_sysctl("/proc/sys/net/ipv4/tcp_slow_start_after_idle", &ssai, 1);
	set->slow_start_after_idle = ssai != 0;
}

/* net.ipv4.tcp_notsent_lowat: TCP_NOTSENT_LOWAT of sockets that set none
 * (Linux's default, UINT32_MAX, means none). */
static uint32_t sock_offload_notsent_lowat(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_notsent_lowat", "re");
	unsigned long v = UINT32_MAX;
	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = UINT32_MAX;
		fclose(f);
	}
	return v >= UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Every connection of the engine goes on the process's peers list, which
 * vmad reads if the process is killed (vmad_peers.h): the ones that ride
 * a 3-tuple are known nowhere else. */
static void sock_offload_tcp_conn_listed(void *arg, uint32_t local_ip, uint16_t local_port, uint32_t remote_ip,
					 uint16_t remote_port, uint32_t *cookie, bool on)
{
	(void)arg;
	if (on)
		vmad_peers_add(local_ip, local_port, remote_ip, remote_port, cookie);
	else
		vmad_peers_del(cookie);
}

/* The route toward a SYN's sender, asked by the engine before it answers
 * (Linux routes every SYN-ACK): its mtu and advmss metrics set the MSS the
 * SYN-ACK announces and bound the segments the connection sends. */
static void sock_offload_tcp_route_metrics(void *arg, uint32_t remote_ip, struct tcp_route_metrics *out)
{
	struct sock_offload *ctx = arg;
	struct net_route_query q = { .dst = remote_ip };
	struct net_route_result r;
	if (ctx->net && net_route_lookup(ctx->net, &q, &r) == 0 && r.kind == NET_ROUTE_UNICAST)
		*out = (struct tcp_route_metrics){ .mtu = r.mtu, .advmss = r.advmss };
}

enum tcp_cc_algo sock_offload_tcp_cc_default(void)
{
	switch (g_cfg.tcp_cc_algo) {
	case 1: return TCP_CC_CUBIC;
	case 2: return TCP_CC_NONE;
	case 3: return TCP_CC_BBR;
	}
	return TCP_CC_NEWRENO;
}

static void sock_offload_tcp_create(struct sock_offload *ctx)
{
	struct tcp_settings set;
	tcp_settings_default(&set);
	set.nodelay = g_cfg.tcp_nodelay != 0;
	set.quickack = g_cfg.tcp_quickack != 0;
	set.timestamps = sock_offload_ts_mode();
	set.notsent_lowat = sock_offload_notsent_lowat();
	set.cc_algo = sock_offload_tcp_cc_default();
	set.mss = g_cfg.mss > 0 ? (uint32_t)g_cfg.mss : 0;
	set.mtu = g_cfg.mtu > 0 ? (uint32_t)g_cfg.mtu : 0;
	set.max_syn_rate = (uint32_t)g_cfg.tcp_max_syn_rate;
	set.gro_streams_max = (uint32_t)g_cfg.gro_streams_max;
	set.timer_resolution_ms = engine_tcp_timer_period_ms();
	sock_offload_tcp_linux_settings(&set);
	set.snd_buf = 131072;
	ctx->tcp_period_ms = set.timer_resolution_ms ? set.timer_resolution_ms : 100;
	ctx->timers_by_app = !engine_tcp_timer_immediate();
	ctx->tcp = tcp_ctx_create(ctx->stack, &ctx->ifs[0].nif, &set);
	if (!ctx->tcp)
		vlog_warn("TCP offload disabled: out of memory for the TCP engine");
	else {
		tcp_ctx_set_route_hook(ctx->tcp, sock_offload_tcp_route_metrics, ctx);
		tcp_ctx_set_conn_hook(ctx->tcp, sock_offload_tcp_conn_listed, ctx);
		tcp_ctx_set_stray_hook(ctx->tcp, sock_tcp_stray_hook, ctx);
	}
}

/* Builds lane `lane` (lane 0 opens the netlink view, the others use it). */

/* VMA_RX_SW_CSUM: 0 trusts every frame's UDP/TCP checksum, 1 verifies
 * all, 2 (auto) trusts the frames of devices that never cross a wire. */
static bool sock_offload_trusts_l4_csum(const struct ring *ring)
{
	switch (g_cfg.rx_sw_csum) {
	case 0:
		return true;
	case 1:
		return false;
	default:
		return ring_driver_is_virtual(ring->driver);
	}
}

static bool sock_offload_build(struct sock_offload *ctx, unsigned lane)
{
	ctx->drain_wake_fd = -1;
	ctx->lane = lane;
	if (lane == 0) {
		int err = net_open(&ctx->net);
		if (err < 0) {
			vlog_warn("UDP offload disabled: cannot read the network configuration (%s)", strerror(-err));
			return false;
		}
		/* net_open starts from the documented defaults; the process's
		 * VMA_NEIGH_* values replace them before anything resolves. */
		struct net_neigh_settings neigh;
		net_neigh_settings_from_params(&neigh);
		net_set_neigh_settings(ctx->net, &neigh);
	} else {
		ctx->net = sock_offload_lane[0]->net;
	}
	struct sock_offload_scan scan = { .n = 0 };
	net_with_snapshot(ctx->net, sock_offload_scan_links, &scan);

	struct stack_settings settings;
	sock_offload_settings(&settings);
	ctx->stack = stack_create(&settings);
	if (!ctx->stack) {
		vlog_warn("UDP offload disabled: out of memory for the stack");
		if (lane == 0)
			net_close(ctx->net);
		return false;
	}
	sock_offload_lock_init(ctx);
	ctx->rx_batch = g_cfg.cq_poll_batch_max > 0 ? (unsigned)g_cfg.cq_poll_batch_max : 16;
	if (ctx->rx_batch > SOCK_OFFLOAD_RX_BATCH_MAX)
		ctx->rx_batch = SOCK_OFFLOAD_RX_BATCH_MAX;

	for (unsigned i = 0; i < scan.n; i++) {
		const struct sock_offload_candidate *c = &scan.c[i];
		/* One ring per interface and lane: the lane number is the key. */
		struct ring *ring = ring_mgr_get_by_index((unsigned)c->ifindex, lane);
		if (!ring) {
			/* ring_open warned with the interface and the reason. */
			if (lane == 0)
				vlog_info("%s stays on the kernel path", c->name);
			continue;
		}
		if (ring_mgr_refs(ring) > 1) {
			/* No room for another ring there: the manager shared one
			 * of another lane, which has a stack of its own. */
			ring_mgr_put(ring);
			continue;
		}
		struct sock_offload_if *ifc = &ctx->ifs[ctx->nifs++];
		ifc->ctx = ctx;
		ifc->ring = ring;
		/* Doorbells after the unlock (sock_offload_unlock_plain). */
		ring_defer_kicks(ring, &ctx->tx_kick_owed);
		ifc->ctl_fd = -1;
		memcpy(ifc->name, c->name, sizeof(ifc->name));
		memcpy(ifc->nif.mac, ring->mac, 6);
		ifc->nif.ip = c->ip;
		ifc->nif.netmask = c->netmask;
		unsigned mtu = g_cfg.mtu > 0 ? (unsigned)g_cfg.mtu : c->mtu;
		if (ring->mtu && ring->mtu < mtu)
			mtu = ring->mtu;
		ifc->nif.mtu = mtu;
		ifc->nif.ifindex = c->ifindex;
		ifc->nif.rx_l4_csum_trusted = sock_offload_trusts_l4_csum(ring);
		ifc->nif.ctx = ifc;   /* sock_offload_if_tx_ring picks the ring */
		ifc->nif.tx_alloc = sock_offload_nif_tx_alloc;
		ifc->nif.tx_send = sock_offload_nif_tx_send;
		vlog_debug("UDP offload on %s (ifindex %d, mtu %u, driver %s, UDP/TCP checksums %s)", c->name,
			   c->ifindex, mtu, ring->driver[0] ? ring->driver : "unknown",
			   ifc->nif.rx_l4_csum_trusted ? "trusted" : "verified");
	}
	if (ctx->nifs == 0 || (lane > 0 && ctx->nifs < sock_offload_lane[0]->nifs)) {
		/* A lane needs a ring on every interface lane 0 offloads: a
		 * socket of it may route through any of them. */
		for (unsigned i = 0; i < ctx->nifs; i++)
			ring_mgr_put(ctx->ifs[i].ring);
		if (lane == 0)
			vlog_info("no interface could be offloaded: UDP sockets use the kernel");
		stack_destroy(ctx->stack);
		if (lane == 0)
			net_close(ctx->net);
		return false;
	}
	ctx->drain_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ctx->tcp_period_ms = SOCK_OFFLOAD_TICK_MS;
	ctx->rx_drain_rate_ns = (uint64_t)g_cfg.rx_cq_drain_rate_nsec;
	ctx->ctl_on_arrival = g_cfg.tcp_ctl_thread == 1 || engine_arm_cq();
	ctx->ctl_on_tick = g_cfg.tcp_ctl_thread == 2;
	/* Wait channels: for the one lane of the default logic; the internal
	 * thread's watch of the ring (VMA_TCP_CTL_THREAD) would not see them. */
	ctx->chans_on = lane == 0 && g_cfg.ring_wait_channels &&
			sock_offload_logic_of(g_cfg.ring_allocation_logic_rx) <= RING_MGR_PER_IP && !ctx->ctl_on_arrival &&
			!ctx->ctl_on_tick;
	for (unsigned i = 0; i < ctx->nifs; i++) {
		/* An XSK of one queue whose flows can be handed over; a
		 * multi-queue ring (a group of XSKs) and verbs have none. */
		const struct ring *ring = ctx->ifs[i].ring;
		if (strcmp(ring->ops->name, "xdp") != 0 || !ring_can_hand_over_flows(ring))
			ctx->ifs[i].chans_failed = true;
	}
	sock_offload_tcp_create(ctx);
	for (unsigned i = 0; i < ctx->nifs; i++) {
		engine_poller_register(&ctx->ifs[i].poller, sock_offload_engine_drain, &ctx->ifs[i]);
		sock_offload_stats_attach(ctx, i);
		if (ctx->ctl_on_arrival)
			sock_offload_ctl_watch(ctx, &ctx->ifs[i]);
	}
	uint32_t tick = ctx->tcp_period_ms < SOCK_OFFLOAD_FINE_TICK_MS ? ctx->tcp_period_ms :
									SOCK_OFFLOAD_FINE_TICK_MS;
	/* VMA_TCP_CTL_THREAD=2 drains at every tick of the internal thread's
	 * timer, whatever its resolution. */
	if (ctx->ctl_on_tick)
		tick = engine_timer_resolution_ms();
	engine_timer_init(&ctx->tick);
	engine_timer_add(&ctx->tick, tick, tick, sock_offload_tick, ctx);
	if (lane > 0) {
		vlog_debug("lane %u: a stack and a ring on each of %u interfaces", lane, ctx->nifs);
		return true;
	}
	/* A forked child builds its context before any socket() call of its
	 * own would start the internal thread. */
	engine_start();
	engine_exit_hook_add(sock_offload_exit, ctx, 0);
	/* Hooks run in reverse order: connections get their FIN (or RST)
	 * while the rings are still open. */
	engine_exit_hook_add(sock_offload_tcp_exit, ctx, 0);
	engine_watch_net(ctx->net);
	return true;
}

/* Lane 0, built on first use. */
static struct sock_offload *sock_offload_base(void)
{
	struct sock_offload *ctx = __atomic_load_n(&sock_offload_live, __ATOMIC_ACQUIRE);
	if (__builtin_expect(ctx != NULL, 1))
		return ctx;
	if (!extra_thread_offload_wanted() || __atomic_load_n(&sock_offload_tried, __ATOMIC_ACQUIRE))
		return NULL;
	pthread_mutex_lock(&sock_offload_init_lock);
	if (!sock_offload_tried) {
		struct sock_offload *fresh = calloc(1, sizeof(*fresh));
		bool built = fresh && sock_offload_build(fresh, 0);
		if (built) {
			sock_offload_lane[0] = fresh;
			__atomic_store_n(&sock_offload_nlanes, 1, __ATOMIC_RELEASE);
			__atomic_store_n(&sock_offload_live, fresh, __ATOMIC_RELEASE);
		} else {
			free(fresh);
		}
		__atomic_store_n(&sock_offload_tried, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&sock_offload_init_lock);
	return __atomic_load_n(&sock_offload_live, __ATOMIC_ACQUIRE);
}

static unsigned sock_offload_lane_limit(void)
{
	unsigned limit = SOCK_OFFLOAD_MAX_LANES;
	if (g_cfg.ring_limit_per_interface > 0 && (unsigned)g_cfg.ring_limit_per_interface < limit)
		limit = (unsigned)g_cfg.ring_limit_per_interface;
	return limit;
}

/* Init lock held: the lane of key (remembered unless per socket). */
static struct sock_offload *sock_offload_lane_of_key_locked(uint64_t key, bool remember)
{
	struct sock_offload_lane_key *slot = NULL;
	unsigned h = (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 56);

	for (unsigned i = 0; i < SOCK_OFFLOAD_LANE_KEYS; i++) {
		struct sock_offload_lane_key *e = &sock_offload_lane_keys[(h + i) % SOCK_OFFLOAD_LANE_KEYS];
		if (!e->used) {
			slot = e;
			break;
		}
		if (e->key == key)
			return sock_offload_lane[e->lane];
	}
	unsigned lane;
	/* Under a process logic without lanes (0, 1) lane 0 serves every
	 * socket without an own logic: a socket's own logic never gets it. */
	int process_logic = g_cfg.ring_allocation_logic_rx;
	if (process_logic == RING_MGR_PER_INTERFACE || process_logic == RING_MGR_PER_IP)
		sock_offload_lane0_claimed = true;
	if (!sock_offload_lane0_claimed) {
		lane = 0;
		sock_offload_lane0_claimed = true;
	} else if (!sock_offload_lanes_full && sock_offload_nlanes < sock_offload_lane_limit()) {
		struct sock_offload *fresh = calloc(1, sizeof(*fresh));
		bool built = fresh && sock_offload_build(fresh, sock_offload_nlanes);
		if (built) {
			lane = sock_offload_nlanes;
			sock_offload_lane[lane] = fresh;
			__atomic_store_n(&sock_offload_nlanes, lane + 1, __ATOMIC_RELEASE);
		} else {
			free(fresh);
			sock_offload_lanes_full = true;
			vlog_info("VMA_RING_ALLOCATION_LOGIC_RX=%d: no ring for a lane beyond %u; later threads, "
				  "sockets or cores share the existing lanes",
				  g_cfg.ring_allocation_logic_rx, sock_offload_nlanes);
			lane = sock_offload_lane_rr++ % sock_offload_nlanes;
		}
	} else {
		lane = sock_offload_lane_rr++ % sock_offload_nlanes;
	}
	if (remember && slot) {
		slot->key = key;
		slot->lane = lane;
		slot->used = true;
	}
	return sock_offload_lane[lane];
}

__thread char sock_mig_thread_tag OS_TLS_HOT;

void sock_mig_window_configure(struct sock_mig_window *w, int own_logic)
{
	int logic = sock_offload_logic_of(own_logic);
	int ratio = g_cfg.ring_migration_ratio_rx;
	/* 30 is per core without migration, 10 a lane per socket: nothing to
	 * follow. A ratio of 0 would check on every call: taken as "never",
	 * like -1. */
	bool moves = (logic == RING_MGR_PER_THREAD || logic == RING_MGR_PER_CORE_MIGRATING) && ratio > 0;
	__atomic_store_n(&w->per_core, logic == RING_MGR_PER_CORE_MIGRATING, __ATOMIC_RELAXED);
	__atomic_store_n(&w->ratio, moves ? (unsigned)ratio : 0, __ATOMIC_RELAXED);
}

int sock_offload_logic_of(int logic)
{
	return logic >= 0 ? logic : g_cfg.ring_allocation_logic_rx;
}

int sock_offload_parse_ring_logic(const void *val, socklen_t len, int *logic, uint32_t *user_id)
{
	struct sock_offload_ring_logic_attr attr;

	if (!val)
		return -EFAULT;
	if (len < sizeof(attr))
		return -EINVAL;
	memcpy(&attr, val, sizeof(attr));
	switch (attr.ring_alloc_logic) {
	case RING_MGR_PER_INTERFACE:
	case RING_MGR_PER_IP:
	case RING_MGR_PER_SOCKET:
	case RING_MGR_PER_USER_ID:
	case RING_MGR_PER_THREAD:
	case RING_MGR_PER_CORE:
	case RING_MGR_PER_CORE_MIGRATING:
		break;
	default:
		return -EINVAL;
	}
	*logic = attr.ring_alloc_logic;
	*user_id = (attr.comp_mask & SOCK_OFFLOAD_RING_ATTR_USER_ID) ? attr.user_id : 0;
	return 0;
}

struct sock_offload *sock_offload_get_for(int fd)
{
	return sock_offload_get_for_logic(fd, -1, 0);
}

struct sock_offload *sock_offload_get_for_logic(int fd, int own_logic, uint32_t user_id)
{
	struct sock_offload *base = sock_offload_base();
	if (!base)
		return NULL;
	int logic = sock_offload_logic_of(own_logic);
	if (logic != RING_MGR_PER_SOCKET && logic != RING_MGR_PER_USER_ID && logic != RING_MGR_PER_THREAD &&
	    logic != RING_MGR_PER_CORE && logic != RING_MGR_PER_CORE_MIGRATING)
		return base;
	unsigned gen = __atomic_load_n(&sock_offload_generation, __ATOMIC_ACQUIRE);
	if (logic == RING_MGR_PER_THREAD && sock_offload_thread_lane && sock_offload_thread_gen == gen)
		return sock_offload_thread_lane;
	int cpu = sched_getcpu();
	uint64_t key = ring_mgr_key(logic, fd, gettid(), cpu < 0 ? 0 : cpu, user_id);
	pthread_mutex_lock(&sock_offload_init_lock);
	struct sock_offload *ctx = sock_offload_lane_of_key_locked(key, logic != RING_MGR_PER_SOCKET);
	pthread_mutex_unlock(&sock_offload_init_lock);
	if (!sock_offload_usable(ctx))
		return base;
	if (logic == RING_MGR_PER_THREAD) {
		sock_offload_thread_lane = ctx;
		sock_offload_thread_gen = gen;
	}
	return ctx;
}

struct sock_offload *sock_offload_get_for_socket(struct sock_offload *current, int fd, int logic,
						 uint32_t user_id)
{
	if (sock_offload_logic_of(logic) == RING_MGR_PER_SOCKET && sock_offload_usable(current))
		return current;
	return sock_offload_get_for_logic(fd, logic, user_id);
}

static int sock_offload_poll_if(struct sock_offload *ctx, struct sock_offload_if *ifc)
{
	struct ring_buf *bufs[SOCK_OFFLOAD_RX_BATCH_MAX];
	/* Sends held in a burst leave before we look for what they may
	 * have provoked. */
	struct ring *tx = sock_offload_if_tx_ring(ifc);
	if (ring_tx_pending(tx))
		ring_tx_flush(tx);
	int n = ring_rx_burst(ifc->ring, bufs, ctx->rx_batch);
	if (n > 0)
		sock_offload_input_batch(ctx, ifc, bufs, n);
	ring_tx_flush(tx);
	engine_note_app_poll(&ifc->poller);
	return n > 0 ? n : 0;
}

/* One burst of a wait channel of ifc into the stack; what it provokes
 * leaves on the calling thread's TX ring (its channel's own when it has
 * one). Lock held. */
static int sock_offload_poll_chan(struct sock_offload *ctx, struct sock_offload_if *ifc, struct ring *chan)
{
	struct ring_buf *bufs[SOCK_OFFLOAD_RX_BATCH_MAX];
	int n = ring_rx_burst(chan, bufs, ctx->rx_batch);
	if (n <= 0)
		return 0;
	sock_offload_input_batch(ctx, ifc, bufs, n);
	ring_tx_flush(sock_offload_if_tx_ring(ifc));
	return n;
}

/* ---- wait channels (sock_offload.h; docs/process_model.md) ---- */
/* chan_token, chan_lane, chan_mine: with the busy-poller's, above. */
/* A channel that could not be had: not asked again until a thread that
 * owned one ends (chan_freed moves). */
static __thread unsigned chan_refused_at[SOCK_OFFLOAD_MAX_IFS] OS_TLS_HOT;
static __thread bool chan_exit_hooked;
static unsigned chan_freed = 1;
static pthread_key_t chan_key;
static bool chan_key_made;

/* A thread's end frees its channels for the next thread (their flows stay
 * until a thread that waits for them takes them over; until then every
 * pass polls a channel without an owner). */
static void sock_offload_chan_thread_exit(void *arg)
{
	(void)arg;
	/* Its connections go back to the lane's ring, where whoever waits
	 * for them is woken (nobody sleeps on a channel without a thread);
	 * their next waiter takes them to its own channel (gen). */
	struct sock_offload *ctx = (struct sock_offload *)chan_lane;
	if (ctx && sock_offload_chan_any_mine(ctx)) {
		sock_offload_lock(ctx);
		for (unsigned k = 0; !ctx->dead && k < ctx->nflows; k++) {
			struct sock_offload_flow_ref *ref = &ctx->flows[k];
			struct sock_offload_chan *c = chan_mine[ref->if_slot];
			if (c && ref->ring == c->ring) {
				struct ring_flow flow = ref->flow;
				(void)sock_offload_flow_rehome_locked(ctx, ref->if_slot, &flow, NULL);
			}
		}
		for (unsigned i = 0; i < ctx->nifs; i++)
			if (chan_mine[i]) {
				chan_mine[i]->gen++;
				/* Its last sends leave now, not with the next
				 * thread that takes the channel. */
				if (!ctx->dead && ring_tx_pending(chan_mine[i]->ring))
					ring_tx_flush(chan_mine[i]->ring);
			}
		sock_offload_unlock(ctx);
	}
	for (unsigned i = 0; i < SOCK_OFFLOAD_MAX_IFS; i++) {
		if (chan_mine[i]) {
			__atomic_store_n(&chan_mine[i]->owner, NULL, __ATOMIC_RELEASE);
			chan_mine[i] = NULL;
			__atomic_add_fetch(&chan_freed, 1, __ATOMIC_ACQ_REL);
		}
	}
	chan_lane = NULL;
}

static void sock_offload_chan_make_key(void)
{
	chan_key_made = pthread_key_create(&chan_key, sock_offload_chan_thread_exit) == 0;
}

/* Channel rings' keys in the ring manager: apart from every logic's. */
#define SOCK_OFFLOAD_CHAN_KEY(n) ((uint64_t)0xCAu << 32 | (uint64_t)(n))

struct sock_offload_chan *sock_offload_chan_mine_peek(const struct sock_offload *ctx, int if_slot)
{
	if (chan_lane != ctx || if_slot < 0 || if_slot >= SOCK_OFFLOAD_MAX_IFS)
		return NULL;
	return chan_mine[if_slot];
}

bool sock_offload_chan_may_get(const struct sock_offload *ctx, int if_slot)
{
	if (!ctx->chans_on || if_slot < 0 || if_slot >= SOCK_OFFLOAD_MAX_IFS)
		return false;
	if (chan_lane == ctx && chan_refused_at[if_slot] == __atomic_load_n(&chan_freed, __ATOMIC_ACQUIRE))
		return false;
	return __atomic_load_n(&ctx->chans_active, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&ctx->chan_first, __ATOMIC_RELAXED) != &chan_token;
}

bool sock_offload_chan_fd_mine(const struct sock_offload *ctx, int fd)
{
	if (chan_lane != ctx || fd < 0)
		return false;
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (chan_mine[i] && ring_wait_fd(chan_mine[i]->ring) == fd)
			return true;
	return false;
}

struct sock_offload_chan *sock_offload_chan_mine_locked(struct sock_offload *ctx, int if_slot)
{
	if (!ctx->chans_on || ctx->dead || if_slot < 0 || (unsigned)if_slot >= ctx->nifs)
		return NULL;
	if (chan_lane != ctx) {
		memset(chan_mine, 0, sizeof(chan_mine));
		memset(chan_refused_at, 0, sizeof(chan_refused_at));
		chan_lane = ctx;
	}
	if (chan_mine[if_slot])
		return chan_mine[if_slot];
	unsigned freed = __atomic_load_n(&chan_freed, __ATOMIC_ACQUIRE);
	if (chan_refused_at[if_slot] == freed)
		return NULL;
	/* A process whose one thread waits on the lane (a pre-fork worker,
	 * most servers) needs none: channels start with a second thread,
	 * so such a process keeps one member slot of the queue. */
	if (!ctx->chans_active) {
		const void *first = __atomic_load_n(&ctx->chan_first, __ATOMIC_RELAXED);
		if (!first || first == &chan_token) {
			__atomic_store_n(&ctx->chan_first, (const void *)&chan_token, __ATOMIC_RELAXED);
			return NULL;
		}
		__atomic_store_n(&ctx->chans_active, true, __ATOMIC_RELEASE);
	}
	struct sock_offload_if *ifc = &ctx->ifs[if_slot];
	struct sock_offload_chan *c = NULL;
	for (unsigned j = 0; j < ifc->nchans && !c; j++)
		if (!__atomic_load_n(&ifc->chans[j].owner, __ATOMIC_ACQUIRE))
			c = &ifc->chans[j];
	if (!c && ifc->nchans < SOCK_OFFLOAD_CHANS && !ifc->chans_failed) {
		/* Optional: the ring layer's warnings ("stays on the kernel
		 * path") would be wrong here, nothing leaves the lane. */
		vlog_demote(true);
		struct ring *ring = ring_mgr_get_by_index((unsigned)ifc->nif.ifindex,
							  SOCK_OFFLOAD_CHAN_KEY(ifc->nchans));
		vlog_demote(false);
		if (ring && ring_mgr_refs(ring) > 1) {
			/* The queue holds no more rings of ours: the manager
			 * shared one, which a channel cannot be. */
			ring_mgr_put(ring);
			ring = NULL;
		}
		if (!ring) {
			ifc->chans_failed = true;
			vlog_debug("%s: no more wait channels (%u open); other threads wait on the lane's ring",
				   ifc->name, ifc->nchans);
		} else {
			c = &ifc->chans[ifc->nchans];
			c->ring = ring;
			/* It transmits its thread's frames, with doorbells after
			 * the unlock like the interface's ring. */
			ring_defer_kicks(ring, &ctx->tx_kick_owed);
			c->tick_rx_packets = 0;
			__atomic_store_n(&ifc->nchans, ifc->nchans + 1, __ATOMIC_RELEASE);   /* read without the lock */
		}
	}
	if (!c) {
		chan_refused_at[if_slot] = freed;
		return NULL;
	}
	if (!chan_exit_hooked) {
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, sock_offload_chan_make_key);
		if (chan_key_made)
			(void)pthread_setspecific(chan_key, &chan_token);
		chan_exit_hooked = true;
	}
	__atomic_store_n(&c->owner, (const void *)&chan_token, __ATOMIC_RELEASE);
	chan_mine[if_slot] = c;
	chan_epoch++;
	return c;
}

/* The internal thread's tick: a channel that holds frames and that
 * nobody polled since the last tick (its thread is busy elsewhere) is
 * drained. One whose thread keeps polling it is left alone: taking its
 * frames would wake that thread, asleep on its wait fd, for nothing. */
static int sock_offload_chans_tick_locked(struct sock_offload *ctx)
{
	int total = 0;
	for (unsigned i = 0; i < ctx->nifs; i++) {
		struct sock_offload_if *ifc = &ctx->ifs[i];
		for (unsigned j = 0; j < ifc->nchans; j++) {
			struct sock_offload_chan *c = &ifc->chans[j];
			struct ring_counters rc;
			ring_read_counters(c->ring, &rc);
			if (rc.rx_packets == c->tick_rx_packets && ring_rx_maybe(c->ring))
				total += sock_offload_poll_chan(ctx, ifc, c->ring);
			ring_read_counters(c->ring, &rc);
			c->tick_rx_packets = rc.rx_packets;
		}
	}
	return total;
}

/* Polls the channels of the calling thread and those whose thread ended
 * (all: every channel, the internal thread's tick). Another thread's
 * channel is left to it: it sleeps on its wait fd, and taking its packets
 * would wake it for an empty ring. Lock held. */
static int sock_offload_chans_poll_locked(struct sock_offload *ctx, bool all)
{
	int total = 0;
	for (unsigned i = 0; i < ctx->nifs; i++) {
		struct sock_offload_if *ifc = &ctx->ifs[i];
		for (unsigned j = 0; j < ifc->nchans; j++) {
			const void *owner = __atomic_load_n(&ifc->chans[j].owner, __ATOMIC_RELAXED);
			if (all || !owner || owner == &chan_token)
				total += sock_offload_poll_chan(ctx, ifc, ifc->chans[j].ring);
		}
	}
	return total;
}

static uint64_t sock_offload_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);   /* vDSO: no syscall */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool sock_offload_rx_drain_due_locked(struct sock_offload *ctx, uint64_t *polls)
{
	if (ctx->dead || sock_offload_now_ns() - ctx->rx_polled_ns < ctx->rx_drain_rate_ns)
		return false;
	sock_offload_progress_locked(ctx);
	if (polls)
		(*polls)++;
	return true;
}

int sock_offload_progress_locked(struct sock_offload *ctx)
{
	if (ctx->dead)
		return 0;
	if (ctx->rx_drain_rate_ns)
		ctx->rx_polled_ns = sock_offload_now_ns();
	int total = 0;
	/* The engine stamps segments with the stack's clock (RTT, RTO): keep
	 * it current on every pass, timers or not. */
	uint64_t now_us = engine_now_us(), now = now_us / 1000;
	stack_clock_set_us(ctx->stack, now_us);
	if (ctx->timers_by_app)
		sock_offload_timers_locked(ctx, now);
	/* The internal thread's tick only trylocks the lane: threads that keep
	 * it locked (busy polling) would starve its statistics refresh, and
	 * vma_stats would show a busy ring idle. Overdue: done here. */
	if (__builtin_expect(now >= ctx->tick_routine_ms + SOCK_OFFLOAD_STATS_OVERDUE_MS, 0)) {
		ctx->tick_routine_ms = now + SOCK_OFFLOAD_TICK_MS;
		sock_offload_stats_refresh_locked(ctx);
	}
	/* Segments of connections that moved here, which another lane still
	 * received (sock_tcp_move.c): rare, one load when there are none. */
	if (__builtin_expect(__atomic_load_n(&ctx->tcp_strays, __ATOMIC_RELAXED) != NULL, 0))
		sock_tcp_strays_input_locked(ctx);
	for (unsigned i = 0; i < ctx->nifs; i++)
		total += sock_offload_poll_if(ctx, &ctx->ifs[i]);
	if (ctx->chans_on)
		total += sock_offload_chans_poll_locked(ctx, false);
	return total;
}

void sock_offload_defer_locked(struct sock_offload *ctx, struct sock_offload_wake *w)
{
	w->next = NULL;
	if (ctx->wake_tail)
		*ctx->wake_tail = w;
	else
		ctx->wake_head = w;
	ctx->wake_tail = &w->next;
}

void sock_offload_undefer_locked(struct sock_offload *ctx, struct sock_offload_wake *w)
{
	struct sock_offload_wake *prev = NULL;
	for (struct sock_offload_wake *it = ctx->wake_head; it; prev = it, it = it->next) {
		if (it != w)
			continue;
		if (prev)
			prev->next = it->next;
		else
			ctx->wake_head = it->next;
		if (ctx->wake_tail == &it->next)
			ctx->wake_tail = prev ? &prev->next : NULL;
		return;
	}
}

static void sock_offload_unlock_raw(struct sock_offload *ctx)
{
	struct sock_offload_wake *w = ctx->wake_head;
	if (__builtin_expect(w == NULL, 1)) {
		sock_offload_unlock_plain(ctx);
		return;
	}
	ctx->wake_head = NULL;
	ctx->wake_tail = NULL;
	sock_offload_unlock_plain(ctx);
	while (w) {
		/* fn lets the socket queue its node again (another thread, under
		 * the lock): read the link first. */
		struct sock_offload_wake *next = w->next;
		w->fn(w->arg);
		w = next;
	}
}

void sock_offload_unlock(struct sock_offload *ctx)
{
	sock_offload_unlock_raw(ctx);
}

void sock_offload_tx_kick_locked(struct sock_offload *ctx)
{
	if (!ctx->tx_kick_owed)
		return;
	ctx->tx_kick_owed = false;
	for (unsigned i = 0; i < ctx->nifs; i++)
		sock_offload_if_tx_kick(&ctx->ifs[i]);
}

__thread unsigned sock_offload_held_mine OS_TLS_HOT;
__thread unsigned sock_offload_events_left OS_TLS_HOT;

void sock_offload_flush_mine_slow(void)
{
	/* A lock of ours held (an Extra API callback that writes a log line
	 * from inside our pass): later, from a call that holds none. */
	if (os_sig_tls.defer_depth)
		return;
	unsigned mine = sock_offload_held_mine;
	sock_offload_held_mine = 0;
	unsigned n = __atomic_load_n(&sock_offload_nlanes, __ATOMIC_ACQUIRE);
	for (unsigned k = 0; k < n; k++) {
		if (!(mine & (1u << k)))
			continue;
		/* Lanes live until exit. The lock, not a try: the thread is
		 * about to block anyway, and none of our locks is held here
		 * (our code reaches libc through os/, never through the
		 * interposed names that call this). */
		struct sock_offload *ctx = sock_offload_lane[k];
		if (__atomic_load_n(&ctx->dead, __ATOMIC_ACQUIRE))
			continue;
		bool pending = false;
		for (unsigned i = 0; i < ctx->nifs; i++)
			pending |= sock_offload_if_held_mine(&ctx->ifs[i]);
		if (!pending)
			continue;   /* another thread's pass sent them */
		sock_offload_lock(ctx);
		if (!ctx->dead)
			for (unsigned i = 0; i < ctx->nifs; i++)
				sock_offload_if_flush_held_locked(&ctx->ifs[i], false);
		sock_offload_unlock(ctx);   /* rings the doorbells */
	}
}

void sock_offload_tx_kick_owed(struct sock_offload *ctx)
{
	/* ifs[] is fixed once the lane is built, and the rings close only
	 * after every flight has landed (sock_offload_exit). */
	for (unsigned i = 0; i < ctx->nifs; i++)
		sock_offload_if_tx_kick(&ctx->ifs[i]);
	__atomic_sub_fetch(&ctx->tx_kicks_in_flight, 1, __ATOMIC_ACQ_REL);
}

void sock_offload_clock_locked(struct sock_offload *ctx)
{
	stack_clock_set_us(ctx->stack, engine_now_us());
}

void sock_offload_timers_publish_locked(struct sock_offload *ctx)
{
	uint64_t due = ctx->timers_next_ms;
	if (ctx->tcp) {
		uint64_t fine = tcp_ctx_next_deadline_ms(ctx->tcp);
		if (fine < due)
			due = fine;
	}
	__atomic_store_n(&ctx->timers_due_ms, due, __ATOMIC_RELAXED);
}

/* Whether a channel the calling thread polls (its own, one without an
 * owner) may hold frames. Without the lock: a look, like ring_rx_maybe. */
static bool sock_offload_chans_maybe(const struct sock_offload *ctx)
{
	for (unsigned i = 0; i < ctx->nifs; i++) {
		const struct sock_offload_if *ifc = &ctx->ifs[i];
		unsigned n = __atomic_load_n(&ifc->nchans, __ATOMIC_ACQUIRE);
		for (unsigned j = 0; j < n; j++) {
			const void *owner = __atomic_load_n(&ifc->chans[j].owner, __ATOMIC_RELAXED);
			if ((!owner || owner == &chan_token) && ring_rx_maybe(ifc->chans[j].ring))
				return true;
		}
	}
	return false;
}

bool sock_offload_idle_peek(const struct sock_offload *ctx)
{
	if (ctx->rx_drain_rate_ns || __atomic_load_n(&ctx->drain_signalled, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&ctx->tcp_strays, __ATOMIC_RELAXED) != NULL)
		return false;
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (ring_rx_maybe(ctx->ifs[i].ring) || sock_offload_if_held_mine(&ctx->ifs[i]))
			return false;
	if (ctx->chans_on && sock_offload_chans_maybe(ctx))
		return false;
	/* Timers that application passes run (the default,
	 * VMA_INTERNAL_THREAD_TCP_TIMER_HANDLING=0) keep a lane busy only
	 * once due: a delayed ACK or an RTO fires at the first pass after its
	 * deadline, as under the lock. Last: it reads a clock. */
	return !ctx->timers_by_app || !engine_deadline_passed(__atomic_load_n(&ctx->timers_due_ms, __ATOMIC_RELAXED));
}

int sock_offload_progress_try(struct sock_offload *ctx)
{
	/* Busy-polling threads (select/poll/epoll passes) must not queue up
	 * behind each other: while one holds the lock it polls the rings for
	 * everybody, so the others look at their sockets again instead. And
	 * a lane with nothing to do is not locked at all: threads whose epoll
	 * sets hold a socket of another thread's lane (a shared listener)
	 * would otherwise take turns at its lock on every pass. */
	if (sock_offload_idle_peek(ctx))
		return 0;
	if (!sock_offload_trylock(ctx)) {
		/* The holder polls the lane's rings for everybody, but not
		 * this thread's channel: what waits there, we wait for. */
		if (!ctx->chans_on || !sock_offload_chans_maybe(ctx))
			return 0;
		sock_offload_lock(ctx);
	}
	int n = sock_offload_progress_locked(ctx);
	sock_offload_unlock(ctx);
	return n;
}

int sock_offload_progress(struct sock_offload *ctx)
{
	sock_offload_lock(ctx);
	int n = sock_offload_progress_locked(ctx);
	sock_offload_unlock(ctx);
	return n;
}

int sock_offload_if_slot(const struct sock_offload *ctx, int ifindex)
{
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (ctx->ifs[i].nif.ifindex == ifindex)
			return (int)i;
	return -1;
}

int sock_offload_if_slot_by_ip(const struct sock_offload *ctx, uint32_t ip)
{
	for (unsigned i = 0; i < ctx->nifs; i++)
		if (ctx->ifs[i].nif.ip == ip)
			return (int)i;
	return -1;
}

static bool sock_offload_flow_equal(const struct ring_flow *a, const struct ring_flow *b)
{
	return a->proto == b->proto && a->local_ip == b->local_ip && a->local_port == b->local_port &&
	       a->remote_ip == b->remote_ip && a->remote_port == b->remote_port && a->group == b->group;
}

/* The ring a flow reference is attached to. */
static struct ring *sock_offload_flow_ring(struct sock_offload *ctx, const struct sock_offload_flow_ref *ref)
{
	return ref->ring ? ref->ring : ctx->ifs[ref->if_slot].ring;
}

static struct sock_offload_flow_ref *sock_offload_flow_find(struct sock_offload *ctx, int if_slot,
							     const struct ring_flow *flow)
{
	for (unsigned i = 0; i < ctx->nflows; i++)
		if (ctx->flows[i].if_slot == if_slot && sock_offload_flow_equal(&ctx->flows[i].flow, flow))
			return &ctx->flows[i];
	return NULL;
}

static int sock_offload_flow_room_locked(struct sock_offload *ctx)
{
	if (ctx->nflows == ctx->cap_flows) {
		unsigned cap = ctx->cap_flows ? ctx->cap_flows * 2 : 16;
		struct sock_offload_flow_ref *grown = realloc(ctx->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		ctx->flows = grown;
		ctx->cap_flows = cap;
	}
	return 0;
}

/* ring_attach_flow for every flow of the lane, and the one warning when
 * the interface's steering is full (the xdp backend's maps,
 * RING_XDP_MAX_FLOWS entries each, every process's flows on the interface
 * counted). The caller's fallback (a connect() goes to the kernel, an
 * accepted or moved connection rides its listener's steering or stays
 * where it is) used to be silent. */
static int sock_offload_flow_attach(struct sock_offload *ctx, int if_slot, struct ring *ring,
				    const struct ring_flow *flow)
{
	int err = ring_attach_flow(ring, flow);
	if (__builtin_expect(err == -ENOSPC, 0)) {
		struct sock_offload_if *ifc = &ctx->ifs[if_slot];
		if (!ifc->map_full_warned) {
			ifc->map_full_warned = true;
			vlog_warn("%s: the ring's flow steering is full (docs/process_model.md, \"Limits of this step\": every "
				  "process's flows on this interface count): fd %d gets no entry of its own, and from "
				  "now on such sockets connect through the kernel or ride their listener's steering; "
				  "close idle connections or spread them over more interfaces",
				  ifc->name, flow->owner_fd);
		} else {
			vlog_debug("%s: steering map full: no entry for fd %d", ifc->name, flow->owner_fd);
		}
	}
	return err;
}

int sock_offload_flow_get_on_locked(struct sock_offload *ctx, int if_slot, struct ring *ring,
				    const struct ring_flow *flow)
{
	if (sock_offload_flow_find(ctx, if_slot, flow))
		return -EEXIST;
	int err = sock_offload_flow_room_locked(ctx);
	if (err < 0)
		return err;
	err = sock_offload_flow_attach(ctx, if_slot, ring, flow);
	if (err < 0)
		return err;
	ctx->flows[ctx->nflows] = (struct sock_offload_flow_ref){ .if_slot = if_slot, .ring = ring, .flow = *flow,
								   .refs = 1 };
	ctx->flows[ctx->nflows++].flow.takeover = 0;
	return 0;
}

int sock_offload_flow_rehome_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow,
				    struct ring *ring)
{
	struct sock_offload_flow_ref *ref = sock_offload_flow_find(ctx, if_slot, flow);
	if (!ref || ref->refs != 1 || ref->flow.to_kernel || !ref->flow.remote_port || ref->flow.share)
		return -EINVAL;
	struct ring *old = sock_offload_flow_ring(ctx, ref);
	struct ring *to = ring ? ring : ctx->ifs[if_slot].ring;
	if (old == to)
		return 0;
	struct ring_flow moved = ref->flow;
	moved.takeover = 1;
	int err = sock_offload_flow_attach(ctx, if_slot, to, &moved);
	if (err < 0)
		return err;
	ring_forget_flow(old, &ref->flow);
	ref->ring = ring;
	/* What the old ring received before the entry changed reaches the
	 * connection now rather than at that ring's next poll. */
	if (old != ctx->ifs[if_slot].ring)
		sock_offload_poll_chan(ctx, &ctx->ifs[if_slot], old);
	return 0;
}

int sock_offload_flow_get_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow)
{
	struct sock_offload_flow_ref *ref = sock_offload_flow_find(ctx, if_slot, flow);
	if (ref) {
		ref->refs++;
		return 0;
	}
	int err = sock_offload_flow_room_locked(ctx);
	if (err < 0)
		return err;
	err = sock_offload_flow_attach(ctx, if_slot, ctx->ifs[if_slot].ring, flow);
	if (err < 0 && err != -EEXIST)
		return err;
	ctx->flows[ctx->nflows] = (struct sock_offload_flow_ref){ .if_slot = if_slot, .flow = *flow, .refs = 1 };
	ctx->flows[ctx->nflows++].flow.takeover = 0;   /* how this attach went, not the flow's */
	return 0;
}

int sock_offload_flow_to_kernel_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow)
{
	struct sock_offload_flow_ref *ref = sock_offload_flow_find(ctx, if_slot, flow);
	if (!ref || ref->refs != 1 || ref->flow.to_kernel)
		return -ENOENT;
	struct ring_flow k = ref->flow;
	k.to_kernel = 1;
	int err = sock_offload_flow_attach(ctx, ref->if_slot, sock_offload_flow_ring(ctx, ref), &k);
	if (err < 0)
		return err;
	ref->flow.to_kernel = 1;
	ctx->kernel_flows++;
	return 0;
}

void sock_offload_kernel_flows_gc_locked(struct sock_offload *ctx, bool (*alive)(const struct ring_flow *flow))
{
	for (unsigned i = 0; i < ctx->nflows;) {
		struct sock_offload_flow_ref *ref = &ctx->flows[i];
		if (!ref->flow.to_kernel || alive(&ref->flow)) {
			i++;
			continue;
		}
		struct ring_flow gone = ref->flow;
		ctx->kernel_flows--;
		/* put moves the last entry into slot i: look at i again */
		sock_offload_flow_put_locked(ctx, ref->if_slot, &gone);
	}
}

unsigned sock_offload_flow_refs_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow)
{
	struct sock_offload_flow_ref *ref = if_slot >= 0 ? sock_offload_flow_find(ctx, if_slot, flow) : NULL;
	return ref ? ref->refs : 0;
}

void sock_offload_flow_put_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow)
{
	struct sock_offload_flow_ref *ref = sock_offload_flow_find(ctx, if_slot, flow);
	if (!ref || --ref->refs > 0)
		return;
	if (!ctx->dead)
		ring_detach_flow(sock_offload_flow_ring(ctx, ref), flow);
	*ref = ctx->flows[--ctx->nflows];
}

void sock_offload_flow_forget_locked(struct sock_offload *ctx, int if_slot, const struct ring_flow *flow)
{
	struct sock_offload_flow_ref *ref = sock_offload_flow_find(ctx, if_slot, flow);
	if (!ref || --ref->refs > 0)
		return;
	if (!ctx->dead)
		ring_forget_flow(sock_offload_flow_ring(ctx, ref), flow);
	*ref = ctx->flows[--ctx->nflows];
}

int sock_offload_wait_prepare_locked(struct sock_offload *ctx, int *fds, int max)
{
	int count = 0;
	if (ctx->dead)
		return 0;
	/* Never sleep on held sends (ours; another thread's channel holds
	 * its own until that thread polls or sleeps). */
	for (unsigned i = 0; i < ctx->nifs; i++)
		sock_offload_if_flush_held_locked(&ctx->ifs[i], false);
	/* The internal thread delivered packets since the last sleep: some
	 * socket may be ready, so look again before sleeping. */
	/* Read (reset) only when signalled: a read per sleep was a syscall
	 * that almost always found nothing. */
	if (ctx->drain_wake_fd >= 0 && __atomic_exchange_n(&ctx->drain_signalled, false, __ATOMIC_ACQ_REL)) {
		eventfd_t drained;
		(void)os_efd_read(ctx->drain_wake_fd, &drained);
		return -1;
	}
	for (unsigned i = 0; i < ctx->nifs; i++) {
		int armed = ring_wait_arm(ctx->ifs[i].ring);
		if (armed == 1)
			return -1;
		if (armed == 0 && count < max)
			fds[count++] = ring_wait_fd(ctx->ifs[i].ring);
	}
	/* The calling thread's channels: what is steered there wakes it. */
	for (unsigned i = 0; ctx->chans_on && i < ctx->nifs; i++) {
		struct sock_offload_chan *c = sock_offload_chan_mine_peek(ctx, (int)i);
		if (!c)
			continue;
		int armed = ring_wait_arm(c->ring);
		if (armed == 1)
			return -1;
		if (armed == 0 && count < max)
			fds[count++] = ring_wait_fd(c->ring);
	}
	if (ctx->drain_wake_fd >= 0 && count < max)
		fds[count++] = ctx->drain_wake_fd;
	return count;
}

static struct ring_buf *sock_offload_loop_alloc(void *arg)
{
	struct sock_offload *ctx = arg;
	return ring_buf_alloc(ctx->loop_pool);
}

static int sock_offload_loop_send(void *arg, struct ring_buf *frame)
{
	struct sock_offload *ctx = arg;
	if (ctx->nloop == SOCK_OFFLOAD_LOOP_FRAMES) {
		ring_buf_free(frame);
		return -ENOBUFS;
	}
	ctx->loop_frames[ctx->nloop++] = frame;
	return 0;
}

void sock_offload_mc_loop_locked(struct sock_offload *ctx, int if_slot, const struct stack_udp_tx *tx,
				 const struct iovec *iov, int iovcnt)
{
	if (!ctx->loop_pool) {
		ctx->loop_pool = ring_buf_pool_create("mc_loop", SOCK_OFFLOAD_LOOP_FRAMES, 2048);
		if (!ctx->loop_pool)
			return;
	}
	const struct stack_netif *real = &ctx->ifs[if_slot].nif;
	struct stack_netif loop = *real;
	loop.ctx = ctx;
	loop.tx_alloc = sock_offload_loop_alloc;
	loop.tx_send = sock_offload_loop_send;
	if (loop.mtu > 2048 - STACK_ETH_HLEN)
		loop.mtu = 2048 - STACK_ETH_HLEN;
	ctx->nloop = 0;
	stack_udp_send(ctx->stack, &loop, tx, iov, iovcnt);
	unsigned n = ctx->nloop;
	ctx->nloop = 0;
	for (unsigned i = 0; i < n; i++) {
		struct ring_buf *frame = ctx->loop_frames[i];
		frame->rx_time_ns = 0;
		struct timespec ts;
		if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
			frame->rx_time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		stack_input(ctx->stack, real, frame);
	}
}

/* Spins bounded: fork() called from a signal handler that interrupted a
 * thread inside a pass must not hang; the child then just gets no help. */
#define SOCK_OFFLOAD_FORK_LOCK_TRIES 1000000

void sock_offload_move_lock(void)
{
	pthread_mutex_lock(&sock_offload_move_mutex);
}

void sock_offload_move_unlock(void)
{
	pthread_mutex_unlock(&sock_offload_move_mutex);
}

void sock_offload_move_begin(struct sock_offload *from, struct sock_offload *to)
{
	struct sock_offload *lo = from->lane < to->lane ? from : to;
	sock_offload_move_lock();
	sock_offload_lock(lo);
	sock_offload_lock(lo == from ? to : from);
}

void sock_offload_move_end(struct sock_offload *from, struct sock_offload *to, bool moved)
{
	struct sock_offload *lo = from->lane < to->lane ? from : to;
	sock_offload_unlock(lo == from ? to : from);
	sock_offload_unlock(lo);
	sock_offload_move_unlock();
	if (moved)
		sock_offload_drain_signal(from);
}

void sock_offload_before_fork(void)
{
	struct sock_offload *lanes[SOCK_OFFLOAD_MAX_LANES];
	sock_offload_nfork_locked = 0;
	sock_offload_fork_has_move = false;
	if (!__atomic_load_n(&sock_offload_live, __ATOMIC_ACQUIRE))
		return;
	/* First, as a move takes it before its lanes' locks. A move holds it
	 * for a few steering updates; the bound only matters for a fork from
	 * a signal handler that interrupted one (the child then gets the
	 * socket in whatever state, and resets it like every inherited one). */
	for (int i = 0; i < SOCK_OFFLOAD_FORK_LOCK_TRIES && !sock_offload_fork_has_move; i++)
		sock_offload_fork_has_move = pthread_mutex_trylock(&sock_offload_move_mutex) == 0;
	unsigned n = sock_offload_lanes(lanes, SOCK_OFFLOAD_MAX_LANES);
	for (unsigned k = 0; k < n; k++) {
		struct sock_offload *ctx = lanes[k];
		bool locked = false;
		for (int i = 0; i < SOCK_OFFLOAD_FORK_LOCK_TRIES && !locked; i++)
			locked = sock_offload_trylock(ctx);
		if (!locked)
			continue;
		if (!ctx->dead) {
			/* Listening and bound sockets the child inherits stop
			 * being steered to this process: until a process accepts
			 * or reads on one, its new flows reach the kernel socket
			 * every process shares; then that process joins the
			 * port's share group. */
			sock_tcp_fork_release_locked(ctx);
			sock_udp_fork_release_locked(ctx);
		}
		/* Held across the fork: the child's copy of every socket is
		 * taken between passes, never in the middle of one. */
		sock_offload_fork_locked[sock_offload_nfork_locked++] = ctx;
	}
}

void sock_offload_after_fork_parent(void)
{
	unsigned n = sock_offload_nfork_locked;
	sock_offload_nfork_locked = 0;
	for (unsigned k = 0; k < n; k++)
		sock_offload_unlock(sock_offload_fork_locked[k]);
	if (sock_offload_fork_has_move)
		pthread_mutex_unlock(&sock_offload_move_mutex);
	sock_offload_fork_has_move = false;
}

void sock_offload_after_fork_child(void)
{
	unsigned n = sock_offload_nlanes;
	sock_offload_held_mine = 0;   /* the parent's lanes' */
	chan_lane = NULL;   /* and their channels */
	memset(chan_mine, 0, sizeof(chan_mine));
	sock_offload_nfork_locked = 0;
	pthread_mutex_init(&sock_offload_init_lock, NULL);
	/* Only the forking thread lives on: no move is under way here. */
	pthread_mutex_init(&sock_offload_move_mutex, NULL);
	sock_offload_fork_has_move = false;
	for (unsigned k = 0; k < n; k++) {
		/* The parent's: dead here, never touched. Its lock (maybe held
		 * at fork) is made free for the exit hooks that still see it. */
		struct sock_offload *old = sock_offload_lane[k];
		__atomic_store_n(&old->dead, true, __ATOMIC_RELEASE);
		sock_offload_lock_init(old);
		old->wake_head = NULL;
		old->wake_tail = NULL;
	}
	__atomic_store_n(&sock_offload_live, NULL, __ATOMIC_RELEASE);
	ring_mgr_forget_after_fork();
	for (unsigned k = 0; k < n; k++) {
		sock_tcp_after_fork_child(sock_offload_lane[k]);
		sock_udp_after_fork_child(sock_offload_lane[k]);
		sock_offload_lane[k] = NULL;
	}
	__atomic_store_n(&sock_offload_nlanes, 0, __ATOMIC_RELEASE);
	memset(sock_offload_lane_keys, 0, sizeof(sock_offload_lane_keys));
	sock_offload_lane0_claimed = false;
	sock_offload_lanes_full = false;
	sock_offload_lane_rr = 0;
	__atomic_add_fetch(&sock_offload_generation, 1, __ATOMIC_ACQ_REL);
	/* The next socket that needs it builds this process's own lanes. */
	__atomic_store_n(&sock_offload_tried, false, __ATOMIC_RELEASE);
}

/* Whether Linux would restart a blocking call a handler interrupted: the
 * signal is not known here, so only when every installed handler has
 * SA_RESTART (libvma's own handler behind a default action has it). */
bool sock_offload_signal_restarts(void)
{
	__typeof__(os_libc.sigaction) get = OS_FN(sigaction);
	if (!get)
		return false;
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
		    sig == SIGILL || sig == SIGTRAP || sig == SIGSYS || get(sig, NULL, &sa) != 0)
			continue;
		bool handled = (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != NULL
							 : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
		if (handled && !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

int sock_offload_wait_prepare(struct sock_offload *ctx, int *fds, int max)
{
	if (!ctx)
		return 0;
	if (!sock_offload_trylock(ctx)) {
		/* Another thread works on the lane. When it has nothing left
		 * to do, arming it ourselves would only make us wait for that
		 * thread: its wait fds are enough. A frame already in a ring
		 * shows in the look; one that comes after it signals a wait
		 * fd, which the caller's kernel set holds (or, added now,
		 * reports at once), so the caller or the one it wakes polls
		 * it. Without a wait fd, take the lock and arm as usual. */
		if (sock_offload_idle_peek(ctx) && !__atomic_load_n(&ctx->dead, __ATOMIC_RELAXED)) {
			int count = 0;
			for (unsigned i = 0; i < ctx->nifs && count < max; i++)
				if (ring_wait_fd(ctx->ifs[i].ring) >= 0)
					fds[count++] = ring_wait_fd(ctx->ifs[i].ring);
			bool whole = count == (int)ctx->nifs;
			for (unsigned i = 0; whole && ctx->chans_on && i < ctx->nifs; i++) {
				struct sock_offload_chan *c = sock_offload_chan_mine_peek(ctx, (int)i);
				if (!c)
					continue;
				if (count < max && ring_wait_fd(c->ring) >= 0)
					fds[count++] = ring_wait_fd(c->ring);
				else
					whole = false;
			}
			if (whole && (ctx->drain_wake_fd < 0 || count < max)) {
				if (ctx->drain_wake_fd >= 0)
					fds[count++] = ctx->drain_wake_fd;
				return count;
			}
		}
		sock_offload_lock(ctx);
	}
	int n = sock_offload_wait_prepare_locked(ctx, fds, max);
	sock_offload_unlock(ctx);
	return n;
}
