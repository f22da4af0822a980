/* Packet buffer pools: descriptors (and, for plain pools, memory) are
 * allocated once at creation; alloc and free only move pointers. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "log/vlog.h"
#include "ring/ring_buf_pool.h"

static struct ring_buf_pool *ring_buf_pool_new(const char *name, unsigned count)
{
	struct ring_buf_pool *pool = calloc(1, sizeof(*pool));

	if (!pool)
		return NULL;
	snprintf(pool->name, sizeof(pool->name), "%s", name ? name : "pool");
	pool->bufs = calloc(count ? count : 1, sizeof(*pool->bufs));
	if (!pool->bufs) {
		free(pool);
		return NULL;
	}
	pool->counters.size = count;
	return pool;
}

static void ring_buf_pool_lay_out(struct ring_buf_pool *pool, uint8_t *mem, unsigned stride,
				  unsigned headroom, uint64_t first_handle)
{
	pool->first_handle = first_handle;
	pool->stride = stride;
	pool->stride_shift = 0;
	if (stride && (stride & (stride - 1)) == 0)
		pool->stride_shift = (uint32_t)__builtin_ctz(stride);
	for (unsigned i = 0; i < pool->counters.size; i++) {
		struct ring_buf *buf = &pool->bufs[i];
		buf->head = mem + (size_t)i * stride + headroom;
		buf->data = buf->head;
		buf->size = stride - headroom;
		buf->pool = pool;
		buf->handle = first_handle + (uint64_t)i * stride;
	}
}

static int ring_buf_pool_fill_free_list(struct ring_buf_pool *pool)
{
	unsigned count = pool->counters.size;

	pool->free_list = calloc(count ? count : 1, sizeof(*pool->free_list));
	if (!pool->free_list)
		return -1;
	/* LIFO: the buffer freed last (still warm in the cache) goes out first. */
	for (unsigned i = 0; i < count; i++)
		pool->free_list[i] = &pool->bufs[count - 1 - i];
	pool->counters.free_now = count;
	pool->counters.free_min = count;
	return 0;
}

struct ring_buf_pool *ring_buf_pool_create(const char *name, unsigned count, unsigned buf_size)
{
	struct ring_buf_pool *pool;

	if (!count || !buf_size) {
		vlog_warn("ring: pool %s: %u buffers of %u bytes is not a pool", name ? name : "?", count, buf_size);
		return NULL;
	}
	pool = ring_buf_pool_new(name, count);
	if (!pool)
		goto nomem;
	/* Each buffer starts on a cache line. */
	unsigned stride = (buf_size + 63u) & ~63u;
	pool->own_mem = aligned_alloc(64, (size_t)stride * count);
	if (!pool->own_mem || ring_buf_pool_fill_free_list(pool) != 0)
		goto nomem;
	ring_buf_pool_lay_out(pool, pool->own_mem, stride, 0, 0);
	for (unsigned i = 0; i < count; i++)
		pool->bufs[i].size = buf_size;
	return pool;
nomem:
	vlog_warn("ring: pool %s: out of memory for %u buffers of %u bytes", name ? name : "?", count, buf_size);
	ring_buf_pool_destroy(pool);
	return NULL;
}

struct ring_buf_pool *ring_buf_pool_create_over(const char *name, unsigned count, uint8_t *mem,
						unsigned stride, unsigned headroom, uint64_t first_handle,
						const struct ring_buf_pool_ops *ops, void *owner)
{
	struct ring_buf_pool *pool;

	if (!count || !mem || headroom >= stride)
		return NULL;
	pool = ring_buf_pool_new(name, count);
	if (!pool)
		return NULL;
	pool->ops = ops;
	pool->owner = owner;
	if (!ops && ring_buf_pool_fill_free_list(pool) != 0) {
		ring_buf_pool_destroy(pool);
		return NULL;
	}
	ring_buf_pool_lay_out(pool, mem, stride, headroom, first_handle);
	if (ops) {
		/* The backend owns them all at first (AF_XDP: in the fill ring). */
		pool->counters.free_now = count;
		pool->counters.free_min = count;
	}
	return pool;
}

void ring_buf_pool_destroy(struct ring_buf_pool *pool)
{
	if (!pool)
		return;
	free(pool->free_list);
	free(pool->own_mem);
	free(pool->bufs);
	free(pool);
}

struct ring_buf *ring_buf_alloc(struct ring_buf_pool *pool)
{
	uint32_t free_now = pool->counters.free_now;

	if (pool->ops || !free_now) {
		pool->counters.empty++;
		return NULL;
	}
	struct ring_buf *buf = pool->free_list[free_now - 1];
	ring_buf_pool_take_inline(pool, buf, 0);
	return buf;
}

void ring_buf_ref(struct ring_buf *buf)
{
	buf->refcount++;
}

