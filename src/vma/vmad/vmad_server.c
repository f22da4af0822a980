/* vmad (vmad_server.h, docs/vmad.md, docs/process_model.md).
 *
 * One thread, one poll loop: requests are short (a map update, a socket
 * bind) and a slow client cannot stall the others because replies are sent
 * with MSG_DONTWAIT (a client that does not read its replies is dropped).
 *
 * What vmad holds and why:
 * - per interface: the steering program (ring_xdp_prog) and its maps;
 * - per (interface, queue): the ring domain (memfd, UMEM socket with the
 *   fill and completion rings);
 * - per member connection: a copy of the member's XSK, so that after the
 *   member is gone (even SIGKILL) vmad can still read its RX / TX rings and
 *   take its frames back;
 * - the flow table: which connection steers which key, with the proof it
 *   gave (socket inode, SO_REUSEPORT, uid), to decide who may share a port.
 * vmad never keeps the kernel sockets clients send as proof: a copy would
 * keep the application's port open after the application closed it. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include <bpf/bpf.h>

#include "log/vlog.h"
#include "ring/ring_domain.h"
#include "ring/ring_flow.h"
#include "ring/ring_xdp_prog.h"
#include "vmad/vmad_flow_index.h"
#include "vmad/vmad_orphan.h"
#include "vmad/vmad_peers.h"
#include "vmad/vmad_policy.h"
#include "vmad/vmad_proto.h"
#include "vmad/vmad_server.h"
#include "os/os.h"

#define VMAD_MAX_CONNS 1024
#define VMAD_MAX_IFACES 16
/* Flows of members that are not root, every interface counted (each
 * interface's maps hold RING_XDP_MAX_FLOWS per kind). Entries are touched
 * only once handed out (vmad_flow_index). */
#define VMAD_MAX_FLOWS (2 * RING_XDP_MAX_FLOWS)
#define VMAD_FLOW_BUCKETS (2 * VMAD_MAX_FLOWS) /* a power of two */
#define VMAD_MAX_GIDS 64
/* How long a gone member's XSK stays open before its rings are read back:
 * packets the program redirected just before the XSK left the map may
 * still be on their way into its RX ring. */
#define VMAD_RECLAIM_DELAY_MS 20
#define VMAD_POLL_MAX_MS 1000

enum vmad_conn_state {
	VMAD_CONN_FREE = 0,
	VMAD_CONN_OPEN,     /* connected, not a member yet */
	VMAD_CONN_MEMBER,   /* joined a domain */
	VMAD_CONN_LEAVING,  /* gone; frames reclaimed at leave_at_ms */
};

struct vmad_iface {
	bool used;
	char name[IF_NAMESIZE];
	unsigned ifindex;
	struct ring_xdp_prog *prog;
	int map_xsks, map_flows5, map_flows3, map_groups, map_shares;
	struct ring_domain *domains[RING_XDP_MAX_QUEUES];
	unsigned domain_members[RING_XDP_MAX_QUEUES];
	uint32_t domain_uid[RING_XDP_MAX_QUEUES];
	/* Member slots are per interface (a flow value names a slot, whatever
	 * the queue): one process keeps one slot on every queue it joins. */
	pid_t slot_pid[RING_XDP_MAX_MEMBERS];
	unsigned slot_refs[RING_XDP_MAX_MEMBERS];
	unsigned members;   /* connections MEMBER or LEAVING */
	uint64_t idle_since_ms;
	bool share_used[RING_XDP_MAX_SHARES];
};

struct vmad_conn {
	enum vmad_conn_state state;
	int fd;
	struct ucred cred;
	bool spawner;       /* VMAD_OP_SPAWNER: ADOPTs over it get its credentials */
	gid_t gids[VMAD_MAX_GIDS];
	size_t ngids;
	struct vmad_iface *ifc;
	unsigned queue;
	unsigned slot;
	int xsk_fd;         /* the member's RX socket (in the XSK map) */
	int xsk_tx_fd;      /* its TX socket */
	int peers_fd;       /* its process's peers list (vmad_peers.h), sent with JOIN; -1 = none */
	uint64_t leave_at_ms;
};

/* Who steers a key, and with what proof. */
struct vmad_holder {
	int conn;           /* index in conns */
	unsigned slot;
	unsigned refs;      /* FLOW_ADDs of the same key by the same member */
	uint32_t uid;
	uint64_t ino;       /* inode of the proving socket, 0 = none (root) */
	bool reuseport;
	bool share;         /* asked for VMAD_FLOW_SHARE */
	bool to_kernel;     /* 5-tuple handed to the kernel (RING_XDP_KERNEL_OF) */
};

struct vmad_flow {
	bool used;
	struct vmad_iface *ifc;
	int kind;           /* enum ring_flow_kind */
	union ring_flow_key key;
	int share_idx;      /* vma_shares index, -1 while the value is a plain slot */
	unsigned nholders;
	/* &one, or, once a second member holds the key (a share group),
	 * RING_XDP_MAX_MEMBERS of the heap (vmad_flow_room): nearly every
	 * flow is one connection's 5-tuple, and a table sized for 32
	 * holders each (1.1 KB an entry) capped the flows vmad could keep. */
	struct vmad_holder *holders;
	struct vmad_holder one;
};

/* What the proving socket showed. */
struct vmad_proof {
	uint64_t ino;
	bool reuseport;
};


struct vmad_server {
	const struct vmad_server_config *cfg;
	struct vmad_policy policy;
	int listen_fd;
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct vmad_conn conns[VMAD_MAX_CONNS];
	struct pollfd pfds[VMAD_MAX_CONNS + 1];
	struct vmad_iface ifaces[VMAD_MAX_IFACES];
	/* The flow table, looked up on every FLOW_ADD and FLOW_DEL through
	 * flow_index: a scan of all VMAD_MAX_FLOWS entries (4.5 MB) per request
	 * faulted every page in on the first one, 15 ms of a new member's
	 * first connect() here. */
	struct vmad_flow *flows;    /* VMAD_MAX_FLOWS */
	struct vmad_flow_index flow_index;
	uint64_t idle_since_ms;     /* --auto: no connection and no interface since */
	uint64_t requests, refusals, members_reclaimed, frames_reclaimed, orphans_probed;
	int raw_fd;         /* IPPROTO_RAW: the probes of vmad_probe_orphans; -1 until first use */
	/* Connections of dead members whose process still has members (a
	 * lane's ring and its wait channels are members of their own): probed
	 * once the process's last member is gone, when no entry of its steers
	 * the peer's answer to an XSK nobody reads. */
	struct vmad_orphan_pending {
		pid_t pid;
		struct ring_xdp_key5 key;
	} *pending;         /* heap, grown by vmad_orphan_defer */
	unsigned npending, cap_pending;
};

static volatile sig_atomic_t vmad_stop;

static void vmad_on_signal(int sig)
{
	(void)sig;
	vmad_stop = 1;
}

static uint64_t vmad_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

