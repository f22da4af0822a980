/* The ring manager on the loop backend: keys, sharing, the per-interface
 * limit, references, fork; rings grouped over several queues (ring_multi). */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring/ring_mgr.h"

static void configure(unsigned limit, unsigned queues)
{
	struct ring_mgr_config cfg = {
		.ring = { .backend = RING_BACKEND_LOOP, .rx_bufs = 64, .rx_wre = 64, .tx_bufs = 64, .tx_wre = 64 },
		.limit_per_interface = limit,
		.queues = queues,
	};
	ring_mgr_configure(&cfg);
}

START_TEST(keys_follow_the_allocation_logic)
{
	/* 0: one key for everything. */
	ck_assert_uint_eq(ring_mgr_key(0, 3, 100, 1, 0x0100007f), ring_mgr_key(0, 4, 101, 0, 0x0200007f));
	/* 1: per local IP. */
	ck_assert_uint_eq(ring_mgr_key(1, 3, 100, 1, 0x0100007f), ring_mgr_key(1, 4, 101, 0, 0x0100007f));
	ck_assert_uint_ne(ring_mgr_key(1, 3, 100, 1, 0x0100007f), ring_mgr_key(1, 3, 100, 1, 0x0200007f));
	/* 10: per socket. */
	ck_assert_uint_ne(ring_mgr_key(10, 3, 100, 1, 0), ring_mgr_key(10, 4, 100, 1, 0));
	ck_assert_uint_eq(ring_mgr_key(10, 3, 100, 1, 0), ring_mgr_key(10, 3, 101, 0, 9));
	/* 20: per thread. */
	ck_assert_uint_ne(ring_mgr_key(20, 3, 100, 1, 0), ring_mgr_key(20, 3, 101, 1, 0));
	ck_assert_uint_eq(ring_mgr_key(20, 3, 100, 1, 0), ring_mgr_key(20, 4, 100, 0, 0));
	/* 30 and 31: per core, the same ring for both. */
	ck_assert_uint_ne(ring_mgr_key(30, 3, 100, 1, 0), ring_mgr_key(30, 3, 100, 0, 0));
	ck_assert_uint_eq(ring_mgr_key(30, 3, 100, 1, 0), ring_mgr_key(31, 4, 101, 1, 0));
	/* Different logics never collide: fd 5 is not thread 5 nor core 5. */
	ck_assert_uint_ne(ring_mgr_key(10, 5, 0, 0, 0), ring_mgr_key(20, 0, 5, 0, 0));
	ck_assert_uint_ne(ring_mgr_key(20, 0, 5, 0, 0), ring_mgr_key(30, 0, 0, 5, 0));
	ck_assert_uint_ne(ring_mgr_key(0, 0, 0, 0, 0), ring_mgr_key(10, 0, 0, 0, 0));
	/* Unknown logic: per interface. */
	ck_assert_uint_eq(ring_mgr_key(7, 3, 100, 1, 5), ring_mgr_key(0, 0, 0, 0, 0));
}
END_TEST

START_TEST(same_key_shares_ring_and_last_put_closes)
{
	configure(0, 8);
	struct ring *a = ring_mgr_get("vmaloop0", ring_mgr_key(10, 3, 0, 0, 0));
	struct ring *b = ring_mgr_get("vmaloop0", ring_mgr_key(10, 3, 0, 0, 0));
	struct ring *c = ring_mgr_get("vmaloop0", ring_mgr_key(10, 4, 0, 0, 0));

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_eq(a, b);
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_ne(a, c);
	ck_assert_uint_ne(a->queue, c->queue);
	ck_assert_uint_eq(ring_mgr_refs(a), 2);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 2);
	/* Another interface never shares. */
	struct ring *d = ring_mgr_get("vmaloop1", ring_mgr_key(10, 3, 0, 0, 0));
	ck_assert_ptr_ne(d, a);
	ck_assert_uint_eq(ring_mgr_count("vmaloop1"), 1);

	ring_mgr_put(a);
	ck_assert_uint_eq(ring_mgr_refs(a), 1);
	ring_mgr_put(b);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 1);
	ring_mgr_put(c);
	ring_mgr_put(d);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 0);
	ck_assert_uint_eq(ring_mgr_count("vmaloop1"), 0);
	ring_mgr_put(NULL);
}
END_TEST

