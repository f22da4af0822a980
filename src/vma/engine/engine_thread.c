/* The internal thread: sleeps in epoll_wait on the registered fds until the
 * next timer deadline, quantised to VMA_TIMER_RESOLUTION_MSEC so idle
 * wake-ups are coalesced. Every call libvma interposes is libc's own
 * (os/os.h): inside libvma.so the plain names (epoll_wait, write, close...)
 * are our wrappers. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "config/cfg_params.h"
#include "engine/engine_internal.h"
#include "log/vlog.h"
#include "os/os.h"

struct engine_state engine = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.callback_done = PTHREAD_COND_INITIALIZER,
	.progress = { .heap_index = -1 },
	.next_fd_id = 1,
	.start_lock = PTHREAD_MUTEX_INITIALIZER,
	.epoll_fd = -1,
	.wake_fd = -1,
	.done_fd = -1,
};

#define ENGINE_WAKE_DATA 0u
#define ENGINE_EVENTS_MAX 32

void engine_close_raw(int fd)
{
	if (fd >= 0)
		os_close_nocancel(fd);
}

static int engine_eventfd_raw(void)
{
	long fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return fd < 0 ? -errno : (int)fd;
}

int engine_fds_open_locked(void)
{
	if (engine.epoll_fd >= 0)
		return 0;
	int wake = engine_eventfd_raw();
	int done = wake >= 0 ? engine_eventfd_raw() : wake;
	long epfd = done >= 0 ? OS_CALL(epoll_create1, EPOLL_CLOEXEC) : -1;
	int err = done < 0 ? -done : errno;
	if (epfd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = ENGINE_WAKE_DATA };
		if (OS_CALL(epoll_ctl, (int)epfd, EPOLL_CTL_ADD, wake, &ev) == 0) {
			engine.wake_fd = wake;
			engine.done_fd = done;
			engine.epoll_fd = (int)epfd;
			return 0;
		}
		err = errno;
		engine_close_raw((int)epfd);
	}
	engine_close_raw(wake);
	engine_close_raw(done);
	return -err;
}

void engine_wake(void)
{
	int fd = __atomic_load_n(&engine.wake_fd, __ATOMIC_ACQUIRE);
	if (fd < 0)
		return;
	int saved = errno;
	uint64_t one = 1;
	(void)!OS_CALL(write, fd, &one, sizeof(one));
	errno = saved;
}

bool engine_running(void)
{
	return __atomic_load_n(&engine.thread_state, __ATOMIC_ACQUIRE) == ENGINE_THREAD_RUNNING;
}

bool engine_on_thread(void)
{
	return engine_running() && pthread_equal(pthread_self(), engine.thread);
}

/* ---- event fds ---- */

static struct engine_fd_entry *fd_find_locked(int fd)
{
	for (size_t i = 0; i < engine.fd_len; i++)
		if (engine.fds[i].fd == fd)
			return &engine.fds[i];
	return NULL;
}

