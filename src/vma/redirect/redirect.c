/* STUB */
#include "redirect/redirect.h"
void redirect_resolve_originals(void) {}
