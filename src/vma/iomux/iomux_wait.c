/* epoll_wait: poll the offloaded sockets and our ready list, glance at the
 * kernel epoll every VMA_SELECT_POLL_OS_RATIO passes, spin for
 * VMA_SELECT_POLL usec, then arm the rings and sleep in the kernel epoll
 * (which holds the rings' wait fds and our wake eventfd). */
#include <errno.h>
#include <limits.h>
#include "config/cfg_params.h"
#include "iomux/iomux_internal.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "ring/ring_mgr.h"
#include "ring/ring_spin.h"
#include "sock/sock_offload.h"

#define IOMUX_WAIT_FDS_PER_SOCK (2 * SOCK_OFFLOAD_WAIT_FDS)
#define IOMUX_WAIT_FDS_MAX 64
#define IOMUX_LANES_SEEN_MAX 16

/* Lanes already served in one pass over the set (sock_obj lane_key). */
struct lanes_seen {
	const void *key[IOMUX_LANES_SEEN_MAX];
	int n;
};

static const void *lane_key_of(struct sock_obj *obj)
{
	return obj->ops->lane_key ? obj->ops->lane_key(obj) : NULL;
}

/* Whether the lane of key (lane_key_of) was served already in this pass;
 * notes it if not. */
static bool lane_seen(struct lanes_seen *seen, const void *key)
{
	if (!key)
		return false;
	for (int i = 0; i < seen->n; i++)
		if (seen->key[i] == key)
			return true;
	if (seen->n < IOMUX_LANES_SEEN_MAX)
		seen->key[seen->n++] = key;
	return false;
}

/* Up to IOMUX_OFFL_BATCH offloaded sockets from index first on, read under
 * one set lock (a lock each cost more than the progress of an idle lane).
 * The pointers stay usable after the unlock as a single one did before:
 * a closed socket's object outlives SOCK_OBJ_GRAVE_SLOTS retirements. */
#define IOMUX_OFFL_BATCH 16
static int offl_batch(struct iomux_epoll *ep, int first, struct sock_obj **batch)
{
	iomux_lock(&ep->lock);
	int n = ep->offl_count - first;
	if (n > IOMUX_OFFL_BATCH)
		n = IOMUX_OFFL_BATCH;
	for (int i = 0; i < n; i++)
		batch[i] = ep->offl[first + i]->obj;
	iomux_unlock(&ep->lock);
	return n < 0 ? 0 : n;
}

/* Progresses the lanes of the set's offloaded sockets; returns the lane
 * when they all share one (the default ring logic), else NULL. */
static struct sock_offload *ring_progress_all(struct iomux_epoll *ep)
{
	struct lanes_seen seen = { .n = 0 };
	bool keyless = false;
	struct sock_obj *batch[IOMUX_OFFL_BATCH];
	for (int first = 0;; first += IOMUX_OFFL_BATCH) {
		int n = offl_batch(ep, first, batch);
		for (int i = 0; i < n; i++) {
			struct sock_obj *obj = batch[i];
			/* A socket without a lane key (not offloaded through a
			 * lane, or with a receive callback of its own) is
			 * progressed on its own: the set is not one lane's. */
			const void *key = lane_key_of(obj);
			keyless |= key == NULL;
			if (obj->ops->progress && !lane_seen(&seen, key))
				obj->ops->progress(obj);
		}
		if (n < IOMUX_OFFL_BATCH)
			break;
	}
	/* lane_key answers a struct sock_offload (sock_tcp, sock_udp). */
	return seen.n == 1 && !keyless ? (struct sock_offload *)seen.key[0] : NULL;
}

/* Disarms a fired EPOLLONESHOT item on both sides (lock held). */
static void item_disarm(struct iomux_epoll *ep, struct iomux_item *it, bool kernel_side_fired)
{
	it->disarmed = true;
	iomux_ready_remove(ep, it);
	if (!kernel_side_fired) {
		struct epoll_event ev = { .events = EPOLLONESHOT,
					  .data.u64 = IOMUX_DATA(IOMUX_TAG_APP, it->fd) };
		OS_CALL(epoll_ctl, ep->base.fd, EPOLL_CTL_MOD, it->fd, &ev);
	}
}

