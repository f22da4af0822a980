/* Packet buffers: every frame libvma receives or sends lives in a
 * struct ring_buf taken from a pool. RX buffers are the backend's own memory
 * (for AF_XDP, UMEM frames), so a datagram waits on a socket's queue in the
 * very frame the NIC wrote and is copied once, into the application's buffer.
 * TX buffers are backend memory too: the stack writes headers and copies the
 * payload straight into the frame that goes on the wire.
 *
 * Pools never grow and never block: an empty pool returns NULL and counts it;
 * the caller drops (RX) or reports EAGAIN/ENOBUFS (TX).
 *
 * Threading: a pool belongs to one ring (or one owner); callers serialise
 * access according to VMA_THREAD_MODE, like the ring itself. */
#ifndef VMA_RING_RING_BUF_H
#define VMA_RING_RING_BUF_H

#include <stdbool.h>
#include <stdint.h>

struct ring_buf_pool;

struct ring_buf {
	uint8_t *data;            /* first valid byte (RX: Ethernet header) */
	uint32_t len;             /* valid bytes in this buffer */
	uint32_t tot_len;         /* valid bytes in this buffer and the rest of its chain */
	struct ring_buf *next;    /* next part of the same packet (chain), or NULL */
	struct ring_buf *link;    /* free for the current owner: socket queue, reassembly list */
	uint8_t *head;            /* start of the buffer's memory */
	uint32_t size;            /* bytes available from head */
	uint16_t refcount;
	uint16_t flags;           /* RING_BUF_F_* */
	struct ring_buf_pool *pool;
	uint64_t handle;          /* backend id (AF_XDP: UMEM address) */
	uint64_t rx_time_ns;      /* CLOCK_REALTIME at receive (software SO_TIMESTAMP) */
	uint32_t scratch[4];      /* for the layer that holds the buffer (e.g. header offsets) */
};

#define RING_BUF_F_RX        0x1  /* came from rx_burst */
#define RING_BUF_F_TX        0x2  /* came from tx_alloc */

struct ring_buf_pool_counters {
	uint64_t allocs;
	uint64_t frees;
	uint64_t empty;           /* allocations refused: pool exhausted */
	uint32_t size;            /* buffers in the pool */
	uint32_t free_now;
	uint32_t free_min;        /* low-water mark since creation or reset */
};

/* What happens to a buffer whose last reference goes away. Backend pools
 * (UMEM frames) hand it back to their ring; plain pools keep a free list. */
struct ring_buf_pool_ops {
	void (*recycle)(struct ring_buf_pool *pool, struct ring_buf *buf);
};

/* A plain pool: count buffers of buf_size bytes each, allocated once, here
 * (never on the hot path). For the stack's own needs (reassembly, tests). */
struct ring_buf_pool *ring_buf_pool_create(const char *name, unsigned count, unsigned buf_size);
void ring_buf_pool_destroy(struct ring_buf_pool *pool);

/* One buffer of size bytes in a heap allocation of its own (refcount 1,
 * data = head, len 0), freed whole when its last reference goes: for the
 * rare copy that must outlive the ring it came from (a connection's queue
 * moving between lanes, a segment forwarded to another lane). NULL when
 * out of memory. Never on the hot path. */
struct ring_buf *ring_buf_heap_alloc(const char *name, uint32_t size);

/* One buffer with refcount 1, data = head, len = tot_len = 0, or NULL
 * (counted in empty) when the pool is exhausted. */
struct ring_buf *ring_buf_alloc(struct ring_buf_pool *pool);

/* Takes one more reference on a single buffer (not the chain). */
void ring_buf_ref(struct ring_buf *buf);

/* Drops one reference on every buffer of the chain starting at buf; each
 * buffer reaching 0 goes back to its own pool. NULL is ignored. Whoever
 * keeps part of a chain holds a reference on each of its buffers. */
