/* The common part of the offloaded socket kinds (sock_base.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>

#include <linux/time_types.h>

#include "engine/engine.h"
#include "extra/extra.h"
#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring_spin.h"
#include "sock/sock_base.h"
#include "sock/sock_offload.h"
#include "stats/stats.h"

#define SOCK_BASE_TYPE_MASK 0xf   /* the type without SOCK_NONBLOCK/SOCK_CLOEXEC */

void sock_base_init(struct sock_base *b, const struct sock_ops *ops, int fd, int domain, int type, int protocol)
{
	b->obj.ops = ops;
	b->obj.fd = fd;
	b->obj.domain = domain;
	b->obj.type = type & SOCK_BASE_TYPE_MASK;
	b->obj.protocol = protocol;
	b->nonblocking = (type & SOCK_NONBLOCK) != 0;
	b->wake_fd = -1;
}

void sock_base_inherit(struct sock_base *child, const struct sock_base *listener)
{
	child->rcvtimeo_ms = listener->rcvtimeo_ms;
	child->sndtimeo_ms = listener->sndtimeo_ms;
	child->tstamp.flags = listener->tstamp.flags;
	child->tstamp.new_layout = listener->tstamp.new_layout;
	child->rx_tstamp = listener->rx_tstamp;
	child->rx_tstamp_new = listener->rx_tstamp_new;
}

/* ---- options ---- */

int sock_opt_int(const void *val, socklen_t len, int *out)
{
	if (!val)
		return -1;
	if (len >= sizeof(int))
		memcpy(out, val, sizeof(int));
	else if (len >= 1)
		*out = *(const unsigned char *)val;
	else
		return -1;
	return 0;
}

int sock_opt_put_int(void *val, socklen_t *len, int v)
{
	if (!val || !len) {
		errno = EFAULT;
		return -1;
	}
	if (*len >= sizeof(int)) {
		memcpy(val, &v, sizeof(int));
		*len = sizeof(int);
	} else if (*len > 0) {
		*(unsigned char *)val = (unsigned char)v;
		*len = 1;
	}
	return 0;
}

bool sock_base_opt_supported(int level, int name)
{
	if (level != SOL_SOCKET)
		return false;
	switch (name) {
	case SO_REUSEADDR:
	case SO_REUSEPORT:
	case SO_RCVBUF:
	case SO_RCVBUFFORCE:
	case SO_SNDBUF:
	case SO_SNDBUFFORCE:
	case SO_RCVTIMEO:
	case SO_SNDTIMEO:
	case SO_BUSY_POLL:   /* we poll anyway (VMA_RX_POLL) */
	case SO_TIMESTAMP_OLD:
	case SO_TIMESTAMP_NEW:
	case SO_TIMESTAMPNS_OLD:
	case SO_TIMESTAMPNS_NEW:
	case SO_TIMESTAMPING_OLD:
	case SO_TIMESTAMPING_NEW:
		return true;
	}
	return false;
}

bool sock_base_setsockopt_own(struct sock_base *b, int level, int name, const void *val, socklen_t len, int *ret)
{
	if (level != SOL_SOCKET || name != SO_VMA_USER_DATA)
		return false;
	*ret = extra_xt_user_data_set(&b->xt, val, len);
	return true;
}

bool sock_base_getsockopt_own(struct sock_base *b, int level, int name, void *val, socklen_t *len, int *ret)
{
	if (level != SOL_SOCKET || name != SO_VMA_USER_DATA)
		return false;
	*ret = extra_xt_user_data_get(&b->xt, b->obj.fd, val, len);
	return true;
}

/* SO_RCVTIMEO/SO_SNDTIMEO in ms, rounded up; 0 (forever) for {0, 0} and,
 * as our waits know no "return at once", for a negative time the kernel
 * accepted. */
static int sock_base_timeo_ms(const void *val, socklen_t len)
{
	if (!val || len < sizeof(struct timeval))
		return 0;
	struct timeval tv;
	memcpy(&tv, val, sizeof(tv));
	long long ms = (long long)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
	return ms > 0x7fffffff ? 0x7fffffff : ms < 0 ? 0 : (int)ms;
}

