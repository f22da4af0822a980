/* Packet buffer pools and the ring contract on the in-memory loop backend:
 * alloc/ref/free over chains, counters, exhaustion and recovery. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring/ring.h"
#include "ring/ring_buf.h"
#include "log/vlog.h"

static struct ring_buf_pool_counters counters_of(const struct ring_buf_pool *pool)
{
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(pool, &c);
	return c;
}

START_TEST(plain_pool_hands_out_every_buffer_once_then_counts_empty)
{
	struct ring_buf_pool *pool = ring_buf_pool_create("t", 4, 100);
	struct ring_buf *bufs[4];

	ck_assert_ptr_nonnull(pool);
	ck_assert_str_eq(ring_buf_pool_name(pool), "t");
	for (int i = 0; i < 4; i++) {
		bufs[i] = ring_buf_alloc(pool);
		ck_assert_ptr_nonnull(bufs[i]);
		ck_assert_uint_eq(bufs[i]->refcount, 1);
		ck_assert_ptr_eq(bufs[i]->data, bufs[i]->head);
		ck_assert_uint_eq(bufs[i]->len, 0);
		ck_assert_uint_eq(bufs[i]->tot_len, 0);
		ck_assert_uint_eq(bufs[i]->size, 100);
		ck_assert_ptr_eq(bufs[i]->pool, pool);
		ck_assert_ptr_null(bufs[i]->next);
		for (int j = 0; j < i; j++) {
			ck_assert_ptr_ne(bufs[i], bufs[j]);
			/* Memory of distinct buffers never overlaps. */
			ck_assert(bufs[i]->head >= bufs[j]->head + 100 || bufs[j]->head >= bufs[i]->head + 100);
		}
		memset(bufs[i]->head, i, 100);
	}
	ck_assert_ptr_null(ring_buf_alloc(pool));
	ck_assert_ptr_null(ring_buf_alloc(pool));
	struct ring_buf_pool_counters c = counters_of(pool);
	ck_assert_uint_eq(c.size, 4);
	ck_assert_uint_eq(c.allocs, 4);
	ck_assert_uint_eq(c.frees, 0);
	ck_assert_uint_eq(c.empty, 2);
	ck_assert_uint_eq(c.free_now, 0);
	ck_assert_uint_eq(c.free_min, 0);

	ring_buf_free(bufs[2]);
	c = counters_of(pool);
	ck_assert_uint_eq(c.frees, 1);
	ck_assert_uint_eq(c.free_now, 1);
	ck_assert_uint_eq(c.free_min, 0);
	/* The buffer freed last comes back first, reset. */
	bufs[2]->len = 7;
	bufs[2]->data += 3;
	struct ring_buf *again = ring_buf_alloc(pool);
	ck_assert_ptr_eq(again, bufs[2]);
	ck_assert_uint_eq(again->len, 0);
	ck_assert_ptr_eq(again->data, again->head);
	for (int i = 0; i < 4; i++)
		ring_buf_free(bufs[i]);
	c = counters_of(pool);
	ck_assert_uint_eq(c.free_now, 4);
	ck_assert_uint_eq(c.allocs, 5);
	ck_assert_uint_eq(c.frees, 5);
	ring_buf_pool_reset_min(pool);
	ck_assert_uint_eq(counters_of(pool).free_min, 4);
	ring_buf_pool_destroy(pool);
}
END_TEST

/* Receive admission: a holder's share of the pool by how much of it is held
 * (calm: any; five eighths held: an eighth; seven eighths: a thirty-second;
 * 4 at least); pressure from five eighths. */
START_TEST(holder_cap_shrinks_as_the_pool_is_held)
{
	struct ring_buf_pool *pool = ring_buf_pool_create("cap", 256, 64);
	ck_assert_ptr_nonnull(pool);
	static struct ring_buf *held[256];
	unsigned n = 0;
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 256);
	ck_assert(!ring_buf_pool_pressured(pool));
	while (n < 159)
		held[n++] = ring_buf_alloc(pool);
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 256);
	ck_assert(!ring_buf_pool_pressured(pool));
	held[n++] = ring_buf_alloc(pool);   /* 160 = 5/8 */
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 32);
	ck_assert(ring_buf_pool_pressured(pool));
	while (n < 224)
		held[n++] = ring_buf_alloc(pool);   /* 7/8 */
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 8);
	while (n > 159)
		ring_buf_free(held[--n]);
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 256);
	while (n)
		ring_buf_free(held[--n]);
	ring_buf_pool_destroy(pool);
	/* a small pool still lets a holder keep 4 */
	pool = ring_buf_pool_create("tiny", 8, 64);
	for (n = 0; n < 8; n++)
		held[n] = ring_buf_alloc(pool);
	ck_assert_uint_eq(ring_buf_pool_holder_cap(pool), 4);
	while (n)
		ring_buf_free(held[--n]);
	ring_buf_pool_destroy(pool);
}
END_TEST

