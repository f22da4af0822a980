/* Failing calls must fail the same way with and without the library.
 * Prints one "case: outcome" line per probe; t_errno_equal.sh runs it with
 * and without LD_PRELOAD and compares the two outputs line by line. The
 * cases Linux defines exactly are also asserted here (exit 1 on mismatch),
 * so the test cannot pass by both runs being wrong the same way. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int mismatches;

static const char *errno_name(int e)
{
	switch (e) {
	case 0: return "OK";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EADDRINUSE: return "EADDRINUSE";
	case EBADF: return "EBADF";
	case ENOTSOCK: return "ENOTSOCK";
	case EINVAL: return "EINVAL";
	case EAGAIN: return "EAGAIN";
	case ENOTCONN: return "ENOTCONN";
	case EPIPE: return "EPIPE";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EISCONN: return "EISCONN";
	case EINPROGRESS: return "EINPROGRESS";
	case EFAULT: return "EFAULT";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	default: return "other";
	}
}

/* rc < 0 means the call failed with errno; expect_errno -1 = not asserted. */
static void report(const char *what, long rc, int err, int expect_errno)
{
	int got = rc < 0 ? err : 0;
	printf("%s: rc=%s errno=%s(%d)\n", what, rc < 0 ? "-1" : "ok", errno_name(got), got);
	if (expect_errno >= 0 && got != expect_errno) {
		fprintf(stderr, "errno_probe: %s: expected %s, got %s (%s)\n", what,
			errno_name(expect_errno), errno_name(got), strerror(got));
		mismatches++;
	}
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return a;
}

int main(void)
{
	long rc;

	/* A port that was just free: bind to 0, read the port, close. */
	int tmp = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = loopback(0);
	socklen_t alen = sizeof(a);
	rc = bind(tmp, (struct sockaddr *)&a, sizeof(a));
	report("bind port 0", rc, errno, 0);
	rc = getsockname(tmp, (struct sockaddr *)&a, &alen);
	report("getsockname after bind", rc, errno, 0);
	printf("getsockname port nonzero: %s\n", a.sin_port != 0 ? "yes" : "no");
	if (a.sin_port == 0 || alen != sizeof(a) || a.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
		fprintf(stderr, "errno_probe: getsockname gave port 0 or wrong address\n");
		mismatches++;
	}
	uint16_t closed_port = ntohs(a.sin_port);
	close(tmp);

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in closed = loopback(closed_port);
	errno = 0;
	rc = connect(fd, (struct sockaddr *)&closed, sizeof(closed));
	report("connect closed port", rc, errno, ECONNREFUSED);
	close(fd);

	/* Non-blocking flavour: EINPROGRESS, then SO_ERROR says refused. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	rc = connect(fd, (struct sockaddr *)&closed, sizeof(closed));
	if (rc < 0 && errno == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		poll(&p, 1, 5000);
		int soerr = -1;
		socklen_t sl = sizeof(soerr);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		report("nonblocking connect SO_ERROR", soerr ? -1 : 0, soerr, ECONNREFUSED);
	} else {
		report("nonblocking connect closed port", rc, errno, ECONNREFUSED);
	}
	close(fd);

	int holder = socket(AF_INET, SOCK_STREAM, 0);
	a = loopback(0);
	alen = sizeof(a);
	bind(holder, (struct sockaddr *)&a, sizeof(a));
	getsockname(holder, (struct sockaddr *)&a, &alen);
	listen(holder, 4);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
	report("bind in-use port", rc, errno, EADDRINUSE);
	close(fd);

	int udp_holder = socket(AF_INET, SOCK_DGRAM, 0);
	a = loopback(0);
	alen = sizeof(a);
	bind(udp_holder, (struct sockaddr *)&a, sizeof(a));
	getsockname(udp_holder, (struct sockaddr *)&a, &alen);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
	report("bind in-use udp port", rc, errno, EADDRINUSE);
	close(fd);
	close(udp_holder);

	char buf[64];
	int bad_fd = 1000; /* far above anything this program opens */
	rc = recv(bad_fd, buf, sizeof(buf), 0);
	report("recv bad fd", rc, errno, EBADF);
	rc = send(bad_fd, buf, sizeof(buf), MSG_NOSIGNAL);
	report("send bad fd", rc, errno, EBADF);
	rc = close(bad_fd);
	report("close bad fd", rc, errno, EBADF);

	int pipefd[2];
	if (pipe(pipefd) == 0) {
		rc = recv(pipefd[0], buf, sizeof(buf), MSG_DONTWAIT);
		report("recv on pipe", rc, errno, ENOTSOCK);
		close(pipefd[0]);
		close(pipefd[1]);
	}

	fd = socket(AF_INET, SOCK_STREAM, 0);
	int fl = fcntl(fd, F_GETFL);
	rc = fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	int with = fcntl(fd, F_GETFL);
	printf("fcntl O_NONBLOCK set: %s\n", (with & O_NONBLOCK) ? "yes" : "no");
	rc = fcntl(fd, F_SETFL, with & ~O_NONBLOCK);
	int without = fcntl(fd, F_GETFL);
	printf("fcntl O_NONBLOCK cleared: %s\n", (without & O_NONBLOCK) ? "no" : "yes");
	if (!(with & O_NONBLOCK) || (without & O_NONBLOCK) || (fl & O_NONBLOCK)) {
		fprintf(stderr, "errno_probe: O_NONBLOCK did not round-trip through fcntl\n");
		mismatches++;
	}
	rc = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	report("recv unconnected tcp", rc, errno, ENOTCONN);
	rc = send(fd, buf, 1, MSG_NOSIGNAL);
	report("send unconnected tcp", rc, errno, EPIPE);
	rc = accept(fd, NULL, NULL);
	report("accept on non-listening socket", rc, errno, EINVAL);
	int v = 1;
	rc = setsockopt(fd, SOL_SOCKET, 12345, &v, sizeof(v));
	report("setsockopt unknown option", rc, errno, ENOPROTOOPT);
	close(fd);

	/* A connected pair: nothing queued yet, non-blocking read says EAGAIN. */
	a = loopback(0);
	alen = sizeof(a);
	getsockname(holder, (struct sockaddr *)&a, &alen);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	report("connect to listener", rc, errno, 0);
	rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	report("connect twice", rc, errno, EISCONN);
	rc = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	report("recv empty nonblocking", rc, errno, EAGAIN);
	close(fd);
	close(holder);

	rc = socket(12345, SOCK_STREAM, 0);
	report("socket bad family", rc, errno, EAFNOSUPPORT);
	rc = socket(AF_INET, 12345, 0);
	report("socket bad type", rc, errno, EINVAL);

	fd = socket(AF_INET, SOCK_DGRAM, 0);
	rc = send(fd, "x", 1, 0);
	report("send unconnected udp", rc, errno, EDESTADDRREQ);
	close(fd);

	if (mismatches) {
		fprintf(stderr, "errno_probe: %d case(s) differ from Linux behaviour\n", mismatches);
		return 1;
	}
	return 0;
}
