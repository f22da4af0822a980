/* softverbs: ibv_create_flow rules. softverbs understands the rules a raw
 * Ethernet receiver steers with: an Ethernet spec (destination MAC,
 * ethertype IPv4), an IPv4 spec and a TCP or UDP spec, each field with a
 * full or an empty mask. Anything else is refused with EINVAL (a real
 * device would take more; our backend needs no more).
 *
 * Matching follows ibv_create_flow(3): among the rules of this process
 * that match a frame, those of the lowest priority number win; every QP
 * holding one of them gets the frame (identical rules on several QPs: a
 * copy each, as a multicast group needs). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "sv_internal.h"

static struct sv_flow *sv_flows;
static uint32_t sv_next_flow = 1;

static bool sv_mask_ok(const void *mask, size_t len, bool *full)
{
	const uint8_t *m = mask;
	bool all = true, none = true;
	for (size_t i = 0; i < len; i++) {
		all &= m[i] == 0xff;
		none &= m[i] == 0;
	}
	*full = all && len;
	return all || none;
}

static int sv_parse_specs(struct ibv_flow_attr *attr, struct sv_rule *r)
{
	uint8_t *p = (uint8_t *)(attr + 1);
	bool full;

	for (unsigned i = 0; i < attr->num_of_specs; i++) {
		/* Specs follow each other packed: each is copied out aligned. */
		struct ibv_flow_spec_tcp_udp hdr;
		union ibv_flow_spec_any {
			struct ibv_flow_spec_eth eth;
			struct ibv_flow_spec_ipv4 ipv4;
			struct ibv_flow_spec_tcp_udp tcp_udp;
			struct {
				uint32_t type;
				uint16_t size;
			} hdr;
		} any, *spec = &any;
		memcpy(&hdr, p, offsetof(struct ibv_flow_spec_tcp_udp, val));
		if (hdr.size < offsetof(struct ibv_flow_spec_tcp_udp, val) || hdr.size > sizeof(any))
			return EINVAL;
		memset(&any, 0, sizeof(any));
		memcpy(&any, p, hdr.size);
		switch (spec->hdr.type) {
		case IBV_FLOW_SPEC_ETH: {
			struct ibv_flow_spec_eth *eth = &spec->eth;
			bool type_full, zero;
			if (eth->size != sizeof(*eth) || !sv_mask_ok(eth->mask.dst_mac, 6, &full) ||
			    !sv_mask_ok(&eth->mask.ether_type, 2, &type_full) ||
			    !sv_mask_ok(eth->mask.src_mac, 6, &zero) || zero || eth->mask.vlan_tag)
				return EINVAL;
			if (type_full && ntohs(eth->val.ether_type) != 0x0800)
				return EINVAL;
			r->dmac_match = full;
			memcpy(r->dmac, eth->val.dst_mac, 6);
			break;
		}
		case IBV_FLOW_SPEC_IPV4: {
			struct ibv_flow_spec_ipv4 *ip = &spec->ipv4;
			bool src_full;
			if (ip->size != sizeof(*ip) || !sv_mask_ok(&ip->mask.dst_ip, 4, &full) ||
			    !sv_mask_ok(&ip->mask.src_ip, 4, &src_full))
				return EINVAL;
			r->dst_mask = full ? 0xffffffffu : 0;
			r->dst_ip = ip->val.dst_ip & r->dst_mask;
			r->src_mask = src_full ? 0xffffffffu : 0;
			r->src_ip = ip->val.src_ip & r->src_mask;
			break;
		}
		case IBV_FLOW_SPEC_TCP:
		case IBV_FLOW_SPEC_UDP: {
			struct ibv_flow_spec_tcp_udp *l4 = &spec->tcp_udp;
			bool sport_full;
			if (l4->size != sizeof(*l4) || !sv_mask_ok(&l4->mask.dst_port, 2, &full) ||
			    !sv_mask_ok(&l4->mask.src_port, 2, &sport_full))
				return EINVAL;
			r->proto = spec->hdr.type == IBV_FLOW_SPEC_TCP ? IPPROTO_TCP : IPPROTO_UDP;
			r->dport_mask = full ? 0xffff : 0;
			r->dport = l4->val.dst_port & r->dport_mask;
			r->sport_mask = sport_full ? 0xffff : 0;
			r->sport = l4->val.src_port & r->sport_mask;
			break;
		}
		default:
			return EINVAL;
		}
		p += hdr.size;
	}
	return r->proto ? 0 : EINVAL;
}

/* A NIC steers a frame when it arrives; the tap holds frames until a pump
 * looks. Before the rules of a device change, what already arrived is
 * taken, under the rules it arrived under. */
static void sv_flow_settle(const struct sv_device *dev)
{
	for (unsigned pass = 0; pass < 64 && dev->wire_users && sv_dev_pump((struct sv_device *)dev) > 0; pass++)
		;
}

struct ibv_flow *sv_create_flow(struct ibv_qp *ibqp, struct ibv_flow_attr *attr)
{
	struct sv_qp *qp = sv_qp_of(ibqp);
	struct sv_flow *f = NULL;
	struct sv_rule rule;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(qp->ctx, "ibv_create_flow") || sv_fail("ibv_create_flow"))
		goto out;
	memset(&rule, 0, sizeof(rule));
	if (attr->type != IBV_FLOW_ATTR_NORMAL || attr->port != SV_PORT || attr->flags || attr->comp_mask ||
	    ibqp->qp_type != IBV_QPT_RAW_PACKET || ibqp->state == IBV_QPS_ERR) {
		errno = EINVAL;
		goto out;
	}
	int err = sv_parse_specs(attr, &rule);
	if (err) {
		errno = err;
		goto out;
	}
	rule.ifindex = qp->dev->ifindex;
	rule.priority = attr->priority;
	sv_flow_settle(qp->dev);
	f = calloc(1, sizeof(*f));
	if (!f) {
		errno = ENOMEM;
		goto out;
	}
	f->flow.context = ibqp->context;
	f->flow.handle = sv_next_flow++;
	f->qp = qp;
	f->rule = rule;
	f->next = sv_flows;
	sv_flows = f;
	qp->flows++;
	sv_stats.flows_created++;
	if (!qp->dev->mem)
		sv_nft_add(&rule, qp->dev->ifname);
