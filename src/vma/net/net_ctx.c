/* The live view: libnl caches behind a cache manager, turned into our plain
 * snapshot after every batch of netlink events.
 *
 * Locks: poll_lock serialises everything that touches the libnl caches and
 * sockets (event reading, resync, the NTF_USE request); lock guards the
 * snapshot, which lookups copy out of. A thread that wants news while another
 * one is reading events sleeps on `changed` instead. */
#include "net/net.h"
#include "log/vlog.h"
#include "os/os.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/if.h>
#include <linux/neighbour.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/route.h>

struct neigh_stamp {
	int ifindex;
	in_addr_t ip;
	uint64_t seq;
};

struct net_ctx {
	pthread_mutex_t lock;
	pthread_mutex_t poll_lock;
	pthread_cond_t changed;

	struct nl_cache_mngr *mngr;
	struct nl_sock *request_sock;
	struct nl_cache *links, *addrs, *routes, *neighs;
	bool dirty;          /* a callback saw a change not yet in the snapshot */
	int batch_changes;   /* changes seen by callbacks in the current poll */

	/* Under poll_lock: when each neighbour last made news. */
	struct neigh_stamp *stamps;
	size_t nstamps, cap_stamps;
	uint64_t neigh_seq;

	/* Under lock. */
	struct net_snapshot snap;
	uint64_t generation;
	struct net_neigh_settings settings;
	enum net_trigger trigger;
	bool netlink_trigger_denied;

	struct net_neigh_tracker tracker;
};

static int errno_of_nl(int nlerr)
{
	switch (nlerr < 0 ? -nlerr : nlerr) {
	case NLE_NOMEM: return -ENOMEM;
	case NLE_PERM:
	case NLE_NOACCESS: return -EPERM;
	case NLE_INTR: return -EINTR;
	case NLE_AGAIN: return -EAGAIN;
	case NLE_OPNOTSUPP: return -EOPNOTSUPP;
	case NLE_AF_NOSUPPORT: return -EAFNOSUPPORT;
	case NLE_NODEV: return -ENODEV;
	case NLE_INVAL: return -EINVAL;
	case NLE_EXIST: return -EEXIST;
	case NLE_OBJ_NOTFOUND: return -ENOENT;
	case NLE_BAD_SOCK: return -EBADF;
	case NLE_PROTO_MISMATCH: return -EPROTONOSUPPORT;
	default: return -EIO;
	}
}

static uint64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- neighbour news stamps ---- */

static struct neigh_stamp *stamp_find(struct net_ctx *ctx, int ifindex, in_addr_t ip)
{
	for (size_t i = 0; i < ctx->nstamps; i++)
		if (ctx->stamps[i].ifindex == ifindex && ctx->stamps[i].ip == ip)
			return &ctx->stamps[i];
	return NULL;
}

static void stamp_neigh(struct net_ctx *ctx, struct rtnl_neigh *obj, int action)
{
	struct net_neigh n;
	if (net_neigh_from_nl(obj, &n))
		return;
	struct neigh_stamp *s = stamp_find(ctx, n.ifindex, n.ip);
	if (action == NL_ACT_DEL) {
		/* The seq stays monotonic, so a re-created entry still counts as news. */
		if (s)
			*s = ctx->stamps[--ctx->nstamps];
		return;
	}
	if (!s) {
		if (ctx->nstamps == ctx->cap_stamps) {
			size_t cap = ctx->cap_stamps ? ctx->cap_stamps * 2 : 32;
			struct neigh_stamp *bigger = realloc(ctx->stamps, cap * sizeof(*bigger));
			if (!bigger)
				return;
			ctx->stamps = bigger;
			ctx->cap_stamps = cap;
		}
		s = &ctx->stamps[ctx->nstamps++];
		s->ifindex = n.ifindex;
		s->ip = n.ip;
	}
	s->seq = ++ctx->neigh_seq;
}

static void on_cache_change(struct nl_cache *cache, struct nl_object *obj, int action, void *arg)
{
	struct net_ctx *ctx = arg;
	ctx->dirty = true;
	ctx->batch_changes++;
	if (cache == ctx->neighs)
		stamp_neigh(ctx, (struct rtnl_neigh *)obj, action);
}

/* ---- snapshot building (under poll_lock) ---- */

