/* vma_stats -S for TCP sockets: addresses, path, state, queues, then the
 * counters. Read without the offload lock (like the UDP dump): a value
 * may be a packet stale, and the pcb is not touched (it may be freed
 * under us), only our own mirrors. */
#include "log/vlog.h"
#include "sock/sock_tcp_internal.h"

void sock_tcp_op_dump(struct sock_obj *obj, int log_level)
{
	const struct sock_tcp *s = sock_tcp_of(obj);
	const char *path = s->mode == SOCK_TCP_LISTENER ? "offloaded listener"
			 : s->mode == SOCK_TCP_ACTIVE  ? "offloaded"
			 : s->os_only		       ? "kernel (rule, route or accepted by the kernel)"
						       : "kernel (not connected yet)";
	sock_base_dump_head(&s->base, log_level, "TCP", s->local_ip, s->local_port, s->remote_ip, s->remote_port, path,
			    s->released);
	if (s->mode != SOCK_TCP_KERNEL)
		vlog_print(log_level, "fd %d: %s, %s%s%s%s, rx queue %u bytes, send buffer %u used / %u free, "
			   "accept queue %u, error %d, nodelay %d, keepalive %d", obj->fd,
			   s->base.nonblocking ? "non-blocking" : "blocking",
			   s->connecting ? "connecting" : s->established ? "established" : "not connected",
			   s->peer_fin ? ", peer FIN" : "", s->shut_send ? ", send shut" : "",
			   s->reset ? ", ended" : "", s->rxq_bytes, s->snd_used, s->snd_free, s->acceptq_len, s->err,
			   s->nodelay, s->keepalive);
	if (s->stats)
		stats_socket_dump(s->stats, log_level);
}
