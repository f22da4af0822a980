/* What a blocking call of ours needs to know about signals
 * (redirect_signal.c); included by the modules that block (sock/, iomux/). */
#ifndef VMA_REDIRECT_REDIRECT_SIGNAL_H
#define VMA_REDIRECT_REDIRECT_SIGNAL_H

#include <errno.h>
#include <stdbool.h>

/* libvma puts its own handler in front of every handler the application
 * installs, so that (1) a signal that kills the process first closes the
 * offloaded connections (VMA_HANDLE_SIGINTR) and (2) a blocking call that
 * polls in user space learns that a handler ran in its thread: Linux
 * interrupts a blocked call with EINTR there, or restarts it (SA_RESTART). */
void redirect_signal_init(void);

/* Handlers of the application this thread ran: all, and those without
 * SA_RESTART. Written only by the thread itself (in its handlers). */
struct redirect_sig_mark {
	unsigned caught;
	unsigned interrupting;
};
extern __thread struct redirect_sig_mark redirect_sig_count __attribute__((tls_model("initial-exec")));

static inline struct redirect_sig_mark redirect_signal_mark(void)
{
	return *(volatile struct redirect_sig_mark *)&redirect_sig_count;
}

/* Whether a handler ran in this thread since mark was taken. */
static inline bool redirect_signal_caught_since(const struct redirect_sig_mark *mark)
{
	return ((volatile struct redirect_sig_mark *)&redirect_sig_count)->caught != mark->caught;
}

/* What a blocking call does when a handler ran in its thread since *mark,
 * as Linux decides it (signal(7)): returns true with errno EINTR when the
 * call must fail (a handler without SA_RESTART, or a call Linux never
 * restarts: restartable false for epoll_wait, poll, select, a call with a
 * timeout, or one that already moved data); otherwise the call goes on and
 * *mark moves to now. One branch when no handler ran. */
bool redirect_signal_interrupts_slow(struct redirect_sig_mark *mark, bool restartable);
static inline bool redirect_signal_interrupts(struct redirect_sig_mark *mark, bool restartable)
{
	if (__builtin_expect(!redirect_signal_caught_since(mark), 1))
		return false;
	return redirect_signal_interrupts_slow(mark, restartable);
}

#endif
