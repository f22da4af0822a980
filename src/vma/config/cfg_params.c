/* STUB until the parameter table lands. */
#include <string.h>
#include "config/cfg_params.h"
#include "log/vlog.h"

struct cfg_params g_cfg;

int cfg_params_load(struct cfg_params *out, cfg_getenv_fn getenv_fn)
{
	(void)getenv_fn;
	memset(out, 0, sizeof(*out));
	out->tracelevel = VLOG_INFO;
	out->log_colors = 1;
	snprintf(out->config_file, sizeof(out->config_file), "%s/libvma.conf", VMA_SYSCONFDIR);
	snprintf(out->application_id, sizeof(out->application_id), "VMA_DEFAULT_APPLICATION_ID");
	return 0;
}

void cfg_params_print_banner(const struct cfg_params *p) { (void)p; }
void cfg_params_write_markdown(FILE *out) { fputs("# VMA parameters\n", out); }
int cfg_params_count(void) { return 0; }
