/* The verbs backend (ring_verbs.c) on softverbs' in-memory devices: no
 * privileges, no NIC. WQE/CQE accounting, exact bytes both ways, flow rules
 * (specs, priorities, teardown), sleeping and waking, moderation, keep-QP-
 * full, error paths with their one warning, fork. Each test runs in its own
 * process (Check's fork mode), so softverbs starts empty each time. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/wait.h>

#include "ring/ring.h"
#include "ring/ring_flow.h"
#include "ring/ring_mgr.h"
#include "ring/ring_verbs.h"
#include "softverbs.h"

/* The test device serves "lo": every system has it, unprivileged. */
#define TEST_IF "lo"
static int test_ifindex;
static const uint8_t peer_mac[6] = { 0x02, 0, 0, 0, 0, 0x02 };

static void setup(void)
{
	static const uint8_t mac[6] = { 0x02, 0, 0, 0, 0, 0x01 };
	test_ifindex = (int)if_nametoindex(TEST_IF);
	ck_assert_int_gt(test_ifindex, 0);
	/* The host's netdevs are no business of these tests. */
	setenv("SOFTVERBS_NETDEVS", "none0", 1);
	softverbs_test_count_violations(true);
	ck_assert_int_eq(softverbs_test_add_device(TEST_IF, test_ifindex, mac, 1500, false), 0);
}

static struct ring_config small_cfg(void)
{
	struct ring_config cfg = {
		.backend = RING_BACKEND_VERBS, .rx_bufs = 256, .rx_wre = 128, .tx_bufs = 128, .tx_wre = 128,
		.rx_wre_batching = 16, .tx_wre_batching = 8,
	};
	cfg.verbs.tx_max_inline = 64;
	cfg.verbs.fallback = RING_BACKEND_LOOP;
	return cfg;
}

static struct softverbs_stats stats(void)
{
	struct softverbs_stats s;
	softverbs_test_stats(&s);
	return s;
}

/* ---- capture of the logger's output (fd 2) ---- */

static char captured[1 << 16];
static int capture_fd = -1, saved_stderr = -1;

static void capture_begin(void)
{
	char path[] = "/tmp/test_ring_verbs.XXXXXX";
	capture_fd = mkstemp(path);
	ck_assert_int_ge(capture_fd, 0);
	unlink(path);
	saved_stderr = dup(2);
	dup2(capture_fd, 2);
}

static const char *capture_end(void)
{
	dup2(saved_stderr, 2);
	close(saved_stderr);
	lseek(capture_fd, 0, SEEK_SET);
	ssize_t n = read(capture_fd, captured, sizeof(captured) - 1);
	captured[n > 0 ? n : 0] = '\0';
	close(capture_fd);
	return captured;
}

static int count_of(const char *haystack, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(haystack, needle); p; p = strstr(p + strlen(needle), needle))
		n++;
	return n;
}

/* ---- frames ---- */

/* An Ethernet/IPv4/UDP frame to the ring; payload bytes are seq-derived. */
static size_t udp_frame(uint8_t *f, const struct ring *ring, const char *src, uint16_t sport, const char *dst,
			uint16_t dport, uint32_t payload, uint8_t seq)
{
	memcpy(f, ring->mac, 6);
	memcpy(f + 6, peer_mac, 6);
	f[12] = 0x08;
	f[13] = 0x00;
	uint8_t *ip = f + 14;
	memset(ip, 0, 20);
	ip[0] = 0x45;
	uint16_t tot = (uint16_t)(20 + 8 + payload);
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[8] = 64;
	ip[9] = IPPROTO_UDP;
	inet_pton(AF_INET, src, ip + 12);
	inet_pton(AF_INET, dst, ip + 16);
	uint8_t *udp = ip + 20;
	uint16_t sp = htons(sport), dp = htons(dport), ul = htons((uint16_t)(8 + payload));
	memcpy(udp, &sp, 2);
	memcpy(udp + 2, &dp, 2);
	memcpy(udp + 4, &ul, 2);
	udp[6] = udp[7] = 0;
	for (uint32_t i = 0; i < payload; i++)
		udp[8 + i] = (uint8_t)(seq + i * 7);
	return 14 + tot;
}

static uint32_t ip_of(const char *text)
{
	uint32_t a;
	inet_pton(AF_INET, text, &a);
	return a;
}

static struct ring_flow udp3(const char *ip, uint16_t port)
{
	return (struct ring_flow){ .proto = IPPROTO_UDP, .local_ip = ip ? ip_of(ip) : 0, .local_port = htons(port),
				   .owner_fd = -1 };
}

static struct ring_flow udp5(const char *ip, uint16_t port, const char *rip, uint16_t rport)
{
	struct ring_flow f = udp3(ip, port);
	f.remote_ip = ip_of(rip);
	f.remote_port = htons(rport);
	return f;
}

/* Everything waiting on the ring, freed; the count. */
static int drain(struct ring *ring)
{
	struct ring_buf *bufs[64];
	int total = 0, n;
	while ((n = ring_rx_burst(ring, bufs, 64)) > 0) {
		for (int i = 0; i < n; i++)
			ring_buf_free(bufs[i]);
		total += n;
	}
	return total;
}

static uint32_t qp_now(uint32_t *sq, uint32_t *rq)
{
	uint32_t qpn = softverbs_test_last_qp_num(), inl;
	ck_assert_int_eq(softverbs_test_qp_state(qpn, sq, rq, &inl), 0);
	return inl;
}

/* ---- opening ---- */

START_TEST(open_posts_the_rq_to_depth_with_spares)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(ring);
	ck_assert_str_eq(ring->ops->name, "verbs");
	ck_assert_int_ge(ring->wait_fd, 0);
	uint32_t sq, rq;
	uint32_t inl = qp_now(&sq, &rq);
	/* 256 frames: 128 posted, 128 spare for what sockets hold. */
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(ring_rx_pool(ring), &c);
	ck_assert_uint_eq(c.size, 256);
	ck_assert_uint_eq(rq, 128);
	ck_assert_uint_eq(sq, 0);
	ck_assert_uint_eq(inl, 64);
	ck_assert_uint_eq(stats().recv_enomem, 0);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

/* ---- receive ---- */

