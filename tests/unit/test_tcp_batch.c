/* Receive coalescing across a poll batch (tcp_rx_batch_begin/end,
 * VMA_GRO_STREAMS_MAX): one recv per pcb per batch with every byte in order,
 * ACKs unchanged, FIN and errors after the data, the pcb limit, and pending
 * data freed when a pcb dies. Segments are captured from side 0 and fed to
 * side 1 by hand inside a batch. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

static struct th_wire *w;
static struct tcp_settings sa, sb;

#define NCONN 3

/* What side 1's app saw on one connection, in order. */
struct rec {
	struct tcp_pcb *pcb;
	unsigned recv_calls, fin_calls;
	uint32_t bytes;
	uint8_t data[65536];
	int err;
	char events[64];         /* 'd' data, 'f' FIN, 'e' error, in arrival order */
	unsigned nevents;
	bool close_in_recv;      /* tcp_abort another pcb from recv */
	struct tcp_pcb *victim;
};

static struct rec recs[NCONN];
static struct tcp_pcb *clients[NCONN];

static void note(struct rec *r, char e)
{
	if (r->nevents < sizeof(r->events) - 1)
		r->events[r->nevents++] = e;
}

static void rec_recv(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	struct rec *r = arg;
	if (!buf) {
		r->fin_calls++;
		note(r, 'f');
		return;
	}
	r->recv_calls++;
	note(r, 'd');
	/* every buffer's tot_len covers itself and the rest of the chain */
	uint32_t total = buf->tot_len, left = total;
	for (struct ring_buf *b = buf; b; b = b->next) {
		ck_assert_uint_eq(b->tot_len, left);
		ck_assert_uint_le(r->bytes + b->len, sizeof(r->data));
		memcpy(r->data + r->bytes, b->data, b->len);
		r->bytes += b->len;
		left -= b->len;
	}
	ck_assert_uint_eq(left, 0);
	ring_buf_free(buf);
	tcp_recved(pcb, total);
	if (r->close_in_recv && r->victim) {
		tcp_abort(r->victim);
		r->victim = NULL;
	}
}

static void rec_err(void *arg, int err)
{
	struct rec *r = arg;
	r->err = err;
	note(r, 'e');
	r->pcb = NULL;
}

static const struct tcp_callbacks rec_callbacks = { .recv = rec_recv, .err = rec_err };

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	memset(recs, 0, sizeof(recs));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sa.time_wait_ms = 2000;
	sa.nodelay = true;   /* every small write is its own segment */
	sb = sa;
}

static void teardown(void)
{
	th_fini(w);
	free(w);
}

static bool both_connected(struct th_wire *x)
{
	return x->side[0].connected && x->side[1].connected;
}

static void open_conns(unsigned n)
{
	th_init(w, &sa, &sb, 77);
	th_listen(&w->side[1], 80);
	for (unsigned i = 0; i < n; i++) {
		w->side[0].connected = w->side[1].connected = false;
		th_connect(w, 0, (uint16_t)(4000 + i), 80);
		ck_assert(th_run_until(w, both_connected, 100));
		clients[i] = w->side[0].pcb;
		recs[i].pcb = w->side[1].pcb;
		tcp_set_callbacks(recs[i].pcb, &rec_callbacks, &recs[i]);
	}
	w->side[0].pcb = w->side[1].pcb = NULL;   /* the harness pump stays out */
	th_run(w, 5);
	w->capture = true;
}

static uint8_t byte_for(unsigned conn, uint32_t off)
{
	return (uint8_t)(conn * 61 + off * 7 + (off >> 8));
}

/* Client conn writes len bytes continuing its pattern at off; one segment. */
static void write_seg(unsigned conn, uint32_t off, uint32_t len)
{
	uint8_t buf[1500];
	for (uint32_t i = 0; i < len; i++)
		buf[i] = byte_for(conn, off + i);
	ck_assert_int_eq(tcp_write(clients[conn], buf, len, 0), (int)len);
}

/* Side 0's captured frames, taken off the capture list in order. */
static struct ring_buf *frames[256];
static unsigned nframes;

static void take_frames(void)
{
	nframes = 0;
	for (unsigned i = 0; i < w->ncaptured; i++)
		frames[nframes++] = w->captured[i];
	w->ncaptured = 0;
}

