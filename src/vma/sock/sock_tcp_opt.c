/* Offloaded TCP sockets: options, addresses, shutdown, ioctl, fcntl.
 * Options go to the kernel socket first (it validates and keeps the value
 * getsockopt reports); what the engine needs is mirrored afterwards. With
 * VMA_AVOID_SYS_CALLS_ON_TCP_FD an offloaded socket keeps the SOCK_TCP_OPT_*
 * options, O_NONBLOCK and FIONBIO to itself (docs/tcp_sockets.md). Options
 * and calls the offloaded path does not implement meet
 * VMA_EXCEPTION_HANDLING (sock_unsupported.h). */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h>   /* netinet/tcp.h names states as the engine does */
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include "config/cfg_params.h"
#include "extra/extra.h"
#include "log/vlog.h"
#include "os/os.h"
#include "sock/sock_tcp_info.h"
#include "sock/sock_tcp_internal.h"
#include "sock/sock_unsupported.h"

static uint32_t sock_tcp_kernel_buf(int fd, int name)
{
	int v = 0;
	socklen_t l = sizeof(v);
	if (OS_CALL(getsockopt, fd, SOL_SOCKET, name, &v, &l) != 0 || v <= 0)
		return 0;
	/* The kernel doubles what was asked for its bookkeeping; the engine
	 * counts payload bytes, so it gets the request. */
	return (uint32_t)v / 2;
}

/* SO_VMA_RING_ALLOC_LOGIC: ours alone (the kernel does not know it). A TCP
 * socket's lane is chosen when it connects or listens (its connections
 * stay in it): until then the logic picks the lane again; afterwards it is
 * only remembered. */
static int sock_tcp_set_ring_logic(struct sock_tcp *s, const void *val, socklen_t len)
{
	int logic;
	uint32_t user_id;
	int err = sock_offload_parse_ring_logic(val, len, &logic, &user_id);
	if (err) {
		errno = -err;
		return -1;
	}
	s->ring_logic = logic;
	s->ring_user_id = user_id;
	sock_mig_window_configure(&s->mig, logic);
	if (s->mode == SOCK_TCP_KERNEL && !s->os_only && !s->inherited) {
		struct sock_offload *ctx = sock_offload_get_for_logic(s->obj.fd, logic, user_id);
		if (ctx && ctx->tcp)
			s->ctx = ctx;
	}
	return 0;
}

/* TCP_CONGESTION's names for the algorithms the engine has (Linux's
 * names; "none" is VMA_TCP_CC_ALGO=2's fixed window, which Linux lacks). */
static const struct {
	const char *name;
	enum tcp_cc_algo algo;
} sock_tcp_cc_names[] = {
	{ "reno", TCP_CC_NEWRENO }, { "cubic", TCP_CC_CUBIC }, { "bbr", TCP_CC_BBR }, { "none", TCP_CC_NONE },
};

/* The algorithm a TCP_CONGESTION value names (not NUL-terminated within
 * len, as Linux reads it); false for a name the engine does not have. */
static bool sock_tcp_cc_from_name(const void *val, socklen_t len, enum tcp_cc_algo *out)
{
	char name[16];
	if (!val || (int)len <= 0)
		return false;
	size_t n = (size_t)len < sizeof(name) - 1 ? (size_t)len : sizeof(name) - 1;
	memcpy(name, val, n);
	name[n] = 0;
	for (size_t i = 0; i < sizeof(sock_tcp_cc_names) / sizeof(sock_tcp_cc_names[0]); i++)
		if (!strcmp(name, sock_tcp_cc_names[i].name)) {
			*out = sock_tcp_cc_names[i].algo;
			return true;
		}
	return false;
}

static const char *sock_tcp_cc_name(enum tcp_cc_algo algo)
{
	for (size_t i = 0; i < sizeof(sock_tcp_cc_names) / sizeof(sock_tcp_cc_names[0]); i++)
		if (sock_tcp_cc_names[i].algo == algo)
			return sock_tcp_cc_names[i].name;
	return "reno";
}

/* Options the offloaded path implements, or that only matter to the
 * kernel socket's bind (it reserves the port); any other option set on a
 * socket that is or may become offloaded is VMA_EXCEPTION_HANDLING's. */
static bool sock_tcp_opt_supported(int level, int name)
{
	if (sock_base_opt_supported(level, name))
		return true;
	if (level == SOL_SOCKET)
		return name == SO_KEEPALIVE || name == SO_LINGER;
	if (level == IPPROTO_TCP) {
		switch (name) {
		case TCP_NODELAY:
		case TCP_CORK:
		case TCP_MAXSEG:
		case TCP_KEEPIDLE:
		case TCP_KEEPINTVL:
		case TCP_KEEPCNT:
		case TCP_SYNCNT:
		case TCP_QUICKACK:
		case TCP_NOTSENT_LOWAT:
		case TCP_USER_TIMEOUT:
			return true;
		}
		return false;
	}
	return level == IPPROTO_IP && name == IP_BIND_ADDRESS_NO_PORT;
}

/* A socket on the kernel path for now that connect() or listen() may
 * still offload: an unsupported option can keep it with the kernel. */
static bool sock_tcp_undecided(const struct sock_tcp *s)
{
	return s->mode == SOCK_TCP_KERNEL && !s->os_only && !s->released && sock_offload_usable(s->ctx);
}

/* Why an offloaded socket cannot go back to the kernel path. */
static const char *sock_tcp_stuck(const struct sock_tcp *s)
{
	if (s->mode == SOCK_TCP_LISTENER)
		return "it listens offloaded: its connections live in our stack";
	if (s->mode == SOCK_TCP_ACTIVE)
		return "its connection lives in our stack";
	return NULL;
}

