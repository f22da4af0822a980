/* The verbs backend's steering: one ibv_create_flow rule per flow, an
 * Ethernet, an IPv4 and a TCP/UDP spec with full masks on the fields used,
 * at a priority that makes the more specific rule win; each ring's table
 * of the flows it steers; a flow moving from one ring of the process to
 * another (docs/verbs.md, "Flow steering"). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "log/vlog.h"
#include "ring/ring_flow.h"
#include "ring/ring_verbs.h"

int ring_verbs_rule_build(const struct ring_flow *flow, const uint8_t mac[6], uint8_t port,
			  struct ring_verbs_rule *rule)
{
	union ring_flow_key key;
	int kind = ring_flow_key(flow, &key);

	if (kind < 0)
		return kind;
	memset(rule, 0, sizeof(*rule));
	rule->attr.type = IBV_FLOW_ATTR_NORMAL;
	rule->attr.size = sizeof(*rule);
	rule->attr.num_of_specs = 3;
	rule->attr.port = port;

	rule->eth.type = IBV_FLOW_SPEC_ETH;
	rule->eth.size = sizeof(rule->eth);
	rule->eth.val.ether_type = htons(0x0800);
	rule->eth.mask.ether_type = 0xffff;
	memset(rule->eth.mask.dst_mac, 0xff, 6);

	rule->ipv4.type = IBV_FLOW_SPEC_IPV4;
	rule->ipv4.size = sizeof(rule->ipv4);

	rule->l4.type = flow->proto == IPPROTO_TCP ? IBV_FLOW_SPEC_TCP : IBV_FLOW_SPEC_UDP;
	rule->l4.size = sizeof(rule->l4);

	switch (kind) {
	case RING_FLOW_GROUP: {
		/* The group's MAC: 01:00:5e and its low 23 bits. */
		uint32_t group = ntohl(flow->group);
		const uint8_t gmac[6] = { 0x01, 0x00, 0x5e, (uint8_t)(group >> 16 & 0x7f), (uint8_t)(group >> 8),
					  (uint8_t)group };
		memcpy(rule->eth.val.dst_mac, gmac, 6);
		rule->ipv4.val.dst_ip = flow->group;
		rule->ipv4.mask.dst_ip = 0xffffffffu;
		if (flow->local_port) {
			rule->l4.val.dst_port = flow->local_port;
			rule->l4.mask.dst_port = 0xffff;
		}
		rule->attr.priority = RING_VERBS_PRIO_GROUP;
		break;
	}
	case RING_FLOW_5TUPLE:
		memcpy(rule->eth.val.dst_mac, mac, 6);
		rule->ipv4.val.dst_ip = flow->local_ip;
		rule->ipv4.mask.dst_ip = 0xffffffffu;
		rule->ipv4.val.src_ip = flow->remote_ip;
		rule->ipv4.mask.src_ip = 0xffffffffu;
		rule->l4.val.dst_port = flow->local_port;
		rule->l4.mask.dst_port = 0xffff;
		rule->l4.val.src_port = flow->remote_port;
		rule->l4.mask.src_port = 0xffff;
		rule->attr.priority = RING_VERBS_PRIO_5TUPLE;
		break;
	default:
		memcpy(rule->eth.val.dst_mac, mac, 6);
		if (flow->local_ip) {
			rule->ipv4.val.dst_ip = flow->local_ip;
			rule->ipv4.mask.dst_ip = 0xffffffffu;
			rule->attr.priority = RING_VERBS_PRIO_3TUPLE;
		} else {
			rule->attr.priority = RING_VERBS_PRIO_ANY_ADDR;
		}
		rule->l4.val.dst_port = flow->local_port;
		rule->l4.mask.dst_port = 0xffff;
		break;
	}
	return kind;
}

int ring_verbs_flow_errno(int err)
{
	switch (err) {
	case ENOMEM:
	case ENOSPC:
		return -ENOSPC;
	case EPERM:
	case EACCES:
		return -EPERM;
	case EEXIST:
		return -EEXIST;
	default:
		return -EINVAL;   /* EINVAL, ENXIO, EOPNOTSUPP: the device cannot steer it */
	}
}

