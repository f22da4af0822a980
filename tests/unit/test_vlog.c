/* Unit tests of the logger (src/vma/log). Check runs every test in its own
 * forked process, so each one starts from the logger's defaults. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "log/vlog.h"

static size_t format_line(char *buf, size_t size, int level, int details, int colors,
			  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static size_t format_line(char *buf, size_t size, int level, int details, int colors,
			  const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = vlog_format(buf, size, level, details, colors, fmt, ap);
	va_end(ap);
	return n;
}

static void assert_matches(const char *text, const char *pattern)
{
	regex_t re;
	ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
	int rc = regexec(&re, text, 0, NULL, 0);
	regfree(&re);
	ck_assert_msg(rc == 0, "'%s' does not match /%s/", text, pattern);
}

static char *read_whole_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	char *text = calloc(1, (size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(read(fd, text, (size_t)st.st_size), st.st_size);
	close(fd);
	return text;
}

static size_t count_lines(const char *text)
{
	size_t n = 0;
	for (; *text; text++)
		n += *text == '\n';
	return n;
}

/* Sends fd 2 to a temporary file; capture_stop() returns what was written. */
struct capture {
	char path[64];
	int saved_stderr;
};

static void capture_start(struct capture *c)
{
	snprintf(c->path, sizeof(c->path), "/tmp/test_vlog_cap_XXXXXX");
	int fd = mkstemp(c->path);
	ck_assert_int_ge(fd, 0);
	c->saved_stderr = dup(2);
	ck_assert_int_ge(c->saved_stderr, 0);
	ck_assert_int_eq(dup2(fd, 2), 2);
	close(fd);
}

static char *capture_stop(struct capture *c)
{
	ck_assert_int_eq(dup2(c->saved_stderr, 2), 2);
	close(c->saved_stderr);
	char *text = read_whole_file(c->path);
	unlink(c->path);
	return text;
}

static void configure(int level, int details, int colors, const char *file)
{
	struct vlog_settings s = { .level = level, .details = details, .colors = colors,
				   .file = file };
	ck_assert_int_eq(vlog_configure(&s), 0);
}

/* ---- vlog_format ---- */

START_TEST(format_details_0_is_the_bare_line)
{
	char buf[VLOG_LINE_MAX];
	size_t n = format_line(buf, sizeof(buf), VLOG_INFO, 0, 0, "hello %d", 42);
	ck_assert_str_eq(buf, "VMA INFO: hello 42\n");
	ck_assert_uint_eq(n, strlen(buf));
}
END_TEST

START_TEST(format_details_1_adds_the_thread_id_first)
{
	char buf[VLOG_LINE_MAX], want[128];
	format_line(buf, sizeof(buf), VLOG_WARNING, 1, 0, "disk %s", "full");
	snprintf(want, sizeof(want), "Tid: %ld VMA WARNING: disk full\n", syscall(SYS_gettid));
	ck_assert_str_eq(buf, want);
}
END_TEST

START_TEST(format_details_2_adds_pid_and_tid_first)
{
	char buf[VLOG_LINE_MAX], want[128];
	format_line(buf, sizeof(buf), VLOG_ERROR, 2, 0, "x=%u", 7u);
	snprintf(want, sizeof(want), "Pid: %d Tid: %ld VMA ERROR: x=7\n", getpid(),
		 syscall(SYS_gettid));
	ck_assert_str_eq(buf, want);
}
END_TEST

START_TEST(format_details_3_adds_time_in_ms_with_three_decimals)
{
	char buf[VLOG_LINE_MAX], pattern[160];
	format_line(buf, sizeof(buf), VLOG_DEBUG, 3, 0, "tick");
	snprintf(pattern, sizeof(pattern),
		 "^Time: [0-9]+\\.[0-9]{3} Pid: %d Tid: %ld VMA DEBUG: tick\n$", getpid(),
		 syscall(SYS_gettid));
	assert_matches(buf, pattern);
	double first = strtod(buf + strlen("Time: "), NULL);
	usleep(20000);
	format_line(buf, sizeof(buf), VLOG_DEBUG, 3, 0, "tock");
	double second = strtod(buf + strlen("Time: "), NULL);
	ck_assert_msg(second - first >= 19.0 && second - first < 5000.0,
		      "times %f then %f after a 20 ms sleep", first, second);
	ck_assert_msg(first < 60000.0, "%f ms since the test process started", first);
}
END_TEST

START_TEST(format_adds_a_newline_only_when_missing)
{
	char buf[VLOG_LINE_MAX];
	format_line(buf, sizeof(buf), VLOG_INFO, 0, 0, "one\n");
	ck_assert_str_eq(buf, "VMA INFO: one\n");
	format_line(buf, sizeof(buf), VLOG_INFO, 0, 0, "%s", "");
	ck_assert_str_eq(buf, "VMA INFO: \n");
}
END_TEST

