/* Harness 3: IPv4 reassembly. The input is cut into fragments that go
 * through stack_input (Ethernet, IPv4 checks, then the reassembly table of
 * stack_ip4_reass.c), and completed datagrams reach UDP: one pcb bound to
 * *:5353 and two more sharing 224.1.2.3:5353, so a multicast datagram made
 * of a chain is shared by several receivers.
 *
 * Input: cfg(1), then records
 *   flags(1) id(1) offset(2, big endian; 13 bits, in units of 8) len(2) payload(len)
 * cfg: bits 0-2 the datagrams in progress at once (1..8), bits 3-4 the
 *   buffer memory per datagram (4, 16, 64 or 256 KiB), bits 5-6 in total
 *   (8, 32, 128 KiB or 4 MiB).
 * flags:
 *   0x01 MF (more fragments)
 *   0x06 after the fragment move the clock: 0, +10 ms, +5 s, +40 s (past the
 *        30 s reassembly timeout)
 *   0x08 the netif trusts L4 checksums
 *   0x30 destination: ours, 224.1.2.3, the subnet broadcast, another host
 *   0x40 source 10.0.0.3 instead of 10.0.0.2
 *   0x80 raw: the payload is a whole IPv4 packet (its checksum fixed), for
 *        odd headers (options, lengths); id and offset are unused
 * Fragments carry UDP (protocol 17); the first one's payload normally
 * starts with a UDP header, which the seeds provide. */
#include "fuzz_net.h"

static struct ring_buf_pool *pool;
static uint64_t delivered;

static struct ring_buf *nif_alloc(void *ctx)
{
	(void)ctx;
	return ring_buf_alloc(pool);
}

static int nif_send(void *ctx, struct ring_buf *f)
{
	(void)ctx;
	ring_buf_free(f);
	return 0;
}

static void udp_recv(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
		     const struct stack_udp_rx_info *info)
{
	(void)arg;
	(void)pcb;
	(void)info;
	uint32_t seen = 0, x = 0;
	for (struct ring_buf *b = buf; b; b = b->next) {
		if (b->data < b->head || b->data + b->len > b->head + b->size) {
			fprintf(stderr, "fuzz: delivered buffer outside its memory\n");
			abort();
		}
		for (uint32_t i = 0; i < b->len; i++)
			x += b->data[i];
		seen += b->len;
	}
	if (seen != len || buf->tot_len != len) {
		fprintf(stderr, "fuzz: udp chain has %u bytes, len %u, tot_len %u\n", seen, len,
			buf->tot_len);
		abort();
	}
	delivered += x;
	ring_buf_free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	pool = ring_buf_pool_create("fuzz", FZ_POOL_BUFS, FZ_BUF_SIZE);
	return pool ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t per_dgram[4] = { 4096, 16384, 65536, 262144 };
	static const uint32_t total[4] = { 8192, 32768, 131072, 4u << 20 };
	uint8_t f[FZ_BUF_SIZE];

	if (size < 1)
		return 0;
	uint8_t cfg = data[0];
	data++;
	size--;

	struct stack_settings ss;
	stack_settings_default(&ss);
	ss.udp_hash_buckets = 16;
	ss.reass_max_datagrams = 1u + (cfg & 7u);
	ss.reass_max_datagram_bytes = per_dgram[(cfg >> 3) & 3];
	ss.reass_max_total_bytes = total[(cfg >> 5) & 3];
	struct stack *st = stack_create(&ss);
	if (!st)
		abort();
	struct stack_netif nif[2];
	memset(nif, 0, sizeof(nif));
	for (int i = 0; i < 2; i++) {
		memcpy(nif[i].mac, fz_our_mac, 6);
		nif[i].ip = htonl(FZ_OUR_IP);
		nif[i].netmask = htonl(0xffffff00u);
		nif[i].mtu = 1500;
		nif[i].ifindex = 1 + i;
		nif[i].rx_l4_csum_trusted = i == 1;
		nif[i].tx_alloc = nif_alloc;
		nif[i].tx_send = nif_send;
	}
	uint64_t now = 1000;
	stack_timer_tick(st, now);
	struct stack_udp_pcb *u[3];
	for (int i = 0; i < 3; i++) {
		u[i] = stack_udp_pcb_new(st);
		stack_udp_pcb_set_recv(u[i], udp_recv, NULL);
		stack_udp_pcb_bind(u[i], 0, htons(5353));
		if (i)
			stack_udp_pcb_join(u[i], htonl(0xe0010203u), 0);
	}

	while (size >= 6) {
		uint8_t flags = data[0], id = data[1];
		uint16_t off = (uint16_t)(data[2] << 8 | data[3]);
		uint32_t len = (uint32_t)(data[4] << 8 | data[5]);
		data += 6;
		size -= 6;
		if (len > size)
			len = (uint32_t)size;
		uint32_t room = (flags & 0x80) ? sizeof(f) - 14 : sizeof(f) - 14 - 20;
		if (len > room)
			len = room;
		uint32_t flen;
		if (flags & 0x80) {
			fz_eth_ip(f, 17, 0, 0, 0);
			memcpy(f + 14, data, len);
			fz_fix_ip_csum(f + 14, len);
			flen = 14 + len;
		} else {
			uint16_t frag = (uint16_t)((off & 0x1fff) | ((flags & 0x01) ? 0x2000 : 0));
			uint8_t *ip = fz_eth_ip(f, 17, (uint16_t)(20 + len), id, frag);
			static const uint32_t dsts[4] = { FZ_OUR_IP, 0xe0010203u, 0x0a0000ffu, 0x0a000063u };
			fz_put32(ip + 16, dsts[(flags >> 4) & 3]);
			if (flags & 0x40)
				fz_put32(ip + 12, 0x0a000003u);
			memcpy(ip + 20, data, len);
			fz_fix_ip_csum(ip, 20 + len);
			flen = 14 + 20 + len;
		}
		data += len;
		size -= len;
		struct ring_buf *b = fz_frame(pool, f, flen);
		if (b)
			stack_input(st, &nif[(flags >> 3) & 1], b);
		static const uint32_t steps[4] = { 0, 10, 5000, 40000 };
		if (flags & 0x06) {
			now += steps[(flags >> 1) & 3];
			stack_timer_tick(st, now);
		}
		uint32_t held;
		unsigned pending = stack_reass_pending(st, &held);
		if (pending > ss.reass_max_datagrams || held > ss.reass_max_total_bytes) {
			fprintf(stderr, "fuzz: reassembly holds %u datagrams / %u bytes, caps %u / %u\n",
				pending, held, ss.reass_max_datagrams, ss.reass_max_total_bytes);
			abort();
		}
	}
	stack_destroy(st);
	fz_check_pool(pool, "after stack_destroy");
	return 0;
}