void ring_buf_free(struct ring_buf *buf);
/* Copies the rest of buf's chain behind its first part and frees those
 * parts (a backend that sends one frame per descriptor: AF_XDP, verbs).
 * -EMSGSIZE, chain untouched, when it does not fit the first frame. */
int ring_buf_linearize(struct ring_buf *buf);

void ring_buf_pool_read_counters(const struct ring_buf_pool *pool,
				 struct ring_buf_pool_counters *out);

/* Receive admission (docs/security.md, "Receive frames"): how many buffers
 * of pool one holder -- a socket's receive queue, a connection's in-order
 * data -- may keep now. Any number while less than five eighths of the pool
 * is held (calm: a burst to one socket may use the ring); an eighth once
 * five eighths are (pressure); a thirty-second once seven eighths are
 * (critical); never fewer than RING_BUF_HOLDER_MIN. A socket nobody reads thus stops at five
 * eighths of the frames and the NIC always keeps the rest to receive into,
 * and the fuller the ring, the smaller each socket's share. */
#define RING_BUF_HOLDER_MIN 4u
unsigned ring_buf_pool_holder_cap(const struct ring_buf_pool *pool);
/* Whether a holder keeping held buffers of pool is at its share: callers on
 * the receive path skip the pool's arithmetic while held is below the
 * minimum (the ping-pong case: an empty queue). */
static inline bool ring_buf_pool_holder_full(const struct ring_buf_pool *pool, uint32_t held)
{
	return held >= RING_BUF_HOLDER_MIN && held >= ring_buf_pool_holder_cap(pool);
}
/* True once five eighths of the pool are held: out-of-order data is
 * refused and stale out-of-order queues are reneged. */
bool ring_buf_pool_pressured(const struct ring_buf_pool *pool);
const char *ring_buf_pool_name(const struct ring_buf_pool *pool);

/* ---- for ring backends (and tests) ---- */

/* A pool over memory the caller owns (AF_XDP: a slice of the UMEM):
 * descriptor i covers mem + i * stride, head = that + headroom, size =
 * stride - headroom, handle = first_handle + i * stride. With ops NULL freed
 * buffers go to the free list and ring_buf_alloc hands them out; with ops,
 * freed buffers go to ops->recycle and the pool starts with none free (the
 * backend hands them out with ring_buf_pool_take). */
struct ring_buf_pool *ring_buf_pool_create_over(const char *name, unsigned count, uint8_t *mem,
						unsigned stride, unsigned headroom, uint64_t first_handle,
						const struct ring_buf_pool_ops *ops, void *owner);
/* The owner given at creation (NULL for plain pools); settable, e.g. to
 * NULL when the ring goes away while buffers are still held. */
void *ring_buf_pool_owner(const struct ring_buf_pool *pool);
void ring_buf_pool_set_owner(struct ring_buf_pool *pool, void *owner);
/* A ring closes while some of the pool's buffers are still held (a
 * socket's queue at exit, a packet the application was lent): the pool
 * loses its owner (frees only count from now on) and is kept, never
 * freed, on a list of such pools, so its holders never touch freed memory
 * and the memory stays owned (LeakSanitizer sees it reachable). NULL: no-op. */
void ring_buf_pool_orphan(struct ring_buf_pool *pool);
/* The descriptor whose memory holds handle, or NULL if not in the pool. */
struct ring_buf *ring_buf_pool_by_handle(struct ring_buf_pool *pool, uint64_t handle);
/* Hands out descriptor buf of a backend pool (refcount 1, data = head,
 * len = tot_len = 0, flags as given), counted as an allocation. */
void ring_buf_pool_take(struct ring_buf_pool *pool, struct ring_buf *buf, uint16_t flags);
/* Buffers handed out and not yet back (size - free_now). */
unsigned ring_buf_pool_in_use(const struct ring_buf_pool *pool);
void ring_buf_pool_reset_min(struct ring_buf_pool *pool);
/* Adds n to the empty counter (a backend that learns of refusals late). */
void ring_buf_pool_count_empty(struct ring_buf_pool *pool, uint64_t n);

#endif
