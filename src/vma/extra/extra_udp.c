/* The Extra API on offloaded UDP sockets: the receive callback, zero-copy
 * receive and free_packets (docs/extra_api.md).
 *
 * Frames handed to the application stay frames of the ring that received
 * them (UMEM frames on the xdp backend): the application reads the bytes
 * where the NIC wrote them, and free_packets gives the frame back to its
 * ring under the lane lock, like any queued datagram's. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "extra/extra.h"
#include "log/vlog.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "ring/ring_spin.h"
#include "sock/sock_call.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"
#include "sock/sock_udp_internal.h"

/* Datagrams one socket's application may hold at once; past that,
 * recvfrom_zcopy copies (or fails under MSG_VMA_ZCOPY_FORCE) and a
 * callback's VMA_PACKET_HOLD queues the datagram instead. */
#define EXTRA_UDP_HOLDS 1024
/* Datagrams waiting for the callback; more are dropped (counted). */
#define EXTRA_UDP_STAGE_ENTRIES 1024
/* Fragments shown per datagram (a reassembled datagram is a chain). */
#define EXTRA_UDP_IOV_MAX 64

/* Packets free_packets gave back wait, lock-free, for the socket's next
 * locked call to return their frames to the ring (a lock round less per
 * packet); this many at most, then free_packets returns them itself. */
#define EXTRA_UDP_RETURN_BATCH 16

struct extra_udp_hold {
	struct ring_buf *buf;      /* NULL: free or reserved */
	int next_free;             /* -1 ends the free list */
	bool reserved;             /* promised to a callback in progress */
	bool returned;             /* given back by free_packets, frame not yet returned */
	int next_returned;         /* on the returned list */
};

struct extra_udp_holds {
	unsigned used;             /* slots with a buffer */
	int free_head;
	int returned_head;         /* lock-free LIFO of returned slots; -1 empty */
	unsigned returned;         /* on it */
	struct extra_udp_hold slot[EXTRA_UDP_HOLDS];
};

/* ---- finding the socket ---- */

/* The offloaded socket behind fd, pinned (one lookup, one pin): a TCP one
 * in *t or a UDP one in *u, the other NULL. Both NULL, with errno, for
 * anything else: EBADF for a negative fd, EINVAL for what we do not offload. */
static void extra_sock_get(int fd, struct sock_tcp **t, struct sock_udp **u)
{
	*t = NULL;
	*u = NULL;
	if (fd < 0) {
		errno = EBADF;
		return;
	}
	struct sock_obj *obj = sock_fd_get(fd);
	if (obj && obj->ops == &sock_udp_ops) {
		sock_obj_pin(obj);
		*u = sock_udp_of(obj);
		return;
	}
	if (obj && obj->ops == &sock_tcp_offload_ops) {
		sock_obj_pin(obj);
		*t = (struct sock_tcp *)obj;
		return;
	}
	errno = EINVAL;
}

static void extra_udp_put(struct sock_udp *s)
{
	sock_obj_unpin(&s->obj);
}

/* ---- the hold table ---- */

