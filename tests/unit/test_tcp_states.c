/* Crafted RST, SYN and bad-ACK segments in every TCP state, with the RFC
 * 9293 / RFC 5961 reaction asserted; keepalive against a silent peer; the
 * listener's SYN rate limit and backlog. The test plays side 1's peer by hand
 * (like test_tcp_segments.c) unless a case says otherwise. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"
#include "stack/tcp_priv.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;
static const uint16_t PEER = 0x1234, SRV = 80;
static const uint32_t PEER_ISN = 0x7ffffff0u;   /* crosses 2^31 within the tests */

/* Where the connection stands after drive_to(): */
static uint32_t peer_nxt;   /* next sequence number the peer sends */
static uint32_t srv_una;    /* highest of side 1's sequence numbers the peer acknowledged */
static uint32_t srv_max;    /* side 1's snd_max (its FIN included when sent) */

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

static void inject(uint32_t seq, uint32_t ack, uint8_t flags, const void *data, unsigned len)
{
	th_inject(w, 1, htons(PEER), htons(SRV), seq, ack, flags, 65535, NULL, 0, data, len);
}

static struct th_tcp only_reply(void)
{
	struct th_tcp t;
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert(th_parse(w->captured[0], &t));
	return t;
}

static unsigned pcbs(void)
{
	return tcp_ctx_pcb_count(w->side[1].tcp);
}

/* Side 1 (listener on SRV) is brought to state s by crafted peer segments
 * and its own app calls; nothing is captured afterwards. */
static void drive_to(enum tcp_state s)
{
	th_init(w, &sa, &sb, 7);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	inject(PEER_ISN, 0, 0x02, NULL, 0);
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x12);
	peer_nxt = PEER_ISN + 1;
	srv_una = t.seq;          /* the SYN-ACK not yet acknowledged */
	srv_max = t.seq + 1;
	th_capture_clear(w);
	if (s == TCP_SYN_RCVD) {
		ck_assert_uint_eq(pcbs(), 2);
		return;
	}
	srv_una = srv_max;
	inject(peer_nxt, srv_una, 0x10, NULL, 0);
	struct tcp_pcb *p = w->side[1].pcb;
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(tcp_pcb_state(p), TCP_ESTABLISHED);
	bool our_fin = s == TCP_FIN_WAIT_1 || s == TCP_FIN_WAIT_2 || s == TCP_CLOSING ||
		       s == TCP_TIME_WAIT || s == TCP_LAST_ACK;
	bool peer_fin = s == TCP_CLOSE_WAIT || s == TCP_LAST_ACK || s == TCP_CLOSING ||
			s == TCP_TIME_WAIT;
	bool fin_acked = s == TCP_FIN_WAIT_2 || s == TCP_TIME_WAIT;
	if (peer_fin && s == TCP_CLOSE_WAIT) {
		inject(peer_nxt++, srv_una, 0x11, NULL, 0);
	} else if (s == TCP_LAST_ACK) {
		inject(peer_nxt++, srv_una, 0x11, NULL, 0);
		ck_assert_int_eq(tcp_shutdown(p, false, true), 0);
		srv_max++;
	} else if (our_fin) {
		ck_assert_int_eq(tcp_shutdown(p, false, true), 0);
		srv_max++;
		if (fin_acked) {
			inject(peer_nxt, srv_max, 0x10, NULL, 0);
			srv_una = srv_max;
		}
		if (peer_fin)
			inject(peer_nxt++, srv_una, 0x11, NULL, 0);
	}
	ck_assert_msg(tcp_pcb_state(p) == s, "wanted %s, got %s", tcp_state_name(s),
		      tcp_state_name(tcp_pcb_state(p)));
	ck_assert_int_eq(w->side[1].err, 0);
	th_capture_clear(w);
}

static enum tcp_state now_state(void)
{
	return w->side[1].pcb ? tcp_pcb_state(w->side[1].pcb) : TCP_CLOSED;
}

static void assert_unchanged(enum tcp_state s)
{
	if (s == TCP_SYN_RCVD)
		ck_assert_uint_eq(pcbs(), 2);
	else
		ck_assert_int_eq(now_state(), s);
	ck_assert_int_eq(w->side[1].err, 0);
}

