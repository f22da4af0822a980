/* Offloaded TCP listeners: listen(), the engine's accept callback, accept().
 *
 * The kernel socket listens too, on the same address: connections that
 * reach it (loopback, interfaces we do not offload) are accepted from it and
 * handed out as plain kernel sockets. Connections through our rings become
 * children created by the engine; accept() gives each a fresh fd. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "iomux/iomux.h"
#include "log/vlog.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"

#define SOCK_TCP_SOMAXCONN 4096
/* After a shared listener's copy closes here, how long SYNs already
 * steered here are dropped rather than reset: the steering change is one
 * vmad round trip, and what the RX ring held is read within a poll. */
#define SOCK_TCP_LISTENER_GONE_MS 2000
/* Half-open connections of a shared listener steered by their own 5-tuple
 * at once (sock_tcp_child_born_cb). */
#define SOCK_TCP_EMBRYO_PINS 128u
/* A spinning accept asks the kernel listener once per this many polls. */
#define SOCK_TCP_ACCEPT_KERNEL_RATIO 64u

static struct ring_flow sock_tcp_listen_slot_flow(const struct sock_tcp *l, unsigned slot)
{
	struct ring_flow flow = l->listen_flow;
	if (flow.local_ip == INADDR_ANY)
		flow.local_ip = l->ctx->ifs[slot].nif.ip;
	return flow;
}

static void sock_tcp_listen_flows_put_locked(struct sock_tcp *l)
{
	for (unsigned slot = 0; slot < l->ctx->nifs; slot++)
		if (l->listen_slots & (1u << slot)) {
			struct ring_flow flow = sock_tcp_listen_slot_flow(l, slot);
			sock_offload_flow_put_locked(l->ctx, (int)slot, &flow);
		}
	l->listen_slots = 0;
}

/* Steers the listener's 3-tuple on every interface of listen_want: alone,
 * or in the port's share group (inherited across fork, SO_REUSEPORT). */
static void sock_tcp_listen_flows_get_locked(struct sock_tcp *s)
{
	struct sock_offload *ctx = s->ctx;
	for (unsigned slot = 0; slot < ctx->nifs; slot++) {
		if (!(s->listen_want & (1u << slot)) || (s->listen_slots & (1u << slot)))
			continue;
		struct ring_flow flow = sock_tcp_listen_slot_flow(s, slot);
		flow.owner_fd = s->obj.fd;
		flow.share = s->share;
		int ferr = sock_offload_flow_get_locked(ctx, (int)slot, &flow);
		if (ferr < 0)
			vlog_debug("fd %d: listener steering on %s refused (%s)", s->obj.fd, ctx->ifs[slot].name,
				   strerror(-ferr));
		else
			s->listen_slots |= 1u << slot;
	}
}

/* Whether the kernel serves a live connection on local ip:port (ip
 * INADDR_ANY: any address), as /proc/net/tcp lists them: one an application
 * or an accept queue holds (SYN_SENT, SYN_RECV, ESTABLISHED, CLOSE_WAIT).
 * Not the orphans closing on their own (FIN_WAIT, LAST_ACK, CLOSING,
 * TIME_WAIT), which an exiting libvma server leaves on its port (its
 * connections are handed to the kernel to end): a restarted server would
 * never be offloaded (CI's hostile test, verbs pass, 2026-12-02). Network
 * order in. */
static bool sock_tcp_kernel_has_conns(uint32_t ip, uint16_t port)
{
	FILE *f = fopen("/proc/net/tcp", "re");
	if (!f)
		return false;
	char line[256];
	bool found = false;
	unsigned host_port = ntohs(port);
	if (!fgets(line, sizeof(line), f)) {   /* the header */
		fclose(f);
		return false;
	}
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned lip, lport, rip, rport, st;
		/* "sl: LLLLLLLL:PPPP RRRRRRRR:PPPP ST": the address as the
		 * kernel's u32 of the network-order bytes, the port in host order */
		if (sscanf(line, " %*u: %8x:%4x %8x:%4x %2x", &lip, &lport, &rip, &rport, &st) != 5)
			continue;
		bool live = st == 0x01 || st == 0x02 || st == 0x03 || st == 0x08;
		found = lport == host_port && (ip == INADDR_ANY || lip == ip) && live;
	}
	fclose(f);
	return found;
}

/* Sentinel for sock_tcp_listen_offload: the kernel socket listens already. */
#define SOCK_TCP_KERNEL_LISTENS INT_MIN

/* The kernel's listen() for a listener that stays on the kernel path; when
 * the kernel refuses, the socket is as before (a later listen() may offload). */
