// SPDX-License-Identifier: GPL-2.0
/* Flow steering for the AF_XDP rings of every libvma process on one
 * interface (vmad loads it once, docs/process_model.md): only IPv4 TCP/UDP
 * packets of flows a process attached go to that process's XSK; everything
 * else (ARP, ICMP, IPv6, fragments, unknown ports) continues to the kernel
 * with XDP_PASS.
 * Lookup order: 5-tuple, 3-tuple on the local address, 3-tuple on INADDR_ANY,
 * multicast group (exact port, then any port). A TCP packet that only a
 * 3-tuple matched, other than a SYN, first asks whether it belongs to a
 * connection the kernel holds (kernel_owns). A flow's value is the member
 * slot of the process that owns it; a 3-tuple may name a share group whose
 * members get new flows by hash of the remote address and port; the XSK is
 * found at key rx_queue * RING_XDP_MAX_MEMBERS + slot. Keys are in network
 * order and laid out exactly as struct ring_xdp_key5/key3/keygrp in
 * ring_xdp_maps.h. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "../ring_xdp_maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, RING_XDP_XSK_KEYS);
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
	__uint(max_entries, RING_XDP_MAX_GROUPS);
	__type(key, struct ring_xdp_keygrp);
	__type(value, __u32);
} vma_groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RING_XDP_MAX_SHARES);
	__type(key, __u32);
	__type(value, struct ring_xdp_share);
} vma_shares SEC(".maps");

#define NO_FLOW 0xfffffffeu

/* The ports sit at the same offsets in TCP and UDP headers. */
struct l4_ports {
	__be16 source;
	__be16 dest;
};

/* A share group's member for this remote end: the same remote address and
 * port always land on the same member while it belongs to the group
 * (ring_xdp_share_pick). */
static __always_inline __u32 share_pick(__u32 value, const struct iphdr *ip, const struct l4_ports *ports)
{
	__u32 idx = value & ~RING_XDP_SHARE_BIT;
	struct ring_xdp_share *share = bpf_map_lookup_elem(&vma_shares, &idx);

	if (!share || share->count == 0 || share->count > RING_XDP_MAX_MEMBERS)
		return RING_XDP_TO_KERNEL;
	return ring_xdp_share_pick(share->slots, share->count,
				   ring_xdp_share_hash(ip->saddr, ports->source, ports->dest));
}

/* A connection the kernel holds on a port we listen on: one that reached
 * the kernel's listener before our entry did (a SYN in the moment between
 * the kernel's listen() and ours, an SO_REUSEPORT kernel server still
 * serving its connections while ours starts, a pre-fork master's dormant
 * listener), established or half-open. Its segments go on to the kernel;
 * taken by our 3-tuple they would meet no connection of ours (a reset).
 * The kernel's own listeners (ours keep one under each listener, and one
 * per reserved port) and TIME_WAIT sockets (a new connection of ours may
 * reuse the 4-tuple of one) do not count. SYNs never get here: a new
 * connection is ours. */
static __always_inline int kernel_owns(struct xdp_md *ctx, const struct iphdr *ip, const struct l4_ports *ports)
{
	struct bpf_sock_tuple t = {
		.ipv4 = { .saddr = ip->saddr, .daddr = ip->daddr, .sport = ports->source, .dport = ports->dest },
	};
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	__u32 state = sk->state;
	bpf_sk_release(sk);
	return state != BPF_TCP_LISTEN && state != BPF_TCP_TIME_WAIT;
}

/* The member slot the packet belongs to, RING_XDP_TO_KERNEL, or NO_FLOW.
 * *by_3tuple says that a 3-tuple (not a connection's own entry) matched. */
static __always_inline __u32 lookup_flow(const struct iphdr *ip, const struct l4_ports *ports, int *by_3tuple)
{
	struct ring_xdp_key5 k5 = {
		.local_ip = ip->daddr, .remote_ip = ip->saddr,
		.local_port = ports->dest, .remote_port = ports->source,
		.proto = ip->protocol,
	};
	__u32 *value = bpf_map_lookup_elem(&vma_flows5, &k5);
	if (value)
		return *value;

	struct ring_xdp_key3 k3 = {
		.local_ip = ip->daddr, .local_port = ports->dest, .proto = ip->protocol,
	};
	value = bpf_map_lookup_elem(&vma_flows3, &k3);
	if (!value) {
		k3.local_ip = 0; /* INADDR_ANY listeners and bound sockets */
		value = bpf_map_lookup_elem(&vma_flows3, &k3);
	}
	if (value) {
		__u32 v = *value;
		*by_3tuple = 1;
		if (v != RING_XDP_TO_KERNEL && (v & RING_XDP_SHARE_BIT))
			return share_pick(v, ip, ports);
		return v;
	}

	/* 224.0.0.0/4 */
	if ((ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000)) {
		struct ring_xdp_keygrp kg = {
			.group = ip->daddr, .port = ports->dest, .proto = ip->protocol,
		};
		value = bpf_map_lookup_elem(&vma_groups, &kg);
		if (value)
			return *value;
		kg.port = 0;
		value = bpf_map_lookup_elem(&vma_groups, &kg);
		if (value)
			return *value;
	}
	return NO_FLOW;
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

	int by_3tuple = 0;
	__u32 slot = lookup_flow(ip, ports, &by_3tuple);
	if (slot >= RING_XDP_MAX_MEMBERS)   /* no flow, or to the kernel */
		return XDP_PASS;
	if (by_3tuple && ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = (void *)ports;
		if ((void *)(tcp + 1) > data_end)
			return XDP_PASS;
		if (!(tcp->syn && !tcp->ack) && kernel_owns(ctx, ip, ports))
			return XDP_PASS;
	}
	/* Too long for a UMEM frame (MTU above ~3.8 KB, skb mode): the XSK
	 * would drop it; the kernel socket the stack keeps receives it. */
	if (data_end - data > RING_XDP_MAX_RX_FRAME)
		return XDP_PASS;
	/* No XSK for this member on this queue (it died, or has no socket on
	 * the queue the NIC chose): the fallback action in the flags keeps
	 * the packet on the kernel path, where its kernel socket gets it. */
	if (ctx->rx_queue_index >= RING_XDP_MAX_QUEUES)
		return XDP_PASS;
	return bpf_redirect_map(&vma_xsks, ctx->rx_queue_index * RING_XDP_MAX_MEMBERS + slot, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
