/* softverbs itself, through the plain libibverbs API: the checks that make
 * it a faithful stand-in must fire when a backend gets things wrong (send
 * buffer changed before its completion, buffer posted twice, posted receive
 * buffer written, CQ overrun, SQ/RQ full, unacknowledged events, a child
 * using its parent's QP), and the wire must hand over what a real wire
 * carries (GSO frames split, partial checksums completed). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/wait.h>

#include <infiniband/verbs.h>

#include "softverbs.h"

#define IFX 7001
static const uint8_t dev_mac[6] = { 0x02, 0, 0, 0, 0, 0x11 };

struct fixture {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem;
};

static uint64_t violations(void)
{
	struct softverbs_stats s;
	softverbs_test_stats(&s);
	return s.violations;
}

static struct ibv_context *open_test_device(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "sv_tst0"))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

static void modify(struct ibv_qp *qp, enum ibv_qp_state to)
{
	struct ibv_qp_attr a = { .qp_state = to, .port_num = 1 };
	ck_assert_int_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | (to == IBV_QPS_INIT ? IBV_QP_PORT : 0)), 0);
}

/* Every fixture stays reachable (the leak checker): objects a test
 * destroys on purpose leave the rest of their fixture behind. */
static struct fixture kept[8];
static int nkept;

/* A RAW_PACKET QP on the test device: sq/rq WQEs, CQs of cqe entries. */
static void fixture_up(struct fixture *f, uint32_t sq, uint32_t rq, int cqe)
{
	memset(f, 0, sizeof(*f));
	f->ctx = open_test_device();
	ck_assert_ptr_nonnull(f->ctx);
	f->pd = ibv_alloc_pd(f->ctx);
	f->ch = ibv_create_comp_channel(f->ctx);
	int fl = fcntl(f->ch->fd, F_GETFL);
	fcntl(f->ch->fd, F_SETFL, fl | O_NONBLOCK);
	f->scq = ibv_create_cq(f->ctx, cqe, NULL, NULL, 0);
	f->rcq = ibv_create_cq(f->ctx, cqe, f, f->ch, 0);
	ck_assert_ptr_nonnull(f->rcq);
	f->mem = aligned_alloc(4096, 1 << 20);
	f->mr = ibv_reg_mr(f->pd, f->mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	ck_assert_ptr_nonnull(f->mr);
	struct ibv_qp_init_attr a = { .send_cq = f->scq, .recv_cq = f->rcq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = { .max_send_wr = sq, .max_recv_wr = rq, .max_send_sge = 1,
					       .max_recv_sge = 1, .max_inline_data = 64 } };
	f->qp = ibv_create_qp(f->pd, &a);
	ck_assert_ptr_nonnull(f->qp);
	modify(f->qp, IBV_QPS_INIT);
	modify(f->qp, IBV_QPS_RTR);
	modify(f->qp, IBV_QPS_RTS);
	if (nkept < 8)
		kept[nkept++] = *f;
}

static void setup(void)
{
	softverbs_test_count_violations(true);
	ck_assert_int_eq(softverbs_test_add_device("tst0", IFX, dev_mac, 1500, false), 0);
}

static int post_send_buf(struct fixture *f, uint32_t off, uint32_t len, uint64_t id, unsigned flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(f->mem + off), .length = len, .lkey = f->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = flags };
	struct ibv_send_wr *bad = NULL;
	return ibv_post_send(f->qp, &wr, &bad);
}

static int post_recv_buf(struct fixture *f, uint32_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(f->mem + off), .length = len, .lkey = f->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	return ibv_post_recv(f->qp, &wr, &bad);
}

static size_t frame_to(uint8_t *b, uint16_t dport, uint32_t payload)
{
	memset(b, 0, 14 + 28 + payload);
	memcpy(b, dev_mac, 6);
	b[12] = 0x08;
	uint8_t *ip = b + 14;
	ip[0] = 0x45;
	ip[2] = (uint8_t)((28 + payload) >> 8);
	ip[3] = (uint8_t)(28 + payload);
	ip[9] = IPPROTO_UDP;
	ip[12] = 10, ip[15] = 2, ip[16] = 10, ip[19] = 1;
	ip[22] = (uint8_t)(dport >> 8);
	ip[23] = (uint8_t)dport;
	return 14 + 28 + payload;
}

