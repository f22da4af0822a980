/* SocketXtreme on the client side (seed 003: "SocketXtreme mode is used
 * with non-blocking connect() call only"): a non-blocking connect whose
 * completion comes from socketxtreme_poll, then an echo exchange read from
 * PACKET completions, the peer's close (EPOLLRDHUP), and a refused connect
 * (EPOLLERR | EPOLLHUP, SO_ERROR ECONNREFUSED).
 *
 *   xtreme_connect ADDR ECHO_PORT CLOSED_PORT BYTES
 *
 * ECHO_PORT echoes what it gets and closes after our shutdown(SHUT_WR);
 * nothing listens on CLOSED_PORT. Prints "PASS: ..." / "FAIL: ..." lines;
 * exit 0 when all passed, 1 otherwise, 3 without libvma. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <mellanox/vma_extra.h>

#define XC_TAG_ECHO 0xec40ULL
#define XC_TAG_REFUSED 0x7ef0ULL

static int xc_failures;
static struct vma_api_t *api;

static void xc_check(bool ok, const char *what)
{
	printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		xc_failures++;
}

static double xc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t xc_byte(uint64_t i)
{
	return (uint8_t)(i * 7 + (i >> 8));
}

/* A non-blocking socket tagged with user_data, connecting to addr:port;
 * its ring fd in *ring (known once connect() started). */
static int xc_connect(struct sockaddr_in addr, int port, uint64_t tag, int *ring)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_VMA_USER_DATA, &tag, sizeof(tag));
	addr.sin_port = htons((uint16_t)port);
	int rc = connect(fd, (struct sockaddr *)&addr, sizeof(addr));
	xc_check(rc == -1 && errno == EINPROGRESS, "non-blocking connect: EINPROGRESS");
	*ring = -1;
	xc_check(api->get_socket_rings_fds(fd, ring, 1) == 1 && *ring >= 0, "ring fd of the connecting socket");
	return fd;
}

/* Polls until a completion of tag shows one of the events in want, or 5 s
 * pass; PACKET completions of tag are copied to buf (up to *len) and freed. */
static uint64_t xc_wait(int ring, uint64_t tag, uint64_t want, uint8_t *buf, size_t cap, size_t *len)
{
	double end = xc_now() + 5;
	uint64_t seen = 0;
	while (xc_now() < end) {
		struct vma_completion_t c[4];
		int n = api->socketxtreme_poll(ring, c, 4, 0);
		if (n < 0) {
			printf("FAIL: socketxtreme_poll: %s\n", strerror(errno));
			xc_failures++;
			return 0;
		}
		for (int i = 0; i < n; i++) {
			if (c[i].user_data != tag) {
				if (c[i].events & VMA_SOCKETXTREME_PACKET)
					api->socketxtreme_free_vma_packets(&c[i].packet, 1);
				continue;
			}
			if (c[i].events & VMA_SOCKETXTREME_PACKET) {
				for (struct vma_buff_t *b = c[i].packet.buff_lst; b; b = b->next) {
					size_t k = b->len;
					if (buf && *len + k <= cap)
						memcpy(buf + *len, b->payload, k);
					if (len)
						*len += k;
				}
				api->socketxtreme_free_vma_packets(&c[i].packet, 1);
			}
			seen |= c[i].events;
		}
		if (seen & want)
			return seen;
	}
	return seen;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s ADDR ECHO_PORT CLOSED_PORT BYTES\n", argv[0]);
		return 2;
	}
	api = vma_get_api();
	if (!api) {
		printf("SKIP: vma_get_api() is NULL\n");
		return 3;
	}
	struct sockaddr_in addr = { .sin_family = AF_INET };
	inet_pton(AF_INET, argv[1], &addr.sin_addr);
	size_t total = (size_t)atol(argv[4]);
	uint8_t *out = malloc(total), *in = malloc(total + 1);
	if (!out || !in)
		return 1;
	for (size_t i = 0; i < total; i++)
		out[i] = xc_byte(i);

	int ring;
	int fd = xc_connect(addr, atoi(argv[2]), XC_TAG_ECHO, &ring);
	size_t got = 0;
	uint64_t ev = xc_wait(ring, XC_TAG_ECHO, EPOLLOUT | EPOLLERR | EPOLLHUP, NULL, 0, &got);
	xc_check((ev & EPOLLOUT) && !(ev & (EPOLLERR | EPOLLHUP)), "connect completion: EPOLLOUT with our user_data");
	int err = -1;
	socklen_t el = sizeof(err);
	xc_check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR 0 after the completion");

	/* Send everything, reading the echo from completions meanwhile. */
	size_t sent = 0;
	double end = xc_now() + 20;
	while ((sent < total || got < total) && xc_now() < end) {
		if (sent < total) {
			ssize_t w = send(fd, out + sent, total - sent > 16384 ? 16384 : total - sent, MSG_NOSIGNAL);
			if (w > 0)
				sent += (size_t)w;
			else if (errno != EAGAIN) {
				printf("FAIL: send: %s\n", strerror(errno));
				xc_failures++;
				break;
			}
		}
		struct vma_completion_t c[8];
		int n = api->socketxtreme_poll(ring, c, 8, 0);
		for (int i = 0; i < n; i++) {
			if (c[i].user_data == XC_TAG_ECHO && (c[i].events & VMA_SOCKETXTREME_PACKET)) {
				for (struct vma_buff_t *b = c[i].packet.buff_lst; b; b = b->next) {
					if (got + b->len <= total)
						memcpy(in + got, b->payload, b->len);
					got += b->len;
				}
			}
			if (c[i].events & VMA_SOCKETXTREME_PACKET)
				api->socketxtreme_free_vma_packets(&c[i].packet, 1);
		}
	}
	printf("sent %zu echoed %zu\n", sent, got);
	xc_check(sent == total && got == total && memcmp(in, out, total) == 0, "echo intact through PACKET completions");
	shutdown(fd, SHUT_WR);
	size_t extra = 0;
	ev = xc_wait(ring, XC_TAG_ECHO, EPOLLRDHUP, NULL, 0, &extra);
	xc_check((ev & EPOLLRDHUP) && (ev & EPOLLIN) && extra == 0, "peer's close: EPOLLIN | EPOLLRDHUP, no more bytes");
	char b;
	xc_check(recv(fd, &b, 1, MSG_DONTWAIT) == 0, "recv after the close event: 0 (EOF)");
	close(fd);

	int fd2 = xc_connect(addr, atoi(argv[3]), XC_TAG_REFUSED, &ring);
	ev = xc_wait(ring, XC_TAG_REFUSED, EPOLLERR | EPOLLHUP, NULL, 0, &extra);
	xc_check((ev & EPOLLERR) && (ev & EPOLLHUP), "refused connect: EPOLLERR | EPOLLHUP completion");
	el = sizeof(err);
	xc_check(getsockopt(fd2, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == ECONNREFUSED,
		 "SO_ERROR ECONNREFUSED");
	close(fd2);
	free(out);
	free(in);
	printf("%s\n", xc_failures ? "xtreme_connect: FAILED" : "xtreme_connect: ok");
	return xc_failures ? 1 : 0;
}
