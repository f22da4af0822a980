#include "config.h"

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "ring/ring_flow.h"

int ring_flow_key(const struct ring_flow *f, union ring_flow_key *key)
{
	memset(key, 0, sizeof(*key));
	if (f->proto != IPPROTO_UDP && f->proto != IPPROTO_TCP)
		return -EINVAL;
	if (f->group) {
		if ((ntohl(f->group) & 0xf0000000u) != 0xe0000000u)
			return -EINVAL;
		key->grp.group = f->group;
		key->grp.port = f->local_port;
		key->grp.proto = f->proto;
		return RING_FLOW_GROUP;
	}
	if (!f->local_port)
		return -EINVAL;
	if (f->remote_ip || f->remote_port) {
		if (!f->local_ip || !f->remote_ip || !f->remote_port)
			return -EINVAL;
		key->k5.local_ip = f->local_ip;
		key->k5.remote_ip = f->remote_ip;
		key->k5.local_port = f->local_port;
		key->k5.remote_port = f->remote_port;
		key->k5.proto = f->proto;
		return RING_FLOW_5TUPLE;
	}
	key->k3.local_ip = f->local_ip;
	key->k3.local_port = f->local_port;
	key->k3.proto = f->proto;
	return RING_FLOW_3TUPLE;
}

int ring_flow_same(const struct ring_flow *a, const struct ring_flow *b)
{
	return a->proto == b->proto && a->local_ip == b->local_ip && a->local_port == b->local_port &&
	       a->remote_ip == b->remote_ip && a->remote_port == b->remote_port && a->group == b->group;
}
