/* The user-space IPv4 stack: Ethernet, IPv4 (with fragmentation and
 * reassembly) and UDP, lwIP style: it knows protocol control blocks (pcbs) and
 * ring_bufs, never sockets or rings. A socket layer owns one struct stack per
 * ring (or per thread), feeds it received frames with stack_input, sends with
 * stack_udp_send, and drives timers with stack_timer_tick.
 *
 * Byte order: every IPv4 address and port in this API is in network order,
 * exactly as in struct sockaddr_in, so the socket layer never converts.
 * Errors are negative errno values. See docs/stack.md. */
#ifndef VMA_STACK_STACK_H
#define VMA_STACK_STACK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ring/ring_buf.h"
#include "stack/stack_counters.h"

#define STACK_ETH_HLEN        14u
#define STACK_IP4_HLEN        20u
#define STACK_UDP_HLEN        8u
#define STACK_IP4_MAX_LEN     65535u
#define STACK_UDP_MAX_PAYLOAD (STACK_IP4_MAX_LEN - STACK_IP4_HLEN - STACK_UDP_HLEN) /* 65507 */
#define STACK_IP4_MIN_MTU     68u

/* The few knobs the stack needs, copied at stack_create (tests build their own;
 * the socket layer fills them from g_cfg). */
struct stack_settings {
	bool tx_ip_checksum;            /* VMA_TX_IP_CHECKSUM: 1 computes the IPv4 header
	                                 * checksum in software; 0 leaves it 0 for a NIC
	                                 * that offloads it */
	bool tx_udp_checksum;           /* 0 sends UDP checksum 0 ("none", legal in IPv4) */
	uint8_t default_ttl;            /* used when a send asks for ttl 0 */
	uint32_t reass_timeout_ms;      /* incomplete datagram lifetime (30000) */
	uint32_t reass_max_datagrams;   /* reassemblies in progress at once (64) */
	uint32_t reass_max_datagram_bytes; /* buffer memory (ring_buf.size) per datagram */
	uint32_t reass_max_total_bytes; /* buffer memory held by all reassemblies */
	uint32_t udp_hash_buckets;      /* per demux table; rounded up to a power of 2 */
};

/* The interface a stack sends on and receives from: a ring, or a fake in tests. */
struct stack_netif {
	uint8_t mac[6];
	uint32_t ip;                    /* our address */
	uint32_t netmask;               /* for the subnet broadcast; 0 = unknown */
	uint32_t mtu;                   /* IP MTU (1500 on plain Ethernet) */
	int ifindex;                    /* reported to receivers (IP_PKTINFO) */
	/* Frames of this interface never crossed a wire (veth, macvlan...):
	 * a kernel sender on the same host leaves their UDP/TCP checksums
	 * partial (TX checksum offload), and Linux does not verify them
	 * either, so neither do we. The IP header checksum is always checked. */
	bool rx_l4_csum_trusted;
	void *ctx;
	/* An empty TX buffer (data = head, len 0) or NULL when none is free. */
	struct ring_buf *(*tx_alloc)(void *ctx);
	/* Takes ownership of one complete frame, whatever it returns (0 or -errno). */
	int (*tx_send)(void *ctx, struct ring_buf *frame);
};

struct stack;
struct stack_udp_pcb;

/* What a receiver learns about a datagram besides its bytes. */
struct stack_udp_rx_info {
	uint32_t src_ip, dst_ip;        /* dst_ip: IP_PKTINFO ipi_addr (group, broadcast...) */
	uint16_t src_port, dst_port;
	uint8_t ttl, tos;               /* IP_RECVTTL / IP_RECVTOS */
	int ifindex;
};

/* Called once per delivery. buf->data is the first payload byte, buf->tot_len
 * == len (0 for an empty datagram); a reassembled datagram is a chain (next).
 * The callee owns one reference and releases it with ring_buf_free. Several
 * pcbs may hold references to the same buffers (multicast): treat the bytes,
 * data, len, next and scratch as read-only, and do not queue by buf->link
 * when buf->refcount > 1. */
typedef void (*stack_udp_recv_fn)(void *arg, struct stack_udp_pcb *pcb,
				  struct ring_buf *buf, uint32_t len,
				  const struct stack_udp_rx_info *info);

void stack_settings_default(struct stack_settings *out);

/* NULL on allocation failure. */
struct stack *stack_create(const struct stack_settings *settings);
/* Frees pending reassemblies; pcbs still alive are freed too. */
void stack_destroy(struct stack *st);
const struct stack_counters *stack_counters(const struct stack *st);

/* Takes ownership of one received frame (one reference): delivers it to the
 * pcbs it is for, holds it for reassembly, or drops and counts it. */
void stack_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *frame);

