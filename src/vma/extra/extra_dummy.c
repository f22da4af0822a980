/* Dummy sends (docs/extra_api.md, "Dummy send"): send(), sendto(),
 * sendmsg() and sendmmsg() with VMA_SND_FLAGS_DUMMY walk the send path of
 * an offloaded socket -- a TX frame of its ring, the headers, the payload
 * copy, the checksums -- and give the frame back to the ring's pool instead
 * of posting it: nothing reaches the wire, the caches stay warm for the
 * next real send, and the socket's "Tx dummy" counter counts it.
 *
 * libvma posts a NOP descriptor that the NIC drops (on ConnectX-4 and
 * later); an AF_XDP ring has no such descriptor, and a frame posted to it
 * would leave, so the frame never reaches the TX ring here.
 *
 * Any other fd (a kernel socket, the kernel path of an offloaded socket)
 * answers -1 with EINVAL, as libvma does: a dummy is never sent for real. */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/ip.h>

#include "engine/engine.h"
#include "extra/extra.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_tcp_internal.h"
#include "sock/sock_udp_internal.h"
#include "stack/stack_csum.h"

/* What libvma's getsockname() trigger sends (VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME). */
#define EXTRA_DUMMY_GETSOCKNAME_BYTES 264
#define EXTRA_TCP_TS_OPT_LEN 12u
#define EXTRA_TCP_HLEN 20u
#define EXTRA_TCP_CSUM_OFF 16u

static struct ring_buf *extra_dummy_tx_alloc(void *arg)
{
	const struct extra_dummy_netif *d = arg;
	return d->real->tx_alloc(d->real->ctx);
}

static int extra_dummy_tx_send(void *arg, struct ring_buf *frame)
{
	struct extra_dummy_netif *d = arg;
	/* Built whole, then back to the pool: the ring never sees it. */
	ring_buf_free(frame);
	d->frames++;
	return 0;
}

const struct stack_netif *extra_dummy_netif(struct extra_dummy_netif *d, const struct stack_netif *real)
{
	*d = (struct extra_dummy_netif){ .nif = *real, .real = real };
	d->nif.ctx = d;
	d->nif.tx_alloc = extra_dummy_tx_alloc;
	d->nif.tx_send = extra_dummy_tx_send;
	return &d->nif;
}

bool extra_dummy_fd_ok(const struct sock_obj *obj)
{
	return obj && (obj->ops == &sock_udp_ops || obj->ops == &sock_tcp_offload_ops);
}

/* ---- TCP ---- */

/* Lock held. The Ethernet, IPv4 and TCP headers of the segment the
 * connection would send next with len bytes, written at p; returns the
 * header length. The destination MAC is the neighbour's when the
 * neighbour table has it now (never waited for: the frame goes nowhere). */
static uint32_t extra_tcp_dummy_headers(struct sock_tcp *s, struct sock_offload *ctx, const struct tcp_pcb_info *info,
					uint8_t *p, uint32_t len)
{
	const struct stack_netif *nif = &ctx->ifs[s->if_slot].nif;
	uint8_t mac[6] = { 0 };
	struct net_route_query q = { .dst = s->remote_ip };
	struct net_route_result r;
	if (net_route_lookup(ctx->net, &q, &r) == 0)
		net_neigh_resolve(ctx->net, r.ifindex, r.next_hop, mac, 0);
	memcpy(p, mac, 6);
	memcpy(p + 6, nif->mac, 6);
	p[12] = 0x08;
	p[13] = 0x00;
	uint32_t opt = info->ts_ok ? EXTRA_TCP_TS_OPT_LEN : 0;
	uint32_t tcp_len = EXTRA_TCP_HLEN + opt;
	struct iphdr ip = {
		.version = 4, .ihl = 5,
		.tot_len = htons((uint16_t)(20 + tcp_len + len)),
		.frag_off = htons(IP_DF),
		.ttl = 64,
		.protocol = IPPROTO_TCP,
		.saddr = s->local_ip,
		.daddr = s->remote_ip,
	};
	ip.check = stack_csum_finish(stack_csum_add(0, &ip, sizeof(ip)));
	memcpy(p + 14, &ip, sizeof(ip));
	/* RFC 793's header, written by byte (netinet/tcp.h would clash with
	 * the engine's state names). */
	uint8_t *th = p + 34;
	uint32_t seq = htonl(info->snd_nxt), ack = htonl(info->rcv_nxt);
	uint16_t win = htons((uint16_t)((info->ws_ok ? info->rcv_wnd >> info->rcv_wscale : info->rcv_wnd) & 0xffff));
	memcpy(th, &s->local_port, 2);
	memcpy(th + 2, &s->remote_port, 2);
	memcpy(th + 4, &seq, 4);
	memcpy(th + 8, &ack, 4);
	th[12] = (uint8_t)((tcp_len / 4) << 4);
	th[13] = 0x18;   /* ACK | PSH */
	memcpy(th + 14, &win, 2);
	memset(th + 16, 0, 4);   /* checksum (below), urgent pointer */
	if (opt) {
		uint8_t *o = th + EXTRA_TCP_HLEN;
		uint32_t tsval = htonl((uint32_t)engine_now_ms()), tsecr = 0;
		o[0] = 1;   /* NOP */
		o[1] = 1;
		o[2] = 8;   /* timestamps */
		o[3] = 10;
		memcpy(o + 4, &tsval, 4);
		memcpy(o + 8, &tsecr, 4);
	}
	return 34 + tcp_len;
}