/* Adds bits for it to this call's results, merging with an earlier entry
 * for the same fd. Returns the new count. */
static int report(struct iomux_epoll *ep, struct iomux_item *it, uint32_t bits, struct epoll_event *events,
		  int count)
{
	if (it->report_gen == ep->gen && it->report_index < count) {
		events[it->report_index].events |= bits;
		return count;
	}
	it->report_gen = ep->gen;
	it->report_index = count;
	events[count].events = bits;
	events[count].data = it->data;
	return count + 1;
}

/* User-space readiness of the ready list into events[count..maxevents). */
static int collect_ready(struct iomux_epoll *ep, struct epoll_event *events, int count, int maxevents)
{
	iomux_lock(&ep->lock);
	int budget = 0;
	for (struct iomux_item *it = ep->ready_head; it; it = it->ready_next)
		budget++;
	struct iomux_item *it = ep->ready_head;
	while (it && budget-- > 0 && count < maxevents) {
		struct iomux_item *next = it->ready_next;
		uint32_t bits = it->disarmed ? 0 : iomux_obj_ready(it->obj) & (it->events | EPOLLERR | EPOLLHUP);
		if (!bits) {
			iomux_ready_remove(ep, it);
		} else {
			count = report(ep, it, bits, events, count);
			if (it->events & EPOLLONESHOT) {
				item_disarm(ep, it, false);
			} else if (it->events & EPOLLET) {
				iomux_ready_remove(ep, it);
			} else if (next) {
				/* Level-triggered and still ready: stays, behind the
				 * others, so a small maxevents does not starve them. */
				iomux_ready_remove(ep, it);
				iomux_ready_push(ep, it);
			}
		}
		it = next;
	}
	if (!ep->ready_head)
		iomux_wake_drain(ep);
	iomux_unlock(&ep->lock);
	return count;
}

/* The internal fds one sleep's kernel epoll reported, but our wake fd:
 * the rings' wait fds (and their lanes' drain fds). */
#define IOMUX_FIRED_MAX 4
struct iomux_fired {
	int fd[IOMUX_FIRED_MAX];
	int n;
};

/* The kernel epoll's answer, written into events[count..] and translated
 * in place. Returns the new count or -1; *woke tells whether the kernel
 * returned anything at all (internal wakeups included); *fired (if not
 * NULL) gets the internal fds it reported. */

static int kernel_harvest(struct iomux_epoll *ep, struct epoll_event *events, int count, int maxevents,
			  int timeout_ms, const sigset_t *mask, bool *woke, struct iomux_fired *fired)
{
	const int offloaded = count;
	int raw = OS_CALL(epoll_pwait, ep->base.fd, events + count, maxevents - count, timeout_ms, mask);
	if (raw < 0)
		return -1;
	if (woke)
		*woke = raw > 0;
	if (raw == 0)
		return count;
	iomux_lock(&ep->lock);
	int end = count + raw;
	for (int i = count; i < end; i++) {
		uint64_t tagged = events[i].data.u64;
		uint32_t bits = events[i].events;
		int fd = (int)(uint32_t)tagged;
		if (tagged >> 32 != IOMUX_TAG_APP) {
			if (fd == ep->wake_fd)
				iomux_wake_fired(ep);
			else if (fired && fired->n < IOMUX_FIRED_MAX)
				fired->fd[fired->n++] = fd;
			continue;
		}
		struct iomux_item *it = fd < ep->item_cap ? ep->items[fd] : NULL;
		if (!it)
			continue;   /* deleted while we slept */
		if (!it->obj) {
			events[count].events = bits;
			events[count].data = it->data;
			count++;
			continue;
		}
		if (it->disarmed)
			continue;
		count = report(ep, it, bits, events, count);
		if (it->events & EPOLLONESHOT)
			item_disarm(ep, it, true);
	}
	iomux_unlock(&ep->lock);
	/* Kernel fds reported, not the offloaded events already in events[]. */
	ep->stats->c.os_ready += count > offloaded;
	return count;
}

