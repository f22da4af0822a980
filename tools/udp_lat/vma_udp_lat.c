/* vma_udp_lat: UDP ping-pong latency with each receive method of the VMA
 * Extra API, to show what each one gains (docs/extra_api.md, "Examples and
 * tools"; tests/bench/vma_bench.sh runs it side by side with the kernel).
 *
 *   vma_udp_lat -s [-i ADDR] -p PORT [-r MODE] [-x COUNT]        echo server
 *   vma_udp_lat -c ADDR -p PORT [-r MODE] [-n COUNT] [-m SIZE]   client
 *               [-w WARMUP] [-t SECONDS] [-d USEC] [--spin]
 *
 * MODE, the way both ends receive:
 *   recv     recvfrom() (blocking: libvma polls inside it; --spin: MSG_DONTWAIT
 *            in a loop, the fair busy-polling kernel, with SO_BUSY_POLL)
 *   cb       a receive callback (register_recv_callback) that lets the
 *            expected datagram through (VMA_PACKET_RECV) and drops the rest
 *            (udp_lat's --vmarxfiltercb); recvfrom() reads it
 *   zcopy    recvfrom_zcopy() + free_packets() (udp_lat's --vmazcopyread)
 *   xtreme   socketxtreme_poll() on the socket's ring fd, the packet read in
 *            the ring frame, socketxtreme_free_vma_packets() (needs
 *            VMA_SOCKETXTREME=1)
 *   mix      recv, zcopy and (under VMA_SOCKETXTREME=1) xtreme in turn, both
 *            ends switching together every -b BLOCK round trips (100): each
 *            method's samples come from the same moments of the run, so a
 *            change of the host's speed (a shared or virtual machine drifts
 *            by 10% between runs) touches them alike and their difference
 *            is the methods' own. One line per method, its mode "mix-M".
 * -d USEC: the client sends a dummy packet (VMA_SND_FLAGS_DUMMY) every USEC
 * while it waits between rounds (-g USEC gap), the warm-up of the seed.
 *
 * The client sends SIZE bytes carrying a sequence number, waits for the
 * same bytes back (a reply not seen within 100 ms is lost), and prints the
 * half round trip. Each end uses a datagram where it lies: the lent modes
 * compare and echo it in the ring frame (no copy), the others in their
 * buffer (the copy recvfrom makes):
 *   mode=M rounds=N lost=N avg_us=X p50_us=X p99_us=X p999_us=X
 * The server echoes every datagram to its sender; -x COUNT stops it after
 * COUNT datagrams (0: never), and it prints "served N" (in a mix, followed
 * by how many each method received). Exit 0; 1 on a setup error or when every
 * round was lost; 2 on usage; 3 when the mode needs libvma and it is not
 * loaded (vma_get_api() is NULL). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <mellanox/vma_extra.h>

#define LAT_TIMEOUT_NS 100000000LL
#define LAT_MAX_SIZE 1472
#define LAT_COMPLETIONS 16

enum lat_mode { LAT_RECV, LAT_CB, LAT_ZCOPY, LAT_XTREME, LAT_MIX };
static const char *const lat_mode_names[] = { "recv", "cb", "zcopy", "xtreme", "mix" };
#define LAT_MODES 5
/* mix: the methods taken in turn (cb is left out: a registered callback
 * runs for every datagram, whatever reads it afterwards). */
#define LAT_MIX_MAX 3

struct lat {
	enum lat_mode mode;        /* as asked: a method, or mix */
	enum lat_mode method;      /* the method of the next receive */
	bool spin;
	/* mix: the methods in turn, BLOCK round trips each */
	enum lat_mode mix[LAT_MIX_MAX];
	int nmix;
	long block;
	int fd;
	int ring_fd;
	struct vma_api_t *api;
	/* cb mode: the sequence number the client waits for (the server
	 * takes everything). */
	bool filter;
	uint64_t want_seq;
	uint64_t cb_dropped;
	/* xtreme: completions not consumed yet */
	struct vma_completion_t comps[LAT_COMPLETIONS];
	int ncomps, next;
};

static volatile sig_atomic_t lat_stop;

static void lat_on_signal(int sig)
{
	(void)sig;
	lat_stop = 1;
}