START_TEST(limit_per_interface_shares_rings_round_robin)
{
	configure(2, 8);
	struct ring *r[6];

	for (int i = 0; i < 6; i++) {
		r[i] = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 100 + i, 0, 0));
		ck_assert_ptr_nonnull(r[i]);
	}
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 2);
	ck_assert_ptr_ne(r[0], r[1]);
	/* Keys 3..6 alternate over the two rings. */
	ck_assert_ptr_ne(r[2], r[3]);
	ck_assert_ptr_eq(r[2], r[4]);
	ck_assert_ptr_eq(r[3], r[5]);
	ck_assert_uint_eq(ring_mgr_refs(r[0]) + ring_mgr_refs(r[1]), 6);
	ck_assert_uint_eq(ring_mgr_refs(r[0]), 3);
	/* A key keeps its ring. */
	struct ring *again = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 104, 0, 0));
	ck_assert_ptr_eq(again, r[4]);
	ring_mgr_put(again);
	for (int i = 0; i < 6; i++)
		ring_mgr_put(r[i]);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 0);
}
END_TEST

START_TEST(queues_cap_rings_like_a_one_queue_veth)
{
	configure(0, 1);
	struct ring *a = ring_mgr_get("vmaloop0", ring_mgr_key(10, 3, 0, 0, 0));
	struct ring *b = ring_mgr_get("vmaloop0", ring_mgr_key(10, 4, 0, 0, 0));

	ck_assert_ptr_eq(a, b);
	ck_assert_uint_eq(a->queue, 0);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 1);
	ck_assert_uint_eq(ring_mgr_refs(a), 2);
	ring_mgr_close_all();
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 0);
	ck_assert_uint_eq(ring_mgr_refs(a), 0);
}
END_TEST

START_TEST(per_queue_gives_keys_rings_of_their_own_on_one_queue)
{
	/* AF_XDP: several XSKs of the process on a one-queue veth. */
	struct ring_mgr_config cfg = {
		.ring = { .backend = RING_BACKEND_LOOP, .rx_bufs = 64, .rx_wre = 64, .tx_bufs = 64, .tx_wre = 64 },
		.queues = 1,
		.per_queue = 3,
	};
	ring_mgr_configure(&cfg);
	struct ring *r[4];
	for (int i = 0; i < 4; i++) {
		r[i] = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 200 + i, 0, 0));
		ck_assert_ptr_nonnull(r[i]);
		ck_assert_uint_eq(r[i]->queue, 0);
	}
	ck_assert_ptr_ne(r[0], r[1]);
	ck_assert_ptr_ne(r[1], r[2]);
	ck_assert_ptr_ne(r[0], r[2]);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 3);
	/* The fourth key shares one of the three. */
	ck_assert(r[3] == r[0] || r[3] == r[1] || r[3] == r[2]);
	ck_assert_uint_eq(ring_mgr_refs(r[3]), 2);
	/* Two queues of room 3 each: six rings, spread over both queues. */
	ring_mgr_close_all();
	cfg.queues = 2;
	ring_mgr_configure(&cfg);
	unsigned on_queue[2] = { 0, 0 };
	for (int i = 0; i < 6; i++) {
		struct ring *x = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 300 + i, 0, 0));
		ck_assert_ptr_nonnull(x);
		ck_assert_uint_eq(ring_mgr_refs(x), 1);
		on_queue[x->queue]++;
	}
	ck_assert_uint_eq(on_queue[0], 3);
	ck_assert_uint_eq(on_queue[1], 3);
	ring_mgr_close_all();
}
END_TEST

/* Sends one frame of len bytes of value on ring (through its own TX) and
 * flushes: the loop backend receives it on the same ring. */
static void loop_send(struct ring *ring, uint8_t value, unsigned len)
{
	struct ring_buf *buf = ring_tx_alloc(ring);
	ck_assert_ptr_nonnull(buf);
	memset(buf->data, value, len);
	buf->len = len;
	ck_assert_int_eq(ring_tx_send(ring, buf), 0);
	ring_tx_flush(ring);
}

