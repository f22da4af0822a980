/* See stats_reader.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "stats_reader.h"

static enum stats_read_result say(enum stats_read_result r, char *why, size_t size, const char *fmt,
				  ...) __attribute__((format(printf, 4, 5)));
static enum stats_read_result say(enum stats_read_result r, char *why, size_t size, const char *fmt,
				  ...)
{
	if (why && size) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return r;
}

/* A section of count slots of slot_size at off lies inside the block. */
static int section_fits(uint64_t off, uint64_t count, uint64_t slot_size, uint64_t total)
{
	if (off < sizeof(struct stats_header) || off % 8 || off > total)
		return 0;
	return count <= (total - off) / (slot_size ? slot_size : 1);
}

enum stats_read_result stats_reader_validate(const void *data, size_t size, char *why,
					      size_t why_size)
{
	struct stats_header h;
	if (size < sizeof(h.magic) + sizeof(h.layout_version))
		return say(STATS_READ_TRUNCATED, why, why_size, "file is truncated (%zu bytes)", size);
	memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
	if (h.magic != STATS_MAGIC)
		return say(STATS_READ_BAD_MAGIC, why, why_size, "not a VMA statistics file (bad magic)");
	if (h.layout_version != STATS_LAYOUT_VERSION)
		return say(STATS_READ_BAD_VERSION, why, why_size,
			   "statistics layout version %u, this vma_stats understands %u "
			   "(use the vma_stats of the same libvma)", h.layout_version, STATS_LAYOUT_VERSION);
	if (size < sizeof(h))
		return say(STATS_READ_TRUNCATED, why, why_size, "file is truncated (%zu bytes)", size);
	if (h.header_size != sizeof(h) || h.socket_size != sizeof(struct stats_socket) ||
	    h.ring_size != sizeof(struct stats_ring) || h.pool_size != sizeof(struct stats_pool) ||
	    h.iomux_size != sizeof(struct stats_iomux) || h.mc_size != sizeof(struct stats_mc_group))
		return say(STATS_READ_BAD_VERSION, why, why_size,
			   "statistics structures differ in size from this vma_stats");
	if (h.total_size != size)
		return say(h.total_size > size ? STATS_READ_TRUNCATED : STATS_READ_CORRUPT, why, why_size,
			   "file size %zu does not match the %llu bytes its header claims", size,
			   (unsigned long long)h.total_size);
	if (h.socket_slots > STATS_MAX_SOCKETS || h.ring_slots > STATS_RING_SLOTS ||
	    h.pool_slots > STATS_POOL_SLOTS || h.epoll_slots > STATS_EPOLL_SLOTS ||
	    h.mc_slots > STATS_MC_SLOTS)
		return say(STATS_READ_CORRUPT, why, why_size, "slot counts out of range");
	if (!section_fits(h.socket_off, h.socket_slots, h.socket_size, size) ||
	    !section_fits(h.ring_off, h.ring_slots, h.ring_size, size) ||
	    !section_fits(h.pool_off, h.pool_slots, h.pool_size, size) ||
	    !section_fits(h.select_off, 1, h.iomux_size, size) ||
	    !section_fits(h.poll_off, 1, h.iomux_size, size) ||
	    !section_fits(h.epoll_off, h.epoll_slots, h.iomux_size, size) ||
	    !section_fits(h.mc_off, h.mc_slots, h.mc_size, size))
		return say(STATS_READ_CORRUPT, why, why_size, "a section lies outside the file");
	return STATS_READ_OK;
}

/* Terminal control sequences must not travel from a block to the screen of
 * whoever runs vma_stats: anything but printable ASCII becomes '?'. */
static void printable(char *text, size_t size)
{
	text[size - 1] = '\0';
	for (size_t i = 0; text[i]; i++)
		if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
			text[i] = '?';
}

/* The pid in a "vmastat.<pid>" name, 0 for any other name. */
static long pid_of_name(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t plen = strlen(STATS_FILE_PREFIX);
	if (strncmp(base, STATS_FILE_PREFIX, plen) != 0 || !base[plen])
		return 0;
	char *end;
	errno = 0;
	long pid = strtol(base + plen, &end, 10);
	return *end || errno || pid <= 0 ? 0 : pid;
}

