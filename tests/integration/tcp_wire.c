/* TCP on the wire, compared with the kernel's (tests/integration/tcp_wire.sh).
 *   tcp_wire peer IFACE PEER_IP TEST_IP   (kernel sockets, peer namespace)
 *   tcp_wire test PEER_IP TEST_IP         (the side under test: kernel or libvma)
 * The peer captures every frame of IFACE with an AF_PACKET socket while the
 * test side runs fixed scenarios, one TCP port each; at the end it prints
 * what the test side did on the wire as "METRIC name value" lines, which the
 * script compares between a kernel run and a libvma run:
 *   9701 the test connects: its SYN's options (window scale, timestamps,
 *        SACK, MSS) and ECN bits;
 *   9702 the same with SO_RCVBUF 65536 set before connect (window scale);
 *   9703 the peer (net.ipv4.tcp_ecn=1, its namespace marks CE on what the
 *        test sends here) connects: the test's SYN-ACK options and ECE, ECT(0)
 *        on its data, its CWR after the peer's ECE;
 *   9704 the peer sends 64 KiB: pure ACKs the test sends before the 11th
 *        data segment (quick-ACK mode at the connection start);
 *   9705 the peer sends 8 MiB: the largest window the test offers (receive
 *        auto-tuning);
 *   9706 TCP_USER_TIMEOUT 1000 ms, the peer's namespace drops the data: the
 *        test's first retransmission time, its error and when it came;
 *   9707 the test sends 2 MiB, the peer's namespace drops its 100th data
 *        packet: segments the test resends, how long after the loss, how
 *        many ACKs it waited for (loss recovery: RACK, PRR);
 *   9708 the test writes 10 segments and waits for a 1-byte answer, the
 *        peer's namespace drops the 9th and 10th: the tail loss probe (which
 *        segment, how long after the last one), then the other resent on
 *        its SACK (RACK), and the time to the answer;
 *   9710 TCP_CORK as nginx sends each response of a kept-alive connection:
 *        cork, a 234-byte header, a 6-byte body, uncork, then the peer's
 *        1-byte answer, 3 times: the test's data segments (one per response)
 *        and the time the 3 took (Nagle alone holds each body behind its
 *        header until the peer's delayed ACK); then corked 10 bytes pushed
 *        by setting TCP_NODELAY (the time to the peer's answer);
 *   9709 end of the run.
 * The test side prints its own METRIC lines (errors, times). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PORT_SYN 9701
#define PORT_SYN_RCVBUF 9702
#define PORT_ECN 9703
#define PORT_QUICKACK 9704
#define PORT_DRS 9705
#define PORT_USER_TIMEOUT 9706
#define PORT_RECOVERY 9707
#define PORT_TAIL 9708
#define PORT_DONE 9709
#define PORT_CORK 9710
#define CORK_ROUNDS 3
#define RECOVERY_BYTES (2u << 20)
#define TAIL_SEGS 10u
#define ECN_BYTES (1u << 20)
#define QUICKACK_BYTES (64u << 10)
#define DRS_BYTES (8u << 20)

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* ---- capture (peer side) ---- */

struct pkt {
	double t;
	uint32_t src;                    /* network order */
	uint16_t sport, dport;
	uint32_t seq, ack;
	uint8_t flags, ip_ecn;
	uint16_t wnd, len;
	int8_t wscale;                   /* -1: no option */
	uint8_t ts, sackok;
	uint16_t mss;
	uint32_t sack_l, sack_r;         /* the first SACK block, 0 0: none */
};

#define PKT_MAX 400000
static struct pkt *pkts;
static volatile unsigned npkts;
static volatile int capture_stop;
static int cap_fd = -1;

