/* The parameter table built from cfg_params.def, value parsing with
 * validation, and cfg_params_load (defaults -> VMA_SPEC -> variables).
 *
 * cfg_params_load runs from the library constructor, possibly before main
 * and before malloc is safe to use, so nothing here allocates: values are
 * parsed in place and strings are copied into the struct's fixed arrays. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/cfg_params.h"
#include "log/vlog.h"

struct cfg_params g_cfg;

/* The description and the optional effect mark arrive together as the
 * variadic tail of a row: the marks expand to further designated
 * initializers, so ".description = <tail>" takes both, and a row without a
 * mark leaves .effect at CFG_EFFECT_USED (0). */
#define CFG_VERBS_ONLY .effect = CFG_EFFECT_VERBS_ONLY
#define CFG_VERBS_USED .effect = CFG_EFFECT_VERBS_USED
#define CFG_NO_EFFECT(why) .effect = CFG_EFFECT_NONE, .effect_why = why
#define CFG_VIA_LOADER .effect = CFG_EFFECT_LOADER

static const struct cfg_param_row cfg_rows[] = {
#define CFG_NUMERIC(kind_, name_, field_, def_, min_, max_, title_, labels_, ...) \
	{ .name = #name_, .field = #field_, .kind = kind_,                         \
	  .offset = offsetof(struct cfg_params, field_),                           \
	  .size = sizeof(((struct cfg_params *)0)->field_),                        \
	  .default_int = def_, .default_str = NULL, .min = min_, .max = max_,      \
	  .title = title_, .labels = labels_, .description = __VA_ARGS__ },
#define CFG_STRING(name_, field_, size_, def_, title_, ...)                     \
	{ .name = #name_, .field = #field_, .kind = CFG_KIND_STRING,               \
	  .offset = offsetof(struct cfg_params, field_), .size = size_,            \
	  .default_int = 0, .default_str = def_, .min = 0, .max = 0,               \
	  .title = title_, .labels = NULL, .description = __VA_ARGS__ },
#include "config/cfg_params.def"
#undef CFG_NUMERIC
#undef CFG_STRING
};

#undef CFG_VERBS_ONLY
#undef CFG_VERBS_USED
#undef CFG_NO_EFFECT
#undef CFG_VIA_LOADER

#define CFG_ROW_COUNT ((int)(sizeof(cfg_rows) / sizeof(cfg_rows[0])))

