/* sigaction and signal. libvma keeps its own handler installed in the
 * kernel for the signals whose default action ends the process, so that
 * offloaded TCP connections are closed toward their peers and the rings
 * released when such a signal kills the process:
 * - the application's action is the default: libvma's cleanup runs, then the
 *   default action is re-raised (same exit status, core dump where due);
 * - the application has a handler: it runs (the process may survive), with
 *   libvma's cleanup first only for SIGINT/SIGTERM under VMA_HANDLE_SIGINTR=1;
 * - SIG_IGN is given to the kernel as is.
 * Every other catchable signal gets our handler in front of the
 * application's while it has one (SIG_DFL and SIG_IGN go to the kernel as
 * they are). Our handler counts, per thread, the handlers it runs and those
 * without SA_RESTART: a blocking call that busy-polls in user space never
 * sees the EINTR the kernel would give it, so it looks at these counts
 * (os_signal_interrupts) to fail or restart as Linux would.
 * What the application installs is kept here and reported back by
 * sigaction(sig, NULL, &old), so it never sees our handler. */
#undef _FORTIFY_SOURCE
#include <pthread.h>
#include <string.h>
#include "config/cfg_params.h"
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "vma_main.h"

/* The asynchronous signals that end a process by default: libvma's
 * handler stays installed for them whatever the application asks. */
static const int redirect_terminating_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGUSR1,
						    SIGUSR2 };

enum redirect_sig_kind {
	REDIRECT_SIG_NOT_OURS,     /* given to the kernel as is */
	REDIRECT_SIG_TERMINATING,  /* ours always (cleanup before the default action) */
	REDIRECT_SIG_COUNTED,      /* ours in front of an application handler only */
};

static enum redirect_sig_kind redirect_sig_kind(int sig)
{
	for (size_t i = 0; i < sizeof(redirect_terminating_signals) / sizeof(redirect_terminating_signals[0]); i++)
		if (redirect_terminating_signals[i] == sig)
			return REDIRECT_SIG_TERMINATING;
	/* Left alone: the uncatchable ones, the synchronous faults (a handler
	 * there is a crash handler, it must see the fault as raised), and
	 * glibc's own real-time signals below SIGRTMIN. */
	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS ||
	    sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS || (sig >= 32 && sig < SIGRTMIN))
		return REDIRECT_SIG_NOT_OURS;
	return REDIRECT_SIG_COUNTED;
}

/* The application's disposition per signal, valid for the signals of
 * redirect_sig_kind() once the table is ready. Read by the handler;
 * written with the signal blocked in the writing thread. */
static struct sigaction redirect_app_action[NSIG];
static bool redirect_sig_table_ready;
static bool redirect_sig_terminating_ours;

