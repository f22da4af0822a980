/* The idle local ports of a lane: a FIFO (sock_tcp_port.h). */
#include "sock/sock_tcp_port.h"

static unsigned sock_tcp_ports_at(const struct sock_tcp_ports *c, unsigned i)
{
	return (c->head + i) % SOCK_TCP_PORTS_MAX;
}

bool sock_tcp_ports_take(struct sock_tcp_ports *c, uint32_t ip, struct sock_tcp_port *out)
{
	for (unsigned i = 0; i < c->count; i++) {
		unsigned at = sock_tcp_ports_at(c, i);
		if (c->idle[at].ip != ip)
			continue;
		*out = c->idle[at];
		/* Close the gap: the younger ones move one place up. */
		for (unsigned j = i; j + 1 < c->count; j++)
			c->idle[sock_tcp_ports_at(c, j)] = c->idle[sock_tcp_ports_at(c, j + 1)];
		c->count--;
		return true;
	}
	return false;
}

bool sock_tcp_ports_give(struct sock_tcp_ports *c, const struct sock_tcp_port *p)
{
	if (c->count == SOCK_TCP_PORTS_MAX)
		return false;
	c->idle[sock_tcp_ports_at(c, c->count)] = *p;
	c->count++;
	return true;
}

bool sock_tcp_ports_pop(struct sock_tcp_ports *c, struct sock_tcp_port *out)
{
	if (!c->count)
		return false;
	*out = c->idle[c->head];
	c->head = sock_tcp_ports_at(c, 1);
	c->count--;
	return true;
}
