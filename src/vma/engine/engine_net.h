/* Hooks net/'s netlink event socket into the internal thread (libnl builds). */
#ifndef VMA_ENGINE_ENGINE_NET_H
#define VMA_ENGINE_ENGINE_NET_H

#include "engine/engine.h"
#include "net/net.h"

/* engine_fd_add(net_event_fd(ctx), EPOLLIN) calling net_poll_events(ctx, 0).
 * Returns 0 or -errno. */
int engine_watch_net(struct net_ctx *ctx);
int engine_unwatch_net(struct net_ctx *ctx);

#endif