static bool redirect_sig_is_handler(const struct sigaction *a)
{
	if (a->sa_flags & SA_SIGINFO)
		return a->sa_sigaction != NULL;
	return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

static void redirect_sig_handler(int sig, siginfo_t *info, void *context)
{
	int saved = errno;
	if (sig <= 0 || sig >= NSIG)
		return;
	enum redirect_sig_kind kind = redirect_sig_kind(sig);
	struct sigaction app = redirect_app_action[sig];
	if (redirect_sig_is_handler(&app)) {
		if (os_sig_tls.defer_depth && sig <= 64) {
			/* This thread holds a lock of ours: the handler runs
			 * at the outermost unlock (os_signal_defer_end). */
			if (!os_sig_tls.info_sig && info) {
				os_sig_tls.info = *info;
				os_sig_tls.info_sig = sig;
			}
			__atomic_or_fetch(&os_sig_tls.deferred, (uint64_t)1 << (sig - 1), __ATOMIC_RELAXED);
			errno = saved;
			return;
		}
		/* Counted before the handler runs: it may longjmp away. */
		os_sig_tls.count.caught++;
		if (!(app.sa_flags & SA_RESTART))
			os_sig_tls.count.interrupting++;
		/* A call of ours going to sleep in the kernel past its last
		 * look at the counts: its sleep must end now. */
		os_signal_wake_sleep();
	}
	__typeof__(os_libc.sigaction) orig = OS_FN_RESOLVED(sigaction);
	bool dies = !(app.sa_flags & SA_SIGINFO) && app.sa_handler == SIG_DFL;
	if (kind == REDIRECT_SIG_TERMINATING && (dies || (g_cfg.handle_sigintr && (sig == SIGINT || sig == SIGTERM)))) {
		vlog_debug("signal %d: running libvma's cleanup, then the application's action", sig);
		vma_run_sigint_cleanup();
	}
	if (app.sa_flags & SA_RESETHAND) {
		/* One-shot handler: the kernel kept ours (we never pass it
		 * SA_RESETHAND), so the reset is done here. */
		redirect_app_action[sig].sa_handler = SIG_DFL;
		redirect_app_action[sig].sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
		if (kind == REDIRECT_SIG_COUNTED && orig) {
			struct sigaction dfl;
			memset(&dfl, 0, sizeof(dfl));
			dfl.sa_handler = SIG_DFL;
			orig(sig, &dfl, NULL);
		}
	}
	errno = saved;
	if (app.sa_flags & SA_SIGINFO) {
		app.sa_sigaction(sig, info, context);
	} else if (app.sa_handler == SIG_DFL) {
		/* Only a terminating signal gets here: its default action ends
		 * the process. Restore it and re-raise; the signal stays pending
		 * until we return (it is blocked during its handler), then ends
		 * the process with the status the plain signal would give. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		if (orig)
			orig(sig, &dfl, NULL);
		raise(sig);
	} else if (app.sa_handler != SIG_IGN) {
		app.sa_handler(sig);
	}
}

/* Puts the kernel's disposition of a signal in line with the
 * application's: SIG_IGN, and SIG_DFL of a counted signal, are given to the
 * kernel as is (a ^C must then do nothing, not tear libvma down); anything
 * else gets our handler with the application's mask and flags, so blocking
 * and SA_RESTART behave as asked. */
static int redirect_sig_apply(int sig)
{
	__typeof__(os_libc.sigaction) orig = OS_FN_RESOLVED(sigaction);
	if (!orig)
		return redirect_enosys();
	const struct sigaction *app = &redirect_app_action[sig];
	bool app_default = !(app->sa_flags & SA_SIGINFO) && app->sa_handler == SIG_DFL;
	if (!redirect_sig_is_handler(app) && !(app_default && redirect_sig_kind(sig) == REDIRECT_SIG_TERMINATING))
		return orig(sig, app, NULL);
	struct sigaction ours = *app;
	ours.sa_sigaction = redirect_sig_handler;
	ours.sa_flags = (app->sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
	/* Behind a default action the process ends anyway: restartable, so a
	 * blocking call never sees EINTR from a signal the application does
	 * not handle. */
	if (app_default)
		ours.sa_flags |= SA_RESTART;
	return orig(sig, &ours, NULL);
}

void redirect_signal_init(void)
{
	os_libc_ensure();
	__typeof__(os_libc.sigaction) orig = OS_FN_RESOLVED(sigaction);
	if (!orig)
		return;
	for (int sig = 1; sig < NSIG; sig++)
		if (redirect_sig_kind(sig) != REDIRECT_SIG_NOT_OURS && orig(sig, NULL, &redirect_app_action[sig]) != 0)
			memset(&redirect_app_action[sig], 0, sizeof(redirect_app_action[sig]));
	const size_t nterm = sizeof(redirect_terminating_signals) / sizeof(redirect_terminating_signals[0]);
	bool terminating_ok = true;
	for (size_t i = 0; i < nterm && terminating_ok; i++) {
		int sig = redirect_terminating_signals[i];
		if (redirect_sig_apply(sig) != 0) {
			vlog_warn("cannot install libvma's handler of signal %d (%s): a signal that kills the "
				  "process will not close offloaded TCP connections toward their peers", sig,
				  strerror(errno));
			/* All or nothing: put back what was installed already. */
			for (size_t j = 0; j < i; j++)
				orig(redirect_terminating_signals[j], &redirect_app_action[redirect_terminating_signals[j]],
				     NULL);
			terminating_ok = false;
		}
	}
	/* Handlers installed before libvma started (a constructor of the
	 * application's) get ours in front too. */
	for (int sig = 1; sig < NSIG; sig++)
		if (redirect_sig_kind(sig) == REDIRECT_SIG_COUNTED && redirect_sig_is_handler(&redirect_app_action[sig]))
			redirect_sig_apply(sig);
	__atomic_store_n(&redirect_sig_terminating_ours, terminating_ok, __ATOMIC_RELEASE);
	__atomic_store_n(&redirect_sig_table_ready, true, __ATOMIC_RELEASE);
	vlog_debug("application signal handlers run behind libvma's (blocking calls see them)%s%s",
		   terminating_ok ? "; terminating signals clean up before a default action" : "",
		   g_cfg.handle_sigintr ? "; SIGINT/SIGTERM always, VMA_HANDLE_SIGINTR=1" : "");
}

/* Swaps the application's action of a managed signal while ours stays
 * installed. */
static int redirect_sig_swap(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	sigset_t block, saved_mask;
	sigemptyset(&block);
	sigaddset(&block, sig);
	pthread_sigmask(SIG_BLOCK, &block, &saved_mask);
	struct sigaction previous = redirect_app_action[sig];
	int ret = 0;
	if (act) {
		redirect_app_action[sig] = *act;
		ret = redirect_sig_apply(sig);
		if (ret != 0)
			redirect_app_action[sig] = previous;
	}
	pthread_sigmask(SIG_SETMASK, &saved_mask, NULL);
	if (ret == 0 && oldact)
		*oldact = previous;
	return ret;
}

/* Whether libvma stands in front of sig's handlers. */
static bool redirect_sig_ours(int sig)
{
	enum redirect_sig_kind kind = redirect_sig_kind(sig);
	if (kind == REDIRECT_SIG_NOT_OURS || !vma_init_once() ||
	    !__atomic_load_n(&redirect_sig_table_ready, __ATOMIC_ACQUIRE))
		return false;
	return kind == REDIRECT_SIG_COUNTED || __atomic_load_n(&redirect_sig_terminating_ours, __ATOMIC_ACQUIRE);
}

REDIRECT_EXPORT int sigaction(int sig, const struct sigaction *__restrict act, struct sigaction *__restrict oldact)
{
	os_libc_ensure();
	if (redirect_sig_ours(sig))
		return redirect_sig_swap(sig, act, oldact);
	REDIRECT_PASS(sigaction, sig, act, oldact);
}

REDIRECT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
	os_libc_ensure();
	if (redirect_sig_ours(sig)) {
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
		if (redirect_sig_swap(sig, &act, &old) != 0)
			return SIG_ERR;
		/* sa_handler and sa_sigaction share storage: this is the old
		 * handler whichever way it was installed. */
		return old.sa_handler;
	}
	__typeof__(os_libc.signal) orig = OS_FN_RESOLVED(signal);
	if (!orig) {
		errno = ENOSYS;
		return SIG_ERR;
	}
	return orig(sig, handler);
}
