/* A zero-copy UDP receiver (the manual's recvfrom_zcopy, udp_lat's
 * --vmazcopyread): datagrams are read where the NIC wrote them
 * (MSG_VMA_ZCOPY_FORCE: never copied), checked in place, kept a while and
 * given back in batches with free_packets.
 *
 *   zcopy_udp_recv CTL_ADDR CTL_PORT BIND_ADDR PORT COUNT SIZE BIG_EVERY
 *
 * Asks the kernel peer at CTL_ADDR:CTL_PORT ("n port size") for COUNT
 * datagrams of SIZE bytes (4-byte sequence number, then byte k = seq + k),
 * every BIG_EVERY-th of them (0: none) asked at 3000 bytes instead: the
 * peer's kernel fragments those, the ring does not steer fragments, so they
 * reach the socket through the kernel: MSG_VMA_ZCOPY_FORCE refuses them
 * (EOPNOTSUPP) and a call without it copies them (no MSG_VMA_ZCOPY), as
 * documented. Holds up to 64 packets before freeing them all at once.
 * Prints
 *   zcopy: received N (zero copy N, copied N) intact N
 * exit 0 when every datagram arrived intact, by zero copy unless it came
 * through the kernel, 1 otherwise, 3 without libvma. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <mellanox/vma_extra.h>

#define ZR_HOLD 64
#define ZR_BUF (sizeof(struct vma_packets_t) + sizeof(struct vma_packet_t) + 8 * sizeof(struct iovec))

static int zr_check(const struct vma_packet_t *pkt, size_t total, size_t want_size)
{
	uint8_t first[4];
	size_t off = 0;
	uint32_t seq = 0;
	for (size_t i = 0; i < pkt->sz_iov; i++) {
		const uint8_t *p = pkt->iov[i].iov_base;
		for (size_t j = 0; j < pkt->iov[i].iov_len; j++, off++) {
			if (off < 4) {
				first[off] = p[j];
				if (off == 3) {
					memcpy(&seq, first, 4);
					seq = ntohl(seq);
				}
			} else if (p[j] != (uint8_t)(seq + off)) {
				return 0;
			}
		}
	}
	return off == total && total == want_size;
}

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: %s CTL_ADDR CTL_PORT BIND_ADDR PORT COUNT SIZE BIG_EVERY\n", argv[0]);
		return 2;
	}
	struct vma_api_t *api = vma_get_api();
	if (!api) {
		printf("zcopy: vma_get_api() is NULL\n");
		return 3;
	}
	long count = atol(argv[5]), size = atol(argv[6]), big_every = atol(argv[7]);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[4])) };
	inet_pton(AF_INET, argv[3], &me.sin_addr);
	int rcvbuf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	struct timeval tv = { .tv_sec = 3 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0) {
		perror("zcopy: bind");
		return 1;
	}
	struct sockaddr_in ctl = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &ctl.sin_addr);
	char req[64];
	long big = big_every ? count / big_every : 0;
	int n = snprintf(req, sizeof(req), "%ld %s %ld", count - big, argv[4], size);
	sendto(fd, req, (size_t)n, 0, (struct sockaddr *)&ctl, sizeof(ctl));
	if (big) {
		n = snprintf(req, sizeof(req), "%ld %s 3000", big, argv[4]);
		sendto(fd, req, (size_t)n, 0, (struct sockaddr *)&ctl, sizeof(ctl));
	}
	static char bufs[ZR_HOLD][ZR_BUF];
	struct vma_packet_t held[ZR_HOLD];   /* fixed parts: free_packets steps by this size */
	int nheld = 0;
	long received = 0, zc = 0, frag = 0, copied = 0, intact = 0;
	while (received < count) {
		int flags = MSG_VMA_ZCOPY_FORCE;
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		int r = api->recvfrom_zcopy(fd, bufs[nheld], ZR_BUF, &flags, (struct sockaddr *)&from, &fl);
		if (r < 0 && errno == EOPNOTSUPP) {
			/* The kernel's datagram: copied into a buffer of its size. */
			static uint8_t copy[4096];
			flags = 0;
			fl = sizeof(from);
			r = api->recvfrom_zcopy(fd, copy, sizeof(copy), &flags, (struct sockaddr *)&from, &fl);
			if (r == 3000 && !(flags & MSG_VMA_ZCOPY)) {
				uint32_t seq;
				memcpy(&seq, copy, 4);
				seq = ntohl(seq);
				int ok = 1;
				for (size_t k = 4; k < 3000; k++)
					ok &= copy[k] == (uint8_t)(seq + k);
				copied++;
				intact += ok;
			}
			received++;
			continue;
		}
		if (r < 0) {
			printf("zcopy: recvfrom_zcopy: %s after %ld\n", strerror(errno), received);
			break;
		}
		received++;
		if (!(flags & MSG_VMA_ZCOPY))
			continue;
		zc++;
		struct vma_packets_t *pkts = (struct vma_packets_t *)bufs[nheld];
		struct vma_packet_t *pkt = &pkts->pkts[0];
		if (pkts->n_packet_num != 1 || fl != sizeof(from) || from.sin_addr.s_addr != ctl.sin_addr.s_addr)
			printf("zcopy: bad header: %zu packets, from %s\n", pkts->n_packet_num, inet_ntoa(from.sin_addr));
		else if (zr_check(pkt, (size_t)r, (size_t)size))
			intact++;
		if (pkt->sz_iov > 1)
			frag++;
		memcpy(&held[nheld++], pkt, sizeof(struct vma_packet_t));
		if (nheld == ZR_HOLD) {
			if (api->free_packets(fd, held, (size_t)nheld) != 0)
				printf("zcopy: free_packets: %s\n", strerror(errno));
			nheld = 0;
		}
	}
	if (nheld && api->free_packets(fd, held, (size_t)nheld) != 0)
		printf("zcopy: free_packets: %s\n", strerror(errno));
	/* A second free of the same ids: ENOENT. */
	int again = nheld ? api->free_packets(fd, held, 1) : -1;
	int again_errno = errno;
	printf("zcopy: received %ld (zero copy %ld, copied %ld, several iovecs %ld) intact %ld\n", received, zc, copied,
	       frag, intact);
	int ok = received == count && zc == count - big && copied == big && intact == count &&
		 (nheld == 0 || (again == -1 && again_errno == ENOENT));
	close(fd);
	return ok ? 0 : 1;
}
