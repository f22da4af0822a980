/* Calls that block the thread on no fd at all: a sleep, a condition
 * variable, a wait for a signal. libvma has nothing to do there but one
 * thing: sends this thread left held by the burst rule (docs/ring.md,
 * "Doorbells") leave before it blocks (sock_offload_flush_mine in
 * REDIRECT_PASS), so that a sender that ends a burst and then sleeps does
 * not leave its last datagrams waiting for the internal thread. */
#undef _FORTIFY_SOURCE
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "redirect/redirect.h"

REDIRECT_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
	REDIRECT_PASS(nanosleep, req, rem);
}

REDIRECT_EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem)
{
	REDIRECT_PASS(clock_nanosleep, clock, flags, req, rem);
}

REDIRECT_EXPORT int usleep(useconds_t usec)
{
	REDIRECT_PASS(usleep, usec);
}

REDIRECT_EXPORT unsigned int sleep(unsigned int seconds)
{
	REDIRECT_PASS(sleep, seconds);
}

REDIRECT_EXPORT int pause(void)
{
	REDIRECT_PASS(pause);
}

REDIRECT_EXPORT int sigsuspend(const sigset_t *mask)
{
	REDIRECT_PASS(sigsuspend, mask);
}

REDIRECT_EXPORT int sigwait(const sigset_t *__restrict set, int *__restrict sig)
{
	REDIRECT_PASS(sigwait, set, sig);
}

REDIRECT_EXPORT int sigwaitinfo(const sigset_t *__restrict set, siginfo_t *__restrict info)
{
	REDIRECT_PASS(sigwaitinfo, set, info);
}

REDIRECT_EXPORT int sigtimedwait(const sigset_t *__restrict set, siginfo_t *__restrict info,
				 const struct timespec *__restrict timeout)
{
	REDIRECT_PASS(sigtimedwait, set, info, timeout);
}

/* The current symbol versions (GLIBC_2.3.2 on x86-64): dlsym finds those,
 * and a binary of before 2003 that uses the old condition variables is
 * not one we run. */
REDIRECT_EXPORT int pthread_cond_wait(pthread_cond_t *__restrict cond, pthread_mutex_t *__restrict mutex)
{
	REDIRECT_PASS(pthread_cond_wait, cond, mutex);
}

REDIRECT_EXPORT int pthread_cond_timedwait(pthread_cond_t *__restrict cond, pthread_mutex_t *__restrict mutex,
					   const struct timespec *__restrict abstime)
{
	REDIRECT_PASS(pthread_cond_timedwait, cond, mutex, abstime);
}

#if OS_HAVE_COND_CLOCKWAIT
REDIRECT_EXPORT int pthread_cond_clockwait(pthread_cond_t *__restrict cond, pthread_mutex_t *__restrict mutex,
					   clockid_t clock, const struct timespec *__restrict abstime)
{
	REDIRECT_PASS(pthread_cond_clockwait, cond, mutex, clock, abstime);
}
#endif
