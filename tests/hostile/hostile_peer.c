/* hostile_peer: a misbehaving TCP/UDP peer made of raw Ethernet frames.
 *
 *   hostile_peer MODE --if IFNAME --dst IP --port N [options]
 *
 * It runs on the far end of a link from an offloaded socket (the testbed's
 * other namespace) and speaks through one AF_PACKET socket bound to the
 * interface. Its sources are spoofed addresses that no interface carries
 * (--src-base, --src-count; 198.18.0.100-.199 when the target is
 * 198.18.0.x): it answers ARP for them itself with a made-up MAC per
 * address, so the target's kernel resolves them and the frames coming back
 * reach this socket while the local kernel drops them (another host's MAC),
 * never answering with a RST. Checksums are right except where the
 * malformed mode breaks them on purpose.
 *
 * Modes (docs/hostile_peer.md):
 *   tiny       --conns handshakes, then 1-byte in-order segments up to the
 *              advertised window of each; nothing is retransmitted
 *   holes      --conns handshakes, then each window filled out of order with
 *              --seg byte segments past a 1-byte hole that is never filled
 *   syn        SYNs from random spoofed addresses and ports, never completed
 *   ackflood   learns a running connection to --port (sniffed on the same
 *              socket) and sprays it with ACKs of bogus ack numbers, RSTs
 *              and SYNs with in-window, inexact sequence numbers (RFC 5961)
 *   malformed  broken frames: headers cut short, bad IHL / lengths /
 *              checksums, TCP data offsets and options, UDP lengths,
 *              overlapping fragments
 *   udp0       zero-length UDP datagrams to --port
 * Prints one summary line and exits 0; 2 on a usage or setup error. */
#include "hostile_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/filter.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define SNAPLEN 192        /* headers and options are all we read */
#define RX_PER_DRAIN 512   /* frames handled per drain, so sending goes on */
#define SNIFF_ONE_IN 4     /* ackflood: the share of the flow's plain segments read */
#define HANDSHAKE_WAIT_S 2.0
#define SYN_RESEND_S 0.5
#define ARP_WAIT_S 3.0
#define INWIN_MARGIN 32768 /* ackflood: this far past what the client was seen sending */

static const char *const mode_names[] = { "tiny", "holes", "syn", "ackflood", "malformed", "udp0" };

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* Pacing: how many frames may leave now (--pps; 0 is no limit). */
static int pace_budget(struct peer *p)
{
	if (p->o.pps <= 0)
		return BATCH;
	double t = now_s();
	p->credit += (t - p->last_pace) * (double)p->o.pps;
	p->last_pace = t;
	double cap = (double)p->o.pps / 100.0; /* at most 10 ms of catching up */
	if (cap < BATCH)
		cap = BATCH;
	if (p->credit > cap)
		p->credit = cap;
	int n = p->credit >= BATCH ? BATCH : (int)p->credit;
	return n;
}

static void pace_spent(struct peer *p, int n)
{
	if (p->o.pps > 0)
		p->credit -= n;
}

/* ---- receive ---- */

static void handle_arp(struct peer *p, const uint8_t *a, size_t len)
{
	if (len < 28 || get16(a) != 1 || get16(a + 2) != ETH_P_IP || a[4] != 6 || a[5] != 4)
		return;
	uint16_t op = get16(a + 6);
	uint32_t spa = get32(a + 14), tpa = get32(a + 24);
	if (spa == p->o.dst && !p->have_dst_mac) {
		memcpy(p->dst_mac, a + 8, 6);
		p->have_dst_mac = true;
	}
	if (op == 1 && in_spoof(&p->o, tpa)) {
		uint8_t mac[6];
		spoof_mac(tpa, mac);
		send_arp(p, 2, a + 8, mac, tpa, a + 8, spa);
		p->c.arp_replies++;
	}
}

static struct conn *conn_of(struct peer *p, uint32_t ip, uint16_t port)
{
	int i = (int)port - p->port_base;
	if (i < 0 || i >= p->nconns || p->conns[i].sip != ip)
		return NULL;
	return &p->conns[i];
}

