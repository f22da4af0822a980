/* The offloaded UDP socket's RX queue: entry and byte limits, FIFO order
 * across wrap-around, buffer ownership (pool counters), the copy-out of
 * chains into iovecs (truncation, scatter, zero-length parts), and the copy
 * of a queue into a pool of the socket's own when it moves to another lane
 * (every datagram intact and in order, the ring's frames all given back). */
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

static uint32_t pool_free(struct ring_buf_pool *p)
{
	struct ring_buf_pool_counters c;
	ring_buf_pool_read_counters(p, &c);
	return c.free_now;
}

/* The len payload bytes of entry e, flattened. */
static void entry_bytes(const struct sock_udp_entry *e, uint8_t *out, size_t size)
{
	struct iovec iov = { out, size };
	ck_assert_uint_eq(sock_udp_copy_out(e->buf, e->len, &iov, 1), e->len);
}

START_TEST(rehome_copies_every_datagram_in_order_and_gives_the_frames_back)
{
	/* Frames of a "ring": 16 x 64 (the fixture) and 4 x 1024. */
	struct ring_buf_pool *big = ring_buf_pool_create("big", 4, 1024);
	ck_assert_ptr_nonnull(big);
	struct sock_udp_queue q;
	ck_assert_int_eq(sock_udp_queue_init(&q, 4), 0);
	/* Wrap the ring of entries first: the copy must walk it from head. */
	for (int i = 0; i < 3; i++) {
		struct sock_udp_entry e = entry_of(1, 0);
		ck_assert(sock_udp_queue_push(&q, &e, 100000));
		sock_udp_queue_pop(&q);
	}
	/* 1: the 10 + 0 + 20 byte chain, with addresses and a time. */
	struct sock_udp_entry e1 = { .buf = chain_30(), .len = 30, .rx_time_ns = 123456789 };
	e1.info.src_ip = 0x01020304;
	e1.info.src_port = 4242;
	e1.info.ttl = 7;
	ck_assert(sock_udp_queue_push(&q, &e1, 100000));
	/* 2: a multicast frame another socket also holds. */
	struct sock_udp_entry e2 = entry_of(40, 0x5a);
	ring_buf_ref(e2.buf);
	ck_assert(sock_udp_queue_push(&q, &e2, 100000));
	/* 3: an empty datagram. */
	struct sock_udp_entry e3 = entry_of(0, 0);
	ck_assert(sock_udp_queue_push(&q, &e3, 100000));
	/* 4: 3000 bytes in three 1 KiB frames, byte i = i * 7. */
	struct ring_buf *f[3];
	for (int i = 0; i < 3; i++) {
		f[i] = ring_buf_alloc(big);
		ck_assert_ptr_nonnull(f[i]);
		f[i]->len = i < 2 ? 1024 : 3000 - 2048;
		for (uint32_t k = 0; k < f[i]->len; k++)
			f[i]->data[k] = (uint8_t)((i * 1024 + k) * 7);
	}
	f[0]->next = f[1];
	f[1]->next = f[2];
	f[0]->tot_len = 3000;
	struct sock_udp_entry e4 = { .buf = f[0], .len = 3000 };
	ck_assert(sock_udp_queue_push(&q, &e4, 100000));
	ck_assert_uint_eq(q.bytes, 3070);
	ck_assert_uint_eq(free_now(), 16 - 5);   /* 3 chain buffers, the shared one, the empty one */

	struct ring_buf_pool *own = NULL;
	ck_assert_int_eq(sock_udp_queue_rehome(&q, "own", &own), 0);
	ck_assert_ptr_nonnull(own);
	/* The frames went back, except the one the other socket still holds. */
	ck_assert_uint_eq(free_now(), 16 - 1);
	ck_assert_uint_eq(pool_free(big), 4);
	ck_assert_uint_eq(e2.buf->refcount, 1);
	ck_assert_uint_eq(e2.buf->data[39], 0x5a);
	/* Buffers of 2048 (the cap): 1 + 1 + 1 + 2. */
	ck_assert_uint_eq(ring_buf_pool_in_use(own), 5);
	ck_assert_uint_eq(q.count, 4);
	ck_assert_uint_eq(q.bytes, 3070);

	uint8_t out[4000];
	struct sock_udp_entry *e = sock_udp_queue_front(&q);
	ck_assert_uint_eq(e->len, 30);
	ck_assert_uint_eq(e->info.src_ip, 0x01020304);
	ck_assert_uint_eq(e->info.src_port, 4242);
	ck_assert_uint_eq(e->info.ttl, 7);
	ck_assert_uint_eq(e->rx_time_ns, 123456789);
	ck_assert_ptr_eq(e->buf->pool, own);
	entry_bytes(e, out, sizeof(out));
	for (int i = 0; i < 30; i++)
		ck_assert_uint_eq(out[i], i);
	sock_udp_queue_pop(&q);
	e = sock_udp_queue_front(&q);
	ck_assert_uint_eq(e->len, 40);
	ck_assert_ptr_ne(e->buf, e2.buf);
	entry_bytes(e, out, sizeof(out));
	for (int i = 0; i < 40; i++)
		ck_assert_uint_eq(out[i], 0x5a);
	sock_udp_queue_pop(&q);
	e = sock_udp_queue_front(&q);
	ck_assert_uint_eq(e->len, 0);
	ck_assert_ptr_nonnull(e->buf);
	sock_udp_queue_pop(&q);
	e = sock_udp_queue_front(&q);
	ck_assert_uint_eq(e->len, 3000);
	ck_assert_uint_eq(e->buf->tot_len, 3000);
	ck_assert_uint_eq(e->buf->len, 2048);
	ck_assert_ptr_nonnull(e->buf->next);
	ck_assert_uint_eq(e->buf->next->tot_len, 3000 - 2048);
	entry_bytes(e, out, sizeof(out));
	for (int i = 0; i < 3000; i++)
		ck_assert_uint_eq(out[i], (uint8_t)(i * 7));
	sock_udp_queue_pop(&q);
	ck_assert_uint_eq(ring_buf_pool_in_use(own), 0);

	ring_buf_free(e2.buf);
	sock_udp_queue_fini(&q);
	ring_buf_pool_destroy(own);
	ring_buf_pool_destroy(big);
	ck_assert_uint_eq(free_now(), 16);
}
END_TEST

