/* libnl objects (built by hand, no netlink socket) into our plain structs. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/if_arp.h>
#include <linux/neighbour.h>
#include <netlink/addr.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/nexthop.h>
#include <netlink/route/route.h>

#include "net/net.h"

static struct nl_addr *v4(const char *text, int prefix)
{
	in_addr_t a = inet_addr(text);
	struct nl_addr *addr = nl_addr_build(AF_INET, &a, sizeof(a));
	ck_assert_ptr_nonnull(addr);
	nl_addr_set_prefixlen(addr, prefix);
	return addr;
}

static const uint8_t mac[NET_MAC_LEN] = { 0x02, 0x11, 0x22, 0x33, 0x44, 0x55 };

START_TEST(link_conversion)
{
	struct rtnl_link *obj = rtnl_link_alloc();
	rtnl_link_set_ifindex(obj, 7);
	rtnl_link_set_name(obj, "vmanet-a0");
	rtnl_link_set_flags(obj, IFF_UP | IFF_RUNNING);
	rtnl_link_set_mtu(obj, 1500);
	rtnl_link_set_arptype(obj, ARPHRD_ETHER);
	struct nl_addr *ll = nl_addr_build(AF_LLC, mac, sizeof(mac));
	rtnl_link_set_addr(obj, ll);
	ck_assert_int_eq(rtnl_link_set_type(obj, "veth"), 0);

	struct net_link out;
	ck_assert_int_eq(net_link_from_nl(obj, &out), 0);
	ck_assert_int_eq(out.ifindex, 7);
	ck_assert_str_eq(out.name, "vmanet-a0");
	ck_assert_uint_eq(out.flags & (IFF_UP | IFF_RUNNING), IFF_UP | IFF_RUNNING);
	ck_assert_uint_eq(out.mtu, 1500);
	ck_assert_uint_eq(out.arptype, ARPHRD_ETHER);
	ck_assert_uint_eq(out.mac_len, 6);
	ck_assert_mem_eq(out.mac, mac, 6);
	ck_assert_str_eq(out.kind, "veth");

	/* No index: not a usable link. */
	rtnl_link_set_ifindex(obj, 0);
	ck_assert_int_eq(net_link_from_nl(obj, &out), -EINVAL);
	nl_addr_put(ll);
	rtnl_link_put(obj);
}
END_TEST

START_TEST(addr_conversion)
{
	struct rtnl_addr *obj = rtnl_addr_alloc();
	struct nl_addr *local = v4("198.19.0.1", 24), *brd = v4("198.19.0.255", 32);
	rtnl_addr_set_family(obj, AF_INET);
	rtnl_addr_set_ifindex(obj, 7);
	ck_assert_int_eq(rtnl_addr_set_local(obj, local), 0);
	ck_assert_int_eq(rtnl_addr_set_broadcast(obj, brd), 0);
	rtnl_addr_set_prefixlen(obj, 24);
	rtnl_addr_set_scope(obj, 0);
	rtnl_addr_set_flags(obj, 0x01 /* IFA_F_SECONDARY */);

	struct net_addr out;
	ck_assert_int_eq(net_addr_from_nl(obj, &out), 0);
	ck_assert_int_eq(out.ifindex, 7);
	ck_assert_uint_eq(out.addr, inet_addr("198.19.0.1"));
	ck_assert_uint_eq(out.broadcast, inet_addr("198.19.0.255"));
	ck_assert_uint_eq(out.prefix, 24);
	ck_assert_uint_eq(out.flags & 0x01, 0x01);
	nl_addr_put(local);
	nl_addr_put(brd);
	rtnl_addr_put(obj);

	/* IPv6 is not ours yet. */
	obj = rtnl_addr_alloc();
	struct in6_addr six = IN6ADDR_LOOPBACK_INIT;
	struct nl_addr *a6 = nl_addr_build(AF_INET6, &six, sizeof(six));
	rtnl_addr_set_local(obj, a6);
	ck_assert_int_eq(net_addr_from_nl(obj, &out), -EAFNOSUPPORT);
	nl_addr_put(a6);
	rtnl_addr_put(obj);
}
END_TEST