static struct ibv_flow *rule(struct ibv_qp *qp, uint16_t dport, uint16_t prio)
{
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
		struct ibv_flow_spec_tcp_udp udp;
	} __attribute__((packed, aligned(8))) r;
	memset(&r, 0, sizeof(r));
	r.attr.type = IBV_FLOW_ATTR_NORMAL;
	r.attr.size = sizeof(r);
	r.attr.num_of_specs = 2;
	r.attr.port = 1;
	r.attr.priority = prio;
	r.eth.type = IBV_FLOW_SPEC_ETH;
	r.eth.size = sizeof(r.eth);
	memcpy(r.eth.val.dst_mac, dev_mac, 6);
	memset(r.eth.mask.dst_mac, 0xff, 6);
	r.udp.type = IBV_FLOW_SPEC_UDP;
	r.udp.size = sizeof(r.udp);
	r.udp.val.dst_port = htons(dport);
	r.udp.mask.dst_port = 0xffff;
	return ibv_create_flow(qp, &r.attr);
}

START_TEST(a_send_buffer_changed_before_its_completion_is_caught)
{
	struct fixture f;
	fixture_up(&f, 16, 16, 64);
	memset(f.mem, 1, 100);
	ck_assert_int_eq(post_send_buf(&f, 0, 100, 1, IBV_SEND_SIGNALED), 0);
	f.mem[50] = 2;   /* the backend's bug: written while the NIC owns it */
	struct ibv_wc wc;
	ck_assert_int_eq(ibv_poll_cq(f.scq, 1, &wc), 1);
	ck_assert_uint_eq(violations(), 1);
	/* Left alone until the completion: nothing to report. */
	ck_assert_int_eq(post_send_buf(&f, 0, 100, 2, IBV_SEND_SIGNALED), 0);
	ck_assert_int_eq(ibv_poll_cq(f.scq, 1, &wc), 1);
	ck_assert_uint_eq(wc.wr_id, 2);
	ck_assert_uint_eq(violations(), 1);
}
END_TEST

START_TEST(a_buffer_posted_twice_is_caught)
{
	struct fixture f;
	fixture_up(&f, 16, 16, 64);
	ck_assert_int_eq(post_send_buf(&f, 0, 100, 1, 0), 0);
	ck_assert_int_eq(post_send_buf(&f, 0, 100, 2, IBV_SEND_SIGNALED), 0);
	ck_assert_uint_eq(violations(), 1);
	ck_assert_int_eq(post_recv_buf(&f, 4096, 2048, 3), 0);
	ck_assert_int_eq(post_recv_buf(&f, 4096, 2048, 4), EINVAL);
	ck_assert_uint_eq(violations(), 2);
}
END_TEST

START_TEST(a_posted_receive_buffer_written_is_caught)
{
	struct fixture f;
	fixture_up(&f, 16, 16, 64);
	ck_assert_ptr_nonnull(rule(f.qp, 5000, 1));
	ck_assert_int_eq(post_recv_buf(&f, 0, 2048, 1), 0);
	ck_assert_int_eq(post_recv_buf(&f, 2048, 2048, 2), 0);
	f.mem[2048 + 10] = 0;   /* the backend's bug */
	uint8_t fr[256];
	size_t len = frame_to(fr, 5000, 50);
	softverbs_test_inject(IFX, fr, len);
	softverbs_test_inject(IFX, fr, len);
	struct ibv_wc wc[2];
	ck_assert_int_eq(ibv_poll_cq(f.rcq, 2, wc), 2);
	ck_assert_uint_eq(wc[0].wr_id, 1);
	ck_assert_uint_eq(wc[0].byte_len, len);
	ck_assert_int_eq(memcmp(f.mem, fr, len), 0);
	ck_assert_uint_eq(violations(), 1);
}
END_TEST

START_TEST(a_cq_overrun_is_caught_and_the_qp_goes_to_error)
{
	struct fixture f;
	fixture_up(&f, 16, 16, 2);   /* a CQ of 3 entries (rounded as mlx5) */
	ck_assert_int_eq(f.rcq->cqe, 3);
	ck_assert_ptr_nonnull(rule(f.qp, 5000, 1));
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(post_recv_buf(&f, (uint32_t)i * 2048, 2048, (uint64_t)i), 0);
	uint8_t fr[256];
	size_t len = frame_to(fr, 5000, 50);
	for (int i = 0; i < 4; i++)
		softverbs_test_inject(IFX, fr, len);
	struct ibv_wc wc[8];
	ck_assert_int_eq(ibv_poll_cq(f.rcq, 8, wc), 3);
	struct softverbs_stats s;
	softverbs_test_stats(&s);
	ck_assert_uint_eq(s.cq_overruns, 1);
	ck_assert_uint_eq(s.violations, 1);
	ck_assert_int_eq(f.qp->state, IBV_QPS_ERR);
}
END_TEST

