/* Route lookup and source selection on hand-built tables. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>

#include "net/net.h"

enum { LO = 1, ETH0 = 2, ETH1 = 3, ETH2 = 4, ETH3 = 5 };

static struct net_snapshot snap;

static in_addr_t ip(const char *text)
{
	struct in_addr a;
	ck_assert_msg(inet_pton(AF_INET, text, &a) == 1, "bad test address %s", text);
	return a.s_addr;
}

static void add_link(int ifindex, const char *name, unsigned int flags, unsigned int mtu)
{
	struct net_link l = { .ifindex = ifindex, .flags = flags, .mtu = mtu, .mac_len = 6 };
	snprintf(l.name, sizeof(l.name), "%s", name);
	l.mac[0] = 0x02;
	l.mac[5] = (uint8_t)ifindex;
	ck_assert_int_eq(net_snapshot_add_link(&snap, &l), 0);
}

static void add_addr(int ifindex, const char *addr, int prefix, bool secondary)
{
	struct net_addr a = { .ifindex = ifindex, .addr = ip(addr), .prefix = (uint8_t)prefix,
			      .flags = secondary ? IFA_F_SECONDARY : 0 };
	ck_assert_int_eq(net_snapshot_add_addr(&snap, &a), 0);
}

static void add_route(uint32_t table, uint8_t type, const char *dst, int prefix, const char *gw, int oif,
		      uint32_t metric, const char *prefsrc, uint32_t mtu)
{
	struct net_route r = { .table = table, .type = type, .dst = ip(dst), .prefix = (uint8_t)prefix,
			       .gateway = gw ? ip(gw) : 0, .oif = oif, .metric = metric,
			       .prefsrc = prefsrc ? ip(prefsrc) : 0, .mtu = mtu };
	ck_assert_int_eq(net_snapshot_add_route(&snap, &r), 0);
}

#define MAIN(...) add_route(RT_TABLE_MAIN, RTN_UNICAST, __VA_ARGS__)
#define LOCAL(type, ...) add_route(RT_TABLE_LOCAL, type, __VA_ARGS__)

static void setup(void)
{
	net_snapshot_init(&snap);
	add_link(LO, "lo", IFF_UP | IFF_RUNNING | IFF_LOOPBACK, 65536);
	add_link(ETH0, "eth0", IFF_UP | IFF_RUNNING, 1500);
	add_link(ETH1, "eth1", IFF_UP | IFF_RUNNING, 9000);
	add_link(ETH2, "eth2", 0, 1500); /* administratively down */
	add_link(ETH3, "eth3", IFF_UP, 1500);
	add_addr(LO, "127.0.0.1", 8, false);
	add_addr(ETH0, "198.18.0.10", 24, false);
	add_addr(ETH0, "198.18.0.11", 24, true);
	add_addr(ETH0, "198.18.5.1", 24, false);
	add_addr(ETH1, "198.19.0.1", 16, false);
	add_addr(ETH2, "198.20.0.1", 24, false);
	add_addr(ETH3, "198.21.0.7", 24, true); /* only a secondary */

	MAIN("0.0.0.0", 0, "198.18.0.1", ETH0, 100, NULL, 0);
	MAIN("0.0.0.0", 0, "198.19.0.254", ETH1, 50, NULL, 0);
	MAIN("198.18.0.0", 24, NULL, ETH0, 0, NULL, 0);
	MAIN("198.18.5.0", 24, NULL, ETH0, 0, NULL, 0);
	MAIN("198.19.0.0", 16, NULL, ETH1, 0, NULL, 0);
	MAIN("198.19.7.0", 24, "198.19.0.9", ETH1, 0, NULL, 1400);
	MAIN("198.19.7.128", 25, NULL, ETH0, 20, NULL, 0);
	MAIN("198.19.7.128", 25, NULL, ETH1, 10, NULL, 0);
	MAIN("198.19.7.192", 26, NULL, ETH0, 30, NULL, 0);
	MAIN("198.19.7.192", 26, NULL, ETH1, 30, NULL, 0);
	MAIN("198.20.0.0", 24, NULL, ETH2, 0, NULL, 0);
	MAIN("198.18.12.0", 24, NULL, ETH0, 0, "198.18.0.11", 0);
	MAIN("198.21.0.0", 24, NULL, ETH3, 0, NULL, 0);
	MAIN("198.22.0.0", 24, NULL, 9, 0, NULL, 0); /* link we have not heard of (yet) */
	MAIN("224.0.0.0", 4, NULL, ETH1, 0, NULL, 0);
	add_route(RT_TABLE_MAIN, RTN_UNREACHABLE, "198.18.9.0", 24, NULL, 0, 0, NULL, 0);
	add_route(RT_TABLE_MAIN, RTN_PROHIBIT, "198.18.10.0", 24, NULL, 0, 0, NULL, 0);
	add_route(RT_TABLE_MAIN, RTN_BLACKHOLE, "198.18.11.0", 24, NULL, 0, 0, NULL, 0);
	/* A table we do not consult (policy routing is the kernel's business). */
	add_route(100, RTN_UNICAST, "198.23.0.0", 16, NULL, ETH0, 0, NULL, 0);

	LOCAL(RTN_LOCAL, "127.0.0.0", 8, NULL, LO, 0, "127.0.0.1", 0);
	LOCAL(RTN_LOCAL, "127.0.0.1", 32, NULL, LO, 0, "127.0.0.1", 0);
	LOCAL(RTN_LOCAL, "198.18.0.10", 32, NULL, ETH0, 0, "198.18.0.10", 0);
	LOCAL(RTN_BROADCAST, "198.18.0.255", 32, NULL, ETH0, 0, "198.18.0.10", 0);
	LOCAL(RTN_BROADCAST, "198.18.5.255", 32, NULL, ETH0, 0, NULL, 0);
	LOCAL(RTN_LOCAL, "198.19.0.1", 32, NULL, ETH1, 0, "198.19.0.1", 0);
}

