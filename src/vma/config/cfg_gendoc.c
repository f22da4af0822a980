/* Prints the Markdown parameter reference generated from the parameter
 * table; the build redirects it into docs/parameters.md. */
#include <stdio.h>

#include "config/cfg_params.h"

int main(void)
{
	cfg_params_write_markdown(stdout);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
