/* The shared UMEM of one (interface, queue) and its frame accounting (see
 * ring_domain.h and docs/process_model.md). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "log/vlog.h"
#include "ring/ring_domain.h"
#include "os/os.h"

#define RING_DOMAIN_PAGE 4096u
/* The UMEM socket needs one ring to bind; it never sends. */
#define RING_DOMAIN_UMEM_SOCKET_TX 64u
/* Reclaim retries while the fill ring looks full (the kernel publishes its
 * consumer index lazily). */
#define RING_DOMAIN_RECLAIM_TRIES 50

static size_t ring_domain_align(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static void ring_domain_set_views(struct ring_domain *d)
{
	uint8_t *base = (uint8_t *)d->sh;

	d->state = (uint32_t *)(base + d->sh->state_off);
	d->tx_free = (uint32_t *)(base + d->sh->tx_free_off);
	d->frames = base + d->sh->frames_off;
}

static uint32_t ring_domain_total_frames(const struct ring_domain *d)
{
	return d->sh->rx_frames + d->sh->tx_frames;
}

/* Rebuilds the free TX stack from the state words: a member that died
 * inside a push or a pop left the count and the words out of step. */
static void ring_domain_repair_locked(struct ring_domain *d)
{
	uint32_t n = 0;

	for (uint32_t f = d->sh->rx_frames; f < ring_domain_total_frames(d); f++)
		if (RING_DOMAIN_KIND(ring_domain_get_state(d, f)) == RING_DOMAIN_ST_FREE)
			d->tx_free[n++] = f;
	d->sh->tx_free_count = n;
	d->sh->counters.lock_repairs++;
}

void ring_domain_lock(struct ring_domain *d)
{
	int err = pthread_mutex_lock(&d->sh->lock);

	if (err == EOWNERDEAD) {
		pthread_mutex_consistent(&d->sh->lock);
		ring_domain_repair_locked(d);
	}
}

void ring_domain_unlock(struct ring_domain *d)
{
	pthread_mutex_unlock(&d->sh->lock);
}

static int ring_domain_lock_init(pthread_mutex_t *lock)
{
	pthread_mutexattr_t attr;
	int err;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	/* A member killed while holding it must not stop the others. */
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	err = pthread_mutex_init(lock, &attr);
	pthread_mutexattr_destroy(&attr);
	return -err;
}

uint32_t ring_domain_fill_locked(struct ring_domain *d, unsigned slot, const uint64_t *addrs, uint32_t n)
{
	struct ring_xsk_ring *fill = &d->fill;
	uint32_t prod = __atomic_load_n(fill->producer, __ATOMIC_RELAXED);
	uint32_t cons = __atomic_load_n(fill->consumer, __ATOMIC_ACQUIRE);
	uint32_t room = fill->size - (prod - cons);
	uint32_t held = RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, slot);
	uint32_t done = 0, written = 0;

	for (; done < n; done++) {
		uint32_t frame = ring_domain_frame_of(d, addrs[done]);
		if (frame >= d->sh->rx_frames || ring_domain_get_state(d, frame) != held) {
			d->sh->counters.double_returns++;
			continue;
		}
		if (written == room)
			break;
		/* FILL before the producer moves: a member dying in between
		 * leaks the frame rather than handing it out twice. */
		ring_domain_set_state(d, frame, RING_DOMAIN_STATE(RING_DOMAIN_ST_FILL, 0));
		*ring_xsk_addr(fill, prod + written) = (uint64_t)frame * d->sh->frame_size;
		written++;
	}
	if (written)
		__atomic_store_n(fill->producer, prod + written, __ATOMIC_RELEASE);
	if (done < n)
		d->sh->counters.fill_deferred++;
	return done;
}

static void ring_domain_tx_push_locked(struct ring_domain *d, uint32_t frame)
{
	ring_domain_set_state(d, frame, RING_DOMAIN_STATE(RING_DOMAIN_ST_FREE, 0));
	if (d->sh->tx_free_count < d->sh->tx_frames)
		d->tx_free[d->sh->tx_free_count++] = frame;
}

