/* The AF_XDP ring backend: one XSK per ring with its own UMEM.
 *
 * UMEM frames live in exactly one place at a time: the fill ring or the
 * kernel's RX path (rx_size of them, handed back by rx_release), or the TX
 * side (tx_size of them: the free pool, the TX ring, the completion ring).
 * So neither side can starve the other. need_wakeup is on: the RX and TX
 * paths make a syscall only when the kernel asks for one. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
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
#include "ring/ring_xdp_maps.h"
#include "ring/ring_xdp_prog.h"

#define RING_XDP_DEFAULT_DESCS 2048u
#define RING_XDP_MAX_DESCS 32768u
#define RING_XDP_FRAME_SIZE XSK_UMEM__DEFAULT_FRAME_SIZE
#define RING_XDP_RX_ALIGN_PAD 2

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
	uint32_t rx_size;
	uint32_t tx_size;
	uint64_t *free_frames;  /* TX frames not in flight */
	uint32_t free_count;
	uint32_t tx_unflushed;
	struct ring_flow *flows; /* attached by this ring, detached on close */
	unsigned flow_count;
	unsigned flow_cap;
};

static struct ring_xdp *ring_xdp_of(struct ring *ring)
{
	return (struct ring_xdp *)ring;
}

static void ring_xdp_reap_completions(struct ring_xdp *r)
{
	uint32_t idx;
	uint32_t n = xsk_ring_cons__peek(&r->comp, r->tx_size, &idx);

	for (uint32_t i = 0; i < n; i++)
		r->free_frames[r->free_count++] = *xsk_ring_cons__comp_addr(&r->comp, idx + i);
	if (n)
		xsk_ring_cons__release(&r->comp, n);
}

static int ring_xdp_rx_burst(struct ring *ring, struct ring_pkt *pkts, unsigned max)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	uint32_t idx;
	uint32_t n = xsk_ring_cons__peek(&r->rx, max, &idx);

	if (!n) {
		if (xsk_ring_prod__needs_wakeup(&r->fill)) {
			recvfrom(xsk_socket__fd(r->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
			ring->counters.rx_wakeups++;
		}
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *desc = xsk_ring_cons__rx_desc(&r->rx, idx + i);
		pkts[i].data = xsk_umem__get_data(r->area, xsk_umem__add_offset_to_addr(desc->addr));
		pkts[i].len = desc->len;
		pkts[i].handle = xsk_umem__extract_addr(desc->addr);
		ring->counters.rx_bytes += desc->len;
	}
	xsk_ring_cons__release(&r->rx, n);
	ring->counters.rx_packets += n;
	return (int)n;
}

static void ring_xdp_rx_release(struct ring *ring, const struct ring_pkt *pkts, unsigned count)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	uint32_t idx;

	if (!count)
		return;
	/* Cannot fail: the fill ring has room for every RX frame. */
	if (xsk_ring_prod__reserve(&r->fill, count, &idx) != count) {
		vlog_error("ring: %s: fill ring full, %u frames lost", ring->ifname, count);
		return;
	}
	for (unsigned i = 0; i < count; i++)
		*xsk_ring_prod__fill_addr(&r->fill, idx + i) = pkts[i].handle;
	xsk_ring_prod__submit(&r->fill, count);
}

static int ring_xdp_tx_post(struct ring *ring, const void *frame, uint32_t len)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	uint32_t idx;

	if (len > RING_XDP_FRAME_SIZE)
		return -EMSGSIZE;
	if (!r->free_count)
		ring_xdp_reap_completions(r);
	if (!r->free_count || xsk_ring_prod__reserve(&r->tx, 1, &idx) != 1) {
		ring->counters.tx_no_buffer++;
		return -ENOBUFS;
	}
	uint64_t addr = r->free_frames[--r->free_count];
	memcpy(xsk_umem__get_data(r->area, addr), frame, len);
	struct xdp_desc *desc = xsk_ring_prod__tx_desc(&r->tx, idx);
	desc->addr = addr;
	desc->len = len;
	xsk_ring_prod__submit(&r->tx, 1);
	r->tx_unflushed++;
	ring->counters.tx_packets++;
	ring->counters.tx_bytes += len;
	return 0;
}