START_TEST(format_level_names_in_lines)
{
	static const char *const want[] = { "PANIC", "ERROR", "WARNING", "INFO",
					    "DETAILS", "DEBUG", "FINE", "FINER" };
	for (int level = VLOG_PANIC; level <= VLOG_FINER; level++) {
		char buf[64], expect[64];
		format_line(buf, sizeof(buf), level, 0, 0, "m");
		snprintf(expect, sizeof(expect), "VMA %s: m\n", want[level]);
		ck_assert_str_eq(buf, expect);
	}
}
END_TEST

START_TEST(format_colours_by_level_and_reset_before_newline)
{
	char buf[VLOG_LINE_MAX];
	format_line(buf, sizeof(buf), VLOG_PANIC, 0, 1, "p");
	ck_assert_str_eq(buf, "\033[31mVMA PANIC: p\033[0m\n");
	format_line(buf, sizeof(buf), VLOG_ERROR, 2, 1, "e\n");
	assert_matches(buf, "^\033\\[31mPid: [0-9]+ Tid: [0-9]+ VMA ERROR: e\033\\[0m\n$");
	format_line(buf, sizeof(buf), VLOG_WARNING, 0, 1, "w");
	ck_assert_str_eq(buf, "\033[35mVMA WARNING: w\033[0m\n");
	format_line(buf, sizeof(buf), VLOG_FINE, 0, 1, "f");
	ck_assert_str_eq(buf, "\033[2mVMA FINE: f\033[0m\n");
	format_line(buf, sizeof(buf), VLOG_FINER, 0, 1, "f");
	ck_assert_str_eq(buf, "\033[2mVMA FINER: f\033[0m\n");
	/* info, details and debug stay in the terminal's own colour */
	format_line(buf, sizeof(buf), VLOG_INFO, 0, 1, "i");
	ck_assert_str_eq(buf, "VMA INFO: i\n");
	format_line(buf, sizeof(buf), VLOG_DEBUG, 0, 1, "d");
	ck_assert_str_eq(buf, "VMA DEBUG: d\n");
	format_line(buf, sizeof(buf), VLOG_ERROR, 0, 0, "e");
	ck_assert_str_eq(buf, "VMA ERROR: e\n");
}
END_TEST

START_TEST(format_truncates_long_messages_with_a_marker)
{
	char message[5000];
	memset(message, 'x', sizeof(message) - 1);
	message[sizeof(message) - 1] = '\0';
	char buf[VLOG_LINE_MAX];
	for (int colors = 0; colors <= 1; colors++) {
		size_t n = format_line(buf, sizeof(buf), VLOG_ERROR, 3, colors, "%s", message);
		ck_assert_uint_eq(n, sizeof(buf) - 1);
		ck_assert_uint_eq(strlen(buf), n);
		const char *end = colors ? VLOG_TRUNCATION_MARK "\033[0m\n" : VLOG_TRUNCATION_MARK "\n";
		ck_assert_str_eq(buf + n - strlen(end), end);
		ck_assert_ptr_nonnull(strstr(buf, "VMA ERROR: xxxx"));
		ck_assert_int_eq(buf[n - strlen(end) - 1], 'x');
	}
	/* exactly filling the line is not a truncation */
	const char *prefix = "VMA INFO: ";
	size_t fits = sizeof(buf) - 1 - strlen(prefix) - 1;
	size_t n = format_line(buf, sizeof(buf), VLOG_INFO, 0, 0, "%.*s", (int)fits, message);
	ck_assert_uint_eq(n, sizeof(buf) - 1);
	ck_assert_ptr_null(strstr(buf, VLOG_TRUNCATION_MARK));
	n = format_line(buf, sizeof(buf), VLOG_INFO, 0, 0, "%.*s", (int)fits + 1, message);
	ck_assert_ptr_nonnull(strstr(buf, VLOG_TRUNCATION_MARK "\n"));
}
END_TEST

START_TEST(format_never_overflows_small_buffers)
{
	for (size_t size = 0; size <= 48; size++) {
		char *buf = malloc(size ? size : 1); /* exact size, so ASan sees overruns */
		size_t n = format_line(size ? buf : NULL, size, VLOG_WARNING, 3, 1, "%s",
				       "a message that is longer than the buffer");
		if (size == 0) {
			ck_assert_uint_eq(n, 0);
		} else {
			ck_assert_uint_lt(n, size);
			ck_assert_uint_eq(strlen(buf), n);
		}
		free(buf);
	}
}
END_TEST

/* ---- level names and parsing ---- */

