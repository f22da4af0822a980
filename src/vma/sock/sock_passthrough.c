#include <errno.h>
#include <stdlib.h>
#include "os/os.h"
#include "sock/sock_passthrough.h"

#define SOCK_TYPE_MASK 0xf   /* the type without SOCK_NONBLOCK/SOCK_CLOEXEC */

/* Calls the libc original on obj->fd; ENOSYS when this libc lacks it. */
#define PASS(name, ...) return OS_CALL(name, obj->fd, __VA_ARGS__)

static int pass_bind(struct sock_obj *obj, const struct sockaddr *a, socklen_t l) { PASS(bind, a, l); }
static int pass_connect(struct sock_obj *obj, const struct sockaddr *a, socklen_t l) { PASS(connect, a, l); }
static int pass_listen(struct sock_obj *obj, int backlog) { PASS(listen, backlog); }
static int pass_accept4(struct sock_obj *obj, struct sockaddr *a, socklen_t *l, int flags)
{
	PASS(accept4, a, l, flags);
}
static int pass_shutdown(struct sock_obj *obj, int how) { PASS(shutdown, how); }
static int pass_getsockname(struct sock_obj *obj, struct sockaddr *a, socklen_t *l) { PASS(getsockname, a, l); }
static int pass_getpeername(struct sock_obj *obj, struct sockaddr *a, socklen_t *l) { PASS(getpeername, a, l); }
static int pass_setsockopt(struct sock_obj *obj, int level, int name, const void *val, socklen_t len)
{
	PASS(setsockopt, level, name, val, len);
}
static int pass_getsockopt(struct sock_obj *obj, int level, int name, void *val, socklen_t *len)
{
	PASS(getsockopt, level, name, val, len);
}
static int pass_fcntl(struct sock_obj *obj, int cmd, void *arg) { PASS(fcntl, cmd, arg); }
static int pass_ioctl(struct sock_obj *obj, unsigned long req, void *arg) { PASS(ioctl, req, arg); }

static ssize_t pass_read(struct sock_obj *obj, void *buf, size_t len) { PASS(read, buf, len); }
static ssize_t pass_readv(struct sock_obj *obj, const struct iovec *iov, int n) { PASS(readv, iov, n); }
static ssize_t pass_recv(struct sock_obj *obj, void *buf, size_t len, int flags) { PASS(recv, buf, len, flags); }
static ssize_t pass_recvfrom(struct sock_obj *obj, void *buf, size_t len, int flags, struct sockaddr *from,
			     socklen_t *fromlen)
{
	PASS(recvfrom, buf, len, flags, from, fromlen);
}
static ssize_t pass_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags) { PASS(recvmsg, msg, flags); }
static int pass_recvmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags,
			 struct timespec *timeout)
{
	PASS(recvmmsg, vec, vlen, flags, timeout);
}

static ssize_t pass_write(struct sock_obj *obj, const void *buf, size_t len) { PASS(write, buf, len); }
static ssize_t pass_writev(struct sock_obj *obj, const struct iovec *iov, int n) { PASS(writev, iov, n); }
static ssize_t pass_send(struct sock_obj *obj, const void *buf, size_t len, int flags) { PASS(send, buf, len, flags); }
static ssize_t pass_sendto(struct sock_obj *obj, const void *buf, size_t len, int flags, const struct sockaddr *to,
			   socklen_t tolen)
{
	PASS(sendto, buf, len, flags, to, tolen);
}
static ssize_t pass_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags) { PASS(sendmsg, msg, flags); }
static int pass_sendmmsg(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	PASS(sendmmsg, vec, vlen, flags);
}
static ssize_t pass_sendfile(struct sock_obj *obj, int in_fd, off_t *off, size_t count)
{
	PASS(sendfile, in_fd, off, count);
}
static ssize_t pass_sendfile64(struct sock_obj *obj, int in_fd, off64_t *off, size_t count)
{
	PASS(sendfile64, in_fd, off, count);
}

static void pass_destroy(struct sock_obj *obj) { free(obj); }

/* close and release stay NULL: the wrapper closes the kernel fd and there is
 * no user-space state to drop. */
const struct sock_ops sock_passthrough_ops = {
	.kind = "passthrough",
	.bind = pass_bind,
	.connect = pass_connect,
	.listen = pass_listen,
	.accept4 = pass_accept4,
	.shutdown = pass_shutdown,
	.getsockname = pass_getsockname,
	.getpeername = pass_getpeername,
	.setsockopt = pass_setsockopt,
	.getsockopt = pass_getsockopt,
	.fcntl = pass_fcntl,
	.ioctl = pass_ioctl,
	.read = pass_read,
	.readv = pass_readv,
	.recv = pass_recv,
	.recvfrom = pass_recvfrom,
	.recvmsg = pass_recvmsg,
	.recvmmsg = pass_recvmmsg,
	.write = pass_write,
	.writev = pass_writev,
	.send = pass_send,
	.sendto = pass_sendto,
	.sendmsg = pass_sendmsg,
	.sendmmsg = pass_sendmmsg,
	.sendfile = pass_sendfile,
	.sendfile64 = pass_sendfile64,
	.destroy = pass_destroy,
};

bool sock_passthrough_wanted(int domain, int type)
{
	int base = type & SOCK_TYPE_MASK;
	return (domain == AF_INET || domain == AF_INET6) && (base == SOCK_STREAM || base == SOCK_DGRAM);
}

struct sock_obj *sock_passthrough_new(int fd, int domain, int type, int protocol)
{
	struct sock_obj *obj = calloc(1, sizeof(*obj));
	if (!obj)
		return NULL;
	obj->ops = &sock_passthrough_ops;
	obj->fd = fd;
	obj->domain = domain;
	obj->type = type & SOCK_TYPE_MASK;
	obj->protocol = protocol;
	return obj;
}