out:
	pthread_mutex_unlock(&sv_lock);
	return f ? &f->flow : NULL;
}

static void sv_flow_unlink(struct sv_flow *f)
{
	struct sv_device *dev = f->qp->dev;
	sv_flow_settle(dev);
	/* Tapping what the kernel did not get (sv_nft_tap), the element goes
	 * first: every frame the hook took before it went is then in the tap,
	 * and is received under the rule, which goes last (a NIC's frames
	 * steered before the rule went are in the RQ). Tapping the netdev,
	 * the rule goes first: a frame tapped between the two steps then
	 * reaches neither, where the other order would give it to both. */
	bool exact = dev->wire.exact;
	if (exact) {
		sv_nft_del(&f->rule, dev->ifname);
		sv_flow_settle(dev);
	}
	for (struct sv_flow **p = &sv_flows; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			break;
		}
	}
	f->qp->flows--;
	sv_stats.flows_destroyed++;
	if (!exact && !dev->mem)
		sv_nft_del(&f->rule, dev->ifname);
	free(f);
}

int sv_destroy_flow(struct ibv_flow *flow)
{
	struct sv_flow *f = (struct sv_flow *)flow;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(f->qp->ctx, "ibv_destroy_flow")) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	sv_flow_unlink(f);
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

struct sv_pkt {
	const uint8_t *dmac;
	uint32_t saddr, daddr;
	uint16_t sport, dport;
	uint8_t proto;
};

/* Fragments never match: later ones carry no ports. */
static bool sv_parse_frame(const uint8_t *frame, uint32_t len, struct sv_pkt *k)
{
	if (len < 14 + 20 || frame[12] != 0x08 || frame[13] != 0x00)
		return false;
	const uint8_t *ip = frame + 14;
	uint32_t ihl = (uint32_t)(ip[0] & 15) * 4;
	if ((ip[0] >> 4) != 4 || ihl < 20 || len < 14 + ihl + 4)
		return false;
	if ((ip[6] & 0x3f) || ip[7])
		return false;   /* MF or an offset */
	k->proto = ip[9];
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP)
		return false;
	k->dmac = frame;
	memcpy(&k->saddr, ip + 12, 4);
	memcpy(&k->daddr, ip + 16, 4);
	memcpy(&k->sport, ip + ihl, 2);
	memcpy(&k->dport, ip + ihl + 2, 2);
	return true;
}

static bool sv_rule_matches(const struct sv_rule *r, int ifindex, const struct sv_pkt *k)
{
	return r->ifindex == ifindex && r->proto == k->proto && (k->daddr & r->dst_mask) == r->dst_ip &&
	       (k->saddr & r->src_mask) == r->src_ip && (k->dport & r->dport_mask) == r->dport &&
	       (k->sport & r->sport_mask) == r->sport && (!r->dmac_match || memcmp(r->dmac, k->dmac, 6) == 0);
}

unsigned sv_flow_targets(const struct sv_device *dev, const uint8_t *frame, uint32_t len, struct sv_qp **out,
			 unsigned max)
{
	struct sv_pkt k;
	int best = 0x10000;
	unsigned n = 0;

	if (!sv_parse_frame(frame, len, &k))
		return 0;
	for (struct sv_flow *f = sv_flows; f; f = f->next)
		if (f->qp->dev == dev && f->rule.priority < best && sv_rule_matches(&f->rule, dev->ifindex, &k))
			best = f->rule.priority;
	for (struct sv_flow *f = sv_flows; f && n < max; f = f->next) {
		if (f->qp->dev != dev || f->rule.priority != best || !sv_rule_matches(&f->rule, dev->ifindex, &k))
			continue;
		bool seen = false;
		for (unsigned i = 0; i < n && !seen; i++)
			seen = out[i] == f->qp;
		if (!seen)
			out[n++] = f->qp;
	}
	return n;
}

SV_EXPORT int softverbs_test_rules(uint32_t qp_num, struct softverbs_rule_info *out, int max)
{
	int n = 0;
	pthread_mutex_lock(&sv_lock);
	for (struct sv_flow *f = sv_flows; f; f = f->next) {
		if (f->qp->qp.qp_num != qp_num)
			continue;
		if (n < max) {
			struct softverbs_rule_info *i = &out[n];
			memset(i, 0, sizeof(*i));
			i->proto = f->rule.proto;
			i->dst_ip = f->rule.dst_ip;
			i->dst_mask = f->rule.dst_mask;
			i->src_ip = f->rule.src_ip;
			i->src_mask = f->rule.src_mask;
			i->dport = f->rule.dport;
			i->dport_mask = f->rule.dport_mask;
			i->sport = f->rule.sport;
			i->sport_mask = f->rule.sport_mask;
			if (f->rule.dmac_match)
				memcpy(i->dmac, f->rule.dmac, 6);
			i->priority = f->rule.priority;
		}
		n++;
	}
	pthread_mutex_unlock(&sv_lock);
	return n;
}