static bool wait_fd_readable(const struct ring *ring)
{
	struct pollfd p = { .fd = ring_wait_fd(ring), .events = POLLIN };
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

START_TEST(multi_ring_receives_what_any_queue_received)
{
	const struct ring_config cfg = { .backend = RING_BACKEND_LOOP, .rx_bufs = 64, .rx_wre = 64, .tx_bufs = 64,
					 .tx_wre = 64 };
	struct ring *m[3];
	for (unsigned q = 0; q < 3; q++) {
		m[q] = ring_loop_open("vmaloopm", q, &cfg);
		ck_assert_ptr_nonnull(m[q]);
	}
	struct ring *r = ring_multi_wrap(m, 3);
	ck_assert_ptr_nonnull(r);
	struct ring *back[4];
	ck_assert_uint_eq(ring_multi_members(r, back, 4), 3);
	ck_assert_ptr_eq(back[2], m[2]);
	ck_assert_int_eq(ring_wait_arm(r), 0);
	ck_assert(!wait_fd_readable(r));
	ck_assert(!ring_rx_maybe(r));

	/* A frame on queue 2 wakes the group's wait fd and is received; the
	 * look without the lock sees it in the group and in that member only. */
	loop_send(m[2], 0x22, 60);
	ck_assert(wait_fd_readable(r));
	ck_assert(ring_rx_maybe(r));
	ck_assert(ring_rx_maybe(m[2]) && !ring_rx_maybe(m[0]) && !ring_rx_maybe(m[1]));
	ck_assert_int_eq(ring_wait_arm(r), 1);
	loop_send(m[0], 0x00, 61);
	loop_send(m[1], 0x11, 62);
	struct ring_buf *bufs[8];
	int n = ring_rx_burst(r, bufs, 8);
	ck_assert_int_eq(n, 3);
	unsigned seen = 0;
	for (int i = 0; i < n; i++) {
		unsigned q = bufs[i]->data[0] >> 4;
		ck_assert_uint_lt(q, 3);
		ck_assert_uint_eq(bufs[i]->len, 60 + (q + 1) % 3);
		seen |= 1u << q;
		ring_buf_free(bufs[i]);
	}
	ck_assert_uint_eq(seen, 7);
	ck_assert_int_eq(ring_rx_burst(r, bufs, 8), 0);
	ck_assert(!ring_rx_maybe(r));

	/* max is honoured and no queue starves: 2 frames on each of the
	 * three queues, bursts of 2. */
	for (unsigned q = 0; q < 3; q++) {
		loop_send(m[q], (uint8_t)(q << 4), 60);
		loop_send(m[q], (uint8_t)(q << 4), 60);
	}
	unsigned per_queue[3] = { 0, 0, 0 };
	for (int round = 0; round < 3; round++) {
		n = ring_rx_burst(r, bufs, 2);
		ck_assert_int_eq(n, 2);
		for (int i = 0; i < n; i++) {
			per_queue[bufs[i]->data[0] >> 4]++;
			ring_buf_free(bufs[i]);
		}
	}
	ck_assert_uint_eq(per_queue[0] + per_queue[1] + per_queue[2], 6);
	ck_assert_int_eq(ring_rx_burst(r, bufs, 8), 0);

	/* The group sends through its first member; counters are sums. */
	loop_send(r, 0x00, 70);
	struct ring_counters c0, sum;
	ring_read_counters(m[0], &c0);
	ck_assert_uint_eq(c0.tx_packets, 1 + 2 + 1);
	ring_read_counters(r, &sum);
	ck_assert_uint_eq(sum.tx_packets, 4 + 3 + 3);
	ck_assert_uint_eq(sum.rx_packets, 9);
	ck_assert_int_eq(ring_rx_burst(r, bufs, 8), 1);
	ck_assert_ptr_eq(bufs[0]->pool, ring_rx_pool(m[0]));
	ring_buf_free(bufs[0]);

	/* Flows go to the first member. */
	struct ring_flow flow = { .proto = 17, .local_ip = 0x0100007f, .local_port = 0x3412, .owner_fd = -1 };
	ck_assert_int_eq(ring_attach_flow(r, &flow), 0);
	ck_assert_int_eq(ring_attach_flow(m[0], &flow), -EEXIST);
	ck_assert_int_eq(ring_detach_flow(r, &flow), 0);
	ring_close(r);
}
END_TEST

/* VMA_RX_SW_CSUM auto: which drivers' frames never crossed a wire. */
START_TEST(virtual_drivers_are_known)
{
	ck_assert(ring_driver_is_virtual("veth"));
	ck_assert(ring_driver_is_virtual("macvlan"));
	ck_assert(ring_driver_is_virtual("ipvlan"));
	ck_assert(ring_driver_is_virtual("tun"));
	ck_assert(!ring_driver_is_virtual("mlx5_core"));
	ck_assert(!ring_driver_is_virtual("virtio_net"));
	ck_assert(!ring_driver_is_virtual(""));
	ck_assert(!ring_driver_is_virtual("veth2"));
}
END_TEST

START_TEST(spanning_rings_cover_every_queue)
{
	struct ring_mgr_config cfg = {
		.ring = { .backend = RING_BACKEND_LOOP, .rx_bufs = 64, .rx_wre = 64, .tx_bufs = 64, .tx_wre = 64 },
		.queues = 3,
		.per_queue = 2,
		.placement = RING_MGR_PLACE_SPANNING,
	};
	ring_mgr_configure(&cfg);
	struct ring *a = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 400, 0, 0));
	struct ring *b = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 401, 0, 0));
	struct ring *c = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 402, 0, 0));
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_ne(a, b);
	struct ring *members[4];
	for (int k = 0; k < 2; k++) {
		ck_assert_uint_eq(ring_multi_members(k ? b : a, members, 4), 3);
		for (unsigned q = 0; q < 3; q++)
			ck_assert_uint_eq(members[q]->queue, q);
	}
	/* per_queue 2 spanning rings, then sharing. */
	ck_assert(c == a || c == b);
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 2);
	ring_mgr_close_all();
	ck_assert_uint_eq(ring_mgr_count("vmaloop0"), 0);
	/* One queue: a plain ring. */
	cfg.queues = 1;
	ring_mgr_configure(&cfg);
	a = ring_mgr_get("vmaloop0", ring_mgr_key(20, 0, 400, 0, 0));
	ck_assert_uint_eq(ring_multi_members(a, members, 4), 1);
	ck_assert_ptr_eq(members[0], a);
	ring_mgr_close_all();
}
END_TEST

