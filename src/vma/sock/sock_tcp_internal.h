/* Shared by the files of the offloaded TCP socket kind: sock_tcp.c
 * (lifecycle, engine callbacks, connect, close, exit), sock_tcp_listen.c
 * (listen/accept), sock_tcp_io.c (data path), sock_tcp_opt.c (options,
 * addresses, shutdown, ioctl), sock_tcp_dump.c. See docs/tcp_sockets.md.
 *
 * Every field an engine callback writes is guarded by the offload lock;
 * poll_ready reads the mirrors without it (a stale answer is corrected by
 * the notification that follows the change). */
#ifndef VMA_SOCK_SOCK_TCP_INTERNAL_H
#define VMA_SOCK_SOCK_TCP_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "sock/sock_base.h"
#include "sock/sock_migrate.h"
#include "sock/sock_offload.h"
#include "sock/sock_tcp.h"
#include "sock/sock_tcp_port.h"
#include "sock/sock_tstamp.h"
#include "stack/tcp.h"
#include "stats/stats.h"

/* Linux's defaults (net.ipv4.tcp_rmem[1]; the send side starts larger than
 * tcp_wmem[1] because the engine does not autotune it as Linux does). */
#define SOCK_TCP_RCVBUF_DEFAULT 131072u
#define SOCK_TCP_SNDBUF_DEFAULT 131072u
#define SOCK_TCP_NEIGH_TIMEOUT_MS 1000
/* How long exit progresses its closing connections itself (the peers' FINs,
 * and ours before the kernel takes over what is unacknowledged). */
#define SOCK_TCP_EXIT_GRACE_MS 200
/* Without TCP_REPAIR to hand them to the kernel, how long exit waits
 * for its own FINs to be acknowledged: this many
 * RTOs, capped. A lone FIN is resent as Linux does, the tail loss probe
 * one RTO after it (the PTO of a single segment is the delayed-ACK bound,
 * 200 ms), then at the RTO and at twice it: three resends take 4 RTOs, the
 * fifth waits for the ACK of the last. */
#define SOCK_TCP_EXIT_FIN_RTOS 5
#define SOCK_TCP_EXIT_FIN_MAX_MS 1500
/* An orphan (closed by the app, finishing in the background) that makes
 * no progress for this long is reset, like Linux's tcp_fin_timeout. */
#define SOCK_TCP_ORPHAN_TIMEOUT_MS 60000
/* A segment of at most this many bytes is copied into the room left after
 * the last queued one instead of keeping its own frame (as Linux's
 * tcp_try_coalesce): a peer sending tiny segments to an application that
 * reads slowly then pins a few frames, not one per byte. Bigger segments
 * stay where the NIC wrote them (zero copy) unless the queue already holds
 * more frame memory than the receive buffer. */
#define SOCK_TCP_COALESCE_MAX 512u

enum sock_tcp_mode {
	SOCK_TCP_KERNEL,      /* not decided yet, or the kernel for life */
	SOCK_TCP_ACTIVE,      /* offloaded connection (connect or accepted) */
	SOCK_TCP_LISTENER,    /* offloaded listener */
};

struct sock_tcp {
	union {                      /* first; base.obj is obj */
		struct sock_obj obj;
		struct sock_base base;
	};
	struct sock_offload *ctx;
	int ring_logic;              /* SO_VMA_RING_ALLOC_LOGIC; -1: the process's logic */
	uint32_t ring_user_id;       /* its user id (logic 11) */
	/* Who reads the connection (VMA_RING_MIGRATION_RATIO_RX): it moves to
	 * the lane of a thread (core) that alone made a window of receive
	 * calls (sock_tcp_move.c). */
	struct sock_mig_window mig;
	struct stats_socket *stats;
	enum sock_tcp_mode mode;
	bool released;
	bool os_only;                /* decided: kernel for life */