uint32_t ring_domain_reap_locked(struct ring_domain *d)
{
	struct ring_xsk_ring *comp = &d->comp;
	uint32_t cons = __atomic_load_n(comp->consumer, __ATOMIC_RELAXED);
	uint32_t prod = __atomic_load_n(comp->producer, __ATOMIC_ACQUIRE);
	uint32_t n = prod - cons;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t frame = ring_domain_frame_of(d, *ring_xsk_addr(comp, cons + i));
		if (frame >= d->sh->rx_frames && frame < ring_domain_total_frames(d))
			ring_domain_tx_push_locked(d, frame);
	}
	if (n)
		__atomic_store_n(comp->consumer, prod, __ATOMIC_RELEASE);
	return n;
}

uint32_t ring_domain_tx_take_locked(struct ring_domain *d, unsigned slot, uint32_t *out, uint32_t max)
{
	uint32_t n = 0;

	while (n < max && d->sh->tx_free_count) {
		uint32_t frame = d->tx_free[--d->sh->tx_free_count];
		ring_domain_set_state(d, frame, RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, slot));
		out[n++] = frame;
	}
	return n;
}

void ring_domain_tx_give_locked(struct ring_domain *d, const uint32_t *frames, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		ring_domain_tx_push_locked(d, frames[i]);
}

/* ---- vmad side ---------------------------------------------------------- */

static int ring_domain_map_shared_rings(struct ring_domain *d)
{
	int err = ring_xsk_map_ring(d->umem_fd, RING_XSK_FILL, d->sh->fill_size, &d->fill);

	if (!err)
		err = ring_xsk_map_ring(d->umem_fd, RING_XSK_COMP, d->sh->comp_size, &d->comp);
	return err;
}

size_t ring_domain_size(const struct ring_domain_geometry *geo)
{
	uint32_t frames = geo->rx_frames + geo->tx_frames;
	size_t state_off = ring_domain_align(sizeof(struct ring_domain_shared), 64);
	size_t tx_free_off = ring_domain_align(state_off + (size_t)frames * sizeof(uint32_t), 64);
	size_t frames_off = ring_domain_align(tx_free_off + (size_t)geo->tx_frames * sizeof(uint32_t),
					      RING_DOMAIN_PAGE);
	return frames_off + (size_t)frames * RING_XDP_FRAME_SIZE;
}

int ring_domain_init_memory(struct ring_domain *d, void *mem, size_t size, const struct ring_domain_geometry *geo,
			    unsigned ifindex, unsigned queue)
{
	uint32_t frames = geo->rx_frames + geo->tx_frames;
	size_t state_off = ring_domain_align(sizeof(struct ring_domain_shared), 64);
	size_t tx_free_off = ring_domain_align(state_off + (size_t)frames * sizeof(uint32_t), 64);
	size_t frames_off = ring_domain_align(tx_free_off + (size_t)geo->tx_frames * sizeof(uint32_t),
					      RING_DOMAIN_PAGE);

	if (!geo->rx_frames || !geo->tx_frames || (geo->rx_frames & (geo->rx_frames - 1)) ||
	    (geo->tx_frames & (geo->tx_frames - 1)) || !geo->rx_descs || !geo->tx_descs ||
	    size < ring_domain_size(geo))
		return -EINVAL;
	memset(mem, 0, frames_off);
	d->sh = mem;
	d->map_size = size;
	struct ring_domain_shared *sh = d->sh;
	sh->version = RING_DOMAIN_VERSION;
	sh->ifindex = ifindex;
	sh->queue = queue;
	sh->rx_frames = geo->rx_frames;
	sh->tx_frames = geo->tx_frames;
	sh->frame_size = RING_XDP_FRAME_SIZE;
	sh->frame_headroom = RING_XDP_FRAME_HEADROOM;
	sh->fill_size = geo->rx_frames;
	sh->comp_size = geo->tx_frames;
	sh->rx_descs = geo->rx_descs;
	sh->tx_descs = geo->tx_descs;
	sh->state_off = state_off;
	sh->tx_free_off = tx_free_off;
	sh->frames_off = frames_off;
	sh->total_size = size;
	int err = ring_domain_lock_init(&sh->lock);
	if (err)
		return err;
	ring_domain_set_views(d);
	for (uint32_t f = 0; f < geo->rx_frames; f++)
		d->state[f] = RING_DOMAIN_STATE(RING_DOMAIN_ST_FILL, 0);
	for (uint32_t f = geo->rx_frames; f < frames; f++)
		d->tx_free[sh->tx_free_count++] = f;
	return 0;
}

