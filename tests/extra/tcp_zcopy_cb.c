/* The receive callback and zero-copy receive on TCP (the manual points to
 * libvma's extra_api_tests/tcp_zcopy_cb). Two connections to a kernel peer
 * that sends BYTES of a known stream on each (byte i = (i * 31) % 251)
 * once it got one byte, then closes:
 *  - the first has a receive callback that sees every receive buffer in
 *    order, in the reading thread: it lets most through (VMA_PACKET_RECV),
 *    drops every 9th (VMA_PACKET_DROP: consumed unread) and keeps every
 *    7th up to 20 of them (VMA_PACKET_HOLD, given back with free_packets
 *    at the end; their bytes keep that much of the window closed);
 *    recv() reads exactly the bytes let through, in order;
 *  - the second is read with recvfrom_zcopy(MSG_VMA_ZCOPY_FORCE), in place,
 *    16 buffers kept at a time, until EOF (0).
 *
 *   tcp_zcopy_cb ADDR PORT BYTES
 *
 * Prints PASS/FAIL lines; exit 0 when all passed, 1 otherwise, 3 without
 * libvma. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
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

#define TZ_MAX_PIECES 200000
#define TZ_HELD_MAX 4096
#define TZ_HELD_KEEP 20

struct tz_piece {
	uint64_t off;
	uint32_t len;
};

struct tz_cb {
	pthread_t reader;
	uint64_t off;                 /* stream offset of the next buffer shown */
	unsigned shown, foreign, bad;
	struct tz_piece pass[TZ_MAX_PIECES];   /* let through, in order */
	unsigned npass;
	uint64_t dropped_bytes;
	void *held[TZ_HELD_MAX];
	struct tz_piece held_piece[TZ_HELD_MAX];
	unsigned nheld;
};

static int tz_failures;

static void tz_check(bool ok, const char *what)
{
	printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		tz_failures++;
}

static uint8_t tz_byte(uint64_t i)
{
	return (uint8_t)((i * 31) % 251);
}

static bool tz_match(const uint8_t *p, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != tz_byte(off + i))
			return false;
	return true;
}

static vma_recv_callback_retval_t tz_filter(int fd, size_t sz_iov, struct iovec iov[], struct vma_info_t *info,
					    void *context)
{
	(void)fd;
	struct tz_cb *st = context;
	if (!pthread_equal(pthread_self(), st->reader))
		st->foreign++;
	size_t len = 0;
	for (size_t i = 0; i < sz_iov; i++) {
		if (!tz_match(iov[i].iov_base, iov[i].iov_len, st->off + len))
			st->bad++;
		len += iov[i].iov_len;
	}
	if (len != info->payload_sz || info->struct_sz != sizeof(*info) || !info->src || !info->dst)
		st->bad++;
	struct tz_piece piece = { .off = st->off, .len = (uint32_t)len };
	st->off += len;
	unsigned n = st->shown++;
	/* Held bytes keep the window closed until freed: a few only. */
	if (n % 7 == 3 && info->packet_id && st->nheld < TZ_HELD_KEEP) {
		st->held_piece[st->nheld] = piece;
		st->held[st->nheld++] = info->packet_id;
		return VMA_PACKET_HOLD;
	}
	if (n % 9 == 5) {
		st->dropped_bytes += len;
		return VMA_PACKET_DROP;
	}
	if (st->npass < TZ_MAX_PIECES)
		st->pass[st->npass++] = piece;
	return VMA_PACKET_RECV;
}

