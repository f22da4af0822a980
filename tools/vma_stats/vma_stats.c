/* vma_stats: shows the counters libvma publishes in <dir>/vmastat.<pid> and
 * sends it live-control requests (-z, -l, -D, -S). */
#include "config.h"
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "stats_reader.h"
#include "stats_view.h"

#define MAX_PROCS 1024
#define REQUEST_TIMEOUT_MS 2000

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: vma_stats [-p pid] [-k directory] [-v view] [-d details] [-i interval]\n\n"
		"Defaults: find_pid=enabled, directory=$VMA_STATS_SHMEM_DIR or \"/tmp/\", view=1, details=1, interval=1\n\n"
		"Options:\n"
		"  -p, --pid=<pid>              show VMA statistics for process <pid>\n"
		"  -k, --directory=<directory>  shared memory directory (VMA_STATS_SHMEM_DIR)\n"
		"  -n, --name=<application>     show VMA statistics for application <application>\n"
		"  -f, --find_pid               find the VMA process and show its statistics (default)\n"
		"  -F, --forbid_clean           do not remove files of processes that are gone\n"
		"  -i, --interval=<n>           print a report every <n> seconds\n"
		"  -c, --cycles=<n>             print <n> reports and exit, 0 = forever (default)\n"
		"  -v, --view=<1|2|3|4|5>       1 basic, 2 extra, 3 full (rings, CQs, pools),\n"
		"                               4 multicast groups, 5 like 'netstat -tunaep'\n"
		"  -d, --details=<1|2>          1 totals, 2 deltas per second\n"
		"  -S, --fd_dump=<fd> [<level>] the process logs fd's state at <level> (fd 0 = all)\n"
		"  -z, --zero                   zero the counters\n"
		"  -l, --log_level=<level>      set the VMA log level (1 <= level <= 7, or a name)\n"
		"  -D, --details_level=<level>  set the VMA log details level (0 <= level <= 3)\n"
		"  -s, --sockets=<list|range>   show only these fds, e.g. 4-16 or 1,9 (or both)\n"
		"  -V, --version                print the version\n"
		"  -h, --help                   print this help\n");
}

