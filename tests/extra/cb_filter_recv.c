/* A receiver that filters in the receive callback (the manual's packet
 * filter, udp_lat's --vmarxfiltercb): the callback looks at each
 * datagram before it is queued, in the thread that reads, and lets the
 * even sequence numbers through (VMA_PACKET_RECV), drops the odd ones
 * (VMA_PACKET_DROP) and keeps every one whose number ends in 4 itself
 * (VMA_PACKET_HOLD, given back later with free_packets). recvfrom() then
 * reads exactly the datagrams let through.
 *
 *   cb_filter_recv CTL_ADDR CTL_PORT BIND_ADDR PORT COUNT
 *
 * Asks the kernel peer for COUNT datagrams of 200 bytes (as zcopy_udp_recv)
 * and prints
 *   cb: seen N recv N drop N hold N read N intact N foreign_thread N
 * exit 0 when the callback saw every datagram in the reading thread and
 * recvfrom read exactly the RECV ones, intact and in order. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <mellanox/vma_extra.h>

#define CB_SIZE 200
#define CB_MAX 100000

struct cb_state {
	pthread_t reader;
	long seen, recv, drop, hold, foreign;
	void *held[CB_MAX];
	int nheld;
};

static uint32_t cb_seq(const struct iovec *iov, size_t n)
{
	uint8_t b[4];
	size_t got = 0;
	for (size_t i = 0; i < n && got < 4; i++)
		for (size_t j = 0; j < iov[i].iov_len && got < 4; j++)
			b[got++] = ((const uint8_t *)iov[i].iov_base)[j];
	uint32_t s;
	memcpy(&s, b, 4);
	return ntohl(s);
}

static vma_recv_callback_retval_t cb_filter(int fd, size_t sz_iov, struct iovec iov[], struct vma_info_t *info,
					    void *context)
{
	(void)fd;
	struct cb_state *st = context;
	st->seen++;
	if (!pthread_equal(pthread_self(), st->reader))
		st->foreign++;
	uint32_t seq = cb_seq(iov, sz_iov);
	if (seq % 2) {
		st->drop++;
		return VMA_PACKET_DROP;
	}
	if (seq % 10 == 4 && info->packet_id && st->nheld < CB_MAX) {
		st->held[st->nheld++] = info->packet_id;
		st->hold++;
		return VMA_PACKET_HOLD;
	}
	st->recv++;
	return VMA_PACKET_RECV;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s CTL_ADDR CTL_PORT BIND_ADDR PORT COUNT\n", argv[0]);
		return 2;
	}
	struct vma_api_t *api = vma_get_api();
	if (!api) {
		printf("cb: vma_get_api() is NULL\n");
		return 3;
	}
	static struct cb_state st;
	st.reader = pthread_self();
	long count = atol(argv[5]);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[4])) };
	inet_pton(AF_INET, argv[3], &me.sin_addr);
	int rcvbuf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	struct timeval tv = { .tv_sec = 2 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 || api->register_recv_callback(fd, cb_filter, &st) != 0) {
		perror("cb: bind/register_recv_callback");
		return 1;
	}
	struct sockaddr_in ctl = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &ctl.sin_addr);
	char req[64];
	int n = snprintf(req, sizeof(req), "%ld %s %d", count, argv[4], CB_SIZE);
	sendto(fd, req, (size_t)n, 0, (struct sockaddr *)&ctl, sizeof(ctl));
	long read_n = 0, intact = 0;
	uint32_t expect = 0;
	uint8_t buf[2048];
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0)
			break;   /* SO_RCVTIMEO: the peer is done */
		read_n++;
		uint32_t seq;
		memcpy(&seq, buf, 4);
		seq = ntohl(seq);
		/* The next one let through: even, not ending in 4. */
		while (expect % 2 || expect % 10 == 4)
			expect++;
		int ok = r == CB_SIZE && seq == expect;
		for (ssize_t k = 4; ok && k < r; k++)
			ok = buf[k] == (uint8_t)(seq + k);
		intact += ok;
		expect = seq + 1;
	}
	/* free_packets takes vma_packet_t entries; only packet_id is read. */
	long free_fail = 0;
	for (int i = 0; i < st.nheld; i++) {
		struct vma_packet_t p = { .packet_id = st.held[i], .sz_iov = 0 };
		if (api->free_packets(fd, &p, 1) != 0)
			free_fail++;
	}
	struct vma_packet_t again = { .packet_id = st.nheld ? st.held[0] : NULL };
	int again_rc = api->free_packets(fd, &again, 1);
	int again_errno = errno;
	printf("cb: seen %ld recv %ld drop %ld hold %ld read %ld intact %ld foreign_thread %ld free_fail %ld\n", st.seen,
	       st.recv, st.drop, st.hold, read_n, intact, st.foreign, free_fail);
	int ok = st.seen == count && st.foreign == 0 && read_n == st.recv && intact == read_n && free_fail == 0 &&
		 st.hold > 0 && again_rc == -1 && again_errno == ENOENT && api->register_recv_callback(fd, NULL, NULL) == 0;
	close(fd);
	return ok ? 0 : 1;
}
