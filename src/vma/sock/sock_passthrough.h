/* The passthrough socket: an AF_INET/AF_INET6 socket libvma tracks but does
 * not offload (no ring to be had, IPv6, a rule). Its control ops repeat the
 * call on the same fd with the application's exact arguments; its data
 * calls have no op and reach the kernel untouched. */
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
