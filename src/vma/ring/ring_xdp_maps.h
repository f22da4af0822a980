/* Map key layouts shared by the eBPF steering program and ring_xdp.c.
 * Only fixed-width kernel types, so both the BPF and the host compiler see
 * the same bytes. Every field is in network byte order; padding is explicit
 * and must be zero (hash maps compare whole keys). */
#ifndef VMA_RING_XDP_MAPS_H
#define VMA_RING_XDP_MAPS_H

#include <linux/types.h>

#define RING_XDP_MAX_QUEUES 64
#define RING_XDP_MAX_FLOWS 4096
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

#endif
