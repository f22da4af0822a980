/* The ring manager: a small table of (interface, key) -> ring and of the
 * rings with their references. Sizes are tiny (rings per process), so
 * lists and linear searches are enough. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "ring/ring_mgr.h"
#include "os/os.h"

struct ring_mgr_ring {
	struct ring_mgr_ring *next;
	struct ring *ring;
	unsigned refs;
};

struct ring_mgr_binding {
	struct ring_mgr_binding *next;
	unsigned ifindex;
	uint64_t key;
	struct ring *ring;
};

static pthread_mutex_t ring_mgr_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring_mgr_ring *ring_mgr_rings;
static struct ring_mgr_binding *ring_mgr_bindings;
static struct ring_mgr_config ring_mgr_cfg;
static int ring_mgr_configured;
static unsigned ring_mgr_rr; /* round-robin position for shared rings */

/* Bumped whenever a ring opens or goes (its fds with it). */
static uint32_t ring_mgr_gen;

uint32_t ring_mgr_generation(void)
{
	return __atomic_load_n(&ring_mgr_gen, __ATOMIC_ACQUIRE);
}

void ring_mgr_configure(const struct ring_mgr_config *cfg)
{
	pthread_mutex_lock(&ring_mgr_lock);
	ring_mgr_cfg = *cfg;
	ring_mgr_configured = 1;
	pthread_mutex_unlock(&ring_mgr_lock);
}

static void ring_mgr_ensure_config(void)
{
	if (ring_mgr_configured)
		return;
	ring_config_from_params(&ring_mgr_cfg.ring);
	ring_mgr_cfg.limit_per_interface = (unsigned)g_cfg.ring_limit_per_interface;
	ring_mgr_cfg.queues = 0;
	ring_mgr_cfg.per_queue = 0;
	ring_mgr_configured = 1;
}

uint64_t ring_mgr_key(int logic, int fd, pid_t tid, int cpu, uint32_t ip)
{
	uint64_t value;

	switch (logic) {
	case RING_MGR_PER_IP:
		value = ip;
		break;
	case RING_MGR_PER_SOCKET:
		value = (uint32_t)fd;
		break;
	case RING_MGR_PER_USER_ID:
		value = ip;
		break;
	case RING_MGR_PER_THREAD:
		value = (uint32_t)tid;
		break;
	case RING_MGR_PER_CORE:
	case RING_MGR_PER_CORE_MIGRATING:
		/* Both name the same ring for a core: 31 only differs in
		 * whether the socket later follows its thread. */
		logic = RING_MGR_PER_CORE;
		value = (uint32_t)cpu;
		break;
	default:
		logic = RING_MGR_PER_INTERFACE;
		value = 0;
		break;
	}
	return (uint64_t)(unsigned)logic << 32 | value;
}

/* RX queues of the interface. The driver's channel counts first: they are
 * asked through a socket of the calling thread's network namespace, where
 * /sys may still show another namespace's devices (a process entered with
 * nsenter --net). Then sysfs, then 1. */
static unsigned ring_mgr_queue_count(const char *ifname)
{
	struct ethtool_channels channels = { .cmd = ETHTOOL_GCHANNELS };
	struct ifreq ifr;
	char path[64];
	struct dirent *entry;
	unsigned count = 0;

	int fd = OS_CALL(socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		memset(&ifr, 0, sizeof(ifr));
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
		ifr.ifr_data = (void *)&channels;
		if (OS_CALL(ioctl, fd, SIOCETHTOOL, &ifr) == 0)
			count = channels.rx_count + channels.combined_count;
		os_close_nocancel(fd);
		if (count)
			return count;
	}
	snprintf(path, sizeof(path), "/sys/class/net/%.15s/queues", ifname);
	DIR *dir = opendir(path);
	if (!dir)
		return 1;
	while ((entry = readdir(dir)))
		if (strncmp(entry->d_name, "rx-", 3) == 0)
			count++;
	closedir(dir);
	return count ? count : 1;
}

static struct ring_mgr_ring *ring_mgr_find(const struct ring *ring)
{
	for (struct ring_mgr_ring *e = ring_mgr_rings; e; e = e->next)
		if (e->ring == ring)
			return e;
	return NULL;
}

