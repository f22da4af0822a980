/* Shared by the iomux files only. */
#ifndef VMA_IOMUX_IOMUX_INTERNAL_H
#define VMA_IOMUX_IOMUX_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "iomux/iomux.h"
#include "stats/stats.h"

/* ---- locks that follow VMA_THREAD_MODE (0 none, 1/3 spin, 2 mutex) ---- */
struct iomux_lock {
	int spin;
	pthread_mutex_t mutex;
};
#define IOMUX_LOCK_INIT { 0, PTHREAD_MUTEX_INITIALIZER }
void iomux_lock_init(struct iomux_lock *l);
void iomux_lock(struct iomux_lock *l);
void iomux_unlock(struct iomux_lock *l);
/* Guards obj->watchers; one of a few stripes chosen by the object address.
 * Order: watch lock, then an epoll's lock; never the other way. */
struct iomux_lock *iomux_watch_lock(const struct sock_obj *obj);

/* ---- epoll state ---- */
struct iomux_epoll;

/* Node linked into obj->watchers (declared opaque in sock_obj.h). */
struct iomux_watch {
	struct iomux_watch *next;
	struct iomux_item *item;
};

/* One fd of one epoll set. Kernel fds only need fd and data (the kernel
 * keeps their mask); offloaded ones carry the whole user-space state. */
struct iomux_item {
	int fd;
	uint32_t events;          /* as the application gave them */
	epoll_data_t data;
	struct sock_obj *obj;     /* NULL for a kernel fd */
	/* The object whose watchers list holds this item: obj, or a kernel-fd
	 * socket that may be offloaded later (SOCK_OPS_F_MAY_OFFLOAD); NULL
	 * for plain kernel fds. */
	struct sock_obj *watched;
	struct iomux_epoll *ep;
	struct iomux_watch watch;
	struct iomux_item *ready_prev, *ready_next;
	int offl_index;           /* in ep->offl, -1 for kernel fds */
	bool on_ready;
	bool disarmed;            /* EPOLLONESHOT fired, until EPOLL_CTL_MOD */
	/* Out of the set's tables, about to be freed: a notify or promote that
	 * still finds it through the watchers list (until watch_unlink) must
	 * not put it back on the ready list or in offl. */
	bool detached;
	unsigned int report_gen;  /* epoll_wait call that last reported it */
	int report_index;
};

#define IOMUX_ARMED_MAX 16

struct iomux_epoll {
	struct sock_obj base;     /* base.fd is the kernel epoll fd */
	struct iomux_lock lock;
	struct iomux_item **items;   /* by fd */
	int item_cap;
	struct iomux_item **offl;    /* offloaded items, for ring progress */
	int offl_count, offl_cap;
	struct iomux_item *ready_head, *ready_tail;
	int wake_fd;              /* eventfd in the kernel epoll, internal */
	/* The wake fd of a set closed while a thread slept in it: that
	 * thread's signal handler may still write it (os_signal_sleep_arm),
	 * so it is closed in destroy, once no call pins the set. */
	int wake_fd_retired;
	int sleepers;
	/* Threads inside epoll_wait on this set, asleep or in a pass
	 * (atomic): a set whose thread polls in its pass with nothing on its
	 * ready list takes an EPOLLEXCLUSIVE edge as readily as a sleeping
	 * one, and without a wake-up (iomux_epoll.c, notify_push). */
	int waiters;
	bool exposed;
	bool wake_signalled;
	unsigned int gen;
	unsigned int skip_os_count;
	unsigned int os_ratio_count;
	/* Internal wait fds already in the kernel epoll (a failed ADD with
	 * EEXIST was a syscall per sleep), valid for ring generation
	 * armed_gen (ring_mgr_generation): fds are only ever reused after
	 * their ring closed. */
	uint32_t armed_gen;
	int narmed;
	int armed[IOMUX_ARMED_MAX];
	/* Wait fds taken out of the kernel epoll after they woke a sleeper
	 * of this set for nothing (iomux_wait.c, "one ring, many sets"),
	 * until resting_until (ns); ring generation resting_gen. */
	uint32_t resting_gen;
	int nresting;
	int resting[IOMUX_ARMED_MAX];
	int64_t resting_until;
	/* The lane this set counts itself in (epoll_armed_sets), if any. */
	struct sock_offload *armed_lane;
	struct stats_iomux *stats;
};

/* Kernel epoll data of our entries: a tag in the high half, fd below. */
#define IOMUX_TAG_APP 1ull
#define IOMUX_TAG_INTERNAL 2ull
#define IOMUX_DATA(tag, fd) (((tag) << 32) | (uint32_t)(fd))

/* The bits poll_ready reports, completed as Linux's socket poll does
 * (IN also RDNORM, OUT also WRNORM|WRBAND). */
uint32_t iomux_obj_ready(struct sock_obj *obj);

/* ---- time ---- */
int64_t iomux_now_ns(void);
/* Deadline for a relative timeout in ns (< 0 = forever => INT64_MAX). */
int64_t iomux_deadline(int64_t timeout_ns);
/* The same from a start already read (INT64_MAX: none, or beyond). */
int64_t iomux_deadline_from(int64_t start, int64_t timeout_ns);
/* Milliseconds left until deadline, rounded up; -1 when forever. */
int iomux_ms_left(int64_t deadline);
/* Whether the spin phase (VMA_SELECT_POLL) is still on. *refused: it is,
 * but no busy-polling permit was free (the caller yields once before it
 * sleeps: ring_spin_yield). */
bool iomux_spinning(int64_t start, int64_t now, bool *refused);

/* End of one wait call: counts an error (n < 0) or a timeout (n == 0) and,
 * with VMA_CPU_USAGE_STATS, the time spent polling rather than sleeping. */
void iomux_stats_finish(struct stats_iomux *st, int n, int64_t start, int64_t sleep_ns);

/* Ready-list plumbing used by notify and wait (ep lock held). */
void iomux_ready_push(struct iomux_epoll *ep, struct iomux_item *it);
/* The same, but the wake eventfd is only claimed: the fd to write with
 * iomux_wake_write once ep's lock is dropped (-1: no write wanted). The
 * caller must keep the fd from closing until then: it holds the item's
 * watch lock, which the set's release waits for before it closes it. */
int iomux_ready_push_deferred(struct iomux_epoll *ep, struct iomux_item *it);
void iomux_wake_write(int fd);
/* Wake-ups this thread wrote to sets' wake fds (sleepers of other sets
 * whose readiness its ring passes delivered). */
extern __thread unsigned iomux_woke_sets;
void iomux_ready_remove(struct iomux_epoll *ep, struct iomux_item *it);
/* Signals the wake eventfd when someone sleeps or watches (lock held). */
void iomux_wake(struct iomux_epoll *ep);
void iomux_wake_drain(struct iomux_epoll *ep);
/* The kernel reported the wake eventfd readable: drained when no wake-up
 * is pending on it (a deferred write that landed after the drain it was
 * meant for would otherwise end every later sleep at once). Lock held. */
void iomux_wake_fired(struct iomux_epoll *ep);
/* The set is going: it no longer counts as holding its lane's wait fds
 * (iomux_wait.c, "one ring, many sets"). Lock held. */
void iomux_epoll_armed_drop(struct iomux_epoll *ep);

#endif
