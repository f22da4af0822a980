/* Loading, sharing and cleaning up the eBPF steering program.
 *
 * vmad (src/vma/vmad) attaches one instance of vma_steer per interface, for
 * every libvma process there (docs/process_model.md); through the libxdp
 * dispatcher where the kernel has one, so other XDP users coexist. A killed
 * vmad leaves its program attached; to find it again we pin its flows5 map
 * as /sys/fs/bpf/vma/<ifname>/<pid>: on the next start, pins whose pid is
 * dead name the map id whose program must be detached. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <linux/magic.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include "log/vlog.h"
#include "ring/ring_xdp_prog.h"
#include "os/os.h"

#define RING_XDP_BPFFS "/sys/fs/bpf"
#define RING_XDP_PIN_ROOT RING_XDP_BPFFS "/vma"

/* The object file built from bpf/vma_steer.bpf.c, embedded by the build. */
extern const unsigned char ring_xdp_steer_obj[];
extern const unsigned long ring_xdp_steer_obj_len;

static const char *const ring_xdp_map_names[RING_XDP_MAP_COUNT] = {
	[RING_XDP_MAP_XSKS] = "vma_xsks",
	[RING_XDP_MAP_FLOWS5] = "vma_flows5",
	[RING_XDP_MAP_FLOWS3] = "vma_flows3",
	[RING_XDP_MAP_GROUPS] = "vma_groups",
	[RING_XDP_MAP_SHARES] = "vma_shares",
};

struct ring_xdp_prog {
	struct ring_xdp_prog *next;
	unsigned ifindex;
	char ifname[32];
	int refs;
	pid_t owner;   /* a forked child never detaches its parent's program */
	struct bpf_object *obj;
	struct xdp_program *xdp;
	enum xdp_attach_mode mode;
	int map_fds[RING_XDP_MAP_COUNT];
	char pin[96];
};

static pthread_mutex_t ring_xdp_prog_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring_xdp_prog *ring_xdp_progs;

/* ---- library output ---------------------------------------------------- */

static __thread char ring_xdp_last_msg[256];
static libbpf_print_fn_t ring_xdp_saved_bpf_print;
static libxdp_print_fn_t ring_xdp_saved_xdp_print;

static void ring_xdp_note(int is_warning, const char *fmt, va_list ap)
{
	char line[256];
	va_list copy;

	va_copy(copy, ap);
	vsnprintf(line, sizeof(line), fmt, copy);
	va_end(copy);
	size_t len = strlen(line);
	while (len && line[len - 1] == '\n')
		line[--len] = '\0';
	if (is_warning && len)
		memcpy(ring_xdp_last_msg, line, len + 1);
	/* libbpf narrates every relocation: only its warnings are worth DEBUG. */
	if (is_warning)
		vlog_debug("ring: libbpf/libxdp: %s", line);
	else
		vlog_finer("ring: libbpf/libxdp: %s", line);
}

static int ring_xdp_bpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	ring_xdp_note(level == LIBBPF_WARN, fmt, ap);
	return 0;
}

static int ring_xdp_xdp_print(enum libxdp_print_level level, const char *fmt, va_list ap)
{
	ring_xdp_note(level == LIBXDP_WARN, fmt, ap);
	return 0;
}

/* The application may use libbpf itself: its print hook is restored after
 * each of our calls instead of being replaced for good. Called under the
 * program lock, so the save/restore pairs never interleave. */
void ring_xdp_quiet_libs(int on)
{
	if (on) {
		ring_xdp_last_msg[0] = '\0';
		ring_xdp_saved_bpf_print = libbpf_set_print(ring_xdp_bpf_print);
		ring_xdp_saved_xdp_print = libxdp_set_print(ring_xdp_xdp_print);
	} else {
		libbpf_set_print(ring_xdp_saved_bpf_print);
		libxdp_set_print(ring_xdp_saved_xdp_print);
	}
}

const char *ring_xdp_lib_message(void)
{
	return ring_xdp_last_msg;
}

const char *ring_xdp_reason(int err)
{
	switch (err) {
	case -EPERM:
	case -EACCES:
		return "missing privilege (needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW, or root)";
	case -EBUSY:
		return "the queue is already owned by another AF_XDP socket (another process?)";
	case -EOPNOTSUPP:
		return "the interface refuses XDP (driver without XDP support)";
	case -ERANGE:
		return "the interface MTU is too large for XDP on this driver";
	case -ENODEV:
		return "no such interface";
	case -EEXIST:
		return "another XDP program owns the interface and cannot share it "
		       "(the libxdp dispatcher is unavailable on this kernel)";
	case -ENOMEM:
		return "out of memory (or locked-memory limit too low)";
	default:
		return strerror(-err);
	}
}

/* ---- pins and stale leftovers ------------------------------------------ */

/* libxdp pins the dispatcher below /sys/fs/bpf; `ip netns exec` hides the
 * host's bpffs behind a fresh sysfs, so mount one when it is missing. */
