/* Live control from vma_stats (-z, -l, -D, -S) and the per-socket text
 * records (VMA_STATS_FILE at close, fd dumps). */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "log/vlog.h"
#include "stats/stats.h"
#include "stats/stats_format.h"
#include "stats/stats_internal.h"
#include "os/os.h"

/* Eight lines of up to ~150 characters with every counter at 20 digits. */
#define STATS_RECORD_MAX 1536

void stats_write_file_record(const struct stats_socket *s)
{
	if (stats_g.stats_file_fd < 0 || !stats_socket_had_traffic(s))
		return;
	char buf[STATS_RECORD_MAX];
	size_t len = stats_format_socket_record(buf, sizeof(buf), s);
	/* One write per record: O_APPEND keeps records of several processes whole. */
	ssize_t n;
	do
		n = OS_CALL(write, stats_g.stats_file_fd, buf, len);
	while (n < 0 && errno == EINTR);
}

void stats_socket_dump(const struct stats_socket *s, int log_level)
{
	char buf[STATS_RECORD_MAX];
	stats_format_socket_record(buf, sizeof(buf), s);
	char *line = buf;
	while (*line) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		/* vlog adds its own "VMA <LEVEL>: " prefix. */
		vlog_print(log_level, "%s", strncmp(line, "VMA: ", 5) == 0 ? line + 5 : line);
		if (!nl)
			break;
		line = nl + 1;
	}
}

void stats_socket_dump_fd(int fd, int level)
{
	/* The table's place and size are ours (stats_g.sec); in_use and fd are
	 * data, only compared. */
	const struct stats_socket *s = stats_sockets();
	for (uint32_t i = 0; s && i < stats_g.sec.socket_slots; i++)
		if (__atomic_load_n(&s[i].in_use, __ATOMIC_ACQUIRE) && (fd == 0 || s[i].fd == fd))
			stats_socket_dump(&s[i], level);
}

/* True (and the request's values copied out) when the tool posted a new one. */
static int take(struct stats_request *r, int32_t *value, int32_t *arg)
{
	uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
	if (seq == __atomic_load_n(&r->done, __ATOMIC_RELAXED))
		return 0;
	*value = __atomic_load_n(&r->value, __ATOMIC_RELAXED);
	*arg = __atomic_load_n(&r->arg, __ATOMIC_RELAXED);
	__atomic_store_n(&r->done, seq, __ATOMIC_RELEASE);
	return 1;
}

int stats_service_control(const struct stats_control_ops *ops)
{
	struct stats_header *h = stats_g.block;
	if (!h)
		return 0;
	struct stats_control *c = &h->control;
	int applied = 0;
	int32_t value, arg;
	if (take(&c->zero, &value, &arg)) {
		stats_zero_all();
		applied |= STATS_APPLIED_ZERO;
	}
	if (take(&c->log_level, &value, &arg)) {
		if (value < VLOG_NONE || value > VLOG_ALL) {
			vlog_warn("vma_stats asked for log level %d, out of range %d..%d; ignored",
				  (int)value, VLOG_NONE, VLOG_ALL);
		} else {
			if (ops && ops->set_log_level)
				ops->set_log_level(value);
			applied |= STATS_APPLIED_LOG_LEVEL;
		}
	}
	if (take(&c->log_details, &value, &arg)) {
		if (value < 0 || value > 3) {
			vlog_warn("vma_stats asked for log details %d, out of range 0..3; ignored", (int)value);
		} else {
			if (ops && ops->set_log_details)
				ops->set_log_details(value);
			applied |= STATS_APPLIED_LOG_DETAILS;
		}
	}
	if (take(&c->fd_dump, &value, &arg)) {
		int level = arg < VLOG_PANIC || arg > VLOG_ALL ? VLOG_INFO : arg;
		if (value >= 0) {
			if (ops && ops->dump_fd)
				ops->dump_fd(value, level);
			else
				stats_socket_dump_fd(value, level);
			applied |= STATS_APPLIED_FD_DUMP;
		}
	}
	return applied;
}
