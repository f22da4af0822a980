/* Offloaded UDP sockets (AF_INET, SOCK_DGRAM). See docs/udp.md. */
#ifndef VMA_SOCK_SOCK_UDP_H
#define VMA_SOCK_SOCK_UDP_H

#include <stdbool.h>
#include "sock/sock_obj.h"

extern const struct sock_ops sock_udp_ops;

/* AF_INET datagram sockets with offload enabled (VMA_OFFLOADED_SOCKETS). */
bool sock_udp_wanted(int domain, int type);
/* The object for a fresh kernel socket fd, or NULL when offload cannot be
 * had (no ring on any interface, after fork, out of memory): the caller then
 * tracks a passthrough. type may carry SOCK_NONBLOCK. */
struct sock_obj *sock_udp_new(int fd, int domain, int type, int protocol);

struct sock_offload;
/* fork (sock_offload_before_fork / after_fork_child): the bound sockets of
 * ctx stop being steered (lock held); in the child, the sockets of the
 * parent's context old are marked inherited and their queues emptied. */
void sock_udp_fork_release_locked(struct sock_offload *ctx);
void sock_udp_after_fork_child(struct sock_offload *old);

#endif
