/* A packet ring: one hardware (or veth) queue that libvma drives without the
 * kernel stack. Backend-neutral: ring_xdp.c (AF_XDP + eBPF steering),
 * ring_verbs.c (an rdma-core RAW_PACKET QP + ibv_create_flow, docs/verbs.md)
 * and ring_loop.c (in memory, for tests) fill the same ops table. The stack
 * above only sees frames, flows, a wait fd and counters.
 *
 * Threading: a ring is used by one thread at a time (callers lock according
 * to VMA_THREAD_MODE). ring_open/ring_close may be called from any thread. */
#ifndef VMA_RING_RING_H
#define VMA_RING_RING_H

#include <errno.h>
#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring_buf.h"

/* What the steering sends to a ring. Addresses and ports in network order.
 * remote_ip == 0 && remote_port == 0: 3-tuple (listener / bound UDP socket);
 * local_ip == 0 means INADDR_ANY. group != 0: multicast group (local_port 0 =
 * any port), the other fields are ignored. */
struct ring_flow {
	uint8_t proto;        /* IPPROTO_UDP or IPPROTO_TCP */
	uint32_t local_ip;
	uint16_t local_port;
	uint32_t remote_ip;
	uint16_t remote_port;
	uint32_t group;
	/* Not part of the flow's identity: how it may be steered. */
	int owner_fd;         /* the kernel socket that owns the port (proof for vmad); -1 = none */
	uint8_t share;        /* 3-tuple / group: join the share group (sockets shared across fork) */
	/* 5-tuple: the kernel owns this connection now (handed over at fork):
	 * send its packets to the kernel even where a 3-tuple would steer
	 * them to us. Attaching it over an attached flow rewrites that entry. */
	uint8_t to_kernel;
	/* 5-tuple: another ring of this process may steer it now (a TCP
	 * connection moving between the process's lanes): attaching it here
	 * points the existing entry at this ring instead of failing with
	 * -EEXIST. The other ring then only forgets it (forget_flow).
	 * Shared 3-tuple: the socket moving here from another ring of this
	 * process was that ring's only user, so the rule and its place in the
	 * share group move with it rather than a second member joining
	 * (verbs; the XDP program gives a frame to one member anyway). */
	uint8_t takeover;
};

struct ring_counters {
	uint64_t rx_packets;
	uint64_t rx_bytes;
	uint64_t rx_dropped;      /* the kernel had no room in our RX ring */
	uint64_t rx_fill_empty;   /* the kernel found no free buffer to receive into */
	uint64_t tx_packets;
	uint64_t tx_bytes;
	uint64_t tx_no_buffer;    /* tx_alloc found no free frame / tx_send no TX slot */
	uint64_t tx_doorbells;    /* syscalls / doorbell writes actually made */
	uint64_t tx_held;         /* sends whose doorbell was deferred (a burst) */
	uint64_t tx_stranded;     /* held tails found after their sender left (ring_hold.h) */
	uint64_t rx_wakeups;      /* kicks so the kernel refills our RX ring */
	uint64_t rx_refills;      /* batches of freed frames handed back to the fill ring */
	uint64_t tx_completions;  /* TX frames the kernel reported sent (freed) */
};

struct ring;