/* Whether fd is known to be in the kernel epoll (ring generation gen). */
static bool armed_known(struct iomux_epoll *ep, uint32_t gen, int fd)
{
	bool known = false;
	iomux_lock(&ep->lock);
	if (ep->armed_gen != gen) {
		ep->armed_gen = gen;
		ep->narmed = 0;
	}
	for (int i = 0; i < ep->narmed && !known; i++)
		known = ep->armed[i] == fd;
	iomux_unlock(&ep->lock);
	return known;
}

static void armed_note(struct iomux_epoll *ep, uint32_t gen, int fd)
{
	iomux_lock(&ep->lock);
	if (ep->armed_gen == gen && ep->narmed < IOMUX_ARMED_MAX)
		ep->armed[ep->narmed++] = fd;
	iomux_unlock(&ep->lock);
}

/* ---- one ring, many sets ----
 * Under the default ring logic the threads of a process share one ring,
 * and each thread's epoll set holds the ring's wait fd. A packet wakes the
 * first set in the fd's wait queue that has a sleeper (EPOLLEXCLUSIVE),
 * whoever the packet is for: with one busy thread of four, the three idle
 * ones woke for nearly every request of the busy one (21000 wake-ups a
 * second for nothing, the server at 0.6x the kernel). So a set of one lane
 * woken by the lane's wait fds that then found nothing for itself takes
 * them out of its kernel epoll for a while (it "rests" them): the packets
 * were another set's, whose thread serves them, and what they make ready
 * here still comes through our wake fd. The lane keeps at least one set
 * that holds them (epoll_armed_sets), so a packet always wakes someone;
 * if that someone is busy in the application, a packet for a resting set
 * waits at most until the rest ends: its fds come back then, their
 * readiness reported at once (IOMUX_RESTING_NS_MAX, or the internal
 * thread's VMA_PROGRESS_ENGINE_INTERVAL if shorter). A set also rests the
 * fds when it is about to sleep while another thread spins on the lane:
 * that one takes every packet off the ring first, and our sleep on the
 * fds would wake, inside the kernel, for each of them and find the ring
 * empty. Sets watched from outside (exposed: an outer poll relies on the
 * rings being in the kernel epoll) and sets of several lanes never rest
 * their fds. */
#define IOMUX_RESTING_NS_MAX (2 * 1000000LL)

static int64_t resting_ns(void)
{
	int64_t ms = g_cfg.progress_engine_interval;
	return ms > 0 && ms * 1000000 < IOMUX_RESTING_NS_MAX ? ms * 1000000 : IOMUX_RESTING_NS_MAX;
}

/* Whether fd rests (lock held); forgets the resting fds once their time
 * is up or their rings' generation passed. */
static bool resting_locked(struct iomux_epoll *ep, uint32_t gen, int64_t now, int fd)
{
	if (ep->nresting && (ep->resting_gen != gen || now >= ep->resting_until))
		ep->nresting = 0;
	for (int i = 0; i < ep->nresting; i++)
		if (ep->resting[i] == fd)
			return true;
	return false;
}

/* The set holds (armed) or no longer holds its lane's wait fds: counted
 * in the lane (epoll_armed_sets). Lock held. */
static void armed_lane_set(struct iomux_epoll *ep, struct sock_offload *lane)
{
	if (ep->armed_lane == lane)
		return;
	if (ep->armed_lane)
		__atomic_fetch_sub(&ep->armed_lane->epoll_armed_sets, 1, __ATOMIC_ACQ_REL);
	if (lane)
		__atomic_fetch_add(&lane->epoll_armed_sets, 1, __ATOMIC_ACQ_REL);
	ep->armed_lane = lane;
}

