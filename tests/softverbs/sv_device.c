/* softverbs: devices (one per Ethernet netdev, plus the tests' in-memory
 * ones), device contexts, protection domains, memory regions, fork, fault
 * injection and the checks' reporting. */
#include <errno.h>
#include <net/if_arp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "sv_internal.h"

pthread_mutex_t sv_lock = PTHREAD_MUTEX_INITIALIZER;
struct softverbs_stats sv_stats;

static struct sv_device *sv_devices;
static bool sv_count_violations;
static bool sv_fork_inited;
static uint32_t sv_next_handle = 1;

/* ---- raw system calls (libvma interposes the libc wrappers) ---- */

long sv_sys_close(int fd)
{
	return fd >= 0 ? syscall(SYS_close, fd) : 0;
}

long sv_sys_epoll_ctl(int epfd, int op, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	return syscall(SYS_epoll_ctl, epfd, op, fd, &ev);
}

long sv_sys_eventfd_signal(int fd)
{
	uint64_t one = 1;
	return syscall(SYS_write, fd, &one, sizeof(one));
}

long sv_sys_eventfd_drain(int fd)
{
	uint64_t value;
	return syscall(SYS_read, fd, &value, sizeof(value));
}

uint64_t sv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A fingerprint of a buffer, eight bytes at a time: enough to tell that
 * a posted send buffer was written before its completion. */
uint64_t sv_sum(const uint8_t *p, uint32_t len, uint64_t seed)
{
	uint64_t h = seed ^ 0x9e3779b97f4a7c15ull ^ len;
	uint32_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* ---- reporting ---- */

static void sv_vprint(const char *kind, const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "softverbs: %s: ", kind);
	if (n < 0)
		return;
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	size_t len = strlen(line);
	line[len++] = '\n';
	if (syscall(SYS_write, 2, line, len) < 0)
		return;
}

void sv_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sv_vprint("warning", fmt, ap);
	va_end(ap);
}

void sv_violation(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sv_vprint("VIOLATION", fmt, ap);
	va_end(ap);
	sv_stats.violations++;
	if (!sv_count_violations) {
		const char *env = getenv("SOFTVERBS_VIOLATIONS");
		if (!env || strcmp(env, "count") != 0)
			abort();
	}
}

bool sv_checks_on(void)
{
	static int on = -1;
	if (on < 0) {
		const char *env = getenv("SOFTVERBS_CHECKS");
		on = !(env && strcmp(env, "0") == 0);
	}
	return on;
}

/* ---- fault injection ---- */

struct sv_fault {
	char verb[32];
	int err;
	int count;   /* -1: every call */
};

static struct sv_fault sv_faults[8];
static bool sv_faults_from_env;

static void sv_faults_load_env(void)
{
	/* SOFTVERBS_FAIL=verb:ERRNAME[:count][,verb:...] for integration
	 * tests of the backend's error paths. */
	static const struct {
		const char *name;
		int err;
	} names[] = { { "EPERM", EPERM }, { "ENOMEM", ENOMEM }, { "EINVAL", EINVAL }, { "ENODEV", ENODEV },
		      { "EOPNOTSUPP", EOPNOTSUPP }, { "ENOSPC", ENOSPC }, { "EACCES", EACCES } };
	const char *env = getenv("SOFTVERBS_FAIL");
	char copy[256];

	sv_faults_from_env = true;
	if (!env || !*env)
		return;
	snprintf(copy, sizeof(copy), "%s", env);
	char *save = NULL;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *err_s = strchr(item, ':');
		if (!err_s)
			continue;
		*err_s++ = '\0';
		char *count_s = strchr(err_s, ':');
		if (count_s)
			*count_s++ = '\0';
		int err = EINVAL;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(names[i].name, err_s) == 0)
				err = names[i].err;
		softverbs_test_fail(item, err, count_s ? atoi(count_s) : -1);
	}
}

bool sv_fail(const char *verb)
{
	if (!sv_faults_from_env)
		sv_faults_load_env();
	for (size_t i = 0; i < sizeof(sv_faults) / sizeof(sv_faults[0]); i++) {
		struct sv_fault *f = &sv_faults[i];
		if (!f->count || strcmp(f->verb, verb) != 0)
			continue;
		if (f->count > 0)
			f->count--;
		errno = f->err;
		return true;
	}
	return false;
}

SV_EXPORT void softverbs_test_fail(const char *verb, int err, int count)
{
	for (size_t i = 0; i < sizeof(sv_faults) / sizeof(sv_faults[0]); i++) {
		struct sv_fault *f = &sv_faults[i];
		if (f->count && strcmp(f->verb, verb) != 0)
			continue;
		snprintf(f->verb, sizeof(f->verb), "%s", verb);
		f->err = err;
		f->count = count;
		return;
	}
}

