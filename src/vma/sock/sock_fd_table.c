/* The fd table. Writers (socket creation, close, dup2) publish with atomic
 * exchanges so that two threads racing on one fd each end up owning a
 * distinct object to retire; readers use one acquire load. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include "sock/sock_fd_table.h"

struct sock_obj **sock_fd_slots;
unsigned int sock_fd_slot_count;

/* One past the highest fd ever set: bounds close_range() scans, which
 * otherwise walk up to a million entries in every forked python child. */
static unsigned int sock_fd_high_water;
static unsigned int sock_fd_tracked;

/* The table is mmap'ed, and LeakSanitizer scans no mapping it did not
 * make: the objects of sockets still open at exit (reachable, by design:
 * other destructors may still use them) would be reported as leaks. Weak,
 * so only a sanitizer runtime in the process provides them. */
extern void __lsan_register_root_region(const void *begin, size_t size) __attribute__((weak));
extern void __lsan_unregister_root_region(const void *begin, size_t size) __attribute__((weak));

unsigned int sock_fd_table_size_from_rlimit(void)
{
	struct rlimit limit;
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
		return 1024;
	if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max > SOCK_FD_TABLE_MAX)
		return SOCK_FD_TABLE_MAX;
	return limit.rlim_max ? (unsigned int)limit.rlim_max : 1;
}

int sock_fd_table_init(unsigned int size)
{
	if (__atomic_load_n(&sock_fd_slot_count, __ATOMIC_ACQUIRE))
		return 0;
	if (size == 0)
		size = sock_fd_table_size_from_rlimit();
	if (size > SOCK_FD_TABLE_MAX)
		size = SOCK_FD_TABLE_MAX;
	/* mmap rather than calloc: zeroed, touched lazily, and no malloc in
	 * whatever context the first socket() call happens. */
	void *mem = mmap(NULL, (size_t)size * sizeof(*sock_fd_slots), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return -1;
	sock_fd_slots = mem;
	if (__lsan_register_root_region)
		__lsan_register_root_region(mem, (size_t)size * sizeof(*sock_fd_slots));
	sock_fd_high_water = 0;
	sock_fd_tracked = 0;
	__atomic_store_n(&sock_fd_slot_count, size, __ATOMIC_RELEASE);
	return 0;
}

void sock_fd_table_fini(void)
{
	unsigned int size = __atomic_exchange_n(&sock_fd_slot_count, 0, __ATOMIC_ACQ_REL);
	if (!size)
		return;
	for (unsigned int fd = 0; fd < size; fd++)
		sock_obj_retire(sock_fd_slots[fd]);
	sock_obj_flush_retired();
	if (__lsan_unregister_root_region)
		__lsan_unregister_root_region(sock_fd_slots, (size_t)size * sizeof(*sock_fd_slots));
	munmap(sock_fd_slots, (size_t)size * sizeof(*sock_fd_slots));
	sock_fd_slots = NULL;
}

unsigned int sock_fd_table_size(void)
{
	return __atomic_load_n(&sock_fd_slot_count, __ATOMIC_ACQUIRE);
}

static void sock_fd_raise_high_water(unsigned int end)
{
	unsigned int seen = __atomic_load_n(&sock_fd_high_water, __ATOMIC_RELAXED);
	while (seen < end &&
	       !__atomic_compare_exchange_n(&sock_fd_high_water, &seen, end, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

int sock_fd_set(int fd, struct sock_obj *obj)
{
	if (!obj || (unsigned int)fd >= sock_fd_table_size()) {
		errno = EBADF;
		return -1;
	}
	sock_fd_raise_high_water((unsigned int)fd + 1);
	struct sock_obj *stale = __atomic_exchange_n(&sock_fd_slots[fd], obj, __ATOMIC_ACQ_REL);
	if (stale)
		sock_obj_retire(stale);
	else
		__atomic_fetch_add(&sock_fd_tracked, 1, __ATOMIC_RELAXED);
	return 0;
}

struct sock_obj *sock_fd_take(int fd)
{
	if ((unsigned int)fd >= sock_fd_table_size())
		return NULL;
	/* A plain load first: most calls come for untracked fds, and an
	 * exchange would dirty the cache line for nothing. */
	if (!__atomic_load_n(&sock_fd_slots[fd], __ATOMIC_ACQUIRE))
		return NULL;
	struct sock_obj *obj = __atomic_exchange_n(&sock_fd_slots[fd], NULL, __ATOMIC_ACQ_REL);
	if (obj)
		__atomic_fetch_sub(&sock_fd_tracked, 1, __ATOMIC_RELAXED);
	return obj;
}

void sock_fd_drop(int fd)
{
	sock_obj_retire(sock_fd_take(fd));
}

void sock_fd_drop_range(unsigned int first, unsigned int last)
{
	unsigned int end = __atomic_load_n(&sock_fd_high_water, __ATOMIC_RELAXED);
	if (end > sock_fd_table_size())
		end = sock_fd_table_size();
	if (last >= end)
		last = end - 1;
	if (end == 0 || first > last)
		return;
	for (unsigned int fd = first; fd <= last; fd++)
		sock_fd_drop((int)fd);
}

unsigned int sock_fd_tracked_count(void)
{
	return __atomic_load_n(&sock_fd_tracked, __ATOMIC_RELAXED);
}
