/* Resolving the originals. This file is part of the core library (it
 * defines no interposed symbol), so sock/ code and unit tests can reach the
 * kernel through it too. */
#include <dlfcn.h>
#include <string.h>
#include "redirect/redirect_orig.h"

struct redirect_orig redirect_orig;
int redirect_orig_resolved;

void redirect_resolve_originals(void)
{
	/* dlsym calls no function we interpose. Every racing thread writes the
	 * same pointers, so no lock is needed; the flag is published last. */
#define REDIRECT_ORIG(name) \
	__atomic_store_n(&redirect_orig.name, (__typeof__(redirect_orig.name))dlsym(RTLD_NEXT, #name), \
			 __ATOMIC_RELAXED);
#include "redirect/redirect_orig.def"
#undef REDIRECT_ORIG
	__atomic_store_n(&redirect_orig_resolved, 1, __ATOMIC_RELEASE);
}

void redirect_orig_missing(char *buf, size_t size)
{
	size_t used = 0;
	if (size)
		buf[0] = '\0';
#define REDIRECT_ORIG(name) \
	if (!REDIRECT_ORIG_FN(name) && used + sizeof(#name) + 2 < size) { \
		if (used) { memcpy(buf + used, ", ", 2); used += 2; } \
		memcpy(buf + used, #name, sizeof(#name)); \
		used += sizeof(#name) - 1; \
	}
#include "redirect/redirect_orig.def"
#undef REDIRECT_ORIG
}