struct build {
	struct net_ctx *ctx;
	struct net_snapshot *snap;
	int err;
};

static void build_link(struct nl_object *obj, void *arg)
{
	struct build *b = arg;
	struct net_link v;
	if (!b->err && net_link_from_nl((struct rtnl_link *)obj, &v) == 0)
		b->err = net_snapshot_add_link(b->snap, &v);
}

static void build_addr(struct nl_object *obj, void *arg)
{
	struct build *b = arg;
	struct net_addr v;
	if (!b->err && net_addr_from_nl((struct rtnl_addr *)obj, &v) == 0)
		b->err = net_snapshot_add_addr(b->snap, &v);
}

static void build_route(struct nl_object *obj, void *arg)
{
	struct build *b = arg;
	struct net_route v;
	if (!b->err && net_route_from_nl((struct rtnl_route *)obj, &v) == 0)
		b->err = net_snapshot_add_route(b->snap, &v);
}

static void build_neigh(struct nl_object *obj, void *arg)
{
	struct build *b = arg;
	struct net_neigh v;
	if (b->err || net_neigh_from_nl((struct rtnl_neigh *)obj, &v))
		return;
	struct neigh_stamp *s = stamp_find(b->ctx, v.ifindex, v.ip);
	v.event_seq = s ? s->seq : 0;
	b->err = net_snapshot_add_neigh(b->snap, &v);
}

static int rebuild_snapshot(struct net_ctx *ctx)
{
	struct net_snapshot fresh;
	net_snapshot_init(&fresh);
	struct build b = { .ctx = ctx, .snap = &fresh, .err = 0 };
	nl_cache_foreach(ctx->links, build_link, &b);
	nl_cache_foreach(ctx->addrs, build_addr, &b);
	nl_cache_foreach(ctx->routes, build_route, &b);
	nl_cache_foreach(ctx->neighs, build_neigh, &b);
	if (b.err) {
		net_snapshot_clear(&fresh);
		vlog_warn("net: could not rebuild the interface/route snapshot (%s), keeping the old one\n",
			  strerror(-b.err));
		return b.err;
	}
	pthread_mutex_lock(&ctx->lock);
	struct net_snapshot old = ctx->snap;
	ctx->snap = fresh;
	/* Atomic: net_generation reads it on every send without the lock. */
	__atomic_store_n(&ctx->generation, ctx->generation + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&ctx->changed);
	pthread_mutex_unlock(&ctx->lock);
	net_snapshot_clear(&old);
	ctx->dirty = false;
	return 0;
}

/* After lost events (socket overrun) the caches may be wrong: dump again. */
static void resync_caches(struct net_ctx *ctx)
{
	struct nl_cache *caches[] = { ctx->links, ctx->addrs, ctx->routes, ctx->neighs };
	for (size_t i = 0; i < sizeof(caches) / sizeof(caches[0]); i++) {
		int rc = nl_cache_refill(ctx->request_sock, caches[i]);
		if (rc < 0)
			vlog_warn("net: netlink resync failed: %s\n", nl_geterror(rc));
	}
	/* Refilled entries carry no news stamp of their own: mark them all, so a
	 * waiter re-reads what it sees. */
	for (size_t i = 0; i < ctx->nstamps; i++)
		ctx->stamps[i].seq = ++ctx->neigh_seq;
	ctx->dirty = true;
}

static int poll_locked(struct net_ctx *ctx, int timeout_ms)
{
	ctx->batch_changes = 0;
	int rc = nl_cache_mngr_poll(ctx->mngr, timeout_ms);
	if (rc < 0 && rc != -NLE_INTR && rc != -NLE_AGAIN) {
		vlog_debug("net: netlink event read failed (%s), resyncing\n", nl_geterror(rc));
		resync_caches(ctx);
		ctx->batch_changes++;
	}
	if (ctx->dirty)
		rebuild_snapshot(ctx);
	return ctx->batch_changes;
}

int net_poll_events(struct net_ctx *ctx, int timeout_ms)
{
	pthread_mutex_lock(&ctx->poll_lock);
	int rc = poll_locked(ctx, timeout_ms);
	pthread_mutex_unlock(&ctx->poll_lock);
	return rc;
}