static struct extra_udp_holds *extra_udp_holds_get(struct sock_udp *s)
{
	struct extra_udp_holds *h = __atomic_load_n(&s->holds, __ATOMIC_ACQUIRE);
	if (__builtin_expect(h != NULL, 1))
		return h;
	/* Once per socket, outside any lock. */
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	for (int i = 0; i < EXTRA_UDP_HOLDS; i++)
		h->slot[i].next_free = i + 1 < EXTRA_UDP_HOLDS ? i + 1 : -1;
	h->returned_head = -1;
	struct extra_udp_holds *none = NULL;
	if (!__atomic_compare_exchange_n(&s->holds, &none, h, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		free(h);
		return none;
	}
	return h;
}

/* Lock held. A free slot, reserved, or -1. */
static int extra_udp_hold_reserve_locked(struct extra_udp_holds *h)
{
	int i = h->free_head;
	if (i < 0)
		return -1;
	h->free_head = h->slot[i].next_free;
	h->slot[i].reserved = true;
	return i;
}

static void extra_udp_hold_unreserve_locked(struct extra_udp_holds *h, int i)
{
	h->slot[i].reserved = false;
	__atomic_store_n(&h->slot[i].returned, false, __ATOMIC_RELAXED);
	__atomic_store_n(&h->slot[i].buf, NULL, __ATOMIC_RELEASE);
	h->slot[i].next_free = h->free_head;
	h->free_head = i;
}

static void extra_udp_hold_fill_locked(struct extra_udp_holds *h, int i, struct ring_buf *buf)
{
	h->slot[i].reserved = false;
	__atomic_store_n(&h->slot[i].buf, buf, __ATOMIC_RELEASE);
	h->used++;
}

/* Lock held: the frames of the packets free_packets gave back go back to
 * the ring. */
static void extra_udp_holds_drain_locked(struct sock_udp *s, struct extra_udp_holds *h)
{
	if (!h || __atomic_load_n(&h->returned_head, __ATOMIC_ACQUIRE) < 0)
		return;
	int i = __atomic_exchange_n(&h->returned_head, -1, __ATOMIC_ACQ_REL);
	while (i >= 0) {
		int next = h->slot[i].next_returned;
		ring_buf_free(h->slot[i].buf);
		h->used--;
		if (s->base.xt.lent)
			s->base.xt.lent--;
		__atomic_sub_fetch(&h->returned, 1, __ATOMIC_RELAXED);
		extra_udp_hold_unreserve_locked(h, i);
		i = next;
	}
}

bool extra_udp_holding(const struct sock_udp *s)
{
	const struct extra_udp_holds *h = __atomic_load_n(&s->holds, __ATOMIC_ACQUIRE);
	if (!h)
		return false;
	if (h->used)
		return true;
	for (int i = 0; i < EXTRA_UDP_HOLDS; i++)
		if (h->slot[i].reserved)
			return true;
	return false;
}

/* The slot a packet id names, if it is one of s's in use; else -1. */
static int extra_udp_hold_index(const struct extra_udp_holds *h, const void *id)
{
	if (!h || !id)
		return -1;
	uintptr_t base = (uintptr_t)&h->slot[0], p = (uintptr_t)id;
	if (p < base || p >= (uintptr_t)&h->slot[EXTRA_UDP_HOLDS] || (p - base) % sizeof(h->slot[0]))
		return -1;
	int i = (int)((p - base) / sizeof(h->slot[0]));
	return __atomic_load_n(&h->slot[i].buf, __ATOMIC_ACQUIRE) ? i : -1;
}

/* ---- receive callback ---- */

/* Wakes epoll sets and sleeping readers after the unlock (lock held). */
static void extra_udp_notify_locked(struct sock_udp *s, struct sock_offload *ctx)
{
	bool notify = sock_base_watched(&s->base);
	if (notify && !s->wake_pending) {
		s->wake_pending = true;
		sock_offload_defer_locked(ctx, &s->wake_node);
	}
}

static void extra_udp_count_drop(struct sock_udp *s, uint32_t len)
{
	s->stats->c.rx_ready_pkts_dropped++;
	s->stats->c.rx_ready_bytes_dropped += len;
}

/* The socket's queue limit, as delivery applies it. */
static uint64_t extra_udp_queue_limit(const struct sock_udp *s)
{
	return s->rcvbuf > (uint64_t)g_cfg.rx_bytes_min ? s->rcvbuf : (uint64_t)g_cfg.rx_bytes_min;
}

/* Queues a datagram the callback let through (lock held). */
static bool extra_udp_queue_locked(struct sock_udp *s, struct sock_offload *ctx, const struct sock_udp_entry *e)
{
	if (s->released || !sock_udp_queue_push(&s->queue, e, extra_udp_queue_limit(s))) {
		ring_buf_free(e->buf);
		extra_udp_count_drop(s, e->len);
		return false;
	}
	stats_socket_ready_add(s->stats, e->len);
	if (g_cfg.socketxtreme)
		extra_xt_udp_ready_locked(s);
	extra_udp_notify_locked(s, ctx);
	return true;
}

void extra_udp_stage_locked(struct sock_udp *s, const struct sock_udp_entry *e)
{
	struct sock_udp_queue *stage = s->cb_stage;
	bool over_share = ring_buf_pool_holder_full(e->buf->pool, s->queue.count + stage->count + s->base.xt.lent);
	if (s->released || over_share || !sock_udp_queue_push(stage, e, UINT64_MAX)) {
		if (over_share && s->ctx)
			s->ctx->udp_frame_pressure_drops++;
		ring_buf_free(e->buf);
		extra_udp_count_drop(s, e->len);
		return;
	}
	/* A reader asleep (or an epoll set) comes and runs the callback. */
	extra_udp_notify_locked(s, s->ctx);
}

static size_t extra_udp_fragments(const struct ring_buf *buf, uint32_t len, struct iovec *iov, size_t max,
				  size_t *total)
{
	size_t n = 0;
	*total = 0;
	for (uint32_t left = len; buf && left && n < max; buf = buf->next) {
		uint32_t part = buf->len < left ? buf->len : left;
		iov[n].iov_base = buf->data;
		iov[n].iov_len = part;
		n++;
		*total += part;
		left -= part;
	}
	return n;
}

int extra_udp_run_callbacks(struct sock_udp *s)
{
	/* The internal thread never calls the application: what it staged
	 * waits for the application's next receive or poll call. */
	if (engine_on_thread())
		return 0;
	int queued = 0;
	for (;;) {
		struct sock_offload *ctx = sock_udp_lock(s);
		if (!ctx)
			return queued;
		struct sock_udp_entry e;
		if (!sock_udp_queue_take(s->cb_stage, &e)) {
			sock_offload_unlock(ctx);
			return queued;
		}
		vma_recv_callback_t cb = s->recv_cb;
		void *cb_context = s->recv_cb_context;
		struct extra_udp_holds *h = cb ? __atomic_load_n(&s->holds, __ATOMIC_ACQUIRE) : NULL;
		int hold = h ? extra_udp_hold_reserve_locked(h) : -1;
		struct vma_info_t info = {
			.struct_sz = sizeof(info),
			.packet_id = hold >= 0 ? (void *)&h->slot[hold] : NULL,
			.payload_sz = e.len,
			.socket_ready_queue_pkt_count = s->queue.count,
			.socket_ready_queue_byte_count = (uint32_t)(s->queue.bytes < UINT32_MAX ? s->queue.bytes : UINT32_MAX),
			.sw_timestamp = { .tv_sec = (time_t)(e.rx_time_ns / 1000000000u),
					  .tv_nsec = (long)(e.rx_time_ns % 1000000000u) },
		};
		sock_offload_unlock(ctx);

		vma_recv_callback_retval_t verdict = VMA_PACKET_RECV;
		if (cb) {
			struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = e.info.src_port };
			src.sin_addr.s_addr = e.info.src_ip;
			struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = e.info.dst_port };
			dst.sin_addr.s_addr = e.info.dst_ip;
			info.src = &src;
			info.dst = &dst;
			struct iovec iov[EXTRA_UDP_IOV_MAX];
			size_t total;
			size_t n = extra_udp_fragments(e.buf, e.len, iov, EXTRA_UDP_IOV_MAX, &total);
			/* No lock of ours is held: the callback may call any
			 * socket function, this socket's included. */
			verdict = cb(s->obj.fd, n, iov, &info, cb_context);
		}