START_TEST(level_names)
{
	ck_assert_str_eq(vlog_level_name(VLOG_NONE), "NONE");
	ck_assert_str_eq(vlog_level_name(VLOG_PANIC), "PANIC");
	ck_assert_str_eq(vlog_level_name(VLOG_ERROR), "ERROR");
	ck_assert_str_eq(vlog_level_name(VLOG_WARNING), "WARNING");
	ck_assert_str_eq(vlog_level_name(VLOG_INFO), "INFO");
	ck_assert_str_eq(vlog_level_name(VLOG_DETAILS), "DETAILS");
	ck_assert_str_eq(vlog_level_name(VLOG_DEBUG), "DEBUG");
	ck_assert_str_eq(vlog_level_name(VLOG_FINE), "FINE");
	ck_assert_str_eq(vlog_level_name(VLOG_FINER), "FINER");
	ck_assert_str_eq(vlog_level_name(VLOG_ALL), "ALL");
	ck_assert_str_eq(vlog_level_name(42), "UNKNOWN");
	ck_assert_str_eq(vlog_level_name(-2), "UNKNOWN");
}
END_TEST

START_TEST(level_parse_accepts_every_name_and_number)
{
	static const struct {
		const char *text;
		int level;
	} cases[] = {
		{ "none", VLOG_NONE },	       { "NONE", VLOG_NONE },
		{ "panic", VLOG_PANIC },       { "Panic", VLOG_PANIC },
		{ "error", VLOG_ERROR },       { "ERROR", VLOG_ERROR },
		{ "warn", VLOG_WARNING },      { "WARNING", VLOG_WARNING },
		{ "wArNiNg", VLOG_WARNING },   { "info", VLOG_INFO },
		{ "information", VLOG_INFO },  { "INFORMATION", VLOG_INFO },
		{ "details", VLOG_DETAILS },   { "debug", VLOG_DEBUG },
		{ "DEBUG", VLOG_DEBUG },       { "fine", VLOG_FINE },
		{ "func", VLOG_FINE },	       { "FUNC", VLOG_FINE },
		{ "finer", VLOG_FINER },       { "func_all", VLOG_FINER },
		{ "FUNC_ALL", VLOG_FINER },    { "all", VLOG_ALL },
		{ "  debug\t", VLOG_DEBUG },   { "-1", VLOG_NONE },
		{ "0", VLOG_PANIC },	       { "1", VLOG_ERROR },
		{ "2", VLOG_WARNING },	       { "3", VLOG_INFO },
		{ "4", VLOG_DETAILS },	       { "5", VLOG_DEBUG },
		{ "6", VLOG_FINE },	       { "7", VLOG_FINER },
		{ "8", VLOG_ALL },	       { " 5 ", VLOG_DEBUG },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int level = -99;
		ck_assert_msg(vlog_level_parse(cases[i].text, &level) == 0, "'%s' rejected",
			      cases[i].text);
		ck_assert_msg(level == cases[i].level, "'%s' gave %d, want %d", cases[i].text,
			      level, cases[i].level);
	}
}
END_TEST

START_TEST(level_parse_rejects_junk)
{
	static const char *const junk[] = { "", "   ", "9", "-2", "100", "3x", "x3", "infox",
					    "debugg", "warn ing", "fine-r", "func all", "0x3" };
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		int level = -99;
		ck_assert_msg(vlog_level_parse(junk[i], &level) == -1, "'%s' accepted", junk[i]);
		ck_assert_int_eq(level, -99);
	}
	int level = -99;
	ck_assert_int_eq(vlog_level_parse(NULL, &level), -1);
}
END_TEST

/* ---- printing ---- */

START_TEST(print_before_configure_uses_info_on_stderr)
{
	struct capture c;
	capture_start(&c);
	vlog_info("early %d", 1);
	vlog_debug("hidden");
	vlog_print(VLOG_DETAILS, "hidden too");
	char *out = capture_stop(&c);
	ck_assert_str_eq(out, "VMA INFO: early 1\n"); /* no colour: not a tty */
	free(out);
}
END_TEST

START_TEST(disabled_levels_print_nothing)
{
	struct capture c;
	capture_start(&c);
	configure(VLOG_WARNING, 0, 1, NULL);
	vlog_info("no");
	vlog_debug("no");
	vlog_finer("no");
	vlog_print(VLOG_INFO, "no");
	vlog_warn("yes %s", "1");
	vlog_error("yes 2");
	vlog_set_level(VLOG_NONE);
	vlog_error("no");
	vlog_set_level(VLOG_FINER);
	vlog_finer("yes 3");
	char *out = capture_stop(&c);
	ck_assert_str_eq(out, "VMA WARNING: yes 1\nVMA ERROR: yes 2\nVMA FINER: yes 3\n");
	free(out);
}
END_TEST

START_TEST(set_level_and_details_clamp)
{
	vlog_set_level(99);
	ck_assert_int_eq(vlog_get_level(), VLOG_ALL);
	ck_assert_int_eq(vlog_current_level, VLOG_ALL);
	vlog_set_level(-7);
	ck_assert_int_eq(vlog_get_level(), VLOG_NONE);
	vlog_set_details(9);
	ck_assert_int_eq(vlog_get_details(), 3);
	vlog_set_details(-1);
	ck_assert_int_eq(vlog_get_details(), 0);
	vlog_set_details(2);
	ck_assert_int_eq(vlog_get_details(), 2);
}
END_TEST

