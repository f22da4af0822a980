/* The TCP engine: pcbs with callbacks to a socket layer, over the stack's
 * IPv4 (see stack.h). One struct tcp_ctx per struct stack, attached with
 * tcp_ctx_create; the stack hands it every IPv4 protocol-6 packet, and
 * stack_timer_tick drives its timers. Everything runs on the caller's thread
 * and the caller's clock (the now_ms given to stack_timer_tick), so the engine
 * is fully deterministic under a test clock.
 *
 * Byte order: addresses and ports in network order (as in sockaddr_in).
 * Errors: negative errno. See docs/tcp.md for the RFC feature list. */
#ifndef VMA_STACK_TCP_H
#define VMA_STACK_TCP_H

#include <stdbool.h>
#include <stdint.h>

#include "stack/stack.h"

enum tcp_state {
	TCP_CLOSED, TCP_LISTEN, TCP_SYN_SENT, TCP_SYN_RCVD, TCP_ESTABLISHED,
	TCP_FIN_WAIT_1, TCP_FIN_WAIT_2, TCP_CLOSE_WAIT, TCP_CLOSING, TCP_LAST_ACK,
	TCP_TIME_WAIT
};

enum tcp_cc_algo { TCP_CC_NEWRENO = 0, TCP_CC_CUBIC = 1, TCP_CC_NONE = 2, TCP_CC_BBR = 3 }; /* VMA_TCP_CC_ALGO */
/* VMA_TCP_TIMESTAMP_OPTION: 2 ("follow the OS") is resolved by the socket
 * layer from net.ipv4.tcp_timestamps; the engine treats it as on. */
enum tcp_ts_mode { TCP_TS_OFF = 0, TCP_TS_ON = 1, TCP_TS_OS = 2 };

struct tcp_settings {
	bool nodelay;                  /* VMA_TCP_NODELAY: Nagle off for new pcbs */
	bool quickack;                 /* VMA_TCP_QUICKACK: no delayed ACKs */
	enum tcp_ts_mode timestamps;   /* RFC 7323 timestamps (RTTM + PAWS) */
	bool window_scaling;           /* RFC 7323 window scale option */
	bool sack;                     /* RFC 2018 SACK-permitted / SACK blocks */
	enum tcp_cc_algo cc_algo;
	uint32_t mss;                  /* VMA_MSS; 0 = mtu - 40 */
	uint32_t mtu;                  /* VMA_MTU; 0 = the netif's */
	uint32_t timer_resolution_ms;  /* VMA_TCP_TIMER_RESOLUTION_MSEC (fast timer) */
	uint32_t max_syn_rate;         /* VMA_TCP_MAX_SYN_RATE per listener per second; 0 = unlimited */
	uint32_t rcv_buf, snd_buf;     /* bytes per pcb (rcv_buf: the window offered) */
	/* Receive-buffer auto-tuning (Linux's tcp_rcv_space_adjust, "DRS"): a
	 * pcb whose rcv_buf was not set (tcp_set_bufsizes) grows its window as
	 * the application reads, each receiver RTT, up to rcv_buf_max (Linux:
	 * the window of net.ipv4.tcp_rmem[2]); 0 = rcv_buf stays. */
	uint32_t rcv_buf_max;
	/* Send-buffer auto-tuning (Linux's tcp_sndbuf_expand), under BBR: a
	 * pcb whose snd_buf was not set (tcp_set_bufsizes) and whose writer found the
	 * buffer full grows it, when an ACK frees room while fewer bytes are
	 * in flight than cwnd allows, to four cwnd (at least twice its size),
	 * up to snd_buf_max (Linux: net.ipv4.tcp_wmem[2]); 0 = snd_buf stays. */
	uint32_t snd_buf_max;
	/* Such a pcb's window scale is chosen from the largest buffer it may
	 * grow to, as Linux from max(tcp_rmem[2], net.core.rmem_max): the
	 * larger of rcv_buf and this. */
	uint32_t rcv_wscale_space;
	/* RFC 3168 ECN, as Linux's net.ipv4.tcp_ecn: 0 off, 1 asked for on
	 * active opens and accepted, 2 accepted when the peer asks (Linux's
	 * default) */
	uint8_t ecn;
	uint32_t ooo_max_bytes;        /* buffer memory (ring_buf.size) held out of order per pcb */
	uint32_t delack_ms;            /* delayed-ACK timeout */
	uint32_t rto_initial_ms, rto_min_ms, rto_max_ms;
	uint32_t max_retries;          /* RTO expiries in a row before ETIMEDOUT */
	uint32_t syn_retries;
	uint32_t time_wait_ms;         /* 2 MSL */
	uint32_t keepalive_idle_ms, keepalive_intvl_ms, keepalive_probes;
	/* RFC 5961 section 7: challenge ACKs per second for the whole process
	 * (every ctx), drawn anew each second at random in [base/2, base*3/2)
	 * so an off-path peer cannot count it (CVE-2016-5696); 0 = no budget */
	uint32_t challenge_ack_per_sec;
	/* Per pcb: at most one challenge ACK or ACK for an invalid segment
	 * (out of window without data, SYN, PAWS) per interval, as Linux's
	 * tcp_invalid_ratelimit; 0 = off */
	uint32_t invalid_ack_interval_ms;
	uint32_t none_cwnd_segments;   /* cwnd of the "none" algorithm, in segments */
	/* net.ipv4.tcp_slow_start_after_idle (Linux's default 1): NewReno and
	 * Cubic halve cwnd once per RTO the connection sent no data, down to
	 * the initial window, before they send again (tcp_cc_restart_after_idle) */
	bool slow_start_after_idle;
	uint32_t gro_streams_max;      /* VMA_GRO_STREAMS_MAX: pcbs coalescing in one rx batch; 0 = off */
	/* TCP_NOTSENT_LOWAT of pcbs that did not set one (net.ipv4.tcp_notsent_lowat);
	 * 0 or UINT32_MAX = none */
	uint32_t notsent_lowat;
	uint64_t isn_secret[2];        /* RFC 6528 key; all zero = random at create */
};

