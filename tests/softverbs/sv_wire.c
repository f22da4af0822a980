/* softverbs: the wire of a device (one per process, shared by its QPs, so
 * that steering sees each frame once). On a netdev, an AF_PACKET socket that
 * taps every IPv4 frame arriving (with virtio-net headers, so partial
 * checksums and GSO/GRO super-frames can be turned into what a wire
 * carries) and one that transmits with the qdisc bypassed, as a NIC queue
 * does. On a test device, queues in memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "sv_internal.h"

#ifndef VIRTIO_NET_HDR_GSO_UDP_L4
#define VIRTIO_NET_HDR_GSO_UDP_L4 5
#endif

#define SV_RCVBUF (8 << 20)

static long sv_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	return syscall(SYS_setsockopt, fd, level, name, val, len);
}

/* IPv4 TCP and UDP only: everything else is of no interest to a rule. On
 * the link the ingress hook duplicates to (mark != 0), only the frames
 * this process's rules took (marked with its pid, SV_NFT_MARK_PID). */
static int sv_attach_ipv4_filter(int fd, uint32_t mark)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_MARK)),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, SV_NFT_MARK_PID),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, mark, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 4),
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0x40000),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	if (!mark) {   /* the netdev itself: every frame, whatever its mark */
		prog.filter += 4;
		prog.len -= 4;
	}

	return (int)sv_setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
}

static int sv_packet_open(struct sv_device *dev)
{
	int one = 1, rcvbuf = SV_RCVBUF;
	int tap = sv_nft_tap(dev->ifindex, dev->ifname);
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_ifindex = tap ? tap : dev->ifindex };

	/* Protocol 0 until bound: nothing queues from other interfaces. */
	long rx = syscall(SYS_socket, AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (rx < 0)
		return -1;   /* EPERM without CAP_NET_RAW, as a raw QP */
	dev->wire.rx_fd = (int)rx;
	/* On the duplicates' link the frames are outgoing; on the netdev what
	 * we send ourselves is. */
	if (sv_setsockopt((int)rx, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) ||
	    (!tap && sv_setsockopt((int)rx, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one))) ||
	    sv_attach_ipv4_filter((int)rx, tap ? (uint32_t)sv_self_pid() : 0))
		return -1;
	dev->wire.exact = tap != 0;
	if (sv_setsockopt((int)rx, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)))
		sv_setsockopt((int)rx, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	/* A TPACKET_V2 ring: an empty poll is a read of memory, not a system
	 * call, as on a NIC's completion queue. Without it, recvmmsg. */
	int version = TPACKET_V2;
	struct tpacket_req req = { .tp_block_size = SV_RING_BLOCK,
				   .tp_block_nr = SV_RING_FRAMES / (SV_RING_BLOCK / SV_RING_FRAME),
				   .tp_frame_size = SV_RING_FRAME, .tp_frame_nr = SV_RING_FRAMES };
	if (sv_setsockopt((int)rx, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) == 0 &&
	    sv_setsockopt((int)rx, SOL_PACKET, PACKET_COPY_THRESH, &one, sizeof(one)) == 0 &&
	    sv_setsockopt((int)rx, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) == 0) {
		size_t len = (size_t)SV_RING_FRAME * SV_RING_FRAMES;
		void *ring = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, (int)rx, 0);
		if (ring != MAP_FAILED) {
			dev->wire.ring = ring;
			dev->wire.ring_len = len;
			dev->wire.ring_head = 0;
		}
	}
	sll.sll_protocol = htons(ETH_P_ALL);
	if (syscall(SYS_bind, rx, &sll, sizeof(sll)))
		return -1;

	long tx = syscall(SYS_socket, AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (tx < 0)
		return -1;
	dev->wire.tx_fd = (int)tx;
	sll.sll_protocol = 0;   /* transmit only, on the netdev */
	sll.sll_ifindex = dev->ifindex;
	if (sv_setsockopt((int)tx, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) ||
	    syscall(SYS_bind, tx, &sll, sizeof(sll)))
		return -1;
	return 0;
}

int sv_wire_open(struct sv_device *dev)
{
	if (dev->mem) {
		long fd = syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (fd < 0)
			return -1;
		dev->wire.rx_fd = (int)fd;
		return 0;
	}
	if (sv_packet_open(dev) == 0)
		return 0;
	int err = errno;
	sv_wire_close(dev);
	errno = err;
	return -1;
}

