/* The logger. It runs inside the application's own calls (an interposed
 * send() may log), in any thread, before our constructor and in forked
 * children. So the print path takes no lock, allocates nothing and keeps
 * errno, and every write/close/ioctl is libc's own (os/os.h): the plain
 * names are libvma's interposed wrappers, and re-entering them from the
 * logger could recurse or deadlock. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include "log/vlog.h"
#include "os/os.h"

#define VLOG_STDERR_FD 2
#define VLOG_COLOR_RED "\033[31m"
#define VLOG_COLOR_PURPLE "\033[35m"
#define VLOG_COLOR_DIM "\033[2m"
#define VLOG_COLOR_RESET "\033[0m"

/* Read by the vlog_<level>() macros with a plain load; written atomically. */
int vlog_current_level = VLOG_INFO;

/* The print path reads these three with relaxed atomic loads. */
static int vlog_sink_fd = VLOG_STDERR_FD;
static int vlog_detail_level;
/* 1/0 once decided; -1 until the first line or vlog_configure() looks at the
 * sink, so that logging before configuration still honours a tty stderr. */
static int vlog_colors_active = -1;

static int64_t vlog_start_ns;

/* Configuration state, changed only under vlog_config_lock. */
static pthread_mutex_t vlog_config_lock = PTHREAD_MUTEX_INITIALIZER;
static int vlog_colors_wish = 1;
static int vlog_file_fd = -1;
static char vlog_file_pattern[PATH_MAX];
static char vlog_file_path[PATH_MAX];

static int vlog_clamp(int value, int low, int high)
{
	return value < low ? low : value > high ? high : value;
}

void vlog_set_level(int level)
{
	__atomic_store_n(&vlog_current_level, vlog_clamp(level, VLOG_NONE, VLOG_ALL),
			 __ATOMIC_RELAXED);
}

int vlog_get_level(void)
{
	return __atomic_load_n(&vlog_current_level, __ATOMIC_RELAXED);
}

void vlog_set_details(int details)
{
	__atomic_store_n(&vlog_detail_level, vlog_clamp(details, 0, 3), __ATOMIC_RELAXED);
}

int vlog_get_details(void)
{
	return __atomic_load_n(&vlog_detail_level, __ATOMIC_RELAXED);
}

/* Names accepted for each level; the first is the one we print. */
static const struct {
	int level;
	const char *names[3];
} vlog_level_names[] = {
	{ VLOG_NONE, { "NONE", NULL, NULL } },
	{ VLOG_PANIC, { "PANIC", NULL, NULL } },
	{ VLOG_ERROR, { "ERROR", NULL, NULL } },
	{ VLOG_WARNING, { "WARNING", "WARN", NULL } },
	{ VLOG_INFO, { "INFO", "INFORMATION", NULL } },
	{ VLOG_DETAILS, { "DETAILS", NULL, NULL } },
	{ VLOG_DEBUG, { "DEBUG", NULL, NULL } },
	{ VLOG_FINE, { "FINE", "FUNC", NULL } },
	{ VLOG_FINER, { "FINER", "FUNC_ALL", NULL } },
	{ VLOG_ALL, { "ALL", NULL, NULL } },
};

int vlog_level_parse(const char *text, int *level)
{
	if (!text)
		return -1;
	while (*text == ' ' || *text == '\t')
		text++;
	char *end;
	long n = strtol(text, &end, 10);
	if (end != text) {
		while (*end == ' ' || *end == '\t')
			end++;
		if (*end || n < VLOG_NONE || n > VLOG_ALL)
			return -1;
		*level = (int)n;
		return 0;
	}
	size_t len = strlen(text);
	while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
		len--;
	for (size_t i = 0; i < sizeof(vlog_level_names) / sizeof(vlog_level_names[0]); i++)
		for (int k = 0; k < 3 && vlog_level_names[i].names[k]; k++)
			if (strlen(vlog_level_names[i].names[k]) == len &&
			    !strncasecmp(vlog_level_names[i].names[k], text, len)) {
				*level = vlog_level_names[i].level;
				return 0;
			}
	return -1;
}

const char *vlog_level_name(int level)
{
	for (size_t i = 0; i < sizeof(vlog_level_names) / sizeof(vlog_level_names[0]); i++)
		if (vlog_level_names[i].level == level)
			return vlog_level_names[i].names[0];
	return "UNKNOWN";
}

static int64_t vlog_monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "Process start" is when libvma was loaded (our constructor), or the first
 * line if another library's constructor logs before ours runs. A forked child
 * keeps its parent's start, so its times continue the parent's timeline. */