START_TEST(received_frames_are_exact_and_only_the_steered_ones)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(ring);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[2048], g[2048];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 1000, 3);
	size_t other = udp_frame(g, ring, "10.0.0.2", 7000, "10.0.0.1", 5001, 1000, 4);
	softverbs_test_inject(test_ifindex, g, other);
	softverbs_test_inject(test_ifindex, f, len);
	struct ring_buf *bufs[8];
	int n = ring_rx_burst(ring, bufs, 8);
	ck_assert_int_eq(n, 1);
	ck_assert_uint_eq(bufs[0]->len, len);
	ck_assert_uint_eq(bufs[0]->tot_len, len);
	ck_assert_uint_eq(bufs[0]->flags, RING_BUF_F_RX);
	ck_assert_int_eq(memcmp(bufs[0]->data, f, len), 0);
	ck_assert_uint_ne(bufs[0]->rx_time_ns, 0);
	/* IP headers 4-byte aligned behind the Ethernet header. */
	ck_assert_uint_eq(((uintptr_t)bufs[0]->data + 14) % 4, 0);
	struct ring_counters rc;
	ring_read_counters(ring, &rc);
	ck_assert_uint_eq(rc.rx_packets, 1);
	ck_assert_uint_eq(rc.rx_bytes, len);
	uint32_t sq, rq;
	qp_now(&sq, &rq);
	ck_assert_uint_eq(rq, 127);
	ring_buf_free(bufs[0]);
	/* An idle poll posts the freed frame back at once. */
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 8), 0);
	qp_now(&sq, &rq);
	ck_assert_uint_eq(rq, 128);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(refills_go_in_batches_of_rx_wre_batching)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 64, 0);
	for (int i = 0; i < 40; i++)
		softverbs_test_inject(test_ifindex, f, len);
	softverbs_test_reset_stats();
	struct ring_buf *bufs[64];
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 10), 10);
	for (int i = 0; i < 10; i++)
		ring_buf_free(bufs[i]);
	/* 10 freed: fewer than a batch (16), nothing posted while busy. */
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 10), 10);
	ck_assert_uint_eq(stats().post_recv_calls, 0);
	for (int i = 0; i < 10; i++)
		ring_buf_free(bufs[i]);
	/* 20 freed now: one chained post. */
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 5), 5);
	ck_assert_uint_eq(stats().post_recv_calls, 1);
	ck_assert_uint_eq(stats().recv_wrs, 20);
	for (int i = 0; i < 5; i++)
		ring_buf_free(bufs[i]);
	ck_assert_int_eq(drain(ring), 15);
	uint32_t sq, rq;
	qp_now(&sq, &rq);
	ck_assert_uint_eq(rq, 128);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(keep_qp_full_drops_instead_of_running_dry)
{
	struct ring_config cfg = small_cfg();
	cfg.rx_bufs = 64;
	cfg.rx_wre = 32;
	cfg.rx_wre_batching = 4;
	cfg.verbs.keep_qp_full = true;
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 64, 0);
	struct ring_buf *held[128];
	int nheld = 0;
	/* The application holds everything it receives; bursts of the
	 * reserve's size. */
	for (int round = 0; round < 16; round++) {
		for (int i = 0; i < 8; i++)
			softverbs_test_inject(test_ifindex, f, len);
		int n;
		while ((n = ring_rx_burst(ring, held + nheld, 8)) > 0)
			nheld += n;
		uint32_t sq, rq;
		qp_now(&sq, &rq);
		/* The reserve: two batches (8) of the 32 WQEs. */
		ck_assert_msg(rq >= 8, "round %d: RQ down to %u", round, rq);
	}
	struct ring_counters rc;
	ring_read_counters(ring, &rc);
	ck_assert_uint_gt(rc.rx_dropped, 0);
	/* Each refused packet counts as the RX pool found empty. */
	struct ring_buf_pool_counters pc;
	ring_buf_pool_read_counters(ring->rx_pool, &pc);
	ck_assert_uint_eq(pc.empty, rc.rx_dropped);
	ck_assert_uint_eq(rc.rx_fill_empty, 0);
	/* Sockets may hold all but the reserve, no more. */
	ck_assert_int_le(nheld, 64 - 8);
	ck_assert_int_ge(nheld, 64 - 8 - 8);
	ck_assert_uint_eq(stats().rx_no_wqe, 0);
	/* Once the application lets go, nothing is dropped any more. */
	for (int i = 0; i < nheld; i++)
		ring_buf_free(held[i]);
	nheld = 0;
	ck_assert_int_eq(drain(ring), 0);
	uint64_t dropped = rc.rx_dropped;
	for (int i = 0; i < 16; i++)
		softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(ring), 16);
	ring_read_counters(ring, &rc);
	ck_assert_uint_eq(rc.rx_dropped, dropped);
	for (int i = 0; i < nheld; i++)
		ring_buf_free(held[i]);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(without_keep_qp_full_the_rq_runs_dry_and_the_nic_drops)
{
	struct ring_config cfg = small_cfg();
	cfg.rx_bufs = 64;
	cfg.rx_wre = 32;
	cfg.rx_wre_batching = 4;
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 64, 0);
	struct ring_buf *held[128];
	int nheld = 0, n;
	/* Bursts the RQ can take: the spares keep it posted until the
	 * application holds every frame; then the NIC drops. */
	for (int round = 0; round < 25; round++) {
		for (int i = 0; i < 4; i++)
			softverbs_test_inject(test_ifindex, f, len);
		while ((n = ring_rx_burst(ring, held + nheld, 8)) > 0)
			nheld += n;
	}
	ck_assert_int_eq(nheld, 64);
	ck_assert_uint_eq(stats().rx_no_wqe, 36);
	struct ring_counters rc;
	ring_read_counters(ring, &rc);
	ck_assert_uint_eq(rc.rx_dropped, 0);
	/* The RQ ran dry once (the NIC's drops are not ours to count). */
	ck_assert_uint_eq(rc.rx_fill_empty, 1);
	struct ring_buf_pool_counters pc;
	ring_buf_pool_read_counters(ring->rx_pool, &pc);
	ck_assert_uint_eq(pc.empty, 1);
	for (int i = 0; i < nheld; i++)
		ring_buf_free(held[i]);
	ring_close(ring);
}
END_TEST

