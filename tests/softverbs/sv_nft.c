/* softverbs: taking steered frames away from the kernel. A real flow rule
 * gives matching frames to the QP and the kernel never sees them; an
 * AF_PACKET tap only copies them. So every rule also drops its frames at
 * the netdev's nftables ingress hook.
 *
 * Which frames a QP gets and which the kernel gets must be one decision per
 * frame, as on a NIC, where a rule is swapped atomically. A tap on the
 * netdev itself sees frames before the ingress hook: a frame tapped while a
 * rule and its nftables element were being removed went to neither (or,
 * with the two steps the other way round, to both). So where it can, the
 * hook also hands the frames it drops to the tap: "meta mark set PID dup to
 * svNd", svNd one end of a veth pair made for device N, and the process
 * taps svNd for the frames marked with its pid. The other end, svNp, must
 * be up too (a veth without carrier drops what it is given before any tap
 * sees it); an ingress chain with policy drop on it keeps the copies from
 * the kernel's stack there. The drops are a second chain of each table at
 * a later priority, dropping what carries the process's mark, so that every
 * process's duplicates are made first (two processes with the same rule both
 * get the frame, as both taps on the netdev did) and a frame is dropped
 * exactly when it was duplicated. Without a veth pair (no privilege, an old kernel), the
 * netdev's own tap as before.
 *
 * One table per process, "table netdev softverbs_PID { flags owner; }":
 * the kernel deletes an owned table when the netlink socket that made it
 * closes, so a process killed by SIGKILL leaves nothing behind. The socket
 * is libnftables' (one context kept for the life of the process), loaded
 * with dlopen so softverbs builds without its headers. Elements are
 * refcounted: several rules (QPs) may drop the same frames. */
#include <dlfcn.h>
#include <errno.h>
#include <net/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "sv_internal.h"

struct nft_ctx;
static struct nft_ctx *(*sv_nft_ctx_new)(uint32_t flags);
static int (*sv_nft_run)(struct nft_ctx *ctx, const char *buf);
static int (*sv_nft_buffer_output)(struct nft_ctx *ctx);
static int (*sv_nft_buffer_error)(struct nft_ctx *ctx);
static const char *(*sv_nft_get_error)(struct nft_ctx *ctx);

static struct nft_ctx *sv_nft;
static bool sv_nft_failed;
static pid_t sv_nft_pid;

struct sv_nft_dev {
	struct sv_nft_dev *next;
	int ifindex;
	int tap_ifindex;   /* the veth end the hook duplicates to; 0: none */
};
static struct sv_nft_dev *sv_nft_devs;

struct sv_nft_elem {
	struct sv_nft_elem *next;
	char set[24];
	char key[96];
	unsigned refs;
};
static struct sv_nft_elem *sv_nft_elems;

static int sv_nft_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int sv_nft_cmd(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (sv_nft_run(sv_nft, cmd) == 0)
		return 0;
	const char *why = sv_nft_get_error ? sv_nft_get_error(sv_nft) : NULL;
	sv_warn("nft '%s' failed: %s", cmd, why && *why ? why : "(no reason given)");
	return -1;
}

static bool sv_nft_ready(void)
{
	if (sv_nft && sv_nft_pid == sv_self_pid())
		return true;
	if (sv_nft_failed)
		return false;
	if (getenv("SOFTVERBS_NO_NFT")) {
		sv_nft_failed = true;
		return false;
	}
	void *lib = dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib) {
		sv_nft_ctx_new = (struct nft_ctx * (*)(uint32_t)) dlsym(lib, "nft_ctx_new");
		sv_nft_run = (int (*)(struct nft_ctx *, const char *))dlsym(lib, "nft_run_cmd_from_buffer");
		sv_nft_buffer_output = (int (*)(struct nft_ctx *))dlsym(lib, "nft_ctx_buffer_output");
		sv_nft_buffer_error = (int (*)(struct nft_ctx *))dlsym(lib, "nft_ctx_buffer_error");
		sv_nft_get_error = (const char *(*)(struct nft_ctx *))dlsym(lib, "nft_ctx_get_error_buffer");
	}
	if (!lib || !sv_nft_ctx_new || !sv_nft_run || !(sv_nft = sv_nft_ctx_new(0))) {
		sv_nft_failed = true;
		sv_warn("libnftables unavailable (%s): the kernel still receives the frames rules steer",
			lib ? "symbols missing" : dlerror());
		return false;
	}
	if (sv_nft_buffer_output)
		sv_nft_buffer_output(sv_nft);
	if (sv_nft_buffer_error)
		sv_nft_buffer_error(sv_nft);
	sv_nft_pid = sv_self_pid();
	if (sv_nft_cmd("add table netdev softverbs_%d { flags owner; }", (int)sv_nft_pid)) {
		sv_nft_failed = true;
		sv_nft = NULL;
		sv_warn("cannot create the nftables table (privilege?): the kernel still receives the frames "
			"rules steer");
		return false;
	}
	return true;
}

