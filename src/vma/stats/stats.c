/* The statistics block: file creation, mapping, slot tables, fork, exit. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "log/vlog.h"
#include "stats/stats.h"
#include "stats/stats_format.h"
#include "stats/stats_internal.h"
#include "os/os.h"

struct stats_state stats_g = { .stats_file_fd = -1 };
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

/* Written to by sockets/rings that found no free slot; never read. */
static struct stats_socket dummy_socket;
static struct stats_ring dummy_ring;
static struct stats_pool dummy_pool;
static struct stats_iomux dummy_iomux;

static void close_fd(int fd)
{
	if (fd >= 0)
		os_close_nocancel(fd);
}

static uint64_t align8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* Fills counts, sizes and offsets; returns the total size. */
static uint64_t layout_plan(struct stats_header *h, uint32_t fd_num)
{
	uint64_t off = align8(sizeof(*h));
	h->socket_slots = fd_num;
	h->ring_slots = STATS_RING_SLOTS;
	h->pool_slots = STATS_POOL_SLOTS;
	h->epoll_slots = STATS_EPOLL_SLOTS;
	h->mc_slots = STATS_MC_SLOTS;
	h->socket_size = sizeof(struct stats_socket);
	h->ring_size = sizeof(struct stats_ring);
	h->pool_size = sizeof(struct stats_pool);
	h->iomux_size = sizeof(struct stats_iomux);
	h->mc_size = sizeof(struct stats_mc_group);
	h->socket_off = off; off = align8(off + (uint64_t)fd_num * h->socket_size);
	h->ring_off = off;   off = align8(off + (uint64_t)h->ring_slots * h->ring_size);
	h->pool_off = off;   off = align8(off + (uint64_t)h->pool_slots * h->pool_size);
	h->select_off = off; off = align8(off + h->iomux_size);
	h->poll_off = off;   off = align8(off + h->iomux_size);
	h->epoll_off = off;  off = align8(off + (uint64_t)h->epoll_slots * h->iomux_size);
	h->mc_off = off;     off = align8(off + (uint64_t)h->mc_slots * h->mc_size);
	return off;
}

static void read_comm(char *out, size_t size)
{
	int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? OS_CALL(read, fd, out, size - 1) : -1;
	close_fd(fd);
	if (n < 0)
		n = 0;
	out[n] = '\0';
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = '\0';
}

static void fill_header(struct stats_header *h, const struct stats_settings *st, uint32_t fd_num,
			uint64_t size)
{
	layout_plan(h, fd_num);
	h->magic = STATS_MAGIC;
	h->layout_version = STATS_LAYOUT_VERSION;
	h->header_size = sizeof(*h);
	h->total_size = size;
	h->pid = (int32_t)getpid();
	h->cpu_usage_enabled = st->cpu_usage ? 1 : 0;
	if (st->process_name)
		snprintf(h->process_name, sizeof(h->process_name), "%s", st->process_name);
	else
		read_comm(h->process_name, sizeof(h->process_name));
	snprintf(h->lib_version, sizeof(h->lib_version), "%s", st->lib_version ? st->lib_version : "");
	struct stats_iomux *sel = (struct stats_iomux *)((char *)h + stats_g.sec.select_off);
	struct stats_iomux *pol = (struct stats_iomux *)((char *)h + stats_g.sec.poll_off);
	sel->kind = STATS_IOMUX_SELECT; sel->epfd = -1;
	pol->kind = STATS_IOMUX_POLL;   pol->epfd = -1;
}

static void warn_refused(const char *path, const char *why)
{
	vlog_warn("VMA_STATS_SHMEM_DIR: refusing the statistics file %s: %s. This process's "
		  "statistics stay private and vma_stats will not see it; remove the file, or set "
		  "VMA_STATS_SHMEM_DIR to a directory only this user can write", path, why);
}

/* Checks what we just created: a regular file of ours, mode 0600 whatever
 * the umask, one name. Returns fd, or -1 (file removed) after a warning. */
