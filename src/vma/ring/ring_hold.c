/* The adaptive doorbell policy (ring_hold.h). */
#include "ring/ring_hold.h"

#include <time.h>

uint64_t ring_hold_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The held burst's frames waited for a sender that had gone. */
static void ring_hold_stranded(struct ring_hold *h, uint64_t now)
{
	h->held_since_ns = 0;   /* this burst is accounted for */
	h->strandings++;
	if (++h->in_a_row < RING_HOLD_STRANDED_IN_A_ROW)
		return;
	uint32_t shift = h->stops < RING_HOLD_OFF_MAX_SHIFT ? h->stops : RING_HOLD_OFF_MAX_SHIFT;
	h->off_until_ns = now + (RING_HOLD_OFF_FIRST_NS << shift);
	h->stops++;
	h->in_a_row = 0;
}

bool ring_hold_send_done(struct ring_hold *h, uint64_t now, bool queued, bool more, uint64_t *held)
{
	uint64_t prev = h->last_send_ns, prev_gap = h->last_gap_ns;
	h->last_send_ns = now;
	h->last_gap_ns = now - prev;
	/* Frames still held when the sender comes back after HOLD_MAX waited
	 * all that time: nothing of ours ran in between to flush them. (The
	 * gap rings the doorbell for them below.) */
	if (h->held_since_ns && now - prev >= RING_HOLD_MAX_NS)
		ring_hold_stranded(h, now);
	if (!queued)
		return false;
	/* Held for the replies to come (more), not by the burst rule: only
	 * for a sender whose last two sends, or this one and the last, came
	 * less than HOLD_MORE_MAX apart (its replies are quick to compute; the
	 * first reply after a pause has the gap before it), and the oldest
	 * frame waits at most that. A held reply waits for the next one's computing: a
	 * server slow at it would leave its clients idle (a closed loop of a
	 * few clients per thread runs its queue dry) to save a doorbell that
	 * is a small part of its time. */
	bool burst = now - prev < RING_HOLD_BURST_GAP_NS;
	bool for_more = more && (prev_gap < RING_HOLD_MORE_MAX_NS || now - prev < RING_HOLD_MORE_MAX_NS);
	uint64_t bound = burst ? RING_HOLD_MAX_NS : RING_HOLD_MORE_MAX_NS;
	if ((!burst && !for_more) || now < h->off_until_ns || (h->held_since_ns && now - h->held_since_ns >= bound))
		return true;
	if (!h->held_since_ns)
		h->held_since_ns = now;
	(*held)++;
	return false;
}

void ring_hold_flushing_held(struct ring_hold *h, uint64_t now)
{
	/* A flush right after the burst (the sender's next receive, poll or
	 * sleep) is the rule working; one HOLD_MAX or more after the last
	 * send (the internal thread's pass) found a stranded tail. */
	if (now - h->last_send_ns >= RING_HOLD_MAX_NS) {
		ring_hold_stranded(h, now);
		return;
	}
	h->in_a_row = 0;
	h->held_since_ns = 0;
}