/* Who may have written the block at path: libvma creates it mode 0600, as
 * the process's user, named after the process's pid. A block that says
 * otherwise was put there by someone else (any user can create a file in
 * /tmp) to show made-up numbers, or to make us post requests into it. */
static enum stats_read_result check_origin(const char *path, const struct stat *st,
					   const struct stats_header *h, char *why, size_t why_size)
{
	if (st->st_mode & 022)
		return say(STATS_READ_UNTRUSTED, why, why_size, "%s: writable by other users (mode %04o; "
			   "libvma makes 0600): not a block libvma wrote", path,
			   (unsigned)(st->st_mode & 07777));
	long named = pid_of_name(path);
	if (named && named != h->pid)
		return say(STATS_READ_UNTRUSTED, why, why_size, "%s: the block says it belongs to pid %d",
			   path, (int)h->pid);
	if (st->st_uid == 0 || st->st_uid == geteuid() || !named)
		return STATS_READ_OK;
	char proc[32];
	struct stat ps;
	snprintf(proc, sizeof(proc), "/proc/%ld", named);
	if (stat(proc, &ps) != 0 || ps.st_uid != st->st_uid)
		return say(STATS_READ_UNTRUSTED, why, why_size, "%s: owned by uid %u, but process %ld "
			   "does not run as that user", path, (unsigned)st->st_uid, named);
	return STATS_READ_OK;
}

/* Reads and validates the block open on fd (see stats_reader_load). */
static enum stats_read_result load_fd(int fd, const char *path, struct stats_snapshot *snap,
				      char *why, size_t why_size)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return say(STATS_READ_NO_FILE, why, why_size, "%s: not a regular file", path);
	if ((uint64_t)st.st_size > STATS_READER_MAX_SIZE)
		return say(STATS_READ_CORRUPT, why, why_size, "%s: %lld bytes is too big for a "
			   "statistics file", path, (long long)st.st_size);
	size_t want = (size_t)st.st_size, got = 0;
	unsigned char *buf = malloc(want ? want : 1);
	if (!buf)
		return say(STATS_READ_NO_FILE, why, why_size, "out of memory");
	while (got < want) {
		ssize_t n = pread(fd, buf + got, want - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* shrank under us: validate what we have */
		got += (size_t)n;
	}
	enum stats_read_result r = stats_reader_validate(buf, got, why, why_size);
	if (r == STATS_READ_OK)
		r = check_origin(path, &st, (const struct stats_header *)buf, why, why_size);
	if (r != STATS_READ_OK) {
		free(buf);
		return r;
	}
	struct stats_header *h = (struct stats_header *)buf;
	/* The writer may be mid-update: never let an unterminated name run off. */
	printable(h->process_name, sizeof(h->process_name));
	printable(h->lib_version, sizeof(h->lib_version));
	struct stats_ring *rings = (struct stats_ring *)(buf + h->ring_off);
	for (uint32_t i = 0; i < h->ring_slots; i++)
		printable(rings[i].ifname, sizeof(rings[i].ifname));
	snap->data = buf;
	snap->size = got;
	snap->h = h;
	return STATS_READ_OK;
}

/* O_NONBLOCK: a FIFO planted under a block's name must not hang the tool
 * (open of a FIFO waits for the other side); it is then refused as not a
 * regular file. */
#define STATS_OPEN_FLAGS (O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)

enum stats_read_result stats_reader_load(const char *path, struct stats_snapshot *snap, char *why,
					  size_t why_size)
{
	memset(snap, 0, sizeof(*snap));
	int fd = open(path, O_RDONLY | STATS_OPEN_FLAGS);
	if (fd < 0)
		return say(STATS_READ_NO_FILE, why, why_size, "%s: %s", path, strerror(errno));
	enum stats_read_result r = load_fd(fd, path, snap, why, why_size);
	close(fd);
	return r;
}

void stats_snapshot_free(struct stats_snapshot *snap)
{
	free(snap->data);
	memset(snap, 0, sizeof(*snap));
}

