/* Harness 1: whole Ethernet frames into stack_input, against a stack with
 * live state: a UDP pcb bound to *:5353 (and member of 224.1.2.3), a TCP
 * listener on *:80, one connection we opened (10.0.0.1:40000 ->
 * 10.0.0.2:5001) and one we accepted (10.0.0.2:40001 -> 10.0.0.1:80), both
 * ESTABLISHED before the input is looked at. Each input is a fresh stack.
 *
 * Input: a sequence of records
 *   ctl(1) time(1) op(1) len(2, big endian) frame(len)
 * ctl bits:
 *   0x01 recompute the IPv4 header checksum
 *   0x02 recompute the UDP/TCP checksum (the netif never trusts L4 sums)
 *   0x04 TCP seq/ack are offsets from what the peer knows of connection
 *        (op & 0x80): seq += the last ack we sent, ack += the highest of
 *        our sequence numbers the peer acknowledged so far (both tracked
 *        from the frames on the wire, so this keeps working after the app
 *        closed the pcb), so segments land in the window even though ISNs
 *        are random
 *   0x40 with 0x04: the SACK blocks are offsets from the same base as ack
 *   0x08 after the frame, move the clock forward (time & 0x7f) ms, times
 *        1000 when time & 0x80, and run the timers
 *   0x10 after the frame, an application call on connection (op & 0x80):
 *        op & 0x0f picks write small / write big / recved / shutdown wr /
 *        shutdown rd / close / abort / output / keepalive on / nodelay /
 *        set buffers / new connect
 *   0x20 the frame is part of an rx batch (tcp_rx_batch_begin/end around
 *        consecutive such frames)
 * At the end the stack is destroyed and every pool buffer must be back. */
#include "fuzz_net.h"

#include "stack/tcp.h"

#define LPORT_ACTIVE 40000
#define RPORT_ACTIVE 5001
#define RPORT_PASSIVE 40001
#define PORT_LISTEN 80
#define PORT_UDP 5353
#define PEER_ISN 0x10000000u

static struct ring_buf_pool *pool;

/* What the peer has seen of a connection, from the frames on the wire. */
struct fz_track {
	uint16_t lport, rport;
	bool seen;
	uint32_t rcv_adv;               /* the last ack we sent */
	uint32_t snd_max;               /* our highest sequence number sent, +1 */
	uint32_t snd_una;               /* the highest of them the peer acknowledged */
};

static bool seq_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }

struct fz_state {
	struct fz_track trk[2];
	struct stack *st;
	struct tcp_ctx *tcp;
	struct stack_netif nif;
	struct tcp_pcb *listener;
	struct tcp_pcb *conn[2];        /* [0] opened by us, [1] accepted */
	struct tcp_pcb *extra;          /* a later connect (op 11) */
	/* the last TCP segment we sent (handshake) */
	uint32_t last_seq, last_ack;
	uint8_t last_flags;
	uint64_t now;
	uint64_t sent;
};
static struct fz_state S;

static struct ring_buf *nif_alloc(void *ctx)
{
	(void)ctx;
	return ring_buf_alloc(pool);
}

/* The TCP header of an Ethernet frame, its payload length; NULL if none. */
static const uint8_t *tcp_of(const uint8_t *f, uint32_t len, uint32_t *plen)
{
	if (len < 14 + 20 || f[12] != 0x08 || f[13] != 0 || f[14 + 9] != 6)
		return NULL;
	const uint8_t *ip = f + 14;
	uint32_t hlen = (uint32_t)(ip[0] & 0x0f) * 4u, total = (uint32_t)(ip[2] << 8 | ip[3]);
	if (hlen < 20 || total > len - 14 || total < hlen + 20)
		return NULL;
	const uint8_t *th = ip + hlen;
	uint32_t thlen = (uint32_t)(th[12] >> 4) * 4u;
	if (thlen < 20 || hlen + thlen > total)
		return NULL;
	*plen = total - hlen - thlen;
	return th;
}