static void feed(unsigned i)
{
	stack_input(w->side[1].st, &w->side[1].nif, frames[i]);
	frames[i] = NULL;
}

static void check_bytes(unsigned conn, uint32_t n)
{
	ck_assert_uint_eq(recs[conn].bytes, n);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_uint_eq(recs[conn].data[i], byte_for(conn, i));
}

static unsigned acks_captured(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < w->ncaptured; i++) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[i], &t));
		if (t.flags == 0x10 && !t.len)
			n++;
	}
	return n;
}

START_TEST(batch_of_segments_one_recv)
{
	open_conns(1);
	for (unsigned i = 0; i < 10; i++)
		write_seg(0, i * 100, 100);
	take_frames();
	ck_assert_uint_eq(nframes, 10);
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(recs[0].recv_calls, 0);
	/* a new connection is in quick-ACK mode (as Linux): each segment
	 * ACKed at once, batch or not, so a starting sender's cwnd grows */
	ck_assert_uint_eq(acks_captured(), 10);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 1);
	ck_assert_uint_eq(acks_captured(), 10);
	check_bytes(0, 1000);
	const struct tcp_counters *c = tcp_ctx_counters(ctx);
	ck_assert_uint_eq(c->rx_batch_merged, 9);
	ck_assert_uint_eq(c->rx_batch_deliveries, 1);
	th_capture_clear(w);
	/* outside a batch: one recv per segment, as before; these spend the
	 * quick ACKs left */
	uint32_t off = 1000;
	for (unsigned i = 0; i < 3; i++, off += 100)
		write_seg(0, off, 100);
	take_frames();
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(recs[0].recv_calls, 4);
	check_bytes(0, off);
	th_capture_clear(w);
	for (unsigned i = 0; i < 20; i++, off += 100) {
		write_seg(0, off, 100);
		take_frames();
		feed(0);
		th_capture_clear(w);   /* side 1's ACKs */
	}
	ck_assert_uint_eq(recs[0].recv_calls, 24);
	th_run(w, 50);   /* the delayed ACK, if any, leaves */
	th_capture_clear(w);
	/* past quick-ACK mode: the ACKs the data asks for (two full-sized
	 * segments each) wait for the batch's end, and then one acknowledges
	 * all of it, as Linux ACKs a GRO aggregate once */
	for (unsigned i = 0; i < 10; i++, off += 1000)
		write_seg(0, off, 1000);
	take_frames();
	ck_assert_uint_eq(nframes, 10);
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(acks_captured(), 0);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 25);
	ck_assert_uint_eq(acks_captured(), 1);
	struct th_tcp t;
	ck_assert(th_parse(w->captured[w->ncaptured - 1], &t));
	struct tcp_pcb_info in;
	tcp_pcb_get_info(recs[0].pcb, &in);
	ck_assert_uint_eq(t.ack, in.rcv_nxt);
	check_bytes(0, off);
}
END_TEST

START_TEST(nested_batches_deliver_at_outermost_end)
{
	open_conns(1);
	for (unsigned i = 0; i < 4; i++)
		write_seg(0, i * 100, 100);
	take_frames();
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	tcp_rx_batch_begin(ctx);
	feed(0);
	feed(1);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 0);
	feed(2);
	feed(3);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 1);
	check_bytes(0, 400);
	tcp_rx_batch_end(ctx);   /* unbalanced end: ignored */
	th_capture_clear(w);
}
END_TEST

START_TEST(interleaved_pcbs_one_recv_each)
{
	open_conns(3);
	for (unsigned i = 0; i < 4; i++)
		for (unsigned c = 0; c < 3; c++)
			write_seg(c, i * 200, 200);
	take_frames();
	ck_assert_uint_eq(nframes, 12);
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	tcp_rx_batch_end(ctx);
	for (unsigned c = 0; c < 3; c++) {
		ck_assert_uint_eq(recs[c].recv_calls, 1);
		check_bytes(c, 800);
	}
	ck_assert_uint_eq(tcp_ctx_counters(ctx)->rx_batch_deliveries, 3);
	th_capture_clear(w);
}
END_TEST

