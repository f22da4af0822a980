/* The verbs backend: which RDMA device and port serve a netdev, found the
 * way rdma-core's tools find them (docs/verbs.md, "Device discovery"):
 * sysfs first (/sys/class/net/IF/device/infiniband/DEV, the port whose
 * GID attributes name IF), then the GID table entry's netdev through
 * ibv_query_gid_ex, which is also the only mapping a device without sysfs
 * (softverbs) offers. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>

#include "log/vlog.h"
#include "ring/ring_verbs.h"

static pthread_once_t ring_verbs_once = PTHREAD_ONCE_INIT;
static struct ring_verbs_config ring_verbs_first_cfg;

static void ring_verbs_process_init_once(void)
{
	/* Before the first device is opened: the mlx5 provider reads its
	 * BlueFlame switch then, and ibv_fork_init must precede every other
	 * verbs call. */
	if (ring_verbs_first_cfg.blueflame_off)
		setenv("MLX5_SHUT_UP_BF", "1", 0);
	if (ring_verbs_first_cfg.fork_init) {
		int err = ibv_fork_init();
		if (err)
			vlog_warn("ring: ibv_fork_init failed (%s): a fork() may corrupt memory the verbs rings "
				  "share with the NIC (VMA_FORK)", strerror(err));
	}
}

void ring_verbs_process_init(const struct ring_config *cfg)
{
	if (cfg)
		ring_verbs_first_cfg = cfg->verbs;
	pthread_once(&ring_verbs_once, ring_verbs_process_init_once);
}

static int ring_verbs_read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char *got = fgets(buf, (int)len, f);
	fclose(f);
	if (!got)
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* sysfs: the RDMA device behind the netdev's PCI function, and the port
 * whose GID attributes name the netdev (else dev_port + 1). */
static bool ring_verbs_sysfs_lookup(const char *ifname, char *ibdev, size_t ibdev_len, uint8_t *port)
{
	char path[256], line[64];
	struct dirent *e;

	snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband", ifname);
	DIR *dir = opendir(path);
	if (!dir)
		return false;
	ibdev[0] = '\0';
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			snprintf(ibdev, ibdev_len, "%.63s", e->d_name);
	closedir(dir);
	if (!ibdev[0])
		return false;
	*port = 0;
	for (unsigned p = 1; p <= 8 && !*port; p++) {
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/0", ibdev, p);
		if (ring_verbs_read_line(path, line, sizeof(line)) == 0 && strcmp(line, ifname) == 0)
			*port = (uint8_t)p;
	}
	if (!*port) {
		snprintf(path, sizeof(path), "/sys/class/net/%s/dev_port", ifname);
		*port = ring_verbs_read_line(path, line, sizeof(line)) == 0 ? (uint8_t)(atoi(line) + 1) : 1;
	}
	return true;
}

/* The port of an open device whose GID entry 0 belongs to ifindex. */
static uint8_t ring_verbs_gid_port(struct ibv_context *ctx, unsigned ifindex)
{
	struct ibv_device_attr dev_attr;
	struct ibv_gid_entry entry;

	if (ibv_query_device(ctx, &dev_attr))
		return 0;
	for (unsigned p = 1; p <= dev_attr.phys_port_cnt; p++)
		if (ibv_query_gid_ex(ctx, p, 0, &entry, 0) == 0 && entry.ndev_ifindex == ifindex)
			return (uint8_t)p;
	return 0;
}

static int ring_verbs_port_usable(struct ibv_context *ctx, uint8_t port, char *why, size_t why_len)
{
	struct ibv_port_attr attr;
	int err = ibv_query_port(ctx, port, &attr);

	if (err) {
		snprintf(why, why_len, "cannot query port %u of %s: %s", port, ibv_get_device_name(ctx->device),
			 strerror(err));
		return -err;
	}
	if (attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
		snprintf(why, why_len, "port %u of %s is not Ethernet (InfiniBand and IPoIB are not supported)", port,
			 ibv_get_device_name(ctx->device));
		return -EOPNOTSUPP;
	}
	if (attr.state != IBV_PORT_ACTIVE) {
		snprintf(why, why_len, "port %u of %s is not active", port, ibv_get_device_name(ctx->device));
		return -ENETDOWN;
	}
	return 0;
}

int ring_verbs_device_open(const char *ifname, unsigned ifindex, struct ibv_context **ctx_out, uint8_t *port_out,
			   char *why, size_t why_len)
{
	char ibdev[64];
	uint8_t port = 0;
	bool by_sysfs = ring_verbs_sysfs_lookup(ifname, ibdev, sizeof(ibdev), &port);
	int count = 0;
	struct ibv_device **list = ibv_get_device_list(&count);

	if (!list || count == 0) {
		if (list)
			snprintf(why, why_len, "no RDMA device");
		else
			snprintf(why, why_len, "no RDMA device (%s)",
				 errno == EPROTONOSUPPORT || errno == ENOSYS ? "no kernel RDMA support" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		return -ENODEV;
	}
	struct ibv_context *ctx = NULL;
	for (int i = 0; i < count && !ctx; i++) {
		if (by_sysfs && strcmp(ibv_get_device_name(list[i]), ibdev) != 0)
			continue;
		struct ibv_context *c = ibv_open_device(list[i]);
		if (!c)
			continue;
		if (!by_sysfs)
			port = ring_verbs_gid_port(c, ifindex);
		if (port)
			ctx = c;
		else
			ibv_close_device(c);
	}
	ibv_free_device_list(list);
	if (!ctx) {
		snprintf(why, why_len, by_sysfs ? "cannot open RDMA device %s" : "no RDMA device serves %s",
			 by_sysfs ? ibdev : ifname);
		return -ENODEV;
	}
	int err = ring_verbs_port_usable(ctx, port, why, why_len);
	if (err) {
		ibv_close_device(ctx);
		return err;
	}
	*ctx_out = ctx;
	*port_out = port;
	return 0;
}

bool ring_verbs_available(const char *ifname, const struct ring_config *cfg)
{
	struct ibv_context *ctx;
	uint8_t port;
	char why[128];
	unsigned ifindex = if_nametoindex(ifname);

	if (!ifindex)
		return false;
	ring_verbs_process_init(cfg);
	if (ring_verbs_device_open(ifname, ifindex, &ctx, &port, why, sizeof(why)) != 0)
		return false;
	ibv_close_device(ctx);
	return true;
}
