/* Offloaded TCP sockets (AF_INET, SOCK_STREAM). See docs/tcp_sockets.md. */
#ifndef VMA_SOCK_SOCK_TCP_H
#define VMA_SOCK_SOCK_TCP_H

#include <stdbool.h>
#include <stdint.h>
#include "sock/sock_obj.h"

struct sock_offload;

/* AF_INET stream sockets with offload enabled (VMA_OFFLOADED_SOCKETS). */
bool sock_tcp_wanted(int domain, int type);
/* The object for a fresh kernel socket fd: it stays on the kernel path
 * until connect()/listen() decide. NULL when offload cannot be had (the
 * caller then tracks a passthrough). type may carry SOCK_NONBLOCK. */
struct sock_obj *sock_tcp_new(int fd, int domain, int type, int protocol);

/* Called by sock_offload (lock held): the TCP timers ran at now_ms;
 * finishes background closes. */
void sock_tcp_tick_locked(struct sock_offload *ctx, uint64_t now_ms);
/* Exit hook (before the rings close): FIN for every open connection,
 * up to SOCK_TCP_EXIT_GRACE_MS of progress, then what is unacknowledged
 * goes to the kernel (TCP_REPAIR), or without CAP_NET_ADMIN waits a few
 * RTOs more (at most SOCK_TCP_EXIT_FIN_MAX_MS) and is reset. */
void sock_tcp_exit(void *ctx);
/* fork (sock_offload_before_fork / after_fork_child): listeners of ctx stop
 * being steered (lock held); in the child, every socket of the parent's
 * context is marked inherited and the lists restart empty. */
void sock_tcp_fork_release_locked(struct sock_offload *ctx);
void sock_tcp_after_fork_child(struct sock_offload *old);

/* Lane moves (sock_tcp_move.c). The engine's stray hook of every lane
 * (arg: the lane): a segment for a connection that moved to another lane,
 * queued there. A progress pass of a lane whose stray list is not empty
 * feeds it to the lane's engine (lock held); strays_free drops the list. */
struct tcp_seg_origin;
void sock_tcp_stray_hook(void *arg, void *dest_arg, const struct tcp_seg_origin *from, const uint8_t *seg,
			 uint32_t len);
void sock_tcp_strays_input_locked(struct sock_offload *ctx);
void sock_tcp_strays_free(struct sock_offload *ctx);

#endif
