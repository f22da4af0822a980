/* The verbs backend's share groups (docs/verbs.md, "Share groups"): a
 * listening or bound port that several processes (fork, SO_REUSEPORT) or
 * several rings of one process use. A device steers by rules, not by a
 * program: every member puts the same 3-tuple rule on its own QP and the
 * device gives each a copy of every frame, as it does for a multicast
 * group. Which member takes a new flow is decided by each member alone,
 * from one table they all read: the hash of the remote address and port
 * picks one of the group's members, as SO_REUSEPORT (and our XDP program)
 * spreads; the others drop the frame without a word. The taker's
 * connection then has a 5-tuple rule of its own, tested before the
 * 3-tuples, so only the first segments of a flow are seen by all.
 *
 * The table (the "board") is a file in /dev/shm per network namespace,
 * device and port, mapped shared by every process that steers a 3-tuple
 * there. Writers take an open-file-description lock on one byte; each
 * process holds a lock on its own byte for as long as it lives, so that a
 * process killed by SIGKILL is seen dead (its byte free) by the others,
 * which then take its members out. Readers (the admission on the packet
 * path) read without a lock, under the group's sequence counter.
 *
 * The board also lists each process's TCP connections (their 5-tuples): a
 * process killed by SIGKILL never closes them, and the member that takes
 * its members out probes each peer so that it is reset, as the kernel or
 * vmad would (vmad_orphan.h). A thread of each process looks at the other
 * processes' locks a few times a second, so that this happens even when
 * no new flow arrives. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "log/vlog.h"
#include "os/os.h"
#include "ring/ring_flow.h"
#include "ring/ring_verbs.h"
#include "ring/ring_xdp_maps.h"
#include "vmad/vmad_orphan.h"

#define RVS_MAGIC 0x76736872u   /* "vshr" */
#define RVS_VERSION 2u
#define RVS_NAME "/dev/shm/vma-verbs-share-v2"
#define RVS_MAX_PROCS 64u
#define RVS_MAX_GROUPS 256u
/* Lock bytes, far beyond the table (locks need no data under them): the
 * writers' lock, then one per process slot. */
#define RVS_LOCK_WRITERS (1ll << 20)
#define RVS_LOCK_PROC(slot) (RVS_LOCK_WRITERS + 1 + (slot))
/* A member id: the process slot and a serial number of the board (from 1). */
#define RVS_MEMBER_SLOT(id) ((id) >> 24)
/* How often a member that keeps seeing flows picked for another process
 * checks that process is alive. */
#define RVS_PROBE_NS 50000000ull
/* The watcher's period, and the connections listed per process (more are
 * not probed when it dies: their peers find out at their next segment). */
#define RVS_WATCH_NS 100000000l
/* A dead process's peers are probed twice: once its steering is surely
 * gone (the kernel tears a killed process's rules down as it closes its
 * files, around when its lock goes), and again past Linux's limit of one
 * challenge ACK per connection and half second (tcp_invalid_ratelimit). */
#define RVS_PROBE_FIRST_NS 100000000ull
#define RVS_PROBE_AGAIN_NS 600000000ull
#define RVS_CONNS_PER_PROC 4096u
#define RVS_ORPHANS_MAX 1024u

struct rvs_group {
	uint32_t seq;        /* odd while a writer changes the group */
	uint32_t count;      /* members; 0: the entry is free */
	uint32_t local_ip;
	uint16_t local_port;
	uint8_t proto;
	uint8_t pad;
	uint32_t members[RING_VERBS_SHARE_MAX_MEMBERS];
};

/* A TCP connection of a process; written by that process only (and by
 * the writer that takes the dead process out). */
struct rvs_conn {
	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;
	uint32_t used;
};

struct rvs_board {
	uint32_t magic;
	uint32_t version;
	uint32_t next_serial;
	uint32_t pad;
	uint32_t proc_pid[RVS_MAX_PROCS];   /* 0: the slot is free */
	struct rvs_group groups[RVS_MAX_GROUPS];
	struct rvs_conn conns[RVS_MAX_PROCS][RVS_CONNS_PER_PROC];
};

