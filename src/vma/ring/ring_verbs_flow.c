/* The verbs backend's steering rules: one ibv_create_flow rule per flow,
 * an Ethernet, an IPv4 and a TCP/UDP spec with full masks on the fields
 * used, at a priority that makes the more specific rule win
 * (docs/verbs.md, "Flow steering"). Pure: unit tested without a device. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

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
