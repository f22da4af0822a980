/* The AF_XDP ring backend: one XSK per ring with its own UMEM.
 *
 * The UMEM is rx_frames RX frames followed by tx_frames TX frames (sizes
 * from ring_sizes_compute). Each frame has one struct ring_buf for its whole
 * life: RX frame i is rx_pool descriptor i (addr / frame size), so rx_burst
 * hands out descriptors without allocating. An RX frame is in the fill ring
 * or the kernel, held by the application, or freed and waiting in `refill`
 * for the next batch to the fill ring. A TX frame is free (tx_pool's free
 * list), being written by the application, or in flight until its
 * completion frees it. Neither side can starve the other.
 * need_wakeup is on: the RX and TX paths make a syscall only when the
 * kernel asks for one. In copy mode (veth, generic XDP) the kernel always
 * asks on TX and the syscall does the transmit, so sends are batched under
 * the adaptive doorbell policy of tx_send_done (docs/ring.md). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/if_xdp.h>

#include <bpf/bpf.h>
#include <xdp/xsk.h>

#include "log/vlog.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_flow.h"
#include "ring/ring_xdp_maps.h"
#include "ring/ring_xdp_prog.h"

/* Ethernet starts 2 bytes into a 4-aligned spot, so the IP header behind it
 * is 4-byte aligned, on RX (UMEM frame headroom) and TX (pool headroom).
 * RING_XDP_FRAME_SIZE is in ring_xdp_maps.h: the program knows it too. */
#define RING_XDP_ALIGN_PAD RING_XDP_FRAME_HEADROOM

/* Adaptive doorbell: a send that comes less than BURST_GAP after the
 * previous one is part of a burst and may wait; no frame waits longer than
 * HOLD_MAX for a doorbell once another send comes along (the pollers, the
 * sleepers and the internal thread flush the rest). A ping-pong never waits:
 * its next step is a receive, which flushes first. */
#define RING_XDP_TX_BURST_GAP_NS 10000u
#define RING_XDP_TX_HOLD_MAX_NS 50000u
/* The kernel's copy-mode transmit handles at most 32 descriptors per call
 * (then EAGAIN); one doorbell may need a few calls. */
#define RING_XDP_TX_KERNEL_BUDGET 32u

struct ring_xdp {
	struct ring base;
	struct ring_xdp_prog *prog;
	void *area;
	size_t area_size;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod tx;
	struct ring_sizes sizes;
	uint64_t *refill;        /* freed RX frames not yet back in the fill ring */
	uint32_t refill_count;
	/* Per RX frame: 1 while it is in the fill ring or the kernel. A
	 * frame handed back twice would overrun the fill ring and `refill`;
	 * the guards below count such events instead. */
	uint8_t *rx_in_kernel;
	uint64_t rx_double_returns; /* freed while the kernel had it: not refilled */
	uint64_t rx_unknown;        /* delivered while we had it: dropped */
	uint64_t fill_deferred;     /* refills that left frames for the next one */
	uint32_t tx_unflushed;    /* queued, the kernel not yet kicked about them */
	uint32_t tx_in_flight;
	uint64_t tx_last_send_ns; /* CLOCK_MONOTONIC of the last tx_send_done */
	uint64_t tx_held_since_ns; /* when the oldest held frame was held; 0 = none */
	uint64_t fill_empty_seen; /* kernel's count at the last read_counters */
	struct ring_flow *flows; /* attached by this ring, detached on close */
	unsigned flow_count;
	unsigned flow_cap;
};

static struct ring_xdp *ring_xdp_of(struct ring *ring)
{
	return (struct ring_xdp *)ring;
}

/* rx_pool's recycle hook: the last reference to an RX frame went away. */
static void ring_xdp_rx_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	struct ring_xdp *r = ring_buf_pool_owner(pool);

	if (!r) /* the ring is closed, the frame just stays where it is */
		return;
	if (r->rx_in_kernel[buf - pool->bufs]) {
		r->rx_double_returns++;
		return;
	}
	r->refill[r->refill_count++] = buf->handle;
}

static const struct ring_buf_pool_ops ring_xdp_rx_pool_ops = {
	.recycle = ring_xdp_rx_recycle,
};

