/* Offloaded TCP sockets: the data path (receive, send, sendfile) and the
 * blocking waits. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <linux/time_types.h>

#include "config/cfg_params.h"
#include "extra/extra.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_call.h"
#include "sock/sock_prefetch.h"
#include "sock/sock_tcp_internal.h"
#include "ring/ring_spin.h"

#define SOCK_TCP_SLEEP_CAP_MS 200
#define SOCK_TCP_SENDFILE_CHUNK 65536


/* sock_tcp_sleep; a receive passes watching (sock_offload.h, "one ring,
 * many readers"): it then sleeps passive while another receive of the lane
 * watches the rings. */
static int sock_tcp_sleep_as(struct sock_tcp *s, struct sock_offload *ctx, uint64_t deadline_ms, short kernel_events,
			     bool (*ready)(const struct sock_tcp *s), const struct os_sig_mark *since,
			     struct sock_offload **watching)
{
	/* Capped: timers run on the internal thread and wake us through the
	 * eventfd, but a missed edge must never hang the application. */
	struct sock_base_sleep z;
	if (sock_base_sleep_begin(&s->base, &z, deadline_ms, SOCK_TCP_SLEEP_CAP_MS, since) < 0)
		return -1;
	int fds[SOCK_OFFLOAD_WAIT_FDS];
	ctx = sock_tcp_lock(s, ctx);
	sock_tcp_chan_claim_locked(ctx, s);
	int n = ready(s) ? -1 : sock_offload_wait_prepare_locked(ctx, fds, SOCK_OFFLOAD_WAIT_FDS);
	/* The engine's next timer (tail loss probe, RACK, RTO, delayed ACK):
	 * wake for it, and the caller's progress pass runs it. A writer blocked
	 * on its own flight then probes a lost tail at its PTO, not at the
	 * internal thread's next tick (10 ms, later on a loaded host). */
	if (n >= 0 && ctx->tcp) {
		uint64_t due = tcp_ctx_next_deadline_ms(ctx->tcp), now = engine_now_ms();
		if (due != UINT64_MAX && due < now + (uint64_t)z.timeout_ms)
			z.timeout_ms = due > now ? (int)(due - now) : 1;
	}
	/* A thread with a wait channel sleeps on it: nobody else polls it. */
	bool passive = n >= 0 && watching && !sock_offload_chan_mine_peek(ctx, s->if_slot) &&
		       sock_offload_passive_begin_locked(ctx, watching, s->base.wake_fd, false);
	sock_offload_unlock(ctx);
	if (n < 0)
		return sock_base_sleep_cancel(&s->base);
	if (passive)
		return sock_base_sleep_passive(&s->base, &z, kernel_events, ctx, watching);
	z.watching = watching;
	return sock_base_sleep_end(&s->base, &z, fds, n, kernel_events);
}

int sock_tcp_sleep(struct sock_tcp *s, struct sock_offload *ctx, uint64_t deadline_ms, short kernel_events,
		   bool (*ready)(const struct sock_tcp *s), const struct os_sig_mark *since)
{
	return sock_tcp_sleep_as(s, ctx, deadline_ms, kernel_events, ready, since, NULL);
}

#define SOCK_TCP_HANDSHAKE_YIELD_EVERY 1u

bool sock_tcp_spin_again(unsigned *spins, uint64_t deadline_ms)
{
	int rx_poll = g_cfg.rx_poll;
	if (!(rx_poll < 0 || (*spins)++ < (unsigned)rx_poll) || !ring_spin_permit())
		return false;
	if (deadline_ms && (*spins & 1023) == 0 && engine_now_ms() >= deadline_ms)
		return false;   /* the sleep reports the timeout */
	/* The answer we wait for comes from a peer that may share this CPU
	 * (another process on the host, a veth): give it the core now and
	 * then rather than burn our time slice before it can reply. */
	if (g_cfg.rx_poll_yield || (*spins % SOCK_TCP_HANDSHAKE_YIELD_EVERY) == 0)
		sched_yield();
	return true;
}

