/* softverbs: completion channels and completion queues.
 *
 * A channel's fd is an epoll set. It holds each CQ's event eventfd (an
 * event waits to be taken), its moderation timerfd, and, while the CQ is
 * armed, the wire fds of the QPs that complete on it: the channel is
 * readable when an event is pending or the "NIC" may have something to
 * complete. ibv_get_cq_event runs the NIC for the armed CQs before looking
 * for an event, so a frame that matches no rule wakes the sleeper once and
 * yields no event (an extra wakeup, which the verbs manual allows for). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>

#include "sv_internal.h"

struct sv_cq *sv_cqs;

struct sv_cq *sv_cq_of(struct ibv_cq *cq)
{
	return (struct sv_cq *)cq;
}

SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct sv_context *c = sv_ctx(context);

	pthread_mutex_lock(&sv_lock);
	struct sv_channel *ch = NULL;
	if (!sv_ctx_usable(c, "ibv_create_comp_channel") || sv_fail("ibv_create_comp_channel"))
		goto out;
	long fd = syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
	if (fd < 0)
		goto out;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		sv_sys_close((int)fd);
		errno = ENOMEM;
		goto out;
	}
	ch->ch.context = context;
	ch->ch.fd = (int)fd;
	ch->ctx = c;
	c->objects++;
out:
	pthread_mutex_unlock(&sv_lock);
	return ch ? &ch->ch : NULL;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sv_channel *ch = (struct sv_channel *)channel;
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(ch->ctx, "ibv_destroy_comp_channel"))
		ret = EINVAL;
	else if (ch->cqs)
		ret = EBUSY;
	else {
		sv_sys_close(ch->ch.fd);
		ch->ctx->objects--;
		free(ch);
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct sv_context *c = sv_ctx(context);
	struct sv_cq *cq = NULL;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(c, "ibv_create_cq") || sv_fail("ibv_create_cq"))
		goto out;
	if (cqe < 1 || (unsigned)cqe > SV_MAX_CQE || comp_vector != 0) {
		errno = EINVAL;
		goto out;
	}
	cq = calloc(1, sizeof(*cq));
	/* As mlx5: the size is rounded up to a power of two, minus one. */
	uint32_t size = 1;
	while (size < (uint32_t)cqe + 1)
		size <<= 1;
	size -= 1;
	if (cq)
		cq->entries = calloc(size, sizeof(*cq->entries));
	if (!cq || !cq->entries) {
		if (cq)
			free(cq);
		cq = NULL;
		errno = ENOMEM;
		goto out;
	}
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.cqe = (int)size;
	cq->cq.handle = (uint32_t)(uintptr_t)cq & 0xffffff;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	cq->ctx = c;
	cq->size = size;
	cq->event_fd = cq->timer_fd = -1;
	cq->chan = (struct sv_channel *)channel;
	if (cq->chan) {
		cq->event_fd = (int)syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
		cq->timer_fd = (int)syscall(SYS_timerfd_create, CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (cq->event_fd < 0 || cq->timer_fd < 0) {
			sv_sys_close(cq->event_fd);
			sv_sys_close(cq->timer_fd);
			free(cq->entries);
			free(cq);
			cq = NULL;
			errno = EMFILE;
			goto out;
		}
		sv_sys_epoll_ctl(cq->chan->ch.fd, EPOLL_CTL_ADD, cq->event_fd, EPOLLIN);
		sv_sys_epoll_ctl(cq->chan->ch.fd, EPOLL_CTL_ADD, cq->timer_fd, EPOLLIN);
		cq->chan->cqs++;
	}
	cq->next = sv_cqs;
	sv_cqs = cq;
	c->objects++;
out:
	pthread_mutex_unlock(&sv_lock);
	return cq ? &cq->cq : NULL;
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sv_cq *cq = sv_cq_of(ibcq);

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(cq->ctx, "ibv_destroy_cq")) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next) {
		if (qp->qp.send_cq == ibcq || qp->qp.recv_cq == ibcq) {
			pthread_mutex_unlock(&sv_lock);
			return EBUSY;
		}
	}
	if (cq->events_unacked)
		sv_violation("ibv_destroy_cq with %u completion events not acknowledged (libibverbs waits for "
			     "ibv_ack_cq_events forever)", cq->events_unacked);
	for (struct sv_cq **p = &sv_cqs; *p; p = &(*p)->next) {
		if (*p == cq) {
			*p = cq->next;
			break;
		}
	}
	if (cq->chan) {
		sv_sys_epoll_ctl(cq->chan->ch.fd, EPOLL_CTL_DEL, cq->event_fd, 0);
		sv_sys_epoll_ctl(cq->chan->ch.fd, EPOLL_CTL_DEL, cq->timer_fd, 0);
		cq->chan->cqs--;
	}
	sv_sys_close(cq->event_fd);
	sv_sys_close(cq->timer_fd);
	cq->ctx->objects--;
	pthread_mutex_unlock(&sv_lock);
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_cond_destroy(&ibcq->cond);
	free(cq->entries);
	free(cq);
	return 0;
}