static int check_created(int fd, const char *path)
{
	struct stat st;
	char why[96] = "";
	if (fchmod(fd, 0600) != 0)
		snprintf(why, sizeof(why), "its mode cannot be set to 0600 (%s)", strerror(errno));
	else if (fstat(fd, &st) != 0)
		snprintf(why, sizeof(why), "fstat failed (%s)", strerror(errno));
	else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600 ||
		 st.st_nlink != 1)
		snprintf(why, sizeof(why), "it was created with owner uid %u, mode %04o, %u links",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)st.st_nlink);
	if (!why[0])
		return fd;
	close_fd(fd);
	unlink(path);
	warn_refused(path, why);
	return -1;
}

/* Creates path for this process alone and returns its fd, or -1 after one
 * warning. Never opens a name that exists: O_EXCL, and O_NOFOLLOW so a
 * symbolic link is not followed either. An existing name is removed (once)
 * only when it is a regular file of our own uid: it carries our pid, so it
 * was left by a process that had this pid before us, or by this process
 * before an exec, and nobody writes to it any more. Anything else (a
 * symbolic link, another user's file, a FIFO) was put there by someone
 * else and is refused. */
static int create_private(const char *path)
{
	for (int attempt = 0;; attempt++) {
		int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
			      0600);
		if (fd >= 0)
			return check_created(fd, path);
		if (errno != EEXIST) {
			vlog_warn("cannot create statistics file %s (%s); vma_stats will not see "
				  "this process", path, strerror(errno));
			return -1;
		}
		struct stat st;
		char why[96] = "";
		if (lstat(path, &st) != 0) {
			if (errno == ENOENT && attempt == 0)
				continue; /* gone in between: try again */
			snprintf(why, sizeof(why), "it exists but cannot be examined (%s)",
				 strerror(errno));
		} else if (S_ISLNK(st.st_mode)) {
			snprintf(why, sizeof(why), "it is a symbolic link");
		} else if (!S_ISREG(st.st_mode)) {
			snprintf(why, sizeof(why), "it is not a regular file");
		} else if (st.st_uid != geteuid()) {
			snprintf(why, sizeof(why), "it belongs to another user (uid %u)",
				 (unsigned)st.st_uid);
		} else if (attempt > 0) {
			snprintf(why, sizeof(why), "it came back after the stale file was removed");
		} else if (unlink(path) != 0 && errno != ENOENT) {
			snprintf(why, sizeof(why), "a stale file of ours cannot be removed (%s)",
				 strerror(errno));
		}
		if (why[0]) {
			warn_refused(path, why);
			return -1;
		}
	}
}

/* Creates the file and maps it; at fixed_addr (MAP_FIXED) when given. */
static void *map_new_file(const char *path, uint64_t size, void *fixed_addr, const void *content)
{
	int fd = create_private(path);
	if (fd < 0)
		return NULL;
	void *addr = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) == 0) {
		if (content) {
			/* The copy goes through write() before the remap so the child
			 * never sees a moment where its slots are missing. */
			const char *p = content;
			uint64_t left = size;
			while (left) {
				ssize_t n = OS_CALL(write, fd, p, left);
				if (n <= 0 && errno != EINTR)
					break;
				if (n > 0) { p += n; left -= (uint64_t)n; }
			}
			if (left)
				goto out;
		}
		addr = mmap(fixed_addr, size, PROT_READ | PROT_WRITE,
			    MAP_SHARED | (fixed_addr ? MAP_FIXED : 0), fd, 0);
	}
out:;
	int err = errno;
	close_fd(fd);
	if (addr == MAP_FAILED) {
		vlog_warn("cannot map statistics file %s (%s); vma_stats will not see this process",
			  path, strerror(err));
		unlink(path);
		return NULL;
	}
	return addr;
}

/* ---- files left by dead processes ---- */

/* Entries of the directory a process start looks at, at most: the scan
 * must stay cheap however crowded the directory (/tmp by default). */
#define STATS_SWEEP_MAX_ENTRIES 4096
/* Children noted at once (a fork-per-connection server's children come
 * and go; beyond this many alive, older ones are forgotten). */
