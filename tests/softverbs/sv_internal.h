/* softverbs internals: a software RAW_PACKET verbs device for tests
 * (docs/verbs.md, "softverbs"). One process-wide mutex (sv_lock) guards
 * every object: softverbs is a test NIC, not a fast path.
 *
 * softverbs' own sockets, epoll sets and eventfds are driven through raw
 * system calls (sv_sys_*), never the libc wrappers, which libvma
 * interposes when it is preloaded. */
#ifndef SOFTVERBS_SV_INTERNAL_H
#define SOFTVERBS_SV_INTERNAL_H

#include <net/if.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "softverbs.h"

/* The mark the ingress hook puts on the frames it duplicates to a
 * process: the process's pid (below 2^22, Linux's largest pid_max) and the
 * class of the rule that took it (sv_nft.c). */
#define SV_NFT_MARK_PID 0x003fffffu
#define SV_NFT_MARK_5TUPLE 0x40000000u
#define SV_NFT_MARK_3TUPLE 0x20000000u
#define SV_NFT_MARK_ANY 0x10000000u

#define SV_EXPORT __attribute__((visibility("default")))

/* Largest frame the wire hands over at once: a GSO/GRO super-frame. */
#define SV_SCRATCH_SIZE (65536u + 256u)
#define SV_RX_BATCH 8u
/* The receive ring: slots for wire-sized frames; a longer one (a GSO
 * super-frame, a jumbo frame) is queued whole on the socket as well
 * (PACKET_COPY_THRESH) and its slot says so (TP_STATUS_COPY). */
#define SV_RING_FRAME 2048u
#define SV_RING_BLOCK 65536u
#define SV_RING_FRAMES 2048u
/* Frames taken from the wire per pump at most. */
#define SV_PUMP_BUDGET 256u
#define SV_MEMQ_CAP 1024u
#define SV_MAX_SGE 4u
#define SV_MAX_INLINE 512u
#define SV_MAX_WR 32768u
#define SV_MAX_CQE 65536u
#define SV_PORT 1u

extern pthread_mutex_t sv_lock;

/* ---- devices, contexts, PDs, MRs (sv_device.c) ---- */

struct sv_frame {
	uint32_t len;
	uint8_t *data;
};

struct sv_wire {
	int rx_fd;                   /* AF_PACKET, ETH_P_ALL, vnet headers; mem: eventfd */
	int tx_fd;                   /* AF_PACKET, qdisc bypass; mem: -1 */
	uint8_t *scratch;            /* SV_RX_BATCH slots of SV_SCRATCH_SIZE, then one for segments */
	uint8_t *ring;               /* the receive socket's mmap'd TPACKET_V2 ring (NULL: recvmmsg) */
	size_t ring_len;
	uint32_t ring_head;
	bool exact;                  /* rx taps the frames the kernel did not get (sv_nft_tap) */
	/* mem: frames injected, not yet taken */
	struct sv_frame memq[SV_MEMQ_CAP];
	uint32_t memq_head, memq_count;
};

struct sv_device {
	struct ibv_device ibdev;
	struct sv_device *next;
	char ifname[IF_NAMESIZE];
	int ifindex;
	uint8_t mac[6];
	uint32_t mtu;
	bool mem;                 /* test device: an in-memory wire */
	bool loopback;            /* mem: what is sent is received too */
	bool present;             /* listed by ibv_get_device_list */
	/* mem: frames sent, for the test to read */
	struct sv_frame txq[SV_MEMQ_CAP];
	uint32_t txq_head, txq_count;
	uint64_t tx_dropped;
	/* The wire of this process on the device: one tap for all its QPs,
	 * so that steering sees each frame once, as a NIC does. */
	struct sv_wire wire;
	unsigned wire_users;      /* QPs */
};

struct sv_context {
	struct verbs_context vctx;   /* vctx.context is the ibv_context */
	struct sv_device *dev;
	pid_t pid;                   /* a forked child must not use it */
	bool bf_disabled;            /* MLX5_SHUT_UP_BF was set at open */
	unsigned objects;            /* PDs, CQs, QPs, channels alive */
};