static void *capture_loop(void *arg)
{
	(void)arg;
	uint8_t f[2048];
	while (!capture_stop) {
		struct pollfd p = { .fd = cap_fd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		/* The kernel's receive time of the frame, not the time this
		 * thread got to it: a capture thread descheduled on a loaded
		 * host bunched 2.9 ms of frames into one instant and made a
		 * prompt retransmission look late. */
		char ctl[CMSG_SPACE(sizeof(struct timespec))];
		struct iovec iov = { .iov_base = f, .iov_len = sizeof(f) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
		ssize_t n = recvmsg(cap_fd, &mh, MSG_DONTWAIT);
		double t = now_ms();
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n > 0 && c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
				struct timespec ts;
				memcpy(&ts, CMSG_DATA(c), sizeof(ts));
				t = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
			}
		if (n < 14 + 20 + 20 || f[12] != 0x08 || f[13] != 0x00)
			continue;
		const uint8_t *ip = f + 14;
		unsigned ihl = (ip[0] & 15u) * 4;
		if (ip[9] != IPPROTO_TCP || n < (ssize_t)(14 + ihl + 20))
			continue;
		const uint8_t *th = ip + ihl;
		unsigned thl = (th[12] >> 4) * 4u;
		unsigned iplen = (unsigned)ip[2] << 8 | ip[3];
		if (thl < 20 || n < (ssize_t)(14 + ihl + thl) || npkts >= PKT_MAX)
			continue;
		struct pkt *k = &pkts[npkts];
		memset(k, 0, sizeof(*k));
		k->t = t;
		memcpy(&k->src, ip + 12, 4);
		k->sport = (uint16_t)(th[0] << 8 | th[1]);
		k->dport = (uint16_t)(th[2] << 8 | th[3]);
		k->seq = (uint32_t)th[4] << 24 | (uint32_t)th[5] << 16 | (uint32_t)th[6] << 8 | th[7];
		k->ack = (uint32_t)th[8] << 24 | (uint32_t)th[9] << 16 | (uint32_t)th[10] << 8 | th[11];
		k->flags = th[13];
		k->ip_ecn = ip[1] & 3;
		k->wnd = (uint16_t)(th[14] << 8 | th[15]);
		k->len = (uint16_t)(iplen - ihl - thl);
		k->wscale = -1;
		for (unsigned i = 20; i < thl;) {
			uint8_t kind = th[i];
			if (kind == 0)
				break;
			if (kind == 1) {
				i++;
				continue;
			}
			if (i + 1 >= thl || th[i + 1] < 2 || i + th[i + 1] > thl)
				break;
			if (kind == 2 && th[i + 1] == 4)
				k->mss = (uint16_t)(th[i + 2] << 8 | th[i + 3]);
			else if (kind == 3 && th[i + 1] == 3)
				k->wscale = (int8_t)th[i + 2];
			else if (kind == 4)
				k->sackok = 1;
			else if (kind == 8)
				k->ts = 1;
			else if (kind == 5 && th[i + 1] >= 10) {
				const uint8_t *b = th + i + 2;
				k->sack_l = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
				k->sack_r = (uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 8 | b[7];
			}
			i += th[i + 1];
		}
		npkts = npkts + 1;
	}
	return NULL;
}

static uint32_t test_addr;

/* From the test side, on its port `port` (local or remote). */
static int from_test(const struct pkt *k, int port)
{
	return k->src == test_addr && (k->sport == port || k->dport == port);
}

static int to_test(const struct pkt *k, int port)
{
	return k->src != test_addr && (k->sport == port || k->dport == port);
}

#define TCP_F_FIN 0x01
#define TCP_F_SYN 0x02
#define TCP_F_ACK 0x10
#define TCP_F_ECE 0x40
#define TCP_F_CWR 0x80

static void metric(const char *name, double v)
{
	printf("METRIC %s %.0f\n", name, v);
}

static void syn_metrics(const char *prefix, int port, int synack)
{
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (!from_test(k, port) || !(k->flags & TCP_F_SYN) || !!(k->flags & TCP_F_ACK) != synack)
			continue;
		char n[64];
		snprintf(n, sizeof(n), "%s_wscale", prefix);
		metric(n, k->wscale);
		snprintf(n, sizeof(n), "%s_timestamps", prefix);
		metric(n, k->ts);
		snprintf(n, sizeof(n), "%s_sackok", prefix);
		metric(n, k->sackok);
		snprintf(n, sizeof(n), "%s_mss", prefix);
		metric(n, k->mss);
		snprintf(n, sizeof(n), "%s_ece_cwr", prefix);
		metric(n, (k->flags & (TCP_F_ECE | TCP_F_CWR)) >> 6);
		return;
	}
	printf("INFO: no %s from the test side on port %d\n", synack ? "SYN-ACK" : "SYN", port);
}

/* Data segments from the test on port that resend bytes sent before
 * (below the highest end seen): count, and the first one's index. */
static unsigned rexmits(int port, unsigned *first_idx, uint32_t *seq0)
{
	unsigned n = 0;
	uint32_t high = 0;
	int any = 0;
	*first_idx = npkts;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (!from_test(k, port) || !k->len)
			continue;
		if (!any) {
			*seq0 = k->seq;
			high = k->seq;
			any = 1;
		}
		if ((int32_t)(k->seq - high) < 0) {
			if (!n)
				*first_idx = i;
			n++;
		}
		if ((int32_t)(k->seq + k->len - high) > 0)
			high = k->seq + k->len;
	}
	return n;
}

