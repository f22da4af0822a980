/* The TCP engine's CPU cost per segment, with no NIC, kernel or socket layer
 * in the way: two stacks on one thread joined by in-memory frame queues,
 * frames handed over as they are (no copy) in rx batches of 16 as the
 * socket layer hands a ring poll over, the receiver's checksum trusted as
 * on a veth (--verify-csum checks it).
 *   tcp_engine_bench [bulk|pp|all] [SECONDS] [--verify-csum]
 * bulk: one stream, 64 KiB writes; ns per data segment in the receiver
 *   (its input: checks, delivery, ACKs) and in the sender (its writes and the
 *   ACKs' input: copies, segmentation, headers, checksums).
 * pp: 64-byte request/response; ns per round trip (both stacks).
 * Only ratios between builds run on the same machine mean anything; the
 * per-segment split shows which side a change moved. Public API only, so the
 * program builds against older engines for before/after numbers. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring/ring_buf.h"
#include "stack/stack.h"
#include "stack/tcp.h"

#define QMAX 65536
#define BUFS 16384
#define BUF_SIZE 2048

struct side {
	int index;
	struct ring_buf_pool *pool;
	struct stack *st;
	struct tcp_ctx *tcp;
	struct stack_netif nif;
	struct tcp_pcb *pcb;
	struct ring_buf *q[QMAX];   /* frames on their way to this side */
	unsigned qhead, qlen;
	uint64_t rx_bytes, rx_segs;
	bool reply_due;             /* pp: a request arrived */
};

static struct side sides[2];
static uint64_t now_us;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct ring_buf *tx_alloc(void *ctx)
{
	return ring_buf_alloc(((struct side *)ctx)->pool);
}

static int tx_send(void *ctx, struct ring_buf *b)
{
	struct side *peer = &sides[!((struct side *)ctx)->index];
	if (peer->qlen == QMAX) {
		ring_buf_free(b);
		return 0;
	}
	peer->q[(peer->qhead + peer->qlen++) % QMAX] = b;
	return 0;
}

/* Frames handed over per rx batch, as the socket layer does per ring poll
 * (VMA_CQ_POLL_BATCH_MAX's default). */
#define BURST 16

/* Feeds side s every frame queued for it in bursts, each bracketed as an
 * rx batch like the socket layer's; returns the ns it took. */
static uint64_t deliver(struct side *s)
{
	if (!s->qlen)
		return 0;
	uint64_t t0 = mono_ns();
	while (s->qlen) {
		tcp_rx_batch_begin(s->tcp);
		for (int k = 0; k < BURST && s->qlen; k++) {
			struct ring_buf *b = s->q[s->qhead];
			s->qhead = (s->qhead + 1) % QMAX;
			s->qlen--;
			stack_input(s->st, &s->nif, b);
		}
		tcp_rx_batch_end(s->tcp);
	}
	return mono_ns() - t0;
}

static void tick(void)
{
	now_us = mono_ns() / 1000;
	for (int i = 0; i < 2; i++) {
		stack_clock_set_us(sides[i].st, now_us);
		stack_timer_tick(sides[i].st, now_us / 1000);
	}
}

static void on_recv(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	struct side *s = arg;
	if (!buf)
		return;
	uint32_t n = buf->tot_len;
	for (struct ring_buf *b = buf; b; b = b->next)
		s->rx_segs++;
	s->rx_bytes += n;
	ring_buf_free(buf);
	tcp_recved(pcb, n);
	s->reply_due = true;
}

static void on_connected(void *arg, struct tcp_pcb *pcb)
{
	((struct side *)arg)->pcb = pcb;
}

static int on_accept(void *arg, struct tcp_pcb *lis, struct tcp_pcb *child);

static const struct tcp_callbacks cbs = { .recv = on_recv, .connected = on_connected, .accept = on_accept };

static int on_accept(void *arg, struct tcp_pcb *lis, struct tcp_pcb *child)
{
	(void)lis;
	((struct side *)arg)->pcb = child;
	tcp_set_callbacks(child, &cbs, arg);
	return 0;
}

