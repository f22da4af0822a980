/* Map key layouts shared by the eBPF steering program and ring_xdp.c.
 * Only fixed-width kernel types, so both the BPF and the host compiler see
 * the same bytes. Every field is in network byte order; padding is explicit
 * and must be zero (hash maps compare whole keys). */
#ifndef VMA_RING_XDP_MAPS_H
#define VMA_RING_XDP_MAPS_H

#include <linux/types.h>

#define RING_XDP_MAX_QUEUES 64
#define RING_XDP_MAX_FLOWS 4096

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
