/* IPv4 receive: validate the header without trusting any length in it, decide
 * whether the packet is ours, then hand it to reassembly or to UDP. */
#include "stack/stack_internal.h"
#include "stack/stack_csum.h"
#include "stack/tcp_priv.h"
#include "stack/stack_hdr.h"

#include <netinet/in.h>
#include <string.h>


static uint32_t subnet_broadcast(const struct stack_netif *nif)
{
	if (!nif->netmask || nif->netmask == 0xffffffffu)
		return 0xffffffffu;
	return nif->ip | ~nif->netmask;
}

static bool is_broadcast(uint32_t subnet_bcast, uint32_t addr)
{
	return addr == 0xffffffffu || addr == subnet_bcast;
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

	if (avail < STACK_IP4_HLEN || (h[STACK_IP4_VER_IHL] >> 4) != 4) {
		drop(pkt, &st->cnt.rx_drop_ip_bad_header);
		return;
	}
	uint32_t hlen = stack_ip4_hlen(h);
	if (hlen < STACK_IP4_HLEN || hlen > avail) {
		drop(pkt, &st->cnt.rx_drop_ip_bad_header);
		return;
	}
	uint32_t total = stack_get16(h + STACK_IP4_TOT_LEN);
	if (total < hlen || total > avail) {
		drop(pkt, &st->cnt.rx_drop_ip_bad_length);
		return;
	}
	/* without options (always, from TCP peers) the five words are summed
	 * unrolled */
	uint64_t hsum = hlen == STACK_IP4_HLEN ? stack_csum_hdr20(h) : stack_csum_add(0, h, hlen);
	if (stack_csum_fold(hsum) != 0xffff) {
		drop(pkt, &st->cnt.rx_drop_ip_bad_checksum);
		return;
	}

	struct stack_ip4_info ip;
	memcpy(&ip.src, h + STACK_IP4_SRC, 4);
	memcpy(&ip.dst, h + STACK_IP4_DST, 4);
	ip.tos = h[STACK_IP4_TOS];
	ip.ttl = h[STACK_IP4_TTL];       /* TTL 0 is accepted for local delivery, as Linux does */
	ip.proto = h[STACK_IP4_PROTO];
	ip.ifindex = nif->ifindex;
	ip.l4_csum_trusted = nif->rx_l4_csum_trusted;

	uint32_t bcast = subnet_broadcast(nif);
	if (stack_ip4_is_multicast(ip.src) || is_broadcast(bcast, ip.src)) {
		drop(pkt, &st->cnt.rx_drop_ip_bad_source);
		return;
	}
	if (ip.dst == nif->ip && nif->ip != 0)
		ip.dst_is_multi = false;   /* first: nearly every packet, and never a group's */
	else if (stack_ip4_is_multicast(ip.dst) || is_broadcast(bcast, ip.dst))
		ip.dst_is_multi = true;
	else {
		drop(pkt, &st->cnt.rx_drop_ip_not_for_us);
		return;
	}
	if (ip.proto != STACK_IP4_PROTO_UDP && (ip.proto != STACK_IP4_PROTO_TCP || !st->tcp)) {
		drop(pkt, &st->cnt.rx_drop_ip_proto);
		return;
	}

	/* From here on the packet is the IP payload only; Ethernet padding and
	 * options are gone. */
	pkt->data += hlen;
	pkt->len = total - hlen;
	pkt->tot_len = pkt->len;

	uint16_t frag = stack_get16(h + STACK_IP4_FRAG);
	if (ip.proto == STACK_IP4_PROTO_TCP) {
		/* TCP sends DF segments; fragments are dropped and counted there. The
		 * source MAC (Ethernet header just before h) answers a SYN. */
		tcp_input(st, nif, pkt, &ip, (frag & (STACK_IP4_MF | STACK_IP4_OFFSET_MASK)) ? NULL : h - 8);
		return;
	}
	if (frag & (STACK_IP4_MF | STACK_IP4_OFFSET_MASK)) {
		uint16_t id = stack_get16(h + STACK_IP4_ID);
		stack_reass_input(st, pkt, &ip, id, (uint32_t)(frag & STACK_IP4_OFFSET_MASK) * 8,
				  (frag & STACK_IP4_MF) != 0);
		return;
	}
	stack_udp_input(st, pkt, &ip);
}
