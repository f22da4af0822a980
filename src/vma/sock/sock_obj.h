/* The object behind an fd that libvma tracks. Each kind (the passthrough,
 * the offloaded UDP and TCP sockets through their common base sock_base.h,
 * an epoll set) embeds struct sock_obj first and supplies a sock_ops table.
 *
 * Every op is optional: a NULL op means "the kernel handles this call on the
 * same fd", so a kind implements only what it accelerates. The control ops
 * mirror the libc calls one for one (fd replaced by the object). The data
 * calls reach a kind as one receive op and one send op: read, readv, recv,
 * recvfrom and recvmmsg become recvmsg calls, write, writev, send, sendto
 * and sendmmsg sendmsg calls, converted once (sock_call.h). A data op that
 * returns SOCK_OP_KERNEL declines the call: the interposer then makes the
 * application's own call (read stays read) on the fd, so a call that
 * reaches the kernel is exactly the call the application made. */
#ifndef VMA_SOCK_SOCK_OBJ_H
#define VMA_SOCK_SOCK_OBJ_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct sock_obj;

/* accept4 puts the new fd's object in the fd table itself: the caller
 * must not track the returned fd again. */
#define SOCK_OPS_F_ACCEPT_TRACKS 0x1u
/* Not offloaded yet but may become so (a TCP socket before connect/listen):
 * epoll sets keep a watch on it while it is a kernel fd, the kind calls
 * iomux_promote() once its ops answer readiness, and iomux_forget() from
 * release in every state. */
#define SOCK_OPS_F_MAY_OFFLOAD 0x2u

/* What a data op (recvmsg, sendmsg, sendmmsg) returns to
 * decline a call, errno untouched: the kernel serves it, as the application
 * made it (sock_call.h). Never returned by a call to the application. */
#define SOCK_OP_KERNEL (-2)

struct sock_ops {
	const char *kind;   /* "passthrough", "udp", ... for logs */
	unsigned flags;     /* SOCK_OPS_F_* */

	int (*bind)(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len);
	int (*connect)(struct sock_obj *obj, const struct sockaddr *addr, socklen_t len);
	int (*listen)(struct sock_obj *obj, int backlog);
	int (*accept4)(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len, int flags);
	int (*shutdown)(struct sock_obj *obj, int how);
	int (*getsockname)(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len);
	int (*getpeername)(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len);
	int (*setsockopt)(struct sock_obj *obj, int level, int name, const void *val, socklen_t len);
	int (*getsockopt)(struct sock_obj *obj, int level, int name, void *val, socklen_t *len);
	/* arg is the variadic argument as glibc fetches it (a pointer-sized word). */
	int (*fcntl)(struct sock_obj *obj, int cmd, void *arg);
	int (*ioctl)(struct sock_obj *obj, unsigned long request, void *arg);

	/* recvmsg(2) as Linux defines it, for every receive call (sock_call.h
	 * converts read/readv/recv/recvfrom and loops for recvmmsg). */
	ssize_t (*recvmsg)(struct sock_obj *obj, struct msghdr *msg, int flags);
	/* sendmsg(2), for every send call (write/writev/send/sendto, and
	 * sendmmsg message by message unless the kind has its own). */
	ssize_t (*sendmsg)(struct sock_obj *obj, const struct msghdr *msg, int flags);
	/* A kind that batches a sendmmsg (one doorbell for the lot); NULL:
	 * sendmsg per message, as Linux's loop. */
	int (*sendmmsg)(struct sock_obj *obj, struct mmsghdr *vec, unsigned int vlen, int flags);
	ssize_t (*sendfile)(struct sock_obj *obj, int in_fd, off_t *offset, size_t count);
	ssize_t (*sendfile64)(struct sock_obj *obj, int in_fd, off64_t *offset, size_t count);
	/* splice(): obj is fd_in or fd_out (the interposer asks fd_in's object
	 * first, then fd_out's); the op answers the whole call, handing it to
	 * the original splice when its socket is not the offloaded end. */
	ssize_t (*splice)(struct sock_obj *obj, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			  unsigned int flags);