struct tcp_counters {
	uint64_t rx_segments, rx_bad_checksum, rx_bad_header, rx_no_pcb, rx_fragmented;
	uint64_t rx_handed_off;        /* segments of connections handed to the kernel: dropped, not reset */
	/* Lane moves (tcp_pcb_move): connections that moved in and out of
	 * this engine; segments that still reached it for a connection gone
	 * elsewhere (or a SYN for a listener elsewhere) and were passed on. */
	uint64_t moved_in, moved_out, rx_strays_passed;
	uint64_t rx_out_of_window, rx_paws_rejected, rx_duplicate_bytes, rx_ooo_dropped;
	uint64_t rx_rst_accepted, rx_rst_ignored, rx_syn_rate_limited, rx_backlog_full;
	uint64_t rx_share_other;   /* a listener's segment another sharer takes (admit) */
	/* Receive frames (docs/security.md): in-order segments refused because
	 * their socket already held its share of the ring's frames; out-of-order
	 * segments refused under frame pressure (rx_ooo_dropped also counts the
	 * per-connection ooo_max_bytes cap); segments dropped from out-of-order
	 * queues that made no progress for TCP_OOO_RENEGE_MS under pressure. */
	uint64_t rx_rcvq_pressure_dropped, rx_ooo_pressure_dropped, rx_ooo_reneged;
	/* Listen overflow (Linux's ListenOverflows): SYNs and handshake-ending
	 * ACKs dropped while the accept queue was full. */
	uint64_t rx_accept_queue_full;
	/* SYNs for a port whose listener here is gone, dropped, not reset (the
	 * retransmission finds the port's listeners elsewhere;
	 * docs/process_model.md, "Reload"): ones that ended a TIME_WAIT, and
	 * ones within tcp_ctx_listener_gone's time. */
	uint64_t rx_syn_listener_gone;
	/* SYN cookies (Linux's SyncookiesSent/Recv/Failed): SYN-ACKs answered
	 * statelessly while the SYN queue was full; ACKs that carried a valid
	 * cookie and became connections; ACKs to a listener with a bad one. */
	uint64_t tx_syncookies, rx_syncookies_ok, rx_syncookies_bad;
	uint64_t tx_segments, tx_retransmits, tx_rto_expiries, tx_fast_retransmits;
	uint64_t tx_lost_rexmits;      /* retransmissions RACK found lost again (resent before the RTO) */
	uint64_t tx_tail_probes;       /* tail loss probes sent (RFC 8985 section 7) */
	/* RACK-TLP (RFC 8985): segments RACK deemed lost; losses a tail loss
	 * probe repaired alone (Linux's TCPLossProbeRecovery); D-SACK blocks
	 * received (RFC 2883) */
	uint64_t tx_rack_lost, tx_tlp_recoveries, rx_dsacks;
	/* cwnd reductions undone: D-SACKs reported every retransmission of
	 * the recovery as needless (Linux's TCPDSACKUndo) */
	uint64_t tx_dsack_undos;
	/* Segments the fast path handled (tcp_fast.c): ACKs of new data, and
	 * in-order data (a segment may count in both) */
	uint64_t rx_fast_acks, rx_fast_data;
	uint64_t tx_challenge_acks, tx_rsts, tx_no_buf, tx_persist_probes, tx_keepalives;
	/* corked tails sent by the 200 ms ceiling (TCP_CORK never cleared) */
	uint64_t tx_cork_ceiling;
	/* ACKs not sent to a hostile (or looping) peer: challenge ACKs held by the
	 * pcb's interval or by the process's budget for this second; ACKs for
	 * invalid segments (out of window, PAWS, repeated SYN) held by the interval */
	uint64_t tx_challenge_acks_limited, tx_challenge_acks_over_budget, tx_invalid_acks_limited;
	/* demux cost: pcb lookups and hash-chain entries they examined */
	uint64_t lookups, lookup_steps;
	/* out-of-order queue cost: buffers visited by insertion and SACK block building */
	uint64_t ooo_walk_steps;
	/* RFC 4022-style connection counters (Linux /proc/net/snmp Tcp:) */
	uint64_t active_opens, passive_opens, attempt_fails, estab_resets, curr_estab;
	uint64_t rx_payload_bytes, tx_payload_bytes;   /* new bytes (no retransmits/duplicates) */
	uint64_t tx_pure_acks, tx_delayed_acks;        /* ACKs without data; ones sent by the delack timer */
	uint64_t rx_batch_merged, rx_batch_deliveries; /* segments merged into a batch; recv calls it made */
	/* Linux-like receive and ECN behaviour: ACKs sent at once by quick-ACK
	 * mode (connection start, after idle); receive windows grown by
	 * auto-tuning; CE-marked segments received; congestion window
	 * reductions for ECE; connections ended by TCP_USER_TIMEOUT */
	uint64_t tx_quick_acks, rx_rcvbuf_grown, rx_ecn_ce, tx_ecn_cwnd_reduced, tx_user_timeouts;
};

