/* Life cycle of a stack, its settings, timers and buffer-chain helpers. */
#include <sys/random.h>
#include <time.h>
#include "stack/stack_internal.h"
#include "stack/tcp.h"
#include "stack/tcp_priv.h"

#include <stdlib.h>
#include <string.h>

void stack_settings_default(struct stack_settings *out)
{
	memset(out, 0, sizeof(*out));
	out->tx_ip_checksum = true;
	out->tx_udp_checksum = true;
	out->default_ttl = 64;
	out->reass_timeout_ms = 30000;
	out->reass_max_datagrams = 64;
	/* Buffer memory, not payload: a 64 KiB datagram in 1500-byte frames held in
	 * 2 KiB buffers takes about 90 KiB. */
	out->reass_max_datagram_bytes = 256u * 1024;
	out->reass_max_total_bytes = 4u * 1024 * 1024;
	out->udp_hash_buckets = 1024;
}

static uint32_t round_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v && p < (1u << 20))
		p <<= 1;
	return p;
}

static uint64_t stack_seed_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint16_t *stack_ip4_id_counter(struct stack *st, uint32_t src, uint32_t dst, uint8_t proto)
{
	/* Two rounds of multiply-xorshift over the keyed tuple. */
	uint32_t h = (src ^ st->ip_id_key[0]) * 0x9e3779b1u;
	h ^= (dst ^ st->ip_id_key[1]) + (h >> 15);
	h *= 0x85ebca6bu;
	h ^= proto + (h >> 13);
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return &st->ip_ids[h & (STACK_IP_ID_BUCKETS - 1)];
}

uint16_t stack_ip4_next_id(struct stack *st, uint32_t src, uint32_t dst, uint8_t proto)
{
	return (*stack_ip4_id_counter(st, src, dst, proto))++;
}

struct stack *stack_create(const struct stack_settings *settings)
{
	struct stack *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->set = *settings;
	if (!st->set.default_ttl)
		st->set.default_ttl = 64;
	uint32_t buckets = round_pow2(st->set.udp_hash_buckets ? st->set.udp_hash_buckets : 1);
	st->hash_mask = buckets - 1;
	st->bind_table = calloc(buckets, sizeof(*st->bind_table));
	st->conn_table = calloc(buckets, sizeof(*st->conn_table));
	st->port_table = calloc(buckets, sizeof(*st->port_table));
	if (getrandom(st->ip_ids, sizeof(st->ip_ids), GRND_NONBLOCK) != (ssize_t)sizeof(st->ip_ids) ||
	    getrandom(st->ip_id_key, sizeof(st->ip_id_key), GRND_NONBLOCK) != (ssize_t)sizeof(st->ip_id_key)) {
		/* No entropy yet (early boot): a clock-seeded start still
		 * keeps destinations' counters apart. */
		uint64_t seed = (uint64_t)(uintptr_t)st ^ stack_seed_clock();
		for (unsigned i = 0; i < STACK_IP_ID_BUCKETS; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			st->ip_ids[i] = (uint16_t)(seed >> 48);
		}
		st->ip_id_key[0] = (uint32_t)seed;
		st->ip_id_key[1] = (uint32_t)(seed >> 32);
	}
	if (!st->bind_table || !st->conn_table || !st->port_table || stack_reass_init(st) != 0) {
		stack_destroy(st);
		return NULL;
	}
	return st;
}

void stack_destroy(struct stack *st)
{
	if (!st)
		return;
	tcp_ctx_destroy(st->tcp);
	stack_reass_fini(st);
	stack_udp_free_all(st);
	free(st->bind_table);
	free(st->conn_table);
	free(st->port_table);
	free(st);
}

const struct stack_counters *stack_counters(const struct stack *st)
{
	return &st->cnt;
}

void stack_timer_tick(struct stack *st, uint64_t now_ms)
{
	st->now_ms = now_ms;
	stack_reass_expire(st);
	if (st->tcp)
		tcp_timer_tick(st->tcp, now_ms);
}

void stack_clock_set(struct stack *st, uint64_t now_ms)
{
	stack_clock_set_us(st, now_ms * 1000);
}

void stack_clock_set_us(struct stack *st, uint64_t now_us)
{
	if (st->tcp && now_us > st->tcp->now_us)
		st->tcp->now_us = now_us;
	uint64_t now_ms = now_us / 1000;
	if (now_ms <= st->now_ms)
		return;
	st->now_ms = now_ms;
	if (st->tcp)
		st->tcp->now_ms = now_ms;   /* timers stay for tcp_timer_tick */
}

void stack_buf_chain_fix_tot_len(struct ring_buf *buf)
{
	uint32_t total = 0;
	struct ring_buf *b;

	for (b = buf; b; b = b->next)
		total += b->len;
	for (b = buf; b; b = b->next) {
		b->tot_len = total;
		total -= b->len;
	}
}

void stack_buf_chain_trim(struct ring_buf *buf, uint32_t len)
{
	struct ring_buf *b = buf;

	for (;;) {
		if (b->len > len)
			b->len = len;
		len -= b->len;
		if (!len || !b->next)
			break;
		b = b->next;
	}
	if (b->next) {
		/* The tail carries nothing the datagram claims: give it back now. */
		ring_buf_free(b->next);
		b->next = NULL;
	}
	stack_buf_chain_fix_tot_len(buf);
}

void stack_buf_chain_ref(struct ring_buf *buf)
{
	for (; buf; buf = buf->next)
		ring_buf_ref(buf);
}