static void ring_xdp_ensure_bpffs(void)
{
	struct statfs st;

	if (statfs(RING_XDP_BPFFS, &st) == 0 && st.f_type == BPF_FS_MAGIC)
		return;
	if (mount("bpf", RING_XDP_BPFFS, "bpf", 0, NULL) != 0)
		vlog_debug("ring: cannot mount bpffs on %s: %s", RING_XDP_BPFFS, strerror(errno));
}

static int ring_xdp_prog_uses_map(int prog_fd, __u32 map_id)
{
	__u32 ids[16];
	struct bpf_prog_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	info.nr_map_ids = sizeof(ids) / sizeof(ids[0]);
	info.map_ids = (__u64)(unsigned long)ids;
	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
		return 0;
	for (__u32 i = 0; i < info.nr_map_ids && i < sizeof(ids) / sizeof(ids[0]); i++)
		if (ids[i] == map_id)
			return 1;
	return 0;
}

/* Detaches from ifindex the program whose maps include map_id. */
static void ring_xdp_detach_by_map(unsigned ifindex, __u32 map_id)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex((int)ifindex);
	struct xdp_program *p;

	if (!mp || libxdp_get_error(mp))
		return;
	enum xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
	if (xdp_multiprog__is_legacy(mp)) {
		p = xdp_multiprog__main_prog(mp);
		if (p && ring_xdp_prog_uses_map(xdp_program__fd(p), map_id))
			xdp_program__detach(p, (int)ifindex, mode, 0);
	} else {
		for (p = xdp_multiprog__next_prog(NULL, mp); p; p = xdp_multiprog__next_prog(p, mp)) {
			if (ring_xdp_prog_uses_map(xdp_program__fd(p), map_id)) {
				int err = xdp_program__detach(p, (int)ifindex, mode, 0);
				if (err)
					vlog_debug("ring: detaching stale program failed: %s", strerror(-err));
				break;
			}
		}
	}
	xdp_multiprog__close(mp);
}

/* A killed vmad is reparented to init, which may reap it late: a zombie
 * still answers kill(pid, 0) but holds nothing. */
static int ring_xdp_pid_alive(pid_t pid)
{
	char path[64], buf[256];
	FILE *f;

	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

static void ring_xdp_reap_stale(const char *ifname, unsigned ifindex)
{
	char dir_path[64], path[64 + 1 + 256];
	struct dirent *entry;
	DIR *dir;

	snprintf(dir_path, sizeof(dir_path), "%s/%.15s", RING_XDP_PIN_ROOT, ifname);
	dir = opendir(dir_path);
	if (!dir)
		return;
	while ((entry = readdir(dir))) {
		char *end;
		long pid = strtol(entry->d_name, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		if (ring_xdp_pid_alive((pid_t)pid))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir_path, entry->d_name);
		int fd = bpf_obj_get(path);
		if (fd >= 0) {
			struct bpf_map_info info;
			__u32 len = sizeof(info);
			memset(&info, 0, sizeof(info));
			if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
				ring_xdp_detach_by_map(ifindex, info.id);
			os_close_nocancel(fd);
		}
		unlink(path);
		vlog_info("ring: %s: removed the steering program left by dead process %ld", ifname, pid);
	}
	closedir(dir);
}

static void ring_xdp_pin(struct ring_xdp_prog *p)
{
	char dir_path[64];

	snprintf(dir_path, sizeof(dir_path), "%s/%.15s", RING_XDP_PIN_ROOT, p->ifname);
	mkdir(RING_XDP_PIN_ROOT, 0700);
	mkdir(dir_path, 0700);
	snprintf(p->pin, sizeof(p->pin), "%s/%d", dir_path, (int)getpid());
	unlink(p->pin);
	if (bpf_obj_pin(p->map_fds[RING_XDP_MAP_FLOWS5], p->pin) != 0) {
		vlog_debug("ring: %s: cannot pin %s (%s); a crash would leave the program behind",
			   p->ifname, p->pin, strerror(errno));
		p->pin[0] = '\0';
	}
}

static void ring_xdp_unpin(struct ring_xdp_prog *p)
{
	char dir_path[64];

	if (!p->pin[0])
		return;
	unlink(p->pin);
	snprintf(dir_path, sizeof(dir_path), "%s/%.15s", RING_XDP_PIN_ROOT, p->ifname);
	rmdir(dir_path);            /* fails while other processes pin there */
	rmdir(RING_XDP_PIN_ROOT);
}

/* ---- load / attach ------------------------------------------------------ */

static int ring_xdp_attach(struct ring_xdp_prog *p, int force_skb_mode)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "vma_steer");
	int err;

	p->obj = bpf_object__open_mem(ring_xdp_steer_obj, ring_xdp_steer_obj_len, &opts);
	if (!p->obj)
		return -errno;
	p->xdp = xdp_program__from_bpf_obj(p->obj, "xdp");
	err = (int)libxdp_get_error(p->xdp);
	if (err) {
		p->xdp = NULL;
		return err;
	}
	/* veth and most drivers run XDP natively; generic (skb) mode is the
	 * fallback for drivers without XDP or with too large an MTU. */
	p->mode = XDP_MODE_NATIVE;
	err = force_skb_mode ? -EOPNOTSUPP : xdp_program__attach(p->xdp, (int)p->ifindex, p->mode, 0);
	if (err && err != -EPERM && err != -EACCES) {
		vlog_debug("ring: %s: native XDP refused (%s), trying skb mode", p->ifname, strerror(-err));
		p->mode = XDP_MODE_SKB;
		err = xdp_program__attach(p->xdp, (int)p->ifindex, p->mode, 0);
	}
	if (err)
		return err;
	for (int i = 0; i < RING_XDP_MAP_COUNT; i++) {
		struct bpf_map *map = bpf_object__find_map_by_name(p->obj, ring_xdp_map_names[i]);
		p->map_fds[i] = map ? bpf_map__fd(map) : -1;
		if (p->map_fds[i] < 0)
			return -ENOENT;
	}
	return 0;
}

