/* Socket lifecycle and control calls. Socket-creating calls run the full
 * library init first; the rest only dispatch. */
#undef _FORTIFY_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "sock/sock_passthrough.h"
#include "sock/sock_tcp.h"
#include "sock/sock_udp.h"
#include "vma_main.h"
#include "config/cfg_params.h"
#include "extra/extra.h"
#include "extra/extra_api.h"
#include "mellanox/vma_extra.h"

static const char *redirect_domain_name(int domain)
{
	switch (domain) {
	case AF_INET: return "AF_INET";
	case AF_INET6: return "AF_INET6";
	case AF_UNIX: return "AF_UNIX";
	default: return "AF_?";
	}
}

static const char *redirect_type_name(int type)
{
	switch (type & 0xf) {
	case SOCK_STREAM: return "SOCK_STREAM";
	case SOCK_DGRAM: return "SOCK_DGRAM";
	case SOCK_RAW: return "SOCK_RAW";
	default: return "SOCK_?";
	}
}

void redirect_track_socket(int fd, int domain, int type, int protocol, const char *how)
{
	if (!sock_passthrough_wanted(domain, type)) {
		redirect_fd_fresh(fd);
		return;
	}
	/* Offloaded kinds first; NULL (no ring to be had) means passthrough. */
	struct sock_obj *obj = NULL;
	if (sock_udp_wanted(domain, type))
		obj = sock_udp_new(fd, domain, type, protocol);
	else if (sock_tcp_wanted(domain, type))
		obj = sock_tcp_new(fd, domain, type, protocol);
	if (!obj)
		obj = sock_passthrough_new(fd, domain, type, protocol);
	if (!obj || sock_fd_set(fd, obj) != 0) {
		/* Out of memory or fd beyond the table: the kernel serves it. */
		if (obj)
			obj->ops->destroy(obj);
		redirect_fd_fresh(fd);
		vlog_debug("fd %d: %s(%s, %s) not tracked", fd, how, redirect_domain_name(domain),
			   redirect_type_name(type));
		return;
	}
	vlog_debug("fd %d: %s(%s, %s) tracked as %s", fd, how, redirect_domain_name(domain),
		   redirect_type_name(type), obj->ops->kind);
	vma_engine_start();
}

REDIRECT_EXPORT int socket(int domain, int type, int protocol)
{
	bool ready = vma_init_once();
	os_libc_ensure();
	__typeof__(os_libc.socket) orig = OS_FN_RESOLVED(socket);
	if (!orig)
		return redirect_enosys();
	int fd = orig(domain, type, protocol);
	if (fd >= 0 && ready)
		redirect_track_socket(fd, domain, type, protocol, "socket");
	return fd;
}

REDIRECT_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	vma_init_once();
	os_libc_ensure();
	__typeof__(os_libc.socketpair) orig = OS_FN_RESOLVED(socketpair);
	if (!orig)
		return redirect_enosys();
	int ret = orig(domain, type, protocol, sv);
	if (ret == 0) {
		/* Socket pairs are AF_UNIX (or fail): never offloaded. */
		redirect_fd_fresh(sv[0]);
		redirect_fd_fresh(sv[1]);
	}
	return ret;
}

/* accept and accept4 share this: a connection accepted on a tracked
 * listener is tracked like its listener. */
static int redirect_accept_common(int fd, struct sockaddr *addr, socklen_t *len, int flags, bool is_accept4)
{
	bool ready = vma_init_once();
	os_libc_ensure();
	struct sock_obj *listener = sock_fd_get(fd);
	int newfd;
	if (listener)
		sock_obj_call_begin(listener);   /* a blocking accept may outlast close() */
	if (listener && listener->ops->accept4) {
		newfd = listener->ops->accept4(listener, addr, len, flags);
	} else if (is_accept4) {
		__typeof__(os_libc.accept4) orig = OS_FN_RESOLVED(accept4);
		newfd = orig ? orig(fd, addr, len, flags) : redirect_enosys();
	} else {
		__typeof__(os_libc.accept) orig = OS_FN_RESOLVED(accept);
		newfd = orig ? orig(fd, addr, len) : redirect_enosys();
	}
	if (newfd >= 0 && !(listener && listener->ops->accept4 && (listener->ops->flags & SOCK_OPS_F_ACCEPT_TRACKS))) {
		/* (else the op tracked the new fd itself) */
		if (ready && listener)
			redirect_track_socket(newfd, listener->domain, listener->type, listener->protocol,
					      is_accept4 ? "accept4" : "accept");
		else
			redirect_fd_fresh(newfd);
	}
	if (listener) {
		int saved = errno;
		sock_obj_call_end(listener);
		errno = saved;
	}
	return newfd;
}

/* accept, accept4 and connect are cancellation points in libc, acted on
 * at entry here whichever path answers (REDIRECT_CANCEL_POINT). */
REDIRECT_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict len)
{
	REDIRECT_CANCEL_POINT();
	return redirect_accept_common(fd, addr.__sockaddr__, len, 0, false);
}

REDIRECT_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict len, int flags)
{
	REDIRECT_CANCEL_POINT();
	return redirect_accept_common(fd, addr.__sockaddr__, len, flags, true);
}

REDIRECT_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	REDIRECT_FD_CALL(bind, fd, addr.__sockaddr__, len);
}

REDIRECT_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	REDIRECT_CANCEL_POINT();
	REDIRECT_FD_CALL(connect, fd, addr.__sockaddr__, len);
}

REDIRECT_EXPORT int listen(int fd, int backlog)
{
	REDIRECT_FD_CALL(listen, fd, backlog);
}

REDIRECT_EXPORT int shutdown(int fd, int how)
{
	REDIRECT_FD_CALL(shutdown, fd, how);
}

REDIRECT_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict len)
{
	/* VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME: the call also warms the send
	 * path of an offloaded socket with a dummy packet (docs/extra_api.md). */
	if (__builtin_expect(g_cfg.trigger_dummy_send_getsockname, 0)) {
		os_libc_ensure();
		struct sock_obj *obj = sock_fd_get(fd);
		if (obj && extra_dummy_fd_ok(obj)) {
			sock_obj_pin(obj);
			int ret = obj->ops->getsockname ? obj->ops->getsockname(obj, addr.__sockaddr__, len)
							: OS_FN_RESOLVED(getsockname)(fd, addr.__sockaddr__, len);
			extra_dummy_on_getsockname(obj);
			sock_obj_unpin(obj);
			return ret;
		}
	}
	REDIRECT_FD_CALL(getsockname, fd, addr.__sockaddr__, len);
}

REDIRECT_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict len)
{
	REDIRECT_FD_CALL(getpeername, fd, addr.__sockaddr__, len);
}

REDIRECT_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	REDIRECT_FD_CALL(setsockopt, fd, level, name, val, len);
}

REDIRECT_EXPORT int getsockopt(int fd, int level, int name, void *__restrict val, socklen_t *__restrict len)
{
	/* The Extra API's handshake (vma_get_api): fd -1 never reaches the
	 * kernel, which would refuse it (the answer without libvma). */
	if (__builtin_expect(fd == -1, 0) && level == SOL_SOCKET && name == SO_VMA_GET_API)
		return extra_api_getsockopt(val, len);
	REDIRECT_FD_CALL(getsockopt, fd, level, name, val, len);
}

REDIRECT_EXPORT int ioctl(int fd, unsigned long request, ...)
{
	/* Fetched as a pointer, as glibc itself does: integer arguments travel
	 * in the same register and reach the kernel unchanged. */
	va_list ap;
	va_start(ap, request);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	REDIRECT_FD_CALL(ioctl, fd, request, arg);
}