int net_event_fd(struct net_ctx *ctx)
{
	return nl_cache_mngr_get_fd(ctx->mngr);
}

uint64_t net_generation(struct net_ctx *ctx)
{
	return __atomic_load_n(&ctx->generation, __ATOMIC_ACQUIRE);
}

/* ---- open / close ---- */

void net_close(struct net_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->mngr)
		nl_cache_mngr_free(ctx->mngr); /* frees the caches it allocated */
	if (ctx->request_sock)
		nl_socket_free(ctx->request_sock);
	net_snapshot_clear(&ctx->snap);
	free(ctx->stamps);
	net_neigh_tracker_destroy(&ctx->tracker);
	pthread_cond_destroy(&ctx->changed);
	pthread_mutex_destroy(&ctx->poll_lock);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

int net_open(struct net_ctx **out)
{
	*out = NULL;
	struct net_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->poll_lock, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&ctx->changed, &attr);
	pthread_condattr_destroy(&attr);
	net_neigh_tracker_init(&ctx->tracker);
	net_neigh_settings_default(&ctx->settings);
	net_snapshot_init(&ctx->snap);

	int rc;
	ctx->request_sock = nl_socket_alloc();
	if (!ctx->request_sock) {
		rc = -NLE_NOMEM;
		goto fail;
	}
	rc = nl_connect(ctx->request_sock, NETLINK_ROUTE);
	if (rc < 0)
		goto fail;
	rc = nl_cache_mngr_alloc(NULL, NETLINK_ROUTE, 0, &ctx->mngr);
	if (rc < 0)
		goto fail;
	static const char *const names[] = { "route/link", "route/addr", "route/route", "route/neigh" };
	struct nl_cache **slots[] = { &ctx->links, &ctx->addrs, &ctx->routes, &ctx->neighs };
	for (size_t i = 0; i < 4; i++) {
		rc = nl_cache_mngr_add(ctx->mngr, names[i], on_cache_change, ctx, slots[i]);
		if (rc < 0) {
			vlog_debug("net: cannot follow %s: %s\n", names[i], nl_geterror(rc));
			goto fail;
		}
	}
	/* The cache manager already made its event socket non-blocking. */
	rc = rebuild_snapshot(ctx);
	if (rc < 0) {
		net_close(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
fail:
	net_close(ctx);
	return errno_of_nl(rc);
}

void net_set_neigh_settings(struct net_ctx *ctx, const struct net_neigh_settings *settings)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->settings = *settings;
	pthread_mutex_unlock(&ctx->lock);
}

void net_set_trigger(struct net_ctx *ctx, enum net_trigger how)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->trigger = how;
	ctx->netlink_trigger_denied = false;
	pthread_mutex_unlock(&ctx->lock);
}

/* ---- queries ---- */