static void conn_segment(struct peer *p, uint32_t dip, const uint8_t *t)
{
	struct conn *c = conn_of(p, dip, get16(t + 2));
	if (!c || get16(t) != p->o.port)
		return;
	uint32_t seq = get32(t + 4), ack = get32(t + 8);
	uint8_t fl = t[13];
	uint16_t win = get16(t + 14);
	if (fl & F_RST) {
		if (c->state != C_DEAD)
			p->c.resets_rx++;
		c->state = C_DEAD;
		return;
	}
	if ((fl & (F_SYN | F_ACK)) == (F_SYN | F_ACK)) {
		if (c->state == C_SYN_SENT && ack == c->iss + 1) {
			c->state = C_EST;
			c->rcv_nxt = seq + 1;
			c->snd_una = c->snd_nxt = ack;
			c->right = ack + win; /* no window scale offered: the field as it is */
			p->c.synacks++;
		}
		if (c->state == C_EST && seq + 1 == c->rcv_nxt) { /* first, or a repeat: our ACK */
			send_tcp(p, c->sip, c->sport, c->snd_nxt, c->rcv_nxt, F_ACK, 65535, NULL, 0, 0);
			p->c.acks++;
		}
		return;
	}
	if (c->state == C_EST && (fl & F_ACK)) {
		if (seq_gt(ack, c->snd_una) && !seq_gt(ack, c->snd_nxt))
			c->snd_una = ack;
		if (seq_gt(ack + win, c->right))
			c->right = ack + win;
	}
}

