/* hostile_peer malformed: frames broken in one way each (enum mal): headers
 * cut short, IHL, lengths, checksums, TCP data offsets and options, UDP
 * lengths, fragments that overlap or end past 65535, odd flags and sources.
 * Everything else in each frame is right, so the one fault is what is met. */
#include "hostile_peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const mal_names[MAL_COUNT] = {
	"eth_only", "ip_trunc", "ihl_small", "ihl_large", "totlen_big", "totlen_small",
	"ip_csum", "ip_version", "ip_opts", "tcp_csum", "tcp_trunc", "doff_small",
	"doff_large", "opt_len0", "opt_len1", "opt_past", "opt_random", "tcp_flags",
	"land", "src_bad", "udp_csum", "udp_len_big", "udp_len_small", "udp_len_short",
	"frag_overlap", "frag_huge", "frag_tcp",
};

/* Ethernet + 20-byte IPv4 header from a spoofed source; returns the offset
 * of the L4 header. The IP checksum is for TOTLEN and FRAG as given. */
static size_t mal_ip(struct peer *p, uint8_t *f, uint32_t sip, uint8_t proto, size_t totlen, uint16_t frag)
{
	uint8_t smac[6];
	src_mac(p, sip, smac);
	put_eth(f, p->dst_mac, smac, ETH_P_IP);
	put_ip(p, f + 14, sip, p->o.dst, proto, totlen, frag);
	return 34;
}

static void ip_recsum(uint8_t *ip)
{
	size_t hl = (size_t)(ip[0] & 0xf) * 4;
	put16(ip + 10, 0);
	put16(ip + 10, fold(sum16(ip, hl, 0)));
}

/* A TCP segment with FLAGS to --port carrying OPT (OL bytes) and DLEN random
 * bytes of data; the checksum right for what is written. Returns the frame
 * length. */
static size_t mal_tcp(struct peer *p, uint8_t *f, uint32_t sip, uint8_t flags, const uint8_t *opt, size_t ol,
		      size_t dlen)
{
	size_t l4 = mal_ip(p, f, sip, 6, 20 + 20 + ol + dlen, 0);
	uint8_t *t = f + l4;
	size_t tl = put_tcp_hdr(t, rnd_port(p), (uint16_t)p->o.port, (uint32_t)rnd(p), (uint32_t)rnd(p), flags, 8192,
				opt, ol);
	for (size_t i = 0; i < dlen; i++)
		t[tl + i] = (uint8_t)rnd(p);
	tl += dlen;
	put16(t + 16, l4_sum(sip, p->o.dst, 6, t, tl));
	return l4 + tl;
}

/* A UDP datagram to --udp-port with DLEN random bytes in an IP payload of
 * 8 + DLEN, its length field UDPLEN (0: the right one). The checksum is
 * right for the datagram the length field describes when it fits in the
 * payload (a length short of the payload is then the one fault), else over
 * the payload. Returns the frame length. */
static size_t mal_udp(struct peer *p, uint8_t *f, uint32_t sip, size_t dlen, uint16_t udplen)
{
	size_t l4 = mal_ip(p, f, sip, 17, 20 + 8 + dlen, 0);
	uint8_t *u = f + l4;
	if (!udplen)
		udplen = (uint16_t)(8 + dlen);
	put16(u, rnd_port(p));
	put16(u + 2, (uint16_t)p->o.udp_port);
	put16(u + 4, udplen);
	put16(u + 6, 0);
	for (size_t i = 0; i < dlen; i++)
		u[8 + i] = (uint8_t)rnd(p);
	size_t covered = udplen >= 8 && udplen <= 8 + dlen ? udplen : 8 + dlen;
	uint16_t s = l4_sum(sip, p->o.dst, 17, u, covered);
	put16(u + 6, s ? s : 0xffff);
	return l4 + 8 + dlen;
}

/* One fragment of datagram ID: payload bytes [OFF, OFF+LEN) of a UDP
 * datagram to --udp-port (random bytes), MF as asked. */
static void mal_frag(struct peer *p, uint32_t sip, uint16_t id, uint8_t proto, uint32_t off, size_t len, bool mf)
{
	uint8_t *f = tx_slot(p);
	size_t l4 = mal_ip(p, f, sip, proto, 20 + len, (uint16_t)(((off / 8) & 0x1fff) | (mf ? 0x2000 : 0)));
	put16(f + 14 + 4, id);
	ip_recsum(f + 14);
	for (size_t i = 0; i < len; i++)
		f[l4 + i] = (uint8_t)rnd(p);
	if (off == 0 && len >= 8 && proto == 17) {
		put16(f + l4, rnd_port(p));
		put16(f + l4 + 2, (uint16_t)p->o.udp_port);
		put16(f + l4 + 4, (uint16_t)(len * 3));
	}
	tx_commit(p, l4 + len);
}