/* ---- transmit ---- */

static int send_frames(struct ring *ring, int count, uint32_t size, int first_seq)
{
	int sent = 0;
	for (int i = 0; i < count; i++) {
		struct ring_buf *b = ring_tx_alloc(ring);
		if (!b) {
			ring_tx_flush(ring);
			b = ring_tx_alloc(ring);
		}
		if (!b)
			break;
		b->len = udp_frame(b->data, ring, "10.0.0.1", 5000, "10.0.0.2", 7000, size, (uint8_t)(first_seq + i));
		if (ring_tx_send(ring, b) == 0)
			sent++;
	}
	return sent;
}

START_TEST(sends_signal_every_n_and_every_frame_comes_back)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	softverbs_test_reset_stats();
	ck_assert_int_eq(send_frames(ring, 100, 200, 0), 100);
	ring_tx_flush(ring);
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.send_wrs, 100);
	/* 128 frames, batch 8: every 8th WR asks for a completion. */
	ck_assert_uint_eq(s.send_signaled, 12);
	ck_assert_uint_eq(s.send_inline, 0);
	ck_assert_uint_eq(s.send_enomem, 0);
	/* Doorbells: one per full batch of 8 (12), and the flush's one. */
	ck_assert_uint_eq(s.post_send_calls, 13);
	struct ring_counters rc;
	ring_read_counters(ring, &rc);
	ck_assert_uint_eq(rc.tx_packets, 100);
	ck_assert_uint_eq(rc.tx_completions, 96);
	uint32_t sq, rq;
	qp_now(&sq, &rq);
	ck_assert_uint_eq(sq, 4);   /* the unsignalled tail, returned by a later completion */
	/* Every frame on the wire, exact, in order. */
	uint8_t out[2048], want[2048];
	for (int i = 0; i < 100; i++) {
		int len = softverbs_test_tx_pop(test_ifindex, out, sizeof(out));
		size_t wl = udp_frame(want, ring, "10.0.0.1", 5000, "10.0.0.2", 7000, 200, (uint8_t)i);
		ck_assert_int_eq(len, (int)wl);
		ck_assert_int_eq(memcmp(out, want, wl), 0);
	}
	ck_assert_uint_eq(softverbs_test_tx_count(test_ifindex), 0);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(a_long_burst_never_overflows_the_sq)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	uint8_t out[2048];
	int sent = 0;
	for (int round = 0; round < 10; round++) {
		sent += send_frames(ring, 300, 500, round);
		while (softverbs_test_tx_pop(test_ifindex, out, sizeof(out)) > 0)
			;
	}
	ck_assert_int_eq(sent, 3000);
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.send_enomem, 0);
	ck_assert_uint_eq(s.send_wrs, 3000);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(small_frames_go_inline_and_are_free_at_once)
{
	struct ring_config cfg = small_cfg();
	cfg.tx_bufs = 64;
	cfg.tx_wre = 64;
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	softverbs_test_reset_stats();
	/* 20 bytes of payload: a 62-byte frame, within the 64 inline. */
	ck_assert_int_eq(send_frames(ring, 500, 20, 0), 500);
	ring_tx_flush(ring);
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.send_inline, 500);
	ck_assert_uint_eq(s.send_enomem, 0);
	ck_assert_uint_eq(softverbs_test_tx_count(test_ifindex), 500);
	/* A 200-byte frame is not inline. */
	ck_assert_int_eq(send_frames(ring, 1, 200, 0), 1);
	ring_tx_flush(ring);
	ck_assert_uint_eq(stats().send_inline, 500);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(tx_send_refuses_bad_buffers_and_frees_them)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_buf_pool *other = ring_buf_pool_create("other", 1, 2048);
	struct ring_buf *b = ring_buf_alloc(other);
	b->len = 60;
	ck_assert_int_eq(ring_tx_send(ring, b), -EINVAL);
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(other, &c);
	ck_assert_uint_eq(c.free_now, 1);
	b = ring_tx_alloc(ring);
	b->len = 0;
	ck_assert_int_eq(ring_tx_send(ring, b), -EMSGSIZE);
	b = ring_tx_alloc(ring);
	b->len = b->size + 1;
	ck_assert_int_eq(ring_tx_send(ring, b), -EMSGSIZE);
	ring_buf_pool_read_counters(ring_tx_pool(ring), &c);
	ck_assert_uint_eq(c.free_now, c.size);
	ring_buf_pool_destroy(other);
	ring_close(ring);
}
END_TEST

/* ---- flow rules ---- */

START_TEST(rules_carry_the_specs_and_priorities)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	uint32_t qpn = softverbs_test_last_qp_num();
	struct ring_flow five = udp5("10.0.0.1", 5000, "10.0.0.2", 7000);
	struct ring_flow three = udp3("10.0.0.1", 5001);
	struct ring_flow any = udp3(NULL, 5002);
	struct ring_flow group = { .proto = IPPROTO_UDP, .group = ip_of("239.255.1.2"), .local_port = htons(5003),
				   .share = 1, .owner_fd = -1 };
	ck_assert_int_eq(ring_attach_flow(ring, &five), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &three), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &any), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &group), 0);
	struct softverbs_rule_info r[8];
	ck_assert_int_eq(softverbs_test_rules(qpn, r, 8), 4);
	bool seen[4] = { false };
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(r[i].proto, IPPROTO_UDP);
		if (r[i].dport == htons(5000)) {
			ck_assert_uint_eq(r[i].priority, RING_VERBS_PRIO_5TUPLE);
			ck_assert_uint_eq(r[i].dst_ip, five.local_ip);
			ck_assert_uint_eq(r[i].src_ip, five.remote_ip);
			ck_assert_uint_eq(r[i].src_mask, 0xffffffffu);
			ck_assert_uint_eq(r[i].sport, htons(7000));
			ck_assert_uint_eq(r[i].sport_mask, 0xffff);
			ck_assert_int_eq(memcmp(r[i].dmac, ring->mac, 6), 0);
			seen[0] = true;
		} else if (r[i].dport == htons(5001)) {
			ck_assert_uint_eq(r[i].priority, RING_VERBS_PRIO_3TUPLE);
			ck_assert_uint_eq(r[i].dst_mask, 0xffffffffu);
			ck_assert_uint_eq(r[i].src_mask, 0);
			ck_assert_uint_eq(r[i].sport_mask, 0);
			seen[1] = true;
		} else if (r[i].dport == htons(5002)) {
			ck_assert_uint_eq(r[i].priority, RING_VERBS_PRIO_ANY_ADDR);
			ck_assert_uint_eq(r[i].dst_mask, 0);
			seen[2] = true;
		} else if (r[i].dport == htons(5003)) {
			static const uint8_t gmac[6] = { 0x01, 0x00, 0x5e, 0x7f, 0x01, 0x02 };
			ck_assert_uint_eq(r[i].priority, RING_VERBS_PRIO_GROUP);
			ck_assert_uint_eq(r[i].dst_ip, group.group);
			ck_assert_int_eq(memcmp(r[i].dmac, gmac, 6), 0);
			seen[3] = true;
		}
	}
	ck_assert(seen[0] && seen[1] && seen[2] && seen[3]);
	ring_close(ring);
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.flows_created, 4);
	ck_assert_uint_eq(s.flows_destroyed, 4);
	ck_assert_uint_eq(s.violations, 0);
}
END_TEST