START_TEST(out_of_order_fill_inside_batch)
{
	open_conns(1);
	for (unsigned i = 0; i < 5; i++)
		write_seg(0, i * 100, 100);
	take_frames();
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	feed(0);
	feed(2);   /* hole at 100..200 */
	feed(3);
	feed(1);   /* fills it: 100..400 in order */
	feed(4);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 1);
	check_bytes(0, 500);
	th_capture_clear(w);
}
END_TEST

/* The SACK blocks of the last ACK captured: count of blocks, first
 * block's edges relative to base. */
static unsigned last_ack_sack(uint32_t base, uint32_t *start, uint32_t *end)
{
	struct th_tcp t;
	ck_assert(th_parse(w->captured[w->ncaptured - 1], &t));
	for (unsigned i = 0; i < t.optlen;) {
		uint8_t kind = t.opts[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		uint8_t len = t.opts[i + 1];
		if (kind == 5 && len >= 10) {
			const uint8_t *b = t.opts + i + 2;
			*start = ((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]) - base;
			*end = ((uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 8 | b[7]) - base;
			return (len - 2u) / 8u;
		}
		i += len ? len : 1;
	}
	return 0;
}

/* A train past a hole inside one batch: the first three segments get their
 * duplicate ACK at once (a sender without SACK counts three), the rest one
 * ACK at the batch's end whose SACK block covers the whole train (Linux
 * compresses the SACKs of a train; an ACK per segment doubled the frames
 * through a lossy path). */
START_TEST(out_of_order_train_one_sack_per_batch)
{
	open_conns(1);
	th_run(w, 50);
	th_capture_clear(w);
	for (unsigned i = 0; i < 10; i++)
		write_seg(0, i * 100, 100);
	take_frames();
	ck_assert_uint_eq(nframes, 10);
	struct th_tcp t0;
	ck_assert(th_parse(frames[0], &t0));
	uint32_t base = t0.seq;
	ring_buf_free(frames[0]);   /* lost */
	frames[0] = NULL;
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 1; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(acks_captured(), 3);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(acks_captured(), 4);
	uint32_t s = 0, e = 0;
	ck_assert_uint_ge(last_ack_sack(base, &s, &e), 1);
	ck_assert_uint_eq(s, 100);
	ck_assert_uint_eq(e, 1000);
	ck_assert_uint_eq(recs[0].recv_calls, 0);
	/* outside a batch each segment that adds to the queue is ACKed */
	th_capture_clear(w);
	for (unsigned i = 0; i < 3; i++)
		write_seg(0, 1000 + i * 100, 100);
	take_frames();
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(acks_captured(), 3);
	th_capture_clear(w);
}
END_TEST

START_TEST(fin_inside_batch_after_data)
{
	open_conns(1);
	for (unsigned i = 0; i < 3; i++)
		write_seg(0, i * 100, 100);
	ck_assert_int_eq(tcp_shutdown(clients[0], false, true), 0);
	take_frames();
	ck_assert_uint_eq(nframes, 4);
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	/* the FIN flushed the data first, then came itself, inside the batch */
	ck_assert_str_eq(recs[0].events, "df");
	tcp_rx_batch_end(ctx);
	ck_assert_str_eq(recs[0].events, "df");
	check_bytes(0, 300);
	ck_assert_int_eq(tcp_pcb_state(recs[0].pcb), TCP_CLOSE_WAIT);
	th_capture_clear(w);
}
END_TEST

START_TEST(limit_flushes_oldest)
{
	sb.gro_streams_max = 2;
	open_conns(3);
	for (unsigned c = 0; c < 3; c++)
		for (unsigned i = 0; i < 2; i++)
			write_seg(c, i * 100, 100);
	take_frames();
	ck_assert_uint_eq(nframes, 6);   /* A A B B C C */
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < 4; i++)
		feed(i);
	ck_assert_uint_eq(recs[0].recv_calls + recs[1].recv_calls, 0);
	feed(4);   /* C needs a slot: A, the oldest, goes out now */
	ck_assert_uint_eq(recs[0].recv_calls, 1);
	ck_assert_uint_eq(recs[1].recv_calls, 0);
	ck_assert_uint_eq(recs[2].recv_calls, 0);
	check_bytes(0, 200);
	feed(5);
	tcp_rx_batch_end(ctx);
	for (unsigned c = 0; c < 3; c++) {
		ck_assert_uint_eq(recs[c].recv_calls, 1);
		check_bytes(c, 200);
	}
	th_capture_clear(w);
}
END_TEST

START_TEST(zero_limit_means_off)
{
	sb.gro_streams_max = 0;
	open_conns(1);
	for (unsigned i = 0; i < 4; i++)
		write_seg(0, i * 100, 100);
	take_frames();
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_uint_eq(recs[0].recv_calls, 4);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 4);
	check_bytes(0, 400);
	th_capture_clear(w);
}
END_TEST

