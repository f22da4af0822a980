/* Scale and endurance over the in-memory wire: 1000 concurrent connections
 * through the hashed demux, and a 32 MiB full-duplex transfer on a lossy,
 * duplicating, reordering wire. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sa.time_wait_ms = 1000;
	sb = sa;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

/* ---- 1000 connections ---- */

#define NCONN 1000
#define CONN_BYTES 3000u
#define CLIENT_PORT0 10000
#define SRV_PORT 80

struct conn {
	struct tcp_pcb *pcb;
	unsigned idx;
	uint32_t rx, rx_bad;
	bool fin, connected, closed;
	int err;
};

static struct conn cli[NCONN], srv[NCONN];
static unsigned accepted;

static uint8_t conn_byte(unsigned idx, uint32_t off)
{
	return th_pattern((uint64_t)idx * 1000003u + off);
}

static void c_recv(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	struct conn *c = arg;
	if (!buf) {
		c->fin = true;
		c->closed = true;
		tcp_close(pcb);   /* both sides close on the peer's FIN */
		return;
	}
	uint32_t total = buf->tot_len;
	for (struct ring_buf *b = buf; b; b = b->next)
		for (uint32_t i = 0; i < b->len; i++, c->rx++)
			if (b->data[i] != conn_byte(c->idx, c->rx))
				c->rx_bad++;
	ring_buf_free(buf);
	tcp_recved(pcb, total);
}

static void c_err(void *arg, int err)
{
	((struct conn *)arg)->err = err;
}

static void c_connected(void *arg, struct tcp_pcb *pcb)
{
	struct conn *c = arg;
	uint8_t d[CONN_BYTES];
	c->connected = true;
	for (uint32_t i = 0; i < CONN_BYTES; i++)
		d[i] = conn_byte(c->idx, i);
	ck_assert_int_eq(tcp_write(pcb, d, CONN_BYTES, 0), (int)CONN_BYTES);
	ck_assert_int_eq(tcp_shutdown(pcb, false, true), 0);
}

static const struct tcp_callbacks conn_cb = {
	.recv = c_recv, .err = c_err, .connected = c_connected,
};

static int s_accept(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	(void)arg; (void)listener;
	uint16_t rport;
	tcp_pcb_get_addr(child, NULL, NULL, NULL, &rport);
	unsigned idx = ntohs(rport) - CLIENT_PORT0;
	ck_assert_uint_lt(idx, NCONN);
	ck_assert_ptr_null(srv[idx].pcb);
	srv[idx] = (struct conn){ .pcb = child, .idx = idx, .connected = true };
	tcp_set_callbacks(child, &conn_cb, &srv[idx]);
	accepted++;
	return 0;
}

static const struct tcp_callbacks listen_cb = { .accept = s_accept };

static bool all_done(struct th_wire *x)
{
	(void)x;
	for (unsigned i = 0; i < NCONN; i++)
		if (!cli[i].closed || !srv[i].closed)
			return false;
	return tcp_ctx_pcb_count(x->side[0].tcp) == 0 && tcp_ctx_pcb_count(x->side[1].tcp) == 1;
}