static int tz_connect(const char *addr, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, addr, &a.sin_addr);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("tcp_zcopy_cb: connect");
		return -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s ADDR PORT BYTES\n", argv[0]);
		return 2;
	}
	struct vma_api_t *api = vma_get_api();
	if (!api) {
		printf("SKIP: vma_get_api() is NULL\n");
		return 3;
	}
	uint64_t total = (uint64_t)atoll(argv[3]);
	static struct tz_cb st;
	st.reader = pthread_self();

	/* ---- the receive callback ---- */
	int fd = tz_connect(argv[1], atoi(argv[2]));
	if (fd < 0)
		return 1;
	tz_check(api->register_recv_callback(fd, tz_filter, &st) == 0, "register_recv_callback on a TCP connection");
	send(fd, "g", 1, 0);   /* the peer sends the stream once asked */
	uint8_t *got = malloc(total + 1);
	uint64_t n = 0;
	for (;;) {
		ssize_t r = recv(fd, got + n, total + 1 - n, 0);
		if (r <= 0)
			break;
		n += (uint64_t)r;
	}
	/* The bytes read are the pieces let through, in order. */
	uint64_t at = 0;
	bool same = true;
	for (unsigned i = 0; i < st.npass && same; i++) {
		same = at + st.pass[i].len <= n && tz_match(got + at, st.pass[i].len, st.pass[i].off);
		at += st.pass[i].len;
	}
	printf("callback: shown %u buffers (%llu bytes), let through %u, dropped %llu bytes, held %u; read %llu\n",
	       st.shown, (unsigned long long)st.off, st.npass, (unsigned long long)st.dropped_bytes, st.nheld,
	       (unsigned long long)n);
	tz_check(st.off == total && st.bad == 0, "the callback saw the whole stream, in order, vma_info filled");
	tz_check(st.foreign == 0, "the callback ran in the reading thread");
	tz_check(same && at == n, "recv read exactly the bytes let through, in order");
	bool held_ok = st.nheld > 0;
	for (unsigned i = 0; i < st.nheld && held_ok; i++) {
		/* The held frames still hold their bytes: read through the id. */
		struct vma_packet_t p = { .packet_id = st.held[i] };
		held_ok = api->free_packets(fd, &p, 1) == 0;
	}
	tz_check(held_ok, "held buffers given back with free_packets");
	struct vma_packet_t again = { .packet_id = st.nheld ? st.held[0] : NULL };
	tz_check(api->free_packets(fd, &again, 1) == -1 && errno == ENOENT, "a second free_packets: ENOENT");
	close(fd);

	/* ---- zero-copy receive ---- */
	fd = tz_connect(argv[1], atoi(argv[2]));
	if (fd < 0)
		return 1;
	send(fd, "g", 1, 0);
	struct { struct vma_packets_t h; char room[256]; } bufs[16];
	struct vma_packet_t keep[16];
	int nkeep = 0, zc = 0, copies = 0;
	uint64_t off = 0;
	bool intact = true, eof = false;
	for (;;) {
		int flags = MSG_VMA_ZCOPY_FORCE;
		int r = api->recvfrom_zcopy(fd, &bufs[nkeep], sizeof(bufs[0]), &flags, NULL, NULL);
		if (r == 0) {
			eof = true;
			break;
		}
		if (r < 0) {
			printf("recvfrom_zcopy: %s at %llu\n", strerror(errno), (unsigned long long)off);
			break;
		}
		if (!(flags & MSG_VMA_ZCOPY)) {
			copies++;
			continue;
		}
		zc++;
		struct vma_packet_t *p = &bufs[nkeep].h.pkts[0];
		size_t len = 0;
		for (size_t i = 0; i < p->sz_iov; i++) {
			intact &= tz_match(p->iov[i].iov_base, p->iov[i].iov_len, off + len);
			len += p->iov[i].iov_len;
		}
		intact &= len == (size_t)r;
		off += len;
		memcpy(&keep[nkeep++], p, sizeof(*p));
		if (nkeep == 16) {
			intact &= api->free_packets(fd, keep, 16) == 0;
			nkeep = 0;
		}
	}
	if (nkeep)
		intact &= api->free_packets(fd, keep, (size_t)nkeep) == 0;
	printf("zcopy: %d buffers in place, %d copies, %llu bytes, eof %d\n", zc, copies, (unsigned long long)off, eof);
	tz_check(eof && off == total && copies == 0 && intact, "recvfrom_zcopy read the whole stream in place, then EOF");
	int flags = MSG_VMA_ZCOPY_FORCE;
	char small[8];
	tz_check(api->recvfrom_zcopy(fd, small, sizeof(small), &flags, NULL, NULL) == -1 && errno == EINVAL,
		 "MSG_VMA_ZCOPY_FORCE with no room for a packet description: EINVAL");
	close(fd);
	free(got);
	printf("%s\n", tz_failures ? "tcp_zcopy_cb: FAILED" : "tcp_zcopy_cb: ok");
	return tz_failures ? 1 : 0;
}