bool sock_base_note_option(struct sock_base *b, int level, int name, const void *val, socklen_t len)
{
	if (level != SOL_SOCKET || !val)
		return false;
	int saved = errno;
	bool id_started = false;
	int on = 0;
	switch (name) {
	case SO_RCVTIMEO:
		b->rcvtimeo_ms = sock_base_timeo_ms(val, len);
		break;
	case SO_SNDTIMEO:
		b->sndtimeo_ms = sock_base_timeo_ms(val, len);
		break;
	case SO_TIMESTAMP_OLD:
	case SO_TIMESTAMP_NEW:
	case SO_TIMESTAMPNS_OLD:
	case SO_TIMESTAMPNS_NEW:
		/* Linux's sock_set_timestamp: on selects the resolution and
		 * the layout, off clears both. */
		if (sock_opt_int(val, len, &on) != 0 || !on) {
			b->rx_tstamp = SOCK_RX_TSTAMP_OFF;
			break;
		}
		b->rx_tstamp_new = name == SO_TIMESTAMP_NEW || name == SO_TIMESTAMPNS_NEW;
		b->rx_tstamp = (name == SO_TIMESTAMPNS_OLD || name == SO_TIMESTAMPNS_NEW) ? SOCK_RX_TSTAMP_NS
											   : SOCK_RX_TSTAMP_US;
		break;
	case SO_TIMESTAMPING_OLD:
	case SO_TIMESTAMPING_NEW:
		id_started = sock_tstamp_note_flags(&b->tstamp, name, val, len);
		break;
	}
	errno = saved;
	return id_started;
}

void sock_base_set_nonblocking(struct sock_base *b, bool on, struct stats_socket *stats)
{
	b->nonblocking = on;
	if (stats)
		stats->blocking = !on;
}

/* ---- receive stamps ---- */

void sock_base_put_rx_stamps(const struct sock_base *b, struct msghdr *msg, size_t *used, uint64_t rx_ns)
{
	time_t sec = (time_t)(rx_ns / 1000000000u);
	long nsec = (long)(rx_ns % 1000000000u);
	if (b->rx_tstamp == SOCK_RX_TSTAMP_US) {
		if (b->rx_tstamp_new) {
			struct __kernel_sock_timeval tv = { .tv_sec = sec, .tv_usec = nsec / 1000 };
			sock_tstamp_put_cmsg(msg, used, SOL_SOCKET, SO_TIMESTAMP_NEW, &tv, sizeof(tv));
		} else {
			struct timeval tv = { .tv_sec = sec, .tv_usec = (suseconds_t)(nsec / 1000) };
			sock_tstamp_put_cmsg(msg, used, SOL_SOCKET, SO_TIMESTAMP_OLD, &tv, sizeof(tv));
		}
	} else if (b->rx_tstamp == SOCK_RX_TSTAMP_NS) {
		if (b->rx_tstamp_new) {
			struct __kernel_timespec ts = { .tv_sec = sec, .tv_nsec = nsec };
			sock_tstamp_put_cmsg(msg, used, SOL_SOCKET, SO_TIMESTAMPNS_NEW, &ts, sizeof(ts));
		} else {
			struct timespec ts = { .tv_sec = sec, .tv_nsec = nsec };
			sock_tstamp_put_cmsg(msg, used, SOL_SOCKET, SO_TIMESTAMPNS_OLD, &ts, sizeof(ts));
		}
	}
	uint32_t tsflags = __atomic_load_n(&b->tstamp.flags, __ATOMIC_RELAXED);
	bool stamped = (tsflags & SOF_TIMESTAMPING_RX_SOFTWARE) ||
		       (b->rx_tstamp != SOCK_RX_TSTAMP_OFF && !(tsflags & SOCK_TSTAMP_OPT_RX_FILTER));
	if ((tsflags & SOF_TIMESTAMPING_SOFTWARE) && stamped)
		sock_tstamp_put_rx(&b->tstamp, msg, used, rx_ns);
}

