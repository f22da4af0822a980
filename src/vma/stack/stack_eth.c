/* Ethernet: the first check every received frame meets. */
#include "stack/stack_internal.h"
#include "stack/stack_hdr.h"

#include <string.h>

#define ETHERTYPE_VLAN   0x8100
#define ETHERTYPE_QINQ   0x88a8

static bool mac_is_for_us(const uint8_t *dst, const uint8_t *ours)
{
	static const uint8_t broadcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	if (memcmp(dst, ours, 6) == 0 || memcmp(dst, broadcast, 6) == 0)
		return true;
	/* IPv4 multicast MACs; whether the group is joined is the UDP layer's call. */
	return dst[0] == 0x01 && dst[1] == 0x00 && dst[2] == 0x5e && !(dst[3] & 0x80);
}

void stack_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *frame)
{
	if (!frame)
		return;
	st->cnt.rx_frames++;
	/* One frame is one buffer here; a chained frame would need headers that
	 * straddle buffers, which no backend of ours produces. */
	if (frame->next || frame->len < STACK_ETH_HLEN) {
		st->cnt.rx_drop_eth_truncated++;
		ring_buf_free(frame);
		return;
	}
	const uint8_t *eth = frame->data;
	if (!mac_is_for_us(eth, nif->mac)) {
		st->cnt.rx_drop_eth_not_for_us++;
		ring_buf_free(frame);
		return;
	}
	uint16_t type = stack_get16(eth + STACK_ETH_TYPE);
	if (type == ETHERTYPE_VLAN || type == ETHERTYPE_QINQ) {
		st->cnt.rx_drop_eth_vlan++;
		ring_buf_free(frame);
		return;
	}
	if (type != STACK_ETHERTYPE_IPV4) {
		st->cnt.rx_drop_eth_not_ipv4++;
		ring_buf_free(frame);
		return;
	}
	frame->data += STACK_ETH_HLEN;
	frame->len -= STACK_ETH_HLEN;
	frame->tot_len = frame->len;
	stack_ip4_input(st, nif, frame);
}

void stack_eth_multicast_mac(uint32_t group, uint8_t mac[6])
{
	const uint8_t *g = (const uint8_t *)&group;

	mac[0] = 0x01;
	mac[1] = 0x00;
	mac[2] = 0x5e;
	mac[3] = g[1] & 0x7f;
	mac[4] = g[2];
	mac[5] = g[3];
}
