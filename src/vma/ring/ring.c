/* Backend choice and the sizing rules the backends share. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "ring/ring.h"
#include "os/os.h"

#define RING_MIN_DESCS 64u
#define RING_MAX_DESCS 16384u

static uint32_t ring_pow2_clamp(unsigned wish, uint32_t lo, uint32_t hi)
{
	uint32_t size = lo;

	while (size < wish && size < hi)
		size <<= 1;
	return size;
}

static unsigned ring_or(unsigned value, unsigned fallback)
{
	return value ? value : fallback;
}

void ring_sizes_compute(const struct ring_config *cfg, uint32_t frame_size, struct ring_sizes *out)
{
	const struct ring_config none = { 0 };
	/* The parameters' defaults (VMA_RX_BUFS 200000, VMA_RX_WRE 16000, ...). */
	if (!cfg)
		cfg = &none;
	unsigned rx_wre = ring_or(cfg->rx_wre, 16000), tx_wre = ring_or(cfg->tx_wre, 3000);
	unsigned rx_bufs = ring_or(cfg->rx_bufs, 200000), tx_bufs = ring_or(cfg->tx_bufs, 200000);
	size_t max_mem = cfg->max_ring_mem ? cfg->max_ring_mem : RING_DEFAULT_MAX_MEM;
	uint32_t max_frames = (uint32_t)(max_mem / frame_size);

	/* RX: rx_wre frames posted to the kernel plus as many again that
	 * sockets may hold, within rx_bufs. TX: one frame per descriptor. */
	uint32_t rx_descs = ring_pow2_clamp(rx_wre < rx_bufs ? rx_wre : rx_bufs, RING_MIN_DESCS, RING_MAX_DESCS);
	uint32_t rx_frames = ring_pow2_clamp(rx_bufs < 2u * rx_descs ? rx_bufs : 2u * rx_descs,
					     RING_MIN_DESCS, 2 * RING_MAX_DESCS);
	uint32_t tx_frames = ring_pow2_clamp(tx_wre < tx_bufs ? tx_wre : tx_bufs, RING_MIN_DESCS, RING_MAX_DESCS);
	if (max_frames < 2 * RING_MIN_DESCS)
		max_frames = 2 * RING_MIN_DESCS;
	/* Over the memory cap: halve the larger side until it fits. */
	while (rx_frames + tx_frames > max_frames) {
		if (rx_frames >= tx_frames && rx_frames > RING_MIN_DESCS)
			rx_frames >>= 1;
		else if (tx_frames > RING_MIN_DESCS)
			tx_frames >>= 1;
		else
			break;
	}
	if (rx_descs > rx_frames)
		rx_descs = rx_frames;
	out->rx_frames = rx_frames;
	out->rx_descs = rx_descs;
	out->tx_frames = tx_frames;
	out->rx_batch = ring_or(cfg->rx_wre_batching, 64);
	if (out->rx_batch > rx_frames / 2)
		out->rx_batch = rx_frames / 2;
	out->tx_batch = ring_or(cfg->tx_wre_batching, 64);
	if (out->tx_batch > tx_frames)
		out->tx_batch = tx_frames;
	out->huge_pages = cfg->huge_pages;
}

/* VMA_RING_BACKEND's values (auto, xdp, verbs) as backends. */
static enum ring_backend ring_backend_of_param(int value)
{
	switch (value) {
	case 0: return RING_BACKEND_AUTO;
	case 2: return RING_BACKEND_VERBS;
	default: return RING_BACKEND_XDP;
	}
}

void ring_config_from_params(struct ring_config *cfg)
{
	*cfg = (struct ring_config){
		.backend = ring_backend_of_param(g_cfg.ring_backend),
		.rx_bufs = (unsigned)g_cfg.rx_bufs,
		.tx_bufs = (unsigned)g_cfg.tx_bufs,
		.rx_wre = (unsigned)g_cfg.rx_wre,
		.tx_wre = (unsigned)g_cfg.tx_wre,
		.rx_wre_batching = (unsigned)g_cfg.rx_wre_batching,
		.tx_wre_batching = (unsigned)g_cfg.tx_wre_batching,
		/* 0 (anonymous) and 1 (contiguous) both mean ordinary pages
		 * here: a memfd has no contiguous-pages flavour. */
		.huge_pages = g_cfg.mem_alloc_type == 2,
		.verbs = {
			.tx_max_inline = (unsigned)g_cfg.tx_max_inline,
			.cq_moderation = g_cfg.cq_moderation_enable != 0,
			.cq_mod_count = (unsigned)g_cfg.cq_moderation_count,
			.cq_mod_period_us = (unsigned)g_cfg.cq_moderation_period_usec,
			.aim_interval_ms = (unsigned)g_cfg.cq_aim_interval_msec,
			.aim_max_count = (unsigned)g_cfg.cq_aim_max_count,
			.aim_max_period_us = (unsigned)g_cfg.cq_aim_max_period_usec,
			.aim_rate = (unsigned)g_cfg.cq_aim_interrupts_rate_per_sec,
			.keep_qp_full = g_cfg.cq_keep_qp_full != 0,
			.prefetch_before_poll = (unsigned)g_cfg.rx_prefetch_bytes_before_poll,
			.fork_init = g_cfg.fork != 0,
			.blueflame_off = g_cfg.bf == 0,
			.fallback = RING_BACKEND_XDP,
		},
	};
}