/* Two rings (two QPs): a connection's 5-tuple beats its listener's
 * 3-tuple, which still gets everything else on the port. */
START_TEST(the_more_specific_rule_wins_across_rings)
{
	struct ring_config cfg = small_cfg();
	struct ring *listener = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring *conn = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(listener);
	ck_assert_ptr_nonnull(conn);
	struct ring_flow three = udp3("10.0.0.1", 5000);
	struct ring_flow five = udp5("10.0.0.1", 5000, "10.0.0.2", 7000);
	ck_assert_int_eq(ring_attach_flow(listener, &three), 0);
	ck_assert_int_eq(ring_attach_flow(conn, &five), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, conn, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	len = udp_frame(f, conn, "10.0.0.3", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	len = udp_frame(f, conn, "10.0.0.3", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(conn), 1);
	ck_assert_int_eq(drain(listener), 2);
	/* The 5-tuple gone, its peer's frames fall to the 3-tuple. */
	ck_assert_int_eq(ring_detach_flow(conn, &five), 0);
	len = udp_frame(f, conn, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(conn), 0);
	ck_assert_int_eq(drain(listener), 1);
	ring_close(conn);
	ring_close(listener);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

/* softverbs' counters once every ring of a test is closed. */
static void assert_every_rule_gone_and_no_violation(void)
{
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.flows_created, s.flows_destroyed);
	ck_assert_uint_eq(s.violations, 0);
}

/* A ring on the test device and its QP's number (for softverbs_test_rules). */
static struct ring *ring_with_qpn(uint32_t *qpn)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(ring);
	*qpn = softverbs_test_last_qp_num();
	return ring;
}

START_TEST(a_taken_over_flow_is_forgotten_by_its_old_ring)
{
	/* A connection moving lanes (sock_tcp_move.c): the new ring takes
	 * the 5-tuple over, the old one forgets its record. */
	uint32_t from_qpn, to_qpn;
	struct ring *from = ring_with_qpn(&from_qpn);
	struct ring *to = ring_with_qpn(&to_qpn);
	ck_assert(ring_can_hand_over_flows(from));
	struct ring_flow five = udp5("10.0.0.1", 5000, "10.0.0.2", 7000);
	ck_assert_int_eq(ring_attach_flow(from, &five), 0);
	struct ring_flow own = five;
	own.takeover = 1;
	ck_assert_int_eq(ring_attach_flow(to, &own), 0);
	ck_assert_int_eq(softverbs_test_rules(from_qpn, NULL, 0), 0);
	ck_assert_int_eq(softverbs_test_rules(to_qpn, NULL, 0), 1);
	ck_assert_int_eq(ring_forget_flow(from, &five), 0);
	ck_assert_int_eq(ring_forget_flow(from, &five), -ENOENT);
	uint8_t f[256];
	size_t len = udp_frame(f, to, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(from), 0);
	ck_assert_int_eq(drain(to), 1);
	/* Forgetting a flow whose rule is still there removes the rule. */
	struct ring_flow other = udp5("10.0.0.1", 5000, "10.0.0.3", 7000);
	ck_assert_int_eq(ring_attach_flow(from, &other), 0);
	ck_assert_int_eq(ring_forget_flow(from, &other), 0);
	ck_assert_int_eq(softverbs_test_rules(from_qpn, NULL, 0), 0);
	ck_assert_int_eq(ring_detach_flow(to, &own), 0);
	ck_assert_int_eq(softverbs_test_rules(to_qpn, NULL, 0), 0);
	ring_close(to);
	ring_close(from);
	assert_every_rule_gone_and_no_violation();
}
END_TEST

START_TEST(detach_and_close_tear_rules_down)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	uint32_t qpn = softverbs_test_last_qp_num();
	struct ring_flow a = udp3("10.0.0.1", 5000), b = udp3("10.0.0.1", 5001);
	struct softverbs_rule_info r[4];
	ck_assert_int_eq(ring_attach_flow(ring, &a), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &a), -EEXIST);
	ck_assert_int_eq(ring_attach_flow(ring, &b), 0);
	ck_assert_int_eq(softverbs_test_rules(qpn, r, 4), 2);
	ck_assert_int_eq(ring_detach_flow(ring, &a), 0);
	ck_assert_int_eq(ring_detach_flow(ring, &a), -ENOENT);
	ck_assert_int_eq(softverbs_test_rules(qpn, r, 4), 1);
	ck_assert_uint_eq(r[0].dport, htons(5001));
	/* A flow without a port cannot be steered. */
	struct ring_flow bad = udp3("10.0.0.1", 0);
	ck_assert_int_eq(ring_attach_flow(ring, &bad), -EINVAL);
	ring_close(ring);
	ck_assert_int_eq(softverbs_test_rules(qpn, r, 4), 0);
	struct softverbs_stats s = stats();
	ck_assert_uint_eq(s.flows_created, s.flows_destroyed);
}
END_TEST

