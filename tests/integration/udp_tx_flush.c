/* Helper of udp_tx_flush.sh: sends that must all leave although libvma
 * batches doorbells, and the receiver that counts them.
 *
 *   udp_tx_flush send DST PORT COUNT CHUNK SLEEP_MS
 *     sends COUNT datagrams (4-byte sequence numbers) in back-to-back chunks
 *     of CHUNK, alternately with sendmmsg and sendto, pausing 1 ms between
 *     chunks, then sleeps SLEEP_MS in raw nanosleep: during that sleep the
 *     process makes no libvma call, so whatever libvma still holds must be
 *     sent by its internal thread.
 *   udp_tx_flush tail DST PORT COUNT SLEEP_MS HOW
 *     sends COUNT datagrams by back-to-back send() calls (a burst: the
 *     last ones are held by the burst rule until something flushes them),
 *     then blocks SLEEP_MS in a call of libc that libvma interposes but
 *     that touches no offloaded fd: HOW is nanosleep, usleep, cond
 *     (pthread_cond_timedwait), poll (a pipe nobody writes) or read (a
 *     blocking read of a pipe, woken by another thread's write
 *     after SLEEP_MS). The held sends must leave when it blocks.
 *   udp_tx_flush bursts DST PORT BURSTS SIZE SPIN_MS
 *     BURSTS times: SIZE back-to-back send() calls (the last ones are held
 *     as a burst), then SPIN_MS of busy computing that calls nothing at all
 *     (a thread spinning on a queue of its own between messages).
 *   udp_tx_flush echo PORT COUNT WORK_US REPLY_PORT HOLD_MS
 *     a server: bound to PORT, it takes the first datagram, sleeps 200 ms
 *     (the client's burst queues up meanwhile), then answers it and COUNT-1
 *     more, each after WORK_US of computing, by a datagram with the same
 *     4 bytes to the sender's address at REPLY_PORT; then sleeps HOLD_MS
 *     (nanosleep) so the script can read its statistics. Its replies to
 *     queued requests may share doorbells (the sender has more input
 *     waiting, ring_hold.h) where the burst rule alone, with sends WORK_US
 *     apart, would ring each.
 *   udp_tx_flush recv PORT COUNT FIRST_MS IDLE_MS [MAX_SPAN_US [LATE_US MAX_LATE GROUP]]
 *     waits FIRST_MS for the first datagram, then at most IDLE_MS after each
 *     one for the next; exit 0 when sequence numbers 0..COUNT-1 all arrived
 *     exactly once, and, with MAX_SPAN_US (0: no limit), the last arrived at
 *     most that long after the first (the kernel's receive timestamps,
 *     SO_TIMESTAMPNS); with LATE_US, at most MAX_LATE of the groups of
 *     GROUP consecutive sequence numbers had their last datagram arrive
 *     more than LATE_US after their first.
 *     With IDLE_MS below the sender's SLEEP_MS, frames held until the
 *     sender exits count as lost.
 * Exit 0 ok, 1 failure, 2 usage or setup error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MMSG_MAX 64

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Straight to the kernel: not a libvma entry point, not even libc's. */
static void raw_sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR)
		;
}

static int do_send(const char *dst, int port, unsigned count, unsigned chunk, long sleep_ms)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || inet_pton(AF_INET, dst, &to.sin_addr) != 1 || connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
		perror("send: socket/connect");
		return 2;
	}
	if (chunk == 0 || chunk > count)
		chunk = count;
	uint32_t seqs[MMSG_MAX];
	struct iovec iov[MMSG_MAX];
	struct mmsghdr vec[MMSG_MAX];
	unsigned sent = 0, round = 0;
	while (sent < count) {
		unsigned end = sent + chunk < count ? sent + chunk : count;
		bool batched = round++ % 2 == 0;   /* the last chunk by sendto */
		while (sent < end) {
			if (batched) {
				unsigned n = end - sent < MMSG_MAX ? end - sent : MMSG_MAX;
				memset(vec, 0, sizeof(vec));
				for (unsigned i = 0; i < n; i++) {
					seqs[i] = htonl(sent + i);
					iov[i] = (struct iovec){ .iov_base = &seqs[i], .iov_len = sizeof(seqs[i]) };
					vec[i].msg_hdr.msg_iov = &iov[i];
					vec[i].msg_hdr.msg_iovlen = 1;
				}
				int r = sendmmsg(fd, vec, n, 0);
				if (r <= 0) {
					perror("sendmmsg");
					return 1;
				}
				sent += (unsigned)r;
			} else {
				uint32_t seq = htonl(sent);
				if (send(fd, &seq, sizeof(seq), 0) != (ssize_t)sizeof(seq)) {
					perror("send");
					return 1;
				}
				sent++;
			}
		}
		if (sent < count)
			raw_sleep_ms(1);
	}
	printf("sent %u datagrams in chunks of %u; sleeping %ld ms without libvma calls\n", sent, chunk, sleep_ms);
	fflush(stdout);
	raw_sleep_ms(sleep_ms);
	close(fd);
	return 0;
}

static int pipe_fds[2];
static long pipe_delay_ms;

static void *pipe_writer(void *arg)
{
	(void)arg;
	raw_sleep_ms(pipe_delay_ms);
	char c = 'x';
	if (write(pipe_fds[1], &c, 1) != 1)
		perror("pipe write");
	return NULL;
}

/* Blocks about ms in the libc call `how` names. */
static int block_in(const char *how, long ms)
{
	if (!strcmp(how, "nanosleep")) {
		struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		return 0;
	}
	if (!strcmp(how, "usleep"))
		return usleep((useconds_t)ms * 1000);
	if (!strcmp(how, "cond")) {
		pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
		pthread_cond_t c = PTHREAD_COND_INITIALIZER;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += ms / 1000;
		until.tv_nsec += (ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&m);
		int r;
		while ((r = pthread_cond_timedwait(&c, &m, &until)) == 0)
			;
		pthread_mutex_unlock(&m);
		return r == ETIMEDOUT ? 0 : -1;
	}
	if (pipe(pipe_fds) != 0)
		return -1;
	if (!strcmp(how, "poll")) {
		struct pollfd p = { .fd = pipe_fds[0], .events = POLLIN };
		return poll(&p, 1, (int)ms) == 0 ? 0 : -1;
	}
	if (!strcmp(how, "read")) {
		pthread_t th;
		pipe_delay_ms = ms;
		if (pthread_create(&th, NULL, pipe_writer, NULL) != 0)
			return -1;
		char c;
		ssize_t r = read(pipe_fds[0], &c, 1);
		pthread_join(th, NULL);
		return r == 1 ? 0 : -1;
	}
	fprintf(stderr, "tail: unknown HOW %s\n", how);
	return -1;
}

static int do_tail(const char *dst, int port, unsigned count, long sleep_ms, const char *how)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || inet_pton(AF_INET, dst, &to.sin_addr) != 1 || connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
		perror("tail: socket/connect");
		return 2;
	}
	for (unsigned i = 0; i < count; i++) {
		uint32_t seq = htonl(i);
		if (send(fd, &seq, sizeof(seq), 0) != (ssize_t)sizeof(seq)) {
			perror("send");
			return 1;
		}
	}
	printf("sent %u datagrams back to back; blocking %ld ms in %s\n", count, sleep_ms, how);
	fflush(stdout);
	if (block_in(how, sleep_ms) != 0) {
		fprintf(stderr, "tail: %s failed\n", how);
		return 1;
	}
	close(fd);
	return 0;
}

/* Busy for us on the CPU without a call of any library (the vDSO clock
 * is read directly by libc, not through anything libvma interposes). */
static void spin_us(long us)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static int do_echo(int port, unsigned count, long work_us, int reply_port, long hold_ms)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0) {
		perror("echo: socket/bind");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	for (unsigned i = 0; i < count; i++) {
		uint32_t seq;
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		if (recvfrom(fd, &seq, sizeof(seq), 0, (struct sockaddr *)&from, &fl) != (ssize_t)sizeof(seq)) {
			perror("echo: recvfrom");
			return 1;
		}
		if (i == 0)
			usleep(200000);   /* the rest of the burst queues up */
		spin_us(work_us);
		from.sin_port = htons((uint16_t)reply_port);
		if (sendto(fd, &seq, sizeof(seq), 0, (struct sockaddr *)&from, sizeof(from)) != (ssize_t)sizeof(seq)) {
			perror("echo: sendto");
			return 1;
		}
	}
	printf("answered %u datagrams; sleeping %ld ms\n", count, hold_ms);
	fflush(stdout);
	usleep((useconds_t)hold_ms * 1000);
	close(fd);
	return 0;
}

static int do_bursts(const char *dst, int port, unsigned bursts, unsigned size, long spin)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (fd < 0 || inet_pton(AF_INET, dst, &to.sin_addr) != 1 || connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
		perror("bursts: socket/connect");
		return 2;
	}
	for (unsigned i = 0; i < bursts * size; i++) {
		uint32_t seq = htonl(i);
		if (send(fd, &seq, sizeof(seq), 0) != (ssize_t)sizeof(seq)) {
			perror("send");
			return 1;
		}
		if (i % size == size - 1)
			spin_us(spin * 1000);
	}
	printf("sent %u bursts of %u, %ld ms of computing after each\n", bursts, size, spin);
	fflush(stdout);
	raw_sleep_ms(1500);
	close(fd);
	return 0;
}

static int do_recv(int port, unsigned count, long first_ms, long idle_ms, long max_span_us, long late_us,
		   unsigned max_late, unsigned group)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int rcvbuf = 64 << 20;
	uint8_t *seen = calloc(count ? count : 1, 1);
	int64_t *stamp = calloc(count ? count : 1, sizeof(*stamp));   /* receive time per sequence number */
	if (fd < 0 || !seen || !stamp || bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0) {
		perror("recv: socket/bind");
		return 2;
	}
	/* Room for the whole burst: a drop here would be the receiver's. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	int64_t first_ns = -1, last_ns = -1;
	printf("ready\n");
	fflush(stdout);
	unsigned got = 0, dups = 0, bad = 0;
	uint64_t deadline = now_ms() + (uint64_t)first_ms;
	while (got < count) {
		uint64_t now = now_ms();
		if (now >= deadline)
			break;
		struct timeval tv = { .tv_sec = (time_t)((deadline - now) / 1000),
				      .tv_usec = (suseconds_t)((deadline - now) % 1000) * 1000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		uint32_t seq;
		char cbuf[CMSG_SPACE(sizeof(struct timespec))];
		struct iovec iov = { .iov_base = &seq, .iov_len = sizeof(seq) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
		ssize_t r = recvmsg(fd, &mh, 0);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			perror("recv");
			return 1;
		}
		deadline = now_ms() + (uint64_t)idle_ms;
		int64_t ns = -1;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
				struct timespec ts;
				memcpy(&ts, CMSG_DATA(c), sizeof(ts));
				ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
				if (first_ns < 0)
					first_ns = ns;
				last_ns = ns;
			}
		seq = ntohl(seq);
		if (r != (ssize_t)sizeof(seq) || seq >= count)
			bad++;
		else if (seen[seq]++)
			dups++;
		else {
			got++;
			stamp[seq] = ns;
		}
	}
	unsigned late = 0;
	long worst_us = 0;
	if (late_us > 0 && group > 1)
		for (unsigned k = 0; k + group <= count; k += group) {
			unsigned e = k + group - 1;
			if (!seen[k] || !seen[e] || stamp[k] < 0 || stamp[e] < 0)
				continue;   /* counted as missing already */
			long gap_us = (long)((stamp[e] - stamp[k]) / 1000);
			if (gap_us > worst_us)
				worst_us = gap_us;
			if (gap_us > late_us) {
				late++;
				printf("burst %u: its last datagram %ld us after its first\n", k / group, gap_us);
			}
		}
	long span_us = first_ns >= 0 ? (long)((last_ns - first_ns) / 1000) : -1;
	printf("received %u of %u distinct datagrams (%u duplicates, %u malformed), the last %ld us after the first\n",
	       got, count, dups, bad, span_us);
	free(seen);
	free(stamp);
	close(fd);
	bool span_ok = max_span_us <= 0 || (span_us >= 0 && span_us <= max_span_us);
	if (!span_ok)
		printf("the last datagram came %ld us after the first: more than %ld us\n", span_us, max_span_us);
	bool bursts_ok = late_us <= 0 || late <= max_late;
	if (late_us > 0)
		printf("%u of %u bursts late (last datagram more than %ld us after the first; at most %u may be), "
		       "the worst %ld us apart\n", late, group > 1 ? count / group : 0, late_us, max_late, worst_us);
	return got == count && !dups && !bad && span_ok && bursts_ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 7 && !strcmp(argv[1], "send"))
		return do_send(argv[2], atoi(argv[3]), (unsigned)strtoul(argv[4], NULL, 10),
			       (unsigned)strtoul(argv[5], NULL, 10), atol(argv[6]));
	if (argc == 7 && !strcmp(argv[1], "tail"))
		return do_tail(argv[2], atoi(argv[3]), (unsigned)strtoul(argv[4], NULL, 10), atol(argv[5]), argv[6]);
	if (argc == 7 && !strcmp(argv[1], "bursts"))
		return do_bursts(argv[2], atoi(argv[3]), (unsigned)strtoul(argv[4], NULL, 10),
				 (unsigned)strtoul(argv[5], NULL, 10), atol(argv[6]));
	if (argc == 7 && !strcmp(argv[1], "echo"))
		return do_echo(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10), atol(argv[4]), atoi(argv[5]),
			       atol(argv[6]));
	if ((argc == 6 || argc == 7 || argc == 10) && !strcmp(argv[1], "recv"))
		return do_recv(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10), atol(argv[4]), atol(argv[5]),
			       argc >= 7 ? atol(argv[6]) : 0, argc == 10 ? atol(argv[7]) : 0,
			       argc == 10 ? (unsigned)strtoul(argv[8], NULL, 10) : 0,
			       argc == 10 ? (unsigned)strtoul(argv[9], NULL, 10) : 0);
	fprintf(stderr,
		"usage: %s send DST PORT COUNT CHUNK SLEEP_MS | tail DST PORT COUNT SLEEP_MS HOW | "
		"bursts DST PORT BURSTS SIZE SPIN_MS | echo PORT COUNT WORK_US REPLY_PORT HOLD_MS | recv PORT COUNT FIRST_MS IDLE_MS [MAX_SPAN_US [LATE_US MAX_LATE GROUP]]\n",
		argv[0]);
	return 2;
}
