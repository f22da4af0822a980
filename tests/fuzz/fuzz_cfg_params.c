/* Harness 5: VMA_* value parsing (src/vma/config/cfg_params.c).
 *
 * Input: lines "NAME=VALUE" (at most 64; a line without '=' is a name with
 * an empty value). They form the environment of cfg_params_load, through
 * its getenv hook (the last line of a name wins); each pair whose name is
 * a parameter also goes through cfg_param_parse on its own. Afterwards
 * every value must lie in its row's range (ints in [min, max], enums one
 * of their labels, strings terminated inside their array), and every row
 * is formatted as the banner shows it. run.sh gives libFuzzer a dictionary
 * of the parameter names taken from cfg_params.def. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg_params.h"

void fuzz_log_init(void);

#define MAX_VARS 64
static char *names[MAX_VARS], *values[MAX_VARS];
static int nvars;

static const char *fake_getenv(const char *name)
{
	for (int i = nvars - 1; i >= 0; i--)
		if (!strcmp(names[i], name))
			return values[i];
	return NULL;
}

static void fail(const struct cfg_param_row *row, const char *what, int v)
{
	fprintf(stderr, "fuzz: %s: %s (%d)\n", row->name, what, v);
	abort();
}

static void check(const struct cfg_params *p)
{
	char text[512];
	for (int i = 0; i < cfg_params_count(); i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		if (row->kind == CFG_KIND_STRING) {
			const char *s = cfg_param_get_str(p, row);
			if (!memchr(s, 0, row->size))
				fail(row, "string not terminated in its array", 0);
		} else {
			int v = cfg_param_get_int(p, row);
			if (row->kind == CFG_KIND_BOOL && v != 0 && v != 1)
				fail(row, "boolean neither 0 nor 1", v);
			if ((row->kind == CFG_KIND_INT || row->kind == CFG_KIND_ENUM ||
			     row->kind == CFG_KIND_NAMED) && (v < row->min || v > row->max))
				fail(row, "value out of its range", v);
			if ((row->kind == CFG_KIND_ENUM || row->kind == CFG_KIND_NAMED) &&
			    !cfg_param_label(row, v))
				fail(row, "enumerated value without a label", v);
			if (row->kind == CFG_KIND_SPEC && v != CFG_SPEC_NONE && !cfg_spec_by_id(v))
				fail(row, "unknown profile id", v);
		}
		cfg_param_value_text(p, row, text, sizeof(text));
		if (!memchr(text, 0, sizeof(text)))
			fail(row, "value text not terminated", 0);
		cfg_param_is_default(p, row);
		cfg_param_default_text(row, text, sizeof(text));
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cfg_params p, one;
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	nvars = 0;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line && nvars < MAX_VARS;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (eq)
			*eq = '\0';
		names[nvars] = line;
		values[nvars] = eq ? eq + 1 : line + strlen(line);
		nvars++;
	}

	cfg_params_load(&p, fake_getenv);
	check(&p);

	/* Each known pair alone, on top of the defaults. */
	cfg_params_load(&one, NULL);
	for (int i = 0; i < nvars; i++) {
		const struct cfg_param_row *row = cfg_param_find(names[i]);
		if (!row)
			continue;
		struct cfg_params before = one;
		const char *why = NULL;
		if (cfg_param_parse(&one, row, values[i], &why)) {
			if (!why)
				fail(row, "rejected without a reason", 0);
			if (memcmp(&before, &one, sizeof(one)) != 0)
				fail(row, "a rejected value changed the parameters", 0);
		}
		if (row->kind == CFG_KIND_SPEC) {
			const struct cfg_spec *spec = cfg_spec_find(values[i]);
			(void)spec;
		}
	}
	check(&one);
	free(text);
	return 0;
}
