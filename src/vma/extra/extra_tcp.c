/* The Extra API's receive calls on offloaded TCP connections
 * (docs/extra_api.md): the receive callback, recvfrom_zcopy and
 * free_packets. The seeds describe the callback as running "after the
 * internal IP & UDP/TCP header processing"; libvma offers both on TCP.
 *
 * The unit is a receive buffer: the in-order bytes of one segment (or of
 * small segments copied together, sock_tcp_rxq_append_locked), where the
 * NIC wrote them. A lent buffer keeps counting against the connection's
 * share of the ring's frames and its bytes keep the window closed until
 * the application gives it back (free_packets): the peer cannot make us
 * hold more than the window and the share allow. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "engine/engine.h"
#include "extra/extra.h"
#include "extra/extra_lend.h"
#include "log/vlog.h"
#include "sock/sock_tcp_internal.h"

/* ---- the receive callback ---- */

void extra_tcp_stage_locked(struct sock_tcp *s, struct ring_buf *buf)
{
	struct extra_tcp_cb *cb = s->xcb;
	buf->link = NULL;
	if (cb->tail)
		cb->tail->link = buf;
	else
		cb->head = buf;
	cb->tail = buf;
	__atomic_store_n(&cb->frames, cb->frames + 1, __ATOMIC_RELAXED);
	cb->bytes += buf->len;
}

/* The staged buffers go to the receive queue, in order (lock held). */
static void extra_tcp_unstage_locked(struct sock_tcp *s)
{
	struct extra_tcp_cb *cb = s->xcb;
	uint32_t bytes = 0;
	while (cb->head) {
		struct ring_buf *b = cb->head;
		cb->head = b->link;
		bytes += b->len;
		sock_tcp_rxq_append_locked(s, b);
	}
	cb->tail = NULL;
	__atomic_store_n(&cb->frames, 0, __ATOMIC_RELAXED);
	cb->bytes = 0;
	if (bytes) {
		s->rxq_bytes += bytes;
		if (s->stats)
			stats_socket_ready_add(s->stats, bytes);
		sock_tcp_notify_locked(s, EPOLLIN);
	}
}

void extra_tcp_release_locked(struct sock_tcp *s)
{
	struct extra_tcp_cb *cb = s->xcb;
	if (!cb)
		return;
	while (cb->head) {
		struct ring_buf *b = cb->head;
		cb->head = b->link;
		ring_buf_free(b);
	}
	cb->tail = NULL;
	cb->frames = 0;
	cb->bytes = 0;
	cb->fn = NULL;
}

/* Bytes the application consumed without reading them (DROP), or gave
 * back (free_packets): the window reopens (lock held). */
static void extra_tcp_consumed_locked(struct sock_tcp *s, struct sock_offload *ctx, uint32_t len)
{
	if (!s->pcb || !len)
		return;
	sock_offload_clock_locked(ctx);
	tcp_recved(s->pcb, len);
	sock_tcp_tx_kick_locked(s);
}

