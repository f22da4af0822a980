/* A ring over every queue of a multi-queue interface (docs/ring.md,
 * "Multi-queue interfaces").
 *
 * A NIC with several queues (and a veth made with several) spreads flows
 * over its queues by hash (RSS); an AF_XDP socket only receives what
 * arrives on the queue it is bound to. So that a flow attached once is
 * received whichever queue the hash picks, a lane opens one member ring
 * per queue, all under one member slot (the steering program looks up the
 * XSK at queue * RING_XDP_MAX_MEMBERS + slot), and the stack sees them as
 * one ring: RX polls the members in turn, TX, flows and the pools are the
 * first member's (any queue may send), the wait fd is an epoll set of the
 * members' wait fds, the counters are the members' sums. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "log/vlog.h"
#include "ring/ring.h"
#include "os/os.h"

/* A member's share of the memory cap never goes below this: a queue with
 * a handful of frames would drop bursts. */
#define RING_MULTI_MIN_MEMBER_MEM ((size_t)4 << 20)

struct ring_multi {
	struct ring base;
	unsigned count;
	unsigned next;            /* the member the next rx_burst starts with */
	int epoll_fd;             /* every member's wait fd: base.wait_fd */
	struct ring *members[];   /* members[0] sends and steers */
};

static struct ring_multi *ring_multi_of(struct ring *ring)
{
	return (struct ring_multi *)ring;
}

static struct ring *ring_multi_first(struct ring *ring)
{
	return ring_multi_of(ring)->members[0];
}

/* Starts with a different member each call, so a busy queue cannot starve
 * the others when max is reached. */
static int ring_multi_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	struct ring_multi *r = ring_multi_of(ring);
	unsigned got = 0;

	for (unsigned i = 0; i < r->count && got < max; i++) {
		struct ring *m = r->members[(r->next + i) % r->count];
		int n = ring_rx_burst(m, bufs + got, max - got);
		if (n > 0)
			got += (unsigned)n;
	}
	r->next = r->next + 1 < r->count ? r->next + 1 : 0;
	return (int)got;
}

static struct ring_buf *ring_multi_tx_alloc(struct ring *ring)
{
	return ring_tx_alloc(ring_multi_first(ring));
}

static int ring_multi_tx_send(struct ring *ring, struct ring_buf *buf)
{
	return ring_tx_send(ring_multi_first(ring), buf);
}

/* The other members never send, but their completion of nothing costs
 * nothing; only the first has frames to reap. */
static void ring_multi_tx_flush(struct ring *ring)
{
	ring_tx_flush(ring_multi_first(ring));
}

static void ring_multi_tx_send_done(struct ring *ring, bool more)
{
	ring_tx_send_done(ring_multi_first(ring), more);
}

static void ring_multi_defer_kicks(struct ring *ring, bool *owed)
{
	ring_defer_kicks(ring_multi_first(ring), owed);
}

static void ring_multi_tx_kick(struct ring *ring)
{
	ring_tx_kick(ring_multi_first(ring));
}

static unsigned ring_multi_tx_pending(const struct ring *ring)
{
	return ring_tx_pending(((const struct ring_multi *)ring)->members[0]);
}

/* The flow's value is the slot all members share: attached once, it is
 * steered on every queue. */
static int ring_multi_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring_attach_flow(ring_multi_first(ring), flow);
}

static int ring_multi_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring_detach_flow(ring_multi_first(ring), flow);
}

static int ring_multi_forget_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring_forget_flow(ring_multi_first(ring), flow);
}

static bool ring_multi_share_admit(struct ring *ring, const struct ring_flow *three, uint32_t remote_ip,
				   uint16_t remote_port)
{
	return ring_share_admit(ring_multi_first(ring), three, remote_ip, remote_port);
}

static int ring_multi_wait_arm(struct ring *ring)
{
	struct ring_multi *r = ring_multi_of(ring);

	for (unsigned i = 0; i < r->count; i++) {
		int armed = ring_wait_arm(r->members[i]);
		if (armed != 0)
			return armed;
	}
	return 0;
}

