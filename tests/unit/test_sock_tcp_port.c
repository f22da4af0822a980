/* The idle local ports of a lane (sock/sock_tcp_port.c): oldest first per
 * address, gaps closed, bounded. */
#include <check.h>
#include <stdlib.h>

#include "sock/sock_tcp_port.h"

static struct sock_tcp_port port_of(uint32_t ip, uint16_t port)
{
	return (struct sock_tcp_port){ .fd = 100 + port, .ip = ip, .port = port, .if_slot = 0 };
}

START_TEST(empty_cache_gives_nothing)
{
	struct sock_tcp_ports c = { 0 };
	struct sock_tcp_port p;
	ck_assert(!sock_tcp_ports_take(&c, 1, &p));
	ck_assert(!sock_tcp_ports_pop(&c, &p));
}
END_TEST

START_TEST(oldest_port_of_the_address_first)
{
	struct sock_tcp_ports c = { 0 };
	struct sock_tcp_port p;
	for (uint16_t i = 1; i <= 4; i++) {
		struct sock_tcp_port in = port_of(i % 2 ? 10 : 20, i);
		ck_assert(sock_tcp_ports_give(&c, &in));
	}
	ck_assert(sock_tcp_ports_take(&c, 20, &p));
	ck_assert_uint_eq(p.port, 2);
	ck_assert_int_eq(p.fd, 102);
	ck_assert(sock_tcp_ports_take(&c, 10, &p));
	ck_assert_uint_eq(p.port, 1);
	ck_assert(sock_tcp_ports_take(&c, 20, &p));
	ck_assert_uint_eq(p.port, 4);
	ck_assert(!sock_tcp_ports_take(&c, 20, &p));
	ck_assert_uint_eq(c.count, 1);
	ck_assert(sock_tcp_ports_take(&c, 10, &p));
	ck_assert_uint_eq(p.port, 3);
	ck_assert_uint_eq(c.count, 0);
}
END_TEST

START_TEST(a_port_given_back_comes_after_the_older_ones)
{
	struct sock_tcp_ports c = { 0 };
	struct sock_tcp_port p;
	for (uint16_t i = 1; i <= 3; i++) {
		struct sock_tcp_port in = port_of(10, i);
		ck_assert(sock_tcp_ports_give(&c, &in));
	}
	ck_assert(sock_tcp_ports_take(&c, 10, &p));
	ck_assert_uint_eq(p.port, 1);
	ck_assert(sock_tcp_ports_give(&c, &p));   /* closed: rests behind 2 and 3 */
	uint16_t order[3];
	for (int i = 0; i < 3; i++) {
		ck_assert(sock_tcp_ports_take(&c, 10, &p));
		order[i] = p.port;
	}
	ck_assert_uint_eq(order[0], 2);
	ck_assert_uint_eq(order[1], 3);
	ck_assert_uint_eq(order[2], 1);
}
END_TEST

START_TEST(bounded_and_wraps_around)
{
	struct sock_tcp_ports c = { 0 };
	struct sock_tcp_port p;
	for (unsigned i = 0; i < SOCK_TCP_PORTS_MAX; i++) {
		struct sock_tcp_port in = port_of(10, (uint16_t)(i + 1));
		ck_assert(sock_tcp_ports_give(&c, &in));
	}
	struct sock_tcp_port extra = port_of(10, 9999);
	ck_assert(!sock_tcp_ports_give(&c, &extra));   /* full: the caller closes it */
	/* Many rounds of take-oldest / give-back keep the FIFO order across
	 * the wrap of the ring. */
	for (unsigned round = 0; round < 3 * SOCK_TCP_PORTS_MAX; round++) {
		ck_assert(sock_tcp_ports_take(&c, 10, &p));
		ck_assert_uint_eq(p.port, round % SOCK_TCP_PORTS_MAX + 1);
		ck_assert(sock_tcp_ports_give(&c, &p));
	}
	/* pop empties it, oldest first. */
	unsigned n = 0;
	while (sock_tcp_ports_pop(&c, &p))
		ck_assert_uint_eq(p.port, n++ % SOCK_TCP_PORTS_MAX + 1);
	ck_assert_uint_eq(n, SOCK_TCP_PORTS_MAX);
	ck_assert_uint_eq(c.count, 0);
}
END_TEST

START_TEST(take_from_the_middle_after_a_wrap)
{
	struct sock_tcp_ports c = { 0 };
	struct sock_tcp_port p;
	/* Move head near the end of the array, then mix two addresses. */
	for (unsigned i = 0; i < SOCK_TCP_PORTS_MAX - 2; i++) {
		struct sock_tcp_port in = port_of(10, 1);
		ck_assert(sock_tcp_ports_give(&c, &in));
		ck_assert(sock_tcp_ports_pop(&c, &p));
	}
	for (uint16_t i = 1; i <= 6; i++) {
		struct sock_tcp_port in = port_of(i == 4 ? 20 : 10, i);
		ck_assert(sock_tcp_ports_give(&c, &in));
	}
	ck_assert(sock_tcp_ports_take(&c, 20, &p));
	ck_assert_uint_eq(p.port, 4);
	uint16_t want[] = { 1, 2, 3, 5, 6 };
	for (unsigned i = 0; i < 5; i++) {
		ck_assert(sock_tcp_ports_take(&c, 10, &p));
		ck_assert_uint_eq(p.port, want[i]);
	}
	ck_assert_uint_eq(c.count, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sock_tcp_port");
	TCase *tc = tcase_create("idle ports");
	tcase_add_test(tc, empty_cache_gives_nothing);
	tcase_add_test(tc, oldest_port_of_the_address_first);
	tcase_add_test(tc, a_port_given_back_comes_after_the_older_ones);
	tcase_add_test(tc, bounded_and_wraps_around);
	tcase_add_test(tc, take_from_the_middle_after_a_wrap);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