/* ---- the flow tables ---- */

/* The process's verbs rings, for flows moving between them; this lock
 * guards every ring's flow table (attach, detach and close are not on the
 * packet path). */
static pthread_mutex_t ring_verbs_flows_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring_verbs *ring_verbs_rings;

/* In a forked child the rings (and their rules) are the parent's: none of
 * them is the child's to take a flow from. */
static void ring_verbs_atfork_child(void)
{
	pthread_mutex_init(&ring_verbs_flows_lock, NULL);
	ring_verbs_rings = NULL;
	ring_verbs_share_atfork_child();
}

static pthread_once_t ring_verbs_atfork_once = PTHREAD_ONCE_INIT;

static void ring_verbs_atfork_register(void)
{
	pthread_atfork(NULL, NULL, ring_verbs_atfork_child);
}

static void ring_verbs_unlink(struct ring_verbs *r)
{
	for (struct ring_verbs **p = &ring_verbs_rings; *p; p = &(*p)->next_ring) {
		if (*p == r) {
			*p = r->next_ring;
			break;
		}
	}
}

void ring_verbs_flows_register(struct ring_verbs *r)
{
	pthread_once(&ring_verbs_atfork_once, ring_verbs_atfork_register);
	pthread_mutex_lock(&ring_verbs_flows_lock);
	r->next_ring = ring_verbs_rings;
	ring_verbs_rings = r;
	pthread_mutex_unlock(&ring_verbs_flows_lock);
}

void ring_verbs_flows_release(struct ring_verbs *r)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	ring_verbs_unlink(r);
	/* Off the board first (connections, then members): no member picks
	 * a flow for a QP whose rule is gone. */
	for (unsigned i = 0; i < r->flow_count; i++)
		ring_verbs_share_conn_del(r->flows[i].conn_board, r->flows[i].conn);
	ring_verbs_share_leave_all(r);
	while (r->flow_count) {
		struct ring_verbs_flow *f = &r->flows[--r->flow_count];
		if (f->ib)
			ibv_destroy_flow(f->ib);
	}
	pthread_mutex_unlock(&ring_verbs_flows_lock);
}


static struct ring_verbs_flow *ring_verbs_flow_find(struct ring_verbs *r, const struct ring_flow *flow)
{
	for (unsigned i = 0; i < r->flow_count; i++)
		if (ring_flow_same(&r->flows[i].flow, flow))
			return &r->flows[i];
	return NULL;
}

/* Whether a 3-tuple flow would catch the 5-tuple's segments. */
static bool ring_verbs_flow_covers(const struct ring_flow *f, const struct ring_flow *five)
{
	return !f->group && !f->remote_port && f->proto == five->proto && f->local_port == five->local_port &&
	       (!f->local_ip || f->local_ip == five->local_ip);
}

/* Parks every 3-tuple of the process's rings on this interface that would
 * catch the 5-tuple: its rule goes, its record stays (the detach to come
 * finds it). 0, or the first failure (the rules parked so far stay so). */
static int ring_verbs_park_covering(struct ring_verbs *r, const struct ring_flow *five)
{
	for (struct ring_verbs *o = ring_verbs_rings; o; o = o->next_ring) {
		if (o != r && strcmp(o->base.ifname, r->base.ifname) != 0)
			continue;
		for (unsigned i = 0; i < o->flow_count; i++) {
			struct ring_verbs_flow *f = &o->flows[i];
			if (!f->ib || !ring_verbs_flow_covers(&f->flow, five))
				continue;
			ring_verbs_share_leave(o, &f->flow);
			int err = ibv_destroy_flow(f->ib);
			if (err)
				return ring_verbs_flow_errno(err);
			f->ib = NULL;
			f->parked = true;
			o->parked_count++;
			static bool told;
			if (!told)
				vlog_info("ring: %s: a connection under an offloaded listener went to the kernel (fork); "
					  "its port is served by the kernel from now on on the verbs backend (docs/verbs.md)",
					  r->base.ifname);
			told = true;
		}
	}
	return 0;
}

