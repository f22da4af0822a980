/* The logger: every message libvma prints goes through here.
 * Levels, details and colours follow VMA_TRACELEVEL, VMA_LOG_DETAILS,
 * VMA_LOG_COLORS and VMA_LOG_FILE (see docs/logging.md). */
#ifndef VMA_LOG_VLOG_H
#define VMA_LOG_VLOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum vlog_level {
	VLOG_NONE = -1,
	VLOG_PANIC = 0,
	VLOG_ERROR = 1,
	VLOG_WARNING = 2,
	VLOG_INFO = 3,
	VLOG_DETAILS = 4,
	VLOG_DEBUG = 5,
	VLOG_FINE = 6,
	VLOG_FINER = 7,
	VLOG_ALL = 8,
} vlog_level_t;

/* The level in force. Read by the macros below before any formatting, so a
 * disabled message costs one load and one compare on the hot path. */
extern int vlog_current_level;

struct vlog_settings {
	int level;            /* vlog_level_t */
	int details;          /* 0..3 as VMA_LOG_DETAILS */
	int colors;           /* wish; only honoured when the sink is stderr and a tty */
	const char *file;     /* VMA_LOG_FILE pattern, NULL or "" = stderr; one %d -> pid */
};

/* Applies settings (opens the log file, decides colours). Safe to call again
 * (e.g. vma_stats -l changes the level). Returns 0, or -1 when the file could
 * not be opened (logging then stays on stderr, with a warning). */
int vlog_configure(const struct vlog_settings *settings);
/* Opens path to append to it (VMA_LOG_FILE, VMA_STATS_FILE): created with
 * mode 0600 if missing; O_NOFOLLOW, O_CLOEXEC, and never waits (a FIFO with
 * no reader fails). Refused: a symbolic link as the last component, and a
 * file owned by a user other than us (effective uid) or root, i.e. one
 * another local user planted where we would write. Returns the fd, or -1
 * with the reason in why ("it is a symbolic link", "No such file or
 * directory") and *refused set to 1 for a refusal, 0 for an open error. */
int vlog_open_append(const char *path, char *why, size_t why_size, int *refused);

/* Changes only the level / details (live control from vma_stats; callable
 * from any thread). Out-of-range values are clamped to NONE..ALL and 0..3. */
void vlog_set_level(int level);
int vlog_get_level(void);
void vlog_set_details(int details);
int vlog_get_details(void);

/* Parses a VMA_TRACELEVEL value: a number (-1..8) or a name, case-insensitive:
 * none, panic, error, warn|warning, info|information, details, debug,
 * fine|func, finer|func_all, all. Returns 0 and sets *level, or -1. */
int vlog_level_parse(const char *text, int *level);
/* Upper-case name as shown in log lines and the banner ("DEBUG"). */
const char *vlog_level_name(int level);

/* Longest line vlog_print writes, NUL included; longer messages are cut and
 * end with VLOG_TRUNCATION_MARK. */
#define VLOG_LINE_MAX 2048
#define VLOG_TRUNCATION_MARK "...[truncated]"

/* Formats and writes one line: "<details>VMA <LEVEL>: <message>\n", where
 * <details> is "", "Tid: T ", "Pid: P Tid: T " or "Time: MS.mmm Pid: P Tid: T ".
 * Prints nothing when level is above the level in force. One write per line,
 * never allocates, never calls an interposed libc function, keeps errno,
 * async-signal tolerant enough for the SIGINT path. A PANIC line is followed
 * by abort(), even when the level in force hides it. */
void vlog_print(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vlog_vprint(int level, const char *fmt, va_list ap);
/* What vlog_panic() expands to: prints (if enabled) and never returns. */
void vlog_panic_and_abort(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/* Formats a line into buf exactly as vlog_print would write it (for tests and
 * for the banner); returns its length (< size; buf is NUL-terminated when
 * size > 0). colors selects the escape sequences regardless of any tty. */
size_t vlog_format(char *buf, size_t size, int level, int details, int colors,
		   const char *fmt, va_list ap);

/* Prints the seeds' "high log level" warning box when level >= DEBUG. */
void vlog_warn_if_high_level(void);

/* While the calling thread is between vlog_demote(true) and
 * vlog_demote(false), its warnings and infos print at DEBUG: for a
 * lower layer's messages about something the caller does not need (an
 * optional ring that could not be had), which would otherwise tell the
 * user that traffic stays on the kernel path when it does not. Nests. */
void vlog_demote(bool on);

/* The fd log lines go to right now (stderr or the VMA_LOG_FILE). */
int vlog_sink(void);

/* VMA_HANDLE_SIGSEGV (vlog_segv.c): installs a SIGSEGV handler that logs a
 * backtrace, then lets the default action end the process. 0, or -1 with a
 * warning. */
int vlog_segv_install(void);

/* Closes a log file and goes back to stderr (at exit). Lines are never
 * buffered, so there is nothing to flush. */
void vlog_shutdown(void);

#define vlog_enabled(lvl) (__builtin_expect((lvl) <= vlog_current_level, 0))
#define VLOG_AT(lvl, ...) \
	do { if (vlog_enabled(lvl)) vlog_print((lvl), __VA_ARGS__); } while (0)

/* Not gated by the level: a panic must stop the process even at NONE. */
#define vlog_panic(...)   vlog_panic_and_abort(__VA_ARGS__)
#define vlog_error(...)   VLOG_AT(VLOG_ERROR, __VA_ARGS__)
#define vlog_warn(...)    VLOG_AT(VLOG_WARNING, __VA_ARGS__)
#define vlog_info(...)    VLOG_AT(VLOG_INFO, __VA_ARGS__)
#define vlog_details(...) VLOG_AT(VLOG_DETAILS, __VA_ARGS__)
#define vlog_debug(...)   VLOG_AT(VLOG_DEBUG, __VA_ARGS__)
#define vlog_fine(...)    VLOG_AT(VLOG_FINE, __VA_ARGS__)
#define vlog_finer(...)   VLOG_AT(VLOG_FINER, __VA_ARGS__)

/* Invariants (pcb tables, buffer ownership, ring indexes, queue accounting)
 * checked in debug builds: configure --enable-debug-asserts, implied by
 * --enable-sanitizers, defines VMA_DEBUG_ASSERTS, and a failed one is a
 * PANIC naming the condition, the function and the line. In release builds
 * the condition is type-checked but never evaluated (it may cost a walk). */
#ifdef VMA_DEBUG_ASSERTS
#define VMA_ASSERT(cond)                                                                         \
	do {                                                                                     \
		if (__builtin_expect(!(cond), 0))                                                \
			vlog_panic_and_abort("assertion failed: %s (%s, %s:%d)", #cond, __func__, \
					     __FILE__, __LINE__);                                 \
	} while (0)
#define VMA_DEBUG_ASSERTS_ON 1
#else
#define VMA_ASSERT(cond) do { (void)sizeof((cond) ? 1 : 0); } while (0)
#define VMA_DEBUG_ASSERTS_ON 0
#endif

#endif
