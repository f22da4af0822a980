/* Sockets with a ring allocation logic of their own (SO_VMA_RING_ALLOC_LOGIC,
 * libvma's Extra API option; tests/integration/ring_logic.sh).
 *
 *   ring_logic PORT
 *
 * UDP sockets bound to PORT+i, in a process whose VMA_RING_ALLOCATION_LOGIC_RX
 * is the default (0, one lane):
 *   u0  no option (lane 0)
 *   u1  logic 10 (a lane of its own), set before bind
 *   u2  logic 11, user id 7, set before bind
 *   u3  logic 11, user id 7 (u2's lane), set before bind
 *   u4  logic 11, user id 8, set after bind (a bound, steered socket moves)
 * and a TCP listener on PORT+10 with logic 10 set before listen (its
 * connections live in its lane). Also checks the option's errors: an
 * unknown logic and a short value give EINVAL, a NULL value EFAULT.
 *
 * Prints "ready PID FD0 FD1 FD2 FD3 FD4 LISTENER" once listening, then
 * echoes every datagram on its socket and every byte on accepted
 * connections ("accepted FD" when one comes), until a datagram "quit"
 * reaches u0 or 60 s pass. Exit 0; 1 with a message when a call fails. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The option and its value as libvma's vma_extra.h lays them out. */
#define SO_VMA_RING_ALLOC_LOGIC 2810
#define RING_ALLOC_MASK_USER_ID (1u << 1)
struct ring_alloc_logic_attr {
	uint32_t comp_mask;
	int32_t ring_alloc_logic;
	uint32_t ring_profile_key;
	uint32_t user_id;
	uint32_t direction_bits;
};

#define NUDP 5
#define MAX_CONNS 16

static void die(const char *what)
{
	fprintf(stderr, "ring_logic: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void set_logic(int fd, int logic, uint32_t user_id)
{
	struct ring_alloc_logic_attr attr = { .ring_alloc_logic = logic };
	if (logic == 11) {
		attr.comp_mask = RING_ALLOC_MASK_USER_ID;
		attr.user_id = user_id;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_VMA_RING_ALLOC_LOGIC, &attr, sizeof(attr)) != 0)
		die("setsockopt SO_VMA_RING_ALLOC_LOGIC");
}

static void expect_error(int fd, const void *val, socklen_t len, int want, const char *what)
{
	errno = 0;
	int r = setsockopt(fd, SOL_SOCKET, SO_VMA_RING_ALLOC_LOGIC, val, len);
	if (r != -1 || errno != want) {
		fprintf(stderr, "ring_logic: %s: got %d errno %d (%s), want -1 errno %d\n", what, r, errno,
			strerror(errno), want);
		exit(1);
	}
}

static void bind_port(int fd, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		die("bind");
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return fprintf(stderr, "usage: ring_logic PORT\n"), 2;
	int port = atoi(argv[1]);
	int u[NUDP];
	for (int i = 0; i < NUDP; i++)
		if ((u[i] = socket(AF_INET, SOCK_DGRAM, 0)) < 0)
			die("socket");

	struct ring_alloc_logic_attr bad = { .ring_alloc_logic = 5 };
	expect_error(u[0], &bad, sizeof(bad), EINVAL, "unknown logic 5");
	expect_error(u[0], &bad, 4, EINVAL, "4-byte value");
	expect_error(u[0], NULL, sizeof(bad), EFAULT, "NULL value");

	set_logic(u[1], 10, 0);
	set_logic(u[2], 11, 7);
	set_logic(u[3], 11, 7);
	for (int i = 0; i < NUDP; i++)
		bind_port(u[i], port + i);
	set_logic(u[4], 11, 8);

	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		die("socket tcp");
	set_logic(l, 10, 0);
	bind_port(l, port + 10);
	if (listen(l, 16) != 0)
		die("listen");
	printf("ready %d %d %d %d %d %d %d\n", (int)getpid(), u[0], u[1], u[2], u[3], u[4], l);
	fflush(stdout);

	struct pollfd p[NUDP + 1 + MAX_CONNS];
	int nconns = 0;
	time_t end = time(NULL) + 60;
	char buf[65536];
	while (time(NULL) < end) {
		int n = 0;
		for (int i = 0; i < NUDP; i++)
			p[n++] = (struct pollfd){ .fd = u[i], .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = l, .events = POLLIN };
		int first_conn = n;
		for (int i = 0; i < nconns; i++)
			p[n++] = (struct pollfd){ .fd = p[first_conn + i].fd, .events = POLLIN };
		if (poll(p, (nfds_t)n, 1000) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		for (int i = 0; i < NUDP; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			struct sockaddr_in from;
			socklen_t fl = sizeof(from);
			ssize_t got = recvfrom(u[i], buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
			if (got < 0)
				continue;
			if (i == 0 && got == 4 && memcmp(buf, "quit", 4) == 0)
				return 0;
			if (sendto(u[i], buf, (size_t)got, 0, (struct sockaddr *)&from, fl) != got)
				die("sendto");
		}
		if ((p[NUDP].revents & POLLIN) && nconns < MAX_CONNS) {
			int c = accept(l, NULL, NULL);
			if (c >= 0) {
				p[first_conn + nconns++].fd = c;
				printf("accepted %d\n", c);
				fflush(stdout);
			}
		}
		for (int i = 0; i < nconns; i++) {
			struct pollfd *pc = &p[first_conn + i];
			if (!(pc->revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t got = recv(pc->fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got > 0) {
				if (send(pc->fd, buf, (size_t)got, 0) != got)
					die("send");
			} else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				close(pc->fd);
				*pc = p[first_conn + --nconns];
				i--;
			}
		}
	}
	return 0;
}
