/* Per-pcb settings of the TCP engine (tcp_set_netif, tcp_set_bufsizes,
 * tcp_set_keepalive_params, tcp_set_syn_retries, tcp_set_mss_clamp), each
 * checked by what it changes on the wire, and their inheritance by the
 * children of a listener; plus the tcp_pcb_info fields TCP_INFO needs. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"
#include "stack/stack_csum.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sa.time_wait_ms = 2000;
	sb = sa;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

/* A client pcb on side 0, bound, callbacks set, not yet connected. */
static struct tcp_pcb *client(uint16_t lport)
{
	struct th_side *s = &w->side[0];
	struct tcp_pcb *p = tcp_pcb_new(s->tcp);
	ck_assert_ptr_nonnull(p);
	tcp_set_callbacks(p, &th_callbacks, s);
	ck_assert_int_eq(tcp_bind(p, s->nif.ip, htons(lport)), 0);
	return p;
}

static void connect_to(struct tcp_pcb *p, uint16_t rport)
{
	struct th_side *peer = &w->side[1];
	ck_assert_int_eq(tcp_connect(p, peer->nif.ip, htons(rport), 0, peer->nif.mac), 0);
}

static bool both_connected(struct th_wire *x)
{
	return x->side[0].connected && x->side[1].connected;
}

/* Value of option kind in a parsed segment: its first byte after kind/len, or -1. */
static long opt_value(const struct th_tcp *t, uint8_t kind)
{
	for (unsigned i = 0; i < t->optlen;) {
		uint8_t k = t->opts[i];
		if (k == 0)
			break;
		if (k == 1) {
			i++;
			continue;
		}
		uint8_t len = t->opts[i + 1];
		if (k == kind) {
			if (kind == 2)
				return t->opts[i + 2] << 8 | t->opts[i + 3];
			return t->opts[i + 2];
		}
		i += len;
	}
	return -1;
}

static struct th_tcp captured(unsigned i)
{
	struct th_tcp t;
	ck_assert_uint_gt(w->ncaptured, i);
	ck_assert(th_parse(w->captured[i], &t));
	return t;
}

START_TEST(window_scale_from_rcv_buf)
{
	th_init(w, &sa, &sb, 1);
	w->capture = true;
	struct tcp_pcb *dflt = client(4000);
	connect_to(dflt, 80);
	struct tcp_pcb *big = client(4001);
	tcp_set_bufsizes(big, 1u << 20, 0);
	connect_to(big, 80);
	struct tcp_pcb *small = client(4002);
	tcp_set_bufsizes(small, 60000, 0);
	connect_to(small, 80);
	ck_assert_uint_eq(w->ncaptured, 3);
	struct th_tcp t0 = captured(0), t1 = captured(1), t2 = captured(2);
	ck_assert_uint_eq(t0.flags, 0x02);
	ck_assert_int_eq(opt_value(&t0, 3), 3);   /* 256 KiB: 65535 << 3 covers it */
	ck_assert_int_eq(opt_value(&t1, 3), 5);   /* 1 MiB */
	ck_assert_int_eq(opt_value(&t2, 3), 0);   /* fits in 16 bits */
	ck_assert_uint_eq(t2.wnd, 60000);
	th_capture_clear(w);
}
END_TEST

/* As Linux's tcp_select_initial_window: a pcb that may auto-tune offers the
 * scale of the largest buffer it may reach (tcp_rmem[2] = 6 MiB: 7); one
 * whose buffer was set (SO_RCVBUF 65536) the scale of that buffer (1). */
START_TEST(window_scale_from_largest_buffer)
{
	sa.rcv_buf = 65536;
	sa.rcv_buf_max = 3u << 20;
	sa.rcv_wscale_space = 6u << 20;
	th_init(w, &sa, &sb, 1);
	w->capture = true;
	connect_to(client(4000), 80);
	struct tcp_pcb *set = client(4001);
	tcp_set_bufsizes(set, 65536, 0);
	connect_to(set, 80);
	struct th_tcp t0 = captured(0), t1 = captured(1);
	ck_assert_int_eq(opt_value(&t0, 3), 7);
	ck_assert_int_eq(opt_value(&t1, 3), 1);
	ck_assert_uint_eq(t0.wnd, 65535);   /* a SYN's window is never scaled */
	th_capture_clear(w);
}
END_TEST

static bool got_bulk(struct th_wire *x)
{
	return x->side[1].rx_bytes >= x->side[0].tx_goal;
}

/* Receive auto-tuning (Linux's tcp_rcv_space_adjust): a bulk receiver that
 * keeps up grows its window from 64 KiB toward rcv_buf_max; one whose
 * buffer was set keeps it. */