/* An out-of-order queue that made no progress for this long while the
 * ring is short of frames is dropped (reneged, RFC 2018 section 8): an
 * honest sender fills a hole within a few RTTs, one that leaves it to pin
 * frames never does. */
#define TCP_OOO_RENEGE_MS 1000u

struct tcp_ctx;
struct tcp_pcb;

/* Callbacks; arg is what tcp_set_callbacks was given. None runs after
 * tcp_close / tcp_abort returns. */
struct tcp_callbacks {
	/* In-order payload as a chain of RX buffers (data = first byte, tot_len
	 * = bytes); the callee owns one reference. buf NULL: the peer's FIN.
	 * The window reopens only when the app calls tcp_recved. */
	void (*recv)(void *arg, struct tcp_pcb *pcb, struct ring_buf *buf);
	/* Bytes of written data acknowledged (send buffer space freed); 0 when
	 * transmitting took the unsent bytes below TCP_NOTSENT_LOWAT. */
	void (*sent)(void *arg, struct tcp_pcb *pcb, uint32_t acked);
	/* Fatal: ECONNRESET, ECONNREFUSED, ETIMEDOUT. The pcb is already gone. */
	void (*err)(void *arg, int err);
	/* Active open completed (ESTABLISHED). */
	void (*connected)(void *arg, struct tcp_pcb *pcb);
	/* On a listener: child reached ESTABLISHED. Return 0 to keep it (set its
	 * callbacks here), negative to reset it. */
	int (*accept)(void *arg, struct tcp_pcb *listener, struct tcp_pcb *child);
	/* On a listener: whether this listener takes the new flow from
	 * remote_ip:remote_port that reached it through nif (a port whose
	 * every sharer sees each new flow: one takes it). False: the segment
	 * is dropped without an answer. NULL: always. */
	bool (*admit)(void *arg, const struct stack_netif *nif, uint32_t remote_ip, uint16_t remote_port);
	/* On a listener: a half-open child was made (its SYN-ACK goes next),
	 * and one that is gone before it reached accept (its handshake failed
	 * or timed out; not when the listener itself closes). NULL: none. */
	void (*child_born)(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child);
	void (*child_lost)(void *arg, struct tcp_pcb *listener, const struct tcp_pcb *child);
	/* Every slow-timer period while the pcb lives. */
	void (*poll)(void *arg, struct tcp_pcb *pcb);
	/* A transmit stamp asked by tcp_tx_stamp_request is due (kind: one
	 * TCP_TX_STAMP_*): [start, end) are the sequence numbers of the bytes
	 * of the write it belongs to, the stamp is for the byte before end.
	 * SCHED and SND pass the headers (Ethernet to TCP options) of the
	 * segment that carried that byte, ACK passes none (NULL, 0). Runs
	 * inside output or input: it must not call into the engine except
	 * tcp_sndbuf_peek. NULL: the stamps are dropped. */
	void (*tx_stamp)(void *arg, struct tcp_pcb *pcb, unsigned kind, uint32_t start, uint32_t end,
			 const uint8_t *hdr, uint32_t hdr_len);
};