START_TEST(rehome_of_an_empty_queue_makes_no_pool)
{
	struct sock_udp_queue q;
	ck_assert_int_eq(sock_udp_queue_init(&q, 4), 0);
	struct ring_buf_pool *own = (struct ring_buf_pool *)&q;   /* must be overwritten */
	ck_assert_int_eq(sock_udp_queue_rehome(&q, "own", &own), 0);
	ck_assert_ptr_null(own);
	sock_udp_queue_fini(&q);
}
END_TEST

START_TEST(chain_from_iovecs_spans_buffers_and_gives_all_back_when_short)
{
	ck_assert_uint_eq(sock_udp_copy_buf_size(0), 64);
	ck_assert_uint_eq(sock_udp_copy_buf_size(100), 100);
	ck_assert_uint_eq(sock_udp_copy_buf_size(65507), SOCK_UDP_COPY_BUF_MAX);
	ck_assert_uint_eq(sock_udp_copy_bufs(0, 64), 1);
	ck_assert_uint_eq(sock_udp_copy_bufs(64, 64), 1);
	ck_assert_uint_eq(sock_udp_copy_bufs(65, 64), 2);

	uint8_t a[100], b[50];
	for (int i = 0; i < 100; i++)
		a[i] = (uint8_t)i;
	for (int i = 0; i < 50; i++)
		b[i] = (uint8_t)(100 + i);
	struct iovec iov[2] = { { a, 100 }, { b, 50 } };
	/* 150 bytes in the fixture's 64-byte buffers: 64 + 64 + 22. */
	struct ring_buf *c = sock_udp_chain_from_iov(pool, 150, iov, 2);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(free_now(), 13);
	ck_assert_uint_eq(c->tot_len, 150);
	ck_assert_uint_eq(c->next->next->len, 22);
	ck_assert_uint_eq(c->next->next->tot_len, 22);
	uint8_t out[200];
	struct iovec o = { out, sizeof(out) };
	ck_assert_uint_eq(sock_udp_copy_out(c, 150, &o, 1), 150);
	for (int i = 0; i < 150; i++)
		ck_assert_uint_eq(out[i], i);
	ring_buf_free(c);
	/* 13 buffers left, 1100 bytes need 18: NULL, and nothing kept. */
	uint8_t large[1100] = { 0 };
	struct iovec l = { large, sizeof(large) };
	ck_assert_ptr_null(sock_udp_chain_from_iov(pool, 1100, &l, 1));
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
	tcase_add_test(tc, rehome_copies_every_datagram_in_order_and_gives_the_frames_back);
	tcase_add_test(tc, rehome_of_an_empty_queue_makes_no_pool);
	tcase_add_test(tc, chain_from_iovecs_spans_buffers_and_gives_all_back_when_short);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
