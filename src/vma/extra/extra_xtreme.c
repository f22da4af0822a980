/* SocketXtreme (docs/extra_api.md): socketxtreme_poll on a ring fd turns
 * what the sockets of the ring's lane hold into vma_completion_t events,
 * lending the application the ring frames the data sits in; the buffer
 * calls give them back.
 *
 * Under VMA_SOCKETXTREME=1 the socket layer lists a socket on its lane
 * (extra_xt.h) when it has a datagram or segment queued, a connection to
 * auto-accept, or a TCP event. The poll takes the sockets off the list
 * under the lane lock and, for each, takes its queued data out of the
 * socket's queue without copying: every ring frame handed out gets a
 * descriptor in the lane's table (a struct vma_buff_t first, which is what
 * the application sees). A frame goes back to its ring under the lane lock
 * when its last reference is dropped. Frames lent count against the
 * socket's share of the ring (docs/security.md, ring_buf_pool_holder_*):
 * an application that never frees stops receiving on that socket, never
 * dries the ring up for the others.
 *
 * A lane has one list for all its rings: polling any ring fd of the lane
 * reports the events of every socket of the lane (one interface: one ring,
 * the same thing). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "extra/extra.h"
#include "extra/extra_lend.h"
#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring_spin.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"
#include "sock/sock_udp_internal.h"

/* Listeners whose connections one poll auto-accepts. */
#define EXTRA_XT_ACCEPT_MAX 16
/* The longest an empty poll waits for the ring when it may not spin. */
#define EXTRA_XT_WAIT_MS 1
/* total_len of a packet descriptor is 16 bits. */
#define EXTRA_XT_PACKET_MAX 65535u

/* ---- VMA_SOCKETXTREME=0 ---- */

static int extra_xt_off(const char *what)
{
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		vlog_warn("Extra API: %s needs SocketXtreme mode: set VMA_SOCKETXTREME=1 (this and later "
			  "SocketXtreme calls fail with EOPNOTSUPP)", what);
	else
		vlog_debug("Extra API: %s without VMA_SOCKETXTREME=1", what);
	errno = EOPNOTSUPP;
	return -1;
}

/* ---- the list (lane lock held) ---- */