/* One rtnetlink request, answered by an ACK: 0 or -errno. */
static int sv_rtnl(struct nlmsghdr *req)
{
	long fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int err = -EIO;
	if (syscall(SYS_sendto, fd, req, req->nlmsg_len, 0, &kernel, sizeof(kernel)) == (long)req->nlmsg_len) {
		char buf[4096];
		long n = syscall(SYS_recvfrom, fd, buf, sizeof(buf), 0, NULL, NULL);
		struct nlmsghdr *h = (struct nlmsghdr *)buf;
		if (n >= (long)sizeof(*h) && NLMSG_OK(h, (unsigned long)n) && h->nlmsg_type == NLMSG_ERROR)
			err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
	}
	sv_sys_close((int)fd);
	return err;
}

static struct rtattr *sv_rta_add(struct nlmsghdr *h, unsigned short type, const void *data, unsigned len)
{
	struct rtattr *a = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void sv_rta_end(struct nlmsghdr *h, struct rtattr *nest)
{
	nest->rta_len = (unsigned short)((char *)h + h->nlmsg_len - (char *)nest);
}

/* An RTM_NEWLINK request in a zeroed buffer of size bytes: its ifinfomsg. */
static struct ifinfomsg *sv_newlink(struct nlmsghdr *h, size_t size, unsigned short flags)
{
	memset(h, 0, size);
	h->nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	h->nlmsg_type = RTM_NEWLINK;
	h->nlmsg_flags = (unsigned short)(NLM_F_REQUEST | NLM_F_ACK | flags);
	struct ifinfomsg *ifi = NLMSG_DATA(h);
	ifi->ifi_family = AF_UNSPEC;
	return ifi;
}

static int sv_link_up(int ifindex)
{
	union {
		struct nlmsghdr h;
		char buf[128];
	} up;
	struct ifinfomsg *ifi = sv_newlink(&up.h, sizeof(up), 0);
	ifi->ifi_index = ifindex;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	return sv_rtnl(&up.h);
}

/* The veth end "svNd" the hook of device N duplicates to, made (with its
 * peer "svNp") by the first process of the namespace and left for the
 * others: its ifindex, or 0. */
static int sv_tap_link(int ifindex, char name[IF_NAMESIZE])
{
	char peer[IF_NAMESIZE];
	snprintf(name, IF_NAMESIZE, "sv%dd", ifindex);
	snprintf(peer, sizeof(peer), "sv%dp", ifindex);
	int have = (int)if_nametoindex(name);
	if (!have) {
		union {
			struct nlmsghdr h;
			char buf[512];
		} req;
		sv_newlink(&req.h, sizeof(req), NLM_F_CREATE | NLM_F_EXCL);
		sv_rta_add(&req.h, IFLA_IFNAME, name, (unsigned)strlen(name) + 1);
		struct rtattr *info = sv_rta_add(&req.h, IFLA_LINKINFO, NULL, 0);
		sv_rta_add(&req.h, IFLA_INFO_KIND, "veth", 5);
		struct rtattr *data = sv_rta_add(&req.h, IFLA_INFO_DATA, NULL, 0);
		struct rtattr *vpeer = sv_rta_add(&req.h, VETH_INFO_PEER, NULL, 0);
		req.h.nlmsg_len += NLMSG_ALIGN(sizeof(struct ifinfomsg));   /* the peer's ifinfomsg, zero */
		sv_rta_add(&req.h, IFLA_IFNAME, peer, (unsigned)strlen(peer) + 1);
		sv_rta_end(&req.h, vpeer);
		sv_rta_end(&req.h, data);
		sv_rta_end(&req.h, info);
		int err = sv_rtnl(&req.h);
		if (err && err != -EEXIST)
			return 0;
		have = (int)if_nametoindex(name);
		if (!have)
			return 0;
	}
	int peer_index = (int)if_nametoindex(peer);
	if (!peer_index || sv_nft_cmd("add chain netdev softverbs_%d p%d { type filter hook ingress device \"%s\" "
				      "priority -500; policy drop; }", (int)sv_nft_pid, ifindex, peer))
		return 0;
	return sv_link_up(peer_index) == 0 && sv_link_up(have) == 0 ? have : 0;
}

/* The chain and sets of one device, made on its first rule or when its
 * wire opens: the device's record, or NULL. */
static struct sv_nft_dev *sv_nft_device(int ifindex, const char *ifname)
{
	for (struct sv_nft_dev *d = sv_nft_devs; d; d = d->next)
		if (d->ifindex == ifindex)
			return d;
	int pid = (int)sv_nft_pid;
	const char *nofrag = "ip frag-off & 0x3fff == 0";
	/* One chain per priority class of rules, run in the order a NIC
	 * tests its rules: 5-tuples, then 3-tuples and groups, then ports on
	 * any address. A frame one class took (of any process: the class is
	 * in its mark) is left alone by the worse classes of every process,
	 * so a connection's 5-tuple in one process wins over a listener's
	 * 3-tuple in another; rules of one class match in every process that
	 * holds them (each gets a copy). */
	static const struct {
		const char *chain;
		int hook_prio;
		const char *skip;      /* taken by a better class already */
		uint32_t class_bit;
		const char *match[2];
	} classes[] = {
		{ "d5", -500, "", SV_NFT_MARK_5TUPLE,
		  { "ip daddr . meta l4proto . th dport . ip saddr . th sport @f5_%d", NULL } },
		{ "d3", -490, "meta mark & 0x40000000 == 0", SV_NFT_MARK_3TUPLE,
		  { "ip daddr . meta l4proto . th dport @f3_%d", "ip daddr . meta l4proto @fg_%d" } },
		{ "da", -480, "meta mark & 0x60000000 == 0", SV_NFT_MARK_ANY,
		  { "meta l4proto . th dport @fa_%d", NULL } },
	};
	char tap_name[IF_NAMESIZE];
	int tap = getenv("SOFTVERBS_NO_DUP") ? 0 : sv_tap_link(ifindex, tap_name);
	for (unsigned c = 0; c < sizeof(classes) / sizeof(classes[0]); c++)
		if (sv_nft_cmd("add chain netdev softverbs_%d %s%d { type filter hook ingress device \"%s\" priority "
			       "%d; }", pid, classes[c].chain, ifindex, ifname, classes[c].hook_prio))
			return NULL;
	if ((tap && sv_nft_cmd("add chain netdev softverbs_%d x%d { type filter hook ingress device \"%s\" priority "
			       "-400; }", pid, ifindex, ifname)) ||
	    sv_nft_cmd("add set netdev softverbs_%d f5_%d { type ipv4_addr . inet_proto . inet_service . ipv4_addr . "
		       "inet_service; }", pid, ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d f3_%d { type ipv4_addr . inet_proto . inet_service; }", pid,
		       ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d fa_%d { type inet_proto . inet_service; }", pid, ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d fg_%d { type ipv4_addr . inet_proto; }", pid, ifindex))
		return NULL;
	for (unsigned c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
		for (unsigned i = 0; i < 2 && classes[c].match[i]; i++) {
			char m[128];
			snprintf(m, sizeof(m), classes[c].match[i], ifindex);
			if (tap ? sv_nft_cmd("add rule netdev softverbs_%d %s%d %s %s %s meta mark set 0x%x dup to \"%s\"",
					     pid, classes[c].chain, ifindex, classes[c].skip, nofrag, m,
					     classes[c].class_bit | (uint32_t)pid, tap_name)
				: sv_nft_cmd("add rule netdev softverbs_%d %s%d %s %s drop", pid, classes[c].chain,
					     ifindex, nofrag, m))
				return NULL;
		}
	}
	/* The drop follows the duplicate's mark, not a second look at the sets:
	 * an element deleted between the two chains would otherwise leave a
	 * frame both duplicated and passed to the kernel. (A later process's
	 * duplicate overwrites the mark; its own drop chain then drops.) */
	if (tap && sv_nft_cmd("add rule netdev softverbs_%d x%d meta mark & 0x%x == %d drop", pid, ifindex,
			      SV_NFT_MARK_PID, pid))
		return NULL;
	struct sv_nft_dev *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->ifindex = ifindex;
	d->tap_ifindex = tap;
	d->next = sv_nft_devs;
	sv_nft_devs = d;
	return d;
}

int sv_nft_tap(int ifindex, const char *ifname)
{
	if (!sv_nft_ready())
		return 0;
	struct sv_nft_dev *d = sv_nft_device(ifindex, ifname);
	return d ? d->tap_ifindex : 0;
}

/* The set and element that drop what rule steers; false when nftables
 * cannot express it (softverbs then warns once). */
static bool sv_nft_key(const struct sv_rule *r, char *set, size_t set_len, char *key, size_t key_len)
{
	char dst[INET_ADDRSTRLEN], src[INET_ADDRSTRLEN];
	const char *proto = r->proto == IPPROTO_TCP ? "tcp" : "udp";

	inet_ntop(AF_INET, &r->dst_ip, dst, sizeof(dst));
	inet_ntop(AF_INET, &r->src_ip, src, sizeof(src));
	if (r->dst_mask && r->src_mask && r->dport_mask && r->sport_mask) {
		snprintf(set, set_len, "f5_%d", r->ifindex);
		snprintf(key, key_len, "%s . %s . %u . %s . %u", dst, proto, ntohs(r->dport), src, ntohs(r->sport));
	} else if (r->dst_mask && !r->src_mask && r->dport_mask && !r->sport_mask) {
		snprintf(set, set_len, "f3_%d", r->ifindex);
		snprintf(key, key_len, "%s . %s . %u", dst, proto, ntohs(r->dport));
	} else if (!r->dst_mask && !r->src_mask && r->dport_mask && !r->sport_mask) {
		snprintf(set, set_len, "fa_%d", r->ifindex);
		snprintf(key, key_len, "%s . %u", proto, ntohs(r->dport));
	} else if (r->dst_mask && !r->src_mask && !r->dport_mask && !r->sport_mask) {
		snprintf(set, set_len, "fg_%d", r->ifindex);
		snprintf(key, key_len, "%s . %s", dst, proto);
	} else {
		return false;
	}
	return true;
}

void sv_nft_add(const struct sv_rule *rule, const char *ifname)
{
	char set[24], key[96];

	if (!sv_nft_ready() || !sv_nft_device(rule->ifindex, ifname))
		return;
	if (!sv_nft_key(rule, set, sizeof(set), key, sizeof(key))) {
		static bool warned;
		if (!warned)
			sv_warn("a rule of a shape nftables is not set up for: the kernel still receives its frames");
		warned = true;
		return;
	}
	for (struct sv_nft_elem *e = sv_nft_elems; e; e = e->next) {
		if (strcmp(e->set, set) == 0 && strcmp(e->key, key) == 0) {
			e->refs++;
			return;
		}
	}
	if (sv_nft_cmd("add element netdev softverbs_%d %s { %s }", (int)sv_nft_pid, set, key))
		return;
	struct sv_nft_elem *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	snprintf(e->set, sizeof(e->set), "%s", set);
	snprintf(e->key, sizeof(e->key), "%s", key);
	e->refs = 1;
	e->next = sv_nft_elems;
	sv_nft_elems = e;
	sv_stats.nft_elements++;
}

void sv_nft_del(const struct sv_rule *rule, const char *ifname)
{
	char set[24], key[96];

	(void)ifname;
	if (!sv_nft || sv_nft_pid != sv_self_pid() || !sv_nft_key(rule, set, sizeof(set), key, sizeof(key)))
		return;
	for (struct sv_nft_elem **p = &sv_nft_elems; *p; p = &(*p)->next) {
		struct sv_nft_elem *e = *p;
		if (strcmp(e->set, set) != 0 || strcmp(e->key, key) != 0)
			continue;
		if (--e->refs == 0) {
			sv_nft_cmd("delete element netdev softverbs_%d %s { %s }", (int)sv_nft_pid, set, key);
			*p = e->next;
			free(e);
			sv_stats.nft_elements--;
		}
		return;
	}
}

void sv_nft_forget(void)
{
	/* The context (and its socket) stays the parent's; the child makes a
	 * table of its own if it steers anything. */
	sv_nft = NULL;
	sv_nft_failed = false;
	sv_nft_devs = NULL;
	sv_nft_elems = NULL;
	sv_stats.nft_elements = 0;
}