		/* The frame goes back under its own lane's lock; a socket with
		 * a callback or holds never leaves its lane (sock_udp_move). */
		sock_offload_lock(ctx);
		if (ctx->dead) {
			/* Exit closed the rings: nothing to give back to. */
			sock_offload_unlock(ctx);
			return queued;
		}
		if (verdict == VMA_PACKET_HOLD && hold >= 0 && !s->released) {
			extra_udp_hold_fill_locked(h, hold, e.buf);
			s->base.xt.lent++;   /* counts against the socket's share of frames */
			s->stats->c.rx_packets++;
			s->stats->c.rx_bytes += e.len;
		} else {
			if (hold >= 0)
				extra_udp_hold_unreserve_locked(h, hold);
			if (verdict == VMA_PACKET_DROP) {
				ring_buf_free(e.buf);
			} else {
				/* RECV, a HOLD that found no slot, or an unknown
				 * answer: the socket's readers get it. */
				if (verdict == VMA_PACKET_HOLD)
					vlog_debug("fd %d: receive callback held a datagram without a packet id "
						   "(%d held already): queued instead", s->obj.fd, EXTRA_UDP_HOLDS);
				if (extra_udp_queue_locked(s, ctx, &e))
					queued++;
			}
		}
		sock_offload_unlock(ctx);
	}
}

