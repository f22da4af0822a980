/* Every harness links the real logger (src/vma/log/vlog.c) with
 * -Wl,--wrap=vlog_print, so the project's messages land here instead:
 * each one is formatted in full (a bad argument, such as an unterminated
 * string given to %s, shows under ASan) and then dropped, and an error or
 * worse aborts, as it means the code saw something it considers impossible
 * (e.g. "buffer freed twice" in ring_buf_free). FUZZ_VERBOSE=1 prints them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "log/vlog.h"

void __wrap_vlog_print(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fuzz_log_verbose = -1;

void __wrap_vlog_print(int level, const char *fmt, ...)
{
	char line[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (fuzz_log_verbose < 0) {
		const char *v = getenv("FUZZ_VERBOSE");
		fuzz_log_verbose = v && *v == '1';
	}
	if (fuzz_log_verbose || level <= VLOG_ERROR)
		fprintf(stderr, "fuzz log[%d]: %s\n", level, line);
	if (level <= VLOG_ERROR)
		abort();
}

/* Called once from each harness's LLVMFuzzerInitialize: every message is
 * formatted, whatever its level. */
void fuzz_log_init(void)
{
	vlog_current_level = VLOG_ALL;
}