static int parse_int(const char *text, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_level(const char *text, long *out)
{
	static const char *const names[] = { "panic", "error", "warn", "info", "details",
					     "debug", "fine", "finer", "all" };
	if (parse_int(text, -1, 8, out) == 0)
		return 0;
	if (!strcasecmp(text, "none")) { *out = -1; return 0; }
	if (!strcasecmp(text, "warning")) { *out = 2; return 0; }
	for (long i = 0; i < 9; i++)
		if (!strcasecmp(text, names[i])) { *out = i; return 0; }
	return -1;
}

struct options {
	const char *dir, *name;
	long pid, interval, cycles, view, details;
	int forbid_clean, zero, set_level, set_details, dump, show;
	long level, details_level, dump_fd, dump_level;
	struct stats_fd_filter filter;
};

static void sleep_seconds(long s)
{
	struct timespec ts = { s, 0 };
	while (!stop_requested && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int bad(const char *opt, const char *value)
{
	fprintf(stderr, "vmastat: invalid value '%s' for %s\n", value, opt);
	usage(stderr);
	return 2;
}

/* Picks the pid to show; prints why not and returns 0 when there is none. */
static pid_t choose_pid(const struct options *o)
{
	char path[4096], why[256];
	if (o->pid) {
		if (stats_reader_path(path, sizeof(path), o->dir, (pid_t)o->pid) == 0 &&
		    access(path, F_OK) == 0) {
			if (stats_reader_pid_alive((pid_t)o->pid))
				return (pid_t)o->pid;
			if (!o->forbid_clean)
				unlink(path);
		}
		if (!stats_reader_pid_alive((pid_t)o->pid))
			fprintf(stderr, "vmastat: no process with pid %ld\n", o->pid);
		else
			fprintf(stderr, "vmastat: process %ld is not running over VMA (no %s)\n", o->pid,
				path);
		return 0;
	}
	pid_t pids[MAX_PROCS];
	int n = stats_reader_list(o->dir, pids, MAX_PROCS, o->forbid_clean);
	pid_t found = 0;
	int matches = 0;
	for (int i = 0; i < n; i++) {
		if (o->name) {
			struct stats_snapshot s;
			stats_reader_path(path, sizeof(path), o->dir, pids[i]);
			if (stats_reader_load(path, &s, why, sizeof(why)) != STATS_READ_OK)
				continue;
			int same = strcmp(s.h->process_name, o->name) == 0;
			stats_snapshot_free(&s);
			if (!same)
				continue;
		}
		if (!matches++)
			found = pids[i];
	}
	if (!matches) {
		if (o->name)
			fprintf(stderr, "vmastat: no application named '%s' is running over VMA\n", o->name);
		else
			fprintf(stderr, "vmastat: Failed to identify process...\n");
		return 0;
	}
	if (matches > 1)
		fprintf(stderr, "vmastat: %d processes run over VMA, showing pid %d (choose with -p)\n",
			matches, (int)found);
	return found;
}

static int netstat_all(const struct options *o)
{
	pid_t pids[MAX_PROCS];
	char path[4096], why[256];
	int n = stats_reader_list(o->dir, pids, MAX_PROCS, o->forbid_clean);
	stats_view_netstat_header(stdout);
	for (int i = 0; i < n; i++) {
		struct stats_snapshot s;
		if (o->pid && pids[i] != o->pid)
			continue;
		stats_reader_path(path, sizeof(path), o->dir, pids[i]);
		if (stats_reader_load(path, &s, why, sizeof(why)) != STATS_READ_OK) {
			fprintf(stderr, "vmastat: pid %d: %s\n", (int)pids[i], why);
			continue;
		}
		stats_view_netstat(stdout, &s, &o->filter);
		stats_snapshot_free(&s);
	}
	return 0;
}

static int post(const char *path, enum stats_request_kind kind, long value, long arg,
		const char *what, pid_t pid)
{
	int rc = stats_reader_request(path, kind, (int32_t)value, (int32_t)arg, REQUEST_TIMEOUT_MS);
	if (rc < 0) {
		fprintf(stderr, "vmastat: cannot send the request to process %d: %s\n", (int)pid,
			strerror(errno));
		return 1;
	}
	if (rc > 0) {
		fprintf(stderr, "vmastat: process %d did not apply the request within %d ms\n", (int)pid,
			REQUEST_TIMEOUT_MS);
		return 1;
	}
	printf("vmastat: %s (pid %d)\n", what, (int)pid);
	return 0;
}

static int monitor(const struct options *o, pid_t pid, const char *path)
{
	struct stats_snapshot prev = { 0 }, cur;
	char why[256];
	for (long cycle = 0; !stop_requested; cycle++) {
		enum stats_read_result r = stats_reader_load(path, &cur, why, sizeof(why));
		if (r == STATS_READ_NO_FILE) {
			printf("vmastat: process %d is gone\n", (int)pid);
			stats_snapshot_free(&prev);
			return cycle ? 0 : 1;
		}
		if (r != STATS_READ_OK) {
			fprintf(stderr, "vmastat: %s\n", why);
			stats_snapshot_free(&prev);
			return 1;
		}
		if (o->details == 2 && !prev.data) {
			/* Rates need two reads: the first only sets the baseline. */
			prev = cur;
			cycle--;
			sleep_seconds(o->interval);
			continue;
		}
		if (o->view == 4)
			stats_view_mc_groups(stdout, &cur);
		else if (o->details == 2)
			stats_view_deltas(stdout, &prev, &cur, (double)o->interval, (int)o->view, &o->filter);
		else
			stats_view_totals(stdout, &cur, (int)o->view, &o->filter);
		fflush(stdout);
		stats_snapshot_free(&prev);
		prev = cur;
		if (o->cycles && cycle + 1 >= o->cycles)
			break;
		sleep_seconds(o->interval);
	}
	stats_snapshot_free(&prev);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' }, { "directory", required_argument, NULL, 'k' },
		{ "name", required_argument, NULL, 'n' }, { "find_pid", no_argument, NULL, 'f' },
		{ "forbid_clean", no_argument, NULL, 'F' }, { "interval", required_argument, NULL, 'i' },
		{ "cycles", required_argument, NULL, 'c' }, { "view", required_argument, NULL, 'v' },
		{ "details", required_argument, NULL, 'd' }, { "fd_dump", required_argument, NULL, 'S' },
		{ "zero", no_argument, NULL, 'z' }, { "log_level", required_argument, NULL, 'l' },
		{ "details_level", required_argument, NULL, 'D' },
		{ "sockets", required_argument, NULL, 's' }, { "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	struct options o = { .dir = "/tmp/", .interval = 1, .view = 1, .details = 1, .dump_level = 3 };
	/* The same variable that tells libvma where to write; -k overrides it. */
	const char *env_dir = getenv("VMA_STATS_SHMEM_DIR");
	if (env_dir && env_dir[0])
		o.dir = env_dir;
	int opt;
	while ((opt = getopt_long(argc, argv, "p:k:n:fFi:c:v:d:S:zl:D:s:Vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'p': if (parse_int(optarg, 1, 0x7fffffffL, &o.pid)) return bad("-p", optarg); break;
		case 'k': o.dir = optarg; break;
		case 'n': o.name = optarg; break;
		case 'f': break;
		case 'F': o.forbid_clean = 1; break;
		case 'i': if (parse_int(optarg, 1, 86400, &o.interval)) return bad("-i", optarg); o.show = 1; break;
		case 'c': if (parse_int(optarg, 0, 0x7fffffffL, &o.cycles)) return bad("-c", optarg); o.show = 1; break;
		case 'v': if (parse_int(optarg, 1, 5, &o.view)) return bad("-v", optarg); o.show = 1; break;
		case 'd': if (parse_int(optarg, 1, 2, &o.details)) return bad("-d", optarg); o.show = 1; break;
		case 'S':
			if (parse_int(optarg, 0, 0x7fffffffL, &o.dump_fd)) return bad("-S", optarg);
			o.dump = 1;
			if (optind < argc && argv[optind][0] != '-') {
				if (parse_level(argv[optind], &o.dump_level)) return bad("-S level", argv[optind]);
				optind++;
			}
			break;
		case 'z': o.zero = 1; break;
		case 'l': if (parse_level(optarg, &o.level)) return bad("-l", optarg); o.set_level = 1; break;
		case 'D': if (parse_int(optarg, 0, 3, &o.details_level)) return bad("-D", optarg); o.set_details = 1; break;
		case 's': if (stats_filter_parse(&o.filter, optarg)) return bad("-s", optarg); break;
		case 'V': printf("vma_stats %s (statistics layout %u)\n", PACKAGE_VERSION, STATS_LAYOUT_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc)
		return bad("argument", argv[optind]);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_DFL);
	if (o.view == 5)
		return netstat_all(&o);
	pid_t pid = choose_pid(&o);
	if (!pid)
		return 1;
	char path[4096], why[256];
	stats_reader_path(path, sizeof(path), o.dir, pid);
	struct stats_snapshot s;
	if (stats_reader_load(path, &s, why, sizeof(why)) != STATS_READ_OK) {
		fprintf(stderr, "vmastat: pid %d: %s\n", (int)pid, why);
		return 1;
	}
	stats_snapshot_free(&s);
	int control = o.zero || o.set_level || o.set_details || o.dump, rc = 0;
	char what[96];
	if (o.zero)
		rc |= post(path, STATS_REQ_ZERO, 0, 0, "counters zeroed", pid);
	if (o.set_level) {
		snprintf(what, sizeof(what), "log level set to %ld", o.level);
		rc |= post(path, STATS_REQ_LOG_LEVEL, o.level, 0, what, pid);
	}
	if (o.set_details) {
		snprintf(what, sizeof(what), "log details set to %ld", o.details_level);
		rc |= post(path, STATS_REQ_LOG_DETAILS, o.details_level, 0, what, pid);
	}
	if (o.dump) {
		snprintf(what, sizeof(what), "fd %ld dumped to the process log", o.dump_fd);
		rc |= post(path, STATS_REQ_FD_DUMP, o.dump_fd, o.dump_level, what, pid);
	}
	if (control && !o.show)
		return rc;
	return monitor(&o, pid, path) | rc;
}