int fill_malformed(struct peer *p, int budget)
{
	int made = 0;
	while (made < budget) {
		enum mal k;
		do
			k = (enum mal)rnd_below(p, MAL_COUNT);
		while (!(p->mal_mask & (1u << k)));
		uint32_t sip = rnd_spoof(p);
		uint8_t opt[40];
		size_t len = 0, ol;
		p->c.malformed[k]++;
		if (k == MAL_FRAG_OVERLAP || k == MAL_FRAG_HUGE || k == MAL_FRAG_TCP) {
			uint16_t id = (uint16_t)rnd(p);
			if (k == MAL_FRAG_OVERLAP) {
				/* 0-96, 64-160 (overlapping, other bytes), sometimes a last piece */
				mal_frag(p, sip, id, 17, 0, 96, true);
				mal_frag(p, sip, id, 17, 64, 96, true);
				if (rnd(p) & 1)
					mal_frag(p, sip, id, 17, 144, 48, false);
				made += 3;
			} else if (k == MAL_FRAG_HUGE) {
				/* ends past 65535 */
				mal_frag(p, sip, id, 17, 0, 64, true);
				mal_frag(p, sip, id, 17, 65528, 64, false);
				made += 2;
			} else {
				/* a TCP header cut by fragmentation, then rewritten by an overlap */
				mal_frag(p, sip, id, 6, 0, 8, true);
				mal_frag(p, sip, id, 6, 8, 16, true);
				mal_frag(p, sip, id, 6, 8, 24, false);
				made += 3;
			}
			continue;
		}
		uint8_t *f = tx_slot(p);
		switch (k) {
		case MAL_ETH_ONLY:
			put_eth(f, p->dst_mac, p->if_mac, ETH_P_IP);
			len = 14;
			break;
		case MAL_IP_TRUNC:
			mal_ip(p, f, sip, 6, 40, 0);
			len = 14 + 1 + rnd_below(p, 19);
			break;
		case MAL_IHL_SMALL:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			f[14] = (uint8_t)(0x40 | rnd_below(p, 5));
			ip_recsum(f + 14);
			put16(f + 24, fold(sum16(f + 14, 20, 0))); /* a checksum over 20 bytes anyway */
			break;
		case MAL_IHL_LARGE:
			len = mal_tcp(p, f, sip, F_SYN, NULL, 0, 0);
			f[14] = (uint8_t)(0x40 | (6 + rnd_below(p, 10)));
			ip_recsum(f + 14);
			break;
		case MAL_TOTLEN_BIG:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			put16(f + 16, (uint16_t)(len - 14 + 1 + rnd_below(p, 65535 - (uint32_t)(len - 14))));
			ip_recsum(f + 14);
			break;
		case MAL_TOTLEN_SMALL:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			put16(f + 16, (uint16_t)rnd_below(p, 40));
			ip_recsum(f + 14);
			break;
		case MAL_IP_CSUM:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			f[24] ^= (uint8_t)(1 + rnd_below(p, 255));
			break;
		case MAL_IP_VERSION:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			f[14] = (uint8_t)((rnd(p) & 1 ? 0x60 : 0x00) | 5);
			ip_recsum(f + 14);
			break;
		case MAL_IP_OPTS: { /* IHL 6: one option whose length lies */
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, 0);
			memmove(f + 38, f + 34, len - 34);
			static const uint8_t bad[][4] = { { 7, 0, 0, 0 }, { 68, 1, 0, 0 }, { 131, 40, 0, 0 }, { 0x94, 255, 0, 0 } };
			memcpy(f + 34, bad[rnd_below(p, 4)], 4);
			f[14] = 0x46;
			put16(f + 16, (uint16_t)(len - 14 + 4));
			ip_recsum(f + 14);
			len += 4;
			break;
		}
		case MAL_TCP_CSUM:
			len = mal_tcp(p, f, sip, (rnd(p) & 1) ? F_SYN : (F_ACK | F_PSH), syn_opts, 4, rnd_below(p, 64));
			f[34 + 16] ^= (uint8_t)(1 + rnd_below(p, 255));
			break;
		case MAL_TCP_TRUNC: { /* IP payload shorter than a TCP header */
			size_t cut = rnd_below(p, 20);
			len = mal_tcp(p, f, sip, F_SYN, NULL, 0, 0) - 20 + cut;
			put16(f + 16, (uint16_t)(20 + cut));
			ip_recsum(f + 14);
			break;
		}
		case MAL_DOFF_SMALL:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, rnd_below(p, 32));
			f[34 + 12] = (uint8_t)(rnd_below(p, 5) << 4);
			put16(f + 34 + 16, 0);
			put16(f + 34 + 16, l4_sum(sip, p->o.dst, 6, f + 34, len - 34));
			break;
		case MAL_DOFF_LARGE:
			len = mal_tcp(p, f, sip, F_SYN, syn_opts, 4, rnd_below(p, 16));
			f[34 + 12] = (uint8_t)((6 + rnd_below(p, 10)) << 4);
			if (((size_t)(f[34 + 12] >> 4)) * 4 <= len - 34)
				f[34 + 12] = 0xf0;
			put16(f + 34 + 16, 0);
			put16(f + 34 + 16, l4_sum(sip, p->o.dst, 6, f + 34, len - 34));
			break;
		case MAL_OPT_LEN0:
		case MAL_OPT_LEN1: { /* MSS, window scale, SACK, timestamps or unknown with length 0/1 */
			static const uint8_t kinds[] = { 2, 3, 4, 5, 8, 30, 34, 253 };
			ol = 4 + 4 * rnd_below(p, 3);
			memset(opt, 1, ol);
			size_t at = rnd_below(p, (uint32_t)ol - 1);
			opt[at] = kinds[rnd_below(p, sizeof(kinds))];
			opt[at + 1] = k == MAL_OPT_LEN0 ? 0 : 1;
			len = mal_tcp(p, f, sip, (rnd(p) & 1) ? F_SYN : F_ACK, opt, ol, 0);
			break;
		}
		case MAL_OPT_PAST: { /* the last option runs past the header */
			static const uint8_t kinds[] = { 2, 3, 5, 8, 19, 29 };
			ol = 4 + 4 * rnd_below(p, 9);
			memset(opt, 1, ol);
			opt[ol - 2] = kinds[rnd_below(p, sizeof(kinds))];
			opt[ol - 1] = (uint8_t)(3 + rnd_below(p, 253));
			if (rnd(p) & 1) { /* or an option length of 255 at the start */
				opt[0] = 5;
				opt[1] = 255;
			}
			len = mal_tcp(p, f, sip, (rnd(p) & 1) ? F_SYN : F_ACK, opt, ol, rnd_below(p, 16));
			break;
		}
		case MAL_OPT_RANDOM:
			ol = 4 * (1 + rnd_below(p, 10));
			for (size_t i = 0; i < ol; i++)
				opt[i] = (uint8_t)rnd(p);
			len = mal_tcp(p, f, sip, F_SYN, opt, ol, 0);
			break;
		case MAL_TCP_FLAGS: { /* SYN+FIN, SYN+RST, everything, nothing, URG alone */
			static const uint8_t combos[] = { F_SYN | F_FIN, F_SYN | F_RST, 0x3f, 0xff, 0, F_URG, F_FIN, F_SYN | F_URG | F_PSH };
			len = mal_tcp(p, f, sip, combos[rnd_below(p, sizeof(combos))], syn_opts, 4, rnd_below(p, 8));
			break;
		}
		case MAL_LAND: { /* source = destination, same port */
			len = mal_tcp(p, f, p->o.dst, F_SYN, syn_opts, 4, 0);
			uint8_t *t = f + 34;
			put16(t, (uint16_t)p->o.port);
			put16(t + 16, 0);
			put16(t + 16, l4_sum(p->o.dst, p->o.dst, 6, t, len - 34));
			memcpy(f + 6, p->if_mac, 6);
			break;
		}
		case MAL_SRC_BAD: { /* broadcast, zero, multicast, loopback source */
			static const uint32_t srcs[] = { 0xffffffffu, 0, 0xe0000001u, 0x7f000001u, 0xc61200ffu };
			uint32_t s = srcs[rnd_below(p, 5)];
			len = mal_tcp(p, f, s, F_SYN, syn_opts, 4, 0);
			memcpy(f + 6, p->if_mac, 6);
			break;
		}
		case MAL_UDP_CSUM:
			len = mal_udp(p, f, sip, rnd_below(p, 64), 0);
			f[34 + 6] ^= (uint8_t)(1 + rnd_below(p, 255));
			if (get16(f + 34 + 6) == 0) /* that would read "no checksum" */
				f[34 + 7] ^= 1;
			break;
		case MAL_UDP_LEN_BIG: {
			size_t d = rnd_below(p, 64);
			len = mal_udp(p, f, sip, d, (uint16_t)(8 + d + 1 + rnd_below(p, 1000)));
			break;
		}
		case MAL_UDP_LEN_SMALL:
			len = mal_udp(p, f, sip, rnd_below(p, 64), (uint16_t)rnd_below(p, 8));
			break;
		case MAL_UDP_LEN_SHORT: {
			size_t d = 8 + rnd_below(p, 64);
			len = mal_udp(p, f, sip, d, (uint16_t)(8 + rnd_below(p, (uint32_t)d)));
			break;
		}
		default:
			len = 14;
			break;
		}
		tx_commit(p, len);
		made++;
	}
	return made;
}
/* --only: names from mal_names, comma separated. */
uint32_t mal_parse(const char *list)
{
	if (!list)
		return (1u << MAL_COUNT) - 1;
	uint32_t mask = 0;
	char *copy = strdup(list), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k = 0;
		while (k < MAL_COUNT && strcmp(t, mal_names[k]) != 0)
			k++;
		if (k == MAL_COUNT) {
			fprintf(stderr, "hostile_peer: unknown malformed kind '%s'; the kinds:", t);
			for (k = 0; k < MAL_COUNT; k++)
				fprintf(stderr, " %s", mal_names[k]);
			fprintf(stderr, "\n");
			exit(2);
		}
		mask |= 1u << k;
	}
	free(copy);
	if (!mask) {
		fprintf(stderr, "hostile_peer: --only names no kind\n");
		exit(2);
	}
	return mask;
}