static uint32_t ring_xdp_frame_of(uint64_t addr)
{
	return (uint32_t)(addr / RING_XDP_FRAME_SIZE);
}

/* The fill ring has a slot for every RX frame, yet it can look full: the
 * kernel publishes its consumer index lazily (at its next flush), so a frame
 * it took may reach us, be freed and come back here before the kernel says
 * it took it. What does not fit waits in `refill` for the next call. */
static void ring_xdp_refill(struct ring_xdp *r)
{
	uint32_t idx = 0, n = r->refill_count;
	uint32_t room = xsk_prod_nb_free(&r->fill, n);

	if (room < n) {
		r->fill_deferred++;
		n = room;
	}
	if (!n)
		return;
	xsk_ring_prod__reserve(&r->fill, n, &idx);
	for (uint32_t i = 0; i < n; i++) {
		*xsk_ring_prod__fill_addr(&r->fill, idx + i) = r->refill[i];
		r->rx_in_kernel[ring_xdp_frame_of(r->refill[i])] = 1;
	}
	xsk_ring_prod__submit(&r->fill, n);
	r->refill_count -= n;
	memmove(r->refill, r->refill + n, r->refill_count * sizeof(*r->refill));
	r->base.counters.rx_refills++;
}

static void ring_xdp_kick_rx(struct ring_xdp *r)
{
	if (xsk_ring_prod__needs_wakeup(&r->fill)) {
		recvfrom(xsk_socket__fd(r->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		r->base.counters.rx_wakeups++;
	}
}

static void ring_xdp_reap_completions(struct ring_xdp *r)
{
	uint32_t idx;
	uint32_t n = xsk_ring_cons__peek(&r->comp, r->sizes.tx_frames, &idx);

	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = *xsk_ring_cons__comp_addr(&r->comp, idx + i);
		ring_buf_free(ring_buf_pool_by_handle_inline(r->base.tx_pool, addr));
	}
	if (n) {
		xsk_ring_cons__release(&r->comp, n);
		r->tx_in_flight -= n;
		r->base.counters.tx_completions += n;
	}
}

static int ring_xdp_flow_map(struct ring_xdp *r, int kind)
{
	static const enum ring_xdp_map maps[] = {
		[RING_FLOW_5TUPLE] = RING_XDP_MAP_FLOWS5,
		[RING_FLOW_3TUPLE] = RING_XDP_MAP_FLOWS3,
		[RING_FLOW_GROUP] = RING_XDP_MAP_GROUPS,
	};
	return ring_xdp_prog_map_fd(r->prog, maps[kind]);
}

static int ring_xdp_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct ring_buf_pool *pool = ring->rx_pool;
	struct timespec now;
	uint32_t idx;

	if (r->refill_count >= r->sizes.rx_batch)
		ring_xdp_refill(r);
	uint32_t n = xsk_ring_cons__peek(&r->rx, max, &idx);
	if (!n) {
		/* Idle: give back whatever was freed, however few. */
		if (r->refill_count)
			ring_xdp_refill(r);
		ring_xdp_kick_rx(r);
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	uint32_t got = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *desc = xsk_ring_cons__rx_desc(&r->rx, idx + i);
		/* Aligned mode: addr is frame start + headroom; the shift in
		 * by_handle drops the offset. */
		struct ring_buf *buf = ring_buf_pool_by_handle_inline(pool, desc->addr);
		uint32_t frame = ring_xdp_frame_of(desc->addr);
		if (__builtin_expect(!r->rx_in_kernel[frame], 0)) {
			/* Someone holds it: retaking it would corrupt them. */
			r->rx_unknown++;
			continue;
		}
		r->rx_in_kernel[frame] = 0;
		ring_buf_pool_take_inline(pool, buf, RING_BUF_F_RX);
		buf->data = (uint8_t *)r->area + desc->addr;
		buf->len = desc->len;
		buf->tot_len = desc->len;
		buf->rx_time_ns = now_ns;
		bufs[got++] = buf;
		ring->counters.rx_bytes += desc->len;
	}
	xsk_ring_cons__release(&r->rx, n);
	ring->counters.rx_packets += got;
	return (int)got;
}

