/* The per-thread counts of application signal handlers that libvma's
 * handler (redirect_signal.c, libvma.so only) writes and the blocking calls
 * of sock/ and iomux/ read. In the core library, so those modules and their
 * unit tests link without the interposed symbols (where nothing counts, the
 * counts stay 0 and no call is ever interrupted by them). */
#include "redirect/redirect_signal.h"

__thread struct redirect_sig_mark redirect_sig_count __attribute__((tls_model("initial-exec")));

bool redirect_signal_interrupts_slow(struct redirect_sig_mark *mark, bool restartable)
{
	struct redirect_sig_mark now = redirect_signal_mark();
	if (!restartable || now.interrupting != mark->interrupting) {
		errno = EINTR;
		return true;
	}
	*mark = now;
	return false;
}
