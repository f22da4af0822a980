/* Prints the Markdown parameter reference generated from the parameter
 * table; the build redirects it into docs/parameters.md.
 * With --effects it lists one row per line instead, "NAME field effect"
 * (effect: used, loader, verbs-only or none), for
 * tests/unit/check_params_effect.sh, which compares the marks with the code.
 * For tests/unit/check_man_pages.sh, which keeps the man pages in step:
 * --man prints the parameter summary of libvma(7); --conf-roles the role
 * names the libvma.conf parser knows; --conf-check FILE parses FILE as a
 * libvma.conf (for every program and application id) and prints
 * "bad N rules M", exit 1 if N > 0. */
#include <stdio.h>
#include <string.h>

#include "config/cfg_params.h"
#include "config/cfg_rules.h"

static const char *cfg_gendoc_effect_word(cfg_effect_t effect)
{
	switch (effect) {
	case CFG_EFFECT_USED: return "used";
	case CFG_EFFECT_LOADER: return "loader";
	case CFG_EFFECT_VERBS_ONLY: return "verbs-only";
	case CFG_EFFECT_NONE: return "none";
	}
	return "?";
}

static int cfg_gendoc_conf_check(const char *path)
{
	/* The program name "*" matches every application-id glob only when
	 * the glob is "*"; the id "*" does not select named blocks either, so
	 * a block's rules are parsed (and their errors counted) but held only
	 * for blocks that apply to everyone. Errors are what matters here. */
	int bad = cfg_rules_load_file(path, "*", "*");
	if (bad < 0) {
		fprintf(stderr, "cfg_gendoc: %s: cannot be read\n", path);
		return 1;
	}
	printf("bad %d rules %zu\n", bad, cfg_rules_count());
	cfg_rules_clear();
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--effects")) {
		for (int i = 0; i < cfg_params_count(); i++) {
			const struct cfg_param_row *row = cfg_param_at(i);
			printf("%s %s %s\n", row->name, row->field, cfg_gendoc_effect_word(row->effect));
		}
	} else if (argc == 2 && !strcmp(argv[1], "--man")) {
		cfg_params_write_man(stdout);
	} else if (argc == 2 && !strcmp(argv[1], "--conf-roles")) {
		for (int role = 0; role < CFG_ROLE_COUNT; role++)
			printf("%s\n", cfg_role_name((cfg_role_t)role));
	} else if (argc == 3 && !strcmp(argv[1], "--conf-check")) {
		return cfg_gendoc_conf_check(argv[2]);
	} else if (argc > 1) {
		fprintf(stderr, "usage: %s [--effects | --man | --conf-roles | --conf-check FILE]\n", argv[0]);
		return 2;
	} else {
		cfg_params_write_markdown(stdout);
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
