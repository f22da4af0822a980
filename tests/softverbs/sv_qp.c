/* softverbs: RAW_PACKET queue pairs. Posting, the "NIC" that moves frames
 * from the wire into receive WQEs, and the ownership checks: a send buffer
 * must not change between its post and the completion that returns it, a
 * buffer must not be posted twice, a posted receive buffer must not be
 * written (it is poisoned at post and checked when a frame lands). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sv_internal.h"

#define SV_POISON 0xa5

struct sv_qp *sv_qps;
static uint32_t sv_next_qpn = 0x100;

struct sv_qp *sv_qp_of(struct ibv_qp *qp)
{
	return (struct sv_qp *)qp;
}

/* ---- the set of posted buffer addresses ---- */

static int sv_addrset_init(struct sv_addrset *s, uint32_t entries)
{
	uint32_t size = 16;
	while (size < 2 * entries)
		size <<= 1;
	s->slots = calloc(size, sizeof(*s->slots));
	s->mask = size - 1;
	s->count = 0;
	return s->slots ? 0 : -1;
}

/* The high half of a 64-bit multiplicative hash. Buffer addresses are
 * multiples of the frame size, and a product keeps the low zero bits of its
 * factor: the low half put every 2 KiB buffer on one home slot of 128, and
 * each deletion walked the whole cluster. */
static uint32_t sv_addrset_hash(uint64_t addr)
{
	return (uint32_t)((addr * 0x9e3779b97f4a7c15ull) >> 32);
}

static bool sv_addrset_has(const struct sv_addrset *s, uint64_t addr)
{
	for (uint32_t i = sv_addrset_hash(addr) & s->mask;; i = (i + 1) & s->mask) {
		if (!s->slots[i])
			return false;
		if (s->slots[i] == addr)
			return true;
	}
}

static void sv_addrset_add(struct sv_addrset *s, uint64_t addr)
{
	uint32_t i = sv_addrset_hash(addr) & s->mask;
	while (s->slots[i])
		i = (i + 1) & s->mask;
	s->slots[i] = addr;
	s->count++;
}

static void sv_addrset_del(struct sv_addrset *s, uint64_t addr)
{
	uint32_t i = sv_addrset_hash(addr) & s->mask;
	while (s->slots[i] && s->slots[i] != addr)
		i = (i + 1) & s->mask;
	if (!s->slots[i])
		return;
	s->slots[i] = 0;
	s->count--;
	/* Re-insert the rest of the cluster (linear probing deletion). */
	for (uint32_t j = (i + 1) & s->mask; s->slots[j]; j = (j + 1) & s->mask) {
		uint64_t a = s->slots[j];
		s->slots[j] = 0;
		s->count--;
		sv_addrset_add(s, a);
	}
}

/* ---- create, modify, destroy ---- */

SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct sv_context *c = sv_ctx(pd->context);
	struct sv_qp *qp = NULL;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(c, "ibv_create_qp") || sv_fail("ibv_create_qp"))
		goto out;
	if (attr->qp_type != IBV_QPT_RAW_PACKET) {
		errno = EOPNOTSUPP;   /* softverbs only models raw Ethernet */
		goto out;
	}
	if (!attr->send_cq || !attr->recv_cq || attr->srq || !attr->cap.max_send_wr || !attr->cap.max_recv_wr ||
	    attr->cap.max_send_wr > SV_MAX_WR || attr->cap.max_recv_wr > SV_MAX_WR ||
	    attr->cap.max_send_sge > SV_MAX_SGE || attr->cap.max_recv_sge > SV_MAX_SGE ||
	    attr->cap.max_inline_data > SV_MAX_INLINE) {
		errno = EINVAL;
		goto out;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		goto out;
	}
	qp->ctx = c;
	qp->dev = c->dev;
	qp->pd = (struct sv_pd *)pd;
	qp->sq_depth = attr->cap.max_send_wr;
	qp->rq_depth = attr->cap.max_recv_wr;
	/* Inline space comes in 64-byte units (as on mlx5). */
	qp->max_inline = attr->cap.max_inline_data ? (attr->cap.max_inline_data + 63) / 64 * 64 : 0;
	if (qp->max_inline > SV_MAX_INLINE)
		qp->max_inline = SV_MAX_INLINE;
	qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
	qp->rq = calloc(qp->rq_depth, sizeof(*qp->rq));
	qp->inline_buf = qp->max_inline ? malloc((size_t)qp->sq_depth * qp->max_inline) : NULL;
	if (!qp->sq || !qp->rq || (qp->max_inline && !qp->inline_buf) ||
	    sv_addrset_init(&qp->sq_addrs, qp->sq_depth) || sv_addrset_init(&qp->rq_addrs, qp->rq_depth)) {
		errno = ENOMEM;
		goto fail;
	}
	if (!qp->dev->wire_users && sv_wire_open(qp->dev) != 0)
		goto fail;   /* errno from the wire (EPERM without CAP_NET_RAW) */
	qp->dev->wire_users++;
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.handle = sv_next_qpn;
	qp->qp.qp_num = sv_next_qpn++;
	qp->qp.state = IBV_QPS_RESET;
	qp->qp.qp_type = IBV_QPT_RAW_PACKET;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	attr->cap.max_inline_data = qp->max_inline;
	if (!attr->cap.max_send_sge)
		attr->cap.max_send_sge = 1;
	if (!attr->cap.max_recv_sge)
		attr->cap.max_recv_sge = 1;
	qp->next = sv_qps;
	sv_qps = qp;
	c->objects++;
	if (sv_cq_of(attr->recv_cq)->armed)
		sv_cq_watch(sv_cq_of(attr->recv_cq), qp->dev->wire.rx_fd, (qp->watched = true));
	goto out;
fail:
	free(qp->sq);
	free(qp->rq);
	free(qp->inline_buf);
	free(qp->sq_addrs.slots);
	free(qp->rq_addrs.slots);
	free(qp);
	qp = NULL;
out:
	pthread_mutex_unlock(&sv_lock);
	return qp ? &qp->qp : NULL;
}

/* Every posted receive WQE completes with IBV_WC_WR_FLUSH_ERR. */
static void sv_qp_flush(struct sv_qp *qp)
{
	struct ibv_wc wc = { .status = IBV_WC_WR_FLUSH_ERR, .qp_num = qp->qp.qp_num };

	while (qp->rq_count) {
		struct sv_rwqe *w = &qp->rq[qp->rq_head];
		wc.wr_id = w->wr_id;
		wc.opcode = IBV_WC_RECV;
		sv_addrset_del(&qp->rq_addrs, w->sge[0].addr);
		qp->rq_head = (qp->rq_head + 1) % qp->rq_depth;
		qp->rq_count--;
		sv_cq_push(sv_cq_of(qp->qp.recv_cq), &wc, qp, -1);
	}
	/* Sends are complete once posted (the wire takes them at the doorbell):
	 * their completions are queued already or come with a later one. */
}