int extra_register_recv_callback(int fd, vma_recv_callback_t callback, void *context)
{
	struct sock_tcp *t;
	struct sock_udp *s;
	extra_sock_get(fd, &t, &s);
	if (t) {
		int rc = extra_tcp_register(t, callback, context);
		sock_obj_unpin(&t->obj);
		return rc;
	}
	if (!s)
		return -1;
	if (!sock_udp_ctx(s)) {
		/* On the kernel path (a libvma.conf rule, released). */
		extra_udp_put(s);
		errno = EINVAL;
		return -1;
	}
	/* Memory first, outside the lock; kept once made (the stage also
	 * tells the socket's hooks that a callback was ever set). */
	struct sock_udp_queue *fresh = NULL;
	if (callback && !__atomic_load_n(&s->cb_stage, __ATOMIC_ACQUIRE)) {
		fresh = calloc(1, sizeof(*fresh));
		if (!fresh || sock_udp_queue_init(fresh, EXTRA_UDP_STAGE_ENTRIES) != 0 || !extra_udp_holds_get(s)) {
			free(fresh);
			extra_udp_put(s);
			errno = ENOMEM;
			return -1;
		}
	}
	struct sock_offload *ctx = sock_udp_lock(s);
	if (!ctx) {
		if (fresh) {
			sock_udp_queue_fini(fresh);
			free(fresh);
		}
		extra_udp_put(s);
		errno = EINVAL;
		return -1;
	}
	if (fresh && !s->cb_stage)
		__atomic_store_n(&s->cb_stage, fresh, __ATOMIC_RELEASE);
	else if (fresh) {
		sock_udp_queue_fini(fresh);
		free(fresh);
	}
	s->recv_cb_context = context;
	s->recv_cb = callback;
	if (callback) {
		/* Its frames stay in this lane: no moves between lanes. */
		__atomic_store_n(&s->mig.ratio, 0, __ATOMIC_RELAXED);
	} else if (s->cb_stage) {
		/* Unregistered: what waited for the callback is read in order,
		 * ahead of what arrives next. */
		struct sock_udp_entry e;
		while (sock_udp_queue_take(s->cb_stage, &e))
			extra_udp_queue_locked(s, ctx, &e);
	}
	sock_offload_unlock(ctx);
	vlog_debug("fd %d: receive callback %s", fd, callback ? "registered" : "removed");
	extra_udp_put(s);
	return 0;
}

void extra_udp_release_locked(struct sock_udp *s)
{
	if (s->cb_stage)
		sock_udp_queue_clear(s->cb_stage);
	struct extra_udp_holds *h = s->holds;
	if (!h)
		return;
	extra_udp_holds_drain_locked(s, h);
	/* The application may not use a closed socket's packets any more:
	 * their frames go back to the ring. */
	for (int i = 0; i < EXTRA_UDP_HOLDS; i++) {
		if (h->slot[i].buf) {
			ring_buf_free(h->slot[i].buf);
			extra_udp_hold_unreserve_locked(h, i);
		}
	}
	s->base.xt.lent = s->base.xt.lent > h->used ? s->base.xt.lent - h->used : 0;
	h->used = 0;
}

void extra_udp_destroy(struct sock_udp *s)
{
	if (s->cb_stage) {
		if (sock_offload_usable(s->ctx))
			sock_udp_queue_fini(s->cb_stage);
		free(s->cb_stage);
		s->cb_stage = NULL;
	}
	free(s->holds);
	s->holds = NULL;
}

/* ---- zero-copy receive ---- */

static ssize_t extra_udp_copy_recv(struct sock_udp *s, void *buf, size_t len, int flags, struct sockaddr *from,
				   socklen_t *fromlen)
{
	return SOCK_CALL_OR_KERNEL(sock_call_recvfrom(&s->obj, buf, len, flags, from, fromlen),
				   OS_CALL(recvfrom, s->obj.fd, buf, len, flags, from, fromlen));
}

/* Lock held, queue not empty, slot reserved: hands the front datagram to
 * the application as a struct vma_packets_t in buf. */