static int64_t vlog_start_time(void)
{
	int64_t start = __atomic_load_n(&vlog_start_ns, __ATOMIC_RELAXED);
	if (start)
		return start;
	int64_t now = vlog_monotonic_ns();
	if (__atomic_compare_exchange_n(&vlog_start_ns, &start, now, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return now;
	return start; /* another thread won; start now holds its value */
}

/* isatty() without libc: TCGETS only succeeds on a terminal. The glibc
 * termios is larger than the kernel's, so it is a safe buffer for it. */
static bool vlog_fd_is_tty(int fd)
{
	struct termios t;
	return OS_CALL(ioctl, fd, TCGETS, &t) == 0;
}

/* ---- formatting ---- */

/* A bounded line under construction; cap excludes the terminating NUL. */
struct vlog_line {
	char *buf;
	size_t cap;
	size_t len;
};

static void vlog_line_put(struct vlog_line *line, const char *text)
{
	size_t n = strlen(text);
	if (n > line->cap - line->len)
		n = line->cap - line->len;
	memcpy(line->buf + line->len, text, n);
	line->len += n;
	line->buf[line->len] = '\0';
}

__attribute__((format(printf, 2, 3)))
static void vlog_line_printf(struct vlog_line *line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line->buf + line->len, line->cap - line->len + 1, fmt, ap);
	va_end(ap);
	if (n > 0)
		line->len += (size_t)n < line->cap - line->len ? (size_t)n : line->cap - line->len;
	line->buf[line->len] = '\0';
}

static const char *vlog_color_of(int level)
{
	if (level <= VLOG_ERROR)
		return VLOG_COLOR_RED;
	if (level == VLOG_WARNING)
		return VLOG_COLOR_PURPLE;
	if (level >= VLOG_FINE)
		return VLOG_COLOR_DIM;
	return NULL;
}

/* The fields go before "VMA <LEVEL>:" as in the reference manual's examples.
 * Pid and tid are asked from the kernel on every line: a cached pid would be
 * the parent's in a forked child. */
static void vlog_put_details(struct vlog_line *line, int details)
{
	if (details <= 0)
		return;
	long tid = gettid();
	if (details == 1) {
		vlog_line_printf(line, "Tid: %ld ", tid);
		return;
	}
	if (details >= 3) {
		int64_t us = (vlog_monotonic_ns() - vlog_start_time()) / 1000;
		if (us < 0)
			us = 0;
		vlog_line_printf(line, "Time: %lld.%03lld ", (long long)(us / 1000),
				 (long long)(us % 1000));
	}
	vlog_line_printf(line, "Pid: %ld Tid: %ld ", (long)getpid(), tid);
}

size_t vlog_format(char *buf, size_t size, int level, int details, int colors,
		   const char *fmt, va_list ap)
{
	if (!buf || size == 0)
		return 0;
	struct vlog_line line = { .buf = buf, .cap = size - 1, .len = 0 };
	buf[0] = '\0';
	const char *color = colors ? vlog_color_of(level) : NULL;
	const char *reset = color ? VLOG_COLOR_RESET : "";

	if (color)
		vlog_line_put(&line, color);
	vlog_put_details(&line, details);
	vlog_line_printf(&line, "VMA %s: ", vlog_level_name(level));

	size_t room = line.cap - line.len;
	int printed = fmt ? vsnprintf(buf + line.len, room + 1, fmt, ap) : 0;
	size_t msg = printed > 0 ? (size_t)printed : 0;
	if (printed < 0)
		buf[line.len] = '\0';
	bool cut = msg > room;
	if (!cut && msg && buf[line.len + msg - 1] == '\n')
		msg--; /* the newline is re-added after the colour reset */

	size_t tail = strlen(reset) + 1;
	if (cut || line.len + msg + tail > line.cap) {
		/* Shorten the message (or, in an absurdly small buffer, even the
		 * prefix) so the marker, the reset and the newline always fit. */
		tail += strlen(VLOG_TRUNCATION_MARK);
		size_t keep_until = line.cap > tail ? line.cap - tail : 0;
		if (line.len > keep_until) {
			line.len = keep_until;
			msg = 0;
		} else if (line.len + msg > keep_until) {
			msg = keep_until - line.len;
		}
		line.len += msg;
		buf[line.len] = '\0';
		vlog_line_put(&line, VLOG_TRUNCATION_MARK);
	} else {
		line.len += msg;
		buf[line.len] = '\0';
	}
	vlog_line_put(&line, reset);
	vlog_line_put(&line, "\n");
	return line.len;
}

/* ---- output ---- */

static void vlog_write_all(int fd, const char *data, size_t len)
{
	while (len) {
		long n = os_write_nocancel(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* EAGAIN on a non-blocking stderr, EPIPE...: drop the line */
		data += n;
		len -= (size_t)n;
	}
}

static int vlog_colors_for_line(void)
{
	int active = __atomic_load_n(&vlog_colors_active, __ATOMIC_RELAXED);
	if (active < 0) {
		/* Before vlog_configure(): the sink is stderr and the wish is "on". */
		active = vlog_fd_is_tty(VLOG_STDERR_FD);
		int unknown = -1;
		__atomic_compare_exchange_n(&vlog_colors_active, &unknown, active, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	return active;
}

int vlog_sink(void)
{
	return __atomic_load_n(&vlog_sink_fd, __ATOMIC_RELAXED);
}

static __thread unsigned vlog_demoted;

void vlog_demote(bool on)
{
	if (on)
		vlog_demoted++;
	else if (vlog_demoted)
		vlog_demoted--;
}

void vlog_vprint(int level, const char *fmt, va_list ap)
{
	if (vlog_demoted && (level == VLOG_WARNING || level == VLOG_INFO))
		level = VLOG_DEBUG;
	if (level >= VLOG_PANIC && level <= vlog_get_level()) {
		int saved_errno = errno;
		char line[VLOG_LINE_MAX];
		int fd = __atomic_load_n(&vlog_sink_fd, __ATOMIC_RELAXED);
		size_t len = vlog_format(line, sizeof(line), level, vlog_get_details(),
					 vlog_colors_for_line(), fmt, ap);
		vlog_write_all(fd, line, len);
		errno = saved_errno;
	}
	/* PANIC means the process cannot go on safely (see docs/logging.md). */
	if (level == VLOG_PANIC)
		abort();
}

void vlog_print(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog_vprint(level, fmt, ap);
	va_end(ap);
}

void vlog_panic_and_abort(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog_vprint(VLOG_PANIC, fmt, ap);
	va_end(ap);
	abort(); /* already done by vlog_vprint; tells the compiler too */
}

/* ---- sink selection ---- */

/* Replaces the first "%d" with the pid. Any other '%' is copied as is: the
 * pattern comes from the environment and is never used as a format string. */
static int vlog_expand_file_name(const char *pattern, pid_t pid, char *out, size_t size)
{
	const char *mark = strstr(pattern, "%d");
	int n = mark ? snprintf(out, size, "%.*s%ld%s", (int)(mark - pattern), pattern,
				(long)pid, mark + 2)
		     : snprintf(out, size, "%s", pattern);
	return n >= 0 && (size_t)n < size ? 0 : -1;
}

/* Order matters to a concurrent printer: it must never see the new fd
 * together with the old colour decision on a file. */
static void vlog_use_stderr_locked(void)
{
	__atomic_store_n(&vlog_sink_fd, VLOG_STDERR_FD, __ATOMIC_RELAXED);
	if (vlog_file_fd >= 0) {
		os_close_nocancel(vlog_file_fd);
		vlog_file_fd = -1;
	}
	vlog_file_path[0] = '\0';
	__atomic_store_n(&vlog_colors_active,
			 vlog_colors_wish && vlog_fd_is_tty(VLOG_STDERR_FD), __ATOMIC_RELAXED);
}

int vlog_open_append(const char *path, char *why, size_t why_size, int *refused)
{
	int saved = errno;
	*refused = 0;
	/* O_NONBLOCK so that a FIFO nobody reads fails instead of blocking the
	 * application's start; it is cleared again below. */
	long fd = openat(AT_FDCWD, path,
			  O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
			  0600);
	struct stat st;
	if (fd < 0) {
		int err = errno;
		if (err == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
			*refused = 1;
			snprintf(why, why_size, "it is a symbolic link");
		} else {
			char reason[128];
			snprintf(why, why_size, "%s", strerror_r(err, reason, sizeof(reason)));
		}
		errno = saved;
		return -1;
	}
	if (fstat((int)fd, &st) != 0) {
		char reason[128];
		snprintf(why, why_size, "%s", strerror_r(errno, reason, sizeof(reason)));
		os_close_nocancel((int)fd);
		errno = saved;
		return -1;
	}
	/* A file someone else owns is theirs to read, swap or grow: not a place
	 * for our lines. Root owns /dev/null and /dev/tty, and can do anything
	 * to us anyway. */
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		*refused = 1;
		snprintf(why, why_size, "it belongs to another user (uid %u)", (unsigned)st.st_uid);
		os_close_nocancel((int)fd);
		errno = saved;
		return -1;
	}
	long flags = OS_CALL(fcntl, (int)fd, F_GETFL);
	if (flags >= 0)
		OS_CALL(fcntl, (int)fd, F_SETFL, flags & ~(long)O_NONBLOCK);
	errno = saved;
	return (int)fd;
}

static int vlog_use_file_locked(const char *pattern)
{
	char path[PATH_MAX];
	char reason[160];
	int refused = 0;
	if (vlog_expand_file_name(pattern, getpid(), path, sizeof(path)) < 0) {
		snprintf(path, sizeof(path), "%s", pattern);
		snprintf(reason, sizeof(reason), "%s", "File name too long");
		goto fail;
	}
	if (vlog_file_fd >= 0 && strcmp(path, vlog_file_path) == 0)
		return 0; /* already writing there */

	long fd = vlog_open_append(path, reason, sizeof(reason), &refused);
	if (fd < 0)
		goto fail;
	__atomic_store_n(&vlog_colors_active, 0, __ATOMIC_RELAXED);
	if (vlog_file_fd >= 0 &&
	    OS_CALL(dup3, (int)fd, vlog_file_fd, O_CLOEXEC) == vlog_file_fd) {
		/* Swapped in place: a printer holding the old fd number writes to
		 * the new file instead of a closed (or reused) descriptor. */
		os_close_nocancel((int)fd);
	} else {
		if (vlog_file_fd >= 0)
			os_close_nocancel(vlog_file_fd);
		vlog_file_fd = (int)fd;
	}
	__atomic_store_n(&vlog_sink_fd, vlog_file_fd, __ATOMIC_RELAXED);
	snprintf(vlog_file_path, sizeof(vlog_file_path), "%s", path);
	return 0;

fail:
	vlog_use_stderr_locked();
	if (refused)
		vlog_print(VLOG_WARNING, "Refusing log file '%s' (VMA_LOG_FILE=%s): %s; logging to "
			   "stderr (name a file of your own, in a directory only you can write)",
			   path, pattern, reason);
	else
		vlog_print(VLOG_WARNING, "Cannot open log file '%s' (VMA_LOG_FILE=%s): %s; logging to "
			   "stderr", path, pattern, reason);
	return -1;
}

/* Caller holds vlog_config_lock (or is the only thread, after fork). */
static int vlog_apply_sink_locked(void)
{
	if (vlog_file_pattern[0] == '\0') {
		vlog_use_stderr_locked();
		return 0;
	}
	return vlog_use_file_locked(vlog_file_pattern);
}

int vlog_configure(const struct vlog_settings *settings)
{
	static const struct vlog_settings defaults = { VLOG_INFO, 0, 1, NULL };
	if (!settings)
		settings = &defaults;
	vlog_set_level(settings->level);
	vlog_set_details(settings->details);

	pthread_mutex_lock(&vlog_config_lock);
	vlog_colors_wish = settings->colors != 0;
	const char *file = settings->file ? settings->file : "";
	int rc = 0;
	if (strlen(file) >= sizeof(vlog_file_pattern)) {
		vlog_file_pattern[0] = '\0';
		vlog_use_stderr_locked();
		vlog_print(VLOG_WARNING, "VMA_LOG_FILE is longer than %zu characters; logging to stderr",
			   sizeof(vlog_file_pattern) - 1);
		rc = -1;
	} else {
		snprintf(vlog_file_pattern, sizeof(vlog_file_pattern), "%s", file);
		rc = vlog_apply_sink_locked();
	}
	pthread_mutex_unlock(&vlog_config_lock);
	return rc;
}

void vlog_shutdown(void)
{
	pthread_mutex_lock(&vlog_config_lock);
	vlog_file_pattern[0] = '\0';
	vlog_use_stderr_locked();
	pthread_mutex_unlock(&vlog_config_lock);
}

/* In a forked child a "%d" log file must follow the child's pid. The child is
 * single-threaded here and the lock may have been held by a parent thread
 * that does not exist in the child, so it is re-initialised, not taken. */
static void vlog_after_fork_in_child(void)
{
	pthread_mutex_init(&vlog_config_lock, NULL);
	if (vlog_file_fd >= 0 && vlog_file_pattern[0] != '\0')
		vlog_apply_sink_locked();
}

__attribute__((constructor))
static void vlog_init(void)
{
	vlog_start_time();
	pthread_atfork(NULL, NULL, vlog_after_fork_in_child);
}

/* ---- the high log level warning ---- */

void vlog_warn_if_high_level(void)
{
	int level = vlog_get_level();
	if (level < VLOG_DEBUG)
		return;
	char first[64];
	snprintf(first, sizeof(first), "The log level is high (VMA_TRACELEVEL=%s).",
		 vlog_level_name(level));
	const char *const text[] = {
		first,
		"Expect the application to run noticeably slower.",
		"Use this level for debugging only; the default is INFO.",
	};
	const char *stars = "****************************************************************";
	vlog_print(VLOG_WARNING, "%s", stars);
	for (size_t i = 0; i < sizeof(text) / sizeof(text[0]); i++)
		vlog_print(VLOG_WARNING, "* %-60s *", text[i]);
	vlog_print(VLOG_WARNING, "%s", stars);
}
