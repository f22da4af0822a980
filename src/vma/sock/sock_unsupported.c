/* VMA_EXCEPTION_HANDLING: one policy and one message for every call an
 * offloaded socket cannot serve (sock_unsupported.h). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "sock/sock_unsupported.h"

/* The options an application is likely to meet us with, named as in its
 * source; the stringified macro is the name. */
#define SOCK_OPT_NAME(level, name) { level, name, #level ", " #name }
static const struct {
	int level, name;
	const char *text;
} sock_unsupported_names[] = {
	SOCK_OPT_NAME(SOL_SOCKET, SO_DEBUG),
	SOCK_OPT_NAME(SOL_SOCKET, SO_DONTROUTE),
	SOCK_OPT_NAME(SOL_SOCKET, SO_PRIORITY),
	SOCK_OPT_NAME(SOL_SOCKET, SO_OOBINLINE),
	SOCK_OPT_NAME(SOL_SOCKET, SO_RCVLOWAT),
	SOCK_OPT_NAME(SOL_SOCKET, SO_SNDLOWAT),
	SOCK_OPT_NAME(SOL_SOCKET, SO_BINDTODEVICE),
	SOCK_OPT_NAME(SOL_SOCKET, SO_ATTACH_FILTER),
	SOCK_OPT_NAME(SOL_SOCKET, SO_MARK),
	SOCK_OPT_NAME(SOL_SOCKET, SO_RXQ_OVFL),
	SOCK_OPT_NAME(SOL_SOCKET, SO_PEEK_OFF),
	SOCK_OPT_NAME(SOL_SOCKET, SO_ZEROCOPY),
	SOCK_OPT_NAME(SOL_SOCKET, SO_TXTIME),
	SOCK_OPT_NAME(SOL_SOCKET, SO_PASSCRED),
	SOCK_OPT_NAME(IPPROTO_IP, IP_TOS),
	SOCK_OPT_NAME(IPPROTO_IP, IP_TTL),
	SOCK_OPT_NAME(IPPROTO_IP, IP_OPTIONS),
	SOCK_OPT_NAME(IPPROTO_IP, IP_RECVERR),
	SOCK_OPT_NAME(IPPROTO_IP, IP_MTU_DISCOVER),
	SOCK_OPT_NAME(IPPROTO_IP, IP_FREEBIND),
	SOCK_OPT_NAME(IPPROTO_IP, IP_TRANSPARENT),
	SOCK_OPT_NAME(IPPROTO_IP, IP_RECVORIGDSTADDR),
	SOCK_OPT_NAME(IPPROTO_IP, IP_MULTICAST_ALL),
	SOCK_OPT_NAME(IPPROTO_IP, IP_BLOCK_SOURCE),
	SOCK_OPT_NAME(IPPROTO_IP, IP_UNBLOCK_SOURCE),
	SOCK_OPT_NAME(IPPROTO_IP, MCAST_JOIN_GROUP),
	SOCK_OPT_NAME(IPPROTO_IP, MCAST_LEAVE_GROUP),
	SOCK_OPT_NAME(IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP),
	SOCK_OPT_NAME(IPPROTO_IP, MCAST_LEAVE_SOURCE_GROUP),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_LINGER2),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_DEFER_ACCEPT),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_WINDOW_CLAMP),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_CONGESTION),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_MD5SIG),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_USER_TIMEOUT),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_FASTOPEN),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_FASTOPEN_CONNECT),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_ULP),
	SOCK_OPT_NAME(IPPROTO_TCP, TCP_TX_DELAY),
	SOCK_OPT_NAME(IPPROTO_UDP, UDP_CORK),
#ifdef UDP_SEGMENT
	SOCK_OPT_NAME(IPPROTO_UDP, UDP_SEGMENT),
#endif
#ifdef UDP_GRO
	SOCK_OPT_NAME(IPPROTO_UDP, UDP_GRO),
#endif
};