static void teardown(void)
{
	net_snapshot_clear(&snap);
}

static int lookup(const char *dst, struct net_route_result *res)
{
	struct net_route_query q = { .dst = ip(dst) };
	return net_snapshot_route_lookup(&snap, &q, res);
}

#define ck_assert_ip(value, text) ck_assert_uint_eq(ntohl(value), ntohl(ip(text)))

START_TEST(longest_prefix_wins_over_shorter)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.19.7.5", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_UNICAST);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_ip(r.gateway, "198.19.0.9");
	ck_assert_ip(r.next_hop, "198.19.0.9");
	ck_assert_ip(r.src, "198.19.0.1");
	ck_assert_uint_eq(r.mtu, 1400); /* route MTU beats the link's 9000 */

	ck_assert_int_eq(lookup("198.19.8.5", &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_uint_eq(r.gateway, 0);
	ck_assert_ip(r.next_hop, "198.19.8.5");
	ck_assert_uint_eq(r.mtu, 9000);
}
END_TEST

/* ip route ... mtu 1400 advmss 1300: both metrics reach the result (TCP
 * announces the advmss); without advmss it is 0. */
START_TEST(route_advmss_metric)
{
	struct net_route r = { .table = RT_TABLE_MAIN, .type = RTN_UNICAST, .dst = ip("198.18.40.0"), .prefix = 24,
			       .oif = ETH0, .mtu = 1400, .advmss = 1300 };
	ck_assert_int_eq(net_snapshot_add_route(&snap, &r), 0);
	struct net_route_result res;
	ck_assert_int_eq(lookup("198.18.40.7", &res), 0);
	ck_assert_uint_eq(res.mtu, 1400);
	ck_assert_uint_eq(res.advmss, 1300);
	ck_assert_int_eq(lookup("198.18.0.7", &res), 0);
	ck_assert_uint_eq(res.mtu, 1500);
	ck_assert_uint_eq(res.advmss, 0);
}
END_TEST

START_TEST(default_route_lowest_metric)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("203.0.113.5", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_UNICAST);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_ip(r.gateway, "198.19.0.254");
	ck_assert_ip(r.src, "198.19.0.1");
	/* A table other than main and local is not consulted. */
	ck_assert_int_eq(lookup("198.23.1.1", &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1);
}
END_TEST

START_TEST(metric_breaks_prefix_ties)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.19.7.130", &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1); /* metric 10 beats 20 */
	ck_assert_uint_eq(r.gateway, 0);
	/* Equal metric: the first one the kernel listed. */
	ck_assert_int_eq(lookup("198.19.7.200", &r), 0);
	ck_assert_int_eq(r.ifindex, ETH0);
}
END_TEST

