/* Data calls: the hot path. A socket object gets each as its recvmsg or
 * sendmsg op through the one conversion of sock/sock_call.h (flag, table
 * load, conversion, op); anything else, or a call the kind declines, is the
 * application's own call to libc. splice has two descriptors; the sends
 * test the Extra API's dummy flag. */
#undef _FORTIFY_SOURCE
#include "redirect/redirect.h"
#include "extra/extra.h"

/* VMA_SND_FLAGS_DUMMY (MSG_SYN) on an fd that is no offloaded socket: the
 * kernel ignores the flag and would send the bytes for real, so -1 with
 * EINVAL, as libvma answers (docs/extra_api.md). One flag test per send. */
#define REDIRECT_DUMMY_CHECK(fd, flags) \
	do { \
		if (__builtin_expect((flags) & VMA_SND_FLAGS_DUMMY, 0) && !extra_dummy_fd_ok(sock_fd_get(fd))) { \
			errno = EINVAL; \
			return -1; \
		} \
	} while (0)

REDIRECT_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	REDIRECT_SOCK_CALL(recvmsg, read, fd, sock_call_read(obj_, buf, len), buf, len);
}

REDIRECT_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	REDIRECT_SOCK_CALL(recvmsg, readv, fd, sock_call_readv(obj_, iov, iovcnt), iov, iovcnt);
}

REDIRECT_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	REDIRECT_SOCK_CALL(recvmsg, recv, fd, sock_call_recvfrom(obj_, buf, len, flags, NULL, NULL), buf, len, flags);
}

REDIRECT_EXPORT ssize_t recvfrom(int fd, void *__restrict buf, size_t len, int flags, __SOCKADDR_ARG from,
				 socklen_t *__restrict fromlen)
{
	REDIRECT_SOCK_CALL(recvmsg, recvfrom, fd, sock_call_recvfrom(obj_, buf, len, flags, from.__sockaddr__, fromlen),
			   buf, len, flags, from, fromlen);
}

REDIRECT_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	REDIRECT_SOCK_CALL(recvmsg, recvmsg, fd, obj_->ops->recvmsg(obj_, msg, flags), msg, flags);
}

REDIRECT_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout)
{
	REDIRECT_SOCK_CALL(recvmsg, recvmmsg, fd, sock_call_recvmmsg(obj_, vec, vlen, flags, timeout), vec, vlen,
			   flags, timeout);
}

REDIRECT_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	REDIRECT_SOCK_CALL(sendmsg, write, fd, sock_call_sendto(obj_, buf, len, 0, NULL, 0), buf, len);
}

REDIRECT_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	REDIRECT_SOCK_CALL(sendmsg, writev, fd, sock_call_writev(obj_, iov, iovcnt), iov, iovcnt);
}

REDIRECT_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	REDIRECT_DUMMY_CHECK(fd, flags);
	REDIRECT_SOCK_CALL(sendmsg, send, fd, sock_call_sendto(obj_, buf, len, flags, NULL, 0), buf, len, flags);
}

REDIRECT_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, __CONST_SOCKADDR_ARG to,
			       socklen_t tolen)
{
	REDIRECT_DUMMY_CHECK(fd, flags);
	REDIRECT_SOCK_CALL(sendmsg, sendto, fd, sock_call_sendto(obj_, buf, len, flags, to.__sockaddr__, tolen), buf,
			   len, flags, to, tolen);
}

REDIRECT_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	REDIRECT_DUMMY_CHECK(fd, flags);
	REDIRECT_SOCK_CALL(sendmsg, sendmsg, fd, obj_->ops->sendmsg(obj_, msg, flags), msg, flags);
}

REDIRECT_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	REDIRECT_DUMMY_CHECK(fd, flags);
	REDIRECT_SOCK_CALL(sendmsg, sendmmsg, fd, sock_call_sendmmsg(obj_, vec, vlen, flags), vec, vlen, flags);
}

REDIRECT_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	REDIRECT_FD_CALL(sendfile, out_fd, in_fd, offset, count);
}

REDIRECT_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	REDIRECT_FD_CALL(sendfile64, out_fd, in_fd, offset, count);
}

/* splice: either end may be our socket (the other must be a pipe), so the
 * object of fd_in is asked first, then fd_out's. tee() and vmsplice() take
 * pipes only and stay the kernel's: on a socket fd they fail there exactly
 * as without libvma. */
REDIRECT_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags)
{
	os_libc_ensure();
	struct sock_obj *obj = sock_fd_get(fd_in);
	if (!obj || !obj->ops->splice)
		obj = sock_fd_get(fd_out);
	if (obj && obj->ops->splice) {
		sock_obj_call_begin(obj);   /* it may wait in poll(): a cancellation point */
		ssize_t ret = obj->ops->splice(obj, fd_in, off_in, fd_out, off_out, len, flags);
		sock_obj_call_end(obj);
		return ret;
	}
	REDIRECT_PASS(splice, fd_in, off_in, fd_out, off_out, len, flags);
}

/* The fortified variants: a program built with _FORTIFY_SOURCE calls only
 * these. For our objects the fortify check is done here, exactly as glibc
 * does it, before the op; everything else goes to glibc's own _chk symbol,
 * which checks and calls the kernel. */

REDIRECT_EXPORT ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen)
{
	REDIRECT_OBJ_CALL(recvmsg, __read_chk, fd, 1, nbytes <= buflen, sock_call_read(obj_, buf, nbytes), buf,
			  nbytes, buflen);
}

REDIRECT_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	REDIRECT_OBJ_CALL(recvmsg, __recv_chk, fd, 1, n <= buflen, sock_call_recvfrom(obj_, buf, n, flags, NULL, NULL),
			  buf, n, buflen, flags);
}

REDIRECT_EXPORT ssize_t __recvfrom_chk(int fd, void *__restrict buf, size_t n, size_t buflen, int flags,
				       __SOCKADDR_ARG addr, socklen_t *__restrict addr_len)
{
	REDIRECT_OBJ_CALL(recvmsg, __recvfrom_chk, fd, 1, n <= buflen,
			  sock_call_recvfrom(obj_, buf, n, flags, addr.__sockaddr__, addr_len), buf, n, buflen, flags,
			  addr, addr_len);
}