/* The default text must fit its array: checked when the library is built. */
#define CFG_NUMERIC(kind, name, field, def, min, max, title, labels, ...)
#define CFG_STRING(name, field, size, def, title, ...) \
	_Static_assert(sizeof(def) <= (size), #name " default does not fit");
#include "config/cfg_params.def"
#undef CFG_NUMERIC
#undef CFG_STRING

int cfg_params_count(void) { return CFG_ROW_COUNT; }

const struct cfg_param_row *cfg_param_at(int index)
{
	return (index >= 0 && index < CFG_ROW_COUNT) ? &cfg_rows[index] : NULL;
}

const struct cfg_param_row *cfg_param_find(const char *name)
{
	if (!name)
		return NULL;
	for (int i = 0; i < CFG_ROW_COUNT; i++)
		if (!strcmp(cfg_rows[i].name, name))
			return &cfg_rows[i];
	return NULL;
}

static int *cfg_int_field(struct cfg_params *p, const struct cfg_param_row *row)
{
	return (int *)((char *)p + row->offset);
}

static char *cfg_str_field(struct cfg_params *p, const struct cfg_param_row *row)
{
	return (char *)p + row->offset;
}

int cfg_param_get_int(const struct cfg_params *p, const struct cfg_param_row *row)
{
	return *(const int *)((const char *)p + row->offset);
}

const char *cfg_param_get_str(const struct cfg_params *p, const struct cfg_param_row *row)
{
	return (const char *)p + row->offset;
}

bool cfg_param_is_default(const struct cfg_params *p, const struct cfg_param_row *row)
{
	if (row->kind == CFG_KIND_STRING)
		return !strcmp(cfg_param_get_str(p, row), row->default_str);
	return cfg_param_get_int(p, row) == row->default_int;
}

const char *cfg_param_effect_text(const struct cfg_param_row *row)
{
	switch (row->effect) {
	case CFG_EFFECT_USED: return "in effect";
	case CFG_EFFECT_LOADER: return "in effect (sets other parameters as the library loads)";
	case CFG_EFFECT_VERBS_ONLY: return "no effect (a verbs NIC feature neither backend implements)";
	case CFG_EFFECT_NONE: return "no effect";
	case CFG_EFFECT_VERBS_USED: return "in effect on the verbs backend (VMA_RING_BACKEND=verbs); no effect on xdp";
	}
	return "?";
}

const char *cfg_param_effect_suffix(const struct cfg_param_row *row)
{
	switch (row->effect) {
	case CFG_EFFECT_VERBS_ONLY: return " (no effect here)";
	case CFG_EFFECT_NONE: return " (no effect here)";
	case CFG_EFFECT_VERBS_USED: return " (verbs backend only)";
	default: return "";
	}
}

const char *cfg_param_label(const struct cfg_param_row *row, int value)
{
	if (row->kind == CFG_KIND_SPEC) {
		const struct cfg_spec *spec = cfg_spec_by_id(value);
		return spec ? spec->title : (value == CFG_SPEC_NONE ? "None" : NULL);
	}
	for (const struct cfg_label *l = row->labels; l && l->text; l++)
		if (l->value == value)
			return l->text;
	return NULL;
}

static const char *cfg_int_text(const struct cfg_param_row *row, int value, char *buf, size_t size)
{
	const char *label = cfg_param_label(row, value);
	switch (row->kind) {
	case CFG_KIND_BOOL:
		snprintf(buf, size, "%s", value ? "Enabled" : "Disabled");
		break;
	case CFG_KIND_LEVEL:
		snprintf(buf, size, "%s", vlog_level_name(value));
		break;
	case CFG_KIND_NAMED:
	case CFG_KIND_SPEC:
		if (label) {
			snprintf(buf, size, "%s", label);
			break;
		}
		/* fall through */
	default:
		if (label)
			snprintf(buf, size, "%d (%s)", value, label);
		else
			snprintf(buf, size, "%d", value);
		break;
	}
	return buf;
}

const char *cfg_param_value_text(const struct cfg_params *p, const struct cfg_param_row *row,
				 char *buf, size_t size)
{
	if (!size)
		return buf;
	if (row->kind == CFG_KIND_STRING) {
		snprintf(buf, size, "%s", cfg_param_get_str(p, row));
		return buf;
	}
	return cfg_int_text(row, cfg_param_get_int(p, row), buf, size);
}

const char *cfg_param_default_text(const struct cfg_param_row *row, char *buf, size_t size)
{
	if (!size)
		return buf;
	if (row->kind == CFG_KIND_STRING) {
		snprintf(buf, size, "%s", row->default_str);
		return buf;
	}
	return cfg_int_text(row, row->default_int, buf, size);
}

/* Optional sign, then decimal digits to the end of the string: "12abc", " 5",
 * "" and "0x10" are all refused, so a typo never silently becomes a number. */
static int cfg_parse_decimal(const char *text, long long *out)
{
	const char *s = text;
	bool negative = false;
	if (*s == '+' || *s == '-')
		negative = (*s++ == '-');
	if (!*s)
		return -1;
	long long value = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		value = value * 10 + (*s - '0');
		if (value > (long long)INT_MAX + 1)   /* far outside any range; stop growing */
			value = (long long)INT_MAX + 1;
	}
	*out = negative ? -value : value;
	return 0;
}

static int cfg_parse_bool(const char *text, int *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on", "enable", "enabled" };
	static const char *const no[] = { "0", "false", "no", "off", "disable", "disabled" };
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(text, yes[i])) {
			*out = 1;
			return 0;
		}
		if (!strcasecmp(text, no[i])) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

int cfg_param_parse(struct cfg_params *p, const struct cfg_param_row *row, const char *text,
		    const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	if (!text) {
		*why = "is missing";
		return -1;
	}
	switch (row->kind) {
	case CFG_KIND_STRING: {
		size_t len = strlen(text);
		if (len >= row->size) {
			*why = "is too long";
			return -1;
		}
		memcpy(cfg_str_field(p, row), text, len + 1);
		return 0;
	}
	case CFG_KIND_BOOL: {
		int value;
		if (cfg_parse_bool(text, &value)) {
			*why = "is not 0 or 1";
			return -1;
		}
		*cfg_int_field(p, row) = value;
		return 0;
	}
	case CFG_KIND_LEVEL: {
		int level;
		if (vlog_level_parse(text, &level)) {
			*why = "is not a log level (-1..8 or a level name)";
			return -1;
		}
		*cfg_int_field(p, row) = level;
		return 0;
	}
	case CFG_KIND_SPEC: {
		const struct cfg_spec *spec = cfg_spec_find(text);
		if (!*text || !strcasecmp(text, "none") || !strcmp(text, "0")) {
			*cfg_int_field(p, row) = CFG_SPEC_NONE;
			return 0;
		}
		if (!spec) {
			*why = "is not a known profile";
			return -1;
		}
		*cfg_int_field(p, row) = spec->id;
		return 0;
	}
	default: {
		long long value;
		if (cfg_parse_decimal(text, &value)) {
			/* A choice may also be given by its label ("verbs"). */
			if ((row->kind == CFG_KIND_ENUM || row->kind == CFG_KIND_NAMED) && row->labels) {
				for (const struct cfg_label *l = row->labels; l->text; l++) {
					if (!strcasecmp(l->text, text)) {
						*cfg_int_field(p, row) = l->value;
						return 0;
					}
				}
				*why = "is not one of the documented values";
				return -1;
			}
			*why = "is not a valid integer";
			return -1;
		}
		if (value < row->min || value > row->max) {
			*why = "is out of range";
			return -1;
		}
		if ((row->kind == CFG_KIND_ENUM || row->kind == CFG_KIND_NAMED) &&
		    !cfg_param_label(row, (int)value)) {
			*why = "is not one of the documented values";
			return -1;
		}
		*cfg_int_field(p, row) = (int)value;
		return 0;
	}
	}
}

