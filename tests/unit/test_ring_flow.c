/* Steering keys built from struct ring_flow: which map, exact bytes. */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "ring/ring_flow.h"
#include "ring/ring_xdp_maps.h"

static uint32_t ip(const char *text)
{
	uint32_t addr;
	ck_assert_int_eq(inet_pton(AF_INET, text, &addr), 1);
	return addr;
}

START_TEST(five_tuple_key_holds_both_ends_in_network_order)
{
	struct ring_flow f = { .proto = IPPROTO_UDP, .local_ip = ip("198.18.0.2"), .local_port = htons(7000),
			       .remote_ip = ip("198.18.0.1"), .remote_port = htons(40000) };
	union ring_flow_key key;
	memset(&key, 0xff, sizeof(key));

	ck_assert_int_eq(ring_flow_key(&f, &key), RING_FLOW_5TUPLE);
	const uint8_t expect[16] = { 198, 18, 0, 2, 198, 18, 0, 1, 0x1b, 0x58, 0x9c, 0x40, IPPROTO_UDP, 0, 0, 0 };
	ck_assert_uint_eq(sizeof(key.k5), 16);
	ck_assert_mem_eq(&key.k5, expect, 16);
}
END_TEST

START_TEST(three_tuple_key_for_bound_and_wildcard_sockets)
{
	struct ring_flow f = { .proto = IPPROTO_TCP, .local_ip = ip("198.18.0.2"), .local_port = htons(80) };
	union ring_flow_key key;

	ck_assert_int_eq(ring_flow_key(&f, &key), RING_FLOW_3TUPLE);
	const uint8_t expect[8] = { 198, 18, 0, 2, 0, 80, IPPROTO_TCP, 0 };
	ck_assert_mem_eq(&key.k3, expect, 8);
	f.local_ip = 0;
	ck_assert_int_eq(ring_flow_key(&f, &key), RING_FLOW_3TUPLE);
	const uint8_t any[8] = { 0, 0, 0, 0, 0, 80, IPPROTO_TCP, 0 };
	ck_assert_mem_eq(&key.k3, any, 8);
}
END_TEST

START_TEST(group_key_ignores_unicast_fields)
{
	struct ring_flow f = { .proto = IPPROTO_UDP, .group = ip("239.1.2.3"), .local_port = htons(5000),
			       .local_ip = ip("198.18.0.2"), .remote_ip = ip("1.2.3.4") };
	union ring_flow_key key;

	ck_assert_int_eq(ring_flow_key(&f, &key), RING_FLOW_GROUP);
	const uint8_t expect[8] = { 239, 1, 2, 3, 0x13, 0x88, IPPROTO_UDP, 0 };
	ck_assert_mem_eq(&key.grp, expect, 8);
	f.local_port = 0; /* any port */
	ck_assert_int_eq(ring_flow_key(&f, &key), RING_FLOW_GROUP);
	ck_assert_uint_eq(key.grp.port, 0);
}
END_TEST

START_TEST(unsteerable_flows_are_einval)
{
	union ring_flow_key key;
	struct ring_flow icmp = { .proto = IPPROTO_ICMP, .local_port = htons(1) };
	struct ring_flow no_port = { .proto = IPPROTO_UDP };
	struct ring_flow half5 = { .proto = IPPROTO_UDP, .local_port = htons(1), .remote_ip = ip("1.2.3.4") };
	struct ring_flow no_local = { .proto = IPPROTO_UDP, .local_port = htons(1), .remote_ip = ip("1.2.3.4"),
				      .remote_port = htons(2) };
	struct ring_flow unicast_group = { .proto = IPPROTO_UDP, .group = ip("10.0.0.1") };

	ck_assert_int_eq(ring_flow_key(&icmp, &key), -EINVAL);
	ck_assert_int_eq(ring_flow_key(&no_port, &key), -EINVAL);
	ck_assert_int_eq(ring_flow_key(&half5, &key), -EINVAL);
	ck_assert_int_eq(ring_flow_key(&no_local, &key), -EINVAL);
	ck_assert_int_eq(ring_flow_key(&unicast_group, &key), -EINVAL);
}
END_TEST