static int sock_tcp_listen_kernel_only(struct sock_tcp *s, int os_backlog, struct sock_offload *prev_ctx)
{
	if (os_backlog == SOCK_TCP_KERNEL_LISTENS)
		return 0;
	int ret = OS_CALL(listen, s->obj.fd, os_backlog);
	if (ret != 0) {
		s->os_only = false;
		s->ctx = prev_ctx;
	}
	return ret;
}

/* The offload half of listen(): a pcb in ctx's engine and the steering.
 * Leaves the socket on the kernel path (os_only) when the rules, the address,
 * the kernel's own connections on the port (a backend that would take their
 * segments) or the steering say so. With os_backlog other than SOCK_TCP_KERNEL_LISTENS
 * the kernel socket is made a listener here, after our steering is in and
 * before the engine (its lock held) can see a SYN: a SYN that came between
 * the kernel's listen() and our entry would leave a connection in the
 * kernel's queue on a port whose segments we take. Returns what the
 * kernel's listen() returned (0 when it listened before). */
static int sock_tcp_listen_offload(struct sock_tcp *s, struct sock_offload *ctx, int os_backlog)
{
	bool kernel_listens = os_backlog == SOCK_TCP_KERNEL_LISTENS;
	struct sock_offload *prev_ctx = s->ctx;
	struct sock_obj *obj = &s->obj;
	struct sockaddr_in local = { .sin_family = AF_INET };
	socklen_t ll = sizeof(local);
	if (OS_CALL(getsockname, obj->fd, (struct sockaddr *)&local, &ll) != 0 ||
	    cfg_rules_match(CFG_ROLE_TCP_SERVER, &local, NULL) != CFG_TRANSPORT_VMA) {
		s->os_only = true;
		return sock_tcp_listen_kernel_only(s, os_backlog, prev_ctx);
	}
	uint32_t slots;
	if (local.sin_addr.s_addr == INADDR_ANY) {
		slots = (1u << ctx->nifs) - 1;
	} else {
		int slot = sock_offload_if_slot_by_ip(ctx, local.sin_addr.s_addr);
		if (slot < 0) {
			s->os_only = true;   /* loopback or an interface we do not offload */
			return sock_tcp_listen_kernel_only(s, os_backlog, prev_ctx);
		}
		slots = 1u << slot;
	}
	/* A backend whose steering would take the segments of the kernel's
	 * own connections on this port (a server still serving it while
	 * ours starts): the listener stays with the kernel, which serves
	 * both. */
	int taker = -1;
	for (unsigned i = 0; i < ctx->nifs && taker < 0; i++)
		if ((slots & (1u << i)) && ctx->ifs[i].ring && ctx->ifs[i].ring->takes_kernel_conns)
			taker = (int)i;
	if (taker >= 0 && sock_tcp_kernel_has_conns(local.sin_addr.s_addr, local.sin_port)) {
		vlog_warn("fd %d: TCP port %u has connections the kernel serves (another server still on it?); "
			  "offloading it on %s would take their segments (verbs backend), so this listener stays "
			  "with the kernel: start it when the port has no other connections, or use VMA_RING_BACKEND=xdp",
			  obj->fd, ntohs(local.sin_port), ctx->ifs[taker].name);
		s->os_only = true;
		return sock_tcp_listen_kernel_only(s, os_backlog, prev_ctx);
	}
	sock_offload_lock(ctx);
	s->ctx = ctx;
	if (s->stats)
		s->stats->ring_id = sock_offload_ring_id(ctx, 0);
	struct tcp_pcb *pcb = tcp_pcb_new(ctx->tcp);
	int err = pcb ? 0 : -ENOBUFS;
	if (pcb) {
		sock_tcp_pcb_setup_locked(s, pcb);
		/* Listeners of this lane on one port (threads each with an
		 * SO_REUSEPORT listener): the engine spreads the SYNs. */
		tcp_pcb_set_reuseport(pcb, s->reuseport);
		err = tcp_bind(pcb, local.sin_addr.s_addr, local.sin_port);
		if (err == 0)
			err = tcp_listen(pcb, s->backlog);
	}
	if (err == 0) {
		s->listen_flow = (struct ring_flow){ .proto = IPPROTO_TCP, .local_ip = local.sin_addr.s_addr,
						     .local_port = local.sin_port };
		s->listen_want = slots;
		sock_tcp_listen_flows_get_locked(s);
		if (!s->listen_slots)
			err = -ENOSPC;
	}
	int os_err = 0;
	if (err == 0 && !kernel_listens && OS_CALL(listen, obj->fd, os_backlog) != 0) {
		os_err = errno;
		sock_tcp_listen_flows_put_locked(s);
		s->listen_want = 0;
		err = -os_err;
	}
	if (err < 0) {
		if (pcb)
			tcp_abort(pcb);
		s->pcb = NULL;
		sock_offload_unlock(ctx);
		if (os_err) {   /* the kernel refused listen(): so do we, nothing changed */
			s->ctx = prev_ctx;
			errno = os_err;
			return -1;
		}
		s->os_only = true;
		vlog_debug("fd %d: TCP listener stays with the kernel (%s)", obj->fd, strerror(-err));
		return sock_tcp_listen_kernel_only(s, os_backlog, prev_ctx);
	}
	s->local_ip = local.sin_addr.s_addr;
	s->local_port = local.sin_port;
	s->mode = SOCK_TCP_LISTENER;
	sock_tcp_all_add_locked(s);
	sock_offload_unlock(ctx);
	/* accept() polls the kernel side without blocking in it. */
	int fl = OS_CALL(fcntl, obj->fd, F_GETFL, 0);
	if (fl != -1)
		OS_CALL(fcntl, obj->fd, F_SETFL, (void *)(long)(fl | O_NONBLOCK));
	__atomic_store_n(&s->obj.ops, &sock_tcp_offload_ops, __ATOMIC_RELEASE);
	iomux_promote(&s->obj);   /* epoll sets that took the fd in before listen() */
	if (s->stats) {
		s->stats->offloaded = 1;
		s->stats->tcp_state = STATS_TCP_LISTEN;
		s->stats->local_addr = s->local_ip;
		s->stats->local_port = s->local_port;
	}
	return 0;
}