SV_EXPORT void softverbs_test_count_violations(bool on)
{
	sv_count_violations = on;
}

SV_EXPORT void softverbs_test_stats(struct softverbs_stats *out)
{
	pthread_mutex_lock(&sv_lock);
	*out = sv_stats;
	pthread_mutex_unlock(&sv_lock);
}

SV_EXPORT void softverbs_test_reset_stats(void)
{
	pthread_mutex_lock(&sv_lock);
	uint64_t elements = sv_stats.nft_elements;
	memset(&sv_stats, 0, sizeof(sv_stats));
	sv_stats.nft_elements = elements;
	pthread_mutex_unlock(&sv_lock);
}

/* ---- devices ---- */

static struct sv_device *sv_device_new(const char *ifname, int ifindex, const uint8_t mac[6], uint32_t mtu, bool mem)
{
	struct sv_device *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	snprintf(d->ifname, sizeof(d->ifname), "%s", ifname);
	d->ifindex = ifindex;
	memcpy(d->mac, mac, 6);
	d->mtu = mtu;
	d->mem = mem;
	d->present = true;
	d->wire.rx_fd = d->wire.tx_fd = -1;
	d->ibdev.node_type = IBV_NODE_CA;
	d->ibdev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->ibdev.name, sizeof(d->ibdev.name), "sv_%s", ifname);
	snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", ifindex);
	snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", ifindex);
	snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path), "/sys/class/infiniband/sv_%s", ifname);
	d->next = sv_devices;
	sv_devices = d;
	return d;
}

