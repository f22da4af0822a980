/* The verbs backend's parts shared by its files: device discovery
 * (ring_verbs_dev.c), steering rules and the flow table
 * (ring_verbs_flow.c), opening and closing (ring_verbs_open.c) and the
 * packet path (ring_verbs.c). docs/verbs.md describes them. */
#ifndef VMA_RING_RING_VERBS_H
#define VMA_RING_RING_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "ring/ring.h"
#include "ring/ring_hold.h"

/* IP headers land on 4-byte boundaries behind the 14-byte Ethernet header. */
#define RING_VERBS_HEADROOM 2u
#define RING_VERBS_MIN_FRAME 2048u
#define RING_VERBS_MAX_FRAME 16384u
#define RING_VERBS_POLL_MAX 64u

struct ring_verbs_flow {
	struct ring_flow flow;
	struct ibv_flow *ib;      /* NULL: handed to the kernel (to_kernel, parked) */
	bool parked;              /* a 3-tuple without its rule: a connection under it
				   * went to the kernel, so the kernel serves the port */
	int conn;                 /* a TCP 5-tuple's entry in its board's list; -1: none */
	struct ring_verbs_board *conn_board;
};

/* The ring's place in a share group (ring_verbs_share.c). */
#define RING_VERBS_SHARE_MAX_MEMBERS 32u
struct ring_verbs_board;
struct ring_verbs_member {
	struct ring_flow three;
	struct ring_verbs_board *board;
	uint32_t group;           /* the group's entry on the board */
	uint32_t id;              /* our member id in it */
};

struct ring_verbs {
	struct ring base;
	struct ring_verbs *next_ring;   /* ring_verbs_rings */
	struct ring_verbs_config vcfg;
	pid_t owner;              /* a forked child never destroys its parent's objects */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *channel;
	struct ibv_cq *rx_cq;
	struct ibv_cq *tx_cq;
	struct ibv_qp *qp;
	uint8_t port;
	uint8_t *mem;
	size_t mem_len;
	uint32_t frame_size;
	struct ring_sizes sizes;  /* rx_descs: RQ depth; tx_frames: SQ depth */
	uint32_t max_inline;
	/* receive */
	uint32_t *rq_fifo;        /* frames posted, in posting order */
	uint32_t rq_head, rq_posted;
	uint32_t rq_reserve;      /* VMA_CQ_KEEP_QP_FULL: WQEs always posted */
	uint64_t rq_dry;          /* times the RQ ran dry with no free frame to post
				   * (the NIC drops until one is freed) */
	bool rq_dry_seen;         /* this dry spell is counted */
	uint32_t *rx_free;        /* frames neither posted nor held */
	uint32_t rx_free_count;
	struct ibv_recv_wr *rwr;
	struct ibv_sge *rsge;
	struct ibv_wc wc[RING_VERBS_POLL_MAX];
	struct ibv_wc stash[RING_VERBS_POLL_MAX];   /* polled by wait_arm */
	uint32_t stash_head, stash_count;
	/* The wait fd: an epoll set of the completion channel and an eventfd
	 * raised while the stash holds completions. A CQ poll consumes what
	 * it finds, and a completion wait_arm finds must keep the wait fd
	 * readable for whoever sleeps on it later (level-triggered, as an
	 * AF_XDP socket with frames in its RX ring is). */
	int wait_ep;
	int stash_fd;
	bool stash_signaled;
	uint32_t events_unacked;
	/* send */
	uint32_t *tx_free;
	uint32_t tx_free_count;
	struct ibv_send_wr *swr;  /* one per SQ slot */
	struct ibv_sge *ssge;
	int32_t *sq_frame;        /* TX frame of a slot; -1 when inline or free */
	uint32_t sq_head;         /* oldest slot posted and not completed */
	uint32_t sq_posted, sq_queued, unsignaled;
	struct ring_hold hold;    /* the adaptive doorbell (ring_hold.h) */
	/* interrupt moderation */
	uint16_t mod_count, mod_period_us;
	bool aim_off;
	uint64_t aim_last_ns, aim_last_packets;
	struct ring_verbs_flow *flows;
	unsigned flow_count, flow_cap;
	unsigned parked_count;    /* flows parked (the kernel serves their port) */
	/* Entries never move: a lane's admission may read another lane's
	 * ring while a fork handoff parks that ring's listener (an entry
	 * with id 0 is free). member_len: entries in use or freed. */
	struct ring_verbs_member *members;
	unsigned member_len, member_cap;
	struct ring_verbs_board *share_board;   /* the board this ring uses, once it does */
	bool warned_rx, warned_tx;
};

