/* UDP receive and protocol control blocks. Demultiplexing uses three hash
 * tables so unicast never scans: connected pcbs by (local port, remote ip,
 * remote port), bound pcbs by (local ip, local port), and every bound pcb by
 * port alone for multicast and broadcast, which go to all that match. */
#include "stack/stack_internal.h"
#include "stack/stack_csum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define IP4_PROTO_UDP 17

static uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

static uint32_t bind_hash(const struct stack *st, uint32_t ip, uint16_t port)
{
	return mix(ip ^ mix(port)) & st->hash_mask;
}

static uint32_t conn_hash(const struct stack *st, uint16_t lport, uint32_t rip, uint16_t rport)
{
	return mix(rip ^ mix((uint32_t)lport << 16 | rport)) & st->hash_mask;
}

static uint32_t port_hash(const struct stack *st, uint16_t port)
{
	return mix(port) & st->hash_mask;
}

static void addr_table_remove(struct stack_udp_pcb **bucket, struct stack_udp_pcb *pcb)
{
	for (struct stack_udp_pcb **p = bucket; *p; p = &(*p)->addr_next) {
		if (*p == pcb) {
			*p = pcb->addr_next;
			pcb->addr_next = NULL;
			return;
		}
	}
}

static struct stack_udp_pcb **addr_bucket(struct stack_udp_pcb *pcb)
{
	struct stack *st = pcb->st;
	if (pcb->connected)
		return &st->conn_table[conn_hash(st, pcb->local_port, pcb->remote_ip, pcb->remote_port)];
	return &st->bind_table[bind_hash(st, pcb->local_ip, pcb->local_port)];
}

static void unhash(struct stack_udp_pcb *pcb)
{
	if (!pcb->bound)
		return;
	addr_table_remove(addr_bucket(pcb), pcb);
	struct stack_udp_pcb **p = &pcb->st->port_table[port_hash(pcb->st, pcb->local_port)];
	for (; *p; p = &(*p)->port_next) {
		if (*p == pcb) {
			*p = pcb->port_next;
			break;
		}
	}
	pcb->port_next = NULL;
}

static void rehash(struct stack_udp_pcb *pcb)
{
	struct stack_udp_pcb **bucket = addr_bucket(pcb);
	pcb->addr_next = *bucket;
	*bucket = pcb;
	bucket = &pcb->st->port_table[port_hash(pcb->st, pcb->local_port)];
	pcb->port_next = *bucket;
	*bucket = pcb;
}

struct stack_udp_pcb *stack_udp_pcb_new(struct stack *st)
{
	struct stack_udp_pcb *pcb = calloc(1, sizeof(*pcb));
	if (!pcb)
		return NULL;
	pcb->st = st;
	pcb->all_next = st->all_pcbs;
	if (st->all_pcbs)
		st->all_pcbs->all_prev = pcb;
	st->all_pcbs = pcb;
	return pcb;
}

void stack_udp_pcb_free(struct stack_udp_pcb *pcb)
{
	if (!pcb)
		return;
	struct stack *st = pcb->st;
	unhash(pcb);
	if (pcb->all_prev)
		pcb->all_prev->all_next = pcb->all_next;
	else
		st->all_pcbs = pcb->all_next;
	if (pcb->all_next)
		pcb->all_next->all_prev = pcb->all_prev;
	for (uint32_t i = 0; i < pcb->ngroups; i++)
		free(pcb->groups[i].sources);
	free(pcb->groups);
	free(pcb);
}

void stack_udp_free_all(struct stack *st)
{
	while (st->all_pcbs)
		stack_udp_pcb_free(st->all_pcbs);
}

void stack_udp_pcb_set_recv(struct stack_udp_pcb *pcb, stack_udp_recv_fn fn, void *arg)
{
	pcb->recv = fn;
	pcb->recv_arg = arg;
}

int stack_udp_pcb_bind(struct stack_udp_pcb *pcb, uint32_t ip, uint16_t port)
{
	if (pcb->bound || port == 0)
		return -EINVAL;
	pcb->local_ip = ip;
	pcb->local_port = port;
	pcb->bound = true;
	rehash(pcb);
	return 0;
}

int stack_udp_pcb_connect(struct stack_udp_pcb *pcb, uint32_t ip, uint16_t port, uint32_t local_ip)
{
	if (!pcb->bound || ip == 0 || port == 0)
		return -EINVAL;
	unhash(pcb);
	if (local_ip)
		pcb->local_ip = local_ip;
	pcb->remote_ip = ip;
	pcb->remote_port = port;
	pcb->connected = true;
	rehash(pcb);
	return 0;
}