START_TEST(refcount_keeps_buffer_until_last_free)
{
	struct ring_buf_pool *pool = ring_buf_pool_create("t", 2, 64);
	struct ring_buf *buf = ring_buf_alloc(pool);

	ring_buf_ref(buf);
	ck_assert_uint_eq(buf->refcount, 2);
	ring_buf_free(buf);
	ck_assert_uint_eq(buf->refcount, 1);
	ck_assert_uint_eq(counters_of(pool).free_now, 1);
	ck_assert_uint_eq(counters_of(pool).frees, 0);
	ring_buf_free(buf);
	ck_assert_uint_eq(counters_of(pool).free_now, 2);
	ck_assert_uint_eq(counters_of(pool).frees, 1);
	ring_buf_free(NULL);
	ring_buf_pool_destroy(pool);
}
END_TEST

START_TEST(chain_free_drops_one_reference_per_part_into_each_own_pool)
{
	struct ring_buf_pool *a = ring_buf_pool_create("a", 2, 64);
	struct ring_buf_pool *b = ring_buf_pool_create("b", 2, 64);
	struct ring_buf *first = ring_buf_alloc(a), *second = ring_buf_alloc(b), *third = ring_buf_alloc(a);

	first->next = second;
	second->next = third;
	/* Someone else still reads the chain from its second part on: it
	 * holds a reference on each buffer of that part. */
	ring_buf_ref(second);
	ring_buf_ref(third);
	ring_buf_free(first);
	ck_assert_uint_eq(counters_of(a).free_now, 1);
	ck_assert_uint_eq(counters_of(b).free_now, 1);
	ck_assert_uint_eq(second->refcount, 1);
	ck_assert_uint_eq(third->refcount, 1);
	ck_assert_ptr_null(first->next); /* unlinked on its way back */
	ck_assert_ptr_eq(second->next, third);
	ring_buf_free(second);
	ck_assert_uint_eq(counters_of(a).free_now, 2);
	ck_assert_uint_eq(counters_of(b).free_now, 2);
	ck_assert_uint_eq(counters_of(a).frees, 2);
	ck_assert_uint_eq(counters_of(b).frees, 1);
	/* A second free of a free buffer is refused, not counted (a debug
	 * build stops there: VMA_ASSERT on buffer ownership). */
	if (VMA_DEBUG_ASSERTS_ON) {
		pid_t child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 2);
			ring_buf_free(third);
			_exit(0);
		}
		int status;
		ck_assert_int_eq(waitpid(child, &status, 0), child);
		ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	} else {
		ring_buf_free(third);
	}
	ck_assert_uint_eq(counters_of(a).frees, 2);
	ck_assert_uint_eq(counters_of(a).free_now, 2);
	ring_buf_pool_destroy(a);
	ring_buf_pool_destroy(b);
}
END_TEST

START_TEST(linearize_copies_the_chain_into_the_first_frame_or_refuses)
{
	struct ring_buf_pool *pool = ring_buf_pool_create("lin", 4, 64);
	struct ring_buf *a = ring_buf_alloc(pool), *b = ring_buf_alloc(pool), *c = ring_buf_alloc(pool);
	memset(a->data, 'a', 20);
	memset(b->data, 'b', 30);
	memset(c->data, 'c', 10);
	a->len = 20, b->len = 30, c->len = 10;
	a->next = b, b->next = c;
	ck_assert_int_eq(ring_buf_linearize(a), 0);
	ck_assert_ptr_null(a->next);
	ck_assert_uint_eq(a->len, 60);
	ck_assert_uint_eq(a->tot_len, 60);
	for (unsigned i = 0; i < 60; i++)
		ck_assert_int_eq(a->data[i], i < 20 ? 'a' : i < 50 ? 'b' : 'c');
	ck_assert_uint_eq(counters_of(pool).free_now, 3);   /* b and c went back */
	/* past the first frame's end: refused, the chain left as it was */
	b = ring_buf_alloc(pool);
	b->len = (uint32_t)(a->head + a->size - a->data) - 60 + 1;
	a->next = b;
	ck_assert_int_eq(ring_buf_linearize(a), -EMSGSIZE);
	ck_assert_ptr_eq(a->next, b);
	ck_assert_uint_eq(a->len, 60);
	ring_buf_free(a);
	ck_assert_uint_eq(counters_of(pool).free_now, 4);
	ring_buf_pool_destroy(pool);
}
END_TEST

