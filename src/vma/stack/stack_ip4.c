/* IPv4 receive: validate the header without trusting any length in it, decide
 * whether the packet is ours, then hand it to reassembly or to UDP. */
#include "stack/stack_internal.h"
#include "stack/stack_csum.h"
#include "stack/tcp_priv.h"

#include <netinet/in.h>
#include <string.h>

#define IP4_MF          0x2000
#define IP4_OFFSET_MASK 0x1fff
#define IP4_PROTO_UDP   17
#define IP4_PROTO_TCP   6

static uint32_t subnet_broadcast(const struct stack_netif *nif)
{
	if (!nif->netmask || nif->netmask == 0xffffffffu)
		return 0xffffffffu;
	return nif->ip | ~nif->netmask;
}

static bool is_broadcast(const struct stack_netif *nif, uint32_t addr)
{
	return addr == 0xffffffffu || addr == subnet_broadcast(nif);
}

static void drop(struct ring_buf *pkt, uint64_t *counter)
{
	(*counter)++;
	ring_buf_free(pkt);
}

void stack_ip4_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *pkt)
{
	const uint8_t *h = pkt->data;
	uint32_t avail = pkt->len;

	if (avail < STACK_IP4_HLEN || (h[0] >> 4) != 4)
		return drop(pkt, &st->cnt.rx_drop_ip_bad_header);
	uint32_t hlen = (uint32_t)(h[0] & 0x0f) * 4;
	if (hlen < STACK_IP4_HLEN || hlen > avail)
		return drop(pkt, &st->cnt.rx_drop_ip_bad_header);
	uint32_t total = (uint32_t)(h[2] << 8 | h[3]);
	if (total < hlen || total > avail)
		return drop(pkt, &st->cnt.rx_drop_ip_bad_length);
	if (stack_csum_fold(stack_csum_add(0, h, hlen)) != 0xffff)
		return drop(pkt, &st->cnt.rx_drop_ip_bad_checksum);

	struct stack_ip4_info ip;
	memcpy(&ip.src, h + 12, 4);
	memcpy(&ip.dst, h + 16, 4);
	ip.tos = h[1];
	ip.ttl = h[8];       /* TTL 0 is accepted for local delivery, as Linux does */
	ip.proto = h[9];
	ip.ifindex = nif->ifindex;
	ip.l4_csum_trusted = nif->rx_l4_csum_trusted;

	if (stack_ip4_is_multicast(ip.src) || is_broadcast(nif, ip.src))
		return drop(pkt, &st->cnt.rx_drop_ip_bad_source);
	if (stack_ip4_is_multicast(ip.dst) || is_broadcast(nif, ip.dst))
		ip.dst_is_multi = true;
	else if (ip.dst == nif->ip && nif->ip != 0)
		ip.dst_is_multi = false;
	else
		return drop(pkt, &st->cnt.rx_drop_ip_not_for_us);
	if (ip.proto != IP4_PROTO_UDP && (ip.proto != IP4_PROTO_TCP || !st->tcp))
		return drop(pkt, &st->cnt.rx_drop_ip_proto);

	/* From here on the packet is the IP payload only; Ethernet padding and
	 * options are gone. */
	pkt->data += hlen;
	pkt->len = total - hlen;
	pkt->tot_len = pkt->len;

	uint16_t frag = (uint16_t)(h[6] << 8 | h[7]);
	if (ip.proto == IP4_PROTO_TCP) {
		/* TCP sends DF segments; fragments are dropped and counted there. The
		 * source MAC (Ethernet header just before h) answers a SYN. */
		tcp_input(st, nif, pkt, &ip, (frag & (IP4_MF | IP4_OFFSET_MASK)) ? NULL : h - 8);
		return;
	}
	if (frag & (IP4_MF | IP4_OFFSET_MASK)) {
		uint16_t id = (uint16_t)(h[4] << 8 | h[5]);
		stack_reass_input(st, pkt, &ip, id, (uint32_t)(frag & IP4_OFFSET_MASK) * 8,
				  (frag & IP4_MF) != 0);
		return;
	}
	stack_udp_input(st, pkt, &ip);
}