int sv_modify_cq(struct ibv_cq *ibcq, struct ibv_modify_cq_attr *attr)
{
	struct sv_cq *cq = sv_cq_of(ibcq);
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	sv_stats.modify_cq_calls++;
	if (!sv_ctx_usable(cq->ctx, "ibv_modify_cq"))
		ret = EINVAL;
	else if (sv_fail("ibv_modify_cq"))
		ret = errno;
	else if (attr->attr_mask & ~(uint32_t)IBV_CQ_ATTR_MODERATE)
		ret = EINVAL;
	else if (attr->attr_mask & IBV_CQ_ATTR_MODERATE) {
		cq->mod_count = attr->moderate.cq_count;
		cq->mod_period_us = attr->moderate.cq_period;
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

SV_EXPORT int softverbs_test_rx_moderation(uint32_t qp_num, uint16_t *count, uint16_t *period_us)
{
	int ret = -1;
	pthread_mutex_lock(&sv_lock);
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next) {
		if (qp->qp.qp_num == qp_num) {
			*count = sv_cq_of(qp->qp.recv_cq)->mod_count;
			*period_us = sv_cq_of(qp->qp.recv_cq)->mod_period_us;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

/* The wires of the QPs completing receives on cq join (or leave) the
 * channel set. */
static void sv_cq_watch_wires(struct sv_cq *cq, bool on)
{
	if (!cq->chan)
		return;
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next) {
		if (qp->qp.recv_cq != &cq->cq || qp->watched == on || qp->dev->wire.rx_fd < 0)
			continue;
		/* Several QPs of one device on one CQ share the fd: EEXIST. */
		sv_sys_epoll_ctl(cq->chan->ch.fd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, qp->dev->wire.rx_fd, EPOLLIN);
		qp->watched = on;
	}
}

static void sv_timer_set(int fd, uint64_t delay_ns)
{
	struct itimerspec its;
	memset(&its, 0, sizeof(its));
	if (delay_ns) {
		its.it_value.tv_sec = (time_t)(delay_ns / 1000000000u);
		its.it_value.tv_nsec = (long)(delay_ns % 1000000000u);
	}
	syscall(SYS_timerfd_settime, fd, 0, &its, NULL);
}

void sv_cq_fire_if_due(struct sv_cq *cq)
{
	/* Raw Ethernet receives are never solicited: a CQ armed for
	 * solicited completions only never fires on RAW_PACKET QPs. */
	if (!cq->armed || !cq->since_arm || cq->solicited_only)
		return;
	uint64_t now = sv_now_ns();
	uint64_t period_ns = (uint64_t)cq->mod_period_us * 1000u;
	bool count_due = cq->mod_count ? cq->since_arm >= cq->mod_count : !cq->mod_period_us;
	bool period_due = period_ns && now - cq->first_ns >= period_ns;
	if (!count_due && !period_due) {
		/* Moderation holds the event: the timer brings the sleeper
		 * back when the period is up. */
		if (period_ns && cq->timer_fd >= 0)
			sv_timer_set(cq->timer_fd, cq->first_ns + period_ns - now + 1);
		return;
	}
	cq->armed = false;
	cq->since_arm = 0;
	cq->events_pending++;
	sv_stats.events++;
	if (cq->timer_fd >= 0)
		sv_timer_set(cq->timer_fd, 0);
	if (cq->event_fd >= 0)
		sv_sys_eventfd_signal(cq->event_fd);
	sv_cq_watch_wires(cq, false);
}

void sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, struct sv_qp *qp, int sq_slot)
{
	if (cq->overrun)
		return;
	if (cq->count == cq->size) {
		cq->overrun = true;
		sv_stats.cq_overruns++;
		sv_violation("CQ overrun: a completion for QP %u found CQ %u full (%u entries): size the CQ for "
			     "every WQE that can complete on it; the CQ and its QPs are in error now",
			     wc->qp_num, cq->cq.handle, cq->size);
		for (struct sv_qp *q = sv_qps; q; q = q->next)
			if (q->qp.send_cq == &cq->cq || q->qp.recv_cq == &cq->cq)
				sv_qp_set_error(q);
		return;
	}
	struct sv_cqe *e = &cq->entries[(cq->head + cq->count++) % cq->size];
	e->wc = *wc;
	e->qp = qp;
	e->sq_slot = sq_slot;
	if (cq->armed) {
		if (!cq->since_arm++)
			cq->first_ns = sv_now_ns();
		sv_cq_fire_if_due(cq);
	}
}

void sv_cq_forget_qp(struct sv_cq *cq, struct sv_qp *qp)
{
	for (uint32_t i = 0; i < cq->count; i++) {
		struct sv_cqe *e = &cq->entries[(cq->head + i) % cq->size];
		if (e->qp == qp)
			e->qp = NULL;
	}
}

void sv_cq_watch(struct sv_cq *cq, int fd, bool on)
{
	if (cq->chan && fd >= 0)
		sv_sys_epoll_ctl(cq->chan->ch.fd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, EPOLLIN);
}

void sv_cq_pump(struct sv_cq *cq)
{
	/* The device of each QP completing on cq, once (the first QP of a
	 * device in the list stands for it). */
	for (struct sv_qp *qp = sv_qps; qp; qp = qp->next) {
		if (qp->qp.recv_cq != &cq->cq)
			continue;
		bool done = false;
		for (struct sv_qp *o = sv_qps; o != qp && !done; o = o->next)
			done = o->qp.recv_cq == &cq->cq && o->dev == qp->dev;
		if (!done)
			sv_dev_pump(qp->dev);
	}
}

int sv_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct sv_cq *cq = sv_cq_of(ibcq);
	int n = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(cq->ctx, "ibv_poll_cq")) {
		pthread_mutex_unlock(&sv_lock);
		return -1;
	}
	sv_cq_pump(cq);
	while (n < num_entries && cq->count) {
		struct sv_cqe *e = &cq->entries[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
		if (e->sq_slot >= 0 && e->qp)
			sv_qp_send_reaped(e->qp, e->sq_slot);
		wc[n++] = e->wc;
	}
	pthread_mutex_unlock(&sv_lock);
	return n;
}

int sv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sv_cq *cq = sv_cq_of(ibcq);

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(cq->ctx, "ibv_req_notify_cq")) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	if (!cq->armed) {
		cq->armed = true;
		cq->solicited_only = solicited_only != 0;
		cq->since_arm = 0;
		/* Only completions added from now on raise the event: the
		 * caller polls once more after arming (the manual's order). */
		sv_cq_watch_wires(cq, true);
	}
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