START_TEST(route_through_down_link_is_skipped)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.20.0.5", &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_ip(r.gateway, "198.19.0.254");
	/* An unknown link is trusted: events about it may lag the route. */
	ck_assert_int_eq(lookup("198.22.0.5", &r), 0);
	ck_assert_int_eq(r.ifindex, 9);
	ck_assert_uint_eq(r.mtu, 0);
}
END_TEST

START_TEST(local_addresses_take_the_kernel_path)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.18.0.10", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_LOCAL);
	ck_assert_int_eq(r.ifindex, ETH0);
	ck_assert_ip(r.src, "198.18.0.10");
	ck_assert_int_eq(lookup("127.0.0.5", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_LOCAL);
	ck_assert_int_eq(r.ifindex, LO);
	ck_assert_ip(r.src, "127.0.0.5");
	ck_assert_uint_eq(r.mtu, 65536);
	/* The neighbour of a local address is not local. */
	ck_assert_int_eq(lookup("198.18.0.12", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_UNICAST);
}
END_TEST

START_TEST(broadcast_addresses)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.18.0.255", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_BROADCAST);
	ck_assert_int_eq(r.ifindex, ETH0);
	ck_assert_ip(r.src, "198.18.0.10");
	ck_assert_ip(r.next_hop, "198.18.0.255");
	/* No prefsrc in the local route: the interface's address in that subnet. */
	ck_assert_int_eq(lookup("198.18.5.255", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_BROADCAST);
	ck_assert_ip(r.src, "198.18.5.1");
	/* Limited broadcast follows the table but never a gateway. */
	ck_assert_int_eq(lookup("255.255.255.255", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_BROADCAST);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_uint_eq(r.gateway, 0);
	ck_assert_ip(r.next_hop, "255.255.255.255");
}
END_TEST

START_TEST(multicast_follows_the_table_without_multicast_if)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("239.1.2.3", &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_MULTICAST);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_uint_eq(r.gateway, 0);
	ck_assert_ip(r.next_hop, "239.1.2.3");
	ck_assert_ip(r.src, "198.19.0.1");
	ck_assert_uint_eq(r.mtu, 9000);
}
END_TEST

START_TEST(multicast_if_by_index_or_address)
{
	struct net_route_result r;
	struct net_route_query q = { .dst = ip("239.1.2.3"), .mc_ifindex = ETH0 };
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), 0);
	ck_assert_int_eq(r.kind, NET_ROUTE_MULTICAST);
	ck_assert_int_eq(r.ifindex, ETH0);
	ck_assert_ip(r.src, "198.18.0.10");
	ck_assert_uint_eq(r.mtu, 1500);

	q.mc_ifindex = 0;
	q.mc_if_addr = ip("198.18.5.1");
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), 0);
	ck_assert_int_eq(r.ifindex, ETH0);
	ck_assert_ip(r.src, "198.18.5.1");

	/* Both given (ip_mreqn): the index picks the link, the address the source. */
	q.mc_ifindex = ETH1;
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1);
	ck_assert_ip(r.src, "198.18.5.1");

	q.mc_ifindex = 0;
	q.mc_if_addr = ip("198.18.77.1");
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), -ENETUNREACH);
	q.mc_if_addr = 0;
	q.mc_ifindex = 42;
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), -ENETUNREACH);

	/* IP_MULTICAST_IF does not steer unicast. */
	q.dst = ip("198.19.8.5");
	q.mc_ifindex = ETH0;
	ck_assert_int_eq(net_snapshot_route_lookup(&snap, &q, &r), 0);
	ck_assert_int_eq(r.ifindex, ETH1);
}
END_TEST