struct ring_ops {
	const char *name;
	/* Up to max received frames; returns the count (0 = none). Each buffer
	 * has refcount 1, flags RING_BUF_F_RX, data = Ethernet header, len =
	 * tot_len = frame length, rx_time_ns set. ring_buf_free on its last
	 * reference gives the frame back to this ring (refilled in batches of
	 * rx_wre_batching here, in rx_burst). */
	int (*rx_burst)(struct ring *ring, struct ring_buf **bufs, unsigned max);
	/* A free TX frame (refcount 1, data = head, len 0, size = frame size
	 * minus headroom) or NULL, counted in tx_no_buffer. Reaps completions
	 * first when no frame is free. */
	struct ring_buf *(*tx_alloc)(struct ring *ring);
	/* Queues buf (data/len; a chain is copied into its first buffer when it
	 * fits). Ownership passes to the ring in every case: on error the buffer
	 * is freed. Nothing leaves before tx_flush or tx_send_done (or before
	 * tx_wre_batching sends are queued). Returns 0, -ENOBUFS (TX ring full, counted),
	 * -EMSGSIZE or -EINVAL (not a TX buffer of this ring). */
	int (*tx_send)(struct ring *ring, struct ring_buf *buf);
	/* Rings the doorbell once for everything queued, reaps completions. */
	void (*tx_flush)(struct ring *ring);
	/* Ends one application send call: rings the doorbell now, or leaves
	 * the frames queued while a burst is under way or, with more, while
	 * the sender has input waiting whose replies will follow (the adaptive
	 * policy in docs/ring.md). Whoever then polls, sleeps or ticks must
	 * call tx_flush. NULL: tx_flush. */
	void (*tx_send_done)(struct ring *ring, bool more);
	/* Frames queued that the kernel has not been told about. NULL: 0. */
	unsigned (*tx_pending)(const struct ring *ring);
	/* After defer_kicks(ring, owed): tx_flush, tx_send_done and tx_send
	 * (a full batch) no longer ring the doorbell, a syscall in which the
	 * kernel may transmit for microseconds, under the owner's lock; they
	 * set *owed (a flag the owner's lock guards) and the owner calls
	 * tx_kick once it has dropped the lock. tx_kick is safe without the
	 * lock and from several threads at once. NULL: the backend rings at
	 * once. */
	void (*defer_kicks)(struct ring *ring, bool *owed);
	void (*tx_kick)(struct ring *ring);
	/* Returns 0 or a negative errno (-EEXIST, -ENOSPC, -ENOENT, -EINVAL). */
	int (*attach_flow)(struct ring *ring, const struct ring_flow *flow);
	int (*detach_flow)(struct ring *ring, const struct ring_flow *flow);
	/* A 5-tuple attached here that another ring of the process took over
	 * (attach_flow with takeover): drops this ring's record of it without
	 * touching the steering, which now names the other ring. NULL: the
	 * backend cannot hand flows over (connections never move). */
	int (*forget_flow)(struct ring *ring, const struct ring_flow *flow);
	/* A 3-tuple several processes or rings share (fork, SO_REUSEPORT) on a
	 * backend whose device gives every member a copy of each frame (verbs:
	 * the same rule on every member's QP): whether this ring's member
	 * takes a new flow from remote_ip:remote_port, so that exactly one
	 * does. NULL: the backend steers each flow to one member itself
	 * (xdp). */
	bool (*share_admit)(struct ring *ring, const struct ring_flow *three, uint32_t remote_ip,
			    uint16_t remote_port);
	/* Prepares wait_fd to signal the next packet. Returns 0 when armed, 1
	 * when packets are already waiting (do not sleep), or a negative errno. */
	int (*wait_arm)(struct ring *ring);
	/* Without the owner's lock, from any thread: whether rx_burst (or
	 * wait_arm) might have something to do, i.e. frames in the RX ring
	 * or a kernel that asks for a wake-up. Reads only what the kernel and
	 * the owner publish; a "no" may be stale when it returns, so a caller
	 * that sleeps on it must already have wait_fd in its wait set (a
	 * frame that comes later signals it). NULL: always "maybe". */
	bool (*rx_maybe)(const struct ring *ring);
	/* Fills *out with the ring's counters plus what the backend's kernel
	 * side counts (and updates the RX pool's empty count from it). */
	void (*read_counters)(struct ring *ring, struct ring_counters *out);
	void (*close)(struct ring *ring);
	/* In a forked child: lets go of what the child inherited of the
	 * parent's ring (its XSK and vmad connection) without touching the
	 * parent's state; memory stays mapped. NULL: nothing to do. */
	void (*forget)(struct ring *ring);
};