/* One ACK whose acknowledgment is still peer_nxt: nothing was accepted. */
static void assert_plain_ack(void)
{
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x10);
	ck_assert_uint_eq(t.ack, peer_nxt);
	ck_assert_uint_eq(t.seq, srv_max);
	ck_assert_uint_eq(t.len, 0);
}

static const enum tcp_state synchronized[] = {
	TCP_SYN_RCVD, TCP_ESTABLISHED, TCP_FIN_WAIT_1, TCP_FIN_WAIT_2, TCP_CLOSE_WAIT,
	TCP_CLOSING, TCP_LAST_ACK, TCP_TIME_WAIT
};
#define NSYNC (int)(sizeof(synchronized) / sizeof(synchronized[0]))

/* The state counters are transitions (tcp_set_state, as Linux's
 * tcp_set_state): curr_estab counts ESTABLISHED and CLOSE_WAIT only, a
 * passive open is counted once (its SYN), a reset in SYN_RCVD is a failed
 * attempt; the transition table refuses what RFC 9293 has no arrow for. */
START_TEST(state_counters_follow_transitions)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_eq(c->passive_opens, 1);
	ck_assert_uint_eq(c->active_opens, 0);
	ck_assert_uint_eq(c->curr_estab, s == TCP_ESTABLISHED || s == TCP_CLOSE_WAIT);
	inject(peer_nxt, 0, 0x04, NULL, 0);   /* RST at RCV.NXT */
	ck_assert_uint_eq(c->curr_estab, 0);
	ck_assert_uint_eq(c->attempt_fails, s == TCP_SYN_RCVD);
	ck_assert(tcp_state_change_allowed(TCP_CLOSE_WAIT, TCP_LAST_ACK));
	ck_assert(tcp_state_change_allowed(TCP_SYN_RCVD, TCP_FIN_WAIT_1));
	ck_assert(!tcp_state_change_allowed(TCP_LISTEN, TCP_ESTABLISHED));
	ck_assert(!tcp_state_change_allowed(TCP_LAST_ACK, TCP_TIME_WAIT));
	ck_assert(!tcp_state_change_allowed(TCP_TIME_WAIT, TCP_ESTABLISHED));
	ck_assert(!tcp_state_change_allowed(TCP_FIN_WAIT_2, TCP_CLOSE_WAIT));
}
END_TEST

/* RFC 5961 3.2 / RFC 9293: RST at exactly RCV.NXT ends the connection. */
START_TEST(rst_exact_resets)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	inject(peer_nxt, 0, 0x04, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);           /* never answer a RST */
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_rst_accepted, 1);
	switch (s) {
	case TCP_SYN_RCVD:                            /* back to LISTEN, listener kept */
		ck_assert_uint_eq(pcbs(), 1);
		break;
	case TCP_TIME_WAIT:                           /* the app's side was over already */
		ck_assert_int_eq(w->side[1].err, 0);
		ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_CLOSED);
		ck_assert_uint_eq(pcbs(), 2);             /* held until the app closes it */
		tcp_close(w->side[1].pcb);
		ck_assert_uint_eq(pcbs(), 1);
		break;
	default:
		ck_assert_int_eq(w->side[1].err, ECONNRESET);
		ck_assert_ptr_null(w->side[1].pcb);
		ck_assert_uint_eq(pcbs(), 1);
	}
	/* the tuple is free again: a new SYN from the same port gets a SYN-ACK */
	inject(peer_nxt + 100000, 0, 0x02, NULL, 0);
	ck_assert_uint_eq(only_reply().flags, 0x12);
}
END_TEST

/* RFC 5961 3.2: in window but not exact: challenge ACK, nothing changes. */
START_TEST(rst_in_window_challenged)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	inject(peer_nxt + 1000, 0, 0x04, NULL, 0);
	assert_plain_ack();
	assert_unchanged(s);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_eq(c->tx_challenge_acks, 1);
	ck_assert_uint_eq(c->rx_rst_ignored, 1);
	ck_assert_uint_eq(c->rx_rst_accepted, 0);
}
END_TEST

