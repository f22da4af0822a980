/* Shared by sock_udp.c (lifecycle, addresses, options) and sock_udp_io.c
 * (the data path). */
#ifndef VMA_SOCK_SOCK_UDP_INTERNAL_H
#define VMA_SOCK_SOCK_UDP_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "sock/sock_base.h"
#include "sock/sock_migrate.h"
#include "sock/sock_offload.h"
#include "sock/sock_tstamp.h"
#include "sock/sock_udp.h"
#include "sock/sock_udp_queue.h"
#include "stats/stats.h"
#include "mellanox/vma_extra.h"

#define SOCK_UDP_QUEUE_ENTRIES 4096
#define SOCK_UDP_MAX_GROUPS 20       /* Linux's default IP_MAX_MEMBERSHIPS */
#define SOCK_UDP_HEAPS 4             /* pools of copies a socket may hold at once */

struct sock_udp_group {
	uint32_t group, source;      /* source 0: any-source membership */
	int if_slot;                 /* -1: the kernel alone serves it */
	bool active;                 /* pcb joined and flow attached */
};

/* The last destination's decision, valid while net_generation holds and
 * the socket is still in lane `lane` (if_slot is an index of that lane). */
struct sock_udp_route {
	bool valid;
	const struct sock_offload *lane;
	bool via_os;
	uint32_t dst;
	uint16_t port;
	uint64_t generation;
	int if_slot;
	uint32_t src;
	uint8_t mac[6];
	bool multicast;
};

struct sock_udp_stray;
struct extra_udp_holds;

struct sock_udp {
	union {                      /* first; base.obj is obj */
		struct sock_obj obj;
		struct sock_base base;
	};
	/* The lane. Changed only by a move (sock_udp_migrate.c), which holds
	 * the old and the new lane's lock: whoever holds a lane's lock and
	 * finds ctx pointing at it keeps the socket there until it unlocks
	 * (sock_udp_lock). Read atomically. */
	struct sock_offload *ctx;
	struct stats_socket *stats;
	bool released;

	/* Mirror of the kernel socket's addresses (network order). */
	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;
	bool connected;
	bool os_only;                /* udp_connect rule said os: everything kernel */
	/* fork (docs/process_model.md): dormant = this process stopped steering
	 * the port at a fork and rejoins its share group at the next read;
	 * inherited = the parent's socket in a child, adopted into the child's
	 * context at the first read; share = the port's steering is a share
	 * group (several processes read the same socket). */
	bool fork_dormant;
	bool inherited;
	bool share;
	/* SO_REUSEPORT when it was bound: its pcb joins the port's reuseport
	 * group in its lane's stack (datagrams spread over the group's
	 * sockets by flow, as Linux spreads them). */
	bool reuseport;

	/* RX offload: pcb and 3-tuple flows on the interfaces in flow_slots. */
	struct stack_udp_pcb *pcb;
	uint32_t flow_slots;
	uint32_t flow_want;          /* interfaces the 3-tuple should be steered on */
	struct ring_flow flow;
	struct sock_udp_group groups[SOCK_UDP_MAX_GROUPS];
	unsigned ngroups;
	struct sock_udp_queue queue;
	uint64_t rcvbuf;             /* kernel's SO_RCVBUF */

	/* Options of UDP's own the data path needs (the kernel keeps them
	 * too); the SOL_SOCKET ones are the base's. */
	bool broadcast;
	int tos, ttl, mc_ttl;        /* ttl -1: default */
	bool mc_loop;
	uint32_t mc_if_addr;
	int mc_ifindex;
	bool pktinfo, recvtos, recvttl;

	unsigned os_poll_count;
	bool wake_pending;
	struct sock_offload_wake wake_node;   /* queued while wake_pending */
	/* Datagrams queued since the last wake (EPOLLEXCLUSIVE sets to wake). */
	unsigned wake_edges;
	struct sock_udp_route route;

	/* ---- moving between lanes (VMA_RING_MIGRATION_RATIO_RX, sock_udp_migrate.c) ---- */
	int ring_logic;              /* SO_VMA_RING_ALLOC_LOGIC; -1: the process's logic */
	uint32_t ring_user_id;       /* its user id (logic 11) */
	struct sock_mig_window mig;
	/* The old lane's pcb after a move, kept bound for a grace period so a
	 * datagram the XDP program had already sent to the old ring still
	 * reaches the socket (as a stray). Guarded by stray_ctx's lock. */
	struct stack_udp_pcb *stray_pcb;
	struct sock_offload *stray_ctx;
	uint64_t stray_since_ms;
	bool stray_wake_pending;
	struct sock_offload_wake stray_wake_node;
	/* Strays copied to the heap by the old lane, waiting for a reader of
	 * the new one: a lock-free LIFO (the two lanes share no lock). */
	struct sock_udp_stray *strays;
	/* Buffer pools the socket owns: copies of datagrams taken out of an
	 * old lane's frames (and of strays). Guarded by the lane lock, like the
	 * queue whose entries use them; freed once none of their buffers is
	 * queued. A move needs a free slot. */
	struct ring_buf_pool *heaps[SOCK_UDP_HEAPS];

