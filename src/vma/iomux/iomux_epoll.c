/* The epoll object: interest list, ready list, epoll_ctl and the notify
 * path sockets call. epoll_wait is in iomux_wait.c.
 *
 * Every fd of a set is registered in the kernel epoll (the application's
 * epfd itself) with data = IOMUX_DATA(APP, fd), so the kernel's answers
 * are translated through items[fd]; our wake eventfd and the rings' wait
 * fds are registered with the INTERNAL tag and never reported. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include "iomux/iomux_internal.h"
#include "log/vlog.h"
#include "os/os.h"

static int kernel_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return OS_CALL(epoll_ctl, epfd, op, fd, ev);
}

static void kernel_close(int fd)
{
	os_close_nocancel(fd);
}

/* ---- ready list (ep lock held) ---- */
static bool ready_link(struct iomux_epoll *ep, struct iomux_item *it)
{
	if (it->on_ready || it->detached)
		return false;
	it->on_ready = true;
	it->ready_next = NULL;
	it->ready_prev = ep->ready_tail;
	if (ep->ready_tail)
		ep->ready_tail->ready_next = it;
	else
		ep->ready_head = it;
	ep->ready_tail = it;
	return true;
}

void iomux_ready_push(struct iomux_epoll *ep, struct iomux_item *it)
{
	if (ready_link(ep, it))
		iomux_wake(ep);
}

/* Whether the wake eventfd is to be written: someone sleeps in the set or
 * watches it from outside, and no write is pending since the last drain.
 * Claims the write (wake_signalled). Lock held. */
static bool wake_claim(struct iomux_epoll *ep)
{
	if (ep->wake_signalled || ep->wake_fd < 0 || (!ep->sleepers && !ep->exposed))
		return false;
	ep->wake_signalled = true;
	return true;
}

int iomux_ready_push_deferred(struct iomux_epoll *ep, struct iomux_item *it)
{
	return ready_link(ep, it) && wake_claim(ep) ? ep->wake_fd : -1;
}

__thread unsigned iomux_woke_sets;

void iomux_wake_write(int fd)
{
	if (fd < 0)
		return;
	iomux_woke_sets++;
	int saved = errno;
	(void)os_efd_write(fd, 1);
	errno = saved;
}

void iomux_ready_remove(struct iomux_epoll *ep, struct iomux_item *it)
{
	if (!it->on_ready)
		return;
	if (it->ready_prev)
		it->ready_prev->ready_next = it->ready_next;
	else
		ep->ready_head = it->ready_next;
	if (it->ready_next)
		it->ready_next->ready_prev = it->ready_prev;
	else
		ep->ready_tail = it->ready_prev;
	it->on_ready = false;
	it->ready_prev = it->ready_next = NULL;
}

/* The syscall happens only when a thread sleeps in this set or the set is
 * watched from outside (nested epoll, poll/select on the epfd), and only
 * once until the next drain. */
void iomux_wake(struct iomux_epoll *ep)
{
	if (wake_claim(ep))
		iomux_wake_write(ep->wake_fd);
}

void iomux_wake_drain(struct iomux_epoll *ep)
{
	if (!ep->wake_signalled)
		return;
	uint64_t value;
	(void)os_efd_read(ep->wake_fd, &value);
	ep->wake_signalled = false;
}

void iomux_wake_fired(struct iomux_epoll *ep)
{
	if (ep->wake_signalled || ep->wake_fd < 0)
		return;
	uint64_t value;
	(void)os_efd_read(ep->wake_fd, &value);
}

/* ---- notify: called by sockets from any thread ---- */

/* Whether this event of this item is one EPOLLEXCLUSIVE limits: a plain
 * readable or writable edge the item asked for. Errors and hang-ups reach
 * every set: Linux wakes one exclusive set for those too, but a set not
 * woken learns that the socket is going away only at its next wake-up,
 * and waking them all costs little for an event that comes once. */
static bool notify_exclusive(const struct iomux_item *it, uint32_t events)
{
	return (it->events & EPOLLEXCLUSIVE) && !(events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP));
}

/* How much a set wants an exclusive edge (watch lock held, set lock not):
 * NOTIFY_IDLE a thread waits in it for something to do: it sleeps and no
 * wake-up is on its way yet, or it polls in its pass (a busy-polling
 * epoll_wait) and nothing is on its ready list;
 * NOTIFY_WOKEN one sleeps but was already woken (Linux takes a woken
 * waiter off the set's queue, so the next edge goes to another set);
 * NOTIFY_ANY nobody waits there (its thread is busy in the application).
 * Linux has no thread polling in a pass: its softirq queues the
 * connection and wakes a sleeper. Ours, a spinning epoll_wait, is idle
 * just as much; counting it busy gave every connection to the one thread
 * that slept while the other spun on the lane. */