/* RFC 9293 3.10.7.4: an unacceptable RST is dropped without a word. */
START_TEST(rst_out_of_window_ignored)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	inject(peer_nxt + 0x40000000u, 0, 0x04, NULL, 0);
	inject(peer_nxt - 1, 0, 0x14, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);
	assert_unchanged(s);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_out_of_window, 2);
}
END_TEST

/* RFC 5961 4.2: a SYN in a synchronized state, in window: challenge ACK. */
START_TEST(syn_in_window_challenged)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	inject(peer_nxt + 10, 0, 0x02, NULL, 0);
	if (s == TCP_TIME_WAIT) {
		/* above RCV.NXT: a new incarnation (RFC 6191, as Linux); the
		 * listener answers with a sequence space above the old one */
		struct th_tcp t = only_reply();
		ck_assert_uint_eq(t.flags, 0x12);
		ck_assert_uint_eq(t.ack, peer_nxt + 11);
		ck_assert_uint_eq(t.seq, srv_max + 65535 + 2);
		ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_CLOSED);   /* old one, app holds it */
		ck_assert_uint_eq(pcbs(), 3);
		ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_challenge_acks, 0);
		return;
	}
	assert_plain_ack();
	assert_unchanged(s);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_challenge_acks, 1);
}
END_TEST

/* A SYN at exactly RCV.NXT in TIME_WAIT could be an old duplicate: challenged. */
START_TEST(syn_at_rcv_nxt_in_time_wait_challenged)
{
	drive_to(TCP_TIME_WAIT);
	/* the send buffer is released in TIME_WAIT; writes are refused */
	ck_assert_uint_eq(tcp_sndbuf_free(w->side[1].pcb), 0);
	ck_assert_int_eq(tcp_write(w->side[1].pcb, "x", 1, 0), -EPIPE);
	tcp_set_bufsizes(w->side[1].pcb, 0, 9000);   /* harmless */
	inject(peer_nxt, 0, 0x02, NULL, 0);
	assert_plain_ack();
	assert_unchanged(TCP_TIME_WAIT);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_challenge_acks, 1);
}
END_TEST

/* The kernel picks our ports without knowing our TIME_WAIT: connecting on a
 * tuple in TIME_WAIT reuses it (as tcp_tw_reuse) with a larger ISN. */
static bool both_connected(struct th_wire *x)
{
	return x->side[0].connected && x->side[1].connected;
}

START_TEST(connect_reuses_time_wait_tuple)
{
	th_init(w, &sa, &sb, 3);
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4000, SRV);
	ck_assert(th_run_until(w, both_connected, 100));
	struct tcp_pcb *old = w->side[0].pcb;
	struct tcp_pcb_info in;
	tcp_pcb_get_info(old, &in);
	uint32_t old_fin_end = in.snd_nxt + 1;
	tcp_close(old);
	th_run(w, 10);
	ck_assert(w->side[1].fin);
	tcp_close(w->side[1].pcb);
	th_run(w, 10);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 1);   /* TIME_WAIT */
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);   /* the listener */
	w->side[0].connected = w->side[1].connected = false;
	w->side[0].pcb = w->side[1].pcb = NULL;
	w->capture = true;
	struct tcp_pcb *p = tcp_pcb_new(w->side[0].tcp);
	tcp_set_callbacks(p, &th_callbacks, &w->side[0]);
	ck_assert_int_eq(tcp_bind(p, w->side[0].nif.ip, htons(4000)), 0);
	ck_assert_int_eq(tcp_connect(p, w->side[1].nif.ip, htons(SRV), 0, w->side[1].nif.mac), 0);
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x02);
	ck_assert_uint_eq(t.seq, old_fin_end + 65535 + 2);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 1);   /* TIME_WAIT pcb gone */
	struct ring_buf *syn = w->captured[0];
	w->ncaptured = 0;
	w->capture = false;
	stack_input(w->side[1].st, &w->side[1].nif, syn);
	ck_assert(th_run_until(w, both_connected, 100));
	w->side[0].tx_goal = 3000;
	th_run(w, 20);
	ck_assert_uint_eq(w->side[1].rx_bytes, 3000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

/* Out of window: the duplicate-segment ACK of RFC 9293, state unchanged. */
START_TEST(syn_out_of_window_acked)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	inject(peer_nxt - 0x40000000u, 0, 0x02, NULL, 0);
	assert_plain_ack();
	assert_unchanged(s);
}
END_TEST