static uint32_t bulk_rcv_space(bool set_buffer, uint64_t *grown)
{
	sa.rcv_buf = sb.rcv_buf = 65536;
	sa.rcv_buf_max = sb.rcv_buf_max = 4u << 20;
	sa.timestamps = sb.timestamps = TCP_TS_ON;
	sa.snd_buf = sb.snd_buf = 4u << 20;
	th_init(w, &sa, &sb, 3);
	w->delay_ms = 2;
	struct tcp_pcb *lis = th_listen(&w->side[1], 80);
	if (set_buffer)
		tcp_set_bufsizes(lis, 65536, 0);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	w->side[0].tx_goal = 16u << 20;
	ck_assert(th_run_until(w, got_bulk, 20000));
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	*grown = tcp_ctx_counters(w->side[1].tcp)->rx_rcvbuf_grown;
	ck_assert(set_buffer || in.rcv_rtt_us > 0);
	return in.rcv_space;
}

START_TEST(rcv_buf_autotunes)
{
	uint64_t grown;
	uint32_t space = bulk_rcv_space(false, &grown);
	ck_assert_uint_ge(space, 1u << 20);
	ck_assert_uint_le(space, 4u << 20);
	ck_assert_uint_gt(grown, 0);
}
END_TEST

START_TEST(rcv_buf_set_does_not_autotune)
{
	uint64_t grown;
	ck_assert_uint_eq(bulk_rcv_space(true, &grown), 65536);
	ck_assert_uint_eq(grown, 0);
}
END_TEST

static bool client_failed(struct th_wire *x)
{
	return x->side[0].err != 0;
}

/* TCP_USER_TIMEOUT: unacknowledged data against a silent peer ends the
 * connection with ETIMEDOUT at the timeout (the RTO is brought forward to
 * it), long before the retry count would; the peer gets a reset. */
START_TEST(user_timeout_ends_with_etimedout)
{
	th_init(w, &sa, &sb, 1);
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	struct tcp_pcb *c = w->side[0].pcb;
	tcp_set_user_timeout(c, 1000);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(c, &in);
	ck_assert_uint_eq(in.user_timeout_ms, 1000);
	w->drop_all = true;
	uint64_t t0 = w->now;
	ck_assert_int_eq(tcp_write(c, "hello", 5, 0), 5);
	ck_assert(th_run_until(w, client_failed, 5000));
	ck_assert_int_eq(w->side[0].err, ETIMEDOUT);
	ck_assert_uint_ge(w->now - t0, 1000);
	ck_assert_uint_le(w->now - t0, 1000 + 2 * sa.timer_resolution_ms);
	const struct tcp_counters *k = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_eq(k->tx_user_timeouts, 1);
	ck_assert_uint_lt(k->tx_rto_expiries, 5);   /* 200, 400, then the deadline */
}
END_TEST

/* Rewrites a captured frame's IP ECN field (and the header checksum). */
static void set_ip_ecn(struct ring_buf *b, uint8_t ecn)
{
	uint8_t *ip = b->data + 14;
	ip[1] = (uint8_t)((ip[1] & ~3u) | ecn);
	ip[10] = ip[11] = 0;
	uint16_t c = stack_csum_finish(stack_csum_add(0, ip, 20));
	memcpy(ip + 10, &c, 2);
}

static uint8_t ip_ecn_of(const struct ring_buf *b)
{
	return b->data[14 + 1] & 3;
}

/* Delivers captured frame i to side `to` (its slot emptied). */
static void deliver(unsigned i, int to)
{
	struct ring_buf *b = w->captured[i];
	w->captured[i] = NULL;
	stack_input(w->side[to].st, &w->side[to].nif, b);
}

/* ECN (RFC 3168) as Linux: a side with tcp_ecn 2 accepts a SYN that asks
 * (ECE|CWR) with an ECE SYN-ACK and does not ask itself; new data leaves
 * ECT(0), pure ACKs Not-ECT; a CE mark makes the receiver echo ECE until
 * the sender's CWR, and the sender reduces cwnd once and sets CWR. */