static bool sv_netdev_wanted(const char *ifname)
{
	const char *list = getenv("SOFTVERBS_NETDEVS");
	size_t n = strlen(ifname);

	if (!list || !*list)
		return true;
	for (const char *p = list; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && strncmp(p, ifname, n) == 0)
			return true;
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

/* The Ethernet netdevs of the caller's network namespace, as devices. */
static void sv_scan_netdevs(void)
{
	struct if_nameindex *names = if_nameindex();
	long fd = syscall(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	for (struct sv_device *d = sv_devices; d; d = d->next)
		if (!d->mem)
			d->present = false;
	if (!names || fd < 0)
		goto out;
	for (struct if_nameindex *n = names; n->if_index; n++) {
		struct ifreq ifr;
		if (strcmp(n->if_name, "lo") == 0 || !sv_netdev_wanted(n->if_name))
			continue;
		memset(&ifr, 0, sizeof(ifr));
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", n->if_name);
		if (syscall(SYS_ioctl, fd, SIOCGIFHWADDR, &ifr) != 0 || ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER)
			continue;
		uint8_t mac[6];
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
		uint32_t mtu = 1500;
		if (syscall(SYS_ioctl, fd, SIOCGIFMTU, &ifr) == 0)
			mtu = (uint32_t)ifr.ifr_mtu;
		struct sv_device *found = NULL;
		for (struct sv_device *d = sv_devices; d; d = d->next)
			if (!d->mem && d->ifindex == (int)n->if_index && strcmp(d->ifname, n->if_name) == 0)
				found = d;
		if (found) {
			found->present = true;
			memcpy(found->mac, mac, 6);
			found->mtu = mtu;
		} else {
			sv_device_new(n->if_name, (int)n->if_index, mac, mtu, false);
		}
	}
out:
	if (names)
		if_freenameindex(names);
	sv_sys_close((int)fd);
}

SV_EXPORT int softverbs_test_add_device(const char *ifname, int ifindex, const uint8_t mac[6], uint32_t mtu,
					bool loopback)
{
	pthread_mutex_lock(&sv_lock);
	struct sv_device *d = sv_device_new(ifname, ifindex, mac, mtu, true);
	if (d)
		d->loopback = loopback;
	pthread_mutex_unlock(&sv_lock);
	return d ? 0 : -1;
}

SV_EXPORT void softverbs_test_clear_devices(void)
{
	pthread_mutex_lock(&sv_lock);
	for (struct sv_device *d = sv_devices; d; d = d->next)
		if (d->mem)
			d->present = false;
	pthread_mutex_unlock(&sv_lock);
}

static struct sv_device *sv_mem_device(int ifindex)
{
	for (struct sv_device *d = sv_devices; d; d = d->next)
		if (d->mem && d->present && d->ifindex == ifindex)
			return d;
	return NULL;
}

SV_EXPORT void softverbs_test_inject(int ifindex, const void *frame, size_t len)
{
	pthread_mutex_lock(&sv_lock);
	struct sv_device *d = sv_mem_device(ifindex);
	if (d)
		sv_memwire_inject(d, frame, (uint32_t)len);
	pthread_mutex_unlock(&sv_lock);
}

SV_EXPORT int softverbs_test_tx_pop(int ifindex, void *buf, size_t cap)
{
	int len = -1;
	pthread_mutex_lock(&sv_lock);
	struct sv_device *d = sv_mem_device(ifindex);
	if (d && d->txq_count) {
		struct sv_frame *f = &d->txq[d->txq_head];
		if (f->len <= cap) {
			memcpy(buf, f->data, f->len);
			len = (int)f->len;
			free(f->data);
			d->txq_head = (d->txq_head + 1) % SV_MEMQ_CAP;
			d->txq_count--;
		}
	}
	pthread_mutex_unlock(&sv_lock);
	return len;
}

SV_EXPORT unsigned softverbs_test_tx_count(int ifindex)
{
	pthread_mutex_lock(&sv_lock);
	struct sv_device *d = sv_mem_device(ifindex);
	unsigned n = d ? d->txq_count : 0;
	pthread_mutex_unlock(&sv_lock);
	return n;
}

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_mutex_lock(&sv_lock);
	if (sv_fail("ibv_get_device_list")) {
		pthread_mutex_unlock(&sv_lock);
		return NULL;
	}
	sv_scan_netdevs();
	int n = 0;
	for (struct sv_device *d = sv_devices; d; d = d->next)
		n += d->present;
	struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
	if (list) {
		int i = 0;
		for (struct sv_device *d = sv_devices; d; d = d->next)
			if (d->present)
				list[i++] = &d->ibdev;
	}
	pthread_mutex_unlock(&sv_lock);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (num_devices)
		*num_devices = n;
	return list;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct sv_device *d = (struct sv_device *)device;
	uint64_t guid = 0;
	for (int i = 0; i < 6; i++)
		guid = guid << 8 | d->mac[i];
	return htobe64(guid);
}

/* ---- contexts ---- */

struct sv_context *sv_ctx(struct ibv_context *context)
{
	return (struct sv_context *)((uint8_t *)context - offsetof(struct sv_context, vctx.context));
}

struct sv_device *sv_device_of(struct ibv_context *context)
{
	return sv_ctx(context)->dev;
}

static pid_t sv_pid;

pid_t sv_self_pid(void)
{
	pid_t pid = __atomic_load_n(&sv_pid, __ATOMIC_RELAXED);
	if (!pid) {
		pid = getpid();
		__atomic_store_n(&sv_pid, pid, __ATOMIC_RELAXED);
	}
	return pid;
}

bool sv_ctx_usable(struct sv_context *c, const char *verb)
{
	if (c->pid == sv_self_pid())
		return true;
	sv_violation("%s on device %s in pid %d, which inherited it from pid %d (a forked child must not use "
		     "its parent's verbs objects)", verb, c->dev->ibdev.name, (int)getpid(), (int)c->pid);
	errno = EINVAL;
	return false;
}

/* Ops filled below from the other files. */
int sv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int sv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int sv_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr);
struct ibv_flow *sv_create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr);
int sv_destroy_flow(struct ibv_flow *flow);

static int sv_query_port_ex(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr,
			    size_t attr_len)
{
	struct sv_device *d = sv_device_of(context);
	struct ibv_port_attr a;

	if (port_num != SV_PORT)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	a.state = IBV_PORT_ACTIVE;
	a.max_mtu = IBV_MTU_4096;
	a.active_mtu = d->mtu >= 4096 ? IBV_MTU_4096 : d->mtu >= 2048 ? IBV_MTU_2048 : IBV_MTU_1024;
	a.gid_tbl_len = 1;
	a.max_msg_sz = 1u << 30;
	a.pkey_tbl_len = 1;
	a.active_width = 2;
	a.active_speed = 32;
	a.phys_state = 5;   /* LinkUp */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(attr, &a, attr_len < sizeof(a) ? attr_len : sizeof(a));
	return 0;
}

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sv_device *d = (struct sv_device *)device;

	pthread_mutex_lock(&sv_lock);
	if (sv_fail("ibv_open_device")) {
		pthread_mutex_unlock(&sv_lock);
		return NULL;
	}
	struct sv_context *c = calloc(1, sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&sv_lock);
		errno = ENOMEM;
		return NULL;
	}
	c->dev = d;
	c->pid = sv_self_pid();
	const char *bf = getenv("MLX5_SHUT_UP_BF");
	c->bf_disabled = bf && strcmp(bf, "1") == 0;
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->async_fd = -1;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->ops.poll_cq = sv_poll_cq;
	ctx->ops.req_notify_cq = sv_req_notify_cq;
	ctx->ops.post_send = sv_post_send;
	ctx->ops.post_recv = sv_post_recv;
	c->vctx.sz = sizeof(struct verbs_context);
	c->vctx.query_port = sv_query_port_ex;
	c->vctx.ibv_create_flow = sv_create_flow;
	c->vctx.ibv_destroy_flow = sv_destroy_flow;
	c->vctx.modify_cq = sv_modify_cq;
	pthread_mutex_unlock(&sv_lock);
	return ctx;
}