/* ACK of something never sent: SYN_RCVD answers RST (seq = SEG.ACK), the
 * others an ACK, and the segment's data is not taken. */
START_TEST(ack_too_new)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	uint8_t d[10] = { 0 };
	inject(peer_nxt, srv_max + 1000, 0x18, d, sizeof(d));
	if (s == TCP_SYN_RCVD) {
		struct th_tcp t = only_reply();
		ck_assert_uint_eq(t.flags, 0x04);
		ck_assert_uint_eq(t.seq, srv_max + 1000);
	} else {
		assert_plain_ack();
	}
	assert_unchanged(s);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
}
END_TEST

/* RFC 5961 5.2: an ACK older than SND.UNA - MAX.SND.WND is challenged. */
START_TEST(ack_too_old)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	uint8_t d[10] = { 0 };
	inject(peer_nxt, srv_una - 0x20000000u, 0x18, d, sizeof(d));
	if (s == TCP_SYN_RCVD) {
		struct th_tcp t = only_reply();
		ck_assert_uint_eq(t.flags, 0x04);
		ck_assert_uint_eq(t.seq, srv_una - 0x20000000u);
	} else {
		assert_plain_ack();
		ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_challenge_acks, 1);
	}
	assert_unchanged(s);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
}
END_TEST

/* Data far outside the receive window: ACK, nothing delivered. */
START_TEST(data_out_of_window_acked)
{
	enum tcp_state s = synchronized[_i];
	drive_to(s);
	uint8_t d[10] = { 0 };
	inject(peer_nxt + 0x40000000u, srv_una, 0x18, d, sizeof(d));
	assert_plain_ack();
	assert_unchanged(s);
	ck_assert_uint_eq(w->side[1].rx_bytes, 0);
}
END_TEST

/* SYN_SENT (RFC 9293 3.10.7.3): side 1 connects, the test answers. */
static uint32_t syn_sent(struct tcp_pcb **out)
{
	th_init(w, &sa, &sb, 7);
	w->capture = true;
	struct tcp_pcb *p = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(p, &th_callbacks, &w->side[1]);
	ck_assert_int_eq(tcp_bind(p, w->side[1].nif.ip, htons(SRV)), 0);
	ck_assert_int_eq(tcp_connect(p, w->side[0].nif.ip, htons(PEER), 0, w->side[0].nif.mac), 0);
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x02);
	th_capture_clear(w);
	*out = p;
	return t.seq;
}

START_TEST(syn_sent_reactions)
{
	struct tcp_pcb *p;
	uint32_t iss = syn_sent(&p);
	inject(5000, 0, 0x04, NULL, 0);                 /* RST without ACK: dropped */
	inject(5000, iss + 7, 0x14, NULL, 0);           /* RST with a bad ACK: dropped */
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_int_eq(tcp_pcb_state(p), TCP_SYN_SENT);
	inject(5000, iss, 0x10, NULL, 0);               /* bad ACK: RST seq = SEG.ACK */
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x04);
	ck_assert_uint_eq(t.seq, iss);
	ck_assert_int_eq(tcp_pcb_state(p), TCP_SYN_SENT);
	th_capture_clear(w);
	inject(5000, iss + 1, 0x14, NULL, 0);           /* RST with our SYN acked: refused */
	ck_assert_int_eq(w->side[1].err, ECONNREFUSED);
	ck_assert_uint_eq(pcbs(), 0);
	ck_assert_uint_eq(w->ncaptured, 0);
}
END_TEST