START_TEST(full_queues_refuse_with_enomem_and_name_the_wr)
{
	struct fixture f;
	fixture_up(&f, 4, 2, 64);
	struct ibv_sge sge[6];
	struct ibv_send_wr wr[6], *bad = NULL;
	for (int i = 0; i < 6; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(f.mem + i * 2048), .length = 60, .lkey = f.mr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = (uint64_t)i, .sg_list = &sge[i], .num_sge = 1,
					      .opcode = IBV_WR_SEND, .next = i < 5 ? &wr[i + 1] : NULL };
	}
	/* Unsignalled WRs never come back: the SQ fills. */
	ck_assert_int_eq(ibv_post_send(f.qp, wr, &bad), ENOMEM);
	ck_assert_ptr_eq(bad, &wr[4]);
	ck_assert_uint_eq(softverbs_test_tx_count(IFX), 4);
	ck_assert_int_eq(post_recv_buf(&f, 20000, 2048, 1), 0);
	ck_assert_int_eq(post_recv_buf(&f, 30000, 2048, 2), 0);
	ck_assert_int_eq(post_recv_buf(&f, 40000, 2048, 3), ENOMEM);
	struct softverbs_stats s;
	softverbs_test_stats(&s);
	ck_assert_uint_eq(s.send_enomem, 1);
	ck_assert_uint_eq(s.recv_enomem, 1);
	/* Too big for inline, bad lkey. */
	uint8_t in[100];
	struct ibv_sge isge = { .addr = (uintptr_t)in, .length = 100 };
	struct ibv_send_wr iwr = { .sg_list = &isge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE };
	struct fixture g;
	fixture_up(&g, 4, 4, 64);
	ck_assert_int_eq(ibv_post_send(g.qp, &iwr, &bad), EINVAL);
	ck_assert_int_eq(post_send_buf(&g, 0, 60, 9, 0), 0);
	struct ibv_sge bsge = { .addr = (uintptr_t)g.mem, .length = 60, .lkey = g.mr->lkey + 1 };
	struct ibv_send_wr bwr = { .wr_id = 10, .sg_list = &bsge, .num_sge = 1, .opcode = IBV_WR_SEND };
	ck_assert_int_eq(ibv_post_send(g.qp, &bwr, &bad), 0);
	struct ibv_wc wc;
	ck_assert_int_eq(ibv_poll_cq(g.scq, 1, &wc), 1);
	ck_assert_int_eq(wc.status, IBV_WC_LOC_PROT_ERR);
	ck_assert_int_eq(g.qp->state, IBV_QPS_ERR);
}
END_TEST

START_TEST(posts_follow_the_qp_state)
{
	struct fixture f;
	fixture_up(&f, 4, 4, 64);
	struct ibv_qp_init_attr a = { .send_cq = f.scq, .recv_cq = f.rcq, .qp_type = IBV_QPT_RAW_PACKET,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4 } };
	struct ibv_qp *qp = ibv_create_qp(f.pd, &a);
	struct ibv_sge sge = { .addr = (uintptr_t)f.mem, .length = 60, .lkey = f.mr->lkey };
	struct ibv_sge rsge = { .addr = (uintptr_t)f.mem + 4096, .length = 2048, .lkey = f.mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	struct ibv_recv_wr rwr = { .sg_list = &rsge, .num_sge = 1 }, *rbad;
	ck_assert_int_eq(ibv_post_recv(qp, &rwr, &rbad), EINVAL);   /* RESET */
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT };
	ck_assert_int_eq(ibv_modify_qp(qp, &at, IBV_QP_STATE), EINVAL);   /* no port */
	modify(qp, IBV_QPS_INIT);
	ck_assert_int_eq(ibv_post_send(qp, &wr, &bad), EINVAL);
	ck_assert_int_eq(ibv_post_recv(qp, &rwr, &rbad), 0);
	modify(qp, IBV_QPS_RTR);
	ck_assert_int_eq(ibv_post_send(qp, &wr, &bad), EINVAL);
	modify(qp, IBV_QPS_RTS);
	ck_assert_int_eq(ibv_post_send(qp, &wr, &bad), 0);
	/* Not a raw packet QP: softverbs models raw Ethernet only. */
	a.qp_type = IBV_QPT_UD;
	ck_assert_ptr_null(ibv_create_qp(f.pd, &a));
	ck_assert_uint_eq(violations(), 0);
}
END_TEST

