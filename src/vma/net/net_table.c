/* The snapshot's tables and the pure route / source-address logic on them.
 * No netlink here, so tests build tables by hand. */
#include "net/net.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>

void net_snapshot_init(struct net_snapshot *snap)
{
	memset(snap, 0, sizeof(*snap));
}

void net_snapshot_clear(struct net_snapshot *snap)
{
	free(snap->links);
	free(snap->addrs);
	free(snap->routes);
	free(snap->neighs);
	net_snapshot_init(snap);
}

/* Grows *array to hold one more element of elem_size; doubles so that a full
 * rebuild after each event stays linear. */
static int grow(void **array, size_t *cap, size_t count, size_t elem_size)
{
	if (count < *cap)
		return 0;
	size_t new_cap = *cap ? *cap * 2 : 16;
	void *bigger = realloc(*array, new_cap * elem_size);
	if (!bigger)
		return -ENOMEM;
	*array = bigger;
	*cap = new_cap;
	return 0;
}

#define SNAPSHOT_APPEND(snap, arr, n, cap, item) \
	do { \
		int grow_rc = grow((void **)&(snap)->arr, &(snap)->cap, (snap)->n, sizeof(*(item))); \
		if (grow_rc) \
			return grow_rc; \
		(snap)->arr[(snap)->n++] = *(item); \
		return 0; \
	} while (0)

int net_snapshot_add_link(struct net_snapshot *snap, const struct net_link *link)
{
	SNAPSHOT_APPEND(snap, links, nlinks, cap_links, link);
}

int net_snapshot_add_addr(struct net_snapshot *snap, const struct net_addr *addr)
{
	SNAPSHOT_APPEND(snap, addrs, naddrs, cap_addrs, addr);
}

int net_snapshot_add_route(struct net_snapshot *snap, const struct net_route *route)
{
	SNAPSHOT_APPEND(snap, routes, nroutes, cap_routes, route);
}

int net_snapshot_add_neigh(struct net_snapshot *snap, const struct net_neigh *neigh)
{
	SNAPSHOT_APPEND(snap, neighs, nneighs, cap_neighs, neigh);
}

const struct net_link *net_snapshot_link(const struct net_snapshot *snap, int ifindex)
{
	for (size_t i = 0; i < snap->nlinks; i++)
		if (snap->links[i].ifindex == ifindex)
			return &snap->links[i];
	return NULL;
}

const struct net_link *net_snapshot_link_by_name(const struct net_snapshot *snap, const char *name)
{
	for (size_t i = 0; i < snap->nlinks; i++)
		if (strncmp(snap->links[i].name, name, sizeof(snap->links[i].name)) == 0)
			return &snap->links[i];
	return NULL;
}

const struct net_neigh *net_snapshot_neigh(const struct net_snapshot *snap, int ifindex, in_addr_t ip)
{
	for (size_t i = 0; i < snap->nneighs; i++)
		if (snap->neighs[i].ifindex == ifindex && snap->neighs[i].ip == ip)
			return &snap->neighs[i];
	return NULL;
}

int net_snapshot_addr_owner(const struct net_snapshot *snap, in_addr_t addr)
{
	for (size_t i = 0; i < snap->naddrs; i++)
		if (snap->addrs[i].addr == addr)
			return snap->addrs[i].ifindex;
	return 0;
}

static in_addr_t prefix_mask(unsigned int prefix)
{
	if (prefix == 0)
		return 0;
	if (prefix >= 32)
		return 0xffffffffu;
	return htonl(0xffffffffu << (32 - prefix));
}

in_addr_t net_snapshot_select_source(const struct net_snapshot *snap, int ifindex, in_addr_t toward)
{
	in_addr_t first_primary = 0, first_any = 0;
	for (size_t i = 0; i < snap->naddrs; i++) {
		const struct net_addr *a = &snap->addrs[i];
		if (a->ifindex != ifindex)
			continue;
		bool primary = !(a->flags & IFA_F_SECONDARY);
		if (!first_any)
			first_any = a->addr;
		if (!primary)
			continue;
		if (!first_primary)
			first_primary = a->addr;
		in_addr_t mask = prefix_mask(a->prefix);
		if (a->prefix && (a->addr & mask) == (toward & mask))
			return a->addr;
	}
	return first_primary ? first_primary : first_any;
}