static void ring_xdp_kick_tx(struct ring_xdp *r);

static struct ring_buf *ring_xdp_tx_alloc(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct ring_buf_pool *pool = ring->tx_pool;

	if (!pool->counters.free_now) {
		/* Held frames complete only once the kernel has them. */
		ring_xdp_kick_tx(r);
		ring_xdp_reap_completions(r);
	}
	if (!pool->counters.free_now) {
		pool->counters.empty++;
		ring->counters.tx_no_buffer++;
		return NULL;
	}
	struct ring_buf *buf = pool->free_list[pool->counters.free_now - 1];
	ring_buf_pool_take_inline(pool, buf, RING_BUF_F_TX);
	return buf;
}

/* Descriptors in the TX ring the kernel has not consumed yet. */
static uint32_t ring_xdp_tx_unconsumed(struct ring_xdp *r)
{
	return r->sizes.tx_frames - xsk_prod_nb_free(&r->tx, r->sizes.tx_frames);
}

static void ring_xdp_kick_tx(struct ring_xdp *r)
{
	r->tx_held_since_ns = 0;
	if (!r->tx_unflushed)
		return;
	if (!xsk_ring_prod__needs_wakeup(&r->tx)) {
		r->tx_unflushed = 0;   /* the kernel is consuming on its own */
		return;
	}
	/* EAGAIN: the per-call budget ran out (copy mode) or the device is
	 * busy; call again while that makes progress. */
	uint32_t tries = r->tx_unflushed / RING_XDP_TX_KERNEL_BUDGET + 2;
	do {
		r->base.counters.tx_doorbells++;
		if (sendto(xsk_socket__fd(r->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0) >= 0 || errno != EAGAIN)
			break;
	} while (--tries);
	/* Whatever the kernel left stays counted, so the next flush (a
	 * poller, a sleeper, the internal thread) kicks again: no frame
	 * waits forever. */
	r->tx_unflushed = ring_xdp_tx_unconsumed(r);
}

static uint64_t ring_xdp_now_ns(void)
{
	struct timespec ts;

	/* vDSO, no syscall with a TSC clocksource. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Copies the rest of buf's chain behind its first part (AF_XDP sends one
 * frame per descriptor) and frees those parts. */
static int ring_xdp_linearize(struct ring_buf *buf)
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

static int ring_xdp_tx_send(struct ring *ring, struct ring_buf *buf)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	uint32_t idx;
	int err = 0;

	if (buf->pool != ring->tx_pool)
		err = -EINVAL;
	else if (buf->next)
		err = ring_xdp_linearize(buf);
	if (!err && (buf->data < buf->head || buf->data + buf->len > buf->head + buf->size || !buf->len))
		err = -EMSGSIZE;
	if (!err && xsk_ring_prod__reserve(&r->tx, 1, &idx) != 1) {
		ring->counters.tx_no_buffer++;
		err = -ENOBUFS;
	}
	if (err) {
		ring_buf_free(buf);
		return err;
	}
	struct xdp_desc *desc = xsk_ring_prod__tx_desc(&r->tx, idx);
	desc->addr = (uint64_t)(buf->data - (uint8_t *)r->area);
	desc->len = buf->len;
	desc->options = 0;
	xsk_ring_prod__submit(&r->tx, 1);
	r->tx_in_flight++;
	ring->counters.tx_packets++;
	ring->counters.tx_bytes += buf->len;
	if (++r->tx_unflushed >= r->sizes.tx_batch)
		ring_xdp_kick_tx(r);
	return 0;
}

static void ring_xdp_tx_flush(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	ring_xdp_kick_tx(r);
	ring_xdp_reap_completions(r);
}

static void ring_xdp_tx_send_done(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	uint64_t now = ring_xdp_now_ns();
	uint64_t prev = r->tx_last_send_ns;

	r->tx_last_send_ns = now;
	if (!r->tx_unflushed)
		return;   /* tx_send rang already (batch full) */
	if (now - prev >= RING_XDP_TX_BURST_GAP_NS ||
	    (r->tx_held_since_ns && now - r->tx_held_since_ns >= RING_XDP_TX_HOLD_MAX_NS)) {
		ring_xdp_tx_flush(ring);
		return;
	}
	if (!r->tx_held_since_ns)
		r->tx_held_since_ns = now;
	ring->counters.tx_held++;
}

static unsigned ring_xdp_tx_pending(const struct ring *ring)
{
	return ((const struct ring_xdp *)ring)->tx_unflushed;
}

static int ring_xdp_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	union ring_flow_key key;
	__u32 value = ring->queue;
	int kind = ring_flow_key(flow, &key);

	if (kind < 0)
		return kind;
	if (r->flow_count == r->flow_cap) {
		unsigned cap = r->flow_cap ? r->flow_cap * 2 : 8;
		struct ring_flow *grown = realloc(r->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		r->flows = grown;
		r->flow_cap = cap;
	}
	/* BPF_NOEXIST: a flow belongs to one ring; a second owner is a bug. */
	if (bpf_map_update_elem(ring_xdp_flow_map(r, kind), &key, &value, BPF_NOEXIST) != 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	r->flows[r->flow_count++] = *flow;
	return 0;
}

static int ring_xdp_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	union ring_flow_key key;
	int kind = ring_flow_key(flow, &key);

	if (kind < 0)
		return kind;
	for (unsigned i = 0; i < r->flow_count; i++) {
		if (ring_flow_same(&r->flows[i], flow)) {
			r->flows[i] = r->flows[--r->flow_count];
			return bpf_map_delete_elem(ring_xdp_flow_map(r, kind), &key) == 0 ? 0 : -errno;
		}
	}
	return -ENOENT;
}

static int ring_xdp_wait_arm(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	if (xsk_cons_nb_avail(&r->rx, 1))
		return 1;
	/* Frames freed since the last burst must reach the kernel before we
	 * sleep, or it may have nothing to receive the awaited packet into. */
	if (r->refill_count)
		ring_xdp_refill(r);
	/* Without a fill-ring kick the kernel may never deliver the packet
	 * that poll() is about to wait for. */
	ring_xdp_kick_rx(r);
	return xsk_cons_nb_avail(&r->rx, 1) ? 1 : 0;
}

static void ring_xdp_read_counters(struct ring *ring, struct ring_counters *out)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	struct xdp_statistics st;
	socklen_t len = sizeof(st);

	*out = ring->counters;
	memset(&st, 0, sizeof(st));
	if (getsockopt(xsk_socket__fd(r->xsk), SOL_XDP, XDP_STATISTICS, &st, &len) == 0) {
		out->rx_dropped = st.rx_dropped + st.rx_invalid_descs + st.rx_ring_full;
		out->rx_fill_empty = st.rx_fill_ring_empty_descs;
		/* The kernel counts the packets it could not receive for want
		 * of a frame: that is the RX pool's "empty". */
		if (st.rx_fill_ring_empty_descs > r->fill_empty_seen) {
			ring_buf_pool_count_empty(ring->rx_pool, st.rx_fill_ring_empty_descs - r->fill_empty_seen);
			r->fill_empty_seen = st.rx_fill_ring_empty_descs;
		}
	}
}

