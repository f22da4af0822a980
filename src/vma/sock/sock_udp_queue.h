/* The RX queue of an offloaded UDP socket: a fixed ring of entries allocated
 * with the socket, so queuing a datagram never allocates. Entries hold a
 * reference on the datagram's buffers (several sockets may hold the same
 * multicast buffer, so the buffer's own link field is never used).
 * Not thread-safe: the offload lock guards it. */
#ifndef VMA_SOCK_SOCK_UDP_QUEUE_H
#define VMA_SOCK_SOCK_UDP_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ring/ring_buf.h"
#include "stack/stack.h"

struct sock_udp_entry {
	struct ring_buf *buf;      /* data = first payload byte; a chain when reassembled */
	uint32_t len;              /* payload bytes */
	struct stack_udp_rx_info info;
	uint64_t rx_time_ns;
};

struct sock_udp_queue {
	struct sock_udp_entry *entries;
	unsigned cap, head, count;
	uint64_t bytes;            /* payload bytes queued */
};

/* 0, or -1 (ENOMEM). */
int sock_udp_queue_init(struct sock_udp_queue *q, unsigned cap);
/* Frees every queued buffer and the entries. */
void sock_udp_queue_fini(struct sock_udp_queue *q);
/* Frees every queued buffer; the queue stays usable. */
void sock_udp_queue_clear(struct sock_udp_queue *q);
/* Takes ownership of e->buf on success. Refused (false, buffer still the
 * caller's) when the entries are full or when the queue is not empty and
 * e->len would take the bytes beyond byte_limit (like Linux, one datagram
 * always fits an empty queue). */
bool sock_udp_queue_push(struct sock_udp_queue *q, const struct sock_udp_entry *e, uint64_t byte_limit);
static inline struct sock_udp_entry *sock_udp_queue_front(struct sock_udp_queue *q)
{
	return q->count ? &q->entries[q->head] : NULL;
}
/* Drops the front entry and frees its buffer. */
void sock_udp_queue_pop(struct sock_udp_queue *q);
/* Moves the front entry, with its buffer reference, to *out (false when
 * empty): the Extra API hands the frame itself to the application. */
bool sock_udp_queue_take(struct sock_udp_queue *q, struct sock_udp_entry *out);

/* Copies up to the iovecs' capacity of the len payload bytes held by the
 * chain starting at buf. Returns the bytes copied. */
size_t sock_udp_copy_out(const struct ring_buf *buf, uint32_t len, const struct iovec *iov, size_t iovcnt);

/* ---- copies into memory of one's own (a socket moving between lanes) ----
 * A queued datagram sits in a frame of the ring that received it, and that
 * frame may only go back to its ring under that ring's lock. A socket that
 * leaves the lane copies its datagrams into a plain pool it owns. */

/* Largest buffer of such a pool; a bigger datagram becomes a chain. */
#define SOCK_UDP_COPY_BUF_MAX 2048u
/* The buffer size of such a pool for datagrams of at most max_len bytes:
 * as big as the biggest up to the cap (a queue of small datagrams takes
 * little memory, a big datagram few buffers), 64 at least. */
static inline unsigned sock_udp_copy_buf_size(uint32_t max_len)
{
	return max_len < 64 ? 64 : max_len < SOCK_UDP_COPY_BUF_MAX ? max_len : SOCK_UDP_COPY_BUF_MAX;
}
/* The buffers of buf_size one datagram of len bytes takes (one at least). */
static inline unsigned sock_udp_copy_bufs(uint32_t len, unsigned buf_size)
{
	return len ? (len + buf_size - 1) / buf_size : 1;
}
/* A chain from pool holding len bytes taken from the iovecs (at least len
 * bytes in them), data = head of each buffer; NULL (nothing kept) when the
 * pool runs out. */
struct ring_buf *sock_udp_chain_from_iov(struct ring_buf_pool *pool, uint32_t len, const struct iovec *iov,
					 size_t iovcnt);
/* Replaces the buffers of every queued datagram by a copy in a new plain
 * pool (*pool; NULL when the queue is empty) and frees the originals, so
 * nothing queued refers to its ring any more. Order, lengths, addresses and
 * times are kept. 0, or -1 (no memory: the queue is untouched). */
int sock_udp_queue_rehome(struct sock_udp_queue *q, const char *name, struct ring_buf_pool **pool);

#endif