	struct tcp_pcb *pcb;         /* NULL before offload and once the engine freed it */
	int if_slot;
	struct ring_flow flow;       /* steering entry held (flow_held) */
	bool flow_held;
	/* An accepted connection whose flow is a reference on its listener's
	 * 3-tuple (no entry of its own): pinned to a 5-tuple before anything
	 * could send its segments elsewhere (sock_tcp_pin_listener_flows_locked). */
	bool flow_by_listener;
	/* flow is the 5-tuple of a connection a share group's 3-tuple brought
	 * to this process: while the group's members stay, its hash brings
	 * the same segments here, so the entry only guards against their
	 * change, which a TIME_WAIT need not survive (sock_tcp_close.c). */
	bool flow_share;
	/* The wait channel flow is steered to (sock_tcp_chan_claim_locked);
	 * NULL: the lane's ring. */
	struct sock_offload_chan *chan;
	unsigned chan_gen;           /* chan's gen when it moved there */

	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;

	/* Connection state as Linux's socket shows it. */
	bool connecting;             /* SYN sent, not established yet */
	bool established;            /* reached ESTABLISHED once */
	bool shut_rcv;               /* peer FIN, shutdown(RD), reset */
	bool shut_send;              /* shutdown(WR), close, reset */
	bool peer_fin;
	bool connect_reported;       /* connect() returned 0 once: the next says EISCONN */
	bool failed_reported;        /* connect() returned the failure: the next connect retries */
	uint32_t listen_slots;       /* listener: interfaces with its 3-tuple flow */
	uint32_t listen_want;        /* listener: interfaces it should be steered on */
	unsigned backlog;
	/* fork (docs/process_model.md): dormant = this process stopped steering
	 * the listener at a fork and rejoins the port's share group at its next
	 * accept or poll; inherited = the parent's listener in a child, adopted
	 * into the child's context then; share = steered as a share group. */
	bool fork_dormant;
	bool inherited;
	bool share;
	bool reuseport;              /* SO_REUSEPORT when it listened: its pcb joins the address's group */
	/* listener: this process accepted an offloaded connection from it (a
	 * fork-per-connection master): a fork keeps steering it here. */
	bool accepted_here;
	struct ring_flow listen_flow; /* listener: the 3-tuple (local_ip may be INADDR_ANY) */
	/* listener: 5-tuples of half-open children steered on their own (a
	 * fork took the listener's 3-tuple away while their handshake was in
	 * flight, or a share group's SYN: sock_tcp_child_born_cb); each is
	 * the child's own once it is accepted. */
	struct sock_tcp_embryo {
		struct ring_flow flow;
		int if_slot;
	} *embryos;
	unsigned nembryos, embryos_cap;
	bool reset;                  /* ended by an error: pcb gone */
	int err;                     /* pending SO_ERROR / once from recv, 0 none */

	/* In-order bytes from the engine: single buffers linked by ->link,
	 * each with data/len advanced as the app reads. */
	struct ring_buf *rxq_head, *rxq_tail;
	uint32_t rxq_bytes;
	uint32_t rxq_frames;         /* buffers on the queue (tcp_rcv_held_set) */

	/* Send space mirrors (refreshed under lock). */
	uint32_t snd_free, snd_used;
	bool writeable;              /* poll's EPOLLOUT (sk_stream_is_writeable, TCP_NOTSENT_LOWAT) */
	bool snd_room;               /* a send may queue bytes now (free space, below TCP_NOTSENT_LOWAT) */

	/* Listener: established children waiting for accept(). */
	struct sock_tcp *acceptq_head, *acceptq_tail;
	unsigned acceptq_len;
	struct sock_tcp *next_child;
	struct sock_tcp *listener;   /* child: its listener until accepted */

	/* Every socket holding a pcb is on the ctx-wide list (exit hook). */
	struct sock_tcp *all_prev, *all_next;
	struct sock_offload *all_ctx;   /* whose tcp_all list it is on */
	bool on_all;