static inline struct ring_verbs *ring_verbs_of(struct ring *ring)
{
	return (struct ring_verbs *)ring;
}


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

/* ---- the flow table (ring_verbs_flow.c) ---- */

int ring_verbs_attach_flow(struct ring *ring, const struct ring_flow *flow);
int ring_verbs_detach_flow(struct ring *ring, const struct ring_flow *flow);
int ring_verbs_forget_flow(struct ring *ring, const struct ring_flow *flow);
/* Whether r holds the 3-tuple three parked (its port is the kernel's). */
bool ring_verbs_flow_parked(struct ring_verbs *r, const struct ring_flow *three);
/* An open ring joins the process's list (flows may move between rings);
 * release takes it out and destroys every rule it holds. */
void ring_verbs_flows_register(struct ring_verbs *r);
void ring_verbs_flows_release(struct ring_verbs *r);

/* ---- share groups (ring_verbs_share.c) ---- */

/* Flows lock held. r's rule for the 3-tuple three is in place: r becomes
 * a member of its group on the board of r's device and port. 0 or -errno
 * (no board: /dev/shm; a full board: -ENOSPC). */
int ring_verbs_share_join(struct ring_verbs *r, const struct ring_flow *three);
/* Flows lock held: r's member of three's group leaves (none: nothing). */
void ring_verbs_share_leave(struct ring_verbs *r, const struct ring_flow *three);
/* Flows lock held: the flow moved from one ring of the process to another;
 * its member keeps its place in the group, now for `to`. */
void ring_verbs_share_move(struct ring_verbs *from, struct ring_verbs *to, const struct ring_flow *three);
void ring_verbs_share_leave_all(struct ring_verbs *r);
bool ring_verbs_share_admit(struct ring *ring, const struct ring_flow *three, uint32_t remote_ip,
			    uint16_t remote_port);
void ring_verbs_share_atfork_child(void);
/* The members of the group ring's member of three is in (0: none). */
unsigned ring_verbs_share_group_size(struct ring *ring, const struct ring_flow *three);
/* Flows lock held: lists a TCP 5-tuple on the board of r's device (its
 * peer is reset if this process dies without closing it). The entry's
 * index and *board, or -1. */
int ring_verbs_share_conn_add(struct ring_verbs *r, const struct ring_flow *five, struct ring_verbs_board **board);
void ring_verbs_share_conn_del(struct ring_verbs_board *board, int idx);

/* ---- the packet path (ring_verbs.c) ---- */

extern const struct ring_ops ring_verbs_ops;
extern const struct ring_buf_pool_ops ring_verbs_rx_pool_ops;
extern const struct ring_buf_pool_ops ring_verbs_tx_pool_ops;
uint64_t ring_verbs_clock_ns(clockid_t clock);
void ring_verbs_moderate(struct ring_verbs *r, uint16_t count, uint16_t period_us);
/* Posts free frames while the RQ has room: one chained ibv_post_recv. */
void ring_verbs_refill(struct ring_verbs *r);
/* Posts the queued WRs (force_signal: the last one asks for a completion). */
void ring_verbs_doorbell(struct ring_verbs *r, bool force_signal);
/* Polls the TX CQ: completed frames back to the free list. */
void ring_verbs_reap(struct ring_verbs *r);
void ring_verbs_ack_events(struct ring_verbs *r);

/* ---- opening and closing (ring_verbs_open.c) ---- */

void ring_verbs_close(struct ring *ring);
void ring_verbs_forget(struct ring *ring);

#endif
