/* IPv4 reassembly. Fragments stay in the very buffers they arrived in, kept
 * per datagram in offset order through ring_buf.link; a complete datagram
 * becomes a ring_buf chain (no copy) handed to UDP.
 *
 * Memory is bounded three ways: datagrams in progress, buffer memory per
 * datagram and buffer memory in total, all counted as ring_buf.size (what a
 * fragment really pins in the pool, not its payload). When a cap is reached
 * the oldest datagram is evicted, so a flood of never-finished datagrams
 * cannot block new ones for a whole timeout.
 *
 * Overlaps: an exact repeat of a fragment already held (networks duplicate
 * packets) is dropped alone; any other overlap drops the whole datagram, as
 * overlapping fragments are only ever made to confuse filters. */
#include "stack/stack_internal.h"

#include <stdlib.h>
#include <string.h>

#define FRAG_OFFSET(b) ((b)->scratch[0])

struct reass_dgram {
	bool used;
	bool end_known;
	bool have_first;
	uint8_t proto, ttl, tos;
	uint16_t id;
	uint32_t src, dst;
	bool dst_is_multi;
	int ifindex;
	uint32_t end;           /* payload bytes in the datagram, once the last fragment came */
	uint32_t received;      /* payload bytes held (never overlapping) */
	uint32_t bytes_held;    /* buffer memory */
	uint64_t start_ms;
	uint64_t age;           /* creation order, for eviction */
	struct ring_buf *frags; /* by offset, through link */
};

struct stack_reass {
	uint32_t count;
	uint32_t total_bytes;
	uint64_t next_age;
	struct reass_dgram *slots;
};

int stack_reass_init(struct stack *st)
{
	uint32_t n = st->set.reass_max_datagrams ? st->set.reass_max_datagrams : 1;
	st->set.reass_max_datagrams = n;
	st->reass = calloc(1, sizeof(*st->reass));
	if (!st->reass)
		return -1;
	st->reass->slots = calloc(n, sizeof(*st->reass->slots));
	return st->reass->slots ? 0 : -1;
}

static void dgram_drop(struct stack *st, struct reass_dgram *d)
{
	struct ring_buf *b = d->frags;
	while (b) {
		struct ring_buf *next = b->link;
		b->link = NULL;
		ring_buf_free(b);
		b = next;
	}
	st->reass->total_bytes -= d->bytes_held;
	st->reass->count--;
	memset(d, 0, sizeof(*d));
}

void stack_reass_fini(struct stack *st)
{
	if (!st->reass)
		return;
	if (st->reass->slots) {
		for (uint32_t i = 0; i < st->set.reass_max_datagrams; i++)
			if (st->reass->slots[i].used)
				dgram_drop(st, &st->reass->slots[i]);
		free(st->reass->slots);
	}
	free(st->reass);
	st->reass = NULL;
}

unsigned stack_reass_pending(const struct stack *st, uint32_t *bytes_held)
{
	if (bytes_held)
		*bytes_held = st->reass->total_bytes;
	return st->reass->count;
}

void stack_reass_expire(struct stack *st)
{
	for (uint32_t i = 0; i < st->set.reass_max_datagrams; i++) {
		struct reass_dgram *d = &st->reass->slots[i];
		/* A clock going backwards restarts nobody's timer early. */
		if (d->used && st->now_ms > d->start_ms &&
		    st->now_ms - d->start_ms >= st->set.reass_timeout_ms) {
			st->cnt.rx_drop_reass_timeout++;
			dgram_drop(st, d);
		}
	}
}

/* Evicts the oldest datagram other than keep; false when there is none. */
static bool evict_oldest(struct stack *st, const struct reass_dgram *keep)
{
	struct reass_dgram *oldest = NULL;

	for (uint32_t i = 0; i < st->set.reass_max_datagrams; i++) {
		struct reass_dgram *d = &st->reass->slots[i];
		if (d->used && d != keep && (!oldest || d->age < oldest->age))
			oldest = d;
	}
	if (!oldest)
		return false;
	st->cnt.rx_drop_reass_overflow++;
	dgram_drop(st, oldest);
	return true;
}