/* How many of n remote ports (from 20000) ring admits on three. */
static unsigned admitted(struct ring *ring, const struct ring_flow *three, unsigned n, bool *mask)
{
	unsigned got = 0;
	for (unsigned i = 0; i < n; i++) {
		bool a = ring_share_admit(ring, three, ip_of("10.0.0.2"), htons((uint16_t)(20000 + i)));
		if (mask)
			mask[i] = a;
		got += a;
	}
	return got;
}

/* n UDP frames to 10.0.0.1:port from 10.0.0.2, remote ports 20000 on. */
static void inject_from_ports(struct ring *ring, uint16_t port, unsigned n)
{
	uint8_t f[256];
	for (unsigned i = 0; i < n; i++) {
		size_t len = udp_frame(f, ring, "10.0.0.2", (uint16_t)(20000 + i), "10.0.0.1", port, 10, 0);
		softverbs_test_inject(test_ifindex, f, len);
	}
}

START_TEST(shared_ports_give_every_member_the_frames_and_one_takes_each_flow)
{
	struct ring_config cfg = small_cfg();
	struct ring *a = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring *b = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	struct ring_flow shared = udp3("10.0.0.1", 5977);
	shared.share = 1;
	ck_assert_int_eq(ring_attach_flow(a, &shared), 0);
	ck_assert_uint_eq(a->share_members, 1);
	ck_assert_uint_eq(admitted(a, &shared, 64, NULL), 64);   /* alone: every flow */
	ck_assert_int_eq(ring_attach_flow(b, &shared), 0);
	/* The same rule on both QPs: each gets a copy of every frame. */
	inject_from_ports(a, 5977, 8);
	ck_assert_int_eq(drain(a), 8);
	ck_assert_int_eq(drain(b), 8);
	/* Exactly one member takes each flow, and both take some. */
	bool in_a[256], in_b[256];
	unsigned na = admitted(a, &shared, 256, in_a), nb = admitted(b, &shared, 256, in_b);
	for (unsigned i = 0; i < 256; i++)
		ck_assert_msg(in_a[i] != in_b[i], "remote port %u: taken by %s", 20000 + i, in_a[i] ? "both" : "none");
	ck_assert_uint_gt(na, 64);
	ck_assert_uint_gt(nb, 64);
	/* A member leaving hands its share to the others. */
	ck_assert_int_eq(ring_detach_flow(b, &shared), 0);
	ck_assert_uint_eq(b->share_members, 0);
	ck_assert_uint_eq(admitted(a, &shared, 256, NULL), 256);
	/* Multicast groups are copied to every member and never spread. */
	struct ring_flow group = { .proto = IPPROTO_UDP, .group = ip_of("239.1.1.1"), .share = 1, .owner_fd = -1 };
	ck_assert_int_eq(ring_attach_flow(b, &group), 0);
	ck_assert_uint_eq(b->share_members, 0);
	ring_close(b);
	ring_close(a);
}
END_TEST

/* A shared port's only socket moving lanes (sock_udp_migrate.c, after a
 * fork made it shared): attached as a takeover, the rule and the share
 * member move to the new ring, never standing on both (each QP would get a
 * copy, and the old ring, drained after it left the group, takes all it
 * holds: duplicates). A takeover of another socket's rule (an SO_REUSEPORT
 * sibling's) does not steal it. */
START_TEST(a_shared_port_moving_with_its_only_socket_swaps_the_rule)
{
	uint32_t from_qpn, sibling_qpn, to_qpn;
	struct ring *from = ring_with_qpn(&from_qpn);
	struct ring *sibling = ring_with_qpn(&sibling_qpn);
	struct ring *to = ring_with_qpn(&to_qpn);
	struct ring_flow shared = udp3("10.0.0.1", 5979);
	shared.share = 1;
	shared.owner_fd = 7;
	ck_assert_int_eq(ring_attach_flow(from, &shared), 0);
	ck_assert_uint_eq(from->share_members, 1);
	struct ring_flow other = shared;
	other.owner_fd = 8;
	other.takeover = 1;
	ck_assert_int_eq(ring_attach_flow(sibling, &other), 0);
	ck_assert_int_eq(softverbs_test_rules(from_qpn, NULL, 0), 1);
	ck_assert_int_eq(softverbs_test_rules(sibling_qpn, NULL, 0), 1);
	ck_assert_uint_eq(from->share_members, 1);
	ck_assert_uint_eq(sibling->share_members, 1);
	ck_assert_int_eq(ring_detach_flow(sibling, &other), 0);
	struct ring_flow moving = shared;
	moving.takeover = 1;
	ck_assert_int_eq(ring_attach_flow(to, &moving), 0);
	ck_assert_int_eq(softverbs_test_rules(from_qpn, NULL, 0), 0);
	ck_assert_int_eq(softverbs_test_rules(to_qpn, NULL, 0), 1);
	ck_assert_uint_eq(from->share_members, 0);
	ck_assert_uint_eq(to->share_members, 1);
	inject_from_ports(to, 5979, 8);
	ck_assert_int_eq(drain(from), 0);
	ck_assert_int_eq(drain(to), 8);
	ck_assert_uint_eq(admitted(to, &shared, 64, NULL), 64);   /* alone in the group */
	/* The old lane lets its reference go: nothing of the new ring's goes. */
	ck_assert_int_eq(ring_detach_flow(from, &shared), 0);
	ck_assert_int_eq(softverbs_test_rules(to_qpn, NULL, 0), 1);
	ck_assert_uint_eq(to->share_members, 1);
	ck_assert_int_eq(ring_detach_flow(to, &moving), 0);
	ck_assert_int_eq(softverbs_test_rules(to_qpn, NULL, 0), 0);
	ring_close(to);
	ring_close(sibling);
	ring_close(from);
	assert_every_rule_gone_and_no_violation();
}
END_TEST