/* ---- receive ---- */

static bool sock_tcp_rx_ready(const struct sock_tcp *s)
{
	return s->rxq_bytes || s->shut_rcv || s->err > 0 || s->reset || !s->pcb || (s->xcb && s->xcb->frames);
}

/* Copies up to want bytes from the queue into the iovecs starting at byte
 * skip of them; consumes unless peek. Lock held. */
static size_t sock_tcp_copy_locked(struct sock_tcp *s, const struct iovec *iov, size_t iovcnt, size_t skip,
				   size_t want, bool peek, uint64_t *last_rx_ns)
{
	size_t done = 0, vi = 0, voff = skip;
	while (vi < iovcnt && voff >= iov[vi].iov_len) {
		voff -= iov[vi].iov_len;
		vi++;
	}
	struct ring_buf *b = s->rxq_head;
	uint32_t boff = 0;
	while (b && done < want && vi < iovcnt) {
		size_t n = b->len - boff;
		size_t room = iov[vi].iov_len - voff;
		if (n > room)
			n = room;
		if (n > want - done)
			n = want - done;
		memcpy((char *)iov[vi].iov_base + voff, b->data + boff, n);
		*last_rx_ns = b->rx_time_ns;
		done += n;
		voff += n;
		boff += (uint32_t)n;
		if (voff == iov[vi].iov_len) {
			vi++;
			voff = 0;
		}
		if (boff == b->len) {
			struct ring_buf *next = b->link;
			if (!peek) {
				s->rxq_head = next;
				if (!next)
					s->rxq_tail = NULL;
				s->rxq_frames--;
				ring_buf_free(b);
			}
			b = next;
			boff = 0;
		}
	}
	if (!peek && b && boff) {
		b->data += boff;
		b->len -= boff;
		b->tot_len = b->len;
	}
	if (!peek && done) {
		s->rxq_bytes -= (uint32_t)done;
		if (s->stats)
			stats_socket_ready_remove(s->stats, done);
		/* The engine decides whether the reopened window is worth a
		 * segment of its own (receiver SWS avoidance, as Linux). */
		if (s->pcb) {
			tcp_rcv_held_set(s->pcb, sock_tcp_frames_held(s));
			tcp_recved(s->pcb, (uint32_t)done);
		}
	}
	return done;
}

/* The receive itself; *last_rx_ns gets the receive time of the last
 * buffer it read from (0: none). */
static ssize_t sock_tcp_recvmsg_data(struct sock_tcp *s, struct msghdr *msg, int flags, uint64_t *last_rx_ns,
				     struct sock_offload **watching);

ssize_t sock_tcp_op_recvmsg(struct sock_obj *obj, struct msghdr *msg, int flags)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	size_t ctl_room = msg->msg_controllen;
	uint64_t last_rx_ns = 0;
	struct sock_offload *watching = NULL;
	ssize_t r = sock_tcp_recvmsg_data(s, msg, flags, &last_rx_ns, &watching);
	/* With data, the claim on the lane stays until its lease lapses:
	 * the thread is back for more in microseconds (sock_offload.h). */
	if (r <= 0)
		sock_offload_spin_leave();
	if (__builtin_expect(watching != NULL, 0))   /* left without data: an error, EINTR, a timeout */
		sock_offload_unwatch(&watching);
	/* As Linux: the stamps of the last segment read. */
	if (__builtin_expect(last_rx_ns != 0 && r > 0 && sock_base_rx_stamps_on(&s->base), 0)) {
		size_t used = 0;
		msg->msg_controllen = ctl_room;
		sock_base_put_rx_stamps(&s->base, msg, &used, last_rx_ns);
		msg->msg_controllen = used;
	}
	return r;
}

/* Without the lane lock: an established connection with no byte queued, no
 * error or end to report, nothing staged for a receive callback, and a lane
 * with nothing to process (sock_offload_idle_peek). */