static struct fz_track *track_of(struct fz_state *s, uint16_t lport, uint16_t rport)
{
	for (int i = 0; i < 2; i++)
		if (s->trk[i].lport == lport && s->trk[i].rport == rport)
			return &s->trk[i];
	return NULL;
}

/* A frame we sent. */
static void track_out(struct fz_state *s, const uint8_t *f, uint32_t len)
{
	uint32_t plen;
	const uint8_t *th = tcp_of(f, len, &plen);
	if (!th)
		return;
	struct fz_track *t = track_of(s, (uint16_t)(th[0] << 8 | th[1]), (uint16_t)(th[2] << 8 | th[3]));
	if (!t)
		return;
	uint8_t fl = th[13];
	uint32_t seq = fz_get32(th + 4);
	uint32_t end = seq + plen + ((fl & 0x02) ? 1u : 0u) + ((fl & 0x01) ? 1u : 0u);
	if (fl & 0x02)
		t->snd_una = seq;       /* a (new) SYN: nothing acknowledged yet */
	if (!t->seen || seq_gt(end, t->snd_max))
		t->snd_max = end;
	if (fl & 0x10)
		t->rcv_adv = fz_get32(th + 8);
	t->seen = true;
}

/* A frame the peer sent (after any rewriting). */
static void track_in(struct fz_state *s, const uint8_t *f, uint32_t len)
{
	uint32_t plen;
	const uint8_t *th = tcp_of(f, len, &plen);
	if (!th || !(th[13] & 0x10))
		return;
	struct fz_track *t = track_of(s, (uint16_t)(th[2] << 8 | th[3]), (uint16_t)(th[0] << 8 | th[1]));
	uint32_t ack = fz_get32(th + 8);
	if (t && t->seen && seq_gt(ack, t->snd_una) && !seq_gt(ack, t->snd_max))
		t->snd_una = ack;
}

static int nif_send(void *ctx, struct ring_buf *f)
{
	struct fz_state *s = ctx;
	s->sent++;
	if (f->len >= 14 + 20 + 20 && f->data[14 + 9] == 6) {
		const uint8_t *th = f->data + 14 + (f->data[14] & 0x0f) * 4;
		if (th + 20 <= f->data + f->len) {
			s->last_seq = fz_get32(th + 4);
			s->last_ack = fz_get32(th + 8);
			s->last_flags = th[13];
		}
	}
	track_out(s, f->data, f->len);
	ring_buf_free(f);
	return 0;
}

/* Rewrites the seq/ack (and with sack_too the SACK blocks) of a TCP frame
 * of connection t as offsets from what the peer knows. */
static void make_relative(struct fz_track *t, uint8_t *f, uint32_t len, bool sack_too)
{
	uint32_t plen;
	uint8_t *th = (uint8_t *)tcp_of(f, len, &plen);
	if (!th || !t->seen)
		return;
	fz_put32(th + 4, fz_get32(th + 4) + t->rcv_adv);
	fz_put32(th + 8, fz_get32(th + 8) + t->snd_una);
	if (!sack_too)
		return;
	uint32_t optlen = (uint32_t)(th[12] >> 4) * 4u - 20u;
	uint8_t *o = th + 20;
	for (uint32_t i = 0; i < optlen;) {
		if (o[i] == 0)
			break;
		if (o[i] == 1 || i + 1 >= optlen) {
			i++;
			continue;
		}
		uint32_t ol = o[i + 1];
		if (ol < 2 || i + ol > optlen)
			break;
		if (o[i] == 5)
			for (uint32_t k = i + 2; k + 4 <= i + ol; k += 4)
				fz_put32(o + k, fz_get32(o + k) + t->snd_una);
		i += ol;
	}
}

static struct tcp_pcb **slot_of(struct fz_state *s, struct tcp_pcb *pcb)
{
	for (int i = 0; i < 2; i++)
		if (s->conn[i] == pcb)
			return &s->conn[i];
	if (s->extra == pcb)
		return &s->extra;
	return NULL;
}

