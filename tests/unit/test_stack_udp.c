/* The stack's Ethernet/IPv4/UDP layers end to end over fake netifs: a sender
 * stack's frames are copied into RX buffers ("the wire") and fed to a
 * receiver stack. Every test ends by checking that both pools (the ring
 * module's plain ring_buf pools) are whole. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stack/stack.h"

#define POOL_BUFS   4096
#define BUF_SIZE    2048
#define MAX_FRAMES  256
#define MAX_RECV    16

static struct ring_buf_pool *tx_pool, *rx_pool;
static struct stack *tx_st, *rx_st;
static struct stack_netif nif_a, nif_b;
static struct ring_buf *wire[MAX_FRAMES];
static int nwire;
static int tx_budget;            /* tx_alloc refuses after this many; -1 = unlimited */
static int tx_send_fail_at;      /* tx_send fails on this call index; -1 = never */
static int tx_send_calls;

struct delivery {
	struct stack_udp_pcb *pcb;
	const struct ring_buf *buf;
	uint16_t refcount;
	uint32_t len;
	uint8_t *bytes;
	struct stack_udp_rx_info info;
};
static struct delivery got[MAX_RECV];
static int ngot;

static uint32_t ip4(const char *s)
{
	struct in_addr a;
	inet_pton(AF_INET, s, &a);
	return a.s_addr;
}

static struct ring_buf *fake_tx_alloc(void *ctx)
{
	(void)ctx;
	if (tx_budget == 0)
		return NULL;
	if (tx_budget > 0)
		tx_budget--;
	return ring_buf_alloc(tx_pool);
}

static int fake_tx_send(void *ctx, struct ring_buf *frame)
{
	(void)ctx;
	if (tx_send_calls++ == tx_send_fail_at || nwire == MAX_FRAMES) {
		ring_buf_free(frame);
		return -EIO;
	}
	wire[nwire++] = frame;
	return 0;
}

static void on_recv(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
		    const struct stack_udp_rx_info *info)
{
	(void)arg;
	ck_assert_int_lt(ngot, MAX_RECV);
	ck_assert_uint_eq(buf->tot_len, len);
	struct delivery *d = &got[ngot++];
	d->pcb = pcb;
	d->buf = buf;
	d->refcount = buf->refcount;
	d->len = len;
	d->info = *info;
	d->bytes = malloc(len + 1);
	uint32_t off = 0;
	for (struct ring_buf *b = buf; b; b = b->next) {
		ck_assert_uint_le(off + b->len, len);
		memcpy(d->bytes + off, b->data, b->len);
		off += b->len;
	}
	ck_assert_uint_eq(off, len);
	ring_buf_free(buf);
}

static void clear_got(void)
{
	for (int i = 0; i < ngot; i++)
		free(got[i].bytes);
	ngot = 0;
}

static uint32_t pool_free(struct ring_buf_pool *p)
{
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(p, &c);
	return c.free_now;
}

static struct stack_settings settings;

static void setup(void)
{
	tx_pool = ring_buf_pool_create("tx", POOL_BUFS, BUF_SIZE);
	rx_pool = ring_buf_pool_create("rx", POOL_BUFS, BUF_SIZE);
	ck_assert_ptr_nonnull(tx_pool);
	ck_assert_ptr_nonnull(rx_pool);
	stack_settings_default(&settings);
	tx_st = stack_create(&settings);
	rx_st = stack_create(&settings);
	const uint8_t mac_a[6] = { 0x02, 0, 0, 0, 0, 0xa };
	const uint8_t mac_b[6] = { 0x02, 0, 0, 0, 0, 0xb };
	memset(&nif_a, 0, sizeof(nif_a));
	memcpy(nif_a.mac, mac_a, 6);
	nif_a.ip = ip4("198.18.0.1");
	nif_a.netmask = ip4("255.255.255.0");
	nif_a.mtu = 1500;
	nif_a.ifindex = 3;
	nif_a.tx_alloc = fake_tx_alloc;
	nif_a.tx_send = fake_tx_send;
	nif_b = nif_a;
	memcpy(nif_b.mac, mac_b, 6);
	nif_b.ip = ip4("198.18.0.2");
	nif_b.ifindex = 7;
	nwire = 0;
	tx_budget = -1;
	tx_send_fail_at = -1;
	tx_send_calls = 0;
	ngot = 0;
}

/* Recreate the receiver with other settings. */
static void reset_rx(const struct stack_settings *s)
{
	stack_destroy(rx_st);
	rx_st = stack_create(s);
	ck_assert_ptr_nonnull(rx_st);
}

static void teardown(void)
{
	clear_got();
	for (int i = 0; i < nwire; i++)
		ring_buf_free(wire[i]);
	nwire = 0;
	stack_destroy(tx_st);
	stack_destroy(rx_st);
	/* Nothing may be left held by anyone. */
	ck_assert_uint_eq(pool_free(tx_pool), POOL_BUFS);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
	ring_buf_pool_destroy(tx_pool);
	ring_buf_pool_destroy(rx_pool);
}

