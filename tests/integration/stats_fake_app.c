/* Helper of tests/integration/stats_*.sh: a process that owns a statistics
 * block with fake sockets, without offloading anything.
 *   stats_fake_app DIR NSOCK PACKETS BYTES_PER_PACKET
 * Opens the block in DIR (VMA_STATS_FD_NUM from the environment, default 100),
 * registers NSOCK UDP sockets on fds 100.., adds PACKETS rx/tx packets of
 * BYTES_PER_PACKET to each, joins 224.4.1.<i> per socket, then services
 * control requests every 100 ms, printing "level=N" / "details=N" when
 * vma_stats changes them, and "tick" counters keep rising by one packet a
 * tick on the first socket when STATS_FAKE_TICK=1. Exits on SIGTERM. */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "log/vlog.h"
#include "stats/stats.h"

static volatile sig_atomic_t done;
static void on_term(int sig) { (void)sig; done = 1; }
static void set_level(int level) { vlog_set_level(level); printf("level=%d\n", level); fflush(stdout); }
static void set_details(int d) { vlog_set_details(d); printf("details=%d\n", d); fflush(stdout); }

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s DIR NSOCK PACKETS BYTES\n", argv[0]);
		return 2;
	}
	int nsock = atoi(argv[2]);
	unsigned long long packets = strtoull(argv[3], NULL, 10), bytes = strtoull(argv[4], NULL, 10);
	const char *fdnum = getenv("VMA_STATS_FD_NUM");
	struct stats_settings st = {
		.shmem_dir = argv[1], .fd_num = fdnum ? atoi(fdnum) : 100,
		.stats_file = getenv("VMA_STATS_FILE"), .lib_version = "test",
	};
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	if (stats_open(&st) != 0)
		return 1;
	struct stats_socket **socks = calloc((size_t)nsock + 1, sizeof(*socks));
	for (int i = 0; i < nsock; i++) {
		struct stats_socket *s = stats_socket_slot_get(100 + i, STATS_PROTO_UDP);
		s->local_addr = htonl(0x0a000001);
		s->local_port = htons((uint16_t)(11111 + i));
		s->blocking = 1;
		s->mc_loop = 1;
		s->rx_ready_bytes_limit = 65536;
		for (unsigned long long p = 0; p < packets; p++) {
			s->c.rx_packets++; s->c.rx_bytes += bytes; s->c.rx_poll_hit++;
			s->c.tx_packets++; s->c.tx_bytes += bytes;
		}
		stats_mc_group_ref(100 + i, htonl(0xe0040100u + (uint32_t)(i % 4)));
		socks[i] = s;
	}
	struct stats_ring *ring = stats_ring_slot_get(0, "veth0");
	ring->c.rx_packets = packets * (unsigned long long)nsock;
	struct stats_pool *pool = stats_pool_slot_get(0, STATS_POOL_RX);
	pool->size = 4096;
	struct stats_iomux *sel = stats_iomux_slot_get(STATS_IOMUX_SELECT, -1);
	sel->c.offload_ready = packets;
	printf("ready pid=%d\n", (int)getpid());
	fflush(stdout);
	struct stats_control_ops ops = { set_level, set_details, NULL };
	int tick = getenv("STATS_FAKE_TICK") && atoi(getenv("STATS_FAKE_TICK"));
	while (!done) {
		struct timespec ts = { 0, 100 * 1000000L };
		nanosleep(&ts, NULL);
		if (tick && nsock) {
			socks[0]->c.rx_packets += 10;
			socks[0]->c.rx_bytes += 10 * bytes;
		}
		stats_service_control(&ops);
	}
	for (int i = 0; i < nsock; i++)
		stats_socket_slot_put(socks[i]);
	stats_close();
	free(socks);
	return 0;
}