__attribute__((format(printf, 2, 3))) static void vmad_log(int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (level > vlog_current_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	vlog_print(level, "vmad[%d]: %s", (int)getpid(), line);
}

/* ---- replies ------------------------------------------------------------- */

static int vmad_send(struct vmad_server *s, int ci, struct vmad_reply *rep, const int *fds, unsigned nfds)
{
	struct vmad_conn *c = &s->conns[ci];
	struct iovec iov = { .iov_base = rep, .iov_len = sizeof(*rep) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * VMAD_REPLY_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > VMAD_REPLY_MAX_FDS)
		return -EINVAL;   /* a programming error: never past the buffer */
	rep->nfds = nfds;
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	if (OS_CALL(sendmsg, c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(*rep))
		return -errno;
	return 0;
}

__attribute__((format(printf, 4, 5))) static void vmad_refuse(struct vmad_server *s, struct vmad_reply *rep,
							     int err, const char *fmt, ...)
{
	va_list ap;

	rep->status = err;
	va_start(ap, fmt);
	vsnprintf(rep->message, sizeof(rep->message), fmt, ap);
	va_end(ap);
	s->refusals++;
}

/* ---- interfaces ---------------------------------------------------------- */

static struct vmad_iface *vmad_iface_find(struct vmad_server *s, const char *name)
{
	for (int i = 0; i < VMAD_MAX_IFACES; i++)
		if (s->ifaces[i].used && strcmp(s->ifaces[i].name, name) == 0)
			return &s->ifaces[i];
	return NULL;
}

static void vmad_iface_teardown(struct vmad_iface *ifc)
{
	for (unsigned q = 0; q < RING_XDP_MAX_QUEUES; q++) {
		if (!ifc->domains[q])
			continue;
		ring_domain_destroy(ifc->domains[q]);
		free(ifc->domains[q]);
		ifc->domains[q] = NULL;
	}
	ring_xdp_prog_put(ifc->prog);
	vmad_log(VLOG_DEBUG, "%s: released (program detached)", ifc->name);
	memset(ifc, 0, sizeof(*ifc));
}

static struct vmad_iface *vmad_iface_get(struct vmad_server *s, const char *name, struct vmad_reply *rep)
{
	struct vmad_iface *ifc = vmad_iface_find(s, name);
	unsigned ifindex;

	if (ifc)
		return ifc;
	ifindex = if_nametoindex(name);
	if (!ifindex) {
		vmad_refuse(s, rep, -ENODEV, "no interface %s in vmad's network namespace", name);
		return NULL;
	}
	for (int i = 0; i < VMAD_MAX_IFACES && !ifc; i++)
		if (!s->ifaces[i].used)
			ifc = &s->ifaces[i];
	if (!ifc) {
		vmad_refuse(s, rep, -ENOSPC, "vmad serves %d interfaces already", VMAD_MAX_IFACES);
		return NULL;
	}
	memset(ifc, 0, sizeof(*ifc));
	ifc->prog = ring_xdp_prog_get(name, ifindex, 0);
	if (!ifc->prog) {
		int err = errno ? -errno : -EIO;
		vmad_refuse(s, rep, err, "cannot attach the steering program to %s: %s", name, ring_xdp_reason(err));
		return NULL;
	}
	ifc->used = true;
	snprintf(ifc->name, sizeof(ifc->name), "%s", name);
	ifc->ifindex = ifindex;
	ifc->map_xsks = ring_xdp_prog_map_fd(ifc->prog, RING_XDP_MAP_XSKS);
	ifc->map_flows5 = ring_xdp_prog_map_fd(ifc->prog, RING_XDP_MAP_FLOWS5);
	ifc->map_flows3 = ring_xdp_prog_map_fd(ifc->prog, RING_XDP_MAP_FLOWS3);
	ifc->map_groups = ring_xdp_prog_map_fd(ifc->prog, RING_XDP_MAP_GROUPS);
	ifc->map_shares = ring_xdp_prog_map_fd(ifc->prog, RING_XDP_MAP_SHARES);
	ifc->idle_since_ms = vmad_now_ms();
	vmad_log(VLOG_INFO, "%s: steering program attached (%s mode)", name, ring_xdp_prog_mode(ifc->prog));
	return ifc;
}

static bool vmad_pow2_in(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v >= lo && v <= hi && (v & (v - 1)) == 0;
}

/* ---- flows ----------------------------------------------------------------- */

static int vmad_flow_map(const struct vmad_iface *ifc, int kind)
{
	return kind == RING_FLOW_5TUPLE ? ifc->map_flows5 : kind == RING_FLOW_3TUPLE ? ifc->map_flows3 : ifc->map_groups;
}

static uint32_t vmad_flow_hash(const struct vmad_iface *ifc, int kind, const union ring_flow_key *key)
{
	/* FNV-1a over the key's bytes (ring_flow_key zeroes the padding),
	 * the interface and the kind. */
	const unsigned char *b = (const unsigned char *)key;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < sizeof(*key); i++)
		h = (h ^ b[i]) * 16777619u;
	h = (h ^ (uint32_t)ifc->ifindex) * 16777619u;
	return (h ^ (uint32_t)kind) * 16777619u;
}

static struct vmad_flow *vmad_flow_find(struct vmad_server *s, const struct vmad_iface *ifc, int kind,
					const union ring_flow_key *key)
{
	const struct vmad_flow_index *x = &s->flow_index;

	for (int i = vmad_flow_index_first(x, vmad_flow_hash(ifc, kind, key)); i >= 0; i = vmad_flow_index_next(x, i)) {
		struct vmad_flow *f = &s->flows[i];
		if (f->ifc == ifc && f->kind == kind && memcmp(&f->key, key, sizeof(*key)) == 0)
			return f;
	}
	return NULL;
}

/* A zeroed entry, not yet findable, or NULL when the table is full. */
static struct vmad_flow *vmad_flow_alloc(struct vmad_server *s)
{
	int i = vmad_flow_index_alloc(&s->flow_index);

	if (i < 0)
		return NULL;
	memset(&s->flows[i], 0, sizeof(s->flows[i]));
	s->flows[i].holders = &s->flows[i].one;
	return &s->flows[i];
}

/* Room for one more holder of f: false when none is to be had (all
 * RING_XDP_MAX_MEMBERS hold it, or no memory). */
static bool vmad_flow_room(struct vmad_flow *f)
{
	if (f->nholders >= RING_XDP_MAX_MEMBERS)
		return false;
	if (f->holders != &f->one)
		return true;
	struct vmad_holder *many = calloc(RING_XDP_MAX_MEMBERS, sizeof(*many));
	if (!many)
		return false;
	many[0] = f->one;
	f->holders = many;
	return true;
}

/* Makes f (filled in, used) findable. */
static void vmad_flow_link(struct vmad_server *s, struct vmad_flow *f)
{
	vmad_flow_index_link(&s->flow_index, (int)(f - s->flows), vmad_flow_hash(f->ifc, f->kind, &f->key));
}

/* Gives f back (out of its chain when it was linked). */
static void vmad_flow_release(struct vmad_server *s, struct vmad_flow *f, bool linked)
{
	vmad_flow_index_release(&s->flow_index, (int)(f - s->flows),
				linked ? vmad_flow_hash(f->ifc, f->kind, &f->key) : 0, linked);
	if (f->holders != &f->one)
		free(f->holders);
	memset(f, 0, sizeof(*f));
}

/* Distinct member slots among the holders. */
static unsigned vmad_flow_slots(const struct vmad_flow *f, uint32_t *slots)
{
	unsigned n = 0;

	for (unsigned h = 0; h < f->nholders; h++) {
		unsigned i;
		for (i = 0; i < n && slots[i] != f->holders[h].slot; i++)
			;
		if (i == n)
			slots[n++] = f->holders[h].slot;
	}
	return n;
}

/* Writes the map value for f's holders (or deletes the key with none).
 * One slot: that slot. Several: a share group for a port (the program
 * spreads by remote address and port), or the kernel for a multicast group
 * (each member's kernel socket gets its copy). */
static int vmad_flow_publish(struct vmad_flow *f)
{
	struct vmad_iface *ifc = f->ifc;
	int map = vmad_flow_map(ifc, f->kind);
	uint32_t slots[RING_XDP_MAX_MEMBERS];
	unsigned n = vmad_flow_slots(f, slots);
	bool want_share = false;
	__u32 value;

	for (unsigned h = 0; h < f->nholders; h++)
		want_share |= f->holders[h].share;
	if (n == 0) {
		bpf_map_delete_elem(map, &f->key);
		if (f->share_idx >= 0)
			ifc->share_used[f->share_idx] = false;
		f->share_idx = -1;
		return 0;
	}
	if (f->kind == RING_FLOW_GROUP) {
		value = n == 1 ? slots[0] : RING_XDP_TO_KERNEL;
	} else if (f->kind == RING_FLOW_3TUPLE && (n > 1 || want_share || f->share_idx >= 0)) {
		/* Once a share group, always one until the key goes: members
		 * come and go without the value changing under the program. */
		if (f->share_idx < 0) {
			for (int i = 0; i < RING_XDP_MAX_SHARES; i++) {
				if (!ifc->share_used[i]) {
					f->share_idx = i;
					ifc->share_used[i] = true;
					break;
				}
			}
			if (f->share_idx < 0)
				return -ENOSPC;
		}
		struct ring_xdp_share share;
		memset(&share, 0, sizeof(share));
		share.count = n;
		memcpy(share.slots, slots, n * sizeof(slots[0]));
		__u32 idx = (__u32)f->share_idx;
		if (bpf_map_update_elem(ifc->map_shares, &idx, &share, BPF_ANY) != 0)
			return -errno;
		value = RING_XDP_SHARE_BIT | idx;
	} else if (f->kind == RING_FLOW_5TUPLE && f->holders[0].to_kernel) {
		value = RING_XDP_KERNEL_OF(slots[0]);
	} else {
		value = slots[0];
	}
	if (bpf_map_update_elem(map, &f->key, &value, BPF_ANY) != 0)
		return -errno;
	return 0;
}

static void vmad_flow_drop_holder(struct vmad_server *s, struct vmad_flow *f, unsigned h)
{
	f->holders[h] = f->holders[--f->nholders];
	vmad_flow_publish(f);
	if (f->nholders == 0)
		vmad_flow_release(s, f, true);
}

/* Checks that the socket a caller sent owns the flow's local address and
 * port (and, for a group, joined it on this interface). */
static int vmad_check_proof(int fd, const struct ring_flow *flow, int kind, unsigned ifindex,
			    struct vmad_proof *proof, char *why, size_t why_len)
{
	struct stat st;
	int domain = 0, proto = 0, reuse = 0;
	socklen_t len = sizeof(int);
	struct sockaddr_in sin;
	socklen_t slen = sizeof(sin);

	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
		snprintf(why, why_len, "the proof is not a socket");
		return -EACCES;
	}
	if (OS_CALL(getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_INET ||
	    OS_CALL(getsockopt, fd, SOL_SOCKET, SO_PROTOCOL, &proto, &(socklen_t){ sizeof(int) }) != 0 ||
	    proto != flow->proto) {
		snprintf(why, why_len, "the proof is not an IPv4 %s socket", flow->proto == IPPROTO_TCP ? "TCP" : "UDP");
		return -EACCES;
	}
	memset(&sin, 0, sizeof(sin));
	if (OS_CALL(getsockname, fd, (struct sockaddr *)&sin, &slen) != 0 || sin.sin_family != AF_INET) {
		snprintf(why, why_len, "the proof socket has no address");
		return -EACCES;
	}
	if (flow->local_port && sin.sin_port != flow->local_port) {
		snprintf(why, why_len, "the proof socket is bound to port %u, not %u", ntohs(sin.sin_port),
			 ntohs(flow->local_port));
		return -EACCES;
	}
	if (kind != RING_FLOW_GROUP && sin.sin_addr.s_addr != INADDR_ANY && sin.sin_addr.s_addr != flow->local_ip) {
		snprintf(why, why_len, "the proof socket is bound to another local address");
		return -EACCES;
	}
	if (kind == RING_FLOW_GROUP) {
		/* MCAST_MSFILTER answers EADDRNOTAVAIL unless this very socket
		 * joined the group on that interface. */
		union {
			struct group_filter gf;
			char buf[GROUP_FILTER_SIZE(1)];
		} u;
		socklen_t glen = sizeof(u);
		memset(&u, 0, sizeof(u));
		u.gf.gf_interface = ifindex;
		struct sockaddr_in *g = (struct sockaddr_in *)&u.gf.gf_group;
		g->sin_family = AF_INET;
		g->sin_addr.s_addr = flow->group;
		u.gf.gf_numsrc = 0;
		if (OS_CALL(getsockopt, fd, IPPROTO_IP, MCAST_MSFILTER, &u, &glen) != 0) {
			snprintf(why, why_len, "the proof socket has not joined the group on this interface");
			return -EACCES;
		}
	}
	OS_CALL(getsockopt, fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &(socklen_t){ sizeof(int) });
	proof->ino = (uint64_t)st.st_ino;
	proof->reuseport = reuse != 0;
	return 0;
}

/* May a second member steer the same key? The same socket (inherited
 * across fork), SO_REUSEPORT sockets of one uid (what the kernel itself
 * allows), any member for a multicast group (each proved it joined), or
 * root asking to share. */
static bool vmad_may_share(const struct vmad_flow *f, const struct vmad_holder *nh)
{
	if (f->kind == RING_FLOW_5TUPLE)
		return false;
	if (f->kind == RING_FLOW_GROUP)
		return true;
	for (unsigned h = 0; h < f->nholders; h++) {
		const struct vmad_holder *o = &f->holders[h];
		bool same_socket = nh->ino && o->ino == nh->ino;
		bool reuse = nh->reuseport && o->reuseport && o->uid == nh->uid;
		bool trusted = nh->uid == 0 && !nh->ino && nh->share && o->share;
		if (!same_socket && !reuse && !trusted)
			return false;
	}
	return true;
}

static void vmad_flow_add(struct vmad_server *s, int ci, const struct vmad_request *req, int proof_fd,
			  struct vmad_reply *rep)
{
	struct vmad_conn *c = &s->conns[ci];
	union ring_flow_key key;
	struct vmad_proof proof = { 0 };
	char why[160];
	int kind = ring_flow_key(&req->flow, &key);

	if (c->state != VMAD_CONN_MEMBER) {
		vmad_refuse(s, rep, -ENOTCONN, "join a ring domain first");
		return;
	}
	if (kind < 0) {
		vmad_refuse(s, rep, -EINVAL, "malformed flow");
		return;
	}
	if (proof_fd < 0 && c->cred.uid != 0) {
		vmad_refuse(s, rep, -EPERM, "no socket was sent to prove the port is yours");
		return;
	}
	if (proof_fd >= 0 && vmad_check_proof(proof_fd, &req->flow, kind, c->ifc->ifindex, &proof, why,
					      sizeof(why)) != 0) {
		vmad_refuse(s, rep, -EACCES, "flow refused: %s", why);
		vmad_log(VLOG_INFO, "pid %d uid %u: flow to port %u refused: %s", (int)c->cred.pid,
			 (unsigned)c->cred.uid, ntohs(req->flow.local_port), why);
		return;
	}
	struct vmad_holder nh = {
		.conn = ci, .slot = c->slot, .refs = 1, .uid = c->cred.uid, .ino = proof.ino,
		.reuseport = proof.reuseport, .share = req->mode == VMAD_FLOW_SHARE,
	};
	struct vmad_flow *f = vmad_flow_find(s, c->ifc, kind, &key);
	if (f) {
		for (unsigned h = 0; h < f->nholders; h++) {
			if (f->holders[h].conn != ci)
				continue;
			if (req->flow.to_kernel && kind == RING_FLOW_5TUPLE) {
				f->holders[h].to_kernel = true;
				int err = vmad_flow_publish(f);
				if (err)
					vmad_refuse(s, rep, err, "cannot update the steering maps: %s", strerror(-err));
				else
					rep->status = 0;
				return;
			}
			f->holders[h].refs++;
			rep->status = 0;
			return;
		}
		if (req->mode == VMAD_FLOW_TAKEOVER && kind == RING_FLOW_5TUPLE && f->nholders == 1 &&
		    s->conns[f->holders[0].conn].cred.pid == c->cred.pid && !f->holders[0].to_kernel) {
			/* Another lane of the same process had it: the whole
			 * entry (its references included) changes hands. */
			struct vmad_holder old = f->holders[0];
			nh.refs = 1;
			f->holders[0] = nh;
			int err = vmad_flow_publish(f);
			if (err) {
				f->holders[0] = old;
				vmad_flow_publish(f);
				vmad_refuse(s, rep, err, "cannot update the steering maps: %s", strerror(-err));
				return;
			}
			rep->status = 0;
			return;
		}
		if (!vmad_may_share(f, &nh) || !vmad_flow_room(f)) {
			const struct vmad_conn *o = &s->conns[f->holders[0].conn];
			vmad_refuse(s, rep, -EBUSY, "the %s port %u is steered to pid %d (not a shared socket)",
				    req->flow.proto == IPPROTO_TCP ? "TCP" : "UDP", ntohs(req->flow.local_port),
				    (int)o->cred.pid);
			return;
		}
		f->holders[f->nholders++] = nh;
		int err = vmad_flow_publish(f);
		if (err) {
			f->nholders--;
			vmad_flow_publish(f);
			vmad_refuse(s, rep, err, "cannot update the steering maps: %s", strerror(-err));
			return;
		}
		rep->status = 0;
		return;
	}
	/* A 5-tuple a root member wrote straight into the map is not in our
	 * table: do not overwrite it. */
	if (kind == RING_FLOW_5TUPLE) {
		__u32 old;
		if (bpf_map_lookup_elem(c->ifc->map_flows5, &key, &old) == 0) {
			vmad_refuse(s, rep, -EBUSY, "the connection is steered to another member");
			return;
		}
	}
	f = vmad_flow_alloc(s);
	if (!f) {
		vmad_refuse(s, rep, -ENOSPC, "the flow table is full (%d)", VMAD_MAX_FLOWS);
		return;
	}
	f->used = true;
	f->ifc = c->ifc;
	f->kind = kind;
	f->key = key;
	f->share_idx = -1;
	f->holders[0] = nh;
	f->nholders = 1;
	int err = vmad_flow_publish(f);
	if (err) {
		f->nholders = 0;
		vmad_flow_publish(f);
		vmad_flow_release(s, f, false);
		vmad_refuse(s, rep, err == -E2BIG ? -ENOSPC : err, "cannot update the steering maps: %s",
			    strerror(-err));
		return;
	}
	vmad_flow_link(s, f);
	rep->status = 0;
}

static void vmad_flow_del(struct vmad_server *s, int ci, const struct vmad_request *req, struct vmad_reply *rep)
{
	struct vmad_conn *c = &s->conns[ci];
	union ring_flow_key key;
	int kind = ring_flow_key(&req->flow, &key);

	if (c->state != VMAD_CONN_MEMBER || kind < 0) {
		vmad_refuse(s, rep, kind < 0 ? -EINVAL : -ENOTCONN, "no such flow");
		return;
	}
	struct vmad_flow *f = vmad_flow_find(s, c->ifc, kind, &key);
	for (unsigned h = 0; f && h < f->nholders; h++) {
		if (f->holders[h].conn != ci)
			continue;
		if (--f->holders[h].refs == 0)
			vmad_flow_drop_holder(s, f, h);
		rep->status = 0;
		return;
	}
	vmad_refuse(s, rep, -ENOENT, "no such flow of this member");
}

/* ---- peers of a process that died ------------------------------------------
 * A process killed with SIGKILL never closes its offloaded TCP connections:
 * its peers would wait for their own timeouts. Once its steering is gone,
 * each is probed (vmad_orphan.h): the peer's answer reaches our kernel,
 * which resets it. */

static void vmad_probe_orphan(struct vmad_server *s, const struct ring_xdp_key5 *k)
{
	bool had_fd = s->raw_fd >= 0;
	int err = vmad_orphan_probe(&s->raw_fd, k->local_ip, k->local_port, k->remote_ip, k->remote_port);
	if (err && !had_fd && s->raw_fd < 0) {
		vmad_log(VLOG_WARNING, "cannot open a raw socket to reset the peers of dead members: %s",
			 strerror(-err));
		return;
	}
	if (err) {
		vmad_log(VLOG_DEBUG, "probe of a dead member's connection: %s", strerror(-err));
		return;
	}
	s->orphans_probed++;
}

/* A dead member's connection, to be probed once its process has no member
 * left. Every one: until 2026-12-02 a member's first 64 were, and the
 * peers of the others waited for their own timeouts. Where no memory is to
 * be had it is probed at once (its process's other members may still
 * steer the answer to an XSK nobody reads: the peer then learns later). */
static void vmad_orphan_defer(struct vmad_server *s, pid_t pid, const struct ring_xdp_key5 *key)
{
	if (s->npending == s->cap_pending) {
		unsigned cap = s->cap_pending ? 2 * s->cap_pending : 256;
		struct vmad_orphan_pending *grown = realloc(s->pending, cap * sizeof(*grown));
		if (!grown) {
			vmad_probe_orphan(s, key);
			return;
		}
		s->pending = grown;
		s->cap_pending = cap;
	}
	s->pending[s->npending++] = (struct vmad_orphan_pending){ .pid = pid, .key = *key };
}

/* The peers list a dead process left: a probe per connection whose local
 * address is one of the interface's (what the list says is the process's
 * own memory: nothing else is believed). */
struct vmad_listed_walk {
	struct vmad_server *s;
	uint32_t addrs[16];
	unsigned naddrs;
	unsigned probed;
};

static void vmad_probe_listed_one(void *arg, const struct ring_xdp_key5 *k)
{
	struct vmad_listed_walk *w = arg;
	uint32_t rip = ntohl(k->remote_ip);
	if (k->proto != IPPROTO_TCP || !k->local_port || !k->remote_port || !rip || rip == 0xffffffffu ||
	    (rip & 0xf0000000u) == 0xe0000000u)
		return;
	for (unsigned i = 0; i < w->naddrs; i++) {
		if (w->addrs[i] == k->local_ip) {
			vmad_probe_orphan(w->s, k);
			w->probed++;
			return;
		}
	}
}

/* The probes sent, or -1 when the list could not be read (the caller
 * probes what the steering named instead). */
static int vmad_probe_listed(struct vmad_server *s, const struct vmad_conn *c)
{
	struct vmad_listed_walk w = { .s = s };
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) != 0)
		return -1;
	for (struct ifaddrs *a = ifa; a && w.naddrs < 16; a = a->ifa_next)
		if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && strcmp(a->ifa_name, c->ifc->name) == 0)
			w.addrs[w.naddrs++] = ((const struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr;
	freeifaddrs(ifa);
	int n = vmad_peers_walk(c->peers_fd, vmad_probe_listed_one, &w);
	if (n < 0) {
		vmad_log(VLOG_DEBUG, "%s: pid %d left an unreadable peers list: %s", c->ifc->name, (int)c->cred.pid,
			 strerror(-n));
		return -1;
	}
	return (int)w.probed;
}

/* Every flow of a member that is gone, and the 5-tuples a root member wrote
 * into flows5 itself (their value is its slot). With sweep_flows5 (its
 * process is gone) the peers of its TCP connections are reset. */
static void vmad_flows_forget_conn(struct vmad_server *s, int ci, bool sweep_flows5)
{
	struct vmad_conn *c = &s->conns[ci];
	pid_t pid = c->cred.pid;

	for (int i = 0; i < vmad_flow_index_high(&s->flow_index); i++) {
		struct vmad_flow *f = &s->flows[i];
		if (!f->used || f->ifc != c->ifc)
			continue;
		for (unsigned h = 0; h < f->nholders; h++) {
			if (f->holders[h].conn == ci) {
				if (sweep_flows5 && f->kind == RING_FLOW_5TUPLE && f->key.k5.proto == IPPROTO_TCP &&
				    !f->holders[h].to_kernel && f->nholders == 1)
					vmad_orphan_defer(s, pid, &f->key.k5);
				vmad_flow_drop_holder(s, f, h);
				break;
			}
		}
	}
	if (!sweep_flows5)
		return;
	struct ring_xdp_key5 key, next;
	void *prev = NULL;
	unsigned removed = 0;
	/* Deleting while iterating can restart the walk: collect a batch
	 * first, delete, repeat until a walk finds nothing. Each round walks
	 * the map from its start, so the batch is large enough that a member
	 * holding the whole map (RING_XDP_MAX_FLOWS) costs a few walks. */
	enum { SWEEP_BATCH = 4096 };
	static struct ring_xdp_key5 doomed[SWEEP_BATCH];   /* vmad is one thread */
	for (int round = 0; round <= RING_XDP_MAX_FLOWS / SWEEP_BATCH; round++) {
		unsigned n = 0;
		prev = NULL;
		while (n < SWEEP_BATCH && bpf_map_get_next_key(c->ifc->map_flows5, prev, &next) == 0) {
			__u32 value;
			if (bpf_map_lookup_elem(c->ifc->map_flows5, &next, &value) == 0 &&
			    (value == c->slot || value == RING_XDP_KERNEL_OF(c->slot))) {
				doomed[n++] = next;
				/* Ours, not handed to the kernel: its peer waits for us. */
				if (value == c->slot && next.proto == IPPROTO_TCP)
					vmad_orphan_defer(s, pid, &next);
			}
			key = next;
			prev = &key;
		}
		for (unsigned i = 0; i < n; i++)
			bpf_map_delete_elem(c->ifc->map_flows5, &doomed[i]);
		removed += n;
		if (n < SWEEP_BATCH)
			break;
	}
	if (removed)
		vmad_log(VLOG_DEBUG, "%s: removed %u connections of member %u", c->ifc->name, removed, c->slot);
	/* After the steering is gone, the process's other members' too: the
	 * peers' answers must reach the kernel, not a dead member's XSK (a
	 * share group's entry may still name one). */
	for (int i = 0; i < VMAD_MAX_CONNS; i++)
		if (i != ci && s->conns[i].state == VMAD_CONN_MEMBER && s->conns[i].cred.pid == pid)
			return;
	/* The process's peers list names every connection it had (those with
	 * a 5-tuple too): read, it replaces the 5-tuples gathered above, which
	 * are only the fallback for a process without one. */
	int listed = c->peers_fd >= 0 ? vmad_probe_listed(s, c) : -1;
	unsigned probed = listed > 0 ? (unsigned)listed : 0;
	for (unsigned i = 0; i < s->npending;) {
		if (s->pending[i].pid != pid) {
			i++;
			continue;
		}
		if (listed < 0) {
			vmad_probe_orphan(s, &s->pending[i].key);
			probed++;
		}
		s->pending[i] = s->pending[--s->npending];
	}
	if (probed)
		vmad_log(VLOG_INFO, "%s: pid %d died with %u TCP connections: their peers are reset", c->ifc->name,
			 (int)pid, probed);
}

/* ---- members --------------------------------------------------------------- */

static void vmad_member_reclaim(struct vmad_server *s, int ci);

/* Whether slot may be pid's on queue q: its own or unused on the
 * interface, and no member of that queue's domain (if any) holds it. */
static bool vmad_slot_free_on(const struct vmad_iface *ifc, unsigned sl, pid_t pid, unsigned q)
{
	if (ifc->slot_refs[sl] && ifc->slot_pid[sl] != pid)
		return false;
	const struct ring_domain *d = ifc->domains[q];
	return !d || d->sh->members[sl].state == RING_DOMAIN_M_FREE;
}

static bool vmad_slot_free_on_span(const struct vmad_iface *ifc, unsigned sl, pid_t pid, unsigned span)
{
	for (unsigned q = 0; q < span && q < RING_XDP_MAX_QUEUES; q++)
		if (!vmad_slot_free_on(ifc, sl, pid, q))
			return false;
	return true;
}

/* The slot for pid's new member on queue q: want_slot when it is free
 * there; otherwise one of pid's slots, then an unused one, preferring a
 * slot free on every queue of the span (a process joining each queue of
 * a multi-queue interface keeps one slot on all). -1: none. */
static int vmad_pick_slot(const struct vmad_iface *ifc, pid_t pid, unsigned q, int want_slot, unsigned span)
{
	if (want_slot >= 0)
		return want_slot < RING_XDP_MAX_MEMBERS && vmad_slot_free_on(ifc, (unsigned)want_slot, pid, q)
			       ? want_slot
			       : -1;
	for (int pass = span > 1 ? 0 : 1; pass < 2; pass++) {
		for (unsigned sl = 0; sl < RING_XDP_MAX_MEMBERS; sl++)
			if (ifc->slot_refs[sl] && vmad_slot_free_on(ifc, sl, pid, q) &&
			    (pass || vmad_slot_free_on_span(ifc, sl, pid, span)))
				return (int)sl;
		for (unsigned sl = 0; sl < RING_XDP_MAX_MEMBERS; sl++)
			if (!ifc->slot_refs[sl] && vmad_slot_free_on(ifc, sl, pid, q) &&
			    (pass || vmad_slot_free_on_span(ifc, sl, pid, span)))
				return (int)sl;
	}
	return -1;
}

/* A queue whose members have all left but whose frames are not back yet
 * (the reclaim delay): finish now, so the new member gets a domain of its
 * own sizes rather than the remains of the old one. */
static void vmad_finish_leaving(struct vmad_server *s, struct vmad_iface *ifc, unsigned q)
{
	unsigned leaving = 0;

	for (int i = 0; i < VMAD_MAX_CONNS; i++)
		leaving += s->conns[i].state == VMAD_CONN_LEAVING && s->conns[i].ifc == ifc && s->conns[i].queue == q;
	if (!leaving || leaving != ifc->domain_members[q])
		return;
	for (int i = 0; i < VMAD_MAX_CONNS; i++) {
		struct vmad_conn *c = &s->conns[i];
		if (c->state != VMAD_CONN_LEAVING || c->ifc != ifc || c->queue != q)
			continue;
		uint64_t now = vmad_now_ms();
		if (c->leave_at_ms > now)
			OS_CALL(usleep, (useconds_t)(c->leave_at_ms - now) * 1000);
		vmad_member_reclaim(s, i);
	}
}

static void vmad_join(struct vmad_server *s, int ci, const struct vmad_request *req, struct vmad_reply *rep)
{
	struct vmad_conn *c = &s->conns[ci];
	char ifname[IF_NAMESIZE];
	int fds[VMAD_REPLY_MAX_FDS], nfds = 0;

	memcpy(ifname, req->ifname, sizeof(ifname) - 1);
	ifname[sizeof(ifname) - 1] = '\0';
	if (c->state != VMAD_CONN_OPEN) {
		vmad_refuse(s, rep, -EALREADY, "this connection is a member already (one domain per connection)");
		return;
	}
	if (!vmad_policy_allows(&s->policy, c->cred.uid, c->gids, c->ngids, ifname)) {
		if (s->cfg->auto_mode && !s->cfg->policy_path)
			vmad_refuse(s, rep, -EACCES, "the running vmad is private to root programs (started by one); "
						     "this process lacks the privilege (run vmad as a service for "
						     "other users, docs/vmad.md)");
		else
			vmad_refuse(s, rep, -EACCES, "uid %u may not use %s (vmad policy %s)", (unsigned)c->cred.uid,
				    ifname, s->cfg->policy_path ? s->cfg->policy_path : "(default)");
		vmad_log(VLOG_INFO, "pid %d uid %u refused on %s by the policy", (int)c->cred.pid,
			 (unsigned)c->cred.uid, ifname);
		return;
	}
	if (req->queue >= RING_XDP_MAX_QUEUES) {
		vmad_refuse(s, rep, -EINVAL, "queue %u out of range", req->queue);
		return;
	}
	struct ring_domain_geometry geo = {
		.rx_frames = req->rx_frames, .tx_frames = req->tx_frames,
		.rx_descs = req->rx_descs, .tx_descs = req->tx_descs,
		.huge_pages = (req->mode & VMAD_JOIN_M_HUGE) != 0,
	};
	if (!vmad_pow2_in(geo.rx_frames, 64, 1u << 18) || !vmad_pow2_in(geo.tx_frames, 64, 1u << 18) ||
	    !vmad_pow2_in(geo.rx_descs, 64, 1u << 16) || !vmad_pow2_in(geo.tx_descs, 64, 1u << 16)) {
		vmad_refuse(s, rep, -EINVAL, "ring sizes must be powers of two (frames 64..262144, descriptors "
					     "64..65536)");
		return;
	}
	struct vmad_iface *ifc = vmad_iface_get(s, ifname, rep);
	if (!ifc)
		return;
	unsigned q = req->queue;
	vmad_finish_leaving(s, ifc, q);
	struct ring_domain *d = ifc->domains[q];
	if (d && ifc->domain_members[q] && ifc->domain_uid[q] != c->cred.uid && !s->policy.share_uids) {
		vmad_refuse(s, rep, -EACCES,
			    "queue %u of %s serves processes of uid %u; a UMEM shared with uid %u would let each read "
			    "the other's packets (set 'share-uids yes' in the vmad policy, or give each user a queue)",
			    q, ifname, (unsigned)ifc->domain_uid[q], (unsigned)c->cred.uid);
		return;
	}
	if (!d) {
		d = calloc(1, sizeof(*d));
		int err = d ? ring_domain_create(d, &geo, ifc->ifindex, q, 0) : -ENOMEM;
		/* The kernel lets go of a queue's previous UMEM a moment after
		 * its last socket closed (deferred work). */
		for (int tries = 0; err == -EBUSY && tries < 50; tries++) {
			OS_CALL(usleep, 10000);
			err = ring_domain_create(d, &geo, ifc->ifindex, q, 0);
		}
		if (err) {
			free(d);
			vmad_refuse(s, rep, err, "cannot create the UMEM of %s queue %u: %s", ifname, q,
				    ring_xdp_reason(err));
			vmad_log(VLOG_WARNING, "%s queue %u: cannot create the UMEM: %s", ifname, q, strerror(-err));
			return;
		}
		ifc->domains[q] = d;
		ifc->domain_uid[q] = c->cred.uid;
		vmad_log(VLOG_DEBUG, "%s queue %u: domain created (%u rx + %u tx frames)", ifname, q,
			 geo.rx_frames, geo.tx_frames);
	}
	int slot = vmad_pick_slot(ifc, c->cred.pid, q, req->want_slot, req->span);
	if (slot >= 0)
		slot = ring_domain_member_add(d, slot, c->cred.pid, c->cred.uid);
	if (slot < 0 && req->want_slot >= 0) {
		vmad_refuse(s, rep, -EBUSY, "member slot %d is not free on %s queue %u", (int)req->want_slot, ifname,
			    q);
		return;
	}
	if (slot < 0) {
		vmad_refuse(s, rep, -ENOSPC, "%s queue %u has %d members already", ifname, q, RING_XDP_MAX_MEMBERS);
		return;
	}
	int xsk, xsk_tx;
	int err = ring_domain_member_sockets(d, &xsk, &xsk_tx);
	if (err) {
		ring_domain_member_reclaim(d, (unsigned)slot, -1, -1);
		vmad_refuse(s, rep, err, "cannot create an XSK on %s queue %u: %s", ifname, q, ring_xdp_reason(err));
		return;
	}
	__u32 key = q * RING_XDP_MAX_MEMBERS + (unsigned)slot;
	__u32 value = (__u32)xsk;
	if (bpf_map_update_elem(ifc->map_xsks, &key, &value, BPF_ANY) != 0) {
		err = -errno;
		ring_domain_member_reclaim(d, (unsigned)slot, xsk, xsk_tx);
		os_close_nocancel(xsk);
		os_close_nocancel(xsk_tx);
		vmad_refuse(s, rep, err, "cannot register the XSK: %s", strerror(-err));
		return;
	}
	c->state = VMAD_CONN_MEMBER;
	c->ifc = ifc;
	c->queue = q;
	c->slot = (unsigned)slot;
	c->xsk_fd = xsk;
	c->xsk_tx_fd = xsk_tx;
	ifc->slot_pid[slot] = c->cred.pid;
	ifc->slot_refs[slot]++;
	ifc->members++;
	ifc->domain_members[q]++;
	fds[nfds++] = d->memfd;
	fds[nfds++] = d->umem_fd;
	fds[nfds++] = xsk;
	fds[nfds++] = xsk_tx;
	rep->flags = strcmp(ring_xdp_prog_mode(ifc->prog), "native") == 0 ? VMAD_JOIN_F_NATIVE : 0;
	if (c->cred.uid == 0) {
		/* Root could load the maps itself; saves it a round trip per
		 * connection. vmad sweeps what its slot left when it goes. */
		fds[nfds++] = ifc->map_flows5;
		rep->flags |= VMAD_JOIN_F_MAPS;
	}
	rep->status = 0;
	rep->slot = (unsigned)slot;
	rep->ifindex = ifc->ifindex;
	rep->queue = q;
	rep->members = ifc->domain_members[q];
	if (vmad_send(s, ci, rep, fds, (unsigned)nfds) != 0)
		rep->status = 1; /* sent nothing: the caller drops the connection */
	else
		vmad_log(VLOG_DEBUG, "%s queue %u: pid %d uid %u joined as member %d", ifname, q, (int)c->cred.pid,
			 (unsigned)c->cred.uid, slot);
}

/* The member is gone: out of the program at once, its frames taken back
 * a moment later (vmad_reclaim_due). */
static void vmad_member_leave(struct vmad_server *s, int ci)
{
	struct vmad_conn *c = &s->conns[ci];
	struct vmad_iface *ifc = c->ifc;
	__u32 key = c->queue * RING_XDP_MAX_MEMBERS + c->slot;

	bpf_map_delete_elem(ifc->map_xsks, &key);
	bool last_of_process = --ifc->slot_refs[c->slot] == 0;
	vmad_flows_forget_conn(s, ci, last_of_process);
	c->state = VMAD_CONN_LEAVING;
	c->leave_at_ms = vmad_now_ms() + VMAD_RECLAIM_DELAY_MS;
}

static void vmad_member_reclaim(struct vmad_server *s, int ci)
{
	struct vmad_conn *c = &s->conns[ci];
	struct vmad_iface *ifc = c->ifc;
	struct ring_domain *d = ifc->domains[c->queue];
	unsigned frames = ring_domain_member_reclaim(d, c->slot, c->xsk_fd, c->xsk_tx_fd);

	os_close_nocancel(c->xsk_fd);
	os_close_nocancel(c->xsk_tx_fd);
	s->members_reclaimed++;
	s->frames_reclaimed += frames;
	vmad_log(VLOG_DEBUG, "%s queue %u: member %u (pid %d) left, %u frames taken back", ifc->name, c->queue,
		 c->slot, (int)c->cred.pid, frames);
	/* The last member of a queue takes its domain with it: the next one
	 * gets fresh memory (no bytes of an earlier user's packets) shaped by
	 * its own sizes. */
	if (--ifc->domain_members[c->queue] == 0) {
		ring_domain_destroy(d);
		free(d);
		ifc->domains[c->queue] = NULL;
	}
	if (--ifc->members == 0)
		ifc->idle_since_ms = vmad_now_ms();
	if (c->peers_fd >= 0)
		os_close_nocancel(c->peers_fd);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->xsk_fd = c->xsk_tx_fd = c->peers_fd = -1;
}

static void vmad_conn_close(struct vmad_server *s, int ci)
{
	struct vmad_conn *c = &s->conns[ci];

	if (c->fd >= 0)
		os_close_nocancel(c->fd);
	c->fd = -1;
	if (c->state == VMAD_CONN_MEMBER) {
		vmad_member_leave(s, ci);
		return;
	}
	if (c->state != VMAD_CONN_LEAVING) {
		if (c->peers_fd >= 0)
			os_close_nocancel(c->peers_fd);
		memset(c, 0, sizeof(*c));
		c->fd = -1;
		c->xsk_fd = c->xsk_tx_fd = c->peers_fd = -1;
	}
}

/* ---- requests -------------------------------------------------------------- */

static void vmad_read_groups(struct vmad_conn *c)
{
	char path[64], line[1024];
	FILE *f;

	c->ngids = 0;
	c->gids[c->ngids++] = c->cred.gid;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)c->cred.pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		char *p = line + 7, *end;
		for (;;) {
			unsigned long g = strtoul(p, &end, 10);
			if (end == p || c->ngids == VMAD_MAX_GIDS)
				break;
			c->gids[c->ngids++] = (gid_t)g;
			p = end;
		}
		break;
	}
	fclose(f);
}