/* Transmit stamps of a write (SO_TIMESTAMPING on a stream, Linux's
 * timestamping.rst: the last byte of a send call) */
#define TCP_TX_STAMP_SCHED 0x1u   /* the segment carrying the byte goes to the ring */
#define TCP_TX_STAMP_SND   0x2u   /* the ring took it (handed to the device) */
#define TCP_TX_STAMP_ACK   0x4u   /* the peer acknowledged it (cumulatively) */
/* Stamped writes a pcb tracks until their stamps are all due: with more
 * unacknowledged, the newest record moves on to the later write (its
 * earlier byte's remaining stamps are lost, as Linux loses the stamp of a
 * send whose last byte shares a not yet sent buffer with a later one). */
#define TCP_TX_STAMPS_MAX 64u

/* tcp_write flags */
#define TCP_WRITE_MORE 0x1   /* more follows: hold a partial segment (MSG_MORE) */
#define TCP_WRITE_PUSH 0x2   /* send now even if Nagle would wait */

/* A snapshot for TCP_INFO and stats. Sizes in bytes unless "segments". */
struct tcp_pcb_info {
	enum tcp_state state;
	uint32_t mss, cwnd, ssthresh, snd_wnd, rcv_wnd, flight;
	uint32_t srtt_ms, rttvar_ms, rto_ms, backoff;   /* backoff: RTOs in a row (tcpi_retransmits) */
	uint8_t snd_wscale, rcv_wscale;
	bool ts_ok, sack_ok, ws_ok, in_recovery;        /* negotiated options (tcpi_options) */
	uint32_t snd_una, snd_nxt, rcv_nxt;
	uint32_t ooo_segments, ooo_bytes_held;
	uint64_t retransmits;                           /* segments resent, ever (tcpi_total_retrans) */
	uint32_t rcv_mss;                               /* largest payload received (tcpi_rcv_mss) */
	uint32_t adv_mss;                               /* MSS we advertised (tcpi_advmss) */
	uint32_t unacked, sacked, lost;                 /* segments: in flight, SACKed, deemed lost */
	uint32_t rcv_space;                             /* receive buffer (tcpi_rcv_space) */
	uint32_t snd_buf_used, rcv_unread;              /* queued to send; given to recv, not consumed */
	uint32_t probes;                                /* unanswered keepalive / zero-window probes */
	uint32_t last_data_recv_ms, last_ack_recv_ms, last_data_sent_ms; /* ages, ms */
	uint64_t bytes_acked, bytes_received, segs_in, segs_out;   /* bytes_acked: the SYN too, as Linux */
	uint64_t bytes_sent, bytes_retrans;             /* payload sent (resends included), resent */
	uint32_t data_segs_in, data_segs_out;           /* segments carrying payload */
	uint32_t rcv_ooopack;                           /* segments queued out of order */
	uint32_t reord_seen, dsack_dups;                /* delivered out of order; reported duplicate */
	uint32_t total_rto;                             /* RTO expiries, SYN ones included */
	uint32_t notsent;                               /* queued, never transmitted */
	uint32_t pmtu;                                  /* the interface's IP MTU */
	uint32_t delack_ms;                             /* delayed-ACK timeout (tcpi_ato) */
	uint32_t delivered;                             /* segments acknowledged (estimated from bytes) */
	uint32_t rcv_wnd_max;                           /* most window we would offer (tcpi_rcv_ssthresh) */
	uint32_t min_rtt_ms;                            /* smallest RTT sample; UINT32_MAX = none */
	/* From timed segments in microseconds (0 / UINT32_MAX: none yet). */
	uint32_t srtt_us, rttvar_us, min_rtt_us;
	bool ecn_ok;                                    /* ECN negotiated (TCPI_OPT_ECN) */
	uint64_t delivery_rate;                         /* bytes/s of the last rate sample; 0: none */
	bool delivery_app_limited;                      /* that sample was app-limited */
	uint64_t pacing_rate;                           /* BBR's model rate (bytes/s); 0: not BBR */
	uint32_t snd_buf;                               /* send buffer's size (auto-tuning grows it) */
	uint32_t rcv_rtt_us;                            /* receiver's RTT estimate (tcpi_rcv_rtt); 0 = none */
	uint32_t user_timeout_ms;                       /* TCP_USER_TIMEOUT; 0 = none */
};