static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

START_TEST(events_follow_the_arm_and_must_be_acked)
{
	struct fixture f;
	fixture_up(&f, 4, 16, 64);
	struct ibv_flow *fl = rule(f.qp, 5000, 1);
	ck_assert_ptr_nonnull(fl);
	for (int i = 0; i < 8; i++)
		post_recv_buf(&f, (uint32_t)i * 2048, 2048, (uint64_t)i);
	uint8_t fr[256];
	size_t len = frame_to(fr, 5000, 50);
	struct ibv_cq *cq;
	void *cq_ctx;
	struct ibv_wc wc[8];
	/* Not armed: a completion raises no event. */
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_poll_cq(f.rcq, 8, wc), 1);
	ck_assert(!readable(f.ch->fd));
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), -1);
	ck_assert_int_eq(errno, EAGAIN);
	/* Armed: the next completion does, once. */
	ck_assert_int_eq(ibv_req_notify_cq(f.rcq, 0), 0);
	softverbs_test_inject(IFX, fr, len);
	ck_assert(readable(f.ch->fd));
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), 0);
	ck_assert_ptr_eq(cq, f.rcq);
	ck_assert_ptr_eq(cq_ctx, &f);
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), -1);
	ck_assert_int_eq(ibv_poll_cq(f.rcq, 8, wc), 2);
	/* Solicited-only: raw receives are never solicited. */
	ck_assert_int_eq(ibv_req_notify_cq(f.rcq, 1), 0);
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), -1);
	ck_assert_uint_eq(violations(), 0);
	/* One event taken, never acked: destroying the CQ would hang on
	 * rdma-core. */
	ck_assert_int_eq(ibv_destroy_flow(fl), 0);
	ck_assert_int_eq(ibv_destroy_qp(f.qp), 0);
	ibv_destroy_cq(f.rcq);
	ck_assert_uint_eq(violations(), 1);
}
END_TEST

START_TEST(moderation_holds_the_event_for_its_count)
{
	struct fixture f;
	fixture_up(&f, 4, 16, 64);
	ck_assert_ptr_nonnull(rule(f.qp, 5000, 1));
	for (int i = 0; i < 16; i++)
		post_recv_buf(&f, (uint32_t)i * 2048, 2048, (uint64_t)i);
	struct ibv_modify_cq_attr m = { .attr_mask = IBV_CQ_ATTR_MODERATE, .moderate = { .cq_count = 3, .cq_period = 0 } };
	ck_assert_int_eq(ibv_modify_cq(f.rcq, &m), 0);
	uint8_t fr[256];
	size_t len = frame_to(fr, 5000, 50);
	struct ibv_cq *cq;
	void *cq_ctx;
	ck_assert_int_eq(ibv_req_notify_cq(f.rcq, 0), 0);
	softverbs_test_inject(IFX, fr, len);
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), -1);
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_get_cq_event(f.ch, &cq, &cq_ctx), 0);
	ibv_ack_cq_events(cq, 1);
}
END_TEST

START_TEST(the_lowest_priority_number_wins_and_equals_share)
{
	struct fixture a, b;
	fixture_up(&a, 4, 16, 64);
	fixture_up(&b, 4, 16, 64);
	for (int i = 0; i < 8; i++) {
		post_recv_buf(&a, (uint32_t)i * 2048, 2048, (uint64_t)i);
		post_recv_buf(&b, (uint32_t)i * 2048, 2048, (uint64_t)i);
	}
	struct ibv_flow *fa = rule(a.qp, 5000, 2), *fb = rule(b.qp, 5000, 1);
	uint8_t fr[256];
	size_t len = frame_to(fr, 5000, 50);
	struct ibv_wc wc[8];
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_poll_cq(a.rcq, 8, wc), 0);
	ck_assert_int_eq(ibv_poll_cq(b.rcq, 8, wc), 1);
	ck_assert_int_eq(ibv_destroy_flow(fb), 0);
	fb = rule(b.qp, 5000, 2);
	softverbs_test_inject(IFX, fr, len);
	ck_assert_int_eq(ibv_poll_cq(a.rcq, 8, wc), 1);
	ck_assert_int_eq(ibv_poll_cq(b.rcq, 8, wc), 1);
	/* A QP with rules cannot go; without, it can. */
	ck_assert_int_eq(ibv_destroy_qp(a.qp), EBUSY);
	ck_assert_int_eq(ibv_destroy_flow(fa), 0);
	ck_assert_int_eq(ibv_destroy_flow(fb), 0);
	ck_assert_int_eq(ibv_destroy_qp(a.qp), 0);
}
END_TEST

