/* Map key layouts shared by the eBPF steering program and ring_xdp.c.
 * Only fixed-width kernel types, so both the BPF and the host compiler see
 * the same bytes. Every field is in network byte order; padding is explicit
 * and must be zero (hash maps compare whole keys). */
#ifndef VMA_RING_XDP_MAPS_H
#define VMA_RING_XDP_MAPS_H

#include <linux/types.h>

#define RING_XDP_MAX_QUEUES 64
/* Entries of the 5-tuple and of the 3-tuple map, each, per interface:
 * every process's connections and bound ports on it (docs/process_model.md,
 * "Limits of this step"). Hash maps preallocate their elements: about
 * 5.5 MB of kernel memory per map. */
#define RING_XDP_MAX_FLOWS 65536
/* Multicast groups (address, port) per interface. */
#define RING_XDP_MAX_GROUPS 4096
/* Processes (members) per interface that own an XSK on the shared UMEM of a
 * queue. The XSK map's key is queue * RING_XDP_MAX_MEMBERS + member slot;
 * flow values name the member slot (docs/process_model.md). */
#define RING_XDP_MAX_MEMBERS 32
#define RING_XDP_XSK_KEYS (RING_XDP_MAX_QUEUES * RING_XDP_MAX_MEMBERS)
/* A flows3 value with this bit set names a share group (vma_shares index):
 * a listening or bound socket several processes use, spread over them by
 * the hash of the remote address and port, as SO_REUSEPORT would. */
#define RING_XDP_SHARE_BIT 0x80000000u
#define RING_XDP_MAX_SHARES 1024
/* A flow value that sends matching packets to the kernel (e.g. a multicast
 * group several processes joined: each one's kernel socket gets a copy). */
#define RING_XDP_TO_KERNEL 0xffffffffu
/* The same, for one member's entry (a connection it handed to the kernel):
 * any value >= RING_XDP_MAX_MEMBERS passes; the slot says whose it is, so
 * vmad removes it with the member's other entries. */
#define RING_XDP_KERNEL_OF(slot) (0x40000000u | (slot))
/* UMEM frames are 4096 bytes; the kernel keeps XDP_PACKET_HEADROOM (256)
 * and we 2 (alignment) in front of the packet. A longer frame cannot be
 * received into an XSK: the program leaves it to the kernel instead. */
#define RING_XDP_FRAME_SIZE 4096
#define RING_XDP_FRAME_HEADROOM 2
#define RING_XDP_MAX_RX_FRAME (RING_XDP_FRAME_SIZE - 256 - RING_XDP_FRAME_HEADROOM)

struct ring_xdp_key5 {
	__be32 local_ip;
	__be32 remote_ip;
	__be16 local_port;
	__be16 remote_port;
	__u8 proto;
	__u8 pad[3];
};

struct ring_xdp_key3 {
	__be32 local_ip; /* 0 = INADDR_ANY */
	__be16 local_port;
	__u8 proto;
	__u8 pad;
};

struct ring_xdp_keygrp {
	__be32 group;
	__be16 port; /* 0 = any port */
	__u8 proto;
	__u8 pad;
};

/* The spread of a share group: which member a new flow goes to follows
 * this hash of the remote address and port and the local port (as loaded
 * from the headers, network order), through ring_xdp_share_pick. The XDP
 * program and the verbs backend's members (ring_verbs_share.c) use both.
 * Linux picks ephemeral ports of one parity, and the address and
 * destination port are fixed per client: a full avalanche (the murmur3
 * finaliser) so that every input bit reaches the low bits. */
static inline __u32 ring_xdp_share_hash(__be32 remote_ip, __be16 remote_port, __be16 local_port)
{
	__u32 h = remote_ip ^ ((__u32)remote_port << 16 | local_port);
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* The member of a share group that a flow of hash h goes to: the one whose
 * weight for h is highest (rendezvous hashing). Unlike h % count, which
 * moves nearly every flow when a member comes or goes, this moves only the
 * leaving member's flows, and on a join only those the newcomer wins (one
 * in count + 1): a handshake in flight when a pre-fork server's worker is
 * killed, restarted or reloaded keeps reaching the process that answered
 * its SYN. members: ids, any order (count <= RING_XDP_MAX_MEMBERS); the
 * loop's constant bound is for the BPF verifier. */
static inline __u32 ring_xdp_share_weight(__u32 h, __u32 member)
{
	__u32 w = h ^ (member * 0x9e3779b9u);
	w ^= w >> 16;
	w *= 0x7feb352du;
	w ^= w >> 15;
	w *= 0x846ca68bu;
	w ^= w >> 16;
	return w;
}

static inline __u32 ring_xdp_share_pick(const __u32 *members, __u32 count, __u32 h)
{
	__u32 best = members[0], best_w = ring_xdp_share_weight(h, members[0]);

	for (__u32 i = 1; i < RING_XDP_MAX_MEMBERS; i++) {
		if (i >= count)
			break;
		__u32 w = ring_xdp_share_weight(h, members[i]);
		if (w > best_w || (w == best_w && members[i] < best)) {
			best_w = w;
			best = members[i];
		}
	}
	return best;
}

/* vma_shares value: the member slots a share group spreads over. */
struct ring_xdp_share {
	__u32 count;
	__u32 slots[RING_XDP_MAX_MEMBERS];
};

#endif
