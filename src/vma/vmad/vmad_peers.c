/* The peers list (vmad_peers.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vmad/vmad_peers.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/vlog.h"
#include "os/os.h"

#define VMAD_PEERS_BYTES (sizeof(struct vmad_peers_hdr) + (size_t)VMAD_PEERS_CAPACITY * sizeof(struct vmad_peer))

/* A cookie is the entry's index + 1 with the list's generation above it,
 * so that a connection listed in a parent's list and freed in a forked
 * child (which made a list of its own since) frees nothing of the child's. */
#define VMAD_PEERS_INDEX_BITS 18
#define VMAD_PEERS_GEN_MASK ((1u << (32 - VMAD_PEERS_INDEX_BITS - 1)) - 1)

static pthread_mutex_t vmad_peers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmad_peers_hdr *vmad_peers_map;   /* atomic: NULL until made */
static struct vmad_peer *vmad_peers_entries;
static int vmad_peers_memfd = -1;
static dev_t vmad_peers_dev;                    /* the memfd's identity: the application may */
static ino_t vmad_peers_ino;                    /* close our descriptor and reuse its number */
static uint32_t vmad_peers_gen;                 /* atomic */
static uint32_t vmad_peers_hint;                /* atomic: where the next claim looks first */
static uint32_t vmad_peers_live;                /* atomic: entries listed: a full list costs no scan */
static bool vmad_peers_full_said;

/* fd if it is still our memfd, else -1 (nothing of the application's is
 * sent to vmad). */
static int vmad_peers_fd_checked(int fd)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != vmad_peers_dev || st.st_ino != vmad_peers_ino)
		return -1;
	return fd;
}