int sock_tcp_op_listen(struct sock_obj *obj, int backlog)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (s->mode == SOCK_TCP_ACTIVE && sock_tcp_ctx(s)) {
		errno = EINVAL;
		return -1;
	}
	/* A socket bound to its port listens in the kernel after our steering
	 * is in (sock_tcp_listen_offload); one without a port gets it from the
	 * kernel's listen() first (nobody can be connecting to it yet). */
	struct sockaddr_in bound = { 0 };
	socklen_t bl = sizeof(bound);
	bool has_port = OS_CALL(getsockname, obj->fd, (struct sockaddr *)&bound, &bl) == 0 &&
			bound.sin_family == AF_INET && bound.sin_port != 0;
	if (has_port) {   /* a connected socket: the kernel's EINVAL, nothing steered */
		bl = sizeof(bound);
		has_port = OS_CALL(getpeername, obj->fd, (struct sockaddr *)&bound, &bl) != 0;
	}
	struct sock_offload *ctx = NULL;
	if (s->mode == SOCK_TCP_KERNEL && !s->os_only) {
		ctx = sock_offload_get_for_socket(s->ctx, obj->fd, s->ring_logic, s->ring_user_id);
		if (ctx && !ctx->tcp)
			ctx = NULL;
	}
	if (!ctx || !has_port) {
		int ret = OS_CALL(listen, obj->fd, backlog);
		if (ret == 0)
			s->opts_known &= ~SOCK_TCP_OPT_QUICKACK;   /* Linux resets it at listen() */
		if (ret != 0 || !ctx)
			return ret;
	}
	/* As Linux: a negative backlog or one above somaxconn is somaxconn;
	 * 0 stays 0 (every SYN gets a cookie, one connection may wait). */
	s->backlog = backlog < 0 || backlog > SOCK_TCP_SOMAXCONN ? SOCK_TCP_SOMAXCONN : (unsigned)backlog;
	/* SO_REUSEPORT listeners of other processes may share the port. */
	int reuseport = 0;
	socklen_t rl = sizeof(reuseport);
	s->reuseport = OS_CALL(getsockopt, obj->fd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) == 0 && reuseport;
	bool prev_share = s->share;
	if (s->reuseport)
		s->share = true;
	if (sock_tcp_listen_offload(s, ctx, has_port ? backlog : SOCK_TCP_KERNEL_LISTENS) != 0) {
		s->share = prev_share;   /* the kernel refused: the socket as it was */
		return -1;
	}
	s->opts_known &= ~SOCK_TCP_OPT_QUICKACK;   /* Linux resets it at listen() */
	errno = 0;
	return 0;
}

/* ---- fork (docs/process_model.md) ---- */

void sock_tcp_listen_fork_release_locked(struct sock_tcp *l)
{
	if (!l->listen_slots)
		return;
	/* A process that accepts is a fork-per-connection master: it goes on
	 * accepting after the fork, and its half-open connections (steered by
	 * the listener's entry until they complete) must not lose their last
	 * ACK to the kernel. A child that accepts too joins the share group.
	 * A process that never accepted (a pre-fork master) lets go, so that
	 * SYNs reach only the processes that accept. */
	if (l->accepted_here) {
		/* A child that accepts joins the port's share group: from now
		 * on each accepted connection gets its own entry. */
		l->share = true;
		return;
	}
	sock_tcp_listen_flows_put_locked(l);
	l->fork_dormant = true;
}