static bool ring_multi_rx_maybe(const struct ring *ring)
{
	const struct ring_multi *r = (const struct ring_multi *)ring;

	for (unsigned i = 0; i < r->count; i++)
		if (ring_rx_maybe(r->members[i]))
			return true;
	return false;
}

static void ring_multi_read_counters(struct ring *ring, struct ring_counters *out)
{
	struct ring_multi *r = ring_multi_of(ring);

	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < r->count; i++) {
		struct ring_counters c;
		ring_read_counters(r->members[i], &c);
		out->rx_packets += c.rx_packets;
		out->rx_bytes += c.rx_bytes;
		out->rx_dropped += c.rx_dropped;
		out->rx_fill_empty += c.rx_fill_empty;
		out->tx_packets += c.tx_packets;
		out->tx_bytes += c.tx_bytes;
		out->tx_no_buffer += c.tx_no_buffer;
		out->tx_doorbells += c.tx_doorbells;
		out->tx_held += c.tx_held;
		out->tx_stranded += c.tx_stranded;
		out->rx_wakeups += c.rx_wakeups;
		out->rx_refills += c.rx_refills;
		out->tx_completions += c.tx_completions;
	}
	ring->counters = *out;
}

static void ring_multi_free(struct ring_multi *r)
{
	if (r->epoll_fd >= 0)
		os_close_nocancel(r->epoll_fd);
	free(r);
}

/* Members close last to first: the first holds the flows, and detaching
 * them while the other queues still receive would hand those packets to
 * the kernel for a moment for nothing. */
static void ring_multi_close(struct ring *ring)
{
	struct ring_multi *r = ring_multi_of(ring);

	for (unsigned i = r->count; i-- > 0;)
		ring_close(r->members[i]);
	ring_multi_free(r);
}

/* In a forked child: the epoll descriptor is a copy of the parent's (one
 * epoll instance); closing the copy leaves the parent's set as it was. */
static void ring_multi_forget(struct ring *ring)
{
	struct ring_multi *r = ring_multi_of(ring);

	for (unsigned i = 0; i < r->count; i++)
		if (r->members[i]->ops->forget)
			r->members[i]->ops->forget(r->members[i]);
	ring_multi_free(r);
}

static const struct ring_ops ring_multi_ops = {
	.name = "multi",
	.rx_burst = ring_multi_rx_burst,
	.tx_alloc = ring_multi_tx_alloc,
	.tx_send = ring_multi_tx_send,
	.tx_flush = ring_multi_tx_flush,
	.tx_send_done = ring_multi_tx_send_done,
	.defer_kicks = ring_multi_defer_kicks,
	.tx_kick = ring_multi_tx_kick,
	.tx_pending = ring_multi_tx_pending,
	.attach_flow = ring_multi_attach_flow,
	.detach_flow = ring_multi_detach_flow,
	.forget_flow = ring_multi_forget_flow,
	.share_admit = ring_multi_share_admit,
	.wait_arm = ring_multi_wait_arm,
	.rx_maybe = ring_multi_rx_maybe,
	.read_counters = ring_multi_read_counters,
	.close = ring_multi_close,
	.forget = ring_multi_forget,
};

struct ring *ring_multi_wrap(struct ring **members, unsigned count)
{
	struct ring_multi *r;

	if (!count) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r) + count * sizeof(r->members[0]));
	if (!r)
		return NULL;
	r->epoll_fd = OS_CALL(epoll_create1, EPOLL_CLOEXEC);
	if (r->epoll_fd < 0) {
		free(r);
		return NULL;
	}
	for (unsigned i = 0; i < count; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };
		if (members[i]->wait_fd >= 0 && OS_CALL(epoll_ctl, r->epoll_fd, EPOLL_CTL_ADD, members[i]->wait_fd, &ev) != 0) {
			ring_multi_free(r);
			return NULL;
		}
		r->members[i] = members[i];
	}
	r->count = count;
	struct ring *first = members[0];
	r->base = *first;
	r->base.ops = &ring_multi_ops;
	r->base.wait_fd = r->epoll_fd;
	memset(&r->base.counters, 0, sizeof(r->base.counters));
	return &r->base;
}