int engine_fd_add(int fd, uint32_t events, engine_fd_fn fn, void *arg)
{
	if (fd < 0 || !fn)
		return fd < 0 ? -EBADF : -EINVAL;
	pthread_mutex_lock(&engine.lock);
	int ret = engine_fds_open_locked();
	if (ret == 0 && fd_find_locked(fd))
		ret = -EEXIST;
	if (ret == 0 && engine.fd_len == engine.fd_cap) {
		size_t cap = engine.fd_cap ? engine.fd_cap * 2 : 16;
		struct engine_fd_entry *grown = realloc(engine.fds, cap * sizeof(*grown));
		if (grown) {
			engine.fds = grown;
			engine.fd_cap = cap;
		} else {
			ret = -ENOMEM;
		}
	}
	if (ret == 0) {
		uint32_t id = engine.next_fd_id++;
		if (engine.next_fd_id == ENGINE_WAKE_DATA)
			engine.next_fd_id = 1;
		struct epoll_event ev = { .events = events, .data.u64 = ((uint64_t)id << 32) | (uint32_t)fd };
		if (OS_CALL(epoll_ctl, engine.epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
			ret = -errno;
		else
			engine.fds[engine.fd_len++] = (struct engine_fd_entry){ fd, id, events, fn, arg };
	}
	pthread_mutex_unlock(&engine.lock);
	return ret;
}

int engine_fd_del(int fd)
{
	pthread_mutex_lock(&engine.lock);
	struct engine_fd_entry *entry = fd_find_locked(fd);
	if (!entry) {
		pthread_mutex_unlock(&engine.lock);
		return -ENOENT;
	}
	uint32_t id = entry->id;
	/* EBADF/ENOENT: the owner closed the fd first; nothing to undo. */
	OS_CALL(epoll_ctl, engine.epoll_fd, EPOLL_CTL_DEL, fd, NULL);
	*entry = engine.fds[--engine.fd_len];
	while (engine.running_fd_id == id && !pthread_equal(engine.running_fd_thread, pthread_self()))
		os_cond_wait_nocancel(&engine.callback_done, &engine.lock);   /* under engine.lock: os.h */
	pthread_mutex_unlock(&engine.lock);
	return 0;
}

int engine_fd_rearm(int fd)
{
	pthread_mutex_lock(&engine.lock);
	struct engine_fd_entry *entry = fd_find_locked(fd);
	int ret = -ENOENT;
	if (entry) {
		struct epoll_event ev = { .events = entry->events,
					  .data.u64 = ((uint64_t)entry->id << 32) | (uint32_t)fd };
		ret = OS_CALL(epoll_ctl, engine.epoll_fd, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -errno;
	}
	pthread_mutex_unlock(&engine.lock);
	return ret;
}

static void engine_dispatch(const struct epoll_event *ev)
{
	if (ev->data.u64 == ENGINE_WAKE_DATA) {
		uint64_t count;
		while (OS_CALL(read, engine.wake_fd, &count, sizeof(count)) > 0)
			;
		return;
	}
	int fd = (int)(uint32_t)ev->data.u64;
	uint32_t id = (uint32_t)(ev->data.u64 >> 32);
	pthread_mutex_lock(&engine.lock);
	struct engine_fd_entry *entry = fd_find_locked(fd);
	if (!entry || entry->id != id) {
		/* Deleted (or replaced) after epoll_wait returned. */
		pthread_mutex_unlock(&engine.lock);
		return;
	}
	engine_fd_fn fn = entry->fn;
	void *arg = entry->arg;
	engine.running_fd_id = id;
	engine.running_fd_thread = pthread_self();
	pthread_mutex_unlock(&engine.lock);
	fn(fd, ev->events, arg);
	pthread_mutex_lock(&engine.lock);
	engine.running_fd_id = 0;
	pthread_cond_broadcast(&engine.callback_done);
	pthread_mutex_unlock(&engine.lock);
}

/* ---- placement: affinity and cpuset ---- */

static int affinity_parse_hex(const char *digits, cpu_set_t *set)
{
	size_t len = strlen(digits);
	if (len == 0)
		return -1;
	int cpu = 0;
	for (size_t i = len; i-- > 0; cpu += 4) {
		int c = tolower((unsigned char)digits[i]);
		int nibble = isdigit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
		if (nibble < 0)
			return -1;
		for (int bit = 0; bit < 4; bit++) {
			if (!(nibble & (1 << bit)))
				continue;
			if (cpu + bit >= CPU_SETSIZE)
				return -1;
			CPU_SET(cpu + bit, set);
		}
	}
	return CPU_COUNT(set) > 0 ? 1 : -1;
}

static int affinity_parse_number(const char **text)
{
	if (!isdigit((unsigned char)**text))
		return -1;
	char *end;
	long value = strtol(*text, &end, 10);
	*text = end;
	return value < CPU_SETSIZE ? (int)value : -1;
}

static int affinity_parse_list(const char *text, cpu_set_t *set)
{
	for (;;) {
		int first = affinity_parse_number(&text);
		int last = first;
		if (first < 0)
			return -1;
		if (*text == '-') {
			text++;
			last = affinity_parse_number(&text);
			if (last < first)
				return -1;
		}
		for (int cpu = first; cpu <= last; cpu++)
			CPU_SET(cpu, set);
		if (*text == '\0')
			return 1;
		if (*text++ != ',')
			return -1;
	}
}

int engine_affinity_parse(const char *text, void *cpu_set)
{
	cpu_set_t *set = cpu_set;
	CPU_ZERO(set);
	if (!text)
		return 0;
	while (isspace((unsigned char)*text))
		text++;
	char value[256];
	size_t len = strlen(text);
	while (len > 0 && isspace((unsigned char)text[len - 1]))
		len--;
	if (len >= sizeof(value))
		return -1;
	memcpy(value, text, len);
	value[len] = '\0';
	if (len == 0 || strcmp(value, "-1") == 0)
		return 0;
	int ret = (value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) ? affinity_parse_hex(value + 2, set)
									  : affinity_parse_list(value, set);
	if (ret < 0)
		CPU_ZERO(set);
	return ret;
}

static void engine_join_cpuset(const char *dir)
{
	/* cgroup v1 cpusets take thread ids in "tasks"; a v2 threaded
	 * cgroup takes them in "cgroup.threads". */
	static const char *const files[] = { "tasks", "cgroup.threads" };
	int err = ENOENT;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[PATH_MAX];
		if (snprintf(path, sizeof(path), "%s/%s", dir, files[i]) >= (int)sizeof(path)) {
			err = ENAMETOOLONG;
			break;
		}
		long fd = openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			err = errno;
			if (err == ENOENT)
				continue;
			break;
		}
		char tid[24];
		int len = snprintf(tid, sizeof(tid), "%ld\n", (long)gettid());
		long written = OS_CALL(write, (int)fd, tid, (size_t)len);
		err = written == len ? 0 : (written < 0 ? errno : EIO);
		engine_close_raw((int)fd);
		break;
	}
	if (err)
		vlog_warn("VMA_INTERNAL_THREAD_CPUSET=%s: cannot move the internal thread there (%s); it stays in "
			  "the process's cpuset", dir, strerror(err));
	else
		vlog_debug("internal thread joined cpuset %s", dir);
}

/* ---- the thread ---- */

static int engine_sleep_ms(int next)
{
	if (next <= 0)
		return next;
	int resolution = (int)engine_timer_resolution_ms();
	long rounded = ((long)next + resolution - 1) / resolution * resolution;
	return rounded > INT32_MAX ? INT32_MAX : (int)rounded;
}

static void *engine_thread_main(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "vma-internal");
	if (engine.affinity_set && pthread_setaffinity_np(pthread_self(), sizeof(engine.cpu_affinity),
							   &engine.cpu_affinity) != 0)
		vlog_warn("VMA_INTERNAL_THREAD_AFFINITY=%s: cannot bind the internal thread to those CPUs; "
			  "running unbound", g_cfg.internal_thread_affinity);
	if (g_cfg.internal_thread_cpuset[0])
		engine_join_cpuset(g_cfg.internal_thread_cpuset);

	struct epoll_event events[ENGINE_EVENTS_MAX];
	bool warned = false;
	while (!__atomic_load_n(&engine.stop, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&engine.signal_request, __ATOMIC_ACQUIRE)) {
		int timeout = engine_sleep_ms(engine_tick());
		long n = OS_CALL(epoll_wait, engine.epoll_fd, events, ENGINE_EVENTS_MAX, timeout);
		if (n < 0) {
			if (errno != EINTR && !warned) {
				warned = true;
				vlog_warn("internal thread: epoll_wait failed (%s)", strerror(errno));
			}
			if (errno != EINTR) {
				struct timespec pause = { 0, 1000000L * (long)engine_timer_resolution_ms() };
				OS_CALL(nanosleep, &pause, NULL);
			}
			continue;
		}
		for (long i = 0; i < n; i++)
			engine_dispatch(&events[i]);
	}
	if (__atomic_load_n(&engine.signal_request, __ATOMIC_ACQUIRE)) {
		/* Asked from a signal handler: hooks run here, in a normal
		 * thread context, while the handler waits on done_fd. */
		engine_run_exit_hooks(false);
		uint64_t one = 1;
		(void)!OS_CALL(write, engine.done_fd, &one, sizeof(one));
	}
	return NULL;
}