enum notify_want { NOTIFY_IDLE, NOTIFY_WOKEN, NOTIFY_ANY };

/* Pushes it on its set's ready list when the set is of kind want (or
 * better); returns the wake fd to write (or -1). *taken: pushed. */
static int notify_push(struct iomux_item *it, enum notify_want want, bool *taken)
{
	struct iomux_epoll *ep = it->ep;
	int wake_fd = -1;
	*taken = false;
	iomux_lock(&ep->lock);
	bool sleeping = ep->sleepers || ep->exposed;
	bool polling = __atomic_load_n(&ep->waiters, __ATOMIC_RELAXED) > ep->sleepers && !ep->ready_head;
	bool ok = want == NOTIFY_ANY || polling || (sleeping && (want == NOTIFY_WOKEN || !ep->wake_signalled));
	if (!it->disarmed && ok) {
		wake_fd = iomux_ready_push_deferred(ep, it);
		*taken = true;
	}
	iomux_unlock(&ep->lock);
	return wake_fd;
}

static bool notify_wants(const struct iomux_item *it, uint32_t events)
{
	/* No obj: still a kernel fd there, the kernel reports it. */
	return it->obj && (events & (it->events | EPOLLERR | EPOLLHUP));
}

void iomux_notify_n(struct sock_obj *obj, uint32_t events, unsigned edges)
{
	if (!__atomic_load_n(&obj->watchers, __ATOMIC_ACQUIRE))
		return;
	struct iomux_lock *wl = iomux_watch_lock(obj);
	iomux_lock(wl);
	unsigned nexcl = 0;
	bool taken;
	for (struct iomux_watch *w = obj->watchers; w; w = w->next) {
		struct iomux_item *it = w->item;
		if (!notify_wants(it, events))
			continue;
		if (notify_exclusive(it, events)) {
			nexcl++;
			continue;
		}
		/* Out of the set's lock: the write wakes the set's sleeper,
		 * whose first step is to take that lock (kernel_harvest), and
		 * on a crowded host this thread may lose its CPU inside the
		 * syscall. Under the watch lock still: the set's release
		 * unlinks this watch, under it, before it closes the fd. */
		iomux_wake_write(notify_push(it, NOTIFY_ANY, &taken));
	}
	if (nexcl) {
		/* EPOLLEXCLUSIVE: of the sets that asked for it, each edge
		 * goes to an idle one, asleep or polling (Linux: the first in
		 * its wait queue whose waiter was not woken yet). edges: the edges
		 * this call stands for (connections queued on a listener,
		 * datagrams on a socket since the last call), each to its
		 * own set while there are idle ones. We start the search one
		 * set further each call (obj->watch_turn), so a listener
		 * shared by a thread per CPU spreads its connections over the
		 * idle threads. No set is idle: all get it, as under Linux. */
		unsigned start = obj->watch_turn++ % nexcl, delivered = 0;
		if (edges == 0)
			edges = 1;
		for (enum notify_want want = NOTIFY_IDLE; want <= NOTIFY_WOKEN; want++) {
			/* One set already woken harvests every edge. */
			unsigned limit = want == NOTIFY_IDLE ? edges : 1;
			for (unsigned pass = 0; pass < 2 && delivered < limit; pass++) {
				unsigned k = 0;
				for (struct iomux_watch *w = obj->watchers; w && delivered < limit; w = w->next) {
					struct iomux_item *it = w->item;
					if (!notify_wants(it, events) || !notify_exclusive(it, events))
						continue;
					unsigned idx = k++;
					/* pass 0: from start on; pass 1: before start. */
					if ((pass == 0) != (idx >= start))
						continue;
					iomux_wake_write(notify_push(it, want, &taken));
					delivered += taken;
				}
			}
			/* Edges left over go to the sets just woken, which
			 * harvest them all. */
			if (delivered)
				break;
		}
		if (!delivered)
			for (struct iomux_watch *w = obj->watchers; w; w = w->next) {
				struct iomux_item *it = w->item;
				if (notify_wants(it, events) && notify_exclusive(it, events))
					iomux_wake_write(notify_push(it, NOTIFY_ANY, &taken));
			}
	}
	iomux_unlock(wl);
}