static void setup(bool verify_csum, bool nodelay)
{
	struct tcp_settings ts;
	tcp_settings_default(&ts);
	ts.timer_resolution_ms = 10;
	ts.nodelay = nodelay;
	ts.timestamps = TCP_TS_ON;   /* as a Linux peer negotiates by default */
	ts.snd_buf = ts.rcv_buf = 1u << 20;
	for (int i = 0; i < 2; i++) {
		struct side *s = &sides[i];
		struct stack_settings ss;
		memset(s, 0, sizeof(*s));
		s->index = i;
		stack_settings_default(&ss);
		s->pool = ring_buf_pool_create(i ? "bench-b" : "bench-a", BUFS, BUF_SIZE);
		s->st = stack_create(&ss);
		if (!s->pool || !s->st) {
			fprintf(stderr, "tcp_engine_bench: no memory\n");
			exit(2);
		}
		uint8_t mac[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(s->nif.mac, mac, 6);
		s->nif.ip = htonl(0xc6120001u + (uint32_t)i);   /* 198.18.0.1, .2 */
		s->nif.netmask = htonl(0xffffff00u);
		s->nif.mtu = 1500;
		s->nif.ifindex = 1;
		s->nif.rx_l4_csum_trusted = !verify_csum;
		s->nif.ctx = s;
		s->nif.tx_alloc = tx_alloc;
		s->nif.tx_send = tx_send;
		s->tcp = tcp_ctx_create(s->st, &s->nif, &ts);
		if (!s->tcp) {
			fprintf(stderr, "tcp_engine_bench: no TCP engine\n");
			exit(2);
		}
	}
	tick();
	struct tcp_pcb *l = tcp_pcb_new(sides[1].tcp);
	tcp_set_callbacks(l, &cbs, &sides[1]);
	tcp_bind(l, 0, htons(5201));
	tcp_listen(l, 4);
	struct tcp_pcb *c = tcp_pcb_new(sides[0].tcp);
	tcp_set_callbacks(c, &cbs, &sides[0]);
	tcp_bind(c, sides[0].nif.ip, htons(40000));
	tcp_connect(c, sides[1].nif.ip, htons(5201), 0, sides[1].nif.mac);
	for (int i = 0; i < 100 && !(sides[0].pcb && sides[1].pcb); i++) {
		deliver(&sides[1]);
		deliver(&sides[0]);
		tick();
	}
	if (!sides[0].pcb || !sides[1].pcb) {
		fprintf(stderr, "tcp_engine_bench: no connection\n");
		exit(2);
	}
}

static void teardown(void)
{
	for (int i = 0; i < 2; i++) {
		struct side *s = &sides[i];
		while (s->qlen) {   /* frames of the other side's pool */
			ring_buf_free(s->q[s->qhead]);
			s->qhead = (s->qhead + 1) % QMAX;
			s->qlen--;
		}
	}
	for (int i = 0; i < 2; i++)
		stack_destroy(sides[i].st);
	for (int i = 0; i < 2; i++)
		ring_buf_pool_destroy(sides[i].pool);
}

#ifdef TCP_ENGINE_BENCH_FAST_COUNTERS
static void print_counters(void)
{
	for (int i = 0; i < 2; i++) {
		const struct tcp_counters *c = tcp_ctx_counters(sides[i].tcp);
		printf("  side %d: %llu segments in, fast path: %llu ACKs, %llu data; %llu out, %llu pure ACKs\n", i,
		       (unsigned long long)c->rx_segments, (unsigned long long)c->rx_fast_acks,
		       (unsigned long long)c->rx_fast_data, (unsigned long long)c->tx_segments,
		       (unsigned long long)c->tx_pure_acks);
	}
}
#else
static void print_counters(void) {}
#endif

static void bulk(double seconds, bool verify)
{
	static uint8_t data[65536];
	setup(verify, false);
	struct side *a = &sides[0], *b = &sides[1];
	uint64_t t_send = 0, t_recv = 0, t_ack = 0, t_start = mono_ns(), end = t_start + (uint64_t)(seconds * 1e9);
	uint64_t written = 0;
	while (mono_ns() < end) {
		for (int k = 0; k < 64; k++) {
			uint64_t t0 = mono_ns();
			int n;
			while ((n = tcp_write(a->pcb, data, sizeof(data), 0)) > 0)
				written += (uint64_t)n;
			t_send += mono_ns() - t0;
			t_recv += deliver(b);
			t_ack += deliver(a);
		}
		tick();
	}
	double wall = (double)(mono_ns() - t_start);
	double segs = (double)b->rx_segs;
	printf("bulk: %.0f MB in %.2f s, %.0f segments (%.0f bytes each): receiver %.0f ns/segment, "
	       "sender %.0f ns/segment (writes %.0f, ACKs %.0f), %.0f ns/segment in all (%.2f Gb/s on one core)\n",
	       (double)b->rx_bytes / 1e6, wall / 1e9, segs, segs ? (double)b->rx_bytes / segs : 0, t_recv / segs,
	       (t_send + t_ack) / segs, t_send / segs, t_ack / segs, (t_recv + t_send + t_ack) / segs,
	       (double)b->rx_bytes * 8 / (double)(t_recv + t_send + t_ack));
	printf("METRIC bulk_rx_ns_per_seg %.1f\nMETRIC bulk_tx_ns_per_seg %.1f\n", t_recv / segs,
	       (t_send + t_ack) / segs);
	(void)written;
	print_counters();
	teardown();
}

static void pingpong(double seconds)
{
	static uint8_t msg[64];
	setup(false, true);
	struct side *a = &sides[0], *b = &sides[1];
	uint64_t rounds = 0, busy = 0, t_start = mono_ns(), end = t_start + (uint64_t)(seconds * 1e9);
	while (mono_ns() < end) {
		for (int k = 0; k < 256; k++) {
			uint64_t t0 = mono_ns();
			tcp_write(a->pcb, msg, sizeof(msg), 0);
			deliver(b);
			if (b->reply_due) {
				b->reply_due = false;
				tcp_write(b->pcb, msg, sizeof(msg), 0);
			}
			a->reply_due = false;
			deliver(a);
			busy += mono_ns() - t0;
			if (a->reply_due)
				rounds++;
		}
		tick();
	}
	printf("pp: %llu round trips of 64 bytes, %.0f ns per round trip (both stacks)\n",
	       (unsigned long long)rounds, rounds ? (double)busy / (double)rounds : 0);
	printf("METRIC pp_ns_per_round_trip %.1f\n", rounds ? (double)busy / (double)rounds : 0);
	print_counters();
	teardown();
}

int main(int argc, char **argv)
{
	const char *what = "all";
	double seconds = 2;
	bool verify = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--verify-csum"))
			verify = true;
		else if (!strcmp(argv[i], "bulk") || !strcmp(argv[i], "pp") || !strcmp(argv[i], "all"))
			what = argv[i];
		else if (atof(argv[i]) > 0)
			seconds = atof(argv[i]);
		else {
			fprintf(stderr, "usage: %s [bulk|pp|all] [SECONDS] [--verify-csum]\n", argv[0]);
			return 2;
		}
	}
	if (strcmp(what, "pp"))
		bulk(seconds, verify);
	if (strcmp(what, "bulk"))
		pingpong(seconds);
	return 0;
}
