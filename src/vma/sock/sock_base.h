/* What the offloaded socket kinds (UDP, TCP) share: their SOL_SOCKET state
 * and its handling, the wait of a blocked call, the Extra API's node and
 * the dump's first line. Each kind embeds struct sock_base first, as a
 * union with its struct sock_obj (base.obj is the same object), and keeps
 * only what its protocol does differently (docs/architecture.md, "One
 * socket base").
 *
 * The kernel socket under the fd stays authoritative for options: a kind
 * gives every setsockopt to it first, and what it accepted is mirrored here
 * (sock_base_note_option) for the data path. */
#ifndef VMA_SOCK_SOCK_BASE_H
#define VMA_SOCK_SOCK_BASE_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "extra/extra_xt.h"
#include "os/os_signal.h"
#include "sock/sock_obj.h"
#include "sock/sock_tstamp.h"

/* SO_TIMESTAMP / SO_TIMESTAMPNS as Linux keeps them: one of them on at a
 * time (the last set wins, off clears both). */
enum { SOCK_RX_TSTAMP_OFF, SOCK_RX_TSTAMP_US, SOCK_RX_TSTAMP_NS };

struct sock_base {
	struct sock_obj obj;         /* first: the fd table's view */
	/* SOL_SOCKET state the data path needs (the kernel socket keeps it
	 * too, and answers getsockopt). */
	bool nonblocking;            /* O_NONBLOCK, FIONBIO, SOCK_NONBLOCK */
	int rcvtimeo_ms, sndtimeo_ms;   /* SO_RCVTIMEO, SO_SNDTIMEO; 0: forever */
	uint8_t rx_tstamp;           /* SOCK_RX_TSTAMP_* */
	bool rx_tstamp_new;          /* set as SO_TIMESTAMP(NS)_NEW: the 64-bit cmsg layout */
	struct sock_tstamp tstamp;   /* SO_TIMESTAMPING (flags 0: off) and the error queue */
	/* A blocked call of the application: how many sleep, and the eventfd
	 * a wake-up writes (made at the first sleep; -1 before). */
	int sleepers;
	int wake_fd;
	/* The Extra API: SO_VMA_USER_DATA and SocketXtreme's node, guarded by
	 * the lane lock. */
	struct extra_xt_node xt;
};

/* A fresh base for fd (type with SOCK_NONBLOCK/SOCK_CLOEXEC as given). */
void sock_base_init(struct sock_base *b, const struct sock_ops *ops, int fd, int domain, int type, int protocol);

/* An accepted connection's base from its listener's: Linux clones the
 * listener's socket (timeouts, receive and SO_TIMESTAMPING stamps; not
 * O_NONBLOCK, which accept4's flags give). */
void sock_base_inherit(struct sock_base *child, const struct sock_base *listener);

/* ---- options ---- */

/* An int-valued option as Linux reads it: an int, or one byte when
 * shorter. -1 when there is none (NULL, length 0). */
int sock_opt_int(const void *val, socklen_t len, int *out);
/* getsockopt's int answer as Linux gives it (one byte when the buffer is
 * shorter than an int); -1/EFAULT without a buffer. */
int sock_opt_put_int(void *val, socklen_t *len, int v);

/* The SOL_SOCKET options every kind implements the same way (or that only
 * matter to the kernel socket's bind); a kind adds its protocol's. */
bool sock_base_opt_supported(int level, int name);

/* setsockopt and getsockopt of the options libvma alone knows (the kernel
 * socket is not asked): SO_VMA_USER_DATA. true when (level, name) is one,
 * with the call's result in *ret. */
bool sock_base_setsockopt_own(struct sock_base *b, int level, int name, const void *val, socklen_t len, int *ret);
bool sock_base_getsockopt_own(struct sock_base *b, int level, int name, void *val, socklen_t *len, int *ret);

/* Mirrors a SOL_SOCKET option the kernel socket just accepted: the
 * timeouts, SO_TIMESTAMP(NS)(_OLD/_NEW) as Linux's sock_set_timestamp, and
 * SO_TIMESTAMPING's flags. Returns true when SO_TIMESTAMPING switched
 * OPT_ID on (the kind restarts its counter as Linux does for its protocol).
 * Keeps errno. */
bool sock_base_note_option(struct sock_base *b, int level, int name, const void *val, socklen_t len);

/* O_NONBLOCK as the application set it (fcntl F_SETFL, ioctl FIONBIO, once
 * the kernel socket accepted it or the kind served it alone), mirrored in
 * the socket's statistics (stats may be NULL). */
struct stats_socket;
void sock_base_set_nonblocking(struct sock_base *b, bool on, struct stats_socket *stats);

/* ---- receive stamps ---- */