SV_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct sv_context *c = sv_ctx(context);

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(c, "ibv_close_device")) {
		pthread_mutex_unlock(&sv_lock);
		return -1;
	}
	if (c->objects)
		sv_violation("ibv_close_device on %s with %u objects still alive (PDs, CQs, QPs, channels)",
			     c->dev->ibdev.name, c->objects);
	pthread_mutex_unlock(&sv_lock);
	pthread_mutex_destroy(&context->mutex);
	free(c);
	return 0;
}

SV_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	struct sv_device *d = sv_device_of(context);

	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "softverbs");
	attr->node_guid = ibv_get_device_guid(&d->ibdev);
	attr->max_mr_size = ~0ull;
	attr->page_size_cap = 4096;
	attr->max_qp = 4096;
	attr->max_qp_wr = SV_MAX_WR;
	attr->device_cap_flags = (int)(IBV_DEVICE_MANAGED_FLOW_STEERING | IBV_DEVICE_RAW_IP_CSUM);
	attr->max_sge = SV_MAX_SGE;
	attr->max_cq = 4096;
	attr->max_cqe = SV_MAX_CQE;
	attr->max_mr = 4096;
	attr->max_pd = 4096;
	attr->phys_port_cnt = 1;
	return 0;
}

/* The exported symbol behind verbs.h's macro of the same name: the old
 * layout, which ends before the flags field. */
#undef ibv_query_port
SV_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *attr)
{
	return sv_query_port_ex(context, port_num, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, flags));
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct sv_device *d = sv_device_of(context);

	if (flags || entry_size < sizeof(*entry))
		return EINVAL;
	if (port_num != SV_PORT || gid_index != 0)
		return ENODATA;
	memset(entry, 0, sizeof(*entry));
	/* A link-local RoCE GID from the MAC (EUI-64). */
	entry->gid.raw[0] = 0xfe;
	entry->gid.raw[1] = 0x80;
	entry->gid.raw[8] = d->mac[0] ^ 2;
	entry->gid.raw[9] = d->mac[1];
	entry->gid.raw[10] = d->mac[2];
	entry->gid.raw[11] = 0xff;
	entry->gid.raw[12] = 0xfe;
	entry->gid.raw[13] = d->mac[3];
	entry->gid.raw[14] = d->mac[4];
	entry->gid.raw[15] = d->mac[5];
	entry->gid_index = 0;
	entry->port_num = SV_PORT;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = (uint32_t)d->ifindex;
	return 0;
}

/* ---- fork ---- */

static void sv_atfork_child(void)
{
	/* Every object is the parent's now (each records its pid). The
	 * parent's kernel-path table must never be changed from here, nor
	 * its wires read: a QP of the child's opens a wire of its own. */
	__atomic_store_n(&sv_pid, 0, __ATOMIC_RELAXED);
	pthread_mutex_init(&sv_lock, NULL);
	sv_nft_forget();
	for (struct sv_device *d = sv_devices; d; d = d->next) {
		if (d->wire_users)
			sv_wire_close(d);
		d->wire_users = 0;
	}
}

static pthread_once_t sv_atfork_once = PTHREAD_ONCE_INIT;

static void sv_atfork_register(void)
{
	pthread_atfork(NULL, NULL, sv_atfork_child);
}

__attribute__((constructor)) static void sv_init(void)
{
	pthread_once(&sv_atfork_once, sv_atfork_register);
}

/* SOFTVERBS_STATS=1: what the device did, when a QP goes (debugging a
 * test; a process killed by a signal never runs destructors). */
