/* Internet checksum with a 64-bit accumulator: 8 bytes per addition and the
 * carries folded back once at the end. */
#include "stack/stack_csum.h"

#include <arpa/inet.h>
#include <string.h>

static inline uint64_t add_carry(uint64_t sum, uint64_t v)
{
	sum += v;
	return sum + (sum < v);   /* end-around carry */
}

uint64_t stack_csum_add(uint64_t sum, const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t w;

	while (len >= 32) {
		uint64_t a[4];
		memcpy(a, b, 32);
		sum = add_carry(sum, a[0]);
		sum = add_carry(sum, a[1]);
		sum = add_carry(sum, a[2]);
		sum = add_carry(sum, a[3]);
		b += 32;
		len -= 32;
	}
	while (len >= 8) {
		memcpy(&w, b, 8);
		sum = add_carry(sum, w);
		b += 8;
		len -= 8;
	}
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

uint16_t stack_csum_fold(uint64_t sum)
{
	/* Word positions of 32- and 64-bit loads are all multiples of 16 bits, so
	 * adding the halves together keeps the one's-complement value. */
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffu) + (sum >> 16);
	sum = (sum & 0xffffu) + (sum >> 16);
	sum = (sum & 0xffffu) + (sum >> 16);
	return (uint16_t)sum;
}

uint64_t stack_csum_chain(uint64_t sum, const struct ring_buf *buf, uint32_t len)
{
	uint32_t offset = 0;

	for (; buf && len; buf = buf->next) {
		uint32_t n = buf->len < len ? buf->len : len;
		if (!n)
			continue;
		uint64_t part = stack_csum_add(0, buf->data, n);
		if (offset & 1) {
			/* This piece starts mid-word: its bytes sit in the other half. */
			uint16_t f = stack_csum_fold(part);
			part = (uint16_t)((f << 8) | (f >> 8));
		}
		sum = add_carry(sum, part);
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