/* Takes this set out of lane's count, unless it is the last set there. */
static bool armed_lane_leave(struct sock_offload *lane)
{
	unsigned cur = __atomic_load_n(&lane->epoll_armed_sets, __ATOMIC_ACQUIRE);
	do {
		if (cur < 2)
			return false;
	} while (!__atomic_compare_exchange_n(&lane->epoll_armed_sets, &cur, cur - 1, false, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	return true;
}

void iomux_epoll_armed_drop(struct iomux_epoll *ep)
{
	armed_lane_set(ep, NULL);
}

/* Takes this set's wait fds of lane (its only one) out of its kernel
 * epoll for resting_ns(): after a sleep woke on them and the pass after it
 * found nothing for this set (fired: the fds that woke it), unless this
 * set is the last to hold them; or, fired NULL, every fd it holds while
 * another thread spins on the lane. */
static void rest_fds(struct iomux_epoll *ep, struct sock_offload *lane, const struct iomux_fired *fired,
		     int64_t now)
{
	uint32_t gen = ring_mgr_generation();
	iomux_lock(&ep->lock);
	if (ep->exposed || ep->armed_lane != lane) {
		iomux_unlock(&ep->lock);
		return;
	}
	if (!armed_lane_leave(lane)) {
		if (fired || !sock_offload_spun_by_other(lane)) {
			iomux_unlock(&ep->lock);
			return;
		}
		__atomic_fetch_sub(&lane->epoll_armed_sets, 1, __ATOMIC_ACQ_REL);
	}
	ep->armed_lane = NULL;
	(void)resting_locked(ep, gen, now, -1);
	if (!ep->nresting) {
		ep->resting_gen = gen;
		ep->resting_until = now + resting_ns();
	}
	struct iomux_fired all = { .n = 0 };
	if (!fired) {
		for (int i = 0; i < ep->narmed && all.n < IOMUX_FIRED_MAX; i++)
			all.fd[all.n++] = ep->armed[i];
		fired = &all;
	}
	for (int k = 0; k < fired->n; k++) {
		int fd = fired->fd[k];
		if (resting_locked(ep, gen, now, fd) || ep->nresting == IOMUX_ARMED_MAX)
			continue;
		/* This thread's wait channel: what comes there is for this
		 * set, and nobody else polls it. */
		if (sock_offload_chan_fd_mine(lane, fd))
			continue;
		if (OS_CALL(epoll_ctl, ep->base.fd, EPOLL_CTL_DEL, fd, NULL) != 0)
			continue;
		ep->resting[ep->nresting++] = fd;
		/* No longer in the kernel epoll: rings_arm adds it again. */
		for (int i = 0; i < ep->narmed; i++) {
			if (ep->armed[i] == fd) {
				ep->armed[i] = ep->armed[--ep->narmed];
				break;
			}
		}
	}
	iomux_unlock(&ep->lock);
}

/* The end of this set's resting, if it has fds resting (INT64_MAX: none). */
static int64_t resting_end(struct iomux_epoll *ep)
{
	iomux_lock(&ep->lock);
	int64_t end = ep->nresting ? ep->resting_until : INT64_MAX;
	iomux_unlock(&ep->lock);
	return end;
}

/* Arms every offloaded socket's rings and puts their wait fds in the
 * kernel epoll. Returns false when data arrived meanwhile (poll again). */
static bool rings_arm(struct iomux_epoll *ep, struct sock_offload *lane)
{
	bool rested = false;
	int seen[IOMUX_WAIT_FDS_MAX];
	int nseen = 0;
	struct lanes_seen lanes = { .n = 0 };
	struct sock_obj *batch[IOMUX_OFFL_BATCH];
	uint32_t gen = ring_mgr_generation();
	/* One pass: a lane's first socket gives its wait fds (wait_prepare
	 * claims that socket for this thread's wait channel first), its
	 * other sockets only move to the channel (wait_claim). When a claim
	 * of the pass gave the thread a channel, the lane's fds taken before
	 * may lack it: a second pass takes them again (rare: once per thread
	 * and interface; needless when it was the first socket's own claim,
	 * whose wait_prepare already gave the channel's fd). */
	unsigned chan_epoch = sock_offload_chan_epoch();
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1 && sock_offload_chan_epoch() == chan_epoch)
			break;
		lanes.n = 0;
		for (int first = 0;; first += IOMUX_OFFL_BATCH) {
			int got = offl_batch(ep, first, batch);
			for (int b = 0; b < got; b++) {
				struct sock_obj *obj = batch[b];
				if (!obj->ops->wait_prepare)
					continue;
				if (lane_seen(&lanes, lane_key_of(obj))) {
					if (pass == 0 && obj->ops->wait_claim)
						obj->ops->wait_claim(obj);
					continue;
				}
				int fds[IOMUX_WAIT_FDS_PER_SOCK];
				int n = obj->ops->wait_prepare(obj, fds, IOMUX_WAIT_FDS_PER_SOCK);
				if (n < 0)
					return false;
				for (int k = 0; k < n; k++) {
					bool dup = false;
					for (int j = 0; j < nseen && !dup; j++)
						dup = seen[j] == fds[k];
					if (dup)
						continue;
					if (nseen < IOMUX_WAIT_FDS_MAX)
						seen[nseen++] = fds[k];
					if (armed_known(ep, gen, fds[k]))
						continue;
					iomux_lock(&ep->lock);
					bool rests = resting_locked(ep, gen, iomux_now_ns(), fds[k]);
					iomux_unlock(&ep->lock);
					if (rests) {
						rested = true;
						continue;
					}
					/* Edge-triggered: a ring that stays signalled must not
					 * fill the caller's slots on every glance. Exclusive:
					 * when the threads of one lane all sleep, a packet
					 * wakes one of them, which polls the ring and wakes
					 * only the sets it made ready (their wake eventfds),
					 * not every set that holds the ring. EEXIST is the
					 * common case and harmless. */
					struct epoll_event ev = { .events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE,
								  .data.u64 = IOMUX_DATA(IOMUX_TAG_INTERNAL, fds[k]) };
					int rc = OS_CALL(epoll_ctl, ep->base.fd, EPOLL_CTL_ADD, fds[k], &ev);
					if (rc != 0 && errno == EINVAL) {
						/* A multi-queue ring's wait fd is an epoll set,
						 * which cannot be exclusive. */
						ev.events &= ~(uint32_t)EPOLLEXCLUSIVE;
						rc = OS_CALL(epoll_ctl, ep->base.fd, EPOLL_CTL_ADD, fds[k], &ev);
					}
					if (rc == 0 || errno == EEXIST)
						armed_note(ep, gen, fds[k]);
				}
			}
			if (got < IOMUX_OFFL_BATCH)
				break;
		}
	}
	/* Holding the wait fds of its one lane (none resting): counted there. */
	iomux_lock(&ep->lock);
	armed_lane_set(ep, rested ? NULL : lane);
	iomux_unlock(&ep->lock);
	return true;
}