int net_route_lookup(struct net_ctx *ctx, const struct net_route_query *query, struct net_route_result *result)
{
	pthread_mutex_lock(&ctx->lock);
	int rc = net_snapshot_route_lookup(&ctx->snap, query, result);
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int net_link_get(struct net_ctx *ctx, int ifindex, struct net_link *out)
{
	pthread_mutex_lock(&ctx->lock);
	const struct net_link *link = net_snapshot_link(&ctx->snap, ifindex);
	if (link)
		*out = *link;
	pthread_mutex_unlock(&ctx->lock);
	return link ? 0 : -ENODEV;
}

void net_with_snapshot(struct net_ctx *ctx, void (*fn)(const struct net_snapshot *snap, void *arg), void *arg)
{
	pthread_mutex_lock(&ctx->lock);
	fn(&ctx->snap, arg);
	pthread_mutex_unlock(&ctx->lock);
}

/* ---- neighbour resolution against the kernel ---- */

static int live_lookup(void *arg, int ifindex, in_addr_t ip, struct net_neigh *out)
{
	struct net_ctx *ctx = arg;
	pthread_mutex_lock(&ctx->lock);
	const struct net_neigh *n = net_snapshot_neigh(&ctx->snap, ifindex, ip);
	if (n)
		*out = *n;
	pthread_mutex_unlock(&ctx->lock);
	return n ? 0 : -ENOENT;
}

/* RTM_NEWNEIGH with NTF_USE makes the kernel start (or re-validate) the
 * resolution as if it had a packet to send, without sending one. */
static int trigger_by_netlink(struct net_ctx *ctx, int ifindex, in_addr_t ip)
{
	struct rtnl_neigh *n = rtnl_neigh_alloc();
	struct nl_addr *dst = nl_addr_build(AF_INET, &ip, sizeof(ip));
	int rc = -NLE_NOMEM;
	if (n && dst) {
		rtnl_neigh_set_family(n, AF_INET);
		rtnl_neigh_set_ifindex(n, ifindex);
		rtnl_neigh_set_dst(n, dst);
		rtnl_neigh_set_flags(n, NTF_USE);
		pthread_mutex_lock(&ctx->poll_lock);
		rc = rtnl_neigh_add(ctx->request_sock, n, NLM_F_CREATE);
		pthread_mutex_unlock(&ctx->poll_lock);
	}
	if (dst)
		nl_addr_put(dst);
	if (n)
		rtnl_neigh_put(n);
	return rc < 0 ? errno_of_nl(rc) : 0;
}

/* Without CAP_NET_ADMIN: a zero-length datagram, TTL 1, to the discard port
 * of the next hop, forced out of ifindex. The kernel resolves the neighbour
 * to send it. libc's own calls (os/os.h): this socket must never be one we
 * offload. */
static int trigger_by_datagram(int ifindex, in_addr_t ip)
{
	int fd = (int)OS_CALL(socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	int rc = 0;
	int oif = (int)htonl((uint32_t)ifindex);
	int ttl = 1;
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = ip };
	if (OS_CALL(setsockopt, fd, IPPROTO_IP, IP_UNICAST_IF, &oif, sizeof(oif)) < 0 ||
	    OS_CALL(setsockopt, fd, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl)) < 0 ||
	    os_sendto_nocancel(fd, "", 0, 0, (struct sockaddr *)&to, sizeof(to)) < 0)
		rc = -errno;
	os_close_nocancel(fd);   /* may run with a lane locked: never a cancellation point */
	/* A neighbour that just failed makes the send fail too, after the kernel
	 * has started over: that still counts as triggered. */
	return rc == -EHOSTUNREACH ? 0 : rc;
}

static int ask_kernel_to_resolve(void *arg, int ifindex, in_addr_t ip);

/* The kernel moves the entry to INCOMPLETE (or STALE to DELAY) when asked,
 * without telling anyone. Mirror that in the cache: libnl reports only
 * changes, so a second NUD_FAILED after a retry would otherwise go unseen. */
static void mirror_kernel_resolving(struct net_ctx *ctx, int ifindex, in_addr_t ip)
{
	struct nl_addr *dst = nl_addr_build(AF_INET, &ip, sizeof(ip));
	if (!dst)
		return;
	pthread_mutex_lock(&ctx->poll_lock);
	struct rtnl_neigh *n = rtnl_neigh_get(ctx->neighs, ifindex, dst);
	if (n) {
		int state = rtnl_neigh_get_state(n);
		int now = state & NUD_STALE ? NUD_DELAY
			  : state & (NUD_FAILED | NUD_NONE | NUD_INCOMPLETE) ? NUD_INCOMPLETE : state;
		if (state >= 0 && now != state) {
			rtnl_neigh_unset_state(n, state);
			rtnl_neigh_set_state(n, now);
			rebuild_snapshot(ctx);
		}
		rtnl_neigh_put(n);
	}
	pthread_mutex_unlock(&ctx->poll_lock);
	nl_addr_put(dst);
}

/* The neighbour's request and wait run inside an application call (the
 * first send to a next hop, a connect), with our mutexes held around
 * netlink reads, writes and a condition wait, all libc cancellation points:
 * a pthread_cancel() acting there would leave a mutex held for every other
 * thread. Cancellation is off for their length (a wait is bounded by the
 * resolution's timeout) and acts at the thread's next cancellation point. */
static int live_trigger(void *arg, int ifindex, in_addr_t ip)
{
	struct net_ctx *ctx = arg;
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
	int rc = ask_kernel_to_resolve(ctx, ifindex, ip);
	if (rc == 0)
		mirror_kernel_resolving(ctx, ifindex, ip);
	pthread_setcancelstate(state, NULL);
	return rc;
}