void sv_qp_set_error(struct sv_qp *qp)
{
	if (qp->qp.state == IBV_QPS_ERR)
		return;
	qp->qp.state = IBV_QPS_ERR;
	sv_qp_flush(qp);
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sv_qp *qp = sv_qp_of(ibqp);
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(qp->ctx, "ibv_modify_qp") || sv_fail("ibv_modify_qp")) {
		ret = errno;
		goto out;
	}
	if (!(mask & IBV_QP_STATE)) {
		ret = EINVAL;
		goto out;
	}
	enum ibv_qp_state from = ibqp->state, to = attr->qp_state;
	bool ok = to == IBV_QPS_RESET || to == IBV_QPS_ERR || (from == IBV_QPS_RESET && to == IBV_QPS_INIT) ||
		  (from == IBV_QPS_INIT && (to == IBV_QPS_INIT || to == IBV_QPS_RTR)) ||
		  (from == IBV_QPS_RTR && to == IBV_QPS_RTS) || (from == IBV_QPS_RTS && to == IBV_QPS_RTS);
	if (!ok) {
		ret = EINVAL;
		goto out;
	}
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT && (!(mask & IBV_QP_PORT) || attr->port_num != SV_PORT)) {
		ret = EINVAL;   /* a raw packet QP needs its port at INIT */
		goto out;
	}
	if (to == IBV_QPS_ERR) {
		sv_qp_set_error(qp);
	} else if (to == IBV_QPS_RESET) {
		/* RESET empties both queues without completions. */
		while (qp->rq_count) {
			sv_addrset_del(&qp->rq_addrs, qp->rq[qp->rq_head].sge[0].addr);
			qp->rq_head = (qp->rq_head + 1) % qp->rq_depth;
			qp->rq_count--;
		}
		while (qp->sq_count) {
			sv_addrset_del(&qp->sq_addrs, qp->sq[qp->sq_head].addr);
			qp->sq_head = (qp->sq_head + 1) % qp->sq_depth;
			qp->sq_count--;
		}
		sv_cq_forget_qp(sv_cq_of(ibqp->send_cq), qp);
		sv_cq_forget_qp(sv_cq_of(ibqp->recv_cq), qp);
	}
	ibqp->state = to;
out:
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct sv_qp *qp = sv_qp_of(ibqp);

	(void)mask;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = attr->cur_qp_state = ibqp->state;
	attr->port_num = SV_PORT;
	attr->cap.max_send_wr = qp->sq_depth;
	attr->cap.max_recv_wr = qp->rq_depth;
	attr->cap.max_send_sge = attr->cap.max_recv_sge = SV_MAX_SGE;
	attr->cap.max_inline_data = qp->max_inline;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->cap = attr->cap;
		init->qp_type = IBV_QPT_RAW_PACKET;
	}
	return 0;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sv_qp *qp = sv_qp_of(ibqp);

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(qp->ctx, "ibv_destroy_qp")) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	if (qp->flows) {
		/* The flows hold the QP, as in the kernel. */
		pthread_mutex_unlock(&sv_lock);
		return EBUSY;
	}
	for (struct sv_qp **p = &sv_qps; *p; p = &(*p)->next) {
		if (*p == qp) {
			*p = qp->next;
			break;
		}
	}
	if (qp->watched)
		sv_cq_watch(sv_cq_of(ibqp->recv_cq), qp->dev->wire.rx_fd, false);
	sv_cq_forget_qp(sv_cq_of(ibqp->send_cq), qp);
	sv_cq_forget_qp(sv_cq_of(ibqp->recv_cq), qp);
	if (!--qp->dev->wire_users)
		sv_wire_close(qp->dev);
	sv_print_stats();
	qp->ctx->objects--;
	pthread_mutex_unlock(&sv_lock);
	pthread_mutex_destroy(&ibqp->mutex);
	pthread_cond_destroy(&ibqp->cond);
	free(qp->sq);
	free(qp->rq);
	free(qp->inline_buf);
	free(qp->sq_addrs.slots);
	free(qp->rq_addrs.slots);
	free(qp);
	return 0;
}

/* ---- send ---- */

static uint64_t sv_swqe_sum(const struct ibv_sge *sge, int n)
{
	uint64_t h = 0;
	for (int i = 0; i < n; i++)
		h = sv_sum((const uint8_t *)(uintptr_t)sge[i].addr, sge[i].length, h);
	return h;
}

