/*
 * The VMA Extra API: functions a program reaches through a table that the
 * library hands out, for what the socket API cannot say (a receive callback,
 * zero-copy receive, rules added at run time, ring fds, ...).
 *
 * Binary compatible with the header libvma 9.8 installs as
 * <mellanox/vma_extra.h>: the same option numbers, flag values, structure
 * layouts and the same order of struct vma_api_t, so a program built against
 * either header runs against either library. tests/unit/test_extra_layout.c
 * pins every size, offset and value below. What each call does in this
 * library, and what it does not do, is in docs/extra_api.md.
 *
 * Written for this project from the documented facts (the VMA manual's Extra
 * API chapter and the public header's layouts).
 */
#ifndef VMA_EXTRA_H
#define VMA_EXTRA_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- flags of recvfrom_zcopy() ---- */
/* In: never fall back to copying the data. */
#define MSG_VMA_ZCOPY_FORCE 0x01000000
/* Out: the buffer holds a struct vma_packets_t (zero copy was done). */
#define MSG_VMA_ZCOPY 0x00040000

/* ---- options of setsockopt()/getsockopt(), level SOL_SOCKET ---- */
/* getsockopt(-1, SOL_SOCKET, SO_VMA_GET_API, &ptr, &len): the API table. */
#define SO_VMA_GET_API 2800
/* The user_data a SocketXtreme completion reports for the socket. */
#define SO_VMA_USER_DATA 2801
/* struct vma_ring_alloc_logic_attr: the socket's own ring allocation. */
#define SO_VMA_RING_ALLOC_LOGIC 2810
#define SO_VMA_RING_USER_MEMORY 2811
#define SO_VMA_FLOW_TAG 2820
#define SO_VMA_SHUTDOWN_RX 2821

/* A send flag: walk the send path without putting the packet on the wire
 * (offloaded sockets; EINVAL on any other). */
#define VMA_SND_FLAGS_DUMMY MSG_SYN

/* What a receive callback decides for the datagram it was shown. */
typedef enum {
	VMA_PACKET_DROP,   /* free it now */
	VMA_PACKET_RECV,   /* queue it: the usual receive calls read it */
	VMA_PACKET_HOLD    /* the application keeps it; free_packets() returns it */
} vma_recv_callback_retval_t;

/* ---- SocketXtreme ---- */
/* The events of a completion beyond the epoll bits (which it also uses). */
typedef enum {
	VMA_SOCKETXTREME_PACKET = (1ULL << 32),
	VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED = (1ULL << 33)
} vma_socketxtreme_events_t;

struct vma_buff_t {
	struct vma_buff_t *next;   /* NULL for the last buffer of a packet */
	void *payload;
	uint16_t len;
};

struct vma_packet_desc_t {
	size_t num_bufs;
	uint16_t total_len;
	struct vma_buff_t *buff_lst;
};

struct vma_completion_t {
	struct vma_packet_desc_t packet;   /* with VMA_SOCKETXTREME_PACKET */
	uint64_t events;
	uint64_t user_data;                /* the fd unless SO_VMA_USER_DATA set it */
	struct sockaddr_in src;
	int listen_fd;                     /* with NEW_CONNECTION_ACCEPTED */
};

/* ---- zero-copy receive ---- */
/* One datagram: its id (for free_packets) and its fragments. Arrays of
 * vma_packet_t given to free_packets step by sizeof(struct vma_packet_t). */
struct __attribute__((packed)) vma_packet_t {
	void *packet_id;
	size_t sz_iov;
	struct iovec iov[];
};

/* What recvfrom_zcopy writes into the caller's buffer. */
struct __attribute__((packed)) vma_packets_t {
	size_t n_packet_num;
	struct vma_packet_t pkts[];
};

/* What a receive callback is told besides the data. Compare struct_sz with
 * sizeof(struct vma_info_t) before reading fields a later version added. */
struct __attribute__((packed)) vma_info_t {
	size_t struct_sz;
	void *packet_id;                   /* for VMA_PACKET_HOLD and free_packets */
	struct sockaddr_in *src;           /* network byte order */
	struct sockaddr_in *dst;
	size_t payload_sz;
	uint32_t socket_ready_queue_pkt_count;   /* already queued, not this one */
	uint32_t socket_ready_queue_byte_count;
	struct timespec hw_timestamp;      /* zero: no hardware clock here */
	struct timespec sw_timestamp;      /* CLOCK_REALTIME at receive */
};

struct vma_rate_limit_t {
	uint32_t rate;             /* Kbit/s */
	uint32_t max_burst_sz;     /* bytes */
	uint16_t typical_pkt_sz;   /* bytes */
};

