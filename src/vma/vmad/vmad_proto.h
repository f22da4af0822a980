/* The vmad protocol: what libvma (the client) and vmad (the broker that owns
 * the steering program, the UMEM domains and every XSK) say to each other
 * over a SOCK_SEQPACKET unix socket. docs/vmad.md describes it for people;
 * this header is the contract.
 *
 * One connection is one membership: a process joins one (interface, queue)
 * domain per connection and the connection's close (exit, crash, SIGKILL)
 * is how vmad learns the member is gone. Every request gets exactly one
 * reply, in order (ADOPT's comes on the connection it adopts). File descriptors travel as SCM_RIGHTS with the message
 * they belong to.
 *
 * Address: the abstract name "\0" VMAD_ABSTRACT_NAME of the caller's network
 * namespace (vmad serves the namespace it runs in). A client trusts a server only if SO_PEERCRED says
 * it runs as root or as the client's own uid (abstract names have no owner). */
#ifndef VMA_VMAD_VMAD_PROTO_H
#define VMA_VMAD_VMAD_PROTO_H

#include <stdint.h>

#include "ring/ring.h"

#define VMAD_ABSTRACT_NAME "vma-vmad"
/* 2: JOIN carries want_slot and span (multi-queue interfaces).
 * 3: JOIN hands over two member sockets, RX and TX. */
#define VMAD_PROTO_VERSION 3
#define VMAD_MSG_MAX 512
/* Descriptors one reply carries at most (JOIN: memfd, UMEM socket, RX XSK,
 * TX XSK, flows5 map); both sides size their control buffers by it. */
#define VMAD_REPLY_MAX_FDS 5

enum vmad_op {
	/* Join the domain of (ifname, queue). One optional fd: the process's
	 * peers list (vmad_peers.h), read if the process dies without closing
	 * its connections. Reply fds: memfd, UMEM socket,
	 * the member's RX XSK (in the XSK map), its TX XSK, then with
	 * VMAD_JOIN_F_MAPS the flows5 map. */
	VMAD_OP_JOIN = 1,
	/* Steer a flow to this member. One fd: the kernel socket that owns the
	 * local address and port (or joined the group). */
	VMAD_OP_FLOW_ADD = 2,
	/* Stop steering a flow this member added. No fd. */
	VMAD_OP_FLOW_DEL = 3,
	/* Counters and members, for vma_stats / tests. No fd. */
	VMAD_OP_STATUS = 4,
	/* Make this connection a spawner: later ADOPTs over it give new
	 * connections its credentials. Sent by a privileged process before it
	 * drops its privileges (setuid), so that its later joins still count
	 * as its own (docs/vmad.md, "Privilege drop"). No fd. */
	VMAD_OP_SPAWNER = 5,
	/* Over a spawner: one fd, an end of a SOCK_SEQPACKET socketpair the
	 * sender made; vmad adopts it as a new connection with the spawner's
	 * uid, gid and groups and the sender's pid (SCM_CREDENTIALS, which the
	 * kernel vouches for). The reply goes on the adopted connection, none
	 * on the spawner (several processes may share it after fork). */
	VMAD_OP_ADOPT = 6,
};

/* VMAD_OP_FLOW_ADD modes for a 3-tuple or group flow. */
enum vmad_flow_mode {
	/* The port is this member's alone: -EBUSY when another member steers it. */
	VMAD_FLOW_EXCLUSIVE = 0,
	/* Join the share group of the flow: new connections / datagrams are
	 * spread over every member in it. Allowed for the same kernel socket
	 * (inherited across fork) or SO_REUSEPORT sockets of the same uid. */
	VMAD_FLOW_SHARE = 1,
	/* 5-tuple: the connection moves to the caller from another member of
	 * the same process (a TCP connection changing lanes): the entry, held
	 * by that member alone, names the caller from now on. Otherwise as
	 * EXCLUSIVE. */
	VMAD_FLOW_TAKEOVER = 2,
};

struct vmad_request {
	uint32_t op;                /* enum vmad_op */
	uint32_t version;           /* VMAD_PROTO_VERSION */
	char ifname[16];            /* JOIN */
	uint32_t queue;             /* JOIN */
	/* JOIN: the sizes the client would use (VMA_RX_BUFS, ...); they shape
	 * the domain only when this JOIN creates it. Powers of two. */
	uint32_t rx_frames, tx_frames, rx_descs, tx_descs;
	/* JOIN: the member slot wanted, -1 for any. A process joins every
	 * queue of a multi-queue interface under one slot (a flow's value
	 * names the slot, the program adds the queue the NIC chose), so its
	 * later joins name the slot its first join got. */
	int32_t want_slot;
	/* JOIN with want_slot -1: pick a slot free on queues 0 .. span-1, so
	 * the joins that follow for those queues can have it too. 0 or 1:
	 * this queue only. */
	uint32_t span;
	uint32_t mode;              /* FLOW_ADD: enum vmad_flow_mode; JOIN: VMAD_JOIN_M_* */
	struct ring_flow flow;      /* FLOW_ADD / FLOW_DEL */
};

/* JOIN mode bits: how a domain this JOIN creates is built (an older vmad
 * ignores them, so no protocol version change). */
#define VMAD_JOIN_M_HUGE 0x1        /* frames on huge pages when available (VMA_MEM_ALLOC_TYPE=2) */

#define VMAD_JOIN_F_MAPS 0x1        /* the flows5 map fd follows (privileged client) */
#define VMAD_JOIN_F_NATIVE 0x2      /* the program runs in native (driver) mode */

struct vmad_reply {
	int32_t status;             /* 0 or -errno */
	uint32_t op;                /* echoes the request */
	uint32_t slot;              /* JOIN: member slot (flow values name it) */
	uint32_t flags;             /* JOIN: VMAD_JOIN_F_* */
	uint32_t ifindex;
	uint32_t queue;
	uint32_t nfds;              /* descriptors sent with this reply */
	uint32_t members;           /* STATUS: active members of the domain */
	char message[192];          /* why, when status < 0 (for the warning) */
};

#endif