struct ring {
	const struct ring_ops *ops;
	char ifname[IF_NAMESIZE];
	unsigned ifindex;
	unsigned queue;
	uint8_t mac[6];
	uint32_t mtu;
	char driver[32];      /* the kernel driver (ETHTOOL_GDRVINFO), "" when unknown */
	int wait_fd;          /* poll for POLLIN after wait_arm returned 0 */
	struct ring_counters counters;
	struct ring_buf_pool *rx_pool;  /* frames rx_burst hands out */
	struct ring_buf_pool *tx_pool;  /* frames tx_alloc hands out */
	unsigned share_members;         /* share groups this ring is a member of (verbs) */
	/* Steering a port also takes the segments of connections the kernel
	 * holds on it (verbs: a NIC rule cannot ask the kernel; xdp's program
	 * passes them, docs/xdp.md). */
	bool takes_kernel_conns;
};

enum ring_backend {
	RING_BACKEND_AUTO = 0,  /* verbs where an RDMA device serves the interface, else xdp */
	RING_BACKEND_XDP,
	RING_BACKEND_LOOP,    /* in memory: what is sent is received (tests) */
	RING_BACKEND_VERBS,   /* rdma-core RAW_PACKET QP; xdp where it cannot be had */
};

/* Sizing, with the meaning of the VMA_* parameters of the same names; 0 =
 * the parameter's default. ring_config_from_params fills it from g_cfg;
 * unit tests fill it by hand. How the backend maps it (powers of two, the
 * memory cap) is in docs/ring.md. */
struct ring_config {
	enum ring_backend backend;
	unsigned rx_bufs;         /* VMA_RX_BUFS: RX frames, posted and held */
	unsigned tx_bufs;         /* VMA_TX_BUFS */
	unsigned rx_wre;          /* VMA_RX_WRE: RX descriptors */
	unsigned tx_wre;          /* VMA_TX_WRE: TX descriptors */
	unsigned rx_wre_batching; /* VMA_RX_WRE_BATCHING: freed frames per refill */
	unsigned tx_wre_batching; /* VMA_TX_WRE_BATCHING: sends per doorbell at most */
	size_t max_ring_mem;      /* bytes of frames per ring; 0 = RING_DEFAULT_MAX_MEM */
	int force_skb_mode;       /* xdp: do not try native (driver) mode */
	bool huge_pages;          /* VMA_MEM_ALLOC_TYPE=2: frames on huge pages if possible */
	/* Verbs backend only (docs/verbs.md). Here 0 means off, not the
	 * parameter's default: ring_config_from_params fills the defaults. */
	struct ring_verbs_config {
		unsigned tx_max_inline;       /* VMA_TX_MAX_INLINE */
		bool cq_moderation;           /* VMA_CQ_MODERATION_ENABLE */
		unsigned cq_mod_count;        /* VMA_CQ_MODERATION_COUNT */
		unsigned cq_mod_period_us;    /* VMA_CQ_MODERATION_PERIOD_USEC */
		unsigned aim_interval_ms;     /* VMA_CQ_AIM_INTERVAL_MSEC; 0 = no adaptation */
		unsigned aim_max_count;       /* VMA_CQ_AIM_MAX_COUNT */
		unsigned aim_max_period_us;   /* VMA_CQ_AIM_MAX_PERIOD_USEC */
		unsigned aim_rate;            /* VMA_CQ_AIM_INTERRUPTS_RATE_PER_SEC */
		bool keep_qp_full;            /* VMA_CQ_KEEP_QP_FULL */
		unsigned prefetch_before_poll; /* VMA_RX_PREFETCH_BYTES_BEFORE_POLL */
		bool fork_init;               /* VMA_FORK: ibv_fork_init() before the first device */
		bool blueflame_off;           /* VMA_BF=0: MLX5_SHUT_UP_BF=1 before the first device */
		/* Where an interface goes when the verbs backend cannot serve it
		 * (RING_BACKEND_VERBS and AUTO): 0 = xdp; LOOP in unit tests. */
		enum ring_backend fallback;
	} verbs;
};

#define RING_DEFAULT_MAX_MEM ((size_t)32 << 20)