/* Buffers the application still holds (TX frames in flight are the
 * kernel's, and go away with the socket). */
static unsigned ring_xdp_held(struct ring_xdp *r)
{
	unsigned held = 0;

	if (r->base.rx_pool)
		held += ring_buf_pool_in_use(r->base.rx_pool);
	if (r->base.tx_pool)
		held += ring_buf_pool_in_use(r->base.tx_pool) - r->tx_in_flight;
	return held;
}

static void ring_xdp_destroy(struct ring_xdp *r)
{
	unsigned held;

	if (r->xsk) {
		__u32 key = r->base.queue;
		bpf_map_delete_elem(ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_XSKS), &key);
		ring_xdp_kick_tx(r);   /* held frames still leave */
		ring_xdp_reap_completions(r);
		xsk_socket__delete(r->xsk);
	}
	if (r->umem)
		xsk_umem__delete(r->umem);
	if (r->rx_double_returns || r->rx_unknown)
		vlog_warn("ring: %s: queue %u: %llu RX frames freed twice and %llu delivered twice were ignored",
			  r->base.ifname, r->base.queue, (unsigned long long)r->rx_double_returns,
			  (unsigned long long)r->rx_unknown);
	if (r->fill_deferred)
		vlog_debug("ring: %s: queue %u: %llu refills waited for the kernel's fill consumer", r->base.ifname,
			   r->base.queue, (unsigned long long)r->fill_deferred);
	held = ring_xdp_held(r);
	if (held) {
		/* Freeing the memory under its holders would crash them later:
		 * keep the frames and the pools (their hooks now only count). */
		vlog_warn("ring: %s: queue %u closed while %u buffers are still held; their %zu bytes stay allocated",
			  r->base.ifname, r->base.queue, held, r->area_size);
		ring_buf_pool_set_owner(r->base.rx_pool, NULL);
		ring_buf_pool_set_owner(r->base.tx_pool, NULL);
	} else {
		if (r->area)
			munmap(r->area, r->area_size);
		ring_buf_pool_destroy(r->base.rx_pool);
		ring_buf_pool_destroy(r->base.tx_pool);
	}
	ring_xdp_prog_put(r->prog);
	free(r->refill);
	free(r->rx_in_kernel);
	free(r->flows);
	free(r);
}

