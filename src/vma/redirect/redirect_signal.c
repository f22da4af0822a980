/* sigaction and signal. libvma keeps its own handler installed in the
 * kernel for the signals whose default action ends the process, so that
 * offloaded TCP connections are closed toward their peers and the rings
 * released when such a signal kills the process:
 * - the application's action is the default: libvma's cleanup runs, then the
 *   default action is re-raised (same exit status, core dump where due);
 * - the application has a handler: it runs (the process may survive), with
 *   libvma's cleanup first only for SIGINT/SIGTERM under VMA_HANDLE_SIGINTR=1;
 * - SIG_IGN is given to the kernel as is.
 * What the application installs is kept here and reported back by
 * sigaction(sig, NULL, &old), so it never sees our handler. */
#undef _FORTIFY_SOURCE
#include <pthread.h>
#include <string.h>
#include "config/cfg_params.h"
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "vma_main.h"

/* The asynchronous signals that end a process by default (the ones raised
 * by faults, SIGSEGV and friends, are left alone: nothing safe can run). */
static const int redirect_managed_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGUSR1,
						SIGUSR2 };
#define REDIRECT_MANAGED_COUNT (sizeof(redirect_managed_signals) / sizeof(redirect_managed_signals[0]))

/* The application's disposition per managed signal, and whether ours is in
 * force. Read by the handler; written with the signal blocked in the
 * writing thread. */
static struct sigaction redirect_app_action[REDIRECT_MANAGED_COUNT];
static bool redirect_sig_managed;

static int redirect_managed_slot(int sig)
{
	for (size_t i = 0; i < REDIRECT_MANAGED_COUNT; i++)
		if (redirect_managed_signals[i] == sig)
			return (int)i;
	return -1;
}

static void redirect_sig_handler(int sig, siginfo_t *info, void *context)
{
	int saved = errno;
	int slot = redirect_managed_slot(sig);
	if (slot < 0)
		return;
	struct sigaction app = redirect_app_action[slot];
	bool dies = !(app.sa_flags & SA_SIGINFO) && app.sa_handler == SIG_DFL;
	if (dies || (g_cfg.handle_sigintr && (sig == SIGINT || sig == SIGTERM))) {
		vlog_debug("signal %d: running libvma's cleanup, then the application's action", sig);
		vma_run_sigint_cleanup();
	}
	if (app.sa_flags & SA_RESETHAND) {
		redirect_app_action[slot].sa_handler = SIG_DFL;
		redirect_app_action[slot].sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
	}
	errno = saved;
	if (app.sa_flags & SA_SIGINFO) {
		app.sa_sigaction(sig, info, context);
	} else if (app.sa_handler == SIG_DFL) {
		/* The default action of every managed signal ends the
		 * process: restore it and re-raise; the signal stays pending until we
		 * return (it is blocked during its handler), then ends the
		 * process with the status the plain signal would give. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
		if (orig)
			orig(sig, &dfl, NULL);
		raise(sig);
	} else if (app.sa_handler != SIG_IGN) {
		app.sa_handler(sig);
	}
}

/* Puts the kernel's disposition of a managed signal in line with the
 * application's:
 * SIG_IGN is given to the kernel as is (a ^C must then do nothing, not
 * tear libvma down); anything else gets our handler with the
 * application's mask and flags, so blocking and SA_RESTART behave as asked. */
static int redirect_sig_apply(int slot)
{
	__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
	if (!orig)
		return redirect_enosys();
	int sig = redirect_managed_signals[slot];
	const struct sigaction *app = &redirect_app_action[slot];
	if (!(app->sa_flags & SA_SIGINFO) && app->sa_handler == SIG_IGN)
		return orig(sig, app, NULL);
	struct sigaction ours = *app;
	ours.sa_sigaction = redirect_sig_handler;
	ours.sa_flags = (app->sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
	/* Behind a default action the process ends anyway: restartable, so a
	 * blocking call never sees EINTR from a signal the application does
	 * not handle (and the "every handler restarts" test of our blocking
	 * paths stays true). */
	if (!(app->sa_flags & SA_SIGINFO) && app->sa_handler == SIG_DFL)
		ours.sa_flags |= SA_RESTART;
	return orig(sig, &ours, NULL);
}

void redirect_signal_init(void)
{
	REDIRECT_ENSURE_ORIGINALS();
	__typeof__(redirect_orig.sigaction) orig = REDIRECT_ORIG_FN(sigaction);
	if (!orig)
		return;
	for (size_t i = 0; i < REDIRECT_MANAGED_COUNT; i++) {
		int sig = redirect_managed_signals[i];
		if (orig(sig, NULL, &redirect_app_action[i]) != 0 || redirect_sig_apply((int)i) != 0) {
			vlog_warn("cannot install libvma's handler of signal %d (%s): a signal that kills the "
				  "process will not close offloaded TCP connections toward their peers", sig,
				  strerror(errno));
			/* All or nothing: put back what was installed already. */
			for (size_t j = 0; j < i; j++)
				orig(redirect_managed_signals[j], &redirect_app_action[j], NULL);
			return;
		}
	}
	__atomic_store_n(&redirect_sig_managed, true, __ATOMIC_RELEASE);
	vlog_debug("terminating signals pass through libvma's handler (cleanup before a default action%s)",
		   g_cfg.handle_sigintr ? "; SIGINT/SIGTERM always, VMA_HANDLE_SIGINTR=1" : "");
}

/* Swaps the application's action of a managed signal while ours stays
 * installed. */
static int redirect_sig_swap(int slot, const struct sigaction *act, struct sigaction *oldact)
{
	sigset_t block, saved_mask;
	sigemptyset(&block);
	sigaddset(&block, redirect_managed_signals[slot]);
	pthread_sigmask(SIG_BLOCK, &block, &saved_mask);
	struct sigaction previous = redirect_app_action[slot];
	int ret = 0;
	if (act) {
		redirect_app_action[slot] = *act;
		ret = redirect_sig_apply(slot);
		if (ret != 0)
			redirect_app_action[slot] = previous;
	}
	pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
	if (ret == 0 && oldact)
		*oldact = previous;
	return ret;
}

/* The slot of sig when libvma manages it, else -1. */
static int redirect_sig_ours(int sig)
{
	int slot = redirect_managed_slot(sig);
	if (slot < 0 || !vma_init_once() || !__atomic_load_n(&redirect_sig_managed, __ATOMIC_ACQUIRE))
		return -1;
	return slot;
}

REDIRECT_EXPORT int sigaction(int sig, const struct sigaction *__restrict act, struct sigaction *__restrict oldact)
{
	REDIRECT_ENSURE_ORIGINALS();
	int slot = redirect_sig_ours(sig);
	if (slot >= 0)
		return redirect_sig_swap(slot, act, oldact);
	REDIRECT_PASS(sigaction, sig, act, oldact);
}

REDIRECT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
	REDIRECT_ENSURE_ORIGINALS();
	int slot = redirect_sig_ours(sig);
	if (slot >= 0) {
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
		if (redirect_sig_swap(slot, &act, &old) != 0)
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