/* Frame counts and descriptor ring sizes a backend uses for cfg. */
struct ring_sizes {
	uint32_t rx_frames;   /* = fill ring size */
	uint32_t rx_descs;    /* kernel -> us RX ring */
	uint32_t tx_frames;   /* = TX ring = completion ring size */
	uint32_t rx_batch;
	uint32_t tx_batch;
	bool huge_pages;      /* ask for the frames on huge pages (ring_config) */
};

/* Sizing rules shared by the backends (powers of two, memory cap for
 * frame_size-byte frames). cfg may be NULL for the defaults. */
void ring_sizes_compute(const struct ring_config *cfg, uint32_t frame_size, struct ring_sizes *out);
/* The VMA_* values from g_cfg. */
void ring_config_from_params(struct ring_config *cfg);

/* Opens queue `queue` of interface ifname. On failure returns NULL with errno
 * set and has logged one warning naming the interface and the reason (no
 * privilege, XDP refused, queue owned by another process); the caller keeps
 * the traffic on the kernel path. cfg may be NULL for defaults. */
struct ring *ring_open(const char *ifname, unsigned queue, const struct ring_config *cfg);
/* Detaches every flow, releases the queue and, with its last ring on the
 * interface, the steering program of this process. Buffers still held are
 * not freed under their holders: the frame memory then stays (a warning
 * says how many) and later ring_buf_free calls only count. NULL is ignored. */
void ring_close(struct ring *ring);

static inline int ring_rx_burst(struct ring *ring, struct ring_buf **bufs, unsigned max)
{
	return ring->ops->rx_burst(ring, bufs, max);
}

static inline struct ring_buf *ring_tx_alloc(struct ring *ring)
{
	return ring->ops->tx_alloc(ring);
}

static inline int ring_tx_send(struct ring *ring, struct ring_buf *buf)
{
	return ring->ops->tx_send(ring, buf);
}

static inline void ring_tx_flush(struct ring *ring)
{
	ring->ops->tx_flush(ring);
}

static inline void ring_tx_send_done(struct ring *ring, bool more)
{
	if (ring->ops->tx_send_done)
		ring->ops->tx_send_done(ring, more);
	else
		ring->ops->tx_flush(ring);
}

static inline unsigned ring_tx_pending(const struct ring *ring)
{
	return ring->ops->tx_pending ? ring->ops->tx_pending(ring) : 0;
}

/* See ring_ops.defer_kicks. False when the backend always rings at once. */
static inline bool ring_defer_kicks(struct ring *ring, bool *owed)
{
	if (!ring->ops->defer_kicks)
		return false;
	ring->ops->defer_kicks(ring, owed);
	return true;
}

static inline void ring_tx_kick(struct ring *ring)
{
	if (ring->ops->tx_kick)
		ring->ops->tx_kick(ring);
}

static inline int ring_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring->ops->attach_flow(ring, flow);
}

static inline int ring_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring->ops->detach_flow(ring, flow);
}

static inline bool ring_can_hand_over_flows(const struct ring *ring)
{
	return ring->ops->forget_flow != NULL;
}

static inline int ring_forget_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring->ops->forget_flow ? ring->ops->forget_flow(ring, flow) : -EOPNOTSUPP;
}

/* True when this ring takes the new flow from remote on the shared
 * 3-tuple three (always, unless its backend spreads flows by admission). */
static inline bool ring_share_admit(struct ring *ring, const struct ring_flow *three, uint32_t remote_ip,
				    uint16_t remote_port)
{
	return !ring->ops->share_admit || ring->ops->share_admit(ring, three, remote_ip, remote_port);
}

static inline int ring_wait_fd(const struct ring *ring)
{
	return ring->wait_fd;
}

static inline int ring_wait_arm(struct ring *ring)
{
	return ring->ops->wait_arm(ring);
}

static inline bool ring_rx_maybe(const struct ring *ring)
{
	return !ring->ops->rx_maybe || ring->ops->rx_maybe(ring);
}

