/* The socket call family, converted once: read, readv, recv and recvfrom
 * reach a kind as its recvmsg op, write, writev, send and sendto as its
 * sendmsg op, recvmmsg and sendmmsg as Linux's own loops over them
 * (net/socket.c). The interposer (redirect/redirect_io.c) is the caller;
 * libvma's own callers (the Extra API, splice) use the same functions.
 *
 * SOCK_OP_KERNEL from any of them: the kind declined, errno untouched; the
 * caller makes the same call to libc (SOCK_CALL_OR_KERNEL). Each function
 * is what the kernel does for that call before its protocol sees it: read
 * and readv of nothing return 0 at once (sock_read_iter), a bad iovec
 * count is EINVAL, recvfrom copies the peer's address length back. */
#ifndef VMA_SOCK_SOCK_CALL_H
#define VMA_SOCK_SOCK_CALL_H

#include <errno.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "sock/sock_obj.h"

/* `call` (a sock_call_* expression), or `kernel` (the same call to libc)
 * when the kind declined it. */
#define SOCK_CALL_OR_KERNEL(call, kernel) \
	({ \
		__auto_type sock_call_r_ = (call); \
		__builtin_expect(sock_call_r_ != SOCK_OP_KERNEL, 1) ? sock_call_r_ : (kernel); \
	})

/* recv, recvfrom (from and fromlen NULL for recv). */
static inline ssize_t sock_call_recvfrom(struct sock_obj *obj, void *buf, size_t len, int flags,
					 struct sockaddr *from, socklen_t *fromlen)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (from && fromlen) {
		msg.msg_name = from;
		msg.msg_namelen = *fromlen;
	}
	ssize_t r = obj->ops->recvmsg(obj, &msg, flags);
	if (r >= 0 && msg.msg_name)
		*fromlen = msg.msg_namelen;
	return r;
}

/* read: recv without flags, except that reading nothing returns 0 without
 * looking at the socket (a datagram stays queued). */
static inline ssize_t sock_call_read(struct sock_obj *obj, void *buf, size_t len)
{
	if (__builtin_expect(len == 0, 0))
		return 0;
	return sock_call_recvfrom(obj, buf, len, 0, NULL, NULL);
}

static inline int sock_call_iovcnt_bad(int iovcnt)
{
	if (__builtin_expect(iovcnt < 0 || iovcnt > IOV_MAX, 0)) {
		errno = EINVAL;
		return 1;
	}
	return 0;
}

static inline ssize_t sock_call_readv(struct sock_obj *obj, const struct iovec *iov, int iovcnt)
{
	if (sock_call_iovcnt_bad(iovcnt))
		return -1;
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (total == 0)
		return 0;
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	return obj->ops->recvmsg(obj, &msg, 0);
}

/* send, sendto (to NULL for send), write (flags 0). */
static inline ssize_t sock_call_sendto(struct sock_obj *obj, const void *buf, size_t len, int flags,
				       const struct sockaddr *to, socklen_t tolen)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_name = (void *)to, .msg_namelen = to ? tolen : 0, .msg_iov = &iov,
			      .msg_iovlen = 1 };
	return obj->ops->sendmsg(obj, &msg, flags);
}

static inline ssize_t sock_call_writev(struct sock_obj *obj, const struct iovec *iov, int iovcnt)
{
	if (sock_call_iovcnt_bad(iovcnt))
		return -1;
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	return obj->ops->sendmsg(obj, &msg, 0);
}

/* recvmmsg as Linux's do_recvmmsg, for every kind: one recvmsg per
 * message; MSG_WAITFORONE makes the ones after the first non-blocking; the
 * timeout is checked after each message (it never bounds the wait for
 * one: Linux's documented behaviour) and what is left of it written back
 * when a message was received; an invalid one is EINVAL. Declined when the
 * kind declines the first message (the kernel then serves the whole call). */
int sock_call_recvmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags,
		       struct timespec *timeout);

/* sendmmsg: the kind's own, or one sendmsg per message as Linux's loop (at
 * most UIO_MAXIOV messages, a short send ends the batch). */
int sock_call_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags);

#endif