/* 9707: one data packet dropped in 2 MiB */
static void recovery_metrics(void)
{
	unsigned first, acks = 0;
	uint32_t seq0 = 0;
	unsigned n = rexmits(PORT_RECOVERY, &first, &seq0);
	double t_lost = -1, t_re = first < npkts ? pkts[first].t : -1;
	if (first < npkts) {
		/* the original of the first retransmission, and the ACKs between */
		for (unsigned i = 0; i < first; i++) {
			const struct pkt *k = &pkts[i];
			if (from_test(k, PORT_RECOVERY) && k->len && k->seq == pkts[first].seq && t_lost < 0)
				t_lost = k->t;
			else if (t_lost >= 0 && to_test(k, PORT_RECOVERY) && !k->len)
				acks++;
		}
	}
	printf("INFO: recovery: %u segments resent, the first %.2f ms after its original, %u ACKs between\n", n,
	       t_lost >= 0 ? t_re - t_lost : -1, acks);
	metric("recovery_rexmits", n);
	metric("recovery_delay_us", t_lost >= 0 ? (t_re - t_lost) * 1000 : -1);
	metric("recovery_acks_before", acks);
}

/* 9708: the last two of ten segments dropped */
static void tail_metrics(void)
{
	unsigned first;
	uint32_t seq0 = 0;
	unsigned n = rexmits(PORT_TAIL, &first, &seq0);
	double t_last = -1;
	uint32_t probe_seq = first < npkts ? pkts[first].seq - seq0 : 0;
	for (unsigned i = 0; i < first && first < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (from_test(k, PORT_TAIL) && k->len)
			t_last = k->t;
	}
	double probe_ms = t_last >= 0 ? pkts[first].t - t_last : -1;
	printf("INFO: tail loss: %u segments resent, the first at +%u (bytes) %.2f ms after the last segment\n", n,
	       probe_seq, probe_ms);
	metric("tail_rexmits", n);
	metric("tail_probe_is_last", first < npkts && probe_seq == (TAIL_SEGS - 1) * pkts[first].len);
	metric("tail_probe_us", probe_ms * 1000);
}

/* TCP_WIRE_DUMP=PORT: every captured frame of that port on stderr, times
 * from the first, sequence numbers from the test side's first data byte,
 * for reading a failed comparison by eye. */
static void dump_port(int port)
{
	double t0 = -1;
	uint32_t tseq = 0, pseq = 0;
	int tany = 0, pany = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		int out = from_test(k, port);
		if (!out && !to_test(k, port))
			continue;
		if (t0 < 0)
			t0 = k->t;
		if (out && !tany && !(k->flags & TCP_F_SYN)) {
			tseq = k->seq;
			tany = 1;
		}
		if (!out && !pany && !(k->flags & TCP_F_SYN)) {
			pseq = k->seq;
			pany = 1;
		}
		uint32_t base = out ? tseq : pseq, abase = out ? pseq : tseq;
		fprintf(stderr, "DUMP %9.3f %s seq %u len %u ack %u fl %02x wnd %u", k->t - t0, out ? "T>" : "<P",
		        k->seq - base, k->len, k->ack - abase, k->flags, k->wnd);
		if (k->sack_l || k->sack_r)
			fprintf(stderr, " sack %u-%u", k->sack_l - abase, k->sack_r - abase);
		fprintf(stderr, "\n");
	}
}