int extra_tcp_run_callbacks(struct sock_tcp *s)
{
	/* The internal thread never calls the application. */
	if (engine_on_thread())
		return 0;
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx)
		return 0;
	/* Where a held buffer's packet id lives (outside the lock, once). */
	struct extra_xt_table *t = extra_lend_table(ctx);
	int queued = 0;
	for (;;) {
		/* A connection with a callback does not move between lanes
		 * (sock_tcp_move.c), but one may have moved before. */
		ctx = sock_tcp_lock(s, ctx);
		if (t && t->ctx != ctx)
			t = NULL;
		struct extra_tcp_cb *cb = s->xcb;
		struct ring_buf *b = cb && cb->fn && !s->released && !ctx->dead ? cb->head : NULL;
		if (!b) {
			sock_offload_unlock(ctx);
			return queued;
		}
		cb->head = b->link;
		if (!cb->head)
			cb->tail = NULL;
		b->link = NULL;
		__atomic_store_n(&cb->frames, cb->frames - 1, __ATOMIC_RELAXED);
		cb->bytes -= b->len;
		/* A descriptor reserved for HOLD: its address is the packet id
		 * (no socket owns it until the callback decides). */
		struct extra_xt_buf *x = t && t->nfree ? extra_lend_alloc_locked(t) : NULL;
		if (x) {
			x->vb.payload = b->data;
			x->vb.len = (uint16_t)b->len;
			x->refs = 1;
			x->lead = x;
			x->unit = b;
			x->live = 1;
			x->owed = b->len;
			x->tcp = true;
			x->by_fd = true;
		}
		vma_recv_callback_t fn = cb->fn;
		void *context = cb->context;
		struct vma_info_t info = {
			.struct_sz = sizeof(info),
			.packet_id = x ? (void *)&x->vb : NULL,
			.payload_sz = b->len,
			.socket_ready_queue_pkt_count = s->rxq_frames,
			.socket_ready_queue_byte_count = s->rxq_bytes,
			.sw_timestamp = { .tv_sec = (time_t)(b->rx_time_ns / 1000000000u),
					  .tv_nsec = (long)(b->rx_time_ns % 1000000000u) },
		};
		struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = s->remote_port };
		src.sin_addr.s_addr = s->remote_ip;
		struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = s->local_port };
		dst.sin_addr.s_addr = s->local_ip;
		info.src = &src;
		info.dst = &dst;
		struct iovec iov = { .iov_base = b->data, .iov_len = b->len };
		int fd = s->obj.fd;
		sock_offload_unlock(ctx);

		/* No lock of ours is held: the callback may call anything. */
		vma_recv_callback_retval_t verdict = fn(fd, 1, &iov, &info, context);

		sock_offload_lock(ctx);   /* b and x are this lane's, wherever the socket is now */
		if (ctx->dead) {
			sock_offload_unlock(ctx);
			return queued;   /* the rings are closed: nothing to give back to */
		}
		bool here = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE) == ctx;
		if (!here) {
			/* Unregistered and moved during the callback: the buffer's
			 * lane is not the connection's any more. */
			if (x) {
				x->unit = NULL;
				x->refs = 0;
				extra_lend_release_locked(ctx, t, x);
			}
			ring_buf_free(b);
			sock_offload_unlock(ctx);
			return queued;
		}
		if (verdict == VMA_PACKET_HOLD && x && !s->released) {
			/* The application's until free_packets(fd). */
			x->owner = &s->base.xt;
			s->base.xt.lent++;
		} else {
			if (x) {
				x->unit = NULL;
				x->refs = 0;
				x->live = 1;
				extra_lend_release_locked(ctx, t, x);   /* the descriptor only */
			}
			if (s->released) {
				ring_buf_free(b);
			} else if (verdict == VMA_PACKET_DROP) {
				uint32_t len = b->len;
				ring_buf_free(b);
				extra_tcp_consumed_locked(s, ctx, len);
			} else {
				/* RECV, a HOLD that found no descriptor, or an unknown
				 * answer: the socket's readers get it. */
				uint32_t len = b->len;
				sock_tcp_rxq_append_locked(s, b);
				s->rxq_bytes += len;
				if (s->stats)
					stats_socket_ready_add(s->stats, len);
				sock_tcp_notify_locked(s, EPOLLIN);
				queued++;
			}
		}
		if (s->pcb)
			tcp_rcv_held_set(s->pcb, sock_tcp_frames_held(s));
		sock_offload_unlock(ctx);
	}
}

int extra_tcp_register(struct sock_tcp *s, vma_recv_callback_t callback, void *context)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx || s->mode != SOCK_TCP_ACTIVE) {
		/* A listener or a connection the kernel serves. */
		errno = EINVAL;
		return -1;
	}
	struct extra_tcp_cb *fresh = NULL;
	if (callback && !__atomic_load_n(&s->xcb, __ATOMIC_ACQUIRE)) {
		fresh = calloc(1, sizeof(*fresh));
		if (!fresh) {
			errno = ENOMEM;
			return -1;
		}
	}
	ctx = sock_tcp_lock(s, ctx);
	if (fresh && !s->xcb) {
		__atomic_store_n(&s->xcb, fresh, __ATOMIC_RELEASE);
		fresh = NULL;
	}
	if (s->xcb) {
		s->xcb->context = context;
		s->xcb->fn = callback;
		if (!callback)
			extra_tcp_unstage_locked(s);   /* read in order, ahead of what comes next */
	}
	sock_offload_unlock(ctx);
	free(fresh);
	vlog_debug("fd %d: receive callback %s (TCP)", s->obj.fd, callback ? "registered" : "removed");
	return 0;
}

/* ---- zero-copy receive ---- */