int sv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct sv_qp *qp = sv_qp_of(ibqp);
	struct iovec frames[64];
	uint32_t frame_slots[64];
	uint32_t frame_len[64];
	unsigned nframes = 0;
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(qp->ctx, "ibv_post_send")) {
		*bad_wr = wr;
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	sv_stats.post_send_calls++;
	for (; wr; wr = wr->next) {
		if (ibqp->state != IBV_QPS_RTS && ibqp->state != IBV_QPS_ERR) {
			ret = EINVAL;
			break;
		}
		if (qp->sq_count == qp->sq_depth) {
			sv_stats.send_enomem++;
			ret = ENOMEM;
			break;
		}
		if (wr->opcode != IBV_WR_SEND || wr->num_sge < 1 || wr->num_sge > (int)SV_MAX_SGE) {
			ret = EINVAL;
			break;
		}
		uint32_t total = 0;
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		bool is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0;
		if (is_inline && total > qp->max_inline) {
			ret = EINVAL;
			break;
		}
		uint32_t slot = (qp->sq_head + qp->sq_count) % qp->sq_depth;
		struct sv_swqe *w = &qp->sq[slot];
		memset(w, 0, sizeof(*w));
		w->wr_id = wr->wr_id;
		w->len = total;
		w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
		w->is_inline = is_inline;
		w->status = IBV_WC_SUCCESS;
		qp->sq_count++;
		sv_stats.send_wrs++;
		sv_stats.send_signaled += w->signaled;
		sv_stats.send_inline += is_inline;
		if (ibqp->state == IBV_QPS_ERR) {
			w->status = IBV_WC_WR_FLUSH_ERR;
		} else if (is_inline) {
			/* The data is copied into the WQE now: the buffer is the
			 * application's again when ibv_post_send returns. */
			uint8_t *dst = qp->inline_buf + (size_t)slot * qp->max_inline;
			uint32_t off = 0;
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(dst + off, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				off += wr->sg_list[i].length;
			}
		} else {
			for (int i = 0; i < wr->num_sge && w->status == IBV_WC_SUCCESS; i++) {
				const struct ibv_sge *sge = &wr->sg_list[i];
				if (!sv_mr_find(qp->pd, sge->addr, sge->length, sge->lkey))
					w->status = IBV_WC_LOC_PROT_ERR;
			}
			if (w->status == IBV_WC_SUCCESS) {
				if (wr->num_sge > 1) {
					w->status = IBV_WC_LOC_QP_OP_ERR;   /* softverbs sends one SGE per frame */
				} else {
					w->addr = wr->sg_list[0].addr;
					if (sv_addrset_has(&qp->sq_addrs, w->addr) || sv_addrset_has(&qp->rq_addrs, w->addr))
						sv_violation("QP %u: send buffer %#llx (wr_id %#llx) posted while an earlier "
							     "WQE still holds it", ibqp->qp_num, (unsigned long long)w->addr,
							     (unsigned long long)w->wr_id);
					else
						sv_addrset_add(&qp->sq_addrs, w->addr);
					if (sv_checks_on())
						w->sum = sv_swqe_sum(wr->sg_list, 1);
				}
			}
		}
		if (w->status == IBV_WC_SUCCESS && total > qp->dev->mtu + 18u)
			w->status = IBV_WC_LOC_LEN_ERR;
		if (w->status == IBV_WC_SUCCESS) {
			if (nframes == 64) {
				sv_wire_send(qp->dev, frames, nframes);
				nframes = 0;
			}
			frames[nframes].iov_base = is_inline ? (void *)(qp->inline_buf + (size_t)slot * qp->max_inline)
							     : (void *)(uintptr_t)wr->sg_list[0].addr;
			frames[nframes].iov_len = total;
			frame_slots[nframes] = slot;
			frame_len[nframes] = total;
			nframes++;
		}
		w->done = true;
		/* Errors always complete; successes when asked. */
		if (w->signaled || w->status != IBV_WC_SUCCESS) {
			struct ibv_wc wc = { .wr_id = w->wr_id, .status = w->status, .opcode = IBV_WC_SEND,
					     .qp_num = ibqp->qp_num, .byte_len = total };
			sv_cq_push(sv_cq_of(ibqp->send_cq), &wc, qp, (int)slot);
		}
		if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR)
			sv_qp_set_error(qp);
	}
	(void)frame_slots;
	(void)frame_len;
	if (nframes)
		sv_wire_send(qp->dev, frames, nframes);
	if (ret)
		*bad_wr = wr;
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

