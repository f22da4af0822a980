/* Loads the real net/ snapshot and answers questions, one line each, for
 * tests/integration/net_netns.sh. Commands run in order:
 *   route DST                      route lookup
 *   mroute GROUP none|IFNAME|ADDR  multicast lookup with IP_MULTICAST_IF
 *   neigh IFNAME IP TIMEOUT_MS     neighbour resolution
 *   settings QUOTA DELAY_MS RETRIES   VMA_NEIGH_* for later neigh commands
 *   trigger auto|netlink|udp       how the kernel is asked to resolve
 *   ready PATH                     creates PATH (the script may act now)
 *   waitaddr ADDR TIMEOUT_MS       follows events until ADDR is ours */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>

#include "net/net.h"

static const char *kind_name(enum net_route_kind kind)
{
	switch (kind) {
	case NET_ROUTE_UNICAST: return "unicast";
	case NET_ROUTE_LOCAL: return "local";
	case NET_ROUTE_BROADCAST: return "broadcast";
	case NET_ROUTE_MULTICAST: return "multicast";
	}
	return "?";
}

static const char *errno_name(int err)
{
	switch (err) {
	case ENETUNREACH: return "ENETUNREACH";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case ENODEV: return "ENODEV";
	case EPERM: return "EPERM";
	default: return strerror(err);
	}
}

static in_addr_t parse_ip(const char *text)
{
	struct in_addr a;
	if (inet_pton(AF_INET, text, &a) != 1) {
		fprintf(stderr, "net_probe: bad address %s\n", text);
		exit(2);
	}
	return a.s_addr;
}

static const char *ip_text(in_addr_t ip, char *buf)
{
	struct in_addr a = { .s_addr = ip };
	return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void print_route(struct net_ctx *ctx, const char *label, const char *dst, int rc,
			const struct net_route_result *r)
{
	char gw[INET_ADDRSTRLEN], src[INET_ADDRSTRLEN], hop[INET_ADDRSTRLEN];
	if (rc) {
		printf("%s %s error=%s\n", label, dst, errno_name(-rc));
		return;
	}
	struct net_link link;
	const char *name = net_link_get(ctx, r->ifindex, &link) == 0 ? link.name : "?";
	printf("%s %s kind=%s if=%s gw=%s next_hop=%s src=%s mtu=%u\n", label, dst, kind_name(r->kind), name,
	       ip_text(r->gateway, gw), ip_text(r->next_hop, hop), ip_text(r->src, src), r->mtu);
}

static int ifindex_of(const char *name)
{
	int idx = (int)if_nametoindex(name);
	if (!idx) {
		fprintf(stderr, "net_probe: no interface %s\n", name);
		exit(2);
	}
	return idx;
}

static void wait_addr(struct net_ctx *ctx, const char *text, int timeout_ms)
{
	in_addr_t addr = parse_ip(text);
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	int owner = 0;
	struct net_route_query q = { .dst = addr };
	struct net_route_result r;
	/* net_route_lookup answers "local" once the kernel's local route for the
	 * new address reached us through events. */
	if (net_route_lookup(ctx, &q, &r) == 0 && r.kind == NET_ROUTE_LOCAL) {
		printf("addr %s present-at-start\n", text);
		return;
	}
	int events = 0;
	while (now_ms() < deadline) {
		int rc = net_poll_events(ctx, (int)(deadline - now_ms()));
		if (rc > 0)
			events += rc;
		if (net_route_lookup(ctx, &q, &r) == 0 && r.kind == NET_ROUTE_LOCAL) {
			owner = r.ifindex;
			break;
		}
	}
	struct net_link link;
	if (owner && net_link_get(ctx, owner, &link) == 0)
		printf("addr %s appeared if=%s events=%s\n", text, link.name, events > 0 ? "yes" : "no");
	else
		printf("addr %s missing\n", text);
}

int main(int argc, char **argv)
{
	struct net_ctx *ctx;
	int rc = net_open(&ctx);
	if (rc) {
		printf("open error=%s\n", errno_name(-rc));
		return 1;
	}
	struct net_neigh_settings settings;
	net_neigh_settings_default(&settings);

	for (int i = 1; i < argc; i++) {
		const char *cmd = argv[i];
		int left = argc - i - 1;
		if (!strcmp(cmd, "route") && left >= 1) {
			struct net_route_query q = { .dst = parse_ip(argv[i + 1]) };
			struct net_route_result r;
			rc = net_route_lookup(ctx, &q, &r);
			print_route(ctx, "route", argv[i + 1], rc, &r);
			i += 1;
		} else if (!strcmp(cmd, "mroute") && left >= 2) {
			struct net_route_query q = { .dst = parse_ip(argv[i + 1]) };
			struct in_addr a;
			if (inet_pton(AF_INET, argv[i + 2], &a) == 1)
				q.mc_if_addr = a.s_addr;
			else if (strcmp(argv[i + 2], "none"))
				q.mc_ifindex = ifindex_of(argv[i + 2]);
			struct net_route_result r;
			rc = net_route_lookup(ctx, &q, &r);
			print_route(ctx, "mroute", argv[i + 1], rc, &r);
			i += 2;
		} else if (!strcmp(cmd, "neigh") && left >= 3) {
			uint8_t mac[NET_MAC_LEN];
			uint64_t start = now_ms();
			net_set_neigh_settings(ctx, &settings);
			rc = net_neigh_resolve(ctx, ifindex_of(argv[i + 1]), parse_ip(argv[i + 2]), mac,
					       atoi(argv[i + 3]));
			unsigned long elapsed = (unsigned long)(now_ms() - start);
			if (rc)
				printf("neigh %s error=%s ms=%lu\n", argv[i + 2], errno_name(-rc), elapsed);
			else
				printf("neigh %s mac=%02x:%02x:%02x:%02x:%02x:%02x ms=%lu\n", argv[i + 2], mac[0],
				       mac[1], mac[2], mac[3], mac[4], mac[5], elapsed);
			i += 3;
		} else if (!strcmp(cmd, "settings") && left >= 3) {
			settings.uc_arp_quota = (unsigned int)atoi(argv[i + 1]);
			settings.uc_arp_delay_msec = (unsigned int)atoi(argv[i + 2]);
			settings.num_err_retries = (unsigned int)atoi(argv[i + 3]);
			i += 3;
		} else if (!strcmp(cmd, "trigger") && left >= 1) {
			const char *how = argv[i + 1];
			net_set_trigger(ctx, !strcmp(how, "udp") ? NET_TRIGGER_UDP
					     : !strcmp(how, "netlink") ? NET_TRIGGER_NETLINK : NET_TRIGGER_AUTO);
			i += 1;
		} else if (!strcmp(cmd, "ready") && left >= 1) {
			int fd = open(argv[i + 1], O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
			if (fd >= 0)
				close(fd);
			i += 1;
		} else if (!strcmp(cmd, "waitaddr") && left >= 2) {
			wait_addr(ctx, argv[i + 1], atoi(argv[i + 2]));
			i += 2;
		} else {
			fprintf(stderr, "net_probe: bad command at %s\n", cmd);
			net_close(ctx);
			return 2;
		}
		fflush(stdout);
	}
	net_close(ctx);
	return 0;
}
