/* The shared-memory statistics block: <VMA_STATS_SHMEM_DIR>/vmastat.<pid>.
 * This header is the contract between libvma (writer) and vma_stats (reader),
 * so it holds only fixed-width types and no libvma internals. Any change to a
 * structure below must bump STATS_LAYOUT_VERSION: a reader refuses a block
 * whose magic, version, header size or slot sizes differ from its own. */
#ifndef VMA_STATS_STATS_LAYOUT_H
#define VMA_STATS_STATS_LAYOUT_H

#include <stdint.h>

#define STATS_MAGIC 0x3154415453414d56ULL /* "VMASTAT1" read as little endian */
#define STATS_LAYOUT_VERSION 5u
#define STATS_FILE_PREFIX "vmastat."

/* Fixed capacities besides the sockets (whose count is VMA_STATS_FD_NUM). */
#define STATS_MAX_SOCKETS 1024u
#define STATS_RING_SLOTS 16u
#define STATS_POOL_SLOTS 32u /* two per ring slot */
#define STATS_EPOLL_SLOTS 16u
#define STATS_MC_SLOTS 1024u
#define STATS_NAME_SIZE 64u
#define STATS_VERSION_SIZE 32u
#define STATS_IFNAME_SIZE 16u

enum stats_proto { STATS_PROTO_UDP = 1, STATS_PROTO_TCP = 2 };
enum stats_pool_kind { STATS_POOL_RX = 1, STATS_POOL_TX = 2 };
enum stats_iomux_kind { STATS_IOMUX_SELECT = 1, STATS_IOMUX_POLL = 2, STATS_IOMUX_EPOLL = 3 };

/* TCP states as numbers, in the order netstat names them (tool maps names). */
enum stats_tcp_state {
	STATS_TCP_CLOSED = 0, STATS_TCP_LISTEN, STATS_TCP_SYN_SENT, STATS_TCP_SYN_RCVD,
	STATS_TCP_ESTABLISHED, STATS_TCP_FIN_WAIT_1, STATS_TCP_FIN_WAIT_2,
	STATS_TCP_CLOSE_WAIT, STATS_TCP_CLOSING, STATS_TCP_LAST_ACK, STATS_TCP_TIME_WAIT,
	STATS_TCP_STATE_COUNT
};

/* One live-control request written by the tool and applied by the library's
 * internal thread: the tool writes value/arg, then bumps seq; the library
 * applies it when seq != done and then copies seq into done. */
struct stats_request {
	int32_t value;
	int32_t arg;
	uint32_t seq;
	uint32_t done;
};

struct stats_control {
	struct stats_request zero;        /* -z */
	struct stats_request log_level;   /* -l level */
	struct stats_request log_details; /* -D details */
	struct stats_request fd_dump;     /* -S fd [level]: value = fd (0 = all), arg = level */
};

/* Counters that -z clears. All monotonic, updated with plain increments by
 * the thread owning the socket. */
struct stats_socket_counters {
	uint64_t rx_bytes, rx_packets, rx_eagain, rx_errors;
	uint64_t rx_os_bytes, rx_os_packets, rx_os_eagain, rx_os_errors;
	uint64_t tx_bytes, tx_packets, tx_eagain, tx_errors;
	uint64_t tx_os_bytes, tx_os_packets, tx_os_eagain, tx_os_errors;
	uint64_t tx_dummy, tx_retransmits;
	uint64_t rx_poll_miss, rx_poll_hit, rx_poll_os_hit;
	uint64_t rx_ready_bytes_max, rx_ready_bytes_dropped;
	uint64_t rx_ready_pkts_max, rx_ready_pkts_dropped;
	/* Ring polls made by receive calls that found data already queued
	 * (VMA_RX_CQ_DRAIN_RATE_NSEC). */
	uint64_t rx_drain_polls;
};

struct stats_socket {
	uint32_t in_use;          /* written last on get, first on put */
	int32_t fd;
	uint32_t proto;           /* enum stats_proto */
	uint32_t offloaded;
	uint32_t tcp_state;       /* enum stats_tcp_state */
	uint32_t blocking;
	uint32_t mc_loop;
	uint32_t local_addr;      /* IPv4, network byte order */
	uint32_t peer_addr;
	uint16_t local_port;      /* network byte order */
	uint16_t peer_port;
	uint32_t mc_tx_if;
	uint32_t ring_id;         /* lane << 16 | ifindex (UDP: the lane's first interface) */
	/* Moves of the socket to another lane (VMA_RING_MIGRATION_RATIO_RX);
	 * like the addresses, -z leaves it alone. */
	uint32_t ring_migrations;
	/* Gauges: -z leaves them alone. */
	uint64_t rx_ready_bytes_cur, rx_ready_bytes_limit, rx_ready_pkts_cur;
	struct stats_socket_counters c;
};

