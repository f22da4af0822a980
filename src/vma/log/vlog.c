/* STUB until the logger lands. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "log/vlog.h"

int vlog_current_level = VLOG_INFO;

int vlog_configure(const struct vlog_settings *s) { vlog_current_level = s->level; return 0; }
void vlog_set_level(int level) { vlog_current_level = level; }
void vlog_set_details(int details) { (void)details; }
int vlog_get_details(void) { return 0; }

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
size_t vlog_format(char *buf, size_t size, int level, int details, int colors,
		   const char *fmt, va_list ap)
{
	(void)details; (void)colors; (void)level;
	int n = vsnprintf(buf, size, fmt, ap);
	return n < 0 ? 0 : (size_t)n;
}
void vlog_vprint(int level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n = vlog_format(buf, sizeof(buf), level, 0, 0, fmt, ap);
	syscall(SYS_write, 2, buf, n);
}
void vlog_print(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog_vprint(level, fmt, ap);
	va_end(ap);
}
void vlog_warn_if_high_level(void) {}
void vlog_shutdown(void) {}
