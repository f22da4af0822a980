/* Frames lent to the application by the Extra API (src/vma/extra/extra_lend.c
 * and the SocketXtreme buffer calls): a datagram of several buffers goes
 * back to its pool only when the last reference of its last buffer is
 * dropped; ref_vma_buff keeps a buffer past free_vma_packets; a closed
 * socket's packet ids go back at once while SocketXtreme's buffers stay
 * until freed; addresses that are not ours are refused, never followed. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg_params.h"
#include "extra/extra.h"
#include "extra/extra_lend.h"
#include "sock/sock_tcp_internal.h"

static struct sock_offload lane;
static struct ring_buf_pool *pool;
static struct extra_xt_table *table;

static void setup(void)
{
	memset(&lane, 0, sizeof(lane));
	sock_offload_lock_init(&lane);
	pool = ring_buf_pool_create("lend", 16, 256);
	ck_assert_ptr_nonnull(pool);
	table = extra_lend_table(&lane);
	ck_assert_ptr_nonnull(table);
	g_cfg.socketxtreme = 1;
}

static void teardown(void)
{
	ring_buf_pool_destroy(pool);
}

static unsigned in_use(void)
{
	return ring_buf_pool_in_use(pool);
}

/* A chain of n buffers of 100 bytes each. */
static struct ring_buf *chain_of(unsigned n)
{
	struct ring_buf *head = NULL, *prev = NULL;
	for (unsigned i = 0; i < n; i++) {
		struct ring_buf *b = ring_buf_alloc(pool);
		ck_assert_ptr_nonnull(b);
		b->len = 100;
		memset(b->data, 'a' + (int)i, 100);
		if (prev)
			prev->next = b;
		else
			head = b;
		prev = b;
	}
	return head;
}

START_TEST(a_datagram_of_three_buffers_goes_back_with_its_last_reference)
{
	struct extra_xt_node node = { 0 };
	struct ring_buf *c = chain_of(3);
	ck_assert_uint_eq(extra_lend_chain_bufs(c, 250), 3);
	ck_assert_uint_eq(extra_lend_chain_bufs(c, 150), 2);
	sock_offload_lock(&lane);
	struct extra_xt_buf *lead = extra_lend_chain_locked(table, &node, c, 250, 3);
	sock_offload_unlock(&lane);
	ck_assert_uint_eq(node.lent, 1);
	struct vma_buff_t *b1 = &lead->vb, *b2 = b1->next, *b3 = b2 ? b2->next : NULL;
	ck_assert_ptr_nonnull(b3);
	ck_assert_ptr_null(b3->next);
	ck_assert_uint_eq(b1->len + b2->len + b3->len, 250);
	ck_assert_uint_eq(b3->len, 50);
	ck_assert_int_eq(((const char *)b2->payload)[0], 'b');
	struct vma_packet_desc_t desc = { .num_bufs = 3, .total_len = 250, .buff_lst = b1 };

	ck_assert_int_eq(extra_socketxtreme_ref_vma_buff(b2), 2);
	ck_assert_int_eq(extra_socketxtreme_free_vma_packets(&desc, 1), 0);
	/* b2 is still referenced: the whole datagram stays. */
	ck_assert_uint_eq(in_use(), 3);
	ck_assert_int_eq(((const char *)b2->payload)[0], 'b');
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(b2), 0);
	ck_assert_uint_eq(in_use(), 0);
	ck_assert_uint_eq(node.lent, 0);
	/* Freed already: refused. */
	errno = 0;
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(b2), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(extra_socketxtreme_free_vma_packets(&desc, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(addresses_that_are_not_lent_buffers_are_refused)
{
	struct vma_buff_t foreign = { 0 };
	struct vma_packet_desc_t desc = { .num_bufs = 1, .total_len = 1, .buff_lst = &foreign };
	errno = 0;
	ck_assert_int_eq(extra_socketxtreme_free_vma_packets(&desc, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(extra_socketxtreme_ref_vma_buff(&foreign), -1);
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(NULL), -1);
	/* Inside the table but not at a descriptor. */
	struct vma_buff_t *inside = (struct vma_buff_t *)((char *)&table->slot[1] + 8);
	struct extra_xt_table *t = NULL;
	ck_assert_ptr_null(extra_lend_lookup(inside, &t));
	ck_assert_int_eq(extra_socketxtreme_ref_vma_buff(inside), -1);
	/* A free descriptor. */
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(&table->slot[EXTRA_XT_BUFS - 1].vb), -1);
	ck_assert_int_eq(extra_socketxtreme_free_vma_packets(NULL, 1), -1);
	ck_assert_uint_eq(in_use(), 0);
}
END_TEST

START_TEST(a_closed_sockets_packet_ids_go_back_socketxtremes_stay)
{
	struct sock_tcp *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	s->ctx = &lane;
	struct ring_buf *by_id = chain_of(1), *by_poll = chain_of(1);
	sock_offload_lock(&lane);
	struct extra_xt_buf *x = extra_lend_tcp_locked(table, s, by_id, true);
	struct extra_xt_buf *y = extra_lend_tcp_locked(table, s, by_poll, false);
	ck_assert_uint_eq(s->base.xt.lent, 2);
	ck_assert_uint_eq(sock_tcp_frames_held(s), 2);
	extra_lend_forget_locked(&lane, &s->base.xt);
	sock_offload_unlock(&lane);
	/* The packet id's frame went back; the completion's stays readable. */
	ck_assert_uint_eq(in_use(), 1);
	ck_assert_uint_eq(x->refs, 0);
	ck_assert_ptr_null(y->owner);
	ck_assert_int_eq(((const char *)y->vb.payload)[0], 'a');
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(&y->vb), 0);
	ck_assert_uint_eq(in_use(), 0);
	free(s);
}
END_TEST

START_TEST(a_dead_lane_keeps_its_frames)
{
	struct extra_xt_node node = { 0 };
	struct ring_buf *c = chain_of(1);
	sock_offload_lock(&lane);
	struct extra_xt_buf *lead = extra_lend_chain_locked(table, &node, c, 100, 1);
	sock_offload_unlock(&lane);
	/* Exit closed the rings (or this is a forked child's copy): nothing
	 * is given back, and the call does not fail the application. */
	lane.dead = true;
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(&lead->vb), 0);
	ck_assert_uint_eq(in_use(), 1);
	lane.dead = false;
	ck_assert_int_eq(extra_socketxtreme_free_vma_buff(&lead->vb), 0);
	ck_assert_uint_eq(in_use(), 0);
}
END_TEST