START_TEST(syn_sent_simultaneous_open)
{
	struct tcp_pcb *p;
	uint32_t iss = syn_sent(&p);
	inject(5000, 0, 0x02, NULL, 0);                 /* a bare SYN: simultaneous open */
	ck_assert_int_eq(tcp_pcb_state(p), TCP_SYN_RCVD);
	struct th_tcp t = only_reply();
	ck_assert_uint_eq(t.flags, 0x12);
	ck_assert_uint_eq(t.seq, iss);
	ck_assert_uint_eq(t.ack, 5001);
	th_capture_clear(w);
	inject(5001, iss + 1, 0x10, NULL, 0);
	ck_assert_int_eq(tcp_pcb_state(p), TCP_ESTABLISHED);
	ck_assert(w->side[1].connected);
}
END_TEST

/* ---- keepalive (test clock) ---- */

START_TEST(keepalive_silent_peer_times_out)
{
	sb.keepalive_idle_ms = 1000;
	sb.keepalive_intvl_ms = 200;
	sb.keepalive_probes = 3;
	drive_to(TCP_ESTABLISHED);
	struct tcp_pcb *p = w->side[1].pcb;
	uint64_t t0 = w->now;
	tcp_set_keepalive(p, true);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	uint64_t probe_at[3];
	for (unsigned k = 0; k < 3; k++) {
		while (c->tx_keepalives == k && w->now < t0 + 5000)
			th_step(w);
		ck_assert_uint_eq(c->tx_keepalives, k + 1);
		probe_at[k] = w->now;
		struct th_tcp t = only_reply();
		/* seq one below SND.NXT, no data: the peer must answer with an ACK */
		ck_assert_uint_eq(t.flags, 0x10);
		ck_assert_uint_eq(t.seq, srv_max - 1);
		ck_assert_uint_eq(t.len, 0);
		ck_assert_uint_eq(t.ack, peer_nxt);
		th_capture_clear(w);
	}
	/* within one timer resolution of idle, idle + intvl, idle + 2 intvl */
	ck_assert_uint_ge(probe_at[0] - t0, 1000);
	ck_assert_uint_le(probe_at[0] - t0, 1000 + 10);
	ck_assert_uint_ge(probe_at[1] - probe_at[0], 200);
	ck_assert_uint_le(probe_at[1] - probe_at[0], 210);
	ck_assert_uint_ge(probe_at[2] - probe_at[1], 200);
	ck_assert_uint_le(probe_at[2] - probe_at[1], 210);
	ck_assert_int_eq(w->side[1].err, 0);
	while (!w->side[1].err && w->now < probe_at[2] + 1000)
		th_step(w);
	ck_assert_int_eq(w->side[1].err, ETIMEDOUT);
	ck_assert_uint_ge(w->now - probe_at[2], 200);
	ck_assert_uint_le(w->now - probe_at[2], 211);
	ck_assert_uint_eq(c->tx_keepalives, 3);
	struct th_tcp t = only_reply();                 /* the peer is told: RST */
	ck_assert_uint_eq(t.flags & 0x04, 0x04);
	ck_assert_uint_eq(pcbs(), 1);
}
END_TEST

START_TEST(keepalive_answered_keeps_connection)
{
	sa.keepalive_idle_ms = sb.keepalive_idle_ms = 1000;
	sa.keepalive_intvl_ms = sb.keepalive_intvl_ms = 200;
	sa.keepalive_probes = sb.keepalive_probes = 2;
	th_init(w, &sa, &sb, 9);
	th_listen(&w->side[1], SRV);
	th_connect(w, 0, 4000, SRV);
	th_run(w, 50);
	ck_assert(w->side[0].connected && w->side[1].connected);
	tcp_set_keepalive(w->side[1].pcb, true);
	th_run(w, 10000);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	/* one probe per idle period, each answered: never a second in a row */
	ck_assert_uint_ge(c->tx_keepalives, 9);
	ck_assert_uint_le(c->tx_keepalives, 10);
	ck_assert_int_eq(tcp_pcb_state(w->side[1].pcb), TCP_ESTABLISHED);
	ck_assert_int_eq(w->side[1].err, 0);
	ck_assert_int_eq(w->side[0].err, 0);
	/* data still flows afterwards */
	w->side[0].tx_goal = 5000;
	th_run(w, 50);
	ck_assert_uint_eq(w->side[1].rx_bytes, 5000);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
}
END_TEST

