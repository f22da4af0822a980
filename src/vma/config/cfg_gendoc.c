/* Prints the Markdown parameter reference generated from the parameter
 * table; the build redirects it into docs/parameters.md.
 * With --effects it lists one row per line instead, "NAME field effect"
 * (effect: used, loader, verbs (read by the verbs backend), verbs-only or
 * none), for
 * tests/unit/check_params_effect.sh, which compares the marks with the code. */
#include <stdio.h>
#include <string.h>

#include "config/cfg_params.h"

static const char *cfg_gendoc_effect_word(cfg_effect_t effect)
{
	switch (effect) {
	case CFG_EFFECT_USED: return "used";
	case CFG_EFFECT_LOADER: return "loader";
	case CFG_EFFECT_VERBS_ONLY: return "verbs-only";
	case CFG_EFFECT_NONE: return "none";
	case CFG_EFFECT_VERBS_USED: return "verbs";
	}
	return "?";
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--effects")) {
		for (int i = 0; i < cfg_params_count(); i++) {
			const struct cfg_param_row *row = cfg_param_at(i);
			printf("%s %s %s\n", row->name, row->field, cfg_gendoc_effect_word(row->effect));
		}
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--effects]\n", argv[0]);
		return 2;
	} else {
		cfg_params_write_markdown(stdout);
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