static inline void ring_read_counters(struct ring *ring, struct ring_counters *out)
{
	ring->ops->read_counters(ring, out);
}

static inline struct ring_buf_pool *ring_rx_pool(const struct ring *ring)
{
	return ring->rx_pool;
}

static inline struct ring_buf_pool *ring_tx_pool(const struct ring *ring)
{
	return ring->tx_pool;
}

/* Whether frames of a device with this driver never cross a wire (veth,
 * macvlan, ipvlan, tun, netkit): a kernel sender on the host leaves their
 * UDP/TCP checksums partial and Linux trusts them (VMA_RX_SW_CSUM auto). */
bool ring_driver_is_virtual(const char *driver);
/* Fills ring->mac, ->mtu and ->driver from the interface ring->ifname, asked
 * in the calling thread's network namespace; what cannot be read stays. */
void ring_read_link(struct ring *ring);

/* Opens every queue of an interface with `queues` queues as one ring
 * (ring_multi.c; docs/ring.md, "Multi-queue interfaces"): one member per
 * queue, on AF_XDP all under one member slot, so a flow attached once is
 * received whatever queue the NIC hashes it to. A queue that cannot be
 * joined is left out with one warning. queues <= 1: ring_open(ifname, 0).
 * NULL with errno set (and a warning) when not even queue 0 opens. */
struct ring *ring_open_queues(const char *ifname, unsigned queues, const struct ring_config *cfg);
/* Groups opened rings (members[0] sends and steers) into one; the group
 * owns them from then on. NULL with errno set; the caller still owns them. */
struct ring *ring_multi_wrap(struct ring **members, unsigned count);
/* The rings a group is made of (a plain ring: itself); returns the count,
 * fills out with up to max. */
unsigned ring_multi_members(const struct ring *ring, struct ring **out, unsigned max);

/* Backend constructors, for ring_open and tests. */
struct ring *ring_xdp_open(const char *ifname, unsigned queue, const struct ring_config *cfg);
/* ring_xdp_open under member slot want_slot (-1: any; then preferring a
 * slot free on queues 0 .. span-1). */
struct ring *ring_xdp_open_member(const char *ifname, unsigned queue, const struct ring_config *cfg, int want_slot,
				  unsigned span);
/* The member slot of an xdp ring, -1 for other rings. */
int ring_xdp_slot(const struct ring *ring);
struct ring *ring_loop_open(const char *ifname, unsigned queue, const struct ring_config *cfg);
/* The verbs backend (ring_verbs.c). ring_verbs_open warns once and
 * returns NULL with errno set when the interface has no usable RDMA device
 * or a resource is refused; ring_verbs_open_why does not warn and writes
 * the reason into why instead (ring_open words the fallback). */
struct ring *ring_verbs_open(const char *ifname, unsigned queue, const struct ring_config *cfg);
struct ring *ring_verbs_open_why(const char *ifname, unsigned queue, const struct ring_config *cfg, char *why,
				 size_t why_len);
/* Whether an RDMA device with an active Ethernet port serves ifname (no
 * warning; false when built without rdma-core). */
bool ring_verbs_available(const char *ifname, const struct ring_config *cfg);
/* The verbs ring of ifname, or NULL with the reason in why and the backend
 * to use instead in *fallback (XDP, or LOOP in tests); no warning. After
 * trying the fallback, ring_verbs_fallback_note words the one warning. */
struct ring *ring_try_verbs(const char *ifname, unsigned queue, const struct ring_config *cfg,
			    enum ring_backend *fallback, char *why, size_t why_len);
void ring_verbs_fallback_note(const char *ifname, const char *why, enum ring_backend fallback, bool fallback_opened);
/* The backend cfg asks for on ifname: RING_BACKEND_VERBS where the verbs
 * backend is to be tried (VERBS, or AUTO with a device), else what is
 * left (XDP, LOOP). */
enum ring_backend ring_backend_for(const char *ifname, const struct ring_config *cfg);

#endif