void sv_print_stats(void)
{
	const char *env = getenv("SOFTVERBS_STATS");
	if (!env || strcmp(env, "1") != 0)
		return;
	char line[512];
	int n = snprintf(line, sizeof(line),
			 "softverbs: pid %d: %llu doorbells, %llu send WRs (%llu signalled, %llu inline, %llu ENOMEM), "
			 "%llu recv WRs (%llu ENOMEM), %llu frames received, %llu without WQE, %llu split, "
			 "%llu events, %llu wire tx drops, %llu wire rx drops, %llu violations\n",
			 (int)getpid(), (unsigned long long)sv_stats.post_send_calls,
			 (unsigned long long)sv_stats.send_wrs, (unsigned long long)sv_stats.send_signaled,
			 (unsigned long long)sv_stats.send_inline, (unsigned long long)sv_stats.send_enomem,
			 (unsigned long long)sv_stats.recv_wrs, (unsigned long long)sv_stats.recv_enomem,
			 (unsigned long long)sv_stats.rx_frames, (unsigned long long)sv_stats.rx_no_wqe,
			 (unsigned long long)sv_stats.rx_segmented, (unsigned long long)sv_stats.events,
			 (unsigned long long)sv_stats.wire_tx_dropped, (unsigned long long)sv_stats.wire_rx_dropped,
			 (unsigned long long)sv_stats.violations);
	if (n > 0 && syscall(SYS_write, 2, line, (size_t)n) < 0)
		return;
}

SV_EXPORT int ibv_fork_init(void)
{
	pthread_mutex_lock(&sv_lock);
	sv_fork_inited = true;
	sv_stats.fork_inits++;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return sv_fork_inited ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

/* ---- protection domains and memory regions ---- */

SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct sv_context *c = sv_ctx(context);

	pthread_mutex_lock(&sv_lock);
	struct sv_pd *pd = NULL;
	if (sv_ctx_usable(c, "ibv_alloc_pd") && !sv_fail("ibv_alloc_pd")) {
		pd = calloc(1, sizeof(*pd));
		if (pd) {
			pd->pd.context = context;
			pd->pd.handle = sv_next_handle++;
			c->objects++;
		} else {
			errno = ENOMEM;
		}
	}
	pthread_mutex_unlock(&sv_lock);
	return pd ? &pd->pd : NULL;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sv_pd *pd = (struct sv_pd *)ibpd;
	struct sv_context *c = sv_ctx(ibpd->context);
	int ret = 0;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(c, "ibv_dealloc_pd"))
		ret = EINVAL;
	else if (pd->mrs)
		ret = EBUSY;
	else {
		c->objects--;
		free(pd);
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

static struct ibv_mr *sv_reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, unsigned int access)
{
	struct sv_pd *pd = (struct sv_pd *)ibpd;
	struct sv_context *c = sv_ctx(ibpd->context);

	pthread_mutex_lock(&sv_lock);
	struct sv_mr *mr = NULL;
	if (!sv_ctx_usable(c, "ibv_reg_mr") || sv_fail("ibv_reg_mr"))
		goto out;
	if (!addr || !length) {
		errno = EINVAL;
		goto out;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		goto out;
	}
	mr->mr.context = ibpd->context;
	mr->mr.pd = ibpd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.handle = sv_next_handle++;
	mr->mr.lkey = mr->mr.handle * 0x101u;
	mr->mr.rkey = mr->mr.lkey;
	mr->access = (int)access;
	mr->next = pd->mrs;
	pd->mrs = mr;
out:
	pthread_mutex_unlock(&sv_lock);
	return mr ? &mr->mr : NULL;
}

#undef ibv_reg_mr
SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return sv_reg_mr(pd, addr, length, (unsigned int)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					  unsigned int access)
{
	if (iova != (uintptr_t)addr) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return sv_reg_mr(pd, addr, length, access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct sv_pd *pd = (struct sv_pd *)ibmr->pd;
	int ret = ENOENT;

	pthread_mutex_lock(&sv_lock);
	if (!sv_ctx_usable(sv_ctx(ibmr->context), "ibv_dereg_mr")) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	for (struct sv_mr **p = &pd->mrs; *p; p = &(*p)->next) {
		if (&(*p)->mr == ibmr) {
			struct sv_mr *gone = *p;
			*p = gone->next;
			free(gone);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&sv_lock);
	return ret;
}

struct sv_mr *sv_mr_find(struct sv_pd *pd, uint64_t addr, uint32_t len, uint32_t lkey)
{
	for (struct sv_mr *mr = pd->mrs; mr; mr = mr->next) {
		uint64_t start = (uint64_t)(uintptr_t)mr->mr.addr;
		if (mr->mr.lkey == lkey && addr >= start && addr + len <= start + mr->mr.length)
			return mr;
	}
	return NULL;
}

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS: return "success";
	case IBV_WC_LOC_LEN_ERR: return "local length error";
	case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
	case IBV_WC_LOC_PROT_ERR: return "local protection error";
	case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
	case IBV_WC_GENERAL_ERR: return "general error";
	default: return "unknown";
	}
}