static void ring_xdp_tx_flush(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	if (r->tx_unflushed && xsk_ring_prod__needs_wakeup(&r->tx)) {
		/* EAGAIN/EBUSY/ENOBUFS: the kernel is still sending; the
		 * descriptors stay queued and go with the next kick. */
		sendto(xsk_socket__fd(r->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
		ring->counters.tx_doorbells++;
	}
	r->tx_unflushed = 0;
	ring_xdp_reap_completions(r);
}

static int ring_xdp_flow_same(const struct ring_flow *a, const struct ring_flow *b)
{
	return a->proto == b->proto && a->local_ip == b->local_ip && a->local_port == b->local_port &&
	       a->remote_ip == b->remote_ip && a->remote_port == b->remote_port && a->group == b->group;
}

/* Picks the map and fills its key. Returns the map fd or a negative errno. */
static int ring_xdp_flow_key(struct ring_xdp *r, const struct ring_flow *f, void *key)
{
	if (f->proto != IPPROTO_UDP && f->proto != IPPROTO_TCP)
		return -EINVAL;
	if (f->group) {
		struct ring_xdp_keygrp *k = key;
		memset(k, 0, sizeof(*k));
		k->group = f->group;
		k->port = f->local_port;
		k->proto = f->proto;
		return ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_GROUPS);
	}
	if (!f->local_port)
		return -EINVAL;
	if (f->remote_ip || f->remote_port) {
		struct ring_xdp_key5 *k = key;
		if (!f->local_ip || !f->remote_ip || !f->remote_port)
			return -EINVAL;
		memset(k, 0, sizeof(*k));
		k->local_ip = f->local_ip;
		k->remote_ip = f->remote_ip;
		k->local_port = f->local_port;
		k->remote_port = f->remote_port;
		k->proto = f->proto;
		return ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_FLOWS5);
	}
	struct ring_xdp_key3 *k = key;
	memset(k, 0, sizeof(*k));
	k->local_ip = f->local_ip;
	k->local_port = f->local_port;
	k->proto = f->proto;
	return ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_FLOWS3);
}

static int ring_xdp_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	unsigned char key[sizeof(struct ring_xdp_key5)];
	__u32 value = ring->queue;
	int fd = ring_xdp_flow_key(r, flow, key);

	if (fd < 0)
		return fd;
	if (r->flow_count == r->flow_cap) {
		unsigned cap = r->flow_cap ? r->flow_cap * 2 : 8;
		struct ring_flow *grown = realloc(r->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		r->flows = grown;
		r->flow_cap = cap;
	}
	/* BPF_NOEXIST: a flow belongs to one ring; a second owner is a bug. */
	if (bpf_map_update_elem(fd, key, &value, BPF_NOEXIST) != 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	r->flows[r->flow_count++] = *flow;
	return 0;
}

static int ring_xdp_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_xdp *r = ring_xdp_of(ring);
	unsigned char key[sizeof(struct ring_xdp_key5)];
	int fd = ring_xdp_flow_key(r, flow, key);

	if (fd < 0)
		return fd;
	for (unsigned i = 0; i < r->flow_count; i++) {
		if (ring_xdp_flow_same(&r->flows[i], flow)) {
			r->flows[i] = r->flows[--r->flow_count];
			return bpf_map_delete_elem(fd, key) == 0 ? 0 : -errno;
		}
	}
	return -ENOENT;
}