/* What the kernel needs to continue an established connection (TCP_REPAIR,
 * docs/process_model.md): sequence state, windows, options, and the bytes
 * of the send buffer (sent but unacknowledged, then unsent) in order, as
 * at most two pieces of the circular buffer. */
struct tcp_pcb_export {
	uint32_t snd_queue_seq;     /* sequence number of the first byte of the send buffer */
	uint32_t snd_nxt, rcv_nxt;
	uint32_t snd_wl1, snd_wnd, max_snd_wnd, rcv_wnd;
	uint32_t mss;
	uint8_t snd_wscale, rcv_wscale;
	bool ws_ok, ts_ok, sack_ok;
	uint32_t ts_now;            /* the TSval this side would send now */
	const uint8_t *snd_data[2];
	uint32_t snd_len[2];
};

void tcp_settings_default(struct tcp_settings *out);

/* Attaches a TCP engine to st, sending on nif (kept by pointer). NULL on
 * allocation failure or when st already has one. */
struct tcp_ctx *tcp_ctx_create(struct stack *st, const struct stack_netif *nif,
			       const struct tcp_settings *set);
/* Frees every pcb (no callbacks, nothing sent) and detaches from the stack. */
void tcp_ctx_destroy(struct tcp_ctx *ctx);
const struct tcp_counters *tcp_ctx_counters(const struct tcp_ctx *ctx);
/* Pcbs alive, including ones closing in the background (TIME_WAIT...). */
unsigned tcp_ctx_pcb_count(const struct tcp_ctx *ctx);

struct tcp_pcb *tcp_pcb_new(struct tcp_ctx *ctx);
void tcp_set_callbacks(struct tcp_pcb *pcb, const struct tcp_callbacks *cb, void *arg);
/* port must be non-zero; -EADDRINUSE if another pcb has ip:port bound,
 * unless both have SO_REUSEPORT. */
int tcp_bind(struct tcp_pcb *pcb, uint32_t ip, uint16_t port);
/* Before tcp_bind: SO_REUSEPORT. Listeners of one address that have it
 * form a group; a SYN goes to one of them chosen by a hash of its source
 * address and port (Linux's reuseport selection), so the connections
 * spread over the group. */
void tcp_pcb_set_reuseport(struct tcp_pcb *pcb, bool on);
/* Bound pcb only. As Linux: at most backlog children wait half-open (SYN
 * queue; beyond it SYNs are answered with SYN cookies), at most backlog + 1
 * established children wait to be accepted (accept queue; beyond it SYNs
 * and handshake-ending ACKs are dropped, the peer retries). */
int tcp_listen(struct tcp_pcb *pcb, unsigned backlog);
/* The application took one established child of listener lis (accept). */
void tcp_listen_accepted(struct tcp_pcb *lis);
/* Bound pcb (the socket layer picks the port); local_ip replaces a bound
 * INADDR_ANY; dst_mac is the next hop. Sends the SYN. */
int tcp_connect(struct tcp_pcb *pcb, uint32_t ip, uint16_t port, uint32_t local_ip,
		const uint8_t dst_mac[6]);
/* Copies up to len bytes into the send buffer: returns bytes taken (maybe
 * fewer), -EAGAIN when full, -ENOTCONN / -EPIPE by state. Sends per Nagle
 * unless TCP_WRITE_MORE. */
int tcp_write(struct tcp_pcb *pcb, const void *data, uint32_t len, unsigned flags);
/* Asks for the stamps in kinds (TCP_TX_STAMP_*) of the last byte queued in
 * the send buffer, which ends a write of len bytes (the bytes [end - len,
 * end) the callback names). Call it before tcp_output sends that byte;
 * stamps of a byte already sent are due at once (SCHED, SND). The first
 * request allocates the pcb's record ring (TCP_TX_STAMPS_MAX records);
 * false when nothing is queued or on allocation failure. */
bool tcp_tx_stamp_request(struct tcp_pcb *pcb, unsigned kinds, uint32_t len);
/* Copies the bytes [seq, seq + len) still in the send buffer (the part
 * not yet acknowledged and dropped) to dst; returns the bytes copied,
 * which are those from max(seq, oldest byte held). */
