/* A ring domain: the UMEM of one (interface, queue) shared by every process
 * that accelerates traffic there (docs/process_model.md).
 *
 * vmad creates it: a memfd holding a shared header, a state word per frame,
 * the free TX frames, and the frames themselves; the "UMEM socket" that
 * registers the frames and owns the one fill and one completion ring of
 * the queue. Each member process gets its own XSK bound to that UMEM with
 * XDP_SHARED_UMEM (its own RX and TX rings) and maps the memfd and the fill
 * and completion rings.
 *
 * Frames [0, rx_frames) receive, [rx_frames, rx_frames + tx_frames) send.
 * Each frame's state word says where it is (RING_DOMAIN_ST_*) and which
 * member holds it, so vmad can take back everything a dead member held.
 * Shared structures (fill ring, completion ring, the free TX stack) change
 * only under the domain lock, a robust process-shared mutex: a member that
 * dies holding it leaves it to the next taker, which repairs the TX stack
 * from the state words. Members batch their lock takes (refills, TX frame
 * caches), so an uncontended single process pays one lock per batch. */
#ifndef VMA_RING_RING_DOMAIN_H
#define VMA_RING_RING_DOMAIN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ring/ring.h"
#include "ring/ring_spin.h"
#include "ring/ring_xdp_maps.h"
#include "ring/ring_xsk.h"

#define RING_DOMAIN_MAGIC 0x564d4144u /* "VMAD" */
#define RING_DOMAIN_VERSION 2

/* Frame state word: kind in the low byte, member slot above it. */
enum ring_domain_state {
	RING_DOMAIN_ST_FREE = 0, /* TX frame on the shared free stack */
	RING_DOMAIN_ST_FILL = 1, /* RX frame given to the kernel (fill ring, or an RX ring not yet read) */
	RING_DOMAIN_ST_HELD = 2, /* a member has it: received, cached or being written */
	RING_DOMAIN_ST_TXQ = 3,  /* in a member's TX ring or the kernel until its completion */
};
#define RING_DOMAIN_STATE(kind, slot) ((uint32_t)(kind) | (uint32_t)(slot) << 8)
#define RING_DOMAIN_KIND(word) ((word) & 0xffu)
#define RING_DOMAIN_SLOT(word) ((word) >> 8)

enum ring_domain_member_state {
	RING_DOMAIN_M_FREE = 0,
	RING_DOMAIN_M_ACTIVE = 1,
	RING_DOMAIN_M_RECLAIMING = 2, /* gone; vmad is taking its frames back */
};

struct ring_domain_member {
	int32_t pid;
	uint32_t state;
	uint32_t uid;
	uint32_t pad;
	uint64_t joined_ns;
};

/* Counters every member and vmad add to under the lock. */
struct ring_domain_counters {
	uint64_t fill_deferred;     /* refills that left frames for later (ring looked full) */
	uint64_t double_returns;    /* RX frames freed while the kernel had them: ignored */
	uint64_t rx_unknown;        /* RX descriptors for frames a member held: dropped */
	uint64_t lock_repairs;      /* the lock was found held by a dead member */
	uint64_t members_reaped;
	uint64_t frames_reclaimed;  /* taken back from dead members */
};

/* The header at offset 0 of the memfd. Offsets are from its start. */
struct ring_domain_shared {
	uint32_t magic;
	uint32_t version;
	uint32_t ifindex;
	uint32_t queue;
	uint32_t rx_frames;
	uint32_t tx_frames;
	uint32_t frame_size;
	uint32_t frame_headroom;
	uint32_t fill_size;
	uint32_t comp_size;
	uint32_t rx_descs;          /* each member's RX ring */
	uint32_t tx_descs;          /* each member's TX ring */
	uint64_t state_off;         /* uint32_t[rx_frames + tx_frames] */
	uint64_t tx_free_off;       /* uint32_t[tx_frames]: frame numbers */
	uint64_t frames_off;        /* page aligned: the UMEM */
	uint64_t total_size;
	pthread_mutex_t lock;       /* robust, process-shared */
	uint32_t tx_free_count;
	uint32_t generation;        /* bumped when a member joins or leaves */
	struct ring_domain_counters counters;
	struct ring_domain_member members[RING_XDP_MAX_MEMBERS];
	/* Busy-polling permits of every member's threads (ring_spin.h). */
	struct ring_spin_board spin;
};

/* One process's view of a domain. */
struct ring_domain {
	struct ring_domain_shared *sh;
	size_t map_size;
	uint8_t *frames;            /* sh + frames_off: the UMEM area */
	uint32_t *state;
	uint32_t *tx_free;
	struct ring_xsk_ring fill;
	struct ring_xsk_ring comp;
	int memfd;
	int umem_fd;                /* the UMEM socket (fill / completion rings) */
	bool creator;               /* vmad: destroy tears the UMEM down */
};

/* Geometry vmad creates a domain with (counts are powers of two). */
struct ring_domain_geometry {
	uint32_t rx_frames;
	uint32_t tx_frames;
	uint32_t rx_descs;
	uint32_t tx_descs;
	bool huge_pages;    /* frames on huge pages when the system has them free */
};

/* ---- vmad --------------------------------------------------------------- */