void sock_tcp_listen_forget_parent(struct sock_tcp *l)
{
	/* The parent's pcb and not yet accepted children: memory copies,
	 * dropped and never freed. The eventfd is shared with the parent. */
	l->pcb = NULL;
	l->acceptq_head = l->acceptq_tail = NULL;
	__atomic_store_n(&l->acceptq_len, 0, __ATOMIC_RELEASE);
	l->listen_slots = 0;
	l->base.sleepers = 0;
	l->wake_pending = false;
	if (l->base.wake_fd >= 0)
		os_close_nocancel(l->base.wake_fd);
	l->base.wake_fd = -1;
	l->fork_dormant = false;
	l->accepted_here = false;
	l->inherited = true;
	free(l->embryos);   /* our heap's copy; the pins are the parent's */
	l->embryos = NULL;
	l->nembryos = l->embryos_cap = 0;
}

/* A listener the kernel socket serves from now on (a forked child that
 * cannot adopt it): that socket gets the options only we held. */
static void sock_tcp_listen_to_kernel(struct sock_tcp *s)
{
	sock_tcp_kernel_catch_up(s, s->obj.fd);
	s->opts_kernel_lacks = 0;
}

void sock_tcp_fork_join(struct sock_tcp *s)
{
	if (s->released || s->mode != SOCK_TCP_LISTENER) {
		s->fork_dormant = s->inherited = false;
		return;
	}
	if (s->inherited) {
		s->inherited = false;
		struct sock_offload *ctx = sock_offload_get_for_logic(s->obj.fd, s->ring_logic, s->ring_user_id);
		if (!ctx || !ctx->tcp) {
			sock_tcp_listen_to_kernel(s);   /* the kernel socket keeps serving it */
			return;
		}
		s->mode = SOCK_TCP_KERNEL;
		s->ctx = NULL;
		s->share = true;
		sock_tcp_listen_offload(s, ctx, SOCK_TCP_KERNEL_LISTENS);
		if (s->mode != SOCK_TCP_LISTENER) {
			/* Adoption failed: a listener on the kernel path. */
			s->mode = SOCK_TCP_LISTENER;
			s->ctx = NULL;
			sock_tcp_listen_to_kernel(s);
		}
		return;
	}
	struct sock_offload *ctx = s->ctx;
	if (sock_offload_usable(ctx)) {
		sock_offload_lock(ctx);
		if (s->fork_dormant && !ctx->dead) {
			s->share = true;
			sock_tcp_listen_flows_get_locked(s);
		}
		s->fork_dormant = false;
		sock_offload_unlock(ctx);
	}
	s->fork_dormant = false;
}

/* ---- half-open children across a fork ---- */

struct sock_tcp_embryo_pin {
	struct sock_tcp *l;
	unsigned pinned;
};

/* The index of the pin of five's 4-tuple in l->embryos, or -1. */
static int sock_tcp_embryo_find(const struct sock_tcp *l, const struct ring_flow *five)
{
	for (unsigned i = 0; i < l->nembryos; i++) {
		const struct ring_flow *e = &l->embryos[i].flow;
		if (e->local_ip == five->local_ip && e->local_port == five->local_port &&
		    e->remote_ip == five->remote_ip && e->remote_port == five->remote_port)
			return (int)i;
	}
	return -1;
}

static void sock_tcp_embryo_pin(void *arg, const struct tcp_pcb *child)
{
	struct sock_tcp_embryo_pin *pin = arg;
	struct sock_tcp *l = pin->l;
	struct sock_offload *ctx = l->ctx;
	struct ring_flow five = { .proto = IPPROTO_TCP, .owner_fd = l->obj.fd };
	tcp_pcb_get_addr(child, &five.local_ip, &five.local_port, &five.remote_ip, &five.remote_port);
	int slot = sock_offload_if_slot_by_ip(ctx, five.local_ip);
	if (slot < 0 || !(l->listen_slots & (1u << slot)) || sock_tcp_embryo_find(l, &five) >= 0)
		return;
	if (l->nembryos == l->embryos_cap) {   /* doubling: not an allocation per SYN */
		unsigned cap = l->embryos_cap ? l->embryos_cap * 2 : 8;
		struct sock_tcp_embryo *grown = realloc(l->embryos, cap * sizeof(*grown));
		if (!grown)
			return;
		l->embryos = grown;
		l->embryos_cap = cap;
	}
	if (sock_offload_flow_get_locked(ctx, slot, &five) < 0)
		return;
	l->embryos[l->nembryos++] = (struct sock_tcp_embryo){ .flow = five, .if_slot = slot };
	pin->pinned++;
}