/* This process's view of one board. */
struct ring_verbs_board {
	struct ring_verbs_board *next;
	char path[128];
	int fd;                 /* -1: not open in this process (after fork) */
	int slot;               /* our process slot; -1: none yet */
	struct rvs_board *b;
	uint64_t probe_ns[RVS_MAX_PROCS];
	unsigned conn_next;     /* where to look for a free entry of ours */
	/* The writers' lock is one open file description's: the threads of
	 * this process (lanes, the watcher) take this mutex around it. */
	pthread_mutex_t mu;
	unsigned rings;         /* our rings using it; the last one out may remove the file */
	struct ring_verbs_board *retired_next;
};

/* Guarded by the flows lock of ring_verbs_flow.c (every join and leave
 * runs under it). */
static struct ring_verbs_board *rvs_boards;
/* Boards whose file the last process removed: kept (the watcher may be
 * looking at one) but never used again. */
static struct ring_verbs_board *rvs_retired;
/* The IPPROTO_RAW socket of the orphans' probes, and the watcher. */
static int rvs_raw_fd = -1;
static bool rvs_watching;
/* Probes to send (the watcher sends them, off the packet path). */
struct rvs_probe {
	struct rvs_conn conn;
	uint64_t due_ns;
	unsigned round;
};
static pthread_mutex_t rvs_probe_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rvs_probe *rvs_probes;
static unsigned rvs_nprobes;

static int rvs_lock(int fd, short type, long long start, bool wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = 1 };
	return OS_CALL(fcntl, fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
}

/* Whether the process of slot still holds its byte (checked from another
 * open file description: ours never conflicts with itself). */
static bool rvs_proc_alive(int fd, unsigned slot)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = RVS_LOCK_PROC(slot), .l_len = 1 };
	if (OS_CALL(fcntl, fd, F_OFD_GETLK, &fl) != 0)
		return true;   /* cannot tell: keep it */
	return fl.l_type != F_UNLCK;
}