/* Bytes of memfd a domain of geo needs (header, arrays, frames). */
size_t ring_domain_size(const struct ring_domain_geometry *geo);
/* Lays out the header, state words and free TX stack over size bytes at
 * mem (RX frames FILL, TX frames free) without any socket: create uses it,
 * and the unit tests with anonymous shared memory and rings of their own. */
int ring_domain_init_memory(struct ring_domain *d, void *mem, size_t size, const struct ring_domain_geometry *geo,
			    unsigned ifindex, unsigned queue);

/* A memfd of at least *size bytes for a domain, resized and with *size set
 * to its real size. With huge set, on huge pages (MFD_HUGETLB, the size
 * rounded up to a huge page) when enough are free, else on ordinary pages:
 * never fails for lack of huge pages. -errno on other errors. */
int ring_domain_memfd(size_t *size, bool huge);
/* Whether memfd is backed by huge pages. */
bool ring_domain_memfd_is_huge(int memfd);

/* Creates the memfd, the header, the UMEM socket bound to (ifindex, queue)
 * with xdp_flags (XDP_COPY / XDP_ZEROCOPY / 0) and puts every RX frame in
 * the fill ring. 0 or -errno; on error nothing is left. */
int ring_domain_create(struct ring_domain *d, const struct ring_domain_geometry *geo, unsigned ifindex,
		       unsigned queue, uint16_t xdp_flags);
/* A member's two XSKs, both bound to the domain's UMEM and queue: *rx_fd
 * with the member RX ring alone (the caller registers it in the XSK map;
 * the member sleeps on it) and *tx_fd with the member TX ring alone (its
 * doorbell). Two sockets, not one with both rings: in copy mode the
 * kernel's poll of an XSK that has a TX ring transmits from it under the
 * socket's mutex, so every epoll_wait or poll that looked at a member's
 * wait fd took the lock its senders' doorbells take (docs/ring.md, "Two
 * sockets per member"). 0 with both set, or -errno and neither. */
int ring_domain_member_sockets(struct ring_domain *d, int *rx_fd, int *tx_fd);
/* Claims a member slot for pid/uid (ACTIVE): want_slot, or with -1 the
 * lowest free one. -ENOSPC when full, -EBUSY when want_slot is taken. */
int ring_domain_member_add(struct ring_domain *d, int want_slot, pid_t pid, uid_t uid);
/* After the member's XSK left the XSK map and its flows were removed: takes
 * back every frame it held or had in its RX / TX rings (read through its
 * rx_fd and tx_fd, which the caller closes afterwards; -1: none) and frees
 * the slot. Returns the frames reclaimed. */
unsigned ring_domain_member_reclaim(struct ring_domain *d, unsigned slot, int rx_fd, int tx_fd);
/* Unmaps everything; the creator also closes the UMEM socket and memfd. */
void ring_domain_destroy(struct ring_domain *d);

/* ---- members ------------------------------------------------------------ */

/* Maps a domain vmad handed over (fds stay owned by d, closed by detach). */
int ring_domain_attach(struct ring_domain *d, int memfd, int umem_fd);
void ring_domain_detach(struct ring_domain *d);

/* Takes the lock; a lock left by a dead member is repaired first. */
void ring_domain_lock(struct ring_domain *d);
void ring_domain_unlock(struct ring_domain *d);

/* Lock held. Puts up to n RX frame addresses in the fill ring (state FILL)
 * and returns how many fitted. Frames not HELD by slot are skipped and
 * counted (double return). */
uint32_t ring_domain_fill_locked(struct ring_domain *d, unsigned slot, const uint64_t *addrs, uint32_t n);
/* Lock held. Moves every completed TX frame back to the free stack.
 * Returns the count. */
uint32_t ring_domain_reap_locked(struct ring_domain *d);
/* Lock held. Takes up to max free TX frames for slot (state HELD); frame
 * numbers in out. */
uint32_t ring_domain_tx_take_locked(struct ring_domain *d, unsigned slot, uint32_t *out, uint32_t max);
/* Lock held. Gives TX frames back to the free stack. */
void ring_domain_tx_give_locked(struct ring_domain *d, const uint32_t *frames, uint32_t n);
/* Whether the completion ring has entries (no lock: a hint). */
static inline bool ring_domain_has_completions(const struct ring_domain *d)
{
	return __atomic_load_n(d->comp.producer, __ATOMIC_ACQUIRE) != __atomic_load_n(d->comp.consumer,
										   __ATOMIC_RELAXED);
}

static inline uint32_t ring_domain_frame_of(const struct ring_domain *d, uint64_t addr)
{
	return (uint32_t)(addr / d->sh->frame_size);
}

/* Frame state words are written by their holder without the lock (a frame
 * has one holder at a time); vmad reads them only for dead members. */
static inline void ring_domain_set_state(struct ring_domain *d, uint32_t frame, uint32_t word)
{
	__atomic_store_n(&d->state[frame], word, __ATOMIC_RELAXED);
}

static inline uint32_t ring_domain_get_state(const struct ring_domain *d, uint32_t frame)
{
	return __atomic_load_n(&d->state[frame], __ATOMIC_RELAXED);
}

#endif