#define STATS_CHILDREN_MAX 256

static int stats_children[STATS_CHILDREN_MAX];
static unsigned stats_nchildren;

static bool stats_pid_gone(int pid)
{
	return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Removes name (in dirfd) when it is a regular file of our user, or of
 * anyone when we are root (a dead process's file another user's process
 * could otherwise meet under its own pid, and be refused); never through a
 * symbolic link. */
static void stats_remove_if_ours(int dirfd, const char *name)
{
	struct stat st;
	uid_t me = geteuid();
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && (st.st_uid == me || me == 0))
		unlinkat(dirfd, name, 0);
}

static void stats_sweep_dead(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	size_t plen = strlen(STATS_FILE_PREFIX);
	struct dirent *e;
	for (unsigned seen = 0; seen < STATS_SWEEP_MAX_ENTRIES && (e = readdir(d)) != NULL; seen++) {
		if (strncmp(e->d_name, STATS_FILE_PREFIX, plen) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (end == e->d_name + plen || *end || pid <= 0 || pid > 0x7fffffffL || pid == (long)getpid())
			continue;
		if (stats_pid_gone((int)pid))
			stats_remove_if_ours(dirfd(d), e->d_name);
	}
	closedir(d);
}

/* The directory part of this process's file name. */
static int stats_dir_of_path(char *out, size_t size)
{
	const char *slash = strrchr(stats_g.path, '/');
	if (!stats_g.path[0] || !slash)
		return -1;
	int n = snprintf(out, size, "%.*s", (int)(slash - stats_g.path), stats_g.path);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

void stats_note_child(int pid)
{
	pthread_mutex_lock(&stats_lock);
	if (stats_g.path[0] && pid > 0) {
		if (stats_nchildren == STATS_CHILDREN_MAX) {
			/* Forget the oldest: a child that lives long enough to be
			 * pushed out is left to the next process start's sweep. */
			memmove(stats_children, stats_children + 1, (STATS_CHILDREN_MAX - 1) * sizeof(*stats_children));
			stats_nchildren--;
		}
		stats_children[stats_nchildren++] = pid;
	}
	pthread_mutex_unlock(&stats_lock);
}

int stats_reap_children(void)
{
	pthread_mutex_lock(&stats_lock);
	char dir[sizeof(stats_g.path)];
	int dfd = stats_nchildren && stats_dir_of_path(dir, sizeof(dir)) == 0
			  ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
			  : -1;
	unsigned kept = 0;
	for (unsigned i = 0; i < stats_nchildren; i++) {
		int pid = stats_children[i];
		if (!stats_pid_gone(pid)) {
			stats_children[kept++] = pid;
			continue;
		}
		if (dfd >= 0) {
			char name[32];
			snprintf(name, sizeof(name), "%s%d", STATS_FILE_PREFIX, pid);
			stats_remove_if_ours(dfd, name);
		}
	}
	stats_nchildren = kept;
	if (dfd >= 0)
		close_fd(dfd);
	pthread_mutex_unlock(&stats_lock);
	return kept > 0;
}

int stats_open(const struct stats_settings *st)
{
	if (stats_g.block)
		return 0;
	int fd_num = st->fd_num;
	if (fd_num < 0 || fd_num > (int)STATS_MAX_SOCKETS) {
		vlog_warn("VMA_STATS_FD_NUM=%d is out of range 0..%u, using %u", fd_num,
			  STATS_MAX_SOCKETS, fd_num < 0 ? 0 : STATS_MAX_SOCKETS);
		fd_num = fd_num < 0 ? 0 : (int)STATS_MAX_SOCKETS;
	}
	struct stats_header plan;
	memset(&plan, 0, sizeof(plan));
	uint64_t size = layout_plan(&plan, (uint32_t)fd_num);
	stats_g.sec = (struct stats_sections){
		.socket_off = plan.socket_off, .ring_off = plan.ring_off, .pool_off = plan.pool_off,
		.select_off = plan.select_off, .poll_off = plan.poll_off, .epoll_off = plan.epoll_off,
		.mc_off = plan.mc_off, .socket_slots = plan.socket_slots,
		.ring_slots = plan.ring_slots, .pool_slots = plan.pool_slots,
		.epoll_slots = plan.epoll_slots, .mc_slots = plan.mc_slots,
	};
	int rc = 0;
	void *addr = NULL;
	stats_g.path[0] = '\0';
	if (st->shmem_dir && st->shmem_dir[0]) {
		int n = snprintf(stats_g.path, sizeof(stats_g.path), "%s/%s%d", st->shmem_dir,
				 STATS_FILE_PREFIX, (int)getpid());
		if (n < 0 || (size_t)n >= sizeof(stats_g.path)) {
			vlog_warn("VMA_STATS_SHMEM_DIR=%s is too long, no statistics file", st->shmem_dir);
			rc = -1;
		} else {
			stats_sweep_dead(st->shmem_dir);
			addr = map_new_file(stats_g.path, size, NULL, NULL);
			if (!addr)
				rc = -1; /* map_new_file warned */
		}
		if (!addr)
			stats_g.path[0] = '\0';
	}
	if (!addr) {
		addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (addr == MAP_FAILED) {
			vlog_warn("cannot allocate the statistics block (%s)", strerror(errno));
			return -1;
		}
	}
	fill_header(addr, st, (uint32_t)fd_num, size);
	stats_g.size = size;
	stats_g.owner_pid = getpid();
	stats_g.stats_file_fd = -1;
	if (st->stats_file && st->stats_file[0]) {
		char why[160];
		int refused;
		stats_g.stats_file_fd = vlog_open_append(st->stats_file, why, sizeof(why), &refused);
		if (stats_g.stats_file_fd < 0 && refused)
			vlog_warn("VMA_STATS_FILE=%s refused: %s; socket records are not written (name "
				  "a file of your own, in a directory only you can write)",
				  st->stats_file, why);
		else if (stats_g.stats_file_fd < 0)
			vlog_warn("VMA_STATS_FILE=%s cannot be opened (%s), socket records are not written",
				  st->stats_file, why);
	}
	__atomic_store_n(&stats_g.block, (struct stats_header *)addr, __ATOMIC_RELEASE);
	return rc;
}

void stats_close(void)
{
	/* The files of children gone before us (the timer may not have come
	 * round since): a fork-per-connection server stopped right after its
	 * last connection. */
	if (stats_g.owner_pid == getpid())
		stats_reap_children();
	pthread_mutex_lock(&stats_lock);
	struct stats_header *h = stats_g.block;
	stats_g.block = NULL;
	if (h) {
		/* Only the process that created the file removes it. */
		if (stats_g.path[0] && stats_g.owner_pid == getpid())
			unlink(stats_g.path);
		munmap(h, stats_g.size);
	}
	stats_g.path[0] = '\0';
	close_fd(stats_g.stats_file_fd);
	stats_g.stats_file_fd = -1;
	pthread_mutex_unlock(&stats_lock);
}

void stats_after_fork_child(void)
{
	pthread_mutex_init(&stats_lock, NULL);
	struct stats_header *h = stats_g.block;
	if (!h || stats_g.owner_pid == getpid())
		return;
	stats_g.owner_pid = getpid();
	stats_nchildren = 0;   /* the parent's children are not ours */
	if (stats_g.path[0]) {
		char path[sizeof(stats_g.path)];
		const char *slash = strrchr(stats_g.path, '/');
		int dir_len = slash ? (int)(slash - stats_g.path) : 0;
		snprintf(path, sizeof(path), "%.*s/%s%d", dir_len, stats_g.path, STATS_FILE_PREFIX,
			 (int)getpid());
		if (map_new_file(path, stats_g.size, h, h)) {
			snprintf(stats_g.path, sizeof(stats_g.path), "%s", path);
		} else {
			/* Keep writing somewhere harmless rather than into the parent's file. */
			void *anon = mmap(NULL, stats_g.size, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (anon != MAP_FAILED) {
				memcpy(anon, h, stats_g.size);
				mremap(anon, stats_g.size, stats_g.size, MREMAP_MAYMOVE | MREMAP_FIXED, h);
			}
			stats_g.path[0] = '\0';
		}
	}
	h->pid = (int32_t)getpid();
	read_comm(h->process_name, sizeof(h->process_name));
}

void stats_unlink_own_file(void)
{
	/* Plain reads and unlink(2): async-signal-safe. */
	if (stats_g.block && stats_g.path[0] && stats_g.owner_pid == getpid())
		unlink(stats_g.path);
}

const char *stats_path(void) { return stats_g.path; }
const struct stats_header *stats_block(void) { return stats_g.block; }

struct stats_socket *stats_socket_sink(void)
{
	return &dummy_socket;
}

int stats_slot_is_dummy(const void *slot)
{
	return slot == &dummy_socket || slot == &dummy_ring || slot == &dummy_pool ||
	       slot == &dummy_iomux;
}

/* Start of a section of the block (offsets from stats_g.sec only). */
static void *section(uint64_t off) { return (char *)stats_g.block + off; }

struct stats_socket *stats_sockets(void)
{
	return stats_g.block ? section(stats_g.sec.socket_off) : NULL;
}

/* Finds a free slot (in_use == 0) in a table; NULL when full. A slot's
 * in_use is data: whatever value it holds, only slots of this table are
 * looked at. */
static void *claim(uint64_t off, uint32_t count, uint32_t size)
{
	if (!stats_g.block)
		return NULL;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t *in_use = (uint32_t *)((char *)section(off) + (uint64_t)i * size);
		if (!__atomic_load_n(in_use, __ATOMIC_RELAXED)) {
			memset(in_use, 0, size);
			return in_use;
		}
	}
	return NULL;
}

static void publish(uint32_t *in_use) { __atomic_store_n(in_use, 1, __ATOMIC_RELEASE); }

struct stats_socket *stats_socket_slot_get(int fd, uint32_t proto)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_socket *s = NULL;
	if (stats_g.block)
		s = claim(stats_g.sec.socket_off, stats_g.sec.socket_slots, sizeof(*s));
	if (s) {
		s->fd = fd;
		s->proto = proto;
		s->offloaded = 1;
		publish(&s->in_use);
	}
	pthread_mutex_unlock(&stats_lock);
	return s ? s : &dummy_socket;
}

void stats_socket_slot_put(struct stats_socket *s)
{
	if (!s || s == &dummy_socket)
		return;
	stats_write_file_record(s);
	pthread_mutex_lock(&stats_lock);
	__atomic_store_n(&s->in_use, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&stats_lock);
}

struct stats_ring *stats_ring_slot_get(uint32_t id, const char *ifname)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_ring *r = NULL;
	if (stats_g.block)
		r = claim(stats_g.sec.ring_off, stats_g.sec.ring_slots, sizeof(*r));
	if (r) {
		r->id = id;
		snprintf(r->ifname, sizeof(r->ifname), "%s", ifname ? ifname : "");
		publish(&r->in_use);
	}
	pthread_mutex_unlock(&stats_lock);
	return r ? r : &dummy_ring;
}