static int ring_verbs_flow_to_kernel(struct ring_verbs *r, const struct ring_flow *flow, int kind)
{
	struct ring_verbs_flow *f = ring_verbs_flow_find(r, flow);

	if (kind != RING_FLOW_5TUPLE)
		return -EINVAL;
	if (!f)
		return -ENOENT;
	if (!f->ib)
		return 0;
	/* A rule steers to a QP or drops: "back to the kernel" is no rule
	 * at all. A 3-tuple of ours (the listener the connection came from)
	 * would catch its segments then, so that one goes first: new
	 * connections to the port reach the kernel's listening socket, which
	 * the offloaded listener's accept and poll also serve. */
	int err = ring_verbs_park_covering(r, flow);
	if (err)
		return err;
	err = ibv_destroy_flow(f->ib);
	if (err)
		return ring_verbs_flow_errno(err);
	f->ib = NULL;
	f->flow.to_kernel = 1;
	ring_verbs_share_conn_del(f->conn_board, f->conn);   /* the kernel's connection now */
	f->conn = -1;
	return 0;
}

static int ring_verbs_attach_flow_locked(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ring_verbs_rule rule;
	int kind = ring_verbs_rule_build(flow, ring->mac, r->port, &rule);

	if (kind < 0)
		return kind;
	if (flow->to_kernel)
		return ring_verbs_flow_to_kernel(r, flow, kind);
	if (ring_verbs_flow_find(r, flow))
		return -EEXIST;
	if (r->flow_count == r->flow_cap) {
		unsigned cap = r->flow_cap ? r->flow_cap * 2 : 16;
		struct ring_verbs_flow *grown = realloc(r->flows, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		r->flows = grown;
		r->flow_cap = cap;
	}
	/* Another ring of this process steering the same unicast flow: the
	 * socket is moving lanes (its old lane's rings are drained next).
	 * Ours goes in one better, theirs goes, ours takes the usual
	 * priority: no moment with two equal rules (duplicates) or none
	 * (frames to the kernel). */
	/* A port shared by several sockets (fork, SO_REUSEPORT) is not a
	 * move: every member has the same rule on its own QP (the device
	 * gives each a copy) and the share group's spread picks the one that
	 * takes each new flow (ring_verbs_share.c). Unless the caller says it
	 * is (takeover: the socket was the other ring's only user of it, and
	 * that ring's rule is the one it made, not an SO_REUSEPORT sibling's). A
	 * second member beside the first would see the frames of the moment
	 * both rules stand too; the spread gives such a frame to one of them,
	 * but the old ring, drained after it left the group, takes every frame
	 * it holds: udp_migrate case g read 2 datagrams twice in 1 run of 16. */
	bool shared = flow->share && kind == RING_FLOW_3TUPLE;
	struct ring_verbs_flow *theirs = NULL;
	struct ring_verbs *theirs_ring = NULL;
	bool parked = false;
	if (kind != RING_FLOW_GROUP) {
		for (struct ring_verbs *o = ring_verbs_rings; o && !theirs; o = o->next_ring) {
			if (o == r)
				continue;
			struct ring_verbs_flow *f = ring_verbs_flow_find(o, flow);
			if (f && f->ib && (!shared || (flow->takeover && f->flow.owner_fd == flow->owner_fd))) {
				theirs = f;
				theirs_ring = o;
			} else if (f && f->parked) {
				parked = true;   /* the kernel serves that port: so it stays */
			}
		}
	}
	struct ibv_flow *ib;
	if (parked && !theirs) {
		ib = NULL;
	} else if (theirs) {
		struct ring_verbs_rule better = rule;
		better.attr.priority--;
		struct ibv_flow *bridge = ibv_create_flow(r->qp, &better.attr);
		if (!bridge)
			return ring_verbs_flow_errno(errno);
		ibv_destroy_flow(theirs->ib);
		theirs->ib = NULL;   /* its ring's detach then has nothing to undo */
		ib = ibv_create_flow(r->qp, &rule.attr);
		if (!ib) {
			ib = bridge;   /* keep the better one: steering still right */
		} else {
			ibv_destroy_flow(bridge);
		}
	} else {
		ib = ibv_create_flow(r->qp, &rule.attr);
		if (!ib)
			return ring_verbs_flow_errno(errno);
	}
	if (ib && kind == RING_FLOW_3TUPLE) {
		/* Every 3-tuple is on the board, alone or not: a process that
		 * accepted before a fork keeps its rule, and its children's
		 * rules join it there. */
		if (theirs_ring) {
			ring_verbs_share_move(theirs_ring, r, flow);
		} else {
			int err = ring_verbs_share_join(r, flow);
			if (err && shared) {
				ibv_destroy_flow(ib);
				static bool told;
				if (!told)
					vlog_info("ring: %s: the share group of a port shared across processes or by "
						  "SO_REUSEPORT cannot be kept (%s): the kernel serves such ports "
						  "(docs/verbs.md)", ring->ifname, strerror(-err));
				told = true;
				return -EOPNOTSUPP;
			}
			if (err)
				vlog_debug("ring: %s: no share board (%s): port %u steered alone", ring->ifname,
					   strerror(-err), ntohs(flow->local_port));
		}
	}
	struct ring_verbs_flow rec = { .flow = *flow, .ib = ib, .parked = ib == NULL, .conn = -1 };
	r->parked_count += rec.parked;
	if (ib && kind == RING_FLOW_5TUPLE && flow->proto == IPPROTO_TCP) {
		if (theirs) {
			/* A connection moving lanes keeps its entry. */
			rec.conn = theirs->conn;
			rec.conn_board = theirs->conn_board;
			theirs->conn = -1;
		} else {
			rec.conn = ring_verbs_share_conn_add(r, flow, &rec.conn_board);
		}
	}
	r->flows[r->flow_count++] = rec;
	return 0;
}

static int ring_verbs_detach_flow_locked(struct ring *ring, const struct ring_flow *flow)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	struct ring_verbs_flow *f = ring_verbs_flow_find(r, flow);

	if (!f)
		return -ENOENT;
	if (!flow->group && !flow->remote_port)
		ring_verbs_share_leave(r, flow);   /* a 3-tuple: out of its group first */
	ring_verbs_share_conn_del(f->conn_board, f->conn);
	r->parked_count -= f->parked;
	int err = f->ib ? ibv_destroy_flow(f->ib) : 0;
	*f = r->flows[--r->flow_count];
	return err ? -err : 0;
}

