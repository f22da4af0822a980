/* The offloaded UDP socket's RX queue: entry and byte limits, FIFO order
 * across wrap-around, buffer ownership (pool counters), and the copy-out of
 * chains into iovecs (truncation, scatter, zero-length parts). */
#include <check.h>
#include <string.h>

#include "ring/ring_buf.h"
#include "sock/sock_udp_queue.h"

static struct ring_buf_pool *pool;

static void setup(void)
{
	pool = ring_buf_pool_create("q", 16, 64);
	ck_assert_ptr_nonnull(pool);
}

static void teardown(void)
{
	ring_buf_pool_destroy(pool);
}

static uint32_t free_now(void)
{
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(pool, &c);
	return c.free_now;
}

/* One buffer holding len bytes of value fill. */
static struct ring_buf *buf_of(uint32_t len, uint8_t fill)
{
	struct ring_buf *b = ring_buf_alloc(pool);
	ck_assert_ptr_nonnull(b);
	memset(b->data, fill, len);
	b->len = b->tot_len = len;
	return b;
}

static struct sock_udp_entry entry_of(uint32_t len, uint8_t fill)
{
	struct sock_udp_entry e = { .buf = buf_of(len, fill), .len = len };
	e.info.src_port = fill;
	return e;
}

START_TEST(entry_limit_refuses_and_leaves_the_buffer_to_the_caller)
{
	struct sock_udp_queue q;
	ck_assert_int_eq(sock_udp_queue_init(&q, 3), 0);
	for (int i = 0; i < 3; i++) {
		struct sock_udp_entry e = entry_of(10, (uint8_t)i);
		ck_assert(sock_udp_queue_push(&q, &e, 1000));
	}
	struct sock_udp_entry extra = entry_of(10, 9);
	ck_assert(!sock_udp_queue_push(&q, &extra, 1000));
	ck_assert_uint_eq(q.count, 3);
	ck_assert_uint_eq(q.bytes, 30);
	ck_assert_uint_eq(free_now(), 12);   /* 4 allocated, the refused one still ours */
	ring_buf_free(extra.buf);
	sock_udp_queue_fini(&q);
	ck_assert_uint_eq(free_now(), 16);
	ck_assert_ptr_null(q.entries);
}
END_TEST

START_TEST(byte_limit_but_one_datagram_always_fits_an_empty_queue)
{
	struct sock_udp_queue q;
	ck_assert_int_eq(sock_udp_queue_init(&q, 8), 0);
	struct sock_udp_entry big = entry_of(60, 1);
	ck_assert(sock_udp_queue_push(&q, &big, 50));   /* over the limit, but empty */
	struct sock_udp_entry small = entry_of(1, 2);
	ck_assert(!sock_udp_queue_push(&q, &small, 50));
	sock_udp_queue_pop(&q);
	ck_assert_uint_eq(q.bytes, 0);
	ck_assert(sock_udp_queue_push(&q, &small, 50));
	struct sock_udp_entry fits = entry_of(49, 3);  /* 1 + 49 = the limit exactly */
	ck_assert(sock_udp_queue_push(&q, &fits, 50));
	struct sock_udp_entry zero = entry_of(0, 4);   /* 0 bytes fit a full byte budget */
	ck_assert(sock_udp_queue_push(&q, &zero, 50));
	ck_assert_uint_eq(q.count, 3);
	ck_assert_uint_eq(q.bytes, 50);
	sock_udp_queue_clear(&q);
	ck_assert_uint_eq(q.count, 0);
	ck_assert_uint_eq(free_now(), 16);
	ck_assert(sock_udp_queue_push(&q, &(struct sock_udp_entry){ .buf = buf_of(5, 5), .len = 5 }, 50));
	sock_udp_queue_fini(&q);
	ck_assert_uint_eq(free_now(), 16);
}
END_TEST

START_TEST(fifo_order_survives_wrap_around_and_peek_keeps_the_front)
{
	struct sock_udp_queue q;
	ck_assert_int_eq(sock_udp_queue_init(&q, 3), 0);
	ck_assert_ptr_null(sock_udp_queue_front(&q));
	sock_udp_queue_pop(&q);   /* empty: no effect */
	unsigned next_in = 0, next_out = 0;
	for (int round = 0; round < 7; round++) {
		while (q.count < 2) {
			struct sock_udp_entry e = entry_of(next_in + 1, (uint8_t)next_in);
			ck_assert(sock_udp_queue_push(&q, &e, 1000));
			next_in++;
		}
		struct sock_udp_entry *front = sock_udp_queue_front(&q);
		ck_assert_ptr_eq(sock_udp_queue_front(&q), front);   /* looking does not consume */
		ck_assert_uint_eq(front->info.src_port, next_out);
		ck_assert_uint_eq(front->len, next_out + 1);
		ck_assert_uint_eq(front->buf->data[0], (uint8_t)next_out);
		sock_udp_queue_pop(&q);
		next_out++;
	}
	ck_assert_uint_eq(q.count, 1);   /* datagram 7, 8 bytes, left behind */
	ck_assert_uint_eq(q.bytes, 8);
	sock_udp_queue_fini(&q);
	ck_assert_uint_eq(free_now(), 16);
}
END_TEST