static void release(uint32_t *in_use, const void *dummy)
{
	if (!in_use || (const void *)in_use == dummy)
		return;
	pthread_mutex_lock(&stats_lock);
	__atomic_store_n(in_use, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&stats_lock);
}

void stats_ring_slot_put(struct stats_ring *r) { release(r ? &r->in_use : NULL, &dummy_ring); }

struct stats_pool *stats_pool_slot_get(uint32_t id, uint32_t kind)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_pool *p = NULL;
	if (stats_g.block)
		p = claim(stats_g.sec.pool_off, stats_g.sec.pool_slots, sizeof(*p));
	if (p) {
		p->id = id;
		p->kind = kind;
		publish(&p->in_use);
	}
	pthread_mutex_unlock(&stats_lock);
	return p ? p : &dummy_pool;
}

void stats_pool_slot_put(struct stats_pool *p) { release(p ? &p->in_use : NULL, &dummy_pool); }

struct stats_iomux *stats_iomux_slot_get(uint32_t kind, int epfd)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_header *h = stats_g.block;
	struct stats_iomux *m = NULL;
	if (h && (kind == STATS_IOMUX_SELECT || kind == STATS_IOMUX_POLL)) {
		m = section(kind == STATS_IOMUX_SELECT ? stats_g.sec.select_off : stats_g.sec.poll_off);
		publish(&m->in_use);
	} else if (h && kind == STATS_IOMUX_EPOLL) {
		m = claim(stats_g.sec.epoll_off, stats_g.sec.epoll_slots, sizeof(*m));
		if (m) {
			m->kind = kind;
			m->epfd = epfd;
			publish(&m->in_use);
		}
	}
	pthread_mutex_unlock(&stats_lock);
	return m ? m : &dummy_iomux;
}