START_TEST(ecn_negotiated_echoed_and_reduced)
{
	sa.ecn = 1;
	sb.ecn = 2;
	th_init(w, &sa, &sb, 1);
	w->capture = true;
	th_listen(&w->side[1], 80);
	struct tcp_pcb *c = client(4000);
	connect_to(c, 80);
	struct th_tcp syn = captured(0);
	ck_assert_uint_eq(syn.flags, 0xc2);         /* SYN ECE CWR */
	deliver(0, 1);
	struct th_tcp synack = captured(1);
	ck_assert_uint_eq(synack.flags, 0x52);      /* SYN ACK ECE */
	ck_assert_uint_eq(ip_ecn_of(w->captured[1]), 0);
	deliver(1, 0);
	deliver(2, 1);                              /* the handshake's ACK */
	th_capture_clear(w);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(c, &in);
	ck_assert(in.ecn_ok);
	uint32_t cwnd0 = in.cwnd;
	static uint8_t data[3000];
	ck_assert_int_eq(tcp_write(c, data, sizeof(data), 0), (int)sizeof(data));
	ck_assert_uint_eq(w->ncaptured, 3);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_uint_eq(ip_ecn_of(w->captured[i]), 2);   /* ECT(0) */
	set_ip_ecn(w->captured[0], 3);                           /* CE on the way */
	for (unsigned i = 0; i < 3; i++)
		deliver(i, 1);
	for (unsigned i = 0; i < 3; i++)
		ck_assert(w->captured[i] == NULL);
	memmove(w->captured, w->captured + 3, (w->ncaptured - 3) * sizeof(w->captured[0]));
	w->ncaptured -= 3;
	th_run(w, 2);                          /* quick ACKs, before any probe of the sender */
	ck_assert_uint_ge(tcp_ctx_counters(w->side[1].tcp)->rx_ecn_ce, 1);
	unsigned acks = w->ncaptured;
	ck_assert_uint_ge(acks, 1);
	for (unsigned i = 0; i < acks; i++) {
		struct th_tcp ack = captured(i);
		ck_assert_uint_eq(ack.flags, 0x50);                 /* ACK ECE, no data */
		ck_assert_uint_eq(ip_ecn_of(w->captured[i]), 0);    /* pure ACK: Not-ECT */
	}
	for (unsigned i = 0; i < acks; i++)
		deliver(i, 0);
	w->ncaptured = 0;
	tcp_pcb_get_info(c, &in);
	ck_assert_uint_lt(in.cwnd, cwnd0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->tx_ecn_cwnd_reduced, 1);
	ck_assert_int_eq(tcp_write(c, data, 100, 0), 100);
	struct th_tcp cwr = captured(0);
	ck_assert_uint_eq(cwr.flags & 0x80, 0x80);               /* CWR on new data */
	deliver(0, 1);
	th_run(w, 50);
	struct th_tcp after = captured(w->ncaptured - 1);
	ck_assert_uint_eq(after.flags & 0x40, 0);                /* echo over */
	th_capture_clear(w);
}
END_TEST

START_TEST(ecn_not_asked_by_default)
{
	sb.ecn = 2;
	sa.ecn = 2;
	th_init(w, &sa, &sb, 1);
	w->capture = true;
	th_listen(&w->side[1], 80);
	connect_to(client(4000), 80);
	ck_assert_uint_eq(captured(0).flags, 0x02);
	deliver(0, 1);
	ck_assert_uint_eq(captured(1).flags, 0x12);   /* no ECE: nobody asked */
	th_capture_clear(w);
}
END_TEST

START_TEST(listener_children_inherit_bufsizes_and_clamp)
{
	th_init(w, &sa, &sb, 2);
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &th_callbacks, &w->side[1]);
	ck_assert_int_eq(tcp_bind(l, 0, htons(80)), 0);
	tcp_set_bufsizes(l, 4u << 20, 8192);
	tcp_set_mss_clamp(l, 800);
	tcp_set_nodelay(l, true);
	ck_assert_int_eq(tcp_listen(l, 4), 0);
	w->capture = true;
	struct tcp_pcb *c = client(4000);
	connect_to(c, 80);
	struct th_tcp syn = captured(0);
	ck_assert_int_eq(opt_value(&syn, 2), 1460);
	/* hand the SYN over by hand, capture the SYN-ACK */
	struct ring_buf *f = w->captured[0];
	w->ncaptured = 0;
	stack_input(w->side[1].st, &w->side[1].nif, f);
	struct th_tcp sa2 = captured(0);
	ck_assert_uint_eq(sa2.flags, 0x12);
	ck_assert_int_eq(opt_value(&sa2, 2), 800);   /* the clamp is what we advertise */
	ck_assert_int_eq(opt_value(&sa2, 3), 7);     /* 4 MiB needs shift 7 */
	th_capture_clear(w);
	w->capture = false;
	/* the client's SYN timer brings the handshake through the normal wire */
	ck_assert(th_run_until(w, both_connected, 3000));
	struct tcp_pcb *child = w->side[1].pcb;
	ck_assert_uint_eq(tcp_sndbuf_free(child), 8192);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(child, &in);
	ck_assert_uint_eq(in.mss, 800);
	ck_assert_uint_eq(in.adv_mss, 800);
	ck_assert_uint_eq(in.rcv_space, 4u << 20);
	ck_assert_uint_eq(in.rcv_wscale, 7);
	tcp_pcb_get_info(w->side[0].pcb, &in);
	ck_assert_uint_eq(in.mss, 800);   /* the client follows the peer's MSS */
	/* nodelay inherited: two small writes leave at once, one unacknowledged */
	w->capture = true;
	ck_assert_int_eq(tcp_write(child, "abc", 3, 0), 3);
	ck_assert_int_eq(tcp_write(child, "defg", 4, 0), 4);
	ck_assert_uint_eq(w->ncaptured, 2);
	ck_assert_uint_eq(captured(0).len, 3);
	ck_assert_uint_eq(captured(1).len, 4);
	ck_assert_uint_eq(tcp_sndbuf_used(child), 7);
	tcp_pcb_get_info(child, &in);
	ck_assert_uint_eq(in.unacked, 2);   /* segments, as Linux's packets_out (the records) */
	ck_assert_uint_eq(in.snd_buf_used, 7);
	th_capture_clear(w);
	tcp_abort(child);
	tcp_close(l);
}
END_TEST