static void analyse(void)
{
	const char *d = getenv("TCP_WIRE_DUMP");
	if (d)
		dump_port(atoi(d));
	syn_metrics("syn", PORT_SYN, 0);
	syn_metrics("syn_rcvbuf65536", PORT_SYN_RCVBUF, 0);
	syn_metrics("synack_ecn_peer", PORT_ECN, 1);

	/* ECN: the test's data segments on 9703, ECT(0) and CWR; the peer's ECE */
	unsigned data = 0, ect0 = 0, cwr = 0, ece = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (from_test(k, PORT_ECN) && k->len) {
			data++;
			ect0 += k->ip_ecn == 2;
			cwr += !!(k->flags & TCP_F_CWR);
		} else if (to_test(k, PORT_ECN) && (k->flags & TCP_F_ECE) && !(k->flags & TCP_F_SYN)) {
			ece++;
		}
	}
	printf("INFO: ECN: %u data segments from the test, %u ECT(0), %u with CWR; %u ECE from the peer\n", data, ect0,
	       cwr, ece);
	metric("ecn_data_all_ect0", data && ect0 * 100 >= data * 95);
	metric("ecn_peer_echoed_ece", ece > 0);
	metric("ecn_cwr_sent", cwr > 0);

	/* Quick ACKs: pure ACKs from the test for the first 10 segments of data
	 * (counted in bytes: the peer's capture sees its GSO frames whole) */
	unsigned acks = 0;
	uint32_t seq0 = 0, mss = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (to_test(k, PORT_QUICKACK) && (k->flags & TCP_F_SYN))
			mss = k->mss;
		if (to_test(k, PORT_QUICKACK) && k->len && !seq0)
			seq0 = k->seq;
		if (seq0 && mss && from_test(k, PORT_QUICKACK) && !k->len && k->flags == TCP_F_ACK &&
		    (int32_t)(k->ack - seq0) > 0 && k->ack - seq0 <= 10u * (mss - 12))
			acks++;
	}
	metric("quickack_acks_first10", acks);

	/* Auto-tuning: the largest window the test offered on 9705 */
	int ws = 0;
	double maxwin = 0, t0 = 0, t_half = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (!from_test(k, PORT_DRS))
			continue;
		if (k->flags & TCP_F_SYN) {
			ws = k->wscale > 0 ? k->wscale : 0;
			t0 = k->t;
			continue;
		}
		double w = (double)k->wnd * (1u << ws);
		if (w > maxwin)
			maxwin = w;
		if (!t_half && w >= 1 << 20)
			t_half = k->t;
	}
	printf("INFO: auto-tuning: largest window %.0f, 1 MiB reached after %.0f ms\n", maxwin,
	       t_half ? t_half - t0 : -1);
	metric("drs_max_window", maxwin);

	/* TCP_USER_TIMEOUT: the test's data segments on 9706 */
	double first = 0, second = 0;
	unsigned sent = 0;
	seq0 = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (!from_test(k, PORT_USER_TIMEOUT) || !k->len)
			continue;
		if (!sent) {
			first = k->t;
			seq0 = k->seq;
		} else if (!second && k->seq == seq0) {
			second = k->t;
		}
		sent++;
	}
	metric("user_timeout_first_rexmit_ms", second ? second - first : -1);
	metric("user_timeout_data_segments", sent);
	recovery_metrics();
	tail_metrics();

	/* TCP_CORK: the test's data segments on 9710 and their sizes */
	unsigned cork_segs = 0, cork_240 = 0;
	for (unsigned i = 0; i < npkts; i++) {
		const struct pkt *k = &pkts[i];
		if (from_test(k, PORT_CORK) && k->len) {
			cork_segs++;
			cork_240 += k->len == 240;
		}
	}
	printf("INFO: cork: %u data segments, %u of 240 bytes\n", cork_segs, cork_240);
	metric("cork_segments", cork_segs);
	metric("cork_whole_responses", cork_240);
	printf("INFO: captured %u frames\n", npkts);
}

/* ---- peer ---- */

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = sin_of("0.0.0.0", port);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16)) {
		perror("peer listen");
		exit(1);
	}
	return fd;
}

static void drain_close(int fd)
{
	char b[65536];
	while (read(fd, b, sizeof(b)) > 0)
		;
	close(fd);
}