static void extra_xt_list_locked(struct sock_offload *ctx, struct extra_xt_node *n, struct sock_obj *obj)
{
	n->obj = obj;
	if (n->listed)
		return;
	struct extra_xt_lane *l = &ctx->xtreme;
	n->listed = true;
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static void extra_xt_unlist_locked(struct sock_offload *ctx, struct extra_xt_node *n)
{
	if (!n->listed)
		return;
	struct extra_xt_lane *l = &ctx->xtreme;
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
	n->listed = false;
}

void extra_xt_udp_ready_locked(struct sock_udp *s)
{
	if (s->ctx && !s->released)
		extra_xt_list_locked(s->ctx, &s->base.xt, &s->obj);
}

void extra_xt_tcp_event_locked(struct sock_tcp *s, uint32_t ev)
{
	/* A connection not accepted yet has no fd: its listener reports it.
	 * A closed socket is off the list for good (its memory goes). */
	if (s->obj.fd < 0 || !s->ctx || s->released)
		return;
	/* Data is a packet completion, and a listener's EPOLLIN an auto-accept:
	 * neither is an epoll bit of its own. */
	if (s->mode != SOCK_TCP_LISTENER && ev != EPOLLIN)
		s->base.xt.events |= ev;
	extra_xt_list_locked(s->ctx, &s->base.xt, &s->obj);
}

void extra_xt_forget_locked(struct sock_offload *ctx, struct extra_xt_node *n)
{
	extra_xt_unlist_locked(ctx, n);
	n->events = 0;
	extra_lend_forget_locked(ctx, n);
}

/* ---- filling completions (lane lock held) ---- */

static uint64_t extra_xt_user_data(const struct extra_xt_node *n, int fd)
{
	return n->user_data_set ? n->user_data : (uint64_t)(int64_t)fd;
}

static void extra_xt_completion_init(struct vma_completion_t *c, const struct extra_xt_node *n, int fd)
{
	memset(c, 0, sizeof(*c));
	c->user_data = extra_xt_user_data(n, fd);
	c->src.sin_family = AF_INET;
	c->listen_fd = -1;
}

/* The front datagram of s as one packet completion; false when the table
 * has no room for its buffers (it stays queued). */
static bool extra_xt_udp_packet_locked(struct extra_xt_table *t, struct sock_udp *s, struct vma_completion_t *c)
{
	struct sock_udp_entry *front = sock_udp_queue_front(&s->queue);
	unsigned nbufs = extra_lend_chain_bufs(front->buf, front->len);
	if (t->nfree < nbufs)
		return false;
	struct sock_udp_entry e;
	sock_udp_queue_take(&s->queue, &e);
	extra_xt_completion_init(c, &s->base.xt, s->obj.fd);
	struct extra_xt_buf *lead = extra_lend_chain_locked(t, &s->base.xt, e.buf, e.len, nbufs);
	c->packet.buff_lst = &lead->vb;
	c->packet.num_bufs = nbufs;
	c->packet.total_len = (uint16_t)e.len;
	c->events = VMA_SOCKETXTREME_PACKET;
	c->src.sin_port = e.info.src_port;
	c->src.sin_addr.s_addr = e.info.src_ip;
	stats_socket_ready_remove(s->stats, e.len);
	s->stats->c.rx_packets++;
	s->stats->c.rx_bytes += e.len;
	s->stats->c.rx_poll_hit++;
	return true;
}

/* Queued bytes of s (up to a packet's 64 KiB) as one packet completion;
 * false when none could be lent (table full). */
static bool extra_xt_tcp_packet_locked(struct extra_xt_table *t, struct sock_tcp *s, struct vma_completion_t *c)
{
	unsigned nbufs = 0;
	uint32_t total = 0;
	struct extra_xt_buf *prev = NULL;
	extra_xt_completion_init(c, &s->base.xt, s->obj.fd);
	while (s->rxq_head && t->nfree && total + s->rxq_head->len <= EXTRA_XT_PACKET_MAX) {
		struct ring_buf *b = s->rxq_head;
		s->rxq_head = b->link;
		if (!s->rxq_head)
			s->rxq_tail = NULL;
		b->link = NULL;
		s->rxq_frames--;
		s->rxq_bytes -= b->len;
		struct extra_xt_buf *x = extra_lend_tcp_locked(t, s, b, false);
		if (prev)
			prev->vb.next = &x->vb;
		else
			c->packet.buff_lst = &x->vb;
		prev = x;
		total += b->len;
		nbufs++;
	}
	if (!nbufs)
		return false;
	/* Lent frames still count against the connection's share; the bytes
	 * reopen the window when the application frees them. */
	if (s->pcb)
		tcp_rcv_held_set(s->pcb, s->rxq_frames + s->base.xt.lent);
	c->packet.num_bufs = nbufs;
	c->packet.total_len = (uint16_t)total;
	c->events = VMA_SOCKETXTREME_PACKET;
	c->src.sin_port = s->remote_port;
	c->src.sin_addr.s_addr = s->remote_ip;
	if (s->stats) {
		stats_socket_ready_remove(s->stats, total);
		s->stats->c.rx_packets++;
		s->stats->c.rx_bytes += total;
		s->stats->c.rx_poll_hit++;
	}
	return true;
}

struct extra_xt_poll {
	struct vma_completion_t *comps;
	unsigned max, got;
	struct sock_obj *listeners[EXTRA_XT_ACCEPT_MAX];
	unsigned nlisteners;
};

/* What one listed socket holds, as completions; true when it has nothing
 * left to report (it leaves the list). */
static bool extra_xt_node_poll_locked(struct extra_xt_table *t, struct extra_xt_node *n, struct extra_xt_poll *p)
{
	struct sock_obj *obj = n->obj;
	if (obj->ops == &sock_udp_ops) {
		struct sock_udp *s = sock_udp_of(obj);
		if (__builtin_expect(sock_udp_has_strays(s), 0))
			sock_udp_strays_take_locked(s);
		while (p->got < p->max && s->queue.count) {
			if (!extra_xt_udp_packet_locked(t, s, &p->comps[p->got]))
				return false;
			p->got++;
		}
		return s->queue.count == 0;
	}
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->mode == SOCK_TCP_LISTENER) {
		n->events = 0;
		if (!__atomic_load_n(&s->acceptq_len, __ATOMIC_ACQUIRE))
			return true;
		if (p->nlisteners == EXTRA_XT_ACCEPT_MAX)
			return false;
		/* Accepted after the unlock (an fd is a syscall away). */
		sock_obj_pin(obj);
		p->listeners[p->nlisteners++] = obj;
		return true;
	}
	struct vma_completion_t *last = NULL;
	while (p->got < p->max && s->rxq_bytes) {
		if (!extra_xt_tcp_packet_locked(t, s, &p->comps[p->got]))
			return false;
		last = &p->comps[p->got++];
	}
	if (s->rxq_bytes)
		return false;
	/* Events after the data they follow (a FIN after its bytes). */
	if (n->events) {
		if (!last) {
			if (p->got == p->max)
				return false;
			last = &p->comps[p->got++];
			extra_xt_completion_init(last, n, obj->fd);
			last->src.sin_port = s->remote_port;
			last->src.sin_addr.s_addr = s->remote_ip;
		}
		last->events |= n->events;
		n->events = 0;
	}
	return true;
}

