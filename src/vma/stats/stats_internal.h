/* State shared by the files of the stats module only. */
#ifndef VMA_STATS_STATS_INTERNAL_H
#define VMA_STATS_STATS_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include "stats/stats_layout.h"

/* Where each section lies and how many slots it has, decided by stats_open
 * and kept in private memory. The library never reads an offset or a count
 * back from the mapping: whoever can write the file (vma_stats, or anyone
 * if the file were not ours) could otherwise steer the library's writes.
 * The mapping is data only: counters, and requests whose values are
 * range-checked before use. */
struct stats_sections {
	uint64_t socket_off, ring_off, pool_off, select_off, poll_off, epoll_off, mc_off;
	uint32_t socket_slots, ring_slots, pool_slots, epoll_slots, mc_slots;
};

struct stats_state {
	struct stats_header *block; /* file mapping, or private memory without a file */
	struct stats_sections sec;
	uint64_t size;
	pid_t owner_pid;            /* who created path: only it unlinks */
	int stats_file_fd;          /* VMA_STATS_FILE, -1 when unset */
	char path[PATH_MAX];
};
extern struct stats_state stats_g;

void stats_write_file_record(const struct stats_socket *s);
/* The slot tables, from stats_g.sec (NULL without a block). */
struct stats_socket *stats_sockets(void);

#endif
