/* The table of the Extra API (include/mellanox/vma_extra.h): one static
 * struct vma_api_t, filled at build time, whose address getsockopt(-1,
 * SOL_SOCKET, SO_VMA_GET_API) hands out (src/vma/redirect/redirect_socket.c).
 * Every member is a function: those not built yet answer -1 with errno
 * EOPNOTSUPP and have their capability bit clear (docs/extra_api.md). */
#include <errno.h>

#include "extra/extra.h"
#include "extra/extra_api.h"
#include "log/vlog.h"
#include "sock/sock_fd_table.h"
#include "vma_main.h"

static int extra_not_supported(const char *what)
{
	vlog_debug("Extra API: %s is not supported by this library", what);
	errno = EOPNOTSUPP;
	return -1;
}

static int extra_add_ring_profile(struct vma_ring_type_attr *profile, vma_ring_profile_key *key)
{
	(void)profile, (void)key;
	return extra_not_supported("vma_add_ring_profile");
}

static int extra_get_ring_direct_descriptors(int fd, struct vma_mlx_hw_device_data *data)
{
	(void)fd, (void)data;
	return extra_not_supported("get_ring_direct_descriptors (verbs hardware queues)");
}

static int extra_modify_ring(struct vma_modify_ring_attr *attr)
{
	(void)attr;
	return extra_not_supported("vma_modify_ring");
}

static int extra_ioctl(void *cmsg_hdr, size_t cmsg_len)
{
	(void)cmsg_hdr, (void)cmsg_len;
	return extra_not_supported("ioctl");
}

static int extra_get_dpcp_devices(uintptr_t **devices, size_t *devices_num)
{
	(void)devices, (void)devices_num;
	return extra_not_supported("get_dpcp_devices");
}

static int extra_dump_fd_stats(int fd, int log_level)
{
	if (log_level < VLOG_NONE || log_level > VLOG_ALL) {
		errno = EINVAL;
		return -1;
	}
	if (fd < 0) {
		errno = EBADF;
		return -1;
	}
	if (fd != 0 && !sock_fd_get(fd)) {
		errno = EINVAL;   /* not a socket we track */
		return -1;
	}
	if (log_level != VLOG_NONE)
		vma_dump_fd(fd, log_level);
	return 0;
}

#define EXTRA_API_SUPPORTED                                                                                    \
	(VMA_EXTRA_API_REGISTER_RECV_CALLBACK | VMA_EXTRA_API_RECVFROM_ZCOPY | VMA_EXTRA_API_FREE_PACKETS |    \
	 VMA_EXTRA_API_ADD_CONF_RULE | VMA_EXTRA_API_THREAD_OFFLOAD | VMA_EXTRA_API_DUMP_FD_STATS |          \
	 VMA_EXTRA_API_GET_SOCKET_RINGS_NUM | VMA_EXTRA_API_GET_SOCKET_RINGS_FDS |                             \
	 VMA_EXTRA_API_GET_SOCKET_TX_RING_FD | VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER |                       \
	 VMA_EXTRA_API_REGISTER_MEMORY_ON_RING | VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING)

/* The members that work whatever the configuration; SocketXtreme's
 * (EXTRA_API_SOCKETXTREME_BITS) join them under VMA_SOCKETXTREME=1. */
static struct vma_api_t extra_api = {
	.register_recv_callback = extra_register_recv_callback,
	.recvfrom_zcopy = extra_recvfrom_zcopy,
	.free_packets = extra_free_packets,
	.add_conf_rule = extra_add_conf_rule,
	.thread_offload = extra_thread_offload,
	.socketxtreme_poll = extra_socketxtreme_poll,
	.get_socket_rings_num = extra_get_socket_rings_num,
	.get_socket_rings_fds = extra_get_socket_rings_fds,
	.get_socket_tx_ring_fd = extra_get_socket_tx_ring_fd,
	.socketxtreme_free_vma_packets = extra_socketxtreme_free_vma_packets,
	.socketxtreme_ref_vma_buff = extra_socketxtreme_ref_vma_buff,
	.socketxtreme_free_vma_buff = extra_socketxtreme_free_vma_buff,
	.dump_fd_stats = extra_dump_fd_stats,
	.vma_add_ring_profile = extra_add_ring_profile,
	.get_socket_network_header = extra_get_socket_network_header,
	.get_ring_direct_descriptors = extra_get_ring_direct_descriptors,
	.register_memory_on_ring = extra_register_memory_on_ring,
	.deregister_memory_on_ring = extra_deregister_memory_on_ring,
	.vma_modify_ring = extra_modify_ring,
	.vma_extra_supported_mask = EXTRA_API_SUPPORTED,
	.ioctl = extra_ioctl,
	.get_dpcp_devices = extra_get_dpcp_devices,
};

int extra_api_getsockopt(void *val, socklen_t *len)
{
	/* The library comes up first: a rule added now must not be dropped
	 * by the libvma.conf load of a later init. */
	vma_init_once();
	if (!val || !len || *len < (socklen_t)sizeof(struct vma_api_t *)) {
		errno = EINVAL;
		return -1;
	}
	uint64_t mask = EXTRA_API_SUPPORTED | (g_cfg.socketxtreme ? EXTRA_API_SOCKETXTREME_BITS : 0);
	extra_api.vma_extra_supported_mask = mask;   /* the same value from every caller */
	struct vma_api_t *table = &extra_api;
	__builtin_memcpy(val, &table, sizeof(table));
	*len = sizeof(table);
	vlog_debug("Extra API table handed out (capabilities %#llx)",
		   (unsigned long long)extra_api.vma_extra_supported_mask);
	return 0;
}
