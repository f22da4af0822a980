/* splice() between an offloaded TCP connection and a pipe. The kernel
 * socket under the fd holds no connection (it would answer ENOTCONN), so
 * the bytes go through user space: socket -> pipe peeks our receive queue,
 * writes into the pipe without blocking and consumes what the pipe took;
 * pipe -> socket reads what the socket can take from the pipe and sends it.
 * Everything the kernel answers identically (bad descriptors, no pipe at
 * the other end, offsets, flags, len 0) is left to the original splice.
 * See docs/tcp_sockets.md, "splice". */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log/vlog.h"
#include "os/os.h"
#include "os/os_signal.h"
#include "sock/sock_tcp_internal.h"

/* Bytes moved per step (the kernel's default pipe holds 64 KiB). */
#define SOCK_TCP_SPLICE_CHUNK 65536
/* The flags splice(2) knows; anything else is the kernel's EINVAL. */
#define SOCK_TCP_SPLICE_FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK | SPLICE_F_MORE | SPLICE_F_GIFT)

enum splice_pipe_access {
	SPLICE_PIPE_NONE = 0,
	SPLICE_PIPE_READ = 1,
	SPLICE_PIPE_WRITE = 2,
};

/* What fd allows as a pipe (anonymous or FIFO); NONE when it is not one.
 * *nonblock: the file's O_NONBLOCK, which splice adds to its flags. */
static unsigned splice_pipe_access(int fd, bool *nonblock)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))
		return SPLICE_PIPE_NONE;
	int fl = OS_CALL(fcntl, fd, F_GETFL);
	if (fl < 0)
		return SPLICE_PIPE_NONE;
	*nonblock = (fl & O_NONBLOCK) != 0;
	switch (fl & O_ACCMODE) {
	case O_RDONLY:
		return SPLICE_PIPE_READ;
	case O_WRONLY:
		return SPLICE_PIPE_WRITE;
	case O_RDWR:
		return SPLICE_PIPE_READ | SPLICE_PIPE_WRITE;
	}
	return SPLICE_PIPE_NONE;
}

/* Waits until the pipe reports one of events (or an error/hang-up), as
 * the kernel's splice waits on a pipe: EAGAIN at once when nonblocking; a
 * signal interrupts, or restarts the wait under SA_RESTART. Returns the
 * revents, or -1 with errno. */
static int splice_pipe_wait(int fd, short events, bool nonblock)
{
	struct os_sig_mark mark = os_signal_call_mark();
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int r = OS_CALL(poll, &p, 1, nonblock ? 0 : -1);
		if (r > 0)
			return p.revents;
		if (r == 0) {
			errno = EAGAIN;
			return -1;
		}
		if (errno != EINTR)
			return -1;
		if (os_signal_caught_since(&mark)) {
			if (os_signal_interrupts(&mark, true))
				return -1;
		} else if (!sock_offload_signal_restarts()) {
			errno = EINTR;
			return -1;
		}
	}
}

/* Pipes take RWF_NOWAIT since Linux 5.x; an older kernel says EOPNOTSUPP
 * once and writes then go PIPE_BUF at a time while poll sees room (a write
 * of at most PIPE_BUF into a pipe with a free slot never blocks). */
static int splice_nowait_unsupported;

/* Writes up to len bytes into the pipe without ever blocking: the count
 * written (possibly short), or -1 with errno (EAGAIN when full; EPIPE and
 * SIGPIPE from the kernel when nobody reads). */
static ssize_t splice_pipe_write_nowait(int fd, const char *buf, size_t len)
{
	if (!__atomic_load_n(&splice_nowait_unsupported, __ATOMIC_RELAXED)) {
		struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
		for (int tries = 0; tries < 3; tries++) {
			ssize_t w = pwritev2(fd, &iov, 1, -1, RWF_NOWAIT);
			if (w >= 0 || (errno != EAGAIN && errno != EOPNOTSUPP))
				return w;
			if (errno == EOPNOTSUPP) {
				__atomic_store_n(&splice_nowait_unsupported, 1, __ATOMIC_RELAXED);
				break;
			}
			/* RWF_NOWAIT also gives up on a busy pipe lock: retry
			 * while poll says there is room. */
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (OS_CALL(poll, &p, 1, 0) <= 0 || !(p.revents & POLLOUT)) {
				errno = EAGAIN;
				return -1;
			}
		}
		if (!__atomic_load_n(&splice_nowait_unsupported, __ATOMIC_RELAXED)) {
			errno = EAGAIN;
			return -1;
		}
	}
	size_t done = 0;
	while (done < len) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		if (OS_CALL(poll, &p, 1, 0) <= 0 || !(p.revents & (POLLOUT | POLLERR)))
			break;
		size_t step = len - done < PIPE_BUF ? len - done : PIPE_BUF;
		ssize_t w = OS_CALL(write, fd, buf + done, step);
		if (w <= 0) {
			if (done)
				break;
			return -1;
		}
		done += (size_t)w;
	}
	if (!done) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)done;
}

/* socket -> pipe, as Linux's tcp_splice_read: room in the pipe first
 * (SPLICE_F_NONBLOCK or the pipe's O_NONBLOCK: EAGAIN, else wait), then
 * data as recv() waits for it (the socket's O_NONBLOCK and SO_RCVTIMEO,
 * not SPLICE_F_NONBLOCK); 0 at EOF; then whatever more is queued while
 * the pipe takes it. */