void sv_qp_send_reaped(struct sv_qp *qp, int sq_slot)
{
	/* A completion returns its WQE and every unsignalled one before it. */
	while (qp->sq_count) {
		uint32_t slot = qp->sq_head;
		struct sv_swqe *w = &qp->sq[slot];
		if (w->addr) {
			if (sv_checks_on() && w->status == IBV_WC_SUCCESS && !w->is_inline &&
			    sv_sum((const uint8_t *)(uintptr_t)w->addr, w->len, 0) != w->sum)
				sv_violation("QP %u: send buffer %#llx (wr_id %#llx, %u bytes) changed between "
					     "ibv_post_send and the completion that returned it",
					     qp->qp.qp_num, (unsigned long long)w->addr, (unsigned long long)w->wr_id,
					     w->len);
			sv_addrset_del(&qp->sq_addrs, w->addr);
		}
		qp->sq_head = (qp->sq_head + 1) % qp->sq_depth;
		qp->sq_count--;
		if ((int)slot == sq_slot)
			return;
	}
}

/* ---- receive ---- */

int sv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct sv_qp *qp = sv_qp_of(ibqp);
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(qp->ctx, "ibv_post_recv")) {
		*bad_wr = wr;
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	sv_stats.post_recv_calls++;
	for (; wr; wr = wr->next) {
		if (ibqp->state == IBV_QPS_RESET || wr->num_sge < 1 || wr->num_sge > (int)SV_MAX_SGE) {
			ret = EINVAL;
			break;
		}
		if (qp->rq_count == qp->rq_depth) {
			sv_stats.recv_enomem++;
			ret = ENOMEM;
			break;
		}
		uint64_t addr = wr->sg_list[0].addr;
		if (sv_addrset_has(&qp->rq_addrs, addr) || sv_addrset_has(&qp->sq_addrs, addr)) {
			sv_violation("QP %u: receive buffer %#llx (wr_id %#llx) posted while an earlier WQE still "
				     "holds it", ibqp->qp_num, (unsigned long long)addr,
				     (unsigned long long)wr->wr_id);
			ret = EINVAL;
			break;
		}
		struct sv_rwqe *w = &qp->rq[(qp->rq_head + qp->rq_count) % qp->rq_depth];
		w->wr_id = wr->wr_id;
		w->num_sge = wr->num_sge;
		w->total = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			w->sge[i] = wr->sg_list[i];
			w->total += wr->sg_list[i].length;
			struct sv_mr *mr = sv_mr_find(qp->pd, w->sge[i].addr, w->sge[i].length, w->sge[i].lkey);
			if (!mr || !(mr->access & IBV_ACCESS_LOCAL_WRITE))
				w->total = 0;   /* found out when a frame lands: LOC_PROT_ERR */
			else if (sv_checks_on())
				memset((void *)(uintptr_t)w->sge[i].addr, SV_POISON, w->sge[i].length);
		}
		sv_addrset_add(&qp->rq_addrs, addr);
		qp->rq_count++;
		sv_stats.recv_wrs++;
		if (ibqp->state == IBV_QPS_ERR)
			sv_qp_flush(qp);
	}
	if (ret)
		*bad_wr = wr;
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

/* Every byte still the poison: eight at a time, differences ORed (the
 * loop vectorises; this runs for every frame received). */
static bool sv_poison_intact(const struct sv_rwqe *w)
{
	const uint64_t poison = 0x0101010101010101ull * SV_POISON;
	for (int i = 0; i < w->num_sge; i++) {
		const uint8_t *p = (const uint8_t *)(uintptr_t)w->sge[i].addr;
		uint32_t len = w->sge[i].length, j = 0;
		uint64_t diff = 0;
		for (; j + 8 <= len; j += 8) {
			uint64_t v;
			memcpy(&v, p + j, sizeof(v));
			diff |= v ^ poison;
		}
		for (; j < len; j++)
			diff |= (uint64_t)(p[j] ^ SV_POISON);
		if (diff)
			return false;
	}
	return true;
}

