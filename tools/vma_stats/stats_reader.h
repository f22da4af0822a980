/* vma_stats' side of the block: finding processes, taking a validated copy
 * of a block, posting control requests. A block is never trusted: it is
 * copied with pread (a file truncated under us cannot SIGBUS the tool) and
 * every count, size and offset is checked before any slot is looked at. */
#ifndef VMA_STATS_TOOL_STATS_READER_H
#define VMA_STATS_TOOL_STATS_READER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "stats/stats_layout.h"

/* Biggest block we agree to read; far above any legitimate layout. */
#define STATS_READER_MAX_SIZE (16u << 20)

enum stats_read_result {
	STATS_READ_OK = 0,
	STATS_READ_NO_FILE,     /* missing or unreadable */
	STATS_READ_TRUNCATED,   /* shorter than its header or than it claims */
	STATS_READ_BAD_MAGIC,   /* not a stats block at all */
	STATS_READ_BAD_VERSION, /* a layout this tool does not understand */
	STATS_READ_CORRUPT,     /* counts, sizes or offsets that do not fit */
	STATS_READ_UNTRUSTED,   /* not written by the process it names: wrong mode,
				 * owner or pid (planted by another user) */
};

struct stats_snapshot {
	unsigned char *data;    /* private, validated copy */
	size_t size;
	const struct stats_header *h;
};

/* Checks a block image; on failure writes a human reason into why. */
enum stats_read_result stats_reader_validate(const void *data, size_t size, char *why,
					      size_t why_size);
/* Reads and validates path into snap (free with stats_snapshot_free).
 * Never blocks on a FIFO, never follows a symbolic link. Besides the layout
 * checks, the file must look like libvma's own: no group or other write
 * permission, the pid in its name equal to the header's, owned by root, by
 * us, or by the user the named process runs as. Strings in the copy are
 * terminated and hold printable ASCII only (no terminal escapes). */
enum stats_read_result stats_reader_load(const char *path, struct stats_snapshot *snap, char *why,
					  size_t why_size);
void stats_snapshot_free(struct stats_snapshot *snap);

const struct stats_socket *stats_snap_socket(const struct stats_snapshot *s, uint32_t i);
const struct stats_ring *stats_snap_ring(const struct stats_snapshot *s, uint32_t i);
const struct stats_pool *stats_snap_pool(const struct stats_snapshot *s, uint32_t i);
const struct stats_iomux *stats_snap_select(const struct stats_snapshot *s);
const struct stats_iomux *stats_snap_poll(const struct stats_snapshot *s);
const struct stats_iomux *stats_snap_epoll(const struct stats_snapshot *s, uint32_t i);
const struct stats_mc_group *stats_snap_mc(const struct stats_snapshot *s, uint32_t i);

/* "<dir>/vmastat.<pid>" into out; -1 when it does not fit. */
int stats_reader_path(char *out, size_t size, const char *dir, pid_t pid);
/* Pids with a block file in dir, ascending. Files of dead processes are
 * removed (unless keep_stale) and not listed. Returns the count (<= max). */
int stats_reader_list(const char *dir, pid_t *pids, int max, int keep_stale);
int stats_reader_pid_alive(pid_t pid);

/* Which request of struct stats_control. */
enum stats_request_kind { STATS_REQ_ZERO, STATS_REQ_LOG_LEVEL, STATS_REQ_LOG_DETAILS, STATS_REQ_FD_DUMP };
/* Posts a request and waits up to timeout_ms for the process to apply it.
 * Returns 0 when applied, 1 when posted but not applied in time, -1 when the
 * file could not be written (errno set). */
int stats_reader_request(const char *path, enum stats_request_kind kind, int32_t value, int32_t arg,
			 int timeout_ms);

#endif