uint32_t tcp_sndbuf_peek(const struct tcp_pcb *pcb, uint32_t seq, uint32_t len, uint8_t *dst);
/* Sequence numbers Linux's SOF_TIMESTAMPING_OPT_ID counts from: snd_una
 * (oldest unacknowledged), or write_seq (after the last byte queued). */
uint32_t tcp_snd_una(const struct tcp_pcb *pcb);
uint32_t tcp_write_seq(const struct tcp_pcb *pcb);
/* Sends whatever window, cwnd and Nagle allow (and a pending ACK). */
int tcp_output(struct tcp_pcb *pcb);
/* The app consumed len bytes given by recv: reopens the window. */
void tcp_recved(struct tcp_pcb *pcb, uint32_t len);
/* The socket layer holds frames RX buffers of this connection's in-order
 * data now: the engine refuses further in-order segments (unacknowledged,
 * the peer resends) while that is at the ring's holder cap
 * (ring_buf_pool_holder_cap). */
void tcp_rcv_held_set(struct tcp_pcb *pcb, uint32_t frames);
/* wr: sends FIN after the queued data. rd: further data is dropped. */
int tcp_shutdown(struct tcp_pcb *pcb, bool rd, bool wr);
/* Graceful close; the engine finishes the handshake and frees the pcb. */
int tcp_close(struct tcp_pcb *pcb);
/* Sends RST (when synchronized) and frees the pcb now. */
void tcp_abort(struct tcp_pcb *pcb);

/* Per-pcb overrides of the ctx settings, before tcp_connect / tcp_listen
 * unless said otherwise. Children of a listener inherit every one of them
 * (nodelay, quickack, keepalive and its params, buffer sizes, MSS clamp,
 * SYN retries); their netif is the one their SYN arrived on. */
/* Interface this pcb transmits on (default: the ctx's); MSS follows its MTU. */
void tcp_set_netif(struct tcp_pcb *pcb, const struct stack_netif *nif);
/* 0 = keep. rcv_buf (SO_RCVBUF, as a window: Linux's half of the doubled
 * value): fixes the window, ending auto-tuning (settings.rcv_buf_max); the
 * window scale is chosen from it when the SYN leaves (or arrives, for
 * children), so set it before connect/listen; later changes only move the
 * window within that scale. snd_buf may change any time (never
 * below the bytes already queued). Returns nothing: on allocation failure the
 * old send buffer stays. */
void tcp_set_bufsizes(struct tcp_pcb *pcb, uint32_t rcv_buf, uint32_t snd_buf);
/* TCP_CONGESTION: this pcb's congestion control (the settings' cc_algo
 * otherwise; children take their listener's). Any time: a live
 * connection keeps its cwnd and starts the new algorithm's state. */
void tcp_set_cc_algo(struct tcp_pcb *pcb, enum tcp_cc_algo algo);
enum tcp_cc_algo tcp_cc_algo_of(const struct tcp_pcb *pcb);
/* Any time; 0 = keep. A running idle timer restarts from the last segment received. */
void tcp_set_keepalive_params(struct tcp_pcb *pcb, uint32_t idle_ms, uint32_t intvl_ms,
			      uint32_t probes);
/* TCP_USER_TIMEOUT (any time, 0 = off; children inherit it): as Linux, a
 * connection whose oldest unacknowledged data (or SYN) has waited this long
 * for an ACK is reset and ends with ETIMEDOUT at the next retransmission
 * timeout, which is brought forward to that moment. */
void tcp_set_user_timeout(struct tcp_pcb *pcb, uint32_t ms);
/* TCP_SYNCNT: SYN (or SYN-ACK) retransmissions before ETIMEDOUT; 0 = keep. */
void tcp_set_syn_retries(struct tcp_pcb *pcb, uint32_t retries);
/* TCP_MAXSEG: upper bound on our MSS (advertised in the SYN); 0 = none. */
void tcp_set_mss_clamp(struct tcp_pcb *pcb, uint32_t mss);
/* A route's TCP metrics (`ip route ... mtu M advmss A`); 0 = not set. */
struct tcp_route_metrics {
	uint32_t mtu;      /* path MTU: segments we send fit in it */
	uint32_t advmss;   /* the MSS our SYN / SYN-ACK announces */
};
/* Active open, before tcp_connect: the route toward the peer. As Linux: the
 * MSS we announce is advmss if set, else the path MTU (the route's, else
 * the interface's) less 40; the MSS we send with is the peer's, bounded by
 * the path MTU less 40 (and by TCP_MAXSEG / VMA_MSS). NULL clears them. */
