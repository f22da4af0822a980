/* Raw AF_XDP socket set-up (see ring_xsk.h). The kernel interface is in
 * linux/if_xdp.h; the offsets of each ring's producer, consumer, flags and
 * descriptors come from getsockopt(XDP_MMAP_OFFSETS). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "ring/ring_xsk.h"
#include "os/os.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif

int ring_xsk_socket(void)
{
	int fd = OS_CALL(socket, AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

	return fd >= 0 ? fd : -errno;
}

int ring_xsk_umem_register(int fd, void *area, size_t size, uint32_t frame_size, uint32_t headroom,
			   uint32_t fill_size, uint32_t comp_size)
{
	struct xdp_umem_reg reg;

	memset(&reg, 0, sizeof(reg));
	reg.addr = (uint64_t)(uintptr_t)area;
	reg.len = size;
	reg.chunk_size = frame_size;
	reg.headroom = headroom;
	if (OS_CALL(setsockopt, fd, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)) != 0)
		return -errno;
	if (OS_CALL(setsockopt, fd, SOL_XDP, XDP_UMEM_FILL_RING, &fill_size, sizeof(fill_size)) != 0)
		return -errno;
	if (OS_CALL(setsockopt, fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &comp_size, sizeof(comp_size)) != 0)
		return -errno;
	return 0;
}

int ring_xsk_set_rings(int fd, uint32_t rx_size, uint32_t tx_size)
{
	if (rx_size && OS_CALL(setsockopt, fd, SOL_XDP, XDP_RX_RING, &rx_size, sizeof(rx_size)) != 0)
		return -errno;
	if (tx_size && OS_CALL(setsockopt, fd, SOL_XDP, XDP_TX_RING, &tx_size, sizeof(tx_size)) != 0)
		return -errno;
	return 0;
}

int ring_xsk_bind(int fd, unsigned ifindex, unsigned queue, int shared_umem_fd, uint16_t xdp_flags)
{
	struct sockaddr_xdp sxdp;

	memset(&sxdp, 0, sizeof(sxdp));
	sxdp.sxdp_family = AF_XDP;
	sxdp.sxdp_ifindex = ifindex;
	sxdp.sxdp_queue_id = queue;
	if (shared_umem_fd >= 0) {
		/* The kernel takes the mode and wakeup flags from the UMEM's
		 * first socket; only XDP_SHARED_UMEM is allowed here. */
		sxdp.sxdp_flags = XDP_SHARED_UMEM;
		sxdp.sxdp_shared_umem_fd = (uint32_t)shared_umem_fd;
	} else {
		sxdp.sxdp_flags = XDP_USE_NEED_WAKEUP | xdp_flags;
	}
	if (OS_CALL(bind, fd, (struct sockaddr *)&sxdp, sizeof(sxdp)) != 0)
		return -errno;
	return 0;
}

int ring_xsk_map_ring(int fd, enum ring_xsk_which which, uint32_t size, struct ring_xsk_ring *out)
{
	struct xdp_mmap_offsets off;
	socklen_t len = sizeof(off);
	const struct xdp_ring_offset *ro;
	off_t pgoff;
	size_t desc_size;

	memset(out, 0, sizeof(*out));
	if (OS_CALL(getsockopt, fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &len) != 0)
		return -errno;
	switch (which) {
	case RING_XSK_RX:
		ro = &off.rx;
		pgoff = XDP_PGOFF_RX_RING;
		desc_size = sizeof(struct xdp_desc);
		break;
	case RING_XSK_TX:
		ro = &off.tx;
		pgoff = XDP_PGOFF_TX_RING;
		desc_size = sizeof(struct xdp_desc);
		break;
	case RING_XSK_FILL:
		ro = &off.fr;
		pgoff = (off_t)XDP_UMEM_PGOFF_FILL_RING;
		desc_size = sizeof(uint64_t);
		break;
	default:
		ro = &off.cr;
		pgoff = (off_t)XDP_UMEM_PGOFF_COMPLETION_RING;
		desc_size = sizeof(uint64_t);
		break;
	}
	out->map_len = ro->desc + (size_t)size * desc_size;
	/* MAP_SHARED: the ring stays shared with a forked child, and every
	 * process mapping it sees the same indices. */
	out->map = mmap(NULL, out->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, pgoff);
	if (out->map == MAP_FAILED) {
		int err = -errno;
		out->map = NULL;
		return err;
	}
	uint8_t *base = out->map;
	out->producer = (uint32_t *)(base + ro->producer);
	out->consumer = (uint32_t *)(base + ro->consumer);
	out->flags = (uint32_t *)(base + ro->flags);
	out->descs = base + ro->desc;
	out->size = size;
	out->mask = size - 1;
	out->cached_prod = __atomic_load_n(out->producer, __ATOMIC_ACQUIRE);
	out->cached_cons = __atomic_load_n(out->consumer, __ATOMIC_ACQUIRE);
	return 0;
}

void ring_xsk_unmap_ring(struct ring_xsk_ring *ring)
{
	if (ring->map)
		munmap(ring->map, ring->map_len);
	memset(ring, 0, sizeof(*ring));
}

int ring_xsk_statistics(int fd, struct xdp_statistics *out)
{
	socklen_t len = sizeof(*out);

	memset(out, 0, sizeof(*out));
	return OS_CALL(getsockopt, fd, SOL_XDP, XDP_STATISTICS, out, &len) == 0 ? 0 : -errno;
}
