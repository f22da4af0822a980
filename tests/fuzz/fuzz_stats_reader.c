/* Harness 6: vma_stats reading a corrupt statistics block. The input is
 * the whole block file: it is written to a temporary file and read back
 * with stats_reader_load (tools/vma_stats/stats_reader.c: validation,
 * then the private copy), and a block that passes is shown with every view
 * of vma_stats (-v 1..5, -d deltas against itself) into /dev/null. A block
 * the reader accepts must never make a view read outside it (ASan) or
 * trip UBSan. stats_reader_validate is also run on the bytes in memory
 * and must agree with the load. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats_reader.h"
#include "stats_view.h"

void fuzz_log_init(void);

static char path[64];

static void remove_file(void)
{
	unlink(path);
}
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	/* tmpfs when there is one: the file is rewritten for every input. */
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(path, sizeof(path), "%s/fuzz_stats.%d.block", dir, (int)getpid());
	atexit(remove_file);
	devnull = fopen("/dev/null", "w");
	return devnull ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	FILE *f = fopen(path, "w");
	if (!f)
		abort();
	fwrite(data, 1, size, f);
	fclose(f);

	enum stats_read_result mem = stats_reader_validate(data, size, why, sizeof(why));
	struct stats_snapshot s;
	enum stats_read_result r = stats_reader_load(path, &s, why, sizeof(why));
	if (r != mem) {
		fprintf(stderr, "fuzz: stats: validate says %d, load says %d (%s)\n", mem, r, why);
		abort();
	}
	if (r != STATS_READ_OK)
		return 0;

	struct stats_fd_filter all = { 0 }, some;
	if (stats_filter_parse(&some, "0-2,100,150-200"))
		abort();
	for (int view = 1; view <= 3; view++) {
		stats_view_totals(devnull, &s, view, &all);
		stats_view_totals(devnull, &s, view, &some);
		stats_view_deltas(devnull, &s, &s, 1.0, view, &all);
	}
	stats_view_mc_groups(devnull, &s);
	stats_view_netstat_header(devnull);
	stats_view_netstat(devnull, &s, &all);
	stats_view_netstat(devnull, &s, &some);
	stats_snapshot_free(&s);
	return 0;
}
