/* net/: what the kernel knows about the host's IPv4 networking (interfaces,
 * addresses, routes, neighbours), read and followed through netlink.
 *
 * Two layers:
 *  - a plain snapshot (struct net_snapshot) and pure lookup logic on it
 *    (net_snapshot_*, net_neigh_resolve_with), testable with fake tables;
 *  - a context (struct net_ctx) that fills the snapshot from libnl caches and
 *    keeps it current from netlink events the caller drives.
 *
 * All IPv4 addresses are in_addr_t in network byte order, as the socket API
 * hands them. Functions return 0 or a negative errno. */
#ifndef VMA_NET_NET_H
#define VMA_NET_NET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#define NET_MAC_LEN 6
/* IF_NAMESIZE, without <net/if.h>: it clashes with <linux/if.h>, which libnl
 * users get. */
#define NET_IFNAME_LEN 16

struct net_link {
	int ifindex;
	char name[NET_IFNAME_LEN];
	unsigned int flags;      /* IFF_UP, IFF_RUNNING, IFF_LOOPBACK, IFF_NOARP ... */
	unsigned int mtu;
	unsigned int arptype;    /* ARPHRD_ETHER, ARPHRD_LOOPBACK ... */
	uint8_t mac[NET_MAC_LEN];
	uint8_t mac_len;         /* 0 when the link has no hardware address */
	char kind[16];           /* "veth", "vlan" ...; "" for physical devices */
};

struct net_addr {
	int ifindex;
	in_addr_t addr;
	uint8_t prefix;
	uint8_t scope;           /* RT_SCOPE_* */
	in_addr_t broadcast;     /* 0 when none */
	unsigned int flags;      /* IFA_F_SECONDARY ... */
};

struct net_route {
	in_addr_t dst;
	uint8_t prefix;
	uint8_t type;            /* RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST, RTN_MULTICAST,
	                          * RTN_UNREACHABLE, RTN_BLACKHOLE, RTN_PROHIBIT ... */
	uint8_t scope;
	in_addr_t gateway;       /* 0: destination is on-link */
	int oif;
	in_addr_t prefsrc;       /* 0: none given */
	uint32_t metric;         /* priority; lower wins */
	uint32_t table;          /* RT_TABLE_MAIN, RT_TABLE_LOCAL ... */
	uint32_t mtu;            /* RTAX_MTU; 0: the link's */
	uint32_t advmss;         /* RTAX_ADVMSS; 0: TCP derives it from the MTU */
};

struct net_neigh {
	int ifindex;
	in_addr_t ip;
	uint16_t state;          /* NUD_* */
	uint8_t mac[NET_MAC_LEN];
	uint8_t mac_len;
	/* Stamp of the last kernel notification about this entry (monotonic over
	 * the context; 0 = known from the initial dump). Lets a waiter tell a fresh
	 * NUD_FAILED from one that was there before it asked. */
	uint64_t event_seq;
};

struct net_snapshot {
	struct net_link *links;   size_t nlinks,  cap_links;
	struct net_addr *addrs;   size_t naddrs,  cap_addrs;
	struct net_route *routes; size_t nroutes, cap_routes;
	struct net_neigh *neighs; size_t nneighs, cap_neighs;
};

void net_snapshot_init(struct net_snapshot *snap);
/* Frees the arrays; the snapshot is empty and reusable afterwards. */
void net_snapshot_clear(struct net_snapshot *snap);
/* Append a copy; -ENOMEM on allocation failure. */
int net_snapshot_add_link(struct net_snapshot *snap, const struct net_link *link);
int net_snapshot_add_addr(struct net_snapshot *snap, const struct net_addr *addr);
int net_snapshot_add_route(struct net_snapshot *snap, const struct net_route *route);
int net_snapshot_add_neigh(struct net_snapshot *snap, const struct net_neigh *neigh);