START_TEST(route_conversion)
{
	struct rtnl_route *obj = rtnl_route_alloc();
	struct nl_addr *dst = v4("198.19.7.0", 24), *src = v4("198.19.0.1", 32), *gw = v4("198.19.0.9", 32);
	rtnl_route_set_family(obj, AF_INET);
	ck_assert_int_eq(rtnl_route_set_dst(obj, dst), 0);
	ck_assert_int_eq(rtnl_route_set_pref_src(obj, src), 0);
	rtnl_route_set_table(obj, RT_TABLE_MAIN);
	rtnl_route_set_type(obj, RTN_UNICAST);
	rtnl_route_set_priority(obj, 42);
	ck_assert_int_eq(rtnl_route_set_metric(obj, RTAX_MTU, 1400), 0);
	ck_assert_int_eq(rtnl_route_set_metric(obj, RTAX_ADVMSS, 1300), 0);
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	rtnl_route_nh_set_ifindex(nh, 7);
	rtnl_route_nh_set_gateway(nh, gw);
	rtnl_route_add_nexthop(obj, nh); /* the route owns it now */

	struct net_route out;
	ck_assert_int_eq(net_route_from_nl(obj, &out), 0);
	ck_assert_uint_eq(out.dst, inet_addr("198.19.7.0"));
	ck_assert_uint_eq(out.prefix, 24);
	ck_assert_uint_eq(out.gateway, inet_addr("198.19.0.9"));
	ck_assert_uint_eq(out.prefsrc, inet_addr("198.19.0.1"));
	ck_assert_int_eq(out.oif, 7);
	ck_assert_uint_eq(out.metric, 42);
	ck_assert_uint_eq(out.mtu, 1400);
	ck_assert_uint_eq(out.advmss, 1300);
	ck_assert_uint_eq(out.table, RT_TABLE_MAIN);
	ck_assert_uint_eq(out.type, RTN_UNICAST);
	nl_addr_put(dst);
	nl_addr_put(src);
	nl_addr_put(gw);
	rtnl_route_put(obj);

	/* Default route: an empty dst; unreachable: no next hop. */
	obj = rtnl_route_alloc();
	rtnl_route_set_family(obj, AF_INET);
	struct nl_addr *any = nl_addr_build(AF_INET, NULL, 0);
	rtnl_route_set_dst(obj, any);
	rtnl_route_set_type(obj, RTN_UNREACHABLE);
	rtnl_route_set_table(obj, RT_TABLE_LOCAL);
	ck_assert_int_eq(net_route_from_nl(obj, &out), 0);
	ck_assert_uint_eq(out.dst, 0);
	ck_assert_uint_eq(out.prefix, 0);
	ck_assert_int_eq(out.oif, 0);
	ck_assert_uint_eq(out.gateway, 0);
	ck_assert_uint_eq(out.advmss, 0);
	ck_assert_uint_eq(out.mtu, 0);
	ck_assert_uint_eq(out.type, RTN_UNREACHABLE);
	ck_assert_uint_eq(out.table, RT_TABLE_LOCAL);
	nl_addr_put(any);
	rtnl_route_put(obj);

	obj = rtnl_route_alloc();
	rtnl_route_set_family(obj, AF_INET6);
	ck_assert_int_eq(net_route_from_nl(obj, &out), -EAFNOSUPPORT);
	rtnl_route_put(obj);
}
END_TEST

START_TEST(neigh_conversion)
{
	struct rtnl_neigh *obj = rtnl_neigh_alloc();
	struct nl_addr *dst = v4("198.19.0.2", 32);
	struct nl_addr *ll = nl_addr_build(AF_LLC, mac, sizeof(mac));
	rtnl_neigh_set_family(obj, AF_INET);
	rtnl_neigh_set_ifindex(obj, 7);
	ck_assert_int_eq(rtnl_neigh_set_dst(obj, dst), 0);
	rtnl_neigh_set_lladdr(obj, ll);
	rtnl_neigh_set_state(obj, NUD_REACHABLE);

	struct net_neigh out;
	ck_assert_int_eq(net_neigh_from_nl(obj, &out), 0);
	ck_assert_int_eq(out.ifindex, 7);
	ck_assert_uint_eq(out.ip, inet_addr("198.19.0.2"));
	ck_assert_uint_eq(out.state, NUD_REACHABLE);
	ck_assert_uint_eq(out.mac_len, 6);
	ck_assert_mem_eq(out.mac, mac, 6);
	ck_assert_uint_eq(out.event_seq, 0);
	nl_addr_put(ll);
	rtnl_neigh_put(obj);

	/* INCOMPLETE entries carry no MAC. */
	obj = rtnl_neigh_alloc();
	rtnl_neigh_set_family(obj, AF_INET);
	rtnl_neigh_set_ifindex(obj, 7);
	rtnl_neigh_set_dst(obj, dst);
	rtnl_neigh_set_state(obj, NUD_INCOMPLETE);
	ck_assert_int_eq(net_neigh_from_nl(obj, &out), 0);
	ck_assert_uint_eq(out.state, NUD_INCOMPLETE);
	ck_assert_uint_eq(out.mac_len, 0);
	rtnl_neigh_put(obj);

	/* No destination: unusable. */
	obj = rtnl_neigh_alloc();
	rtnl_neigh_set_family(obj, AF_INET);
	ck_assert_int_eq(net_neigh_from_nl(obj, &out), -EINVAL);
	rtnl_neigh_put(obj);
	nl_addr_put(dst);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("net_convert");
	TCase *tc = tcase_create("libnl");
	tcase_add_test(tc, link_conversion);
	tcase_add_test(tc, addr_conversion);
	tcase_add_test(tc, route_conversion);
	tcase_add_test(tc, neigh_conversion);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