/* Acts on VMA_EXCEPTION_HANDLING's verdict about something s does not
 * support: false when the call must fail (errno set); an undecided socket
 * told to go to the kernel stays there (connect/listen leave it alone). */
static bool sock_tcp_carry_on(struct sock_tcp *s, enum sock_unsupported_verdict v)
{
	if (v == SOCK_UNSUPPORTED_TO_KERNEL && s->mode == SOCK_TCP_KERNEL)
		s->os_only = true;
	return v != SOCK_UNSUPPORTED_FAIL;
}

bool sock_tcp_unsupported_call(struct sock_tcp *s, const char *what)
{
	return sock_tcp_carry_on(s, sock_unsupported(s->obj.fd, what, sock_tcp_stuck(s), EOPNOTSUPP));
}

static unsigned sock_tcp_opt_bit(int level, int name)
{
	if (level == SOL_SOCKET)
		return name == SO_KEEPALIVE ? SOCK_TCP_OPT_KEEPALIVE : 0;
	if (level != IPPROTO_TCP)
		return 0;
	switch (name) {
	case TCP_NODELAY: return SOCK_TCP_OPT_NODELAY;
	case TCP_CORK: return SOCK_TCP_OPT_CORK;
	case TCP_QUICKACK: return SOCK_TCP_OPT_QUICKACK;
	case TCP_KEEPIDLE: return SOCK_TCP_OPT_KEEPIDLE;
	case TCP_KEEPINTVL: return SOCK_TCP_OPT_KEEPINTVL;
	case TCP_KEEPCNT: return SOCK_TCP_OPT_KEEPCNT;
	case TCP_NOTSENT_LOWAT: return SOCK_TCP_OPT_NOTSENT_LOWAT;
	}
	return 0;
}

/* The value getsockopt reports for one SOCK_TCP_OPT_* option. */
static int sock_tcp_opt_value(const struct sock_tcp *s, unsigned bit)
{
	switch (bit) {
	case SOCK_TCP_OPT_NODELAY: return s->nodelay;
	case SOCK_TCP_OPT_CORK: return s->cork;
	case SOCK_TCP_OPT_QUICKACK: return s->quickack;
	case SOCK_TCP_OPT_KEEPALIVE: return s->keepalive;
	case SOCK_TCP_OPT_KEEPIDLE: return (int)s->keep_idle_s;
	case SOCK_TCP_OPT_KEEPINTVL: return (int)s->keep_intvl_s;
	case SOCK_TCP_OPT_KEEPCNT: return (int)s->keep_cnt;
	case SOCK_TCP_OPT_NOTSENT_LOWAT: return (int)s->notsent_lowat;
	}
	return 0;
}

void sock_tcp_kernel_catch_up(const struct sock_tcp *s, int kfd)
{
	static const struct {
		unsigned bit;
		int level, name;
	} opts[] = {
		{ SOCK_TCP_OPT_NODELAY, IPPROTO_TCP, TCP_NODELAY },
		{ SOCK_TCP_OPT_CORK, IPPROTO_TCP, TCP_CORK },
		{ SOCK_TCP_OPT_QUICKACK, IPPROTO_TCP, TCP_QUICKACK },
		{ SOCK_TCP_OPT_KEEPIDLE, IPPROTO_TCP, TCP_KEEPIDLE },
		{ SOCK_TCP_OPT_KEEPINTVL, IPPROTO_TCP, TCP_KEEPINTVL },
		{ SOCK_TCP_OPT_KEEPCNT, IPPROTO_TCP, TCP_KEEPCNT },
		{ SOCK_TCP_OPT_KEEPALIVE, SOL_SOCKET, SO_KEEPALIVE },
		{ SOCK_TCP_OPT_NOTSENT_LOWAT, IPPROTO_TCP, TCP_NOTSENT_LOWAT },
	};
	unsigned lacks = s->opts_kernel_lacks;
	if (!lacks)
		return;
	int saved = errno;
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		if (!(lacks & opts[i].bit))
			continue;
		int v = sock_tcp_opt_value(s, opts[i].bit);
		if (OS_CALL(setsockopt, kfd, opts[i].level, opts[i].name, &v, sizeof(v)) != 0)
			vlog_debug("fd %d: option %d/%d not carried over to kernel socket %d (%s)", s->obj.fd,
				   opts[i].level, opts[i].name, kfd, strerror(errno));
	}
	errno = saved;
}

/* Mirrors an option the kernel accepted (or that we validated ourselves)
 * into the socket; true when the engine's pcb must hear of it. */