/* A new connection in a free slot (OPEN) for fd, whose peer is cred; or
 * -1 with fd closed when every slot is taken. Groups are the caller's. */
static int vmad_conn_open(struct vmad_server *s, int fd, const struct ucred *cred)
{
	int ci;
	for (ci = 0; ci < VMAD_MAX_CONNS && s->conns[ci].state != VMAD_CONN_FREE; ci++)
		;
	if (ci == VMAD_MAX_CONNS) {
		vmad_log(VLOG_WARNING, "refusing a connection: too many members");
		os_close_nocancel(fd);
		return -1;
	}
	struct vmad_conn *c = &s->conns[ci];
	memset(c, 0, sizeof(*c));
	c->state = VMAD_CONN_OPEN;
	c->fd = fd;
	c->xsk_fd = c->xsk_tx_fd = c->peers_fd = -1;
	c->cred = *cred;
	return ci;
}

static void vmad_accept(struct vmad_server *s)
{
	for (;;) {
		int fd = OS_CALL(accept4, s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		struct ucred cred;
		socklen_t len = sizeof(cred);
		if (OS_CALL(getsockopt, fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
			vmad_log(VLOG_WARNING, "refusing a connection: %s", strerror(errno));
			os_close_nocancel(fd);
			continue;
		}
		int ci = vmad_conn_open(s, fd, &cred);
		if (ci >= 0)
			vmad_read_groups(&s->conns[ci]);
	}
}

static void vmad_status(struct vmad_server *s, int ci, struct vmad_reply *rep)
{
	struct vmad_conn *c = &s->conns[ci];
	unsigned n = 0;

	if (c->state == VMAD_CONN_MEMBER) {
		n = c->ifc->domain_members[c->queue];
		rep->ifindex = c->ifc->ifindex;
		rep->queue = c->queue;
		rep->slot = c->slot;
	} else {
		for (int i = 0; i < VMAD_MAX_CONNS; i++)
			n += s->conns[i].state == VMAD_CONN_MEMBER;
	}
	rep->members = n;
	rep->status = 0;
	snprintf(rep->message, sizeof(rep->message),
		 "requests %llu refused %llu reclaimed %llu members %llu frames orphans %llu",
		 (unsigned long long)s->requests, (unsigned long long)s->refusals,
		 (unsigned long long)s->members_reclaimed, (unsigned long long)s->frames_reclaimed,
		 (unsigned long long)s->orphans_probed);
}

/* ---- privilege drop: connections with a spawner's credentials ---------------- */

static void vmad_spawner(struct vmad_server *s, int ci, struct vmad_reply *rep)
{
	struct vmad_conn *c = &s->conns[ci];
	int on = 1;

	if (c->state != VMAD_CONN_OPEN) {
		vmad_refuse(s, rep, -EALREADY, "a member connection cannot be a spawner");
		return;
	}
	/* The sender's pid of each ADOPT, as the kernel saw it. */
	if (OS_CALL(setsockopt, c->fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
		vmad_refuse(s, rep, -errno, "SO_PASSCRED: %s", strerror(errno));
		return;
	}
	c->spawner = true;
	rep->status = 0;
	vmad_log(VLOG_DEBUG, "pid %d uid %u keeps a spawner connection", (int)c->cred.pid, (unsigned)c->cred.uid);
}

/* A bad ADOPT gets no reply: its fd is closed, which its sender reads as
 * the end of the new connection. */
static void vmad_adopt(struct vmad_server *s, int ci, int fd, const struct ucred *sender)
{
	struct vmad_conn *sp = &s->conns[ci];
	int type = 0, domain = 0, nc;
	socklen_t len = sizeof(int);
	struct stat st;

	if (fd < 0)
		return;
	if (!sp->spawner || sender->pid <= 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
	    OS_CALL(getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX ||
	    OS_CALL(getsockopt, fd, SOL_SOCKET, SO_TYPE, &type, &(socklen_t){ sizeof(int) }) != 0 || type != SOCK_SEQPACKET) {
		s->refusals++;
		vmad_log(VLOG_INFO, "pid %d: ADOPT refused (%s)", (int)sender->pid,
			 !sp->spawner ? "not a spawner connection" : "not a unix seqpacket socket");
		os_close_nocancel(fd);
		return;
	}
	OS_CALL(fcntl, fd, F_SETFL, OS_CALL(fcntl, fd, F_GETFL) | O_NONBLOCK);
	/* Who it is: the spawner's identity, the process that sent it. */
	struct ucred cred = sp->cred;
	cred.pid = sender->pid;
	nc = vmad_conn_open(s, fd, &cred);
	if (nc < 0) {
		s->refusals++;
		return;
	}
	struct vmad_conn *c = &s->conns[nc];
	memcpy(c->gids, sp->gids, sizeof(c->gids));
	c->ngids = sp->ngids;
	struct vmad_reply rep = { .status = 0, .op = VMAD_OP_ADOPT };
	if (vmad_send(s, nc, &rep, NULL, 0) != 0) {
		os_close_nocancel(c->fd);
		memset(c, 0, sizeof(*c));
		c->fd = -1;
		c->xsk_fd = c->xsk_tx_fd = c->peers_fd = -1;
		return;
	}
	vmad_log(VLOG_DEBUG, "pid %d: adopted a connection as uid %u (spawner pid %d)", (int)sender->pid,
		 (unsigned)c->cred.uid, (int)sp->cred.pid);
}

/* Returns false when the connection should be closed. */
static bool vmad_serve(struct vmad_server *s, int ci)
{
	struct vmad_conn *c = &s->conns[ci];
	struct vmad_request req;
	struct vmad_reply rep;
	struct iovec iov = { .iov_base = &req, .iov_len = sizeof(req) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	int proof_fd = -1;
	struct ucred sender = { .pid = 0 };

	ssize_t n = OS_CALL(recvmsg, c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(sender))) {
			memcpy(&sender, CMSG_DATA(cm), sizeof(sender));
			continue;
		}
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned count = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < count; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (proof_fd < 0)
				proof_fd = fd;
			else
				os_close_nocancel(fd);
		}
	}
	if (n == 0) {
		if (proof_fd >= 0)
			os_close_nocancel(proof_fd);
		return false;
	}
	memset(&rep, 0, sizeof(rep));
	s->requests++;
	if (n != (ssize_t)sizeof(req) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    req.version != VMAD_PROTO_VERSION) {
		rep.op = n >= (ssize_t)sizeof(uint32_t) ? req.op : 0;
		vmad_refuse(s, &rep, -EPROTO, "protocol version %u expected", VMAD_PROTO_VERSION);
		if (proof_fd >= 0)
			os_close_nocancel(proof_fd);
		return vmad_send(s, ci, &rep, NULL, 0) == 0;
	}
	rep.op = req.op;
	switch (req.op) {
	case VMAD_OP_JOIN:
		vmad_join(s, ci, &req, &rep);
		if (rep.status == 0) {
			/* Its fd, if any, is the process's peers list. */
			if (proof_fd >= 0 && c->peers_fd < 0) {
				c->peers_fd = proof_fd;
				proof_fd = -1;
			}
			break;       /* sent with its descriptors */
		}
		if (rep.status > 0)
			return false;
		goto send;
	case VMAD_OP_FLOW_ADD:
		vmad_flow_add(s, ci, &req, proof_fd, &rep);
		goto send;
	case VMAD_OP_FLOW_DEL:
		vmad_flow_del(s, ci, &req, &rep);
		goto send;
	case VMAD_OP_STATUS:
		vmad_status(s, ci, &rep);
		goto send;
	case VMAD_OP_SPAWNER:
		vmad_spawner(s, ci, &rep);
		goto send;
	case VMAD_OP_ADOPT:
		vmad_adopt(s, ci, proof_fd, &sender);
		return true;   /* the fd is the adopted connection's (or closed); no reply here */
	default:
		vmad_refuse(s, &rep, -EOPNOTSUPP, "unknown request %u", req.op);
	send:
		if (vmad_send(s, ci, &rep, NULL, 0) != 0) {
			if (proof_fd >= 0)
				os_close_nocancel(proof_fd);
			return false;
		}
	}
	if (proof_fd >= 0)
		os_close_nocancel(proof_fd);
	return true;
}

/* ---- socket, daemon, loop --------------------------------------------------- */

static int vmad_listen(struct vmad_server *s)
{
	const char *name = s->cfg->socket_name ? s->cfg->socket_name : VMAD_ABSTRACT_NAME;
	struct sockaddr_un addr;
	socklen_t len;
	size_t nlen = strlen(name);

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (nlen == 0 || nlen >= sizeof(addr.sun_path) - 1)
		return -ENAMETOOLONG;
	if (name[0] == '/') {
		memcpy(addr.sun_path, name, nlen);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + nlen + 1);
		/* A path left by a vmad that died: nobody answers on it. */
		int probe = OS_CALL(socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && OS_CALL(connect, probe, (struct sockaddr *)&addr, len) != 0 && errno == ECONNREFUSED)
			unlink(name);
		if (probe >= 0)
			os_close_nocancel(probe);
		snprintf(s->socket_path, sizeof(s->socket_path), "%s", name);
	} else {
		memcpy(addr.sun_path + 1, name, nlen);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nlen);
	}
	s->listen_fd = OS_CALL(socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->listen_fd < 0)
		return -errno;
	if (OS_CALL(bind, s->listen_fd, (struct sockaddr *)&addr, len) != 0) {
		int err = -errno;
		s->socket_path[0] = '\0';
		return err;
	}
	if (s->socket_path[0])
		chmod(s->socket_path, 0666); /* the policy decides, not the file mode */
	if (OS_CALL(listen, s->listen_fd, 128) != 0)
		return -errno;
	return 0;
}