START_TEST(mss_clamp_in_syn)
{
	th_init(w, &sa, &sb, 3);
	th_listen(&w->side[1], 80);
	w->capture = true;
	struct tcp_pcb *p = client(4000);
	tcp_set_mss_clamp(p, 1000);
	connect_to(p, 80);
	struct th_tcp t = captured(0);
	ck_assert_int_eq(opt_value(&t, 2), 1000);
	struct ring_buf *f = w->captured[0];
	w->ncaptured = 0;
	w->capture = false;
	stack_input(w->side[1].st, &w->side[1].nif, f);
	ck_assert(th_run_until(w, both_connected, 100));
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.mss, 1000);   /* the server sends at most our clamp */
	tcp_pcb_get_info(p, &in);
	ck_assert_uint_eq(in.mss, 1000);
	/* a full-size write is cut at the clamp */
	w->side[0].tx_goal = 5000;
	w->capture = true;
	th_pump(&w->side[0]);
	ck_assert_uint_ge(w->ncaptured, 2);
	ck_assert_uint_eq(captured(0).len, 1000);
	th_capture_clear(w);
}
END_TEST

START_TEST(syn_retries_then_etimedout)
{
	sa.rto_initial_ms = 100;
	th_init(w, &sa, &sb, 4);
	w->drop_all = true;
	struct tcp_pcb *p = client(4000);
	tcp_set_syn_retries(p, 2);
	uint64_t before = w->side[0].frames_sent;
	uint64_t t0 = w->now;
	connect_to(p, 80);
	while (!w->side[0].err && w->now < t0 + 10000)
		th_step(w);
	ck_assert_int_eq(w->side[0].err, ETIMEDOUT);
	ck_assert_uint_eq(w->side[0].frames_sent - before, 3);   /* SYN + 2 retries */
	/* 100 + 200 + 400 ms of backoff */
	ck_assert_uint_ge(w->now - t0, 700);
	ck_assert_uint_le(w->now - t0, 700 + 20);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[0].tcp)->attempt_fails, 1);
}
END_TEST

START_TEST(syn_retries_default_from_settings)
{
	sa.rto_initial_ms = 100;
	sa.syn_retries = 1;
	th_init(w, &sa, &sb, 5);
	w->drop_all = true;
	struct tcp_pcb *p = client(4000);
	uint64_t before = w->side[0].frames_sent;
	connect_to(p, 80);
	th_run(w, 2000);
	ck_assert_int_eq(w->side[0].err, ETIMEDOUT);
	ck_assert_uint_eq(w->side[0].frames_sent - before, 2);
}
END_TEST

/* Probes at idle, idle + intvl, ... then ETIMEDOUT, all from per-pcb params
 * (the ctx defaults are two hours). The listener's params reach its child. */
START_TEST(keepalive_params_per_pcb_and_inherited)
{
	th_init(w, &sa, &sb, 6);
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &th_callbacks, &w->side[1]);
	ck_assert_int_eq(tcp_bind(l, 0, htons(80)), 0);
	tcp_set_keepalive(l, true);
	tcp_set_keepalive_params(l, 1000, 200, 3);
	ck_assert_int_eq(tcp_listen(l, 4), 0);
	struct tcp_pcb *c = client(4000);
	connect_to(c, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	th_run(w, 5);   /* let the last ACK land */
	const struct tcp_counters *k = tcp_ctx_counters(w->side[1].tcp);
	uint64_t t0 = w->side[1].pcb ? w->now : 0;
	w->drop_all = true;   /* the client goes silent */
	uint64_t at[3];
	for (unsigned i = 0; i < 3; i++) {
		while (k->tx_keepalives == i && w->now < t0 + 5000)
			th_step(w);
		ck_assert_uint_eq(k->tx_keepalives, i + 1);
		at[i] = w->now;
	}
	/* the last segment the child received was the handshake's ACK, ~5 ms before t0 */
	ck_assert_uint_ge(at[0] - t0, 1000 - 10);
	ck_assert_uint_le(at[0] - t0, 1000 + 10);
	ck_assert_uint_ge(at[1] - at[0], 200);
	ck_assert_uint_le(at[1] - at[0], 210);
	ck_assert_uint_ge(at[2] - at[1], 200);
	ck_assert_uint_le(at[2] - at[1], 210);
	while (!w->side[1].err && w->now < at[2] + 1000)
		th_step(w);
	ck_assert_int_eq(w->side[1].err, ETIMEDOUT);
	ck_assert_uint_ge(w->now - at[2], 200);
	ck_assert_uint_le(w->now - at[2], 210);
	tcp_close(l);
}
END_TEST

