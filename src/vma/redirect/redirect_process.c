/* fork, vfork, daemon: the child keeps every inherited socket usable (the
 * table and the objects are copied with our memory) and runs the post-fork
 * hook (vma_after_fork_child), which marks inherited rings and offloaded
 * sockets as the parent's.
 * setuid and kin: what needs root is prepared while we still have it. */
#undef _FORTIFY_SOURCE
#include "redirect/redirect.h"
#include "vma_main.h"

REDIRECT_EXPORT pid_t fork(void)
{
	os_libc_ensure();
	__typeof__(os_libc.fork) orig = OS_FN_RESOLVED(fork);
	if (!orig)
		return redirect_enosys();
	pid_t pid = orig();
	if (pid == 0)
		vma_after_fork_child();   /* no-op if the atfork handler ran it */
	else if (pid > 0)
		vma_after_fork_parent(pid);
	return pid;
}

/* vfork is served by fork. A vfork child borrows the parent's stack until it
 * execs or exits; a wrapper that called the real vfork would return into
 * its own frame in the child, and the child's next calls would overwrite
 * the frame the parent returns through when it resumes. fork() gives the
 * same observable behaviour to a conforming caller (the child only execs or
 * _exits), at the cost of copying page tables. */
REDIRECT_EXPORT pid_t vfork(void)
{
	return fork();
}

REDIRECT_EXPORT int daemon(int nochdir, int noclose)
{
	os_libc_ensure();
	__typeof__(os_libc.daemon) orig = OS_FN_RESOLVED(daemon);
	if (!orig)
		return redirect_enosys();
	/* glibc's daemon() forks internally (not through our fork symbol);
	 * only the child returns 0. */
	int ret = orig(nochdir, noclose);
	if (ret == 0)
		vma_after_fork_child();
	return ret;
}

/* A call that may leave the process without effective uid 0 (-1 keeps an
 * id): the last moment to prepare what needs root (vma_before_privilege_drop). */
static void redirect_before_uid_change(uid_t new_euid)
{
	if (new_euid != (uid_t)-1 && new_euid != 0 && geteuid() == 0)
		vma_before_privilege_drop();
}

REDIRECT_EXPORT int setuid(uid_t uid)
{
	os_libc_ensure();
	__typeof__(os_libc.setuid) orig = OS_FN_RESOLVED(setuid);
	if (!orig)
		return redirect_enosys();
	redirect_before_uid_change(uid);
	return orig(uid);
}

REDIRECT_EXPORT int seteuid(uid_t euid)
{
	os_libc_ensure();
	__typeof__(os_libc.seteuid) orig = OS_FN_RESOLVED(seteuid);
	if (!orig)
		return redirect_enosys();
	redirect_before_uid_change(euid);
	return orig(euid);
}

REDIRECT_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
	os_libc_ensure();
	__typeof__(os_libc.setreuid) orig = OS_FN_RESOLVED(setreuid);
	if (!orig)
		return redirect_enosys();
	redirect_before_uid_change(euid);
	return orig(ruid, euid);
}

REDIRECT_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
	os_libc_ensure();
	__typeof__(os_libc.setresuid) orig = OS_FN_RESOLVED(setresuid);
	if (!orig)
		return redirect_enosys();
	redirect_before_uid_change(euid);
	return orig(ruid, euid, suid);
}