void stack_udp_pcb_disconnect(struct stack_udp_pcb *pcb)
{
	if (!pcb->connected)
		return;
	unhash(pcb);
	pcb->connected = false;
	pcb->remote_ip = 0;
	pcb->remote_port = 0;
	rehash(pcb);
}

void stack_udp_pcb_get_addr(const struct stack_udp_pcb *pcb, uint32_t *local_ip,
			    uint16_t *local_port, uint32_t *remote_ip, uint16_t *remote_port)
{
	if (local_ip)
		*local_ip = pcb->local_ip;
	if (local_port)
		*local_port = pcb->local_port;
	if (remote_ip)
		*remote_ip = pcb->remote_ip;
	if (remote_port)
		*remote_port = pcb->remote_port;
}

/* ---- multicast membership ---- */

static struct stack_mc_group *find_group(const struct stack_udp_pcb *pcb, uint32_t group)
{
	for (uint32_t i = 0; i < pcb->ngroups; i++)
		if (pcb->groups[i].group == group)
			return &pcb->groups[i];
	return NULL;
}

static int find_source(const struct stack_mc_group *g, uint32_t source)
{
	for (uint32_t i = 0; i < g->nsources; i++)
		if (g->sources[i] == source)
			return (int)i;
	return -1;
}

int stack_udp_pcb_join(struct stack_udp_pcb *pcb, uint32_t group, uint32_t source)
{
	if (!stack_ip4_is_multicast(group))
		return -EINVAL;
	struct stack_mc_group *g = find_group(pcb, group);
	if (g) {
		if ((g->nsources == 0) != (source == 0))
			return -EINVAL;          /* any-source and include mode do not mix */
		if (source == 0 || find_source(g, source) >= 0)
			return -EADDRINUSE;
		if (g->nsources >= STACK_PCB_MAX_SOURCES)
			return -ENOBUFS;
		uint32_t *s = realloc(g->sources, (g->nsources + 1) * sizeof(*s));
		if (!s)
			return -ENOMEM;
		g->sources = s;
		g->sources[g->nsources++] = source;
		return 0;
	}
	if (pcb->ngroups >= STACK_PCB_MAX_GROUPS)
		return -ENOBUFS;
	struct stack_mc_group *groups = realloc(pcb->groups, (pcb->ngroups + 1) * sizeof(*groups));
	if (!groups)
		return -ENOMEM;
	pcb->groups = groups;
	g = &groups[pcb->ngroups];
	memset(g, 0, sizeof(*g));
	g->group = group;
	if (source) {
		g->sources = malloc(sizeof(*g->sources));
		if (!g->sources)
			return -ENOMEM;
		g->sources[0] = source;
		g->nsources = 1;
	}
	pcb->ngroups++;
	return 0;
}

int stack_udp_pcb_leave(struct stack_udp_pcb *pcb, uint32_t group, uint32_t source)
{
	struct stack_mc_group *g = find_group(pcb, group);
	if (!g)
		return -EADDRNOTAVAIL;
	if (source) {
		int i = find_source(g, source);
		if (i < 0)
			return -EADDRNOTAVAIL;
		g->sources[i] = g->sources[--g->nsources];
		if (g->nsources)
			return 0;
	}
	free(g->sources);
	*g = pcb->groups[--pcb->ngroups];
	return 0;
}

bool stack_udp_pcb_is_member(const struct stack_udp_pcb *pcb, uint32_t group, uint32_t source)
{
	const struct stack_mc_group *g = find_group(pcb, group);
	if (!g)
		return false;
	return g->nsources == 0 || find_source(g, source) >= 0;
}

/* ---- receive ---- */

static bool deliverable(const struct stack_udp_pcb *pcb, const struct stack_ip4_info *ip,
			uint16_t sport, uint16_t dport)
{
	if (pcb->local_port != dport || !pcb->recv)
		return false;
	if (pcb->local_ip != 0 && pcb->local_ip != ip->dst)
		return false;
	if (pcb->connected && (pcb->remote_ip != ip->src || pcb->remote_port != sport))
		return false;
	if (stack_ip4_is_multicast(ip->dst))
		return stack_udp_pcb_is_member(pcb, ip->dst, ip->src);
	return true;
}

void stack_udp_pcb_set_reuseport(struct stack_udp_pcb *pcb, bool on)
{
	pcb->reuseport = on;
}

static bool reuseport_peer(const struct stack_udp_pcb *p, const struct stack_udp_pcb *first)
{
	return p->reuseport && p->local_port == first->local_port && p->local_ip == first->local_ip;
}

/* The member of first's reuseport group (first and the pcbs after it in
 * its bind chain) that the flow from src:sport goes to. */
