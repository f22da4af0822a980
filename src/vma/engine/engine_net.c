/* Netlink events on the internal thread: the kernel's view of links,
 * addresses, routes and neighbours stays current without the application. */
#include <sys/epoll.h>
#include "engine/engine_net.h"

static void engine_net_readable(int fd, uint32_t revents, void *arg)
{
	(void)fd;
	(void)revents;
	net_poll_events(arg, 0);
}

int engine_watch_net(struct net_ctx *ctx)
{
	int fd = net_event_fd(ctx);
	return fd < 0 ? fd : engine_fd_add(fd, EPOLLIN, engine_net_readable, ctx);
}

int engine_unwatch_net(struct net_ctx *ctx)
{
	return engine_fd_del(net_event_fd(ctx));
}