static int ask_kernel_to_resolve(void *arg, int ifindex, in_addr_t ip)
{
	struct net_ctx *ctx = arg;
	pthread_mutex_lock(&ctx->lock);
	enum net_trigger how = ctx->trigger;
	bool denied = ctx->netlink_trigger_denied;
	pthread_mutex_unlock(&ctx->lock);

	if (how == NET_TRIGGER_NETLINK || (how == NET_TRIGGER_AUTO && !denied)) {
		int rc = trigger_by_netlink(ctx, ifindex, ip);
		if (rc == 0 || how == NET_TRIGGER_NETLINK)
			return rc;
		vlog_debug("net: neighbour request by netlink refused (%s), using a datagram\n", strerror(-rc));
		pthread_mutex_lock(&ctx->lock);
		ctx->netlink_trigger_denied = true;
		pthread_mutex_unlock(&ctx->lock);
	}
	return trigger_by_datagram(ifindex, ip);
}

static void live_wait_uncancelled(struct net_ctx *ctx, int timeout_ms)
{
	if (pthread_mutex_trylock(&ctx->poll_lock) == 0) {
		poll_locked(ctx, timeout_ms);
		pthread_mutex_unlock(&ctx->poll_lock);
		return;
	}
	/* Someone else is reading events: wait for the snapshot to change. */
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&ctx->lock);
	uint64_t gen = ctx->generation;
	while (ctx->generation == gen)
		if (OS_CALL(pthread_cond_timedwait, &ctx->changed, &ctx->lock, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&ctx->lock);
}

static void live_wait(void *arg, int timeout_ms)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);   /* live_trigger says why */
	live_wait_uncancelled(arg, timeout_ms);
	pthread_setcancelstate(state, NULL);
}

static uint64_t live_now(void *arg)
{
	(void)arg;
	return monotonic_ms();
}

/* Destinations that need no ARP: multicast maps to a MAC, broadcast is
 * ff:ff:ff:ff:ff:ff, and NOARP/loopback links have nothing to resolve.
 * Returns 1 when mac is filled, 0 to go on, -errno. */
static int neigh_without_arp(struct net_ctx *ctx, int ifindex, in_addr_t ip, uint8_t mac[NET_MAC_LEN])
{
	if (IN_MULTICAST(ntohl(ip))) {
		net_mcast_mac(ip, mac);
		return 1;
	}
	int rc = 0;
	pthread_mutex_lock(&ctx->lock);
	const struct net_link *link = net_snapshot_link(&ctx->snap, ifindex);
	if (!link) {
		rc = -ENODEV;
	} else if (link->flags & (IFF_LOOPBACK | IFF_NOARP)) {
		memcpy(mac, link->mac, NET_MAC_LEN);
		rc = 1;
	} else {
		bool broadcast = ip == INADDR_BROADCAST;
		for (size_t i = 0; i < ctx->snap.naddrs && !broadcast; i++)
			broadcast = ctx->snap.addrs[i].ifindex == ifindex && ctx->snap.addrs[i].broadcast == ip;
		/* Addresses added without "brd" still get a local broadcast route. */
		for (size_t i = 0; i < ctx->snap.nroutes && !broadcast; i++) {
			const struct net_route *r = &ctx->snap.routes[i];
			broadcast = r->type == RTN_BROADCAST && r->oif == ifindex && r->dst == ip && r->prefix == 32;
		}
		if (broadcast) {
			memset(mac, 0xff, NET_MAC_LEN);
			rc = 1;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int net_neigh_resolve(struct net_ctx *ctx, int ifindex, in_addr_t next_hop, uint8_t mac_out[NET_MAC_LEN],
		      int timeout_ms)
{
	int rc = neigh_without_arp(ctx, ifindex, next_hop, mac_out);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	pthread_mutex_lock(&ctx->lock);
	struct net_neigh_settings settings = ctx->settings;
	pthread_mutex_unlock(&ctx->lock);
	const struct net_neigh_ops ops = {
		.ctx = ctx, .lookup = live_lookup, .trigger = live_trigger, .wait = live_wait, .now_ms = live_now,
	};
	return net_neigh_resolve_with(&ops, &ctx->tracker, &settings, ifindex, next_hop, mac_out, timeout_ms);
}
