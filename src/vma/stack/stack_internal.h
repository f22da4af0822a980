/* Shared between the stack's own files only. */
#ifndef VMA_STACK_STACK_INTERNAL_H
#define VMA_STACK_STACK_INTERNAL_H

#include "stack/stack.h"

#define STACK_PCB_MAX_GROUPS   64   /* memberships per pcb */
#define STACK_PCB_MAX_SOURCES  64   /* include-mode sources per group */

/* Addresses and header fields of a validated IPv4 packet. */
struct stack_ip4_info {
	uint32_t src, dst;
	uint8_t ttl, tos, proto;
	bool dst_is_multi;              /* multicast or broadcast: may reach several pcbs */
	bool l4_csum_trusted;           /* stack_netif.rx_l4_csum_trusted of the arrival interface */
	int ifindex;
};

struct stack_mc_group {
	uint32_t group;
	uint32_t nsources;              /* 0 = any-source membership */
	uint32_t *sources;
};

struct stack_udp_pcb {
	struct stack *st;
	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;
	bool bound, connected;
	bool reuseport;   /* in the reuseport group of its address (stack_udp_pcb_set_reuseport) */
	stack_udp_recv_fn recv;
	void *recv_arg;
	struct stack_udp_pcb *addr_next;   /* chain in bind_table or conn_table */
	struct stack_udp_pcb *port_next;   /* chain in port_table (bound pcbs) */
	struct stack_udp_pcb *all_next, *all_prev;
	uint32_t ngroups;
	struct stack_mc_group *groups;
};

#define STACK_IP_ID_BUCKETS 2048
struct stack_reass;                     /* stack_ip4_reass.c */
struct tcp_ctx;                         /* tcp_pcb.c */

struct stack {
	struct stack_settings set;
	struct stack_counters cnt;
	uint64_t now_ms;
	/* IPv4 IDs: one counter per bucket of a keyed hash of (source,
	 * destination, protocol), each from a random start, so a peer learns
	 * nothing of our traffic to others from the IDs it sees (a single
	 * counter is the idle-scan side channel). */
	uint32_t ip_id_key[2];
	uint16_t ip_ids[STACK_IP_ID_BUCKETS];
	uint32_t hash_mask;
	struct stack_udp_pcb **bind_table;  /* key: local ip, local port */
	struct stack_udp_pcb **conn_table;  /* key: local port, remote ip, remote port */
	struct stack_udp_pcb **port_table;  /* key: local port (multicast/broadcast fan-out) */
	struct stack_udp_pcb *all_pcbs;
	struct stack_reass *reass;
	struct tcp_ctx *tcp;                /* attached by tcp_ctx_create, or NULL */
};

/* IPv4 packet (data at its first payload byte, tot_len = payload length;
 * a chain when reassembled) to the UDP layer, which takes the reference. */
void stack_udp_input(struct stack *st, struct ring_buf *pkt, const struct stack_ip4_info *ip);
void stack_ip4_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *pkt);
/* The IPv4 ID of the next packet from src to dst (network order). */
uint16_t stack_ip4_next_id(struct stack *st, uint32_t src, uint32_t dst, uint8_t proto);
/* The counter stack_ip4_next_id draws from for that tuple (fixed for the
 * stack's life: a connection keeps it in its header template). */
uint16_t *stack_ip4_id_counter(struct stack *st, uint32_t src, uint32_t dst, uint8_t proto);

int stack_reass_init(struct stack *st);
void stack_reass_fini(struct stack *st);
/* A validated fragment: pkt data at the IP payload, len = payload length. */
void stack_reass_input(struct stack *st, struct ring_buf *pkt, const struct stack_ip4_info *ip,
		       uint16_t id, uint32_t offset, bool more);
void stack_reass_expire(struct stack *st);

void stack_udp_free_all(struct stack *st);

/* Chain helpers. */
void stack_buf_chain_trim(struct ring_buf *buf, uint32_t len);
void stack_buf_chain_fix_tot_len(struct ring_buf *buf);
void stack_buf_chain_ref(struct ring_buf *buf);

static inline bool stack_ip4_is_multicast(uint32_t ip_be)
{
	return (((const uint8_t *)&ip_be)[0] & 0xf0) == 0xe0;
}

#endif