START_TEST(a_member_process_killed_is_taken_out_of_the_spread)
{
	struct ring_config cfg = small_cfg();
	struct ring *a = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_ptr_nonnull(a);
	struct ring_flow shared = udp3("10.0.0.1", 5978);
	shared.share = 1;
	ck_assert_int_eq(ring_attach_flow(a, &shared), 0);
	int ready[2], go[2];
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* Another process of the group, with a ring of its own; it
		 * reports what it admits of 256 flows, then waits. */
		struct ring *c = ring_verbs_open(TEST_IF, 0, &cfg);
		char n = 0;
		/* A connection on loopback addresses: the probe that resets its
		 * peer when this process dies goes through the host's kernel,
		 * and must not leave the machine. */
		struct ring_flow conn = { .proto = IPPROTO_TCP, .local_ip = ip_of("127.0.0.1"), .local_port = htons(5979),
					  .remote_ip = ip_of("127.0.0.2"), .remote_port = htons(40000), .owner_fd = -1 };
		if (c && ring_attach_flow(c, &shared) == 0 && ring_attach_flow(c, &conn) == 0)
			n = (char)(admitted(c, &shared, 256, NULL) / 2);
		if (write(ready[1], &n, 1) != 1 || read(go[0], &n, 1) < 0)
			_exit(1);
		_exit(0);
	}
	char n = 0;
	ck_assert_int_eq(read(ready[0], &n, 1), 1);
	unsigned theirs = (unsigned char)n * 2u, ours = admitted(a, &shared, 256, NULL);
	ck_assert_uint_gt(theirs, 40);
	ck_assert_uint_ge(ours + theirs + 1, 256);   /* /2*2: one may be lost to rounding */
	ck_assert_uint_le(ours + theirs, 256);
	ck_assert_uint_eq(ring_verbs_share_group_size(a, &shared), 2);
	/* SIGKILL: it never leaves. The survivor's watcher sees it dead (its
	 * lock is gone) within a fraction of a second, with no flow arriving,
	 * and takes it out; the survivor then takes every flow. */
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	for (int i = 0; i < 100 && ring_verbs_share_group_size(a, &shared) != 1; i++)
		usleep(10000);
	ck_assert_uint_eq(ring_verbs_share_group_size(a, &shared), 1);
	unsigned after = 0;
	for (int i = 0; i < 50 && after < 256; i++) {
		after = admitted(a, &shared, 256, NULL);
		if (after < 256)
			usleep(20000);
	}
	ck_assert_uint_eq(after, 256);
	ring_close(a);
}
END_TEST

START_TEST(to_kernel_removes_a_5tuple_and_parks_its_listener)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	uint32_t qpn = softverbs_test_last_qp_num();
	struct ring_flow five = udp5("10.0.0.1", 5000, "10.0.0.2", 7000);
	ck_assert_int_eq(ring_attach_flow(ring, &five), 0);
	struct ring_flow k = five;
	k.to_kernel = 1;
	ck_assert_int_eq(ring_attach_flow(ring, &k), 0);
	ck_assert_int_eq(softverbs_test_rules(qpn, NULL, 0), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(ring), 0);
	ck_assert_int_eq(ring_detach_flow(ring, &five), 0);
	/* Under the listener's 3-tuple (here on another ring of the
	 * interface, as with a ring per thread) the 3-tuple's rule goes too:
	 * the kernel serves the port from then on, the other 5-tuples stay. */
	struct ring *other = ring_verbs_open(TEST_IF, 0, &cfg);
	uint32_t other_qpn = softverbs_test_last_qp_num();
	struct ring_flow three = udp3("10.0.0.1", 5000), wild = udp3("0.0.0.0", 5000);
	struct ring_flow sibling = udp5("10.0.0.1", 5000, "10.0.0.3", 7000);
	struct ring_flow elsewhere = udp3("10.0.0.1", 5001);
	ck_assert_int_eq(ring_attach_flow(other, &three), 0);
	ck_assert_int_eq(ring_attach_flow(other, &wild), 0);
	ck_assert_int_eq(ring_attach_flow(other, &elsewhere), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &five), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &sibling), 0);
	ck_assert_int_eq(ring_attach_flow(ring, &k), 0);
	struct softverbs_rule_info r[4];
	ck_assert_int_eq(softverbs_test_rules(other_qpn, r, 4), 1);
	ck_assert_uint_eq(r[0].dport, htons(5001));
	ck_assert_int_eq(softverbs_test_rules(qpn, r, 4), 1);
	ck_assert_uint_eq(r[0].sport, htons(7000));
	softverbs_test_inject(test_ifindex, f, len);
	len = udp_frame(f, ring, "10.0.0.4", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(ring) + drain(other), 0);
	len = udp_frame(f, ring, "10.0.0.3", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(ring), 1);
	/* A parked listener moving rings stays parked; its records detach. */
	ck_assert_int_eq(ring_attach_flow(ring, &three), 0);
	ck_assert_int_eq(softverbs_test_rules(qpn, NULL, 0), 1);
	ck_assert_int_eq(ring_detach_flow(other, &three), 0);
	ck_assert_int_eq(ring_detach_flow(other, &wild), 0);
	ck_assert_int_eq(ring_detach_flow(ring, &three), 0);
	/* Listening again afterwards steers again. */
	ck_assert_int_eq(ring_attach_flow(other, &three), 0);
	ck_assert_int_eq(softverbs_test_rules(other_qpn, NULL, 0), 2);
	struct ring_flow unknown = udp5("10.0.0.1", 5000, "10.0.0.9", 7000);
	unknown.to_kernel = 1;
	ck_assert_int_eq(ring_attach_flow(ring, &unknown), -ENOENT);
	ring_close(other);
	ring_close(ring);
	assert_every_rule_gone_and_no_violation();
}
END_TEST

START_TEST(refused_rules_map_to_the_ring_errnos)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow a = udp3("10.0.0.1", 5000);
	softverbs_test_fail("ibv_create_flow", ENOMEM, 1);
	ck_assert_int_eq(ring_attach_flow(ring, &a), -ENOSPC);
	softverbs_test_fail("ibv_create_flow", EPERM, 1);
	ck_assert_int_eq(ring_attach_flow(ring, &a), -EPERM);
	softverbs_test_fail("ibv_create_flow", ENXIO, 1);
	ck_assert_int_eq(ring_attach_flow(ring, &a), -EINVAL);
	/* Nothing half attached: it works once the device agrees. */
	ck_assert_int_eq(ring_attach_flow(ring, &a), 0);
	ring_close(ring);
}
END_TEST

/* ---- sleeping ---- */

static bool readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