/* The kernel epoll_pwait of a sleep is a cancellation point, as in libc: a
 * pthread_cancel() ends the thread there, and the set must not count it as
 * a sleeper any more (each readiness would write the wake fd for nobody). */
struct sleep_cancel {
	struct iomux_epoll *ep;
	int prev_sleep_fd;
};

static void sleep_kernel_cancelled(void *arg)
{
	struct sleep_cancel *c = arg;
	iomux_lock(&c->ep->lock);
	c->ep->sleepers--;
	__atomic_fetch_sub(&c->ep->waiters, 1, __ATOMIC_RELAXED);
	os_signal_sleep_disarm(c->prev_sleep_fd);
	iomux_unlock(&c->ep->lock);
	sock_offload_spin_leave();
}

static int sleep_harvest(struct iomux_epoll *ep, struct epoll_event *events, int maxevents, int timeout_ms,
			 const sigset_t *mask, bool *woke, struct iomux_fired *fired, struct sleep_cancel *c)
{
	int n;
	pthread_cleanup_push(sleep_kernel_cancelled, c);
	n = kernel_harvest(ep, events, 0, maxevents, timeout_ms, mask, woke, fired);
	pthread_cleanup_pop(0);
	return n;
}

/* Sleeps in the kernel epoll unless the ready list filled meanwhile.
 * Before it, the set's wake fd is armed for a signal (os_signal_sleep_arm):
 * a handler that runs after the caller's last look at mark (one held back
 * by this lock and re-raised at its unlock included) writes it and the
 * sleep returns at once; the caller's next look then returns EINTR. Armed
 * under the set lock as a sleeper, so that a close() of the set meanwhile
 * leaves the fd open until no call pins the set (epoll_obj_release). */