/* AF_XDP, and verbs (a QP is tied to no queue: several per process on one
 * interface, each spanning its queues) take several rings per queue and
 * span multi-queue interfaces; the loop backend keeps one per queue. */
static bool ring_mgr_xdp(void)
{
	return ring_mgr_cfg.ring.backend != RING_BACKEND_LOOP;
}

static bool ring_mgr_spanning(void)
{
	if (ring_mgr_cfg.placement == RING_MGR_PLACE_DEFAULT)
		return ring_mgr_xdp();
	return ring_mgr_cfg.placement == RING_MGR_PLACE_SPANNING;
}

static unsigned ring_mgr_per_queue(void)
{
	if (ring_mgr_cfg.per_queue)
		return ring_mgr_cfg.per_queue;
	return ring_mgr_xdp() ? RING_MGR_XDP_PER_QUEUE : 1;
}

/* The queue of ifindex with the fewest rings of ours (the lowest of
 * those), or -1 when every queue holds per_queue of them. */
static int ring_mgr_free_queue(unsigned ifindex, unsigned queues)
{
	int best = -1;
	unsigned best_used = ring_mgr_per_queue();

	for (unsigned q = 0; q < queues; q++) {
		unsigned used = 0;
		for (struct ring_mgr_ring *e = ring_mgr_rings; e; e = e->next)
			used += e->ring->ifindex == ifindex && e->ring->queue == q;
		if (used < best_used) {
			best = (int)q;
			best_used = used;
		}
	}
	return best;
}

/* The n-th ring (modulo the count) of ifindex, for round-robin sharing. */
static struct ring *ring_mgr_nth(unsigned ifindex, unsigned n, unsigned count)
{
	unsigned i = 0;

	for (struct ring_mgr_ring *e = ring_mgr_rings; e; e = e->next)
		if (e->ring->ifindex == ifindex && i++ == n % count)
			return e->ring;
	return NULL;
}

static unsigned ring_mgr_count_locked(unsigned ifindex)
{
	unsigned count = 0;

	for (struct ring_mgr_ring *e = ring_mgr_rings; e; e = e->next)
		count += e->ring->ifindex == ifindex;
	return count;
}

static struct ring *ring_mgr_get_locked(const char *ifname, unsigned ifindex, uint64_t key)
{
	struct ring *ring = NULL;

	for (struct ring_mgr_binding *b = ring_mgr_bindings; b; b = b->next)
		if (b->ifindex == ifindex && b->key == key)
			ring = b->ring;
	if (!ring) {
		ring_mgr_ensure_config();
		unsigned queues = ring_mgr_cfg.queues ? ring_mgr_cfg.queues : ring_mgr_queue_count(ifname);
		unsigned limit = ring_mgr_cfg.limit_per_interface;
		unsigned count = ring_mgr_count_locked(ifindex);
		bool spanning = queues > 1 && ring_mgr_spanning();
		/* A spanning ring has a member on every queue and counts on
		 * queue 0, where it sends. */
		int queue = ring_mgr_free_queue(ifindex, spanning ? 1 : queues);
		if (queue >= 0 && (!limit || count < limit)) {
			ring = spanning ? ring_open_queues(ifname, queues, &ring_mgr_cfg.ring)
					: ring_open(ifname, (unsigned)queue, &ring_mgr_cfg.ring);
			__atomic_add_fetch(&ring_mgr_gen, 1, __ATOMIC_ACQ_REL);
			if (!ring)
				return NULL;
			struct ring_mgr_ring *e = calloc(1, sizeof(*e));
			if (!e) {
				ring_close(ring);
				errno = ENOMEM;
				return NULL;
			}
			/* The loop backend may not know the index of its name. */
			ring->ifindex = ifindex;
			e->ring = ring;
			e->next = ring_mgr_rings;
			ring_mgr_rings = e;
		} else if (count) {
			ring = ring_mgr_nth(ifindex, ring_mgr_rr++, count);
		} else {
			errno = EBUSY;
			return NULL;
		}
		struct ring_mgr_binding *b = calloc(1, sizeof(*b));
		if (b) { /* without it the key just gets a ring again next time */
			b->ifindex = ifindex;
			b->key = key;
			b->ring = ring;
			b->next = ring_mgr_bindings;
			ring_mgr_bindings = b;
		}
	}
	ring_mgr_find(ring)->refs++;
	return ring;
}