/* Forks; the parent waits for the child's word that the socket is bound
 * (or why not) and exits with it. Returns in the child with the pipe's
 * write end, or -1 in the foreground case. */
static int vmad_daemonize(void)
{
	int pipefd[2];

	if (OS_CALL(pipe2, pipefd, O_CLOEXEC) != 0)
		return -1;
	pid_t pid = OS_CALL(fork);
	if (pid < 0)
		return -1;
	if (pid > 0) {
		unsigned char status = 1;
		os_close_nocancel(pipefd[1]);
		while (OS_CALL(read, pipefd[0], &status, 1) < 0 && errno == EINTR)
			;
		_exit(status);
	}
	os_close_nocancel(pipefd[0]);
	setsid();
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		OS_CALL(dup2, null, STDIN_FILENO);
		OS_CALL(dup2, null, STDOUT_FILENO);
		os_close_nocancel(null);
	}
	return pipefd[1];
}

static void vmad_report(int *ready_fd, unsigned char status)
{
	if (*ready_fd < 0)
		return;
	if (OS_CALL(write, *ready_fd, &status, 1) < 0) {
		/* the parent is gone: nothing to tell */
	}
	os_close_nocancel(*ready_fd);
	*ready_fd = -1;
}

static bool vmad_idle(const struct vmad_server *s)
{
	for (int i = 0; i < VMAD_MAX_CONNS; i++)
		if (s->conns[i].state != VMAD_CONN_FREE)
			return false;
	for (int i = 0; i < VMAD_MAX_IFACES; i++)
		if (s->ifaces[i].used)
			return false;
	return true;
}