	/* Options of TCP's own the offloaded path needs (the kernel socket
	 * keeps them too); the SOL_SOCKET ones are the base's. */
	bool linger_on;
	int linger_s;
	uint32_t rcvbuf, sndbuf;         /* 0: defaults */
	bool nodelay, quickack, keepalive;
	bool cork;                       /* TCP_CORK */
	bool push_pending;               /* TCP_NODELAY just set: push what cork and Nagle hold */
	bool keep_params_set;
	uint32_t keep_idle_s, keep_intvl_s, keep_cnt;
	uint32_t maxseg, syncnt;
	uint32_t notsent_lowat;          /* TCP_NOTSENT_LOWAT as set; 0: net.ipv4.tcp_notsent_lowat */
	bool cc_set;                     /* TCP_CONGESTION named one of ours: cc_algo */
	uint8_t cc_algo;                 /* enum tcp_cc_algo */
	uint32_t user_timeout_ms;        /* TCP_USER_TIMEOUT as set; 0: none */
	bool user_bound;
	/* The application bound the kernel socket or set something on it
	 * (options, ioctl, fcntl) before connect(): connect keeps that socket
	 * rather than swapping in a reserved port (sock_tcp_port.h). */
	bool kernel_configured;
	bool cloexec;                    /* SOCK_CLOEXEC at socket() */
	/* A reserved port dup3()ed under the fd (port.fd >= 0): it goes back
	 * to the lane's idle ports at close. */
	struct sock_tcp_port port;
	/* SOCK_TCP_OPT_* options whose mirror holds exactly what Linux would
	 * report: set by the application (on this socket or, for a child, its
	 * listener), or a default equal to a fresh kernel socket's. */
	uint16_t opts_known;
	/* Of those, the ones the kernel socket under the fd does not have: set
	 * without the kernel (VMA_AVOID_SYS_CALLS_ON_TCP_FD), or inherited by
	 * an accepted child, whose kernel socket is a placeholder. getsockopt
	 * answers them from the mirror; a kernel socket that takes the
	 * connection or its traffic over gets them (sock_tcp_kernel_catch_up). */
	uint16_t opts_kernel_lacks;
	/* The kernel socket's F_GETFL less O_NONBLOCK, once read (-1 before):
	 * VMA_AVOID_SYS_CALLS_ON_TCP_FD answers F_GETFL from it. */
	int kernel_fl;
	/* The base's SO_TIMESTAMPING: the kernel socket of an offloaded
	 * connection listens, so it holds these flags less OPT_ID (which Linux
	 * refuses on a listener); getsockopt answers from the base. */
	/* Wake-ups: iomux_notify and the base's sleepers, run after the unlock. */
	bool wake_pending;
	struct sock_offload_wake wake_node;   /* queued while wake_pending */
	uint32_t notify_bits;
	/* A listener: connections queued since the last wake (how many
	 * EPOLLEXCLUSIVE sets to wake). */
	unsigned notify_edges;
	/* The Extra API (src/vma/extra/), guarded by the lane lock: the
	 * receive callback's state (NULL until one is registered); the base's
	 * xt is SocketXtreme's node (and the frames lent to the application:
	 * a completion's buffers, recvfrom_zcopy, VMA_PACKET_HOLD). */
	struct extra_tcp_cb *xcb;
};

/* Receive frames the connection holds (its share of the ring, docs/
 * security.md): queued, staged for the receive callback, lent out. */
static inline uint32_t sock_tcp_frames_held(const struct sock_tcp *s)
{
	return s->rxq_frames + s->base.xt.lent + (s->xcb ? s->xcb->frames : 0);
}

/* The options VMA_AVOID_SYS_CALLS_ON_TCP_FD serves without the kernel:
 * plain values the offloaded path implements and Linux reports back as set. */
#define SOCK_TCP_OPT_NODELAY   0x01u
#define SOCK_TCP_OPT_QUICKACK  0x02u
#define SOCK_TCP_OPT_KEEPALIVE 0x04u
#define SOCK_TCP_OPT_KEEPIDLE  0x08u
#define SOCK_TCP_OPT_KEEPINTVL 0x10u
#define SOCK_TCP_OPT_KEEPCNT   0x20u
#define SOCK_TCP_OPT_NOTSENT_LOWAT 0x40u
#define SOCK_TCP_OPT_CORK      0x80u

static inline struct sock_tcp *sock_tcp_of(struct sock_obj *obj)
{
	return (struct sock_tcp *)obj;
}

/* The context when this socket's calls are served offloaded, else NULL
 * (the kernel socket answers). */
static inline struct sock_offload *sock_tcp_ctx(const struct sock_tcp *s)
{
	struct sock_offload *ctx = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!sock_offload_usable(ctx) || s->mode == SOCK_TCP_KERNEL || s->released, 0))
		return NULL;
	return ctx;
}

/* Locks the lane of connection s, starting from ctx (the lane the caller
 * saw), and returns it. A connection may move to another lane while no
 * lock is held (sock_tcp_move.c); a move holds both lanes' locks while it
 * changes s->ctx, so once a lane is locked and s->ctx still names it, the
 * connection stays there until the unlock; if it moved we follow. The
 * caller unlocks the lane returned. */
