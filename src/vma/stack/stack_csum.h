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
/* Folds a running sum to 16 bits (not inverted). */
uint16_t stack_csum_fold(uint64_t sum);
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
