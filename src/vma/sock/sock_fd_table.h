/* fd -> struct sock_obj: which descriptors libvma tracks.
 *
 * One flat array indexed by fd, sized once at init from RLIMIT_NOFILE. The
 * lookup is an array index and one atomic load, with no lock, so every
 * interposed call can afford it; fds at or beyond the size are simply not
 * ours. The table owns the objects in it: replacing or dropping an entry
 * retires the object (sock_obj_retire). */
#ifndef VMA_SOCK_SOCK_FD_TABLE_H
#define VMA_SOCK_SOCK_FD_TABLE_H

#include "sock/sock_obj.h"

/* Upper bound for the table, whatever the hard limit says (8 MiB of
 * pointers, mapped lazily by the kernel). */
#define SOCK_FD_TABLE_MAX (1u << 20)

/* Read by sock_fd_get() below; written only by init/fini. */
extern struct sock_obj **sock_fd_slots;
extern unsigned int sock_fd_slot_count;

/* Allocates the table with `size` entries, or when size is 0 with
 * sock_fd_table_size_from_rlimit(). Calling it again after success is a
 * no-op. Returns 0, or -1 (errno set) when the memory cannot be mapped:
 * then nothing is tracked and every call goes to the kernel. */
int sock_fd_table_init(unsigned int size);
/* Retires every object and unmaps the table. Only when no other thread can
 * be inside a lookup (tests, teardown). */
void sock_fd_table_fini(void);
/* The hard RLIMIT_NOFILE, capped to SOCK_FD_TABLE_MAX (also for
 * RLIM_INFINITY); at least 1024 should getrlimit fail. */
unsigned int sock_fd_table_size_from_rlimit(void);
unsigned int sock_fd_table_size(void);

/* The object for fd, or NULL (untracked, out of range, table not built). */
static inline struct sock_obj *sock_fd_get(int fd)
{
	if ((unsigned int)fd >= __atomic_load_n(&sock_fd_slot_count, __ATOMIC_ACQUIRE))
		return (struct sock_obj *)0;
	return __atomic_load_n(&sock_fd_slots[fd], __ATOMIC_ACQUIRE);
}

/* Tracks obj under fd. A previous (stale) object there is retired.
 * Returns 0, or -1 when fd is out of range or obj is NULL (obj is then
 * neither stored nor retired: the caller still owns it). */
int sock_fd_set(int fd, struct sock_obj *obj);
/* Removes fd's entry and returns its object (the caller retires it), or
 * NULL. Call it BEFORE the kernel can reuse the number (before close). */
struct sock_obj *sock_fd_take(int fd);
/* sock_fd_take + sock_obj_retire. */
void sock_fd_drop(int fd);
/* Drops every entry in [first, last] (clipped to the table). */
void sock_fd_drop_range(unsigned int first, unsigned int last);
/* Number of fds tracked right now (approximate under concurrency). */
unsigned int sock_fd_tracked_count(void);

#endif