START_TEST(bad_pool_sizes_are_refused)
{
	ck_assert_ptr_null(ring_buf_pool_create("zero", 0, 64));
	ck_assert_ptr_null(ring_buf_pool_create("empty", 4, 0));
}
END_TEST

static unsigned recycled;
static struct ring_buf *last_recycled;
static void test_recycle(struct ring_buf_pool *pool, struct ring_buf *buf)
{
	(void)pool;
	recycled++;
	last_recycled = buf;
}
static const struct ring_buf_pool_ops test_backend_ops = { .recycle = test_recycle };

START_TEST(backend_pool_maps_handles_to_descriptors_and_recycles_through_hook)
{
	static uint8_t mem[8 * 4096];
	int owner;
	struct ring_buf_pool *pool =
		ring_buf_pool_create_over("be", 8, mem, 4096, 2, 1 << 20, &test_backend_ops, &owner);

	ck_assert_ptr_nonnull(pool);
	ck_assert_ptr_eq(ring_buf_pool_owner(pool), &owner);
	/* Frames belong to the backend: ring_buf_alloc gets none. */
	ck_assert_ptr_null(ring_buf_alloc(pool));
	ck_assert_uint_eq(counters_of(pool).empty, 1);
	ck_assert_uint_eq(counters_of(pool).free_now, 8);
	struct ring_buf *buf = ring_buf_pool_by_handle(pool, (1 << 20) + 5 * 4096 + 258);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_eq(buf->head, mem + 5 * 4096 + 2);
	ck_assert_uint_eq(buf->size, 4094);
	ck_assert_uint_eq(buf->handle, (1 << 20) + 5 * 4096);
	ck_assert_ptr_null(ring_buf_pool_by_handle(pool, (1 << 20) + 8 * 4096));
	ck_assert_ptr_null(ring_buf_pool_by_handle(pool, 0));
	ring_buf_pool_take(pool, buf, RING_BUF_F_RX);
	ck_assert_uint_eq(buf->flags, RING_BUF_F_RX);
	ck_assert_uint_eq(ring_buf_pool_in_use(pool), 1);
	recycled = 0;
	ring_buf_free(buf);
	ck_assert_uint_eq(recycled, 1);
	ck_assert_ptr_eq(last_recycled, buf);
	ck_assert_uint_eq(ring_buf_pool_in_use(pool), 0);
	struct ring_buf_pool_counters c = counters_of(pool);
	ck_assert_uint_eq(c.allocs, 1);
	ck_assert_uint_eq(c.frees, 1);
	ck_assert_uint_eq(c.free_min, 7);
	ring_buf_pool_destroy(pool);
}
END_TEST

/* ---- the ring contract on the loop backend ---- */

static struct ring *loop_ring(unsigned rx_bufs)
{
	struct ring_config cfg = {
		.backend = RING_BACKEND_LOOP, .rx_bufs = rx_bufs, .rx_wre = rx_bufs,
		.tx_bufs = 64, .tx_wre = 64, .rx_wre_batching = 16, .tx_wre_batching = 64,
	};
	struct ring *ring = ring_open("vmatest0", 0, &cfg);
	ck_assert_ptr_nonnull(ring);
	return ring;
}

static int send_frame(struct ring *ring, uint8_t tag, uint32_t len)
{
	struct ring_buf *tx = ring_tx_alloc(ring);
	if (!tx)
		return -ENOBUFS;
	ck_assert_uint_eq(tx->flags, RING_BUF_F_TX);
	ck_assert_uint_eq(tx->len, 0);
	memset(tx->data, tag, len);
	tx->len = len;
	return ring_tx_send(ring, tx);
}

