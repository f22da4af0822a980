/* ring_echo IFNAME PORT[,PORT...] [QUEUE]: the latency floor. Attaches UDP
 * flows (INADDR_ANY:PORT) on one ring of IFNAME and sends every datagram
 * back with MAC, IP addresses and ports swapped, without any stack: received
 * frame -> tx_alloc + copy + swap -> tx_send, one flush per burst. Prints
 * "ready" once attached; SIGINT/SIGTERM detach and exit 0. Exit 2: usage;
 * exit 3: the ring could not be opened (the warning says why; traffic stays
 * with the kernel).
 * Env: RING_ECHO_SLEEP=1 waits on the wait fd instead of spinning;
 * RING_ECHO_RX_BUFS=N sizes the RX pool (VMA_RX_BUFS) and, with
 * RING_ECHO_HOLD=1, every received frame is kept (pool exhaustion test)
 * until SIGUSR1 frees them all and ends holding;
 * RING_ECHO_FLOW=5:LOCAL_IP:REMOTE_IP:REMOTE_PORT attaches the ports as
 * 5-tuples; RING_ECHO_GROUP=ADDR attaches group ADDR:PORT flows instead. */
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

#define ECHO_MAX_PORTS 8

static volatile sig_atomic_t echo_stop;
static volatile sig_atomic_t echo_release;