static size_t extra_udp_zcopy_fill_locked(struct sock_udp *s, struct extra_udp_holds *h, int hold, void *buf,
					  size_t len, struct sockaddr *from, socklen_t *fromlen)
{
	struct sock_udp_entry e;
	sock_udp_queue_take(&s->queue, &e);
	extra_udp_hold_fill_locked(h, hold, e.buf);
	s->base.xt.lent++;
	stats_socket_ready_remove(s->stats, e.len);
	s->stats->c.rx_packets++;
	s->stats->c.rx_bytes += e.len;

	size_t room = (len - sizeof(struct vma_packets_t) - sizeof(struct vma_packet_t)) / sizeof(struct iovec);
	if (room > EXTRA_UDP_IOV_MAX)
		room = EXTRA_UDP_IOV_MAX;
	struct iovec iov[EXTRA_UDP_IOV_MAX];
	size_t total;
	size_t n = extra_udp_fragments(e.buf, e.len, iov, room, &total);
	/* The structures are packed: written through memcpy. */
	char *out = buf;
	size_t one = 1;
	void *id = &h->slot[hold];
	memcpy(out + offsetof(struct vma_packets_t, n_packet_num), &one, sizeof(one));
	char *pkt = out + sizeof(struct vma_packets_t);
	memcpy(pkt + offsetof(struct vma_packet_t, packet_id), &id, sizeof(id));
	memcpy(pkt + offsetof(struct vma_packet_t, sz_iov), &n, sizeof(n));
	memcpy(pkt + sizeof(struct vma_packet_t), iov, n * sizeof(struct iovec));

	if (from && fromlen) {
		struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = e.info.src_port };
		sin.sin_addr.s_addr = e.info.src_ip;
		size_t c = *fromlen < sizeof(sin) ? *fromlen : sizeof(sin);
		memcpy(from, &sin, c);
		*fromlen = sizeof(sin);
	}
	return total;
}

int extra_recvfrom_zcopy(int fd, void *buf, size_t len, int *flags, struct sockaddr *from, socklen_t *fromlen)
{
	if (!flags || (!buf && len)) {
		errno = EFAULT;
		return -1;
	}
	bool force = (*flags & MSG_VMA_ZCOPY_FORCE) != 0;
	int base = *flags & ~(MSG_VMA_ZCOPY_FORCE | MSG_VMA_ZCOPY);
	*flags = base;
	struct sock_tcp *t;
	struct sock_udp *s;
	extra_sock_get(fd, &t, &s);
	if (t) {
		int rc = extra_tcp_recvfrom_zcopy(t, buf, len, flags, base, force, from, fromlen);
		sock_obj_unpin(&t->obj);
		return rc;
	}
	if (!s) {
		if (force || fd < 0)
			return -1;
		/* Not ours: the kernel's datagram, copied. */
		return (int)OS_CALL(recvfrom, fd, buf, len, base, from, fromlen);
	}
	ssize_t ret;
	const size_t need = sizeof(struct vma_packets_t) + sizeof(struct vma_packet_t) + sizeof(struct iovec);
	struct extra_udp_holds *h = NULL;
	/* Zero copy needs room for one fragment's description, a frame of
	 * ours (not the kernel's) and a hold slot. */
	bool zc_possible = len >= need && !(base & (MSG_PEEK | MSG_ERRQUEUE | MSG_OOB)) && sock_udp_ctx(s) &&
			   (h = extra_udp_holds_get(s)) != NULL;
	if (!zc_possible) {
		if (force) {
			errno = len < need ? EINVAL : (h || !sock_udp_ctx(s)) ? EOPNOTSUPP : ENOMEM;
			ret = -1;
		} else {
			ret = extra_udp_copy_recv(s, buf, len, base, from, fromlen);
		}
		goto out;
	}
	bool nonblock = s->base.nonblocking || (base & MSG_DONTWAIT);
	int rx_poll = sock_udp_rx_poll_budget(s), os_ratio = g_cfg.rx_udp_poll_os_ratio;
	long spins = 0;
	struct os_sig_mark sigmark = os_signal_call_mark();
	for (;;) {
		struct sock_offload *ctx = sock_udp_lock(s);
		if (!ctx)
			break;
		if (__builtin_expect(sock_udp_has_strays(s), 0))
			sock_udp_strays_take_locked(s);
		extra_udp_holds_drain_locked(s, h);
		if (!s->queue.count)
			sock_offload_progress_locked(ctx);
		if (s->queue.count) {
			int hold = extra_udp_hold_reserve_locked(h);
			if (hold < 0) {
				sock_offload_unlock(ctx);
				if (force) {
					errno = ENOBUFS;   /* every hold slot in use */
					ret = -1;
					goto out;
				}
				break;
			}
			/* Its frames stay in this lane while held. */
			__atomic_store_n(&s->mig.ratio, 0, __ATOMIC_RELAXED);
			ret = (ssize_t)extra_udp_zcopy_fill_locked(s, h, hold, buf, len, from, fromlen);
			sock_offload_unlock(ctx);
			s->stats->c.rx_poll_hit++;
			*flags = base | MSG_VMA_ZCOPY;
			goto out;
		}
		sock_offload_unlock(ctx);
		if (s->cb_stage && extra_udp_run_callbacks(s) > 0)
			continue;
		if (nonblock)
			break;
		/* A handler interrupts the wait as it does recv's (EINTR, or a
		 * restart under SA_RESTART unless SO_RCVTIMEO). */
		if (os_signal_interrupts(&sigmark, !s->base.rcvtimeo_ms)) {
			ret = -1;
			goto out;
		}
		/* Poll as recv does (VMA_RX_POLL, a busy-polling permit), and
		 * now and then look at the kernel socket (its datagram is
		 * copied: VMA_RX_UDP_POLL_OS_RATIO). */
		if ((rx_poll < 0 || spins < rx_poll) && ring_spin_permit()) {
			spins++;
			if (os_ratio > 0 && spins % os_ratio == 0) {
				char c;
				if (OS_CALL(recvfrom, s->obj.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL) >= 0)
					break;
			}
			if (g_cfg.rx_poll_yield)
				sched_yield();
			continue;
		}
		spins = 0;
		/* Then wait like recv does (sleeping) without taking the
		 * datagram: a peek. It returns once one is queued here or the
		 * kernel socket has one. */
		struct iovec none = { .iov_base = NULL, .iov_len = 0 };
		struct msghdr peek = { .msg_iov = &none, .msg_iovlen = 1 };
		if (sock_udp_recvmsg_common(s, &peek, base | MSG_PEEK) < 0) {
			ret = -1;
			goto out;
		}
		ctx = sock_udp_lock(s);
		bool ours = ctx && s->queue.count;
		if (ctx)
			sock_offload_unlock(ctx);
		if (!ours)
			break;   /* the kernel socket's datagram */
	}
	/* Nothing of ours to lend: the kernel socket's datagram (copied), or
	 * EAGAIN for a non-blocking call. */
	if (force) {
		errno = nonblock ? EAGAIN : EOPNOTSUPP;
		ret = -1;
	} else {
		ret = extra_udp_copy_recv(s, buf, len, base, from, fromlen);
	}
out:
	extra_udp_put(s);
	if (ret > INT_MAX)
		ret = INT_MAX;
	return (int)ret;
}

