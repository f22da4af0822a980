/* State shared by the files of the stats module only. */
#ifndef VMA_STATS_STATS_INTERNAL_H
#define VMA_STATS_STATS_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include "stats/stats_layout.h"

struct stats_state {
	struct stats_header *block; /* file mapping, or private memory without a file */
	uint64_t size;
	pid_t owner_pid;            /* who created path: only it unlinks */
	int stats_file_fd;          /* VMA_STATS_FILE, -1 when unset */
	char path[PATH_MAX];
};
extern struct stats_state stats_g;

void stats_write_file_record(const struct stats_socket *s);

#endif