/* Takes our program off the interface. libxdp's detach of a program it
 * attached without its dispatcher (the dispatcher cannot load here, see
 * docs/xdp.md) opens the attached program by id and never closes that
 * descriptor: every attach/detach cycle of a long-lived vmad kept a
 * program and its maps alive. When ours is the program attached, the
 * kernel is asked directly (replace-if-still-ours); libxdp otherwise. */
static void ring_xdp_detach_own(struct ring_xdp_prog *p)
{
	int fd = xdp_program__fd(p->xdp);
	LIBBPF_OPTS(bpf_xdp_attach_opts, opts, .old_prog_fd = fd);
	__u32 flags = p->mode == XDP_MODE_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;

	if (fd >= 0 && bpf_xdp_detach((int)p->ifindex, flags, &opts) == 0)
		return;
	xdp_program__detach(p->xdp, (int)p->ifindex, p->mode, 0);
}

static void ring_xdp_release(struct ring_xdp_prog *p)
{
	if (p->xdp && p->owner == getpid())
		ring_xdp_detach_own(p);
	if (p->owner == getpid())
		ring_xdp_unpin(p);
	if (p->xdp)
		xdp_program__close(p->xdp);
	if (p->obj)
		bpf_object__close(p->obj);
	free(p);
}

struct ring_xdp_prog *ring_xdp_prog_get(const char *ifname, unsigned ifindex, int force_skb_mode)
{
	struct ring_xdp_prog *p;
	int err;

	pthread_mutex_lock(&ring_xdp_prog_lock);
	for (p = ring_xdp_progs; p; p = p->next) {
		if (p->ifindex == ifindex && p->owner == getpid()) {
			p->refs++;
			pthread_mutex_unlock(&ring_xdp_prog_lock);
			return p;
		}
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&ring_xdp_prog_lock);
		vlog_warn("ring: %s: out of memory, traffic stays on the kernel path", ifname);
		errno = ENOMEM;
		return NULL;
	}
	snprintf(p->ifname, sizeof(p->ifname), "%s", ifname);
	p->ifindex = ifindex;
	p->owner = getpid();
	p->refs = 1;

	ring_xdp_quiet_libs(1);
	ring_xdp_ensure_bpffs();
	ring_xdp_reap_stale(ifname, ifindex);
	err = ring_xdp_attach(p, force_skb_mode);
	if (!err)
		ring_xdp_pin(p);
	ring_xdp_quiet_libs(0);

	if (err == -EBUSY)
		err = -EEXIST; /* from the attach: a foreign program, not a busy queue */
	if (err) {
		const char *lib = ring_xdp_lib_message();
		vlog_warn("ring: %s: cannot attach the XDP steering program: %s%s%s%s; traffic stays on the kernel path",
			  ifname, ring_xdp_reason(err), *lib ? " (" : "", lib, *lib ? ")" : "");
		p->owner = 0; /* nothing of ours is attached: do not detach */
		ring_xdp_release(p);
		pthread_mutex_unlock(&ring_xdp_prog_lock);
		errno = -err;
		return NULL;
	}
	vlog_debug("ring: %s: steering program attached in %s mode", ifname, ring_xdp_prog_mode(p));
	p->next = ring_xdp_progs;
	ring_xdp_progs = p;
	pthread_mutex_unlock(&ring_xdp_prog_lock);
	return p;
}

void ring_xdp_prog_put(struct ring_xdp_prog *prog)
{
	struct ring_xdp_prog **link;

	if (!prog)
		return;
	pthread_mutex_lock(&ring_xdp_prog_lock);
	if (--prog->refs == 0) {
		for (link = &ring_xdp_progs; *link; link = &(*link)->next) {
			if (*link == prog) {
				*link = prog->next;
				break;
			}
		}
		ring_xdp_quiet_libs(1);
		ring_xdp_release(prog);
		ring_xdp_quiet_libs(0);
	}
	pthread_mutex_unlock(&ring_xdp_prog_lock);
}

int ring_xdp_prog_map_fd(const struct ring_xdp_prog *prog, enum ring_xdp_map map)
{
	return prog->map_fds[map];
}

const char *ring_xdp_prog_mode(const struct ring_xdp_prog *prog)
{
	return prog->mode == XDP_MODE_SKB ? "skb" : "native";
}