/* ---- a listener's share group (verbs: every sharer sees each new flow) ---- */

/* Takes the flows from even remote ports only, as a member of a share
 * group whose spread gives it those. */
static bool admit_even_ports(void *arg, const struct stack_netif *nif, uint32_t remote_ip, uint16_t remote_port)
{
	(void)nif;
	(void)remote_ip;
	unsigned *asked = arg;
	(*asked)++;
	return (ntohs(remote_port) & 1) == 0;
}

START_TEST(a_sharing_listener_answers_only_the_flows_admitted)
{
	th_init(w, &sa, &sb, 7);
	w->capture = true;
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV)), 0);
	ck_assert_int_eq(tcp_listen(l, 100), 0);
	static const struct tcp_callbacks cb = { .admit = admit_even_ports };
	unsigned asked = 0;
	tcp_set_callbacks(l, &cb, &asked);
	for (uint16_t i = 0; i < 10; i++)
		th_inject(w, 1, htons((uint16_t)(PEER + i)), htons(SRV), 100, 0, 0x02, 65535, NULL, 0, NULL, 0);
	/* Five SYN-ACKs (the even ports); no reset to the others. */
	ck_assert_uint_eq(w->ncaptured, 5);
	for (unsigned i = 0; i < 5; i++) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[i], &t));
		ck_assert_uint_eq(t.flags, 0x12);
	}
	ck_assert_uint_eq(asked, 10);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_share_other, 5);
	ck_assert_uint_eq(pcbs(), 1 + 5);
	/* An ACK of a handshake another sharer took: no reset from here
	 * either (that sharer answers it). */
	th_capture_clear(w);
	uint16_t odd = (PEER & 1) ? PEER : PEER + 1, even = (uint16_t)(odd + 21);
	th_inject(w, 1, htons(odd), htons(SRV), 101, 12345, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_share_other, 6);
	/* The same ACK on a flow of ours finds no cookie: reset, as before. */
	th_inject(w, 1, htons(even), htons(SRV), 101, 12345, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 1);
	tcp_close(l);
}
END_TEST

/* ---- VMA_TCP_MAX_SYN_RATE and the backlog ---- */

START_TEST(syn_rate_limited_per_second)
{
	sb.max_syn_rate = 5;
	th_init(w, &sa, &sb, 7);
	w->capture = true;
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV)), 0);
	ck_assert_int_eq(tcp_listen(l, 100), 0);
	for (uint16_t i = 0; i < 12; i++)
		th_inject(w, 1, htons((uint16_t)(PEER + i)), htons(SRV), 100, 0, 0x02, 65535, NULL, 0,
			  NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 5);              /* only five SYN-ACKs */
	for (unsigned i = 0; i < 5; i++) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[i], &t));
		ck_assert_uint_eq(t.flags, 0x12);
	}
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_syn_rate_limited, 7);
	ck_assert_uint_eq(pcbs(), 6);
	th_capture_clear(w);
	th_run(w, 999);                                   /* still inside that second */
	th_capture_clear(w);                              /* (SYN-ACK retransmissions) */
	th_inject(w, 1, htons(PEER + 100), htons(SRV), 100, 0, 0x02, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 0);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_syn_rate_limited, 8);
	th_run(w, 2);                                     /* a new second: allowed again */
	th_capture_clear(w);
	th_inject(w, 1, htons(PEER + 101), htons(SRV), 100, 0, 0x02, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(only_reply().flags, 0x12);
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->rx_syn_rate_limited, 8);
	tcp_close(l);
}
END_TEST

/* SYN queue full (a phantom half-open child fills backlog 1): the next SYN
 * is answered with a SYN cookie and the client connects at once, with no
 * state kept until its ACK; the connection works both ways. */