static int64_t lat_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int lat_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static vma_recv_callback_retval_t lat_filter(int fd, size_t sz_iov, struct iovec iov[], struct vma_info_t *info,
					     void *context)
{
	(void)fd;
	(void)info;
	struct lat *l = context;
	if (!l->filter)
		return VMA_PACKET_RECV;
	uint64_t seq;
	if (sz_iov < 1 || iov[0].iov_len < sizeof(seq)) {
		l->cb_dropped++;
		return VMA_PACKET_DROP;
	}
	memcpy(&seq, iov[0].iov_base, sizeof(seq));
	if (seq != l->want_seq) {
		l->cb_dropped++;   /* a late reply of a lost round */
		return VMA_PACKET_DROP;
	}
	return VMA_PACKET_RECV;
}

/* One received datagram, used where it lies: in the caller's buffer
 * (recv, cb) or in the ring frames lent by libvma (zcopy, xtreme), which
 * lat_release gives back. */
#define LAT_IOV_MAX 16
struct lat_msg {
	struct iovec iov[LAT_IOV_MAX];
	int niov;
	size_t len;
	struct sockaddr_in from;
	/* what to give back */
	struct vma_packet_t zc;                /* zcopy: the packet's fixed part */
	struct vma_packet_desc_t *xt;          /* xtreme: the completion's packet */
};

static void lat_release(struct lat *l, struct lat_msg *m)
{
	if (m->zc.packet_id) {
		if (l->api->free_packets(l->fd, &m->zc, 1) != 0)
			perror("vma_udp_lat: free_packets");
		m->zc.packet_id = NULL;
	} else if (m->xt) {
		if (l->api->socketxtreme_free_vma_packets(m->xt, 1) != 0)
			perror("vma_udp_lat: socketxtreme_free_vma_packets");
		m->xt = NULL;
	}
}

/* Whether the datagram holds exactly the size bytes at want. */
static bool lat_same(const struct lat_msg *m, const char *want, size_t size)
{
	if (m->len != size)
		return false;
	size_t off = 0;
	for (int i = 0; i < m->niov; i++) {
		if (memcmp(m->iov[i].iov_base, want + off, m->iov[i].iov_len) != 0)
			return false;
		off += m->iov[i].iov_len;
	}
	return off == size;
}

/* The next datagram into *m (buf: the caller's room for the copying
 * modes). 1, 0 when nothing came before deadline_ns (0: wait), -1 on an
 * error. The caller uses it, then calls lat_release. */