static bool sock_tcp_note_option(struct sock_tcp *s, int level, int name, const void *val, socklen_t len)
{
	int v = 0;
	bool apply = false;
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_RCVBUF:
		case SO_RCVBUFFORCE:
			s->rcvbuf = sock_tcp_kernel_buf(s->obj.fd, SO_RCVBUF);
			apply = true;
			break;
		case SO_SNDBUF:
		case SO_SNDBUFFORCE:
			s->sndbuf = sock_tcp_kernel_buf(s->obj.fd, SO_SNDBUF);
			apply = true;
			break;
		case SO_KEEPALIVE:
			if (sock_opt_int(val, len, &v) == 0)
				s->keepalive = v != 0;
			apply = true;
			break;
		case SO_LINGER:
			if (len >= sizeof(struct linger)) {
				const struct linger *lg = val;
				s->linger_on = lg->l_onoff != 0;
				s->linger_s = lg->l_linger < 0 ? 0 : lg->l_linger;
			}
			break;
		}
	} else if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
		enum tcp_cc_algo algo;
		if (sock_tcp_cc_from_name(val, len, &algo)) {
			s->cc_set = true;
			s->cc_algo = (uint8_t)algo;
			apply = true;
		}
	} else if (level == IPPROTO_TCP && sock_opt_int(val, len, &v) == 0) {
		switch (name) {
		case TCP_NODELAY:
			s->nodelay = v != 0;
			/* Linux pushes what waits each time it is set, corked or not */
			s->push_pending = s->nodelay;
			apply = true;
			break;
		case TCP_CORK:
			s->cork = v != 0;
			apply = true;
			break;
		case TCP_QUICKACK:
			s->quickack = v != 0;
			apply = true;
			break;
		case TCP_KEEPIDLE:
			s->keep_idle_s = (uint32_t)v;
			s->keep_params_set = apply = true;
			break;
		case TCP_KEEPINTVL:
			s->keep_intvl_s = (uint32_t)v;
			s->keep_params_set = apply = true;
			break;
		case TCP_KEEPCNT:
			s->keep_cnt = (uint32_t)v;
			s->keep_params_set = apply = true;
			break;
		case TCP_MAXSEG:
			s->maxseg = (uint32_t)v;
			apply = true;
			break;
		case TCP_SYNCNT:
			s->syncnt = (uint32_t)v;
			apply = true;
			break;
		case TCP_NOTSENT_LOWAT:
			/* Linux keeps the int as an unsigned: -1 is "unlimited" */
			s->notsent_lowat = (uint32_t)v;
			apply = true;
			break;
		case TCP_USER_TIMEOUT:   /* the kernel refused negative values */
			s->user_timeout_ms = v > 0 ? (uint32_t)v : 0;
			apply = true;
			break;
		}
	}
	s->opts_known |= sock_tcp_opt_bit(level, name);
	return apply;
}

/* Hands the mirrored options to the engine's pcb: TCP_NODELAY and TCP_CORK
 * alone (an application may toggle them around every response, and
 * re-applying the rest re-arms timers), any other option with them all. */
static void sock_tcp_options_push(struct sock_tcp *s, int level, int name)
{
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx || !s->pcb)
		return;
	ctx = sock_tcp_lock(s, ctx);
	sock_offload_clock_locked(ctx);
	if (s->pcb && level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK)) {
		tcp_set_nodelay(s->pcb, s->nodelay);
		tcp_set_cork(s->pcb, s->cork);
	} else {
		sock_tcp_apply_options_locked(s);
	}
	if (s->pcb) {
		if (s->push_pending)
			tcp_push(s->pcb);   /* TCP_NODELAY: what cork and Nagle hold goes */
		else
			tcp_output(s->pcb);
		sock_tcp_tx_kick_locked(s);
	}
	s->push_pending = false;
	sock_tcp_snd_refresh_locked(s);
	sock_offload_unlock(ctx);
}

/* Linux's limits on TCP_KEEPIDLE/TCP_KEEPINTVL (MAX_TCP_KEEPIDLE,
 * MAX_TCP_KEEPINTVL) and TCP_KEEPCNT (MAX_TCP_KEEPCNT). */
#define SOCK_TCP_KEEP_TIME_MAX 32767
#define SOCK_TCP_KEEPCNT_MAX 127

/* VMA_AVOID_SYS_CALLS_ON_TCP_FD: one of the SOCK_TCP_OPT_* options set on
 * an offloaded socket, checked as Linux checks it and kept by us alone. */
