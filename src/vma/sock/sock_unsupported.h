/* What an offloaded socket does when the application asks for something our
 * stack does not implement (VMA_EXCEPTION_HANDLING): an option the
 * offloaded path would ignore, urgent data, signal-driven I/O. Every such
 * place asks sock_unsupported() and acts on its verdict, so the message
 * and the policy are the same everywhere. See docs/parameters.md and
 * "Unsupported calls" in docs/tcp_sockets.md. */
#ifndef VMA_SOCK_SOCK_UNSUPPORTED_H
#define VMA_SOCK_SOCK_UNSUPPORTED_H

#include <stddef.h>

enum sock_unsupported_verdict {
	/* Carry on as without the parameter: the call goes to the socket's
	 * kernel socket, and the offloaded path ignores what it asked. */
	SOCK_UNSUPPORTED_GO_ON,
	/* The caller moves the socket to the kernel path (for good), then
	 * carries on: the kernel then does what was asked. */
	SOCK_UNSUPPORTED_TO_KERNEL,
	/* The caller fails the call: returns -1 (errno is already set). */
	SOCK_UNSUPPORTED_FAIL,
};

/* Values of VMA_EXCEPTION_HANDLING. */
#define SOCK_UNSUPPORTED_LOG_DEBUG -1
#define SOCK_UNSUPPORTED_DEBUG_TO_KERNEL 0
#define SOCK_UNSUPPORTED_ERROR_TO_KERNEL 1
#define SOCK_UNSUPPORTED_ERROR_FAIL 2
#define SOCK_UNSUPPORTED_ERROR_ABORT 3

/* The offloaded socket fd met `what` (e.g. "setsockopt(IPPROTO_TCP,
 * TCP_CORK)", "send(MSG_OOB)"), which the offloaded path does not support.
 * stuck is NULL when the socket can still go to the kernel path, else why
 * it cannot ("its connection is offloaded"): modes 0 and 1 then carry on
 * as -1 does. Logs one line naming the fd, what and the parameter, at
 * debug (-1, 0) or error (1, 2, 3) level; mode 2 sets errno to fail_errno
 * (ENOPROTOOPT for an option, EOPNOTSUPP for a call or flag); mode 3
 * aborts the process after the line. Never called on the send/receive
 * fast path. */
enum sock_unsupported_verdict sock_unsupported(int fd, const char *what, const char *stuck, int fail_errno);

/* The same for setsockopt(level, name): names the option in the message
 * and fails with ENOPROTOOPT, the errno of an option Linux does not know. */
enum sock_unsupported_verdict sock_unsupported_option(int fd, int level, int name, const char *stuck);

/* "IPPROTO_TCP, TCP_CORK" (or the numbers when the name is not known)
 * into buf; returns buf. */
const char *sock_unsupported_option_name(int level, int name, char *buf, size_t size);

#endif