void sock_tcp_pin_embryos_locked(struct sock_offload *ctx)
{
	/* A fork may hand connections to the kernel, and on a backend that
	 * can only steer to a QP (verbs) that takes the listener's 3-tuple
	 * away: the last ACK of a handshake in flight would then reach the
	 * kernel, which has no such connection and resets it. */
	unsigned pinned = 0;
	for (struct sock_tcp *l = ctx->tcp_all; l; l = l->all_next) {
		if (l->ctx != ctx || l->mode != SOCK_TCP_LISTENER || !l->pcb || !l->listen_slots)
			continue;
		struct sock_tcp_embryo_pin pin = { .l = l };
		tcp_listener_half_open(l->pcb, sock_tcp_embryo_pin, &pin);
		pinned += pin.pinned;
	}
	if (pinned)
		vlog_debug("fork: %u half-open connections steered by their own 5-tuple", pinned);
}

/* The pin of c's 5-tuple, if a fork or its SYN made one: c's steering
 * from now on. */
static bool sock_tcp_embryo_take(struct sock_tcp *l, struct sock_tcp *c)
{
	struct ring_flow five = { .local_ip = c->local_ip, .local_port = c->local_port, .remote_ip = c->remote_ip,
				  .remote_port = c->remote_port };
	int i = sock_tcp_embryo_find(l, &five);
	if (i < 0 || l->embryos[i].if_slot != c->if_slot)
		return false;
	c->flow = l->embryos[i].flow;
	l->embryos[i] = l->embryos[--l->nembryos];
	return true;
}

/* A share group spreads the listener's 3-tuple by hash over processes that
 * come and go (a pre-fork server's reload): a join takes about one in
 * count + 1 of the handshakes in flight to the newcomer, which never saw
 * their SYN and resets their last ACK. From its SYN-ACK on, a handshake of
 * a shared listener has its own 5-tuple, which accept takes over
 * (sock_tcp_embryo_take): the same one map update a connection, made one
 * round trip earlier. Not beyond SOCK_TCP_EMBRYO_PINS half-open ones at
 * once (a SYN flood would cost two updates a SYN): those ride the hash. */
void sock_tcp_child_born_cb(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child)
{
	(void)listener;
	struct sock_tcp *l = arg;
	if (!l->share || l->released || l->mode != SOCK_TCP_LISTENER || !l->ctx || l->ctx->dead ||
	    l->nembryos >= SOCK_TCP_EMBRYO_PINS)
		return;
	struct sock_tcp_embryo_pin pin = { .l = l };
	sock_tcp_embryo_pin(&pin, child);
}

/* A half-open child's handshake failed: its pin goes. */
void sock_tcp_child_lost_cb(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child)
{
	(void)listener;
	struct sock_tcp *l = arg;
	if (!l->nembryos || !l->ctx)
		return;
	struct ring_flow five = { 0 };
	tcp_pcb_get_addr(child, &five.local_ip, &five.local_port, &five.remote_ip, &five.remote_port);
	int i = sock_tcp_embryo_find(l, &five);
	if (i < 0)
		return;
	sock_offload_flow_put_locked(l->ctx, l->embryos[i].if_slot, &l->embryos[i].flow);
	l->embryos[i] = l->embryos[--l->nembryos];
}

void sock_tcp_embryos_put_locked(struct sock_tcp *l)
{
	for (unsigned i = 0; i < l->nembryos; i++)
		if (l->ctx)
			sock_offload_flow_put_locked(l->ctx, l->embryos[i].if_slot, &l->embryos[i].flow);
	free(l->embryos);
	l->embryos = NULL;
	l->nembryos = l->embryos_cap = 0;
}

/* ---- children ---- */

bool sock_tcp_admit_cb(void *arg, const struct stack_netif *nif, uint32_t remote_ip, uint16_t remote_port)
{
	struct sock_tcp *l = arg;
	struct sock_offload *ctx = l->ctx;
	if (!ctx || l->mode != SOCK_TCP_LISTENER)
		return true;
	/* The stack's netif is one of the lane's interfaces. */
	for (unsigned slot = 0; slot < ctx->nifs; slot++) {
		if (&ctx->ifs[slot].nif != nif)
			continue;
		struct ring_flow three = sock_tcp_listen_slot_flow(l, slot);
		return ring_share_admit(ctx->ifs[slot].ring, &three, remote_ip, remote_port);
	}
	return true;
}