typedef int vma_ring_profile_key;

typedef enum {
	RING_LOGIC_PER_INTERFACE = 0,
	RING_LOGIC_PER_IP = 1,
	RING_LOGIC_PER_SOCKET = 10,
	RING_LOGIC_PER_USER_ID = 11,
	RING_LOGIC_PER_THREAD = 20,
	RING_LOGIC_PER_CORE = 30,
	RING_LOGIC_PER_CORE_ATTACH_THREADS = 31,
	RING_LOGIC_LAST
} ring_logic_t;

typedef enum {
	VMA_RING_ALLOC_MASK_RING_PROFILE_KEY = (1 << 0),
	VMA_RING_ALLOC_MASK_RING_USER_ID = (1 << 1),
	VMA_RING_ALLOC_MASK_RING_INGRESS = (1 << 2),
	VMA_RING_ALLOC_MASK_RING_ENGRESS = (1 << 3),
} vma_ring_alloc_logic_attr_comp_mask;

/* The value of SO_VMA_RING_ALLOC_LOGIC (20 bytes). */
struct vma_ring_alloc_logic_attr {
	uint32_t comp_mask;            /* vma_ring_alloc_logic_attr_comp_mask */
	ring_logic_t ring_alloc_logic;
	uint32_t ring_profile_key;
	uint32_t user_id;              /* RING_LOGIC_PER_USER_ID */
	uint32_t ingress : 1;
	uint32_t engress : 1;
	uint32_t reserved : 30;
};

/* ---- ring profiles, ring modification, direct descriptors ----
 * Layouts kept for binary compatibility; the calls taking them report
 * "not supported" here (docs/extra_api.md). */
typedef enum {
	VMA_RING_PACKET,
	VMA_RING_EXTERNAL_MEM,
} vma_ring_type;

struct vma_packet_queue_ring_attr {
	uint32_t comp_mask;
};

struct vma_external_mem_attr {
	uint32_t comp_mask;
};

struct vma_ring_type_attr {
	uint32_t comp_mask;
	vma_ring_type ring_type;
	union {
		struct vma_packet_queue_ring_attr ring_pktq;
		struct vma_external_mem_attr ring_ext;
	};
};

typedef enum {
	VMA_MODIFY_RING_CQ_MODERATION = (1 << 0),
	VMA_MODIFY_RING_CQ_ARM = (1 << 1),
} vma_modify_ring_mask;

struct vma_cq_moderation_attr {
	uint32_t cq_moderation_count;
	uint32_t cq_moderation_period_usec;
};

struct vma_cq_arm_attr {
	uint32_t reserved;
};

struct vma_modify_ring_attr {
	uint32_t comp_bit_mask;        /* vma_modify_ring_mask */
	int ring_fd;
	union {
		struct vma_cq_moderation_attr cq_moderation;
		struct vma_cq_arm_attr cq_arm;
	};
};

struct vma_mlx_hw_device_data;   /* verbs-only: never defined here */

/* ---- capability bits of vma_api_t.vma_extra_supported_mask ----
 * A member whose bit is clear answers -1 with errno set (EOPNOTSUPP). */
typedef enum {
	VMA_EXTRA_API_REGISTER_RECV_CALLBACK = (1 << 0),
	VMA_EXTRA_API_RECVFROM_ZCOPY = (1 << 1),
	VMA_EXTRA_API_FREE_PACKETS = (1 << 2),
	VMA_EXTRA_API_ADD_CONF_RULE = (1 << 3),
	VMA_EXTRA_API_THREAD_OFFLOAD = (1 << 4),
	VMA_EXTRA_API_DUMP_FD_STATS = (1 << 5),
	VMA_EXTRA_API_SOCKETXTREME_POLL = (1 << 6),
	VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_PACKETS = (1 << 7),
	VMA_EXTRA_API_SOCKETXTREME_REF_VMA_BUFF = (1 << 8),
	VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_BUFF = (1 << 9),
	VMA_EXTRA_API_GET_SOCKET_RINGS_NUM = (1 << 10),
	VMA_EXTRA_API_GET_SOCKET_RINGS_FDS = (1 << 11),
	VMA_EXTRA_API_GET_SOCKET_TX_RING_FD = (1 << 12),
	VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER = (1 << 13),
	VMA_EXTRA_API_GET_RING_DIRECT_DESCRIPTORS = (1 << 14),
	VMA_EXTRA_API_REGISTER_MEMORY_ON_RING = (1 << 15),
	VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING = (1 << 16),
	VMA_EXTRA_API_ADD_RING_PROFILE = (1 << 17),
	VMA_EXTRA_API_MODIFY_RING = (1 << 18),
	VMA_EXTRA_API_IOCTL = (1 << 19),
	VMA_EXTRA_API_GET_DPCP_DEVICES = (1 << 20),
} vma_extra_api_mask;