START_TEST(source_selection_rules)
{
	struct net_route_result r;
	/* Primary address in the next hop's subnet, not merely the first one. */
	ck_assert_int_eq(lookup("198.18.5.77", &r), 0);
	ck_assert_ip(r.src, "198.18.5.1");
	/* Primary beats secondary in the same subnet. */
	ck_assert_int_eq(lookup("198.18.0.77", &r), 0);
	ck_assert_ip(r.src, "198.18.0.10");
	/* prefsrc wins over everything. */
	ck_assert_int_eq(lookup("198.18.12.5", &r), 0);
	ck_assert_ip(r.src, "198.18.0.11");
	/* No subnet match: the first primary. */
	ck_assert_ip(net_snapshot_select_source(&snap, ETH0, ip("203.0.113.9")), "198.18.0.10");
	/* Only a secondary: it is still better than nothing. */
	ck_assert_int_eq(lookup("198.21.0.9", &r), 0);
	ck_assert_ip(r.src, "198.21.0.7");
	/* No address at all. */
	ck_assert_uint_eq(net_snapshot_select_source(&snap, 9, ip("198.22.0.5")), 0);
}
END_TEST

START_TEST(reject_routes_give_kernel_errnos)
{
	struct net_route_result r;
	ck_assert_int_eq(lookup("198.18.9.1", &r), -EHOSTUNREACH);
	ck_assert_int_eq(lookup("198.18.10.1", &r), -EACCES);
	ck_assert_int_eq(lookup("198.18.11.1", &r), -EINVAL);
}
END_TEST

START_TEST(no_route_is_enetunreach)
{
	struct net_snapshot empty;
	struct net_route_result r;
	struct net_route_query q = { .dst = ip("198.18.0.1") };
	net_snapshot_init(&empty);
	ck_assert_int_eq(net_snapshot_route_lookup(&empty, &q, &r), -ENETUNREACH);
	q.dst = ip("239.0.0.1");
	ck_assert_int_eq(net_snapshot_route_lookup(&empty, &q, &r), -ENETUNREACH);
	net_snapshot_clear(&empty);
}
END_TEST

START_TEST(snapshot_helpers)
{
	ck_assert_int_eq(net_snapshot_link_by_name(&snap, "eth1")->ifindex, ETH1);
	ck_assert_ptr_null(net_snapshot_link_by_name(&snap, "eth9"));
	ck_assert_int_eq(net_snapshot_addr_owner(&snap, ip("198.18.5.1")), ETH0);
	ck_assert_int_eq(net_snapshot_addr_owner(&snap, ip("198.18.5.2")), 0);
	/* Growing past the first allocation keeps every entry. */
	for (int i = 0; i < 100; i++) {
		struct net_neigh n = { .ifindex = ETH0, .ip = htonl(0xc6120000u + (uint32_t)i), .state = 2 };
		ck_assert_int_eq(net_snapshot_add_neigh(&snap, &n), 0);
	}
	ck_assert_uint_eq(snap.nneighs, 100);
	ck_assert_int_eq(net_snapshot_neigh(&snap, ETH0, ip("198.18.0.99"))->state, 2);
	ck_assert_ptr_null(net_snapshot_neigh(&snap, ETH1, ip("198.18.0.99")));
	net_snapshot_clear(&snap);
	ck_assert_uint_eq(snap.nlinks, 0);
	ck_assert_ptr_null(net_snapshot_link(&snap, ETH0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("net_route");
	TCase *tc = tcase_create("lookup");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, longest_prefix_wins_over_shorter);
	tcase_add_test(tc, default_route_lowest_metric);
	tcase_add_test(tc, metric_breaks_prefix_ties);
	tcase_add_test(tc, route_through_down_link_is_skipped);
	tcase_add_test(tc, local_addresses_take_the_kernel_path);
	tcase_add_test(tc, broadcast_addresses);
	tcase_add_test(tc, multicast_follows_the_table_without_multicast_if);
	tcase_add_test(tc, multicast_if_by_index_or_address);
	tcase_add_test(tc, source_selection_rules);
	tcase_add_test(tc, reject_routes_give_kernel_errnos);
	tcase_add_test(tc, no_route_is_enetunreach);
	tcase_add_test(tc, route_advmss_metric);
	tcase_add_test(tc, snapshot_helpers);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
