/* fork, vfork, daemon: the child keeps every inherited socket usable (the
 * table and the objects are copied with our memory) and runs the post-fork
 * hook, which tells later parts that inherited rings belong to the parent. */
#undef _FORTIFY_SOURCE
#include "redirect/redirect.h"
#include "vma_main.h"

REDIRECT_EXPORT pid_t fork(void)
{
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.fork) orig = REDIRECT_ORIG_FN(fork);
	if (!orig)
		return redirect_enosys();
	pid_t pid = orig();
	if (pid == 0)
		vma_after_fork_child();   /* no-op if the atfork handler ran it */
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
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.daemon) orig = REDIRECT_ORIG_FN(daemon);
	if (!orig)
		return redirect_enosys();
	/* glibc's daemon() forks internally (not through our fork symbol);
	 * only the child returns 0. */
	int ret = orig(nochdir, noclose);
	if (ret == 0)
		vma_after_fork_child();
	return ret;
}