static bool route_link_usable(const struct net_snapshot *snap, const struct net_route *r)
{
	if (!r->oif)
		return true;
	const struct net_link *link = net_snapshot_link(snap, r->oif);
	/* An unknown link is trusted (events may lag); a known one must be up,
	 * as the kernel drops routes through links that are down. */
	return !link || (link->flags & IFF_UP);
}

/* Longest prefix match in one table; lower metric breaks ties, then order. */
static const struct net_route *table_lookup(const struct net_snapshot *snap, uint32_t table, in_addr_t dst)
{
	const struct net_route *best = NULL;
	for (size_t i = 0; i < snap->nroutes; i++) {
		const struct net_route *r = &snap->routes[i];
		if (r->table != table)
			continue;
		in_addr_t mask = prefix_mask(r->prefix);
		if ((dst & mask) != (r->dst & mask))
			continue;
		if (!route_link_usable(snap, r))
			continue;
		if (!best || r->prefix > best->prefix ||
		    (r->prefix == best->prefix && r->metric < best->metric))
			best = r;
	}
	return best;
}

static unsigned int link_mtu(const struct net_snapshot *snap, int ifindex)
{
	const struct net_link *link = net_snapshot_link(snap, ifindex);
	return link ? link->mtu : 0;
}

static int multicast_by_interface(const struct net_snapshot *snap, const struct net_route_query *q,
				  struct net_route_result *res)
{
	int ifindex = q->mc_ifindex ? q->mc_ifindex : net_snapshot_addr_owner(snap, q->mc_if_addr);
	if (!ifindex || !net_snapshot_link(snap, ifindex))
		return -ENETUNREACH;
	res->ifindex = ifindex;
	res->src = q->mc_if_addr ? q->mc_if_addr : net_snapshot_select_source(snap, ifindex, q->dst);
	res->mtu = link_mtu(snap, ifindex);
	return 0;
}

int net_snapshot_route_lookup(const struct net_snapshot *snap, const struct net_route_query *q,
			      struct net_route_result *res)
{
	in_addr_t dst = q->dst;
	memset(res, 0, sizeof(*res));
	res->next_hop = dst;

	if (IN_MULTICAST(ntohl(dst))) {
		res->kind = NET_ROUTE_MULTICAST;
		if (q->mc_ifindex || q->mc_if_addr)
			return multicast_by_interface(snap, q, res);
	} else if (dst == INADDR_BROADCAST) {
		res->kind = NET_ROUTE_BROADCAST;
	} else {
		/* The local table holds our own addresses and subnet broadcasts; the
		 * kernel consults it before main. */
		const struct net_route *local = table_lookup(snap, RT_TABLE_LOCAL, dst);
		if (local && (local->type == RTN_LOCAL || local->type == RTN_BROADCAST)) {
			res->kind = local->type == RTN_LOCAL ? NET_ROUTE_LOCAL : NET_ROUTE_BROADCAST;
			res->ifindex = local->oif;
			res->src = local->type == RTN_LOCAL ? dst : local->prefsrc;
			if (!res->src)
				res->src = net_snapshot_select_source(snap, local->oif, dst);
			res->mtu = local->mtu ? local->mtu : link_mtu(snap, local->oif);
			res->advmss = local->advmss;
			return 0;
		}
		res->kind = NET_ROUTE_UNICAST;
	}

	const struct net_route *r = table_lookup(snap, RT_TABLE_MAIN, dst);
	if (!r)
		return -ENETUNREACH;
	switch (r->type) {
	case RTN_UNREACHABLE:
		return -EHOSTUNREACH;
	case RTN_PROHIBIT:
		return -EACCES;
	case RTN_BLACKHOLE:
		return -EINVAL;
	default:
		break;
	}
	res->ifindex = r->oif;
	/* Broadcast and multicast leave on the wire as they are: no gateway. */
	if (res->kind == NET_ROUTE_UNICAST && r->gateway) {
		res->gateway = r->gateway;
		res->next_hop = r->gateway;
	}
	res->src = r->prefsrc ? r->prefsrc : net_snapshot_select_source(snap, r->oif, res->next_hop);
	res->mtu = r->mtu ? r->mtu : link_mtu(snap, r->oif);
	res->advmss = r->advmss;
	return 0;
}