static inline struct sock_offload *sock_tcp_lock(struct sock_tcp *s, struct sock_offload *ctx)
{
	for (;;) {
		sock_offload_lock(ctx);
		struct sock_offload *now = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
		if (__builtin_expect(now == ctx || now == NULL, 1))
			return ctx;
		sock_offload_unlock(ctx);
		ctx = now;
	}
}

extern const struct sock_ops sock_tcp_kernel_ops;   /* undecided / kernel for life */
extern const struct sock_ops sock_tcp_offload_ops;  /* connection or listener offloaded */

struct sockaddr_in;
/* Copies an IPv4 address out as getsockname does. */
void sock_tcp_put_addr(struct sockaddr *addr, socklen_t *len, uint32_t ip, uint16_t port);

/* Lock held: rings the doorbell for frames the engine queued. */
void sock_tcp_tx_kick_locked(struct sock_tcp *s);
/* Lock held: queue ev for iomux_notify and wake sleepers at the unlock. */
void sock_tcp_notify_locked(struct sock_tcp *s, uint32_t ev);
/* Lock held: refreshes the send-space mirrors; notifies on a rise. */
void sock_tcp_snd_refresh_locked(struct sock_tcp *s);
/* Lock held: pcb callbacks, options and interface for a fresh pcb. */
void sock_tcp_pcb_setup_locked(struct sock_tcp *s, struct tcp_pcb *pcb);
void sock_tcp_apply_options_locked(struct sock_tcp *s);
/* Lock held: every connection (live or orphan) of ctx that its listener's
 * 3-tuple steers, of the listener flow lflow (NULL: of any listener), gets
 * a 5-tuple entry of its own. Before a fork (a share group may then spread
 * the listener's flows over processes by hash, and a handed-off
 * connection needs its own entry) and when the listener closes (another
 * socket may then take the port). */
void sock_tcp_pin_listener_flows_locked(struct sock_offload *ctx, const struct ring_flow *lflow);
/* Ends, silently, the TIME_WAITs of connections closed on local ip:port
 * (ip INADDR_ANY: any): a shared listener's copy closes in this process
 * (docs/process_model.md, "Reload"). */
void sock_tcp_end_time_waits_locked(struct sock_offload *ctx, uint32_t local_ip, uint16_t local_port);
/* Lock held: list of live sockets holding a pcb. */
void sock_tcp_all_add_locked(struct sock_tcp *s);
void sock_tcp_all_del_locked(struct sock_tcp *s);
/* Lock held: frees queued RX buffers. */
void sock_tcp_rxq_clear_locked(struct sock_tcp *s);
/* Lock held: buf (one buffer, len > 0) joins the receive queue (or the
 * last queued frame, when small); rxq_bytes is the caller's. */
void sock_tcp_rxq_append_locked(struct sock_tcp *s, struct ring_buf *buf);
/* Lock held: hands the connection's pcb to the background (FIN after the
 * queued data) or resets it; flows follow the pcb. */
void sock_tcp_disconnect_locked(struct sock_tcp *s, bool abort);

/* Sleeps on the rings' wait fds (+ kernel fd when kernel_events != 0) and
 * the wake eventfd until ready(s) holds (checked under lock before
 * sleeping), deadline (0 = none; then -1 EAGAIN) or a signal since the
 * caller's mark (sock_base_sleep_begin; NULL: now): 0 when a
 * handler libvma counted ran (the caller's os_signal_interrupts
 * decides), else -1 EINTR unless every handler restarts. Returns 0 to retry. */
int sock_tcp_sleep(struct sock_tcp *s, struct sock_offload *ctx, uint64_t deadline_ms, short kernel_events,
		   bool (*ready)(const struct sock_tcp *s), const struct os_sig_mark *since);

/* A blocking call found nothing: may it poll the rings again (VMA_RX_POLL
 * loops, a busy-polling permit, deadline not passed) instead of sleeping?
 * *spins counts the polls since the last sleep (reset it after one). The
 * handshake's segments come one round trip apart, so connect and accept
 * poll like recv instead of sleeping at once (one wake-up each saved). */