static void cb_recv(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf)
{
	(void)arg;
	if (!buf)
		return;                 /* FIN: the app keeps the pcb until it closes */
	uint32_t n = buf->tot_len;
	/* Touch every byte: a chain that lies about its lengths shows here. */
	uint32_t seen = 0, x = 0;
	for (struct ring_buf *b = buf; b; b = b->next) {
		for (uint32_t i = 0; i < b->len; i++)
			x += b->data[i];
		seen += b->len;
	}
	if (seen != n) {
		fprintf(stderr, "fuzz: recv chain has %u bytes, tot_len says %u\n", seen, n);
		abort();
	}
	(void)x;
	ring_buf_free(buf);
	tcp_recved(pcb, n);
}

/* The pcb is gone: forget it. arg is the slot. */
static void cb_err(void *arg, int err)
{
	(void)err;
	struct tcp_pcb **slot = arg;
	if (slot)
		*slot = NULL;
}

static void cb_connected(void *arg, struct tcp_pcb *pcb)
{
	(void)arg;
	(void)pcb;
}

static const struct tcp_callbacks conn_cb;

static int cb_accept(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child)
{
	struct fz_state *s = arg;
	tcp_listen_accepted(listener);
	if (!s->conn[1]) {
		s->conn[1] = child;
		tcp_set_callbacks(child, &conn_cb, &s->conn[1]);
		return 0;
	}
	/* Further children: closed at once, as an app that accepts and closes. */
	tcp_set_callbacks(child, &conn_cb, NULL);
	tcp_close(child);
	return 0;
}

static const struct tcp_callbacks conn_cb = {
	.recv = cb_recv, .err = cb_err, .connected = cb_connected,
};
static const struct tcp_callbacks listen_cb = {
	.recv = cb_recv, .err = cb_err, .accept = cb_accept,
};

static void udp_recv(void *arg, struct stack_udp_pcb *pcb, struct ring_buf *buf, uint32_t len,
		     const struct stack_udp_rx_info *info)
{
	(void)arg;
	(void)pcb;
	(void)info;
	uint32_t seen = 0;
	for (struct ring_buf *b = buf; b; b = b->next)
		seen += b->len;
	if (seen != len || buf->tot_len != len) {
		fprintf(stderr, "fuzz: udp chain has %u bytes, len %u, tot_len %u\n", seen, len,
			buf->tot_len);
		abort();
	}
	ring_buf_free(buf);
}

/* A TCP segment from the peer, checksums right, into the stack. */
static void inject_tcp(struct fz_state *s, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack,
		       uint8_t flags, const uint8_t *opts, unsigned optlen)
{
	uint8_t f[14 + 20 + 60];
	unsigned thlen = 20 + ((optlen + 3) & ~3u);
	uint8_t *ip = fz_eth_ip(f, 6, (uint16_t)(20 + thlen), 1, 0x4000);
	uint8_t *th = ip + 20;
	memset(th, 0, thlen);
	fz_put16(th, sport);
	fz_put16(th + 2, dport);
	fz_put32(th + 4, seq);
	fz_put32(th + 8, ack);
	th[12] = (uint8_t)((thlen / 4) << 4);
	th[13] = flags;
	fz_put16(th + 14, 65535);
	memcpy(th + 20, opts, optlen);
	fz_fix_ip_csum(ip, 20 + thlen);
	fz_fix_l4_csum(ip, 20 + thlen);
	track_in(s, f, 14 + 20 + thlen);
	struct ring_buf *b = fz_frame(pool, f, 14 + 20 + thlen);
	if (b)
		stack_input(s->st, &s->nif, b);
}

static const uint8_t syn_opts[] = {
	2, 4, 0x05, 0xb4,               /* MSS 1460 */
	1, 3, 3, 7,                     /* NOP, WS 7 */
	4, 2,                           /* SACK permitted */
	8, 10, 0, 0, 0, 1, 0, 0, 0, 0,  /* TS 1, 0 */
};

