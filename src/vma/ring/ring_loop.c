/* The loop backend: a ring in memory where every frame sent is received by
 * the same ring at the next tx_flush. No privileges, no interface needed:
 * it lets the unit tests drive the ring contract (buffers, ownership, pool
 * exhaustion, counters) and the ring manager. Flows are only recorded. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/eventfd.h>

#include "log/vlog.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_flow.h"
#include "os/os.h"

#define RING_LOOP_FRAME_SIZE 2048u

struct ring_loop {
	struct ring base;
	struct ring_sizes sizes;
	struct ring_buf **rxq;      /* received, not yet returned by rx_burst */
	uint32_t rxq_head, rxq_count;
	struct ring_buf **txq;      /* sent, delivered at the next flush */
	uint32_t txq_count;
	struct ring_flow *flows;
	unsigned flow_count;
};

static struct ring_loop *ring_loop_of(struct ring *ring)
{
	return (struct ring_loop *)ring;
}

static int ring_loop_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	struct ring_loop *r = ring_loop_of(ring);
	struct timespec now;
	unsigned n = r->rxq_count < max ? r->rxq_count : max;

	if (!n)
		return 0;
	clock_gettime(CLOCK_REALTIME, &now);
	for (unsigned i = 0; i < n; i++) {
		struct ring_buf *buf = r->rxq[r->rxq_head];
		r->rxq_head = (r->rxq_head + 1) & (r->sizes.rx_descs - 1);
		buf->rx_time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
		bufs[i] = buf;
		ring->counters.rx_packets++;
		ring->counters.rx_bytes += buf->len;
	}
	r->rxq_count -= n;
	return (int)n;
}

static struct ring_buf *ring_loop_tx_alloc(struct ring *ring)
{
	struct ring_buf *buf = ring_buf_alloc(ring->tx_pool);

	if (!buf) {
		ring->counters.tx_no_buffer++;
		return NULL;
	}
	buf->flags = RING_BUF_F_TX;
	return buf;
}

static void ring_loop_deliver(struct ring_loop *r, struct ring_buf *sent)
{
	struct ring *ring = &r->base;
	struct ring_buf *buf = ring_buf_alloc(ring->rx_pool);

	if (!buf) {
		ring->counters.rx_fill_empty++; /* what a NIC with no posted buffer does */
		return;
	}
	if (r->rxq_count == r->sizes.rx_descs) {
		ring->counters.rx_dropped++;
		ring_buf_free(buf);
		return;
	}
	buf->flags = RING_BUF_F_RX;
	memcpy(buf->data, sent->data, sent->len);
	buf->len = buf->tot_len = sent->len;
	r->rxq[(r->rxq_head + r->rxq_count++) & (r->sizes.rx_descs - 1)] = buf;
}

static void ring_loop_tx_flush(struct ring *ring)
{
	struct ring_loop *r = ring_loop_of(ring);
	uint64_t one = 1;

	if (!r->txq_count)
		return;
	for (uint32_t i = 0; i < r->txq_count; i++) {
		ring_loop_deliver(r, r->txq[i]);
		ring_buf_free(r->txq[i]);
	}
	ring->counters.tx_completions += r->txq_count;
	r->txq_count = 0;
	ring->counters.tx_doorbells++;
	if (os_efd_write(ring->wait_fd, one) != 0)
		vlog_debug("ring: %s: loop eventfd write failed", ring->ifname);
}

static int ring_loop_tx_send(struct ring *ring, struct ring_buf *buf)
{
	struct ring_loop *r = ring_loop_of(ring);
	int err = 0;

	if (buf->pool != ring->tx_pool)
		err = -EINVAL;
	else if (buf->next || !buf->len || buf->data < buf->head || buf->data + buf->len > buf->head + buf->size)
		err = -EMSGSIZE;
	else if (r->txq_count == r->sizes.tx_frames) {
		ring->counters.tx_no_buffer++;
		err = -ENOBUFS;
	}
	if (err) {
		ring_buf_free(buf);
		return err;
	}
	r->txq[r->txq_count++] = buf;
	ring->counters.tx_packets++;
	ring->counters.tx_bytes += buf->len;
	if (r->txq_count >= r->sizes.tx_batch)
		ring_loop_tx_flush(ring);
	return 0;
}

static int ring_loop_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_loop *r = ring_loop_of(ring);
	union ring_flow_key key;
	int kind = ring_flow_key(flow, &key);

	if (kind < 0)
		return kind;
	for (unsigned i = 0; i < r->flow_count; i++)
		if (ring_flow_same(&r->flows[i], flow))
			return -EEXIST;
	struct ring_flow *grown = realloc(r->flows, (r->flow_count + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	r->flows = grown;
	r->flows[r->flow_count++] = *flow;
	return 0;
}

static int ring_loop_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_loop *r = ring_loop_of(ring);

	for (unsigned i = 0; i < r->flow_count; i++) {
		if (ring_flow_same(&r->flows[i], flow)) {
			r->flows[i] = r->flows[--r->flow_count];
			return 0;
		}
	}
	return -ENOENT;
}

