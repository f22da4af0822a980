/* libvma's side of the vmad protocol (vmad_proto.h): find or start vmad,
 * join a domain, ask for flows. */
#ifndef VMA_VMAD_VMAD_CLIENT_H
#define VMA_VMAD_VMAD_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/ring.h"
#include "vmad/vmad_proto.h"

struct vmad_membership {
	int conn;                   /* the connection; its close ends the membership */
	uint32_t slot;
	uint32_t flags;             /* VMAD_JOIN_F_* */
	int memfd;
	int umem_fd;
	int xsk_fd;                 /* RX ring; the XSK map names it */
	int xsk_tx_fd;              /* TX ring; the doorbell */
	int flows5_fd;              /* -1 unless VMAD_JOIN_F_MAPS */
};

/* Where a join wants its member slot (vmad_proto.h, JOIN). */
struct vmad_join_slot {
	int want_slot;              /* -1: any */
	unsigned span;              /* with -1: prefer a slot free on queues 0 .. span-1 */
};

/* Connects to vmad, starting a private one first when none answers and
 * this process may (privileged, vmad binary found). 0 with *m filled, or
 * -errno with why[] set for the one warning. slot may be NULL (any). */
int vmad_client_join(const char *ifname, unsigned queue, const struct ring_sizes *sizes,
		     const struct vmad_join_slot *slot, struct vmad_membership *m, char *why, size_t why_len);
/* Before a root process drops its privileges (setuid and kin): keeps a
 * SPAWNER connection to vmad (starting a private one if none runs), over
 * which later joins get connections with root's credentials, so the
 * process and its children stay offloaded (docs/vmad.md, "Privilege
 * drop"). 0, or -errno (not root, no vmad) and nothing changes. */
int vmad_client_keep_spawner(void);
/* FLOW_ADD / FLOW_DEL over the membership; owner_fd is the kernel socket
 * proving the port (FLOW_ADD). 0 or -errno. */
int vmad_client_flow(struct vmad_membership *m, int op, const struct ring_flow *flow, int mode, int owner_fd);
/* Closes the connection and every fd of the membership. */
void vmad_client_leave(struct vmad_membership *m);
/* In a forked child: forgets the parent's membership, closing only what
 * the child inherited (the parent's connection and XSK stay the parent's). */
void vmad_client_forget(struct vmad_membership *m);

#endif
