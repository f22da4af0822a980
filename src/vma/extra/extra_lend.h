/* Ring frames lent to the application (src/vma/extra/extra_lend.c): the
 * descriptor table of a lane, shared by SocketXtreme (extra_xtreme.c:
 * buffers of completions) and the zero-copy calls of TCP sockets
 * (extra_tcp.c: recvfrom_zcopy and VMA_PACKET_HOLD packets). Internal to
 * src/vma/extra/.
 *
 * Each lent frame has a descriptor whose first member is the struct
 * vma_buff_t the application sees; an address the application gives back
 * is looked up in the tables (never followed unless it is one). A unit is
 * what goes back to the ring in one ring_buf_free: a UDP datagram (one or
 * more buffers), a TCP buffer. Lane lock held for everything but lookup. */
#ifndef VMA_EXTRA_EXTRA_LEND_H
#define VMA_EXTRA_EXTRA_LEND_H

#include <stdbool.h>
#include <stdint.h>

#include "extra/extra.h"
#include "sock/sock_offload.h"

/* Descriptors of one lane's table: frames lent at once. Beyond it the
 * data waits queued until the application frees. */
#define EXTRA_XT_BUFS 8192
/* Tables of the process (lanes, and the dead lanes of a parent after fork). */
#define EXTRA_XT_TABLES 32

struct extra_xt_buf {
	struct vma_buff_t vb;          /* first: the address the application holds */
	struct extra_xt_buf *lead;     /* the first buffer of the unit (itself for TCP) */
	struct ring_buf *unit;         /* lead: what goes back to the ring */
	struct extra_xt_node *owner;   /* lead: its socket; NULL once that closed */
	uint32_t refs;                 /* 0: free */
	uint32_t live;                 /* lead: buffers of the unit with references */
	uint32_t owed;                 /* TCP: bytes the window still misses */
	int32_t next_free;
	bool tcp;
	/* Named by a packet id of its socket's fd (recvfrom_zcopy, HOLD):
	 * freed with the socket, as the fd can no longer give it back. */
	bool by_fd;
};

struct extra_xt_table {
	struct sock_offload *ctx;
	int free_head;
	unsigned nfree;
	struct extra_xt_buf slot[EXTRA_XT_BUFS];
};

/* The lane's table, made on first use (outside the lane lock); NULL when
 * out of memory or tables. */
struct extra_xt_table *extra_lend_table(struct sock_offload *ctx);
/* The descriptor at address p, and its table, or NULL. */
struct extra_xt_buf *extra_lend_lookup(const void *p, struct extra_xt_table **table);
/* Locks t's lane; false when the lane is gone (exit, a forked child's
 * copy): its frames are nobody's to give back any more. */
bool extra_lend_lock(struct extra_xt_table *t);
/* A free descriptor (t->nfree > 0 checked by the caller), zeroed. */
struct extra_xt_buf *extra_lend_alloc_locked(struct extra_xt_table *t);
/* TCP buffer b of s, off its queue, lent as one unit (refs 1, owed its
 * bytes); NULL when the table is full. */
struct extra_xt_buf *extra_lend_tcp_locked(struct extra_xt_table *t, struct sock_tcp *s, struct ring_buf *b,
					   bool by_fd);
/* The buffers of chain that hold len bytes (one at least, for an empty
 * datagram). */
unsigned extra_lend_chain_bufs(const struct ring_buf *chain, uint32_t len);
/* A datagram's chain (len bytes in nbufs buffers, t->nfree >= nbufs) lent
 * as one unit owned by node n: one descriptor per buffer, linked by
 * vb.next, each with a reference; the frames go back when the last is
 * dropped. Returns the first. */
struct extra_xt_buf *extra_lend_chain_locked(struct extra_xt_table *t, struct extra_xt_node *n,
					     struct ring_buf *chain, uint32_t len, unsigned nbufs);
/* TCP: the bytes of b the window still misses, given back (lock held). */
void extra_lend_tcp_recved_locked(struct sock_offload *ctx, struct extra_xt_buf *b);
/* b's last reference went: the unit's frames go back to the ring when it
 * was the unit's last buffer (lock held, lane alive). */
void extra_lend_release_locked(struct sock_offload *ctx, struct extra_xt_table *t, struct extra_xt_buf *b);
struct sock_tcp *extra_lend_tcp_of(struct extra_xt_node *n);
/* release of socket n (lock held): the frames of its packet ids go back;
 * SocketXtreme's stay lent, accounted to no socket. */
void extra_lend_forget_locked(struct sock_offload *ctx, struct extra_xt_node *n);

#endif