#define SLOT(type, off, i) ((const type *)(s->data + (off)) + (i))
const struct stats_socket *stats_snap_socket(const struct stats_snapshot *s, uint32_t i)
{ return i < s->h->socket_slots ? SLOT(struct stats_socket, s->h->socket_off, i) : NULL; }
const struct stats_ring *stats_snap_ring(const struct stats_snapshot *s, uint32_t i)
{ return i < s->h->ring_slots ? SLOT(struct stats_ring, s->h->ring_off, i) : NULL; }
const struct stats_pool *stats_snap_pool(const struct stats_snapshot *s, uint32_t i)
{ return i < s->h->pool_slots ? SLOT(struct stats_pool, s->h->pool_off, i) : NULL; }
const struct stats_iomux *stats_snap_select(const struct stats_snapshot *s)
{ return SLOT(struct stats_iomux, s->h->select_off, 0); }
const struct stats_iomux *stats_snap_poll(const struct stats_snapshot *s)
{ return SLOT(struct stats_iomux, s->h->poll_off, 0); }
const struct stats_iomux *stats_snap_epoll(const struct stats_snapshot *s, uint32_t i)
{ return i < s->h->epoll_slots ? SLOT(struct stats_iomux, s->h->epoll_off, i) : NULL; }
const struct stats_mc_group *stats_snap_mc(const struct stats_snapshot *s, uint32_t i)
{ return i < s->h->mc_slots ? SLOT(struct stats_mc_group, s->h->mc_off, i) : NULL; }

int stats_reader_path(char *out, size_t size, const char *dir, pid_t pid)
{
	int n = snprintf(out, size, "%s/%s%d", dir, STATS_FILE_PREFIX, (int)pid);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

int stats_reader_pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return (x > y) - (x < y);
}

int stats_reader_list(const char *dir, pid_t *pids, int max, int keep_stale)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int count = 0;
	struct dirent *e;
	size_t plen = strlen(STATS_FILE_PREFIX);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, STATS_FILE_PREFIX, plen) != 0)
			continue;
		const char *num = e->d_name + plen;
		char *end;
		errno = 0;
		long pid = strtol(num, &end, 10);
		if (!*num || *end || errno || pid <= 0 || pid > 0x7fffffffL)
			continue;
		if (!stats_reader_pid_alive((pid_t)pid)) {
			if (!keep_stale)
				unlinkat(dirfd(d), e->d_name, 0);
			continue;
		}
		if (count < max)
			pids[count++] = (pid_t)pid;
	}
	closedir(d);
	qsort(pids, (size_t)count, sizeof(*pids), cmp_pid);
	return count;
}

static size_t request_offset(enum stats_request_kind kind)
{
	size_t base = offsetof(struct stats_header, control);
	switch (kind) {
	case STATS_REQ_ZERO: return base + offsetof(struct stats_control, zero);
	case STATS_REQ_LOG_LEVEL: return base + offsetof(struct stats_control, log_level);
	case STATS_REQ_LOG_DETAILS: return base + offsetof(struct stats_control, log_details);
	default: return base + offsetof(struct stats_control, fd_dump);
	}
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int stats_reader_request(const char *path, enum stats_request_kind kind, int32_t value, int32_t arg,
			 int timeout_ms)
{
	char why[256];
	struct stats_snapshot snap;
	/* The file written to is the very one validated: same descriptor. */
	int fd = open(path, O_RDWR | STATS_OPEN_FLAGS);
	if (fd < 0)
		return -1;
	if (load_fd(fd, path, &snap, why, sizeof(why)) != STATS_READ_OK) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	stats_snapshot_free(&snap);
	off_t off = (off_t)request_offset(kind);
	struct stats_request r;
	if (pread(fd, &r, sizeof(r), off) != (ssize_t)sizeof(r)) {
		close(fd);
		errno = EIO;
		return -1;
	}
	/* Values first, then the sequence number the library watches: the page
	 * cache is the mapping, so the library sees the writes in this order. */
	uint32_t seq = r.seq + 1;
	if (pwrite(fd, &value, sizeof(value), off + (off_t)offsetof(struct stats_request, value)) < 0 ||
	    pwrite(fd, &arg, sizeof(arg), off + (off_t)offsetof(struct stats_request, arg)) < 0 ||
	    pwrite(fd, &seq, sizeof(seq), off + (off_t)offsetof(struct stats_request, seq)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	int rc = 1;
	for (int waited = 0; waited <= timeout_ms; waited += 20) {
		uint32_t done;
		if (pread(fd, &done, sizeof(done), off + (off_t)offsetof(struct stats_request, done)) !=
		    (ssize_t)sizeof(done))
			break;
		if (done == seq) {
			rc = 0;
			break;
		}
		sleep_ms(20);
	}
	close(fd);
	return rc;
}