/* A copy of a frame as the receiver's NIC would write it. */
static struct ring_buf *to_rx(const uint8_t *bytes, uint32_t len)
{
	struct ring_buf *b = ring_buf_alloc(rx_pool);
	ck_assert_ptr_nonnull(b);
	memcpy(b->data, bytes, len);
	b->len = b->tot_len = len;
	b->flags = RING_BUF_F_RX;
	return b;
}

/* Moves wire frame i (or all) to the receiver, in the given order. */
static void deliver_frame(int i)
{
	stack_input(rx_st, &nif_b, to_rx(wire[i]->data, wire[i]->len));
}

static void drain_wire(void)
{
	for (int i = 0; i < nwire; i++)
		ring_buf_free(wire[i]);
	nwire = 0;
}

static void deliver_all(void)
{
	for (int i = 0; i < nwire; i++)
		deliver_frame(i);
	drain_wire();
}

static int send_payload(const uint8_t *p, size_t len, uint16_t sport, uint16_t dport,
			uint32_t dst, const uint8_t *dst_mac, uint32_t src)
{
	struct stack_udp_tx tx = { .src_ip = src, .dst_ip = dst, .src_port = htons(sport),
				   .dst_port = htons(dport), .ttl = 17, .tos = 0x2e };
	memcpy(tx.dst_mac, dst_mac, 6);
	struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
	return stack_udp_send(tx_st, &nif_a, &tx, &iov, 1);
}

static int send_simple(size_t len, uint16_t sport, uint16_t dport)
{
	static uint8_t payload[65536];
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)(i * 7 + 3);
	return send_payload(payload, len, sport, dport, nif_b.ip, nif_b.mac, nif_a.ip);
}

static struct stack_udp_pcb *bound_pcb(uint32_t ip, uint16_t port)
{
	struct stack_udp_pcb *pcb = stack_udp_pcb_new(rx_st);
	ck_assert_ptr_nonnull(pcb);
	stack_udp_pcb_set_recv(pcb, on_recv, NULL);
	ck_assert_int_eq(stack_udp_pcb_bind(pcb, ip, htons(port)), 0);
	return pcb;
}

/* A valid single-frame datagram with a 1-byte payload, as raw bytes. */
static uint32_t valid_frame(uint8_t *out, size_t payload_len)
{
	ck_assert_int_eq(send_simple(payload_len, 1111, 2222), (int)payload_len);
	ck_assert_int_eq(nwire, 1);
	uint32_t len = wire[0]->len;
	memcpy(out, wire[0]->data, len);
	drain_wire();
	return len;
}

static void fix_ip_csum(uint8_t *frame)
{
	uint8_t *ip = frame + 14;
	uint32_t hlen = (ip[0] & 0xf) * 4u, sum = 0;
	ip[10] = ip[11] = 0;
	for (uint32_t i = 0; i < hlen; i += 2)
		sum += (uint32_t)(ip[i] << 8 | ip[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum & 0xffff;
	ip[10] = (uint8_t)(sum >> 8);
	ip[11] = (uint8_t)sum;
}

/* ---------------- round trips ---------------- */

static const uint32_t rt_sizes[] = { 0, 1, 1472, 1473, 8972, 65507 };
static const int rt_frames[] = { 1, 1, 1, 2, 7, 45 };

START_TEST(test_round_trip)
{
	uint32_t size = rt_sizes[_i];
	uint8_t *payload = malloc(size + 1);
	srand(42 + _i);
	for (uint32_t i = 0; i < size; i++)
		payload[i] = (uint8_t)rand();
	bound_pcb(0, 2222);

	ck_assert_int_eq(send_payload(payload, size, 1111, 2222, nif_b.ip, nif_b.mac, nif_a.ip),
			 (int)size);
	ck_assert_int_eq(nwire, rt_frames[_i]);
	uint32_t offset = 0;
	for (int i = 0; i < nwire; i++) {
		const uint8_t *ip = wire[i]->data + 14;
		ck_assert_uint_le(wire[i]->len, 1514);
		uint16_t frag = (uint16_t)(ip[6] << 8 | ip[7]);
		ck_assert_uint_eq((frag & 0x1fff) * 8u, offset);
		ck_assert_uint_eq(!!(frag & 0x2000), i < nwire - 1);
		uint32_t plen = (uint32_t)(ip[2] << 8 | ip[3]) - 20;
		if (i < nwire - 1)
			ck_assert_uint_eq(plen % 8, 0);
		offset += plen;
	}
	ck_assert_uint_eq(offset, size + 8);
	/* Fragments arrive in reverse order: reassembly must not care. */
	for (int i = nwire - 1; i >= 0; i--)
		deliver_frame(i);
	drain_wire();

	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, size);
	ck_assert_int_eq(memcmp(got[0].bytes, payload, size), 0);
	ck_assert_uint_eq(got[0].info.src_ip, nif_a.ip);
	ck_assert_uint_eq(got[0].info.dst_ip, nif_b.ip);
	ck_assert_uint_eq(got[0].info.src_port, htons(1111));
	ck_assert_uint_eq(got[0].info.dst_port, htons(2222));
	ck_assert_uint_eq(got[0].info.ttl, 17);
	ck_assert_uint_eq(got[0].info.tos, 0x2e);
	ck_assert_int_eq(got[0].info.ifindex, 7);
	const struct stack_counters *c = stack_counters(rx_st);
	ck_assert_uint_eq(c->rx_udp_delivered, 1);
	ck_assert_uint_eq(c->rx_reass_ok, rt_frames[_i] > 1 ? 1 : 0);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 0);
	ck_assert_uint_eq(stack_counters(tx_st)->tx_frames, (uint64_t)rt_frames[_i]);
	free(payload);
}
END_TEST

