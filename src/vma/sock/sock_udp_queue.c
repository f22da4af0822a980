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
