/* hostile_peer: frames built byte by byte (no struct overlays, so no
 * alignment or packing questions), their checksums, and the batch that
 * sends them with one sendmmsg. */
#include "hostile_peer.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* MSS 1460, nothing else: no window scale, so windows are the field as it is. */
const uint8_t syn_opts[4] = { 2, 4, 0x05, 0xb4 };

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t rnd(struct peer *p)
{
	/* xorshift64*: fast, good enough to scatter ports and sequence numbers */
	p->rng ^= p->rng >> 12;
	p->rng ^= p->rng << 25;
	p->rng ^= p->rng >> 27;
	return p->rng * 0x2545F4914F6CDD1DULL;
}

uint32_t rnd_below(struct peer *p, uint32_t n)
{
	return n ? (uint32_t)(rnd(p) % n) : 0;
}

uint32_t rnd_spoof(struct peer *p)
{
	return p->o.src_base + rnd_below(p, (uint32_t)p->o.src_count);
}

uint16_t rnd_port(struct peer *p)
{
	return (uint16_t)(1024 + rnd_below(p, 64512));
}

/* ---- bytes on the wire ---- */

uint32_t sum16(const uint8_t *b, size_t len, uint32_t sum)
{
	for (; len > 1; b += 2, len -= 2)
		sum += (uint32_t)(b[0] << 8 | b[1]);
	if (len)
		sum += (uint32_t)b[0] << 8;
	return sum;
}

uint16_t fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* A made-up, locally administered MAC for each spoofed address. */
void spoof_mac(uint32_t ip, uint8_t mac[6])
{
	mac[0] = 0x02;
	mac[1] = 0x68;
	mac[2] = 0x73;
	mac[3] = (uint8_t)(ip >> 16);
	mac[4] = (uint8_t)(ip >> 8);
	mac[5] = (uint8_t)ip;
}

void src_mac(const struct peer *p, uint32_t ip, uint8_t mac[6])
{
	if (in_spoof(&p->o, ip))
		spoof_mac(ip, mac);
	else
		memcpy(mac, p->if_mac, 6);
}

size_t put_eth(uint8_t *f, const uint8_t *dmac, const uint8_t *smac, uint16_t type)
{
	memcpy(f, dmac, 6);
	memcpy(f + 6, smac, 6);
	put16(f + 12, type);
	return 14;
}

/* 20-byte IPv4 header, checksum filled. */
void put_ip(struct peer *p, uint8_t *ip, uint32_t src, uint32_t dst, uint8_t proto, size_t totlen,
		   uint16_t frag)
{
	ip[0] = 0x45;
	ip[1] = 0;
	put16(ip + 2, (uint16_t)totlen);
	put16(ip + 4, p->ip_id++);
	put16(ip + 6, frag);
	ip[8] = 64;
	ip[9] = proto;
	put16(ip + 10, 0);
	put32(ip + 12, src);
	put32(ip + 16, dst);
	put16(ip + 10, fold(sum16(ip, 20, 0)));
}

/* The TCP or UDP checksum over the pseudo header and L4LEN bytes. */
uint16_t l4_sum(uint32_t src, uint32_t dst, uint8_t proto, const uint8_t *l4, size_t l4len)
{
	uint32_t s = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + proto + (uint32_t)l4len;
	return fold(sum16(l4, l4len, s));
}

size_t put_tcp_hdr(uint8_t *t, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags,
			  uint16_t win, const uint8_t *opt, size_t optlen)
{
	put16(t, sport);
	put16(t + 2, dport);
	put32(t + 4, seq);
	put32(t + 8, ack);
	t[12] = (uint8_t)(((20 + optlen) / 4) << 4);
	t[13] = flags;
	put16(t + 14, win);
	put16(t + 16, 0);
	put16(t + 18, 0);
	if (optlen)
		memcpy(t + 20, opt, optlen);
	return 20 + optlen;
}

/* ---- transmit ---- */