void tcp_set_route_metrics(struct tcp_pcb *pcb, const struct tcp_route_metrics *rm);
/* Passive opens: fn is asked for the route toward the sender of every SYN
 * a listener answers, before its SYN-ACK (NULL fn: no route metrics). It
 * runs inside input and must not call into the engine. */
typedef void (*tcp_route_fn)(void *arg, uint32_t remote_ip, struct tcp_route_metrics *out);
void tcp_ctx_set_route_hook(struct tcp_ctx *ctx, tcp_route_fn fn, void *arg);
/* fn is told once when a pcb enters the table of connections (it has its
 * 4-tuple: an active open, a listener's child) and once when it is done
 * with (on false): it enters TIME_WAIT (both FINs are through; a
 * connection-rate workload keeps thousands there for 2 MSL), or leaves
 * the table (freed, or handed away), whichever comes first. It gets a word
 * of the pcb's for its own use (0 at first). Addresses and ports in
 * network order. Runs inside the engine and must not call into it. NULL
 * fn: nobody is told. */
typedef void (*tcp_conn_fn)(void *arg, uint32_t local_ip, uint16_t local_port, uint32_t remote_ip,
			    uint16_t remote_port, uint32_t *cookie, bool on);
void tcp_ctx_set_conn_hook(struct tcp_ctx *ctx, tcp_conn_fn fn, void *arg);
/* Bytes in the send buffer: not yet sent plus sent and not acknowledged. */
uint32_t tcp_sndbuf_used(const struct tcp_pcb *pcb);
/* Bytes in the send buffer never transmitted (Linux's write_seq - snd_nxt). */
uint32_t tcp_sndbuf_notsent(const struct tcp_pcb *pcb);
/* TCP_NOTSENT_LOWAT (0 = the ctx's settings.notsent_lowat; children inherit
 * it): when a transmission takes the unsent bytes from at least lowat to
 * below it, the sent callback runs with acked = 0 so a held writer can go on. */
void tcp_set_notsent_lowat(struct tcp_pcb *pcb, uint32_t lowat);
/* Bytes a write may queue under TCP_NOTSENT_LOWAT: UINT32_MAX without one,
 * 0 while the unsent bytes reach it, else up to it but at least one MSS
 * (as Linux fills the segment it started below the mark). */
uint32_t tcp_sndbuf_lowat_room(const struct tcp_pcb *pcb);
/* poll's side of TCP_NOTSENT_LOWAT (Linux tcp_stream_memory_free with
 * wake): writable while twice the unsent bytes stay below the mark, so a
 * woken writer finds room for a good part of it. */
bool tcp_sndbuf_lowat_writable(const struct tcp_pcb *pcb);

/* Receive coalescing across one ring poll batch (VMA_GRO_STREAMS_MAX =
 * settings.gro_streams_max). Between begin and end, in-order payload of up to
 * gro_streams_max pcbs is collected and handed to recv once per pcb at end
 * (the oldest pcb is flushed early when the limit is reached; a pcb's FIN or
 * error flushes its data first). ACKs leave exactly as without batching.
 * Nested begin/end pairs are counted: only the outermost end delivers. */
void tcp_rx_batch_begin(struct tcp_ctx *ctx);
void tcp_rx_batch_end(struct tcp_ctx *ctx);

void tcp_set_nodelay(struct tcp_pcb *pcb, bool on);
/* TCP_CORK: on, a partial segment waits for more data (at most
 * TCP_CORK_CEILING_MS once nothing is in flight); off, what waits goes
 * as Nagle allows (all of it with nodelay). */
void tcp_set_cork(struct tcp_pcb *pcb, bool on);
bool tcp_corked(const struct tcp_pcb *pcb);
/* Sends what cork and Nagle hold, once, as Linux does when TCP_NODELAY is
 * set (even on a corked socket); window and cwnd still apply. */
void tcp_push(struct tcp_pcb *pcb);
#define TCP_CORK_CEILING_MS 200
void tcp_set_quickack(struct tcp_pcb *pcb, bool on);
void tcp_set_keepalive(struct tcp_pcb *pcb, bool on);
enum tcp_state tcp_pcb_state(const struct tcp_pcb *pcb);
uint32_t tcp_sndbuf_free(const struct tcp_pcb *pcb);
void tcp_pcb_get_info(const struct tcp_pcb *pcb, struct tcp_pcb_info *out);
/* Fills *out for an ESTABLISHED pcb with no FIN queued, sent or received
 * and nothing held out of order; -EINVAL otherwise. */