/* ---- waits ---- */

void sock_base_wake_sleepers(struct sock_base *b)
{
	if (__atomic_load_n(&b->sleepers, __ATOMIC_ACQUIRE) > 0 && b->wake_fd >= 0)
		os_efd_write(b->wake_fd, 1);
}

int sock_base_sleep_begin(struct sock_base *b, struct sock_base_sleep *z, uint64_t deadline_ms, int cap_ms,
			  const struct os_sig_mark *since)
{
	sock_offload_wake_fd_get(&b->wake_fd);
	z->deadline_ms = deadline_ms;
	z->timeout_ms = cap_ms;
	if (deadline_ms) {
		uint64_t now = engine_now_ms();
		if (now >= deadline_ms) {
			errno = EAGAIN;
			return -1;
		}
		if (cap_ms < 0 || deadline_ms - now < (uint64_t)cap_ms)
			z->timeout_ms = (int)(deadline_ms - now);
	}
	z->before = since ? *since : os_signal_mark();
	z->kernel_ready = false;
	z->watching = NULL;
	z->passive_ctx = NULL;
	ring_spin_release();
	__atomic_add_fetch(&b->sleepers, 1, __ATOMIC_ACQ_REL);
	return 0;
}

int sock_base_sleep_cancel(struct sock_base *b)
{
	__atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_ACQ_REL);
	return 0;
}

/* The poll of a sleep is a cancellation point, as the blocking call it
 * stands for is in libc: a pthread_cancel() ends the thread there, and
 * what the sleep registered must go with it. Else the socket would count a
 * sleeper that is gone (a wake-fd write per delivery for ever), and the
 * lane a watcher that never looks (every later reader of the lane sleeping
 * passive, its packets left to the internal thread's pass) or a passive
 * entry naming a wake fd that may be closed and its number reused. Nothing
 * is locked in the poll, so the handler may lock the lane. */
struct sock_base_cancel {
	struct sock_base *b;
	struct sock_base_sleep *z;
	int prev_sleep_fd;
};

static void sock_base_sleep_cancelled(void *arg)
{
	struct sock_base_cancel *c = arg;
	os_signal_sleep_disarm(c->prev_sleep_fd);
	__atomic_sub_fetch(&c->b->sleepers, 1, __ATOMIC_ACQ_REL);
	if (c->z->passive_ctx)
		sock_offload_passive_end(c->z->passive_ctx, c->z->watching, c->b->wake_fd);
	if (c->z->watching)
		sock_offload_unwatch(c->z->watching);
	sock_offload_spin_leave();
}

/* poll() with the handler above pushed; its result and errno through the
 * pointers (nothing the handler's setjmp could clobber is read after it). */
static void sock_base_poll(struct pollfd *pfd, int count, struct sock_base_cancel *c, int *r, int *err)
{
	pthread_cleanup_push(sock_base_sleep_cancelled, c);
	*r = OS_CALL(poll, pfd, (nfds_t)count, c->z->timeout_ms);
	*err = errno;
	pthread_cleanup_pop(0);
}