bool ring_domain_memfd_is_huge(int memfd)
{
	/* hugetlbfs reports its page size as the block size, tmpfs the base page. */
	struct stat st;
	return fstat(memfd, &st) == 0 && st.st_blksize > (blksize_t)sysconf(_SC_PAGESIZE);
}

/* A huge-page memfd of at least *size bytes whose pages are reserved, or -1
 * (with the reason in errno) when the system cannot give them. */
static int ring_domain_memfd_huge(size_t *size)
{
	int fd = memfd_create("vma-ring-domain", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd < 0)
		return -1;
	struct stat st;
	size_t page = fstat(fd, &st) == 0 && st.st_blksize > 0 ? (size_t)st.st_blksize : (size_t)2 << 20;
	size_t want = ring_domain_align(*size, page);
	/* ftruncate does not reserve huge pages; a shared mapping reserves
	 * the whole file and fails at once when they are not free, where a
	 * fault later would be a SIGBUS. The reservation stays with the file. */
	if (ftruncate(fd, (off_t)want) == 0) {
		void *probe = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (probe != MAP_FAILED) {
			munmap(probe, want);
			*size = want;
			return fd;
		}
	}
	int saved = errno;
	os_close_nocancel(fd);
	errno = saved;
	return -1;
}

int ring_domain_memfd(size_t *size, bool huge)
{
	if (huge) {
		int fd = ring_domain_memfd_huge(size);
		if (fd >= 0)
			return fd;
		/* One warning per process: every domain would say the same. */
		static bool warned;
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			vlog_warn("VMA_MEM_ALLOC_TYPE=2: no huge pages for the packet frames (%s; see "
				  "/proc/sys/vm/nr_hugepages); using ordinary pages", strerror(errno));
	}
	int fd = memfd_create("vma-ring-domain", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)*size) != 0) {
		int err = -errno;
		os_close_nocancel(fd);
		return err;
	}
	return fd;
}

int ring_domain_create(struct ring_domain *d, const struct ring_domain_geometry *geo, unsigned ifindex,
		       unsigned queue, uint16_t xdp_flags)
{
	size_t total = ring_domain_size(geo);
	int err;

	memset(d, 0, sizeof(*d));
	d->memfd = -1;
	d->umem_fd = -1;
	d->creator = true;
	d->memfd = ring_domain_memfd(&total, geo->huge_pages);
	if (d->memfd < 0) {
		err = d->memfd;
		d->memfd = -1;
		return err;
	}
	void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, d->memfd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	err = ring_domain_init_memory(d, map, total, geo, ifindex, queue);
	if (err) {
		munmap(map, total);
		d->sh = NULL;
		goto fail;
	}
	struct ring_domain_shared *sh = d->sh;
	uint32_t frames = geo->rx_frames + geo->tx_frames;

	d->umem_fd = ring_xsk_socket();
	if (d->umem_fd < 0) {
		err = d->umem_fd;
		d->umem_fd = -1;
		goto fail;
	}
	err = ring_xsk_umem_register(d->umem_fd, d->frames, (size_t)frames * RING_XDP_FRAME_SIZE,
				     RING_XDP_FRAME_SIZE, RING_XDP_FRAME_HEADROOM, sh->fill_size, sh->comp_size);
	if (!err)
		err = ring_xsk_set_rings(d->umem_fd, 0, RING_DOMAIN_UMEM_SOCKET_TX);
	if (!err)
		err = ring_xsk_bind(d->umem_fd, ifindex, queue, -1, xdp_flags);
	if (!err)
		err = ring_domain_map_shared_rings(d);
	if (err)
		goto fail;
	/* Every RX frame starts with the kernel. */
	for (uint32_t f = 0; f < geo->rx_frames; f++)
		*ring_xsk_addr(&d->fill, f) = (uint64_t)f * RING_XDP_FRAME_SIZE;
	__atomic_store_n(d->fill.producer, geo->rx_frames, __ATOMIC_RELEASE);
	/* Last: a client that sees the magic sees a complete header. */
	__atomic_store_n(&sh->magic, RING_DOMAIN_MAGIC, __ATOMIC_RELEASE);
	return 0;
fail:
	ring_domain_destroy(d);
	return err;
}