/* IPv4 IDs count per destination: traffic to one peer does not move the
 * IDs another peer sees (a global counter lets a peer count our traffic). */
START_TEST(test_ip_id_per_destination)
{
	uint8_t p[8] = { 0 };
	uint32_t other = htonl(0xc6120063);   /* 198.18.0.99 */
	uint16_t ids_b[8];
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(send_payload(p, sizeof(p), 1111, 2222, nif_b.ip, nif_b.mac, nif_a.ip), 8);
		for (int k = 0; k < 3; k++)
			ck_assert_int_eq(send_payload(p, sizeof(p), 1111, 2222, other, nif_b.mac, nif_a.ip), 8);
	}
	int n = 0;
	for (int i = 0; i < nwire; i++) {
		const uint8_t *ip = wire[i]->data + 14;
		uint32_t dst;
		memcpy(&dst, ip + 16, 4);
		if (dst == nif_b.ip)
			ids_b[n++] = (uint16_t)(ip[4] << 8 | ip[5]);
	}
	ck_assert_int_eq(n, 8);
	for (int i = 1; i < 8; i++)
		ck_assert_uint_eq((uint16_t)(ids_b[i] - ids_b[i - 1]), 1);
	drain_wire();
}
END_TEST

START_TEST(test_iovec_and_checksum_options)
{
	struct stack_settings s = settings;
	s.tx_ip_checksum = false;
	s.tx_udp_checksum = false;
	stack_destroy(tx_st);
	tx_st = stack_create(&s);
	bound_pcb(nif_b.ip, 2222);
	struct stack_udp_tx tx = { .dst_ip = nif_b.ip, .src_port = htons(1), .dst_port = htons(2222) };
	memcpy(tx.dst_mac, nif_b.mac, 6);
	struct iovec iov[3] = { { "abc", 3 }, { NULL, 0 }, { "defgh", 5 } };
	ck_assert_int_eq(stack_udp_send(tx_st, &nif_a, &tx, iov, 3), 8);
	ck_assert_int_eq(nwire, 1);
	uint8_t frame[64];
	memcpy(frame, wire[0]->data, wire[0]->len);
	uint32_t flen = wire[0]->len;
	ck_assert_uint_eq(frame[14 + 10] | frame[14 + 11], 0);   /* IP checksum left to the NIC */
	ck_assert_uint_eq(frame[34 + 6] | frame[34 + 7], 0);     /* no UDP checksum */
	ck_assert_uint_eq(frame[14 + 8], 64);                    /* default TTL */
	drain_wire();
	/* UDP checksum 0 is accepted; the IP checksum is not optional on receive. */
	fix_ip_csum(frame);
	stack_input(rx_st, &nif_b, to_rx(frame, flen));
	ck_assert_int_eq(ngot, 1);
	ck_assert_int_eq(memcmp(got[0].bytes, "abcdefgh", 8), 0);
	ck_assert_uint_eq(got[0].info.src_ip, nif_a.ip);
}
END_TEST

START_TEST(test_tx_errors)
{
	static uint8_t big[65508];
	/* too big, DF */
	ck_assert_int_eq(send_payload(big, 65508, 1, 2, nif_b.ip, nif_b.mac, 0), -EMSGSIZE);
	struct stack_udp_tx tx = { .dst_ip = nif_b.ip, .src_port = htons(1), .dst_port = htons(2),
				   .dont_fragment = true };
	struct iovec iov = { big, 1473 };
	ck_assert_int_eq(stack_udp_send(tx_st, &nif_a, &tx, &iov, 1), -EMSGSIZE);
	iov.iov_len = 1472;
	ck_assert_int_eq(stack_udp_send(tx_st, &nif_a, &tx, &iov, 1), 1472);
	ck_assert_uint_eq(wire[0]->data[14 + 6] & 0x40, 0x40);
	drain_wire();
	ck_assert_uint_eq(stack_counters(tx_st)->tx_drop_too_big, 2);
	/* atomic: 7 buffers needed, 3 available */
	tx_budget = 3;
	ck_assert_int_eq(send_payload(big, 8972, 1, 2, nif_b.ip, nif_b.mac, 0), -ENOBUFS);
	ck_assert_int_eq(nwire, 0);
	ck_assert_uint_eq(pool_free(tx_pool), POOL_BUFS);
	ck_assert_uint_eq(stack_counters(tx_st)->tx_drop_no_buf, 1);
	tx_budget = 0;
	ck_assert_int_eq(send_payload(big, 0, 1, 2, nif_b.ip, nif_b.mac, 0), -ENOBUFS);
	tx_budget = -1;
	/* tx_send failing on the 2nd fragment: the error comes back, nothing leaks */
	tx_send_calls = 0;
	tx_send_fail_at = 1;
	ck_assert_int_eq(send_payload(big, 4000, 1, 2, nif_b.ip, nif_b.mac, 0), -EIO);
	ck_assert_int_eq(nwire, 1);
	drain_wire();
	ck_assert_uint_eq(pool_free(tx_pool), POOL_BUFS);
	ck_assert_uint_eq(stack_counters(tx_st)->tx_drop_send_error, 1);
	ck_assert_int_eq(stack_udp_send(tx_st, &nif_a, &tx, NULL, 1), -EINVAL);
}
END_TEST

