/* vmad_probe IFNAME: talks to the running vmad the way a hostile (or just
 * mistaken) unprivileged program would, and prints one line per request
 * with vmad's answer, for vmad_unpriv.sh to check:
 *
 *   join <errno name or 0>
 *   noproof <...>        FLOW_ADD of a UDP port with no socket as proof
 *   wrongport <...>      proof bound to another port than the flow's
 *   otherproto <...>     a TCP socket as proof for a UDP flow
 *   group <...>          a group the proving socket never joined
 *   foreign <...>        a port (VMAD_PROBE_FOREIGN_PORT) another process
 *                        owns, with a socket of ours bound elsewhere
 *   own <...>            a UDP port our own socket is bound to (allowed)
 *   conn <...>           a TCP 5-tuple of our listener's port (allowed)
 *   lane2 <...>          the same 5-tuple from a second membership of this
 *                        process, exclusive (EBUSY: the first steers it)
 *   takeover <...>       the same with VMAD_FLOW_TAKEOVER (allowed: a
 *                        connection moving to another lane of ours)
 *   takeback <...>       the first membership takes it back (allowed)
 *   otherproc <...>      a forked child's own membership asks to take it
 *                        over (EBUSY: another process's connection)
 *   churn ADD DEL REDEL HELD READD
 *                        600 more 5-tuples of the listener's port, counted
 *                        as "ok/tried": added by the first membership, every
 *                        other one deleted, deleted again (ENOENT: gone),
 *                        the kept ones asked for by the second membership
 *                        (EBUSY: still held), the deleted ones asked for by
 *                        it (0: nothing of the first stays behind); then all
 *                        deleted. vmad's flow table is a hash with a free
 *                        list: a stale or lost entry shows here
 *   sockets RX TX        which rings the two member sockets vmad handed
 *                        over can map, e.g. "rx-only tx-only": the wait fd
 *                        (RX) must have no TX ring, or the kernel's poll of
 *                        it transmits under the mutex the doorbell takes
 *                        (docs/ring.md, "Two sockets per member")
 *
 * It links libvma_core for the client side of the protocol but is not run
 * under LD_PRELOAD. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "ring/ring_xsk.h"
#include "vmad/vmad_client.h"

static const char *errname(int err)
{
	switch (-err) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case EBUSY: return "EBUSY";
	case EINVAL: return "EINVAL";
	case ENODEV: return "ENODEV";
	case ENOSPC: return "ENOSPC";
	default: return strerror(-err);
	}
}

static int bound_socket(int type, uint16_t port)
{
	int fd = socket(AF_INET, type, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("vmad_probe: bind");
		exit(2);
	}
	return fd;
}

/* "rx-only", "tx-only", "rx+tx" or "none": the rings fd can map. */
static const char *rings_of(int fd, uint32_t descs)
{
	struct ring_xsk_ring r;
	bool rx = ring_xsk_map_ring(fd, RING_XSK_RX, descs, &r) == 0;
	if (rx)
		ring_xsk_unmap_ring(&r);
	bool tx = ring_xsk_map_ring(fd, RING_XSK_TX, descs, &r) == 0;
	if (tx)
		ring_xsk_unmap_ring(&r);
	return rx && tx ? "rx+tx" : rx ? "rx-only" : tx ? "tx-only" : "none";
}

static struct ring_flow udp_flow(uint16_t port)
{
	return (struct ring_flow){ .proto = IPPROTO_UDP, .local_port = htons(port), .owner_fd = -1 };
}

#define CHURN_FLOWS 600

/* Adds, deletes and re-adds CHURN_FLOWS 5-tuples like *base (remote ports
 * from 41000) and prints what vmad answered; see the header. */
static void churn(struct vmad_membership *m, struct vmad_membership *m2, const struct ring_flow *base, int proof)
{
	unsigned add = 0, del = 0, redel = 0, held = 0, readd = 0, gone = 0;
	struct ring_flow f = *base;

	for (unsigned i = 0; i < CHURN_FLOWS; i++) {
		f.remote_port = htons((uint16_t)(41000 + i));
		add += vmad_client_flow(m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, proof) == 0;
	}
	for (unsigned i = 0; i < CHURN_FLOWS; i += 2) {
		f.remote_port = htons((uint16_t)(41000 + i));
		del += vmad_client_flow(m, VMAD_OP_FLOW_DEL, &f, VMAD_FLOW_EXCLUSIVE, -1) == 0;
	}
	for (unsigned i = 0; i < CHURN_FLOWS; i += 2) {
		f.remote_port = htons((uint16_t)(41000 + i));
		redel += vmad_client_flow(m, VMAD_OP_FLOW_DEL, &f, VMAD_FLOW_EXCLUSIVE, -1) == -ENOENT;
	}
	for (unsigned i = 0; i < CHURN_FLOWS; i++) {
		f.remote_port = htons((uint16_t)(41000 + i));
		int err = vmad_client_flow(m2, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, proof);
		if (i % 2)
			held += err == -EBUSY;
		else
			readd += err == 0;
	}
	for (unsigned i = 0; i < CHURN_FLOWS; i++) {
		f.remote_port = htons((uint16_t)(41000 + i));
		gone += vmad_client_flow(i % 2 ? m : m2, VMAD_OP_FLOW_DEL, &f, VMAD_FLOW_EXCLUSIVE, -1) == 0;
	}
	printf("churn add=%u/%u del=%u/%u redel=%u/%u held=%u/%u readd=%u/%u gone=%u/%u\n", add, CHURN_FLOWS, del,
	       CHURN_FLOWS / 2, redel, CHURN_FLOWS / 2, held, CHURN_FLOWS / 2, readd, CHURN_FLOWS / 2, gone,
	       CHURN_FLOWS);
}

