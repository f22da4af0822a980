/* The VMA_* parameter table: the single source of truth for every parameter's
 * name, type, default, range and description. The startup banner, validation
 * and docs/parameters.md are all produced from it (rows: cfg_params.def).
 *
 * Each parameter has a field in struct cfg_params named after it in lower case
 * without the VMA_ prefix (VMA_RX_POLL -> g_cfg.rx_poll). Numeric, boolean and
 * enumerated parameters are ints; text parameters are fixed-size char arrays. */
#ifndef VMA_CONFIG_CFG_PARAMS_H
#define VMA_CONFIG_CFG_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config/cfg_params_fields.h"   /* struct cfg_params, generated from the .def */

/* The values in force for this process (filled by cfg_params_load). */
extern struct cfg_params g_cfg;

/* Looks up a variable; tests inject their own environment. */
typedef const char *(*cfg_getenv_fn)(const char *name);

/* Fills *out: documented defaults, then the VMA_SPEC profile, then every
 * individual VMA_* variable (which overrides the profile). A bad value gives
 * one warning naming the variable and the value, and the default is kept.
 * Never allocates; safe to call from a library constructor.
 * Returns the number of values rejected. */
int cfg_params_load(struct cfg_params *out, cfg_getenv_fn getenv_fn);

/* Prints the startup banner through the logger: version, command line, pid,
 * then every parameter whose value differs from its default
 * (VMA_TRACELEVEL and VMA_LOG_FILE always). */
void cfg_params_print_banner(const struct cfg_params *p);

/* Writes the parameter reference (Markdown) generated from the table. */
void cfg_params_write_markdown(FILE *out);

/* Writes the troff parameter summary of the libvma(7) man page: per row the
 * name, default, range, whether it acts here, and the description's first
 * sentence (tests/unit/check_man_pages.sh keeps docs/libvma.7 in step). */
void cfg_params_write_man(FILE *out);

/* Number of rows in the table. */
int cfg_params_count(void);

/* ---- The table itself, for code that wants to walk or query it. ---- */

typedef enum cfg_kind {
	CFG_KIND_INT,     /* decimal integer in [min, max]; labels annotate special values */
	CFG_KIND_BOOL,    /* 0 or 1, shown as Disabled / Enabled */
	CFG_KIND_STRING,  /* text copied into a fixed-size array */
	CFG_KIND_LEVEL,   /* log level: number or name, shown by name */
	CFG_KIND_ENUM,    /* one of the labelled numbers, shown as "N (label)" */
	CFG_KIND_NAMED,   /* one of the labelled numbers, shown as the label alone */
	CFG_KIND_SPEC,    /* VMA_SPEC: a profile name or its numeric alias */
} cfg_kind_t;

/* How a parameter acts in this implementation (the xdp backend). Marked per
 * row in cfg_params.def, shown in docs/parameters.md and, for a value the
 * user changed, in the banner; tests/unit/check_params_effect.sh checks that
 * every row marked "in effect" is read by code outside config/ and that no
 * row marked otherwise is. */
typedef enum cfg_effect {
	CFG_EFFECT_USED = 0,    /* read by the code that does what it says */
	CFG_EFFECT_LOADER,      /* acts while the table loads, by setting other rows (VMA_SPEC) */
	CFG_EFFECT_VERBS_ONLY,  /* means something on a verbs (RDMA) NIC only: no effect on xdp */
	CFG_EFFECT_NONE,        /* no effect here; effect_why says why */
} cfg_effect_t;

/* One documented value of a numeric parameter; lists end with text == NULL. */
struct cfg_label {
	int value;
	const char *text;
};

struct cfg_param_row {
	const char *name;          /* "VMA_RX_POLL" */
	const char *field;         /* "rx_poll" */
	cfg_kind_t kind;
	size_t offset;             /* of the field in struct cfg_params */
	size_t size;               /* of the field (string capacity incl. NUL) */
	int default_int;           /* numeric kinds */
	const char *default_str;   /* CFG_KIND_STRING only */
	int min, max;              /* numeric kinds */
	const char *title;         /* banner title, "Rx Poll Loops" */
	const struct cfg_label *labels;  /* NULL when none */
	const char *description;
	cfg_effect_t effect;
	const char *effect_why;    /* CFG_EFFECT_NONE (and optionally others): one line */
};

/* Row i (0 <= i < cfg_params_count()), or NULL. */
const struct cfg_param_row *cfg_param_at(int index);
/* Row by exact variable name ("VMA_RX_POLL"), or NULL. */
const struct cfg_param_row *cfg_param_find(const char *name);

/* Integer view of a numeric row's field in p. */
int cfg_param_get_int(const struct cfg_params *p, const struct cfg_param_row *row);
/* String view of a CFG_KIND_STRING row's field in p. */
const char *cfg_param_get_str(const struct cfg_params *p, const struct cfg_param_row *row);
/* True when p holds the row's documented default. */
bool cfg_param_is_default(const struct cfg_params *p, const struct cfg_param_row *row);

/* Writes the value the way the banner shows it ("Enabled", "0 (Ring per
 * interface)", "DEBUG", "100000", a path); always NUL-terminates.
 * Returns buf. */
const char *cfg_param_value_text(const struct cfg_params *p, const struct cfg_param_row *row,
				 char *buf, size_t size);
/* Same for the documented default (no struct needed). */
const char *cfg_param_default_text(const struct cfg_param_row *row, char *buf, size_t size);

/* Short text for the row's effect: "in effect", "no effect on xdp"... */
const char *cfg_param_effect_text(const struct cfg_param_row *row);
/* What the banner appends to a changed value that does nothing here:
 * " (no effect on xdp)", " (no effect here)", or "". */
const char *cfg_param_effect_suffix(const struct cfg_param_row *row);

/* Label for value, or NULL. */
const char *cfg_param_label(const struct cfg_param_row *row, int value);

/* Parses text as a value for row and stores it in p. Returns 0, or -1 with
 * p untouched and a reason ("is not a valid integer") in *why. No logging. */
int cfg_param_parse(struct cfg_params *p, const struct cfg_param_row *row, const char *text,
		    const char **why);

/* ---- VMA_SPEC profiles (cfg_spec.c) ---- */

enum cfg_spec_id {
	CFG_SPEC_NONE = 0,
	CFG_SPEC_ULTRA_LATENCY = 10,
	CFG_SPEC_LATENCY = 15,
	CFG_SPEC_MULTI_RING_LATENCY = 100, /* has no numeric alias in the reference */
};

/* One setting of a profile: the variable and its value, as text, so a
 * profile goes through the same parser as the environment. */
struct cfg_spec_setting {
	const char *name;
	const char *value;
};

struct cfg_spec {
	int id;                        /* enum cfg_spec_id, stored in g_cfg.spec */
	const char *names[3];          /* accepted spellings, NULL-terminated */
	const char *title;             /* "Latency" */
	const char *summary;           /* one sentence for the docs */
	const struct cfg_spec_setting *settings;  /* ends with name == NULL */
};

/* Profile by accepted name or numeric alias (case-insensitive), or NULL. */
const struct cfg_spec *cfg_spec_find(const char *text);
/* Profile by id, or NULL (CFG_SPEC_NONE has none). */
const struct cfg_spec *cfg_spec_by_id(int id);
/* Profile i (0 <= i < cfg_spec_count()). */
const struct cfg_spec *cfg_spec_at(int index);
int cfg_spec_count(void);

#endif
