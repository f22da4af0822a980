/* The per-thread signal state of os_signal.h: the re-delivery of held-back
 * handlers and the EINTR decision of a blocking call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/syscall.h>
#include <unistd.h>
#include "os/os_signal.h"

__thread struct os_sig_thread os_sig_tls __attribute__((tls_model("initial-exec")));

void os_signal_run_deferred(void)
{
	/* One instruction: a handler that interrupts us sets its bit either
	 * before (taken here) or after (seen by its own depth-0 check, as
	 * depth is 0 now, so it runs at once and never sets it). */
	uint64_t pending = __atomic_exchange_n(&os_sig_tls.deferred, 0, __ATOMIC_RELAXED);
	pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
	for (int sig = 1; sig <= 64 && pending; sig++) {
		uint64_t bit = (uint64_t)1 << (sig - 1);
		if (!(pending & bit))
			continue;
		pending &= ~bit;
		/* Sent to this thread again: the kernel runs it before this
		 * syscall returns, now that no lock of ours is held. */
		if (os_sig_tls.info_sig == sig) {
			siginfo_t info = os_sig_tls.info;
			os_sig_tls.info_sig = 0;
			if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &info) == 0)
				continue;
		}
		syscall(SYS_tgkill, pid, tid, sig);
	}
}

void os_signal_wake_sleep(void)
{
	int fd = __atomic_load_n(&os_sig_tls.sleep_fd1, __ATOMIC_RELAXED) - 1;
	if (fd < 0)
		return;
	uint64_t one = 1;
	/* Raw: no interposed write, and errno is the handler's to keep. */
	(void)syscall(SYS_write, fd, &one, sizeof(one));
}

bool os_signal_interrupts_slow(struct os_sig_mark *mark, bool restartable)
{
	struct os_sig_mark now = os_signal_mark();
	if (!restartable || now.interrupting != mark->interrupting) {
		errno = EINTR;
		return true;
	}
	*mark = now;
	return false;
}