START_TEST(rx_burst_hands_out_received_frames_as_buffers)
{
	struct ring *ring = loop_ring(64);
	struct ring_buf *bufs[8];

	ck_assert_int_eq(ring_rx_burst(ring, bufs, 8), 0);
	ck_assert_int_eq(send_frame(ring, 0xab, 60), 0);
	ck_assert_int_eq(send_frame(ring, 0xcd, 1500), 0);
	/* Nothing leaves before the flush. */
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 8), 0);
	ck_assert_int_eq(ring_wait_arm(ring), 0);
	ring_tx_flush(ring);
	ck_assert_int_eq(ring_wait_arm(ring), 1);
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 8), 2);
	ck_assert_uint_eq(bufs[0]->len, 60);
	ck_assert_uint_eq(bufs[0]->tot_len, 60);
	ck_assert_uint_eq(bufs[0]->data[59], 0xab);
	ck_assert_uint_eq(bufs[1]->len, 1500);
	ck_assert_uint_eq(bufs[1]->data[0], 0xcd);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(bufs[i]->refcount, 1);
		ck_assert_uint_eq(bufs[i]->flags, RING_BUF_F_RX);
		ck_assert_ptr_eq(bufs[i]->pool, ring_rx_pool(ring));
		ck_assert_uint_ne(bufs[i]->rx_time_ns, 0);
	}
	ck_assert_uint_eq(bufs[0]->rx_time_ns, bufs[1]->rx_time_ns); /* one clock read per burst */
	ring_buf_free(bufs[0]);
	ring_buf_free(bufs[1]);

	struct ring_counters c;
	ring_read_counters(ring, &c);
	ck_assert_uint_eq(c.tx_packets, 2);
	ck_assert_uint_eq(c.tx_bytes, 1560);
	ck_assert_uint_eq(c.rx_packets, 2);
	ck_assert_uint_eq(c.rx_bytes, 1560);
	ck_assert_uint_eq(c.tx_doorbells, 1);
	ck_assert_uint_eq(c.tx_completions, 2);
	ck_assert_uint_eq(ring_buf_pool_in_use(ring_rx_pool(ring)), 0);
	ck_assert_uint_eq(ring_buf_pool_in_use(ring_tx_pool(ring)), 0);
	ring_close(ring);
}
END_TEST

START_TEST(tx_send_takes_ownership_even_on_error)
{
	struct ring *ring = loop_ring(64);
	struct ring_buf_pool *other = ring_buf_pool_create("other", 1, 64);
	struct ring_buf *foreign = ring_buf_alloc(other);

	foreign->len = 10;
	ck_assert_int_eq(ring_tx_send(ring, foreign), -EINVAL);
	ck_assert_uint_eq(counters_of(other).free_now, 1);
	struct ring_buf *tx = ring_tx_alloc(ring);
	tx->len = tx->size + 1;
	ck_assert_int_eq(ring_tx_send(ring, tx), -EMSGSIZE);
	tx = ring_tx_alloc(ring);
	ck_assert_int_eq(ring_tx_send(ring, tx), -EMSGSIZE); /* empty frame */
	ck_assert_uint_eq(ring_buf_pool_in_use(ring_tx_pool(ring)), 0);
	ring_buf_pool_destroy(other);
	ring_close(ring);
}
END_TEST

START_TEST(tx_alloc_returns_null_and_counts_when_all_frames_are_taken)
{
	struct ring *ring = loop_ring(64);
	struct ring_buf *taken[64];
	struct ring_counters c;

	for (int i = 0; i < 64; i++) {
		taken[i] = ring_tx_alloc(ring);
		ck_assert_ptr_nonnull(taken[i]);
	}
	ck_assert_ptr_null(ring_tx_alloc(ring));
	ring_read_counters(ring, &c);
	ck_assert_uint_eq(c.tx_no_buffer, 1);
	ck_assert_uint_eq(counters_of(ring_tx_pool(ring)).empty, 1);
	for (int i = 0; i < 64; i++)
		ring_buf_free(taken[i]);
	ck_assert_ptr_nonnull(taken[0] = ring_tx_alloc(ring));
	ring_buf_free(taken[0]);
	ring_close(ring);
}
END_TEST

/* An RX pool smaller than the traffic, frames held: the ring drops and
 * counts, never blocks; once the frames are released, traffic resumes. */