static void send_close(int fd, size_t n)
{
	static char b[65536];
	memset(b, 'p', sizeof(b));
	while (n) {
		ssize_t w = write(fd, b, n < sizeof(b) ? n : sizeof(b));
		if (w <= 0)
			break;
		n -= (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	drain_close(fd);
}

struct peer_job { int fd, port; };

static void *peer_conn(void *arg)
{
	struct peer_job *j = arg;
	switch (j->port) {
	case PORT_QUICKACK:
		send_close(j->fd, QUICKACK_BYTES);
		break;
	case PORT_DRS:
		send_close(j->fd, DRS_BYTES);
		break;
	case PORT_CORK: {
		/* a 1-byte answer to each 240-byte response, and to the 10
		 * pushed bytes */
		static char b[4096];
		size_t got = 0, answered = 0;
		ssize_t r;
		while ((r = read(j->fd, b, sizeof(b))) > 0) {
			got += (size_t)r;
			size_t due = got >= CORK_ROUNDS * 240u ? CORK_ROUNDS + (got >= CORK_ROUNDS * 240u + 10) : got / 240;
			for (; answered < due; answered++)
				if (write(j->fd, "a", 1) != 1)
					break;
		}
		close(j->fd);
		break;
	}
	case PORT_TAIL: {
		/* the 10 segments, then a 1-byte answer */
		static char b[65536];
		size_t got = 0;
		ssize_t r;
		while (got < TAIL_SEGS * 1448 && (r = read(j->fd, b, sizeof(b))) > 0)
			got += (size_t)r;
		send_close(j->fd, 1);
		break;
	}
	default:
		drain_close(j->fd);
	}
	free(j);
	return NULL;
}

static void *peer_ecn_client(void *arg)
{
	const char *test_ip = arg;
	for (int i = 0; i < 300; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = sin_of(test_ip, PORT_ECN);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			drain_close(fd);
			return NULL;
		}
		close(fd);
		usleep(100000);
	}
	return NULL;
}

static int run_peer(const char *ifname, const char *test_ip)
{
	pkts = calloc(PKT_MAX, sizeof(*pkts));
	inet_pton(AF_INET, test_ip, &test_addr);
	cap_fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (cap_fd < 0 || !pkts) {
		perror("capture socket");
		return 1;
	}
	int big = 32 << 20;
	setsockopt(cap_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	/* frame times from the kernel (CLOCK_REALTIME: only their differences
	 * are used) */
	int on = 1;
	if (setsockopt(cap_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)))
		perror("SO_TIMESTAMPNS (frame times are the capture thread's)");
	struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
				  .sll_ifindex = (int)if_nametoindex(ifname) };
	if (!ll.sll_ifindex || bind(cap_fd, (struct sockaddr *)&ll, sizeof(ll))) {
		perror("capture bind");
		return 1;
	}
	pthread_t cap, ecn;
	pthread_create(&cap, NULL, capture_loop, NULL);
	static const int ports[] = { PORT_SYN, PORT_SYN_RCVBUF, PORT_QUICKACK, PORT_DRS, PORT_USER_TIMEOUT,
				     PORT_RECOVERY, PORT_TAIL, PORT_CORK, PORT_DONE };
	enum { NPORTS = sizeof(ports) / sizeof(ports[0]) };
	struct pollfd pf[NPORTS];
	for (int i = 0; i < NPORTS; i++)
		pf[i] = (struct pollfd){ .fd = listen_on(ports[i]), .events = POLLIN };
	pthread_create(&ecn, NULL, peer_ecn_client, (void *)test_ip);
	printf("peer ready\n");
	fflush(stdout);
	for (;;) {
		if (poll(pf, NPORTS, 1000) <= 0)
			continue;
		for (int i = 0; i < NPORTS; i++) {
			if (!(pf[i].revents & POLLIN))
				continue;
			int fd = accept(pf[i].fd, NULL, NULL);
			if (fd < 0)
				continue;
			if (ports[i] == PORT_DONE) {
				close(fd);
				usleep(300000);   /* the last frames reach the capture */
				capture_stop = 1;
				pthread_join(cap, NULL);
				analyse();
				fflush(stdout);
				_exit(0);
			}
			struct peer_job *j = malloc(sizeof(*j));
			j->fd = fd;
			j->port = ports[i];
			pthread_t t;
			pthread_create(&t, NULL, peer_conn, j);
			pthread_detach(t);
		}
	}
}

/* ---- test side ---- */

static const char *peer_ip;

static int connect_to(int port, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	struct sockaddr_in a = sin_of(peer_ip, port);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		printf("FAIL: connect to %d: %s\n", port, strerror(errno));
		exit(1);
	}
	return fd;
}

static size_t read_all(int fd)
{
	static char b[1 << 16];
	size_t got = 0;
	ssize_t r;
	while ((r = read(fd, b, sizeof(b))) > 0)
		got += (size_t)r;
	return got;
}

static void write_all(int fd, size_t n)
{
	static char b[65536];
	memset(b, 't', sizeof(b));
	while (n) {
		ssize_t w = write(fd, b, n < sizeof(b) ? n : sizeof(b));
		if (w <= 0)
			break;
		n -= (size_t)w;
	}
}

static void write_exact(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			break;
		p += w;
		n -= (size_t)w;
	}
}

static void short_exchange(int port, int rcvbuf)
{
	int fd = connect_to(port, rcvbuf);
	write_all(fd, 1);
	shutdown(fd, SHUT_WR);
	read_all(fd);
	close(fd);
}