static int lat_receive(struct lat *l, void *buf, size_t len, struct lat_msg *m, int64_t deadline_ns)
{
	static char zbuf[sizeof(struct vma_packets_t) + sizeof(struct vma_packet_t) + LAT_IOV_MAX * sizeof(struct iovec)];
	for (;;) {
		socklen_t fl = sizeof(m->from);
		ssize_t n = -1;
		m->niov = 0;
		switch (l->method) {
		case LAT_MIX:   /* never a method */
		case LAT_RECV:
		case LAT_CB:
			n = recvfrom(l->fd, buf, len, l->spin ? MSG_DONTWAIT : 0, (struct sockaddr *)&m->from, &fl);
			if (n >= 0) {
				m->iov[0] = (struct iovec){ .iov_base = buf, .iov_len = (size_t)n };
				m->niov = 1;
			}
			break;
		case LAT_ZCOPY: {
			int flags = 0;
			n = l->api->recvfrom_zcopy(l->fd, zbuf, sizeof(zbuf), &flags, (struct sockaddr *)&m->from, &fl);
			if (n >= 0 && (flags & MSG_VMA_ZCOPY)) {
				struct vma_packet_t *pkt = &((struct vma_packets_t *)zbuf)->pkts[0];
				memcpy(&m->zc, pkt, sizeof(m->zc));
				for (size_t i = 0; i < pkt->sz_iov && i < LAT_IOV_MAX; i++)
					m->iov[m->niov++] = pkt->iov[i];
			} else if (n >= 0) {
				/* Copied (the kernel's datagram): it is in zbuf. */
				memcpy(buf, zbuf, (size_t)n < len ? (size_t)n : len);
				m->iov[0] = (struct iovec){ .iov_base = buf, .iov_len = (size_t)n };
				m->niov = 1;
			}
			break;
		}
		case LAT_XTREME:
			if (l->next == l->ncomps) {
				l->next = 0;
				l->ncomps = l->api->socketxtreme_poll(l->ring_fd, l->comps, LAT_COMPLETIONS, 0);
				if (l->ncomps < 0) {
					perror("vma_udp_lat: socketxtreme_poll");
					l->ncomps = 0;
					return -1;
				}
			}
			while (l->next < l->ncomps) {
				struct vma_completion_t *c = &l->comps[l->next++];
				if (!(c->events & VMA_SOCKETXTREME_PACKET))
					continue;
				if ((int)c->user_data != l->fd) {
					/* another socket's: not ours to answer */
					l->api->socketxtreme_free_vma_packets(&c->packet, 1);
					continue;
				}
				for (struct vma_buff_t *b = c->packet.buff_lst; b && m->niov < LAT_IOV_MAX; b = b->next)
					m->iov[m->niov++] = (struct iovec){ .iov_base = b->payload, .iov_len = b->len };
				m->from = c->src;
				m->xt = &c->packet;
				n = c->packet.total_len;
				break;
			}
			if (n < 0)
				errno = EAGAIN;
			break;
		}
		if (n >= 0) {
			m->len = (size_t)n;
			return 1;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		if (lat_stop || (deadline_ns && lat_now_ns() > deadline_ns))
			return 0;
	}
}

/* Whether the run receives by method m (alone or in the mix). */
static bool lat_uses(const struct lat *l, enum lat_mode m)
{
	if (l->mode == m)
		return true;
	for (int i = 0; l->mode == LAT_MIX && i < l->nmix; i++)
		if (l->mix[i] == m)
			return true;
	return false;
}

/* The method for round seq: the asked one, or its turn in the mix. */
static enum lat_mode lat_method_for(const struct lat *l, uint64_t seq)
{
	if (l->mode != LAT_MIX)
		return l->mode;
	return l->mix[(seq / (uint64_t)l->block) % (uint64_t)l->nmix];
}

static int lat_socket(struct lat *l, const char *bind_ip, int port, bool server)
{
	l->fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (l->fd < 0) {
		perror("vma_udp_lat: socket");
		return -1;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(server ? (uint16_t)port : 0) };
	if (bind_ip && inet_pton(AF_INET, bind_ip, &a.sin_addr) != 1) {
		fprintf(stderr, "vma_udp_lat: bad address %s\n", bind_ip);
		return -1;
	}
	if (bind(l->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("vma_udp_lat: bind");
		return -1;
	}
	if (l->spin) {
		int busy = 50;
		setsockopt(l->fd, SOL_SOCKET, SO_BUSY_POLL, &busy, sizeof(busy));
	}
	if (l->mode == LAT_RECV)
		return 0;
	if (!l->api) {
		fprintf(stderr, "vma_udp_lat: mode %s needs libvma (vma_get_api() is NULL)\n", lat_mode_names[l->mode]);
		return -3;
	}
	if (l->mode == LAT_MIX && !(l->api->vma_extra_supported_mask & VMA_EXTRA_API_RECVFROM_ZCOPY)) {
		fprintf(stderr, "vma_udp_lat: mode mix needs recvfrom_zcopy, which this libvma does not offer\n");
		return -3;
	}
	if (l->mode == LAT_CB && l->api->register_recv_callback(l->fd, lat_filter, l) != 0) {
		perror("vma_udp_lat: register_recv_callback");
		return -1;
	}
	if (l->mode == LAT_MIX) {
		/* recv and zcopy always, xtreme when SocketXtreme is on. */
		l->nmix = 0;
		l->mix[l->nmix++] = LAT_RECV;
		l->mix[l->nmix++] = LAT_ZCOPY;
		if (l->api->vma_extra_supported_mask & VMA_EXTRA_API_SOCKETXTREME_POLL)
			l->mix[l->nmix++] = LAT_XTREME;
	}
	if (lat_uses(l, LAT_XTREME)) {
		/* One interface on this testbed: the socket's one ring. */
		if (l->api->get_socket_rings_fds(l->fd, &l->ring_fd, 1) != 1) {
			perror("vma_udp_lat: get_socket_rings_fds");
			return -1;
		}
	}
	return 0;
}

static int lat_server(struct lat *l, const char *ip, int port, long stop_after)
{
	int rc = lat_socket(l, ip, port, true);
	if (rc)
		return rc == -3 ? 3 : 1;
	printf("vma_udp_lat: server on port %d, mode %s\n", port, lat_mode_names[l->mode]);
	fflush(stdout);
	char buf[LAT_MAX_SIZE + 64];
	long served = 0, served_by[LAT_MODES] = { 0 };
	uint64_t next_seq = 0;
	while (!lat_stop && (!stop_after || served < stop_after)) {
		struct lat_msg m = { 0 };
		/* In a mix, the method of the round the client is in: the
		 * sequence number after the last one seen (a lost datagram
		 * does not put the two ends out of step). */
		l->method = lat_method_for(l, next_seq);
		int r = lat_receive(l, buf, sizeof(buf), &m, 0);
		if (r < 0)
			return 1;
		if (r == 0)
			break;
		/* The echo leaves from where the datagram lies (the ring frame
		 * for the lent modes: no copy on either side). */
		struct msghdr out = { .msg_name = &m.from, .msg_namelen = sizeof(m.from), .msg_iov = m.iov,
				      .msg_iovlen = (size_t)m.niov };
		if (sendmsg(l->fd, &out, 0) != (ssize_t)m.len)
			perror("vma_udp_lat: sendmsg");
		if (m.niov && m.iov[0].iov_len >= sizeof(next_seq)) {
			memcpy(&next_seq, m.iov[0].iov_base, sizeof(next_seq));
			next_seq++;
		}
		lat_release(l, &m);
		served++;
		served_by[l->method]++;
	}
	printf("vma_udp_lat: served %ld", served);
	for (int k = 0; l->mode == LAT_MIX && k < LAT_MODES; k++)
		if (served_by[k])
			printf(" %s %ld", lat_mode_names[k], served_by[k]);
	printf("\n");
	return 0;
}

/* Busy waits gap_ns, sending a dummy every dummy_ns (the seed's dummyWait). */
static void lat_gap(struct lat *l, int64_t gap_ns, int64_t dummy_ns, const void *msg, size_t size, long *dummies)
{
	int64_t now = lat_now_ns(), end = now + gap_ns, next = now + dummy_ns;
	for (; now < end; now = lat_now_ns()) {
		if (dummy_ns && now >= next) {
			if (send(l->fd, msg, size, VMA_SND_FLAGS_DUMMY) == (ssize_t)size)
				(*dummies)++;
			next += dummy_ns;
		}
	}
}

static int lat_client(struct lat *l, const char *ip, int port, long count, long size, long warmup, double seconds,
		      long gap_us, long dummy_us)
{
	int rc = lat_socket(l, NULL, 0, false);
	if (rc)
		return rc == -3 ? 3 : 1;
	struct sockaddr_in server = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, ip, &server.sin_addr) != 1 ||
	    connect(l->fd, (struct sockaddr *)&server, sizeof(server)) != 0) {
		perror("vma_udp_lat: connect");
		return 1;
	}
	if (lat_uses(l, LAT_XTREME) && l->api->get_socket_rings_fds(l->fd, &l->ring_fd, 1) != 1) {
		perror("vma_udp_lat: get_socket_rings_fds");
		return 1;
	}
	l->filter = true;
	/* Half round trips by method (one method unless mix), count in all. */
	int64_t *half[LAT_MODES] = { 0 };
	long measured[LAT_MODES] = { 0 }, total = 0;
	for (int m = 0; m < LAT_MODES; m++)
		if (lat_uses(l, (enum lat_mode)m) && !(half[m] = calloc((size_t)count, sizeof(int64_t))))
			return 1;
	char out[LAT_MAX_SIZE], in[LAT_MAX_SIZE + 64];
	memset(out, 0xa5, (size_t)size);
	long lost = 0, dummies = 0;
	int64_t stop_at = seconds > 0 ? lat_now_ns() + (int64_t)(seconds * 1e9) : 0;
	for (uint64_t seq = 0; seq < (uint64_t)(count + warmup) && !lat_stop; seq++) {
		if (stop_at && seq >= (uint64_t)warmup && lat_now_ns() > stop_at)
			break;
		if (gap_us)
			lat_gap(l, gap_us * 1000LL, dummy_us * 1000LL, out, (size_t)size, &dummies);
		memcpy(out, &seq, sizeof(seq));
		l->want_seq = seq;
		l->method = lat_method_for(l, seq);
		int64_t start = lat_now_ns(), end = 0;
		if (send(l->fd, out, (size_t)size, 0) != size) {
			lost++;
			continue;
		}
		for (;;) {
			struct lat_msg m = { 0 };
			int r = lat_receive(l, in, sizeof(in), &m, start + LAT_TIMEOUT_NS);
			if (r < 0)
				return 1;
			if (r == 0)
				break;   /* timed out */
			/* Checked where it lies (the ring frame for the lent
			 * modes). The reply is in hand once checked: giving the
			 * frames back is after its use, as in an application. */
			bool same = lat_same(&m, out, (size_t)size);
			if (same)
				end = lat_now_ns();
			lat_release(l, &m);
			if (same)
				break;
		}
		if (!end) {
			lost++;
			continue;
		}
		if (seq >= (uint64_t)warmup && total < count) {
			half[l->method][measured[l->method]++] = (end - start) / 2;
			total++;
		}
	}
	if (!total) {
		printf("mode=%s rounds=0 lost=%ld\n", lat_mode_names[l->mode], lost);
		return 1;
	}
	for (int k = 0; k < LAT_MODES; k++) {
		long n = measured[k];
		if (!n)
			continue;
		qsort(half[k], (size_t)n, sizeof(int64_t), lat_cmp);
		double sum = 0;
		for (long i = 0; i < n; i++)
			sum += (double)half[k][i];
		/* A mix's losses are the run's: they are not told apart. */
		printf("mode=%s%s rounds=%ld lost=%ld avg_us=%.3f p50_us=%.3f p99_us=%.3f p999_us=%.3f",
		       l->mode == LAT_MIX ? "mix-" : "", lat_mode_names[k], n, lost, sum / (double)n / 1000.0,
		       (double)half[k][n / 2] / 1000.0, (double)half[k][(n * 99) / 100] / 1000.0,
		       (double)half[k][(n * 999) / 1000] / 1000.0);
		if (dummy_us)
			printf(" dummies=%ld", dummies);
		if (k == LAT_CB)
			printf(" cb_dropped=%llu", (unsigned long long)l->cb_dropped);
		printf("\n");
	}
	for (int k = 0; k < LAT_MODES; k++)
		free(half[k]);
	return 0;
}

