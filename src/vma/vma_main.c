/* STUB: library constructor. */
#include <stdlib.h>
#include "vma_main.h"
#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "log/vlog.h"
#include "redirect/redirect.h"

void vma_init_once(void)
{
	redirect_resolve_originals();
	cfg_params_load(&g_cfg, (cfg_getenv_fn)getenv);
	cfg_params_print_banner(&g_cfg);
}

__attribute__((constructor)) static void vma_constructor(void) { vma_init_once(); }
