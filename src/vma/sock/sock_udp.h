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

#endif