static int sleep_kernel(struct iomux_epoll *ep, struct epoll_event *events, int maxevents, int64_t deadline,
			const sigset_t *mask, const struct os_sig_mark *mark, bool *woke, struct iomux_fired *fired)
{
	/* This thread's held sends leave first (sock_offload.h); a handler
	 * that lock held back is seen by the look below. */
	sock_offload_flush_mine();
	iomux_lock(&ep->lock);
	if (ep->ready_head) {
		iomux_unlock(&ep->lock);
		*woke = true;
		return 0;
	}
	ep->sleepers++;
	int prev_sleep_fd = os_signal_sleep_arm(ep->wake_fd);
	iomux_unlock(&ep->lock);
	ring_spin_release();
	int n = 0;
	if (os_signal_caught_since(mark))
		*woke = true;   /* the caller's look returns EINTR */
	else {
		struct sleep_cancel cancel = { .ep = ep, .prev_sleep_fd = prev_sleep_fd };
		n = sleep_harvest(ep, events, maxevents, iomux_ms_left(deadline), mask, woke, fired, &cancel);
	}
	int saved = errno;
	iomux_lock(&ep->lock);
	ep->sleepers--;
	os_signal_sleep_disarm(prev_sleep_fd);
	/* A handler's write would end every later sleep at once (the fd is
	 * level-triggered): drained, unless a wake-up of ours is pending on
	 * it too (wake_signalled), whose drain reads it all. */
	if (os_signal_caught_since(mark) && !ep->wake_signalled && ep->wake_fd >= 0) {
		uint64_t value;
		(void)os_efd_read(ep->wake_fd, &value);
	}
	iomux_unlock(&ep->lock);
	errno = saved;
	return n;
}

static int wait_done(struct iomux_epoll *ep, int n, int64_t start, int64_t slept)
{
	/* A call that returns events keeps its claim on the lane (until the
	 * lease lapses): its thread comes back for the next ones in a few
	 * microseconds, and the lane's spinner should be the thread with the
	 * traffic, not one that would wake it for every request. */
	__atomic_fetch_sub(&ep->waiters, 1, __ATOMIC_RELAXED);
	if (n <= 0)
		sock_offload_spin_leave();
	/* The sends that answer these may share a doorbell (sock_offload.h). */
	sock_offload_events_returned(n);
	iomux_stats_finish(ep->stats, n, start, slept);
	return n;
}

