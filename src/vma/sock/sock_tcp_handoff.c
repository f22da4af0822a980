/* Handing an established offloaded connection to the kernel before fork
 * (docs/process_model.md, "fork").
 *
 * A fork-per-connection server accepts, forks, and lets the child talk on
 * the connection while the parent closes its copy. Our connection lives in
 * the parent's user-space stack, which the child cannot use; the kernel's
 * TCP_REPAIR mode can take it over instead: a fresh kernel socket gets the
 * sequence numbers, windows, options and queued bytes of our pcb, replaces
 * the socket under the application's fd number (dup3), and our steering
 * entry goes so the peer's segments reach it. Parent and child then share a
 * kernel connection, exactly as without libvma.
 *
 * Connections in an epoll set are left alone: an event loop that forks
 * (redis' BGSAVE) keeps serving them itself and the child never touches
 * them. TCP_REPAIR needs CAP_NET_ADMIN; without it the connection stays the
 * parent's (a child's calls on it get ENOTCONN). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "log/vlog.h"
#include "os/os.h"
#include "sock/sock_tcp_internal.h"

/* TCP option kinds (RFC 9293, 7323, 2018) for TCP_REPAIR_OPTIONS; the
 * names of <netinet/tcp.h> would clash with the engine's state names. */
#define SOCK_TCP_OPT_MSS 2
#define SOCK_TCP_OPT_WINDOW 3
#define SOCK_TCP_OPT_SACK_PERM 4
#define SOCK_TCP_OPT_TIMESTAMP 8

static int sock_tcp_handoff_opt(int fd, int name, const void *val, socklen_t len)
{
	return OS_CALL(setsockopt, fd, IPPROTO_TCP, name, val, len) == 0 ? 0 : -errno;
}

static int sock_tcp_handoff_queue(int fd, int queue)
{
	return sock_tcp_handoff_opt(fd, TCP_REPAIR_QUEUE, &queue, sizeof(queue));
}

/* Never blocks (the socket's buffers were sized for the queues first): a
 * full buffer fails the handoff instead of hanging the caller. */