void sv_wire_close(struct sv_device *dev)
{
	if (!dev->mem && dev->wire.rx_fd >= 0) {
		struct tpacket_stats st;
		socklen_t len = sizeof(st);
		if (syscall(SYS_getsockopt, dev->wire.rx_fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
			sv_stats.wire_rx_dropped += st.tp_drops;
	}
	if (dev->wire.ring)
		munmap(dev->wire.ring, dev->wire.ring_len);
	dev->wire.ring = NULL;
	sv_sys_close(dev->wire.rx_fd);
	sv_sys_close(dev->wire.tx_fd);
	dev->wire.rx_fd = dev->wire.tx_fd = -1;
	dev->wire.exact = false;
	while (dev->wire.memq_count) {
		free(dev->wire.memq[dev->wire.memq_head].data);
		dev->wire.memq_head = (dev->wire.memq_head + 1) % SV_MEMQ_CAP;
		dev->wire.memq_count--;
	}
	free(dev->wire.scratch);
	dev->wire.scratch = NULL;
}

/* ---- test devices: the wire in memory ---- */

void sv_memwire_inject(struct sv_device *dev, const void *frame, uint32_t len)
{
	if (!dev->wire_users || dev->wire.memq_count == SV_MEMQ_CAP)
		return;   /* nobody on the wire, or the wire's own drop */
	struct sv_frame *f = &dev->wire.memq[(dev->wire.memq_head + dev->wire.memq_count) % SV_MEMQ_CAP];
	f->data = malloc(len ? len : 1);
	if (!f->data)
		return;
	memcpy(f->data, frame, len);
	f->len = len;
	dev->wire.memq_count++;
	sv_sys_eventfd_signal(dev->wire.rx_fd);
}

static void sv_memwire_send(struct sv_device *d, const struct iovec *frames, unsigned count)
{
	for (unsigned i = 0; i < count; i++) {
		if (d->txq_count == SV_MEMQ_CAP) {
			d->tx_dropped++;
		} else {
			struct sv_frame *f = &d->txq[(d->txq_head + d->txq_count) % SV_MEMQ_CAP];
			f->data = malloc(frames[i].iov_len ? frames[i].iov_len : 1);
			if (f->data) {
				memcpy(f->data, frames[i].iov_base, frames[i].iov_len);
				f->len = (uint32_t)frames[i].iov_len;
				d->txq_count++;
			}
		}
		if (d->loopback)
			sv_memwire_inject(d, frames[i].iov_base, (uint32_t)frames[i].iov_len);
	}
}

void sv_wire_send(struct sv_device *dev, const struct iovec *frames, unsigned count)
{
	struct mmsghdr msgs[64];

	if (dev->mem) {
		sv_memwire_send(dev, frames, count);
		return;
	}
	if (count > 64)
		count = 64;
	memset(msgs, 0, sizeof(msgs[0]) * count);
	for (unsigned i = 0; i < count; i++) {
		msgs[i].msg_hdr.msg_iov = (struct iovec *)&frames[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	unsigned sent = 0, tries = 0;
	while (sent < count && tries++ < 8) {
		long n = syscall(SYS_sendmmsg, dev->wire.tx_fd, msgs + sent, count - sent, MSG_DONTWAIT);
		if (n > 0)
			sent += (unsigned)n;
		else if (n < 0 && errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
			sent++;   /* this frame the wire refused: lost, as on a wire */
			sv_stats.wire_tx_dropped++;
		}
	}
	sv_stats.wire_tx_dropped += count - sent;
}

/* ---- checksums and segmentation ---- */

static uint64_t sv_csum_add(uint64_t sum, const uint8_t *p, uint32_t len)
{
	uint32_t i = 0;
	for (; i + 1 < len; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (i < len)
		sum += (uint32_t)p[i] << 8;
	return sum;
}

static uint16_t sv_csum_fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static void sv_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t sv_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void sv_ip_csum(uint8_t *ip, uint32_t ihl)
{
	sv_put16(ip + 10, 0);
	sv_put16(ip + 10, sv_csum_fold(sv_csum_add(0, ip, ihl)));
}

/* The L4 checksum of an IPv4 TCP/UDP segment, computed in full. */
static void sv_l4_csum(uint8_t *ip, uint32_t ihl, uint32_t l4_len, uint8_t proto)
{
	uint8_t *l4 = ip + ihl;
	uint8_t *field = l4 + (proto == IPPROTO_TCP ? 16 : 6);
	uint64_t sum = sv_csum_add(0, ip + 12, 8) + proto + l4_len;

	sv_put16(field, 0);
	uint16_t c = sv_csum_fold(sv_csum_add(sum, l4, l4_len));
	if (proto == IPPROTO_UDP && c == 0)
		c = 0xffff;
	sv_put16(field, c);
}

/* Splits a TCP or UDP super-frame into gso_size pieces, each a frame a
 * wire could carry, with headers and checksums of its own. */
static void sv_segment(struct sv_device *dev, const struct virtio_net_hdr *vh, const uint8_t *data, uint32_t len,
		       void (*deliver)(struct sv_device *, const uint8_t *, uint32_t))
{
	uint8_t gso = vh->gso_type & (uint8_t)~VIRTIO_NET_HDR_GSO_ECN;
	uint16_t mss = vh->gso_size;

	if (len < 14 + 20 || sv_get16(data + 12) != ETH_P_IP || !mss)
		return;
	const uint8_t *ip = data + 14;
	uint32_t ihl = (uint32_t)(ip[0] & 15) * 4;
	uint8_t proto = ip[9];
	if (ihl < 20 || len < 14 + ihl + 8)
		return;
	uint32_t l4h = proto == IPPROTO_TCP ? (uint32_t)(ip[ihl + 12] >> 4) * 4 : 8;
	if ((gso == VIRTIO_NET_HDR_GSO_TCPV4 && proto != IPPROTO_TCP) ||
	    (gso == VIRTIO_NET_HDR_GSO_UDP_L4 && proto != IPPROTO_UDP) || len < 14 + ihl + l4h)
		return;
	uint32_t hdrs = 14 + ihl + l4h, payload = len - hdrs;
	uint16_t id0 = sv_get16(ip + 4);
	uint32_t seq0 = 0;
	if (proto == IPPROTO_TCP)
		seq0 = (uint32_t)ip[ihl + 4] << 24 | (uint32_t)ip[ihl + 5] << 16 | (uint32_t)ip[ihl + 6] << 8 | ip[ihl + 7];
	if (!dev->wire.scratch)
		return;
	uint8_t *seg = dev->wire.scratch + (size_t)SV_RX_BATCH * SV_SCRATCH_SIZE;
	sv_stats.rx_segmented++;
	for (uint32_t off = 0, i = 0; off < payload; off += mss, i++) {
		uint32_t chunk = payload - off < mss ? payload - off : mss;
		bool last = off + chunk >= payload;
		memcpy(seg, data, hdrs);
		memcpy(seg + hdrs, data + hdrs + off, chunk);
		uint8_t *sip = seg + 14, *l4 = sip + ihl;
		sv_put16(sip + 2, (uint16_t)(ihl + l4h + chunk));
		sv_put16(sip + 4, (uint16_t)(id0 + i));
		sv_ip_csum(sip, ihl);
		if (proto == IPPROTO_TCP) {
			uint32_t seq = seq0 + off;
			l4[4] = (uint8_t)(seq >> 24);
			l4[5] = (uint8_t)(seq >> 16);
			l4[6] = (uint8_t)(seq >> 8);
			l4[7] = (uint8_t)seq;
			if (!last)
				l4[13] &= (uint8_t)~0x09;   /* FIN, PSH: the last segment's */
			if (i)
				l4[13] &= (uint8_t)~0x80;   /* CWR: the first segment's */
		} else {
			sv_put16(l4 + 4, (uint16_t)(8 + chunk));
		}
		sv_l4_csum(sip, ihl, l4h + chunk, proto);
		deliver(dev, seg, hdrs + chunk);
	}
}

static void sv_wire_frame(struct sv_device *dev, struct virtio_net_hdr *vh, uint8_t *data, uint32_t len,
			  void (*deliver)(struct sv_device *, const uint8_t *, uint32_t))
{
	uint8_t gso = vh->gso_type & (uint8_t)~VIRTIO_NET_HDR_GSO_ECN;

	if (gso == VIRTIO_NET_HDR_GSO_TCPV4 || gso == VIRTIO_NET_HDR_GSO_UDP_L4) {
		sv_segment(dev, vh, data, len, deliver);
		return;
	}
	if (gso != VIRTIO_NET_HDR_GSO_NONE)
		return;   /* IPv6 or UFO: no rule of ours matches them */
	if ((vh->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) && (uint32_t)vh->csum_start + vh->csum_offset + 2 <= len) {
		/* The sender left its checksum partial (offload): finish it, as
		 * the sending NIC would have. The field holds the pseudo-header
		 * sum. */
		uint8_t *field = data + vh->csum_start + vh->csum_offset;
		uint16_t c = sv_csum_fold(sv_csum_add(0, data + vh->csum_start, len - vh->csum_start));
		if (c == 0 && len > 14 + 9 && data[14 + 9] == IPPROTO_UDP)
			c = 0xffff;
		sv_put16(field, c);
	}
	deliver(dev, data, len);
}

/* The frames the kernel handed over in the ring, in order: each is read
 * and given back (TP_STATUS_KERNEL). */
/* SOFTVERBS_LATE_US=N: report frames that waited longer than N us in the
 * receive ring before a pump took them (a sleeper that was not woken). */
static long sv_late_us(void)
{
	static long late = -2;
	if (late == -2) {
		const char *env = getenv("SOFTVERBS_LATE_US");
		late = env ? atol(env) : -1;
	}
	return late;
}

/* A frame a NIC would receive. Tapping the netdev: one arriving for this
 * host (the kernel says which). Tapping the duplicates of the ingress hook
 * (sv_nft_tap): every one is "outgoing" there, and the destination MAC says
 * whether the NIC would have taken it (ours, or a group address). */
static bool sv_wire_wanted(const struct sv_device *dev, uint8_t pkttype, const uint8_t *frame, uint32_t len)
{
	if (!dev->wire.exact)
		return pkttype != PACKET_OTHERHOST && pkttype != PACKET_OUTGOING;
	return pkttype == PACKET_OUTGOING && len >= 14 && ((frame[0] & 1) || memcmp(frame, dev->mac, 6) == 0);
}

static unsigned sv_ring_receive(struct sv_device *dev, unsigned max,
				void (*deliver)(struct sv_device *, const uint8_t *, uint32_t))
{
	unsigned taken = 0;

	while (taken < max) {
		struct tpacket2_hdr *h = (struct tpacket2_hdr *)(dev->wire.ring + (size_t)dev->wire.ring_head * SV_RING_FRAME);
		uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
		if (!(status & TP_STATUS_USER))
			break;
		const struct sockaddr_ll *from =
			(const struct sockaddr_ll *)((uint8_t *)h + TPACKET_ALIGN(sizeof(struct tpacket2_hdr)));
		uint8_t *data = (uint8_t *)h + h->tp_mac;
		bool wanted = sv_wire_wanted(dev, from->sll_pkttype, data, h->tp_snaplen);
		if (sv_late_us() >= 0) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			long waited = (long)(now.tv_sec - h->tp_sec) * 1000000 + (now.tv_nsec - (long)h->tp_nsec) / 1000;
			if (waited > sv_late_us())
				sv_warn("%s: a frame waited %ld us in the receive ring until %ld.%06ld",
					dev->ibdev.name, waited, (long)now.tv_sec, now.tv_nsec / 1000);
		}
		if (status & TP_STATUS_COPY) {
			/* Too long for a slot: the whole frame waits on the socket. */
			struct virtio_net_hdr vh;
			struct iovec iov[2] = { { .iov_base = &vh, .iov_len = sizeof(vh) },
						{ .iov_base = dev->wire.scratch, .iov_len = SV_SCRATCH_SIZE } };
			struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
			long got = syscall(SYS_recvmsg, dev->wire.rx_fd, &msg, MSG_DONTWAIT);
			if (wanted && got > (long)sizeof(vh) && !(msg.msg_flags & MSG_TRUNC))
				sv_wire_frame(dev, &vh, dev->wire.scratch, (uint32_t)(got - (long)sizeof(vh)), deliver);
		} else if (wanted && h->tp_snaplen == h->tp_len && h->tp_mac >= sizeof(struct virtio_net_hdr)) {
			struct virtio_net_hdr vh;
			memcpy(&vh, data - sizeof(vh), sizeof(vh));
			sv_wire_frame(dev, &vh, data, h->tp_snaplen, deliver);
		}
		__atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
		dev->wire.ring_head = (dev->wire.ring_head + 1) % SV_RING_FRAMES;
		taken++;
	}
	return taken;
}

unsigned sv_wire_receive(struct sv_device *dev, unsigned max,
			 void (*deliver)(struct sv_device *, const uint8_t *, uint32_t))
{
	unsigned taken = 0;

	if (dev->mem) {
		while (taken < max && dev->wire.memq_count) {
			struct sv_frame f = dev->wire.memq[dev->wire.memq_head];
			dev->wire.memq_head = (dev->wire.memq_head + 1) % SV_MEMQ_CAP;
			dev->wire.memq_count--;
			deliver(dev, f.data, f.len);
			free(f.data);
			taken++;
		}
		if (!dev->wire.memq_count)
			sv_sys_eventfd_drain(dev->wire.rx_fd);
		return taken;
	}
	if (dev->wire.rx_fd < 0)
		return 0;
	if (!dev->wire.scratch) {
		/* SV_RX_BATCH receive slots and one for segments. */
		dev->wire.scratch = malloc((size_t)(SV_RX_BATCH + 1) * SV_SCRATCH_SIZE);
		if (!dev->wire.scratch)
			return 0;
	}
	if (dev->wire.ring)
		return sv_ring_receive(dev, max, deliver);
	while (taken < max) {
		struct mmsghdr msgs[SV_RX_BATCH];
		struct iovec iov[SV_RX_BATCH][2];
		struct virtio_net_hdr vh[SV_RX_BATCH];
		struct sockaddr_ll from[SV_RX_BATCH];
		unsigned batch = max - taken < SV_RX_BATCH ? max - taken : SV_RX_BATCH;

		memset(msgs, 0, sizeof(msgs[0]) * batch);
		for (unsigned i = 0; i < batch; i++) {
			iov[i][0] = (struct iovec){ .iov_base = &vh[i], .iov_len = sizeof(vh[i]) };
			iov[i][1] = (struct iovec){ .iov_base = dev->wire.scratch + (size_t)i * SV_SCRATCH_SIZE,
						    .iov_len = SV_SCRATCH_SIZE };
			msgs[i].msg_hdr.msg_iov = iov[i];
			msgs[i].msg_hdr.msg_iovlen = 2;
			msgs[i].msg_hdr.msg_name = &from[i];
			msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
		}
		long n = syscall(SYS_recvmmsg, dev->wire.rx_fd, msgs, batch, MSG_DONTWAIT, NULL);
		if (n <= 0)
			break;
		for (long i = 0; i < n; i++) {
			uint32_t got = msgs[i].msg_len;
			taken++;
			if (got < sizeof(vh[i]) || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ||
			    !sv_wire_wanted(dev, from[i].sll_pkttype, iov[i][1].iov_base, got - (uint32_t)sizeof(vh[i])))
				continue;
			sv_wire_frame(dev, &vh[i], iov[i][1].iov_base, got - (uint32_t)sizeof(vh[i]), deliver);
		}
		if ((unsigned)n < batch)
			break;
	}
	return taken;
}

static void (*sv_test_out)(const uint8_t *, uint32_t, void *);
static void *sv_test_arg;
static int sv_test_count;

static void sv_test_deliver(struct sv_device *dev, const uint8_t *data, uint32_t len)
{
	(void)dev;
	sv_test_count++;
	sv_test_out(data, len, sv_test_arg);
}

SV_EXPORT int softverbs_test_wire_frame(const struct softverbs_vnet *vnet, const void *frame, uint32_t len,
					void (*out)(const uint8_t *, uint32_t, void *), void *arg)
{
	struct sv_device dev;
	struct virtio_net_hdr vh = { .flags = vnet->flags, .gso_type = vnet->gso_type, .gso_size = vnet->gso_size,
				     .csum_start = vnet->csum_start, .csum_offset = vnet->csum_offset };
	uint8_t *copy = malloc(len);

	memset(&dev, 0, sizeof(dev));
	dev.wire.scratch = malloc((size_t)(SV_RX_BATCH + 1) * SV_SCRATCH_SIZE);
	if (!copy || !dev.wire.scratch) {
		free(copy);
		free(dev.wire.scratch);
		return -1;
	}
	memcpy(copy, frame, len);
	pthread_mutex_lock(&sv_lock);
	sv_test_out = out;
	sv_test_arg = arg;
	sv_test_count = 0;
	sv_wire_frame(&dev, &vh, copy, len, sv_test_deliver);
	int n = sv_test_count;
	pthread_mutex_unlock(&sv_lock);
	free(copy);
	free(dev.wire.scratch);
	return n;
}
