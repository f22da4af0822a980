/* Helpers shared by the network harnesses (fuzz_stack_rx, fuzz_ip4_reass):
 * a fake netif over a plain ring_buf pool whose TX frames are dropped, and
 * header fix-ups so mutated frames still pass the checksums the fuzzer
 * would otherwise almost never get right. Header-only: each harness is one
 * translation unit plus the project sources it links. */
#ifndef FUZZ_NET_H
#define FUZZ_NET_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ring_buf.h"
#include "stack/stack.h"
#include "stack/stack_csum.h"

void fuzz_log_init(void);           /* fuzz_log.c */

#define FZ_BUF_SIZE 2048u
#define FZ_POOL_BUFS 1024u

/* Our side 10.0.0.1 (02:00:00:00:00:01), the peer 10.0.0.2 (...:02). */
#define FZ_OUR_IP   0x0a000001u
#define FZ_PEER_IP  0x0a000002u
static const uint8_t fz_our_mac[6] = { 0x02, 0, 0, 0, 0, 0x01 };
static const uint8_t fz_peer_mac[6] = { 0x02, 0, 0, 0, 0, 0x02 };

static inline void fz_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void fz_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline uint32_t fz_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Aborts (a finding) when buffers are still out after everything was torn
 * down: a leak of pool buffers is invisible to LeakSanitizer because the
 * pool's memory is one allocation. */
static inline void fz_check_pool(struct ring_buf_pool *pool, const char *when)
{
	unsigned n = ring_buf_pool_in_use(pool);
	if (n) {
		fprintf(stderr, "fuzz: %u ring_buf(s) of pool %s still in use %s\n", n,
			ring_buf_pool_name(pool), when);
		abort();
	}
}

/* IPv4 header at ip (len bytes of packet from there): recompute the header
 * checksum when the header fits. */
static inline void fz_fix_ip_csum(uint8_t *ip, uint32_t len)
{
	if (len < 20)
		return;
	uint32_t hlen = (uint32_t)(ip[0] & 0x0f) * 4u;
	if (hlen < 20 || hlen > len)
		return;
	ip[10] = ip[11] = 0;
	uint16_t c = stack_csum_finish(stack_csum_add(0, ip, hlen));
	memcpy(ip + 10, &c, 2);
}

/* Recompute the UDP or TCP checksum of an unfragmented packet whose header
 * and total length fit in len bytes. */
static inline void fz_fix_l4_csum(uint8_t *ip, uint32_t len)
{
	if (len < 20 || (ip[0] >> 4) != 4)
		return;
	uint32_t hlen = (uint32_t)(ip[0] & 0x0f) * 4u;
	uint32_t total = (uint32_t)(ip[2] << 8 | ip[3]);
	if (hlen < 20 || total < hlen || total > len || (ip[6] & 0x3f) || ip[7])
		return;
	uint8_t *l4 = ip + hlen;
	uint32_t l4len = total - hlen;
	unsigned at;
	if (ip[9] == 6 && l4len >= 20)
		at = 16;
	else if (ip[9] == 17 && l4len >= 8)
		at = 6;
	else
		return;
	uint32_t src, dst;
	memcpy(&src, ip + 12, 4);
	memcpy(&dst, ip + 16, 4);
	l4[at] = l4[at + 1] = 0;
	uint64_t sum = stack_csum_pseudo(src, dst, ip[9], (uint16_t)l4len);
	uint16_t c = stack_csum_finish(stack_csum_add(sum, l4, l4len));
	if (ip[9] == 17 && c == 0)
		c = 0xffff;
	memcpy(l4 + at, &c, 2);
}

/* A frame of len bytes (copied) into a fresh buffer of pool, or NULL. */
static inline struct ring_buf *fz_frame(struct ring_buf_pool *pool, const uint8_t *bytes, uint32_t len)
{
	struct ring_buf *b = ring_buf_alloc(pool);
	if (!b)
		return NULL;
	if (len > b->size)
		len = b->size;
	memcpy(b->data, bytes, len);
	b->len = b->tot_len = len;
	b->flags = RING_BUF_F_RX;
	return b;
}

/* Ethernet + IPv4 headers from the peer to us at f; returns the IP header.
 * The caller fills the payload and then calls fz_fix_ip_csum. */
static inline uint8_t *fz_eth_ip(uint8_t *f, uint8_t proto, uint16_t ip_total, uint16_t id,
				 uint16_t frag)
{
	memcpy(f, fz_our_mac, 6);
	memcpy(f + 6, fz_peer_mac, 6);
	f[12] = 0x08;
	f[13] = 0x00;
	uint8_t *ip = f + 14;
	memset(ip, 0, 20);
	ip[0] = 0x45;
	fz_put16(ip + 2, ip_total);
	fz_put16(ip + 4, id);
	fz_put16(ip + 6, frag);
	ip[8] = 64;
	ip[9] = proto;
	fz_put32(ip + 12, FZ_PEER_IP);
	fz_put32(ip + 16, FZ_OUR_IP);
	return ip;
}

#endif