int sock_tcp_accept_cb(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	(void)listener;
	struct sock_tcp *l = arg;
	if (l->released || l->mode != SOCK_TCP_LISTENER)
		return -ECONNREFUSED;
	struct sock_tcp *c = sock_tcp_alloc(-1, l->obj.domain, SOCK_STREAM, l->obj.protocol);
	if (!c)
		return -ENOMEM;
	struct sock_offload *ctx = l->ctx;
	c->ctx = ctx;
	/* Its ring allocation logic (SO_VMA_RING_ALLOC_LOGIC) too: it decides
	 * where the connection goes at accept and later. */
	c->ring_logic = l->ring_logic;
	c->ring_user_id = l->ring_user_id;
	sock_mig_window_configure(&c->mig, c->ring_logic);
	/* Options Linux copies from the listener to the accepted socket. */
	c->nodelay = l->nodelay;
	c->quickack = l->quickack;
	c->keepalive = l->keepalive;
	c->keep_params_set = l->keep_params_set;
	c->keep_idle_s = l->keep_idle_s;
	c->keep_intvl_s = l->keep_intvl_s;
	c->keep_cnt = l->keep_cnt;
	c->rcvbuf = l->rcvbuf;
	c->sndbuf = l->sndbuf;
	c->linger_on = l->linger_on;
	c->linger_s = l->linger_s;
	c->maxseg = l->maxseg;
	c->notsent_lowat = l->notsent_lowat;
	c->cc_set = l->cc_set;
	c->cc_algo = l->cc_algo;
	sock_base_inherit(&c->base, &l->base);
	/* The child's kernel socket is a placeholder that never had them.
	 * Not TCP_QUICKACK: Linux does not pass it on to an accepted socket,
	 * which reports its own fresh state, as the placeholder does. */
	c->opts_known = l->opts_known & ~SOCK_TCP_OPT_QUICKACK;
	c->opts_kernel_lacks = c->opts_known;
	tcp_pcb_get_addr(child, &c->local_ip, &c->local_port, &c->remote_ip, &c->remote_port);
	c->if_slot = sock_offload_if_slot_by_ip(ctx, c->local_ip);
	c->pcb = child;
	c->mode = SOCK_TCP_ACTIVE;
	c->established = true;
	c->connect_reported = true;
	c->listener = l;
	tcp_set_callbacks(child, NULL, NULL);
	sock_tcp_pcb_setup_locked(c, child);
	if (c->if_slot >= 0) {
		/* The listener's 3-tuple brought the SYN and brings the rest of
		 * the connection while the listener is steered to this process
		 * alone: the child takes a reference on it (no map update per
		 * connection) and gets an entry of its own only before that can
		 * change (fork, the listener's close: sock_tcp_pin_listener_flows_locked).
		 * A shared listener (SO_REUSEPORT, a share group after fork)
		 * spreads its 3-tuple by hash over processes that come and go:
		 * a 5-tuple each, unless VMA_TCP_3T_RULES asks for the 3-tuple. */
		c->flow = (struct ring_flow){ .proto = IPPROTO_TCP, .local_ip = c->local_ip,
					      .local_port = c->local_port, .owner_fd = l->obj.fd };
		bool by_listener = g_cfg.tcp_3t_rules ||
				   (!l->share && (l->listen_slots & (1u << c->if_slot)) &&
				    (l->listen_flow.local_ip == INADDR_ANY || l->listen_flow.local_ip == c->local_ip));
		if (!by_listener) {
			c->flow.remote_ip = c->remote_ip;
			c->flow.remote_port = c->remote_port;
		} else {
			c->flow.share = l->share;
		}
		if (l->nembryos && sock_tcp_embryo_take(l, c)) {
			c->flow_held = true;   /* pinned at a fork while half-open */
			by_listener = false;
		} else {
			c->flow_held = sock_offload_flow_get_locked(ctx, c->if_slot, &c->flow) == 0;
		}
		c->flow_by_listener = c->flow_held && by_listener;
		c->flow_share = c->flow_held && !by_listener && l->share;
	}
	c->writeable = false;
	sock_tcp_snd_refresh_locked(c);
	if (l->acceptq_tail)
		l->acceptq_tail->next_child = c;
	else
		l->acceptq_head = c;
	l->acceptq_tail = c;
	__atomic_add_fetch(&l->acceptq_len, 1, __ATOMIC_RELEASE);
	sock_tcp_all_add_locked(c);
	__atomic_add_fetch(&l->notify_edges, 1, __ATOMIC_RELAXED);
	sock_tcp_notify_locked(l, EPOLLIN);
	return 0;
}

void sock_tcp_child_free_locked(struct sock_tcp *c)
{
	sock_tcp_disconnect_locked(c, true);
	sock_tcp_rxq_clear_locked(c);
	free(c);
}