/* Time in milliseconds from any monotonic clock; expires reassemblies. Also
 * the clock used to stamp fragments that arrive until the next tick. */
void stack_timer_tick(struct stack *st, uint64_t now_ms);
/* Moves the clock forward without running timers. A socket layer calls it
 * before handing the stack packets or calls (each progress pass, connect,
 * write), so timers armed and RTTs measured between two ticks start from
 * the real time, not from the last tick (which may be a timer period old, or
 * 0 before the first one). Never moves the clock back. */
void stack_clock_set(struct stack *st, uint64_t now_ms);
/* The same with microseconds (RTT samples for TCP_INFO). */
void stack_clock_set_us(struct stack *st, uint64_t now_us);

/* Reassemblies in progress and the buffer memory they hold (tests, stats). */
unsigned stack_reass_pending(const struct stack *st, uint32_t *bytes_held);

/* ---- UDP pcbs ---- */
struct stack_udp_pcb *stack_udp_pcb_new(struct stack *st);
/* Removes the pcb from every table; no callback runs after this returns. */
void stack_udp_pcb_free(struct stack_udp_pcb *pcb);
void stack_udp_pcb_set_recv(struct stack_udp_pcb *pcb, stack_udp_recv_fn fn, void *arg);
/* ip may be 0 (INADDR_ANY). port must be non-zero: the kernel socket under the
 * fd chooses ephemeral ports. -EINVAL when already bound or port 0. Several pcbs
 * may share an address (SO_REUSEADDR); unicast goes to one of them. */
int stack_udp_pcb_bind(struct stack_udp_pcb *pcb, uint32_t ip, uint16_t port);
/* SO_REUSEPORT: the unconnected pcbs bound to one address that have it
 * form a group, and a unicast datagram goes to one of them chosen by a
 * hash of its source address and port, so each flow keeps its socket and
 * the flows spread over the group (Linux's reuseport selection). */
void stack_udp_pcb_set_reuseport(struct stack_udp_pcb *pcb, bool on);
/* Only datagrams from ip:port reach the pcb afterwards. Needs a bound pcb
 * (-EINVAL otherwise); local_ip replaces a bound INADDR_ANY when non-zero
 * (the source address the route chose). Connecting again re-targets. */
int stack_udp_pcb_connect(struct stack_udp_pcb *pcb, uint32_t ip, uint16_t port,
			  uint32_t local_ip);
void stack_udp_pcb_disconnect(struct stack_udp_pcb *pcb);
/* source 0: any-source membership (IP_ADD_MEMBERSHIP). source != 0: adds the
 * source to an include-mode list (IP_ADD_SOURCE_MEMBERSHIP). Mixing the two
 * modes on one group gives -EINVAL, a repeat -EADDRINUSE, too many groups or
 * sources -ENOBUFS, a non-multicast group -EINVAL. */
int stack_udp_pcb_join(struct stack_udp_pcb *pcb, uint32_t group, uint32_t source);
/* source 0 leaves the group; otherwise drops that source (and the group with
 * its last source). -EADDRNOTAVAIL when not a member. */
int stack_udp_pcb_leave(struct stack_udp_pcb *pcb, uint32_t group, uint32_t source);
bool stack_udp_pcb_is_member(const struct stack_udp_pcb *pcb, uint32_t group, uint32_t source);
void stack_udp_pcb_get_addr(const struct stack_udp_pcb *pcb, uint32_t *local_ip,
			    uint16_t *local_port, uint32_t *remote_ip, uint16_t *remote_port);

/* ---- UDP send ---- */
struct stack_udp_tx {
	uint32_t src_ip, dst_ip;
	uint16_t src_port, dst_port;
	uint8_t dst_mac[6];             /* resolved by the caller (neighbour table, or
	                                 * stack_eth_multicast_mac) */
	uint8_t tos;
	uint8_t ttl;                    /* 0 = settings.default_ttl */
	bool dont_fragment;             /* DF: -EMSGSIZE instead of fragmenting */
};

/* Fills the addresses of *tx from a pcb (source, and destination if connected). */
void stack_udp_tx_from_pcb(const struct stack_udp_pcb *pcb, struct stack_udp_tx *tx);

/* Sends one datagram made of the iovecs (0..65507 bytes), fragmenting above
 * the MTU. All or nothing: every buffer is taken before anything is sent, and
 * on -ENOBUFS nothing went out. Returns the payload length or -EMSGSIZE,
 * -ENOBUFS, -EINVAL, or the first error of tx_send (frames after it are freed). */
int stack_udp_send(struct stack *st, const struct stack_netif *nif,
		   const struct stack_udp_tx *tx, const struct iovec *iov, int iovcnt);

/* 01:00:5e + low 23 bits of the group (RFC 1112). */
void stack_eth_multicast_mac(uint32_t group, uint8_t mac[6]);

#endif