START_TEST(rx_pool_exhaustion_drops_counts_and_recovers)
{
	struct ring *ring = loop_ring(64);
	struct ring_buf *held[64], *bufs[64];
	struct ring_counters c;
	int got = 0;

	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 32; i++)
			ck_assert_int_eq(send_frame(ring, (uint8_t)i, 100), 0);
		ring_tx_flush(ring);
		int n;
		while ((n = ring_rx_burst(ring, bufs, 64)) > 0)
			for (int i = 0; i < n; i++)
				held[got++] = bufs[i];
	}
	ck_assert_int_eq(got, 64);
	ring_read_counters(ring, &c);
	ck_assert_uint_eq(c.rx_fill_empty, 32);
	ck_assert_uint_eq(c.rx_packets, 64);
	ck_assert_uint_eq(counters_of(ring_rx_pool(ring)).empty, 32);
	ck_assert_uint_eq(counters_of(ring_rx_pool(ring)).free_min, 0);
	for (int i = 0; i < got; i++)
		ring_buf_free(held[i]);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(send_frame(ring, 0x5a, 100), 0);
	ring_tx_flush(ring);
	ck_assert_int_eq(ring_rx_burst(ring, bufs, 64), 10);
	ck_assert_uint_eq(bufs[9]->data[99], 0x5a);
	for (int i = 0; i < 10; i++)
		ring_buf_free(bufs[i]);
	ring_read_counters(ring, &c);
	ck_assert_uint_eq(c.rx_fill_empty, 32);
	ring_close(ring);
}
END_TEST

START_TEST(sizes_are_powers_of_two_within_the_memory_cap)
{
	struct ring_sizes s;
	struct ring_config cfg = { .rx_bufs = 200000, .rx_wre = 16000, .tx_bufs = 200000, .tx_wre = 3000 };

	ring_sizes_compute(&cfg, 4096, &s);
	/* 32 MiB of 4 KiB frames: 8192 frames in all. */
	ck_assert_uint_eq(s.rx_frames + s.tx_frames, 8192);
	ck_assert_uint_eq(s.tx_frames, 4096);
	ck_assert_uint_eq(s.rx_frames, 4096);
	ck_assert_uint_eq(s.rx_descs, 4096);
	ck_assert_uint_eq(s.rx_batch, 64);
	ck_assert_uint_eq(s.tx_batch, 64);

	cfg = (struct ring_config){ .rx_bufs = 1000, .rx_wre = 300, .tx_bufs = 100, .tx_wre = 100,
				    .rx_wre_batching = 1024, .max_ring_mem = 1 << 30 };
	ring_sizes_compute(&cfg, 4096, &s);
	ck_assert_uint_eq(s.rx_descs, 512);   /* 300 rounded up */
	ck_assert_uint_eq(s.rx_frames, 1024); /* min(rx_bufs, 2 * descs) rounded up */
	ck_assert_uint_eq(s.tx_frames, 128);
	ck_assert_uint_eq(s.rx_batch, 512);   /* at most half the frames */

	cfg = (struct ring_config){ .rx_bufs = 10, .rx_wre = 10, .tx_bufs = 1, .tx_wre = 1 };
	ring_sizes_compute(&cfg, 4096, &s);
	ck_assert_uint_eq(s.rx_frames, 64);   /* floor: 64 */
	ck_assert_uint_eq(s.rx_descs, 64);
	ck_assert_uint_eq(s.tx_frames, 64);
	ck_assert_uint_eq(s.rx_batch, 32);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_buf");
	TCase *tc = tcase_create("pool");
	tcase_add_test(tc, plain_pool_hands_out_every_buffer_once_then_counts_empty);
	tcase_add_test(tc, refcount_keeps_buffer_until_last_free);
	tcase_add_test(tc, holder_cap_shrinks_as_the_pool_is_held);
	tcase_add_test(tc, chain_free_drops_one_reference_per_part_into_each_own_pool);
	tcase_add_test(tc, bad_pool_sizes_are_refused);
	tcase_add_test(tc, backend_pool_maps_handles_to_descriptors_and_recycles_through_hook);
	suite_add_tcase(s, tc);
	tc = tcase_create("ring");
	tcase_add_test(tc, rx_burst_hands_out_received_frames_as_buffers);
	tcase_add_test(tc, tx_send_takes_ownership_even_on_error);
	tcase_add_test(tc, tx_alloc_returns_null_and_counts_when_all_frames_are_taken);
	tcase_add_test(tc, rx_pool_exhaustion_drops_counts_and_recovers);
	tcase_add_test(tc, sizes_are_powers_of_two_within_the_memory_cap);
	tcase_add_test(tc, linearize_copies_the_chain_into_the_first_frame_or_refuses);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