struct sv_mr {
	struct ibv_mr mr;
	struct sv_mr *next;
	int access;
};

struct sv_pd {
	struct ibv_pd pd;
	struct sv_mr *mrs;
};

struct sv_context *sv_ctx(struct ibv_context *context);
/* Fails (VIOLATION) when a forked child touches its parent's objects. */
bool sv_ctx_usable(struct sv_context *c, const char *verb);
/* This process's pid, kept across calls (getpid() is a system call, and
 * ibv_poll_cq checks it on every poll); renewed in a forked child. */
pid_t sv_self_pid(void);
/* The MR of pd covering [addr, addr+len) with lkey, or NULL. */
struct sv_mr *sv_mr_find(struct sv_pd *pd, uint64_t addr, uint32_t len, uint32_t lkey);
struct sv_device *sv_device_of(struct ibv_context *context);

/* ---- failures, checks, statistics (sv_device.c) ---- */

/* Whether a fault was injected for verb (test API or SOFTVERBS_FAIL);
 * sets errno then. */
bool sv_fail(const char *verb);
/* A backend error softverbs caught: printed; aborts unless tests count. */
void sv_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sv_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool sv_checks_on(void);
void sv_print_stats(void);
extern struct softverbs_stats sv_stats;

/* ---- completion channels and CQs (sv_cq.c) ---- */

struct sv_qp;

struct sv_channel {
	struct ibv_comp_channel ch;  /* ch.fd: an epoll set */
	struct sv_context *ctx;
	unsigned cqs;
};

struct sv_cqe {
	struct ibv_wc wc;
	struct sv_qp *qp;            /* NULL once the QP is destroyed */
	int sq_slot;                 /* send completions: the SQ slot; -1 receive */
};

struct sv_cq {
	struct ibv_cq cq;
	struct sv_cq *next;          /* all CQs */
	struct sv_context *ctx;
	struct sv_channel *chan;
	struct sv_cqe *entries;
	uint32_t size, head, count;
	bool overrun;
	bool armed, solicited_only;
	uint32_t since_arm;          /* completions added since the arm */
	uint64_t first_ns;           /* of the first of them */
	uint16_t mod_count, mod_period_us;
	int event_fd;                /* readable while an event waits in the channel */
	int timer_fd;                /* moderation period */
	uint32_t events_pending;     /* raised, not yet taken by ibv_get_cq_event */
	uint32_t events_unacked;     /* taken, not yet acknowledged */
};

struct sv_cq *sv_cq_of(struct ibv_cq *cq);
/* Adds a completion (overrun: VIOLATION, CQ and its QPs in error).
 * sq_slot: the SQ slot of a send completion, -1 for a receive. */
void sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, struct sv_qp *qp, int sq_slot);
/* Forgets the completions of a destroyed QP. */
void sv_cq_forget_qp(struct sv_cq *cq, struct sv_qp *qp);
/* Registers/unregisters fd in the CQ's channel set (the wire of an armed
 * CQ's QP). */
void sv_cq_watch(struct sv_cq *cq, int fd, bool on);
void sv_cq_fire_if_due(struct sv_cq *cq);

/* ---- queue pairs (sv_qp.c) ---- */

struct sv_swqe {
	uint64_t wr_id;
	uint64_t addr;               /* first SGE (non-inline): ownership checks */
	uint32_t len;
	uint64_t sum;                /* of the gathered bytes at post */
	bool signaled;
	bool is_inline;
	bool done;                   /* transmitted ("DMA read" done) */
	enum ibv_wc_status status;
};

struct sv_rwqe {
	uint64_t wr_id;
	struct ibv_sge sge[SV_MAX_SGE];
	int num_sge;
	uint32_t total;
};

/* An open-addressing set of buffer addresses posted and not yet returned. */
struct sv_addrset {
	uint64_t *slots;
	uint32_t mask;
	uint32_t count;
};