/* Whether a read must report stamps (SO_TIMESTAMP(NS), or SO_TIMESTAMPING's
 * SOFTWARE reporting of stamped packets): one test when neither is on. */
static inline bool sock_base_rx_stamps_on(const struct sock_base *b)
{
	return b->rx_tstamp != SOCK_RX_TSTAMP_OFF || sock_tstamp_rx_on(&b->tstamp);
}

/* Appends, at *used of msg's control buffer, the stamps of a read whose
 * (last) packet arrived at rx_ns, in Linux's order: SO_TIMESTAMP or
 * SO_TIMESTAMPNS, then SCM_TIMESTAMPING when SOFTWARE reporting is on and
 * the packet was stamped (RX_SOFTWARE, or this socket's own
 * SO_TIMESTAMP(NS), which turns receive stamping on in Linux, unless
 * OPT_RX_FILTER asks for RX_SOFTWARE itself). */
void sock_base_put_rx_stamps(const struct sock_base *b, struct msghdr *msg, size_t *used, uint64_t rx_ns);

/* ---- readiness and waits ---- */

/* EPOLLERR while transmit stamps wait on our error queue (Linux: while its
 * error queue is not empty). */
static inline uint32_t sock_base_errq_events(const struct sock_base *b)
{
	return __builtin_expect(sock_tstamp_errq_pending(&b->tstamp), 0) ? EPOLLERR : 0;
}

/* Whether anyone waits for the socket's readiness to rise: an epoll set
 * watching it, or a blocked call of the application. */
static inline bool sock_base_watched(const struct sock_base *b)
{
	return b->obj.watchers != NULL || __atomic_load_n(&b->sleepers, __ATOMIC_ACQUIRE) > 0;
}

/* Wakes a blocked call of the application (a deferred wake-up of the
 * lane's unlock). */
void sock_base_wake_sleepers(struct sock_base *b);

/* A blocked call's sleep, in three steps around the kind's arming of its
 * lane's rings (sock_offload_wait_prepare_locked):
 *   sock_base_sleep_begin: the wake eventfd, the poll timeout (the deadline
 *     in ms, 0 none, capped at cap_ms when >= 0), the signal mark (since: the
 *     caller's, taken before its last os_signal_interrupts look, so that a
 *     handler that ran after that look is not slept through; NULL: now), the
 *     busy-polling permit given back; -1/EAGAIN when the deadline passed;
 *   the kind arms its rings (or finds it need not sleep: sock_base_sleep_cancel);
 *   sock_base_sleep_end: polls the ring fds, the kernel socket when
 *     kernel_events, and the wake eventfd.
 * Returns 0 to look again (a wake-up, a cap or a signal whose handler
 * libvma counted: the caller's os_signal_interrupts decides), -1 with
 * EAGAIN once the deadline passed, EINTR from a handler we did not see
 * unless every handler restarts, or poll's error. */
struct sock_base_sleep {
	int timeout_ms;
	uint64_t deadline_ms;
	struct os_sig_mark before;
	/* Out of sock_base_sleep_end: poll() saw the kernel socket ready, so
	 * the caller reads it; otherwise a look at it would only cost a
	 * syscall that finds nothing. */
	bool kernel_ready;
	/* What a pthread_cancel() acting in the sleep undoes besides the
	 * sleeper count: the receive's watch of its lane (the caller's
	 * watching, NULL when it keeps none), and for a passive sleep
	 * (sock_base_sleep_passive) its entry in that lane. */
	struct sock_offload **watching;
	struct sock_offload *passive_ctx;
};
int sock_base_sleep_begin(struct sock_base *b, struct sock_base_sleep *z, uint64_t deadline_ms, int cap_ms,
			  const struct os_sig_mark *since);
int sock_base_sleep_cancel(struct sock_base *b);
int sock_base_sleep_end(struct sock_base *b, struct sock_base_sleep *z, const int *fds, int n, short kernel_events);
/* sock_base_sleep_end for a receive that sock_offload_passive_begin_locked
 * made passive on lane ctx: no ring fds, at most SOCK_OFFLOAD_PASSIVE_CAP_MS,
 * then sock_offload_passive_end. */
struct sock_offload;
int sock_base_sleep_passive(struct sock_base *b, struct sock_base_sleep *z, short kernel_events,
			    struct sock_offload *ctx, struct sock_offload **watching);

/* ---- vma_stats -S ---- */

/* The dump's first line: "fd N: PROTO local -> remote, path[, released]"
 * (addresses and ports in network order). */
void sock_base_dump_head(const struct sock_base *b, int log_level, const char *proto, uint32_t local_ip,
			 uint16_t local_port, uint32_t remote_ip, uint16_t remote_port, const char *path, bool released);

#endif