const struct net_link *net_snapshot_link(const struct net_snapshot *snap, int ifindex);
const struct net_link *net_snapshot_link_by_name(const struct net_snapshot *snap, const char *name);
const struct net_neigh *net_snapshot_neigh(const struct net_snapshot *snap, int ifindex, in_addr_t ip);
/* The interface that owns addr, or 0. */
int net_snapshot_addr_owner(const struct net_snapshot *snap, in_addr_t addr);

/* Source address for traffic leaving ifindex toward `toward` (the next hop):
 * the primary address of ifindex whose subnet holds `toward`, else the
 * interface's first primary address, else its first address; 0 if none. */
in_addr_t net_snapshot_select_source(const struct net_snapshot *snap, int ifindex, in_addr_t toward);

enum net_route_kind {
	NET_ROUTE_UNICAST = 0,   /* through ifindex, to next_hop */
	NET_ROUTE_LOCAL,         /* one of our own addresses: the kernel path */
	NET_ROUTE_BROADCAST,     /* limited or subnet broadcast */
	NET_ROUTE_MULTICAST,     /* 224.0.0.0/4 */
};

struct net_route_query {
	in_addr_t dst;
	/* IP_MULTICAST_IF of the socket, used only for multicast dst: an
	 * interface index (ip_mreqn) wins over an address; 0 for unset. */
	int mc_ifindex;
	in_addr_t mc_if_addr;
};

struct net_route_result {
	enum net_route_kind kind;
	int ifindex;
	in_addr_t gateway;       /* 0 when on-link */
	in_addr_t next_hop;      /* gateway, or dst itself */
	in_addr_t src;
	unsigned int mtu;        /* route MTU, else the link's */
	unsigned int advmss;     /* the route's advmss metric (the MSS TCP announces); 0: none */
};

/* Kernel-style lookup without policy rules: the local table first (longest
 * prefix), then the main table (longest prefix, lowest metric on ties).
 * Errors: -ENETUNREACH (no route, or no such IP_MULTICAST_IF interface),
 * -EHOSTUNREACH (unreachable route), -EACCES (prohibit), -EINVAL (blackhole). */
int net_snapshot_route_lookup(const struct net_snapshot *snap, const struct net_route_query *query,
			      struct net_route_result *result);

/* Neighbour resolution policy: VMA_NEIGH_UC_ARP_QUATA,
 * VMA_NEIGH_UC_ARP_DELAY_MSEC and VMA_NEIGH_NUM_ERR_RETRIES. */
struct net_neigh_settings {
	unsigned int uc_arp_quota;      /* re-validations of a STALE entry before it is distrusted */
	unsigned int uc_arp_delay_msec; /* spacing between those re-validations */
	unsigned int num_err_retries;   /* restarts after the kernel reports NUD_FAILED */
};
void net_neigh_settings_default(struct net_neigh_settings *settings);
/* The values of those three parameters in g_cfg (the library's, once loaded). */
void net_neigh_settings_from_params(struct net_neigh_settings *settings);

/* A state whose MAC may be used right away. */
bool net_neigh_state_usable(unsigned int nud_state);
/* 01:00:5e + low 23 bits of the group. */
void net_mcast_mac(in_addr_t group, uint8_t mac[NET_MAC_LEN]);

/* What net_neigh_resolve_with needs from the world; the real one is netlink,
 * tests pass fakes. */
struct net_neigh_ops {
	void *ctx;
	/* Copies the current entry: 0, or -ENOENT when the kernel has none. */
	int (*lookup)(void *ctx, int ifindex, in_addr_t ip, struct net_neigh *out);
	/* Asks the kernel to (re)resolve ip on ifindex: 0 or -errno. */
	int (*trigger)(void *ctx, int ifindex, in_addr_t ip);
	/* Returns when news may have arrived or after timeout_ms. */
	void (*wait)(void *ctx, int timeout_ms);
	uint64_t (*now_ms)(void *ctx);
};