void tx_flush(struct peer *p)
{
	int done = 0;
	while (done < p->ntx) {
		int r = sendmmsg(p->fd, p->msgs + done, (unsigned)(p->ntx - done), 0);
		if (r > 0) {
			for (int i = done; i < done + r; i++)
				p->c.bytes += p->iov[i].iov_len;
			p->c.frames += (unsigned long)r;
			done += r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		/* ENOBUFS (the peer's queue is full), EINVAL (the kernel refused a
		 * frame): that frame is lost, the rest still go. */
		p->c.tx_errors++;
		done++;
	}
	p->ntx = 0;
}

uint8_t *tx_slot(struct peer *p)
{
	if (p->ntx == BATCH)
		tx_flush(p);
	return p->txbuf[p->ntx];
}

void tx_commit(struct peer *p, size_t len)
{
	p->iov[p->ntx].iov_base = p->txbuf[p->ntx];
	p->iov[p->ntx].iov_len = len;
	memset(&p->msgs[p->ntx], 0, sizeof(p->msgs[p->ntx]));
	p->msgs[p->ntx].msg_hdr.msg_iov = &p->iov[p->ntx];
	p->msgs[p->ntx].msg_hdr.msg_iovlen = 1;
	p->ntx++;
}

/* A complete, correct TCP segment from SIP:SPORT to the target. */
void send_tcp(struct peer *p, uint32_t sip, uint16_t sport, uint32_t seq, uint32_t ack, uint8_t flags,
		     uint16_t win, const uint8_t *opt, size_t optlen, size_t dlen)
{
	uint8_t *f = tx_slot(p), smac[6];
	src_mac(p, sip, smac);
	size_t off = put_eth(f, p->dst_mac, smac, ETH_P_IP);
	uint8_t *t = f + off + 20;
	size_t tl = put_tcp_hdr(t, sport, (uint16_t)p->o.port, seq, ack, flags, win, opt, optlen);
	memset(t + tl, 'x', dlen);
	tl += dlen;
	put16(t + 16, l4_sum(sip, p->o.dst, 6, t, tl));
	put_ip(p, f + off, sip, p->o.dst, 6, 20 + tl, 0x4000);
	tx_commit(p, off + 20 + tl);
}

void send_udp(struct peer *p, uint32_t sip, uint16_t sport, uint16_t dport, size_t dlen)
{
	uint8_t *f = tx_slot(p), smac[6];
	src_mac(p, sip, smac);
	size_t off = put_eth(f, p->dst_mac, smac, ETH_P_IP);
	uint8_t *u = f + off + 20;
	put16(u, sport);
	put16(u + 2, dport);
	put16(u + 4, (uint16_t)(8 + dlen));
	put16(u + 6, 0);
	memset(u + 8, 'u', dlen);
	uint16_t s = l4_sum(sip, p->o.dst, 17, u, 8 + dlen);
	put16(u + 6, s ? s : 0xffff);
	put_ip(p, f + off, sip, p->o.dst, 17, 28 + dlen, 0x4000);
	tx_commit(p, off + 28 + dlen);
}

/* ARP: OP 1 request, 2 reply. */
void send_arp(struct peer *p, uint16_t op, const uint8_t *eth_dst, const uint8_t *sha, uint32_t spa,
		     const uint8_t *tha, uint32_t tpa)
{
	uint8_t *f = tx_slot(p);
	size_t off = put_eth(f, eth_dst, sha, ETH_P_ARP);
	uint8_t *a = f + off;
	put16(a, 1);
	put16(a + 2, ETH_P_IP);
	a[4] = 6;
	a[5] = 4;
	put16(a + 6, op);
	memcpy(a + 8, sha, 6);
	put32(a + 14, spa);
	memcpy(a + 18, tha, 6);
	put32(a + 24, tpa);
	memset(a + 28, 0, 18); /* pad to the 60-byte minimum */
	tx_commit(p, off + 46);
}