static void setup(struct fz_state *s)
{
	memset(s, 0, sizeof(*s));
	struct stack_settings ss;
	stack_settings_default(&ss);
	ss.udp_hash_buckets = 16;
	ss.reass_max_datagrams = 4;
	s->st = stack_create(&ss);
	if (!s->st)
		abort();
	memcpy(s->nif.mac, fz_our_mac, 6);
	s->nif.ip = htonl(FZ_OUR_IP);
	s->nif.netmask = htonl(0xffffff00u);
	s->nif.mtu = 1500;
	s->nif.ifindex = 1;
	s->nif.ctx = s;
	s->nif.tx_alloc = nif_alloc;
	s->nif.tx_send = nif_send;

	struct tcp_settings ts;
	tcp_settings_default(&ts);
	ts.timestamps = TCP_TS_ON;
	ts.rcv_buf = ts.snd_buf = 16384;
	ts.ooo_max_bytes = 16384;
	ts.isn_secret[0] = 1;
	ts.isn_secret[1] = 2;
	ts.max_syn_rate = 0;
	ts.gro_streams_max = 2;
	s->tcp = tcp_ctx_create(s->st, &s->nif, &ts);
	if (!s->tcp)
		abort();
	s->now = 1000;
	stack_timer_tick(s->st, s->now);
	s->trk[0].lport = LPORT_ACTIVE;
	s->trk[0].rport = RPORT_ACTIVE;
	s->trk[1].lport = PORT_LISTEN;
	s->trk[1].rport = RPORT_PASSIVE;

	struct stack_udp_pcb *u = stack_udp_pcb_new(s->st);
	stack_udp_pcb_set_recv(u, udp_recv, NULL);
	stack_udp_pcb_bind(u, 0, htons(PORT_UDP));
	stack_udp_pcb_join(u, htonl(0xe0010203u), 0);

	s->listener = tcp_pcb_new(s->tcp);
	tcp_set_callbacks(s->listener, &listen_cb, s);
	tcp_bind(s->listener, 0, htons(PORT_LISTEN));
	tcp_listen(s->listener, 2);

	/* Active open: our SYN, the peer's SYN-ACK, our ACK. */
	struct tcp_pcb *p = tcp_pcb_new(s->tcp);
	s->conn[0] = p;
	tcp_set_callbacks(p, &conn_cb, &s->conn[0]);
	tcp_bind(p, htonl(FZ_OUR_IP), htons(LPORT_ACTIVE));
	tcp_connect(p, htonl(FZ_PEER_IP), htons(RPORT_ACTIVE), 0, fz_peer_mac);
	inject_tcp(s, RPORT_ACTIVE, LPORT_ACTIVE, PEER_ISN, s->last_seq + 1, 0x12, syn_opts,
		   sizeof(syn_opts));

	/* Passive open: the peer's SYN, our SYN-ACK, the peer's ACK. */
	inject_tcp(s, RPORT_PASSIVE, PORT_LISTEN, PEER_ISN, 0, 0x02, syn_opts, sizeof(syn_opts));
	uint8_t ts_opt[12] = { 1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 0 };
	fz_put32(ts_opt + 8, 0);
	inject_tcp(s, RPORT_PASSIVE, PORT_LISTEN, PEER_ISN + 1, s->last_seq + 1, 0x10, ts_opt,
		   sizeof(ts_opt));
	if (!s->conn[0] || tcp_pcb_state(s->conn[0]) != TCP_ESTABLISHED || !s->conn[1] ||
	    tcp_pcb_state(s->conn[1]) != TCP_ESTABLISHED) {
		fprintf(stderr, "fuzz: handshake set-up failed\n");
		abort();
	}
}

static void teardown(struct fz_state *s)
{
	stack_destroy(s->st);
	fz_check_pool(pool, "after stack_destroy");
}

