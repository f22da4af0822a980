/* The library side of the statistics block (see docs/stats.md).
 *
 * Slots are handed out at socket/ring/pool/epoll creation (not the fast
 * path; a mutex guards the tables). The fast path only does plain
 * increments on the slot it holds, e.g. s->c.rx_packets++. A slot getter
 * never returns NULL: when the table is full (VMA_STATS_FD_NUM sockets, or
 * the fixed ring/pool/epoll capacities) it returns a private dummy that
 * nobody reads, so callers never branch on it. When VMA_STATS_SHMEM_DIR is
 * empty the block lives in private memory: counters still work (for
 * VMA_STATS_FILE and fd dumps) but no file exists. */
#ifndef VMA_STATS_STATS_H
#define VMA_STATS_STATS_H

#include <stdint.h>
#include "stats/stats_layout.h"

struct stats_settings {
	const char *shmem_dir;  /* VMA_STATS_SHMEM_DIR; NULL or "" = no file */
	int fd_num;             /* VMA_STATS_FD_NUM, clamped to 0..STATS_MAX_SOCKETS */
	int cpu_usage;          /* VMA_CPU_USAGE_STATS */
	const char *stats_file; /* VMA_STATS_FILE; NULL or "" = none */
	const char *process_name; /* NULL = /proc/self/comm */
	const char *lib_version;
};

/* Creates (mode 0600, O_EXCL, never through a symbolic link) and maps
 * <dir>/vmastat.<pid>. A stale regular file of our own uid under that name is
 * replaced; any other existing name (a symbolic link, another user's file)
 * is refused. Returns 0, or -1 after one warning when the file could not be
 * made or was refused (the block then lives in private memory). Calling it
 * twice without stats_close is a no-op returning 0. The section offsets and
 * slot counts are kept in private memory: nothing read back from the file
 * ever decides where the library writes. */
int stats_open(const struct stats_settings *settings);
/* Unmaps and unlinks this process's file (never a parent's after fork). */
void stats_close(void);
/* In a forked child: moves the inherited block to the child's own file at the
 * same address (slot pointers held by inherited objects stay valid) and
 * leaves the parent's file alone. */
void stats_after_fork_child(void);
/* Path of this process's file, "" when there is none. */
const char *stats_path(void);
/* Removes this process's file, if it created one (never a parent's, never a
 * name it refused). Async-signal-safe: the exit hook of a dying process. */
void stats_unlink_own_file(void);
/* Files nobody will remove: a process killed with SIGKILL, a forked child
 * that leaves with _exit() (fork-per-connection servers, the parent half
 * of daemon()) never runs stats_close. Two sweeps keep the directory from
 * filling up: stats_open removes the files of dead processes of our own
 * user (of any user when root) it finds there (a bounded scan), and a parent notes the children it
 * forks (stats_note_child) and removes their files once they are gone
 * (stats_reap_children, from a periodic timer; true while some are still
 * noted). */
void stats_note_child(int pid);
int stats_reap_children(void);
/* The mapped block (tests and tooling); NULL before stats_open. */
const struct stats_header *stats_block(void);

struct stats_socket *stats_socket_slot_get(int fd, uint32_t proto);
/* Appends the VMA_STATS_FILE record (if traffic was seen) and frees the slot. */
void stats_socket_slot_put(struct stats_socket *s);
int stats_slot_is_dummy(const void *slot);
/* A record nobody reads, for a socket whose slot was put back while a call
 * on it may still count (close() under a blocked recv). */
struct stats_socket *stats_socket_sink(void);

struct stats_ring *stats_ring_slot_get(uint32_t id, const char *ifname);
void stats_ring_slot_put(struct stats_ring *r);
struct stats_pool *stats_pool_slot_get(uint32_t id, uint32_t kind);
void stats_pool_slot_put(struct stats_pool *p);
/* kind SELECT and POLL share one process-wide slot each (put is a no-op for
 * them); EPOLL gets one slot per epoll fd. */
struct stats_iomux *stats_iomux_slot_get(uint32_t kind, int epfd);
void stats_iomux_slot_put(struct stats_iomux *m);

/* Multicast membership of socket fd in group (IPv4, network byte order). */
void stats_mc_group_ref(int fd, uint32_t group);
void stats_mc_group_unref(int fd, uint32_t group);

/* Fast-path helpers for the queue gauges (cur with its max). */
static inline void stats_socket_ready_add(struct stats_socket *s, uint64_t bytes)
{
	s->rx_ready_pkts_cur++;
	s->rx_ready_bytes_cur += bytes;
	if (s->rx_ready_pkts_cur > s->c.rx_ready_pkts_max)
		s->c.rx_ready_pkts_max = s->rx_ready_pkts_cur;
	if (s->rx_ready_bytes_cur > s->c.rx_ready_bytes_max)
		s->c.rx_ready_bytes_max = s->rx_ready_bytes_cur;
}
static inline void stats_socket_ready_remove(struct stats_socket *s, uint64_t bytes)
{
	if (s->rx_ready_pkts_cur)
		s->rx_ready_pkts_cur--;
	s->rx_ready_bytes_cur = s->rx_ready_bytes_cur > bytes ? s->rx_ready_bytes_cur - bytes : 0;
}

/* What the control requests act on; they live in other modules. Any member
 * may be NULL: log ones are then ignored, dump_fd falls back to
 * stats_socket_dump of the matching slots. */
struct stats_control_ops {
	void (*set_log_level)(int level);
	void (*set_log_details)(int details);
	void (*dump_fd)(int fd, int log_level); /* fd 0 = every open fd */
};
enum {
	STATS_APPLIED_ZERO = 1,
	STATS_APPLIED_LOG_LEVEL = 2,
	STATS_APPLIED_LOG_DETAILS = 4,
	STATS_APPLIED_FD_DUMP = 8,
};
/* Applies pending vma_stats requests (-z, -l, -D, -S). Called by the internal
 * thread every ~100 ms. Returns the STATS_APPLIED_* bits acted upon. */
int stats_service_control(const struct stats_control_ops *ops);
/* Clears every counter (gauges stay); what -z asks for. */
void stats_zero_all(void);
/* How many times stats_zero_all ran. Slots refreshed by copying totals kept
 * elsewhere (rings, pools) take a new baseline when it changes, so -z
 * clears them too. */
uint32_t stats_zero_epoch(void);
/* Logs the counters of one socket slot at log_level through vlog. */
void stats_socket_dump(const struct stats_socket *s, int log_level);
/* Logs the counters of every in-use socket slot of fd (0 = all). */
void stats_socket_dump_fd(int fd, int log_level);

#endif
