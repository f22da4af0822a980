/* The verbs ring backend: opening a ring (device, PD, MR over the frames,
 * completion channel and CQs, the RAW_PACKET QP brought to RTS, the first
 * receive WQEs) and closing it (rules, queued sends, then every object in
 * reverse; in a forked child, nothing of the parent's). docs/verbs.md. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring.h"
#include "ring/ring_buf_pool.h"
#include "ring/ring_verbs.h"

/* ---- close ---- */

static unsigned ring_verbs_held(const struct ring_verbs *r)
{
	return (r->base.rx_pool ? ring_buf_pool_in_use(r->base.rx_pool) : 0) +
	       (r->base.tx_pool ? ring_buf_pool_in_use(r->base.tx_pool) : 0);
}

/* Sends still queued leave, and the completions of those in flight are
 * awaited a little (a NIC needs microseconds), before the QP goes. */
static void ring_verbs_drain_tx(struct ring_verbs *r)
{
	ring_verbs_doorbell(r, true);
	uint64_t deadline = ring_verbs_clock_ns(CLOCK_MONOTONIC) + 100000000u;
	while (r->sq_posted && ring_verbs_clock_ns(CLOCK_MONOTONIC) < deadline) {
		unsigned before = r->sq_posted;
		ring_verbs_reap(r);
		if (r->sq_posted == before && r->unsignaled)
			break;   /* only unsignalled WRs left: nothing more will come */
	}
}

static void ring_verbs_destroy(struct ring_verbs *r)
{
	ring_verbs_flows_release(r);
	if (r->qp) {
		ring_verbs_drain_tx(r);
		if (ibv_destroy_qp(r->qp))
			vlog_warn("ring: %s: ibv_destroy_qp failed", r->base.ifname);
	}
	if (r->rx_cq) {
		/* ibv_destroy_cq waits for every event to be acknowledged. */
		ring_verbs_ack_events(r);
		ibv_destroy_cq(r->rx_cq);
	}
	if (r->tx_cq)
		ibv_destroy_cq(r->tx_cq);
	if (r->channel)
		ibv_destroy_comp_channel(r->channel);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ctx)
		ibv_close_device(r->ctx);
	if (r->wait_ep >= 0)
		os_close_nocancel(r->wait_ep);
	if (r->stash_fd >= 0)
		os_close_nocancel(r->stash_fd);
	unsigned held = ring_verbs_held(r);
	if (held) {
		/* The holders keep pointing into the frames: they stay. */
		vlog_warn("ring: %s: closed while %u buffers are still held; their memory stays allocated",
			  r->base.ifname, held);
		ring_buf_pool_orphan(r->base.rx_pool);
		ring_buf_pool_orphan(r->base.tx_pool);
	} else {
		vlog_debug("ring: %s: verbs ring closed, every buffer back", r->base.ifname);
		ring_buf_pool_destroy(r->base.rx_pool);
		ring_buf_pool_destroy(r->base.tx_pool);
		if (r->mem)
			munmap(r->mem, r->mem_len);
	}
	free(r->rq_fifo);
	free(r->rx_free);
	free(r->rwr);
	free(r->rsge);
	free(r->tx_free);
	free(r->swr);
	free(r->ssge);
	free(r->sq_frame);
	free(r->flows);
	free(r);
}

void ring_verbs_close(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);

	if (r->owner != getpid()) {
		/* A forked child's copy: the objects are the parent's. */
		free(r->flows);
		free(r);
		return;
	}
	ring_verbs_destroy(r);
}

void ring_verbs_forget(struct ring *ring)
{
	struct ring_verbs *r = ring_verbs_of(ring);

	/* Destroying anything through the inherited device context would
	 * destroy the parent's QP and rules: the child lets go of its
	 * copies, and the frames stay mapped for the objects pointing there. */
	ring_buf_pool_set_owner(r->base.rx_pool, NULL);
	ring_buf_pool_set_owner(r->base.tx_pool, NULL);
	/* Our own fds (not verbs objects) are the child's copies: closed. */
	if (r->wait_ep >= 0)
		os_close_nocancel(r->wait_ep);
	if (r->stash_fd >= 0)
		os_close_nocancel(r->stash_fd);
	r->wait_ep = r->stash_fd = -1;
	r->base.wait_fd = -1;
}

/* ---- open ---- */