static void *set_level_to_debug(void *arg)
{
	(void)arg;
	vlog_set_level(VLOG_DEBUG);
	return NULL;
}

START_TEST(set_level_from_another_thread_takes_effect)
{
	struct capture c;
	capture_start(&c);
	configure(VLOG_INFO, 0, 0, NULL);
	vlog_debug("before");
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, set_level_to_debug, NULL), 0);
	pthread_join(t, NULL);
	vlog_debug("after");
	char *out = capture_stop(&c);
	ck_assert_str_eq(out, "VMA DEBUG: after\n");
	free(out);
}
END_TEST

START_TEST(print_keeps_errno)
{
	configure(VLOG_INFO, 2, 0, NULL);
	int saved = dup(2);
	close(2); /* the write itself fails with EBADF */
	errno = EAGAIN;
	vlog_info("lost");
	ck_assert_int_eq(errno, EAGAIN);
	dup2(saved, 2);
	close(saved);
}
END_TEST

START_TEST(print_truncates_to_one_line)
{
	char message[4000];
	memset(message, 'y', sizeof(message) - 1);
	message[sizeof(message) - 1] = '\0';
	struct capture c;
	capture_start(&c);
	configure(VLOG_INFO, 0, 1, NULL);
	vlog_warn("%s", message);
	vlog_info("next");
	char *out = capture_stop(&c);
	ck_assert_uint_eq(count_lines(out), 2);
	char *next = strstr(out, "\nVMA INFO: next\n");
	ck_assert_ptr_nonnull(next);
	ck_assert_uint_eq((size_t)(next - out) + 1, VLOG_LINE_MAX - 1);
	ck_assert_int_eq(strncmp(next - strlen(VLOG_TRUNCATION_MARK), VLOG_TRUNCATION_MARK,
				 strlen(VLOG_TRUNCATION_MARK)), 0);
	free(out);
}
END_TEST

START_TEST(colours_off_when_stderr_is_not_a_tty)
{
	struct capture c;
	capture_start(&c);
	configure(VLOG_FINER, 0, 1, NULL);
	vlog_error("e");
	vlog_warn("w");
	vlog_finer("f");
	char *out = capture_stop(&c);
	ck_assert_str_eq(out, "VMA ERROR: e\nVMA WARNING: w\nVMA FINER: f\n");
	free(out);
}
END_TEST

/* Reads what reached the terminal through the pseudo-terminal's master. */
static void read_pty(int master, char *buf, size_t size)
{
	size_t len = 0;
	while (len < size - 1) {
		struct timeval tv = { 0, 200000 };
		fd_set in;
		FD_ZERO(&in);
		FD_SET(master, &in);
		if (select(master + 1, &in, NULL, NULL, &tv) <= 0)
			break;
		ssize_t n = read(master, buf + len, size - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
}

START_TEST(colours_on_a_tty_only_when_wished)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	ck_assert_int_ge(master, 0);
	ck_assert_int_eq(grantpt(master), 0);
	ck_assert_int_eq(unlockpt(master), 0);
	int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
	ck_assert_int_ge(slave, 0);
	int saved = dup(2);
	dup2(slave, 2);

	configure(VLOG_INFO, 0, 1, NULL);
	vlog_error("red");
	char got[512];
	read_pty(master, got, sizeof(got));
	configure(VLOG_INFO, 0, 0, NULL);
	vlog_error("plain");
	char plain[512];
	read_pty(master, plain, sizeof(plain));
	/* a log file never gets colours, even while stderr is a terminal */
	char file[] = "/tmp/test_vlog_tty_XXXXXX";
	close(mkstemp(file));
	configure(VLOG_INFO, 0, 1, NULL);
	configure(VLOG_INFO, 0, 1, file);
	vlog_error("in the file");
	vlog_shutdown();
	char *in_file = read_whole_file(file);
	unlink(file);

	dup2(saved, 2);
	close(saved);
	close(slave);
	close(master);
	/* the terminal turns "\n" into "\r\n" */
	ck_assert_str_eq(got, "\033[31mVMA ERROR: red\033[0m\r\n");
	ck_assert_str_eq(plain, "VMA ERROR: plain\r\n");
	ck_assert_str_eq(in_file, "VMA ERROR: in the file\n");
	free(in_file);
}
END_TEST

/* ---- log file ---- */

static char test_dir[64];

static void make_test_dir(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/test_vlog_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

static void remove_test_dir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* The fd flags of our descriptor open on path, or -1 if none is. */
static int fd_flags_of_open_file(const char *path)
{
	for (int fd = 3; fd < 1024; fd++) {
		char link[32], target[256];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, path) == 0)
			return fcntl(fd, F_GETFD);
	}
	return -1;
}