static void ring_xdp_close(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	while (r->flow_count) {
		struct ring_flow flow = r->flows[r->flow_count - 1];
		ring_xdp_detach_flow(ring, &flow);
	}
	ring_xdp_destroy(r);
}

static const struct ring_ops ring_xdp_ops = {
	.name = "xdp",
	.rx_burst = ring_xdp_rx_burst,
	.tx_alloc = ring_xdp_tx_alloc,
	.tx_send = ring_xdp_tx_send,
	.tx_flush = ring_xdp_tx_flush,
	.tx_send_done = ring_xdp_tx_send_done,
	.tx_pending = ring_xdp_tx_pending,
	.attach_flow = ring_xdp_attach_flow,
	.detach_flow = ring_xdp_detach_flow,
	.wait_arm = ring_xdp_wait_arm,
	.read_counters = ring_xdp_read_counters,
	.close = ring_xdp_close,
};

static void ring_xdp_read_link(struct ring *ring)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ring->ifname);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0)
		memcpy(ring->mac, ifr.ifr_hwaddr.sa_data, sizeof(ring->mac));
	if (ioctl(fd, SIOCGIFMTU, &ifr) == 0)
		ring->mtu = (uint32_t)ifr.ifr_mtu;
	close(fd);
}

/* Creates the UMEM, its two pools and the XSK, and registers the XSK in the
 * xsks map. */
