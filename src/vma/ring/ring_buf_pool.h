/* The pool layout, for ring_buf.c and the ring backends only: their hot
 * paths (rx_burst, tx completion) hand out and take back descriptors inline.
 * Everything else uses the functions of ring_buf.h. */
#ifndef VMA_RING_RING_BUF_POOL_H
#define VMA_RING_RING_BUF_POOL_H

#include "ring/ring_buf.h"

struct ring_buf_pool {
	char name[32];
	const struct ring_buf_pool_ops *ops; /* NULL: plain free list */
	void *owner;
	struct ring_buf *bufs;               /* count descriptors, allocated once */
	struct ring_buf **free_list;         /* plain pools: LIFO of free descriptors */
	uint8_t *own_mem;                    /* plain pools: the memory we allocated */
	uint64_t first_handle;
	uint32_t stride;
	uint32_t stride_shift;               /* log2(stride) when a power of two, else 0 */
	struct ring_buf_pool_counters counters;
	struct ring_buf_pool *orphan_next;   /* on the orphans' list (ring_buf_pool_orphan) */
};

static inline void ring_buf_pool_take_inline(struct ring_buf_pool *pool, struct ring_buf *buf, uint16_t flags)
{
	buf->data = buf->head;
	buf->len = 0;
	buf->tot_len = 0;
	buf->next = NULL;
	buf->link = NULL;
	buf->refcount = 1;
	buf->flags = flags;
	pool->counters.allocs++;
	if (--pool->counters.free_now < pool->counters.free_min)
		pool->counters.free_min = pool->counters.free_now;
}

/* handle must belong to the pool (callers got it from the kernel, which only
 * returns addresses we gave it). */
static inline struct ring_buf *ring_buf_pool_by_handle_inline(struct ring_buf_pool *pool, uint64_t handle)
{
	uint64_t off = handle - pool->first_handle;

	return &pool->bufs[pool->stride_shift ? off >> pool->stride_shift : off / pool->stride];
}

#endif
