/* sigaction and signal. Pass-through, except SIGINT when
 * VMA_HANDLE_SIGINTR=1: then our handler stays installed in the kernel, runs
 * libvma's cleanup hook, then the application's handler (or its default
 * action). What the application installs is kept here and reported back by
 * sigaction(SIGINT, NULL, &old), so it never sees our handler. */
#undef _FORTIFY_SOURCE
#include <pthread.h>
#include <string.h>
#include "config/cfg_params.h"
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "vma_main.h"

/* The application's SIGINT disposition, and whether ours is in force. Read
 * by the handler; written with SIGINT blocked in the writing thread. */
static struct sigaction redirect_app_sigint;
static bool redirect_sigint_managed;

static void redirect_sigint_handler(int sig, siginfo_t *info, void *context)
{
	int saved = errno;
	vlog_debug("SIGINT: running libvma's cleanup, then the application's action");
	vma_run_sigint_cleanup();
	struct sigaction app = redirect_app_sigint;
	if (app.sa_flags & SA_RESETHAND) {
		redirect_app_sigint.sa_handler = SIG_DFL;
		redirect_app_sigint.sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
	}
	errno = saved;
	if (app.sa_flags & SA_SIGINFO) {
		app.sa_sigaction(sig, info, context);
	} else if (app.sa_handler == SIG_DFL) {
		/* The default action of SIGINT is to terminate: restore it and
		 * re-raise; the signal stays pending until we return (it is
		 * blocked during its handler), then ends the process with the
		 * status a plain SIGINT would give. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
		if (orig)
			orig(SIGINT, &dfl, NULL);
		raise(SIGINT);
	} else if (app.sa_handler != SIG_IGN) {
		app.sa_handler(sig);
	}
}

/* Puts the kernel's SIGINT disposition in line with redirect_app_sigint:
 * SIG_IGN is given to the kernel as is (a ^C must then do nothing, not
 * tear libvma down); anything else gets our handler with the
 * application's mask and flags, so blocking and SA_RESTART behave as asked. */
static int redirect_sigint_apply(void)
{
	__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
	if (!orig)
		return redirect_enosys();
	if (!(redirect_app_sigint.sa_flags & SA_SIGINFO) && redirect_app_sigint.sa_handler == SIG_IGN)
		return orig(SIGINT, &redirect_app_sigint, NULL);
	struct sigaction ours = redirect_app_sigint;
	ours.sa_sigaction = redirect_sigint_handler;
	ours.sa_flags = (redirect_app_sigint.sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
	return orig(SIGINT, &ours, NULL);
}

void redirect_signal_init(void)
{
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
	if (!g_cfg.handle_sigintr || !orig)
		return;
	if (orig(SIGINT, NULL, &redirect_app_sigint) != 0 || redirect_sigint_apply() != 0) {
		vlog_warn("VMA_HANDLE_SIGINTR=1: cannot install the SIGINT handler (%s); SIGINT left to the application",
			  strerror(errno));
		return;
	}
	__atomic_store_n(&redirect_sigint_managed, true, __ATOMIC_RELEASE);
	vlog_debug("SIGINT handled by libvma (VMA_HANDLE_SIGINTR=1)");
}

/* Swaps the application's SIGINT action while ours stays installed. */
static int redirect_sigint_swap(const struct sigaction *act, struct sigaction *oldact)
{
	sigset_t block, saved_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	pthread_sigmask(SIG_BLOCK, &block, &saved_mask);
	struct sigaction previous = redirect_app_sigint;
	int ret = 0;
	if (act) {
		redirect_app_sigint = *act;
		ret = redirect_sigint_apply();
		if (ret != 0)
			redirect_app_sigint = previous;
	}
	pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
	if (ret == 0 && oldact)
		*oldact = previous;
	return ret;
}

static bool redirect_sigint_is_ours(int sig)
{
	return sig == SIGINT && vma_init_once() && __atomic_load_n(&redirect_sigint_managed, __ATOMIC_ACQUIRE);
}

REDIRECT_EXPORT int sigaction(int sig, const struct sigaction *__restrict act, struct sigaction *__restrict oldact)
{
	REDIRECT_ENSURE_ORIGINALS();
	if (redirect_sigint_is_ours(sig))
		return redirect_sigint_swap(act, oldact);
	REDIRECT_PASS(sigaction, sig, act, oldact);
}

REDIRECT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
	REDIRECT_ENSURE_ORIGINALS();
	if (redirect_sigint_is_ours(sig)) {
		/* glibc's signal() semantics: BSD, restartable, the signal
		 * blocked while its handler runs. */
		if (handler == SIG_ERR) {
			errno = EINVAL;
			return SIG_ERR;
		}
		struct sigaction act, old;
		memset(&act, 0, sizeof(act));
		act.sa_handler = handler;
		act.sa_flags = SA_RESTART;
		sigemptyset(&act.sa_mask);
		sigaddset(&act.sa_mask, sig);
		if (redirect_sigint_swap(&act, &old) != 0)
			return SIG_ERR;
		/* sa_handler and sa_sigaction share storage: this is the old
		 * handler whichever way it was installed. */
		return old.sa_handler;
	}
	__typeof__(redirect_orig.signal) orig = REDIRECT_ORIG_FN(signal);
	if (!orig) {
		errno = ENOSYS;
		return SIG_ERR;
	}
	return orig(sig, handler);
}