START_TEST(fork_child_forgets_parent_rings_and_opens_its_own)
{
	configure(0, 8);
	struct ring *a = ring_mgr_get("vmaloop0", ring_mgr_key(0, 0, 0, 0, 0));
	ck_assert_ptr_nonnull(a);

	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		ring_mgr_forget_after_fork();
		int bad = 0;
		bad |= ring_mgr_count("vmaloop0") != 0;
		bad |= ring_mgr_refs(a) != 0;
		ring_mgr_put(a); /* not ours: ignored, no close */
		/* The child's own ring on the same interface (its own vmad
		 * membership in the real backend), not the parent's. */
		struct ring *mine = ring_mgr_get("vmaloop0", ring_mgr_key(0, 0, 0, 0, 0));
		bad |= mine == NULL || mine == a;
		bad |= ring_mgr_count("vmaloop0") != 1;
		/* An interface the parent had no ring on is allowed too. */
		struct ring *other = ring_mgr_get("vmaloop1", 0);
		bad |= other == NULL;
		ring_mgr_close_all();
		_exit(bad ? 1 : 0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	/* The parent's ring is untouched. */
	ck_assert_uint_eq(ring_mgr_refs(a), 1);
	ring_mgr_put(a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_mgr");
	TCase *tc = tcase_create("mgr");
	tcase_add_test(tc, keys_follow_the_allocation_logic);
	tcase_add_test(tc, same_key_shares_ring_and_last_put_closes);
	tcase_add_test(tc, limit_per_interface_shares_rings_round_robin);
	tcase_add_test(tc, queues_cap_rings_like_a_one_queue_veth);
	tcase_add_test(tc, per_queue_gives_keys_rings_of_their_own_on_one_queue);
	tcase_add_test(tc, multi_ring_receives_what_any_queue_received);
	tcase_add_test(tc, spanning_rings_cover_every_queue);
	tcase_add_test(tc, virtual_drivers_are_known);
	tcase_add_test(tc, fork_child_forgets_parent_rings_and_opens_its_own);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
