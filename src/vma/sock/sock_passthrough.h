/* The passthrough socket: tracked in the fd table, every op goes to the
 * kernel on the same fd with the application's exact arguments. It proves
 * the dispatch path on real programs until offloaded sockets exist, and is
 * the model for what a kind does with calls it cannot accelerate. */
#ifndef VMA_SOCK_SOCK_PASSTHROUGH_H
#define VMA_SOCK_SOCK_PASSTHROUGH_H

#include <stdbool.h>
#include "sock/sock_obj.h"

extern const struct sock_ops sock_passthrough_ops;

/* True for the sockets libvma tracks: AF_INET/AF_INET6, SOCK_STREAM or
 * SOCK_DGRAM (type flags SOCK_NONBLOCK/SOCK_CLOEXEC ignored). */
bool sock_passthrough_wanted(int domain, int type);

/* A new passthrough object for fd (malloc'ed; NULL when out of memory).
 * type may carry SOCK_NONBLOCK/SOCK_CLOEXEC; they are stripped. */
struct sock_obj *sock_passthrough_new(int fd, int domain, int type, int protocol);

#endif