START_TEST(syn_queue_full_answered_with_cookie)
{
	th_init(w, &sa, &sb, 7);
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &th_callbacks, &w->side[1]);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV)), 0);
	ck_assert_int_eq(tcp_listen(l, 1), 0);
	w->capture = true;
	inject(PEER_ISN, 0, 0x02, NULL, 0);
	ck_assert_uint_eq(only_reply().flags, 0x12);
	th_capture_clear(w);
	w->capture = false;
	unsigned before = pcbs();
	struct tcp_pcb *client = th_connect(w, 0, 4000, SRV);
	th_run(w, 5);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_eq(c->tx_syncookies, 1);
	ck_assert_uint_eq(c->rx_syncookies_ok, 1);
	ck_assert(w->side[0].connected && w->side[1].connected);
	ck_assert_uint_eq(pcbs(), before + 1);   /* the child, made from the ACK */
	struct tcp_pcb_info in;
	tcp_pcb_get_info(client, &in);
	ck_assert_uint_eq(in.retransmits, 0);
	/* data both ways over the cookie connection */
	w->side[0].tx_goal = 200000;
	w->side[1].tx_goal = 100000;
	th_pump(&w->side[0]);
	th_pump(&w->side[1]);
	th_run(w, 2000);
	ck_assert_uint_eq(w->side[1].rx_bytes, 200000);
	ck_assert_uint_eq(w->side[0].rx_bytes, 100000);
	ck_assert_uint_eq(w->side[0].rx_bad + w->side[1].rx_bad, 0);
	ck_assert_int_eq(w->side[0].err, 0);
	tcp_close(l);
}
END_TEST

/* A SYN flood against a small backlog keeps no state beyond the backlog,
 * and ACKs with forged, tampered or stale cookies are refused with a
 * reset and make nothing. */
