/* The peers list: every offloaded TCP connection of a process, where vmad
 * can read it after the process died (docs/vmad.md, "Peers of a member
 * that died").
 *
 * vmad resets the peers of a killed process's connections by probing each
 * one (vmad_orphan.h). It knows the connections that have a 5-tuple entry
 * of their own; the others ride a 3-tuple (an active open on a reserved
 * port, a connection accepted from a listener no other process shares),
 * and nothing in the steering names their remote end. So each process
 * keeps this list in a memfd it hands to vmad with every JOIN: a header,
 * then VMAD_PEERS_CAPACITY entries. The TCP engine's connection table
 * tells the library when a connection comes and goes
 * (tcp_ctx_set_conn_hook): an entry is claimed and freed with atomic
 * stores, no system call and no lock. A process that exits normally marks
 * the list clean (its connections were closed); a killed one cannot, and
 * vmad probes every live entry once the process's last member is gone.
 *
 * A full list (more than VMAD_PEERS_CAPACITY connections at once) leaves
 * the rest out: their peers learn at their next send, as before. */
#ifndef VMA_VMAD_VMAD_PEERS_H
#define VMA_VMAD_VMAD_PEERS_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/ring_xdp_maps.h"

#define VMAD_PEERS_MAGIC 0x53524550u /* "PERS" */
#define VMAD_PEERS_CAPACITY (1u << 18)

enum vmad_peer_state {
	VMAD_PEER_FREE = 0,
	VMAD_PEER_WRITING = 1,   /* claimed, key not complete yet */
	VMAD_PEER_LIVE = 2,
};

struct vmad_peers_hdr {
	uint32_t magic;
	uint32_t capacity;
	uint32_t clean_exit;     /* the process closed its connections and exited */
	uint32_t pad;
};

struct vmad_peer {
	uint32_t state;          /* enum vmad_peer_state, atomic */
	struct ring_xdp_key5 key; /* network order, as the steering map's */
};

/* ---- the library's side ---- */

/* The process's list, made on the first call (memfd, mapped shared); -1
 * when it cannot be had (then nothing is listed). Not for the hot path. */
int vmad_peers_fd(void);
/* A connection entered the engine's table: listed, and *cookie (0 before)
 * says where. Addresses and ports in network order. No-op while the
 * process has no list (no vmad membership yet: nothing to tell). */
void vmad_peers_add(uint32_t local_ip, uint16_t local_port, uint32_t remote_ip, uint16_t remote_port,
		    uint32_t *cookie);
/* It left the table: its entry is freed and *cookie reset. A cookie of a
 * list the process no longer has (its parent's, after fork) is ignored. */
void vmad_peers_del(uint32_t *cookie);
/* The process closed its connections and is exiting: nothing to probe. */
void vmad_peers_mark_clean(void);
/* In a forked child: the list is the parent's; forget it (the child
 * makes its own at its first JOIN). */
void vmad_peers_after_fork_child(void);

/* ---- vmad's side ---- */

/* Calls each(arg, key) for every live entry of the list in fd (a memfd a
 * member sent) unless it is marked clean. Returns the entries given, or
 * -errno when fd is not such a list. */
int vmad_peers_walk(int fd, void (*each)(void *arg, const struct ring_xdp_key5 *key), void *arg);

#endif