	/* ---- readiness, for select/poll/epoll (src/vma/iomux/) ----
	 * Offloaded kinds supply all three; NULL means the kernel fd alone
	 * tells readiness (the passthrough).
	 *
	 * poll_ready: the EPOLL* bits (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP,
	 * EPOLLRDHUP) user space knows right now; no syscall, no ring polling.
	 * Data that reached the kernel fd (loopback, other interfaces) is not
	 * included: iomux asks the kernel about obj->fd itself. */
	uint32_t (*poll_ready)(struct sock_obj *obj);
	/* progress: one non-blocking pass over the rings this socket receives
	 * from (packets for other sockets are delivered to them too, and their
	 * watchers notified). Returns the packets processed. */
	int (*progress)(struct sock_obj *obj);
	/* wait_prepare: arms the rings' wait fds and stores up to max of them
	 * in fds (the kernel fd is NOT included). Returns the count, or -1
	 * when data arrived while arming (do not sleep: poll again). */
	int (*wait_prepare)(struct sock_obj *obj, int *fds, int max);
	/* The lane whose rings progress polls and wait_prepare arms: a set of
	 * many sockets calls those once per lane, not once per socket (each
	 * call takes the lane's lock). NULL (or no op): call for this one. */
	const void *(*lane_key)(struct sock_obj *obj);
	/* The calling thread is about to wait for obj (a set's sleep calls it
	 * for every socket, wait_prepare only once a lane): its packets are
	 * steered to the thread's wait channel if it has one to be had
	 * (docs/process_model.md, "Wait channels"). NULL: nothing to steer. */
	void (*wait_claim)(struct sock_obj *obj);
	/* poll()/select() sleeping on this socket with the calling thread's
	 * eventfd wake_fd (on), or awake again (off): the socket's lane writes
	 * wake_fd when one of its sockets becomes ready. 0, or -1 when it
	 * cannot (the caller then caps its sleep). NULL: not needed. */
	int (*poll_watch)(struct sock_obj *obj, int wake_fd, bool on);

	/* close(fd) on the application's side. When NULL the kernel fd is
	 * closed by the wrapper. Called after the fd left the table. */
	int (*close)(struct sock_obj *obj);
	/* The fd left the table (close, dup2 onto it, close_range, a stale
	 * entry replaced): drop user-space state now; the kernel fd is not
	 * touched. The memory must stay readable until destroy. */
	void (*release)(struct sock_obj *obj);
	/* Frees the memory; called after the retirement grace (sock_obj_retire). */
	void (*destroy)(struct sock_obj *obj);

	/* vma_stats -S: logs the socket's state at log_level through vlog.
	 * Runs on the internal thread while the application keeps using the
	 * socket, so it only reads. NULL: the generic dump (kind + counters). */
	void (*dump)(struct sock_obj *obj, int log_level);
};

struct iomux_watch;

struct sock_obj {
	const struct sock_ops *ops;
	/* epoll sets holding this fd, owned by iomux/ (iomux_notify walks it
	 * when the socket's readiness rises). NULL when none. */
	struct iomux_watch *watchers;
	/* Where iomux_notify starts looking for an EPOLLEXCLUSIVE set with a
	 * sleeper (rotates); under the watch lock. */
	unsigned watch_turn;
	/* Calls in progress on this object (sock_obj_pin), and
	 * SOCK_OBJ_EVICTED once its graveyard slot was needed: whichever of
	 * the eviction and the last unpin comes second destroys it. Zero when
	 * made (objects are zero-filled). */
	unsigned pins;
	int fd;
	int domain;     /* AF_INET, AF_INET6 */
	int type;       /* SOCK_STREAM, SOCK_DGRAM (without SOCK_NONBLOCK/CLOEXEC) */
	int protocol;
};

