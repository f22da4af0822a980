/* recvmmsg and sendmmsg over a kind's recvmsg and sendmsg (sock_call.h). */
#include <errno.h>
#include <limits.h>
#include <time.h>

#include "os/os.h"
#include "sock/sock_call.h"

#define SOCK_CALL_NS 1000000000L

static struct timespec sock_call_now(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);   /* vDSO: no syscall */
	return now;
}

/* a - b, or {0, 0} when b is not before a. */
static struct timespec sock_call_left(struct timespec a, struct timespec b)
{
	struct timespec d = { a.tv_sec - b.tv_sec, a.tv_nsec - b.tv_nsec };
	if (d.tv_nsec < 0) {
		d.tv_sec--;
		d.tv_nsec += SOCK_CALL_NS;
	}
	if (d.tv_sec < 0)
		d.tv_sec = d.tv_nsec = 0;
	return d;
}

int sock_call_recvmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags,
		       struct timespec *timeout)
{
	struct timespec end = { 0, 0 }, left = { 0, 0 };
	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= SOCK_CALL_NS) {
			errno = EINVAL;
			return -1;
		}
		end = sock_call_now();
		end.tv_sec += timeout->tv_sec;
		end.tv_nsec += timeout->tv_nsec;
		if (end.tv_nsec >= SOCK_CALL_NS) {
			end.tv_sec++;
			end.tv_nsec -= SOCK_CALL_NS;
		}
	}
	int f = flags & ~MSG_WAITFORONE;
	unsigned int got = 0;
	while (got < vlen) {
		ssize_t r = obj->ops->recvmsg(obj, &vec[got].msg_hdr, f);
		if (r == SOCK_OP_KERNEL) {
			if (got == 0)
				return SOCK_OP_KERNEL;
			r = OS_CALL(recvmsg, obj->fd, &vec[got].msg_hdr, f);   /* the kind left for the kernel meanwhile */
		}
		if (r < 0)
			break;
		vec[got].msg_len = (unsigned int)r;
		bool oob = (vec[got].msg_hdr.msg_flags & MSG_OOB) != 0;
		got++;
		if (flags & MSG_WAITFORONE)
			f |= MSG_DONTWAIT;
		if (timeout) {
			left = sock_call_left(end, sock_call_now());
			if (left.tv_sec == 0 && left.tv_nsec == 0)
				break;
		}
		if (oob)
			break;
	}
	if (got == 0)
		return vlen ? -1 : 0;
	if (timeout)
		*timeout = left;
	return (int)got;
}

/* Linux's UIO_MAXIOV: the most messages one sendmmsg sends. */
#define SOCK_CALL_MMSG_MAX IOV_MAX

int sock_call_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	if (obj->ops->sendmmsg)
		return obj->ops->sendmmsg(obj, vec, vlen, flags);
	if (vlen > SOCK_CALL_MMSG_MAX)
		vlen = SOCK_CALL_MMSG_MAX;
	unsigned int sent = 0;
	while (sent < vlen) {
		const struct msghdr *msg = &vec[sent].msg_hdr;
		ssize_t r = obj->ops->sendmsg(obj, msg, flags);
		if (r == SOCK_OP_KERNEL) {
			if (sent == 0)
				return SOCK_OP_KERNEL;
			r = OS_CALL(sendmsg, obj->fd, msg, flags);
		}
		if (r < 0)
			break;
		vec[sent++].msg_len = (unsigned int)r;
		size_t total = 0;
		for (size_t i = 0; i < msg->msg_iovlen; i++)
			total += msg->msg_iov[i].iov_len;
		if ((size_t)r < total)
			break;   /* a short send ends the batch, as in Linux */
	}
	if (sent == 0)
		return vlen ? -1 : 0;
	return (int)sent;
}