int extra_tcp_recvfrom_zcopy(struct sock_tcp *s, void *buf, size_t len, int *flags, int base, bool force,
			     struct sockaddr *from, socklen_t *fromlen)
{
	const size_t need = sizeof(struct vma_packets_t) + sizeof(struct vma_packet_t) + sizeof(struct iovec);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	int refuse = 0;   /* why zero copy cannot be done, for MSG_VMA_ZCOPY_FORCE */
	struct extra_xt_table *t = NULL;
	if (!ctx || s->mode != SOCK_TCP_ACTIVE || len < need)
		refuse = EINVAL;   /* not an offloaded connection, or no room for one packet */
	else if (base & (MSG_PEEK | MSG_OOB | MSG_ERRQUEUE))
		refuse = EOPNOTSUPP;
	else if (!(t = extra_lend_table(ctx)))
		refuse = ENOMEM;
	if (refuse) {
		if (force) {
			errno = refuse;
			return -1;
		}
		ssize_t r = sock_tcp_recvfrom(s, buf, len, base, from, fromlen);
		return r > INT32_MAX ? INT32_MAX : (int)r;
	}
	bool nonblock = s->base.nonblocking || (base & MSG_DONTWAIT);
	for (;;) {
		if (__builtin_expect(s->xcb != NULL, 0))
			extra_tcp_run_callbacks(s);
		ctx = sock_tcp_lock(s, ctx);
		if (t->ctx != ctx) {
			/* The connection moved lanes: lend from the new lane's table. */
			sock_offload_unlock(ctx);
			if (!(t = extra_lend_table(ctx))) {
				errno = ENOMEM;
				return -1;
			}
			continue;
		}
		if (!s->rxq_bytes)
			sock_offload_progress_locked(ctx);
		struct ring_buf *b = s->rxq_head;
		if (b && t->nfree) {
			s->rxq_head = b->link;
			if (!s->rxq_head)
				s->rxq_tail = NULL;
			b->link = NULL;
			s->rxq_frames--;
			s->rxq_bytes -= b->len;
			struct extra_xt_buf *x = extra_lend_tcp_locked(t, s, b, true);
			if (s->pcb)
				tcp_rcv_held_set(s->pcb, sock_tcp_frames_held(s));
			sock_offload_unlock(ctx);
			/* The structures are packed: written through memcpy. */
			char *out = buf;
			size_t one = 1;
			void *id = &x->vb;
			struct iovec iov = { .iov_base = b->data, .iov_len = b->len };
			memcpy(out + offsetof(struct vma_packets_t, n_packet_num), &one, sizeof(one));
			char *pkt = out + sizeof(struct vma_packets_t);
			memcpy(pkt + offsetof(struct vma_packet_t, packet_id), &id, sizeof(id));
			memcpy(pkt + offsetof(struct vma_packet_t, sz_iov), &one, sizeof(one));
			memcpy(pkt + sizeof(struct vma_packet_t), &iov, sizeof(iov));
			if (fromlen)
				*fromlen = 0;   /* a connected stream: no address, as recvfrom */
			if (s->stats) {
				stats_socket_ready_remove(s->stats, b->len);
				s->stats->c.rx_packets++;
				s->stats->c.rx_bytes += b->len;
			}
			*flags = base | MSG_VMA_ZCOPY;
			return (int)iov.iov_len;
		}
		bool full = b != NULL;
		bool end = !s->rxq_bytes && (s->shut_rcv || s->reset || !s->pcb || s->err > 0);
		sock_offload_unlock(ctx);
		if (end)   /* EOF or the pending error, as recv reports them */
			return (int)sock_tcp_recvfrom(s, buf, len, base, from, fromlen);
		if (full) {
			if (force) {
				errno = ENOBUFS;   /* every descriptor of the lane lent */
				return -1;
			}
			ssize_t r = sock_tcp_recvfrom(s, buf, len, base, from, fromlen);
			return r > INT32_MAX ? INT32_MAX : (int)r;
		}
		if (nonblock) {
			errno = EAGAIN;
			return -1;
		}
		/* Wait as recv does (polling, then sleeping) for a byte, without
		 * taking it. */
		char c;
		ssize_t r = sock_tcp_recvfrom(s, &c, 1, base | MSG_PEEK, NULL, NULL);
		if (r <= 0)
			return (int)r;
	}
}

int extra_tcp_free_packets(struct sock_tcp *s, struct vma_packet_t *pkts, size_t count)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx) {
		errno = EINVAL;
		return -1;
	}
	if (count && !pkts) {
		errno = EFAULT;
		return -1;
	}
	int rc = 0;
	ctx = sock_tcp_lock(s, ctx);
	for (size_t i = 0; i < count; i++) {
		/* Arrays of vma_packet_t step by its fixed part. */
		const char *pkt = (const char *)pkts + i * sizeof(struct vma_packet_t);
		void *id;
		memcpy(&id, pkt + offsetof(struct vma_packet_t, packet_id), sizeof(id));
		struct extra_xt_table *t = NULL;
		struct extra_xt_buf *x = id ? extra_lend_lookup(id, &t) : NULL;
		if (!x || t->ctx != ctx || !x->refs || !x->by_fd || x->owner != &s->base.xt) {
			rc = -1;   /* not a packet of this socket, or freed already */
			continue;
		}
		extra_lend_tcp_recved_locked(ctx, x);
		x->refs = 0;
		extra_lend_release_locked(ctx, t, x);
	}
	sock_offload_unlock(ctx);
	if (rc < 0)
		errno = ENOENT;
	return rc;
}
