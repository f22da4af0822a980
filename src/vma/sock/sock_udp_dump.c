/* vma_stats -S for offloaded UDP sockets: what the socket looks like from
 * the inside (addresses, offload state, queue, options) followed by its
 * counters. Read without the offload lock: the dump may be a packet stale,
 * never wrong in a way that matters for a diagnosis, and it must not stall
 * the application's data path. */
#include "log/vlog.h"
#include "sock/sock_udp_internal.h"

void sock_udp_op_dump(struct sock_obj *obj, int log_level)
{
	const struct sock_udp *s = sock_udp_of(obj);
	const char *path = s->os_only ? "kernel (rule)" : s->ctx ? (s->pcb ? "offloaded" : "offload ready, not bound")
								  : "kernel";
	sock_base_dump_head(&s->base, log_level, "UDP", s->local_ip, s->local_port, s->remote_ip, s->remote_port, path,
			    s->released);
	vlog_print(log_level, "fd %d: %s, rx queue %u datagrams (rcvbuf %llu bytes), %u multicast groups, "
		   "interfaces 0x%x, mc_loop %d, ttl %d, mc_ttl %d, tos %d, rcvtimeo %d ms", obj->fd,
		   s->base.nonblocking ? "non-blocking" : "blocking", s->queue.count, (unsigned long long)s->rcvbuf,
		   s->ngroups, s->flow_slots, s->mc_loop, s->ttl, s->mc_ttl, s->tos, s->base.rcvtimeo_ms);
	const struct sock_offload *lane = __atomic_load_n(&s->ctx, __ATOMIC_ACQUIRE);
	if (lane)
		vlog_print(log_level, "fd %d: lane %u, moved %u times (check every %u receive calls; 0: never)%s",
			   obj->fd, lane->lane, s->stats ? s->stats->ring_migrations : 0, s->mig.ratio,
			   __atomic_load_n(&s->stray_ctx, __ATOMIC_ACQUIRE) ? ", the last lane still catching strays" : "");
	if (s->stats)
		stats_socket_dump(s->stats, log_level);
}