static int ring_xdp_socket(struct ring_xdp *r)
{
	const struct ring_sizes *sz = &r->sizes;
	const uint32_t frames = sz->rx_frames + sz->tx_frames;
	struct xsk_umem_config ucfg = {
		.fill_size = sz->rx_frames,
		.comp_size = sz->tx_frames,
		.frame_size = RING_XDP_FRAME_SIZE,
		.frame_headroom = RING_XDP_ALIGN_PAD,
		.flags = 0,
	};
	struct xsk_socket_config scfg = {
		.rx_size = sz->rx_descs,
		.tx_size = sz->tx_frames,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
		.xdp_flags = 0,
		.bind_flags = XDP_USE_NEED_WAKEUP,
	};
	char name[32];
	uint32_t idx;
	int err;

	r->area_size = (size_t)frames * RING_XDP_FRAME_SIZE;
	r->area = mmap(NULL, r->area_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (r->area == MAP_FAILED) {
		r->area = NULL;
		return -errno;
	}
	r->refill = calloc(sz->rx_frames, sizeof(*r->refill));
	r->rx_in_kernel = calloc(sz->rx_frames, 1);
	snprintf(name, sizeof(name), "%.15s:%u rx", r->base.ifname, r->base.queue);
	r->base.rx_pool = ring_buf_pool_create_over(name, sz->rx_frames, r->area, RING_XDP_FRAME_SIZE, 0, 0,
						    &ring_xdp_rx_pool_ops, r);
	snprintf(name, sizeof(name), "%.15s:%u tx", r->base.ifname, r->base.queue);
	r->base.tx_pool = ring_buf_pool_create_over(name, sz->tx_frames,
						    (uint8_t *)r->area + (size_t)sz->rx_frames * RING_XDP_FRAME_SIZE,
						    RING_XDP_FRAME_SIZE, RING_XDP_ALIGN_PAD,
						    (uint64_t)sz->rx_frames * RING_XDP_FRAME_SIZE, NULL, r);
	if (!r->refill || !r->rx_in_kernel || !r->base.rx_pool || !r->base.tx_pool)
		return -ENOMEM;
	err = xsk_umem__create(&r->umem, r->area, r->area_size, &r->fill, &r->comp, &ucfg);
	if (err) {
		r->umem = NULL;
		return err;
	}
	err = xsk_socket__create(&r->xsk, r->base.ifname, r->base.queue, r->umem, &r->rx, &r->tx, &scfg);
	if (err) {
		r->xsk = NULL;
		return err;
	}
	/* Every RX frame starts in the fill ring. */
	if (xsk_ring_prod__reserve(&r->fill, sz->rx_frames, &idx) != sz->rx_frames)
		return -ENOMEM;
	for (uint32_t i = 0; i < sz->rx_frames; i++) {
		*xsk_ring_prod__fill_addr(&r->fill, idx + i) = (uint64_t)i * RING_XDP_FRAME_SIZE;
		r->rx_in_kernel[i] = 1;
	}
	xsk_ring_prod__submit(&r->fill, sz->rx_frames);

	int xsk_fd = xsk_socket__fd(r->xsk);
	__u32 key = r->base.queue;
	if (bpf_map_update_elem(ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_XSKS), &key, &xsk_fd, 0) != 0)
		return -errno;
	r->base.wait_fd = xsk_fd;
	return 0;
}

struct ring *ring_xdp_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	struct ring_xdp *r;
	unsigned ifindex = if_nametoindex(ifname);
	int err;

	if (!ifindex) {
		vlog_warn("ring: %s: no such interface; traffic stays on the kernel path", ifname);
		errno = ENODEV;
		return NULL;
	}
	if (queue >= RING_XDP_MAX_QUEUES) {
		vlog_warn("ring: %s: queue %u out of range (max %u); traffic stays on the kernel path",
			  ifname, queue, RING_XDP_MAX_QUEUES - 1);
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->base.ops = &ring_xdp_ops;
	snprintf(r->base.ifname, sizeof(r->base.ifname), "%s", ifname);
	r->base.ifindex = ifindex;
	r->base.queue = queue;
	r->base.wait_fd = -1;
	ring_sizes_compute(cfg, RING_XDP_FRAME_SIZE, &r->sizes);
	ring_xdp_read_link(&r->base);

	r->prog = ring_xdp_prog_get(ifname, ifindex, cfg ? cfg->force_skb_mode : 0);
	if (!r->prog) {
		err = errno;
		ring_xdp_destroy(r);
		errno = err;
		return NULL;
	}
	ring_xdp_quiet_libs(1);
	err = ring_xdp_socket(r);
	ring_xdp_quiet_libs(0);
	if (err) {
		const char *lib = ring_xdp_lib_message();
		if (err == -EINVAL && !*lib)
			lib = "queue does not exist?";
		vlog_warn("ring: %s: cannot open AF_XDP socket on queue %u: %s%s%s%s; traffic stays on the kernel path",
			  ifname, queue, ring_xdp_reason(err), *lib ? " (" : "", lib, *lib ? ")" : "");
		ring_xdp_destroy(r);
		errno = -err;
		return NULL;
	}
	vlog_debug("ring: %s: queue %u open (xdp %s mode, %u rx + %u tx frames of %u bytes, %u rx descriptors)",
		   ifname, queue, ring_xdp_prog_mode(r->prog), r->sizes.rx_frames, r->sizes.tx_frames,
		   RING_XDP_FRAME_SIZE, r->sizes.rx_descs);
	return &r->base;
}