int sock_base_sleep_end(struct sock_base *b, struct sock_base_sleep *z, const int *fds, int n, short kernel_events)
{
	struct pollfd pfd[2 * SOCK_OFFLOAD_WAIT_FDS + 2];
	int count = 0;
	for (int i = 0; i < n && count < 2 * SOCK_OFFLOAD_WAIT_FDS; i++)
		pfd[count++] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	int kernel_at = -1, wake_at = -1;
	if (kernel_events) {
		kernel_at = count;
		pfd[count++] = (struct pollfd){ .fd = b->obj.fd, .events = kernel_events };
	}
	if (b->wake_fd >= 0) {
		wake_at = count;
		pfd[count++] = (struct pollfd){ .fd = b->wake_fd, .events = POLLIN };
	}
	/* Sends of this thread held on other lanes leave before it sleeps
	 * (before the look below: a handler held back by that lock is seen). */
	sock_offload_flush_mine();
	/* From here a handler writes the wake fd (os_signal_sleep_arm): one
	 * that runs after the look below ends the poll at once. */
	int prev_sleep_fd = os_signal_sleep_arm(b->wake_fd);   /* -1: none */
	/* A handler held back while the kind armed the rings (a lane was
	 * locked) ran at the unlock: the caller decides before we sleep
	 * through it. */
	if (os_signal_caught_since(&z->before)) {
		os_signal_sleep_disarm(prev_sleep_fd);
		if (b->wake_fd >= 0) {
			eventfd_t drained;
			os_efd_read(b->wake_fd, &drained);
		}
		return sock_base_sleep_cancel(b);
	}
	struct sock_base_cancel cancel = { .b = b, .z = z, .prev_sleep_fd = prev_sleep_fd };
	int r, saved;
	sock_base_poll(pfd, count, &cancel, &r, &saved);
	os_signal_sleep_disarm(prev_sleep_fd);
	__atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_ACQ_REL);
	/* Reset only what poll() saw written: a read per sleep was a syscall
	 * that mostly found nothing (the rings woke us). A write that came
	 * after poll() looked stays counted and ends the next sleep at once,
	 * which then resets it: one early look, nothing lost. A signal's
	 * handler writes it too (EINTR). */
	if (wake_at >= 0 && (r < 0 || (r > 0 && (pfd[wake_at].revents & POLLIN)))) {
		eventfd_t drained;
		os_efd_read(b->wake_fd, &drained);
	}
	if (r > 0 && kernel_at >= 0 && (pfd[kernel_at].revents & (kernel_events | POLLERR | POLLHUP)))
		z->kernel_ready = true;
	if (r < 0) {
		/* A handler we counted: the caller's os_signal_interrupts
		 * decides. One we did not see (installed behind our back):
		 * restart only if every handler would. */
		if (saved == EINTR && os_signal_caught_since(&z->before))
			return 0;
		if (saved == EINTR && !z->deadline_ms && sock_offload_signal_restarts())
			return 0;
		errno = saved;
		return saved == EINTR ? -1 : 0;
	}
	if (r == 0 && z->deadline_ms && engine_now_ms() >= z->deadline_ms) {
		errno = EAGAIN;
		return -1;
	}
	return 0;
}

int sock_base_sleep_passive(struct sock_base *b, struct sock_base_sleep *z, short kernel_events,
			    struct sock_offload *ctx, struct sock_offload **watching)
{
	if (z->timeout_ms < 0 || z->timeout_ms > SOCK_OFFLOAD_PASSIVE_CAP_MS)
		z->timeout_ms = SOCK_OFFLOAD_PASSIVE_CAP_MS;
	z->passive_ctx = ctx;
	z->watching = watching;
	int r = sock_base_sleep_end(b, z, NULL, 0, kernel_events);
	sock_offload_passive_end(ctx, watching, b->wake_fd);   /* keeps errno */
	return r;
}

/* ---- vma_stats -S ---- */

static const char *sock_base_dump_addr(uint32_t ip, char *buf, size_t size)
{
	struct in_addr a = { .s_addr = ip };
	return inet_ntop(AF_INET, &a, buf, (socklen_t)size) ? buf : "?";
}

void sock_base_dump_head(const struct sock_base *b, int log_level, const char *proto, uint32_t local_ip,
			 uint16_t local_port, uint32_t remote_ip, uint16_t remote_port, const char *path, bool released)
{
	char local[INET_ADDRSTRLEN], peer[INET_ADDRSTRLEN];
	vlog_print(log_level, "fd %d: %s %s:%u -> %s:%u, %s%s", b->obj.fd, proto,
		   sock_base_dump_addr(local_ip, local, sizeof(local)), ntohs(local_port),
		   sock_base_dump_addr(remote_ip, peer, sizeof(peer)), ntohs(remote_port), path,
		   released ? ", released" : "");
}