int iomux_epoll_wait(struct sock_obj *obj, struct epoll_event *events, int maxevents, int timeout_ms,
		     const sigset_t *mask)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	if (maxevents <= 0 || (size_t)maxevents > INT_MAX / sizeof(struct epoll_event)) {
		errno = EINVAL;
		return -1;
	}
	if (!events)   /* the kernel's EFAULT, without us touching memory */
		return kernel_harvest(ep, events, 0, maxevents, 0, NULL, NULL, NULL);
	struct stats_iomux *st = ep->stats;
	st->c.calls++;
	/* Clock reads are counted: 35 ns each on the development guest, and
	 * a server calls this once per request or so. A first pass that finds
	 * offloaded readiness reads no clock: start (and the deadline, which
	 * then counts from a little later, still at least timeout_ms) is read
	 * when that pass found nothing. The first pass's "now" is start, and
	 * the sleep is timed only for VMA_CPU_USAGE_STATS. */
	int64_t start = g_cfg.cpu_usage_stats ? iomux_now_ns() : 0, slept = 0;
	int64_t deadline = INT64_MAX;
	iomux_lock(&ep->lock);
	ep->gen++;
	iomux_unlock(&ep->lock);
	/* Until wait_done (or a cancellation in the sleep). A thread
	 * cancelled in a pass's epoll_pwait(0) leaves it counted: its set
	 * may take one EPOLLEXCLUSIVE edge that nobody harvests (then its
	 * ready list is not empty and it is no longer idle); a cleanup
	 * handler around every pass would cost each call more than that. */
	__atomic_fetch_add(&ep->waiters, 1, __ATOMIC_RELAXED);
	struct os_sig_mark sigmark = os_signal_call_mark();
	bool yielded = false;
	/* The wait fds that ended the last sleep, for the pass after it. */
	struct iomux_fired fired = { .n = 0 };

	for (unsigned int pass = 0;; pass++) {
		bool offloaded = __atomic_load_n(&ep->offl_count, __ATOMIC_RELAXED) > 0;
		int n = 0;
		struct sock_offload *lane = NULL;
		unsigned woke_sets = iomux_woke_sets;
		if (offloaded) {
			lane = ring_progress_all(ep);
			n = collect_ready(ep, events, 0, maxevents);
			if (n == 0 && fired.n && lane)
				rest_fds(ep, lane, &fired, iomux_now_ns());
			fired.n = 0;
		}
		if (n > 0) {
			st->c.offload_ready++;
			st->c.poll_hit += slept == 0;
			/* VMA_SELECT_SKIP_OS: the kernel fds are not starved by
			 * a stream of offloaded readiness. */
			int skip = g_cfg.select_skip_os;
			if (n < maxevents && (skip == 0 || ++ep->skip_os_count >= (unsigned int)skip)) {
				ep->skip_os_count = 0;
				int k = kernel_harvest(ep, events, n, maxevents, 0, NULL, NULL, NULL);
				n = k < 0 ? n : k;
			}
			return wait_done(ep, n, start, slept);
		}
		if (pass == 0) {
			if (!start)
				start = iomux_now_ns();
			deadline = iomux_deadline_from(start, (int64_t)timeout_ms * 1000000);
		}
		if (!offloaded && g_cfg.select_poll_os_force && slept == 0) {
			/* VMA_SELECT_POLL_OS_FORCE: kernel fds alone are
			 * spun on too, for VMA_SELECT_POLL, before sleeping. */
			n = kernel_harvest(ep, events, 0, maxevents, 0, NULL, NULL, NULL);
			if (n != 0) {
				st->c.poll_hit += n > 0;   /* found polling, not sleeping */
				return wait_done(ep, n, start, slept);
			}
			int64_t now = iomux_now_ns();
			if (now >= deadline)
				return wait_done(ep, 0, start, slept);
			if (os_signal_interrupts(&sigmark, false))
				return wait_done(ep, -1, start, slept);
			bool refused;
			if (iomux_spinning(start, now, &refused))
				continue;
		}
		if (!offloaded) {
			/* Kernel fds only: nothing to spin on, sleep at once. But
			 * not through a handler that already ran in this call
			 * (held back while a lock of ours was taken). This
			 * thread's held sends leave first (sock_offload.h). */
			sock_offload_flush_mine();
			if (os_signal_interrupts(&sigmark, false))
				return wait_done(ep, -1, start, slept);
			bool woke = false;
			ring_spin_release();
			int64_t t0 = iomux_now_ns();
			n = kernel_harvest(ep, events, 0, maxevents, iomux_ms_left(deadline), mask, &woke, NULL);
			slept += iomux_now_ns() - t0;
			if (n != 0 || !woke || iomux_ms_left(deadline) == 0)
				return wait_done(ep, n, start, slept);
			continue;
		}
		int ratio = g_cfg.select_poll_os_ratio;
		int64_t now = pass == 0 ? start : iomux_now_ns();
		bool timed_out = now >= deadline;
		bool refused = false;
		bool spin = !timed_out && slept == 0 && iomux_spinning(start, now, &refused);
		/* Another thread spins on this set's only lane: its
		 * deliveries wake us (the set's wake fd). */
		if (spin && lane && !sock_offload_spin_turn(lane))
			spin = false;
		/* This pass found nothing for us but woke another set's
		 * sleeper: that thread has the traffic, and should be the one
		 * that spins. We sleep. */
		if (spin && lane && iomux_woke_sets != woke_sets) {
			sock_offload_spin_leave();
			spin = false;
		}
		/* The first pass looks at the kernel fds too, unless it goes
		 * to sleep right away: that sleep's epoll_pwait reports them
		 * with the rings, one syscall instead of two. */
		if ((pass == 0 && (spin || timed_out)) ||
		    (ratio > 0 && ++ep->os_ratio_count >= (unsigned int)ratio)) {
			ep->os_ratio_count = 0;
			n = kernel_harvest(ep, events, 0, maxevents, 0, NULL, NULL, NULL);
			if (n != 0)
				return wait_done(ep, n, start, slept);
		}
		if (timed_out)
			return wait_done(ep, 0, start, slept);
		/* A handler ran while we polled in user space: Linux never
		 * restarts epoll_wait, SA_RESTART or not. */
		if (os_signal_interrupts(&sigmark, false))
			return wait_done(ep, -1, start, slept);
		if (spin)
			continue;
		/* No busy-polling permit (crowded CPUs): once per call, this
		 * CPU goes to the threads that wait for it, then one more look
		 * before the sleep (ring_spin_yield). */
		if (refused && ring_spin_yield(&yielded))
			continue;
		/* Another thread spins on the set's lane: no sleep on its fds. */
		if (lane && __atomic_load_n(&ep->armed_lane, __ATOMIC_RELAXED) == lane &&
		    sock_offload_spun_by_other(lane))
			rest_fds(ep, lane, NULL, now);
		if (!rings_arm(ep, lane))
			continue;
		/* A handler held back while rings_arm had a lane locked ran at
		 * its unlock, after the check above: the kernel sleep would not
		 * see it. One that runs after this look: sleep_kernel. */
		if (os_signal_interrupts(&sigmark, false))
			return wait_done(ep, -1, start, slept);
		st->c.poll_miss += slept == 0;
		sock_offload_spin_leave();
		bool woke = false;
		/* Resting fds come back when their time is up: the sleep
		 * ends then, and the next pass arms them again. */
		int64_t rest_end = resting_end(ep);
		int64_t sleep_end = rest_end < deadline ? rest_end : deadline;
		n = sleep_kernel(ep, events, maxevents, sleep_end, mask, &sigmark, &woke, &fired);
		slept += (g_cfg.cpu_usage_stats ? iomux_now_ns() - now : 0) + 1;
		if (n < 0)
			return wait_done(ep, n, start, slept);
		if (n > 0) {
			/* Offloaded readiness that came with it, merged. */
			fired.n = 0;
			n = collect_ready(ep, events, n, maxevents);
			return wait_done(ep, n, start, slept);
		}
		if (!woke && sleep_end == deadline)
			return wait_done(ep, 0, start, slept);
	}
}