static int sock_tcp_handoff_write(int fd, const uint8_t *data, uint32_t len)
{
	while (len) {
		ssize_t n = OS_CALL(send, fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		data += n;
		len -= (uint32_t)n;
	}
	return 0;
}

/* Ends repair mode: the kernel probes the peer's window. Leaving it also
 * takes back the forced port reuse repair mode gave (sk_reuse goes to "no
 * reuse"), so the connection would keep a restarted server from binding
 * its port even with SO_REUSEADDR; the connections of such a server (and
 * most clients') have SO_REUSEADDR, so it is set again. */
static void sock_tcp_handoff_leave_repair(int k)
{
	int off = 0, one = 1;
	sock_tcp_handoff_opt(k, TCP_REPAIR, &off, sizeof(off));
	OS_CALL(setsockopt, k, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
}

/* Options the application set on its socket that the kernel socket taking
 * over must have too. */
static void sock_tcp_handoff_copy_options(int from, int to)
{
	static const struct {
		int level, name;
	} opts[] = {
		{ SOL_SOCKET, SO_KEEPALIVE }, { SOL_SOCKET, SO_LINGER },     { SOL_SOCKET, SO_RCVTIMEO },
		{ SOL_SOCKET, SO_SNDTIMEO },  { SOL_SOCKET, SO_PRIORITY },   { SOL_SOCKET, SO_OOBINLINE },
		{ IPPROTO_TCP, TCP_NODELAY }, { IPPROTO_TCP, TCP_KEEPIDLE }, { IPPROTO_TCP, TCP_KEEPINTVL },
		{ IPPROTO_TCP, TCP_KEEPCNT }, { IPPROTO_IP, IP_TOS },
	};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		uint8_t val[32];
		socklen_t len = sizeof(val);
		if (OS_CALL(getsockopt, from, opts[i].level, opts[i].name, val, &len) == 0)
			OS_CALL(setsockopt, to, opts[i].level, opts[i].name, val, len);
	}
}

/* Entries of handed-over connections are checked once this many exist. */
#define SOCK_TCP_HANDOFF_GC_AT 64

/* Whether the kernel still has the connection of a handed-over flow: an
 * exact sock_diag lookup (TIME_WAIT counts: the peer may resend its FIN). */
static bool sock_tcp_handoff_alive(const struct ring_flow *f)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg;
	union {
		struct nlmsghdr nlh;
		char buf[1024];
	} reply;
	int nl = OS_CALL(socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	bool alive = true; /* when in doubt, keep the entry */

	if (nl < 0)
		return true;
	memset(&msg, 0, sizeof(msg));
	msg.nlh.nlmsg_len = sizeof(msg);
	msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	msg.nlh.nlmsg_flags = NLM_F_REQUEST;
	msg.req.sdiag_family = AF_INET;
	msg.req.sdiag_protocol = IPPROTO_TCP;
	msg.req.idiag_states = ~0u;
	msg.req.id.idiag_sport = f->local_port;
	msg.req.id.idiag_dport = f->remote_port;
	msg.req.id.idiag_src[0] = f->local_ip;
	msg.req.id.idiag_dst[0] = f->remote_ip;
	msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	struct timeval tv = { .tv_sec = 1 };
	OS_CALL(setsockopt, nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (OS_CALL(send, nl, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg)) {
		ssize_t n = OS_CALL(recv, nl, &reply, sizeof(reply), 0);
		if (n >= (ssize_t)sizeof(struct nlmsghdr) && reply.nlh.nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(&reply.nlh);
			alive = e->error != -ENOENT;
		}
	}
	os_close_nocancel(nl);
	return alive;
}

/* The connection's addresses (network order) and the bytes received but
 * not read yet, which the kernel socket's receive queue takes. */
struct sock_tcp_handoff_conn {
	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;
	const struct ring_buf *rxq_head;
	uint32_t rxq_bytes;
};

/* Builds the kernel connection on k. 0 or -errno. */
static int sock_tcp_handoff_build(const struct sock_tcp_handoff_conn *c, int k, const struct tcp_pcb_export *ex)
{
	int one = 1;
	int err = sock_tcp_handoff_opt(k, TCP_REPAIR, &one, sizeof(one));
	if (err)
		return err;
	/* Room for the queues: a send buffer at tcp_wmem's default (16 KiB)
	 * would make the repair-mode writes wait. FORCE passes wmem_max and
	 * rmem_max (CAP_NET_ADMIN, which TCP_REPAIR needed already); the
	 * kernel doubles the value. */
	int snd = (int)(ex->snd_len[0] + ex->snd_len[1]), rcv = (int)c->rxq_bytes;
	if (snd > 0 && OS_CALL(setsockopt, k, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd)) != 0)
		OS_CALL(setsockopt, k, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
	if (rcv > 0 && OS_CALL(setsockopt, k, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) != 0)
		OS_CALL(setsockopt, k, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	/* Sequence numbers go in before connect: it makes the socket
	 * ESTABLISHED from them without a handshake. */
	uint32_t seq = ex->snd_queue_seq;
	if ((err = sock_tcp_handoff_queue(k, TCP_SEND_QUEUE)) ||
	    (err = sock_tcp_handoff_opt(k, TCP_QUEUE_SEQ, &seq, sizeof(seq))))
		return err;
	seq = ex->rcv_nxt - c->rxq_bytes;
	if ((err = sock_tcp_handoff_queue(k, TCP_RECV_QUEUE)) ||
	    (err = sock_tcp_handoff_opt(k, TCP_QUEUE_SEQ, &seq, sizeof(seq))))
		return err;
	struct sockaddr_in local = { .sin_family = AF_INET, .sin_port = c->local_port };
	local.sin_addr.s_addr = c->local_ip;
	struct sockaddr_in remote = { .sin_family = AF_INET, .sin_port = c->remote_port };
	remote.sin_addr.s_addr = c->remote_ip;
	/* Repair mode forces the bind past the listener holding the port. */
	if (OS_CALL(bind, k, (struct sockaddr *)&local, sizeof(local)) != 0 ||
	    OS_CALL(connect, k, (struct sockaddr *)&remote, sizeof(remote)) != 0)
		return -errno;
	struct tcp_repair_opt opts[4];
	unsigned n = 0;
	opts[n++] = (struct tcp_repair_opt){ SOCK_TCP_OPT_MSS, ex->mss };
	if (ex->ws_ok)
		opts[n++] = (struct tcp_repair_opt){ SOCK_TCP_OPT_WINDOW,
						     ex->snd_wscale | (uint32_t)ex->rcv_wscale << 16 };
	if (ex->sack_ok)
		opts[n++] = (struct tcp_repair_opt){ SOCK_TCP_OPT_SACK_PERM, 0 };
	if (ex->ts_ok)
		opts[n++] = (struct tcp_repair_opt){ SOCK_TCP_OPT_TIMESTAMP, 0 };
	if ((err = sock_tcp_handoff_opt(k, TCP_REPAIR_OPTIONS, opts, (socklen_t)(n * sizeof(opts[0])))))
		return err;
	if (ex->ts_ok) {
		/* The kernel's TSval continues ours (it keeps an offset). */
		uint32_t ts = ex->ts_now;
		if ((err = sock_tcp_handoff_opt(k, TCP_TIMESTAMP, &ts, sizeof(ts))))
			return err;
	}
	/* Bytes written in repair mode count as sent: the kernel resends what
	 * the peer has not acknowledged. */
	if ((err = sock_tcp_handoff_queue(k, TCP_SEND_QUEUE)))
		return err;
	for (int i = 0; i < 2; i++)
		if (ex->snd_len[i] && (err = sock_tcp_handoff_write(k, ex->snd_data[i], ex->snd_len[i])))
			return err;
	if ((err = sock_tcp_handoff_queue(k, TCP_RECV_QUEUE)))
		return err;
	for (const struct ring_buf *b = c->rxq_head; b; b = b->link)
		if (b->len && (err = sock_tcp_handoff_write(k, b->data, b->len)))
			return err;
	struct tcp_repair_window win = {
		.snd_wl1 = ex->snd_wl1,
		.snd_wnd = ex->snd_wnd,
		.max_window = ex->max_snd_wnd,
		.rcv_wnd = ex->rcv_wnd,
		.rcv_wup = ex->rcv_nxt,
	};
	if ((err = sock_tcp_handoff_opt(k, TCP_REPAIR_WINDOW, &win, sizeof(win))))
		return err;
	return sock_tcp_handoff_queue(k, TCP_NO_QUEUE);
}

/* A kernel socket built from ex in repair mode (still in it), or -errno
 * with nothing left open. */
static int sock_tcp_handoff_open(const struct sock_tcp_handoff_conn *c, const struct tcp_pcb_export *ex)
{
	int k = OS_CALL(socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (k < 0)
		return -errno;
	int err = sock_tcp_handoff_build(c, k, ex);
	if (err) {
		os_close_nocancel(k);
		return err;
	}
	return k;
}

static int sock_tcp_handoff_run(struct sock_tcp *s)
{
	struct tcp_pcb_export ex;
	int fd = s->obj.fd;

	if (s->mode != SOCK_TCP_ACTIVE || !s->pcb || s->obj.watchers || fd < 0 || s->released)
		return -EINVAL;
	if (tcp_pcb_export(s->pcb, &ex) != 0)
		return -EINVAL;
	int fd_flags = OS_CALL(fcntl, fd, F_GETFD, 0);
	int fl_flags = OS_CALL(fcntl, fd, F_GETFL, 0);
	struct sock_tcp_handoff_conn conn = { s->local_ip, s->remote_ip, s->local_port, s->remote_port,
					      s->rxq_head, s->rxq_bytes };
	int k = sock_tcp_handoff_open(&conn, &ex);
	if (k < 0) {
		if (k != -EPERM)
			vlog_debug("fd %d: handing the connection to the kernel failed (%s); it stays offloaded", fd,
				   strerror(-k));
		return k;
	}
	sock_tcp_handoff_copy_options(fd, k);
	/* What the old kernel socket never had (VMA_AVOID_SYS_CALLS_ON_TCP_FD,
	 * a child's placeholder) comes from our mirror. */
	sock_tcp_kernel_catch_up(s, k);
	/* From here the kernel owns it: our entry now sends its packets to
	 * the kernel (a listener's entry would still catch them), then repair
	 * mode ends (the kernel probes the peer's window), then the fd
	 * switches. */
	if (s->flow_held && s->flow.remote_port) {
		if (s->ctx->kernel_flows >= SOCK_TCP_HANDOFF_GC_AT)
			sock_offload_kernel_flows_gc_locked(s->ctx, sock_tcp_handoff_alive);
		if (sock_offload_flow_to_kernel_locked(s->ctx, s->if_slot, &s->flow) == 0)
			s->flow_held = false;
	}
	sock_tcp_flow_put_locked(s);
	sock_tcp_handoff_leave_repair(k);
	if (fl_flags != -1) {
		/* O_NONBLOCK as the application last set it: under
		 * VMA_AVOID_SYS_CALLS_ON_TCP_FD the old kernel socket never saw it. */
		fl_flags = (fl_flags & ~O_NONBLOCK) | (s->base.nonblocking ? O_NONBLOCK : 0);
		OS_CALL(fcntl, k, F_SETFL, (void *)(long)fl_flags);
	}
	if (OS_CALL(dup3, k, fd, fd_flags != -1 && (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		int err = -errno;
		os_close_nocancel(k);
		vlog_warn("fd %d: dup3 failed while handing the connection to the kernel (%s); it is lost", fd,
			  strerror(-err));
		sock_tcp_disconnect_locked(s, true);
		return err;
	}
	os_close_nocancel(k);
	/* The kernel connection holds the port now: a reserved one is not
	 * handed out again. */
	sock_tcp_port_release_locked(s, true);
	tcp_set_callbacks(s->pcb, NULL, NULL);
	tcp_pcb_forget(s->pcb);
	s->pcb = NULL;
	sock_tcp_rxq_clear_locked(s);
	sock_tcp_all_del_locked(s);
	s->mode = SOCK_TCP_KERNEL;
	s->os_only = true;
	s->ctx = NULL;
	__atomic_store_n(&s->obj.ops, &sock_tcp_kernel_ops, __ATOMIC_RELEASE);
	if (s->stats)
		s->stats->offloaded = 0;
	return 0;
}

/* Both handoffs run under the lane lock and make calls that are
 * cancellation points (the netlink send/recv of sock_tcp_handoff_alive,
 * the repair socket's connect and send): a pthread_cancel() acted on there
 * would unwind past the lock and leave the kernel socket half built, so
 * cancellation waits until the handoff is over. */
int sock_tcp_handoff_locked(struct sock_tcp *s)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
	int rc = sock_tcp_handoff_run(s);
	pthread_setcancelstate(state, NULL);
	return rc;
}

static int sock_tcp_handoff_orphan_run(struct sock_offload *ctx, struct sock_tcp_orphan *o)
{
	struct tcp_pcb_export ex;
	if (!o->pcb || tcp_pcb_export_closed(o->pcb, &ex) != 0)
		return -EINVAL;
	struct sock_tcp_handoff_conn conn = { 0 };
	tcp_pcb_get_addr(o->pcb, &conn.local_ip, &conn.local_port, &conn.remote_ip, &conn.remote_port);
	int k = sock_tcp_handoff_open(&conn, &ex);
	if (k < 0)
		return k;
	/* The peer's segments go to the kernel from here (the entry of a
	 * connection a listener's entry steered goes when the rings close). */
	if (o->flow_held && o->flow.remote_port &&
	    sock_offload_flow_to_kernel_locked(ctx, o->if_slot, &o->flow) == 0)
		o->flow_held = false;
	sock_tcp_handoff_leave_repair(k);
	/* Closed as the application closed ours: the kernel sends what is
	 * left, then its FIN, and finishes the connection after we exit. */
	os_close_nocancel(k);
	tcp_set_callbacks(o->pcb, NULL, NULL);
	tcp_pcb_forget(o->pcb);
	o->pcb = NULL;
	return 0;
}

int sock_tcp_handoff_orphan_locked(struct sock_offload *ctx, struct sock_tcp_orphan *o)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);   /* sock_tcp_handoff_locked says why */
	int rc = sock_tcp_handoff_orphan_run(ctx, o);
	pthread_setcancelstate(state, NULL);
	return rc;
}