static bool sock_tcp_recv_would_block(const struct sock_tcp *s, const struct sock_offload *ctx)
{
	return !__atomic_load_n(&s->rxq_bytes, __ATOMIC_ACQUIRE) && s->established && !s->connecting &&
	       !s->err && !s->shut_rcv && !s->reset && s->pcb && !s->released && !s->xcb &&
	       sock_offload_idle_peek(ctx);
}

static ssize_t sock_tcp_recvmsg_data(struct sock_tcp *s, struct msghdr *msg, int flags, uint64_t *last_rx_ns,
				     struct sock_offload **watching)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	/* Our transmit stamps first, then the kernel socket's error queue;
	 * never blocks, as Linux's error-queue read. */
	if (__builtin_expect(flags & MSG_ERRQUEUE, 0) && !s->released) {
		ssize_t r = sock_tstamp_errq_recv(&s->base.tstamp, msg, NULL);
		if (r != SOCK_TSTAMP_ERRQ_EMPTY)
			return r;
	}
	if (!ctx || s->mode != SOCK_TCP_ACTIVE || (flags & (MSG_ERRQUEUE | MSG_OOB))) {
		if ((flags & MSG_OOB) && ctx && s->mode == SOCK_TCP_ACTIVE &&
		    !sock_tcp_unsupported_call(s, "recv(MSG_OOB) (urgent data)"))
			return -1;
		return SOCK_OP_KERNEL;
	}
	msg->msg_flags = 0;
	msg->msg_controllen = 0;
	if (msg->msg_name)
		msg->msg_namelen = 0;   /* Linux leaves it untouched for TCP; 0 is what callers see */
	size_t want = 0;
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		want += msg->msg_iov[i].iov_len;
	bool nonblock = s->base.nonblocking || (flags & MSG_DONTWAIT);
	bool peek = (flags & MSG_PEEK) != 0;
	bool waitall = (flags & MSG_WAITALL) && !peek && !nonblock;
	uint64_t deadline = s->base.rcvtimeo_ms ? engine_now_ms() + (uint64_t)s->base.rcvtimeo_ms : 0;
	size_t copied = 0;
	long spins = 0;
	bool yielded = false;
	int rx_poll = g_cfg.rx_poll;
	struct os_sig_mark sigmark = os_signal_call_mark();
	if (want == 0 && !(flags & MSG_TRUNC))
		return 0;
	sock_tcp_migrate_note(s);
	/* A non-blocking read that finds nothing: EAGAIN without the lane
	 * lock. The read loop of an event-driven server ends in one per
	 * request, and under the lock it would queue behind whichever thread
	 * works on the lane. Nothing is lost by not looking under the lock:
	 * the racy reads answer as a locked read a moment earlier would
	 * have, and what arrives later readies the socket as always. */
	if (nonblock && !peek && sock_tcp_recv_would_block(s, ctx)) {
		if (s->stats)
			s->stats->c.rx_eagain++;
		errno = EAGAIN;
		return -1;
	}
	for (;;) {
		/* The connection moved lanes: the watch of the old one goes. */
		if (__builtin_expect(*watching != NULL, 0) && *watching != __atomic_load_n(&s->ctx, __ATOMIC_RELAXED))
			sock_offload_unwatch(watching);
		ctx = sock_tcp_lock(s, ctx);
		if (!s->rxq_bytes)
			sock_offload_progress_locked(ctx);
		else if (!sock_offload_rx_drain_locked(ctx, s->stats ? &s->stats->c.rx_drain_polls : NULL))
			sock_offload_clock_locked(ctx);   /* tcp_recved may send */
		bool connecting = s->connecting;
		size_t n = 0;
		if (s->rxq_bytes)
			n = sock_tcp_copy_locked(s, msg->msg_iov, msg->msg_iovlen, copied, want - copied, peek,
						 last_rx_ns);
		copied += n;
		if (n && !peek)
			sock_tcp_tx_kick_locked(s);   /* a window update tcp_recved sent */
		/* A connection on no wait channel yet goes to the reader's: a
		 * thread that busy-polls before its first sleep would leave it
		 * on the lane's ring, whose packets wake every thread asleep
		 * there. Once on a channel it moves only with a sleep
		 * (sock_tcp_wait_claim): two readers never bounce it. */
		if (n && !s->chan && ctx->chans_on)
			sock_tcp_chan_claim_locked(ctx, s);
		int err = 0;
		bool eof = false;
		if (copied < want && !s->rxq_bytes && !connecting) {
			if (s->err > 0) {
				if (!copied) {
					err = s->err;
					s->err = 0;   /* reported once, then EOF */
				}
			} else if (s->shut_rcv || s->reset || !s->pcb) {
				eof = true;
			}
		}
		bool staged = __builtin_expect(s->xcb != NULL, 0) && s->xcb->frames;
		if (n)
			sock_offload_unwatch_locked(ctx, watching);
		else if (!nonblock)
			sock_offload_watch_locked(ctx, watching);
		sock_offload_unlock(ctx);
		/* Bytes staged for the receive callback: shown to it now, in
		 * this thread; those it lets through are read on the next pass. */
		if (__builtin_expect(staged, 0) && !n && extra_tcp_run_callbacks(s) > 0)
			continue;
		if (err) {
			if (s->stats)
				s->stats->c.rx_errors++;
			errno = err;
			return -1;
		}
		if (n && s->stats) {
			s->stats->c.rx_bytes += n;
			s->stats->c.rx_packets++;
		}
		if (copied && (copied == want || !waitall || eof || err))
			return (ssize_t)copied;
		if (eof)
			return (ssize_t)copied;
		if (s->released) {
			errno = EBADF;
			return -1;
		}
		if (!connecting && !s->established) {
			errno = ENOTCONN;
			return -1;
		}
		if (nonblock) {
			if (s->stats)
				s->stats->c.rx_eagain++;
			errno = EAGAIN;
			return -1;
		}
		/* Linux: a handler interrupts a blocked receive (partial data
		 * of MSG_WAITALL is returned); SA_RESTART restarts it unless
		 * SO_RCVTIMEO is set. */
		if (os_signal_interrupts(&sigmark, !deadline && !copied))
			return copied ? (ssize_t)copied : -1;
		bool may_poll = rx_poll < 0 || spins++ < rx_poll;
		/* One spinner per lane (sock_offload_spin_turn). */
		if (may_poll && ring_spin_permit() && sock_offload_spin_turn(ctx)) {
			if (deadline && (spins & 1023) == 0 && engine_now_ms() >= deadline)
				goto timeout;
			if (g_cfg.rx_poll_yield)
				sched_yield();   /* VMA_RX_POLL_YIELD */
			continue;
		}
		/* Refused a busy-polling permit: one yield per call, then one
		 * more look before the sleep (ring_spin_yield). */
		if (may_poll && ring_spin_yield(&yielded))
			continue;
		if (s->stats)
			s->stats->c.rx_poll_miss++;
		sock_offload_spin_leave();
		if (sock_tcp_sleep_as(s, ctx, deadline, 0, sock_tcp_rx_ready, &sigmark, watching) < 0) {
			if (errno == EAGAIN)
				goto timeout;
			return copied ? (ssize_t)copied : -1;
		}
		spins = 0;
	}
