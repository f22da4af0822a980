/* Turning a struct ring_flow into the key of the steering map that holds
 * it. Pure (no BPF calls), so it is unit tested without privileges. */
#ifndef VMA_RING_RING_FLOW_H
#define VMA_RING_RING_FLOW_H

#include "ring/ring.h"
#include "ring/ring_xdp_maps.h"

enum ring_flow_kind {
	RING_FLOW_5TUPLE,
	RING_FLOW_3TUPLE,
	RING_FLOW_GROUP,
};

union ring_flow_key {
	struct ring_xdp_key5 k5;
	struct ring_xdp_key3 k3;
	struct ring_xdp_keygrp grp;
};

/* Fills *key (padding zeroed) and returns the kind, or -EINVAL for a flow
 * that cannot be steered: not TCP/UDP, no local port (unicast), a 5-tuple
 * missing its local address or remote address/port, or a group outside
 * 224.0.0.0/4. */
int ring_flow_key(const struct ring_flow *flow, union ring_flow_key *key);
int ring_flow_same(const struct ring_flow *a, const struct ring_flow *b);

#endif
