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
	uint64_t prev = h->last_send_ns;
	h->last_send_ns = now;
	/* Quick: the sender's time between two send calls, the doorbell the
	 * previous one rang not counted (in copy mode it transmits and may
	 * wake the peer: an 11 us reply loop counted with it held 11-57 of 100
	 * replies in udp_tx_flush.sh's echo case, without it 73-80). */
	uint64_t since = h->rang_end_ns > prev ? h->rang_end_ns : prev;
	h->quick_gaps = (uint8_t)((h->quick_gaps << 1 | (now - since < RING_HOLD_QUICK_GAP_NS)) & RING_HOLD_QUICK_MASK);
	/* Frames still held when the sender comes back after HOLD_MAX waited
	 * all that time: nothing of ours ran in between to flush them. (The
	 * gap rings the doorbell for them below.) */
	if (h->held_since_ns && now - prev >= RING_HOLD_MAX_NS)
		ring_hold_stranded(h, now);
	if (!queued)
		return false;
	/* Held for the replies to come (more), not by the burst rule: only
	 * for a quick sender, one of whose last three sends came less than
	 * QUICK_GAP after the one before (the first reply after a pause has
	 * the pause before it, a preempted one the preemption). A held reply
	 * waits for the next one's computing: a server slow at it (every
	 * reply QUICK_GAP or more after the previous) would leave its clients
	 * idle (a closed loop of a few clients per thread runs its queue dry)
	 * to save a doorbell that is a small part of its time. */
	bool burst = now - prev < RING_HOLD_BURST_GAP_NS;
	if ((!burst && !(more && h->quick_gaps)) || now < h->off_until_ns ||
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
