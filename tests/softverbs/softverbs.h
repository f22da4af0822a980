/* softverbs test API: what a unit test may ask of the software verbs
 * device beyond the libibverbs calls (docs/verbs.md, "softverbs").
 * softverbs itself is the libibverbs stand-in built in tests/softverbs/
 * and never installed. */
#ifndef SOFTVERBS_H
#define SOFTVERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What softverbs counted since the process started (or the last reset). */
struct softverbs_stats {
	uint64_t violations;        /* backend errors caught (see docs/verbs.md) */
	uint64_t post_send_calls;   /* doorbells */
	uint64_t send_wrs;          /* WRs posted */
	uint64_t send_signaled;     /* of them IBV_SEND_SIGNALED */
	uint64_t send_inline;       /* of them IBV_SEND_INLINE */
	uint64_t send_enomem;       /* ibv_post_send refused: SQ full */
	uint64_t post_recv_calls;
	uint64_t recv_wrs;
	uint64_t recv_enomem;       /* ibv_post_recv refused: RQ full */
	uint64_t rx_frames;         /* frames written into receive WQEs */
	uint64_t rx_no_wqe;         /* matching frames dropped: no posted WQE */
	uint64_t rx_segmented;      /* GSO/GRO super-frames split */
	uint64_t cq_overruns;
	uint64_t events;            /* completion events raised */
	uint64_t flows_created;
	uint64_t flows_destroyed;
	uint64_t nft_elements;      /* kernel-path drop entries in place now */
	uint64_t fork_inits;        /* ibv_fork_init calls */
	uint64_t modify_cq_calls;   /* ibv_modify_cq calls */
	uint64_t wire_tx_dropped;   /* frames the transmit socket refused */
	uint64_t wire_rx_dropped;   /* frames the receive socket had no room for (kernel count) */
};

/* Adds an in-memory device named sv_IFNAME serving ifindex (the netdev
 * need not exist), MAC mac, MTU mtu. With loopback, frames sent are also
 * received. Returns 0. */
int softverbs_test_add_device(const char *ifname, int ifindex, const uint8_t mac[6], uint32_t mtu, bool loopback);
/* Removes every test device from the list (objects opened stay valid). */
void softverbs_test_clear_devices(void);
/* Makes the next count calls of verb ("ibv_create_qp", "ibv_create_cq",
 * "ibv_reg_mr", "ibv_create_flow", "ibv_open_device", ...) fail with err. */
void softverbs_test_fail(const char *verb, int err, int count);
/* Delivers a frame to every QP of the test device on ifindex, as the wire
 * would (each QP's rules decide). */
void softverbs_test_inject(int ifindex, const void *frame, size_t len);
/* The oldest frame sent on the test device, copied into buf; its length,
 * or -1 when none waits (or it does not fit). */
int softverbs_test_tx_pop(int ifindex, void *buf, size_t cap);
/* Frames sent and not yet popped. */
unsigned softverbs_test_tx_count(int ifindex);
/* Violations are counted and printed instead of aborting (unit tests). */
void softverbs_test_count_violations(bool on);
void softverbs_test_stats(struct softverbs_stats *out);
void softverbs_test_reset_stats(void);

/* One rule as softverbs holds it, for tests to compare. */
struct softverbs_rule_info {
	uint8_t proto;
	uint32_t dst_ip, dst_mask, src_ip, src_mask;   /* network order */
	uint16_t dport, dport_mask, sport, sport_mask; /* network order */
	uint8_t dmac[6];
	uint16_t priority;
};
/* Rules attached to the QP with qp_num; fills up to max, returns the count. */
int softverbs_test_rules(uint32_t qp_num, struct softverbs_rule_info *out, int max);
/* The moderation the receive CQ of the QP qp_num was given (ibv_modify_cq);
 * -1 for an unknown QP. */
int softverbs_test_rx_moderation(uint32_t qp_num, uint16_t *count, uint16_t *period_us);
/* QP depths and what is posted now; -1 for an unknown qp_num. */
int softverbs_test_qp_state(uint32_t qp_num, uint32_t *sq_outstanding, uint32_t *rq_posted, uint32_t *max_inline);
/* The number of the QP created last (0: none yet). */
uint32_t softverbs_test_last_qp_num(void);
/* Whether MLX5_SHUT_UP_BF was set when the device of qp_num was opened. */
int softverbs_test_bf_disabled(uint32_t qp_num);

/* The receive side of the wire on one frame as a veth hands it over with
 * virtio-net header fields (flags, gso_type, gso_size, csum_start,
 * csum_offset): out is called for every frame a wire would have carried
 * (segments of a GSO frame, checksums completed). Returns their count. */
struct softverbs_vnet {
	uint8_t flags, gso_type;
	uint16_t gso_size, csum_start, csum_offset;
};
int softverbs_test_wire_frame(const struct softverbs_vnet *vnet, const void *frame, uint32_t len,
			      void (*out)(const uint8_t *data, uint32_t len, void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif
