/* Many threads, one process: 8 client threads each hold several TCP
 * connections to a threaded echo server living in the same program, and
 * play UDP ping-pong with a UDP echo thread. Every byte that comes back is
 * compared with what was sent, so a wrapper that loses, reorders or mixes up
 * data between threads or fds makes this exit 1.
 *
 * Built twice (see module.am): plain, and with -O2 -D_FORTIFY_SOURCE=2 so the
 * reads go through glibc's __recv_chk/__read_chk/__poll_chk/__recvfrom_chk.
 * For those to be emitted, buffers have a size known to the compiler and the
 * lengths are runtime values. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define CLIENT_THREADS 8
#define CONNS_PER_THREAD 4
#define TOTAL_CONNS (CLIENT_THREADS * CONNS_PER_THREAD)
#define BYTES_PER_CONN (768 * 1024)
#define MAX_CHUNK 32768
#define UDP_PER_THREAD 200
#define UDP_MAX_PAYLOAD 1400
#define IO_TIMEOUT_MS 10000

static struct sockaddr_in tcp_server_addr;
static struct sockaddr_in udp_server_addr;
static int failures;
static pthread_mutex_t failures_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, int thread, int conn)
{
	fprintf(stderr, "mt_client: FAIL %s (thread %d conn %d): %s\n", what, thread, conn,
		errno ? strerror(errno) : "data mismatch");
	pthread_mutex_lock(&failures_lock);
	failures++;
	pthread_mutex_unlock(&failures_lock);
}

/* The byte at offset i of stream `seed`: differs between streams, so data
 * delivered to the wrong connection is caught, and is not periodic in any
 * small chunk size. */
static uint8_t pattern_byte(uint32_t seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 40);
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (uint8_t)(x >> 56);
}

static void fill_pattern(uint8_t *dst, size_t len, uint32_t seed, uint64_t offset)
{
	for (size_t k = 0; k < len; k++)
		dst[k] = pattern_byte(seed, offset + k);
}

/* Runtime-varying length in [1, max], so fortified calls are not folded. */
static size_t chunk_len(uint32_t *state, size_t max)
{
	*state = *state * 1103515245u + 12345u;
	return 1 + (*state >> 8) % max;
}

static int wait_readable(int fd)
{
	struct pollfd fds[1] = { { .fd = fd, .events = POLLIN } };
	volatile nfds_t nfds = 1; /* runtime count: __poll_chk when fortified */
	int rc;
	do
		rc = poll(fds, nfds, IO_TIMEOUT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		errno = ETIMEDOUT;
	return rc > 0 ? 0 : -1;
}

/* Echo everything back until the peer closes. Odd fds use read/write,
 * even ones recv/send, so both families go through the library. */
static void *tcp_echo_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t buf[MAX_CHUNK];
	uint32_t lenstate = (uint32_t)fd;

	for (;;) {
		if (wait_readable(fd) < 0) {
			fail("server poll", -1, fd);
			break;
		}
		size_t want = chunk_len(&lenstate, sizeof(buf));
		ssize_t n = (fd & 1) ? read(fd, buf, want) : recv(fd, buf, want, 0);
		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fail("server read", -1, fd);
			break;
		}
		for (ssize_t done = 0; done < n;) {
			ssize_t w = (fd & 1) ? write(fd, buf + done, (size_t)(n - done))
					     : send(fd, buf + done, (size_t)(n - done), MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fail("server write", -1, fd);
				close(fd);
				return NULL;
			}
			done += w;
		}
	}
	close(fd);
	return NULL;
}