/* ---------------- malformed input ---------------- */

#define CNT(field) (stack_counters(rx_st)->field)

START_TEST(test_truncated_every_length)
{
	uint8_t frame[128];
	uint32_t len = valid_frame(frame, 1);
	ck_assert_uint_eq(len, 43);
	bound_pcb(0, 2222);
	for (uint32_t cut = 0; cut < len; cut++)
		stack_input(rx_st, &nif_b, to_rx(frame, cut));
	ck_assert_int_eq(ngot, 0);
	ck_assert_uint_eq(CNT(rx_drop_eth_truncated), 14);      /* 0..13 */
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_header), 20);      /* 14..33 */
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_length), 9);       /* 34..42: total length > frame */
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
	/* Ethernet padding after the datagram is ignored, not a length error. */
	memset(frame + len, 0xee, 17);
	stack_input(rx_st, &nif_b, to_rx(frame, 60));
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, 1);
}
END_TEST

START_TEST(test_bad_ip_headers)
{
	uint8_t good[128] = { 0 }, f[128] = { 0 };
	uint32_t len = valid_frame(good, 20);
	bound_pcb(0, 2222);

	memcpy(f, good, len); f[14] = 0x44; fix_ip_csum(f);          /* IHL 4 */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); f[14] = 0x4f; fix_ip_csum(f);          /* IHL 15 > frame */
	stack_input(rx_st, &nif_b, to_rx(f, 50));
	memcpy(f, good, len); f[14] = 0x65;                          /* version 6 */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_header), 3);

	memcpy(f, good, len); f[16] = 0x01; f[17] = 0x00; fix_ip_csum(f);   /* 256 > frame */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); f[16] = 0; f[17] = 19; fix_ip_csum(f);        /* < header */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_length), 2);

	memcpy(f, good, len); f[14 + 10] ^= 0x01;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_checksum), 1);

	memcpy(f, good, len); f[14 + 12] = 224; fix_ip_csum(f);       /* multicast source */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); memset(f + 14 + 12, 255, 4); fix_ip_csum(f);
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_source), 2);

	memcpy(f, good, len); f[14 + 19] = 99; fix_ip_csum(f);        /* someone else */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_not_for_us), 1);
	memcpy(f, good, len); f[14 + 9] = 6; fix_ip_csum(f);          /* TCP */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_proto), 1);

	/* Options are skipped: IHL 6 with a NOP word, payload moved by 4. */
	memcpy(f, good, 14 + 20);
	f[14] = 0x46;
	memset(f + 34, 1, 4);
	memcpy(f + 38, good + 34, len - 34);
	f[16] = 0; f[17] = (uint8_t)(len - 14 + 4);
	fix_ip_csum(f);
	stack_input(rx_st, &nif_b, to_rx(f, len + 4));
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, 20);
	ck_assert_uint_eq(got[0].bytes[5], (uint8_t)(5 * 7 + 3));
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
}
END_TEST

START_TEST(test_bad_ethernet)
{
	uint8_t good[128] = { 0 }, f[128] = { 0 };
	uint32_t len = valid_frame(good, 4);
	bound_pcb(0, 2222);
	memcpy(f, good, len); f[0] = 0x02; f[5] = 0x77;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); f[0] = 0x01; f[1] = 0; f[2] = 0x5e; f[3] = 0x80;  /* not IPv4 mc */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_eth_not_for_us), 2);
	memcpy(f, good, len); f[12] = 0x81; f[13] = 0x00;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_eth_vlan), 1);
	memcpy(f, good, len); f[12] = 0x08; f[13] = 0x06;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_eth_not_ipv4), 1);
	/* broadcast MAC is fine */
	memcpy(f, good, len); memset(f, 0xff, 6);
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(CNT(rx_frames), 5);
}
END_TEST

START_TEST(test_udp_length_and_checksum)
{
	uint8_t good[128] = { 0 }, f[128] = { 0 };
	uint32_t len = valid_frame(good, 10);   /* UDP length 18 */
	bound_pcb(0, 2222);
	memcpy(f, good, len); f[38] = 0; f[39] = 7;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); f[38] = 0; f[39] = 19;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	memcpy(f, good, len); f[38] = 0xff; f[39] = 0xff;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_udp_bad_length), 3);
	memcpy(f, good, len); f[len - 1] ^= 0x40;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_udp_bad_checksum), 1);
	/* A UDP length shorter than the IP payload trims the datagram. */
	memcpy(f, good, len); f[38] = 0; f[39] = 12; f[40] = f[41] = 0;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, 4);
	/* No pcb on the port. */
	memcpy(f, good, len); f[36] = 0x33; f[40] = f[41] = 0;
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_udp_no_pcb), 1);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
}
END_TEST