START_TEST(keepalive_params_change_running_timer)
{
	th_init(w, &sa, &sb, 7);
	th_listen(&w->side[1], 80);
	struct tcp_pcb *c = client(4000);
	connect_to(c, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	tcp_set_keepalive(c, true);     /* two hours by default */
	th_run(w, 100);
	const struct tcp_counters *k = tcp_ctx_counters(w->side[0].tcp);
	ck_assert_uint_eq(k->tx_keepalives, 0);
	uint64_t t0 = w->now;
	tcp_set_keepalive_params(c, 500, 0, 0);   /* idle counted from the last segment */
	while (!k->tx_keepalives && w->now < t0 + 2000)
		th_step(w);
	ck_assert_uint_eq(k->tx_keepalives, 1);
	ck_assert_uint_le(w->now - t0, 500 - 90);
	ck_assert_int_eq(w->side[0].err, 0);
	th_run(w, 50);
	ck_assert_int_eq(tcp_pcb_state(c), TCP_ESTABLISHED);   /* answered */
}
END_TEST

/* A second interface on side 0 with its own MAC, MTU and transmit hook. */
static struct stack_netif nif2;
static unsigned nif2_frames;

static int nif2_send(void *ctx, struct ring_buf *b)
{
	(void)ctx;
	nif2_frames++;
	ck_assert_uint_lt(w->ncaptured, 256);
	w->captured[w->ncaptured++] = b;
	return 0;
}

/* The route's metrics (ip route ... mtu 1400 advmss 1300), as Linux: the
 * SYN announces the advmss, we send within the path MTU (1400 - 40), the
 * peer within what we announced. */
START_TEST(route_metrics_active_open)
{
	th_init(w, &sa, &sb, 10);
	th_listen(&w->side[1], 80);
	w->capture = true;
	struct tcp_pcb *p = client(4000);
	struct tcp_route_metrics rm = { .mtu = 1400, .advmss = 1300 };
	tcp_set_route_metrics(p, &rm);
	connect_to(p, 80);
	struct th_tcp t = captured(0);
	ck_assert_int_eq(opt_value(&t, 2), 1300);
	struct ring_buf *f = w->captured[0];
	w->ncaptured = 0;
	w->capture = false;
	stack_input(w->side[1].st, &w->side[1].nif, f);
	ck_assert(th_run_until(w, both_connected, 100));
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert_uint_eq(in.mss, 1300);   /* the peer keeps to what we announced */
	tcp_pcb_get_info(p, &in);
	ck_assert_uint_eq(in.mss, 1360);   /* we keep to the path MTU, not to our advmss */
	ck_assert_uint_eq(in.adv_mss, 1300);
	w->side[0].tx_goal = 5000;
	w->capture = true;
	th_pump(&w->side[0]);
	ck_assert_uint_ge(w->ncaptured, 2);
	ck_assert_uint_le(captured(0).len, 1360);
	ck_assert_uint_ge(captured(0).len, 1360 - 12);
	th_capture_clear(w);
}
END_TEST

static struct tcp_route_metrics hook_metrics;
static unsigned hook_calls;

static void route_hook(void *arg, uint32_t remote_ip, struct tcp_route_metrics *out)
{
	(void)arg;
	ck_assert_uint_eq(remote_ip, w->side[0].nif.ip);
	hook_calls++;
	*out = hook_metrics;
}

/* Passive opens ask the ctx's hook for the route toward the SYN's sender:
 * the SYN-ACK announces its advmss, or its mtu less 40 without one. */
START_TEST(route_metrics_passive_open)
{
	static const struct { struct tcp_route_metrics rm; uint32_t client_mss, server_mss; } cases[] = {
		{ { 1400, 1300 }, 1300, 1360 },
		{ { 1400, 0 }, 1360, 1360 },
		{ { 0, 0 }, 1460, 1460 },
	};
	th_init(w, &sa, &sb, 11);
	tcp_ctx_set_route_hook(w->side[1].tcp, route_hook, NULL);
	th_listen(&w->side[1], 80);
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		hook_metrics = cases[i].rm;
		hook_calls = 0;
		w->side[0].connected = w->side[1].connected = false;
		struct tcp_pcb *p = client((uint16_t)(4000 + i));
		connect_to(p, 80);
		ck_assert(th_run_until(w, both_connected, 100));
		ck_assert_uint_eq(hook_calls, 1);
		struct tcp_pcb_info in;
		tcp_pcb_get_info(p, &in);
		ck_assert_uint_eq(in.mss, cases[i].client_mss);
		tcp_pcb_get_info(w->side[1].pcb, &in);
		ck_assert_uint_eq(in.mss, cases[i].server_mss);
		ck_assert_uint_eq(in.adv_mss, cases[i].client_mss);
		tcp_abort(w->side[1].pcb);
		w->side[1].pcb = NULL;
		tcp_abort(p);
	}
}
END_TEST

/* The conn hook: each side's connection is told once on, once off, with
 * its own 4-tuple, and the word it kept comes back. */
static struct conn_seen {
	unsigned on, off;
	uint32_t lip, rip;
	uint16_t lport, rport;
	uint32_t cookie_back;
} conn_seen[2];