/* Names of interfaces that do not exist (tests' loop rings) get an index
 * from the name, above any real one, so they still key the tables. */
static unsigned ring_mgr_index_of(const char *ifname)
{
	unsigned ifindex = if_nametoindex(ifname);
	uint32_t hash = 2166136261u;

	if (ifindex)
		return ifindex;
	for (const char *c = ifname; *c; c++)
		hash = (hash ^ (uint8_t)*c) * 16777619u;
	return hash | 0x80000000u;
}

struct ring *ring_mgr_get(const char *ifname, uint64_t key)
{
	pthread_mutex_lock(&ring_mgr_lock);
	struct ring *ring = ring_mgr_get_locked(ifname, ring_mgr_index_of(ifname), key);
	pthread_mutex_unlock(&ring_mgr_lock);
	return ring;
}

struct ring *ring_mgr_get_by_index(unsigned ifindex, uint64_t key)
{
	char ifname[IF_NAMESIZE];

	if (!if_indextoname(ifindex, ifname)) {
		errno = ENODEV;
		return NULL;
	}
	pthread_mutex_lock(&ring_mgr_lock);
	struct ring *ring = ring_mgr_get_locked(ifname, ifindex, key);
	pthread_mutex_unlock(&ring_mgr_lock);
	return ring;
}

/* Unlinks ring and its bindings; the caller closes it (or not). */
static void ring_mgr_unlink(struct ring *ring)
{
	__atomic_add_fetch(&ring_mgr_gen, 1, __ATOMIC_ACQ_REL);
	for (struct ring_mgr_binding **b = &ring_mgr_bindings; *b;) {
		if ((*b)->ring == ring) {
			struct ring_mgr_binding *gone = *b;
			*b = gone->next;
			free(gone);
		} else {
			b = &(*b)->next;
		}
	}
	for (struct ring_mgr_ring **e = &ring_mgr_rings; *e; e = &(*e)->next) {
		if ((*e)->ring == ring) {
			struct ring_mgr_ring *gone = *e;
			*e = gone->next;
			free(gone);
			return;
		}
	}
}

void ring_mgr_put(struct ring *ring)
{
	if (!ring)
		return;
	pthread_mutex_lock(&ring_mgr_lock);
	struct ring_mgr_ring *e = ring_mgr_find(ring);
	if (!e) {
		/* Forgotten after fork, or never ours: not ours to close. */
		pthread_mutex_unlock(&ring_mgr_lock);
		return;
	}
	if (--e->refs == 0) {
		ring_mgr_unlink(ring);
		ring_close(ring);
	}
	pthread_mutex_unlock(&ring_mgr_lock);
}

unsigned ring_mgr_refs(const struct ring *ring)
{
	pthread_mutex_lock(&ring_mgr_lock);
	struct ring_mgr_ring *e = ring_mgr_find(ring);
	unsigned refs = e ? e->refs : 0;
	pthread_mutex_unlock(&ring_mgr_lock);
	return refs;
}

unsigned ring_mgr_count(const char *ifname)
{
	pthread_mutex_lock(&ring_mgr_lock);
	unsigned count = ring_mgr_count_locked(ring_mgr_index_of(ifname));
	pthread_mutex_unlock(&ring_mgr_lock);
	return count;
}

void ring_mgr_close_all(void)
{
	pthread_mutex_lock(&ring_mgr_lock);
	while (ring_mgr_rings) {
		struct ring *ring = ring_mgr_rings->ring;
		ring_mgr_unlink(ring);
		ring_close(ring);
	}
	ring_mgr_rr = 0;
	pthread_mutex_unlock(&ring_mgr_lock);
}

void ring_mgr_forget_after_fork(void)
{
	/* The child has one thread; the lock may have been held by a parent
	 * thread at fork time, so start from a fresh one. */
	pthread_mutex_init(&ring_mgr_lock, NULL);
	while (ring_mgr_rings) {
		struct ring_mgr_ring *e = ring_mgr_rings;
		/* Closing the ring here would detach the parent's flows; the
		 * backend only drops the child's copies of the parent's fds so
		 * the parent's membership ends with the parent. The child opens
		 * rings of its own (its own vmad membership) when it needs them. */
		if (e->ring->ops->forget)
			e->ring->ops->forget(e->ring);
		ring_mgr_unlink(e->ring);
	}
}