START_TEST(wait_arm_sleeps_then_a_frame_wakes_and_is_received)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	for (int round = 0; round < 100; round++) {
		ck_assert_int_eq(ring_wait_arm(ring), 0);
		ck_assert(!readable(ring_wait_fd(ring), 0));
		softverbs_test_inject(test_ifindex, f, len);
		ck_assert(readable(ring_wait_fd(ring), 1000));
		ck_assert_int_eq(drain(ring), 1);
	}
	/* A frame that came between two arms is not slept through. */
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(ring_wait_arm(ring), 1);
	ck_assert_int_eq(drain(ring), 1);
	ck_assert_uint_ge(stats().events, 1);
	/* Every event acknowledged before the CQ goes (softverbs checks). */
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

START_TEST(moderation_is_applied_and_adapts_to_the_rate)
{
	struct ring_config cfg = small_cfg();
	cfg.verbs.cq_moderation = true;
	cfg.verbs.cq_mod_count = 48;
	cfg.verbs.cq_mod_period_us = 50;
	cfg.verbs.aim_interval_ms = 1;
	cfg.verbs.aim_rate = 100;
	cfg.verbs.aim_max_count = 5;
	cfg.verbs.aim_max_period_us = 300;
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	uint32_t qpn = softverbs_test_last_qp_num();
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint16_t count = 0, period = 0;
	ck_assert_int_eq(softverbs_test_rx_moderation(qpn, &count, &period), 0);
	ck_assert_uint_eq(count, 48);
	ck_assert_uint_eq(period, 50);
	ck_assert_int_eq(ring_wait_arm(ring), 0);   /* starts the first interval */
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	/* Busy for three intervals. The rate is taken when a burst ends an
	 * interval, over the packets since the last take, which include that
	 * burst (at least its last 36): a slow or descheduled round still
	 * leaves every interval far above 100/s unless it lasts 72 ms, so
	 * the outcome does not hang on where the interval edges fall. */
	uint64_t busy_from = ring_verbs_clock_ns(CLOCK_MONOTONIC);
	do {
		for (int i = 0; i < 100; i++)
			softverbs_test_inject(test_ifindex, f, len);
		ck_assert_int_eq(drain(ring), 100);
	} while (ring_verbs_clock_ns(CLOCK_MONOTONIC) - busy_from < 3000000u);
	/* Both at their caps: rate / 100 > 5, 1 s / 100 = 10 ms > 300 us. */
	softverbs_test_rx_moderation(qpn, &count, &period);
	ck_assert_uint_eq(count, 5);
	ck_assert_uint_eq(period, 300);
	/* The interval after the last take may still hold packets; the one
	 * after that is empty. */
	struct timespec ms5 = { 0, 5000000 };
	nanosleep(&ms5, NULL);
	ring_wait_arm(ring);
	nanosleep(&ms5, NULL);
	ring_wait_arm(ring);
	/* Idle: moderation off, so a lone packet wakes its sleeper at once. */
	softverbs_test_rx_moderation(qpn, &count, &period);
	ck_assert_uint_eq(count, 0);
	ck_assert_uint_eq(period, 0);
	ring_close(ring);
}
END_TEST

/* ---- errors ---- */

START_TEST(no_device_no_ring_and_one_warning)
{
	static const uint8_t mac[6] = { 0x02, 0, 0, 0, 0, 0x09 };
	softverbs_test_clear_devices();
	struct ring_config cfg = small_cfg();
	char why[192];
	errno = 0;
	ck_assert_ptr_null(ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why)));
	ck_assert_int_eq(errno, ENODEV);
	ck_assert_str_eq(why, "no RDMA device");
	/* A device, but serving another netdev. */
	softverbs_test_add_device("other0", test_ifindex + 1000, mac, 1500, false);
	ck_assert_ptr_null(ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why)));
	ck_assert_int_eq(errno, ENODEV);
	ck_assert_str_eq(why, "no RDMA device serves lo");
	capture_begin();
	ck_assert_ptr_null(ring_verbs_open(TEST_IF, 0, &cfg));
	capture_end();
	ck_assert_int_eq(count_of(captured, "WARNING"), 1);
	ck_assert_ptr_nonnull(strstr(captured, "ring: lo: verbs backend unavailable (no RDMA device serves lo)"));
	ck_assert(!ring_verbs_available(TEST_IF, &cfg));
	ck_assert_ptr_null(ring_verbs_open_why("nosuchif0", 0, &cfg, why, sizeof(why)));
	ck_assert_int_eq(errno, ENODEV);
}
END_TEST

START_TEST(qp_refused_no_ring_and_nothing_left_behind)
{
	struct ring_config cfg = small_cfg();
	char why[192];
	softverbs_test_fail("ibv_create_qp", EPERM, 1);
	errno = 0;
	ck_assert_ptr_null(ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why)));
	ck_assert_int_eq(errno, EPERM);
	ck_assert_ptr_nonnull(strstr(why, "cannot create the raw packet queue pair"));
	ck_assert_ptr_nonnull(strstr(why, strerror(EPERM)));
	/* ibv_close_device with objects alive would be a violation. */
	ck_assert_uint_eq(stats().violations, 0);
	softverbs_test_fail("ibv_reg_mr", ENOMEM, 1);
	ck_assert_ptr_null(ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why)));
	ck_assert_ptr_nonnull(strstr(why, "memory region"));
	softverbs_test_fail("ibv_create_cq", ENOMEM, 1);
	ck_assert_ptr_null(ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why)));
	ck_assert_ptr_nonnull(strstr(why, "completion queues"));
	ck_assert_uint_eq(stats().violations, 0);
	/* And then it opens. */
	struct ring *ring = ring_verbs_open_why(TEST_IF, 0, &cfg, why, sizeof(why));
	ck_assert_ptr_nonnull(ring);
	ring_close(ring);
}
END_TEST