int vmad_peers_fd(void)
{
	if (__atomic_load_n(&vmad_peers_map, __ATOMIC_ACQUIRE))
		return vmad_peers_fd_checked(vmad_peers_memfd);
	pthread_mutex_lock(&vmad_peers_lock);
	if (!vmad_peers_map) {
		int fd = memfd_create("vma-peers", MFD_CLOEXEC);
		void *mem = MAP_FAILED;
		struct stat st;
		if (fd >= 0 && ftruncate(fd, (off_t)VMAD_PEERS_BYTES) == 0 && fstat(fd, &st) == 0) {
			vmad_peers_dev = st.st_dev;
			vmad_peers_ino = st.st_ino;
			mem = mmap(NULL, VMAD_PEERS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		}
		if (mem == MAP_FAILED) {
			vlog_debug("vmad: no peers list (%s): the peers of connections without a 5-tuple of their own "
				   "are not told if this process is killed",
				   strerror(errno));
			if (fd >= 0)
				os_close_nocancel(fd);
		} else {
			struct vmad_peers_hdr *h = mem;
			h->magic = VMAD_PEERS_MAGIC;
			h->capacity = VMAD_PEERS_CAPACITY;
			vmad_peers_entries = (struct vmad_peer *)(h + 1);
			vmad_peers_memfd = fd;
			__atomic_store_n(&vmad_peers_gen, (vmad_peers_gen + 1) & VMAD_PEERS_GEN_MASK, __ATOMIC_RELAXED);
			__atomic_store_n(&vmad_peers_map, h, __ATOMIC_RELEASE);
		}
	}
	int fd = vmad_peers_fd_checked(vmad_peers_memfd);
	pthread_mutex_unlock(&vmad_peers_lock);
	return fd;
}

void vmad_peers_add(uint32_t local_ip, uint16_t local_port, uint32_t remote_ip, uint16_t remote_port,
		    uint32_t *cookie)
{
	if (!__atomic_load_n(&vmad_peers_map, __ATOMIC_ACQUIRE) || *cookie)
		return;
	if (__atomic_load_n(&vmad_peers_live, __ATOMIC_RELAXED) >= VMAD_PEERS_CAPACITY)
		goto full;
	uint32_t start = __atomic_load_n(&vmad_peers_hint, __ATOMIC_RELAXED);
	for (uint32_t n = 0; n < VMAD_PEERS_CAPACITY; n++) {
		uint32_t i = (start + n) & (VMAD_PEERS_CAPACITY - 1);
		struct vmad_peer *e = &vmad_peers_entries[i];
		uint32_t free_state = VMAD_PEER_FREE;
		if (__atomic_load_n(&e->state, __ATOMIC_RELAXED) != VMAD_PEER_FREE ||
		    !__atomic_compare_exchange_n(&e->state, &free_state, VMAD_PEER_WRITING, false, __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED))
			continue;
		e->key = (struct ring_xdp_key5){ .local_ip = local_ip, .remote_ip = remote_ip,
						 .local_port = local_port, .remote_port = remote_port,
						 .proto = IPPROTO_TCP };
		__atomic_store_n(&e->state, VMAD_PEER_LIVE, __ATOMIC_RELEASE);
		__atomic_add_fetch(&vmad_peers_live, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&vmad_peers_hint, (i + 1) & (VMAD_PEERS_CAPACITY - 1), __ATOMIC_RELAXED);
		*cookie = ((__atomic_load_n(&vmad_peers_gen, __ATOMIC_RELAXED) << VMAD_PEERS_INDEX_BITS) | i) + 1;
		return;
	}
full:
	if (!__atomic_exchange_n(&vmad_peers_full_said, true, __ATOMIC_RELAXED))
		vlog_debug("vmad: the peers list is full (%u connections): more are not listed", VMAD_PEERS_CAPACITY);
}

void vmad_peers_del(uint32_t *cookie)
{
	uint32_t c = *cookie;
	if (!c)
		return;
	*cookie = 0;
	c--;
	if (!__atomic_load_n(&vmad_peers_map, __ATOMIC_ACQUIRE) ||
	    (c >> VMAD_PEERS_INDEX_BITS) != __atomic_load_n(&vmad_peers_gen, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&vmad_peers_entries[c & (VMAD_PEERS_CAPACITY - 1)].state, VMAD_PEER_FREE, __ATOMIC_RELEASE);
	__atomic_sub_fetch(&vmad_peers_live, 1, __ATOMIC_RELAXED);
}

void vmad_peers_mark_clean(void)
{
	struct vmad_peers_hdr *h = __atomic_load_n(&vmad_peers_map, __ATOMIC_ACQUIRE);
	if (h)
		__atomic_store_n(&h->clean_exit, 1, __ATOMIC_RELEASE);
}

void vmad_peers_after_fork_child(void)
{
	/* One thread in the child: no lock needed, and the parent's may be
	 * held by a thread that does not exist here. */
	pthread_mutex_init(&vmad_peers_lock, NULL);
	struct vmad_peers_hdr *h = vmad_peers_map;
	if (!h)
		return;
	__atomic_store_n(&vmad_peers_map, NULL, __ATOMIC_RELEASE);
	munmap(h, VMAD_PEERS_BYTES);
	os_close_nocancel(vmad_peers_memfd);
	vmad_peers_memfd = -1;
	vmad_peers_entries = NULL;
	vmad_peers_hint = 0;
	vmad_peers_live = 0;
	vmad_peers_full_said = false;
}

int vmad_peers_walk(int fd, void (*each)(void *arg, const struct ring_xdp_key5 *key), void *arg)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size < VMAD_PEERS_BYTES)
		return -EINVAL;
	/* Private and read-only: the dead process's pages, which nobody
	 * writes any more (and a live one cannot change what we read here
	 * into anything but other keys, which the caller checks). */
	const struct vmad_peers_hdr *h = mmap(NULL, VMAD_PEERS_BYTES, PROT_READ, MAP_PRIVATE, fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	int n = 0;
	if (h->magic != VMAD_PEERS_MAGIC || h->capacity != VMAD_PEERS_CAPACITY) {
		n = -EINVAL;
	} else if (!__atomic_load_n(&h->clean_exit, __ATOMIC_ACQUIRE)) {
		const struct vmad_peer *e = (const struct vmad_peer *)(h + 1);
		for (uint32_t i = 0; i < VMAD_PEERS_CAPACITY; i++) {
			if (__atomic_load_n(&e[i].state, __ATOMIC_ACQUIRE) != VMAD_PEER_LIVE)
				continue;
			struct ring_xdp_key5 key = e[i].key;
			each(arg, &key);
			n++;
		}
	}
	munmap((void *)h, VMAD_PEERS_BYTES);
	return n;
}