/* Timers: frames of gone members, idle interfaces, an idle --auto vmad.
 * Returns the poll timeout until the next one. */
static int vmad_timers(struct vmad_server *s, bool *exit_now)
{
	uint64_t now = vmad_now_ms();
	uint64_t next = now + VMAD_POLL_MAX_MS;

	for (int i = 0; i < VMAD_MAX_CONNS; i++) {
		struct vmad_conn *c = &s->conns[i];
		if (c->state != VMAD_CONN_LEAVING)
			continue;
		if (c->leave_at_ms <= now)
			vmad_member_reclaim(s, i);
		else if (c->leave_at_ms < next)
			next = c->leave_at_ms;
	}
	for (int i = 0; i < VMAD_MAX_IFACES; i++) {
		struct vmad_iface *ifc = &s->ifaces[i];
		if (!ifc->used || ifc->members)
			continue;
		uint64_t due = ifc->idle_since_ms + s->cfg->linger_ms;
		if (due <= now) {
			vmad_iface_teardown(ifc);
			/* The linger was served on the interface: an --auto
			 * vmad left with nothing goes at once. */
			s->idle_since_ms = now - s->cfg->linger_ms;
		} else if (due < next) {
			next = due;
		}
	}
	if (s->cfg->auto_mode) {
		if (!vmad_idle(s)) {
			s->idle_since_ms = now;
		} else {
			uint64_t due = s->idle_since_ms + s->cfg->linger_ms;
			if (due <= now)
				*exit_now = true;
			else if (due < next)
				next = due;
		}
	}
	return (int)(next - now);
}