/* Per-neighbour memory of STALE re-validations (bounded, oldest reused). */
#define NET_NEIGH_MEMO_SLOTS 64
struct net_neigh_memo {
	int ifindex;
	in_addr_t ip;
	unsigned int uc_sent;
	uint64_t last_uc_ms;
	uint64_t last_use_ms;
};
struct net_neigh_tracker {
	pthread_mutex_t lock;  /* resolvers on several threads share one tracker */
	struct net_neigh_memo slots[NET_NEIGH_MEMO_SLOTS];
};
void net_neigh_tracker_init(struct net_neigh_tracker *tracker);
void net_neigh_tracker_destroy(struct net_neigh_tracker *tracker);

/* Resolves next_hop on ifindex into mac_out, waiting at most timeout_ms.
 * Usable entries return at once (a STALE one is re-validated by the kernel
 * at most uc_arp_quota times, uc_arp_delay_msec apart; after that only a
 * confirmed entry is accepted). Otherwise triggers the kernel's resolution
 * and waits; each NUD_FAILED reported after a trigger restarts it, up to
 * num_err_retries times. Returns 0, -ETIMEDOUT, -EHOSTUNREACH, or the
 * trigger's -errno. tracker may be NULL (no STALE bookkeeping). */
int net_neigh_resolve_with(const struct net_neigh_ops *ops, struct net_neigh_tracker *tracker,
			   const struct net_neigh_settings *settings, int ifindex, in_addr_t next_hop,
			   uint8_t mac_out[NET_MAC_LEN], int timeout_ms);

/* ---- the live context (libnl) ---- */
struct net_ctx;

/* Dumps links, addresses, routes and neighbours and subscribes to their
 * events. Returns 0 or -errno (e.g. -EPROTONOSUPPORT without netlink). */
int net_open(struct net_ctx **out);
void net_close(struct net_ctx *ctx);
void net_set_neigh_settings(struct net_ctx *ctx, const struct net_neigh_settings *settings);

/* How net_neigh_resolve asks the kernel to resolve. AUTO tries an
 * RTM_NEWNEIGH with NTF_USE (only ARP leaves the host; needs CAP_NET_ADMIN)
 * and falls back to a zero-length, TTL 1 UDP datagram to port 9 of the next
 * hop (no privilege; the kernel resolves before sending it). */
enum net_trigger { NET_TRIGGER_AUTO = 0, NET_TRIGGER_NETLINK, NET_TRIGGER_UDP };
void net_set_trigger(struct net_ctx *ctx, enum net_trigger how);

/* The event socket, for the internal thread's poll set; when readable, call
 * net_poll_events(ctx, 0). */
int net_event_fd(struct net_ctx *ctx);
/* Applies pending netlink events, waiting up to timeout_ms (-1: forever) for
 * the first. Returns how many were applied, or -errno. Thread-safe. */
int net_poll_events(struct net_ctx *ctx, int timeout_ms);
/* Bumped each time the snapshot changes. */
uint64_t net_generation(struct net_ctx *ctx);

int net_route_lookup(struct net_ctx *ctx, const struct net_route_query *query,
		     struct net_route_result *result);
int net_neigh_resolve(struct net_ctx *ctx, int ifindex, in_addr_t next_hop,
		      uint8_t mac_out[NET_MAC_LEN], int timeout_ms);
/* Copy of one link: 0 or -ENODEV. */
int net_link_get(struct net_ctx *ctx, int ifindex, struct net_link *out);
/* Calls fn with the current snapshot, locked for the duration of the call. */
void net_with_snapshot(struct net_ctx *ctx, void (*fn)(const struct net_snapshot *snap, void *arg),
		       void *arg);

/* Conversions from libnl objects (declared with opaque types so callers need
 * no libnl headers). Return 0, or -EAFNOSUPPORT for non-IPv4 objects and
 * -EINVAL for objects missing what we need. */
struct rtnl_link;
struct rtnl_addr;
struct rtnl_route;
struct rtnl_neigh;
int net_link_from_nl(struct rtnl_link *obj, struct net_link *out);
int net_addr_from_nl(struct rtnl_addr *obj, struct net_addr *out);
int net_route_from_nl(struct rtnl_route *obj, struct net_route *out);
int net_neigh_from_nl(struct rtnl_neigh *obj, struct net_neigh *out);

#endif