static void legit_options(struct legit *lg, const uint8_t *t, size_t thl, bool from_server, bool synack)
{
	for (size_t i = 20; i < thl;) {
		uint8_t kind = t[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		if (i + 1 >= thl || t[i + 1] < 2 || i + t[i + 1] > thl)
			break;
		if (kind == 3 && t[i + 1] == 3 && from_server && synack)
			lg->srv_wscale = t[i + 2] > 14 ? 14 : t[i + 2];
		if (kind == 8 && t[i + 1] == 10 && !from_server) {
			lg->cli_ts = true;
			lg->ts_val = get32(t + i + 2);
			lg->ts_ecr = get32(t + i + 6);
		}
		i += t[i + 1];
	}
}

/* ackflood: learn the legitimate connection from a frame either way. */
static void legit_segment(struct peer *p, uint32_t sip, uint32_t dip, const uint8_t *t, size_t thl, size_t dlen)
{
	struct legit *lg = &p->lg;
	bool from_server = sip == p->o.dst && get16(t) == p->o.port;
	uint32_t cip = from_server ? dip : sip;
	uint16_t cport = from_server ? get16(t + 2) : get16(t);
	uint8_t fl = t[13];
	uint32_t seq = get32(t + 4), ack = get32(t + 8);
	double now = now_s();
	if (in_spoof(&p->o, cip))
		return;
	bool same = lg->have && lg->cip == cip && lg->cport == cport;
	/* A new connection: its SYN, or any frame once the old one went quiet. */
	if (!same && (!lg->have || ((fl & F_SYN) && !(fl & F_ACK)) || now - lg->last_seen > 1.0)) {
		memset(lg, 0, sizeof(*lg));
		lg->have = true;
		lg->cip = cip;
		lg->cport = cport;
		lg->sip = p->o.dst;
		lg->sport = (uint16_t)p->o.port;
		lg->srv_wscale = -1;
		same = true;
	}
	if (!same)
		return;
	lg->last_seen = now;
	if (fl & F_RST)
		lg->resets++;
	if (fl & F_FIN)
		lg->fins++;
	legit_options(lg, t, thl, from_server, (fl & (F_SYN | F_ACK)) == (F_SYN | F_ACK));
	if (from_server) {
		if (!(fl & F_ACK))
			return;
		uint32_t end = seq + (uint32_t)dlen + ((fl & F_SYN) ? 1 : 0);
		if (!lg->have_srv || seq_gt(end, lg->srv_seq))
			lg->srv_seq = end;
		if (!lg->have_srv || !seq_lt(ack, lg->srv_ack)) {
			lg->srv_ack = ack;
			lg->srv_win = get16(t + 14);
		}
		lg->have_srv = true;
	} else {
		uint32_t end = seq + (uint32_t)dlen + ((fl & (F_SYN | F_FIN)) ? 1 : 0);
		if (seq_gt(end, lg->cli_nxt) || !lg->have_cli)
			lg->cli_nxt = end;
		if (dlen > lg->cli_mss && dlen < 65536)
			lg->cli_mss = (uint32_t)dlen;
		lg->have_cli = true;
		lg->cli_win = get16(t + 14);
	}
}

static void handle_ipv4(struct peer *p, const uint8_t *ip, size_t len, bool outgoing)
{
	if (len < 20 || (ip[0] >> 4) != 4)
		return;
	size_t ihl = (size_t)(ip[0] & 0xf) * 4;
	size_t tot = get16(ip + 2);
	if (ihl < 20 || tot < ihl || (get16(ip + 6) & 0x3fff) || ip[9] != 6)
		return;
	const uint8_t *t = ip + ihl;
	if (len < ihl + 20)
		return;
	size_t thl = (size_t)(t[12] >> 4) * 4;
	if (thl < 20 || len < ihl + thl || tot < ihl + thl)
		return;
	uint32_t sip = get32(ip + 12), dip = get32(ip + 16);
	if (p->o.mode == M_ACKFLOOD) {
		bool to_srv = dip == p->o.dst && get16(t + 2) == p->o.port;
		bool from_srv = sip == p->o.dst && get16(t) == p->o.port;
		if (to_srv || from_srv)
			legit_segment(p, sip, dip, t, thl, tot - ihl - thl);
		return;
	}
	if (!outgoing && sip == p->o.dst && in_spoof(&p->o, dip))
		conn_segment(p, dip, t);
}

/* True when it read everything queued (what was learnt is then current). */
static bool rx_drain(struct peer *p)
{
	uint8_t buf[SNAPLEN + 64];
	for (int n = 0; n < RX_PER_DRAIN; n++) {
		struct sockaddr_ll sll;
		socklen_t sl = sizeof(sll);
		ssize_t r = recvfrom(p->fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&sll, &sl);
		if (r < 0)
			return true;
		p->c.rx_frames++;
		if (r < 14)
			continue;
		bool outgoing = sll.sll_pkttype == PACKET_OUTGOING;
		uint16_t type = get16(buf + 12);
		if (type == ETH_P_ARP && !outgoing)
			handle_arp(p, buf + 14, (size_t)r - 14);
		else if (type == ETH_P_IP)
			handle_ipv4(p, buf + 14, (size_t)r - 14, outgoing);
	}
	return false;
}

static void wait_rx(struct peer *p, int ms)
{
	struct pollfd pf = { .fd = p->fd, .events = POLLIN };
	poll(&pf, 1, ms);
	rx_drain(p);
	tx_flush(p);
}

/* ---- setup ---- */

/* Accept ARP, IPv4 to a spoofed address (tiny, holes) or unfragmented TCP
 * to or from the target's port (ackflood: every SYN, FIN and RST, one in
 * SNIFF_ONE_IN of the rest, which is plenty to follow the sequence numbers
 * of a bulk flow at a fraction of the reading); cut each to SNAPLEN.
 * Classic BPF jumps only forward: jt/jf count the instructions skipped. */
static int attach_filter(struct peer *p)
{
	const uint32_t lo = p->o.src_base, hi = p->o.src_base + (uint32_t)p->o.src_count;
	const uint32_t port = (uint32_t)p->o.port;
	enum { FLAGS = 16, ACCEPT = 20, DROP = 21 };
	struct sock_filter prog[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12), /* ethertype */
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_ARP, ACCEPT - 2, 0),
		/* 2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, DROP - 3),
		/* 3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 30), /* IPv4 destination */
		/* 4 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, lo, 0, 1),
		/* 5 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, hi, 0, ACCEPT - 6),
		/* 6 */ BPF_STMT(BPF_RET | BPF_K, 0),
		/* 7 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23), /* protocol */
		/* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, DROP - 9),
		/* 9 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20), /* fragment offset */
		/* 10 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, DROP - 11, 0),
		/* 11 */ BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14), /* X = IP header length */
		/* 12 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14), /* source port */
		/* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, FLAGS - 14, 0),
		/* 14 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16), /* destination port */
		/* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, FLAGS - 16, DROP - 16),
		/* 16 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 13), /* TCP flags */
		/* 17 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, F_SYN | F_FIN | F_RST, ACCEPT - 18, 0),
		/* 18 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_RANDOM)),
		/* 19 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0xffffffffu / SNIFF_ONE_IN, DROP - 20, ACCEPT - 20),
		/* 20 */ BPF_STMT(BPF_RET | BPF_K, SNAPLEN),
		/* 21 */ BPF_STMT(BPF_RET | BPF_K, 0),
	};
	/* Only tiny and holes hear from the target (their connections); only
	 * ackflood sniffs; the others need nothing but ARP. */
	if (p->o.mode == M_ACKFLOOD)
		prog[3] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 7 - 4, 0, 0);
	else if (p->o.mode != M_TINY && p->o.mode != M_HOLES)
		prog[3] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog fp = { .len = sizeof(prog) / sizeof(prog[0]), .filter = prog };
	return setsockopt(p->fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp));
}