static int sock_tcp_set_without_kernel(struct sock_tcp *s, int level, int name, unsigned bit, const void *val,
				       socklen_t len)
{
	if (len < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	if (!val) {
		errno = EFAULT;
		return -1;
	}
	int v;
	memcpy(&v, val, sizeof(v));
	bool bad = false;
	if (bit == SOCK_TCP_OPT_KEEPIDLE || bit == SOCK_TCP_OPT_KEEPINTVL)
		bad = v < 1 || v > SOCK_TCP_KEEP_TIME_MAX;
	else if (bit == SOCK_TCP_OPT_KEEPCNT)
		bad = v < 1 || v > SOCK_TCP_KEEPCNT_MAX;
	if (bad) {
		errno = EINVAL;
		return -1;
	}
	if (sock_tcp_note_option(s, level, name, &v, sizeof(v)))
		sock_tcp_options_push(s, level, name);
	s->opts_kernel_lacks |= bit;
	return 0;
}

/* SO_TIMESTAMPING on an offloaded connection or listener. Its kernel
 * socket listens, and Linux refuses OPT_ID on a listening (or closed)
 * socket: that check is ours, by the state of our connection; the kernel
 * socket validates the rest (unknown bits, OPT_STATS without OPT_TSONLY,
 * BIND_PHC) with OPT_ID and OPT_ID_TCP left out. */
static int sock_tcp_set_timestamping(struct sock_tcp *s, int name, const void *val, socklen_t len)
{
	if (!val || len < sizeof(int))
		return OS_CALL(setsockopt, s->obj.fd, SOL_SOCKET, name, val, len);
	struct so_timestamping ts = { 0 };
	socklen_t n = len < sizeof(ts) ? len : sizeof(ts);
	memcpy(&ts, val, n);
	uint32_t flags = (uint32_t)ts.flags;
	if ((flags & SOCK_TSTAMP_OPT_ID_TCP) && !(flags & SOF_TIMESTAMPING_OPT_ID)) {
		errno = EINVAL;
		return -1;
	}
	bool id_starts = (flags & SOF_TIMESTAMPING_OPT_ID) && !(s->base.tstamp.flags & SOF_TIMESTAMPING_OPT_ID);
	if (id_starts && (s->mode != SOCK_TCP_ACTIVE || !s->pcb || s->reset)) {
		errno = EINVAL;
		return -1;
	}
	ts.flags = (int)(flags & ~(SOF_TIMESTAMPING_OPT_ID | SOCK_TSTAMP_OPT_ID_TCP));
	if (OS_CALL(setsockopt, s->obj.fd, SOL_SOCKET, name, &ts, n) != 0)
		return -1;
	int whole = (int)flags;
	struct sock_offload *ctx = sock_tcp_ctx(s);
	ctx = sock_tcp_lock(s, ctx);
	/* OPT_ID switched on: byte offsets count from snd_una, or from
	 * write_seq with OPT_ID_TCP (Linux's sk_tskey); under the lock so a
	 * stamp falling due meanwhile reads a whole value. */
	if (sock_tstamp_note_flags(&s->base.tstamp, name, &whole, sizeof(whole)) && s->pcb)
		s->base.tstamp.key_next = (flags & SOCK_TSTAMP_OPT_ID_TCP) ? tcp_write_seq(s->pcb) : tcp_snd_una(s->pcb);
	sock_offload_unlock(ctx);
	return 0;
}

int sock_tcp_op_setsockopt(struct sock_obj *obj, int level, int name, const void *val, socklen_t len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	/* Ours alone (the Extra API): the kernel socket is not touched. */
	int ret;
	if (sock_base_setsockopt_own(&s->base, level, name, val, len, &ret))
		return ret;
	s->kernel_configured = true;
	if (level == SOL_SOCKET && name == SOCK_OFFLOAD_SO_RING_ALLOC_LOGIC)
		return sock_tcp_set_ring_logic(s, val, len);
	bool offloaded = sock_tcp_ctx(s) != NULL;
	enum tcp_cc_algo cc;
	/* TCP_CONGESTION is ours for the algorithms the engine has; another
	 * one (the kernel's vegas, dctcp...) is as any unsupported option */
	bool cc_other = level == IPPROTO_TCP && name == TCP_CONGESTION && !sock_tcp_cc_from_name(val, len, &cc);
	bool cc_ours = level == IPPROTO_TCP && name == TCP_CONGESTION && !cc_other;
	/* a name the kernel refuses (ENOENT, EPERM) fails as it does and
	 * leaves the socket where it is */
	if (cc_other && OS_CALL(setsockopt, obj->fd, level, name, val, len) != 0)
		return -1;
	if (__builtin_expect(!sock_tcp_opt_supported(level, name), 0) && !cc_ours && (offloaded || sock_tcp_undecided(s)) &&
	    !sock_tcp_carry_on(s, sock_unsupported_option(obj->fd, level, name, sock_tcp_stuck(s))))
		return -1;
	if (cc_other)
		return 0;   /* the kernel socket has it */
	bool timestamping = level == SOL_SOCKET && (name == SO_TIMESTAMPING_OLD || name == SO_TIMESTAMPING_NEW);
	if (timestamping && offloaded)
		return sock_tcp_set_timestamping(s, name, val, len);
	unsigned bit = sock_tcp_opt_bit(level, name);
	if (bit && offloaded && g_cfg.avoid_sys_calls_on_tcp_fd)
		return sock_tcp_set_without_kernel(s, level, name, bit, val, len);
	if (cc_ours && cc == TCP_CC_NONE) {
		ret = 0;   /* ours alone: the kernel has no "none" */
	} else {
		ret = OS_CALL(setsockopt, obj->fd, level, name, val, len);
		if (ret != 0 || !val)
			return ret;
	}
	int saved = errno;
	/* The SOL_SOCKET options all kinds share; SO_TIMESTAMPING here is a
	 * socket connect() or listen() may still offload (its counter starts
	 * when it connects). */
	sock_base_note_option(&s->base, level, name, val, len);
	s->opts_kernel_lacks &= ~bit;
	if (sock_tcp_note_option(s, level, name, val, len))
		sock_tcp_options_push(s, level, name);
	errno = saved;
	return 0;
}

/* The fields the build's <linux/tcp.h> knows sit where the kernel puts them. */
#define SOCK_TCP_INFO_SAME(field) \
	_Static_assert(offsetof(struct tcp_info, field) == offsetof(struct sock_tcp_info, field), #field)
SOCK_TCP_INFO_SAME(tcpi_rto);
SOCK_TCP_INFO_SAME(tcpi_total_retrans);
SOCK_TCP_INFO_SAME(tcpi_pacing_rate);
SOCK_TCP_INFO_SAME(tcpi_segs_in);
SOCK_TCP_INFO_SAME(tcpi_data_segs_out);
SOCK_TCP_INFO_SAME(tcpi_delivery_rate);
SOCK_TCP_INFO_SAME(tcpi_delivered_ce);
SOCK_TCP_INFO_SAME(tcpi_bytes_retrans);
SOCK_TCP_INFO_SAME(tcpi_rcv_ooopack);
SOCK_TCP_INFO_SAME(tcpi_dsack_dups);
SOCK_TCP_INFO_SAME(tcpi_reord_seen);
SOCK_TCP_INFO_SAME(tcpi_snd_wnd);
_Static_assert(sizeof(struct tcp_info) <= sizeof(struct sock_tcp_info), "headers newer than Linux 6.18");

#define SOCK_TCP_LINUX_INFINITE_SSTHRESH 0x7fffffffu
#define SOCK_TCP_LINUX_MSS_DEFAULT 536u   /* Linux's first guess of the peer's MSS */
#define SOCK_TCP_LINUX_REORDERING 3u      /* net.ipv4.tcp_reordering */
#define SOCK_TCP_TS_OPTION_BYTES 12u

/* A full segment's payload (Linux's mss_cache): the MSS less the timestamp
 * option when it is on. */
static uint32_t sock_tcp_payload_mss(const struct tcp_pcb_info *in)
{
	return in->mss - (in->ts_ok && in->mss > SOCK_TCP_TS_OPTION_BYTES ? SOCK_TCP_TS_OPTION_BYTES : 0);
}

/* Our engine's view in the kernel's units: times in µs (ages in ms),
 * windows in segments, sizes in bytes, counters as RFC 4898 defines. */
static void sock_tcp_fill_info(struct sock_tcp *s, struct sock_tcp_info *ti)
{
	memset(ti, 0, sizeof(*ti));
	if (!s->pcb) {
		ti->tcpi_state = 7;   /* Linux TCP_CLOSE */
		return;
	}
	struct tcp_pcb_info in;
	tcp_pcb_get_info(s->pcb, &in);
	/* Our enum is in the kernel's order except for numbering. */
	static const uint8_t linux_state[] = {
		[TCP_CLOSED] = 7, [TCP_LISTEN] = 10, [TCP_SYN_SENT] = 2, [TCP_SYN_RCVD] = 3,
		[TCP_ESTABLISHED] = 1, [TCP_FIN_WAIT_1] = 4, [TCP_FIN_WAIT_2] = 5, [TCP_CLOSE_WAIT] = 8,
		[TCP_CLOSING] = 11, [TCP_LAST_ACK] = 9, [TCP_TIME_WAIT] = 6,
	};
	uint32_t mss = in.mss ? in.mss : SOCK_TCP_LINUX_MSS_DEFAULT;
	ti->tcpi_state = (unsigned)in.state < sizeof(linux_state) ? linux_state[in.state] : 0;
	/* TCP_CA_Loss after an RTO, TCP_CA_Recovery in fast recovery, else TCP_CA_Open */
	ti->tcpi_ca_state = in.backoff && in.unacked ? 4 : in.in_recovery ? 3 : 0;
	ti->tcpi_retransmits = (uint8_t)(in.backoff > 255 ? 255 : in.backoff);
	ti->tcpi_probes = (uint8_t)(in.probes > 255 ? 255 : in.probes);
	ti->tcpi_backoff = ti->tcpi_retransmits;
	ti->tcpi_options = (in.ts_ok ? TCPI_OPT_TIMESTAMPS : 0) | (in.sack_ok ? TCPI_OPT_SACK : 0) |
			   (in.ws_ok ? TCPI_OPT_WSCALE : 0) | (in.ecn_ok ? TCPI_OPT_ECN : 0);
	ti->tcpi_rcv_rtt = in.rcv_rtt_us;
	if (in.ws_ok)
		ti->tcpi_wscales = (uint8_t)((in.snd_wscale & 0xf) | (in.rcv_wscale & 0xf) << 4);
	ti->tcpi_rto = in.rto_ms * 1000;
	ti->tcpi_ato = in.delack_ms * 1000;
	ti->tcpi_snd_mss = sock_tcp_payload_mss(&in);
	/* Linux starts from 536 and moves to the largest segment received */
	uint32_t rcv_mss = in.mss < SOCK_TCP_LINUX_MSS_DEFAULT ? in.mss : SOCK_TCP_LINUX_MSS_DEFAULT;
	ti->tcpi_rcv_mss = in.rcv_mss > rcv_mss ? in.rcv_mss : rcv_mss;
	ti->tcpi_unacked = in.unacked;
	ti->tcpi_sacked = in.sacked;
	ti->tcpi_lost = in.lost;
	ti->tcpi_last_data_sent = in.last_data_sent_ms;
	ti->tcpi_last_data_recv = in.last_data_recv_ms;
	ti->tcpi_last_ack_recv = in.last_ack_recv_ms;
	ti->tcpi_pmtu = in.pmtu;
	ti->tcpi_rcv_ssthresh = in.rcv_wnd_max;
	/* Microsecond samples of timed segments where there are some; the
	 * millisecond estimate (timestamps) before the first. */
	ti->tcpi_rtt = in.srtt_us ? in.srtt_us : in.srtt_ms * 1000;
	ti->tcpi_rttvar = in.srtt_us ? in.rttvar_us : in.rttvar_ms * 1000;
	ti->tcpi_snd_ssthresh = in.ssthresh >= SOCK_TCP_LINUX_INFINITE_SSTHRESH ? SOCK_TCP_LINUX_INFINITE_SSTHRESH :
										 in.ssthresh / mss;
	ti->tcpi_snd_cwnd = in.cwnd / mss;
	/* Linux's advmss leaves out the timestamp option once it is agreed */
	ti->tcpi_advmss = in.adv_mss - (in.ts_ok && in.adv_mss > SOCK_TCP_TS_OPTION_BYTES ? SOCK_TCP_TS_OPTION_BYTES : 0);
	ti->tcpi_reordering = SOCK_TCP_LINUX_REORDERING;
	ti->tcpi_rcv_space = in.rcv_space;
	ti->tcpi_total_retrans = (uint32_t)in.retransmits;
	/* Not paced: BBR's model rate; for the others the rate Linux would pace
	 * at (twice cwnd per RTT in slow start, 1.2 times after) as an
	 * estimate, no cap. */
	if (in.pacing_rate) {
		ti->tcpi_pacing_rate = in.pacing_rate;
	} else if (ti->tcpi_rtt) {
		uint64_t per_rtt = (uint64_t)in.cwnd * 1000000 / ti->tcpi_rtt;
		ti->tcpi_pacing_rate = in.cwnd < in.ssthresh ? 2 * per_rtt : per_rtt * 6 / 5;
	}
	ti->tcpi_max_pacing_rate = UINT64_MAX;
	ti->tcpi_bytes_acked = in.bytes_acked;
	ti->tcpi_bytes_received = in.bytes_received;
	ti->tcpi_segs_out = (uint32_t)in.segs_out;
	ti->tcpi_segs_in = (uint32_t)in.segs_in;
	ti->tcpi_notsent_bytes = in.notsent;
	ti->tcpi_min_rtt = in.min_rtt_us != UINT32_MAX ? in.min_rtt_us
			   : in.min_rtt_ms == UINT32_MAX ? UINT32_MAX : in.min_rtt_ms * 1000;
	ti->tcpi_data_segs_in = in.data_segs_in;
	ti->tcpi_data_segs_out = in.data_segs_out;
	ti->tcpi_delivered = in.delivered;
	ti->tcpi_delivery_rate = in.delivery_rate;
	if (in.delivery_app_limited)
		ti->tcpi_app_limited_bits |= 1;
	ti->tcpi_bytes_sent = in.bytes_sent;
	ti->tcpi_bytes_retrans = in.bytes_retrans;
	ti->tcpi_rcv_ooopack = in.rcv_ooopack;
	ti->tcpi_reord_seen = in.reord_seen;
	ti->tcpi_dsack_dups = in.dsack_dups;
	ti->tcpi_snd_wnd = in.snd_wnd;
	ti->tcpi_rcv_wnd = in.rcv_wnd;
	ti->tcpi_total_rto = (uint16_t)(in.total_rto > UINT16_MAX ? UINT16_MAX : in.total_rto);
}

/* How many bytes the running kernel answers TCP_INFO with: asked once of
 * the kernel socket under an offloaded fd (every such fd has one), so our
 * answer is as long as the kernel's would be. */
static socklen_t sock_tcp_info_len(int kernel_fd)
{
	static socklen_t kernel_len;
	socklen_t len = __atomic_load_n(&kernel_len, __ATOMIC_RELAXED);
	if (len)
		return len;
	unsigned char probe[SOCK_TCP_INFO_MAX];
	len = sizeof(probe);
	int saved = errno;
	if (OS_CALL(getsockopt, kernel_fd, IPPROTO_TCP, TCP_INFO, probe, &len) != 0 || len == 0)
		len = sizeof(struct sock_tcp_info);
	errno = saved;
	__atomic_store_n(&kernel_len, len, __ATOMIC_RELAXED);
	return len;
}

int sock_tcp_op_getsockopt(struct sock_obj *obj, int level, int name, void *val, socklen_t *len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	int ret;
	if (sock_base_getsockopt_own(&s->base, level, name, val, len, &ret))
		return ret;
	if (!ctx)
		return OS_CALL(getsockopt, obj->fd, level, name, val, len);
	if (level == SOL_SOCKET && name == SO_ERROR) {
		if (!len || (int)*len < 0) {
			errno = EINVAL;
			return -1;
		}
		sock_offload_lock(ctx);
		int err = s->err > 0 ? s->err : 0;
		s->err = 0;
		sock_offload_unlock(ctx);
		return sock_opt_put_int(val, len, err);
	}
	if (level == SOL_SOCKET && name == SO_ACCEPTCONN) {
		if (!len || (int)*len < 0) {
			errno = EINVAL;
			return -1;
		}
		return sock_opt_put_int(val, len, s->mode == SOCK_TCP_LISTENER);
	}
	if (level == IPPROTO_TCP && name == TCP_INFO) {
		if (!len || (int)*len < 0) {
			errno = EINVAL;
			return -1;
		}
		/* The kernel's layout and length: a shorter buffer gets a prefix, a
		 * longer one the kernel's length (zeros past what we know). */
		union {
			struct sock_tcp_info ti;
			unsigned char bytes[SOCK_TCP_INFO_MAX];
		} out;
		memset(&out, 0, sizeof(out));
		socklen_t full = sock_tcp_info_len(obj->fd);
		ctx = sock_tcp_lock(s, ctx);
		if (s->mode == SOCK_TCP_LISTENER) {
			out.ti.tcpi_state = 10;
			out.ti.tcpi_reordering = SOCK_TCP_LINUX_REORDERING;
		} else {
			sock_tcp_fill_info(s, &out.ti);
		}
		sock_offload_unlock(ctx);
		socklen_t n = *len < full ? *len : full;
		if (n && !val) {
			errno = EFAULT;
			return -1;
		}
		memcpy(val, out.bytes, n);
		*len = n;
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
		/* the engine's algorithm, not the kernel socket's default */
		if (!len || (int)*len < 0) {
			errno = EINVAL;
			return -1;
		}
		char out[16] = { 0 };
		ctx = sock_tcp_lock(s, ctx);
		enum tcp_cc_algo algo = s->pcb ? tcp_cc_algo_of(s->pcb) :
				   s->cc_set ? (enum tcp_cc_algo)s->cc_algo : sock_offload_tcp_cc_default();
		sock_offload_unlock(ctx);
		snprintf(out, sizeof(out), "%s", sock_tcp_cc_name(algo));
		socklen_t n = *len < sizeof(out) ? *len : (socklen_t)sizeof(out);
		if (n && !val) {
			errno = EFAULT;
			return -1;
		}
		memcpy(val, out, n);
		*len = n;
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_MAXSEG && s->mode == SOCK_TCP_ACTIVE && s->pcb) {
		if (!len || (int)*len < 0) {
			errno = EINVAL;
			return -1;
		}
		struct tcp_pcb_info in;
		ctx = sock_tcp_lock(s, ctx);
		bool have = s->pcb != NULL;
		if (have)
			tcp_pcb_get_info(s->pcb, &in);
		sock_offload_unlock(ctx);
		/* Linux's mss_cache: the payload of a full segment, the
		 * timestamp option left out once agreed */
		if (have)
			return sock_opt_put_int(val, len, (int)sock_tcp_payload_mss(&in));
	}
	if (level == SOL_SOCKET && (name == SO_TIMESTAMPING_OLD || name == SO_TIMESTAMPING_NEW)) {
		/* The kernel's answer (its length rules, bind_phc) with our flags:
		 * its socket lacks OPT_ID (see sock_tcp_set_timestamping). */
		int ret = OS_CALL(getsockopt, obj->fd, level, name, val, len);
		if (ret == 0 && val && *len >= sizeof(int)) {
			int flags = (int)s->base.tstamp.flags;
			memcpy(val, &flags, sizeof(flags));
		}
		return ret;
	}
	/* The mirror answers what the kernel socket lacks, and under
	 * VMA_AVOID_SYS_CALLS_ON_TCP_FD whatever it knows exactly; odd
	 * arguments go to the kernel for its errno. */
	unsigned bit = sock_tcp_opt_bit(level, name);
	if (bit && val && len && (int)*len >= 0 &&
	    ((s->opts_kernel_lacks & bit) || (g_cfg.avoid_sys_calls_on_tcp_fd && (s->opts_known & bit))))
		return sock_opt_put_int(val, len, sock_tcp_opt_value(s, bit));
	return OS_CALL(getsockopt, obj->fd, level, name, val, len);
}

static void sock_tcp_set_nonblocking(struct sock_tcp *s, bool on)
{
	sock_base_set_nonblocking(&s->base, on, s->stats);
}

/* The F_SETFL bits besides O_NONBLOCK the kernel acts on (fcntl(2)). */
#define SOCK_TCP_SETFL_OTHERS (O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME)
#define SOCK_TCP_NOT_SERVED (-2)

/* VMA_AVOID_SYS_CALLS_ON_TCP_FD on an offloaded socket: F_GETFL, and an
 * F_SETFL that changes O_NONBLOCK alone, without the kernel (O_NONBLOCK
 * only matters to our own waits; the kernel socket under an offloaded fd
 * is never read). SOCK_TCP_NOT_SERVED: the kernel must do it. */
static int sock_tcp_fcntl_without_kernel(struct sock_tcp *s, int cmd, void *arg)
{
	if (s->kernel_fl < 0) {
		int fl = OS_CALL(fcntl, s->obj.fd, F_GETFL, 0);
		if (fl == -1)
			return SOCK_TCP_NOT_SERVED;
		s->kernel_fl = fl & ~O_NONBLOCK;
	}
	if (cmd == F_GETFL)
		return s->kernel_fl | (s->base.nonblocking ? O_NONBLOCK : 0);
	long want = (long)arg;
	if ((want & SOCK_TCP_SETFL_OTHERS) != (s->kernel_fl & SOCK_TCP_SETFL_OTHERS))
		return SOCK_TCP_NOT_SERVED;
	sock_tcp_set_nonblocking(s, (want & O_NONBLOCK) != 0);
	return 0;
}

int sock_tcp_op_fcntl(struct sock_obj *obj, int cmd, void *arg)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	/* Only O_NONBLOCK (mirrored, and given to a reserved port) and reads
	 * leave the kernel socket as socket() made it. */
	if (!(cmd == F_GETFL || cmd == F_GETFD || (cmd == F_SETFL && ((long)arg & ~(long)O_NONBLOCK) == 0)))
		s->kernel_configured = true;
	bool offloaded = sock_tcp_ctx(s) != NULL;
	if (cmd == F_SETFL && ((long)arg & O_ASYNC) && (offloaded || sock_tcp_undecided(s)) &&
	    !sock_tcp_unsupported_call(s, "fcntl(F_SETFL, O_ASYNC) (signal-driven I/O)"))
		return -1;
	if ((cmd == F_GETFL || cmd == F_SETFL) && offloaded && g_cfg.avoid_sys_calls_on_tcp_fd) {
		int ret = sock_tcp_fcntl_without_kernel(s, cmd, arg);
		if (ret != SOCK_TCP_NOT_SERVED)
			return ret;
	}
	if (cmd == F_SETFL)
		s->kernel_fl = -1;   /* read again when next needed */
	if (s->mode == SOCK_TCP_LISTENER && cmd == F_GETFL) {
		/* The kernel listener is non-blocking for our own use; the app
		 * sees its own flag. */
		int fl = OS_CALL(fcntl, obj->fd, cmd, arg);
		if (fl != -1 && !s->base.nonblocking)
			fl &= ~O_NONBLOCK;
		return fl;
	}
	if (s->mode == SOCK_TCP_LISTENER && cmd == F_SETFL) {
		int ret = OS_CALL(fcntl, obj->fd, cmd, (void *)((long)arg | O_NONBLOCK));
		if (ret != -1)
			sock_tcp_set_nonblocking(s, ((long)arg & O_NONBLOCK) != 0);
		return ret;
	}
	int ret = OS_CALL(fcntl, obj->fd, cmd, arg);
	if (ret != -1 && cmd == F_SETFL)
		sock_tcp_set_nonblocking(s, ((long)arg & O_NONBLOCK) != 0);
	return ret;
}

int sock_tcp_op_ioctl(struct sock_obj *obj, unsigned long req, void *arg)
{
	if (req != FIONBIO)
		sock_tcp_of(obj)->kernel_configured = true;
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (ctx && arg && (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD)) {
		if (s->mode == SOCK_TCP_LISTENER) {
			errno = EINVAL;
			return -1;
		}
		ctx = sock_tcp_lock(s, ctx);
		int v;
		if (req == FIONREAD) {
			if (!s->rxq_bytes)
				sock_offload_progress_locked(ctx);
			v = (int)s->rxq_bytes;
		} else {
			v = s->pcb ? (int)tcp_sndbuf_used(s->pcb) : 0;
		}
		sock_offload_unlock(ctx);
		*(int *)arg = v;
		return 0;
	}
	if (req == FIONBIO && arg && (s->mode == SOCK_TCP_LISTENER || (ctx && g_cfg.avoid_sys_calls_on_tcp_fd))) {
		/* The kernel listener stays non-blocking (our accept waits
		 * itself); an offloaded connection's kernel socket is never read. */
		sock_tcp_set_nonblocking(s, *(int *)arg != 0);
		return 0;
	}
	const char *unsupported = NULL;
	if (req == FIOASYNC && arg && *(int *)arg)
		unsupported = "ioctl(FIOASYNC) (signal-driven I/O)";
	else if (req == SIOCATMARK && ctx)
		unsupported = "ioctl(SIOCATMARK) (urgent data)";
	if (unsupported && (ctx || sock_tcp_undecided(s)) && !sock_tcp_unsupported_call(s, unsupported))
		return -1;
	int ret = OS_CALL(ioctl, obj->fd, req, arg);
	if (ret == 0 && req == FIONBIO && arg)
		sock_tcp_set_nonblocking(s, *(int *)arg != 0);
	if (ret == 0 && (req == FIONBIO || req == FIOASYNC))
		s->kernel_fl = -1;
	return ret;
}

int sock_tcp_op_getsockname(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (!sock_tcp_ctx(s))
		return OS_CALL(getsockname, obj->fd, addr, len);
	if (!addr || !len || (int)*len < 0) {
		errno = !len ? EFAULT : EINVAL;
		return -1;
	}
	sock_tcp_put_addr(addr, len, s->local_ip, s->local_port);
	return 0;
}

int sock_tcp_op_getpeername(struct sock_obj *obj, struct sockaddr *addr, socklen_t *len)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	if (!sock_tcp_ctx(s))
		return OS_CALL(getpeername, obj->fd, addr, len);
	if (!addr || !len || (int)*len < 0) {
		errno = !len ? EFAULT : EINVAL;
		return -1;
	}
	/* Linux: ENOTCONN unless connected; a connection that ended (reset,
	 * or both FINs exchanged: the socket is CLOSE, its TIME_WAIT lives
	 * apart) has no peer either. */
	struct sock_offload *ctx = s->ctx;
	ctx = sock_tcp_lock(s, ctx);
	bool ended = !s->pcb || s->reset;
	if (!ended) {
		enum tcp_state st = tcp_pcb_state(s->pcb);
		ended = st == TCP_TIME_WAIT || st == TCP_CLOSED;
	}
	bool ok = s->mode == SOCK_TCP_ACTIVE && s->established && !ended;
	sock_offload_unlock(ctx);
	if (!ok) {
		errno = ENOTCONN;
		return -1;
	}
	sock_tcp_put_addr(addr, len, s->remote_ip, s->remote_port);
	return 0;
}