static struct stack_udp_pcb *reuseport_pick(const struct stack *st, struct stack_udp_pcb *first, uint32_t src,
					    uint16_t sport)
{
	if (!first->reuseport)
		return first;
	unsigned n = 0;
	for (struct stack_udp_pcb *p = first; p; p = p->addr_next)
		n += reuseport_peer(p, first);
	if (n < 2)
		return first;
	unsigned k = mix(src ^ mix((uint32_t)sport << 16 | first->local_port) ^ st->ip_id_key[0]) % n;
	for (struct stack_udp_pcb *p = first; p; p = p->addr_next)
		if (reuseport_peer(p, first) && k-- == 0)
			return p;
	return first;
}

static struct stack_udp_pcb *find_unicast(struct stack *st, const struct stack_ip4_info *ip,
					  uint16_t sport, uint16_t dport)
{
	struct stack_udp_pcb *p;

	p = st->conn_table[conn_hash(st, dport, ip->src, sport)];
	for (; p; p = p->addr_next)
		if (p->local_port == dport && p->remote_ip == ip->src && p->remote_port == sport &&
		    (p->local_ip == ip->dst || p->local_ip == 0))
			return p;
	p = st->bind_table[bind_hash(st, ip->dst, dport)];
	for (; p; p = p->addr_next)
		if (p->local_port == dport && p->local_ip == ip->dst)
			return reuseport_pick(st, p, ip->src, sport);
	p = st->bind_table[bind_hash(st, 0, dport)];
	for (; p; p = p->addr_next)
		if (p->local_port == dport && p->local_ip == 0)
			return reuseport_pick(st, p, ip->src, sport);
	return NULL;
}

static void deliver(struct stack *st, struct stack_udp_pcb *pcb, struct ring_buf *pkt,
		    const struct stack_udp_rx_info *info)
{
	st->cnt.rx_udp_delivered++;
	pcb->recv(pcb->recv_arg, pcb, pkt, pkt->tot_len, info);
}

void stack_udp_input(struct stack *st, struct ring_buf *pkt, const struct stack_ip4_info *ip)
{
	if (pkt->len < STACK_UDP_HLEN) {
		st->cnt.rx_drop_udp_bad_length++;
		ring_buf_free(pkt);
		return;
	}
	const uint8_t *u = pkt->data;
	uint16_t sport, dport, csum;
	memcpy(&sport, u, 2);
	memcpy(&dport, u + 2, 2);
	memcpy(&csum, u + 6, 2);
	uint32_t ulen = (uint32_t)(u[4] << 8 | u[5]);
	if (ulen < STACK_UDP_HLEN || ulen > pkt->tot_len) {
		st->cnt.rx_drop_udp_bad_length++;
		ring_buf_free(pkt);
		return;
	}
	if (ulen < pkt->tot_len)
		stack_buf_chain_trim(pkt, ulen);
	if (csum != 0 && !ip->l4_csum_trusted) {
		uint64_t sum = stack_csum_pseudo(ip->src, ip->dst, IP4_PROTO_UDP, (uint16_t)ulen);
		if (stack_csum_fold(stack_csum_chain(sum, pkt, ulen)) != 0xffff) {
			st->cnt.rx_drop_udp_bad_checksum++;
			ring_buf_free(pkt);
			return;
		}
	}
	pkt->data += STACK_UDP_HLEN;
	pkt->len -= STACK_UDP_HLEN;
	stack_buf_chain_fix_tot_len(pkt);
	st->cnt.rx_udp_datagrams++;

	struct stack_udp_rx_info info = {
		.src_ip = ip->src, .dst_ip = ip->dst, .src_port = sport, .dst_port = dport,
		.ttl = ip->ttl, .tos = ip->tos, .ifindex = ip->ifindex,
	};
	if (!ip->dst_is_multi) {
		struct stack_udp_pcb *pcb = dport ? find_unicast(st, ip, sport, dport) : NULL;
		if (!pcb || !pcb->recv) {
			st->cnt.rx_drop_udp_no_pcb++;
			ring_buf_free(pkt);
			return;
		}
		deliver(st, pcb, pkt, &info);
		return;
	}

	/* Every matching pcb gets its own reference to the same buffers; the
	 * last one found uses the reference we were given. */
	struct stack_udp_pcb *prev = NULL;
	for (struct stack_udp_pcb *p = st->port_table[port_hash(st, dport)]; p; p = p->port_next) {
		if (!deliverable(p, ip, sport, dport))
			continue;
		if (prev) {
			stack_buf_chain_ref(pkt);
			deliver(st, prev, pkt, &info);
		}
		prev = p;
	}
	if (!prev) {
		st->cnt.rx_drop_udp_no_pcb++;
		ring_buf_free(pkt);
		return;
	}
	deliver(st, prev, pkt, &info);
}
