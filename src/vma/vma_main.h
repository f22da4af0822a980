/* Process-wide start and stop of libvma. */
#ifndef VMA_VMA_MAIN_H
#define VMA_VMA_MAIN_H

#include <stdbool.h>
#include <sys/types.h>

/* Lazy, once, thread-safe: resolves the libc originals, loads parameters,
 * configures the logger, prints the banner, loads libvma.conf, builds the fd
 * table, installs the SIGINT handler (VMA_HANDLE_SIGINTR) and the fork hook.
 * Any interposed call may trigger it; other threads wait for it to finish.
 * Returns true once libvma is up. Returns false, at once, to a call made by
 * the initialising thread itself while init runs (the logger or config
 * loader calling an interposed function): that call must go to libc. */
bool vma_init_once(void);

/* Runs in the child after fork(), vfork() (served by fork) and daemon(),
 * once per child process whichever path forked it. Marks inherited rings
 * and offloaded sockets as the parent's (sock_offload_after_fork_child),
 * resets the internal thread, spin slots, signal state and statistics: a
 * child never tears down what the parent owns. */
void vma_after_fork_child(void);
/* In the parent after fork() (and vfork()): the child's statistics file
 * is removed once the child is gone, however it ended (stats_note_child). */
void vma_after_fork_parent(pid_t child);
/* The process (root) is about to give up effective uid 0 (setuid and kin):
 * keeps what offloading needs root for (a vmad spawner connection), so the
 * sockets it opens afterwards are offloaded (docs/vmad.md). */
void vma_before_privilege_drop(void);

/* The SIGINT cleanup (VMA_HANDLE_SIGINTR=1). Runs inside a signal handler:
 * whatever is registered must be async-signal-safe and idempotent. NULL =
 * nothing to clean yet. */
typedef void (*vma_cleanup_fn)(void);
void vma_set_sigint_cleanup(vma_cleanup_fn fn);
void vma_run_sigint_cleanup(void);

/* Starts the internal thread (timers, ring draining, vma_stats control
 * requests) once; called when the first socket libvma tracks is created. */
void vma_engine_start(void);

/* Logs fd's state (0: every tracked fd) at log_level: vma_stats -S and
 * the Extra API's dump_fd_stats. */
void vma_dump_fd(int fd, int log_level);

#endif
