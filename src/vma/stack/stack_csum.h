/* The Internet checksum (RFC 1071). Sums are taken over bytes as they lie in
 * memory, so results can be stored straight into a header without byte
 * swapping; the one's-complement sum does not care about byte order. */
#ifndef VMA_STACK_STACK_CSUM_H
#define VMA_STACK_STACK_CSUM_H

#include <stddef.h>
#include <stdint.h>

#include "ring/ring_buf.h"

/* Adds len bytes at p (any alignment) to a running 64-bit sum. The bytes are
 * taken as if they started at an even offset of the checksummed stream. */
uint64_t stack_csum_add(uint64_t sum, const void *p, size_t len);
/* Copies len bytes from src to dst and adds them to sum, in one pass (the
 * payload of a segment taken from a send buffer). */
uint64_t stack_csum_copy(uint64_t sum, void *dst, const void *src, size_t len);
/* Adds part, the sum of a piece that starts offset bytes into the stream
 * (an odd offset swaps its bytes). */
uint64_t stack_csum_add_odd(uint64_t sum, uint64_t part, uint32_t offset);
/* Folds a running sum to 16 bits (not inverted). Adding a word to itself
 * rotated by half its width leaves, in the upper half, the sum of both
 * halves with the end-around carry already added (the carry out of the
 * lower half lands there): 64 to 32 bits and 32 to 16 in three
 * instructions each, inline, as every segment folds two or three sums. */
static inline uint16_t stack_csum_fold(uint64_t sum)
{
	uint32_t s = (uint32_t)((sum + (sum >> 32 | sum << 32)) >> 32);
	return (uint16_t)((s + (s >> 16 | s << 16)) >> 16);
}
/* Three words (12 bytes: the timestamps option) copied and summed,
 * unrolled: two loads, two stores. */
static inline uint64_t stack_csum_copy12(uint64_t sum, void *dst, const void *p)
{
	uint64_t w01;
	uint32_t w2;
	__builtin_memcpy(&w01, p, 8);
	__builtin_memcpy(&w2, (const uint8_t *)p + 8, 4);
	__builtin_memcpy(dst, &w01, 8);
	__builtin_memcpy((uint8_t *)dst + 8, &w2, 4);
	uint64_t words = (w01 & 0xffffffffu) + (w01 >> 32) + w2;
	sum += words;
	return sum + (sum < words);
}
/* The 20-byte IPv4 header without options, summed unrolled. */
static inline uint64_t stack_csum_hdr20(const void *p)
{
	uint64_t w01, w23;
	uint32_t w4;
	__builtin_memcpy(&w01, p, 8);
	__builtin_memcpy(&w23, (const uint8_t *)p + 8, 8);
	__builtin_memcpy(&w4, (const uint8_t *)p + 16, 4);
	return (w01 & 0xffffffffu) + (w01 >> 32) + (w23 & 0xffffffffu) + (w23 >> 32) + w4;
}
/* The value for a checksum field: ~fold. */
static inline uint16_t stack_csum_finish(uint64_t sum)
{
	return (uint16_t)~stack_csum_fold(sum);
}
/* Sum over the first len bytes of a buffer chain (from each buffer's data),
 * right whatever the buffer lengths, odd included. */
uint64_t stack_csum_chain(uint64_t sum, const struct ring_buf *buf, uint32_t len);
/* The IPv4 pseudo header of UDP/TCP (addresses in network order). */
uint64_t stack_csum_pseudo(uint32_t src, uint32_t dst, uint8_t proto, uint16_t len);

#endif