static int ring_verbs_alloc(struct ring_verbs *r)
{
	uint32_t rx_frames = r->sizes.rx_frames, tx_frames = r->sizes.tx_frames, descs = r->sizes.rx_descs;
	char name[32];

	r->mem_len = (size_t)(rx_frames + tx_frames) * r->frame_size;
	r->mem = MAP_FAILED;
	if (r->sizes.huge_pages)
		r->mem = mmap(NULL, r->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (r->mem == MAP_FAILED)
		r->mem = mmap(NULL, r->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->mem == MAP_FAILED) {
		r->mem = NULL;
		return -ENOMEM;
	}
	r->rq_fifo = calloc(descs, sizeof(*r->rq_fifo));
	r->rx_free = calloc(rx_frames, sizeof(*r->rx_free));
	r->rwr = calloc(descs, sizeof(*r->rwr));
	r->rsge = calloc(descs, sizeof(*r->rsge));
	r->tx_free = calloc(tx_frames, sizeof(*r->tx_free));
	r->swr = calloc(tx_frames, sizeof(*r->swr));
	r->ssge = calloc(tx_frames, sizeof(*r->ssge));
	r->sq_frame = calloc(tx_frames, sizeof(*r->sq_frame));
	snprintf(name, sizeof(name), "%.15s:v rx", r->base.ifname);
	r->base.rx_pool = ring_buf_pool_create_over(name, rx_frames, r->mem, r->frame_size, RING_VERBS_HEADROOM, 0,
						    &ring_verbs_rx_pool_ops, r);
	snprintf(name, sizeof(name), "%.15s:v tx", r->base.ifname);
	r->base.tx_pool = ring_buf_pool_create_over(name, tx_frames, r->mem + (size_t)rx_frames * r->frame_size,
						    r->frame_size, RING_VERBS_HEADROOM,
						    (uint64_t)rx_frames * r->frame_size, &ring_verbs_tx_pool_ops, r);
	if (!r->rq_fifo || !r->rx_free || !r->rwr || !r->rsge || !r->tx_free || !r->swr || !r->ssge || !r->sq_frame ||
	    !r->base.rx_pool || !r->base.tx_pool)
		return -ENOMEM;
	/* LIFO free lists: frame 0 goes out first. */
	for (uint32_t i = 0; i < rx_frames; i++)
		r->rx_free[r->rx_free_count++] = rx_frames - 1 - i;
	for (uint32_t j = 0; j < tx_frames; j++) {
		r->tx_free[r->tx_free_count++] = tx_frames - 1 - j;
		r->sq_frame[j] = -1;
	}
	return 0;
}

/* Sizes within what the device takes. */
static void ring_verbs_clamp(struct ring_verbs *r)
{
	struct ibv_device_attr attr;

	if (ibv_query_device(r->ctx, &attr) != 0)
		return;
	uint32_t max_wr = attr.max_qp_wr > 0 ? (uint32_t)attr.max_qp_wr : 1;
	uint32_t max_cqe = attr.max_cqe > 0 ? (uint32_t)attr.max_cqe : 1;
	uint32_t limit = max_wr < max_cqe ? max_wr : max_cqe;
	if (r->sizes.rx_descs > limit)
		r->sizes.rx_descs = limit;
	if (r->sizes.tx_frames > limit)
		r->sizes.tx_frames = limit;
}

static int ring_verbs_create(struct ring_verbs *r, const char **what)
{
	int err;

	*what = "cannot allocate a protection domain";
	if (!(r->pd = ibv_alloc_pd(r->ctx)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot allocate the frames";
	if ((err = ring_verbs_alloc(r)))
		return err;
	*what = "cannot register the frames (memory region)";
	if (!(r->mr = ibv_reg_mr(r->pd, r->mem, r->mem_len, IBV_ACCESS_LOCAL_WRITE)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot create a completion channel";
	if (!(r->channel = ibv_create_comp_channel(r->ctx)))
		return -(errno ? errno : ENOMEM);
	int fl = OS_CALL(fcntl, r->channel->fd, F_GETFL);
	if (fl < 0 || OS_CALL(fcntl, r->channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	*what = "cannot create the completion queues";
	if (!(r->rx_cq = ibv_create_cq(r->ctx, (int)r->sizes.rx_descs, r, r->channel, 0)) ||
	    !(r->tx_cq = ibv_create_cq(r->ctx, (int)r->sizes.tx_frames, r, NULL, 0)))
		return -(errno ? errno : ENOMEM);
	*what = "cannot create the raw packet queue pair (needs CAP_NET_RAW)";
	struct ibv_qp_init_attr qp_attr = {
		.send_cq = r->tx_cq, .recv_cq = r->rx_cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = r->sizes.tx_frames, .max_recv_wr = r->sizes.rx_descs, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = r->vcfg.tx_max_inline },
	};
	if (!(r->qp = ibv_create_qp(r->pd, &qp_attr)))
		return -(errno ? errno : ENOMEM);
	r->max_inline = qp_attr.cap.max_inline_data < r->vcfg.tx_max_inline ? qp_attr.cap.max_inline_data
									    : r->vcfg.tx_max_inline;
	*what = "cannot bring the queue pair up";
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = r->port };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE | IBV_QP_PORT)))
		return -err;
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE)))
		return -err;
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	if ((err = ibv_modify_qp(r->qp, &attr, IBV_QP_STATE)))
		return -err;
	ring_verbs_refill(r);
	if (r->vcfg.cq_moderation)
		ring_verbs_moderate(r, (uint16_t)(r->vcfg.cq_mod_count > 0xffff ? 0xffff : r->vcfg.cq_mod_count),
				    (uint16_t)(r->vcfg.cq_mod_period_us > 0xffff ? 0xffff : r->vcfg.cq_mod_period_us));
	*what = "cannot make the wait fd";
	r->wait_ep = OS_CALL(epoll_create1, EPOLL_CLOEXEC);
	r->stash_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wait_ep < 0 || r->stash_fd < 0)
		return -errno;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = r->channel->fd };
	if (OS_CALL(epoll_ctl, r->wait_ep, EPOLL_CTL_ADD, r->channel->fd, &ev) < 0)
		return -errno;
	ev.data.fd = r->stash_fd;
	if (OS_CALL(epoll_ctl, r->wait_ep, EPOLL_CTL_ADD, r->stash_fd, &ev) < 0)
		return -errno;
	r->base.wait_fd = r->wait_ep;
	return 0;
}