/* One member socket with the given rings (0: that ring left out). */
static int ring_domain_member_socket(struct ring_domain *d, uint32_t rx_descs, uint32_t tx_descs)
{
	int fd = ring_xsk_socket();
	int err;

	if (fd < 0)
		return fd;
	/* A socket sharing the UMEM takes the UMEM socket's mode. */
	err = ring_xsk_set_rings(fd, rx_descs, tx_descs);
	if (!err)
		err = ring_xsk_bind(fd, d->sh->ifindex, d->sh->queue, d->umem_fd, 0);
	if (err) {
		os_close_nocancel(fd);
		return err;
	}
	return fd;
}

int ring_domain_member_sockets(struct ring_domain *d, int *rx_fd, int *tx_fd)
{
	*rx_fd = *tx_fd = -1;
	int rx = ring_domain_member_socket(d, d->sh->rx_descs, 0);
	if (rx < 0)
		return rx;
	int tx = ring_domain_member_socket(d, 0, d->sh->tx_descs);
	if (tx < 0) {
		os_close_nocancel(rx);
		return tx;
	}
	*rx_fd = rx;
	*tx_fd = tx;
	return 0;
}

static uint64_t ring_domain_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ring_domain_member_add(struct ring_domain *d, int want_slot, pid_t pid, uid_t uid)
{
	int slot = want_slot >= 0 ? -EBUSY : -ENOSPC;

	if (want_slot >= RING_XDP_MAX_MEMBERS)
		return -EINVAL;
	ring_domain_lock(d);
	for (unsigned s = 0; s < RING_XDP_MAX_MEMBERS; s++) {
		struct ring_domain_member *m = &d->sh->members[s];
		if (m->state != RING_DOMAIN_M_FREE || (want_slot >= 0 && s != (unsigned)want_slot))
			continue;
		m->pid = (int32_t)pid;
		m->uid = (uint32_t)uid;
		m->joined_ns = ring_domain_now_ns();
		m->state = RING_DOMAIN_M_ACTIVE;
		d->sh->generation++;
		slot = (int)s;
		break;
	}
	ring_domain_unlock(d);
	return slot;
}

/* Marks the frames listed in a dead member's ring between its consumer and
 * producer as held by it, when they are in state `from`. */
static void ring_domain_claim_ring(struct ring_domain *d, struct ring_xsk_ring *r, bool descs, uint32_t from,
				   uint32_t held)
{
	uint32_t cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
	uint32_t prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);

	if (prod - cons > r->size)
		return; /* torn indices: trust the state words alone */
	for (uint32_t i = cons; i != prod; i++) {
		uint64_t addr = descs ? ring_xsk_desc(r, i)->addr : *ring_xsk_addr(r, i);
		uint32_t frame = ring_domain_frame_of(d, addr);
		if (frame < ring_domain_total_frames(d) && ring_domain_get_state(d, frame) == from)
			ring_domain_set_state(d, frame, held);
	}
}

