/* The two ends of hostile.sh (tests/hostile/hostile_peer floods one of them).
 *
 *   hostile_target server PORT_SINK PORT_DISCARD PORT_UDP
 *     run under libvma. One epoll loop: a TCP listener on PORT_SINK whose
 *     connections are accepted and never read (the attacker's land there),
 *     a TCP listener on PORT_DISCARD whose connections are read and
 *     discarded (the legitimate flow), a UDP socket on PORT_UDP that is
 *     never read. Prints "ready PID" once all three listen; SIGTERM or
 *     SIGINT ends it with exit 0 and a line of totals.
 *   hostile_target client IP PORT SECS
 *     a plain kernel client: connects (3 s at most) and writes 64 KiB
 *     chunks for SECS seconds, then prints
 *       "client: X.XX MB/s acked N bytes in T s"
 *     where N is what the receiver acknowledged (written minus what the
 *     send queue still holds), so a stalled receiver reads as ~0 even
 *     though the kernel took the first chunks into its buffer. No write
 *     ever blocks longer than 200 ms. Exit 0 if the connection held (even
 *     when nothing moved), 1 when it failed (refused, reset, timed out).
 * Exit 2: usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#define CHUNK (64 * 1024)
#define MAX_SINK_CONNS 16384
#define CONNECT_TIMEOUT_MS 3000
#define WRITE_TIMEOUT_US 200000

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_port(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 1 || v > 65535) {
		fprintf(stderr, "bad port '%s'\n", s);
		exit(2);
	}
	return (int)v;
}

static int make_bound(int type, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1;
	int fd = socket(AF_INET, type | SOCK_NONBLOCK, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || (type == SOCK_STREAM && listen(fd, 1024) != 0)) {
		fprintf(stderr, "socket on port %d: %s\n", port, strerror(errno));
		exit(2);
	}
	return fd;
}

/* epoll data: the fd, tagged with what it is. */
enum { TAG_SINK_LISTEN = 1, TAG_DISCARD_LISTEN = 2, TAG_DISCARD_CONN = 3 };

static uint64_t tagged(int fd, int tag)
{
	return ((uint64_t)(uint32_t)tag << 32) | (uint32_t)fd;
}

static int ep_add(int ep, int fd, int tag)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = tagged(fd, tag) };
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static int run_server(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s server PORT_SINK PORT_DISCARD PORT_UDP\n", argv[0]);
		return 2;
	}
	int p_sink = parse_port(argv[2]), p_disc = parse_port(argv[3]), p_udp = parse_port(argv[4]);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	struct sigaction sa = { .sa_handler = on_stop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int sink = make_bound(SOCK_STREAM, p_sink);
	int disc = make_bound(SOCK_STREAM, p_disc);
	int udp = make_bound(SOCK_DGRAM, p_udp);
	int ep = epoll_create1(0);
	if (ep < 0 || ep_add(ep, sink, TAG_SINK_LISTEN) != 0 || ep_add(ep, disc, TAG_DISCARD_LISTEN) != 0) {
		perror("epoll");
		return 2;
	}
	/* Sink connections are held, never read: the fds only. */
	static int held[MAX_SINK_CONNS];
	int nheld = 0;
	unsigned long long discarded = 0, sink_accepted = 0, disc_accepted = 0;
	static char buf[256 * 1024];
	printf("ready %d\n", (int)getpid());
	fflush(stdout);

	while (!stop_flag) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, 100);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			int fd = (int)(uint32_t)evs[i].data.u64;
			int tag = (int)(evs[i].data.u64 >> 32);
			if (tag == TAG_SINK_LISTEN) {
				for (;;) {
					int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK);
					if (c < 0)
						break;
					sink_accepted++;
					if (nheld < MAX_SINK_CONNS)
						held[nheld++] = c;
					else
						close(c);
				}
			} else if (tag == TAG_DISCARD_LISTEN) {
				for (;;) {
					int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK);
					if (c < 0)
						break;
					disc_accepted++;
					if (ep_add(ep, c, TAG_DISCARD_CONN) != 0)
						close(c);
				}
			} else {
				for (;;) {
					ssize_t r = recv(fd, buf, sizeof(buf), 0);
					if (r > 0) {
						discarded += (unsigned long long)r;
						continue;
					}
					if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
						break;
					epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
					close(fd);
					break;
				}
			}
		}
	}
	printf("server: discarded %llu bytes from %llu connections, %llu sink connections accepted\n", discarded,
	       disc_accepted, sink_accepted);
	fflush(stdout);
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	close(udp);
	close(sink);
	close(disc);
	close(ep);
	return 0;
}

static int connect_timed(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "bad address '%s'\n", ip);
		exit(2);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		perror("socket");
		exit(2);
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
		printf("client: 0.00 MB/s acked 0 bytes in 0.00 s: connect: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t el = sizeof(err);
	int r = poll(&p, 1, CONNECT_TIMEOUT_MS);
	if (r == 1)
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (r != 1 || err != 0) {
		printf("client: 0.00 MB/s acked 0 bytes in 0.00 s: connect: %s\n",
		       r == 1 ? strerror(err) : "timed out");
		close(fd);
		return -1;
	}
	/* Back to blocking, with a bounded write. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	struct timeval tv = { .tv_sec = 0, .tv_usec = WRITE_TIMEOUT_US };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static int run_client(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s client IP PORT SECS\n", argv[0]);
		return 2;
	}
	int port = parse_port(argv[3]);
	double secs = atof(argv[4]);
	if (secs <= 0 || secs > 600) {
		fprintf(stderr, "bad SECS '%s'\n", argv[4]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	int fd = connect_timed(argv[2], port);
	if (fd < 0)
		return 1;
	static char chunk[CHUNK];
	memset(chunk, 'h', sizeof(chunk));
	unsigned long long written = 0;
	const char *failure = NULL;
	int saved = 0;
	double t0 = now_s(), t;
	while ((t = now_s()) - t0 < secs) {
		ssize_t w = send(fd, chunk, sizeof(chunk), 0);
		if (w > 0) {
			written += (unsigned long long)w;
		} else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			saved = errno;
			failure = "send";
			break;
		}
	}
	t = now_s() - t0;
	int outq = 0;
	if (ioctl(fd, SIOCOUTQ, &outq) != 0)
		outq = 0;
	unsigned long long acked = written > (unsigned long long)outq ? written - (unsigned long long)outq : 0;
	if (failure)
		acked = written; /* the queue is gone with the connection */
	printf("client: %.2f MB/s acked %llu bytes in %.2f s%s%s\n", (double)acked / 1e6 / (t > 0 ? t : 1), acked,
	       t, failure ? ": send: " : "", failure ? strerror(saved) : "");
	fflush(stdout);
	close(fd);
	return failure ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "server") == 0)
		return run_server(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "client") == 0)
		return run_client(argc, argv);
	fprintf(stderr, "usage: %s server PORT_SINK PORT_DISCARD PORT_UDP\n"
			"       %s client IP PORT SECS\n",
		argv[0], argv[0]);
	return 2;
}