timeout:
	if (copied)
		return (ssize_t)copied;
	errno = EAGAIN;
	return -1;
}

ssize_t sock_tcp_recvfrom(struct sock_tcp *s, void *buf, size_t len, int flags, struct sockaddr *from,
			  socklen_t *fromlen)
{
	return SOCK_CALL_OR_KERNEL(sock_call_recvfrom(&s->obj, buf, len, flags, from, fromlen),
				   OS_CALL(recvfrom, s->obj.fd, buf, len, flags, from, fromlen));
}

/* ---- send ---- */

static bool sock_tcp_tx_ready(const struct sock_tcp *s)
{
	return s->writeable || !s->pcb || s->reset || s->shut_send || s->snd_room;
}

/* An offloaded socket whose context is gone (forked child, after the exit
 * hook): its kernel socket only holds the port and would answer a send
 * with EPIPE and a SIGPIPE the process never asked for. */
static bool sock_tcp_detached(const struct sock_tcp *s)
{
	return s->mode != SOCK_TCP_KERNEL && !sock_tcp_ctx(s);
}

static int sock_tcp_detached_error(void)
{
	errno = ENOTCONN;
	return -1;
}

static ssize_t sock_tcp_epipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	errno = EPIPE;
	return -1;
}

/* The stamps a send asks for its last byte (TCP_TX_STAMP_*): SO_TIMESTAMPING's
 * TX_SCHED, TX_SOFTWARE and TX_ACK. */
