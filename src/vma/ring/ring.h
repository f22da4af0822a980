/* A packet ring: one hardware (or veth) queue that libvma drives without the
 * kernel stack. Backend-neutral: ring_xdp.c (AF_XDP + eBPF steering) is the
 * first backend; a verbs backend (RAW_PACKET QP + ibv_create_flow) fills the
 * same ops table later. The stack above only sees frames, flows, a wait fd
 * and counters.
 *
 * Threading: a ring is used by one thread at a time (callers lock according
 * to VMA_THREAD_MODE). ring_open/ring_close may be called from any thread. */
#ifndef VMA_RING_RING_H
#define VMA_RING_RING_H

#include <net/if.h>
#include <stdint.h>

/* One received frame. data points into ring-owned memory and stays valid
 * until the frame is handed back with ring_rx_release. */
struct ring_pkt {
	uint8_t *data;     /* Ethernet header; the IP header behind 14 bytes of it is 4-aligned */
	uint32_t len;      /* whole frame */
	uint64_t handle;   /* backend buffer id, for ring_rx_release */
};

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
};

struct ring_counters {
	uint64_t rx_packets;
	uint64_t rx_bytes;
	uint64_t rx_dropped;      /* the kernel had no room in our RX ring */
	uint64_t rx_fill_empty;   /* the kernel found no free buffer to receive into */
	uint64_t tx_packets;
	uint64_t tx_bytes;
	uint64_t tx_no_buffer;    /* tx_post refused: no free frame or TX slot */
	uint64_t tx_doorbells;    /* syscalls / doorbell writes actually made */
	uint64_t rx_wakeups;      /* kicks so the kernel refills our RX ring */
};

struct ring;

struct ring_ops {
	const char *name;
	/* Up to max received frames into pkts; returns the count (0 = none). */
	int (*rx_burst)(struct ring *ring, struct ring_pkt *pkts, unsigned max);
	/* Hands frames back for reuse by the receive side. */
	void (*rx_release)(struct ring *ring, const struct ring_pkt *pkts, unsigned count);
	/* Copies one frame into a TX buffer and queues it; nothing is sent
	 * before tx_flush. Returns 0, or -ENOBUFS (counted) / -EMSGSIZE. */
	int (*tx_post)(struct ring *ring, const void *frame, uint32_t len);
	/* Rings the doorbell once for everything posted, reaps completions. */
	void (*tx_flush)(struct ring *ring);
	/* Returns 0 or a negative errno (-EEXIST, -ENOSPC, -ENOENT, -EINVAL). */
	int (*attach_flow)(struct ring *ring, const struct ring_flow *flow);
	int (*detach_flow)(struct ring *ring, const struct ring_flow *flow);
	/* Prepares wait_fd to signal the next packet. Returns 0 when armed, 1
	 * when packets are already waiting (do not sleep), or a negative errno. */
	int (*wait_arm)(struct ring *ring);
	/* Fills *out with the ring's counters plus what the backend's kernel
	 * side counts. */
	void (*read_counters)(struct ring *ring, struct ring_counters *out);
	void (*close)(struct ring *ring);
};

struct ring {
	const struct ring_ops *ops;
	char ifname[IF_NAMESIZE];
	unsigned ifindex;
	unsigned queue;
	uint8_t mac[6];
	uint32_t mtu;
	int wait_fd;          /* poll for POLLIN after wait_arm returned 0 */
	struct ring_counters counters;
};

enum ring_backend {
	RING_BACKEND_AUTO = 0,
	RING_BACKEND_XDP,
};

struct ring_config {
	enum ring_backend backend;
	unsigned rx_size;     /* descriptors; 0 = default, rounded up to a power of two */
	unsigned tx_size;
	int force_skb_mode;   /* xdp: do not try native (driver) mode */
};

/* Opens queue `queue` of interface ifname. On failure returns NULL with errno
 * set and has logged one warning naming the interface and the reason (no
 * privilege, XDP refused, queue owned by another process); the caller keeps
 * the traffic on the kernel path. cfg may be NULL for defaults. */
struct ring *ring_open(const char *ifname, unsigned queue, const struct ring_config *cfg);
/* Detaches every flow, releases the queue and, with its last ring on the
 * interface, the steering program of this process. NULL is ignored. */
void ring_close(struct ring *ring);

static inline int ring_rx_burst(struct ring *ring, struct ring_pkt *pkts, unsigned max)
{
	return ring->ops->rx_burst(ring, pkts, max);
}

static inline void ring_rx_release(struct ring *ring, const struct ring_pkt *pkts, unsigned count)
{
	ring->ops->rx_release(ring, pkts, count);
}

static inline int ring_tx_post(struct ring *ring, const void *frame, uint32_t len)
{
	return ring->ops->tx_post(ring, frame, len);
}

static inline void ring_tx_flush(struct ring *ring)
{
	ring->ops->tx_flush(ring);
}

static inline int ring_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring->ops->attach_flow(ring, flow);
}

static inline int ring_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring->ops->detach_flow(ring, flow);
}

static inline int ring_wait_fd(const struct ring *ring)
{
	return ring->wait_fd;
}

static inline int ring_wait_arm(struct ring *ring)
{
	return ring->ops->wait_arm(ring);
}

static inline void ring_read_counters(struct ring *ring, struct ring_counters *out)
{
	ring->ops->read_counters(ring, out);
}

/* Backend constructors, for ring_open and tests. */
struct ring *ring_xdp_open(const char *ifname, unsigned queue, const struct ring_config *cfg);

#endif