START_TEST(ring_open_falls_back_with_exactly_one_warning)
{
	struct ring_config cfg = small_cfg();
	softverbs_test_fail("ibv_create_qp", EPERM, 1);
	capture_begin();
	struct ring *ring = ring_open(TEST_IF, 0, &cfg);
	capture_end();
	ck_assert_ptr_nonnull(ring);
	ck_assert_str_eq(ring->ops->name, "loop");
	ck_assert_int_eq(count_of(captured, "WARNING"), 1);
	ck_assert_ptr_nonnull(strstr(captured, "ring: lo: verbs backend unavailable (cannot create the raw packet queue "
					       "pair (needs CAP_NET_RAW): Operation not permitted); using the loop backend"));
	ring_close(ring);
	/* Auto: verbs where a device serves the interface. */
	cfg.backend = RING_BACKEND_AUTO;
	ck_assert_int_eq(ring_backend_for(TEST_IF, &cfg), RING_BACKEND_VERBS);
	ring = ring_open(TEST_IF, 0, &cfg);
	ck_assert_str_eq(ring->ops->name, "verbs");
	ring_close(ring);
	softverbs_test_clear_devices();
	ck_assert_int_eq(ring_backend_for(TEST_IF, &cfg), RING_BACKEND_XDP);
	/* No configuration: xdp, as before. */
	ck_assert_int_eq(ring_backend_for(TEST_IF, NULL), RING_BACKEND_XDP);
}
END_TEST

START_TEST(process_init_runs_fork_init_and_blueflame_once)
{
	struct ring_config cfg = small_cfg();
	cfg.verbs.fork_init = true;
	cfg.verbs.blueflame_off = true;
	unsetenv("MLX5_SHUT_UP_BF");
	struct ring *a = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_int_eq(softverbs_test_bf_disabled(softverbs_test_last_qp_num()), 1);
	struct ring *b = ring_verbs_open(TEST_IF, 0, &cfg);
	ck_assert_uint_eq(stats().fork_inits, 1);
	ck_assert_int_eq(ibv_is_fork_initialized(), IBV_FORK_ENABLED);
	ring_close(b);
	ring_close(a);
}
END_TEST

/* ---- fork ---- */

START_TEST(a_forked_child_forgets_the_ring_without_touching_it)
{
	struct ring_config cfg = small_cfg();
	struct ring *ring = ring_verbs_open(TEST_IF, 0, &cfg);
	struct ring_flow flow = udp3("10.0.0.1", 5000);
	ck_assert_int_eq(ring_attach_flow(ring, &flow), 0);
	uint8_t f[256];
	size_t len = udp_frame(f, ring, "10.0.0.2", 7000, "10.0.0.1", 5000, 10, 0);
	softverbs_test_inject(test_ifindex, f, len);
	struct ring_buf *held[4];
	ck_assert_int_eq(ring_rx_burst(ring, held, 4), 1);
	pid_t child = fork();
	if (child == 0) {
		/* As ring_mgr_forget_after_fork does; then the child's close and
		 * free of an inherited buffer must touch no verbs object. */
		ring->ops->forget(ring);
		ring_buf_free(held[0]);
		ring_close(ring);
		struct softverbs_stats s;
		softverbs_test_stats(&s);
		_exit(s.violations == 0 ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's ring is intact. */
	ring_buf_free(held[0]);
	softverbs_test_inject(test_ifindex, f, len);
	ck_assert_int_eq(drain(ring), 1);
	ck_assert_int_eq(send_frames(ring, 3, 100, 0), 3);
	ring_tx_flush(ring);
	ck_assert_uint_eq(softverbs_test_tx_count(test_ifindex), 3);
	ring_close(ring);
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

/* ---- the manager ---- */

START_TEST(the_manager_gives_each_key_a_verbs_ring)
{
	struct ring_mgr_config mc = { .ring = small_cfg(), .queues = 1 };
	ring_mgr_configure(&mc);
	struct ring *a = ring_mgr_get(TEST_IF, 1);
	struct ring *b = ring_mgr_get(TEST_IF, 2);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_ne(a, b);
	ck_assert_str_eq(a->ops->name, "verbs");
	ck_assert_str_eq(b->ops->name, "verbs");
	ck_assert_uint_eq(ring_mgr_count(TEST_IF), 2);
	ring_mgr_close_all();
	ck_assert_uint_eq(stats().violations, 0);
}
END_TEST

static Suite *ring_verbs_suite(void)
{
	Suite *s = suite_create("ring_verbs");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, open_posts_the_rq_to_depth_with_spares);
	tcase_add_test(tc, received_frames_are_exact_and_only_the_steered_ones);
	tcase_add_test(tc, refills_go_in_batches_of_rx_wre_batching);
	tcase_add_test(tc, keep_qp_full_drops_instead_of_running_dry);
	tcase_add_test(tc, without_keep_qp_full_the_rq_runs_dry_and_the_nic_drops);
	tcase_add_test(tc, sends_signal_every_n_and_every_frame_comes_back);
	tcase_add_test(tc, a_long_burst_never_overflows_the_sq);
	tcase_add_test(tc, small_frames_go_inline_and_are_free_at_once);
	tcase_add_test(tc, tx_send_refuses_bad_buffers_and_frees_them);
	tcase_add_test(tc, rules_carry_the_specs_and_priorities);
	tcase_add_test(tc, the_more_specific_rule_wins_across_rings);
	tcase_add_test(tc, detach_and_close_tear_rules_down);
	tcase_add_test(tc, shared_ports_give_every_member_the_frames_and_one_takes_each_flow);
	tcase_add_test(tc, a_shared_port_moving_with_its_only_socket_swaps_the_rule);
	tcase_add_test(tc, a_member_process_killed_is_taken_out_of_the_spread);
	tcase_add_test(tc, a_taken_over_flow_is_forgotten_by_its_old_ring);
	tcase_add_test(tc, to_kernel_removes_a_5tuple_and_parks_its_listener);
	tcase_add_test(tc, refused_rules_map_to_the_ring_errnos);
	tcase_add_test(tc, wait_arm_sleeps_then_a_frame_wakes_and_is_received);
	tcase_add_test(tc, moderation_is_applied_and_adapts_to_the_rate);
	tcase_add_test(tc, no_device_no_ring_and_one_warning);
	tcase_add_test(tc, qp_refused_no_ring_and_nothing_left_behind);
	tcase_add_test(tc, ring_open_falls_back_with_exactly_one_warning);
	tcase_add_test(tc, process_init_runs_fork_init_and_blueflame_once);
	tcase_add_test(tc, a_forked_child_forgets_the_ring_without_touching_it);
	tcase_add_test(tc, the_manager_gives_each_key_a_verbs_ring);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ring_verbs_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