/* An event waiting on the channel, taken; NULL when none. */
static struct sv_cq *sv_channel_take(struct sv_channel *ch)
{
	for (struct sv_cq *cq = sv_cqs; cq; cq = cq->next) {
		if (cq->chan != ch)
			continue;
		if (cq->armed) {
			sv_cq_pump(cq);
			sv_cq_fire_if_due(cq);
		}
	}
	for (struct sv_cq *cq = sv_cqs; cq; cq = cq->next) {
		if (cq->chan != ch || !cq->events_pending)
			continue;
		cq->events_pending--;
		cq->events_unacked++;
		if (!cq->events_pending)
			sv_sys_eventfd_drain(cq->event_fd);
		return cq;
	}
	/* Nothing: reset what woke the channel (expired timers). */
	for (struct sv_cq *cq = sv_cqs; cq; cq = cq->next) {
		if (cq->chan == ch && cq->timer_fd >= 0) {
			uint64_t ticks;
			if (syscall(SYS_read, cq->timer_fd, &ticks, sizeof(ticks)) > 0 && cq->armed && cq->since_arm)
				sv_cq_fire_if_due(cq);
		}
	}
	return NULL;
}

SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq_out, void **cq_context)
{
	struct sv_channel *ch = (struct sv_channel *)channel;

	for (;;) {
		pthread_mutex_lock(&sv_lock);
		if (!sv_ctx_usable(ch->ctx, "ibv_get_cq_event")) {
			pthread_mutex_unlock(&sv_lock);
			return -1;
		}
		struct sv_cq *cq = sv_channel_take(ch);
		if (!cq)
			cq = sv_channel_take(ch);   /* a timer that just fired */
		pthread_mutex_unlock(&sv_lock);
		if (cq) {
			*cq_out = &cq->cq;
			*cq_context = cq->cq.cq_context;
			return 0;
		}
		long flags = syscall(SYS_fcntl, channel->fd, F_GETFL, 0);
		if (flags >= 0 && (flags & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };
		if (syscall(SYS_poll, &pfd, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
	struct sv_cq *cq = sv_cq_of(ibcq);

	pthread_mutex_lock(&sv_lock);
	if (nevents > cq->events_unacked) {
		sv_violation("ibv_ack_cq_events(%u) on CQ %u that has %u events to acknowledge", nevents,
			     cq->cq.handle, cq->events_unacked);
		nevents = cq->events_unacked;
	}
	cq->events_unacked -= nevents;
	pthread_mutex_unlock(&sv_lock);
}