static void echo_on_signal(int sig)
{
	if (sig == SIGUSR1)
		echo_release = 1;
	else
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
 * for a frame that is not an intact IPv4 UDP datagram to one of ports. Both checksums
 * are recomputed in full: a sender on veth leaves the UDP checksum partial
 * (checksum offload), so the received value cannot just be kept. */
static int echo_port_wanted(uint16_t port, const uint16_t *ports, unsigned nports)
{
	for (unsigned i = 0; i < nports; i++)
		if (ports[i] == port)
			return 1;
	return 0;
}

static uint32_t echo_make_reply(uint8_t *frame, uint32_t len, const uint16_t *ports, unsigned nports)
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
	if (!echo_port_wanted(udp->uh_dport, ports, nports) || udp_len < sizeof(*udp) || ihl + udp_len > ip_len ||
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

static unsigned echo_parse_ports(char *text, uint16_t *ports)
{
	unsigned n = 0;

	for (char *tok = strtok(text, ","); tok; tok = strtok(NULL, ",")) {
		if (n == ECHO_MAX_PORTS || echo_parse_u16(tok, &ports[n]) != 0)
			return 0;
		ports[n] = htons(ports[n]);
		n++;
	}
	return n;
}

/* The echo: copy each request into a TX frame, turn it into the reply
 * there, send; the RX frame goes back (or is held). Returns how many
 * requests were not for us. */
static uint64_t echo_burst(struct ring *ring, struct ring_buf **bufs, int n, const uint16_t *ports,
			   unsigned nports, struct ring_buf **held, unsigned *held_count, unsigned held_cap)
{
	uint64_t ignored = 0;

	for (int i = 0; i < n; i++) {
		struct ring_buf *tx = ring_tx_alloc(ring);
		if (tx && bufs[i]->len <= tx->size) {
			memcpy(tx->data, bufs[i]->data, bufs[i]->len);
			tx->len = echo_make_reply(tx->data, bufs[i]->len, ports, nports);
			if (tx->len)
				ring_tx_send(ring, tx);
			else {
				ring_buf_free(tx);
				ignored++;
			}
		} else {
			ring_buf_free(tx);
		}
		if (held && *held_count < held_cap)
			held[(*held_count)++] = bufs[i];
		else
			ring_buf_free(bufs[i]);
	}
	ring_tx_flush(ring);
	return ignored;
}

int main(int argc, char **argv)
{
	struct ring_buf *bufs[ECHO_BURST];
	struct ring_counters c;
	struct ring_buf_pool_counters rxp;
	uint16_t ports[ECHO_MAX_PORTS], queue = 0;
	unsigned nports = 0;

	if (argc >= 3)
		nports = echo_parse_ports(argv[2], ports);
	if (argc < 3 || argc > 4 || !nports ||
	    (argc == 4 && strcmp(argv[3], "0") != 0 && echo_parse_u16(argv[3], &queue) != 0)) {
		fprintf(stderr, "usage: %s IFNAME PORT[,PORT...] [QUEUE]\n", argv[0]);
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
	sigaction(SIGUSR1, &sa, NULL);

	struct ring_config cfg;
	ring_config_from_params(&cfg);
	cfg.rx_wre = 2048;     /* the floor needs no deep queues */
	cfg.tx_wre = 2048;
	cfg.rx_bufs = 4096;
	if (getenv("RING_ECHO_RX_BUFS"))
		cfg.rx_bufs = cfg.rx_wre = (unsigned)atoi(getenv("RING_ECHO_RX_BUFS"));
	int hold = getenv("RING_ECHO_HOLD") && atoi(getenv("RING_ECHO_HOLD"));

	struct ring *ring = ring_open(argv[1], queue, &cfg);
	if (!ring)
		return ECHO_EXIT_NO_RING;
	struct ring_flow flows[ECHO_MAX_PORTS];
	unsigned nflows = 0;
	const char *five = getenv("RING_ECHO_FLOW");
	const char *group = getenv("RING_ECHO_GROUP");
	for (unsigned i = 0; i < nports; i++) {
		struct ring_flow f = { .proto = IPPROTO_UDP, .local_port = ports[i], .owner_fd = -1 };
		char lip[32], rip[32];
		unsigned rport;
		if (five && sscanf(five, "5:%31[^:]:%31[^:]:%u", lip, rip, &rport) == 3) {
			inet_pton(AF_INET, lip, &f.local_ip);
			inet_pton(AF_INET, rip, &f.remote_ip);
			f.remote_port = htons((uint16_t)rport);
		}
		if (group) /* only the group: unicast to the port stays with the kernel */
			inet_pton(AF_INET, group, &f.group);
		flows[nflows++] = f;
	}
	for (unsigned i = 0; i < nflows; i++) {
		int err = ring_attach_flow(ring, &flows[i]);
		if (err) {
			fprintf(stderr, "ring_echo: %s: attaching UDP port %u failed: %s\n", argv[1],
				ntohs(flows[i].local_port), strerror(-err));
			ring_close(ring);
			return ECHO_EXIT_NO_RING;
		}
	}
	printf("ready\n");
	fflush(stdout);

	/* Busy-poll: the floor we measure is the ring's, not the scheduler's.
	 * RING_ECHO_SLEEP=1 waits on the wait fd instead (for functional tests
	 * that should not burn a core). */
	int sleep_mode = getenv("RING_ECHO_SLEEP") && atoi(getenv("RING_ECHO_SLEEP"));
	uint64_t ignored = 0;
	unsigned held_cap = hold ? cfg.rx_bufs : 0, held_count = 0, held_max = 0;
	struct ring_buf **held = hold ? calloc(held_cap ? held_cap : 1, sizeof(*held)) : NULL;
	while (!echo_stop) {
		if (echo_release && held) {
			/* Give every held frame back: the ring must receive again. */
			for (unsigned i = 0; i < held_count; i++)
				ring_buf_free(held[i]);
			held_max = held_count;
			free(held);
			held = NULL;
			held_count = 0;
			fprintf(stderr, "ring_echo: released %u held frames\n", held_max);
		}
		int n = ring_rx_burst(ring, bufs, ECHO_BURST);
		if (n == 0) {
			if (sleep_mode && ring_wait_arm(ring) == 0) {
				struct pollfd pfd = { .fd = ring_wait_fd(ring), .events = POLLIN };
				poll(&pfd, 1, 100);
			}
			continue;
		}
		ignored += echo_burst(ring, bufs, n, ports, nports, held, &held_count, held_cap);
	}
	for (unsigned i = 0; i < held_count; i++)
		ring_buf_free(held[i]);
	free(held);

	ring_read_counters(ring, &c);
	ring_buf_pool_read_counters(ring_rx_pool(ring), &rxp);
	fprintf(stderr,
		"ring_echo: rx %llu tx %llu ignored %llu tx_no_buffer %llu doorbells %llu rx_wakeups %llu "
		"rx_dropped %llu fill_empty %llu rx_pool size %u free_min %u empty %llu allocs %llu frees %llu\n",
		(unsigned long long)c.rx_packets, (unsigned long long)c.tx_packets,
		(unsigned long long)ignored, (unsigned long long)c.tx_no_buffer,
		(unsigned long long)c.tx_doorbells, (unsigned long long)c.rx_wakeups,
		(unsigned long long)c.rx_dropped, (unsigned long long)c.rx_fill_empty,
		rxp.size, rxp.free_min, (unsigned long long)rxp.empty,
		(unsigned long long)rxp.allocs, (unsigned long long)rxp.frees);
	ring_close(ring);
	return 0;
}