/* One frame off the wire, for qp (its rules chose it). */
static void sv_qp_deliver(struct sv_qp *qp, const uint8_t *data, uint32_t len)
{
	if (qp->qp.state != IBV_QPS_RTR && qp->qp.state != IBV_QPS_RTS)
		return;
	if (!qp->rq_count) {
		sv_stats.rx_no_wqe++;   /* a NIC's out-of-buffer drop */
		return;
	}
	struct sv_rwqe *w = &qp->rq[qp->rq_head];
	struct ibv_wc wc = { .wr_id = w->wr_id, .opcode = IBV_WC_RECV, .qp_num = qp->qp.qp_num, .byte_len = len };
	if (!w->total) {
		wc.status = IBV_WC_LOC_PROT_ERR;
	} else if (len > w->total) {
		wc.status = IBV_WC_LOC_LEN_ERR;
	} else {
		if (sv_checks_on() && !sv_poison_intact(w))
			sv_violation("QP %u: receive buffer %#llx (wr_id %#llx) was written while posted",
				     qp->qp.qp_num, (unsigned long long)w->sge[0].addr, (unsigned long long)w->wr_id);
		uint32_t off = 0;
		for (int i = 0; i < w->num_sge && off < len; i++) {
			uint32_t n = len - off < w->sge[i].length ? len - off : w->sge[i].length;
			memcpy((void *)(uintptr_t)w->sge[i].addr, data + off, n);
			off += n;
		}
		sv_stats.rx_frames++;
	}
	sv_addrset_del(&qp->rq_addrs, w->sge[0].addr);
	qp->rq_head = (qp->rq_head + 1) % qp->rq_depth;
	qp->rq_count--;
	sv_cq_push(sv_cq_of(qp->qp.recv_cq), &wc, qp, -1);
	if (wc.status == IBV_WC_LOC_PROT_ERR)
		sv_qp_set_error(qp);
}

/* One frame off the wire of dev: to every QP its steering names. */
static void sv_dev_deliver(struct sv_device *dev, const uint8_t *data, uint32_t len)
{
	struct sv_qp *targets[16];
	unsigned n = sv_flow_targets(dev, data, len, targets, 16);

	for (unsigned i = 0; i < n; i++)
		sv_qp_deliver(targets[i], data, len);
}

unsigned sv_dev_pump(struct sv_device *dev)
{
	return sv_wire_receive(dev, SV_PUMP_BUDGET, sv_dev_deliver);
}

SV_EXPORT int softverbs_test_qp_state(uint32_t qp_num, uint32_t *sq_outstanding, uint32_t *rq_posted,
				      uint32_t *max_inline)
{
	int ret = -1;
	pthread_mutex_lock(&sv_lock);
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next) {
		if (qp->qp.qp_num != qp_num)
			continue;
		*sq_outstanding = qp->sq_count;
		*rq_posted = qp->rq_count;
		*max_inline = qp->max_inline;
		ret = 0;
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

SV_EXPORT uint32_t softverbs_test_last_qp_num(void)
{
	pthread_mutex_lock(&sv_lock);
	uint32_t n = sv_qps ? sv_qps->qp.qp_num : 0;
	pthread_mutex_unlock(&sv_lock);
	return n;
}

SV_EXPORT int softverbs_test_bf_disabled(uint32_t qp_num)
{
	int ret = -1;
	pthread_mutex_lock(&sv_lock);
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next)
		if (qp->qp.qp_num == qp_num)
			ret = qp->ctx->bf_disabled;
	pthread_mutex_unlock(&sv_lock);
	return ret;
}