static unsigned sock_tcp_tx_stamp_kinds(const struct sock_tcp *s)
{
	uint32_t f = __atomic_load_n(&s->base.tstamp.flags, __ATOMIC_RELAXED);
	if (__builtin_expect(!(f & (SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_SOFTWARE |
				    SOF_TIMESTAMPING_TX_ACK)), 1))
		return 0;
	return ((f & SOF_TIMESTAMPING_TX_SCHED) ? TCP_TX_STAMP_SCHED : 0) |
	       ((f & SOF_TIMESTAMPING_TX_SOFTWARE) ? TCP_TX_STAMP_SND : 0) |
	       ((f & SOF_TIMESTAMPING_TX_ACK) ? TCP_TX_STAMP_ACK : 0);
}

/* A blocking send cut short (signal, SO_SNDTIMEO) after queuing sent bytes:
 * Linux stamps the last byte it queued; its segment may have left while we
 * waited, then SCHED and SND are due at once. Returns sent. */
static ssize_t sock_tcp_tx_stamp_late(struct sock_tcp *s, struct sock_offload *ctx, unsigned kinds, size_t sent)
{
	if (__builtin_expect(kinds != 0, 0)) {
		ctx = sock_tcp_lock(s, ctx);
		if (s->pcb)
			tcp_tx_stamp_request(s->pcb, kinds, sent > UINT32_MAX ? UINT32_MAX : (uint32_t)sent);
		sock_offload_unlock(ctx);
	}
	return (ssize_t)sent;
}

/* must_block: wait for send space even on an O_NONBLOCK socket (splice
 * already took these bytes out of a pipe and cannot put them back). */
