/* The SocketXtreme server of the VMA manual (seed 001, 10.7.8), carried on
 * to an echo server: a TCP listener bound to a device and an address, its
 * ring fd taken after bind(), then nothing but socketxtreme_poll(). New
 * connections arrive accepted (VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED,
 * user_data = the new fd, listen_fd = the listener); their bytes arrive as
 * VMA_SOCKETXTREME_PACKET completions in ring frames and are echoed, then
 * freed; EPOLLRDHUP/EPOLLHUP end a connection. A UDP socket on the same
 * address echoes datagrams from the same poll loop.
 *
 *   xtreme_server DEV ADDR PORT CONNS UDP_DATAGRAMS
 *
 * Exits 0 once CONNS connections ended and UDP_DATAGRAMS datagrams were
 * echoed, after printing one line per connection
 *   conn fd=F user_data=U bytes=N packets=N
 * and the checks it made itself ("FAIL: ..." lines and exit 1 otherwise):
 * listen_fd and user_data of each accept, SO_VMA_USER_DATA reported back
 * on the connection's completions, a buffer kept with ref_vma_buff after
 * free_vma_packets still reads the same and free_vma_buff returns 0, and
 * the errors of the buffer calls for addresses that are not ours. Exit 3
 * when vma_get_api() is NULL (the manual's "VMA Extra API not found"). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <mellanox/vma_extra.h>

#define XS_MAX_FD 1024
#define XS_TAG 0x5a00000000ULL

struct xs_conn {
	bool open;
	uint64_t bytes, packets;
};

static int xs_failures;

static void xs_check(bool ok, const char *what, long a, long b)
{
	if (!ok) {
		printf("FAIL: %s (%ld, %ld)\n", what, a, b);
		xs_failures++;
	}
}

static int xs_send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s DEV ADDR PORT CONNS UDP_DATAGRAMS\n", argv[0]);
		return 2;
	}
	const char *dev = argv[1];
	int conns_want = atoi(argv[4]);
	long udp_want = atol(argv[5]);
	struct vma_api_t *api = vma_get_api();
	if (!api) {
		printf("VMA Extra API not found\n");
		return 3;
	}
	int fd = socket(AF_INET, SOCK_STREAM, IPPROTO_IP);
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, (socklen_t)strlen(dev)) < 0) {
		printf("setsockopt() failed %d : %s\n", errno, strerror(errno));
		return 1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
	addr.sin_addr.s_addr = inet_addr(argv[2]);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		printf("bind() failed %d : %s\n", errno, strerror(errno));
		return 1;
	}
	/* RX ring is available after bind() */
	int ring_fd = -1;
	api->get_socket_rings_fds(fd, &ring_fd, 1);
	if (ring_fd == -1) {
		printf("Failed to return the ring fd\n");
		return 1;
	}
	if (listen(fd, 5) < 0) {
		printf("listen() failed %d : %s\n", errno, strerror(errno));
		return 1;
	}
	/* The echo of datagrams shares the poll loop (same lane: same ring). */
	int ufd = socket(AF_INET, SOCK_DGRAM, 0);
	if (ufd < 0 || bind(ufd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		printf("udp bind() failed %d : %s\n", errno, strerror(errno));
		return 1;
	}
	uint64_t utag = XS_TAG | 0xffff;
	xs_check(setsockopt(ufd, SOL_SOCKET, SO_VMA_USER_DATA, &utag, sizeof(utag)) == 0, "SO_VMA_USER_DATA on udp",
		 errno, 0);
	uint32_t short_val = 1;
	xs_check(setsockopt(ufd, SOL_SOCKET, SO_VMA_USER_DATA, &short_val, sizeof(short_val)) == -1 && errno == EINVAL,
		 "SO_VMA_USER_DATA of 4 bytes: EINVAL", errno, 0);
	uint64_t back = 0;
	socklen_t bl = sizeof(back);
	xs_check(getsockopt(ufd, SOL_SOCKET, SO_VMA_USER_DATA, &back, &bl) == 0 && back == utag,
		 "getsockopt(SO_VMA_USER_DATA)", (long)back, (long)bl);
	int uring = -1;
	xs_check(api->get_socket_rings_fds(ufd, &uring, 1) == 1 && uring == ring_fd, "udp socket on the same ring",
		 uring, ring_fd);
	/* Not ours: refused, never followed. */
	struct vma_buff_t bogus = { 0 };
	struct vma_packet_desc_t bogus_pkt = { .num_bufs = 1, .total_len = 1, .buff_lst = &bogus };
	xs_check(api->socketxtreme_free_vma_packets(&bogus_pkt, 1) == -1 && errno == EINVAL,
		 "free_vma_packets of a foreign buffer: EINVAL", errno, 0);
	xs_check(api->socketxtreme_ref_vma_buff(&bogus) == -1 && errno == EINVAL, "ref_vma_buff(foreign): EINVAL",
		 errno, 0);
	xs_check(api->socketxtreme_free_vma_buff(NULL) == -1 && errno == EINVAL, "free_vma_buff(NULL): EINVAL", errno,
		 0);
	struct vma_completion_t dummy;
	xs_check(api->socketxtreme_poll(fd, &dummy, 1, 0) == -1 && errno == EBADFD,
		 "socketxtreme_poll on a socket fd: EBADFD", errno, 0);
	printf("Waiting on: fd=%d ring_fd=%d\n", fd, ring_fd);
	fflush(stdout);

	static struct xs_conn conns[XS_MAX_FD];
	int ended = 0, accepted = 0;
	long udp_done = 0;
	bool ref_checked = false;
	char copy[65536];
	while (ended < conns_want || udp_done < udp_want) {
		struct vma_completion_t comps[8];
		int rc = api->socketxtreme_poll(ring_fd, comps, 8, 0);
		if (rc < 0) {
			printf("FAIL: socketxtreme_poll: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 0; i < rc; i++) {
			struct vma_completion_t *c = &comps[i];
			if (c->events & VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED) {
				int cfd = (int)c->user_data;
				xs_check(c->listen_fd == fd, "listen_fd of the accepted connection", c->listen_fd, fd);
				xs_check(cfd > 0 && cfd < XS_MAX_FD && !conns[cfd].open, "user_data is a new fd", cfd, 0);
				xs_check(c->src.sin_family == AF_INET && c->src.sin_port != 0, "src of the accept",
					 c->src.sin_family, ntohs(c->src.sin_port));
				if (cfd <= 0 || cfd >= XS_MAX_FD)
					continue;
				printf("Accepted connection: fd=%d from %s:%d\n", cfd, inet_ntoa(c->src.sin_addr),
				       ntohs(c->src.sin_port));
				conns[cfd] = (struct xs_conn){ .open = true };
				uint64_t tag = XS_TAG | (uint64_t)cfd;
				xs_check(setsockopt(cfd, SOL_SOCKET, SO_VMA_USER_DATA, &tag, sizeof(tag)) == 0,
					 "SO_VMA_USER_DATA on the connection", errno, 0);
				accepted++;
				continue;
			}
			uint64_t ud = c->user_data;
			if (ud == utag) {
				/* A datagram for the UDP echo. */
				if (!(c->events & VMA_SOCKETXTREME_PACKET))
					continue;
				size_t off = 0;
				for (struct vma_buff_t *b = c->packet.buff_lst; b; b = b->next) {
					memcpy(copy + off, b->payload, b->len);
					off += b->len;
				}
				xs_check(off == c->packet.total_len, "udp packet length", (long)off, c->packet.total_len);
				api->socketxtreme_free_vma_packets(&c->packet, 1);
				sendto(ufd, copy, off, 0, (struct sockaddr *)&c->src, sizeof(c->src));
				udp_done++;
				continue;
			}
			int cfd = (int)(ud & 0xffff);
			if ((ud & ~0xffffULL) != XS_TAG || cfd >= XS_MAX_FD || !conns[cfd].open) {
				/* Events that came before the tag was set carry the fd. */
				if (ud < XS_MAX_FD && conns[ud].open)
					cfd = (int)ud;
				else {
					printf("FAIL: completion with unknown user_data %#llx events %#llx\n",
					       (unsigned long long)ud, (unsigned long long)c->events);
					xs_failures++;
					if (c->events & VMA_SOCKETXTREME_PACKET)
						api->socketxtreme_free_vma_packets(&c->packet, 1);
					continue;
				}
			}
			struct xs_conn *x = &conns[cfd];
			if (c->events & VMA_SOCKETXTREME_PACKET) {
				size_t off = 0, nb = 0;
				for (struct vma_buff_t *b = c->packet.buff_lst; b; b = b->next, nb++) {
					memcpy(copy + off, b->payload, b->len);
					off += b->len;
				}
				xs_check(off == c->packet.total_len && nb == c->packet.num_bufs, "tcp packet length",
					 (long)off, c->packet.total_len);
				struct vma_buff_t *first = c->packet.buff_lst;
				bool keep = !ref_checked && first && first->len > 0;
				uint8_t before = keep ? *(const uint8_t *)first->payload : 0;
				if (keep)
					xs_check(api->socketxtreme_ref_vma_buff(first) == 2, "ref_vma_buff: 2", 0, 0);
				xs_check(api->socketxtreme_free_vma_packets(&c->packet, 1) == 0, "free_vma_packets", errno,
					 0);
				if (keep) {
					/* Still ours after free_vma_packets: the reference kept it. */
					xs_check(*(const uint8_t *)first->payload == before, "kept buffer unchanged", 0, 0);
					xs_check(api->socketxtreme_free_vma_buff(first) == 0, "free_vma_buff: 0", 0, 0);
					xs_check(api->socketxtreme_free_vma_buff(first) == -1 && errno == EINVAL,
						 "free_vma_buff twice: EINVAL", errno, 0);
					ref_checked = true;
				}
				if (xs_send_all(cfd, copy, off) != 0)
					xs_check(false, "echo send", errno, cfd);
				x->bytes += off;
				x->packets++;
			}
			if (c->events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
				printf("conn fd=%d user_data=%#llx bytes=%llu packets=%llu events=%#llx\n", cfd,
				       (unsigned long long)ud, (unsigned long long)x->bytes,
				       (unsigned long long)x->packets, (unsigned long long)c->events);
				x->open = false;
				close(cfd);
				ended++;
			}
		}
	}
	xs_check(accepted == conns_want, "connections accepted", accepted, conns_want);
	xs_check(ref_checked, "a buffer was kept with ref_vma_buff", 0, 0);
	close(ufd);
	close(fd);
	printf("udp echoed %ld\n", udp_done);
	printf("%s\n", xs_failures ? "xtreme_server: FAILED" : "xtreme_server: ok");
	return xs_failures ? 1 : 0;
}