static void engine_load_affinity(void)
{
	const char *text = g_cfg.internal_thread_affinity;
	int ret = engine_affinity_parse(text, &engine.cpu_affinity);
	if (ret < 0)
		vlog_warn("VMA_INTERNAL_THREAD_AFFINITY=%s is not a CPU mask (0x5) or list (0,2,7-9); using -1 "
			  "(no affinity)", text);
	engine.affinity_set = ret > 0;
}

int engine_start(void)
{
	if (engine_running())
		return 0;
	if (__atomic_load_n(&engine.shutting_down, __ATOMIC_ACQUIRE))
		return -ESHUTDOWN;
	pthread_mutex_lock(&engine.start_lock);
	int ret = 0;
	if (__atomic_load_n(&engine.shutting_down, __ATOMIC_ACQUIRE))
		ret = -ESHUTDOWN;
	else if (engine.thread_state == ENGINE_THREAD_RUNNING)
		ret = 0;
	else {
		pthread_mutex_lock(&engine.lock);
		ret = engine_fds_open_locked();
		pthread_mutex_unlock(&engine.lock);
		if (ret == 0) {
			engine_load_affinity();
			/* Blocked before the thread exists, so no asynchronous
			 * signal is ever delivered to it: they are the app's. */
			sigset_t all, saved;
			sigfillset(&all);
			static const int synchronous[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };
			for (size_t i = 0; i < sizeof(synchronous) / sizeof(synchronous[0]); i++)
				sigdelset(&all, synchronous[i]);
			pthread_sigmask(SIG_SETMASK, &all, &saved);
			__atomic_store_n(&engine.stop, 0, __ATOMIC_RELEASE);
			ret = -pthread_create(&engine.thread, NULL, engine_thread_main, NULL);
			pthread_sigmask(SIG_SETMASK, &saved, NULL);
		}
		if (ret == 0)
			__atomic_store_n(&engine.thread_state, ENGINE_THREAD_RUNNING, __ATOMIC_RELEASE);
		else
			vlog_warn("cannot start the internal thread (%s): timers and idle rings progress only "
				  "when the application calls libvma", strerror(-ret));
	}
	pthread_mutex_unlock(&engine.start_lock);
	return ret;
}