/* ---- the ring fd ---- */

/* The lane a ring fd belongs to; the calling thread's last answer first. */
static struct sock_offload *extra_xt_lane_of(int fd)
{
	static __thread struct sock_offload *last_ctx OS_TLS_HOT;
	static __thread int last_fd OS_TLS_HOT = -1;
	static __thread unsigned last_slot OS_TLS_HOT;
	struct sock_offload *ctx = last_ctx;
	if (__builtin_expect(ctx && fd == last_fd && sock_offload_usable(ctx) && last_slot < ctx->nifs &&
			     ctx->ifs[last_slot].ring && ring_wait_fd(ctx->ifs[last_slot].ring) == fd, 1))
		return ctx;
	if (fd < 0)
		return NULL;
	struct sock_offload *lanes[SOCK_OFFLOAD_MAX_LANES];
	unsigned nl = sock_offload_lanes(lanes, SOCK_OFFLOAD_MAX_LANES);
	for (unsigned l = 0; l < nl; l++) {
		if (!sock_offload_usable(lanes[l]))
			continue;
		for (unsigned i = 0; i < lanes[l]->nifs; i++)
			if (lanes[l]->ifs[i].ring && ring_wait_fd(lanes[l]->ifs[i].ring) == fd) {
				last_ctx = lanes[l];
				last_fd = fd;
				last_slot = i;
				return lanes[l];
			}
	}
	return NULL;
}

/* ---- the members ---- */

/* The connections waiting on listener l, each given an fd and reported
 * (no lock held). */
static void extra_xt_auto_accept(struct sock_obj *lobj, struct extra_xt_poll *p)
{
	struct sock_tcp *l = sock_tcp_of(lobj);
	while (p->got < p->max) {
		struct sockaddr_in peer = { 0 };
		int nfd = sock_tcp_accept_next(l, 0, &peer);
		if (nfd < 0)
			break;
		struct vma_completion_t *c = &p->comps[p->got++];
		memset(c, 0, sizeof(*c));
		c->events = VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED;
		c->user_data = (uint64_t)nfd;
		c->src = peer;
		c->src.sin_family = AF_INET;
		c->listen_fd = lobj->fd;
		/* What reached the connection before it had an fd is reported
		 * by the next poll. */
		struct sock_obj *cobj = sock_fd_get(nfd);
		if (cobj && cobj->ops == &sock_tcp_offload_ops) {
			struct sock_tcp *cs = sock_tcp_of(cobj);
			struct sock_offload *ctx = sock_tcp_lock(cs, __atomic_load_n(&cs->ctx, __ATOMIC_ACQUIRE));
			if (cs->peer_fin)
				cs->base.xt.events |= EPOLLIN | EPOLLRDHUP;
			if (cs->reset)
				cs->base.xt.events |= EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP;
			if (cs->rxq_bytes || cs->base.xt.events)
				extra_xt_list_locked(ctx, &cs->base.xt, cobj);
			sock_offload_unlock(ctx);
		}
	}
	if (__atomic_load_n(&l->acceptq_len, __ATOMIC_ACQUIRE) && sock_tcp_ctx(l)) {
		sock_offload_lock(l->ctx);
		if (!l->released)
			extra_xt_list_locked(l->ctx, &l->base.xt, lobj);
		sock_offload_unlock(l->ctx);
	}
}