/* A veth's kernel sender leaves the UDP checksum partial (pseudo-header
 * sum only); on a netif marked rx_l4_csum_trusted the datagram is
 * delivered intact, elsewhere it is dropped and counted. A bad IP header
 * checksum is dropped either way. */
START_TEST(test_udp_trusted_netif_skips_l4_checksum)
{
	uint8_t good[128] = { 0 }, f[128] = { 0 };
	uint32_t len = valid_frame(good, 10);
	bound_pcb(0, 2222);
	memcpy(f, good, len); f[40] ^= 0x5a; f[41] ^= 0xa5;   /* an unfinished checksum */
	stack_input(rx_st, &nif_b, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_udp_bad_checksum), 1);
	ck_assert_int_eq(ngot, 0);

	struct stack_netif trusted = nif_b;
	trusted.rx_l4_csum_trusted = true;
	stack_input(rx_st, &trusted, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_udp_bad_checksum), 1);
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, 10);
	ck_assert_mem_eq(got[0].bytes, good + 42, 10);

	memcpy(f, good, len); f[24] ^= 0x01;                  /* IP header checksum */
	stack_input(rx_st, &trusted, to_rx(f, len));
	ck_assert_uint_eq(CNT(rx_drop_ip_bad_checksum), 1);
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
}
END_TEST

/* ---------------- reassembly ---------------- */

/* Sends a 2-fragment datagram and returns its frames in f[0], f[1]. */
static void two_fragments(uint8_t f[2][1600], uint32_t flen[2], size_t size)
{
	ck_assert_int_eq(send_simple(size, 1111, 2222), (int)size);
	ck_assert_int_eq(nwire, 2);
	for (int i = 0; i < 2; i++) {
		flen[i] = wire[i]->len;
		memcpy(f[i], wire[i]->data, flen[i]);
	}
	drain_wire();
}

static void set_frag(uint8_t *frame, uint16_t off8, bool more)
{
	uint16_t v = (uint16_t)(off8 | (more ? 0x2000 : 0));
	frame[14 + 6] = (uint8_t)(v >> 8);
	frame[14 + 7] = (uint8_t)v;
	fix_ip_csum(frame);
}

START_TEST(test_reass_overlap_and_duplicate)
{
	uint8_t f[2][1600];
	uint32_t flen[2];
	bound_pcb(0, 2222);

	two_fragments(f, flen, 2000);
	deliver_frame(0);
	stack_input(rx_st, &nif_b, to_rx(f[0], flen[0]));       /* exact duplicate */
	stack_input(rx_st, &nif_b, to_rx(f[1], flen[1]));
	ck_assert_uint_eq(CNT(rx_drop_reass_duplicate), 1);
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].len, 2000);

	/* Second fragment moved 8 bytes back: overlaps the first one. */
	two_fragments(f, flen, 2000);
	uint16_t off8 = (uint16_t)(((f[1][20] << 8 | f[1][21]) & 0x1fff) - 1);
	set_frag(f[1], off8, false);
	stack_input(rx_st, &nif_b, to_rx(f[0], flen[0]));
	stack_input(rx_st, &nif_b, to_rx(f[1], flen[1]));
	ck_assert_uint_eq(CNT(rx_drop_reass_overlap), 1);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 0);
	ck_assert_int_eq(ngot, 1);

	/* Non-final fragment not a multiple of 8. */
	two_fragments(f, flen, 2000);
	f[0][14 + 3] = (uint8_t)(f[0][14 + 3] - 1);
	fix_ip_csum(f[0]);
	stack_input(rx_st, &nif_b, to_rx(f[0], flen[0]));
	/* A second "last" fragment with another end. */
	two_fragments(f, flen, 2000);
	stack_input(rx_st, &nif_b, to_rx(f[1], flen[1]));
	set_frag(f[1], (uint16_t)(((f[1][20] << 8 | f[1][21]) & 0x1fff) + 1), false);
	stack_input(rx_st, &nif_b, to_rx(f[1], flen[1]));
	ck_assert_uint_eq(CNT(rx_drop_reass_bad), 2);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 0);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
}
END_TEST

START_TEST(test_reass_past_65535)
{
	uint8_t f[2][1600];
	uint32_t flen[2];
	bound_pcb(0, 2222);
	two_fragments(f, flen, 2000);
	stack_input(rx_st, &nif_b, to_rx(f[0], flen[0]));
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 1);
	/* 528 payload bytes at 65008 end at 65536 (+20 header > 65535). */
	set_frag(f[1], 65008 / 8, false);
	stack_input(rx_st, &nif_b, to_rx(f[1], flen[1]));
	ck_assert_uint_eq(CNT(rx_drop_reass_too_big), 1);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 0);
	ck_assert_int_eq(ngot, 0);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
}
END_TEST