static int ring_xdp_wait_arm(struct ring *ring)
{
	struct ring_xdp *r = ring_xdp_of(ring);

	if (xsk_cons_nb_avail(&r->rx, 1))
		return 1;
	/* Without a fill-ring kick the kernel may never deliver the packet
	 * that poll() is about to wait for. */
	if (xsk_ring_prod__needs_wakeup(&r->fill)) {
		recvfrom(xsk_socket__fd(r->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		ring->counters.rx_wakeups++;
	}
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
	}
}

static void ring_xdp_destroy(struct ring_xdp *r)
{
	if (r->xsk) {
		__u32 key = r->base.queue;
		bpf_map_delete_elem(ring_xdp_prog_map_fd(r->prog, RING_XDP_MAP_XSKS), &key);
		xsk_socket__delete(r->xsk);
	}
	if (r->umem)
		xsk_umem__delete(r->umem);
	if (r->area)
		munmap(r->area, r->area_size);
	ring_xdp_prog_put(r->prog);
	free(r->free_frames);
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
	.rx_release = ring_xdp_rx_release,
	.tx_post = ring_xdp_tx_post,
	.tx_flush = ring_xdp_tx_flush,
	.attach_flow = ring_xdp_attach_flow,
	.detach_flow = ring_xdp_detach_flow,
	.wait_arm = ring_xdp_wait_arm,
	.read_counters = ring_xdp_read_counters,
	.close = ring_xdp_close,
};

static uint32_t ring_xdp_ring_size(unsigned wish, const char *what, const char *ifname)
{
	uint32_t size = 1;

	if (!wish)
		return RING_XDP_DEFAULT_DESCS;
	if (wish > RING_XDP_MAX_DESCS) {
		vlog_warn("ring: %s: %s size %u too large, using %u", ifname, what, wish, RING_XDP_MAX_DESCS);
		return RING_XDP_MAX_DESCS;
	}
	while (size < wish)
		size <<= 1;
	return size;
}

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

/* Creates the UMEM and the XSK and registers it in the xsks map. */
static int ring_xdp_socket(struct ring_xdp *r)
{
	const uint32_t frames = r->rx_size + r->tx_size;
	struct xsk_umem_config ucfg = {
		.fill_size = r->rx_size,
		.comp_size = r->tx_size,
		.frame_size = RING_XDP_FRAME_SIZE,
		/* Ethernet starts 2 bytes into a 4-aligned spot, so the IP
		 * header behind it is 4-byte aligned. */
		.frame_headroom = RING_XDP_RX_ALIGN_PAD,
		.flags = 0,
	};
	struct xsk_socket_config scfg = {
		.rx_size = r->rx_size,
		.tx_size = r->tx_size,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
		.xdp_flags = 0,
		.bind_flags = XDP_USE_NEED_WAKEUP,
	};
	uint32_t idx;
	int err;

	r->area_size = (size_t)frames * RING_XDP_FRAME_SIZE;
	r->area = mmap(NULL, r->area_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (r->area == MAP_FAILED) {
		r->area = NULL;
		return -errno;
	}
	r->free_frames = calloc(frames, sizeof(*r->free_frames));
	if (!r->free_frames)
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
	/* The first rx_size frames feed the kernel, the rest are for TX. */
	if (xsk_ring_prod__reserve(&r->fill, r->rx_size, &idx) != r->rx_size)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->rx_size; i++)
		*xsk_ring_prod__fill_addr(&r->fill, idx + i) = (uint64_t)i * RING_XDP_FRAME_SIZE;
	xsk_ring_prod__submit(&r->fill, r->rx_size);
	for (uint32_t i = r->rx_size; i < frames; i++)
		r->free_frames[r->free_count++] = (uint64_t)i * RING_XDP_FRAME_SIZE;

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
	r->rx_size = ring_xdp_ring_size(cfg ? cfg->rx_size : 0, "rx ring", ifname);
	r->tx_size = ring_xdp_ring_size(cfg ? cfg->tx_size : 0, "tx ring", ifname);
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
	vlog_debug("ring: %s: queue %u open (xdp %s mode)", ifname, queue, ring_xdp_prog_mode(r->prog));
	return &r->base;
}
