/* What the table looks like to people: the startup banner (through the
 * logger), the Markdown reference behind docs/parameters.md and the
 * parameter summary of the libvma(7) man page. */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "os/os.h"

#define CFG_BANNER_RULE "---------------------------------------------------------------------------"

/* The command line with arguments joined by spaces. libc's own read and
 * close (os/os.h): the banner runs while the interposition layer is still
 * starting. */
static void cfg_read_cmdline(char *buf, size_t size)
{
	buf[0] = '\0';
	long fd = openat(AT_FDCWD, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t len = 0;
	while (len + 1 < size) {
		long n = OS_CALL(read, (int)fd, buf + len, size - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	os_close_nocancel((int)fd);
	while (len && buf[len - 1] == '\0')
		len--;
	/* Arguments are joined by spaces; control characters inside them
	 * (python3 -c with newlines) would break the one-line banner. */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			buf[i] = ' ';
	buf[len] = '\0';
}

static bool cfg_banner_always(const struct cfg_param_row *row)
{
	return !strcmp(row->name, "VMA_TRACELEVEL") || !strcmp(row->name, "VMA_LOG_FILE");
}

void cfg_params_print_banner(const struct cfg_params *p)
{
	char text[CFG_PATH_SIZE];
	struct utsname uts;

	vlog_info(CFG_BANNER_RULE);
	vlog_info("VMA_VERSION: %s", PACKAGE_VERSION);
	cfg_read_cmdline(text, sizeof(text));
	vlog_info("Cmd Line: %s", text);
	vlog_info("Pid: %5d", (int)getpid());
	if (uname(&uts) == 0) {
		vlog_info("Architecture: %s", uts.machine);
		vlog_info("Node: %s", uts.nodename);
	}
	vlog_info(CFG_BANNER_RULE);
	for (int i = 0; i < cfg_params_count(); i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		if (!cfg_banner_always(row) && cfg_param_is_default(p, row))
			continue;
		cfg_param_value_text(p, row, text, sizeof(text));
		/* A changed value that does nothing here says so, so nobody
		 * tunes a knob of another backend and trusts the result. */
		vlog_info("%-30s %-26s [%s]%s", row->title, text, row->name, cfg_param_effect_suffix(row));
	}
	vlog_info(CFG_BANNER_RULE);
}

/* ---- Markdown reference ---- */

static const char *cfg_kind_name(const struct cfg_param_row *row)
{
	switch (row->kind) {
	case CFG_KIND_INT: return "integer";
	case CFG_KIND_BOOL: return "boolean";
	case CFG_KIND_STRING: return "string";
	case CFG_KIND_LEVEL: return "log level";
	case CFG_KIND_ENUM:
	case CFG_KIND_NAMED: return "choice";
	case CFG_KIND_SPEC: return "profile";
	}
	return "?";
}

/* quote wraps profile names in Markdown backticks. */
static void cfg_write_range(FILE *out, const struct cfg_param_row *row, const char *quote)
{
	switch (row->kind) {
	case CFG_KIND_STRING:
		fprintf(out, "up to %zu characters", row->size - 1);
		return;
	case CFG_KIND_BOOL:
		fputs("0 or 1", out);
		return;
	case CFG_KIND_LEVEL:
		fprintf(out, "%d to %d, or a level name", row->min, row->max);
		return;
	case CFG_KIND_SPEC:
		for (int i = 0; i < cfg_spec_count(); i++) {
			const struct cfg_spec *spec = cfg_spec_at(i);
			for (int k = 0; spec->names[k]; k++)
				fprintf(out, "%s%s%s%s", (i || k) ? ", " : "", quote, spec->names[k], quote);
		}
		return;
	case CFG_KIND_ENUM:
	case CFG_KIND_NAMED:
		for (const struct cfg_label *l = row->labels; l && l->text; l++)
			fprintf(out, "%s%d", l == row->labels ? "" : ", ", l->value);
		return;
	case CFG_KIND_INT:
		if (row->max == INT_MAX)
			fprintf(out, "%d or more", row->min);
		else
			fprintf(out, "%d to %d", row->min, row->max);
		return;
	}
}

/* The documented default must not depend on where one build was configured
 * to install, so the configured sysconfdir is written as $sysconfdir. */
static const char *cfg_doc_default_text(const struct cfg_param_row *row, char *buf, size_t size)
{
	cfg_param_default_text(row, buf, size);
	size_t prefix = strlen(VMA_SYSCONFDIR);
	if (prefix && !strncmp(buf, VMA_SYSCONFDIR, prefix)) {
		static const char placeholder[] = "$sysconfdir";
		size_t rest = strlen(buf + prefix) + 1;
		if (sizeof(placeholder) - 1 + rest <= size) {
			memmove(buf + sizeof(placeholder) - 1, buf + prefix, rest);
			memcpy(buf, placeholder, sizeof(placeholder) - 1);
		}
	}
	return buf;
}

static void cfg_write_row(FILE *out, const struct cfg_param_row *row)
{
	char def[CFG_PATH_SIZE];
	cfg_doc_default_text(row, def, sizeof(def));

	fprintf(out, "### %s\n\n", row->name);
	fprintf(out, "- Type: %s\n", cfg_kind_name(row));
	fprintf(out, "- Default: %s%s%s\n", def[0] ? "`" : "", def[0] ? def : "(empty)", def[0] ? "`" : "");
	fputs("- Accepted: ", out);
	cfg_write_range(out, row, "`");
	fputc('\n', out);
	if (row->labels) {
		fputs("- Values:", out);
		for (const struct cfg_label *l = row->labels; l->text; l++)
			fprintf(out, "%s `%d` %s", l == row->labels ? "" : ";", l->value, l->text);
		fputc('\n', out);
	}
	fprintf(out, "- Banner: %s\n", row->title);
	fprintf(out, "- Here: %s%s%s\n\n%s\n\n", cfg_param_effect_text(row), row->effect_why ? ": " : "",
		row->effect_why ? row->effect_why : "", row->description);
}

static void cfg_write_specs(FILE *out)
{
	fputs("## VMA_SPEC profiles\n\n"
	      "A profile replaces the defaults of the parameters below; any of them set in the "
	      "environment still takes precedence over the profile.\n\n", out);
	for (int i = 0; i < cfg_spec_count(); i++) {
		const struct cfg_spec *spec = cfg_spec_at(i);
		fprintf(out, "### %s\n\n", spec->title);
		fputs("Select with", out);
		for (int k = 0; spec->names[k]; k++)
			fprintf(out, "%s `VMA_SPEC=%s`", k ? " or" : "", spec->names[k]);
		fprintf(out, ". %s\n\n| Variable | Profile value | Default |\n| --- | --- | --- |\n",
			spec->summary);
		for (const struct cfg_spec_setting *s = spec->settings; s->name; s++) {
			const struct cfg_param_row *row = cfg_param_find(s->name);
			char def[CFG_PATH_SIZE];
			fprintf(out, "| `%s` | %s | %s |\n", s->name, s->value,
				row ? cfg_doc_default_text(row, def, sizeof(def)) : "?");
		}
		fputc('\n', out);
	}
}

void cfg_params_write_markdown(FILE *out)
{
	char def[CFG_PATH_SIZE];

	fputs("# VMA parameters\n\n"
	      "<!-- Generated from src/vma/config/cfg_params.def by cfg_gendoc; edit the table, not this file. -->\n\n"
	      "libvma is tuned entirely through `VMA_*` environment variables read once when the "
	      "library loads. Integers are plain decimal numbers; booleans take 0 or 1. A value that "
	      "cannot be used (not a number, out of range, too long) is reported with a warning and "
	      "the default stays in force. At startup the library prints every parameter that "
	      "differs from its default, plus the log level and log file, in the format of the "
	      "\"Banner\" titles below. `$sysconfdir` is the directory chosen at "
	      "configure time (`/usr/local/etc` by default, `/etc` with `--sysconfdir=/etc`).\n\n"
	      "The parameters are those of the original VMA, and not all of them mean something "
	      "here. \"Here\" (the last column of the table, a line in each section) says how "
	      "each acts in this implementation, whose rings are AF_XDP sockets or, with "
	      "`VMA_RING_BACKEND=verbs`, rdma-core RAW_PACKET queue pairs (docs/verbs.md): *in "
	      "effect*; *verbs only* for a parameter only the verbs backend reads, such as "
	      "completion-queue moderation, BlueFlame or inline sends; or *no effect*, with the "
	      "reason (among them verbs NIC features neither backend implements, such as IPoIB or "
	      "on-device memory). Such parameters are still accepted and validated, so existing "
	      "configurations keep working, and the banner adds \"(verbs backend only)\" or "
	      "\"(no effect here)\" next to one that was changed from its default.\n\n", out);
	fprintf(out, "%d parameters.\n\n", cfg_params_count());
	fputs("| Variable | Type | Default | Accepted | Here |\n| --- | --- | --- | --- | --- |\n", out);
	for (int i = 0; i < cfg_params_count(); i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		cfg_doc_default_text(row, def, sizeof(def));
		/* Links use the anchors Markdown renderers derive from the headings. */
		fprintf(out, "| [`%s`](#vma_%s) | %s | %s | ", row->name, row->field, cfg_kind_name(row),
			def[0] ? def : "(empty)");
		cfg_write_range(out, row, "`");
		fprintf(out, " | %s |\n", row->effect == CFG_EFFECT_USED || row->effect == CFG_EFFECT_LOADER ? "yes"
					 : row->effect == CFG_EFFECT_VERBS_USED ? "verbs only" : "no effect");
	}
	fputs("\n## Parameters\n\n", out);
	for (int i = 0; i < cfg_params_count(); i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		cfg_write_row(out, row);
	}
	cfg_write_specs(out);
}

/* ---- man page summary (docs/libvma.7, between its generated markers) ---- */

/* Writes text for troff: backslashes escaped, a minus before a digit as a
 * real minus, and len bytes at most. A line must not start with a dot or a
 * quote (a request): callers start lines with a word. */
static void cfg_man_text(FILE *out, const char *text, size_t len)
{
	for (size_t i = 0; i < len && text[i]; i++) {
		if (text[i] == '\\')
			fputs("\\e", out);
		else if (text[i] == '-' && text[i + 1] >= '0' && text[i + 1] <= '9')
			fputs("\\-", out);
		else
			fputc(text[i], out);
	}
}

/* Length of the description's first sentence: up to the first ". " before a
 * capital letter, so "e.g. a value" does not end it. */
static size_t cfg_first_sentence(const char *text)
{
	for (const char *p = text; (p = strstr(p, ". ")); p++)
		if (p[2] >= 'A' && p[2] <= 'Z')
			return (size_t)(p - text) + 1;
	return strlen(text);
}

void cfg_params_write_man(FILE *out)
{
	char def[CFG_PATH_SIZE];
	char range[256];

	for (int i = 0; i < cfg_params_count(); i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		FILE *mem = fmemopen(range, sizeof(range), "w");
		if (mem) {
			cfg_write_range(mem, row, "");
			fclose(mem);
		} else {
			range[0] = '\0';
		}
		cfg_doc_default_text(row, def, sizeof(def));
		fprintf(out, ".TP\n.B %s\n", row->name);
		fputs("Default ", out);
		cfg_man_text(out, def[0] ? def : "empty", CFG_PATH_SIZE);
		fputs("; ", out);
		cfg_man_text(out, range, sizeof(range));
		if (row->effect == CFG_EFFECT_VERBS_ONLY)
			fputs("; no effect (a verbs NIC feature neither backend implements)", out);
		else if (row->effect == CFG_EFFECT_VERBS_USED)
			fputs("; verbs backend only (no effect on xdp)", out);
		else if (row->effect == CFG_EFFECT_NONE)
			fputs("; no effect here", out);
		fputs(".\n", out);
		cfg_man_text(out, row->description, cfg_first_sentence(row->description));
		fputc('\n', out);
	}
}
