/* The adaptive doorbell of the backends whose doorbell is dear (xdp: a
 * syscall that, in copy mode, transmits; verbs: the post), shared so both
 * follow one rule (docs/ring.md, "TX doorbell batching"):
 *
 * - a send that comes less than BURST_GAP after the previous one is part
 *   of a burst and its frame may wait; so may a lone send whose sender
 *   says it has more input waiting (a datagram queued on the socket, more
 *   events of its last epoll_wait or poll), whose replies will follow: one
 *   doorbell, and one wake-up pass of the peer's softirq, for all of them
 *   (a quick sender only: one of its last three sends came less than
 *   QUICK_GAP after the one before). No frame waits longer than HOLD_MAX
 *   once another send comes along, and the pollers, the sleepers and the
 *   internal thread flush the rest;
 * - a held tail whose sender went away (no send for HOLD_MAX, and no poll
 *   or sleep of ours that flushed it) is stranded: a thread that ends a
 *   burst and then computes, or spins on a queue of its own. Two stranded
 *   bursts in a row stop the holding for a while (1 s, doubling with each
 *   stop up to 64 s): such a sender's sends all ring at once, and it pays
 *   two late tails per stop instead of one per burst. One stranded burst
 *   among bursts flushed in time (a fast sender preempted now and then)
 *   changes nothing.
 *
 * Times are CLOCK_MONOTONIC nanoseconds, read by the caller. Owner's lock. */
#ifndef VMA_RING_HOLD_H
#define VMA_RING_HOLD_H

#include <stdbool.h>
#include <stdint.h>

#define RING_HOLD_BURST_GAP_NS 10000u
#define RING_HOLD_MAX_NS 50000u
/* A send with more input waiting holds (beyond the burst rule) only when
 * one of the sender's last three sends came less than this after the one
 * before: its replies are quick to compute. Bit i of quick_gaps: the gap
 * before the i-th last send was that quick. */
#define RING_HOLD_QUICK_GAP_NS 20000u
#define RING_HOLD_QUICK_MASK 7u
#define RING_HOLD_OFF_FIRST_NS 1000000000ull
#define RING_HOLD_OFF_MAX_SHIFT 6u
#define RING_HOLD_STRANDED_IN_A_ROW 2u

struct ring_hold {
	uint64_t last_send_ns;      /* the last send call's end */
	uint64_t held_since_ns;     /* when the oldest held frame was held; 0 = none */
	uint64_t off_until_ns;      /* no holding before this */
	uint64_t rang_end_ns;       /* the latest doorbell's return (ring_hold_rang) */
	uint32_t strandings;        /* stranded bursts, all told */
	uint32_t in_a_row;          /* stranded bursts since one flushed in time */
	uint32_t stops;             /* times holding stopped: the next stop doubles */
	uint8_t quick_gaps;         /* RING_HOLD_QUICK_MASK bits, newest lowest */
};

/* CLOCK_MONOTONIC in ns (vDSO: no syscall with a TSC clocksource). */
uint64_t ring_hold_now_ns(void);

/* One send call ended; queued: frames are queued and not yet rung (none:
 * the batch rang already); more: the sender has input waiting that it
 * handles next (a hint: its replies would join these frames). True: ring
 * the doorbell now; false: they wait, counted in *held. */
bool ring_hold_send_done(struct ring_hold *h, uint64_t now, bool queued, bool more, uint64_t *held);

/* A doorbell for the sender's frames returned at t (0: none yet): the
 * time before t is not the sender's own (the quick test). */
static inline void ring_hold_rang(struct ring_hold *h, uint64_t t)
{
	if (t > h->rang_end_ns)
		h->rang_end_ns = t;
}
/* ring_hold_flushing with frames held, now read. */
void ring_hold_flushing_held(struct ring_hold *h, uint64_t now);

/* The doorbell is about to ring for what is queued, whoever rings it:
 * with frames held, reads the clock (now_fn) to tell a stranded tail. */
static inline void ring_hold_flushing(struct ring_hold *h, uint64_t (*now_fn)(void))
{
	if (__builtin_expect(h->held_since_ns != 0, 0))
		ring_hold_flushing_held(h, now_fn());
}

/* Stranded bursts so far (the ring's tx_stranded counter, tests). */
static inline uint32_t ring_hold_strandings(const struct ring_hold *h)
{
	return h->strandings;
}

#endif
