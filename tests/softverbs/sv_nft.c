/* softverbs: taking steered frames away from the kernel. A real flow rule
 * gives matching frames to the QP and the kernel never sees them; our
 * AF_PACKET tap only copies them. So every rule also drops its frames at
 * the netdev's nftables ingress hook, which runs after the taps.
 *
 * One table per process, "table netdev softverbs_PID { flags owner; }":
 * the kernel deletes an owned table when the netlink socket that made it
 * closes, so a process killed by SIGKILL leaves nothing behind. The socket
 * is libnftables' (one context kept for the life of the process), loaded
 * with dlopen so softverbs builds without its headers. Elements are
 * refcounted: several rules (QPs) may drop the same frames. */
#include <dlfcn.h>
#include <errno.h>
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

/* The chain and sets of one device, made on its first rule. */
static bool sv_nft_device(int ifindex, const char *ifname)
{
	for (struct sv_nft_dev *d = sv_nft_devs; d; d = d->next)
		if (d->ifindex == ifindex)
			return true;
	int pid = (int)sv_nft_pid;
	const char *nofrag = "ip frag-off & 0x3fff == 0";
	if (sv_nft_cmd("add chain netdev softverbs_%d d%d { type filter hook ingress device \"%s\" priority -500; }",
		       pid, ifindex, ifname) ||
	    sv_nft_cmd("add set netdev softverbs_%d f5_%d { type ipv4_addr . inet_proto . inet_service . ipv4_addr . "
		       "inet_service; }", pid, ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d f3_%d { type ipv4_addr . inet_proto . inet_service; }", pid,
		       ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d fa_%d { type inet_proto . inet_service; }", pid, ifindex) ||
	    sv_nft_cmd("add set netdev softverbs_%d fg_%d { type ipv4_addr . inet_proto; }", pid, ifindex) ||
	    sv_nft_cmd("add rule netdev softverbs_%d d%d %s ip daddr . meta l4proto . th dport . ip saddr . th sport "
		       "@f5_%d drop", pid, ifindex, nofrag, ifindex) ||
	    sv_nft_cmd("add rule netdev softverbs_%d d%d %s ip daddr . meta l4proto . th dport @f3_%d drop", pid,
		       ifindex, nofrag, ifindex) ||
	    sv_nft_cmd("add rule netdev softverbs_%d d%d %s meta l4proto . th dport @fa_%d drop", pid, ifindex,
		       nofrag, ifindex) ||
	    sv_nft_cmd("add rule netdev softverbs_%d d%d %s ip daddr . meta l4proto @fg_%d drop", pid, ifindex,
		       nofrag, ifindex))
		return false;
	struct sv_nft_dev *d = calloc(1, sizeof(*d));
	if (!d)
		return false;
	d->ifindex = ifindex;
	d->next = sv_nft_devs;
	sv_nft_devs = d;
	return true;
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
