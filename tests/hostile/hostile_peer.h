/* hostile_peer (tests/hostile): what its parts share. hostile_wire.c builds
 * and sends frames, hostile_malformed.c breaks them, hostile_peer.c runs the
 * modes. */
#ifndef HOSTILE_PEER_H
#define HOSTILE_PEER_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define BATCH 64
#define FRAME_MAX 1600
#define MAX_CONNS 4096

enum mode { M_TINY, M_HOLES, M_SYN, M_ACKFLOOD, M_MALFORMED, M_UDP0 };

enum { F_FIN = 0x01, F_SYN = 0x02, F_RST = 0x04, F_PSH = 0x08, F_ACK = 0x10, F_URG = 0x20 };

struct opts {
	enum mode mode;
	const char *ifname;
	uint32_t dst;
	int port, udp_port;
	int conns;
	double secs, wait_s;
	uint32_t src_base;
	int src_count;
	uint8_t dst_mac[6];
	bool have_dst_mac;
	long pps;
	int seg;
	uint64_t seed;
	int peer_wscale;
	const char *only; /* malformed: the kinds to send (comma list) */
	int verbose;
};

enum mal {
	MAL_ETH_ONLY, MAL_IP_TRUNC, MAL_IHL_SMALL, MAL_IHL_LARGE, MAL_TOTLEN_BIG, MAL_TOTLEN_SMALL,
	MAL_IP_CSUM, MAL_IP_VERSION, MAL_IP_OPTS, MAL_TCP_CSUM, MAL_TCP_TRUNC, MAL_DOFF_SMALL,
	MAL_DOFF_LARGE, MAL_OPT_LEN0, MAL_OPT_LEN1, MAL_OPT_PAST, MAL_OPT_RANDOM, MAL_TCP_FLAGS,
	MAL_LAND, MAL_SRC_BAD, MAL_UDP_CSUM, MAL_UDP_LEN_BIG, MAL_UDP_LEN_SMALL, MAL_UDP_LEN_SHORT,
	MAL_FRAG_OVERLAP, MAL_FRAG_HUGE, MAL_FRAG_TCP, MAL_COUNT
};

enum conn_state { C_SYN_SENT, C_EST, C_DEAD };

struct conn {
	uint32_t sip;
	uint16_t sport;
	uint8_t state;
	uint32_t iss, snd_nxt, snd_una, right, rcv_nxt;
	/* holes: the segments past the hole, visited in a stride order */
	uint32_t hole, nseg, step, next;
};

/* ackflood: what the sniffer knows of the legitimate connection. */
struct legit {
	bool have, have_srv, have_cli;
	uint32_t cip, sip;
	uint16_t cport, sport;
	uint32_t srv_seq, srv_ack, srv_win;
	int srv_wscale; /* -1: the handshake was not seen */
	uint32_t cli_nxt, cli_win, cli_mss;
	bool cli_ts;
	uint32_t ts_val, ts_ecr;
	double last_seen;
	unsigned long resets, fins;
};

struct counts {
	unsigned long frames, bytes, tx_errors, arp_replies, arp_requests, rx_frames;
	unsigned long syns, synacks, acks, data, resets_rx, udp;
	unsigned long ack_future, ack_old, rst_inwin, syn_inwin, skipped_nowin;
	unsigned long malformed[MAL_COUNT];
};

struct peer {
	struct opts o;
	int fd, ifindex;
	uint8_t if_mac[6];
	uint8_t dst_mac[6];
	bool have_dst_mac;
	uint64_t rng;
	struct counts c;
	/* transmit batch */
	uint8_t txbuf[BATCH][FRAME_MAX];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	int ntx;
	/* pacing */
	double credit, last_pace;
	struct conn *conns;
	int nconns, port_base;
	struct legit lg;
	uint16_t ip_id;
	uint32_t mal_mask;
};

static inline void put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)(v >> 8);
	b[1] = (uint8_t)v;
}

static inline void put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static inline uint16_t get16(const uint8_t *b)
{
	return (uint16_t)(b[0] << 8 | b[1]);
}

static inline uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static inline bool seq_lt(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

static inline bool seq_gt(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

static inline bool in_spoof(const struct opts *o, uint32_t ip)
{
	return ip - o->src_base < (uint32_t)o->src_count;
}

/* hostile_wire.c */
extern const uint8_t syn_opts[4];
double now_s(void);
uint64_t rnd(struct peer *p);
uint32_t rnd_below(struct peer *p, uint32_t n);
uint32_t rnd_spoof(struct peer *p);
uint16_t rnd_port(struct peer *p);
uint32_t sum16(const uint8_t *b, size_t len, uint32_t sum);
uint16_t fold(uint32_t sum);
uint16_t l4_sum(uint32_t src, uint32_t dst, uint8_t proto, const uint8_t *l4, size_t l4len);
void spoof_mac(uint32_t ip, uint8_t mac[6]);
void src_mac(const struct peer *p, uint32_t ip, uint8_t mac[6]);
size_t put_eth(uint8_t *f, const uint8_t *dmac, const uint8_t *smac, uint16_t type);
void put_ip(struct peer *p, uint8_t *ip, uint32_t src, uint32_t dst, uint8_t proto, size_t totlen, uint16_t frag);
size_t put_tcp_hdr(uint8_t *t, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags,
		   uint16_t win, const uint8_t *opt, size_t optlen);
void tx_flush(struct peer *p);
uint8_t *tx_slot(struct peer *p);
void tx_commit(struct peer *p, size_t len);
void send_tcp(struct peer *p, uint32_t sip, uint16_t sport, uint32_t seq, uint32_t ack, uint8_t flags,
	      uint16_t win, const uint8_t *opt, size_t optlen, size_t dlen);
void send_udp(struct peer *p, uint32_t sip, uint16_t sport, uint16_t dport, size_t dlen);
void send_arp(struct peer *p, uint16_t op, const uint8_t *eth_dst, const uint8_t *sha, uint32_t spa,
	      const uint8_t *tha, uint32_t tpa);

/* hostile_malformed.c */
extern const char *const mal_names[MAL_COUNT];
uint32_t mal_parse(const char *list);
int fill_malformed(struct peer *p, int budget);

#endif