#define SOCK_OBJ_EVICTED 0x80000000u

/* Destroys an object whose last pin went after its eviction. */
void sock_obj_destroy_unpinned(struct sock_obj *obj);

/* Every interposed call pins the object it works on for its whole length
 * (a blocking recv may outlast close() and any number of retirements): one
 * atomic add and one atomic subtract, no lock. The load of the pointer and
 * the pin are covered by the graveyard's grace (SOCK_OBJ_GRAVE_SLOTS
 * retirements). */
static inline void sock_obj_pin(struct sock_obj *obj)
{
	__atomic_add_fetch(&obj->pins, 1, __ATOMIC_ACQUIRE);
}

static inline void sock_obj_unpin(struct sock_obj *obj)
{
	if (__builtin_expect(__atomic_sub_fetch(&obj->pins, 1, __ATOMIC_ACQ_REL) == SOCK_OBJ_EVICTED, 0))
		sock_obj_destroy_unpinned(obj);
}

/* A call that can end its thread while it pins its object: a pthread_cancel
 * acting in its sleep or in a kernel call of the op (a blocking accept, a
 * socket on the kernel path) unwinds the thread past the unpin, and the
 * object, once closed, was never freed. Such calls pin through these: the
 * thread keeps the objects its calls pin (a call in a signal handler nests
 * in another), and a thread that ends with some still pinned lets go of
 * them at its exit (a thread-specific key's destructor, registered at the
 * thread's first call). Two thread-local stores beside the pin. */
#define SOCK_OBJ_CALL_DEPTH 4
struct sock_obj_calls {
	unsigned depth;        /* calls in progress; the first SOCK_OBJ_CALL_DEPTH are in objs */
	bool exit_hooked;
	struct sock_obj *objs[SOCK_OBJ_CALL_DEPTH];
};
/* initial-exec: every call touches it (os.h, OS_TLS_HOT). */
extern __thread struct sock_obj_calls sock_obj_calls __attribute__((tls_model("initial-exec")));
void sock_obj_calls_hook_exit(void);

static inline void sock_obj_call_begin(struct sock_obj *obj)
{
	struct sock_obj_calls *c = &sock_obj_calls;
	if (__builtin_expect(!c->exit_hooked, 0))
		sock_obj_calls_hook_exit();
	sock_obj_pin(obj);
	unsigned d = c->depth;
	c->depth = d + 1;
	/* A handler's call that comes now takes the next slot. */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (d < SOCK_OBJ_CALL_DEPTH)
		c->objs[d] = obj;
}

static inline void sock_obj_call_end(struct sock_obj *obj)
{
	sock_obj_calls.depth--;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	sock_obj_unpin(obj);
}

/* Hands an object that left the fd table to the graveyard: release() runs
 * now; destroy() after SOCK_OBJ_GRAVE_SLOTS later retirements if no call
 * still pins it, else when the last such call returns (see
 * docs/architecture.md, "Interposition"). NULL is ignored. */
void sock_obj_retire(struct sock_obj *obj);

/* Destroys every retired object now. Only when no other thread can hold one
 * (tests, teardown). */
void sock_obj_flush_retired(void);

#define SOCK_OBJ_GRAVE_SLOTS 1024

/* Implemented by iomux/: an offloaded socket calls this whenever its
 * readiness rises (a datagram queued, an error, send space) so epoll sets
 * watching it put it on their ready lists and wake a sleeping epoll_wait.
 * Cheap when obj->watchers is NULL. */
void iomux_notify(struct sock_obj *obj, uint32_t events);
/* The same for `edges` edges at once (connections a listener queued,
 * datagrams a socket queued since its last notify): an EPOLLEXCLUSIVE fd
 * wakes up to that many sets with a sleeper. */
void iomux_notify_n(struct sock_obj *obj, uint32_t events, unsigned edges);

#endif