void sock_tcp_listener_close_locked(struct sock_tcp *l, bool pin_connections)
{
	sock_tcp_embryos_put_locked(l);
	while (l->acceptq_head) {
		struct sock_tcp *c = l->acceptq_head;
		l->acceptq_head = c->next_child;
		sock_tcp_child_free_locked(c);
	}
	l->acceptq_tail = NULL;
	__atomic_store_n(&l->acceptq_len, 0, __ATOMIC_RELEASE);
	if (l->pcb) {
		tcp_set_callbacks(l->pcb, NULL, NULL);
		tcp_abort(l->pcb);
		l->pcb = NULL;
	}
	if (l->ctx && pin_connections) {
		/* Its connections keep their steering when the port's 3-tuple
		 * goes (another socket may listen there next). */
		for (unsigned slot = 0; slot < l->ctx->nifs; slot++)
			if (l->listen_slots & (1u << slot)) {
				struct ring_flow flow = sock_tcp_listen_slot_flow(l, slot);
				sock_tcp_pin_listener_flows_locked(l->ctx, &flow);
			}
	}
	if (l->ctx && pin_connections && l->share && l->listen_slots && !l->ctx->dead) {
		/* Other processes go on serving the port (docs/process_model.md,
		 * "Reload"). */
		sock_tcp_end_time_waits_locked(l->ctx, l->listen_flow.local_ip, l->local_port);
		sock_offload_clock_locked(l->ctx);
		tcp_ctx_listener_gone(l->ctx->tcp, l->listen_flow.local_ip, l->local_port, SOCK_TCP_LISTENER_GONE_MS);
	}
	if (l->ctx)
		sock_tcp_listen_flows_put_locked(l);
	sock_tcp_all_del_locked(l);
}

/* A connection the kernel accepted: tracked as a kernel TCP socket. */
static void sock_tcp_track_kernel(struct sock_tcp *l, int nfd, int flags)
{
	/* It inherited the kernel listener's options; those only we hold
	 * (VMA_AVOID_SYS_CALLS_ON_TCP_FD) are added. */
	sock_tcp_kernel_catch_up(l, nfd);
	struct sock_tcp *k = sock_tcp_alloc(nfd, l->obj.domain, SOCK_STREAM | (flags & SOCK_NONBLOCK),
					    l->obj.protocol);
	if (k) {
		k->os_only = true;
		k->ctx = l->ctx;
		k->stats = stats_socket_slot_get(nfd, STATS_PROTO_TCP);
		k->stats->blocking = !k->base.nonblocking;
	}
	if (!k || sock_fd_set(nfd, &k->obj) != 0) {
		if (k) {
			stats_socket_slot_put(k->stats);
			free(k);
		}
		sock_fd_drop(nfd);   /* a stale entry must not meet the new file */
	}
}

/* Gives an accepted child its own fd (a kernel socket that is never
 * connected; it only owns the number) and publishes it. */
static int sock_tcp_child_publish(struct sock_tcp *l, struct sock_tcp *c, int flags, struct sockaddr *addr,
				  socklen_t *len)
{
	struct sock_offload *ctx = l->ctx;
	int nfd = OS_CALL(socket, AF_INET, SOCK_STREAM | (flags & (SOCK_CLOEXEC | SOCK_NONBLOCK)), 0);
	if (nfd >= 0) {
		/* A listening kernel socket reports no readiness of its own
		 * (iomux merges the kernel fd's events into ours). */
		struct sockaddr_in lo = { .sin_family = AF_INET };
		lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (OS_CALL(bind, nfd, (struct sockaddr *)&lo, sizeof(lo)) == 0)
			OS_CALL(listen, nfd, 1);
	}
	if (nfd < 0) {
		int saved = errno;
		sock_offload_lock(ctx);
		sock_tcp_child_free_locked(c);
		sock_offload_unlock(ctx);
		errno = saved;
		return -1;
	}
	c->obj.fd = nfd;
	c->base.nonblocking = (flags & SOCK_NONBLOCK) != 0;
	c->stats = stats_socket_slot_get(nfd, STATS_PROTO_TCP);
	c->stats->offloaded = 1;
	c->stats->blocking = !c->base.nonblocking;
	c->stats->local_addr = c->local_ip;
	c->stats->local_port = c->local_port;
	c->stats->peer_addr = c->remote_ip;
	c->stats->peer_port = c->remote_port;
	c->stats->tcp_state = STATS_TCP_ESTABLISHED;
	if (c->if_slot >= 0)
		c->stats->ring_id = sock_offload_ring_id(ctx, c->if_slot);
	sock_offload_lock(ctx);
	c->listener = NULL;
	sock_offload_unlock(ctx);
	/* A lane per thread or core: the connection goes where the thread
	 * that accepted it runs, before anyone else can see its fd. */
	sock_tcp_move_accepted(l, c);
	ctx = c->ctx;
	c->obj.ops = &sock_tcp_offload_ops;
	if (sock_fd_set(nfd, &c->obj) != 0) {
		sock_offload_lock(ctx);
		sock_tcp_disconnect_locked(c, true);
		sock_tcp_rxq_clear_locked(c);
		sock_offload_unlock(ctx);
		stats_socket_slot_put(c->stats);
		os_close_nocancel(nfd);
		free(c);
		errno = EMFILE;
		return -1;
	}
	sock_tcp_put_addr(addr, len, c->remote_ip, c->remote_port);
	return nfd;
}