int tcp_pcb_export(const struct tcp_pcb *pcb, struct tcp_pcb_export *out);
/* The same for a pcb the application closed (tcp_shutdown with our FIN
 * queued) whose FIN is not acknowledged yet: ESTABLISHED or CLOSE_WAIT with
 * data still to send, FIN_WAIT_1, CLOSING, LAST_ACK. The send buffer holds
 * the data only (the kernel taking over sends its own FIN); rcv_nxt counts
 * the peer's FIN when it came. -EINVAL otherwise. */
int tcp_pcb_export_closed(const struct tcp_pcb *pcb, struct tcp_pcb_export *out);
/* Frees the pcb without sending anything (its connection now lives
 * elsewhere: the kernel took it over). No callback runs. */
void tcp_pcb_forget(struct tcp_pcb *pcb);

/* ---- moving connections between engines (lanes; docs/process_model.md) ---- */

/* Where a segment came from, for a segment passed between engines. */
struct tcp_seg_origin {
	uint32_t src, dst;       /* IPv4, network order */
	uint8_t ttl, tos;
	uint8_t src_mac[6];
	int ifindex;
};
/* A segment reached this engine for a connection that moved to another
 * (dest_arg: that engine's stray hook argument), or a SYN reopening a
 * moved-in connection's TIME_WAIT where no listener of the port is
 * (dest_arg NULL: whichever engine holds the listener). seg/len: the whole
 * TCP segment, checksum verified. Runs inside input with this engine's
 * owner locked; it must copy what it keeps and not call into any engine. */
typedef void (*tcp_stray_fn)(void *arg, void *dest_arg, const struct tcp_seg_origin *from, const uint8_t *seg,
			     uint32_t len);
void tcp_ctx_set_stray_hook(struct tcp_ctx *ctx, tcp_stray_fn fn, void *arg);
/* This engine's listener on ip:port (network order; ip 0: any) closed
 * while other processes serve the port (a share group's member leaving,
 * a pre-fork server's worker at a reload). For ms, SYNs the steering
 * brought here before it changed find no listener and are dropped, not
 * reset: the peer's retransmission reaches one that listens, as Linux's
 * one listening socket would take them. */
void tcp_ctx_listener_gone(struct tcp_ctx *ctx, uint32_t ip, uint16_t port, uint32_t ms);
/* Moves a synchronized connection (ESTABLISHED or CLOSE_WAIT, outside
 * input) to engine `to`, sending on nif there; its callbacks go with it.
 * The out-of-order queue, whose frames belong to the old engine's ring, is
 * dropped (reneged, RFC 2018 section 8: the peer keeps what we did not
 * acknowledge); the caller owns the in-order data it already took. The old
 * engine passes segments of the connection that still reach it to its
 * stray hook for a while. Both engines' owners must be locked; `to`'s clock
 * must not be behind the old one's (timestamps stay monotonic). 0, or
 * -EINVAL with nothing changed. */
int tcp_pcb_move(struct tcp_pcb *pcb, struct tcp_ctx *to, const struct stack_netif *nif);
/* Feeds a segment passed on by another engine's stray hook: buf holds the
 * whole TCP segment (data = TCP header, len = segment length) and is
 * consumed; nif is this engine's interface of from->ifindex. */
void tcp_input_passed(struct tcp_ctx *ctx, const struct stack_netif *nif, struct ring_buf *buf,
		      const struct tcp_seg_origin *from);
/* Calls fn for each half-open child of listener lis (SYN answered, the
 * handshake's last ACK not in yet); returns their count. */
unsigned tcp_listener_half_open(struct tcp_pcb *lis, void (*fn)(void *arg, const struct tcp_pcb *child), void *arg);
void tcp_pcb_get_addr(const struct tcp_pcb *pcb, uint32_t *local_ip, uint16_t *local_port,
		      uint32_t *remote_ip, uint16_t *remote_port);
const char *tcp_state_name(enum tcp_state s);

/* Called by stack_timer_tick; exposed for callers that drive TCP alone.
 * Runs every timer that is due at now_ms (any time it is called); the
 * routine scan (keepalive, TIME_WAIT) keeps the timer_resolution_ms period. */
void tcp_timer_tick(struct tcp_ctx *ctx, uint64_t now_ms);
/* Earliest deadline (ms, the tcp_timer_tick clock) of a retransmission, tail
 * loss probe, recovery probe, delayed ACK or persist timer of any pcb;
 * UINT64_MAX when no pcb has one. O(1); it may be
 * early (a cancelled timer), never late: call tcp_timer_tick when reached. */
uint64_t tcp_ctx_next_deadline_ms(const struct tcp_ctx *ctx);

#endif
