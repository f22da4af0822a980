/* UDP send: Ethernet + IPv4 + UDP headers written straight into TX buffers and
 * the payload copied once, fragmenting above the MTU. Every buffer is taken
 * before the first frame leaves, so a datagram goes out whole or not at all. */
#include "stack/stack_internal.h"
#include "stack/stack_csum.h"
#include "stack/stack_hdr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>


struct iov_cursor {
	const struct iovec *iov;
	int left;
	size_t off;
};

static void iov_copy(struct iov_cursor *c, uint8_t *dst, size_t n)
{
	while (n) {
		size_t avail = c->iov->iov_len - c->off;
		if (!avail) {
			c->iov++;
			c->left--;
			c->off = 0;
			continue;
		}
		size_t take = avail < n ? avail : n;
		memcpy(dst, (const uint8_t *)c->iov->iov_base + c->off, take);
		dst += take;
		n -= take;
		c->off += take;
	}
}

static void free_list(struct ring_buf *b)
{
	while (b) {
		struct ring_buf *next = b->link;
		b->link = NULL;
		ring_buf_free(b);
		b = next;
	}
}

void stack_udp_tx_from_pcb(const struct stack_udp_pcb *pcb, struct stack_udp_tx *tx)
{
	tx->src_ip = pcb->local_ip;
	tx->src_port = pcb->local_port;
	if (pcb->connected) {
		tx->dst_ip = pcb->remote_ip;
		tx->dst_port = pcb->remote_port;
	}
}

