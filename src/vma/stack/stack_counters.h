/* Why the stack dropped or passed each packet. Every drop path increments
 * exactly one rx_drop_* or tx_* counter, so a packet that vanished can always
 * be found here (and, later, in vma_stats). Plain uint64_t: a stack is used by
 * one thread at a time (VMA_THREAD_MODE serialises callers, like its ring). */
#ifndef VMA_STACK_STACK_COUNTERS_H
#define VMA_STACK_STACK_COUNTERS_H

#include <stdint.h>

struct stack_counters {
	/* RX, in the order a frame meets the checks */
	uint64_t rx_frames;               /* frames given to stack_input */
	uint64_t rx_drop_eth_truncated;   /* shorter than an Ethernet header, or a chain */
	uint64_t rx_drop_eth_not_for_us;  /* destination MAC not ours/broadcast/IPv4 multicast */
	uint64_t rx_drop_eth_vlan;        /* 802.1Q/802.1ad tagged: not supported yet */
	uint64_t rx_drop_eth_not_ipv4;    /* any other EtherType (ARP stays with the kernel) */
	uint64_t rx_drop_ip_bad_header;   /* truncated, version != 4, IHL < 5 or past the frame */
	uint64_t rx_drop_ip_bad_length;   /* total length < header or > frame */
	uint64_t rx_drop_ip_bad_checksum;
	uint64_t rx_drop_ip_bad_source;   /* multicast or broadcast source address */
	uint64_t rx_drop_ip_not_for_us;   /* destination not ours, broadcast or multicast */
	uint64_t rx_drop_ip_proto;        /* not UDP (TCP comes later) */
	uint64_t rx_reass_fragments;      /* fragments accepted into reassembly */
	uint64_t rx_reass_ok;             /* datagrams rebuilt */
	uint64_t rx_drop_reass_bad;       /* non-final fragment not a multiple of 8, empty, or
	                                   * inconsistent with the known datagram end */
	uint64_t rx_drop_reass_duplicate; /* exact repeat of a fragment held (fragment dropped) */
	uint64_t rx_drop_reass_overlap;   /* partial overlap (whole datagram dropped) */
	uint64_t rx_drop_reass_too_big;   /* would end past 65535 bytes (whole datagram dropped) */
	uint64_t rx_drop_reass_overflow;  /* datagram evicted: table or memory cap reached */
	uint64_t rx_drop_reass_timeout;   /* datagram incomplete when its timer ran out */
	uint64_t rx_drop_udp_bad_length;  /* UDP length < 8 or > IP payload */
	uint64_t rx_drop_udp_bad_checksum;
	uint64_t rx_drop_udp_no_pcb;      /* nobody bound/joined for it (or port 0) */
	uint64_t rx_udp_datagrams;        /* valid UDP datagrams demultiplexed */
	uint64_t rx_udp_delivered;        /* deliveries to pcbs (a multicast one counts per pcb) */
	/* TX */
	uint64_t tx_udp_datagrams;
	uint64_t tx_frames;
	uint64_t tx_fragmented;           /* datagrams that needed more than one frame */
	uint64_t tx_drop_no_buf;          /* tx_alloc returned NULL: nothing sent */
	uint64_t tx_drop_too_big;         /* > 65507 bytes, or DF and above the MTU */
	uint64_t tx_drop_send_error;      /* tx_send refused a frame */
};

#endif