/* The receive callback (register_recv_callback). Called in an application
 * thread that is inside a receive or poll call (never with a lock of the
 * library held, so it may call any socket function), after the UDP header
 * was checked and before the datagram is queued. iov and vma_info are
 * valid only during the call. */
typedef vma_recv_callback_retval_t (*vma_recv_callback_t)(int fd, size_t sz_iov, struct iovec iov[],
							  struct vma_info_t *vma_info, void *context);

/* The table getsockopt(SO_VMA_GET_API) hands out. The member order is the
 * ABI: never reorder, only append. */
struct __attribute__((packed)) vma_api_t {
	/* callback NULL unregisters. 0, or -1: EINVAL (not an offloaded UDP
	 * socket or TCP connection), EBADF. */
	int (*register_recv_callback)(int s, vma_recv_callback_t callback, void *context);
	/* Receives one datagram without copying when *flags allows: see
	 * MSG_VMA_ZCOPY_FORCE / MSG_VMA_ZCOPY. Returns the payload bytes. */
	int (*recvfrom_zcopy)(int s, void *buf, size_t len, int *flags, struct sockaddr *from, socklen_t *fromlen);
	/* Returns datagrams of recvfrom_zcopy or VMA_PACKET_HOLD. 0, or -1:
	 * EINVAL (not offloaded), ENOENT (not a packet of s). */
	int (*free_packets)(int s, struct vma_packet_t *pkts, size_t count);
	/* A libvma.conf line, first in the list, for sockets made afterwards. */
	int (*add_conf_rule)(const char *config_line);
	/* Sockets thread tid creates afterwards: offloaded (1) or not (0). */
	int (*thread_offload)(int offload, pthread_t tid);
	/* VMA_SOCKETXTREME=1: up to ncompletions completions of the ring fd's
	 * sockets (flags: 0). The count, or -1: EOPNOTSUPP (mode off),
	 * EBADFD (not a ring fd). */
	int (*socketxtreme_poll)(int fd, struct vma_completion_t *completions, unsigned int ncompletions, int flags);
	int (*get_socket_rings_num)(int fd);
	int (*get_socket_rings_fds)(int fd, int *ring_fds, int ring_fds_sz);
	int (*get_socket_tx_ring_fd)(int sock_fd, struct sockaddr *to, socklen_t tolen);
	/* Drops a reference of each buffer of the packets (the frames go back
	 * at the last). 0, or -1: EINVAL (not a buffer lent). */
	int (*socketxtreme_free_vma_packets)(struct vma_packet_desc_t *packets, int num);
	/* One reference more / less on a buffer; the count after the change
	 * (0: given back), or -1: EINVAL. */
	int (*socketxtreme_ref_vma_buff)(struct vma_buff_t *buff);
	int (*socketxtreme_free_vma_buff)(struct vma_buff_t *buff);
	/* Logs fd's state (0: every fd) at log_level (-1 none .. 8 all). */
	int (*dump_fd_stats)(int fd, int log_level);
	int (*vma_add_ring_profile)(struct vma_ring_type_attr *profile, vma_ring_profile_key *key);
	/* The Ethernet, IP and UDP headers a connected socket sends with.
	 * ptr NULL: *len = the size needed. */
	int (*get_socket_network_header)(int fd, void *ptr, uint16_t *len);
	int (*get_ring_direct_descriptors)(int fd, struct vma_mlx_hw_device_data *data);
	int (*register_memory_on_ring)(int fd, void *addr, size_t length, uint32_t *key);
	int (*deregister_memory_on_ring)(int fd, void *addr, size_t length);
	int (*vma_modify_ring)(struct vma_modify_ring_attr *mr_data);
	/* vma_extra_api_mask bits of the members that work. */
	uint64_t vma_extra_supported_mask;
	int (*ioctl)(void *cmsg_hdr, size_t cmsg_len);
	int (*get_dpcp_devices)(uintptr_t **devices, size_t *devices_num);
};

/* The API table, or NULL when the library is not loaded (the kernel then
 * refuses option 2800 on fd -1). Ask once and keep the pointer. */
static inline struct vma_api_t *vma_get_api(void)
{
	struct vma_api_t *api = NULL;
	socklen_t len = sizeof(api);
	if (getsockopt(-1, SOL_SOCKET, SO_VMA_GET_API, &api, &len) < 0)
		return NULL;
	return api;
}

#ifdef __cplusplus
}
#endif

#endif /* VMA_EXTRA_H */