static void conn_hook(void *arg, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint32_t *cookie,
		      bool on)
{
	struct conn_seen *c = &conn_seen[(uintptr_t)arg];
	if (on) {
		ck_assert_uint_eq(*cookie, 0);
		c->on++;
		c->lip = lip, c->lport = lport, c->rip = rip, c->rport = rport;
		*cookie = 1000 + c->on;
	} else {
		c->off++;
		c->cookie_back = *cookie;
	}
}

static bool server_fin_seen(struct th_wire *x)
{
	return x->side[1].fin;
}

static bool client_conn_done(struct th_wire *x)
{
	(void)x;
	return conn_seen[0].off == 2;
}

static bool server_conn_gone(struct th_wire *x)
{
	(void)x;
	return conn_seen[1].off > 0;
}

START_TEST(conn_hook_sees_each_connection_come_and_go)
{
	memset(conn_seen, 0, sizeof(conn_seen));
	th_init(w, &sa, &sb, 12);
	tcp_ctx_set_conn_hook(w->side[0].tcp, conn_hook, (void *)(uintptr_t)0);
	tcp_ctx_set_conn_hook(w->side[1].tcp, conn_hook, (void *)(uintptr_t)1);
	th_listen(&w->side[1], 80);
	ck_assert_uint_eq(conn_seen[1].on, 0);   /* a listener is no connection */
	struct tcp_pcb *p = client(4000);
	connect_to(p, 80);
	ck_assert_uint_eq(conn_seen[0].on, 1);   /* the SYN_SENT pcb */
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_uint_eq(conn_seen[1].on, 1);   /* the child */
	ck_assert_uint_eq(conn_seen[0].lip, w->side[0].nif.ip);
	ck_assert_uint_eq(conn_seen[0].rip, w->side[1].nif.ip);
	ck_assert_uint_eq(conn_seen[0].lport, htons(4000));
	ck_assert_uint_eq(conn_seen[0].rport, htons(80));
	ck_assert_uint_eq(conn_seen[1].lip, w->side[1].nif.ip);
	ck_assert_uint_eq(conn_seen[1].rip, w->side[0].nif.ip);
	ck_assert_uint_eq(conn_seen[1].lport, htons(80));
	ck_assert_uint_eq(conn_seen[1].rport, htons(4000));
	ck_assert_uint_eq(conn_seen[0].off + conn_seen[1].off, 0);
	tcp_abort(p);
	ck_assert_uint_eq(conn_seen[0].off, 1);
	ck_assert_uint_eq(conn_seen[0].cookie_back, 1001);
	ck_assert(th_run_until(w, server_conn_gone, 50));   /* the RST ended the child */
	ck_assert_uint_eq(conn_seen[1].off, 1);
	ck_assert_uint_eq(conn_seen[1].cookie_back, 1001);
	ck_assert_uint_eq(conn_seen[0].on + conn_seen[1].on, 2);
	ck_assert_ptr_null(w->side[1].pcb);

	/* A graceful close: the side that closes first is done with at
	 * TIME_WAIT, not 2 MSL later when its pcb goes. */
	w->side[0].connected = w->side[1].connected = false;
	w->side[0].fin = w->side[1].fin = false;
	p = client(4001);
	connect_to(p, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_uint_eq(conn_seen[0].on, 2);
	ck_assert_uint_eq(conn_seen[1].on, 2);
	ck_assert_int_eq(tcp_close(p), 0);
	ck_assert(th_run_until(w, server_fin_seen, 50));
	ck_assert_int_eq(tcp_close(w->side[1].pcb), 0);
	w->side[1].pcb = NULL;
	ck_assert(th_run_until(w, client_conn_done, 50));
	ck_assert_int_eq(tcp_pcb_state(p), TCP_TIME_WAIT);
	ck_assert_uint_eq(conn_seen[0].off, 2);
	ck_assert_uint_eq(conn_seen[0].cookie_back, 1002);
}
END_TEST

static void make_nif2(int side)
{
	nif2 = w->side[side].nif;
	nif2.mac[5] = 0x77;
	nif2.mtu = 1000;
	nif2.tx_send = nif2_send;
	nif2_frames = 0;
}

START_TEST(netif_used_for_tx_and_mss)
{
	th_init(w, &sa, &sb, 8);
	make_nif2(0);
	unsigned before = (unsigned)w->side[0].frames_sent;
	struct tcp_pcb *p = client(4000);
	tcp_set_netif(p, &nif2);
	connect_to(p, 80);
	ck_assert_uint_eq(nif2_frames, 1);
	ck_assert_uint_eq(w->side[0].frames_sent, before);   /* nothing on the ctx's nif */
	struct th_tcp t = captured(0);
	ck_assert_uint_eq(t.flags, 0x02);
	ck_assert_int_eq(opt_value(&t, 2), 960);             /* MTU 1000 - 40 */
	ck_assert_int_eq(memcmp(w->captured[0]->data + 6, nif2.mac, 6), 0);
	th_capture_clear(w);
}
END_TEST

/* VMA_MTU above the interface's MTU (which the ring's frame size bounds)
 * must not raise the MSS past what one frame carries. */
START_TEST(mss_bounded_by_the_nif_whatever_vma_mtu)
{
	sa.mtu = 9000;
	th_init(w, &sa, &sb, 8);
	make_nif2(0);
	struct tcp_pcb *p = client(4000);
	tcp_set_netif(p, &nif2);
	connect_to(p, 80);
	struct th_tcp t = captured(0);
	ck_assert_uint_eq(t.flags, 0x02);
	ck_assert_int_eq(opt_value(&t, 2), 960);   /* nif MTU 1000 - 40, not 9000 - 40 */
	th_capture_clear(w);
	sa.mtu = 0;
}
END_TEST

START_TEST(child_answers_on_the_nif_of_its_syn)
{
	th_init(w, &sa, &sb, 9);
	make_nif2(1);
	th_listen(&w->side[1], 80);
	w->capture = true;
	struct tcp_pcb *p = client(4000);
	connect_to(p, 80);
	struct ring_buf *syn = w->captured[0];
	w->ncaptured = 0;
	uint64_t before = w->side[1].frames_sent;
	memcpy(syn->data, nif2.mac, 6);   /* addressed to the second interface */
	stack_input(w->side[1].st, &nif2, syn);
	ck_assert_uint_eq(nif2_frames, 1);
	ck_assert_uint_eq(w->side[1].frames_sent, before);
	struct th_tcp t = captured(0);
	ck_assert_uint_eq(t.flags, 0x12);
	ck_assert_int_eq(opt_value(&t, 2), 960);
	ck_assert_int_eq(memcmp(w->captured[0]->data + 6, nif2.mac, 6), 0);
	th_capture_clear(w);
}
END_TEST

START_TEST(rst_reply_leaves_on_arrival_nif)
{
	th_init(w, &sa, &sb, 10);
	make_nif2(1);
	w->capture = true;
	struct tcp_pcb *p = client(4000);
	connect_to(p, 81);   /* nobody listens */
	struct ring_buf *syn = w->captured[0];
	w->ncaptured = 0;
	memcpy(syn->data, nif2.mac, 6);
	stack_input(w->side[1].st, &nif2, syn);
	ck_assert_uint_eq(nif2_frames, 1);
	ck_assert_uint_eq(captured(0).flags, 0x14);
	th_capture_clear(w);
}
END_TEST

/* The send buffer grows mid-stream with wrapped data in it: nothing lost or reordered. */
START_TEST(sndbuf_grows_midstream)
{
	th_init(w, &sa, &sb, 11);
	th_listen(&w->side[1], 80);
	struct tcp_pcb *c = client(4000);
	tcp_set_bufsizes(c, 0, 5000);
	connect_to(c, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_uint_eq(tcp_sndbuf_free(c), 5000);
	w->side[0].tx_goal = 300000;
	w->drop_ppm = 20000;
	th_run(w, 37);
	ck_assert_uint_gt(tcp_sndbuf_used(c), 0);
	uint32_t used = tcp_sndbuf_used(c);
	tcp_set_bufsizes(c, 0, 70000);
	ck_assert_uint_eq(tcp_sndbuf_used(c), used);
	ck_assert_uint_eq(tcp_sndbuf_free(c), 70000 - used);
	th_run(w, 3000);
	tcp_set_bufsizes(c, 0, 3000);   /* shrinking is allowed down to what is queued */
	th_run(w, 20000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 300000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	ck_assert_uint_eq(tcp_sndbuf_used(c), 0);
	ck_assert_uint_eq(tcp_sndbuf_free(c), 3000);
}
END_TEST

/* TCP_NOTSENT_LOWAT: a write may queue up to the mark (at least one MSS),
 * poll's rule wants twice the unsent bytes below it; sending clears both,
 * and 0 goes back to the ctx's default (none). */
START_TEST(notsent_lowat_bounds_unsent_bytes)
{
	struct tcp_settings sa, sb;
	tcp_settings_default(&sa);
	tcp_settings_default(&sb);
	th_init(w, &sa, &sb, 13);
	th_listen(&w->side[1], 80);
	struct tcp_pcb *c = client(4001);
	connect_to(c, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), UINT32_MAX);
	ck_assert(tcp_sndbuf_lowat_writable(c));
	tcp_set_notsent_lowat(c, 4000);
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), 4000);
	static char data[3000];
	ck_assert_int_eq(tcp_write(c, data, sizeof(data), TCP_WRITE_MORE), (int)sizeof(data));
	ck_assert_uint_eq(tcp_sndbuf_notsent(c), 3000);
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), 1460);   /* one MSS, though 1000 remain to the mark */
	ck_assert(!tcp_sndbuf_lowat_writable(c));           /* 2 * 3000 >= 4000 */
	ck_assert_int_eq(tcp_write(c, data, 1000, TCP_WRITE_MORE), 1000);
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), 0);
	tcp_output(c);
	ck_assert_uint_eq(tcp_sndbuf_notsent(c), 0);
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), 4000);
	ck_assert(tcp_sndbuf_lowat_writable(c));
	tcp_set_notsent_lowat(c, 0);
	ck_assert_uint_eq(tcp_sndbuf_lowat_room(c), UINT32_MAX);
	tcp_abort(c);
}
END_TEST