static int ring_loop_wait_arm(struct ring *ring)
{
	struct ring_loop *r = ring_loop_of(ring);
	uint64_t value;

	if (r->rxq_count)
		return 1;
	while (os_efd_read(ring->wait_fd, &value) == 0)
		;
	return r->rxq_count ? 1 : 0;
}

/* Frames to receive, or sent ones the next flush turns into frames. */
static bool ring_loop_rx_maybe(const struct ring *ring)
{
	const struct ring_loop *r = (const struct ring_loop *)ring;

	return __atomic_load_n(&r->rxq_count, __ATOMIC_ACQUIRE) != 0 ||
	       __atomic_load_n(&r->txq_count, __ATOMIC_ACQUIRE) != 0;
}

static void ring_loop_read_counters(struct ring *ring, struct ring_counters *out)
{
	*out = ring->counters;
}

static void ring_loop_close(struct ring *ring)
{
	struct ring_loop *r = ring_loop_of(ring);

	/* Frames queued inside the ring go back first; what is left is held. */
	for (uint32_t i = 0; i < r->txq_count; i++)
		ring_buf_free(r->txq[i]);
	while (r->rxq_count) {
		ring_buf_free(r->rxq[r->rxq_head]);
		r->rxq_head = (r->rxq_head + 1) & (r->sizes.rx_descs - 1);
		r->rxq_count--;
	}
	unsigned held = (ring->rx_pool ? ring_buf_pool_in_use(ring->rx_pool) : 0) +
			(ring->tx_pool ? ring_buf_pool_in_use(ring->tx_pool) : 0);
	if (held) {
		vlog_warn("ring: %s: queue %u closed while %u buffers are still held; their pools stay allocated",
			  ring->ifname, ring->queue, held);
		ring_buf_pool_orphan(ring->rx_pool);
		ring_buf_pool_orphan(ring->tx_pool);
	} else {
		ring_buf_pool_destroy(ring->rx_pool);
		ring_buf_pool_destroy(ring->tx_pool);
	}
	if (ring->wait_fd >= 0)
		os_close_nocancel(ring->wait_fd);
	free(r->rxq);
	free(r->txq);
	free(r->flows);
	free(r);
}

static const struct ring_ops ring_loop_ops = {
	.name = "loop",
	.rx_burst = ring_loop_rx_burst,
	.tx_alloc = ring_loop_tx_alloc,
	.tx_send = ring_loop_tx_send,
	.tx_flush = ring_loop_tx_flush,
	.attach_flow = ring_loop_attach_flow,
	.detach_flow = ring_loop_detach_flow,
	/* Loop rings steer nothing outside themselves: forgetting is detaching. */
	.forget_flow = ring_loop_detach_flow,
	.wait_arm = ring_loop_wait_arm,
	.rx_maybe = ring_loop_rx_maybe,
	.read_counters = ring_loop_read_counters,
	.close = ring_loop_close,
};

struct ring *ring_loop_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	struct ring_loop *r = calloc(1, sizeof(*r));
	char name[32];

	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->base.ops = &ring_loop_ops;
	snprintf(r->base.ifname, sizeof(r->base.ifname), "%s", ifname);
	r->base.ifindex = if_nametoindex(ifname);
	r->base.queue = queue;
	r->base.mtu = 1500;
	ring_sizes_compute(cfg, RING_LOOP_FRAME_SIZE, &r->sizes);
	r->base.wait_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->rxq = calloc(r->sizes.rx_descs, sizeof(*r->rxq));
	r->txq = calloc(r->sizes.tx_frames, sizeof(*r->txq));
	snprintf(name, sizeof(name), "%.15s:%u rx", ifname, queue);
	r->base.rx_pool = ring_buf_pool_create(name, r->sizes.rx_frames, RING_LOOP_FRAME_SIZE);
	snprintf(name, sizeof(name), "%.15s:%u tx", ifname, queue);
	r->base.tx_pool = ring_buf_pool_create(name, r->sizes.tx_frames, RING_LOOP_FRAME_SIZE);
	if (r->base.wait_fd < 0 || !r->rxq || !r->txq || !r->base.rx_pool || !r->base.tx_pool) {
		vlog_warn("ring: %s: cannot create the loop ring: out of memory", ifname);
		ring_loop_close(&r->base);
		errno = ENOMEM;
		return NULL;
	}
	return &r->base;
}
