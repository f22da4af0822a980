#include <stdlib.h>
#include <string.h>

#include "sock/sock_udp_queue.h"

int sock_udp_queue_init(struct sock_udp_queue *q, unsigned cap)
{
	memset(q, 0, sizeof(*q));
	q->entries = calloc(cap, sizeof(*q->entries));
	if (!q->entries)
		return -1;
	q->cap = cap;
	return 0;
}

void sock_udp_queue_clear(struct sock_udp_queue *q)
{
	while (q->count)
		sock_udp_queue_pop(q);
}

void sock_udp_queue_fini(struct sock_udp_queue *q)
{
	sock_udp_queue_clear(q);
	free(q->entries);
	q->entries = NULL;
	q->cap = 0;
}

bool sock_udp_queue_push(struct sock_udp_queue *q, const struct sock_udp_entry *e, uint64_t byte_limit)
{
	if (q->count == q->cap || (q->count && q->bytes + e->len > byte_limit))
		return false;
	unsigned tail = q->head + q->count;
	if (tail >= q->cap)
		tail -= q->cap;
	q->entries[tail] = *e;
	q->count++;
	q->bytes += e->len;
	return true;
}

void sock_udp_queue_pop(struct sock_udp_queue *q)
{
	if (!q->count)
		return;
	struct sock_udp_entry *e = &q->entries[q->head];
	q->bytes -= e->len;
	ring_buf_free(e->buf);
	e->buf = NULL;
	if (++q->head == q->cap)
		q->head = 0;
	q->count--;
}

bool sock_udp_queue_take(struct sock_udp_queue *q, struct sock_udp_entry *out)
{
	if (!q->count)
		return false;
	struct sock_udp_entry *e = &q->entries[q->head];
	*out = *e;
	q->bytes -= e->len;
	e->buf = NULL;
	if (++q->head == q->cap)
		q->head = 0;
	q->count--;
	return true;
}

size_t sock_udp_copy_out(const struct ring_buf *buf, uint32_t len, const struct iovec *iov, size_t iovcnt)
{
	size_t copied = 0, iov_off = 0, i = 0;
	uint32_t left = len;
	while (buf && left && i < iovcnt) {
		uint32_t in_buf = buf->len < left ? buf->len : left;
		uint32_t buf_off = 0;
		while (buf_off < in_buf && i < iovcnt) {
			size_t room = iov[i].iov_len - iov_off;
			size_t n = in_buf - buf_off < room ? in_buf - buf_off : room;
			if (n)
				memcpy((char *)iov[i].iov_base + iov_off, buf->data + buf_off, n);
			buf_off += n;
			iov_off += n;
			copied += n;
			if (iov_off == iov[i].iov_len) {
				i++;
				iov_off = 0;
			}
		}
		left -= buf_off;
		if (buf_off < in_buf)
			break;
		buf = buf->next;
	}
	return copied;
}

struct ring_buf *sock_udp_chain_from_iov(struct ring_buf_pool *pool, uint32_t len, const struct iovec *iov,
					 size_t iovcnt)
{
	struct ring_buf *first = NULL, *last = NULL;
	uint32_t left = len;
	size_t i = 0, iov_off = 0;
	do {
		struct ring_buf *b = ring_buf_alloc(pool);
		if (!b) {
			ring_buf_free(first);
			return NULL;
		}
		uint32_t take = left < b->size ? left : b->size;
		b->len = take;
		for (uint32_t done = 0; done < take && i < iovcnt;) {
			size_t room = iov[i].iov_len - iov_off;
			size_t n = take - done < room ? take - done : room;
			memcpy(b->data + done, (const char *)iov[i].iov_base + iov_off, n);
			done += (uint32_t)n;
			iov_off += n;
			if (iov_off == iov[i].iov_len) {
				i++;
				iov_off = 0;
			}
		}
		left -= take;
		if (last)
			last->next = b;
		else
			first = b;
		last = b;
	} while (left);
	/* tot_len of each buffer: its bytes and the rest of the chain's. */
	uint32_t rest = len;
	for (struct ring_buf *b = first; b; b = b->next) {
		b->tot_len = rest;
		rest -= b->len;
	}
	return first;
}

/* A copy from pool of the len bytes the chain at src holds; NULL when the
 * pool runs out. Bytes the chain lacks (never, for a queued datagram) are
 * zeroes rather than stale memory. */
static struct ring_buf *sock_udp_chain_copy(struct ring_buf_pool *pool, const struct ring_buf *src, uint32_t len)
{
	struct ring_buf *first = NULL, *last = NULL;
	uint32_t left = len, src_off = 0;
	do {
		struct ring_buf *b = ring_buf_alloc(pool);
		if (!b) {
			ring_buf_free(first);
			return NULL;
		}
		uint32_t take = left < b->size ? left : b->size;
		b->len = take;
		b->tot_len = left;
		uint32_t done = 0;
		while (done < take && src) {
			uint32_t avail = src->len - src_off;
			if (!avail) {
				src = src->next;
				src_off = 0;
				continue;
			}
			uint32_t n = take - done < avail ? take - done : avail;
			memcpy(b->data + done, src->data + src_off, n);
			done += n;
			src_off += n;
		}
		if (done < take)
			memset(b->data + done, 0, take - done);
		left -= take;
		if (last)
			last->next = b;
		else
			first = b;
		last = b;
	} while (left);
	return first;
}

int sock_udp_queue_rehome(struct sock_udp_queue *q, const char *name, struct ring_buf_pool **pool)
{
	*pool = NULL;
	if (!q->count)
		return 0;
	uint32_t max_len = 0;
	for (unsigned k = 0, at = q->head; k < q->count; k++, at = at + 1 == q->cap ? 0 : at + 1)
		if (q->entries[at].len > max_len)
			max_len = q->entries[at].len;
	unsigned size = sock_udp_copy_buf_size(max_len), count = 0;
	for (unsigned k = 0, at = q->head; k < q->count; k++, at = at + 1 == q->cap ? 0 : at + 1)
		count += sock_udp_copy_bufs(q->entries[at].len, size);
	struct ring_buf_pool *p = ring_buf_pool_create(name, count, size);
	if (!p)
		return -1;
	/* The pool holds every datagram at once: no allocation below fails,
	 * so the queue is never left half copied. */
	for (unsigned k = 0, at = q->head; k < q->count; k++, at = at + 1 == q->cap ? 0 : at + 1) {
		struct sock_udp_entry *e = &q->entries[at];
		struct ring_buf *copy = sock_udp_chain_copy(p, e->buf, e->len);
		ring_buf_free(e->buf);
		e->buf = copy;
	}
	*pool = p;
	return 0;
}