static void *tcp_acceptor(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	pthread_t echo[TOTAL_CONNS];
	int started = 0;

	for (int i = 0; i < TOTAL_CONNS; i++) {
		if (wait_readable(lfd) < 0) {
			fail("accept wait", -1, i);
			break;
		}
		struct sockaddr_in peer;
		socklen_t plen = sizeof(peer);
		int fd = accept(lfd, (struct sockaddr *)&peer, &plen);
		if (fd < 0) {
			fail("accept", -1, i);
			break;
		}
		if (plen != sizeof(peer) || peer.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
			errno = 0;
			fail("accept peer address", -1, i);
		}
		if (pthread_create(&echo[started], NULL, tcp_echo_conn, (void *)(intptr_t)fd) != 0) {
			fail("pthread_create echo", -1, i);
			close(fd);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(echo[i], NULL);
	return NULL;
}

/* One send on connection `conn` with the API that connection is assigned. */
static ssize_t send_with(int api, int fd, const uint8_t *data, size_t len)
{
	struct iovec iov[2] = { { (void *)data, len / 2 }, { (void *)(data + len / 2), len - len / 2 } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	switch (api) {
	case 0: return send(fd, data, len, MSG_NOSIGNAL);
	case 1: return write(fd, data, len);
	case 2: return sendmsg(fd, &msg, MSG_NOSIGNAL);
	default: return writev(fd, iov, 2);
	}
}

static ssize_t recv_with(int api, int fd, uint8_t (*buf)[MAX_CHUNK], size_t len)
{
	struct iovec iov[2] = { { *buf, len / 2 + 1 }, { *buf + len / 2 + 1, len - len / 2 - 1 } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len > 1 ? 2 : 1 };
	if (len <= 1)
		iov[0].iov_len = len;
	switch (api) {
	case 0: return recv(fd, *buf, len, 0);
	case 1: return read(fd, *buf, len);
	case 2: return recvmsg(fd, &msg, 0);
	default: return readv(fd, iov, (int)msg.msg_iovlen);
	}
}

struct tcp_conn {
	int fd;
	int api;
	uint32_t seed;
	uint64_t offset;
};

/* Ping-pong a chunk: send it all, then read exactly as much back. Keeping
 * one chunk in flight per connection avoids a send/send deadlock. */
static int exchange_chunk(struct tcp_conn *c, size_t len, int thread)
{
	uint8_t out[MAX_CHUNK], in[MAX_CHUNK];
	fill_pattern(out, len, c->seed, c->offset);
	for (size_t done = 0; done < len;) {
		ssize_t w = send_with(c->api, c->fd, out + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fail("client send", thread, c->api);
			return -1;
		}
		done += (size_t)w;
	}
	for (size_t got = 0; got < len;) {
		if (wait_readable(c->fd) < 0) {
			fail("client poll", thread, c->api);
			return -1;
		}
		uint8_t (*tmp)[MAX_CHUNK] = &in;
		ssize_t r = recv_with(c->api, c->fd, tmp, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			fail("client recv", thread, c->api);
			return -1;
		}
		for (ssize_t k = 0; k < r; k++) {
			if (in[k] != out[got + (size_t)k]) {
				errno = 0;
				fprintf(stderr, "mt_client: byte %llu of stream %u: got 0x%02x want 0x%02x\n",
					(unsigned long long)(c->offset + got + (size_t)k), c->seed, in[k],
					out[got + (size_t)k]);
				fail("client verify", thread, c->api);
				return -1;
			}
		}
		got += (size_t)r;
	}
	c->offset += len;
	return 0;
}

static int udp_ping_pong(int thread)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		fail("udp socket", thread, 0);
		return -1;
	}
	uint32_t lenstate = 77u + (uint32_t)thread;
	uint8_t out[UDP_MAX_PAYLOAD], in[UDP_MAX_PAYLOAD + 64];
	int rc = 0;

	for (uint32_t k = 0; k < UDP_PER_THREAD && rc == 0; k++) {
		size_t len = 8 + chunk_len(&lenstate, UDP_MAX_PAYLOAD - 8);
		uint32_t tag[2] = { (uint32_t)thread, k };
		memcpy(out, tag, sizeof(tag));
		fill_pattern(out + 8, len - 8, 1000u + (uint32_t)thread, k * 4096ull);
		int attempts = 0;
	resend:
		if (sendto(fd, out, len, 0, (struct sockaddr *)&udp_server_addr,
			   sizeof(udp_server_addr)) != (ssize_t)len) {
			fail("udp sendto", thread, (int)k);
			rc = -1;
			break;
		}
		for (;;) {
			if (wait_readable(fd) < 0) {
				/* Loopback does not drop a lone datagram in practice; a
				 * retry keeps a freak drop from failing the run. */
				if (++attempts < 3)
					goto resend;
				fail("udp reply timeout", thread, (int)k);
				rc = -1;
				break;
			}
			struct sockaddr_in from;
			socklen_t flen = sizeof(from);
			volatile size_t cap_runtime = sizeof(in); /* __recvfrom_chk */
			size_t cap = cap_runtime;
			ssize_t n = recvfrom(fd, in, cap, 0, (struct sockaddr *)&from, &flen);
			if (n < 0) {
				fail("udp recvfrom", thread, (int)k);
				rc = -1;
				break;
			}
			uint32_t got_tag[2];
			memcpy(got_tag, in, sizeof(got_tag));
			if (n >= 8 && got_tag[1] < k)
				continue; /* late reply to an earlier retry */
			if ((size_t)n != len || memcmp(in, out, len) != 0 ||
			    from.sin_port != udp_server_addr.sin_port ||
			    from.sin_addr.s_addr != udp_server_addr.sin_addr.s_addr) {
				errno = 0;
				fail("udp verify", thread, (int)k);
				rc = -1;
			}
			break;
		}
	}
	close(fd);
	return rc;
}

static void *client_thread(void *arg)
{
	int thread = (int)(intptr_t)arg;
	struct tcp_conn conns[CONNS_PER_THREAD];
	int opened = 0;

	for (int c = 0; c < CONNS_PER_THREAD; c++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&tcp_server_addr, sizeof(tcp_server_addr)) < 0) {
			fail("connect", thread, c);
			if (fd >= 0)
				close(fd);
			goto out;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conns[c] = (struct tcp_conn){ .fd = fd, .api = c % 4,
					      .seed = (uint32_t)(thread * 16 + c) };
		opened++;
	}

	/* Interleave the connections so several fds of one thread are live. */
	uint32_t lenstate = (uint32_t)thread * 7919u;
	for (int busy = 1; busy;) {
		busy = 0;
		for (int c = 0; c < opened; c++) {
			uint64_t left = BYTES_PER_CONN - conns[c].offset;
			if (left == 0)
				continue;
			size_t len = chunk_len(&lenstate, MAX_CHUNK);
			if (len > left)
				len = (size_t)left;
			if (exchange_chunk(&conns[c], len, thread) < 0)
				goto out;
			busy = 1;
		}
	}
	udp_ping_pong(thread);
out:
	for (int c = 0; c < opened; c++)
		close(conns[c].fd);
	return NULL;
}