START_TEST(log_file_with_pid_receives_lines_without_colours)
{
	make_test_dir();
	char pattern[128], path[128];
	snprintf(pattern, sizeof(pattern), "%s/vma_%%d.log", test_dir);
	snprintf(path, sizeof(path), "%s/vma_%d.log", test_dir, getpid());
	mode_t old_mask = umask(022);
	struct capture c;
	capture_start(&c);
	configure(VLOG_DEBUG, 2, 1, pattern);
	vlog_error("to the file %d", 1);
	vlog_debug("to the file %d", 2);
	ck_assert_int_eq(fd_flags_of_open_file(path), FD_CLOEXEC);
	vlog_shutdown();
	ck_assert_int_eq(fd_flags_of_open_file(path), -1); /* closed */
	vlog_info("back on stderr");
	char *err = capture_stop(&c);
	umask(old_mask);

	char want_err[96];
	snprintf(want_err, sizeof(want_err), "Pid: %d Tid: %d VMA INFO: back on stderr\n",
		 getpid(), getpid());
	ck_assert_str_eq(err, want_err);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600); /* the log is ours alone, whatever the umask */
	char *text = read_whole_file(path);
	char want[256];
	snprintf(want, sizeof(want),
		 "Pid: %d Tid: %d VMA ERROR: to the file 1\nPid: %d Tid: %d VMA DEBUG: to the file 2\n",
		 getpid(), getpid(), getpid(), getpid());
	ck_assert_str_eq(text, want);
	free(text);
	free(err);
	remove_test_dir();
}
END_TEST

START_TEST(log_file_is_appended_and_replaces_only_the_first_pid_mark)
{
	make_test_dir();
	char pattern[128], path[160];
	snprintf(pattern, sizeof(pattern), "%s/a_%%d_%%s_%%n_%%d.log", test_dir);
	snprintf(path, sizeof(path), "%s/a_%d_%%s_%%n_%%d.log", test_dir, getpid());
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "old\n", 4), 4);
	close(fd);

	configure(VLOG_INFO, 0, 0, pattern);
	vlog_info("new");
	configure(VLOG_INFO, 0, 0, pattern); /* same file: kept open, not truncated */
	vlog_info("again");
	vlog_shutdown();

	char *text = read_whole_file(path);
	ck_assert_str_eq(text, "old\nVMA INFO: new\nVMA INFO: again\n");
	free(text);
	remove_test_dir();
}
END_TEST

START_TEST(log_file_switch_goes_to_the_new_file)
{
	make_test_dir();
	char first[128], second[128];
	snprintf(first, sizeof(first), "%s/first.log", test_dir);
	snprintf(second, sizeof(second), "%s/second.log", test_dir);
	configure(VLOG_INFO, 0, 0, first);
	vlog_info("one");
	configure(VLOG_INFO, 0, 0, second);
	vlog_info("two");
	vlog_shutdown();
	char *a = read_whole_file(first), *b = read_whole_file(second);
	ck_assert_str_eq(a, "VMA INFO: one\n");
	ck_assert_str_eq(b, "VMA INFO: two\n");
	free(a);
	free(b);
	remove_test_dir();
}
END_TEST

START_TEST(bad_log_file_warns_and_stays_on_stderr)
{
	struct capture c;
	capture_start(&c);
	struct vlog_settings s = { .level = VLOG_INFO, .details = 0, .colors = 1,
				   .file = "/nonexistent_vlog_dir/%d/x.log" };
	ck_assert_int_eq(vlog_configure(&s), -1);
	vlog_info("still here");
	char *out = capture_stop(&c);
	char want[256];
	snprintf(want, sizeof(want),
		 "VMA WARNING: Cannot open log file '/nonexistent_vlog_dir/%d/x.log' "
		 "(VMA_LOG_FILE=/nonexistent_vlog_dir/%%d/x.log): %s; logging to stderr\n"
		 "VMA INFO: still here\n",
		 getpid(), strerror(ENOENT));
	ck_assert_str_eq(out, want);
	free(out);
}
END_TEST

/* A name another local user prepared where our log goes: a symbolic link
 * (to a file of ours they want overwritten or to one they read), a file of
 * theirs, a FIFO nobody reads. Each is refused with one warning, the lines
 * go to stderr and the planted target is untouched. */
static void expect_refused(const char *path, const char *reason)
{
	struct capture c;
	capture_start(&c);
	struct vlog_settings s = { .level = VLOG_INFO, .details = 0, .colors = 0, .file = path };
	ck_assert_int_eq(vlog_configure(&s), -1);
	vlog_info("still here");
	char *out = capture_stop(&c);
	char want[512];
	snprintf(want, sizeof(want),
		 "VMA WARNING: Refusing log file '%s' (VMA_LOG_FILE=%s): %s; logging to stderr "
		 "(name a file of your own, in a directory only you can write)\n"
		 "VMA INFO: still here\n", path, path, reason);
	ck_assert_str_eq(out, want);
	free(out);
	vlog_shutdown();
}