int sock_tcp_op_shutdown(struct sock_obj *obj, int how)
{
	struct sock_tcp *s = sock_tcp_of(obj);
	struct sock_offload *ctx = sock_tcp_ctx(s);
	if (!ctx)
		return OS_CALL(shutdown, obj->fd, how);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		errno = EINVAL;
		return -1;
	}
	if (s->mode == SOCK_TCP_LISTENER) {
		if (how == SHUT_WR)
			return 0;
		/* Linux stops listening; accept() then fails with EINVAL. */
		ctx = sock_tcp_lock(s, ctx);
		sock_tcp_listener_close_locked(s, true);
		s->mode = SOCK_TCP_ACTIVE;
		s->reset = true;
		s->shut_rcv = s->shut_send = true;
		sock_offload_unlock(ctx);
		return OS_CALL(shutdown, obj->fd, how);
	}
	ctx = sock_tcp_lock(s, ctx);
	int err = 0;
	if (!s->pcb || (!s->established && !s->connecting)) {
		err = ENOTCONN;
	} else if (s->connecting) {
		/* Linux aborts a connect in progress. */
		sock_tcp_disconnect_locked(s, true);
		s->connecting = false;
		s->reset = true;
		s->shut_rcv = s->shut_send = true;
		sock_tcp_notify_locked(s, EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP);
	} else {
		bool rd = how != SHUT_WR, wr = how != SHUT_RD;
		if (wr && !s->shut_send) {
			sock_offload_clock_locked(ctx);
			tcp_shutdown(s->pcb, false, true);
			sock_tcp_tx_kick_locked(s);
		}
		if (rd)
			s->shut_rcv = true;
		if (wr)
			s->shut_send = true;
		sock_tcp_notify_locked(s, (rd ? EPOLLIN | EPOLLRDHUP : 0) | EPOLLOUT |
						  (s->shut_rcv && s->shut_send ? EPOLLHUP : 0));
	}
	sock_offload_unlock(ctx);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}
