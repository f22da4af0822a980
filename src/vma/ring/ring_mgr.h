/* The ring manager: who gets which ring. Rings are shared and refcounted;
 * a socket asks for the ring of (interface, key), where the key comes from
 * VMA_RING_ALLOCATION_LOGIC_RX/TX through ring_mgr_key. Distinct keys get
 * distinct rings while the interface has room: VMA_RING_LIMIT_PER_INTERFACE,
 * and per_queue rings of ours on each queue (AF_XDP: several XSKs of one
 * process may sit on one queue as members of its shared UMEM, so a one-queue
 * veth still gives each thread a ring of its own); beyond that keys share
 * the existing rings round-robin.
 *
 * Thread-safe (one mutex; not on the packet path). */
#ifndef VMA_RING_RING_MGR_H
#define VMA_RING_RING_MGR_H

#include <stdint.h>
#include <sys/types.h>

#include "ring/ring.h"

/* VMA_RING_ALLOCATION_LOGIC_* values. */
enum ring_mgr_logic {
	RING_MGR_PER_INTERFACE = 0,
	RING_MGR_PER_IP = 1,
	RING_MGR_PER_SOCKET = 10,
	RING_MGR_PER_USER_ID = 11,      /* per socket only (SO_VMA_RING_ALLOC_LOGIC) */
	RING_MGR_PER_THREAD = 20,
	RING_MGR_PER_CORE = 30,
	RING_MGR_PER_CORE_MIGRATING = 31,
};

/* Where a new ring of a multi-queue interface goes. */
enum ring_mgr_placement {
	RING_MGR_PLACE_DEFAULT = 0,  /* AF_XDP: spanning; other backends: per queue */
	/* Each ring covers every queue (ring_open_queues): RSS may put a flow
	 * on any queue and the ring still receives it. Counted on queue 0. */
	RING_MGR_PLACE_SPANNING,
	/* Each ring is one queue, the least used (a backend whose flows are
	 * steered to a queue by the NIC, or tests). */
	RING_MGR_PLACE_PER_QUEUE,
};

struct ring_mgr_config {
	struct ring_config ring;        /* for every ring the manager opens */
	unsigned limit_per_interface;   /* VMA_RING_LIMIT_PER_INTERFACE; 0 = none */
	unsigned queues;                /* queues of an interface; 0 = its RX queue count (sysfs) */
	unsigned per_queue;             /* our rings one queue may hold; 0 = the backend's
					 * (RING_MGR_XDP_PER_QUEUE for AF_XDP, 1 otherwise) */
	enum ring_mgr_placement placement;
};

/* Rings of one process on one AF_XDP queue (each an XSK on the queue's
 * shared UMEM, one vmad member slot of RING_XDP_MAX_MEMBERS). */
#define RING_MGR_XDP_PER_QUEUE 8

/* Replaces the configuration (rings already open keep theirs). Without
 * this call the first ring_mgr_get takes it from g_cfg. */
void ring_mgr_configure(const struct ring_mgr_config *cfg);

/* The key of logic for a socket: fd, thread id, cpu and ip (network order)
 * are used as the logic needs (11, per user id: ip carries the id). An unknown logic is treated as 0. Keys of
 * different logics never collide. */
uint64_t ring_mgr_key(int logic, int fd, pid_t tid, int cpu, uint32_t ip);

/* The ring of (interface, key), opened on first use, with one more
 * reference. NULL with errno set (and the ring layer's warning) when no
 * ring can be had: the caller keeps the kernel path. */
struct ring *ring_mgr_get(const char *ifname, uint64_t key);
struct ring *ring_mgr_get_by_index(unsigned ifindex, uint64_t key);
/* Drops a reference; the last one closes the ring. NULL is ignored. */
void ring_mgr_put(struct ring *ring);

/* References held on ring (0 if the manager does not know it). */
unsigned ring_mgr_refs(const struct ring *ring);
/* Rings currently open on ifname by this process. */
unsigned ring_mgr_count(const char *ifname);

/* At exit: closes every ring of this process, whatever its references. */
void ring_mgr_close_all(void);
/* In a forked child, before anything else: the rings are the parent's (its
 * vmad membership, its XSKs); they are forgotten, never closed. The child
 * joins with rings of its own when it needs them (docs/process_model.md). */
void ring_mgr_forget_after_fork(void);

/* Changes whenever a ring opens or closes, or a forked child drops its
 * parent's: a cache of ring wait fds is valid while it stays the same. */
uint32_t ring_mgr_generation(void);

#endif