START_TEST(test_reass_limits_and_timeout)
{
	struct stack_settings s = settings;
	s.reass_max_datagrams = 4;
	s.reass_timeout_ms = 1000;
	reset_rx(&s);
	bound_pcb(0, 2222);
	stack_timer_tick(rx_st, 5000);
	uint8_t f[2][1600];
	uint32_t flen[2];
	for (int i = 0; i < 5; i++) {        /* five first halves, distinct ids */
		two_fragments(f, flen, 2000);
		stack_input(rx_st, &nif_b, to_rx(f[0], flen[0]));
	}
	ck_assert_uint_eq(CNT(rx_drop_reass_overflow), 1);
	uint32_t held = 0;
	ck_assert_uint_eq(stack_reass_pending(rx_st, &held), 4);
	ck_assert_uint_eq(held, 4 * BUF_SIZE);
	stack_timer_tick(rx_st, 5999);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 4);
	stack_timer_tick(rx_st, 6000);
	ck_assert_uint_eq(CNT(rx_drop_reass_timeout), 4);
	ck_assert_uint_eq(stack_reass_pending(rx_st, &held), 0);
	ck_assert_uint_eq(held, 0);
	ck_assert_int_eq(ngot, 0);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);

	/* Per-datagram memory cap: 3 buffers allowed, a 7-frame datagram is not. */
	s.reass_max_datagram_bytes = 3 * BUF_SIZE;
	reset_rx(&s);
	bound_pcb(0, 2222);
	ck_assert_int_eq(send_simple(8972, 1, 2222), 8972);
	deliver_all();
	ck_assert_uint_eq(CNT(rx_drop_reass_overflow), 1);
	ck_assert_int_eq(ngot, 0);
	/* Total cap: 5 buffers across datagrams evicts the oldest. */
	s.reass_max_datagram_bytes = 256 * 1024;
	s.reass_max_total_bytes = 5 * BUF_SIZE;
	reset_rx(&s);
	bound_pcb(0, 2222);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(send_simple(4000, 1, 2222), 4000);   /* 3 frames each */
		deliver_frame(0);
		deliver_frame(1);
		drain_wire();
	}
	ck_assert_uint_eq(CNT(rx_drop_reass_overflow), 1);
	ck_assert_uint_eq(stack_reass_pending(rx_st, &held), 2);
	ck_assert_uint_le(held, 5 * BUF_SIZE);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS - 4);
}
END_TEST

/* ---------------- demux ---------------- */

START_TEST(test_demux_precedence)
{
	struct stack_udp_pcb *any = bound_pcb(0, 2222);
	struct stack_udp_pcb *addr = bound_pcb(nif_b.ip, 2222);
	struct stack_udp_pcb *conn = bound_pcb(nif_b.ip, 2222);
	ck_assert_int_eq(stack_udp_pcb_connect(conn, nif_a.ip, htons(1111), 0), 0);
	ck_assert_int_eq(stack_udp_pcb_bind(any, 0, htons(5)), -EINVAL);

	send_simple(3, 1111, 2222); deliver_all();
	send_simple(3, 1112, 2222); deliver_all();
	ck_assert_int_eq(ngot, 2);
	ck_assert_ptr_eq(got[0].pcb, conn);
	ck_assert_ptr_eq(got[1].pcb, addr);
	clear_got();

	stack_udp_pcb_disconnect(conn);
	stack_udp_pcb_free(addr);
	/* conn is now a plain 3-tuple pcb again */
	send_simple(3, 1111, 2222); deliver_all();
	ck_assert_ptr_eq(got[0].pcb, conn);
	stack_udp_pcb_free(conn);
	send_simple(3, 1111, 2222); deliver_all();
	ck_assert_ptr_eq(got[1].pcb, any);
	/* A connected pcb ignores other peers. */
	ck_assert_int_eq(stack_udp_pcb_connect(any, nif_a.ip, htons(9), 0), 0);
	send_simple(3, 1111, 2222); deliver_all();
	ck_assert_int_eq(ngot, 2);
	ck_assert_uint_eq(CNT(rx_drop_udp_no_pcb), 1);
	struct stack_udp_tx tx = { 0 };
	stack_udp_tx_from_pcb(any, &tx);
	ck_assert_uint_eq(tx.dst_ip, nif_a.ip);
	ck_assert_uint_eq(tx.dst_port, htons(9));
	ck_assert_uint_eq(tx.src_port, htons(2222));
}
END_TEST

START_TEST(test_demux_many_pcbs)
{
	/* 500 bound ports: each datagram lands on its own pcb. */
	static struct stack_udp_pcb *pcbs[500];
	for (int i = 0; i < 500; i++)
		pcbs[i] = bound_pcb(i % 2 ? nif_b.ip : 0, (uint16_t)(10000 + i));
	for (int i = 0; i < 500; i += 37) {
		send_simple(2, 1, (uint16_t)(10000 + i));
		deliver_all();
		ck_assert_ptr_eq(got[ngot - 1].pcb, pcbs[i]);
		clear_got();
	}
}
END_TEST

/* SO_REUSEPORT: the flows to one address spread over its group, each
 * flow (source port) always to the same pcb; without it one pcb gets all. */