START_TEST(a_buffer_shared_by_two_queues_is_freed_by_the_last)
{
	struct sock_udp_queue a, b;
	ck_assert_int_eq(sock_udp_queue_init(&a, 2), 0);
	ck_assert_int_eq(sock_udp_queue_init(&b, 2), 0);
	struct sock_udp_entry e = entry_of(8, 7);
	ring_buf_ref(e.buf);   /* multicast: each member socket holds a reference */
	ck_assert(sock_udp_queue_push(&a, &e, 100));
	ck_assert(sock_udp_queue_push(&b, &e, 100));
	sock_udp_queue_pop(&a);
	ck_assert_uint_eq(free_now(), 15);
	ck_assert_uint_eq(sock_udp_queue_front(&b)->buf->data[7], 7);
	sock_udp_queue_fini(&b);
	ck_assert_uint_eq(free_now(), 16);
	sock_udp_queue_fini(&a);
}
END_TEST

/* A chain 10 + 0 + 20 bytes: byte i holds i. */
static struct ring_buf *chain_30(void)
{
	struct ring_buf *p1 = buf_of(10, 0), *p2 = buf_of(0, 0), *p3 = buf_of(20, 0);
	for (int i = 0; i < 10; i++)
		p1->data[i] = (uint8_t)i;
	for (int i = 0; i < 20; i++)
		p3->data[i] = (uint8_t)(10 + i);
	p1->next = p2;
	p2->next = p3;
	p1->tot_len = 30;
	p3->tot_len = 20;
	return p1;
}

START_TEST(copy_out_scatters_a_chain_and_truncates)
{
	struct ring_buf *c = chain_30();
	uint8_t out[40];
	memset(out, 0xee, sizeof(out));
	struct iovec iov[4] = { { out, 3 }, { out + 3, 0 }, { out + 3, 12 }, { out + 15, 25 } };
	ck_assert_uint_eq(sock_udp_copy_out(c, 30, iov, 4), 30);
	for (int i = 0; i < 30; i++)
		ck_assert_uint_eq(out[i], i);
	ck_assert_uint_eq(out[30], 0xee);

	/* Truncation: a 7-byte buffer gets the first 7 bytes only. */
	memset(out, 0xee, sizeof(out));
	struct iovec small = { out, 7 };
	ck_assert_uint_eq(sock_udp_copy_out(c, 30, &small, 1), 7);
	ck_assert_uint_eq(out[6], 6);
	ck_assert_uint_eq(out[7], 0xee);

	/* len shorter than the chain: stops at len, even mid-buffer. */
	memset(out, 0xee, sizeof(out));
	struct iovec all = { out, sizeof(out) };
	ck_assert_uint_eq(sock_udp_copy_out(c, 15, &all, 1), 15);
	ck_assert_uint_eq(out[14], 14);
	ck_assert_uint_eq(out[15], 0xee);

	/* No iovecs, or zero-length ones: nothing copied, no crash. */
	ck_assert_uint_eq(sock_udp_copy_out(c, 30, NULL, 0), 0);
	struct iovec empty = { out, 0 };
	ck_assert_uint_eq(sock_udp_copy_out(c, 30, &empty, 1), 0);
	ck_assert_uint_eq(sock_udp_copy_out(NULL, 0, &all, 1), 0);
	ring_buf_free(c);
	ck_assert_uint_eq(free_now(), 16);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sock_udp_queue");
	TCase *tc = tcase_create("queue");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, entry_limit_refuses_and_leaves_the_buffer_to_the_caller);
	tcase_add_test(tc, byte_limit_but_one_datagram_always_fits_an_empty_queue);
	tcase_add_test(tc, fifo_order_survives_wrap_around_and_peek_keeps_the_front);
	tcase_add_test(tc, a_buffer_shared_by_two_queues_is_freed_by_the_last);
	tcase_add_test(tc, copy_out_scatters_a_chain_and_truncates);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