	/* ---- the Extra API (src/vma/extra/extra_udp.c), guarded by the lane lock ----
	 * While recv_cb is set, delivery stages datagrams in cb_stage instead
	 * of the queue, and a receive or poll call of the application shows
	 * them to the callback with no lock held (extra_udp_run_callbacks).
	 * holds: the datagrams the application keeps (zero-copy receive,
	 * VMA_PACKET_HOLD) until free_packets. Either keeps the socket in its
	 * lane: their frames belong to the lane's rings (no move). */
	vma_recv_callback_t recv_cb;
	void *recv_cb_context;
	struct sock_udp_queue *cb_stage;
	struct extra_udp_holds *holds;
};

/* Sets s->flow's peer for the next attach: the connected peer under
 * VMA_UDP_3T_RULES=0 (a 5-tuple), none otherwise (a 3-tuple). sock_udp.c */
void sock_udp_flow_choose_tuple(struct sock_udp *s);
/* Empty polls a blocking receive makes before sleeping: VMA_RX_POLL once
 * the socket's flow or a group is steered to the ring, VMA_RX_POLL_INIT
 * before (sock_udp_io.c). */
int sock_udp_rx_poll_budget(const struct sock_udp *s);
/* The key s->flow is steered with on interface slot of ctx. */
struct ring_flow sock_udp_slot_flow(const struct sock_udp *s, const struct sock_offload *ctx, unsigned slot);

static inline struct sock_udp *sock_udp_of(struct sock_obj *obj)
{
	return (struct sock_udp *)obj;
}

/* The context when this socket's calls may use it, else NULL (kernel path).
 * Unlocked: the socket may move to another lane right after; whatever
 * touches the socket's lane state locks with sock_udp_lock instead. */
static inline struct sock_offload *sock_udp_ctx(const struct sock_udp *s)
{
	struct sock_offload *ctx = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!sock_offload_usable(ctx) || s->os_only || s->released, 0))
		return NULL;
	return ctx;
}

/* Locks the lane the socket is in and returns it, or NULL when the lane is
 * not usable (exit, a forked child's copy). A move holds both lanes' locks
 * while it changes s->ctx, so once ctx is locked and s->ctx still names it,
 * the socket stays in it until the unlock; if it moved meanwhile we follow. */
static inline struct sock_offload *sock_udp_lock_lane(struct sock_udp *s)
{
	for (;;) {
		struct sock_offload *ctx = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
		if (__builtin_expect(!sock_offload_usable(ctx), 0))
			return NULL;
		sock_offload_lock(ctx);
		if (__builtin_expect(__atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE) == ctx, 1))
			return ctx;
		sock_offload_unlock(ctx);
	}
}

/* The same, for the offloaded path: NULL also when the socket is on the
 * kernel path (a rule, released). */
static inline struct sock_offload *sock_udp_lock(struct sock_udp *s)
{
	struct sock_offload *ctx = sock_udp_lock_lane(s);
	if (__builtin_expect(ctx && (s->os_only || s->released), 0)) {
		sock_offload_unlock(ctx);
		return NULL;
	}
	return ctx;
}

/* sock_udp_lock without waiting, for a receive that polls: NULL with
 * *busy set when another thread holds the lane (it is polling the rings
 * for every socket of the lane, ours included), NULL with *busy clear
 * when sock_udp_lock would return NULL. */
static inline struct sock_offload *sock_udp_trylock(struct sock_udp *s, bool *busy)
{
	*busy = false;
	struct sock_offload *ctx = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	if (__builtin_expect(!sock_offload_usable(ctx), 0))
		return NULL;
	if (!sock_offload_trylock(ctx)) {
		*busy = true;
		return NULL;
	}
	if (__builtin_expect(__atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE) != ctx || s->os_only || s->released, 0)) {
		sock_offload_unlock(ctx);
		return sock_udp_lock(s);   /* moved or gone meanwhile: the full look */
	}
	return ctx;
}

/* A read on a socket a fork left dormant or inherited: joins this
 * process's context and the port's share group. Cheap when neither. */
void sock_udp_fork_join(struct sock_udp *s);
static inline void sock_udp_fork_check(struct sock_udp *s)
{
	if (__builtin_expect(s->fork_dormant || s->inherited, 0))
		sock_udp_fork_join(s);
}

/* After the kernel socket's local address may have changed (bind, connect,
 * implicit bind): mirrors it into the pcb and the flows. */
void sock_udp_sync_local(struct sock_udp *s);
/* First send on an unbound socket: binds the kernel socket to INADDR_ANY:0.
 * Returns 0 or -1 with errno. */
int sock_udp_autobind(struct sock_udp *s);
/* The pcb's receive callback (lock held). */
void sock_udp_deliver(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
		      const struct stack_udp_rx_info *info);

/* ---- pcb and steering helpers shared with the move (sock_udp.c) ---- */
/* A pcb in ctx's stack bound (and connected) like the socket, delivering to
 * it; NULL when the stack refuses. Lock of ctx held. */
