#include <errno.h>
#include <stdlib.h>
#include <netinet/in.h>
#include "log/vlog.h"
#include "os/os.h"
#include "sock/sock_passthrough.h"

#define SOCK_TYPE_MASK 0xf   /* the type without SOCK_NONBLOCK/SOCK_CLOEXEC */

/* Calls the libc original on obj->fd; ENOSYS when this libc lacks it. */
#define PASS(name, ...) return OS_CALL(name, obj->fd, __VA_ARGS__)

/* Whether an IPv6 socket address is loopback (::1 or ::ffff:127.x.y.z):
 * loopback traffic is the kernel's with AF_INET too, nothing to say. */
static bool pass_ipv6_loopback(const struct sockaddr *a, socklen_t l)
{
	if (!a || l < sizeof(struct sockaddr_in6) || a->sa_family != AF_INET6)
		return false;
	const struct in6_addr *ip = &((const struct sockaddr_in6 *)a)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
}

/* An IPv6 socket starts carrying traffic (a listen, a connect, a UDP
 * bind): it stays with the kernel, IPv4 through a dual-stack socket too,
 * which a user running `iperf3 -s` (it listens on [::]) would not guess.
 * One warning per process saying what to do; the next ones at debug. */
static void pass_note_ipv6(const struct sock_obj *obj, const char *call, const struct sockaddr *a, socklen_t l)
{
	struct sockaddr_in6 bound;
	if (obj->domain != AF_INET6)
		return;
	if (!a) {
		/* listen: the address it was bound to, if any */
		socklen_t bl = sizeof(bound);
		if (OS_CALL(getsockname, obj->fd, (struct sockaddr *)&bound, &bl) == 0) {
			a = (const struct sockaddr *)&bound;
			l = bl;
		}
	}
	if (pass_ipv6_loopback(a, l))
		return;
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		vlog_warn("fd %d: %s() on an IPv6 socket (AF_INET6): not offloaded, its traffic goes through the "
			  "kernel (IPv6 offload is not supported; IPv4 through a dual-stack [::] socket neither). To "
			  "accelerate IPv4, use an AF_INET socket: e.g. bind the server to an IPv4 address (iperf3 -s -B "
			  "ADDR). Later IPv6 sockets are logged at debug level", obj->fd, call);
	else
		vlog_debug("fd %d: %s() on an IPv6 socket (AF_INET6): not offloaded", obj->fd, call);
}

static int pass_bind(struct sock_obj *obj, const struct sockaddr *a, socklen_t l)
{
	if (obj->type == SOCK_DGRAM)
		pass_note_ipv6(obj, "bind", a, l);
	PASS(bind, a, l);
}
static int pass_connect(struct sock_obj *obj, const struct sockaddr *a, socklen_t l)
{
	pass_note_ipv6(obj, "connect", a, l);
	PASS(connect, a, l);
}
static int pass_listen(struct sock_obj *obj, int backlog)
{
	pass_note_ipv6(obj, "listen", NULL, 0);
	PASS(listen, backlog);
}
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