START_TEST(flow_same_compares_every_field)
{
	struct ring_flow a = { .proto = IPPROTO_UDP, .local_port = htons(1) }, b = a;

	ck_assert(ring_flow_same(&a, &b));
	b.remote_port = htons(2);
	ck_assert(!ring_flow_same(&a, &b));
	b = a;
	b.proto = IPPROTO_TCP;
	ck_assert(!ring_flow_same(&a, &b));
}
END_TEST

/* A share group's spread (ring_xdp_share_pick): the pick does not depend
 * on the members' order; a leaving member's flows are the only ones that
 * move; on a join only flows the newcomer takes move, about one in count;
 * and the flows spread about evenly. */
#define SPREAD_FLOWS 20000u
static uint32_t flow_hash(uint32_t i)
{
	return ring_xdp_share_hash(htonl(0xc6120001u + (i >> 12)), htons((uint16_t)(32768 + (i & 4095))), htons(8080));
}

START_TEST(share_pick_moves_only_what_a_membership_change_must)
{
	const uint32_t four[] = { 3, 7, 12, 30 }, reversed[] = { 30, 12, 7, 3 };
	const uint32_t without_7[] = { 3, 30, 12 }, with_5[] = { 3, 7, 12, 30, 5 };
	unsigned per[32] = { 0 }, moved_leave = 0, moved_join = 0, to_newcomer = 0;

	for (uint32_t i = 0; i < SPREAD_FLOWS; i++) {
		uint32_t h = flow_hash(i);
		uint32_t p = ring_xdp_share_pick(four, 4, h);
		ck_assert_uint_eq(ring_xdp_share_pick(reversed, 4, h), p);
		per[p]++;
		uint32_t after_leave = ring_xdp_share_pick(without_7, 3, h);
		if (p != 7 && after_leave != p)
			ck_abort_msg("flow %u moved from %u to %u when member 7 left", i, p, after_leave);
		moved_leave += p == 7;
		ck_assert_uint_ne(after_leave, 7);
		uint32_t after_join = ring_xdp_share_pick(with_5, 5, h);
		if (after_join != p) {
			moved_join++;
			if (after_join != 5)
				ck_abort_msg("flow %u moved from %u to %u, not to the newcomer", i, p, after_join);
		}
		to_newcomer += after_join == 5;
	}
	/* even within 10% of a quarter each; the join takes about a fifth */
	for (unsigned m = 0; m < 4; m++)
		ck_assert_msg(per[four[m]] > SPREAD_FLOWS / 4 * 9 / 10 && per[four[m]] < SPREAD_FLOWS / 4 * 11 / 10,
			      "member %u got %u of %u flows", four[m], per[four[m]], SPREAD_FLOWS);
	ck_assert_uint_eq(moved_join, to_newcomer);
	ck_assert_msg(moved_join > SPREAD_FLOWS / 5 * 8 / 10 && moved_join < SPREAD_FLOWS / 5 * 12 / 10,
		      "a join moved %u of %u flows", moved_join, SPREAD_FLOWS);
	ck_assert_uint_eq(moved_leave, per[7]);
	const uint32_t one[] = { 9 };
	ck_assert_uint_eq(ring_xdp_share_pick(one, 1, 12345), 9);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_flow");
	TCase *tc = tcase_create("keys");
	tcase_add_test(tc, five_tuple_key_holds_both_ends_in_network_order);
	tcase_add_test(tc, three_tuple_key_for_bound_and_wildcard_sockets);
	tcase_add_test(tc, group_key_ignores_unicast_fields);
	tcase_add_test(tc, unsteerable_flows_are_einval);
	tcase_add_test(tc, flow_same_compares_every_field);
	tcase_add_test(tc, share_pick_moves_only_what_a_membership_change_must);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