bool sock_tcp_spin_again(unsigned *spins, uint64_t deadline_ms);

/* An accepted connection c of listener l, not published yet: under a
 * lane per thread or core it moves to the accepting thread's (core's)
 * lane (sock_tcp_move.c). Takes the locks itself; c stays where it was
 * when it cannot move. */
void sock_tcp_move_accepted(struct sock_tcp *l, struct sock_tcp *c);
/* The end of a clean window of receive calls (all from one thread, or
 * core): the connection moves to that caller's lane if it is not there.
 * No lock held. */
void sock_tcp_migrate_window_end(struct sock_tcp *s);
static inline void sock_tcp_migrate_note(struct sock_tcp *s)
{
	bool mixed;
	if (__builtin_expect(sock_mig_window_note(&s->mig, &mixed), 0) && !mixed)
		sock_tcp_migrate_window_end(s);
}

/* Child sockets (sock_tcp_listen.c). */
int sock_tcp_accept_cb(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child);
bool sock_tcp_admit_cb(void *arg, const struct stack_netif *nif, uint32_t remote_ip, uint16_t remote_port);
void sock_tcp_child_born_cb(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child);
void sock_tcp_child_lost_cb(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child);
void sock_tcp_child_free_locked(struct sock_tcp *child);
int sock_tcp_op_listen(struct sock_obj *obj, int backlog);
int sock_tcp_op_accept4(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len, int flags);
/* SocketXtreme's auto-accept: the first offloaded connection waiting on
 * listener l gets an fd as accept4(flags) gives it, its peer in *peer.
 * -1 with EAGAIN when none waits, EINVAL when l is no offloaded listener. */
int sock_tcp_accept_next(struct sock_tcp *l, int flags, struct sockaddr_in *peer);
/* Lock held: drops the unaccepted children and the steering; with
 * pin_connections the accepted ones its 3-tuple steers get their own. */
void sock_tcp_listener_close_locked(struct sock_tcp *l, bool pin_connections);
/* fork: a listener stops being steered here (parent, lock held); a child's
 * copy of the parent's listener drops the parent's state. */
void sock_tcp_listen_fork_release_locked(struct sock_tcp *l);
void sock_tcp_listen_forget_parent(struct sock_tcp *l);
/* Connections the app closed that still finish their handshake, on their
 * lane's list (ctx->tcp_orphans). Guarded by the lane's lock. */
struct sock_tcp_orphan {
	struct sock_tcp_orphan *next;
	struct tcp_pcb *pcb;         /* NULL once the engine freed it (err) */
	int if_slot;
	struct ring_flow flow;
	bool flow_held;
	bool flow_by_listener;       /* as sock_tcp's */
	bool flow_share;             /* as sock_tcp's */
	uint64_t deadline_ms;
};

/* fork: hands an established connection that no epoll set watches to the
 * kernel (TCP_REPAIR) so a child can use it (sock_tcp_handoff.c). Lock
 * held. 0, or -errno with the connection left offloaded. */
int sock_tcp_handoff_locked(struct sock_tcp *s);
/* The calling thread waits for s: its connection's packets go to the
 * thread's wait channel from now on (sock_offload.h). Lock held. */
void sock_tcp_chan_claim_locked(struct sock_offload *ctx, struct sock_tcp *s);
/* Whether s would move to the calling thread's channel: the look before
 * taking the lock. */
bool sock_tcp_chan_claim_due(struct sock_offload *ctx, const struct sock_tcp *s);
/* At exit: a connection the application closed whose FIN is not
 * acknowledged yet goes to a kernel socket the same way, which is then
 * closed, so the kernel finishes it after the process is gone, as it
 * finishes its own closed sockets. 0, or -errno with the orphan unchanged
 * (-EPERM without CAP_NET_ADMIN). */
int sock_tcp_handoff_orphan_locked(struct sock_offload *ctx, struct sock_tcp_orphan *o);
/* An accept or poll on a listener a fork left dormant or inherited: joins
 * this process's context and the port's share group. */
void sock_tcp_fork_join(struct sock_tcp *s);
/* Steers every half-open child of every listener of ctx by its own
 * 5-tuple, before a fork may take the listeners' 3-tuples away. */