void iomux_notify(struct sock_obj *obj, uint32_t events)
{
	iomux_notify_n(obj, events, 1);
}

static void watch_link(struct iomux_item *it)
{
	struct iomux_lock *wl = iomux_watch_lock(it->watched);
	iomux_lock(wl);
	it->watch.item = it;
	it->watch.next = it->watched->watchers;
	__atomic_store_n(&it->watched->watchers, &it->watch, __ATOMIC_RELEASE);
	iomux_unlock(wl);
}

/* After this returns no notify holds a pointer to it. */
static void watch_unlink(struct iomux_item *it)
{
	struct iomux_lock *wl = iomux_watch_lock(it->watched);
	iomux_lock(wl);
	for (struct iomux_watch **pp = &it->watched->watchers; *pp; pp = &(*pp)->next) {
		if (*pp == &it->watch) {
			__atomic_store_n(pp, it->watch.next, __ATOMIC_RELEASE);
			break;
		}
	}
	iomux_unlock(wl);
}

/* Takes it out of the tables (ep lock held); the caller frees it after
 * unlinking its watch. */
static void item_detach(struct iomux_epoll *ep, struct iomux_item *it)
{
	iomux_ready_remove(ep, it);
	it->detached = true;
	if (it->fd >= 0 && it->fd < ep->item_cap && ep->items[it->fd] == it)
		ep->items[it->fd] = NULL;
	if (it->offl_index >= 0) {
		struct iomux_item *last = ep->offl[--ep->offl_count];
		ep->offl[it->offl_index] = last;
		last->offl_index = it->offl_index;
		it->offl_index = -1;
	}
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
	if (need <= *cap)
		return 0;
	int n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, (size_t)n * elem);
	if (!p)
		return -1;
	memset((char *)p + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*arr = p;
	*cap = n;
	return 0;
}

/* ---- the sock_obj kind "epoll" ---- */
static int epoll_obj_close(struct sock_obj *obj)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	return OS_CALL(close, ep->base.fd);
}

/* Unlinks every watch now (sockets must stop touching this set); the
 * memory goes in destroy, after the retirement grace. */
static void epoll_obj_release(struct sock_obj *obj)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	for (int fd = 0;;) {
		iomux_lock(&ep->lock);
		struct iomux_item *it = NULL;
		for (; fd < ep->item_cap && !it; fd++)
			if (ep->items[fd] && ep->items[fd]->watched)
				it = ep->items[fd];
		if (it)
			item_detach(ep, it);
		iomux_unlock(&ep->lock);
		if (!it)
			break;
		watch_unlink(it);
		free(it);
	}
	/* A sleeper armed its signal handler with the fd (sleep_kernel, under
	 * this lock): closed now, its number could be reused by then. */
	iomux_lock(&ep->lock);
	iomux_epoll_armed_drop(ep);
	int fd = ep->wake_fd;
	ep->wake_fd = -1;
	if (ep->sleepers) {
		ep->wake_fd_retired = fd;
		fd = -1;
	}
	iomux_unlock(&ep->lock);
	if (fd >= 0)
		kernel_close(fd);
	stats_iomux_slot_put(ep->stats);
}

static void epoll_obj_destroy(struct sock_obj *obj)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	for (int fd = 0; fd < ep->item_cap; fd++)
		free(ep->items[fd]);
	free(ep->items);
	free(ep->offl);
	if (ep->wake_fd_retired >= 0)
		kernel_close(ep->wake_fd_retired);
	pthread_mutex_destroy(&ep->lock.mutex);
	free(ep);
}

const struct sock_ops iomux_epoll_ops = {
	.kind = "epoll",
	.close = epoll_obj_close,
	.release = epoll_obj_release,
	.destroy = epoll_obj_destroy,
};

int iomux_epoll_create(int kernel_epfd)
{
	struct iomux_epoll *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -1;
	ep->base.ops = &iomux_epoll_ops;
	ep->base.fd = kernel_epfd;
	ep->wake_fd = -1;
	ep->wake_fd_retired = -1;
	iomux_lock_init(&ep->lock);
	if (sock_fd_set(kernel_epfd, &ep->base) != 0) {
		free(ep);
		return -1;
	}
	ep->stats = stats_iomux_slot_get(STATS_IOMUX_EPOLL, kernel_epfd);
	return 0;
}

/* The eventfd is created with the first offloaded member or when the set
 * is exposed: a set of kernel fds only never needs it. Lock held. */
