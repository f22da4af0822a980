/* Shared by sock_udp.c (lifecycle, addresses, options) and sock_udp_io.c
 * (the data path). */
#ifndef VMA_SOCK_SOCK_UDP_INTERNAL_H
#define VMA_SOCK_SOCK_UDP_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "sock/sock_offload.h"
#include "sock/sock_udp.h"
#include "sock/sock_udp_queue.h"
#include "stats/stats.h"

#define SOCK_UDP_QUEUE_ENTRIES 4096
#define SOCK_UDP_MAX_GROUPS 20       /* Linux's default IP_MAX_MEMBERSHIPS */

struct sock_udp_group {
	uint32_t group, source;      /* source 0: any-source membership */
	int if_slot;                 /* -1: the kernel alone serves it */
	bool active;                 /* pcb joined and flow attached */
};

/* The last destination's decision, valid while net_generation holds. */
struct sock_udp_route {
	bool valid;
	bool via_os;
	uint32_t dst;
	uint16_t port;
	uint64_t generation;
	int if_slot;
	uint32_t src;
	uint8_t mac[6];
	bool multicast;
};

struct sock_udp {
	struct sock_obj obj;         /* first */
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

	/* RX offload: pcb and 3-tuple flows on the interfaces in flow_slots. */
	struct stack_udp_pcb *pcb;
	uint32_t flow_slots;
	uint32_t flow_want;          /* interfaces the 3-tuple should be steered on */
	struct ring_flow flow;
	struct sock_udp_group groups[SOCK_UDP_MAX_GROUPS];
	unsigned ngroups;
	struct sock_udp_queue queue;
	uint64_t rcvbuf;             /* kernel's SO_RCVBUF */

	/* Options the data path needs (the kernel keeps them too). */
	bool nonblocking;
	int rcvtimeo_ms;             /* 0: forever */
	bool broadcast;
	int tos, ttl, mc_ttl;        /* ttl -1: default */
	bool mc_loop;
	uint32_t mc_if_addr;
	int mc_ifindex;
	bool pktinfo, recvtos, recvttl, timestamp, timestampns;

	unsigned os_poll_count;
	int sleepers;
	int wake_fd;                 /* eventfd, made at the first sleep; -1 before */
	bool wake_pending;
	struct sock_offload_wake wake_node;   /* queued while wake_pending */
	struct sock_udp_route route;
};

static inline struct sock_udp *sock_udp_of(struct sock_obj *obj)
{
	return (struct sock_udp *)obj;
}

/* The context when this socket's calls may use it, else NULL (kernel path). */
static inline struct sock_offload *sock_udp_ctx(const struct sock_udp *s)
{
	struct sock_offload *ctx = s->ctx;
	if (__builtin_expect(!sock_offload_usable(ctx) || s->os_only || s->released, 0))
		return NULL;
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

ssize_t sock_udp_recvmsg_common(struct sock_udp *s, struct msghdr *msg, int flags);
ssize_t sock_udp_sendmsg_common(struct sock_udp *s, const struct msghdr *msg, int flags, bool flush);

extern const struct sock_ops sock_udp_ops;

/* The data-path ops, sock_udp_io.c. */
ssize_t sock_udp_op_read(struct sock_obj *obj, void *buf, size_t len);
/* vma_stats -S: logs the socket's state and counters (sock_udp_dump.c). */
void sock_udp_op_dump(struct sock_obj *obj, int log_level);
ssize_t sock_udp_op_readv(struct sock_obj *obj, const struct iovec *iov, int iovcnt);
ssize_t sock_udp_op_recv(struct sock_obj *obj, void *buf, size_t len, int flags);
ssize_t sock_udp_op_recvfrom(struct sock_obj *obj, void *buf, size_t len, int flags, struct sockaddr *from,
			     socklen_t *fromlen);
ssize_t sock_udp_op_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags);
int sock_udp_op_recvmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags,
			 struct timespec *timeout);
ssize_t sock_udp_op_write(struct sock_obj *obj, const void *buf, size_t len);
ssize_t sock_udp_op_writev(struct sock_obj *obj, const struct iovec *iov, int iovcnt);
ssize_t sock_udp_op_send(struct sock_obj *obj, const void *buf, size_t len, int flags);
ssize_t sock_udp_op_sendto(struct sock_obj *obj, const void *buf, size_t len, int flags, const struct sockaddr *to,
			   socklen_t tolen);
ssize_t sock_udp_op_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags);
int sock_udp_op_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags);

#endif