START_TEST(log_file_symlink_refused)
{
	make_test_dir();
	char target[128], link_path[128];
	snprintf(target, sizeof(target), "%s/precious", test_dir);
	snprintf(link_path, sizeof(link_path), "%s/vma.log", test_dir);
	int fd = open(target, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_eq(write(fd, "keep\n", 5), 5);
	close(fd);
	ck_assert_int_eq(symlink(target, link_path), 0);
	expect_refused(link_path, "it is a symbolic link");
	/* dangling: not created through the link either */
	char dangling[128];
	snprintf(dangling, sizeof(dangling), "%s/nowhere.log", test_dir);
	ck_assert_int_eq(unlink(link_path), 0);
	ck_assert_int_eq(symlink(dangling, link_path), 0);
	expect_refused(link_path, "it is a symbolic link");
	ck_assert_int_eq(access(dangling, F_OK), -1);
	char *text = read_whole_file(target);
	ck_assert_str_eq(text, "keep\n");
	free(text);
	remove_test_dir();
}
END_TEST

START_TEST(log_file_of_another_user_refused)
{
	if (geteuid() != 0)
		return; /* needs root to give a file away */
	make_test_dir();
	char path[128];
	snprintf(path, sizeof(path), "%s/theirs.log", test_dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0666);
	ck_assert_int_eq(write(fd, "theirs\n", 7), 7);
	ck_assert_int_eq(fchmod(fd, 0666), 0);
	ck_assert_int_eq(fchown(fd, 65534, 65534), 0);
	close(fd);
	expect_refused(path, "it belongs to another user (uid 65534)");
	char *text = read_whole_file(path);
	ck_assert_str_eq(text, "theirs\n");
	free(text);
	remove_test_dir();
}
END_TEST

START_TEST(log_file_fifo_never_blocks)
{
	make_test_dir();
	char path[128];
	snprintf(path, sizeof(path), "%s/fifo", test_dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	struct capture c;
	capture_start(&c);
	struct vlog_settings s = { .level = VLOG_INFO, .details = 0, .colors = 0, .file = path };
	ck_assert_int_eq(vlog_configure(&s), -1); /* no reader: fails at once (ENXIO) */
	char *out = capture_stop(&c);
	ck_assert_ptr_nonnull(strstr(out, "Cannot open log file"));
	free(out);
	vlog_shutdown();
	remove_test_dir();
}
END_TEST

START_TEST(forked_child_logs_its_own_pid_and_file)
{
	make_test_dir();
	char pattern[128];
	snprintf(pattern, sizeof(pattern), "%s/f_%%d.log", test_dir);
	configure(VLOG_INFO, 2, 0, pattern);
	vlog_info("parent");
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		vlog_info("child");
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	vlog_info("parent again");
	vlog_shutdown();

	char path[160], want[160];
	snprintf(path, sizeof(path), "%s/f_%d.log", test_dir, getpid());
	char *text = read_whole_file(path);
	snprintf(want, sizeof(want), "Pid: %d Tid: %d VMA INFO: parent\nPid: %d Tid: %d VMA INFO: parent again\n",
		 getpid(), getpid(), getpid(), getpid());
	ck_assert_str_eq(text, want);
	free(text);
	snprintf(path, sizeof(path), "%s/f_%d.log", test_dir, child);
	text = read_whole_file(path);
	snprintf(want, sizeof(want), "Pid: %d Tid: %d VMA INFO: child\n", child, child);
	ck_assert_str_eq(text, want);
	free(text);
	remove_test_dir();
}
END_TEST

/* ---- threads ---- */

enum { WRITER_THREADS = 4, LINES_PER_THREAD = 300 };

static void *write_lines(void *arg)
{
	char filler[600];
	memset(filler, 'a' + (int)(long)arg, sizeof(filler) - 1);
	filler[sizeof(filler) - 1] = '\0';
	for (int i = 0; i < LINES_PER_THREAD; i++)
		vlog_info("%ld %d %s", (long)arg, i, filler);
	return NULL;
}

START_TEST(lines_from_threads_never_interleave)
{
	make_test_dir();
	char path[128];
	snprintf(path, sizeof(path), "%s/threads.log", test_dir);
	configure(VLOG_INFO, 1, 0, path);
	pthread_t threads[WRITER_THREADS];
	for (long i = 0; i < WRITER_THREADS; i++)
		ck_assert_int_eq(pthread_create(&threads[i], NULL, write_lines, (void *)i), 0);
	for (int i = 0; i < WRITER_THREADS; i++)
		pthread_join(threads[i], NULL);
	vlog_shutdown();

	char *text = read_whole_file(path);
	ck_assert_uint_eq(count_lines(text), WRITER_THREADS * LINES_PER_THREAD);
	regex_t re;
	ck_assert_int_eq(regcomp(&re, "^Tid: [0-9]+ VMA INFO: ([0-3]) [0-9]+ ", REG_EXTENDED), 0);
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		regmatch_t m[2];
		ck_assert_msg(regexec(&re, line, 2, m, 0) == 0, "mixed line: %.80s", line);
		/* the filler must be 599 copies of this thread's own letter */
		const char *filler = line + m[0].rm_eo;
		char letter = (char)('a' + line[m[1].rm_so] - '0');
		ck_assert_uint_eq(strspn(filler, (char[]){ letter, '\0' }), 599);
		ck_assert_uint_eq(strlen(filler), 599);
	}
	regfree(&re);
	free(text);
	remove_test_dir();
}
END_TEST

/* ---- panic and the high level warning ---- */

static void silence_stderr(void)
{
	int null = open("/dev/null", O_WRONLY);
	ck_assert_int_ge(null, 0);
	dup2(null, 2);
	close(null);
}

START_TEST(panic_prints_then_aborts)
{
	silence_stderr(); /* the line itself is checked by panic_line_is_written_before_abort */
	configure(VLOG_INFO, 0, 0, NULL);
	vlog_panic("out of memory for %s", "rings");
}
END_TEST

START_TEST(panic_aborts_even_at_level_none)
{
	configure(VLOG_NONE, 0, 0, NULL);
	vlog_panic("silent");
}
END_TEST

START_TEST(panic_line_is_written_before_abort)
{
	make_test_dir();
	char path[128];
	snprintf(path, sizeof(path), "%s/panic.log", test_dir);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		configure(VLOG_INFO, 0, 0, path);
		vlog_panic("fatal %d", 9);
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	char *text = read_whole_file(path);
	ck_assert_str_eq(text, "VMA PANIC: fatal 9\n");
	free(text);
	remove_test_dir();
}
END_TEST

/* VMA_ASSERT: in a debug build (--enable-debug-asserts, or the sanitizer
 * build) a false condition is a PANIC naming it; in a release build the
 * condition is never evaluated. */
START_TEST(assert_panics_in_debug_builds_only)
{
	make_test_dir();
	char path[128];
	snprintf(path, sizeof(path), "%s/assert.log", test_dir);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		configure(VLOG_INFO, 0, 0, path);
		int evaluated = 0, one = 1;
		VMA_ASSERT(one == 1);
		VMA_ASSERT((evaluated = 1) && one == 2);
		_exit(evaluated ? 3 : 0);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	char *text = read_whole_file(path);
	if (VMA_DEBUG_ASSERTS_ON) {
		ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
		assert_matches(text, "^VMA PANIC: assertion failed: \\(evaluated = 1\\) && one == 2 "
				     "\\(assert_panics_in_debug_builds_only_fn, [^:]*test_vlog.c:[0-9]+\\)\n$");
	} else {
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		ck_assert_str_eq(text, "");
	}
	free(text);
	remove_test_dir();
}
END_TEST

START_TEST(high_level_warning_at_debug_and_above)
{
	struct capture c;
	capture_start(&c);
	configure(VLOG_DEBUG, 0, 0, NULL);
	vlog_warn_if_high_level();
	char *out = capture_stop(&c);
	ck_assert_uint_eq(count_lines(out), 5);
	assert_matches(out, "^(VMA WARNING: [*][^\n]*[*]\n){5}$");
	ck_assert_ptr_nonnull(strstr(out, "VMA_TRACELEVEL=DEBUG"));
	ck_assert_ptr_nonnull(strstr(out, "slower"));
	ck_assert_ptr_nonnull(strstr(out, "debugging only"));
	/* every line of the box has the same width */
	size_t width = (size_t)(strchr(out, '\n') - out);
	for (char *line = out; *line; line = strchr(line, '\n') + 1)
		ck_assert_uint_eq((size_t)(strchr(line, '\n') - line), width);
	free(out);

	capture_start(&c);
	configure(VLOG_FINER, 0, 0, NULL);
	vlog_warn_if_high_level();
	out = capture_stop(&c);
	ck_assert_ptr_nonnull(strstr(out, "VMA_TRACELEVEL=FINER"));
	free(out);
}
END_TEST

START_TEST(no_high_level_warning_below_debug)
{
	struct capture c;
	capture_start(&c);
	configure(VLOG_INFO, 0, 0, NULL);
	vlog_warn_if_high_level();
	configure(VLOG_DETAILS, 0, 0, NULL);
	vlog_warn_if_high_level();
	char *out = capture_stop(&c);
	ck_assert_str_eq(out, "");
	free(out);
}
END_TEST

/* ---- VMA_HANDLE_SIGSEGV ---- */

/* Runs a child that faults, with or without the handler; returns what it
 * wrote to stderr and how it ended. */
static void run_faulting_child(bool handler, char *out, size_t size, int *status)
{
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &no_core);   /* no core file from the test */
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		/* The control runs with the default action itself, not with
		 * whatever a sanitizer put there (which would print too). */
		if (!handler)
			signal(SIGSEGV, SIG_DFL);
		if (handler && vlog_segv_install() != 0)
			_exit(3);
		/* A page with no access: a real fault, at an address that is
		 * not NULL (UBSan would stop a NULL store before it faults). */
		volatile int *target = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if ((void *)target == MAP_FAILED)
			_exit(5);
		*target = 1;
		_exit(4);
	}
	close(pipefd[1]);
	size_t len = 0;
	ssize_t n;
	while (len + 1 < size && (n = read(pipefd[0], out + len, size - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, status, 0), pid);
}

