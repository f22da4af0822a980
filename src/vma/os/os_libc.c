/* Resolving the table of libc originals (os.h). */
#include <dlfcn.h>
#include <string.h>
#include "os/os.h"

struct os_libc os_libc;
int os_libc_resolved;

void os_libc_resolve(void)
{
	/* dlsym calls no function we interpose. Every racing thread writes the
	 * same pointers, so no lock is needed; the flag is published last. */
#define OS_LIBC(name) \
	__atomic_store_n(&os_libc.name, (__typeof__(os_libc.name))dlsym(RTLD_NEXT, #name), __ATOMIC_RELAXED);
#include "os/os_libc.def"
#undef OS_LIBC
	__atomic_store_n(&os_libc_resolved, 1, __ATOMIC_RELEASE);
}

void os_libc_missing(char *buf, size_t size)
{
	size_t used = 0;
	if (size)
		buf[0] = '\0';
	os_libc_ensure();
#define OS_LIBC(name) \
	if (!OS_FN_RESOLVED(name) && used + sizeof(#name) + 2 < size) { \
		if (used) { memcpy(buf + used, ", ", 2); used += 2; } \
		memcpy(buf + used, #name, sizeof(#name)); \
		used += sizeof(#name) - 1; \
	}
#include "os/os_libc.def"
#undef OS_LIBC
}