/* UDP echo through epoll, until the main thread sends "stop". */
static void *udp_echo(void *arg)
{
	int fd = (int)(intptr_t)arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	uint8_t buf[UDP_MAX_PAYLOAD + 64];

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		fail("epoll setup", -1, 0);
		return NULL;
	}
	for (;;) {
		struct epoll_event got;
		int n = epoll_wait(ep, &got, 1, 3 * IO_TIMEOUT_MS);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || got.data.fd != fd || !(got.events & EPOLLIN)) {
			if (n == 0)
				errno = ETIMEDOUT;
			fail("udp epoll_wait", -1, 0);
			break;
		}
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		size_t cap = sizeof(buf);
		ssize_t r = recvfrom(fd, buf, cap, 0, (struct sockaddr *)&from, &flen);
		if (r < 0) {
			fail("udp server recvfrom", -1, 0);
			break;
		}
		if (r == 4 && memcmp(buf, "stop", 4) == 0)
			break;
		if (sendto(fd, buf, (size_t)r, 0, (struct sockaddr *)&from, flen) != r) {
			fail("udp server sendto", -1, 0);
			break;
		}
	}
	close(ep);
	return NULL;
}

static int bound_loopback_socket(int type, struct sockaddr_in *addr)
{
	int fd = socket(AF_INET, type, 0);
	socklen_t len = sizeof(*addr);
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) < 0 ||
	    getsockname(fd, (struct sockaddr *)addr, &len) < 0 || addr->sin_port == 0) {
		perror("mt_client: bind loopback");
		exit(1);
	}
	return fd;
}

int main(void)
{
	int lfd = bound_loopback_socket(SOCK_STREAM, &tcp_server_addr);
	int ufd = bound_loopback_socket(SOCK_DGRAM, &udp_server_addr);
	if (listen(lfd, TOTAL_CONNS) < 0) {
		perror("mt_client: listen");
		return 1;
	}

	pthread_t acceptor, udp_server, clients[CLIENT_THREADS];
	pthread_create(&acceptor, NULL, tcp_acceptor, (void *)(intptr_t)lfd);
	pthread_create(&udp_server, NULL, udp_echo, (void *)(intptr_t)ufd);
	for (int t = 0; t < CLIENT_THREADS; t++)
		pthread_create(&clients[t], NULL, client_thread, (void *)(intptr_t)t);
	for (int t = 0; t < CLIENT_THREADS; t++)
		pthread_join(clients[t], NULL);

	int stopper = socket(AF_INET, SOCK_DGRAM, 0);
	sendto(stopper, "stop", 4, 0, (struct sockaddr *)&udp_server_addr, sizeof(udp_server_addr));
	close(stopper);
	pthread_join(udp_server, NULL);
	if (failures)
		shutdown(lfd, SHUT_RDWR); /* unblock an acceptor still waiting */
	pthread_join(acceptor, NULL);
	close(lfd);
	close(ufd);

	if (failures) {
		fprintf(stderr, "mt_client: %d failure(s)\n", failures);
		return 1;
	}
	printf("mt_client: %d TCP connections x %d bytes echoed and verified, "
	       "%d UDP datagrams verified\n",
	       TOTAL_CONNS, BYTES_PER_CONN, CLIENT_THREADS * UDP_PER_THREAD);
	return 0;
}