static ssize_t sock_tcp_sendmsg_impl(struct sock_tcp *s, const struct msghdr *msg, int flags, bool must_block)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	/* VMA_SND_FLAGS_DUMMY (the Extra API, extra_dummy.c): built, not sent. */
	if (__builtin_expect(flags & VMA_SND_FLAGS_DUMMY, 0))
		return extra_tcp_dummy_send(s, msg, flags);
	if (sock_tcp_detached(s))
		return sock_tcp_detached_error();
	if (!ctx || s->mode != SOCK_TCP_ACTIVE || (flags & MSG_OOB)) {
		if ((flags & MSG_OOB) && ctx && s->mode == SOCK_TCP_ACTIVE &&
		    !sock_tcp_unsupported_call(s, "send(MSG_OOB) (urgent data)"))
			return -1;
		return SOCK_OP_KERNEL;
	}
	bool nonblock = !must_block && (s->base.nonblocking || (flags & MSG_DONTWAIT));
	if (s->connecting) {
		if (nonblock) {
			errno = EAGAIN;
			return -1;
		}
		if (sock_tcp_wait_connected(s, ctx, s->base.sndtimeo_ms) < 0)
			return -1;
	}
	uint64_t deadline = s->base.sndtimeo_ms ? engine_now_ms() + (uint64_t)s->base.sndtimeo_ms : 0;
	size_t total = 0, sent = 0;
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		total += msg->msg_iov[i].iov_len;
	size_t vi = 0, voff = 0;
	struct os_sig_mark sigmark = os_signal_call_mark();
	/* SO_TIMESTAMPING: one flag test when off. The call's last byte is
	 * stamped: its write holds output back until the stamp is asked. */
	unsigned stamp_kinds = sock_tcp_tx_stamp_kinds(s);
	for (;;) {
		ctx = sock_tcp_lock(s, ctx);
		if (!s->pcb || s->shut_send) {
			int err = s->err > 0 ? s->err : 0;
			s->err = 0;
			sock_offload_unlock(ctx);
			if (sent)
				return (ssize_t)sent;
			if (err) {
				errno = err;
				return -1;
			}
			return sock_tcp_epipe(flags);
		}
		int r = 0;
		sock_offload_clock_locked(ctx);
		while (vi < msg->msg_iovlen) {
			size_t left = msg->msg_iov[vi].iov_len - voff;
			if (left == 0) {
				vi++;
				voff = 0;
				continue;
			}
			uint32_t chunk = left > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)left;
			/* TCP_NOTSENT_LOWAT: queue only while few bytes wait unsent */
			uint32_t lowat_room = tcp_sndbuf_lowat_room(s->pcb);
			if (__builtin_expect(lowat_room != UINT32_MAX, 0)) {
				if (!lowat_room) {
					r = -EAGAIN;
					break;
				}
				chunk = chunk < lowat_room ? chunk : lowat_room;
			}
			bool last = sent + chunk >= total;
			unsigned wf = (!last || (flags & MSG_MORE) || stamp_kinds) ? TCP_WRITE_MORE : 0;
			/* VMA_TX_PREFETCH_BYTES: the data tcp_write copies. */
			sock_prefetch((const char *)msg->msg_iov[vi].iov_base + voff, chunk, g_cfg.tx_prefetch_bytes);
			r = tcp_write(s->pcb, (const char *)msg->msg_iov[vi].iov_base + voff, chunk, wf);
			if (r <= 0)
				break;
			sent += (size_t)r;
			voff += (size_t)r;
		}
		if (__builtin_expect(stamp_kinds != 0, 0) && sent &&
		    (sent == total || nonblock || (r < 0 && r != -EAGAIN))) {
			/* The call ends here: stamp its last byte, then send. */
			tcp_tx_stamp_request(s->pcb, stamp_kinds, sent > UINT32_MAX ? UINT32_MAX : (uint32_t)sent);
			if (!(flags & MSG_MORE))
				tcp_output(s->pcb);
		}
		if (r == -EAGAIN || sent < total)
			tcp_output(s->pcb);   /* what is queued goes while we wait */
		if (g_cfg.rx_poll_on_tx_tcp)
			sock_offload_progress_locked(ctx);
		if (s->if_slot >= 0)
			sock_offload_tx_send_done_locked(ctx, sock_offload_tx_ring(ctx, s->if_slot),
							 sock_offload_tx_more(s->rxq_bytes != 0));
		sock_tcp_snd_refresh_locked(s);
		sock_offload_unlock(ctx);
		if (r < 0 && r != -EAGAIN) {
			if (sent)
				return (ssize_t)sent;
			if (r == -EPIPE)
				return sock_tcp_epipe(flags);
			errno = -r;
			return -1;
		}
		if (sent == total) {
			if (s->stats) {
				s->stats->c.tx_bytes += sent;
				s->stats->c.tx_packets++;
			}
			return (ssize_t)sent;
		}
		if (nonblock) {
			if (sent)
				return (ssize_t)sent;
			if (s->stats)
				s->stats->c.tx_eagain++;
			errno = EAGAIN;
			return -1;
		}
		/* Linux: interrupted with bytes queued, the count; with none,
		 * EINTR, or a restart under SA_RESTART without SO_SNDTIMEO. */
		if (os_signal_interrupts(&sigmark, !deadline && !sent))
			return sent ? sock_tcp_tx_stamp_late(s, ctx, stamp_kinds, sent) : -1;
		if (sock_tcp_sleep(s, ctx, deadline, 0, sock_tcp_tx_ready, &sigmark) < 0) {
			if (sent)
				return sock_tcp_tx_stamp_late(s, ctx, stamp_kinds, sent);
			return -1;
		}
		sock_offload_progress(ctx);
	}
}

