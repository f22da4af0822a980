/* select/poll/epoll over any mix of offloaded and kernel fds (docs/iomux.md).
 *
 * redirect/ calls in here only when a call involves an offloaded fd (its
 * object has ops->poll_ready) or an epoll fd of ours; everything else goes
 * straight to libc. Results, counts and errno are what Linux would give. */
#ifndef VMA_IOMUX_IOMUX_H
#define VMA_IOMUX_IOMUX_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include "sock/sock_fd_table.h"

extern const struct sock_ops iomux_epoll_ops;

/* True when fd's object answers readiness in user space. */
static inline bool iomux_obj_offloaded(const struct sock_obj *obj)
{
	return obj && obj->ops->poll_ready;
}

/* Our epoll object registered under epfd, or NULL. */
static inline struct sock_obj *iomux_epoll_lookup(int epfd)
{
	struct sock_obj *obj = sock_fd_get(epfd);
	return obj && obj->ops == &iomux_epoll_ops ? obj : (struct sock_obj *)0;
}

/* Registers our state under a kernel epoll fd just created by the
 * application's epoll_create*(). Returns 0, or -1 (no memory, fd out of the
 * table): the fd then stays a plain kernel epoll fd. */
int iomux_epoll_create(int kernel_epfd);
/* epoll_ctl on our epfd; same errno as Linux (the kernel is asked first). */
int iomux_epoll_ctl(struct sock_obj *ep, int op, int fd, struct epoll_event *event);
/* epoll_wait/epoll_pwait (mask may be NULL); timeout_ms < 0 = forever. */
int iomux_epoll_wait(struct sock_obj *ep, struct epoll_event *events, int maxevents, int timeout_ms,
		     const sigset_t *mask);
/* The epoll fd is watched by someone else (another epoll set, poll,
 * select): its kernel fd must turn readable when our ready list fills. */
void iomux_epoll_mark_exposed(struct sock_obj *ep);

/* Whether poll()/select() over these fds needs us (some fd offloaded).
 * Also marks any epoll fd of ours among them as exposed. */
bool iomux_poll_wanted(const struct pollfd *fds, nfds_t nfds);
bool iomux_select_wanted(int nfds, const fd_set *r, const fd_set *w, const fd_set *e);
/* ppoll semantics; timeout NULL = forever; mask NULL = unchanged. */
int iomux_poll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout, const sigset_t *mask);
/* pselect semantics; timeout NULL = forever. When remaining is not NULL
 * the time left is stored there on return (what select() does to its
 * timeval). */
int iomux_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		 const sigset_t *mask, struct timespec *remaining);

/* obj's ops just started answering readiness (a TCP socket offloaded at
 * connect or listen): epoll sets that hold its fd as a kernel fd watch it
 * in user space from now on, as if it had been added offloaded. */
void iomux_promote(struct sock_obj *obj);

/* An offloaded kind calls this from its release op: the fd leaves every
 * epoll set it was in (Linux drops a closed fd from its sets). */
void iomux_forget(struct sock_obj *obj);

#endif