static void cfg_set_default(struct cfg_params *p, const struct cfg_param_row *row)
{
	if (row->kind == CFG_KIND_STRING)
		snprintf(cfg_str_field(p, row), row->size, "%s", row->default_str);
	else
		*cfg_int_field(p, row) = row->default_int;
}

/* One warning per rejected value: the variable, what was given, why, and
 * what stays in force (the documented default, or the profile's value). */
static void cfg_warn_rejected(const struct cfg_params *p, const struct cfg_param_row *row,
			      const char *text, const char *why, const char *source)
{
	char kept[128];
	char range[64] = "";
	cfg_param_value_text(p, row, kept, sizeof(kept));
	if (row->kind == CFG_KIND_INT && !strcmp(why, "is out of range"))
		snprintf(range, sizeof(range), " [%d..%d]", row->min, row->max);
	if (row->kind == CFG_KIND_STRING && !strcmp(why, "is too long")) {
		vlog_warn("%s (%zu bytes) %s (at most %zu); using %s '%s'", row->name, strlen(text),
			  why, row->size - 1, cfg_param_is_default(p, row) ? "the default" : source,
			  kept);
		return;
	}
	vlog_warn("%s='%s' %s%s; using %s %s", row->name, text, why, range,
		  cfg_param_is_default(p, row) ? "the default" : source, kept);
}

int cfg_params_load(struct cfg_params *out, cfg_getenv_fn getenv_fn)
{
	int rejected = 0;
	const char *why;

	for (int i = 0; i < CFG_ROW_COUNT; i++)
		cfg_set_default(out, &cfg_rows[i]);
	if (!getenv_fn)
		return 0;

	/* The profile first, so that any variable set explicitly overrides it. */
	const struct cfg_param_row *spec_row = cfg_param_find("VMA_SPEC");
	const char *spec_text = getenv_fn(spec_row->name);
	if (spec_text && cfg_param_parse(out, spec_row, spec_text, &why)) {
		cfg_warn_rejected(out, spec_row, spec_text, why, "");
		rejected++;
	}
	const struct cfg_spec *spec = cfg_spec_by_id(out->spec);
	for (const struct cfg_spec_setting *s = spec ? spec->settings : NULL; s && s->name; s++) {
		const struct cfg_param_row *row = cfg_param_find(s->name);
		if (!row || cfg_param_parse(out, row, s->value, &why))
			vlog_error("VMA_SPEC profile '%s' has a bad setting %s=%s", spec->names[0],
				   s->name, s->value);
	}

	bool explicit_set[CFG_ROW_COUNT];
	for (int i = 0; i < CFG_ROW_COUNT; i++) {
		const struct cfg_param_row *row = &cfg_rows[i];
		explicit_set[i] = false;
		if (row == spec_row)
			continue;
		const char *text = getenv_fn(row->name);
		if (!text)
			continue;
		if (cfg_param_parse(out, row, text, &why)) {
			cfg_warn_rejected(out, row, text, why, "the VMA_SPEC value");
			rejected++;
		} else {
			explicit_set[i] = true;
		}
	}

	/* Values whose default depends on other values (a rejected variable
	 * counts as not set). */
#define CFG_EXPLICIT(name) explicit_set[cfg_param_find(name) - cfg_rows]
	if (out->tracelevel >= VLOG_DEBUG && !CFG_EXPLICIT("VMA_LOG_DETAILS"))
		out->log_details = 2;
	if (out->select_poll_os_force) {
		if (!CFG_EXPLICIT("VMA_SELECT_POLL_OS_RATIO"))
			out->select_poll_os_ratio = 1;
		if (!CFG_EXPLICIT("VMA_SELECT_SKIP_OS"))
			out->select_skip_os = 1;
	}
#undef CFG_EXPLICIT
	if (out->tcp_timer_resolution_msec < out->timer_resolution_msec) {
		vlog_warn("VMA_TCP_TIMER_RESOLUTION_MSEC=%d is below VMA_TIMER_RESOLUTION_MSEC; using %d",
			  out->tcp_timer_resolution_msec, out->timer_resolution_msec);
		out->tcp_timer_resolution_msec = out->timer_resolution_msec;
	}
	return rejected;
}