ssize_t sock_tcp_op_sendmsg(struct sock_obj *obj, const struct msghdr *msg, int flags)
{
	return sock_tcp_sendmsg_impl(sock_tcp_of(obj), msg, flags, false);
}

/* A send for libvma's own callers (sendfile, splice): the kernel socket's
 * when the connection is not offloaded. */
static ssize_t sock_tcp_sendmsg_common(struct sock_tcp *s, const struct msghdr *msg, int flags, bool must_block)
{
	return SOCK_CALL_OR_KERNEL(sock_tcp_sendmsg_impl(s, msg, flags, must_block),
				   OS_CALL(sendmsg, s->obj.fd, msg, flags));
}

ssize_t sock_tcp_send(struct sock_tcp *s, const void *buf, size_t len, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	return sock_tcp_sendmsg_common(s, &msg, flags, false);
}

ssize_t sock_tcp_send_all(struct sock_tcp *s, const void *buf, size_t len, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	return sock_tcp_sendmsg_common(s, &msg, flags, true);
}

long sock_tcp_send_room(struct sock_tcp *s)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx)
		return -1;
	ctx = sock_tcp_lock(s, ctx);
	/* What a send would find now (it does not poll the rings first either). */
	if (s->pcb)
		sock_tcp_snd_refresh_locked(s);
	long room = !s->pcb || s->shut_send ? -1 : s->connecting ? 0 : (long)s->snd_free;
	sock_offload_unlock(ctx);
	return room;
}

/* sendfile: read from in_fd and send, chunk by chunk. Stops at the first
 * short send (as Linux returns the bytes it moved). */
static ssize_t sock_tcp_sendfile_common(struct sock_obj *obj, int in_fd, off64_t *offset, size_t count)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	char buf[SOCK_TCP_SENDFILE_CHUNK];
	size_t done = 0;
	off64_t pos = offset ? *offset : 0;
	while (done < count) {
		size_t want = count - done < sizeof(buf) ? count - done : sizeof(buf);
		ssize_t got = offset ? pread64(in_fd, buf, want, pos) : OS_CALL(read, in_fd, buf, want);
		if (got < 0) {
			if (done)
				break;
			return -1;
		}
		if (got == 0)
			break;
		struct iovec iov = { .iov_base = buf, .iov_len = (size_t)got };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t w = sock_tcp_sendmsg_common(s, &msg, 0, false);
		if (w < 0) {
			if (!offset)
				lseek64(in_fd, -(off64_t)got, SEEK_CUR);
			if (done)
				break;
			return -1;
		}
		done += (size_t)w;
		pos += w;
		if (w < got) {
			if (!offset)
				lseek64(in_fd, -(off64_t)(got - w), SEEK_CUR);
			break;
		}
	}
	if (offset)
		*offset = pos;
	return (ssize_t)done;
}

ssize_t sock_tcp_op_sendfile(struct sock_obj *obj, int in_fd, off_t *offset, size_t count)
{
	if (sock_tcp_detached(sock_tcp_of(obj)))
		return sock_tcp_detached_error();
	if (!sock_tcp_ctx(sock_tcp_of(obj)))
		return OS_CALL(sendfile, obj->fd, in_fd, offset, count);
	off64_t off = offset ? *offset : 0;
	ssize_t r = sock_tcp_sendfile_common(obj, in_fd, offset ? &off : NULL, count);
	if (offset)
		*offset = (off_t)off;
	return r;
}

ssize_t sock_tcp_op_sendfile64(struct sock_obj *obj, int in_fd, off64_t *offset, size_t count)
{
	if (sock_tcp_detached(sock_tcp_of(obj)))
		return sock_tcp_detached_error();
	if (!sock_tcp_ctx(sock_tcp_of(obj)))
		return OS_CALL(sendfile64, obj->fd, in_fd, offset, count);
	return sock_tcp_sendfile_common(obj, in_fd, offset, count);
}
