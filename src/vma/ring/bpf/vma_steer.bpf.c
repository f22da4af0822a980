// SPDX-License-Identifier: GPL-2.0
/* Flow steering for the AF_XDP ring: only IPv4 TCP/UDP packets of flows a
 * libvma process attached go to its XSK; everything else (ARP, ICMP, IPv6,
 * fragments, unknown ports) continues to the kernel with XDP_PASS.
 * Lookup order: 5-tuple, 3-tuple on the local address, 3-tuple on INADDR_ANY,
 * multicast group (exact port, then any port). Keys are in network order and
 * laid out exactly as struct ring_xdp_key5/key3/keygrp in ring_xdp_maps.h. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "../ring_xdp_maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, RING_XDP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} vma_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RING_XDP_MAX_FLOWS);
	__type(key, struct ring_xdp_key5);
	__type(value, __u32);
} vma_flows5 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RING_XDP_MAX_FLOWS);
	__type(key, struct ring_xdp_key3);
	__type(value, __u32);
} vma_flows3 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RING_XDP_MAX_FLOWS);
	__type(key, struct ring_xdp_keygrp);
	__type(value, __u32);
} vma_groups SEC(".maps");

/* The ports sit at the same offsets in TCP and UDP headers. */
struct l4_ports {
	__be16 source;
	__be16 dest;
};

static __always_inline int lookup_flow(const struct iphdr *ip, const struct l4_ports *ports)
{
	struct ring_xdp_key5 k5 = {
		.local_ip = ip->daddr, .remote_ip = ip->saddr,
		.local_port = ports->dest, .remote_port = ports->source,
		.proto = ip->protocol,
	};
	if (bpf_map_lookup_elem(&vma_flows5, &k5))
		return 1;

	struct ring_xdp_key3 k3 = {
		.local_ip = ip->daddr, .local_port = ports->dest, .proto = ip->protocol,
	};
	if (bpf_map_lookup_elem(&vma_flows3, &k3))
		return 1;
	k3.local_ip = 0; /* INADDR_ANY listeners and bound sockets */
	if (bpf_map_lookup_elem(&vma_flows3, &k3))
		return 1;

	/* 224.0.0.0/4 */
	if ((ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000)) {
		struct ring_xdp_keygrp kg = {
			.group = ip->daddr, .port = ports->dest, .proto = ip->protocol,
		};
		if (bpf_map_lookup_elem(&vma_groups, &kg))
			return 1;
		kg.port = 0;
		if (bpf_map_lookup_elem(&vma_groups, &kg))
			return 1;
	}
	return 0;
}

SEC("xdp")
int vma_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;

	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP)
		return XDP_PASS;
	/* Fragments need the kernel's reassembly: MF set or a non-zero offset. */
	if (ip->frag_off & bpf_htons(0x3fff))
		return XDP_PASS;

	struct l4_ports *ports = (void *)ip + ip->ihl * 4;
	if ((void *)(ports + 1) > data_end)
		return XDP_PASS;

	if (!lookup_flow(ip, ports))
		return XDP_PASS;
	/* Too long for a UMEM frame (MTU above ~3.8 KB, skb mode): the XSK
	 * would drop it; the kernel socket the stack keeps receives it. */
	if (data_end - data > RING_XDP_MAX_RX_FRAME)
		return XDP_PASS;
	/* No XSK on this queue (its owner died or bound another queue): the
	 * fallback action in the flags keeps the packet on the kernel path. */
	return bpf_redirect_map(&vma_xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
