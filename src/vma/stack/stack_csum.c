/* Internet checksum. The bulk is summed as 32-bit words into four
 * independent 64-bit lanes: no carry to propagate (a lane would need 2^31
 * blocks to overflow), and no chain of dependent additions, so the CPU
 * runs them side by side (the sender's checksum was half the engine's time
 * per segment with one add-with-carry chain). A 32-bit word is w0 + 65536
 * * w1, and 65536 = 1 modulo 0xffff, so any grouping of 16-bit words into
 * wider numbers keeps the one's-complement sum once folded. */
#include "stack/stack_csum.h"

#include <arpa/inet.h>
#include <string.h>

static inline uint64_t add_carry(uint64_t sum, uint64_t v)
{
	sum += v;
	return sum + (sum < v);   /* end-around carry */
}

static inline uint64_t load64(const uint8_t *p)
{
	uint64_t w;
	memcpy(&w, p, 8);
	return w;
}

static inline uint64_t halves(uint64_t w)
{
	return (w & 0xffffffffu) + (w >> 32);
}

/* The tail (under 8 bytes) of a block that started at an even offset. */
static uint64_t sum_tail(uint64_t sum, const uint8_t *b, size_t len)
{
	if (len >= 4) {
		uint32_t v;
		memcpy(&v, b, 4);
		sum = add_carry(sum, v);
		b += 4;
		len -= 4;
	}
	if (len >= 2) {
		uint16_t v;
		memcpy(&v, b, 2);
		sum = add_carry(sum, v);
		b += 2;
		len -= 2;
	}
	if (len) {
		/* The odd byte is the first byte of a 16-bit word padded with 0. */
		uint8_t pad[2] = { b[0], 0 };
		uint16_t v;
		memcpy(&v, pad, 2);
		sum = add_carry(sum, v);
	}
	return sum;
}

uint64_t stack_csum_add(uint64_t sum, const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t l0 = 0, l1 = 0, l2 = 0, l3 = 0;

	while (len >= 32) {
		l0 += halves(load64(b));
		l1 += halves(load64(b + 8));
		l2 += halves(load64(b + 16));
		l3 += halves(load64(b + 24));
		b += 32;
		len -= 32;
	}
	while (len >= 8) {
		l0 += halves(load64(b));
		b += 8;
		len -= 8;
	}
	sum = add_carry(sum, l0 + l1);   /* each under 2^62: no overflow */
	sum = add_carry(sum, l2 + l3);
	return len ? sum_tail(sum, b, len) : sum;
}

uint64_t stack_csum_copy(uint64_t sum, void *dst, const void *src, size_t len)
{
	const uint8_t *s = src;
	uint8_t *d = dst;
	uint64_t l0 = 0, l1 = 0, l2 = 0, l3 = 0;

	/* One pass: each word is summed while it is in a register anyway. */
	while (len >= 32) {
		uint64_t w0 = load64(s), w1 = load64(s + 8), w2 = load64(s + 16), w3 = load64(s + 24);
		memcpy(d, &w0, 8);
		memcpy(d + 8, &w1, 8);
		memcpy(d + 16, &w2, 8);
		memcpy(d + 24, &w3, 8);
		l0 += halves(w0);
		l1 += halves(w1);
		l2 += halves(w2);
		l3 += halves(w3);
		s += 32;
		d += 32;
		len -= 32;
	}
	while (len >= 8) {
		uint64_t w = load64(s);
		memcpy(d, &w, 8);
		l0 += halves(w);
		s += 8;
		d += 8;
		len -= 8;
	}
	sum = add_carry(sum, l0 + l1);
	sum = add_carry(sum, l2 + l3);
	if (!len)
		return sum;
	memcpy(d, s, len);
	return sum_tail(sum, s, len);
}

uint64_t stack_csum_add_odd(uint64_t sum, uint64_t part, uint32_t offset)
{
	if (offset & 1) {
		/* A piece starting mid-word: its bytes sit in the other half. */
		uint16_t f = stack_csum_fold(part);
		part = (uint16_t)((f << 8) | (f >> 8));
	}
	return add_carry(sum, part);
}

uint64_t stack_csum_chain(uint64_t sum, const struct ring_buf *buf, uint32_t len)
{
	uint32_t offset = 0;

	for (; buf && len; buf = buf->next) {
		uint32_t n = buf->len < len ? buf->len : len;
		if (!n)
			continue;
		sum = stack_csum_add_odd(sum, stack_csum_add(0, buf->data, n), offset);
		offset += n;
		len -= n;
	}
	return sum;
}

uint64_t stack_csum_pseudo(uint32_t src, uint32_t dst, uint8_t proto, uint16_t len)
{
	uint64_t sum = 0;
	sum = add_carry(sum, src);
	sum = add_carry(sum, dst);
	sum = add_carry(sum, htons(proto));
	sum = add_carry(sum, htons(len));
	return sum;
}