static void app_op(struct fz_state *s, uint8_t op)
{
	static uint8_t data[20000];
	struct tcp_pcb **slot = &s->conn[(op >> 7) & 1];
	struct tcp_pcb *p = *slot;
	if ((op & 0x0f) == 11) {
		if (s->extra)
			return;
		s->extra = tcp_pcb_new(s->tcp);
		if (!s->extra)
			return;
		tcp_set_callbacks(s->extra, &conn_cb, &s->extra);
		if (tcp_bind(s->extra, htonl(FZ_OUR_IP), htons((uint16_t)(40002 + (op >> 4 & 7)))) ||
		    tcp_connect(s->extra, htonl(FZ_PEER_IP), htons(RPORT_ACTIVE), 0, fz_peer_mac)) {
			if (s->extra)
				tcp_abort(s->extra);
			s->extra = NULL;
		}
		return;
	}
	if (!p)
		return;
	switch (op & 0x0f) {
	case 0: tcp_write(p, data, 1u + (op >> 4 & 7) * 100u, 0); break;
	case 1: tcp_write(p, data, sizeof(data), (op & 0x10) ? TCP_WRITE_MORE : TCP_WRITE_PUSH); break;
	case 2: tcp_recved(p, 1u << (op >> 4 & 7)); break;
	case 3: tcp_shutdown(p, false, true); break;
	case 4: tcp_shutdown(p, true, false); break;
	case 5:
		/* The pcb finishes closing on its own; no callback reaches us. */
		*slot = NULL;
		tcp_close(p);
		break;
	case 6:
		*slot = NULL;
		tcp_abort(p);
		break;
	case 7: tcp_output(p); break;
	case 8: tcp_set_keepalive_params(p, 1000, 500, 2); tcp_set_keepalive(p, true); break;
	case 9: tcp_set_nodelay(p, op & 0x10); tcp_set_quickack(p, op & 0x20); break;
	case 10: tcp_set_bufsizes(p, 1024u << (op >> 4 & 7), 1024u << (op >> 4 & 3)); break;
	default: {
		struct tcp_pcb_info info;
		tcp_pcb_get_info(p, &info);
		struct tcp_pcb_export ex;
		tcp_pcb_export(p, &ex);
		break;
	}
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	pool = ring_buf_pool_create("fuzz", FZ_POOL_BUFS, FZ_BUF_SIZE);
	return pool ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_state *s = &S;
	uint8_t f[FZ_BUF_SIZE];
	bool in_batch = false;

	setup(s);
	while (size >= 5) {
		uint8_t ctl = data[0], tm = data[1], op = data[2];
		uint32_t len = (uint32_t)(data[3] << 8 | data[4]);
		data += 5;
		size -= 5;
		if (len > size)
			len = (uint32_t)size;
		if (len > sizeof(f))
			len = sizeof(f);
		memcpy(f, data, len);
		data += len;
		size -= len;

		if (ctl & 0x04)
			make_relative(&s->trk[(op >> 7) & 1], f, len, ctl & 0x40);
		track_in(s, f, len);
		if (len >= 14 + 20 && f[12] == 0x08 && f[13] == 0x00) {
			uint8_t *ip = f + 14;
			uint32_t iplen = len - 14;
			if (ctl & 0x02)
				fz_fix_l4_csum(ip, iplen);
			if (ctl & 0x01)
				fz_fix_ip_csum(ip, iplen);
		}
		if ((ctl & 0x20) && !in_batch) {
			tcp_rx_batch_begin(s->tcp);
			in_batch = true;
		}
		struct ring_buf *b = fz_frame(pool, f, len);
		if (b)
			stack_input(s->st, &s->nif, b);
		if (!(ctl & 0x20) && in_batch) {
			tcp_rx_batch_end(s->tcp);
			in_batch = false;
		}
		if (ctl & 0x10)
			app_op(s, op);
		if (ctl & 0x08) {
			s->now += (uint64_t)(tm & 0x7f) * ((tm & 0x80) ? 1000u : 1u);
			stack_timer_tick(s->st, s->now);
		}
	}
	if (in_batch)
		tcp_rx_batch_end(s->tcp);
	teardown(s);
	return 0;
}
