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

static void pass_destroy(struct sock_obj *obj) { free(obj); }

/* The data ops stay NULL: every read, write, send and receive goes to the
 * kernel as the application made it, with nothing of ours in between. close
 * and release stay NULL too: the wrapper closes the kernel fd and there is
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
