/* VMA_HANDLE_SIGSEGV: a backtrace in the log when the process faults, then
 * the default action (core dump, "Segmentation fault" exit status), so a
 * crash inside libvma or the application leaves a trace without a debugger. */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <string.h>

#include "log/vlog.h"
#include "os/os.h"

#define VLOG_SEGV_FRAMES 64

/* Past our own interposed sigaction: the application's view of its signal
 * dispositions is not ours to change. */
static int vlog_segv_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return OS_CALL(sigaction, sig, act, old);
}

static void vlog_segv_handler(int sig, siginfo_t *info, void *context)
{
	(void)context;
	void *frames[VLOG_SEGV_FRAMES];
	vlog_print(VLOG_ERROR, "signal %d (%s) at address %p; backtrace:", sig, sig == SIGSEGV ? "SIGSEGV" : "?",
		   info ? info->si_addr : NULL);
	int n = backtrace(frames, VLOG_SEGV_FRAMES);
	backtrace_symbols_fd(frames, n, vlog_sink());
	/* The default action from here on. A fault re-faults as soon as we
	 * return; a SIGSEGV sent with kill() would not, so it is raised again
	 * (blocked during this handler, it is delivered when we return). */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	vlog_segv_sigaction(sig, &dfl, NULL);
	raise(sig);
}

int vlog_segv_install(void)
{
	/* The first backtrace() may load the unwinder (dlopen, malloc), which
	 * must not happen for the first time inside a signal handler. */
	void *prime[2];
	backtrace(prime, 2);

	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = vlog_segv_handler;
	/* SA_ONSTACK: a thread that has an alternate signal stack (the only way
	 * to report a stack overflow) uses it. */
	act.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&act.sa_mask);
	if (vlog_segv_sigaction(SIGSEGV, &act, NULL) != 0) {
		vlog_warn("VMA_HANDLE_SIGSEGV: cannot install the SIGSEGV handler (%s)", strerror(errno));
		return -1;
	}
	return 0;
}