static bool sock_tcp_has_child(const struct sock_tcp *s)
{
	return s->acceptq_head != NULL;
}

/* The kernel path (no context: exit, fork child): the kernel socket was
 * made non-blocking at listen(), so a blocking accept waits here. */
static int sock_tcp_accept_kernel(struct sock_tcp *l, struct sockaddr *addr, socklen_t *len, int flags)
{
	for (;;) {
		int nfd = OS_CALL(accept4, l->obj.fd, addr, len, flags);
		if (nfd >= 0) {
			sock_tcp_track_kernel(l, nfd, flags);
			return nfd;
		}
		if ((errno != EAGAIN && errno != EWOULDBLOCK) || l->base.nonblocking)
			return -1;
		struct pollfd p = { .fd = l->obj.fd, .events = POLLIN };
		if (OS_CALL(poll, &p, 1, l->base.rcvtimeo_ms ? l->base.rcvtimeo_ms : -1) == 0) {
			errno = EAGAIN;
			return -1;
		}
	}
}

/* Lock held: takes the first established child off the accept queue. */
static struct sock_tcp *sock_tcp_take_child_locked(struct sock_tcp *s)
{
	struct sock_tcp *c = s->acceptq_head;
	if (!c)
		return NULL;
	s->accepted_here = true;
	s->acceptq_head = c->next_child;
	if (!s->acceptq_head)
		s->acceptq_tail = NULL;
	c->next_child = NULL;
	__atomic_sub_fetch(&s->acceptq_len, 1, __ATOMIC_RELEASE);
	if (s->pcb)   /* room in the engine's accept queue (backlog) */
		tcp_listen_accepted(s->pcb);
	return c;
}

int sock_tcp_accept_next(struct sock_tcp *l, int flags, struct sockaddr_in *peer)
{
	struct sock_offload *ctx = sock_tcp_ctx(l);
	if (!ctx || l->mode != SOCK_TCP_LISTENER) {
		errno = EINVAL;
		return -1;
	}
	sock_offload_lock(ctx);
	struct sock_tcp *c = sock_tcp_take_child_locked(l);
	sock_offload_unlock(ctx);
	if (!c) {
		errno = EAGAIN;
		return -1;
	}
	socklen_t len = sizeof(*peer);
	return sock_tcp_child_publish(l, c, flags, (struct sockaddr *)peer, &len);
}

int sock_tcp_op_accept4(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
		errno = EINVAL;
		return -1;
	}
	sock_tcp_fork_check(s);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (s->mode != SOCK_TCP_LISTENER) {
		errno = EINVAL;
		return -1;
	}
	if (!ctx)
		return sock_tcp_accept_kernel(s, addr, len, flags);
	uint64_t deadline = s->base.rcvtimeo_ms ? engine_now_ms() + (uint64_t)s->base.rcvtimeo_ms : 0;
	struct os_sig_mark sigmark = os_signal_call_mark();
	unsigned spins = 0;
	for (;;) {
		sock_offload_lock(ctx);
		if (!s->acceptq_head)
			sock_offload_progress_locked(ctx);
		struct sock_tcp *c = sock_tcp_take_child_locked(s);
		sock_offload_unlock(ctx);
		if (c)
			return sock_tcp_child_publish(s, c, flags, addr, len);
		/* The kernel's side (loopback, other interfaces) is asked at the
		 * first pass and then once every SOCK_TCP_ACCEPT_KERNEL_RATIO
		 * polls, not on each: a spinning accept stays out of the kernel. */
		if (spins % SOCK_TCP_ACCEPT_KERNEL_RATIO == 0) {
			int nfd = OS_CALL(accept4, obj->fd, addr, len, flags);
			if (nfd >= 0) {
				sock_tcp_track_kernel(s, nfd, flags);
				return nfd;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -1;
		}
		if (s->base.nonblocking) {
			errno = EAGAIN;
			return -1;
		}
		/* Linux restarts accept under SA_RESTART unless SO_RCVTIMEO. */
		if (os_signal_interrupts(&sigmark, !deadline))
			return -1;
		if (sock_tcp_spin_again(&spins, deadline))
			continue;
		if (sock_tcp_sleep(s, ctx, deadline, POLLIN, sock_tcp_has_child, &sigmark) < 0)
			return -1;
		spins = 0;   /* the kernel listener is asked again first */
		if (s->released) {
			errno = EBADF;
			return -1;
		}
	}
}