static ssize_t splice_socket_to_pipe(struct sock_tcp *s, int pipe_fd, bool pipe_nonblock, size_t len)
{
	int ev = splice_pipe_wait(pipe_fd, POLLOUT, pipe_nonblock);
	if (ev < 0)
		return -1;
	if (ev & POLLERR) {   /* no reader: the kernel signals before it reads */
		raise(SIGPIPE);
		errno = EPIPE;
		return -1;
	}
	char buf[SOCK_TCP_SPLICE_CHUNK];
	size_t done = 0;
	while (done < len) {
		size_t want = len - done < sizeof(buf) ? len - done : sizeof(buf);
		/* Peek: what the pipe does not take stays queued on the socket. */
		ssize_t got = sock_tcp_recvfrom(s, buf, want, MSG_PEEK | (done ? MSG_DONTWAIT : 0), NULL, NULL);
		if (got <= 0) {
			if (done)
				break;
			return got;
		}
		ssize_t put = splice_pipe_write_nowait(pipe_fd, buf, (size_t)got);
		if (put <= 0) {
			if (done)
				break;
			return -1;
		}
		/* Consume exactly what the pipe took (queued: never waits). */
		ssize_t eaten = sock_tcp_recvfrom(s, buf, (size_t)put, MSG_DONTWAIT, NULL, NULL);
		if (eaten != put)
			vlog_warn("splice: fd %d: %zd bytes consumed after %zd went into the pipe "
				  "(another thread read the socket meanwhile)", s->obj.fd, eaten, put);
		done += (size_t)put;
		if (put < got)
			break;   /* the pipe is full */
	}
	return (ssize_t)done;
}

/* pipe -> socket, as Linux's splice_to_socket: data from the pipe
 * (SPLICE_F_NONBLOCK or the pipe's O_NONBLOCK: EAGAIN when empty, else
 * wait; 0 when empty without writers), sent as send() would (the socket's
 * O_NONBLOCK; SPLICE_F_MORE as MSG_MORE; EPIPE with SIGPIPE); goes on while
 * the pipe has more. Never takes from the pipe more than the socket can
 * queue now unless the socket blocks anyway, so no byte is lost. */
static ssize_t splice_pipe_to_socket(struct sock_tcp *s, int pipe_fd, bool pipe_nonblock, size_t len,
				     unsigned int flags)
{
	int send_flags = (flags & SPLICE_F_MORE) ? MSG_MORE : 0;
	char buf[SOCK_TCP_SPLICE_CHUNK];
	size_t done = 0;
	while (done < len) {
		size_t want = len - done < sizeof(buf) ? len - done : sizeof(buf);
		long room = sock_tcp_send_room(s);
		if (room < 0 || (room == 0 && s->base.nonblocking)) {
			if (done)
				break;
			/* Linux looks at the pipe first, then the send fails. */
			int ev = splice_pipe_wait(pipe_fd, POLLIN, pipe_nonblock);
			if (ev < 0)
				return -1;
			if (!(ev & POLLIN))
				return 0;   /* empty and no writer */
			/* An empty send reports what a real one would (EPIPE with
			 * SIGPIPE, the pending error, EAGAIN while connecting). */
			if (sock_tcp_send(s, buf, 0, send_flags | MSG_DONTWAIT) < 0)
				return -1;
			errno = EAGAIN;
			return -1;
		}
		if (s->base.nonblocking && (size_t)room < want)
			want = (size_t)room;
		struct iovec iov = { .iov_base = buf, .iov_len = want };
		/* vmsplice from a pipe's read end copies out like read(), and
		 * takes SPLICE_F_NONBLOCK without touching the file's flags. */
		ssize_t got = vmsplice(pipe_fd, &iov, 1, (pipe_nonblock || done) ? SPLICE_F_NONBLOCK : 0);
		if (got <= 0) {
			if (done)
				break;
			return got;
		}
		ssize_t sent = sock_tcp_send_all(s, buf, (size_t)got, send_flags);
		if (sent < 0) {
			if (done)
				break;
			return -1;
		}
		done += (size_t)sent;
		if (sent < got)
			break;   /* interrupted or timed out: the rest is lost, as a short send would */
	}
	return (ssize_t)done;
}

static ssize_t splice_to_kernel(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
				unsigned int flags)
{
	return OS_CALL(splice, fd_in, off_in, fd_out, off_out, len, flags);
}

ssize_t sock_tcp_op_splice(struct sock_obj *obj, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			   unsigned int flags)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	bool socket_in = fd_in == obj->fd;
	if (!sock_tcp_ctx(s)) {
		if (s->mode != SOCK_TCP_KERNEL) {
			errno = ENOTCONN;   /* detached (forked child, after exit): as send/recv */
			return -1;
		}
		return splice_to_kernel(fd_in, off_in, fd_out, off_out, len, flags);
	}
	/* The kernel gives the same answer for these (len 0, unknown flags,
	 * offsets: ESPIPE/EINVAL; no pipe at the other end or the wrong end of
	 * one: EINVAL/EBADF) and for a listener (ENOTCONN). */
	bool pipe_nonblock = false;
	unsigned need = socket_in ? SPLICE_PIPE_WRITE : SPLICE_PIPE_READ;
	if (len == 0 || (flags & ~SOCK_TCP_SPLICE_FLAGS) || off_in || off_out || s->mode != SOCK_TCP_ACTIVE ||
	    fd_in == fd_out || !(splice_pipe_access(socket_in ? fd_out : fd_in, &pipe_nonblock) & need))
		return splice_to_kernel(fd_in, off_in, fd_out, off_out, len, flags);
	if (flags & SPLICE_F_NONBLOCK)
		pipe_nonblock = true;
	if (socket_in)
		return splice_socket_to_pipe(s, fd_out, pipe_nonblock, len);
	return splice_pipe_to_socket(s, fd_in, pipe_nonblock, len, flags);
}
