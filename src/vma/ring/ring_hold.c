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

bool ring_hold_send_done(struct ring_hold *h, uint64_t now, bool queued, uint64_t *held)
{
	uint64_t prev = h->last_send_ns;
	h->last_send_ns = now;
	/* Frames still held when the sender comes back after HOLD_MAX waited
	 * all that time: nothing of ours ran in between to flush them. (The
	 * gap rings the doorbell for them below.) */
	if (h->held_since_ns && now - prev >= RING_HOLD_MAX_NS)
		ring_hold_stranded(h, now);
	if (!queued)
		return false;
	if (now - prev >= RING_HOLD_BURST_GAP_NS || now < h->off_until_ns ||
	    (h->held_since_ns && now - h->held_since_ns >= RING_HOLD_MAX_NS))
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