static int wake_fd_ensure(struct iomux_epoll *ep)
{
	if (ep->wake_fd >= 0)
		return 0;
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -1;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = IOMUX_DATA(IOMUX_TAG_INTERNAL, fd) };
	if (kernel_ctl(ep->base.fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		int saved = errno;
		kernel_close(fd);
		errno = saved;
		return -1;
	}
	ep->wake_fd = fd;
	return 0;
}

void iomux_epoll_mark_exposed(struct sock_obj *obj)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	if (__atomic_load_n(&ep->exposed, __ATOMIC_RELAXED))
		return;
	iomux_lock(&ep->lock);
	if (wake_fd_ensure(ep) == 0) {
		ep->exposed = true;
		if (ep->ready_head)
			iomux_wake(ep);
	}
	iomux_unlock(&ep->lock);
}

/* What the kernel side of fd is registered with. For an edge-triggered
 * offloaded fd the write bits stay with user space: the kernel socket,
 * writable too, would otherwise report a second EPOLLOUT edge of its own
 * one call after ours (two reports for one edge). Level-triggered bits of
 * both halves merge into one event per call, so they keep both. */
static struct epoll_event kernel_event(int fd, const struct epoll_event *app, bool offloaded)
{
	uint32_t events = app ? app->events : 0;
	if (offloaded && (events & EPOLLET))
		events &= ~(uint32_t)(EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
	struct epoll_event ev = { .events = events, .data.u64 = IOMUX_DATA(IOMUX_TAG_APP, fd) };
	return ev;
}

/* Offloaded readiness right now (ADD and MOD re-evaluate it, as Linux's
 * ep_insert/ep_modify do). Caller holds no lock. */
static void item_check_ready(struct iomux_epoll *ep, struct iomux_item *it)
{
	uint32_t bits = iomux_obj_ready(it->obj);
	iomux_lock(&ep->lock);
	if (!it->disarmed && (bits & (it->events | EPOLLERR | EPOLLHUP)))
		iomux_ready_push(ep, it);
	iomux_unlock(&ep->lock);
}

static int ctl_add(struct iomux_epoll *ep, int fd, struct epoll_event *event)
{
	struct sock_obj *tracked = sock_fd_get(fd);
	struct sock_obj *obj = iomux_obj_offloaded(tracked) ? tracked : NULL;
	struct sock_obj *watched = obj;
	if (!obj && tracked && (tracked->ops->flags & SOCK_OPS_F_MAY_OFFLOAD))
		watched = tracked;
	struct sock_obj *inner = iomux_epoll_lookup(fd);
	if (inner && inner != &ep->base)
		iomux_epoll_mark_exposed(inner);
	struct iomux_item *it = calloc(1, sizeof(*it));
	if (!it)
		return errno = ENOMEM, -1;
	it->fd = fd;
	it->obj = obj;
	it->watched = watched;
	it->ep = ep;
	it->offl_index = -1;
	it->events = event->events;
	it->data = event->data;

	iomux_lock(&ep->lock);
	bool ok = grow((void **)&ep->items, &ep->item_cap, fd + 1, sizeof(*ep->items)) == 0 &&
		  (!obj || grow((void **)&ep->offl, &ep->offl_cap, ep->offl_count + 1, sizeof(*ep->offl)) == 0) &&
		  (!obj || wake_fd_ensure(ep) == 0);
	iomux_unlock(&ep->lock);
	if (!ok) {
		free(it);
		return errno = ENOMEM, -1;
	}
	/* The kernel decides EEXIST/EBADF/EINVAL/ELOOP/EPERM for us. */
	struct epoll_event kev = kernel_event(fd, event, obj != NULL);
	if (kernel_ctl(ep->base.fd, EPOLL_CTL_ADD, fd, &kev) != 0) {
		free(it);
		return -1;
	}
	iomux_lock(&ep->lock);
	/* A leftover entry means its fd was closed behind our back (the kernel
	 * dropped it, the number came back): the new one replaces it. */
	struct iomux_item *stale = ep->items[fd];
	if (stale)
		item_detach(ep, stale);
	ep->items[fd] = it;
	if (obj) {
		it->offl_index = ep->offl_count;
		ep->offl[ep->offl_count++] = it;
	}
	iomux_unlock(&ep->lock);
	if (stale) {
		if (stale->watched)
			watch_unlink(stale);
		free(stale);
	}
	if (watched)
		watch_link(it);
	if (obj)
		item_check_ready(ep, it);
	return 0;
}

static struct iomux_item *item_get(struct iomux_epoll *ep, int fd)
{
	return fd >= 0 && fd < ep->item_cap ? ep->items[fd] : NULL;
}

int iomux_epoll_ctl(struct sock_obj *obj, int op, int fd, struct epoll_event *event)
{
	struct iomux_epoll *ep = (struct iomux_epoll *)obj;
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !event) {
		errno = EFAULT;
		return -1;
	}
	if (op == EPOLL_CTL_ADD)
		return ctl_add(ep, fd, event);
	if (op == EPOLL_CTL_MOD) {
		iomux_lock(&ep->lock);
		struct iomux_item *cur = item_get(ep, fd);
		bool offloaded = cur && cur->obj;
		iomux_unlock(&ep->lock);
		struct epoll_event kev = kernel_event(fd, event, offloaded);
		if (kernel_ctl(ep->base.fd, EPOLL_CTL_MOD, fd, &kev) != 0)
			return -1;
		iomux_lock(&ep->lock);
		struct iomux_item *it = item_get(ep, fd);
		if (it) {
			it->events = event->events;
			it->data = event->data;
			it->disarmed = false;
			iomux_ready_remove(ep, it);
		}
		iomux_unlock(&ep->lock);
		/* items[fd] cannot be freed concurrently except by another ctl
		 * or a close of fd, both of which race in Linux too. */
		if (it && it->obj)
			item_check_ready(ep, it);
		return 0;
	}
	if (op == EPOLL_CTL_DEL) {
		int ret = kernel_ctl(ep->base.fd, EPOLL_CTL_DEL, fd, NULL);
		int saved = errno;
		/* Dropped even when the kernel says ENOENT/EBADF: then the fd
		 * was closed behind our back and the entry is stale. */
		if (ret == 0 || saved == ENOENT || saved == EBADF) {
			iomux_lock(&ep->lock);
			struct iomux_item *it = item_get(ep, fd);
			if (it)
				item_detach(ep, it);
			iomux_unlock(&ep->lock);
			if (it) {
				if (it->watched)
					watch_unlink(it);
				free(it);
			}
		}
		errno = saved;
		return ret;
	}
	return kernel_ctl(ep->base.fd, op, fd, event);
}

