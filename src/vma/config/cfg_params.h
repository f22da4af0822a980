/* The VMA_* parameter table: the single source of truth for every parameter's
 * name, type, default, range and description. The startup banner, validation
 * and docs/parameters.md are all produced from it.
 *
 * Each parameter has a field in struct cfg_params named after it in lower case
 * without the VMA_ prefix (VMA_RX_POLL -> g_cfg.rx_poll). */
#ifndef VMA_CONFIG_CFG_PARAMS_H
#define VMA_CONFIG_CFG_PARAMS_H

#include <stdbool.h>
#include <stdio.h>

#include "config/cfg_params_fields.h"   /* struct cfg_params, generated from the .def */

/* The values in force for this process (filled by cfg_params_load). */
extern struct cfg_params g_cfg;

/* Looks up a variable; tests inject their own environment. */
typedef const char *(*cfg_getenv_fn)(const char *name);

/* Fills *out: documented defaults, then the VMA_SPEC profile, then every
 * individual VMA_* variable (which overrides the profile). A bad value gives
 * one warning naming the variable and the value, and the default is kept.
 * Returns the number of values rejected. */
int cfg_params_load(struct cfg_params *out, cfg_getenv_fn getenv_fn);

/* Prints the startup banner through the logger: version, command line, pid,
 * then every parameter whose value differs from its default
 * (VMA_TRACELEVEL and VMA_LOG_FILE always). */
void cfg_params_print_banner(const struct cfg_params *p);

/* Writes the parameter reference (Markdown) generated from the table. */
void cfg_params_write_markdown(FILE *out);

/* Number of rows in the table. */
int cfg_params_count(void);

#endif