static void vmad_shutdown(struct vmad_server *s)
{
	for (int i = 0; i < VMAD_MAX_CONNS; i++) {
		if (s->conns[i].state == VMAD_CONN_FREE)
			continue;
		vmad_conn_close(s, i);
		if (s->conns[i].state == VMAD_CONN_LEAVING)
			vmad_member_reclaim(s, i);
	}
	for (int i = 0; i < VMAD_MAX_IFACES; i++)
		if (s->ifaces[i].used)
			vmad_iface_teardown(&s->ifaces[i]);
	if (s->listen_fd >= 0)
		os_close_nocancel(s->listen_fd);
	if (s->socket_path[0])
		unlink(s->socket_path);
}

int vmad_server_run(const struct vmad_server_config *cfg)
{
	static struct vmad_server server;
	struct vmad_server *s = &server;
	char err_text[256];
	int ready_fd = -1;

	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->listen_fd = -1;
	s->raw_fd = -1;
	for (int i = 0; i < VMAD_MAX_CONNS; i++) {
		s->conns[i].fd = -1;
		s->conns[i].xsk_fd = s->conns[i].xsk_tx_fd = s->conns[i].peers_fd = -1;
	}
	/* Started by libvma inside an application: drop every descriptor we
	 * inherited (a copy of the application's listening socket would keep
	 * its port open after the application closed it). Before the log
	 * file is opened. */
#if OS_HAVE_CLOSE_RANGE
	OS_CALL(close_range, 3u, ~0u, 0);
#else
	syscall(SYS_close_range, 3u, ~0u, 0u);   /* no wrapper of ours to pass by */
#endif
	struct vlog_settings ls = { .level = cfg->log_level, .file = cfg->log_file };
	vlog_configure(&ls);
	if (geteuid() != 0) {
		vmad_log(VLOG_ERROR, "must run as root (it attaches XDP programs and creates AF_XDP sockets)");
		return 1;
	}
	if (cfg->policy_path && vmad_policy_load(&s->policy, cfg->policy_path, err_text, sizeof(err_text)) != 0) {
		vmad_log(VLOG_ERROR, "policy: %s", err_text);
		return 1;
	}
	if (!cfg->policy_path && cfg->auto_mode) {
		/* A private vmad a root program started serves root only: no
		 * administrator chose to accelerate other users. */
		vmad_policy_parse(&s->policy, "", err_text, sizeof(err_text));
	} else if (!cfg->policy_path) {
		vmad_policy_default(&s->policy);
	}
	s->flows = calloc(VMAD_MAX_FLOWS, sizeof(*s->flows));
	if (!s->flows)
		return 1;
	if (vmad_flow_index_init(&s->flow_index, VMAD_MAX_FLOWS, VMAD_FLOW_BUCKETS) != 0) {
		free(s->flows);
		return 1;
	}
	if (cfg->daemonize) {
		ready_fd = vmad_daemonize();
		if (ready_fd < 0) {
			vmad_log(VLOG_ERROR, "cannot daemonise: %s", strerror(errno));
			return 1;
		}
		if (!cfg->log_file) {
			int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
			if (null >= 0) {
				OS_CALL(dup2, null, STDERR_FILENO);
				os_close_nocancel(null);
			}
		}
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = vmad_on_signal;
	OS_CALL(sigaction, SIGTERM, &sa, NULL);
	OS_CALL(sigaction, SIGINT, &sa, NULL);
	OS_CALL(sigaction, SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	OS_CALL(sigaction, SIGPIPE, &sa, NULL);

	int err = vmad_listen(s);
	if (err) {
		bool other = err == -EADDRINUSE;
		if (!(other && cfg->auto_mode))
			vmad_log(VLOG_ERROR, "cannot listen on %s: %s", cfg->socket_name ? cfg->socket_name : "@" VMAD_ABSTRACT_NAME,
				 other ? "another vmad serves this network namespace" : strerror(-err));
		vmad_report(&ready_fd, other && cfg->auto_mode ? 0 : 1);
		free(s->flows);
		vmad_flow_index_fini(&s->flow_index);
		/* --auto racing another --auto: that one serves, we are done. */
		return other && cfg->auto_mode ? 0 : 1;
	}
	vmad_log(VLOG_INFO, "serving on %s%s (policy %s%s)", s->socket_path[0] ? "" : "@",
		 s->socket_path[0] ? s->socket_path : (cfg->socket_name ? cfg->socket_name : VMAD_ABSTRACT_NAME),
		 cfg->policy_path ? cfg->policy_path : "default", cfg->auto_mode ? ", --auto" : "");
	vmad_report(&ready_fd, 0);
	s->idle_since_ms = vmad_now_ms();

	bool exit_now = false;
	while (!vmad_stop && !exit_now) {
		int timeout = vmad_timers(s, &exit_now);
		if (exit_now)
			break;
		int map[VMAD_MAX_CONNS + 1];
		nfds_t n = 0;
		s->pfds[n].fd = s->listen_fd;
		s->pfds[n].events = POLLIN;
		map[n++] = -1;
		for (int i = 0; i < VMAD_MAX_CONNS; i++) {
			if (s->conns[i].state != VMAD_CONN_OPEN && s->conns[i].state != VMAD_CONN_MEMBER)
				continue;
			s->pfds[n].fd = s->conns[i].fd;
			s->pfds[n].events = POLLIN;
			map[n++] = i;
		}
		int ready = OS_CALL(poll, s->pfds, n, timeout);
		if (ready <= 0)
			continue;
		for (nfds_t i = 0; i < n; i++) {
			if (!s->pfds[i].revents)
				continue;
			if (map[i] < 0) {
				vmad_accept(s);
				continue;
			}
			bool keep = true;
			if (s->pfds[i].revents & POLLIN)
				keep = vmad_serve(s, map[i]);
			else if (s->pfds[i].revents & (POLLHUP | POLLERR | POLLNVAL))
				keep = false;
			if (!keep)
				vmad_conn_close(s, map[i]);
		}
	}
	vmad_log(VLOG_INFO, "%s", vmad_stop ? "stopping (signal)" : "idle, exiting");
	vmad_shutdown(s);
	for (int i = 0; i < vmad_flow_index_high(&s->flow_index); i++)
		if (s->flows[i].used && s->flows[i].holders != &s->flows[i].one)
			free(s->flows[i].holders);
	free(s->flows);
	free(s->pending);
	vmad_flow_index_fini(&s->flow_index);
	return 0;
}