START_TEST(thousand_connections)
{
	memset(cli, 0, sizeof(cli));
	memset(srv, 0, sizeof(srv));
	accepted = 0;
	th_init(w, &sa, &sb, 11);
	w->reorder_ppm = 20000;
	struct tcp_pcb *l = tcp_pcb_new(w->side[1].tcp);
	tcp_set_callbacks(l, &listen_cb, NULL);
	ck_assert_int_eq(tcp_bind(l, 0, htons(SRV_PORT)), 0);
	ck_assert_int_eq(tcp_listen(l, NCONN), 0);
	struct th_side *a = &w->side[0], *b = &w->side[1];
	for (unsigned i = 0; i < NCONN; i++) {
		cli[i].idx = i;
		cli[i].pcb = tcp_pcb_new(a->tcp);
		ck_assert_ptr_nonnull(cli[i].pcb);
		tcp_set_callbacks(cli[i].pcb, &conn_cb, &cli[i]);
		ck_assert_int_eq(tcp_bind(cli[i].pcb, a->nif.ip, htons((uint16_t)(CLIENT_PORT0 + i))), 0);
		ck_assert_int_eq(tcp_connect(cli[i].pcb, b->nif.ip, htons(SRV_PORT), 0, b->nif.mac), 0);
		if (i % 100 == 99)
			th_step(w);   /* SYNs in bursts of 100 */
	}
	/* a live 4-tuple cannot be connected twice (binds only conflict with
	 * unconnected pcbs: port choice is the socket layer's job) */
	ck_assert_int_eq(tcp_pcb_state(cli[NCONN - 1].pcb), TCP_SYN_SENT);
	struct tcp_pcb *dup = tcp_pcb_new(a->tcp);
	ck_assert_int_eq(tcp_bind(dup, a->nif.ip, htons(CLIENT_PORT0 + NCONN - 1)), 0);
	ck_assert_int_eq(tcp_connect(dup, b->nif.ip, htons(SRV_PORT), 0, b->nif.mac), -EADDRNOTAVAIL);
	struct tcp_pcb *dup2 = tcp_pcb_new(a->tcp);
	ck_assert_int_eq(tcp_bind(dup2, 0, htons(CLIENT_PORT0 + NCONN - 1)), -EADDRINUSE);
	tcp_abort(dup2);
	tcp_abort(dup);
	ck_assert(th_run_until(w, all_done, 5000));
	ck_assert_uint_eq(accepted, NCONN);
	for (unsigned i = 0; i < NCONN; i++) {
		ck_assert_uint_eq(srv[i].rx, CONN_BYTES);
		ck_assert_uint_eq(srv[i].rx_bad, 0);
		ck_assert_uint_eq(cli[i].rx, 0);
		ck_assert(cli[i].fin && srv[i].fin);
		ck_assert_int_eq(cli[i].err, 0);
		ck_assert_int_eq(srv[i].err, 0);
	}
	/* O(1) demux: with 1000 pcbs a list would average hundreds of steps */
	for (int s = 0; s < 2; s++) {
		const struct tcp_counters *c = tcp_ctx_counters(w->side[s].tcp);
		ck_assert_uint_gt(c->lookups, 4 * NCONN);
		double avg = (double)c->lookup_steps / (double)c->lookups;
		ck_assert_msg(avg < 4.0, "side %d: %.2f chain steps per lookup", s, avg);
		ck_assert_uint_eq(c->rx_no_pcb, 0);
	}
	tcp_close(l);
	ck_assert_uint_eq(tcp_ctx_pcb_count(b->tcp), 0);
}
END_TEST

/* ---- 32 MiB each way at once, 2% loss + 2% duplication + reordering ---- */

/* ---- SO_REUSEPORT listeners of one engine ---- */

#define RP_LISTENERS 4
#define RP_CONNS 64
static unsigned rp_accepted[RP_LISTENERS], rp_total;
static struct tcp_pcb *rp_children[RP_CONNS];

static int rp_accept(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	(void)listener;
	(*(unsigned *)arg)++;
	tcp_set_callbacks(child, NULL, NULL);
	if (rp_total < RP_CONNS)
		rp_children[rp_total] = child;
	rp_total++;
	return 0;
}

static const struct tcp_callbacks rp_listen_cb = { .accept = rp_accept };
static const struct tcp_callbacks rp_client_cb = { 0 };

static bool rp_all_accepted(struct th_wire *x)
{
	(void)x;
	return rp_total == RP_CONNS;
}

/* Threads each with an SO_REUSEPORT listener on one port, in one lane:
 * the listeners share the address, and the connections spread over them
 * (each SYN to one, chosen by its source: the same for a retransmitted
 * one). Without SO_REUSEPORT a second listener cannot bind. */