static int open_socket(struct peer *p)
{
	p->fd = socket(AF_PACKET, SOCK_RAW, 0); /* nothing arrives before the filter */
	if (p->fd < 0) {
		perror("hostile_peer: socket(AF_PACKET)");
		return -1;
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", p->o.ifname);
	if (ioctl(p->fd, SIOCGIFINDEX, &ifr) != 0) {
		fprintf(stderr, "hostile_peer: %s: %s\n", p->o.ifname, strerror(errno));
		return -1;
	}
	p->ifindex = ifr.ifr_ifindex;
	if (ioctl(p->fd, SIOCGIFHWADDR, &ifr) != 0) {
		perror("hostile_peer: SIOCGIFHWADDR");
		return -1;
	}
	memcpy(p->if_mac, ifr.ifr_hwaddr.sa_data, 6);
	if (attach_filter(p) != 0) {
		perror("hostile_peer: SO_ATTACH_FILTER");
		return -1;
	}
	int sz = 4 << 20;
	setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };
	setsockopt(p->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
				   .sll_ifindex = p->ifindex };
	if (bind(p->fd, (struct sockaddr *)&sll, sizeof(sll)) != 0) {
		perror("hostile_peer: bind");
		return -1;
	}
	return 0;
}

static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
static const uint8_t zero_mac[6];

/* The target's MAC by ARP, then one request from every spoofed address so
 * the target's kernel knows them before the first reply must leave. */
static int resolve_target(struct peer *p)
{
	uint8_t mac[6];
	spoof_mac(p->o.src_base, mac);
	double t0 = now_s(), last = 0;
	while (!p->have_dst_mac && now_s() - t0 < ARP_WAIT_S && !stop_flag) {
		if (now_s() - last > 0.25) {
			send_arp(p, 1, bcast, mac, p->o.src_base, zero_mac, p->o.dst);
			p->c.arp_requests++;
			tx_flush(p);
			last = now_s();
		}
		wait_rx(p, 20);
	}
	if (!p->have_dst_mac)
		return -1;
	for (int i = 0; i < p->o.src_count; i++) {
		uint32_t ip = p->o.src_base + (uint32_t)i;
		spoof_mac(ip, mac);
		send_arp(p, 1, bcast, mac, ip, zero_mac, p->o.dst);
		p->c.arp_requests++;
	}
	tx_flush(p);
	wait_rx(p, 50);
	return 0;
}

/* ---- modes ---- */

static void open_conns(struct peer *p)
{
	p->nconns = p->o.conns;
	p->conns = calloc((size_t)p->nconns, sizeof(*p->conns));
	if (!p->conns) {
		perror("hostile_peer: calloc");
		exit(2);
	}
	p->port_base = 20000 + (int)rnd_below(p, 40000 - (uint32_t)p->nconns);
	for (int i = 0; i < p->nconns; i++) {
		struct conn *c = &p->conns[i];
		c->sip = p->o.src_base + (uint32_t)(i % p->o.src_count);
		c->sport = (uint16_t)(p->port_base + i);
		c->iss = (uint32_t)rnd(p);
		c->state = C_SYN_SENT;
	}
	double t0 = now_s(), last = -1;
	int est = 0;
	while (now_s() - t0 < HANDSHAKE_WAIT_S && !stop_flag) {
		if (now_s() - last >= SYN_RESEND_S) {
			last = now_s();
			for (int i = 0; i < p->nconns; i++) {
				struct conn *c = &p->conns[i];
				if (c->state == C_SYN_SENT) {
					send_tcp(p, c->sip, c->sport, c->iss, 0, F_SYN, 65535, syn_opts, sizeof(syn_opts), 0);
					p->c.syns++;
				}
			}
			tx_flush(p);
		}
		wait_rx(p, 5);
		est = 0;
		for (int i = 0; i < p->nconns; i++)
			est += p->conns[i].state != C_SYN_SENT;
		if (est == p->nconns)
			break;
	}
}

static int conns_in(const struct peer *p, enum conn_state s)
{
	int n = 0;
	for (int i = 0; i < p->nconns; i++)
		n += p->conns[i].state == s;
	return n;
}