void stats_iomux_slot_put(struct stats_iomux *m)
{
	/* Which table m is in comes from its address, not from m->kind (data). */
	if (!m || !stats_g.block)
		return;
	const char *first = section(stats_g.sec.epoll_off);
	const char *end = first + (uint64_t)stats_g.sec.epoll_slots * sizeof(*m);
	if ((const char *)m >= first && (const char *)m < end)
		release(&m->in_use, &dummy_iomux);
}

void stats_mc_group_ref(int fd, uint32_t group)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_header *h = stats_g.block;
	struct stats_mc_group *free_slot = NULL;
	for (uint32_t i = 0; h && i < stats_g.sec.mc_slots; i++) {
		struct stats_mc_group *g = (struct stats_mc_group *)section(stats_g.sec.mc_off) + i;
		if (g->refs && g->fd == fd && g->group == group) {
			g->refs++;
			free_slot = NULL;
			goto out;
		}
		if (!g->refs && !free_slot)
			free_slot = g;
	}
	if (free_slot) {
		free_slot->fd = fd;
		free_slot->group = group;
		__atomic_store_n(&free_slot->refs, 1, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&stats_lock);
}

void stats_mc_group_unref(int fd, uint32_t group)
{
	pthread_mutex_lock(&stats_lock);
	struct stats_header *h = stats_g.block;
	for (uint32_t i = 0; h && i < stats_g.sec.mc_slots; i++) {
		struct stats_mc_group *g = (struct stats_mc_group *)section(stats_g.sec.mc_off) + i;
		if (g->refs && g->fd == fd && g->group == group) {
			__atomic_store_n(&g->refs, g->refs - 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&stats_lock);
}

static uint32_t stats_zero_count;

uint32_t stats_zero_epoch(void)
{
	return __atomic_load_n(&stats_zero_count, __ATOMIC_ACQUIRE);
}

void stats_zero_all(void)
{
	pthread_mutex_lock(&stats_lock);
	__atomic_add_fetch(&stats_zero_count, 1, __ATOMIC_ACQ_REL);
	struct stats_header *h = stats_g.block;
	if (h) {
		const struct stats_sections *sec = &stats_g.sec;
		struct stats_socket *s = section(sec->socket_off);
		for (uint32_t i = 0; i < sec->socket_slots; i++)
			memset(&s[i].c, 0, sizeof(s[i].c));
		struct stats_ring *r = section(sec->ring_off);
		for (uint32_t i = 0; i < sec->ring_slots; i++)
			memset(&r[i].c, 0, sizeof(r[i].c));
		struct stats_pool *p = section(sec->pool_off);
		for (uint32_t i = 0; i < sec->pool_slots; i++)
			p[i].no_buffer_errors = 0;
		memset(&((struct stats_iomux *)section(sec->select_off))->c, 0,
		       sizeof(struct stats_iomux_counters));
		memset(&((struct stats_iomux *)section(sec->poll_off))->c, 0,
		       sizeof(struct stats_iomux_counters));
		struct stats_iomux *e = section(sec->epoll_off);
		for (uint32_t i = 0; i < sec->epoll_slots; i++)
			memset(&e[i].c, 0, sizeof(e[i].c));
	}
	pthread_mutex_unlock(&stats_lock);
}
