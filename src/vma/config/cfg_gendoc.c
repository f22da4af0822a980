/* Prints docs/parameters.md from the parameter table. */
#include <stdio.h>
#include "config/cfg_params.h"
int main(void) { cfg_params_write_markdown(stdout); return 0; }