ssize_t extra_tcp_dummy_send(struct sock_tcp *s, const struct msghdr *msg, int flags)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx || s->mode != SOCK_TCP_ACTIVE || s->if_slot < 0) {
		errno = EINVAL;   /* the kernel's socket: never a real send */
		return -1;
	}
	if (s->connecting) {
		errno = EAGAIN;
		return -1;
	}
	/* As libvma: one buffer that leaves at once in one segment, or the
	 * dummy would change what the connection sends next. */
	if (!msg || msg->msg_iovlen != 1 || !msg->msg_iov || !msg->msg_iov[0].iov_len ||
	    !msg->msg_iov[0].iov_base || (flags & MSG_MORE)) {
		errno = EAGAIN;
		return -1;
	}
	size_t len = msg->msg_iov[0].iov_len;
	ctx = sock_tcp_lock(s, ctx);
	if (!s->pcb || s->shut_send || s->reset) {
		sock_offload_unlock(ctx);
		errno = s->established ? EPIPE : ENOTCONN;
		return -1;
	}
	struct tcp_pcb_info info;
	tcp_pcb_get_info(s->pcb, &info);
	uint32_t room = info.mss > (info.ts_ok ? EXTRA_TCP_TS_OPT_LEN : 0) ? info.mss - (info.ts_ok ? EXTRA_TCP_TS_OPT_LEN : 0)
									: 0;
	uint32_t wnd = info.snd_wnd < info.cwnd ? info.snd_wnd : info.cwnd;
	if (info.state != TCP_ESTABLISHED && info.state != TCP_CLOSE_WAIT) {
		sock_offload_unlock(ctx);
		errno = EPIPE;
		return -1;
	}
	if (tcp_sndbuf_notsent(s->pcb) || len > room || !wnd || len + info.flight > wnd) {
		sock_offload_unlock(ctx);
		errno = EAGAIN;
		return -1;
	}
	const struct stack_netif *nif = &ctx->ifs[s->if_slot].nif;
	struct ring_buf *frame = nif->tx_alloc(nif->ctx);
	if (!frame) {
		ring_tx_flush(sock_offload_tx_ring(ctx, s->if_slot));   /* reaps completions */
		frame = nif->tx_alloc(nif->ctx);
	}
	if (!frame) {
		sock_offload_unlock(ctx);
		errno = EAGAIN;
		return -1;
	}
	uint8_t *p = frame->data;
	uint32_t hlen = extra_tcp_dummy_headers(s, ctx, &info, p, (uint32_t)len);
	if (hlen + len > frame->size) {
		ring_buf_free(frame);
		sock_offload_unlock(ctx);
		errno = EAGAIN;
		return -1;
	}
	memcpy(p + hlen, msg->msg_iov[0].iov_base, len);
	uint32_t tcp_len = hlen - 34 + (uint32_t)len;
	uint64_t sum = stack_csum_pseudo(s->local_ip, s->remote_ip, IPPROTO_TCP, (uint16_t)tcp_len);
	uint16_t csum = stack_csum_finish(stack_csum_add(sum, p + 34, tcp_len));
	memcpy(p + 34 + EXTRA_TCP_CSUM_OFF, &csum, sizeof(csum));
	frame->len = frame->tot_len = hlen + (uint32_t)len;
	/* The frame was never posted: back to the ring's pool. */
	ring_buf_free(frame);
	sock_offload_unlock(ctx);
	if (s->stats)
		s->stats->c.tx_dummy++;
	return (ssize_t)len;
}

/* ---- VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME ---- */

void extra_dummy_on_getsockname(struct sock_obj *obj)
{
	if (!extra_dummy_fd_ok(obj) || !obj->ops->sendmsg)
		return;
	static const char zeros[EXTRA_DUMMY_GETSOCKNAME_BYTES];
	struct iovec iov = { .iov_base = (void *)zeros, .iov_len = sizeof(zeros) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	int saved = errno;
	/* An unconnected or listening socket has nowhere to send it: that
	 * answer is dropped like the byte count. */
	(void)obj->ops->sendmsg(obj, &m, VMA_SND_FLAGS_DUMMY | MSG_DONTWAIT);
	errno = saved;
}