START_TEST(rules_softverbs_cannot_model_are_refused)
{
	struct fixture f;
	fixture_up(&f, 4, 4, 64);
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
	} __attribute__((packed, aligned(8))) r;
	memset(&r, 0, sizeof(r));
	r.attr.type = IBV_FLOW_ATTR_NORMAL;
	r.attr.size = sizeof(r);
	r.attr.num_of_specs = 1;
	r.attr.port = 1;
	r.eth.type = IBV_FLOW_SPEC_ETH;
	r.eth.size = sizeof(r.eth);
	ck_assert_ptr_null(ibv_create_flow(f.qp, &r.attr));   /* no L4 spec */
	ck_assert_int_eq(errno, EINVAL);
	r.attr.type = IBV_FLOW_ATTR_SNIFFER;
	ck_assert_ptr_null(ibv_create_flow(f.qp, &r.attr));
}
END_TEST

START_TEST(a_child_using_its_parents_qp_is_caught)
{
	struct fixture f;
	fixture_up(&f, 4, 4, 64);
	pid_t child = fork();
	if (child == 0) {
		post_send_buf(&f, 0, 60, 1, IBV_SEND_SIGNALED);
		_exit(violations() == 1 ? 0 : 1);
	}
	int status;
	waitpid(child, &status, 0);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_uint_eq(violations(), 0);
}
END_TEST