/* One pass: the lane's listed sockets as completions (a progress pass
 * first when none is listed), then the auto-accepts. 0, or -1 (EBADFD:
 * the lane is gone). */
static int extra_xt_poll_once(struct sock_offload *ctx, struct extra_xt_table *t, struct extra_xt_poll *p)
{
	sock_offload_lock(ctx);
	if (__builtin_expect(ctx->dead, 0)) {
		sock_offload_unlock(ctx);
		errno = EBADFD;
		return -1;
	}
	if (!ctx->xtreme.head)
		sock_offload_progress_locked(ctx);
	for (struct extra_xt_node *n = ctx->xtreme.head; n && p->got < p->max;) {
		struct extra_xt_node *next = n->next;
		if (extra_xt_node_poll_locked(t, n, p))
			extra_xt_unlist_locked(ctx, n);
		n = next;
	}
	sock_offload_unlock(ctx);
	for (unsigned i = 0; i < p->nlisteners; i++) {
		extra_xt_auto_accept(p->listeners[i], p);
		sock_obj_unpin(p->listeners[i]);
	}
	p->nlisteners = 0;
	return 0;
}

/* Sleeps until a ring of the lane has frames (or the internal thread
 * delivered some), EXTRA_XT_WAIT_MS at most; at once when a socket is
 * listed already. */