static const char *sock_unsupported_level_name(int level)
{
	switch (level) {
	case SOL_SOCKET: return "SOL_SOCKET";
	case IPPROTO_IP: return "IPPROTO_IP";
	case IPPROTO_TCP: return "IPPROTO_TCP";
	case IPPROTO_UDP: return "IPPROTO_UDP";
	case IPPROTO_IPV6: return "IPPROTO_IPV6";
	}
	return NULL;
}

const char *sock_unsupported_option_name(int level, int name, char *buf, size_t size)
{
	for (size_t i = 0; i < sizeof(sock_unsupported_names) / sizeof(sock_unsupported_names[0]); i++)
		if (sock_unsupported_names[i].level == level && sock_unsupported_names[i].name == name) {
			snprintf(buf, size, "%s", sock_unsupported_names[i].text);
			return buf;
		}
	const char *lname = sock_unsupported_level_name(level);
	if (lname)
		snprintf(buf, size, "%s, option %d", lname, name);
	else
		snprintf(buf, size, "level %d, option %d", level, name);
	return buf;
}

enum sock_unsupported_verdict sock_unsupported(int fd, const char *what, const char *stuck, int fail_errno)
{
	int mode = g_cfg.exception_handling;
	switch (mode) {
	case SOCK_UNSUPPORTED_DEBUG_TO_KERNEL:
	case SOCK_UNSUPPORTED_ERROR_TO_KERNEL: {
		int level = mode == SOCK_UNSUPPORTED_ERROR_TO_KERNEL ? VLOG_ERROR : VLOG_DEBUG;
		if (!stuck) {
			VLOG_AT(level,
				"fd %d: %s is not supported on an offloaded socket: the socket moves to the kernel "
				"path (VMA_EXCEPTION_HANDLING=%d)",
				fd, what, mode);
			return SOCK_UNSUPPORTED_TO_KERNEL;
		}
		VLOG_AT(level,
			"fd %d: %s is not supported on an offloaded socket, which cannot move to the kernel path "
			"(%s): only its kernel socket gets the call (VMA_EXCEPTION_HANDLING=%d)",
			fd, what, stuck, mode);
		return SOCK_UNSUPPORTED_GO_ON;
	}
	case SOCK_UNSUPPORTED_ERROR_FAIL:
		vlog_error("fd %d: %s is not supported on an offloaded socket: the call fails with %s "
			   "(VMA_EXCEPTION_HANDLING=2)",
			   fd, what, strerrorname_np(fail_errno) ? strerrorname_np(fail_errno) : "an error");
		errno = fail_errno;
		return SOCK_UNSUPPORTED_FAIL;
	case SOCK_UNSUPPORTED_ERROR_ABORT:
		vlog_error("fd %d: %s is not supported on an offloaded socket: aborting the process "
			   "(VMA_EXCEPTION_HANDLING=3)",
			   fd, what);
		abort();
	default:
		vlog_debug("fd %d: %s is not supported on an offloaded socket: only its kernel socket gets the "
			   "call (VMA_EXCEPTION_HANDLING=%d)",
			   fd, what, mode);
		return SOCK_UNSUPPORTED_GO_ON;
	}
}

enum sock_unsupported_verdict sock_unsupported_option(int fd, int level, int name, const char *stuck)
{
	/* Most sockets meet this at the default -1 without debug logging:
	 * the verdict then needs no name. */
	int mode = g_cfg.exception_handling;
	bool debug_only = mode == SOCK_UNSUPPORTED_LOG_DEBUG || mode == SOCK_UNSUPPORTED_DEBUG_TO_KERNEL;
	if (!vlog_enabled(debug_only ? VLOG_DEBUG : VLOG_ERROR))
		return sock_unsupported(fd, "setsockopt", stuck, ENOPROTOOPT);
	char opt[80];
	char what[112];
	snprintf(what, sizeof(what), "setsockopt(%s)", sock_unsupported_option_name(level, name, opt, sizeof(opt)));
	return sock_unsupported(fd, what, stuck, ENOPROTOOPT);
}
