/* Local ports for offloaded active opens, reserved from the kernel ahead of
 * need and reused (docs/tcp_sockets.md, "Local ports").
 *
 * Each port is a kernel socket bound to (interface address, port the kernel
 * chose) and listening, exactly what the kernel socket under a connecting fd
 * must be; the port's 3-tuple steers its connections to our ring. connect()
 * takes one and dup3()s it over the application's fresh socket, close()
 * gives it back: the port stays reserved and steered, so a connect costs
 * neither bind/getsockname/listen nor a steering map update. A port comes
 * back at close(), as the kernel would free an unconnected one; our own
 * closing connection may still hold its 4-tuple, which the engine tells
 * (EADDRNOTAVAIL), and the next one is taken. The ports are handed out
 * oldest first so a port rests as long as possible before its reuse.
 *
 * This file is the bookkeeping alone (no system calls): a FIFO of at most
 * SOCK_TCP_PORTS_MAX idle ports per lane. */
#ifndef VMA_SOCK_SOCK_TCP_PORT_H
#define VMA_SOCK_SOCK_TCP_PORT_H

#include <stdbool.h>
#include <stdint.h>

/* Idle ports a lane keeps: each holds a file descriptor and a port that
 * other processes cannot use while it rests here. */
#define SOCK_TCP_PORTS_MAX 64u
/* Reserved at once when a connect finds none for its address. */
#define SOCK_TCP_PORTS_BATCH 8u

struct sock_tcp_port {
	int fd;               /* kernel socket bound to (ip, port), listening; FD_CLOEXEC */
	uint32_t ip;          /* network order */
	uint16_t port;        /* network order */
	int if_slot;
	bool nonblock;        /* O_NONBLOCK of its file (shared with the fd it was dup3'ed to) */
};

struct sock_tcp_ports {
	struct sock_tcp_port idle[SOCK_TCP_PORTS_MAX];
	unsigned head, count;   /* FIFO: idle[head] is the oldest */
};

/* Takes the oldest idle port of address ip into *out. false: none. */
bool sock_tcp_ports_take(struct sock_tcp_ports *c, uint32_t ip, struct sock_tcp_port *out);
/* Puts p back as the newest. false: the cache is full (the caller closes it). */
bool sock_tcp_ports_give(struct sock_tcp_ports *c, const struct sock_tcp_port *p);
/* Takes any idle port (oldest first), to empty the cache. false: none. */
bool sock_tcp_ports_pop(struct sock_tcp_ports *c, struct sock_tcp_port *out);

#endif