/* tiny: the next 1-byte segment of each connection in turn. */
static int fill_tiny(struct peer *p, int budget, int *rr)
{
	int made = 0, idle = 0;
	while (made < budget && idle < p->nconns) {
		struct conn *c = &p->conns[*rr];
		*rr = (*rr + 1) % p->nconns;
		if (c->state != C_EST || !seq_lt(c->snd_nxt, c->right)) {
			idle++;
			continue;
		}
		idle = 0;
		send_tcp(p, c->sip, c->sport, c->snd_nxt, c->rcv_nxt, F_ACK | F_PSH, 65535, NULL, 0, 1);
		c->snd_nxt++;
		p->c.data++;
		made++;
	}
	return made;
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
	while (b) {
		uint32_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* holes: [hole, hole+1) stays empty; the window past it is cut into --seg
 * byte segments sent in a stride order, so they arrive out of order among
 * themselves too. */
static void holes_plan(struct peer *p, struct conn *c)
{
	c->hole = c->snd_nxt;
	uint32_t span = c->right - c->hole;
	uint32_t seg = (uint32_t)p->o.seg;
	c->nseg = span > 1 ? (span - 1 + seg - 1) / seg : 0;
	c->step = c->nseg > 2 ? c->nseg * 5 / 8 + 1 : 1;
	while (c->nseg > 1 && gcd32(c->step, c->nseg) != 1)
		c->step++;
	c->next = 0;
}

static int fill_holes(struct peer *p, int budget, int *rr)
{
	int made = 0, idle = 0;
	uint32_t seg = (uint32_t)p->o.seg;
	while (made < budget && idle < p->nconns) {
		struct conn *c = &p->conns[*rr];
		*rr = (*rr + 1) % p->nconns;
		if (c->state == C_EST && c->step == 0)
			holes_plan(p, c);
		if (c->state != C_EST || c->next >= c->nseg) {
			idle++;
			continue;
		}
		idle = 0;
		uint32_t j = (uint32_t)(((uint64_t)c->next * c->step) % c->nseg);
		uint32_t start = c->hole + 1 + j * seg;
		uint32_t left = c->right - start;
		send_tcp(p, c->sip, c->sport, start, c->rcv_nxt, F_ACK, 65535, NULL, 0, left < seg ? left : seg);
		c->next++;
		p->c.data++;
		made++;
	}
	return made;
}

static int fill_syn(struct peer *p, int budget)
{
	for (int i = 0; i < budget; i++) {
		/* What Linux puts in a SYN: MSS, SACK permitted, timestamps, window scale. */
		uint8_t opt[20] = { 2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 3, 3, 7 };
		put32(opt + 8, (uint32_t)rnd(p));
		send_tcp(p, rnd_spoof(p), rnd_port(p), (uint32_t)rnd(p), 0, F_SYN, 64240, opt, sizeof(opt), 0);
		p->c.syns++;
	}
	return budget;
}

static int fill_udp0(struct peer *p, int budget)
{
	for (int i = 0; i < budget; i++) {
		send_udp(p, rnd_spoof(p), rnd_port(p), (uint16_t)p->o.port, 0);
		p->c.udp++;
	}
	return budget;
}

/* ackflood: a sequence number the server will find inside its receive
 * window but never equal to its RCV.NXT, where a RST would be a real reset.
 * The server takes our frame after every segment the client sent before it
 * and none sent after, so RCV.NXT is then at most the client's SND.NXT of
 * that moment, and it is the end of one of the client's segments. The pick
 * lies past what the client had sent when we last saw it, by a margin for
 * what it may have sent since, in the middle of a segment of the client's
 * MSS (a bulk sender's segments are all that long), and within the window
 * the server will offer then (its last one, from there). False when the
 * window leaves no room past the margin. */
static bool pick_inwin(struct peer *p, uint32_t *seq)
{
	struct legit *lg = &p->lg;
	int ws = lg->srv_wscale >= 0 ? lg->srv_wscale : (p->o.peer_wscale >= 0 ? p->o.peer_wscale : 0);
	uint64_t w = (uint64_t)lg->srv_win << ws;
	uint64_t mss = lg->cli_mss >= 64 ? lg->cli_mss : 1448;
	if (w > 0x3fffffff)
		w = 0x3fffffff;
	uint64_t first = (INWIN_MARGIN + mss - 1) / mss, last = w / mss; /* segments past SND.NXT */
	if (last < first + 2)
		return false;
	uint64_t k = first + rnd(p) % (last - first);
	*seq = lg->cli_nxt + (uint32_t)(k * mss + mss / 2);
	return true;
}

static int fill_ackflood(struct peer *p, int budget, unsigned *turn)
{
	struct legit *lg = &p->lg;
	int made = 0;
	for (int i = 0; i < budget; i++) {
		uint32_t seq;
		unsigned kind = (*turn)++ % 4;
		if (!pick_inwin(p, &seq)) {
			p->c.skipped_nowin++;
			break;
		}
		uint8_t opt[16];
		size_t ol = 0;
		if (kind == 3) { /* SYN: MSS first */
			memcpy(opt, syn_opts, 4);
			ol = 4;
		}
		if (lg->cli_ts && kind != 2) {
			opt[ol] = 1;
			opt[ol + 1] = 1;
			opt[ol + 2] = 8;
			opt[ol + 3] = 10;
			put32(opt + ol + 4, lg->ts_val);
			put32(opt + ol + 8, lg->ts_ecr);
			ol += 12;
		}
		uint16_t win = (uint16_t)lg->cli_win;
		switch (kind) {
		case 0: /* acks data the server never sent */
			send_tcp(p, lg->cip, lg->cport, seq, lg->srv_seq + 1 + rnd_below(p, 1u << 30), F_ACK, win, opt, ol, 0);
			p->c.ack_future++;
			break;
		case 1: /* acks far behind SND.UNA - MAX.SND.WND */
			send_tcp(p, lg->cip, lg->cport, seq, lg->srv_seq - (1u << 30) - rnd_below(p, 1u << 29), F_ACK, win,
				 opt, ol, 0);
			p->c.ack_old++;
			break;
		case 2: /* in window, not RCV.NXT: a challenge ACK, never a reset */
			send_tcp(p, lg->cip, lg->cport, seq, lg->srv_seq, (rnd(p) & 1) ? (F_RST | F_ACK) : F_RST, 0, NULL, 0,
				 0);
			p->c.rst_inwin++;
			break;
		default: /* a SYN on a synchronized connection: a challenge ACK */
			send_tcp(p, lg->cip, lg->cport, seq, 0, F_SYN, win, opt, ol, 0);
			p->c.syn_inwin++;
			break;
		}
		made++;
	}
	return made;
}

/* ---- main ---- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: hostile_peer tiny|holes|syn|ackflood|malformed|udp0 --if IFNAME --dst IP --port N\n"
		"         [--conns N] [--secs S] [--src-base IP] [--src-count N] [--dst-mac MAC]\n"
		"         [--pps N] [--seg N] [--udp-port N] [--peer-wscale N] [--wait S] [--only KINDS]\n"
		"         [--seed N] [--verbose]\n"
		"  --conns N       tiny/holes: connections to open (default 16, at most %d)\n"
		"  --secs S        how long to flood (default 3)\n"
		"  --src-base IP   first spoofed source (default .100 of the target's /24)\n"
		"  --src-count N   spoofed sources (default 100)\n"
		"  --dst-mac MAC   the target's MAC (default: ask by ARP)\n"
		"  --pps N         frames per second at most (default 0: as fast as it goes)\n"
		"  --seg N         holes: bytes per segment (default 1)\n"
		"  --udp-port N    malformed: the UDP port to aim at (default --port)\n"
		"  --peer-wscale N ackflood: the server's window scale when the handshake is not seen\n"
		"  --wait S        ackflood: how long to wait for a connection to --port (default 5)\n"
		"  --only KINDS    malformed: only these kinds (comma list; --verbose counts each)\n"
		"  --seed N        the random generator's seed (default: time and pid)\n"
		"  --verbose       malformed: the count of each kind in the summary\n",
		MAX_CONNS);
}

static int parse_int(const char *s, long lo, long hi, const char *what)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "hostile_peer: bad %s '%s' (%ld..%ld)\n", what, s, lo, hi);
		exit(2);
	}
	return (int)v;
}

static uint32_t parse_ip(const char *s, const char *what)
{
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1) {
		fprintf(stderr, "hostile_peer: bad %s '%s'\n", what, s);
		exit(2);
	}
	return ntohl(a.s_addr);
}

static void parse_args(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "if", required_argument, NULL, 'i' },	       { "dst", required_argument, NULL, 'd' },
		{ "port", required_argument, NULL, 'p' },      { "udp-port", required_argument, NULL, 'u' },
		{ "conns", required_argument, NULL, 'c' },     { "secs", required_argument, NULL, 's' },
		{ "src-base", required_argument, NULL, 'b' },  { "src-count", required_argument, NULL, 'n' },
		{ "dst-mac", required_argument, NULL, 'm' },   { "pps", required_argument, NULL, 'r' },
		{ "seg", required_argument, NULL, 'g' },       { "seed", required_argument, NULL, 'e' },
		{ "peer-wscale", required_argument, NULL, 'w' }, { "wait", required_argument, NULL, 'W' },
		{ "only", required_argument, NULL, 'o' },	       { "verbose", no_argument, NULL, 'v' },	       { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	memset(o, 0, sizeof(*o));
	o->conns = 16;
	o->secs = 3;
	o->wait_s = 5;
	o->src_count = 100;
	o->seg = 1;
	o->peer_wscale = -1;
	o->udp_port = -1;
	bool have_base = false;
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'i': o->ifname = optarg; break;
		case 'd': o->dst = parse_ip(optarg, "--dst"); break;
		case 'p': o->port = parse_int(optarg, 1, 65535, "--port"); break;
		case 'u': o->udp_port = parse_int(optarg, 1, 65535, "--udp-port"); break;
		case 'c': o->conns = parse_int(optarg, 1, MAX_CONNS, "--conns"); break;
		case 's': o->secs = atof(optarg); break;
		case 'W': o->wait_s = atof(optarg); break;
		case 'b': o->src_base = parse_ip(optarg, "--src-base"); have_base = true; break;
		case 'n': o->src_count = parse_int(optarg, 1, 65536, "--src-count"); break;
		case 'r': o->pps = parse_int(optarg, 0, 100000000, "--pps"); break;
		case 'g': o->seg = parse_int(optarg, 1, 1400, "--seg"); break;
		case 'e': o->seed = (uint64_t)strtoull(optarg, NULL, 0); break;
		case 'w': o->peer_wscale = parse_int(optarg, 0, 14, "--peer-wscale"); break;
		case 'o': o->only = optarg; break;
		case 'v': o->verbose++; break;
		case 'm': {
			unsigned m[6];
			if (sscanf(optarg, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) {
				fprintf(stderr, "hostile_peer: bad --dst-mac '%s'\n", optarg);
				exit(2);
			}
			for (int i = 0; i < 6; i++)
				o->dst_mac[i] = (uint8_t)m[i];
			o->have_dst_mac = true;
			break;
		}
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc - 1 || !o->ifname || !o->dst || !o->port) {
		usage(stderr);
		exit(2);
	}
	bool found = false;
	for (unsigned i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		if (strcmp(argv[optind], mode_names[i]) == 0) {
			o->mode = (enum mode)i;
			found = true;
		}
	if (!found) {
		fprintf(stderr, "hostile_peer: unknown mode '%s'\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
	if (!(o->secs > 0 && o->secs <= 3600) || !(o->wait_s >= 0 && o->wait_s <= 600)) {
		fprintf(stderr, "hostile_peer: --secs must be in (0, 3600], --wait in [0, 600]\n");
		exit(2);
	}
	if (!have_base)
		o->src_base = (o->dst & 0xffffff00u) | 100;
	if (o->src_base + (uint32_t)o->src_count < o->src_base || in_spoof(o, o->dst)) {
		fprintf(stderr, "hostile_peer: the spoofed range must not wrap or hold --dst\n");
		exit(2);
	}
	if (o->udp_port < 0)
		o->udp_port = o->port;
	if (!o->seed)
		o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

static void summary(struct peer *p, double secs)
{
	const struct counts *c = &p->c;
	char extra[1024] = "";
	size_t n = 0;
	switch (p->o.mode) {
	case M_TINY:
	case M_HOLES:
		n += (size_t)snprintf(extra, sizeof(extra), " conns %d/%d established (%d reset by the target), %lu data segments",
				      p->nconns - conns_in(p, C_SYN_SENT), p->nconns, conns_in(p, C_DEAD), c->data);
		break;
	case M_SYN:
		n += (size_t)snprintf(extra, sizeof(extra), " %lu SYNs", c->syns);
		break;
	case M_UDP0:
		n += (size_t)snprintf(extra, sizeof(extra), " %lu zero-length datagrams", c->udp);
		break;
	case M_ACKFLOOD: {
		const struct legit *lg = &p->lg;
		char cip[INET_ADDRSTRLEN] = "-";
		struct in_addr a = { .s_addr = htonl(lg->cip) };
		if (lg->have)
			inet_ntop(AF_INET, &a, cip, sizeof(cip));
		n += (size_t)snprintf(extra, sizeof(extra),
				      " legit %s:%u (window %u x 2^%d%s), %lu ACKs of unsent data, %lu ACKs too old, %lu in-window RSTs, %lu in-window SYNs (%lu times the window left no room),"
				      " RST/FIN seen on the legit flow %lu/%lu",
				      cip, lg->cport, lg->srv_win, lg->srv_wscale >= 0 ? lg->srv_wscale : (p->o.peer_wscale >= 0 ? p->o.peer_wscale : 0),
				      lg->srv_wscale >= 0 ? ", from the handshake" : ", assumed", c->ack_future, c->ack_old,
				      c->rst_inwin, c->syn_inwin, c->skipped_nowin, lg->resets, lg->fins);
		break;
	}
	case M_MALFORMED: {
		unsigned long total = 0;
		for (int k = 0; k < MAL_COUNT; k++)
			total += c->malformed[k];
		n += (size_t)snprintf(extra, sizeof(extra), " %lu malformed of %d kinds", total, MAL_COUNT);
		if (p->o.verbose)
			for (int k = 0; k < MAL_COUNT && n < sizeof(extra) - 32; k++)
				n += (size_t)snprintf(extra + n, sizeof(extra) - n, " %s=%lu", mal_names[k], c->malformed[k]);
		break;
	}
	}
	(void)n;
	printf("hostile_peer %s: sent %lu frames (%.1f MB) in %.2f s (%.0f/s), %lu send errors, %lu frames read, %lu ARP replies;%s\n",
	       mode_names[p->o.mode], c->frames, (double)c->bytes / 1e6, secs, secs > 0 ? (double)c->frames / secs : 0.0,
	       c->tx_errors, c->rx_frames, c->arp_replies, extra);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct peer peer;
	struct peer *p = &peer;
	parse_args(&p->o, argc, argv);
	p->rng = p->o.seed | 1;
	p->ip_id = (uint16_t)rnd(p);
	p->mal_mask = mal_parse(p->o.only);
	p->lg.srv_wscale = -1;
	struct sigaction sa = { .sa_handler = on_stop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (open_socket(p) != 0)
		return 2;
	if (p->o.have_dst_mac) {
		memcpy(p->dst_mac, p->o.dst_mac, 6);
		p->have_dst_mac = true;
	}
	if (resolve_target(p) != 0) {
		fprintf(stderr, "hostile_peer: no ARP answer for the target from %s\n", p->o.ifname);
		return 2;
	}
	char mac[18];
	snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", p->dst_mac[0], p->dst_mac[1], p->dst_mac[2],
		 p->dst_mac[3], p->dst_mac[4], p->dst_mac[5]);
	if (p->o.mode == M_TINY || p->o.mode == M_HOLES)
		open_conns(p);
	if (p->o.mode == M_ACKFLOOD) {
		printf("hostile_peer ackflood: target at %s, waiting up to %.1f s for a connection to port %d\n", mac,
		       p->o.wait_s, p->o.port);
		fflush(stdout);
		double t0 = now_s();
		while (!(p->lg.have && p->lg.have_srv && p->lg.have_cli) && now_s() - t0 < p->o.wait_s && !stop_flag)
			wait_rx(p, 20);
		if (!(p->lg.have && p->lg.have_srv && p->lg.have_cli))
			fprintf(stderr, "hostile_peer: no connection to port %d seen in %.1f s\n", p->o.port, p->o.wait_s);
	}
	printf("hostile_peer %s: target at %s, flooding for %.1f s\n", mode_names[p->o.mode], mac, p->o.secs);
	fflush(stdout);
	double t0 = now_s(), t;
	p->last_pace = t0;
	p->credit = 0;
	int rr = 0;
	unsigned turn = 0;
	while ((t = now_s()) - t0 < p->o.secs && !stop_flag) {
		bool current = rx_drain(p);
		int budget = pace_budget(p);
		if (budget == 0) {
			tx_flush(p);
			wait_rx(p, 1);
			continue;
		}
		int made = 0;
		switch (p->o.mode) {
		case M_TINY: made = fill_tiny(p, budget, &rr); break;
		case M_HOLES: made = fill_holes(p, budget, &rr); break;
		case M_SYN: made = fill_syn(p, budget); break;
		case M_UDP0: made = fill_udp0(p, budget); break;
		case M_MALFORMED: made = fill_malformed(p, budget); break;
		case M_ACKFLOOD:
			/* guesses only from what the client has sent up to now */
			if (!current) {
				tx_flush(p);
				continue;
			}
			made = p->lg.have_srv && p->lg.have_cli ? fill_ackflood(p, budget, &turn) : 0;
			break;
		}
		tx_flush(p);
		pace_spent(p, made);
		if (made == 0)
			wait_rx(p, 5); /* windows closed (or nothing learnt): only answer */
	}
	tx_flush(p);
	summary(p, now_s() - t0);
	free(p->conns);
	close(p->fd);
	return 0;
}