unsigned ring_multi_members(const struct ring *ring, struct ring **out, unsigned max)
{
	if (ring->ops != &ring_multi_ops) {
		if (max)
			out[0] = (struct ring *)ring;
		return 1;
	}
	const struct ring_multi *r = (const struct ring_multi *)ring;
	unsigned n = r->count < max ? r->count : max;
	memcpy(out, r->members, n * sizeof(out[0]));
	return r->count;
}

/* One member: on AF_XDP under slot (-1: any, preferring one free on every
 * queue of span). */
static struct ring *ring_multi_open_member(const char *ifname, unsigned queue, const struct ring_config *cfg,
					   int slot, unsigned span)
{
	switch (cfg->backend) {
	case RING_BACKEND_LOOP:
		return ring_loop_open(ifname, queue, cfg);
	case RING_BACKEND_VERBS:
		break;
	case RING_BACKEND_AUTO:
	case RING_BACKEND_XDP:
#if VMA_HAVE_XDP
		return ring_xdp_open_member(ifname, queue, cfg, slot, span);
#else
		(void)slot;
		(void)span;
		return ring_open(ifname, queue, cfg);
#endif
	}
	return ring_open(ifname, queue, cfg);
}

static int ring_multi_slot_of(const struct ring *ring)
{
#if VMA_HAVE_XDP
	return ring_xdp_slot(ring);
#else
	(void)ring;
	return -1;
#endif
}

struct ring *ring_open_queues(const char *ifname, unsigned queues, const struct ring_config *cfg)
{
	const struct ring_config none = { 0 };
	struct ring_config member_cfg = cfg ? *cfg : none;

	if (queues <= 1)
		return ring_open(ifname, 0, cfg);
	char verbs_why[192] = "";
	enum ring_backend verbs_fallback = RING_BACKEND_XDP;
	if (ring_backend_for(ifname, cfg) == RING_BACKEND_VERBS) {
		/* One QP receives whatever queue a flow is hashed to: its rules
		 * steer past RSS. Without it, the fallback's group. */
		struct ring *ring = ring_try_verbs(ifname, 0, cfg, &verbs_fallback, verbs_why, sizeof(verbs_why));
		if (ring)
			return ring;
		member_cfg.backend = verbs_fallback;
	}
	/* The frames of every queue count against one ring's memory cap,
	 * down to a floor per queue. */
	size_t cap = member_cfg.max_ring_mem ? member_cfg.max_ring_mem : RING_DEFAULT_MAX_MEM;
	member_cfg.max_ring_mem = cap / queues > RING_MULTI_MIN_MEMBER_MEM ? cap / queues : RING_MULTI_MIN_MEMBER_MEM;

	struct ring **members = calloc(queues, sizeof(*members));
	if (!members)
		return NULL;
	members[0] = ring_multi_open_member(ifname, 0, &member_cfg, -1, queues);
	if (verbs_why[0])
		ring_verbs_fallback_note(ifname, verbs_why, verbs_fallback, members[0] != NULL);
	if (!members[0]) {
		free(members);
		return NULL;
	}
	int slot = ring_multi_slot_of(members[0]);
	unsigned count = 1, missing = 0, first_missing = 0;
	for (unsigned q = 1; q < queues; q++) {
		struct ring *m = ring_multi_open_member(ifname, q, &member_cfg, slot, 1);
		if (m) {
			members[count++] = m;
		} else if (!missing++) {
			first_missing = q;
		}
	}
	if (missing)
		vlog_warn("ring: %s: %u of %u queues could not be joined (first: queue %u); flows the NIC hashes "
			  "to them reach this process through the kernel path (free members of those queues, or set "
			  "the queue count with ethtool -L)",
			  ifname, missing, queues, first_missing);
	struct ring *ring = count == 1 ? members[0] : ring_multi_wrap(members, count);
	if (!ring) {
		int err = errno;
		for (unsigned i = count; i-- > 0;)
			ring_close(members[i]);
		vlog_warn("ring: %s: cannot group its %u queues: %s; traffic stays on the kernel path", ifname, count,
			  strerror(err));
		errno = err;
	}
	free(members);
	return ring;
}
