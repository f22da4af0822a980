/* The dummy-send warm-up loop of the manual (seed 003, "Dummy Send"):
 * while it waits for the next real message, the application sends dummy
 * packets (VMA_SND_FLAGS_DUMMY) every cycle; they walk the send path of
 * the offloaded socket and never reach the wire.
 *
 *   dummy_warmup ADDR UDP_PORT TCP_PORT ROUNDS
 *
 * Each round waits 2 ms sending a dummy every 100 us on a connected UDP
 * and a TCP socket (64 bytes), then sends one real message of 64 bytes on
 * each ("REAL" + round number). The kernel peer counts what arrives: only
 * the real ones. Also checked here: a dummy on a kernel socket, on the
 * kernel path of an offloaded socket (loopback) and on a pipe is -1 EINVAL
 * (nothing sent); TCP refuses with EAGAIN what would not leave in one
 * segment at once (MSG_MORE, two buffers, more than one MSS). The sockets'
 * counters are dumped at INFO (dump_fd_stats: "Tx Dummy messages").
 * Prints PASS/FAIL lines and
 *   dummy: rounds R udp_dummies N tcp_dummies N tcp_eagain N
 * exit 0 when every check passed, 1 otherwise, 3 without libvma. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <mellanox/vma_extra.h>

static int dw_failures;

static void dw_check(bool ok, const char *what)
{
	printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		dw_failures++;
}

static int64_t dw_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The seed's dummyWait: spin for wait_us, a dummy every cycle_us. */
static void dw_wait(int ufd, int tfd, int64_t wait_us, int64_t cycle_us, long *ud, long *td, long *teagain)
{
	static const char buf[64];
	int64_t now = dw_now_us(), end = now + wait_us, next = now + cycle_us;
	for (; now < end; now = dw_now_us()) {
		if (now < next)
			continue;
		if (send(ufd, buf, sizeof(buf), VMA_SND_FLAGS_DUMMY) == (ssize_t)sizeof(buf))
			(*ud)++;
		ssize_t r = send(tfd, buf, sizeof(buf), VMA_SND_FLAGS_DUMMY);
		if (r == (ssize_t)sizeof(buf))
			(*td)++;
		else if (r < 0 && errno == EAGAIN)
			(*teagain)++;
		next += cycle_us;
	}
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s ADDR UDP_PORT TCP_PORT ROUNDS\n", argv[0]);
		return 2;
	}
	struct vma_api_t *api = vma_get_api();
	if (!api) {
		printf("dummy: vma_get_api() is NULL\n");
		return 3;
	}
	long rounds = atol(argv[4]);
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &peer.sin_addr);
	int ufd = socket(AF_INET, SOCK_DGRAM, 0);
	dw_check(connect(ufd, (struct sockaddr *)&peer, sizeof(peer)) == 0, "udp connect");
	int tfd = socket(AF_INET, SOCK_STREAM, 0);
	peer.sin_port = htons((uint16_t)atoi(argv[3]));
	dw_check(connect(tfd, (struct sockaddr *)&peer, sizeof(peer)) == 0, "tcp connect");
	int one = 1;
	setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	long ud = 0, td = 0, teagain = 0, sent = 0;
	for (long r = 0; r < rounds; r++) {
		dw_wait(ufd, tfd, 2000, 100, &ud, &td, &teagain);
		char msg[64] = { 0 };
		snprintf(msg, sizeof(msg), "REAL%05ld", r);
		if (send(ufd, msg, sizeof(msg), 0) == (ssize_t)sizeof(msg) &&
		    send(tfd, msg, sizeof(msg), 0) == (ssize_t)sizeof(msg))
			sent++;
	}
	dw_check(sent == rounds, "every real message sent");
	dw_check(ud > rounds * 10, "UDP dummies accepted (the byte count returned)");
	dw_check(td > rounds * 5, "TCP dummies accepted");

	/* What would not leave at once in one segment: EAGAIN. */
	char big[9000] = { 0 };
	dw_check(send(tfd, big, 64, VMA_SND_FLAGS_DUMMY | MSG_MORE) == -1 && errno == EAGAIN, "TCP dummy with MSG_MORE: EAGAIN");
	dw_check(send(tfd, big, sizeof(big), VMA_SND_FLAGS_DUMMY) == -1 && errno == EAGAIN, "TCP dummy beyond the MSS: EAGAIN");
	struct iovec two[2] = { { big, 10 }, { big, 10 } };
	struct msghdr m = { .msg_iov = two, .msg_iovlen = 2 };
	dw_check(sendmsg(tfd, &m, VMA_SND_FLAGS_DUMMY) == -1 && errno == EAGAIN, "TCP dummy of two buffers: EAGAIN");
	dw_check(sendmsg(ufd, &m, VMA_SND_FLAGS_DUMMY) == 20, "UDP dummy of two buffers (sendmsg): 20");
	struct mmsghdr mm[2] = { { .msg_hdr = m }, { .msg_hdr = m } };
	dw_check(sendmmsg(ufd, mm, 2, VMA_SND_FLAGS_DUMMY) == 2 && mm[0].msg_len == 20, "UDP dummies by sendmmsg: 2");

	/* Never a real send on the kernel's side. */
	int kfd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_port = htons(9) };
	lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	dw_check(sendto(kfd, big, 8, VMA_SND_FLAGS_DUMMY, (struct sockaddr *)&lo, sizeof(lo)) == -1 && errno == EINVAL,
		 "dummy to loopback (the kernel's path): EINVAL");
	api->thread_offload(0, pthread_self());
	int nfd = socket(AF_INET, SOCK_DGRAM, 0);
	api->thread_offload(1, pthread_self());
	dw_check(sendto(nfd, big, 8, VMA_SND_FLAGS_DUMMY, (struct sockaddr *)&peer, sizeof(peer)) == -1 &&
		 errno == EINVAL, "dummy on a socket libvma does not offload: EINVAL");
	int p[2];
	dw_check(pipe(p) == 0 && send(p[1], big, 1, VMA_SND_FLAGS_DUMMY) == -1 && errno == EINVAL,
		 "dummy on a pipe: EINVAL");

	/* VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME=1: each getsockname() also sends
	 * a dummy (264 bytes) on the offloaded socket, and answers as always. */
	const char *trig = getenv("VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME");
	long triggered = trig && atoi(trig) == 1 ? 5 : 0;
	for (int i = 0; i < 5; i++) {
		struct sockaddr_in me;
		socklen_t ml = sizeof(me);
		dw_check(getsockname(ufd, (struct sockaddr *)&me, &ml) == 0 && ml == sizeof(me) && me.sin_port != 0,
			 "getsockname answers");
	}
	api->dump_fd_stats(ufd, 3);
	api->dump_fd_stats(tfd, 3);
	printf("dummy: rounds %ld udp_dummies %ld tcp_dummies %ld tcp_eagain %ld\n", rounds, ud + 3 + triggered, td,
	       teagain);
	/* The peer's counts are the test: give the last real messages time. */
	shutdown(tfd, SHUT_WR);
	char c;
	while (recv(tfd, &c, 1, 0) > 0)
		;
	close(tfd);
	close(ufd);
	return dw_failures ? 1 : 0;
}