START_TEST(test_demux_reuseport)
{
	struct stack_udp_pcb *group[4];
	for (int i = 0; i < 4; i++) {
		group[i] = stack_udp_pcb_new(rx_st);
		ck_assert_ptr_nonnull(group[i]);
		stack_udp_pcb_set_recv(group[i], on_recv, NULL);
		stack_udp_pcb_set_reuseport(group[i], true);
		ck_assert_int_eq(stack_udp_pcb_bind(group[i], nif_b.ip, htons(2222)), 0);
	}
	int flows_of[4] = { 0 };
	for (uint16_t sport = 3000; sport < 3064; sport++) {
		struct stack_udp_pcb *first = NULL;
		for (int round = 0; round < 2; round++) {
			send_simple(2, sport, 2222);
			deliver_all();
			ck_assert_int_eq(ngot, 1);
			if (!first)
				first = got[0].pcb;
			ck_assert_ptr_eq(got[0].pcb, first);   /* the flow keeps its socket */
			clear_got();
		}
		for (int i = 0; i < 4; i++)
			flows_of[i] += first == group[i];
	}
	/* 64 flows over 4 sockets: each gets some (all on one: no spread). */
	for (int i = 0; i < 4; i++)
		ck_assert_int_gt(flows_of[i], 4);
	/* A member that leaves: its flows go to the others. */
	stack_udp_pcb_free(group[1]);
	for (uint16_t sport = 3000; sport < 3064; sport++) {
		send_simple(2, sport, 2222);
		deliver_all();
		ck_assert_ptr_ne(got[0].pcb, group[1]);
		clear_got();
	}
	for (int i = 0; i < 4; i++)
		if (i != 1)
			stack_udp_pcb_set_reuseport(group[i], false);
	/* Without it (SO_REUSEADDR): one pcb of the address gets them all. */
	struct stack_udp_pcb *only = NULL;
	for (uint16_t sport = 3000; sport < 3032; sport++) {
		send_simple(2, sport, 2222);
		deliver_all();
		if (!only)
			only = got[0].pcb;
		ck_assert_ptr_eq(got[0].pcb, only);
		clear_got();
	}
}
END_TEST

static void send_to_group(size_t size, uint32_t group, uint32_t src, uint16_t dport)
{
	static uint8_t payload[9000];
	uint8_t mac[6];
	stack_eth_multicast_mac(group, mac);
	for (size_t i = 0; i < size; i++)
		payload[i] = (uint8_t)(i ^ 0x5a);
	ck_assert_int_eq(send_payload(payload, size, 4444, dport, group, mac, src), (int)size);
	deliver_all();
}