START_TEST(without_socketxtreme_mode_the_calls_are_refused)
{
	g_cfg.socketxtreme = 0;
	struct vma_completion_t c;
	errno = 0;
	ck_assert_int_eq(extra_socketxtreme_poll(0, &c, 1, 0), -1);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	ck_assert_int_eq(extra_socketxtreme_free_vma_packets(NULL, 0), -1);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	g_cfg.socketxtreme = 1;
	errno = 0;
	ck_assert_int_eq(extra_socketxtreme_poll(12345, &c, 1, 0), -1);
	ck_assert_int_eq(errno, EBADFD);   /* not a ring fd of ours */
}
END_TEST

START_TEST(user_data_is_eight_bytes)
{
	struct extra_xt_node n = { 0 };
	uint64_t v = 0, want = 0x1122334455667788ULL;
	socklen_t len = sizeof(v);
	ck_assert_int_eq(extra_xt_user_data_get(&n, 7, &v, &len), 0);
	ck_assert_uint_eq(v, 7);   /* the fd until set */
	ck_assert_int_eq(extra_xt_user_data_set(&n, &want, sizeof(want)), 0);
	ck_assert_int_eq(extra_xt_user_data_get(&n, 7, &v, &len), 0);
	ck_assert_uint_eq(v, want);
	uint32_t small = 1;
	errno = 0;
	ck_assert_int_eq(extra_xt_user_data_set(&n, &small, sizeof(small)), -1);
	ck_assert_int_eq(errno, EINVAL);
	len = 4;
	ck_assert_int_eq(extra_xt_user_data_get(&n, 7, &v, &len), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("extra_lend");
	TCase *tc = tcase_create("lend");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_datagram_of_three_buffers_goes_back_with_its_last_reference);
	tcase_add_test(tc, addresses_that_are_not_lent_buffers_are_refused);
	tcase_add_test(tc, a_closed_sockets_packet_ids_go_back_socketxtremes_stay);
	tcase_add_test(tc, a_dead_lane_keeps_its_frames);
	tcase_add_test(tc, without_socketxtreme_mode_the_calls_are_refused);
	tcase_add_test(tc, user_data_is_eight_bytes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