int extra_free_packets(int fd, struct vma_packet_t *pkts, size_t count)
{
	struct sock_tcp *t;
	struct sock_udp *s;
	extra_sock_get(fd, &t, &s);
	if (t) {
		int rc = extra_tcp_free_packets(t, pkts, count);
		sock_obj_unpin(&t->obj);
		return rc;
	}
	if (!s) {
		errno = EINVAL;
		return -1;
	}
	if (count && !pkts) {
		extra_udp_put(s);
		errno = EFAULT;
		return -1;
	}
	struct extra_udp_holds *h = __atomic_load_n(&s->holds, __ATOMIC_ACQUIRE);
	int rc = 0;
	if (!sock_offload_usable(__atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE))) {
		/* Exit or a forked child's copy: nothing to give back to. */
		extra_udp_put(s);
		errno = ENOENT;
		return -1;
	}
	for (size_t i = 0; i < count; i++) {
		/* Arrays of vma_packet_t step by its fixed part. */
		const char *pkt = (const char *)pkts + i * sizeof(struct vma_packet_t);
		void *id;
		memcpy(&id, pkt + offsetof(struct vma_packet_t, packet_id), sizeof(id));
		int slot = extra_udp_hold_index(h, id);
		bool no = false;
		if (slot < 0 || !__atomic_compare_exchange_n(&h->slot[slot].returned, &no, true, false, __ATOMIC_ACQ_REL,
							      __ATOMIC_RELAXED)) {
			rc = -1;   /* not a packet of this socket (or freed already) */
			continue;
		}
		/* Onto the returned list, without the lock: the socket's next
		 * locked call gives the frame back. */
		int head = __atomic_load_n(&h->returned_head, __ATOMIC_RELAXED);
		do
			h->slot[slot].next_returned = head;
		while (!__atomic_compare_exchange_n(&h->returned_head, &head, slot, true, __ATOMIC_RELEASE,
						    __ATOMIC_RELAXED));
		__atomic_add_fetch(&h->returned, 1, __ATOMIC_RELAXED);
	}
	if (h && __atomic_load_n(&h->returned, __ATOMIC_RELAXED) >= EXTRA_UDP_RETURN_BATCH) {
		struct sock_offload *ctx = sock_udp_lock_lane(s);
		if (ctx) {
			extra_udp_holds_drain_locked(s, h);
			sock_offload_unlock(ctx);
		}
	}
	extra_udp_put(s);
	if (rc < 0)
		errno = ENOENT;
	return rc;
}