static int run_test(const char *test_ip)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = sin_of(test_ip, PORT_ECN);
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 4)) {
		printf("FAIL: listen on %d: %s\n", PORT_ECN, strerror(errno));
		return 1;
	}
	short_exchange(PORT_SYN, 0);
	short_exchange(PORT_SYN_RCVBUF, 65536);

	int fd = accept(lfd, NULL, NULL);
	write_all(fd, ECN_BYTES);
	shutdown(fd, SHUT_WR);
	read_all(fd);
	close(fd);
	close(lfd);

	fd = connect_to(PORT_QUICKACK, 0);
	size_t got = read_all(fd);
	close(fd);
	printf("METRIC quickack_bytes %zu\n", got);

	fd = connect_to(PORT_DRS, 0);
	double t0 = now_ms();
	got = read_all(fd);
	double dt = now_ms() - t0;
	close(fd);
	printf("METRIC drs_bytes %zu\nMETRIC drs_read_us %.0f\nINFO: 8 MiB received in %.0f ms\n", got, dt * 1000, dt);

	fd = connect_to(PORT_USER_TIMEOUT, 0);
	int ut = 1000;
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	usleep(100000);
	t0 = now_ms();
	write_all(fd, 2000);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	poll(&p, 1, 5000);
	dt = now_ms() - t0;
	int err = 0;
	socklen_t el = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	char b[16];
	ssize_t r = read(fd, b, sizeof(b));
	int rerr = r < 0 ? errno : 0;
	printf("METRIC user_timeout_etimedout %d\n", err == ETIMEDOUT || rerr == ETIMEDOUT);
	printf("METRIC user_timeout_error_ms %.0f\n", dt);
	printf("INFO: user timeout: SO_ERROR %s, read %zd (%s) after %.0f ms\n", strerror(err), r, strerror(rerr), dt);
	close(fd);

	/* loss recovery: 2 MiB with one packet dropped */
	fd = connect_to(PORT_RECOVERY, 0);
	t0 = now_ms();
	write_all(fd, RECOVERY_BYTES);
	shutdown(fd, SHUT_WR);
	read_all(fd);
	printf("INFO: 2 MiB with a loss sent in %.1f ms\n", now_ms() - t0);
	close(fd);

	/* a lost tail: 10 segments, the answer once the last two are resent */
	fd = connect_to(PORT_TAIL, 0);
	int mss = 0;
	socklen_t ml = sizeof(mss);
	getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
	usleep(50000);
	t0 = now_ms();
	write_all(fd, TAIL_SEGS * 1448);
	r = read(fd, b, 1);
	dt = now_ms() - t0;
	printf("METRIC tail_answer_ms %.0f\nINFO: tail: MSS %d, answer (%zd) after %.1f ms\n", dt, mss, r, dt);
	close(fd);

	/* TCP_CORK around each response, then TCP_NODELAY's push */
	fd = connect_to(PORT_CORK, 0);
	static const char header[234] = "HTTP/1.1 200 OK";
	int zero = 0;
	usleep(50000);
	t0 = now_ms();
	for (int i = 0; i < CORK_ROUNDS; i++) {
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
		write_exact(fd, header, sizeof(header));
		write_exact(fd, "hello\n", 6);
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
		r = read(fd, b, 1);
	}
	dt = now_ms() - t0;
	printf("METRIC cork_rounds_ms %.1f\nINFO: cork: %d responses answered in %.1f ms\n", dt, CORK_ROUNDS, dt);
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
	socklen_t cl = sizeof(int);
	int corked = 0;
	getsockopt(fd, IPPROTO_TCP, TCP_CORK, &corked, &cl);
	printf("METRIC cork_getsockopt %d\n", corked);
	t0 = now_ms();
	write_exact(fd, "0123456789", 10);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = read(fd, b, 1);
	dt = now_ms() - t0;
	printf("METRIC cork_nodelay_push_ms %.1f\nINFO: cork: 10 corked bytes pushed by TCP_NODELAY, answered in %.1f ms\n",
	       dt, dt);
	close(fd);

	fd = connect_to(PORT_DONE, 0);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "peer")) {
		peer_ip = argv[3];
		return run_peer(argv[2], argv[4]);
	}
	if (argc == 4 && !strcmp(argv[1], "test")) {
		peer_ip = argv[2];
		return run_test(argv[3]);
	}
	fprintf(stderr, "usage: %s peer IFACE PEER_IP TEST_IP | test PEER_IP TEST_IP\n", argv[0]);
	return 2;
}