unsigned ring_domain_member_reclaim(struct ring_domain *d, unsigned slot, int rx_fd, int tx_fd)
{
	struct ring_xsk_ring rx, tx;
	uint32_t held = RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, slot);
	unsigned reclaimed = 0;
	bool have_rx = rx_fd >= 0 && ring_xsk_map_ring(rx_fd, RING_XSK_RX, d->sh->rx_descs, &rx) == 0;
	bool have_tx = tx_fd >= 0 && ring_xsk_map_ring(tx_fd, RING_XSK_TX, d->sh->tx_descs, &tx) == 0;

	if (slot >= RING_XDP_MAX_MEMBERS)
		return 0;
	ring_domain_lock(d);
	d->sh->members[slot].state = RING_DOMAIN_M_RECLAIMING;
	/* Delivered to it but never read: the state words still say FILL. */
	if (have_rx)
		ring_domain_claim_ring(d, &rx, true, RING_DOMAIN_STATE(RING_DOMAIN_ST_FILL, 0), held);
	/* Queued for sending but never taken by the kernel: no completion
	 * will come. What the kernel took completes through the shared
	 * completion ring, wherever its sender went. */
	if (have_tx)
		ring_domain_claim_ring(d, &tx, true, RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, slot), held);
	for (uint32_t f = d->sh->rx_frames; f < ring_domain_total_frames(d); f++) {
		if (ring_domain_get_state(d, f) == held) {
			ring_domain_tx_push_locked(d, f);
			reclaimed++;
		}
	}
	ring_domain_unlock(d);

	/* RX frames go back through the fill ring, which may look full for a
	 * moment: retry briefly, never under the lock's full hold time. */
	uint64_t batch[256];
	for (int tries = 0; tries < RING_DOMAIN_RECLAIM_TRIES; tries++) {
		uint32_t n = 0, left = 0;
		ring_domain_lock(d);
		for (uint32_t f = 0; f < d->sh->rx_frames; f++) {
			if (ring_domain_get_state(d, f) != held)
				continue;
			if (n < sizeof(batch) / sizeof(batch[0]))
				batch[n++] = (uint64_t)f * d->sh->frame_size;
			else
				left++;
		}
		uint32_t done = n ? ring_domain_fill_locked(d, slot, batch, n) : 0;
		reclaimed += done;
		left += n - done;
		ring_domain_unlock(d);
		if (!left)
			break;
		if (done == 0)
			os_sleep_us_nocancel(1000);   /* not a cancellation point: os.h */
	}
	ring_domain_lock(d);
	d->sh->counters.frames_reclaimed += reclaimed;
	d->sh->counters.members_reaped++;
	memset(&d->sh->members[slot], 0, sizeof(d->sh->members[slot]));
	d->sh->generation++;
	ring_domain_unlock(d);
	if (have_rx)
		ring_xsk_unmap_ring(&rx);
	if (have_tx)
		ring_xsk_unmap_ring(&tx);
	return reclaimed;
}

void ring_domain_destroy(struct ring_domain *d)
{
	ring_xsk_unmap_ring(&d->fill);
	ring_xsk_unmap_ring(&d->comp);
	if (d->sh)
		munmap(d->sh, d->map_size);
	d->sh = NULL;
	if (d->umem_fd >= 0)
		os_close_nocancel(d->umem_fd);
	if (d->memfd >= 0)
		os_close_nocancel(d->memfd);
	d->umem_fd = d->memfd = -1;
}

/* ---- members ------------------------------------------------------------ */

int ring_domain_attach(struct ring_domain *d, int memfd, int umem_fd)
{
	struct stat st;
	int err;

	memset(d, 0, sizeof(*d));
	d->memfd = memfd;
	d->umem_fd = umem_fd;
	if (fstat(memfd, &st) != 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(struct ring_domain_shared))
		return -EINVAL;
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
	if (map == MAP_FAILED)
		return -errno;
	d->sh = map;
	d->map_size = (size_t)st.st_size;
	if (__atomic_load_n(&d->sh->magic, __ATOMIC_ACQUIRE) != RING_DOMAIN_MAGIC ||
	    d->sh->version != RING_DOMAIN_VERSION || d->sh->total_size != d->map_size ||
	    d->sh->frames_off + (uint64_t)(d->sh->rx_frames + d->sh->tx_frames) * d->sh->frame_size > d->map_size) {
		munmap(map, d->map_size);
		d->sh = NULL;
		return -EPROTO;
	}
	ring_domain_set_views(d);
	err = ring_domain_map_shared_rings(d);
	if (err) {
		ring_xsk_unmap_ring(&d->fill);
		munmap(map, d->map_size);
		d->sh = NULL;
	}
	return err;
}

void ring_domain_detach(struct ring_domain *d)
{
	d->creator = false;
	ring_domain_destroy(d);
}