/* ---- the wire ---- */

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint16_t csum(const uint8_t *p, uint32_t len, uint32_t sum)
{
	for (uint32_t i = 0; i + 1 < len; i += 2)
		sum += get16(p + i);
	if (len & 1)
		sum += (uint32_t)p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* A frame's IP and L4 checksums verify (0 when folded over the field). */
static bool checksums_ok(const uint8_t *f, uint32_t len)
{
	const uint8_t *ip = f + 14;
	uint32_t ihl = (uint32_t)(ip[0] & 15) * 4, l4_len = len - 14 - ihl;
	if (csum(ip, ihl, 0) != 0)
		return false;
	uint32_t pseudo = get16(ip + 12) + get16(ip + 14) + get16(ip + 16) + get16(ip + 18) + ip[9] + l4_len;
	return csum(ip + ihl, l4_len, pseudo) == 0;
}

struct seg_log {
	int n;
	uint8_t frames[8][2048];
	uint32_t lens[8];
};

static void collect(const uint8_t *data, uint32_t len, void *arg)
{
	struct seg_log *l = arg;
	if (l->n < 8 && len <= 2048) {
		memcpy(l->frames[l->n], data, len);
		l->lens[l->n] = len;
	}
	l->n++;
}

static uint32_t tcp_super_frame(uint8_t *f, uint32_t payload, uint8_t flags)
{
	memset(f, 0, 14 + 40);
	memcpy(f, dev_mac, 6);
	f[12] = 0x08;
	uint8_t *ip = f + 14;
	ip[0] = 0x45;
	ip[2] = (uint8_t)((40 + payload) >> 8);
	ip[3] = (uint8_t)(40 + payload);
	ip[4] = 0x12, ip[5] = 0x34, ip[6] = 0x40, ip[8] = 64, ip[9] = IPPROTO_TCP;
	ip[12] = 10, ip[15] = 2, ip[16] = 10, ip[19] = 1;
	uint8_t *tcp = ip + 20;
	tcp[0] = 0x1f, tcp[1] = 0x90, tcp[2] = 0x13, tcp[3] = 0x88;
	tcp[4] = 0, tcp[5] = 0, tcp[6] = 0x10, tcp[7] = 0;   /* seq 4096 */
	tcp[12] = 5 << 4;
	tcp[13] = flags;
	for (uint32_t i = 0; i < payload; i++)
		tcp[20 + i] = (uint8_t)(i * 13);
	return 14 + 40 + payload;
}

START_TEST(gso_frames_are_split_as_a_wire_would_carry_them)
{
	static uint8_t f[8000];
	uint32_t len = tcp_super_frame(f, 3000, 0x18 | 0x01);   /* PSH ACK FIN */
	struct softverbs_vnet vh = { .gso_type = 1 /* TCPV4 */, .gso_size = 1448 };
	struct seg_log *log = calloc(1, sizeof(*log));
	ck_assert_int_eq(softverbs_test_wire_frame(&vh, f, len, collect, log), 3);
	uint32_t want_len[3] = { 1448, 1448, 104 };
	for (int i = 0; i < 3; i++) {
		const uint8_t *s = log->frames[i];
		ck_assert_uint_eq(log->lens[i], 54 + want_len[i]);
		ck_assert_uint_eq(get16(s + 14 + 2), 40 + want_len[i]);
		ck_assert_uint_eq(get16(s + 14 + 4), 0x1234 + i);
		uint32_t seq = (uint32_t)s[38] << 24 | (uint32_t)s[39] << 16 | (uint32_t)s[40] << 8 | s[41];
		ck_assert_uint_eq(seq, 4096 + (uint32_t)i * 1448);
		ck_assert_uint_eq(s[47] & 0x09, i == 2 ? 0x09 : 0);   /* FIN, PSH on the last only */
		ck_assert_int_eq(memcmp(s + 54, f + 54 + i * 1448, want_len[i]), 0);
		ck_assert_msg(checksums_ok(s, log->lens[i]), "segment %d checksums", i);
	}
	free(log);
}
END_TEST

START_TEST(partial_checksums_are_completed)
{
	uint8_t f[200];
	size_t len = frame_to(f, 5000, 40);
	uint8_t *ip = f + 14;
	ip[8] = 64;
	/* The IP checksum, and the UDP field holding the pseudo-header sum
	 * only, as a sender with checksum offload leaves it. */
	uint16_t ipc = csum(ip, 20, 0);
	ip[10] = (uint8_t)(ipc >> 8), ip[11] = (uint8_t)ipc;
	uint32_t pseudo = get16(ip + 12) + get16(ip + 14) + get16(ip + 16) + get16(ip + 18) + IPPROTO_UDP + 48;
	while (pseudo >> 16)
		pseudo = (pseudo & 0xffff) + (pseudo >> 16);
	ip[20 + 4] = 0, ip[20 + 5] = 48;
	ip[20 + 6] = (uint8_t)(pseudo >> 8), ip[20 + 7] = (uint8_t)pseudo;
	for (int i = 0; i < 40; i++)
		ip[28 + i] = (uint8_t)(i + 1);
	ck_assert(!checksums_ok(f, (uint32_t)len));
	struct softverbs_vnet vh = { .flags = 1 /* NEEDS_CSUM */, .csum_start = 34, .csum_offset = 6 };
	struct seg_log *log = calloc(1, sizeof(*log));
	ck_assert_int_eq(softverbs_test_wire_frame(&vh, f, (uint32_t)len, collect, log), 1);
	ck_assert(checksums_ok(log->frames[0], log->lens[0]));
	free(log);
}
END_TEST

static Suite *softverbs_suite(void)
{
	Suite *s = suite_create("softverbs");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, a_send_buffer_changed_before_its_completion_is_caught);
	tcase_add_test(tc, a_buffer_posted_twice_is_caught);
	tcase_add_test(tc, a_posted_receive_buffer_written_is_caught);
	tcase_add_test(tc, a_cq_overrun_is_caught_and_the_qp_goes_to_error);
	tcase_add_test(tc, full_queues_refuse_with_enomem_and_name_the_wr);
	tcase_add_test(tc, posts_follow_the_qp_state);
	tcase_add_test(tc, events_follow_the_arm_and_must_be_acked);
	tcase_add_test(tc, moderation_holds_the_event_for_its_count);
	tcase_add_test(tc, the_lowest_priority_number_wins_and_equals_share);
	tcase_add_test(tc, rules_softverbs_cannot_model_are_refused);
	tcase_add_test(tc, a_child_using_its_parents_qp_is_caught);
	tcase_add_test(tc, gso_frames_are_split_as_a_wire_would_carry_them);
	tcase_add_test(tc, partial_checksums_are_completed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(softverbs_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
