/* Conversions from libnl objects into our plain structs. Kept apart from the
 * context so tests can check them with objects built by hand. */
#include "net/net.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <netlink/addr.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/nexthop.h>
#include <netlink/route/route.h>

/* Copies an IPv4 nl_addr; absent or empty (a default route's dst) is 0. */
static int ipv4_of(struct nl_addr *addr, in_addr_t *out)
{
	*out = 0;
	if (!addr || nl_addr_get_len(addr) == 0)
		return 0;
	if (nl_addr_get_family(addr) != AF_INET || nl_addr_get_len(addr) != sizeof(in_addr_t))
		return -EAFNOSUPPORT;
	memcpy(out, nl_addr_get_binary_addr(addr), sizeof(in_addr_t));
	return 0;
}

static void mac_of(struct nl_addr *addr, uint8_t mac[NET_MAC_LEN], uint8_t *mac_len)
{
	*mac_len = 0;
	memset(mac, 0, NET_MAC_LEN);
	if (addr && nl_addr_get_len(addr) == NET_MAC_LEN) {
		memcpy(mac, nl_addr_get_binary_addr(addr), NET_MAC_LEN);
		*mac_len = NET_MAC_LEN;
	}
}

int net_link_from_nl(struct rtnl_link *obj, struct net_link *out)
{
	memset(out, 0, sizeof(*out));
	out->ifindex = rtnl_link_get_ifindex(obj);
	if (out->ifindex <= 0)
		return -EINVAL;
	const char *name = rtnl_link_get_name(obj);
	if (name)
		snprintf(out->name, sizeof(out->name), "%s", name);
	out->flags = rtnl_link_get_flags(obj);
	out->mtu = rtnl_link_get_mtu(obj);
	out->arptype = rtnl_link_get_arptype(obj);
	mac_of(rtnl_link_get_addr(obj), out->mac, &out->mac_len);
	const char *kind = rtnl_link_get_type(obj);
	if (kind)
		snprintf(out->kind, sizeof(out->kind), "%s", kind);
	return 0;
}

int net_addr_from_nl(struct rtnl_addr *obj, struct net_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (rtnl_addr_get_family(obj) != AF_INET)
		return -EAFNOSUPPORT;
	if (ipv4_of(rtnl_addr_get_local(obj), &out->addr) || !out->addr)
		return -EINVAL;
	if (ipv4_of(rtnl_addr_get_broadcast(obj), &out->broadcast))
		return -EINVAL;
	out->ifindex = rtnl_addr_get_ifindex(obj);
	int prefix = rtnl_addr_get_prefixlen(obj);
	out->prefix = prefix > 32 ? 32 : (uint8_t)prefix;
	out->scope = (uint8_t)rtnl_addr_get_scope(obj);
	out->flags = rtnl_addr_get_flags(obj);
	return 0;
}

int net_route_from_nl(struct rtnl_route *obj, struct net_route *out)
{
	memset(out, 0, sizeof(*out));
	if (rtnl_route_get_family(obj) != AF_INET)
		return -EAFNOSUPPORT;
	struct nl_addr *dst = rtnl_route_get_dst(obj);
	if (ipv4_of(dst, &out->dst) || ipv4_of(rtnl_route_get_pref_src(obj), &out->prefsrc))
		return -EINVAL;
	out->prefix = dst ? (uint8_t)nl_addr_get_prefixlen(dst) : 0;
	if (out->prefix > 32)
		return -EINVAL;
	out->type = rtnl_route_get_type(obj);
	out->scope = rtnl_route_get_scope(obj);
	out->table = rtnl_route_get_table(obj);
	out->metric = rtnl_route_get_priority(obj);
	uint32_t mtu = 0;
	if (rtnl_route_get_metric(obj, RTAX_MTU, &mtu) == 0)
		out->mtu = mtu;
	uint32_t advmss = 0;
	if (rtnl_route_get_metric(obj, RTAX_ADVMSS, &advmss) == 0)
		out->advmss = advmss;
	/* Multipath: the first hop stands for the route until we balance. */
	if (rtnl_route_get_nnexthops(obj) > 0) {
		struct rtnl_nexthop *nh = rtnl_route_nexthop_n(obj, 0);
		out->oif = rtnl_route_nh_get_ifindex(nh);
		if (ipv4_of(rtnl_route_nh_get_gateway(nh), &out->gateway))
			return -EINVAL;
	}
	return 0;
}

int net_neigh_from_nl(struct rtnl_neigh *obj, struct net_neigh *out)
{
	memset(out, 0, sizeof(*out));
	if (rtnl_neigh_get_family(obj) != AF_INET)
		return -EAFNOSUPPORT;
	if (ipv4_of(rtnl_neigh_get_dst(obj), &out->ip) || !out->ip)
		return -EINVAL;
	out->ifindex = rtnl_neigh_get_ifindex(obj);
	int state = rtnl_neigh_get_state(obj);
	out->state = state < 0 ? 0 : (uint16_t)state;
	mac_of(rtnl_neigh_get_lladdr(obj), out->mac, &out->mac_len);
	return 0;
}
