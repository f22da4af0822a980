/* vma_stats' views of a validated snapshot (see docs/stats.md for shapes). */
#ifndef VMA_STATS_TOOL_STATS_VIEW_H
#define VMA_STATS_TOOL_STATS_VIEW_H

#include <stdio.h>
#include "stats_reader.h"

/* Which fds -s selected; an empty filter selects all. */
#define STATS_FILTER_MAX 64
struct stats_fd_filter {
	int count;
	int lo[STATS_FILTER_MAX], hi[STATS_FILTER_MAX];
};
/* Parses "4-16,1,9"; returns 0 or -1 on a malformed list. */
int stats_filter_parse(struct stats_fd_filter *f, const char *text);
int stats_filter_match(const struct stats_fd_filter *f, int fd);

/* -v 1..3 totals: per-socket blocks, then (view >= 2) iomux, (view >= 3)
 * rings, CQs and pools. */
void stats_view_totals(FILE *out, const struct stats_snapshot *s, int view,
		       const struct stats_fd_filter *f);
/* -d 2: per-second rates between prev and cur over seconds. */
void stats_view_deltas(FILE *out, const struct stats_snapshot *prev, const struct stats_snapshot *cur,
		       double seconds, int view, const struct stats_fd_filter *f);
/* -v 4 */
void stats_view_mc_groups(FILE *out, const struct stats_snapshot *s);
/* -v 5: header once, then one line per socket of the process. */
void stats_view_netstat_header(FILE *out);
void stats_view_netstat(FILE *out, const struct stats_snapshot *s, const struct stats_fd_filter *f);

#endif
