/* Raw AF_XDP sockets: creation, UMEM registration, ring set-up, mmap and
 * bind, without libxdp's xsk.h. We need sockets whose fill and completion
 * rings several processes produce to and consume from (a UMEM shared across
 * processes, docs/process_model.md), which libxdp's per-process cached ring
 * indices cannot do; and vmad creates sockets that another process maps.
 *
 * A ring_xsk_ring is a view of one mmapped ring. The cached indices are for
 * rings one thread owns (RX, TX); shared rings (fill, completion) are read
 * and written with the *_shared helpers under the domain lock, which never
 * trust a cached value. */
#ifndef VMA_RING_RING_XSK_H
#define VMA_RING_RING_XSK_H

#include <stddef.h>
#include <stdint.h>
#include <linux/if_xdp.h>

enum ring_xsk_which {
	RING_XSK_RX,
	RING_XSK_TX,
	RING_XSK_FILL,
	RING_XSK_COMP,
};

struct ring_xsk_ring {
	uint32_t *producer;
	uint32_t *consumer;
	uint32_t *flags;      /* XDP_RING_NEED_WAKEUP */
	void *descs;          /* struct xdp_desc[] (RX/TX) or __u64[] (fill/comp) */
	uint32_t size;        /* entries, a power of two */
	uint32_t mask;
	uint32_t cached_prod; /* owner-only rings */
	uint32_t cached_cons;
	void *map;
	size_t map_len;
};

/* socket(AF_XDP) with CLOEXEC; the fd or -errno (-EPERM, -EAFNOSUPPORT). */
int ring_xsk_socket(void);
/* XDP_UMEM_REG over area (page aligned, size a multiple of frame_size) and
 * the fill / completion ring sizes. 0 or -errno. */
int ring_xsk_umem_register(int fd, void *area, size_t size, uint32_t frame_size, uint32_t headroom,
			   uint32_t fill_size, uint32_t comp_size);
/* XDP_RX_RING / XDP_TX_RING sizes; 0 leaves that ring out. 0 or -errno. */
int ring_xsk_set_rings(int fd, uint32_t rx_size, uint32_t tx_size);
/* Binds fd to (ifindex, queue) with need_wakeup; shared_umem_fd >= 0 binds
 * with XDP_SHARED_UMEM to that socket's UMEM (same queue: one fill and one
 * completion ring for all). xdp_flags adds XDP_COPY / XDP_ZEROCOPY. */
int ring_xsk_bind(int fd, unsigned ifindex, unsigned queue, int shared_umem_fd, uint16_t xdp_flags);
/* Maps one ring of fd (any process holding the fd may do it). */
int ring_xsk_map_ring(int fd, enum ring_xsk_which which, uint32_t size, struct ring_xsk_ring *out);
void ring_xsk_unmap_ring(struct ring_xsk_ring *ring);
/* The fd's XDP_STATISTICS; 0 or -errno. */
int ring_xsk_statistics(int fd, struct xdp_statistics *out);

/* ---- owner-only rings (RX consumer, TX producer) ---------------------- */

/* Up to max entries ready to consume at *idx. */
static inline uint32_t ring_xsk_cons_peek(struct ring_xsk_ring *r, uint32_t max, uint32_t *idx)
{
	uint32_t avail = r->cached_prod - r->cached_cons;

	if (avail < max) {
		r->cached_prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
		avail = r->cached_prod - r->cached_cons;
	}
	if (avail > max)
		avail = max;
	*idx = r->cached_cons;
	return avail;
}

static inline void ring_xsk_cons_release(struct ring_xsk_ring *r, uint32_t n)
{
	r->cached_cons += n;
	__atomic_store_n(r->consumer, r->cached_cons, __ATOMIC_RELEASE);
}

/* Entries ready to consume (fresh look at the producer). */
static inline uint32_t ring_xsk_cons_avail(struct ring_xsk_ring *r)
{
	r->cached_prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
	return r->cached_prod - r->cached_cons;
}

/* Free slots for the producer (fresh look at the consumer when short). */
static inline uint32_t ring_xsk_prod_free(struct ring_xsk_ring *r, uint32_t want)
{
	uint32_t free_slots = r->size - (r->cached_prod - r->cached_cons);

	if (free_slots < want) {
		r->cached_cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
		free_slots = r->size - (r->cached_prod - r->cached_cons);
	}
	return free_slots;
}

static inline void ring_xsk_prod_submit(struct ring_xsk_ring *r, uint32_t n)
{
	r->cached_prod += n;
	__atomic_store_n(r->producer, r->cached_prod, __ATOMIC_RELEASE);
}

static inline struct xdp_desc *ring_xsk_desc(struct ring_xsk_ring *r, uint32_t idx)
{
	return &((struct xdp_desc *)r->descs)[idx & r->mask];
}

static inline uint64_t *ring_xsk_addr(struct ring_xsk_ring *r, uint32_t idx)
{
	return &((uint64_t *)r->descs)[idx & r->mask];
}

static inline int ring_xsk_needs_wakeup(const struct ring_xsk_ring *r)
{
	return (__atomic_load_n(r->flags, __ATOMIC_RELAXED) & XDP_RING_NEED_WAKEUP) != 0;
}

/* Descriptors a producer queued that the kernel has not consumed yet. */
static inline uint32_t ring_xsk_prod_outstanding(const struct ring_xsk_ring *r)
{
	return __atomic_load_n(r->producer, __ATOMIC_ACQUIRE) - __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
}

#endif