START_TEST(syn_flood_keeps_no_state)
{
	th_init(w, &sa, &sb, 7);
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &th_callbacks, &w->side[1]);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV)), 0);
	ck_assert_int_eq(tcp_listen(l, 4), 0);
	w->capture = true;
	for (uint16_t i = 0; i < 200; i++)
		th_inject(w, 1, htons((uint16_t)(PEER + i)), htons(SRV), 1000u * i, 0, 0x02, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(w->ncaptured, 200);              /* every SYN answered */
	ck_assert_uint_eq(pcbs(), 1 + 4);                  /* the listener and the backlog's children */
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_eq(c->tx_syncookies, 196);
	/* the last SYN-ACK's cookie, echoed correctly, makes a connection */
	struct th_tcp t;
	ck_assert(th_parse(w->captured[199], &t));
	ck_assert_uint_eq(t.flags, 0x12);
	uint32_t cookie = t.seq;
	th_capture_clear(w);
	/* forged: wrong cookie, wrong peer ISN, another port */
	th_inject(w, 1, htons(PEER + 199), htons(SRV), 1000u * 199 + 1, cookie + 2, 0x10, 65535, NULL, 0, NULL, 0);
	th_inject(w, 1, htons(PEER + 199), htons(SRV), 1000u * 199 + 5, cookie + 1, 0x10, 65535, NULL, 0, NULL, 0);
	th_inject(w, 1, htons(PEER + 300), htons(SRV), 1000u * 199 + 1, cookie + 1, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(c->rx_syncookies_bad, 3);
	ck_assert_uint_eq(w->ncaptured, 3);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert(th_parse(w->captured[i], &t));
		ck_assert_uint_eq(t.flags & 0x04, 0x04);    /* RST */
	}
	ck_assert_uint_eq(pcbs(), 1 + 4);
	th_capture_clear(w);
	th_inject(w, 1, htons(PEER + 199), htons(SRV), 1000u * 199 + 1, cookie + 1, 0x10, 65535, NULL, 0, "hi", 2);
	ck_assert_uint_eq(c->rx_syncookies_ok, 1);
	ck_assert_uint_eq(pcbs(), 1 + 5);
	ck_assert_uint_eq(w->side[1].rx_bytes, 2);         /* the ACK's data went to the child */
	th_capture_clear(w);
	/* two cookie periods (128 s) later the same echo is stale */
	th_inject(w, 1, htons(PEER + 198), htons(SRV), 1000u * 198, 0, 0x02, 65535, NULL, 0, NULL, 0);
	ck_assert(th_parse(w->captured[0], &t));
	uint32_t old = t.seq;
	th_capture_clear(w);
	w->drop_all = true;                                 /* the half-open children's retransmissions go nowhere */
	th_run(w, 129000);
	w->drop_all = false;
	th_capture_clear(w);
	th_inject(w, 1, htons(PEER + 198), htons(SRV), 1000u * 198 + 1, old + 1, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert_uint_eq(c->rx_syncookies_bad, 4);
	th_capture_clear(w);
	tcp_close(l);
}
END_TEST

/* The accept queue holds backlog + 1 established children (Linux): past
 * that a SYN and a handshake-ending ACK are dropped, and the client's
 * retransmission gets in once the application accepted one. */
static unsigned accepted_calls;
static int count_accept(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	(void)arg;
	(void)listener;
	accepted_calls++;
	tcp_set_callbacks(child, &th_callbacks, &w->side[1]);
	return 0;
}

START_TEST(accept_queue_bounded)
{
	th_init(w, &sa, &sb, 7);
	static const struct tcp_callbacks lcb = { .accept = count_accept };
	accepted_calls = 0;
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &lcb, &w->side[1]);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV)), 0);
	ck_assert_int_eq(tcp_listen(l, 2), 0);
	struct tcp_pcb *cl[6];
	for (int i = 0; i < 6; i++) {   /* one at a time: the SYN queue never overflows */
		cl[i] = th_connect(w, 0, (uint16_t)(4000 + i), SRV);
		th_run(w, 10);
	}
	ck_assert_uint_eq(accepted_calls, 3);
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	ck_assert_uint_ge(c->rx_accept_queue_full, 3);
	unsigned synsent = 0;
	for (int i = 0; i < 6; i++)
		synsent += tcp_pcb_state(cl[i]) == TCP_SYN_SENT;
	ck_assert_uint_eq(synsent, 3);                      /* their SYNs dropped */
	/* the application accepts one: a retransmitted SYN gets in (1 s RTO) */
	tcp_listen_accepted(l);
	th_run(w, 1500);
	ck_assert_uint_eq(accepted_calls, 4);
	tcp_listen_accepted(l);
	tcp_listen_accepted(l);
	tcp_listen_accepted(l);
	th_run(w, 8000);
	ck_assert_uint_eq(accepted_calls, 6);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(tcp_pcb_state(cl[i]), TCP_ESTABLISHED);
	tcp_close(l);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_states");
	TCase *t = tcase_create("crafted_every_state");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_loop_test(t, rst_exact_resets, 0, NSYNC);
	tcase_add_loop_test(t, state_counters_follow_transitions, 0, NSYNC);
	tcase_add_loop_test(t, rst_in_window_challenged, 0, NSYNC);
	tcase_add_loop_test(t, rst_out_of_window_ignored, 0, NSYNC);
	tcase_add_loop_test(t, syn_in_window_challenged, 0, NSYNC);
	tcase_add_loop_test(t, syn_out_of_window_acked, 0, NSYNC);
	tcase_add_loop_test(t, ack_too_new, 0, NSYNC);
	tcase_add_loop_test(t, ack_too_old, 0, NSYNC);
	tcase_add_loop_test(t, data_out_of_window_acked, 0, NSYNC);
	tcase_add_test(t, syn_sent_reactions);
	tcase_add_test(t, syn_sent_simultaneous_open);
	tcase_add_test(t, syn_at_rcv_nxt_in_time_wait_challenged);
	tcase_add_test(t, connect_reuses_time_wait_tuple);
	suite_add_tcase(s, t);
	TCase *k = tcase_create("keepalive_and_listen");
	tcase_add_checked_fixture(k, setup, teardown);
	tcase_add_test(k, keepalive_silent_peer_times_out);
	tcase_add_test(k, keepalive_answered_keeps_connection);
	tcase_add_test(k, a_sharing_listener_answers_only_the_flows_admitted);
	tcase_add_test(k, syn_rate_limited_per_second);
	tcase_add_test(k, syn_queue_full_answered_with_cookie);
	tcase_add_test(k, syn_flood_keeps_no_state);
	tcase_add_test(k, accept_queue_bounded);
	suite_add_tcase(s, k);
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