bool ring_verbs_flow_parked(struct ring_verbs *r, const struct ring_flow *three)
{
	for (unsigned i = 0; i < r->flow_count; i++) {
		const struct ring_verbs_flow *f = &r->flows[i];
		if (f->parked && !f->flow.remote_port && !f->flow.group && f->flow.proto == three->proto &&
		    f->flow.local_port == three->local_port &&
		    (!f->flow.local_ip || f->flow.local_ip == three->local_ip))
			return true;
	}
	return false;
}

int ring_verbs_attach_flow(struct ring *ring, const struct ring_flow *flow)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	int err = ring_verbs_attach_flow_locked(ring, flow);
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	return err;
}

int ring_verbs_detach_flow(struct ring *ring, const struct ring_flow *flow)
{
	pthread_mutex_lock(&ring_verbs_flows_lock);
	int err = ring_verbs_detach_flow_locked(ring, flow);
	pthread_mutex_unlock(&ring_verbs_flows_lock);
	return err;
}

/* The other ring took the flow over (its attach destroyed our rule when it
 * had installed its own): only the record goes. A rule still here (no
 * takeover happened after all) goes with it rather than steer to a ring
 * that no longer expects the flow. */
int ring_verbs_forget_flow(struct ring *ring, const struct ring_flow *flow)
{
	return ring_verbs_detach_flow(ring, flow);
}