static void lat_usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s -s [-i ADDR] -p PORT [-r recv|cb|zcopy|xtreme|mix] [-b BLOCK] [-x COUNT] [--spin]\n"
		"       %s -c ADDR -p PORT [-r MODE] [-b BLOCK] [-n COUNT] [-m SIZE] [-w WARMUP] [-t SECONDS]\n"
		"          [-g GAP_USEC [-d DUMMY_USEC]] [--spin]\n",
		prog, prog);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "spin", no_argument, NULL, 'S' }, { NULL, 0, NULL, 0 } };
	struct lat l = { .mode = LAT_RECV, .fd = -1, .ring_fd = -1, .block = 100 };
	const char *ip = NULL;
	bool server = false, client = false;
	int port = 0, c;
	long count = 100000, size = 64, warmup = 1000, stop_after = 0, gap_us = 0, dummy_us = 0;
	double seconds = 0;
	while ((c = getopt_long(argc, argv, "sc:i:p:r:n:m:w:t:x:g:d:b:", opts, NULL)) != -1) {
		switch (c) {
		case 's': server = true; break;
		case 'c': client = true; ip = optarg; break;
		case 'i': ip = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'n': count = atol(optarg); break;
		case 'm': size = atol(optarg); break;
		case 'w': warmup = atol(optarg); break;
		case 't': seconds = atof(optarg); break;
		case 'x': stop_after = atol(optarg); break;
		case 'g': gap_us = atol(optarg); break;
		case 'd': dummy_us = atol(optarg); break;
		case 'b': l.block = atol(optarg); break;
		case 'S': l.spin = true; break;
		case 'r': {
			int m;
			for (m = 0; m < LAT_MODES && strcmp(optarg, lat_mode_names[m]); m++)
				;
			if (m == LAT_MODES) {
				lat_usage(argv[0]);
				return 2;
			}
			l.mode = (enum lat_mode)m;
			break;
		}
		default: lat_usage(argv[0]); return 2;
		}
	}
	if (server == client || port <= 0 || port > 65535 || count <= 0 || size < (long)sizeof(uint64_t) ||
	    size > LAT_MAX_SIZE || warmup < 0 || gap_us < 0 || dummy_us < 0 || l.block <= 0 || (l.spin && l.mode != LAT_RECV)) {
		lat_usage(argv[0]);
		return 2;
	}
	/* No SA_RESTART: a blocking receive returns on SIGINT/SIGTERM. */
	struct sigaction sa = { .sa_handler = lat_on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* NULL without libvma: only the recv mode then works. */
	l.api = vma_get_api();
	l.method = l.mode;
	if (server)
		return lat_server(&l, ip, port, stop_after);
	return lat_client(&l, ip, port, count, size, warmup, seconds, gap_us, dummy_us);
}