START_TEST(sigsegv_handler_logs_a_backtrace_then_dies_of_sigsegv)
{
	static char out[1 << 16];
	int status;
	run_faulting_child(true, out, sizeof(out), &status);
	/* Still the plain signal's death: the default action ran. */
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x, output:\n%s", status, out);
	assert_matches(out, "^VMA ERROR: signal 11 \\(SIGSEGV\\) at address 0x[0-9a-f]+; backtrace:\n");
	/* backtrace_symbols_fd lines, "object(symbol+offset)[address]": the
	 * test program's frames and libc's. */
	assert_matches(out, "test_vlog\\([^)]*\\)\\[0x[0-9a-f]+\\]");
	assert_matches(out, "libc\\.so[^(]*\\([^)]*\\)\\[0x[0-9a-f]+\\]");

	/* Without the handler: the same death, nothing printed. */
	run_faulting_child(false, out, sizeof(out), &status);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(sigsegv_sent_by_kill_also_ends_the_process)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		struct rlimit no_core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &no_core);
		vlog_segv_install();
		kill(getpid(), SIGSEGV);   /* no fault to repeat: the handler re-raises */
		_exit(4);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x", status);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vlog");
	TCase *tc = tcase_create("format");
	tcase_add_test(tc, format_details_0_is_the_bare_line);
	tcase_add_test(tc, format_details_1_adds_the_thread_id_first);
	tcase_add_test(tc, format_details_2_adds_pid_and_tid_first);
	tcase_add_test(tc, format_details_3_adds_time_in_ms_with_three_decimals);
	tcase_add_test(tc, format_adds_a_newline_only_when_missing);
	tcase_add_test(tc, format_level_names_in_lines);
	tcase_add_test(tc, format_colours_by_level_and_reset_before_newline);
	tcase_add_test(tc, format_truncates_long_messages_with_a_marker);
	tcase_add_test(tc, format_never_overflows_small_buffers);
	tcase_add_test(tc, level_names);
	tcase_add_test(tc, level_parse_accepts_every_name_and_number);
	tcase_add_test(tc, level_parse_rejects_junk);
	suite_add_tcase(s, tc);

	tc = tcase_create("print");
	tcase_add_test(tc, print_before_configure_uses_info_on_stderr);
	tcase_add_test(tc, disabled_levels_print_nothing);
	tcase_add_test(tc, set_level_and_details_clamp);
	tcase_add_test(tc, set_level_from_another_thread_takes_effect);
	tcase_add_test(tc, print_keeps_errno);
	tcase_add_test(tc, print_truncates_to_one_line);
	tcase_add_test(tc, colours_off_when_stderr_is_not_a_tty);
	tcase_add_test(tc, colours_on_a_tty_only_when_wished);
	tcase_add_test(tc, lines_from_threads_never_interleave);
	tcase_add_test_raise_signal(tc, panic_prints_then_aborts, SIGABRT);
	tcase_add_test_raise_signal(tc, panic_aborts_even_at_level_none, SIGABRT);
	tcase_add_test(tc, panic_line_is_written_before_abort);
	tcase_add_test(tc, assert_panics_in_debug_builds_only);
	tcase_add_test(tc, high_level_warning_at_debug_and_above);
	tcase_add_test(tc, no_high_level_warning_below_debug);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_test(tc, log_file_with_pid_receives_lines_without_colours);
	tcase_add_test(tc, log_file_is_appended_and_replaces_only_the_first_pid_mark);
	tcase_add_test(tc, log_file_switch_goes_to_the_new_file);
	tcase_add_test(tc, bad_log_file_warns_and_stays_on_stderr);
	tcase_add_test(tc, forked_child_logs_its_own_pid_and_file);
	tcase_add_test(tc, log_file_symlink_refused);
	tcase_add_test(tc, log_file_of_another_user_refused);
	tcase_add_test(tc, log_file_fifo_never_blocks);
	suite_add_tcase(s, tc);

	tc = tcase_create("sigsegv");
	tcase_add_test(tc, sigsegv_handler_logs_a_backtrace_then_dies_of_sigsegv);
	tcase_add_test(tc, sigsegv_sent_by_kill_also_ends_the_process);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