static void rvs_write_begin(struct rvs_group *g)
{
	/* A writer that died in the middle left the counter odd: go on from
	 * there (its change is rewritten whole below). */
	__atomic_store_n(&g->seq, (g->seq | 1u), __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void rvs_write_end(struct rvs_group *g)
{
	__atomic_store_n(&g->seq, g->seq + 1u, __ATOMIC_RELEASE);
}

static void rvs_group_remove_at(struct rvs_group *g, unsigned i)
{
	memmove(&g->members[i], &g->members[i + 1], (g->count - i - 1) * sizeof(g->members[0]));
	g->count--;
}

struct rvs_orphans {
	unsigned count;
	struct rvs_conn conn[RVS_ORPHANS_MAX];
};

/* Writers' lock held: takes the members of dead processes out, and their
 * connections (into *orphans, to be probed once the lock is dropped). */
static void rvs_reap_locked(struct ring_verbs_board *bd, struct rvs_orphans *orphans)
{
	struct rvs_board *b = bd->b;
	for (unsigned s = 0; s < RVS_MAX_PROCS; s++) {
		if (!b->proc_pid[s] || (int)s == bd->slot || rvs_proc_alive(bd->fd, s))
			continue;
		for (unsigned i = 0; i < RVS_CONNS_PER_PROC; i++) {
			struct rvs_conn *c = &b->conns[s][i];
			if (!c->used)
				continue;
			if (orphans && orphans->count < RVS_ORPHANS_MAX)
				orphans->conn[orphans->count++] = *c;
			c->used = 0;
		}
		for (unsigned gi = 0; gi < RVS_MAX_GROUPS; gi++) {
			struct rvs_group *g = &b->groups[gi];
			bool changed = false;
			for (unsigned i = 0; i < g->count;) {
				if (RVS_MEMBER_SLOT(g->members[i]) == s) {
					if (!changed)
						rvs_write_begin(g);
					changed = true;
					rvs_group_remove_at(g, i);
				} else {
					i++;
				}
			}
			if (changed)
				rvs_write_end(g);
		}
		vlog_debug("ring: share board %s: process %u (slot %u) is gone: its members are out", bd->path,
			   b->proc_pid[s], s);
		b->proc_pid[s] = 0;
	}
}

/* The writers' lock; the dead are taken out on the way in. *orphans
 * (NULL: dropped) collects their connections for rvs_board_unlock. */
static int rvs_board_lock(struct ring_verbs_board *bd, struct rvs_orphans *orphans)
{
	pthread_mutex_lock(&bd->mu);
	while (rvs_lock(bd->fd, F_WRLCK, RVS_LOCK_WRITERS, true) != 0) {
		if (errno != EINTR) {
			int err = -errno;
			pthread_mutex_unlock(&bd->mu);
			return err;
		}
	}
	rvs_reap_locked(bd, orphans);
	return 0;
}

static void rvs_probe_send(const struct rvs_conn *c, unsigned *sent, int *err)
{
	int e = vmad_orphan_probe(&rvs_raw_fd, c->local_ip, c->local_port, c->remote_ip, c->remote_port);
	if (e)
		*err = e;
	else
		(*sent)++;
}

/* Drops the writers' lock, then has the peers of the dead processes'
 * connections reset: their steering is gone, so the answers to the probes
 * reach a stack without the connection (a listener of the port, here or
 * in another member, or the kernel), which resets the peer. */
static void rvs_board_unlock(struct ring_verbs_board *bd, struct rvs_orphans *orphans)
{
	rvs_lock(bd->fd, F_UNLCK, RVS_LOCK_WRITERS, false);
	pthread_mutex_unlock(&bd->mu);
	if (!orphans || !orphans->count)
		return;
	vlog_info("ring: a process sharing %s died with %u TCP connections: their peers are reset", bd->path,
		  orphans->count);
	uint64_t due = ring_verbs_clock_ns(CLOCK_MONOTONIC) + RVS_PROBE_FIRST_NS;
	pthread_mutex_lock(&rvs_probe_mu);
	struct rvs_probe *grown = rvs_watching ? realloc(rvs_probes, (rvs_nprobes + orphans->count) * sizeof(*grown))
					       : NULL;
	if (grown) {
		rvs_probes = grown;
		for (unsigned i = 0; i < orphans->count; i++)
			rvs_probes[rvs_nprobes++] = (struct rvs_probe){ .conn = orphans->conn[i], .due_ns = due };
	}
	pthread_mutex_unlock(&rvs_probe_mu);
	if (!grown) {
		/* No watcher to send them later: now, once. */
		unsigned sent = 0;
		int err = 0;
		for (unsigned i = 0; i < orphans->count; i++)
			rvs_probe_send(&orphans->conn[i], &sent, &err);
		if (err)
			vlog_warn("ring: %u of %u peers of a dead process not probed (%s; CAP_NET_RAW is needed): they "
				  "find out at their next segment", orphans->count - sent, orphans->count, strerror(-err));
	}
	orphans->count = 0;
}

/* The watcher: sends the probes that are due. */
static void rvs_probes_run(void)
{
	uint64_t now = ring_verbs_clock_ns(CLOCK_MONOTONIC);
	unsigned sent = 0, failed = 0;
	int err = 0;
	pthread_mutex_lock(&rvs_probe_mu);
	for (unsigned i = 0; i < rvs_nprobes;) {
		struct rvs_probe *p = &rvs_probes[i];
		if (p->due_ns > now) {
			i++;
			continue;
		}
		unsigned before = sent;
		rvs_probe_send(&p->conn, &sent, &err);
		failed += sent == before && p->round == 0;
		if (p->round++ == 0 && sent != before) {
			p->due_ns = now + RVS_PROBE_AGAIN_NS;
			i++;
		} else {
			*p = rvs_probes[--rvs_nprobes];
		}
	}
	pthread_mutex_unlock(&rvs_probe_mu);
	if (failed)
		vlog_warn("ring: %u peers of a dead process not probed (%s; CAP_NET_RAW is needed): they find out at "
			  "their next segment", failed, strerror(-err));
}

static int rvs_board_map(struct ring_verbs_board *bd)
{
	int fd = open(bd->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	/* Processes that dropped root (a worker running as nobody) share the
	 * board with the ones that did not. */
	(void)fchmod(fd, 0666);
	struct stat st;
	if (fstat(fd, &st) != 0 || (st.st_size < (off_t)sizeof(struct rvs_board) &&
				    ftruncate(fd, sizeof(struct rvs_board)) != 0)) {
		int err = -errno;
		os_close_nocancel(fd);
		return err;
	}
	void *m = mmap(NULL, sizeof(struct rvs_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int err = -errno;
		os_close_nocancel(fd);
		return err;
	}
	bd->fd = fd;
	bd->b = m;
	return 0;
}

/* Our process slot on the board: claimed once, held until we exit. */
static int rvs_claim_slot_locked(struct ring_verbs_board *bd)
{
	struct rvs_board *b = bd->b;
	if (b->magic != RVS_MAGIC) {
		/* A fresh file: ftruncate gave it zeroes. */
		b->version = RVS_VERSION;
		__atomic_store_n(&b->magic, RVS_MAGIC, __ATOMIC_RELEASE);
	}
	if (b->version != RVS_VERSION)
		return -EPROTO;
	if (bd->slot >= 0)
		return 0;
	for (unsigned s = 0; s < RVS_MAX_PROCS; s++) {
		if (b->proc_pid[s])
			continue;
		if (rvs_lock(bd->fd, F_WRLCK, RVS_LOCK_PROC(s), false) != 0)
			continue;   /* a process whose claim we cannot see yet */
		for (unsigned i = 0; i < RVS_CONNS_PER_PROC; i++)
			b->conns[s][i].used = 0;
		b->proc_pid[s] = (uint32_t)getpid();
		bd->slot = (int)s;
		return 0;
	}
	return -ENOSPC;
}

static void rvs_watch_start(void);

/* The board of r's device and port, open and with our slot claimed. */
/* Opens and maps the board at path with our slot claimed, or NULL. A file
 * its last process removed while we opened it is left for a fresh one. */
static struct ring_verbs_board *rvs_board_open(const char *path, int *err)
{
	struct ring_verbs_board *bd = calloc(1, sizeof(*bd));
	if (!bd) {
		*err = -ENOMEM;
		return NULL;
	}
	snprintf(bd->path, sizeof(bd->path), "%s", path);
	pthread_mutex_init(&bd->mu, NULL);
	for (int attempt = 0; attempt < 4; attempt++) {
		bd->slot = -1;
		*err = rvs_board_map(bd);
		if (*err)
			break;
		struct rvs_orphans orphans;
		orphans.count = 0;
		*err = rvs_board_lock(bd, &orphans);
		struct stat mine, named;
		bool stale = !*err && fstat(bd->fd, &mine) == 0 &&
			     (stat(bd->path, &named) != 0 || mine.st_ino != named.st_ino);
		if (!*err && !stale)
			*err = rvs_claim_slot_locked(bd);
		if (!*err || stale)
			rvs_board_unlock(bd, &orphans);
		if (!*err && !stale)
			return bd;
		munmap(bd->b, sizeof(struct rvs_board));
		os_close_nocancel(bd->fd);
		bd->fd = -1;
		if (!stale)
			break;
	}
	free(bd);
	return NULL;
}

/* The board of r's device and port, open and with our slot claimed. */
static struct ring_verbs_board *rvs_board_get(struct ring_verbs *r, int *err)
{
	if (r->share_board)
		return r->share_board;
	char path[128];
	struct stat ns;
	unsigned long long netns = stat("/proc/self/ns/net", &ns) == 0 ? (unsigned long long)ns.st_ino : 0;
	snprintf(path, sizeof(path), RVS_NAME ".%llu.%s.%u", netns, ibv_get_device_name(r->ctx->device), r->port);
	struct ring_verbs_board *bd;
	for (bd = rvs_boards; bd; bd = bd->next)
		if (strcmp(bd->path, path) == 0)
			break;
	if (!bd) {
		bd = rvs_board_open(path, err);
		if (!bd)
			return NULL;
		bd->next = rvs_boards;
		__atomic_store_n(&rvs_boards, bd, __ATOMIC_RELEASE);   /* the watcher reads the list */
		rvs_watch_start();
	}
	bd->rings++;
	r->share_board = bd;
	return bd;
}

/* r closes: the last of our rings on its board removes the file when no
 * other process is on it (a board per testbed namespace would pile up in
 * /dev/shm otherwise). */
static void rvs_board_put(struct ring_verbs *r)
{
	struct ring_verbs_board *bd = r->share_board;
	r->share_board = NULL;
	if (!bd || --bd->rings || bd->fd < 0)
		return;
	struct rvs_orphans *orphans = malloc(sizeof(*orphans));
	if (orphans)
		orphans->count = 0;
	if (rvs_board_lock(bd, orphans) != 0) {
		free(orphans);
		return;
	}
	bool alone = true;
	for (unsigned s = 0; s < RVS_MAX_PROCS && alone; s++)
		alone = !bd->b->proc_pid[s] || (int)s == bd->slot;
	if (alone) {
		unlink(bd->path);
		bd->b->proc_pid[bd->slot] = 0;
	}
	rvs_board_unlock(bd, orphans);
	free(orphans);
	if (!alone)
		return;
	for (struct ring_verbs_board **p = &rvs_boards; *p; p = &(*p)->next) {
		if (*p == bd) {
			/* Out of the list for new rings; the watcher may still be
			 * on it, and reads bd->next: left as it is. */
			__atomic_store_n(p, bd->next, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_lock(&bd->mu);   /* the watcher looks at bd->fd under it */
	os_close_nocancel(bd->fd);
	bd->fd = -1;
	bd->slot = -1;
	pthread_mutex_unlock(&bd->mu);
	bd->retired_next = rvs_retired;
	rvs_retired = bd;
}

static bool rvs_group_is(const struct rvs_group *g, const struct ring_flow *three)
{
	return g->count && g->proto == three->proto && g->local_ip == three->local_ip &&
	       g->local_port == three->local_port;
}

/* r's member of three's group; *id its id as read (an entry freed or
 * reused while we read does not match). */
static struct ring_verbs_member *rvs_member_find(struct ring_verbs *r, const struct ring_flow *three, uint32_t *id)
{
	for (unsigned i = 0; i < r->member_len; i++) {
		struct ring_verbs_member *m = &r->members[i];
		uint32_t before = __atomic_load_n(&m->id, __ATOMIC_ACQUIRE);
		if (!before)
			continue;
		bool same = m->three.proto == three->proto && m->three.local_ip == three->local_ip &&
			    m->three.local_port == three->local_port;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (same && __atomic_load_n(&m->id, __ATOMIC_RELAXED) == before) {
			if (id)
				*id = before;
			return m;
		}
	}
	return NULL;
}

/* A free entry of r's (its own lane only: it may grow the array). */
static struct ring_verbs_member *rvs_member_slot(struct ring_verbs *r)
{
	for (unsigned i = 0; i < r->member_len; i++)
		if (!__atomic_load_n(&r->members[i].id, __ATOMIC_RELAXED))
			return &r->members[i];
	if (r->member_len == r->member_cap) {
		unsigned cap = r->member_cap ? r->member_cap * 2 : 4;
		struct ring_verbs_member *grown = realloc(r->members, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		r->members = grown;
		r->member_cap = cap;
	}
	struct ring_verbs_member *m = &r->members[r->member_len++];
	m->id = 0;
	return m;
}

static void rvs_member_set(struct ring_verbs *r, struct ring_verbs_member *slot, const struct ring_verbs_member *m)
{
	slot->three = m->three;
	slot->board = m->board;
	slot->group = m->group;
	__atomic_store_n(&slot->id, m->id, __ATOMIC_RELEASE);
	r->base.share_members++;
}

int ring_verbs_share_join(struct ring_verbs *r, const struct ring_flow *three)
{
	if (rvs_member_find(r, three, NULL))
		return 0;
	struct ring_verbs_member *slot = rvs_member_slot(r);
	if (!slot)
		return -ENOMEM;
	int err = 0;
	struct ring_verbs_board *bd = rvs_board_get(r, &err);
	if (!bd)
		return err;
	struct rvs_orphans orphans;
	orphans.count = 0;
	err = rvs_board_lock(bd, &orphans);
	if (err)
		return err;
	struct rvs_board *b = bd->b;
	struct rvs_group *g = NULL, *free_g = NULL;
	for (unsigned gi = 0; gi < RVS_MAX_GROUPS && !g; gi++) {
		if (rvs_group_is(&b->groups[gi], three))
			g = &b->groups[gi];
		else if (!b->groups[gi].count && !free_g)
			free_g = &b->groups[gi];
	}
	if (!g && !free_g)
		err = -ENOSPC;
	else if (g && g->count == RING_VERBS_SHARE_MAX_MEMBERS)
		err = -ENOSPC;
	if (!err) {
		if (!g) {
			g = free_g;
			rvs_write_begin(g);
			g->proto = three->proto;
			g->local_ip = three->local_ip;
			g->local_port = three->local_port;
			g->count = 0;
		} else {
			rvs_write_begin(g);
		}
		/* Never 0 (a free entry of a ring's member list). */
		uint32_t id = (uint32_t)bd->slot << 24 | (b->next_serial++ % 0xffffffu + 1u);
		g->members[g->count++] = id;
		rvs_write_end(g);
		rvs_member_set(r, slot, &(struct ring_verbs_member){
			.three = *three, .board = bd, .group = (uint32_t)(g - b->groups), .id = id });
	}
	rvs_board_unlock(bd, &orphans);
	return err;
}

/* Our member m leaves its group, or (by) stays in it for another ring of
 * the process (a flow moving lanes keeps its place in the spread). */
static void rvs_member_drop(struct ring_verbs *r, struct ring_verbs_member *m, struct ring_verbs *by)
{
	struct ring_verbs_member *slot = by ? rvs_member_slot(by) : NULL;
	if (slot) {
		rvs_member_set(by, slot, m);
	} else if (m->board->fd >= 0) {
		struct ring_verbs_board *bd = m->board;
		struct rvs_group *g = &bd->b->groups[m->group];
		struct rvs_orphans orphans;
	orphans.count = 0;
		if (rvs_board_lock(bd, &orphans) == 0) {
			for (unsigned i = 0; i < g->count; i++) {
				if (g->members[i] == m->id) {
					rvs_write_begin(g);
					rvs_group_remove_at(g, i);
					rvs_write_end(g);
					break;
				}
			}
			rvs_board_unlock(bd, &orphans);
		}
	}
	__atomic_store_n(&m->id, 0u, __ATOMIC_RELEASE);
	r->base.share_members--;
}

void ring_verbs_share_leave(struct ring_verbs *r, const struct ring_flow *three)
{
	struct ring_verbs_member *m = rvs_member_find(r, three, NULL);
	if (m)
		rvs_member_drop(r, m, NULL);
}

void ring_verbs_share_move(struct ring_verbs *from, struct ring_verbs *to, const struct ring_flow *three)
{
	struct ring_verbs_member *m = rvs_member_find(from, three, NULL);
	if (m && !rvs_member_find(to, three, NULL))
		rvs_member_drop(from, m, to);
}

void ring_verbs_share_leave_all(struct ring_verbs *r)
{
	for (unsigned i = 0; i < r->member_len; i++)
		if (r->members[i].id)
			rvs_member_drop(r, &r->members[i], NULL);
	free(r->members);
	r->members = NULL;
	r->member_len = r->member_cap = 0;
	rvs_board_put(r);
}

/* The member the spread picks for h in g (m's own id when the group reads
 * as empty or torn for too long: taking a flow twice is better than
 * never). */
static uint32_t rvs_pick(const struct rvs_group *g, uint32_t h, uint32_t own)
{
	for (unsigned tries = 0; tries < 1000; tries++) {
		uint32_t seq = __atomic_load_n(&g->seq, __ATOMIC_ACQUIRE);
		if (seq & 1u)
			continue;
		uint32_t count = __atomic_load_n(&g->count, __ATOMIC_RELAXED);
		if (count == 0 || count > RING_VERBS_SHARE_MAX_MEMBERS)
			return own;
		uint32_t members[RING_VERBS_SHARE_MAX_MEMBERS];
		for (uint32_t i = 0; i < count; i++)
			members[i] = __atomic_load_n(&g->members[i], __ATOMIC_RELAXED);
		uint32_t pick = ring_xdp_share_pick(members, count, h);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&g->seq, __ATOMIC_RELAXED) == seq)
			return pick;
	}
	return own;
}

bool ring_verbs_share_admit(struct ring *ring, const struct ring_flow *three, uint32_t remote_ip,
			    uint16_t remote_port)
{
	struct ring_verbs *r = ring_verbs_of(ring);
	uint32_t own;
	/* A new flow that came in before its port was handed to the kernel
	 * (a fork-per-connection server, ring_verbs_flow.c): dropped, so that
	 * its SYN's retransmission reaches the kernel's listener, rather than
	 * answered here with a handshake whose last ACK would reach the kernel
	 * (a reset). */
	if (__builtin_expect(r->parked_count != 0, 0) && ring_verbs_flow_parked(r, three))
		return false;
	if (!r->base.share_members)
		return true;
	struct ring_verbs_member *m = rvs_member_find(r, three, &own);
	if (!m)
		return true;
	struct ring_verbs_board *bd = m->board;
	const struct rvs_group *g = &bd->b->groups[m->group];
	uint32_t h = ring_xdp_share_hash(remote_ip, remote_port, three->local_port);   /* the XDP program's spread */
	uint32_t pick = rvs_pick(g, h, own);
	if (pick == own)
		return true;
	/* Another member's: that one takes it, if it lives. A process killed
	 * by SIGKILL did not leave: look now and then (a system call, so not
	 * for every frame); a dead one is taken out, and the flow goes to
	 * whom the spread picks then (every member sees the same). */
	unsigned slot = RVS_MEMBER_SLOT(pick);
	if (bd->fd < 0 || (int)slot == bd->slot || slot >= RVS_MAX_PROCS)
		return false;
	uint64_t now = ring_verbs_clock_ns(CLOCK_MONOTONIC_COARSE);
	if (now - bd->probe_ns[slot] < RVS_PROBE_NS)
		return false;
	bd->probe_ns[slot] = now;
	if (rvs_proc_alive(bd->fd, slot))
		return false;
	struct rvs_orphans *orphans = malloc(sizeof(*orphans));   /* a death: not the packet path */
	if (orphans)
		orphans->count = 0;
	if (rvs_board_lock(bd, orphans) == 0)
		rvs_board_unlock(bd, orphans);
	free(orphans);
	return rvs_pick(g, h, own) == own;
}

unsigned ring_verbs_share_group_size(struct ring *ring, const struct ring_flow *three)
{
	struct ring_verbs_member *m = rvs_member_find(ring_verbs_of(ring), three, NULL);
	return m ? __atomic_load_n(&m->board->b->groups[m->group].count, __ATOMIC_ACQUIRE) : 0;
}

/* ---- connections ---- */

int ring_verbs_share_conn_add(struct ring_verbs *r, const struct ring_flow *five, struct ring_verbs_board **board)
{
	int err = 0;
	*board = NULL;
	if (five->proto != IPPROTO_TCP)
		return -1;
	struct ring_verbs_board *bd = rvs_board_get(r, &err);
	if (!bd)
		return -1;
	struct rvs_conn *table = bd->b->conns[bd->slot];
	for (unsigned n = 0; n < RVS_CONNS_PER_PROC; n++) {
		unsigned i = (bd->conn_next + n) % RVS_CONNS_PER_PROC;
		if (table[i].used)
			continue;
		table[i].local_ip = five->local_ip;
		table[i].remote_ip = five->remote_ip;
		table[i].local_port = five->local_port;
		table[i].remote_port = five->remote_port;
		__atomic_store_n(&table[i].used, 1u, __ATOMIC_RELEASE);
		bd->conn_next = i + 1;
		*board = bd;
		return (int)i;
	}
	return -1;   /* listed full: this one's peer is not probed if we die */
}

void ring_verbs_share_conn_del(struct ring_verbs_board *board, int idx)
{
	if (!board || idx < 0 || board->fd < 0 || board->slot < 0)
		return;
	__atomic_store_n(&board->b->conns[board->slot][idx].used, 0u, __ATOMIC_RELEASE);
}

/* ---- the watcher ---- */

/* A few times a second, a look at the other processes' locks: a process
 * killed while its peers were idle is taken out (and its peers reset)
 * without waiting for a new flow to be picked for it. Reads the list of
 * boards under the flows lock's protection: boards are only ever added
 * (and the list dropped in a forked child, where this thread is gone). */
static void *rvs_watch(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = { 0, RVS_WATCH_NS };
		OS_CALL(nanosleep, &ts, NULL);
		rvs_probes_run();
		for (struct ring_verbs_board *bd = __atomic_load_n(&rvs_boards, __ATOMIC_ACQUIRE); bd; bd = bd->next) {
			pthread_mutex_lock(&bd->mu);
			bool dead = false;
			for (unsigned s = 0; bd->fd >= 0 && s < RVS_MAX_PROCS && !dead; s++)
				dead = __atomic_load_n(&bd->b->proc_pid[s], __ATOMIC_RELAXED) && (int)s != bd->slot &&
				       !rvs_proc_alive(bd->fd, s);
			pthread_mutex_unlock(&bd->mu);
			if (!dead)
				continue;
			struct rvs_orphans *orphans = malloc(sizeof(*orphans));
			if (orphans)
				orphans->count = 0;
			if (rvs_board_lock(bd, orphans) == 0)
				rvs_board_unlock(bd, orphans);
			free(orphans);
		}
	}
	return NULL;
}

static void rvs_watch_start(void)
{
	if (rvs_watching)
		return;
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* The application's signals are for its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rvs_watching = pthread_create(&t, &attr, rvs_watch, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rvs_watching)
		pthread_setname_np(t, "vma-share");
}

/* In a forked child: the boards' descriptions (and the locks on them) are
 * the parent's, and the watcher did not come along. The child opens its
 * own boards when it first needs one. */
void ring_verbs_share_atfork_child(void)
{
	/* The parent's rings keep pointing at these: left allocated and
	 * mapped (the child never touches those rings' members), and kept
	 * reachable for the leak checkers. */
	static struct ring_verbs_board *inherited;
	for (struct ring_verbs_board *bd = rvs_boards, *next; bd; bd = next) {
		next = bd->next;
		if (bd->fd >= 0)
			os_close_nocancel(bd->fd);
		bd->fd = -1;
		pthread_mutex_init(&bd->mu, NULL);
		bd->next = inherited;
		inherited = bd;
	}
	rvs_boards = NULL;
	rvs_watching = false;
	pthread_mutex_init(&rvs_probe_mu, NULL);
	free(rvs_probes);   /* the parent's to send */
	rvs_probes = NULL;
	rvs_nprobes = 0;
	if (rvs_raw_fd >= 0)
		os_close_nocancel(rvs_raw_fd);
	rvs_raw_fd = -1;
}