void iomux_promote(struct sock_obj *obj)
{
	if (!iomux_obj_offloaded(obj) || !__atomic_load_n(&obj->watchers, __ATOMIC_ACQUIRE))
		return;
	/* Lock order: watch lock, then each set's lock. The watch lock also
	 * keeps every listed item (and its set) alive. */
	struct iomux_lock *wl = iomux_watch_lock(obj);
	iomux_lock(wl);
	for (struct iomux_watch *w = obj->watchers; w; w = w->next) {
		struct iomux_item *it = w->item;
		struct iomux_epoll *ep = it->ep;
		iomux_lock(&ep->lock);
		if (it->obj || it->detached) {
			iomux_unlock(&ep->lock);
			continue;
		}
		bool ok = grow((void **)&ep->offl, &ep->offl_cap, ep->offl_count + 1, sizeof(*ep->offl)) == 0 &&
			  wake_fd_ensure(ep) == 0;
		if (ok) {
			it->obj = obj;
			it->offl_index = ep->offl_count;
			ep->offl[ep->offl_count++] = it;
		}
		struct epoll_event app = { .events = it->events };
		iomux_unlock(&ep->lock);
		if (!ok) {
			vlog_warn("fd %d: out of memory: epoll keeps watching it through the kernel only", it->fd);
			continue;
		}
		/* Edge-triggered write bits move to user space (see kernel_event). */
		if (it->events & EPOLLET) {
			struct epoll_event kev = kernel_event(it->fd, &app, true);
			kernel_ctl(ep->base.fd, EPOLL_CTL_MOD, it->fd, &kev);
		}
		item_check_ready(ep, it);
	}
	iomux_unlock(wl);
}

void iomux_forget(struct sock_obj *obj)
{
	struct iomux_lock *wl = iomux_watch_lock(obj);
	for (;;) {
		iomux_lock(wl);
		struct iomux_watch *w = obj->watchers;
		struct iomux_item *it = w ? w->item : NULL;
		if (it) {
			__atomic_store_n(&obj->watchers, w->next, __ATOMIC_RELEASE);
			iomux_lock(&it->ep->lock);
			item_detach(it->ep, it);
			iomux_unlock(&it->ep->lock);
		}
		iomux_unlock(wl);
		if (!it)
			return;
		free(it);
	}
}