struct stack_udp_pcb *sock_udp_pcb_make_locked(struct sock_udp *s, struct sock_offload *ctx);
/* Steers the 3-tuple on ctx's interfaces in want (a mask of ctx's slots);
 * returns the slots attached. Lock of ctx held. */
uint32_t sock_udp_flows_attach_in_locked(struct sock_udp *s, struct sock_offload *ctx, uint32_t want,
					 struct sock_offload *from);
/* Stops steering the 3-tuple on ctx's slots. Lock of ctx held. */
void sock_udp_flows_detach_in_locked(struct sock_udp *s, struct sock_offload *ctx, uint32_t slots);
/* Steers group g on ctx's slot (when no other source of the same group of
 * this socket already does). 0 or a negative errno. Lock of ctx held. */
int sock_udp_group_flow_get_locked(struct sock_udp *s, struct sock_offload *ctx, int slot,
				   const struct sock_udp_group *g);
void sock_udp_group_flow_put_locked(struct sock_udp *s, struct sock_offload *ctx, int slot,
				    const struct sock_udp_group *g);
/* The pcb's wake-up (deferred to the unlock): epoll sets and sleepers. */
void sock_udp_wake(void *arg);

/* ---- moving between lanes (sock_udp_migrate.c) ---- */
/* Sets s->mig.ratio from the socket's logic (its own, or
 * VMA_RING_ALLOCATION_LOGIC_RX) and VMA_RING_MIGRATION_RATIO_RX (socket
 * creation). */
void sock_udp_migrate_init(struct sock_udp *s);
/* SO_VMA_RING_ALLOC_LOGIC: the socket takes logic (user_id for 11) as its
 * own and moves now to the lane that logic gives the calling thread. 0, or
 * -errno: -EBUSY (its previous move's grace is not over, or a move is under
 * way), -EADDRINUSE (another socket of the process shares its port), what
 * the move met (steering refused, no memory). The logic stays set either
 * way (it decides later moves). No lock held. */
int sock_udp_set_ring_logic(struct sock_udp *s, int logic, uint32_t user_id);
/* Every receive call: counts it in the socket's window; at the end of a
 * window whose every call came from one other thread (core), moves the
 * socket to that thread's (core's) lane. At the end of any window, drops
 * the old lane's pcb of the last move once its grace is over (so readers
 * stop polling that lane). No lock held. */
void sock_udp_migrate_window_end(struct sock_udp *s, bool mixed);
static inline void sock_udp_migrate_note(struct sock_udp *s)
{
	bool mixed;
	if (__builtin_expect(!sock_mig_window_note(&s->mig, &mixed), 1))
		return;
	if (!mixed || __atomic_load_n(&s->stray_ctx, __ATOMIC_RELAXED))
		sock_udp_migrate_window_end(s, mixed);
}
/* Lock held: moves the strays a previous lane copied into the queue. */
void sock_udp_strays_take_locked(struct sock_udp *s);
static inline bool sock_udp_has_strays(const struct sock_udp *s)
{
	return __atomic_load_n(&s->strays, __ATOMIC_RELAXED) != NULL;
}
/* The lane the socket left less than a grace period ago while its old pcb
 * still catches strays there, else NULL. Whoever polls or sleeps for the
 * socket polls and arms that lane's rings too, so strays arrive even when
 * no other thread polls the old lane (VMA_PROGRESS_ENGINE_INTERVAL=0). */
static inline struct sock_offload *sock_udp_stray_lane(const struct sock_udp *s)
{
	struct sock_offload *old = __atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE);
	return __builtin_expect(old != NULL, 0) && sock_offload_usable(old) ? old : NULL;
}
/* release (no lock held): drops the old lane's pcb of a recent move and
 * the strays nobody read. */
void sock_udp_migrate_release(struct sock_udp *s);
/* Lane lock held (or the socket unreachable): frees the socket's own pools
 * none of whose buffers is queued any more. */
void sock_udp_heaps_reap_locked(struct sock_udp *s);
/* In a forked child: forgets the lanes' state (the parent's), frees what
 * is the socket's own. */
void sock_udp_migrate_after_fork_child(struct sock_udp *s);

/* The data path (sock_udp_io.c). The ops: recvmsg for every receive call
 * (SOCK_OP_KERNEL on the kernel path), sendmsg for every send call (the
 * kernel path counted in the socket's statistics), sendmmsg with one
 * doorbell per batch. */
ssize_t sock_udp_op_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags);
ssize_t sock_udp_op_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags);
int sock_udp_op_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags);
/* recvmsg for libvma's own callers (the Extra API): the kernel socket's
 * when the socket is on the kernel path. */
ssize_t sock_udp_recvmsg_common(struct sock_udp *s, struct msghdr *msg, int flags);
/* A send; flush false leaves the doorbell to the caller (a batch). */
ssize_t sock_udp_sendmsg_common(struct sock_udp *s, const struct msghdr *msg, int flags, bool flush);

extern const struct sock_ops sock_udp_ops;

/* vma_stats -S: logs the socket's state and counters (sock_udp_dump.c). */
void sock_udp_op_dump(struct sock_obj *obj, int log_level);

#endif