int main(int argc, char **argv)
{
	struct ring_sizes sizes = { .rx_frames = 256, .rx_descs = 256, .tx_frames = 256, .rx_batch = 16,
				    .tx_batch = 16 };
	struct vmad_membership m;
	char why[256] = "";

	if (argc != 2) {
		fprintf(stderr, "usage: vmad_probe IFNAME\n");
		return 2;
	}
	int err = vmad_client_join(argv[1], 0, &sizes, NULL, &m, why, sizeof(why));
	printf("join %s%s%s\n", errname(err), why[0] ? " " : "", why);
	if (err)
		return 0;
	printf("sockets %s %s\n", rings_of(m.xsk_fd, sizes.rx_descs), rings_of(m.xsk_tx_fd, sizes.tx_frames));

	struct ring_flow f = udp_flow(17001);
	printf("noproof %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, -1)));

	int s1 = bound_socket(SOCK_DGRAM, 17002);
	f = udp_flow(17003);
	printf("wrongport %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, s1)));

	int t1 = bound_socket(SOCK_STREAM, 17004);
	f = udp_flow(17004);
	printf("otherproto %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, t1)));

	int s2 = bound_socket(SOCK_DGRAM, 17005);
	f = udp_flow(17005);
	f.group = inet_addr("239.9.9.9");
	printf("group %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, s2)));

	const char *foreign = getenv("VMAD_PROBE_FOREIGN_PORT");
	if (foreign) {
		f = udp_flow((uint16_t)atoi(foreign));
		printf("foreign %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_SHARE, s1)));
	}

	int s3 = bound_socket(SOCK_DGRAM, 17006);
	f = udp_flow(17006);
	printf("own %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &f, VMAD_FLOW_EXCLUSIVE, s3)));

	/* A connection of our listener's port, moving between two lanes
	 * (memberships) of this process, and a stranger wanting it. */
	int l1 = bound_socket(SOCK_STREAM, 17007);
	listen(l1, 4);
	struct ring_flow c = { .proto = IPPROTO_TCP, .local_ip = inet_addr("198.18.0.2"), .local_port = htons(17007),
			       .remote_ip = inet_addr("198.18.0.1"), .remote_port = htons(40001), .owner_fd = -1 };
	printf("conn %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &c, VMAD_FLOW_EXCLUSIVE, l1)));
	struct vmad_membership m2;
	err = vmad_client_join(argv[1], 0, &sizes, NULL, &m2, why, sizeof(why));
	if (err == 0) {
		printf("lane2 %s\n", errname(vmad_client_flow(&m2, VMAD_OP_FLOW_ADD, &c, VMAD_FLOW_EXCLUSIVE, l1)));
		printf("takeover %s\n", errname(vmad_client_flow(&m2, VMAD_OP_FLOW_ADD, &c, VMAD_FLOW_TAKEOVER, l1)));
		printf("takeback %s\n", errname(vmad_client_flow(&m, VMAD_OP_FLOW_ADD, &c, VMAD_FLOW_TAKEOVER, l1)));
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			struct vmad_membership m3;
			int e = vmad_client_join(argv[1], 0, &sizes, NULL, &m3, why, sizeof(why));
			if (e == 0)
				e = vmad_client_flow(&m3, VMAD_OP_FLOW_ADD, &c, VMAD_FLOW_TAKEOVER, l1);
			printf("otherproc %s\n", errname(e));
			fflush(stdout);
			_exit(0);
		}
		if (pid > 0)
			waitpid(pid, NULL, 0);
		churn(&m, &m2, &c, l1);
		vmad_client_leave(&m2);
	} else {
		printf("lane2 join %s\n", errname(err));
	}
	close(l1);
	close(s1);
	close(s2);
	close(s3);
	close(t1);
	vmad_client_leave(&m);
	return 0;
}