START_TEST(reuseport_listeners)
{
	th_init(w, &sa, &sb, 12);
	struct th_side *a = &w->side[0], *b = &w->side[1];
	memset(rp_accepted, 0, sizeof(rp_accepted));
	rp_total = 0;
	struct tcp_pcb *l[RP_LISTENERS];
	for (int i = 0; i < RP_LISTENERS; i++) {
		l[i] = tcp_pcb_new(b->tcp);
		tcp_set_callbacks(l[i], &rp_listen_cb, &rp_accepted[i]);
		tcp_pcb_set_reuseport(l[i], true);
		ck_assert_int_eq(tcp_bind(l[i], 0, htons(SRV_PORT + 1)), 0);
		ck_assert_int_eq(tcp_listen(l[i], RP_CONNS), 0);
	}
	struct tcp_pcb *plain = tcp_pcb_new(b->tcp);
	ck_assert_int_eq(tcp_bind(plain, 0, htons(SRV_PORT + 1)), -EADDRINUSE);
	tcp_abort(plain);
	struct tcp_pcb *c[RP_CONNS];
	for (unsigned i = 0; i < RP_CONNS; i++) {
		c[i] = tcp_pcb_new(a->tcp);
		tcp_set_callbacks(c[i], &rp_client_cb, NULL);
		ck_assert_int_eq(tcp_bind(c[i], a->nif.ip, htons((uint16_t)(CLIENT_PORT0 + i))), 0);
		ck_assert_int_eq(tcp_connect(c[i], b->nif.ip, htons(SRV_PORT + 1), 0, b->nif.mac), 0);
	}
	ck_assert(th_run_until(w, rp_all_accepted, 2000));
	/* 64 connections over 4 listeners: each took some (one took all
	 * before: the first listener found). */
	for (int i = 0; i < RP_LISTENERS; i++)
		ck_assert_uint_gt(rp_accepted[i], 4);
	for (unsigned i = 0; i < RP_CONNS; i++) {
		tcp_abort(c[i]);
		tcp_abort(rp_children[i]);
	}
	for (int i = 0; i < RP_LISTENERS; i++)
		tcp_close(l[i]);
	th_step(w);
}
END_TEST

static bool duplex_done(struct th_wire *x)
{
	return x->side[0].rx_bytes == x->side[1].tx_goal && x->side[1].rx_bytes == x->side[0].tx_goal &&
	       x->side[0].fin && x->side[1].fin;
}

static bool both_connected(struct th_wire *x)
{
	return x->side[0].connected && x->side[1].connected;
}

static void duplex(enum tcp_cc_algo cc, bool ts)
{
	sa.cc_algo = sb.cc_algo = cc;
	sa.timestamps = sb.timestamps = ts ? TCP_TS_ON : TCP_TS_OFF;
	th_init(w, &sa, &sb, 2026);
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	w->drop_ppm = 20000;
	w->dup_ppm = 20000;
	w->reorder_ppm = 30000;
	w->delay_ms = 2;
	const uint64_t goal = 32u << 20;
	for (int i = 0; i < 2; i++) {
		w->side[i].tx_goal = goal;
		w->side[i].close_when_sent = true;
	}
	ck_assert_msg(th_run_until(w, duplex_done, 3000000), "a got %llu, b got %llu",
		      (unsigned long long)w->side[0].rx_bytes, (unsigned long long)w->side[1].rx_bytes);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(w->side[i].rx_bytes, goal);
		ck_assert_uint_eq(w->side[i].rx_bad, 0);
		ck_assert_int_eq(w->side[i].err, 0);
		ck_assert_uint_gt(tcp_ctx_counters(w->side[i].tcp)->tx_retransmits, 0);
		ck_assert_uint_gt(tcp_ctx_counters(w->side[i].tcp)->rx_duplicate_bytes, 0);
	}
	w->drop_ppm = w->dup_ppm = w->reorder_ppm = 0;
	th_run(w, 3000);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(tcp_pcb_state(w->side[i].pcb), TCP_CLOSED);
		tcp_close(w->side[i].pcb);
	}
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[0].tcp), 0);
	ck_assert_uint_eq(tcp_ctx_pcb_count(w->side[1].tcp), 1);
}

START_TEST(duplex_32mib_lossy_newreno) { duplex(TCP_CC_NEWRENO, false); }
END_TEST
START_TEST(duplex_32mib_lossy_cubic_ts) { duplex(TCP_CC_CUBIC, true); }
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_scale");
	TCase *t = tcase_create("scale");
	tcase_set_timeout(t, 900);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, thousand_connections);
	tcase_add_test(t, reuseport_listeners);
	tcase_add_test(t, duplex_32mib_lossy_newreno);
	tcase_add_test(t, duplex_32mib_lossy_cubic_ts);
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
