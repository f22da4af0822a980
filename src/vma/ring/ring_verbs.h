/* The verbs backend's parts shared by its files: device discovery
 * (ring_verbs_dev.c), the flow rule layout (ring_verbs_flow.c) and the
 * ring itself (ring_verbs.c). docs/verbs.md describes all three. */
#ifndef VMA_RING_RING_VERBS_H
#define VMA_RING_RING_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "ring/ring.h"

/* ---- device discovery (ring_verbs_dev.c) ---- */

/* Once per process, before any other verbs call: ibv_fork_init (VMA_FORK)
 * and MLX5_SHUT_UP_BF (VMA_BF=0), from the first ring's configuration. */
void ring_verbs_process_init(const struct ring_config *cfg);

/* Opens the device serving ifname (sysfs, then the GID tables' netdev)
 * and finds its port: 0 with *ctx and *port, or a negative errno and a
 * reason in why. The port is active and Ethernet. */
int ring_verbs_device_open(const char *ifname, unsigned ifindex, struct ibv_context **ctx, uint8_t *port,
			   char *why, size_t why_len);

/* ---- flow rules (ring_verbs_flow.c) ---- */

/* One rule as ibv_create_flow takes it: Ethernet, IPv4, TCP or UDP. */
struct ring_verbs_rule {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_ipv4 ipv4;
	struct ibv_flow_spec_tcp_udp l4;
} __attribute__((packed, aligned(8)));

/* Rule priorities: a lower number is tested first (ibv_create_flow(3)).
 * Each kind leaves the number below it free for a takeover: a ring taking
 * a flow from another ring of the process (a UDP socket moving lanes)
 * first adds its rule one better, so that for no moment two QPs hold the
 * same rule at the same priority (duplicated frames on hardware). */
enum {
	RING_VERBS_PRIO_5TUPLE = 1,
	RING_VERBS_PRIO_3TUPLE = 3,
	RING_VERBS_PRIO_GROUP = 3,
	RING_VERBS_PRIO_ANY_ADDR = 5,
};

/* Fills *rule for flow on port (mac: the port's address). Returns the
 * flow's kind (enum ring_flow_kind) or -EINVAL. */
int ring_verbs_rule_build(const struct ring_flow *flow, const uint8_t mac[6], uint8_t port,
			  struct ring_verbs_rule *rule);
/* The ring's errno for a refused ibv_create_flow. */
int ring_verbs_flow_errno(int err);

#endif