int stack_udp_send(struct stack *st, const struct stack_netif *nif,
		   const struct stack_udp_tx *tx, const struct iovec *iov, int iovcnt)
{
	size_t len = 0;

	if (iovcnt < 0 || (iovcnt > 0 && !iov))
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > STACK_UDP_MAX_PAYLOAD || (iov[i].iov_len && !iov[i].iov_base)) {
			if (iov[i].iov_len && !iov[i].iov_base)
				return -EINVAL;
			len = STACK_UDP_MAX_PAYLOAD + 1;
			break;
		}
		len += iov[i].iov_len;
		if (len > STACK_UDP_MAX_PAYLOAD)
			break;
	}
	if (len > STACK_UDP_MAX_PAYLOAD) {
		st->cnt.tx_drop_too_big++;
		return -EMSGSIZE;
	}
	uint32_t mtu = nif->mtu ? nif->mtu : 1500;
	if (mtu < STACK_IP4_MIN_MTU)
		mtu = STACK_IP4_MIN_MTU;
	if (mtu > STACK_IP4_MAX_LEN)
		mtu = STACK_IP4_MAX_LEN;

	struct ring_buf *first = nif->tx_alloc(nif->ctx);
	if (!first) {
		st->cnt.tx_drop_no_buf++;
		return -ENOBUFS;
	}
	/* The buffer size, not only the MTU, bounds a frame. */
	uint32_t room = first->size > STACK_ETH_HLEN ? first->size - STACK_ETH_HLEN : 0;
	if (room > mtu)
		room = mtu;
	if (room < STACK_IP4_MIN_MTU) {
		free_list(first);
		return -EINVAL;
	}
	uint32_t ip_payload = STACK_UDP_HLEN + (uint32_t)len;
	uint32_t frag_max = STACK_IP4_HLEN + ip_payload <= room ? ip_payload
			    : ((room - STACK_IP4_HLEN) & ~7u);
	uint32_t nfrags = (ip_payload + frag_max - 1) / frag_max;
	if (nfrags > 1 && tx->dont_fragment) {
		free_list(first);
		st->cnt.tx_drop_too_big++;
		return -EMSGSIZE;
	}

	struct ring_buf *last = first;
	first->link = NULL;
	for (uint32_t i = 1; i < nfrags; i++) {
		struct ring_buf *b = nif->tx_alloc(nif->ctx);
		if (!b || b->size < STACK_ETH_HLEN + STACK_IP4_HLEN + frag_max) {
			free_list(first);
			if (b)
				ring_buf_free(b);
			st->cnt.tx_drop_no_buf++;
			return -ENOBUFS;
		}
		b->link = NULL;
		last->link = b;
		last = b;
	}

	uint8_t ttl = tx->ttl ? tx->ttl : st->set.default_ttl;
	uint32_t src_ip = tx->src_ip ? tx->src_ip : nif->ip;
	uint16_t id = stack_ip4_next_id(st, src_ip, tx->dst_ip, STACK_IP4_PROTO_UDP);
	struct iov_cursor cur = { .iov = iov, .left = iovcnt, .off = 0 };
	uint64_t data_sum = 0;
	uint32_t offset = 0;
	uint8_t *udp = NULL;

	for (struct ring_buf *b = first; b; b = b->link) {
		uint32_t plen = ip_payload - offset < frag_max ? ip_payload - offset : frag_max;
		uint8_t *eth = b->head;
		uint8_t *ip = eth + STACK_ETH_HLEN;
		uint8_t *payload = ip + STACK_IP4_HLEN;

		stack_eth_fill_ip4(eth, tx->dst_mac, nif->mac);
		ip[STACK_IP4_VER_IHL] = STACK_IP4_VER_IHL_20;
		ip[STACK_IP4_TOS] = tx->tos;
		stack_put16(ip + STACK_IP4_TOT_LEN, (uint16_t)(STACK_IP4_HLEN + plen));
		stack_put16(ip + STACK_IP4_ID, id);
		uint16_t frag = (uint16_t)(offset / 8);
		if (b->link)
			frag |= STACK_IP4_MF;
		if (tx->dont_fragment)
			frag |= STACK_IP4_DF;
		stack_put16(ip + STACK_IP4_FRAG, frag);
		ip[STACK_IP4_TTL] = ttl;
		ip[STACK_IP4_PROTO] = STACK_IP4_PROTO_UDP;
		ip[STACK_IP4_CSUM] = ip[STACK_IP4_CSUM + 1] = 0;
		memcpy(ip + STACK_IP4_SRC, &src_ip, 4);
		memcpy(ip + STACK_IP4_DST, &tx->dst_ip, 4);
		if (st->set.tx_ip_checksum) {
			uint16_t c = stack_csum_finish(stack_csum_add(0, ip, STACK_IP4_HLEN));
			memcpy(ip + STACK_IP4_CSUM, &c, 2);
		}

		uint8_t *data = payload;
		uint32_t dlen = plen;
		if (offset == 0) {
			udp = payload;
			memcpy(udp + STACK_UDP_SPORT, &tx->src_port, 2);
			memcpy(udp + STACK_UDP_DPORT, &tx->dst_port, 2);
			stack_put16(udp + STACK_UDP_LEN, (uint16_t)ip_payload);
			udp[STACK_UDP_CSUM] = udp[STACK_UDP_CSUM + 1] = 0;
			data += STACK_UDP_HLEN;
			dlen -= STACK_UDP_HLEN;
		}
		iov_copy(&cur, data, dlen);
		/* Every piece starts at an even offset of the UDP data (fragments are
		 * multiples of 8), so the pieces' sums simply add up. */
		data_sum = stack_csum_add(data_sum, data, dlen);
		b->data = eth;
		b->len = STACK_ETH_HLEN + STACK_IP4_HLEN + plen;
		b->tot_len = b->len;
		b->next = NULL;
		b->flags |= RING_BUF_F_TX;
		offset += plen;
	}
	if (st->set.tx_udp_checksum) {
		uint64_t sum = stack_csum_pseudo(src_ip, tx->dst_ip, STACK_IP4_PROTO_UDP, (uint16_t)ip_payload);
		sum = stack_csum_add(sum, udp, STACK_UDP_HLEN);
		uint16_t c = stack_csum_finish(sum + data_sum + ((sum + data_sum) < sum));
		if (c == 0)
			c = 0xffff;     /* 0 would mean "no checksum" */
		memcpy(udp + STACK_UDP_CSUM, &c, 2);
	}

	st->cnt.tx_udp_datagrams++;
	if (nfrags > 1)
		st->cnt.tx_fragmented++;
	for (struct ring_buf *b = first; b;) {
		struct ring_buf *next = b->link;
		b->link = NULL;
		int rc = nif->tx_send(nif->ctx, b);
		if (rc < 0) {
			st->cnt.tx_drop_send_error++;
			free_list(next);
			return rc;
		}
		st->cnt.tx_frames++;
		b = next;
	}
	return (int)len;
}