struct stats_ring_counters {
	uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes, tx_retransmits, tx_dummy;
	/* requested: kicks asking the kernel to refill the RX ring; received:
	 * wake-ups of the internal thread by the ring (VMA_TCP_CTL_THREAD=1). */
	uint64_t interrupts_requested, interrupts_received;
	uint64_t cq_packets_dropped, cq_drained_max;
	/* The TX doorbell (docs/ring.md, "TX doorbell batching"): doorbells
	 * rung (xdp: sendto syscalls), sends whose doorbell waited for the
	 * next ones, held tails found after their sender had gone. */
	uint64_t tx_doorbells, tx_held, tx_stranded;
};

/* What the stack of a lane (the rings one set of threads drives, see
 * docs/process_model.md) refused or reclaimed to protect itself from a
 * hostile or broken peer (docs/security.md). Written in the lane's first
 * ring slot (has_lane = 1); zero in the others. -z clears them. */
struct stats_lane_counters {
	/* receive frames */
	uint64_t tcp_frame_pressure_drops;  /* in-order segments: socket at its share of frames */
	uint64_t udp_frame_pressure_drops;  /* datagrams: socket at its share of frames */
	uint64_t tcp_ooo_drops;             /* out-of-order segments: per-connection cap or pressure */
	uint64_t tcp_ooo_reneged;           /* out-of-order segments dropped from stale queues */
	uint64_t tcp_coalesced;             /* small segments copied into the frame before them */
	/* listeners */
	uint64_t tcp_syncookies_sent, tcp_syncookies_ok, tcp_syncookies_bad;
	uint64_t tcp_accept_queue_full, tcp_syn_rate_limited;
	/* RFC 5961 and invalid segments */
	uint64_t tcp_challenge_acks, tcp_challenge_acks_limited, tcp_invalid_acks_limited;
	uint64_t tcp_rst_ignored, tcp_out_of_window, tcp_bad_segments;
	/* malformed frames (Ethernet, IPv4, reassembly, UDP) and reassembly
	 * datagrams evicted by its memory cap */
	uint64_t malformed_frames, reass_evicted;
};

struct stats_ring {
	uint32_t in_use;
	uint32_t id;
	char ifname[STATS_IFNAME_SIZE];
	uint32_t moderation_count, moderation_period_usec; /* gauges */
	uint32_t cq_queue_len, cq_buffer_pool_size;        /* gauges */
	struct stats_ring_counters c;
	uint32_t has_lane, reserved;
	struct stats_lane_counters lane;
};

struct stats_pool {
	uint32_t in_use;
	uint32_t id;
	uint32_t kind;            /* enum stats_pool_kind */
	uint32_t reserved;
	uint64_t size;            /* gauge: buffers available now */
	uint64_t no_buffer_errors;
};

struct stats_iomux_counters {
	uint64_t calls, os_ready, offload_ready, poll_miss, poll_hit, timeouts, errors;
	uint64_t polling_ns, total_ns; /* only with VMA_CPU_USAGE_STATS */
};

struct stats_iomux {
	uint32_t in_use;
	uint32_t kind;            /* enum stats_iomux_kind */
	int32_t epfd;             /* epoll only */
	uint32_t tid;             /* last thread that called */
	struct stats_iomux_counters c;
};

struct stats_mc_group {
	uint32_t refs;            /* 0 = free */
	uint32_t group;           /* IPv4, network byte order */
	int32_t fd;
	uint32_t reserved;
};

struct stats_header {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t header_size;     /* sizeof(struct stats_header) */
	uint64_t total_size;      /* bytes of the whole file */
	int32_t pid;
	uint32_t cpu_usage_enabled;
	uint32_t socket_slots, ring_slots, pool_slots, epoll_slots, mc_slots;
	uint32_t socket_size, ring_size, pool_size, iomux_size, mc_size;
	uint32_t reserved;
	/* Byte offsets from the start of the file. */
	uint64_t socket_off, ring_off, pool_off, select_off, poll_off, epoll_off, mc_off;
	char process_name[STATS_NAME_SIZE];
	char lib_version[STATS_VERSION_SIZE];
	struct stats_control control;
};

#endif