struct ring *ring_verbs_open_why(const char *ifname, unsigned queue, const struct ring_config *cfg, char *why,
				 size_t why_len)
{
	unsigned ifindex = if_nametoindex(ifname);
	struct ring_verbs *r;
	const char *what = "";
	int err;

	why[0] = '\0';
	if (!ifindex) {
		snprintf(why, why_len, "no such interface");
		errno = ENODEV;
		return NULL;
	}
	ring_verbs_process_init(cfg);
	r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(why, why_len, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	r->base.ops = &ring_verbs_ops;
	snprintf(r->base.ifname, sizeof(r->base.ifname), "%s", ifname);
	r->base.ifindex = ifindex;
	r->base.queue = queue;
	r->base.wait_fd = -1;
	r->wait_ep = r->stash_fd = -1;
	r->owner = getpid();
	if (cfg)
		r->vcfg = cfg->verbs;
	err = ring_verbs_device_open(ifname, ifindex, &r->ctx, &r->port, why, why_len);
	if (err)
		goto fail;
	ring_read_link(&r->base);
	r->base.takes_kernel_conns = true;
	if (!r->base.mtu)
		r->base.mtu = 1500;
	r->frame_size = RING_VERBS_MIN_FRAME;
	while (r->frame_size < r->base.mtu + 14 + 4 + RING_VERBS_HEADROOM && r->frame_size < RING_VERBS_MAX_FRAME)
		r->frame_size <<= 1;
	if (r->base.mtu + 14 + RING_VERBS_HEADROOM > r->frame_size)
		r->base.mtu = r->frame_size - 14 - RING_VERBS_HEADROOM;
	ring_sizes_compute(cfg, r->frame_size, &r->sizes);
	/* As many frames spare as posted: what sockets hold must not empty
	 * the RQ (under the memory cap the shared sizing may post them all). */
	if (r->sizes.rx_descs > r->sizes.rx_frames / 2)
		r->sizes.rx_descs = r->sizes.rx_frames / 2;
	ring_verbs_clamp(r);
	/* The SQ must hold the unsignalled tail and more. */
	if (r->sizes.tx_batch > r->sizes.tx_frames / 2)
		r->sizes.tx_batch = r->sizes.tx_frames / 2 ? r->sizes.tx_frames / 2 : 1;
	if (r->sizes.rx_batch > r->sizes.rx_descs / 2)
		r->sizes.rx_batch = r->sizes.rx_descs / 2 ? r->sizes.rx_descs / 2 : 1;
	/* An eighth of the RQ, at least two batches: what keep-QP-full keeps
	 * posted whatever the sockets hold (they may hold most of the pool,
	 * docs/ring.md "Receive admission"; dropping whenever the RQ is not
	 * full would drop everything while they do). */
	r->rq_reserve = r->sizes.rx_descs / 8 > 2 * r->sizes.rx_batch ? r->sizes.rx_descs / 8 : 2 * r->sizes.rx_batch;
	if (r->rq_reserve > r->sizes.rx_descs)
		r->rq_reserve = r->sizes.rx_descs;
	err = ring_verbs_create(r, &what);
	if (err) {
		snprintf(why, why_len, "%s: %s", what, strerror(-err));
		goto fail;
	}
	ring_verbs_flows_register(r);
	vlog_debug("ring: %s: verbs ring on %s port %u (%u rx frames, %u rx WQEs, %u tx frames of %u bytes, "
		   "inline up to %u bytes)", ifname, ibv_get_device_name(r->ctx->device), r->port,
		   r->sizes.rx_frames, r->sizes.rx_descs, r->sizes.tx_frames, r->frame_size, r->max_inline);
	return &r->base;
fail:
	ring_verbs_destroy(r);
	errno = -err;
	return NULL;
}

struct ring *ring_verbs_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	char why[192];
	struct ring *ring = ring_verbs_open_why(ifname, queue, cfg, why, sizeof(why));

	if (!ring) {
		int err = errno;
		vlog_warn("ring: %s: verbs backend unavailable (%s); traffic stays on the kernel path", ifname, why);
		errno = err;
	}
	return ring;
}
