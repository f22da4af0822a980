/* The fields of the headers the stack reads and writes (Ethernet, IPv4,
 * UDP, TCP) by name: byte offsets and big-endian accessors, so the code
 * says which field it touches rather than an offset. Addresses and ports
 * stay in network order and are copied as they are; numbers are converted. */
#ifndef VMA_STACK_STACK_HDR_H
#define VMA_STACK_STACK_HDR_H

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#include "stack/stack.h"

/* Ethernet II */
enum { STACK_ETH_DST = 0, STACK_ETH_SRC = 6, STACK_ETH_TYPE = 12 };
#define STACK_ETHERTYPE_IPV4 0x0800u

/* IPv4 (RFC 791) */
enum {
	STACK_IP4_VER_IHL = 0, STACK_IP4_TOS = 1, STACK_IP4_TOT_LEN = 2, STACK_IP4_ID = 4, STACK_IP4_FRAG = 6,
	STACK_IP4_TTL = 8, STACK_IP4_PROTO = 9, STACK_IP4_CSUM = 10, STACK_IP4_SRC = 12, STACK_IP4_DST = 16
};
#define STACK_IP4_VER_IHL_20 0x45u        /* version 4, no options */
#define STACK_IP4_DF         0x4000u
#define STACK_IP4_MF         0x2000u
#define STACK_IP4_OFFSET_MASK 0x1fffu
#define STACK_IP4_PROTO_TCP  6u
#define STACK_IP4_PROTO_UDP  17u

/* UDP (RFC 768) */
enum { STACK_UDP_SPORT = 0, STACK_UDP_DPORT = 2, STACK_UDP_LEN = 4, STACK_UDP_CSUM = 6 };

/* TCP (RFC 9293): the data offset is the high nibble of STACK_TCP_DOFF */
enum {
	STACK_TCP_SPORT = 0, STACK_TCP_DPORT = 2, STACK_TCP_SEQ = 4, STACK_TCP_ACK = 8, STACK_TCP_DOFF = 12,
	STACK_TCP_FLAGS = 13, STACK_TCP_WND = 14, STACK_TCP_CSUM = 16, STACK_TCP_URP = 18
};
#define STACK_TCP_HLEN 20u

/* Big-endian fields as one load or store and a byte swap (none on a
 * big-endian host): byte by byte, the compiler did not always merge them
 * (the timestamps option's two words cost 68 instructions a round trip). */
static inline uint16_t stack_get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return ntohs(v);
}

static inline uint32_t stack_get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return ntohl(v);
}

static inline void stack_put16(uint8_t *p, uint16_t v)
{
	v = htons(v);
	memcpy(p, &v, 2);
}

static inline void stack_put32(uint8_t *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

/* Header lengths in bytes from their length fields. */
static inline uint32_t stack_ip4_hlen(const uint8_t *ip)
{
	return (uint32_t)(ip[STACK_IP4_VER_IHL] & 0x0f) * 4;
}

static inline uint32_t stack_tcp_hlen(const uint8_t *th)
{
	return (uint32_t)(th[STACK_TCP_DOFF] >> 4) * 4;
}

static inline void stack_tcp_set_hlen(uint8_t *th, uint32_t hlen)
{
	th[STACK_TCP_DOFF] = (uint8_t)((hlen / 4) << 4);
}

/* Ethernet II header for IPv4 from src to dst. */
static inline void stack_eth_fill_ip4(uint8_t *eth, const uint8_t dst[6], const uint8_t src[6])
{
	memcpy(eth + STACK_ETH_DST, dst, 6);
	memcpy(eth + STACK_ETH_SRC, src, 6);
	stack_put16(eth + STACK_ETH_TYPE, STACK_ETHERTYPE_IPV4);
}

#endif