struct sv_qp {
	struct ibv_qp qp;
	struct sv_qp *next;          /* all QPs */
	struct sv_context *ctx;
	struct sv_device *dev;
	struct sv_pd *pd;
	uint32_t sq_depth, rq_depth, max_inline;
	struct sv_swqe *sq;          /* ring: head = oldest outstanding */
	uint32_t sq_head, sq_count;
	uint8_t *inline_buf;         /* sq_depth * max_inline */
	struct sv_rwqe *rq;
	uint32_t rq_head, rq_count;
	struct sv_addrset sq_addrs, rq_addrs;
	bool watched;                /* the device's wire in the recv CQ's channel set */
	unsigned flows;
};

struct sv_qp *sv_qp_of(struct ibv_qp *qp);
/* Runs the "NIC" of dev: frames from the wire into the receive WQEs of
 * the QPs the rules name (at most SV_PUMP_BUDGET); returns the frames
 * taken from the wire. */
unsigned sv_dev_pump(struct sv_device *dev);
/* Runs the NIC of every device with a QP completing on cq. */
void sv_cq_pump(struct sv_cq *cq);
/* A send completion for sq_slot was polled: the WQEs up to it return to
 * the application (ownership checked). */
void sv_qp_send_reaped(struct sv_qp *qp, int sq_slot);
/* Moves qp to the error state (CQ overrun, bad SGE). */
void sv_qp_set_error(struct sv_qp *qp);
extern struct sv_qp *sv_qps;
extern struct sv_cq *sv_cqs;

/* ---- the wire (sv_wire.c) ---- */

/* The device's wire, opened for its first QP and closed with its last. */
int sv_wire_open(struct sv_device *dev);
void sv_wire_close(struct sv_device *dev);
/* Frames sent in one doorbell. */
void sv_wire_send(struct sv_device *dev, const struct iovec *frames, unsigned count);
/* Up to max frames received, split into wire-sized frames and with
 * complete checksums, through deliver(dev, data, len). Returns frames
 * taken from the wire. */
unsigned sv_wire_receive(struct sv_device *dev, unsigned max,
			 void (*deliver)(struct sv_device *dev, const uint8_t *data, uint32_t len));
void sv_memwire_inject(struct sv_device *dev, const void *frame, uint32_t len);

/* ---- raw system calls ---- */

long sv_sys_close(int fd);
long sv_sys_epoll_ctl(int epfd, int op, int fd, uint32_t events);
long sv_sys_eventfd_signal(int fd);
long sv_sys_eventfd_drain(int fd);

/* ---- flow rules (sv_flow.c) ---- */

struct sv_rule {
	int ifindex;
	uint8_t proto;
	uint8_t dmac[6];
	bool dmac_match;
	uint32_t dst_ip, dst_mask;   /* network order; mask 0 or ~0 */
	uint32_t src_ip, src_mask;
	uint16_t dport, dport_mask;
	uint16_t sport, sport_mask;
	uint16_t priority;
};

struct sv_flow {
	struct ibv_flow flow;
	struct sv_flow *next;
	struct sv_qp *qp;
	struct sv_rule rule;
};

/* The QPs a frame of dev goes to under the rules of this process: those
 * holding a matching rule of the best priority any matching rule has (up
 * to max, in out); returns their count. */
unsigned sv_flow_targets(const struct sv_device *dev, const uint8_t *frame, uint32_t len, struct sv_qp **out,
			 unsigned max);

/* ---- kernel-path removal (sv_nft.c) ---- */

void sv_nft_add(const struct sv_rule *rule, const char *ifname);
/* The ifindex of the link the ingress hook of device ifindex duplicates
 * the frames it takes from the kernel to, marked with this process's pid
 * (the wire taps it: exactly the frames the kernel did not get), or 0: the
 * wire taps the device itself. Sets the device's chains up. */
int sv_nft_tap(int ifindex, const char *ifname);
void sv_nft_del(const struct sv_rule *rule, const char *ifname);
/* In a forked child: the parent's table stays the parent's. */
void sv_nft_forget(void);

/* ---- helpers ---- */

uint64_t sv_now_ns(void);
uint64_t sv_sum(const uint8_t *p, uint32_t len, uint64_t seed);

#endif