START_TEST(rst_inside_batch_data_then_error)
{
	open_conns(1);
	for (unsigned i = 0; i < 3; i++)
		write_seg(0, i * 100, 100);
	tcp_abort(clients[0]);   /* data, then RST */
	take_frames();
	ck_assert_uint_eq(nframes, 4);
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	ck_assert_str_eq(recs[0].events, "de");
	ck_assert_int_eq(recs[0].err, ECONNRESET);
	tcp_rx_batch_end(ctx);
	ck_assert_str_eq(recs[0].events, "de");
	check_bytes(0, 300);
	th_capture_clear(w);
}
END_TEST

/* A pcb closed (by the app, from another pcb's recv or directly) while its
 * data waits: the data is freed, no callback, no leak (th_fini checks). */
START_TEST(pending_freed_when_pcb_dies)
{
	open_conns(3);
	for (unsigned c = 0; c < 3; c++)
		write_seg(c, 0, 100);
	take_frames();
	recs[0].close_in_recv = true;
	recs[0].victim = recs[1].pcb;
	struct tcp_ctx *ctx = w->side[1].tcp;
	tcp_rx_batch_begin(ctx);
	for (unsigned i = 0; i < nframes; i++)
		feed(i);
	tcp_abort(recs[2].pcb);
	tcp_rx_batch_end(ctx);
	ck_assert_uint_eq(recs[0].recv_calls, 1);
	ck_assert_uint_eq(recs[1].recv_calls, 0);
	ck_assert_uint_eq(recs[2].recv_calls, 0);
	ck_assert_uint_eq(tcp_ctx_counters(ctx)->rx_batch_deliveries, 1);
	th_capture_clear(w);
}
END_TEST

/* A long lossy stream with every wire step inside a batch still arrives intact. */
static bool all_in(struct th_wire *x)
{
	return x->side[1].rx_bytes == x->side[0].tx_goal;
}

START_TEST(lossy_stream_through_batches)
{
	th_init(w, &sa, &sb, 99);
	th_listen(&w->side[1], 80);
	th_connect(w, 0, 4000, 80);
	ck_assert(th_run_until(w, both_connected, 100));
	w->drop_ppm = 20000;
	w->reorder_ppm = 30000;
	w->dup_ppm = 20000;
	w->side[0].tx_goal = 4u << 20;
	struct tcp_ctx *ctx = w->side[1].tcp;
	bool done = false;
	for (unsigned i = 0; i < 200000 && !done; i++) {
		tcp_rx_batch_begin(ctx);
		th_step(w);
		tcp_rx_batch_end(ctx);
		done = all_in(w);
	}
	ck_assert(done);
	ck_assert_uint_eq(w->side[1].rx_bad, 0);
	const struct tcp_counters *c = tcp_ctx_counters(ctx);
	ck_assert_uint_gt(c->rx_batch_merged, 0);
	ck_assert_uint_lt(c->rx_batch_deliveries, c->rx_segments);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_batch");
	TCase *t = tcase_create("batch");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, batch_of_segments_one_recv);
	tcase_add_test(t, nested_batches_deliver_at_outermost_end);
	tcase_add_test(t, interleaved_pcbs_one_recv_each);
	tcase_add_test(t, out_of_order_fill_inside_batch);
	tcase_add_test(t, out_of_order_train_one_sack_per_batch);
	tcase_add_test(t, fin_inside_batch_after_data);
	tcase_add_test(t, limit_flushes_oldest);
	tcase_add_test(t, zero_limit_means_off);
	tcase_add_test(t, rst_inside_batch_data_then_error);
	tcase_add_test(t, pending_freed_when_pcb_dies);
	tcase_add_test(t, lossy_stream_through_batches);
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
