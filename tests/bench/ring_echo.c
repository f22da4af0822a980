/* ring_echo IFNAME PORT [QUEUE]: the latency floor. Attaches one UDP flow
 * (INADDR_ANY:PORT) on a ring of IFNAME and sends every datagram back with
 * MAC, IP addresses and ports swapped, without any stack. Prints "ready" once
 * attached; SIGINT/SIGTERM detach and exit 0. Exit 2: usage; exit 3: the
 * ring could not be opened (the warning says why; traffic stays with the
 * kernel). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>

#include "log/vlog.h"
#include "ring/ring.h"

#define ECHO_BURST 32
#define ECHO_EXIT_USAGE 2
#define ECHO_EXIT_NO_RING 3

static volatile sig_atomic_t echo_stop;

static void echo_on_signal(int sig)
{
	(void)sig;
	echo_stop = 1;
}

static uint32_t echo_sum(uint32_t sum, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (i < len)
		sum += (uint32_t)(p[i] << 8);
	return sum;
}

static uint16_t echo_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons((uint16_t)~sum);
}

/* Turns a request into its reply in place. Returns the length to send, or 0
 * for a frame that is not an intact IPv4 UDP datagram to port. Both checksums
 * are recomputed in full: a sender on veth leaves the UDP checksum partial
 * (checksum offload), so the received value cannot just be kept. */
static uint32_t echo_make_reply(uint8_t *frame, uint32_t len, uint16_t port)
{
	struct ether_header *eth = (struct ether_header *)frame;
	uint8_t mac[ETH_ALEN];

	if (len < sizeof(*eth) + sizeof(struct iphdr) || eth->ether_type != htons(ETHERTYPE_IP))
		return 0;
	struct iphdr *ip = (struct iphdr *)(eth + 1);
	uint32_t ihl = ip->ihl * 4u;
	if (ip->version != 4 || ihl < sizeof(*ip) || ip->protocol != IPPROTO_UDP ||
	    len < sizeof(*eth) + ihl + sizeof(struct udphdr))
		return 0;
	struct udphdr *udp = (struct udphdr *)((uint8_t *)ip + ihl);
	uint32_t udp_len = ntohs(udp->uh_ulen);
	uint32_t ip_len = ntohs(ip->tot_len);
	if (udp->uh_dport != port || udp_len < sizeof(*udp) || ihl + udp_len > ip_len ||
	    sizeof(*eth) + ip_len > len)
		return 0;

	memcpy(mac, eth->ether_dhost, ETH_ALEN);
	memcpy(eth->ether_dhost, eth->ether_shost, ETH_ALEN);
	memcpy(eth->ether_shost, mac, ETH_ALEN);
	uint32_t addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	ip->ttl = 64;
	ip->check = 0;
	ip->check = echo_fold(echo_sum(0, ip, ihl));
	uint16_t p = udp->uh_sport;
	udp->uh_sport = udp->uh_dport;
	udp->uh_dport = p;

	/* Pseudo header: both addresses, protocol, UDP length. */
	uint32_t sum = echo_sum(0, &ip->saddr, 8) + IPPROTO_UDP + udp_len;
	udp->uh_sum = 0;
	uint16_t check = echo_fold(echo_sum(sum, udp, udp_len));
	udp->uh_sum = check ? check : 0xffff;
	return (uint32_t)sizeof(*eth) + ip_len;
}

static int echo_parse_u16(const char *text, uint16_t *out)
{
	char *end;
	long value = strtol(text, &end, 10);

	if (*text == '\0' || *end || value <= 0 || value > 65535)
		return -1;
	*out = (uint16_t)value;
	return 0;
}

int main(int argc, char **argv)
{
	struct ring_pkt pkts[ECHO_BURST];
	struct ring_counters c;
	uint16_t port, queue = 0;

	if (argc < 3 || argc > 4 || echo_parse_u16(argv[2], &port) != 0 ||
	    (argc == 4 && strcmp(argv[3], "0") != 0 && echo_parse_u16(argv[3], &queue) != 0)) {
		fprintf(stderr, "usage: %s IFNAME PORT [QUEUE]\n", argv[0]);
		return ECHO_EXIT_USAGE;
	}
	const char *level = getenv("VMA_TRACELEVEL");
	int lvl;
	if (level && vlog_level_parse(level, &lvl) == 0)
		vlog_set_level(lvl);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = echo_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	struct ring *ring = ring_open(argv[1], queue, NULL);
	if (!ring)
		return ECHO_EXIT_NO_RING;
	struct ring_flow flow = { .proto = IPPROTO_UDP, .local_port = htons(port) };
	int err = ring_attach_flow(ring, &flow);
	if (err) {
		fprintf(stderr, "ring_echo: %s: attaching UDP port %u failed: %s\n", argv[1], port, strerror(-err));
		ring_close(ring);
		return ECHO_EXIT_NO_RING;
	}
	printf("ready\n");
	fflush(stdout);

	/* Busy-poll: the floor we measure is the ring's, not the scheduler's.
	 * RING_ECHO_SLEEP=1 waits on the wait fd instead (for functional tests
	 * that should not burn a core). */
	int sleep_mode = getenv("RING_ECHO_SLEEP") && atoi(getenv("RING_ECHO_SLEEP"));
	uint64_t ignored = 0;
	while (!echo_stop) {
		int n = ring_rx_burst(ring, pkts, ECHO_BURST);
		if (n == 0) {
			if (sleep_mode && ring_wait_arm(ring) == 0) {
				struct pollfd pfd = { .fd = ring_wait_fd(ring), .events = POLLIN };
				poll(&pfd, 1, 100);
			}
			continue;
		}
		for (int i = 0; i < n; i++) {
			uint32_t len = echo_make_reply(pkts[i].data, pkts[i].len, flow.local_port);
			if (len)
				ring_tx_post(ring, pkts[i].data, len);
			else
				ignored++;
		}
		ring_tx_flush(ring);
		ring_rx_release(ring, pkts, (unsigned)n);
	}

	ring_read_counters(ring, &c);
	ring_close(ring);
	fprintf(stderr,
		"ring_echo: rx %llu tx %llu ignored %llu tx_no_buffer %llu doorbells %llu rx_wakeups %llu "
		"rx_dropped %llu fill_empty %llu\n",
		(unsigned long long)c.rx_packets, (unsigned long long)c.tx_packets,
		(unsigned long long)ignored, (unsigned long long)c.tx_no_buffer,
		(unsigned long long)c.tx_doorbells, (unsigned long long)c.rx_wakeups,
		(unsigned long long)c.rx_dropped, (unsigned long long)c.rx_fill_empty);
	return 0;
}