static struct reass_dgram *find_or_create(struct stack *st, const struct stack_ip4_info *ip,
					  uint16_t id)
{
	struct reass_dgram *free_slot = NULL;

	for (uint32_t i = 0; i < st->set.reass_max_datagrams; i++) {
		struct reass_dgram *d = &st->reass->slots[i];
		if (!d->used) {
			if (!free_slot)
				free_slot = d;
			continue;
		}
		if (d->id == id && d->src == ip->src && d->dst == ip->dst && d->proto == ip->proto)
			return d;
	}
	if (!free_slot) {
		evict_oldest(st, NULL);
		return find_or_create(st, ip, id);
	}
	memset(free_slot, 0, sizeof(*free_slot));
	free_slot->used = true;
	free_slot->src = ip->src;
	free_slot->dst = ip->dst;
	free_slot->proto = ip->proto;
	free_slot->id = id;
	free_slot->dst_is_multi = ip->dst_is_multi;
	free_slot->start_ms = st->now_ms;
	free_slot->age = st->reass->next_age++;
	st->reass->count++;
	return free_slot;
}

static void deliver(struct stack *st, struct reass_dgram *d)
{
	/* l4_csum_trusted stays false: a sender fragments only after it has
	 * finished the checksum (Linux completes partial ones first). */
	struct stack_ip4_info ip = {
		.src = d->src, .dst = d->dst, .ttl = d->ttl, .tos = d->tos, .proto = d->proto,
		.dst_is_multi = d->dst_is_multi, .ifindex = d->ifindex,
	};
	struct ring_buf *head = d->frags;

	for (struct ring_buf *b = head; b; b = b->link)
		b->next = b->link;
	for (struct ring_buf *b = head; b; b = b->next)
		b->link = NULL;
	d->frags = NULL;
	st->reass->total_bytes -= d->bytes_held;
	st->reass->count--;
	memset(d, 0, sizeof(*d));
	stack_buf_chain_fix_tot_len(head);
	st->cnt.rx_reass_ok++;
	stack_udp_input(st, head, &ip);
}

void stack_reass_input(struct stack *st, struct ring_buf *pkt, const struct stack_ip4_info *ip,
		       uint16_t id, uint32_t offset, bool more)
{
	uint32_t len = pkt->len;
	uint32_t end = offset + len;
	uint32_t truesize = pkt->size ? pkt->size : len;

	pkt->next = NULL;
	pkt->link = NULL;
	if (more && (len == 0 || (len & 7))) {
		st->cnt.rx_drop_reass_bad++;
		ring_buf_free(pkt);
		return;
	}
	struct reass_dgram *d = find_or_create(st, ip, id);
	if (end + STACK_IP4_HLEN > STACK_IP4_MAX_LEN) {
		st->cnt.rx_drop_reass_too_big++;
		ring_buf_free(pkt);
		dgram_drop(st, d);
		return;
	}
	if (d->bytes_held + truesize > st->set.reass_max_datagram_bytes) {
		st->cnt.rx_drop_reass_overflow++;
		ring_buf_free(pkt);
		dgram_drop(st, d);
		return;
	}
	while (st->reass->total_bytes + truesize > st->set.reass_max_total_bytes) {
		if (!evict_oldest(st, d)) {
			st->cnt.rx_drop_reass_overflow++;
			ring_buf_free(pkt);
			dgram_drop(st, d);
			return;
		}
	}

	/* The last fragment fixes the end; nothing may lie beyond it. */
	bool bad = false;
	if (!more) {
		if (d->end_known && d->end != end)
			bad = true;
		for (struct ring_buf *b = d->frags; b && !bad; b = b->link)
			if (FRAG_OFFSET(b) + b->len > end)
				bad = true;
	} else if (d->end_known && end > d->end) {
		bad = true;
	}
	if (bad) {
		st->cnt.rx_drop_reass_bad++;
		ring_buf_free(pkt);
		dgram_drop(st, d);
		return;
	}

	struct ring_buf **pos = &d->frags;
	for (struct ring_buf *b = d->frags; b; b = b->link) {
		uint32_t b_off = FRAG_OFFSET(b), b_end = b_off + b->len;
		if (b_off == offset && b_end == end) {
			st->cnt.rx_drop_reass_duplicate++;
			ring_buf_free(pkt);
			return;
		}
		if (offset < b_end && b_off < end) {
			st->cnt.rx_drop_reass_overlap++;
			ring_buf_free(pkt);
			dgram_drop(st, d);
			return;
		}
		if (b_off < offset || (b_off == offset && b->len == 0))
			pos = &b->link;
	}
	FRAG_OFFSET(pkt) = offset;
	pkt->link = *pos;
	*pos = pkt;
	d->received += len;
	d->bytes_held += truesize;
	st->reass->total_bytes += truesize;
	st->cnt.rx_reass_fragments++;
	if (!more) {
		d->end_known = true;
		d->end = end;
	}
	if (offset == 0) {
		d->have_first = true;
		d->ttl = ip->ttl;
		d->tos = ip->tos;
		d->ifindex = ip->ifindex;
	}
	if (d->end_known && d->have_first && d->received == d->end)
		deliver(st, d);
}