START_TEST(test_multicast_two_pcbs)
{
	uint32_t group = ip4("239.1.2.3");
	uint8_t mac[6];
	stack_eth_multicast_mac(group, mac);
	ck_assert_uint_eq(mac[0], 0x01);
	ck_assert_uint_eq(mac[2], 0x5e);
	ck_assert_uint_eq(mac[3], 0x01);
	ck_assert_uint_eq(mac[5], 0x03);
	struct stack_udp_pcb *p1 = bound_pcb(0, 5000);
	struct stack_udp_pcb *p2 = bound_pcb(group, 5000);
	struct stack_udp_pcb *not_joined = bound_pcb(0, 5000);
	struct stack_udp_pcb *other_port = bound_pcb(0, 5001);
	ck_assert_int_eq(stack_udp_pcb_join(p1, group, 0), 0);
	ck_assert_int_eq(stack_udp_pcb_join(p2, group, 0), 0);
	ck_assert_int_eq(stack_udp_pcb_join(other_port, group, 0), 0);
	(void)not_joined;

	for (size_t size = 100; size <= 3000; size += 2900) {   /* single frame, then a chain */
		send_to_group(size, group, nif_a.ip, 5000);
		ck_assert_int_eq(ngot, 2);
		ck_assert_ptr_eq(got[0].buf, got[1].buf);            /* a reference, not a copy */
		ck_assert_uint_eq(got[0].refcount, 2);
		ck_assert_ptr_ne(got[0].pcb, got[1].pcb);
		ck_assert(got[0].pcb == p1 || got[0].pcb == p2);
		ck_assert(got[1].pcb == p1 || got[1].pcb == p2);
		for (int i = 0; i < 2; i++) {
			ck_assert_uint_eq(got[i].len, size);
			ck_assert_uint_eq(got[i].bytes[size - 1], (uint8_t)((size - 1) ^ 0x5a));
			ck_assert_uint_eq(got[i].info.dst_ip, group);
		}
		clear_got();
		ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
	}
	ck_assert_int_eq(stack_udp_pcb_leave(p1, group, 0), 0);
	send_to_group(10, group, nif_a.ip, 5000);
	ck_assert_int_eq(ngot, 1);
	ck_assert_ptr_eq(got[0].pcb, p2);
	/* a group nobody joined */
	send_to_group(10, ip4("239.9.9.9"), nif_a.ip, 5000);
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(CNT(rx_drop_udp_no_pcb), 1);
	/* broadcast goes to every pcb on the port, no membership needed */
	clear_got();
	static const uint8_t bcast_mac[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	ck_assert_int_eq(send_payload((const uint8_t *)"x", 1, 1, 5001, ip4("198.18.0.255"),
				      bcast_mac, nif_a.ip), 1);
	deliver_all();
	ck_assert_int_eq(ngot, 1);
	ck_assert_ptr_eq(got[0].pcb, other_port);
}
END_TEST

START_TEST(test_multicast_source_filter)
{
	uint32_t group = ip4("232.1.1.1");
	uint32_t src_a = nif_a.ip, src_c = ip4("198.18.0.3");
	struct stack_udp_pcb *p = bound_pcb(0, 6000);
	ck_assert_int_eq(stack_udp_pcb_join(p, ip4("10.0.0.1"), 0), -EINVAL);
	ck_assert_int_eq(stack_udp_pcb_join(p, group, src_a), 0);
	ck_assert_int_eq(stack_udp_pcb_join(p, group, src_a), -EADDRINUSE);
	ck_assert_int_eq(stack_udp_pcb_join(p, group, 0), -EINVAL);
	ck_assert(stack_udp_pcb_is_member(p, group, src_a));
	ck_assert(!stack_udp_pcb_is_member(p, group, src_c));

	send_to_group(8, group, src_a, 6000);
	send_to_group(8, group, src_c, 6000);
	ck_assert_int_eq(ngot, 1);
	ck_assert_uint_eq(got[0].info.src_ip, src_a);
	ck_assert_uint_eq(CNT(rx_drop_udp_no_pcb), 1);

	ck_assert_int_eq(stack_udp_pcb_join(p, group, src_c), 0);
	send_to_group(8, group, src_c, 6000);
	ck_assert_int_eq(ngot, 2);
	ck_assert_int_eq(stack_udp_pcb_leave(p, group, src_a), 0);
	ck_assert_int_eq(stack_udp_pcb_leave(p, group, src_a), -EADDRNOTAVAIL);
	ck_assert_int_eq(stack_udp_pcb_leave(p, group, src_c), 0);   /* last source: group gone */
	ck_assert(!stack_udp_pcb_is_member(p, group, src_c));
	ck_assert_int_eq(stack_udp_pcb_leave(p, group, 0), -EADDRNOTAVAIL);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(stack_udp_pcb_join(p, htonl(0xe8000000u + (uint32_t)i), 0), 0);
	ck_assert_int_eq(stack_udp_pcb_join(p, htonl(0xe8000000u + 64), 0), -ENOBUFS);
}
END_TEST

/* ---------------- fuzz ---------------- */

START_TEST(test_fuzz_mutations)
{
	struct stack_settings s = settings;
	s.reass_max_datagrams = 8;
	reset_rx(&s);
	bound_pcb(0, 2222);
	bound_pcb(nif_b.ip, 2223);
	struct stack_udp_pcb *mc = bound_pcb(0, 2222);
	stack_udp_pcb_join(mc, ip4("239.0.0.1"), 0);

	uint8_t seeds[3][1600];
	uint32_t seed_len[3];
	seed_len[0] = valid_frame(seeds[0], 30);
	uint8_t f2[2][1600];
	uint32_t fl2[2];
	two_fragments(f2, fl2, 1600);
	memcpy(seeds[1], f2[0], fl2[0]); seed_len[1] = fl2[0];
	memcpy(seeds[2], f2[1], fl2[1]); seed_len[2] = fl2[1];

	srand(20240601);
	uint8_t f[1600];
	for (int iter = 0; iter < 5000; iter++) {
		int k = rand() % 3;
		uint32_t len = seed_len[k];
		memcpy(f, seeds[k], len);
		int flips = 1 + rand() % 4;
		for (int j = 0; j < flips; j++) {
			/* Mostly the headers, where the decisions are made. */
			uint32_t pos = (uint32_t)(rand() % 4 ? rand() % 42 : rand() % (int)len);
			f[pos] = (uint8_t)rand();
		}
		if (rand() % 2)
			fix_ip_csum(f);
		if (rand() % 8 == 0)
			len = (uint32_t)rand() % (len + 1);
		stack_input(rx_st, &nif_b, to_rx(f, len));
		if (iter % 500 == 0)
			stack_timer_tick(rx_st, (uint64_t)iter * 100);
		clear_got();
	}
	stack_timer_tick(rx_st, 10ull * 1000 * 1000);
	ck_assert_uint_eq(stack_reass_pending(rx_st, NULL), 0);
	ck_assert_uint_eq(pool_free(rx_pool), POOL_BUFS);
	ck_assert_uint_eq(CNT(rx_frames), 5000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stack_udp");
	TCase *tc = tcase_create("stack");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_round_trip, 0, 6);
	tcase_add_test(tc, test_iovec_and_checksum_options);
	tcase_add_test(tc, test_ip_id_per_destination);
	tcase_add_test(tc, test_tx_errors);
	tcase_add_test(tc, test_truncated_every_length);
	tcase_add_test(tc, test_bad_ip_headers);
	tcase_add_test(tc, test_bad_ethernet);
	tcase_add_test(tc, test_udp_length_and_checksum);
	tcase_add_test(tc, test_udp_trusted_netif_skips_l4_checksum);
	tcase_add_test(tc, test_reass_overlap_and_duplicate);
	tcase_add_test(tc, test_reass_past_65535);
	tcase_add_test(tc, test_reass_limits_and_timeout);
	tcase_add_test(tc, test_demux_precedence);
	tcase_add_test(tc, test_demux_many_pcbs);
	tcase_add_test(tc, test_demux_reuseport);
	tcase_add_test(tc, test_multicast_two_pcbs);
	tcase_add_test(tc, test_multicast_source_filter);
	tcase_add_test(tc, test_fuzz_mutations);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
