/* VMA_TX_PREFETCH_BYTES / VMA_RX_PREFETCH_BYTES: pulling the first bytes of
 * data into the cache a little before they are read, so the copy (TX) or
 * the header parsing (RX) finds them there instead of waiting on memory. */
#ifndef VMA_SOCK_SOCK_PREFETCH_H
#define VMA_SOCK_SOCK_PREFETCH_H

#include <stddef.h>

#define SOCK_PREFETCH_LINE 64

/* Prefetches min(len, limit) bytes from addr, one hint per cache line.
 * A prefetch never faults, so a short or odd buffer is harmless. */
static inline void sock_prefetch(const void *addr, size_t len, int limit)
{
	size_t n = limit > 0 && (size_t)limit < len ? (size_t)limit : len;
	if (limit <= 0 || !addr)
		return;
	for (size_t off = 0; off < n; off += SOCK_PREFETCH_LINE)
		__builtin_prefetch((const char *)addr + off, 0, 3);
}

#endif