START_TEST(info_for_tcp_info)
{
	sa.timestamps = TCP_TS_ON;
	sb.timestamps = TCP_TS_ON;
	th_init(w, &sa, &sb, 12);
	th_listen(&w->side[1], 80);
	struct tcp_pcb *c = client(4000);
	connect_to(c, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	w->side[0].tx_goal = 10000;
	th_run(w, 50);
	ck_assert_uint_eq(w->side[1].rx_bytes, 10000);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(w->side[1].pcb, &in);
	ck_assert(in.ts_ok && in.sack_ok && in.ws_ok);
	ck_assert_uint_eq(in.rcv_mss, 1448);   /* 1460 - 12 bytes of timestamps */
	ck_assert_uint_eq(in.bytes_received, 10000);
	ck_assert_uint_ge(in.last_data_recv_ms, 40);
	ck_assert_uint_le(in.last_data_recv_ms, 50);
	ck_assert_uint_ge(in.data_segs_in, 7);   /* 10000 bytes in 1448-byte segments at most */
	ck_assert_uint_eq(in.data_segs_out, 0);
	uint32_t data_segs = in.data_segs_in;
	ck_assert_uint_eq(in.pmtu, 1500);
	tcp_pcb_get_info(c, &in);
	ck_assert_uint_eq(in.bytes_acked, 10001);   /* the SYN counts, as in Linux */
	ck_assert_uint_eq(in.bytes_sent, 10000);
	ck_assert_uint_eq(in.bytes_retrans, 0);
	ck_assert_uint_eq(in.data_segs_out, data_segs);
	ck_assert_uint_eq(in.notsent, 0);
	ck_assert_uint_eq(in.delivered, data_segs);   /* segments, counted by their records */
	ck_assert_uint_eq(in.total_rto, 0);
	ck_assert_uint_lt(in.min_rtt_ms, UINT32_MAX);   /* sampled */
	ck_assert_uint_eq(in.unacked, 0);
	ck_assert_uint_eq(in.lost, 0);
	ck_assert_uint_eq(in.retransmits, 0);
	ck_assert_uint_ge(in.segs_out, 8);    /* SYN, ACK, 7 data segments */
	ck_assert_uint_le(in.last_ack_recv_ms, 50);
	const struct tcp_counters *k0 = tcp_ctx_counters(w->side[0].tcp);
	const struct tcp_counters *k1 = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_eq(k0->active_opens, 1);
	ck_assert_uint_eq(k1->passive_opens, 1);
	ck_assert_uint_eq(k0->curr_estab, 1);
	ck_assert_uint_eq(k1->curr_estab, 1);
	ck_assert_uint_eq(k0->tx_payload_bytes, 10000);
	ck_assert_uint_eq(k1->rx_payload_bytes, 10000);
	tcp_abort(c);
	ck_assert_uint_eq(k0->curr_estab, 0);
	ck_assert_uint_eq(k0->estab_resets, 1);
	th_run(w, 10);
	ck_assert_uint_eq(k1->curr_estab, 0);
	ck_assert_uint_eq(k1->estab_resets, 1);
	ck_assert_int_eq(w->side[1].err, ECONNRESET);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_settings");
	TCase *t = tcase_create("setters");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, window_scale_from_rcv_buf);
	tcase_add_test(t, listener_children_inherit_bufsizes_and_clamp);
	tcase_add_test(t, mss_clamp_in_syn);
	tcase_add_test(t, route_metrics_active_open);
	tcase_add_test(t, route_metrics_passive_open);
	tcase_add_test(t, syn_retries_then_etimedout);
	tcase_add_test(t, syn_retries_default_from_settings);
	tcase_add_test(t, keepalive_params_per_pcb_and_inherited);
	tcase_add_test(t, keepalive_params_change_running_timer);
	tcase_add_test(t, netif_used_for_tx_and_mss);
	tcase_add_test(t, mss_bounded_by_the_nif_whatever_vma_mtu);
	tcase_add_test(t, child_answers_on_the_nif_of_its_syn);
	tcase_add_test(t, conn_hook_sees_each_connection_come_and_go);
	tcase_add_test(t, rst_reply_leaves_on_arrival_nif);
	tcase_add_test(t, sndbuf_grows_midstream);
	tcase_add_test(t, info_for_tcp_info);
	tcase_add_test(t, notsent_lowat_bounds_unsent_bytes);
	tcase_add_test(t, window_scale_from_largest_buffer);
	tcase_add_test(t, rcv_buf_autotunes);
	tcase_add_test(t, rcv_buf_set_does_not_autotune);
	tcase_add_test(t, user_timeout_ends_with_etimedout);
	tcase_add_test(t, ecn_negotiated_echoed_and_reduced);
	tcase_add_test(t, ecn_not_asked_by_default);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