void sock_tcp_pin_embryos_locked(struct sock_offload *ctx);
void sock_tcp_embryos_put_locked(struct sock_tcp *l);
static inline void sock_tcp_fork_check(struct sock_tcp *s)
{
	if (__builtin_expect(s->fork_dormant || s->inherited, 0))
		sock_tcp_fork_join(s);
}
struct sock_tcp *sock_tcp_alloc(int fd, int domain, int type, int protocol);
/* Reserved local ports (sock_tcp.c). Lock held: s's port goes back to its
 * lane's idle ports (or is closed when they are full, or when handed is
 * set: a fork handoff gave its connection to a kernel socket). */
void sock_tcp_port_release_locked(struct sock_tcp *s, bool handed);
/* A forked child: the parent's idle ports and the ones under its
 * connections are the parent's; the child's copies of them close. */
void sock_tcp_ports_after_fork_child(struct sock_offload *old);
/* Flow helpers. */
void sock_tcp_flow_put_locked(struct sock_tcp *s);

/* Data path (sock_tcp_io.c). The ops: recvmsg for every receive call,
 * sendmsg for every send call (SOCK_OP_KERNEL when the socket is not an
 * offloaded connection); sendfile and sendfile64. */
ssize_t sock_tcp_op_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags);
ssize_t sock_tcp_op_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags);
ssize_t sock_tcp_op_sendfile(struct sock_obj *obj, int in_fd, off_t *offset, size_t count);
ssize_t sock_tcp_op_sendfile64(struct sock_obj *obj, int in_fd, off64_t *offset, size_t count);
/* recvfrom and send for libvma's own callers (splice, the Extra API): the
 * kernel socket's when the socket is not an offloaded connection. */
ssize_t sock_tcp_recvfrom(struct sock_tcp *s, void *buf, size_t len, int flags, struct sockaddr *from,
			  socklen_t *fromlen);
ssize_t sock_tcp_send(struct sock_tcp *s, const void *buf, size_t len, int flags);
/* Sends all len bytes (flags as send()), waiting for space even on an
 * O_NONBLOCK socket; short only when interrupted, timed out (SO_SNDTIMEO)
 * or the connection failed. For splice, which took the bytes from a pipe. */
ssize_t sock_tcp_send_all(struct sock_tcp *s, const void *buf, size_t len, int flags);
/* Send space free right now; 0 while connecting; -1 when a send would fail
 * at once (no connection, send side shut, not offloaded). */
long sock_tcp_send_room(struct sock_tcp *s);
/* splice() with this connection at one end (sock_tcp_splice.c). */
ssize_t sock_tcp_op_splice(struct sock_obj *obj, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			   unsigned int flags);
/* Waits for a connect in progress (blocking connect, blocking send/recv
 * on a connecting socket). 0 when established, -1 with errno. */
int sock_tcp_wait_connected(struct sock_tcp *s, struct sock_offload *ctx, int timeo_ms);

/* Options, addresses, shutdown, ioctl (sock_tcp_opt.c). */
int sock_tcp_op_setsockopt(struct sock_obj *obj, int level, int name, const void *val, socklen_t len);
int sock_tcp_op_getsockopt(struct sock_obj *obj, int level, int name, void *val, socklen_t *len);
int sock_tcp_op_fcntl(struct sock_obj *obj, int cmd, void *arg);
int sock_tcp_op_ioctl(struct sock_obj *obj, unsigned long req, void *arg);
int sock_tcp_op_getsockname(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len);
int sock_tcp_op_getpeername(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len);
int sock_tcp_op_shutdown(struct sock_obj *obj, int how);
/* Gives kernel socket kfd the options s holds that its own kernel socket
 * lacks (opts_kernel_lacks): a kernel socket taking the connection over
 * (fork handoff), a connection the kernel accepted on s's port, or s's
 * kernel socket itself when s falls back to the kernel path. */
void sock_tcp_kernel_catch_up(const struct sock_tcp *s, int kfd);
/* s, offloaded or undecided, met a call or flag our stack does not
 * implement (what, e.g. "send(MSG_OOB)"): VMA_EXCEPTION_HANDLING decides.
 * false when the call must fail with EOPNOTSUPP (errno set). */
bool sock_tcp_unsupported_call(struct sock_tcp *s, const char *what);
void sock_tcp_op_dump(struct sock_obj *obj, int log_level);

#endif