bool ring_driver_is_virtual(const char *driver)
{
	static const char *const virtual_drivers[] = { "veth", "macvlan", "ipvlan", "tun", "netkit" };

	for (size_t i = 0; i < sizeof(virtual_drivers) / sizeof(virtual_drivers[0]); i++)
		if (strcmp(driver, virtual_drivers[i]) == 0)
			return true;
	return false;
}

void ring_read_link(struct ring *ring)
{
	struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr;
	int fd = OS_CALL(socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ring->ifname);
	if (OS_CALL(ioctl, fd, SIOCGIFHWADDR, &ifr) == 0)
		memcpy(ring->mac, ifr.ifr_hwaddr.sa_data, sizeof(ring->mac));
	if (OS_CALL(ioctl, fd, SIOCGIFMTU, &ifr) == 0)
		ring->mtu = (uint32_t)ifr.ifr_mtu;
	ifr.ifr_data = (void *)&info;
	if (OS_CALL(ioctl, fd, SIOCETHTOOL, &ifr) == 0)
		memcpy(ring->driver, info.driver, sizeof(ring->driver) - 1);
	os_close_nocancel(fd);
}

enum ring_backend ring_backend_for(const char *ifname, const struct ring_config *cfg)
{
	/* No configuration: the AF_XDP backend, as always. */
	enum ring_backend backend = cfg ? cfg->backend : RING_BACKEND_XDP;

	if (backend == RING_BACKEND_AUTO)
		return ring_verbs_available(ifname, cfg) ? RING_BACKEND_VERBS : RING_BACKEND_XDP;
	return backend;
}

static const char *ring_backend_name(enum ring_backend backend)
{
	switch (backend) {
	case RING_BACKEND_LOOP: return "loop";
	case RING_BACKEND_VERBS: return "verbs";
	default: return "xdp";
	}
}

static struct ring *ring_open_xdp(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
#if VMA_HAVE_XDP
	return ring_xdp_open(ifname, queue, cfg);
#else
	(void)queue;
	(void)cfg;
	vlog_warn("ring: %s: built without AF_XDP support (libxdp), traffic stays on the kernel path", ifname);
	errno = EOPNOTSUPP;
	return NULL;
#endif
}

struct ring *ring_try_verbs(const char *ifname, unsigned queue, const struct ring_config *cfg,
			    enum ring_backend *fallback, char *why, size_t why_len)
{
	why[0] = '\0';
	*fallback = cfg && cfg->verbs.fallback == RING_BACKEND_LOOP ? RING_BACKEND_LOOP : RING_BACKEND_XDP;
	struct ring *ring = ring_verbs_open_why(ifname, queue, cfg, why, why_len);
	if (!ring && !why[0])
		snprintf(why, why_len, "%s", strerror(errno));
	return ring;
}

void ring_verbs_fallback_note(const char *ifname, const char *why, enum ring_backend fallback, bool fallback_opened)
{
	/* One warning per interface: when the fallback failed too, its own
	 * warning is the one; the verbs reason is only noted. */
	if (fallback_opened)
		vlog_warn("ring: %s: verbs backend unavailable (%s); using the %s backend", ifname, why,
			  ring_backend_name(fallback));
	else
		vlog_info("ring: %s: the verbs backend was unavailable too (%s)", ifname, why);
}

struct ring *ring_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	enum ring_backend backend = ring_backend_for(ifname, cfg);

	switch (backend) {
	case RING_BACKEND_LOOP:
		return ring_loop_open(ifname, queue, cfg);
	case RING_BACKEND_VERBS: {
		enum ring_backend fallback;
		char why[192];
		struct ring *ring = ring_try_verbs(ifname, queue, cfg, &fallback, why, sizeof(why));
		if (ring)
			return ring;
		ring = fallback == RING_BACKEND_LOOP ? ring_loop_open(ifname, queue, cfg)
						     : ring_open_xdp(ifname, queue, cfg);
		int err = errno;
		ring_verbs_fallback_note(ifname, why, fallback, ring != NULL);
		errno = err;
		return ring;
	}
	case RING_BACKEND_AUTO:
	case RING_BACKEND_XDP:
		return ring_open_xdp(ifname, queue, cfg);
	}
	vlog_warn("ring: %s: unknown backend %d, traffic stays on the kernel path",
		  ifname, (int)backend);
	errno = EINVAL;
	return NULL;
}

#if !VMA_HAVE_IBVERBS
/* Built without rdma-core: the verbs backend is never there. */
bool ring_verbs_available(const char *ifname, const struct ring_config *cfg)
{
	(void)ifname;
	(void)cfg;
	return false;
}

struct ring *ring_verbs_open_why(const char *ifname, unsigned queue, const struct ring_config *cfg, char *why,
				 size_t why_len)
{
	(void)ifname;
	(void)queue;
	(void)cfg;
	snprintf(why, why_len, "libvma was built without rdma-core (libibverbs)");
	errno = EOPNOTSUPP;
	return NULL;
}

struct ring *ring_verbs_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	vlog_warn("ring: %s: libvma was built without rdma-core (libibverbs); traffic stays on the kernel path",
		  ifname);
	(void)queue;
	(void)cfg;
	errno = EOPNOTSUPP;
	return NULL;
}
#endif

void ring_close(struct ring *ring)
{
	if (ring)
		ring->ops->close(ring);
}