void ring_buf_free(struct ring_buf *buf)
{
	while (buf) {
		struct ring_buf *next = buf->next;
		VMA_ASSERT(buf->refcount > 0);   /* buffer ownership: freed twice */
		if (buf->refcount == 0) {
			vlog_error("ring: pool %s: buffer %p freed twice; ignored", buf->pool->name, (void *)buf);
		} else if (--buf->refcount == 0) {
			struct ring_buf_pool *pool = buf->pool;
			buf->next = NULL;
			pool->counters.frees++;
			/* Counted before the hook: a heap buffer's hook frees
			 * the pool itself (ring_buf_heap_alloc). */
			if (pool->ops) {
				pool->counters.free_now++;
				pool->ops->recycle(pool, buf);
			} else {
				VMA_ASSERT(pool->counters.free_now < pool->counters.size);
				pool->free_list[pool->counters.free_now++] = buf;
			}
		}
		buf = next;
	}
}

int ring_buf_linearize(struct ring_buf *buf)
{
	uint32_t len = buf->len;
	const uint8_t *end = buf->head + buf->size;

	for (struct ring_buf *seg = buf->next; seg; seg = seg->next) {
		if (buf->data + len + seg->len > end)
			return -EMSGSIZE;
		memcpy(buf->data + len, seg->data, seg->len);
		len += seg->len;
	}
	ring_buf_free(buf->next);
	buf->next = NULL;
	buf->len = buf->tot_len = len;
	return 0;
}

void ring_buf_pool_read_counters(const struct ring_buf_pool *pool, struct ring_buf_pool_counters *out)
{
	*out = pool->counters;
}

const char *ring_buf_pool_name(const struct ring_buf_pool *pool)
{
	return pool->name;
}

void *ring_buf_pool_owner(const struct ring_buf_pool *pool)
{
	return pool->owner;
}

void ring_buf_pool_set_owner(struct ring_buf_pool *pool, void *owner)
{
	pool->owner = owner;
}

static struct ring_buf_pool *ring_buf_orphans;
static pthread_mutex_t ring_buf_orphans_lock = PTHREAD_MUTEX_INITIALIZER;

void ring_buf_pool_orphan(struct ring_buf_pool *pool)
{
	if (!pool)
		return;
	pool->owner = NULL;
	pthread_mutex_lock(&ring_buf_orphans_lock);
	pool->orphan_next = ring_buf_orphans;
	ring_buf_orphans = pool;
	pthread_mutex_unlock(&ring_buf_orphans_lock);
}

struct ring_buf *ring_buf_pool_by_handle(struct ring_buf_pool *pool, uint64_t handle)
{
	if (handle < pool->first_handle ||
	    handle - pool->first_handle >= (uint64_t)pool->stride * pool->counters.size)
		return NULL;
	return ring_buf_pool_by_handle_inline(pool, handle);
}

void ring_buf_pool_take(struct ring_buf_pool *pool, struct ring_buf *buf, uint16_t flags)
{
	ring_buf_pool_take_inline(pool, buf, flags);
}

unsigned ring_buf_pool_in_use(const struct ring_buf_pool *pool)
{
	return pool->counters.size - pool->counters.free_now;
}

unsigned ring_buf_pool_holder_cap(const struct ring_buf_pool *pool)
{
	uint32_t size = pool->counters.size;
	uint32_t held = size - pool->counters.free_now;
	uint32_t cap = held >= size / 8 * 7 ? size / 32 : held >= size / 8 * 5 ? size / 8 : size;
	return cap < RING_BUF_HOLDER_MIN ? RING_BUF_HOLDER_MIN : cap;
}

bool ring_buf_pool_pressured(const struct ring_buf_pool *pool)
{
	uint32_t size = pool->counters.size;
	return size - pool->counters.free_now >= size / 8 * 5;
}

void ring_buf_pool_reset_min(struct ring_buf_pool *pool)
{
	pool->counters.free_min = pool->counters.free_now;
}

void ring_buf_pool_count_empty(struct ring_buf_pool *pool, uint64_t n)
{
	pool->counters.empty += n;
}

/* ---- heap buffers ---- */

/* The pool, its one descriptor and the data in one allocation, given back
 * whole when the buffer's last reference goes. */
struct ring_buf_heap {
	struct ring_buf_pool pool;
	struct ring_buf buf;
	uint8_t data[];
};

static void ring_buf_heap_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	(void)buf;
	free(pool);   /* first member of struct ring_buf_heap */
}

static const struct ring_buf_pool_ops ring_buf_heap_ops = {
	.recycle = ring_buf_heap_recycle,
};

struct ring_buf *ring_buf_heap_alloc(const char *name, uint32_t size)
{
	if (!size)
		return NULL;
	struct ring_buf_heap *h = calloc(1, sizeof(*h) + size);
	if (!h)
		return NULL;
	snprintf(h->pool.name, sizeof(h->pool.name), "%s", name ? name : "heap");
	h->pool.ops = &ring_buf_heap_ops;
	h->pool.bufs = &h->buf;
	h->pool.counters.size = 1;
	h->buf.head = h->data;
	h->buf.size = size;
	h->buf.pool = &h->pool;
	ring_buf_pool_take_inline(&h->pool, &h->buf, 0);
	return &h->buf;
}