static void extra_xt_wait(struct sock_offload *ctx)
{
	int fds[SOCK_OFFLOAD_WAIT_FDS];
	ring_spin_release();
	sock_offload_lock(ctx);
	int n = ctx->xtreme.head || ctx->dead ? -1 : sock_offload_wait_prepare_locked(ctx, fds, SOCK_OFFLOAD_WAIT_FDS);
	sock_offload_unlock(ctx);
	if (n <= 0)
		return;
	struct pollfd pfd[SOCK_OFFLOAD_WAIT_FDS];
	for (int i = 0; i < n; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	int saved = errno;
	OS_CALL(poll, pfd, (nfds_t)n, EXTRA_XT_WAIT_MS);
	errno = saved;
}

int extra_socketxtreme_poll(int fd, struct vma_completion_t *completions, unsigned int ncompletions, int flags)
{
	(void)flags;   /* reserved: "set zero" */
	if (__builtin_expect(!g_cfg.socketxtreme, 0))
		return extra_xt_off("socketxtreme_poll");
	struct sock_offload *ctx = extra_xt_lane_of(fd);
	if (__builtin_expect(!ctx, 0)) {
		errno = EBADFD;   /* not a ring fd of ours (libvma's answer) */
		return -1;
	}
	if (!ncompletions)
		return 0;
	if (!completions) {
		errno = EFAULT;
		return -1;
	}
	struct extra_xt_table *t = extra_lend_table(ctx);
	if (__builtin_expect(!t, 0)) {
		errno = ENOMEM;
		return -1;
	}
	struct extra_xt_poll p = { .comps = completions, .max = ncompletions };
	if (extra_xt_poll_once(ctx, t, &p) < 0)
		return -1;
	/* The application spins on this call. Where the scheduler shows that
	 * other threads wait for this CPU (no busy-polling permit: more
	 * spinners than cores, the peer or other programs on the host; docs/
	 * process_model.md "Busy polling"), an empty poll waits for the ring
	 * instead, up to EXTRA_XT_WAIT_MS, as libvma's own receive calls stop
	 * spinning there: a spin that loses its time slice to them delays the
	 * answer it waits for far more than a wake-up does. On cores left to
	 * the application it never waits. */
	if (!p.got && !ring_spin_permit()) {
		extra_xt_wait(ctx);
		if (extra_xt_poll_once(ctx, t, &p) < 0)
			return -1;
	}
	return (int)p.got;
}

int extra_socketxtreme_free_vma_packets(struct vma_packet_desc_t *packets, int num)
{
	if (!g_cfg.socketxtreme)
		return extra_xt_off("socketxtreme_free_vma_packets");
	if (!packets || num < 0) {
		errno = EINVAL;
		return -1;
	}
	int rc = 0;
	struct extra_xt_table *locked = NULL;
	for (int i = 0; i < num; i++) {
		struct extra_xt_table *t = NULL;
		struct extra_xt_buf *b = packets[i].buff_lst ? extra_lend_lookup(packets[i].buff_lst, &t) : NULL;
		if (t != locked) {
			if (locked)
				sock_offload_unlock(locked->ctx);
			locked = t && extra_lend_lock(t) ? t : NULL;
			if (t && !locked)
				continue;   /* the lane is gone: nothing to give back */
		}
		if (!b || !b->refs) {
			rc = -1;
			continue;
		}
		/* The window first (the whole packet, as libvma), then one
		 * reference of each buffer; a buffer the application took a
		 * reference on (ref_vma_buff) stays until free_vma_buff. */
		size_t n = 0;
		for (struct extra_xt_buf *x = b; x && n < packets[i].num_bufs; n++) {
			struct vma_buff_t *next = x->vb.next;
			if (x->tcp)
				extra_lend_tcp_recved_locked(t->ctx, x);
			if (--x->refs == 0)
				extra_lend_release_locked(t->ctx, t, x);
			struct extra_xt_table *nt = NULL;
			x = next ? extra_lend_lookup(next, &nt) : NULL;
			if (x && (nt != t || !x->refs))
				x = NULL;
		}
	}
	if (locked)
		sock_offload_unlock(locked->ctx);
	if (rc < 0)
		errno = EINVAL;
	return rc;
}

int extra_socketxtreme_ref_vma_buff(struct vma_buff_t *buff)
{
	if (!g_cfg.socketxtreme)
		return extra_xt_off("socketxtreme_ref_vma_buff");
	struct extra_xt_table *t = NULL;
	struct extra_xt_buf *b = buff ? extra_lend_lookup(buff, &t) : NULL;
	if (!b || !extra_lend_lock(t)) {
		errno = EINVAL;
		return -1;
	}
	int rc = -1;
	if (b->refs && b->refs < INT32_MAX)
		rc = (int)++b->refs;
	sock_offload_unlock(t->ctx);
	if (rc < 0)
		errno = EINVAL;
	return rc;
}

int extra_socketxtreme_free_vma_buff(struct vma_buff_t *buff)
{
	if (!g_cfg.socketxtreme)
		return extra_xt_off("socketxtreme_free_vma_buff");
	struct extra_xt_table *t = NULL;
	struct extra_xt_buf *b = buff ? extra_lend_lookup(buff, &t) : NULL;
	if (!b)
		goto bad;
	if (!extra_lend_lock(t))
		return 0;   /* the lane is gone, and the frame with it */
	if (!b->refs) {
		sock_offload_unlock(t->ctx);
		goto bad;
	}
	int rc = (int)--b->refs;
	if (!rc)
		extra_lend_release_locked(t->ctx, t, b);
	sock_offload_unlock(t->ctx);
	return rc;
bad:
	errno = EINVAL;
	return -1;
}

/* ---- SO_VMA_USER_DATA ---- */

int extra_xt_user_data_set(struct extra_xt_node *n, const void *val, socklen_t len)
{
	if (!val) {
		errno = EFAULT;
		return -1;
	}
	/* libvma takes a pointer-sized value. */
	if (len != sizeof(uint64_t)) {
		errno = EINVAL;
		return -1;
	}
	uint64_t v;
	memcpy(&v, val, sizeof(v));
	__atomic_store_n(&n->user_data, v, __ATOMIC_RELAXED);
	__atomic_store_n(&n->user_data_set, true, __ATOMIC_RELEASE);
	return 0;
}

int extra_xt_user_data_get(const struct extra_xt_node *n, int fd, void *val, socklen_t *len)
{
	if (!val || !len) {
		errno = EFAULT;
		return -1;
	}
	if (*len < (socklen_t)sizeof(uint64_t)) {
		errno = EINVAL;
		return -1;
	}
	uint64_t v = __atomic_load_n(&n->user_data_set, __ATOMIC_ACQUIRE) ? __atomic_load_n(&n->user_data,
											      __ATOMIC_RELAXED)
									       : (uint64_t)(int64_t)fd;
	memcpy(val, &v, sizeof(v));
	*len = sizeof(v);
	return 0;
}
