/* SocketXtreme's state inside the socket layer's structures (the calls are
 * in extra_xtreme.c; docs/extra_api.md, "SocketXtreme"). Small on purpose:
 * sock_offload.h embeds a lane's part, sock_udp_internal.h and
 * sock_tcp_internal.h a socket's.
 *
 * Under VMA_SOCKETXTREME=1 a socket with something to report (a datagram
 * or segment queued, a connection to auto-accept, an epoll event of TCP)
 * is put once on its lane's list; socketxtreme_poll on a ring fd of the
 * lane takes the sockets off it and turns what they hold into
 * completions. Everything here is guarded by the lane lock. */
#ifndef VMA_EXTRA_EXTRA_XT_H
#define VMA_EXTRA_EXTRA_XT_H

#include <stdbool.h>
#include <stdint.h>

#include "mellanox/vma_extra.h"

struct ring_buf;
struct sock_obj;
struct extra_xt_table;

/* One per offloaded socket (zero: not listed, user_data the fd). */
struct extra_xt_node {
	struct extra_xt_node *prev, *next;   /* on the lane's list while listed */
	struct sock_obj *obj;
	uint32_t events;                     /* epoll bits not reported yet */
	bool listed;
	bool user_data_set;                  /* SO_VMA_USER_DATA given */
	uint64_t user_data;
	/* Receive units (UDP datagrams, TCP buffers) the application holds
	 * from socketxtreme_poll: they count against the socket's share of
	 * its ring's frames (docs/security.md) until freed. */
	uint32_t lent;
};

/* A TCP socket's receive callback (extra_tcp.c), made by the first
 * register_recv_callback: in-order buffers wait here, not on the receive
 * queue, until an application thread shows them to the callback. */
struct extra_tcp_cb {
	vma_recv_callback_t fn;              /* NULL: unregistered */
	void *context;
	struct ring_buf *head, *tail;        /* staged single buffers (->link) */
	uint32_t frames, bytes;
};

/* One per lane. */
struct extra_xt_lane {
	struct extra_xt_node *head, *tail;
	struct extra_xt_table *table;        /* frames lent out; made by the first poll */
};

#endif
