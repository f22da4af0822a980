/* Shared between the tcp_*.c files only. */
#ifndef VMA_STACK_TCP_PRIV_H
#define VMA_STACK_TCP_PRIV_H

#include "stack/stack_internal.h"
#include "stack/tcp.h"
#include "log/vlog.h"   /* VMA_ASSERT */
#include "stack/stack_hdr.h"

#define TCP_HLEN          20u
#define TCP_MAX_OPT_LEN   40u
/* The timestamps option as every stack aligns it (RFC 7323 appendix A):
 * NOP, NOP, kind 8, length 10, TSval, TSecr. */
#define TCP_TS_OPT_LEN    12u
#define TCP_TS_OPT_HEAD   0x0101080au
#define TCP_SACK_MAX_BLOCKS 4u   /* we generate at most 3 (with timestamps) */
#define TCP_SCOREBOARD_MAX 32u
#define TCP_MAX_WSCALE    14u
/* SYN-ACK retransmissions of a half-open child (Linux tcp_synack_retries). */
#define TCP_SYNACK_RETRIES 5u
#define TCP_OFO_QUICK_ACKS 3u    /* immediate duplicate ACKs per rcv_nxt */
/* An out-of-order segment this long is held within the window whatever
 * ooo_max_bytes says (a sender's window, not a spray of tiny segments). */
#define TCP_OOO_FULL_SEG 512u
#define TCP_OFO_ACK_BATCH 44u    /* Linux's tcp_comp_sack_nr */
/* Delayed ACKs of in-order data wait for more than this many bytes
 * unacknowledged (or the payload of the largest segment seen, if bigger),
 * as Linux's rcv_mss estimate: a stream of tiny segments is acknowledged
 * every ~536 bytes or by the delayed-ACK timer, not every second segment. */
#define TCP_ACK_MIN_BYTES 536u
/* Quick-ACK mode grants at most this many immediate ACKs (Linux's TCP_MAX_QUICKACKS) */
#define TCP_MAX_QUICKACKS 16u

/* IPv4 ECN field (RFC 3168) */
#define TCP_IP_ECN_MASK 0x03
#define TCP_IP_ECT0     0x02
#define TCP_IP_CE       0x03

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_ACK 0x10
#define TCP_URG 0x20
#define TCP_ECE 0x40
#define TCP_CWR 0x80

#define SEQ_LT(a, b)  ((int32_t)((uint32_t)(a) - (uint32_t)(b)) < 0)
#define SEQ_LEQ(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)) <= 0)
#define SEQ_GT(a, b)  SEQ_LT(b, a)
#define SEQ_GEQ(a, b) SEQ_LEQ(b, a)

/* Parsed options of one segment. */
struct tcp_opts {
	bool has_mss, has_ws, sack_perm, has_ts;
	uint16_t mss;
	uint8_t ws;
	uint32_t ts_val, ts_ecr;
	uint8_t nsack;
	uint32_t sack[TCP_SACK_MAX_BLOCKS][2];
};

/* A received segment after header parsing. */
struct tcp_seg {
	uint32_t seq, ack, len;          /* len: payload bytes */
	uint8_t flags;                   /* FIN..URG; ECE and CWR in ecn_flags */
	uint8_t ecn_flags;               /* TCP_ECE / TCP_CWR of the header */
	uint8_t ip_ecn;                  /* the IP header's ECN field */
	uint32_t wnd;                    /* unscaled header value */
	struct tcp_opts opt;
	struct ring_buf *buf;            /* data at payload, len = payload (or NULL) */
};

/* One received segment and where it came from (tcp_in.c): the parsed
 * header, the IPv4 facts, the interface it arrived on and the sender's MAC
 * and ports, what an answer to a segment without a connection needs. */
struct tcp_rx {
	struct tcp_seg seg;
	const struct stack_netif *nif;
	const struct stack_ip4_info *ip;
	const uint8_t *src_mac;
	uint16_t sport, dport;           /* network order: the sender's port, ours */
	const uint8_t *hdr;              /* the TCP header */
	uint32_t len;                    /* the whole segment (header included) */
};

/* Sequence space a segment takes: its payload, plus one each for SYN and FIN. */
static inline uint32_t tcp_seg_space(const struct tcp_seg *seg)
{
	return seg->len + !!(seg->flags & TCP_SYN) + !!(seg->flags & TCP_FIN);
}

struct tcp_range { uint32_t start, end; };

/* One transmission of the sequence space [start, end) (payload, plus 1
 * for a FIN), kept until cumulatively acknowledged (tcp_txq.c). */
#define TCP_TXSEG_SACKED  0x01   /* wholly SACKed: delivered */
#define TCP_TXSEG_LOST    0x02   /* deemed lost, waiting to be resent */
#define TCP_TXSEG_RETRANS 0x04   /* sent more than once */
#define TCP_TXSEG_FIN     0x08
#define TCP_TXSEG_PROBE   0x10   /* latest transmission was a tail loss probe */
#define TCP_TXSEG_APP_LIMITED 0x20 /* left while the sender was app-limited (tcp_rate_*) */
#define TCP_TXQ_NONE      0xffffu
#define TCP_TXQ_MAX       32768u

struct tcp_txseg {
	uint32_t start, end;
	uint32_t xmit_us;            /* the us clock (low 32 bits) at its latest transmission */
	/* the pcb's count of transmissions then: which of two segments left
	 * later, also within one microsecond (a burst of ACKs processed at
	 * one clock reading sends new data and retransmissions in any order) */
	uint32_t order;
	/* The delivery rate's state at its latest transmission (tcp_rate_stamp):
	 * bytes delivered then (low 32 bits), when that count last moved, and
	 * when the first segment of its flight left (us clock, low 32 bits). */
	uint32_t rate_delivered, rate_delivered_us, rate_first_us;
	uint16_t tprev, tnext;       /* time-ordered list of records in flight */
	uint8_t flags;
};

/* Records in sequence order, a ring of mask + 1: [head, head + count)
 * cover [snd_una, snd_max) without gaps. The ones in flight (neither
 * SACKed nor lost) are also on a list in order of transmission, oldest
 * first, as RACK walks them (a resent record moves to its end). */
struct tcp_txq {
	struct tcp_txseg *seg;       /* NULL: not tracked (no memory) */
	uint32_t mask, head, count;
	uint16_t thead, ttail;
	uint32_t lost_bytes, lost_segs, sacked_segs;
	uint32_t lost_hint;          /* no record below this offset (from head) is lost */
	uint32_t order;              /* transmissions so far (tcp_txseg.order) */
};

/* RACK (RFC 8985): the most recently sent segment known delivered. */
struct tcp_rack {
	uint32_t xmit_us, order;     /* valid when have */
	uint32_t rtt_us;             /* its round trip */
	uint32_t fack;               /* highest end delivered (RACK.fack) */
	uint32_t dsack_round;        /* snd_nxt when the window last grew for a D-SACK */
	uint8_t reo_wnd_mult, reo_wnd_persist;
	bool have, reordering_seen, dsack_round_on;
};

/* The Ethernet, IPv4 and TCP headers of one connection, built once for
 * its interface (tcp_out.c): a segment copies them and writes only its
 * sequence and acknowledgment numbers, flags, window, options, lengths and
 * IPv4 id, the IPv4 checksum completed from ip_sum (the words no segment
 * changes) and the TCP one from tcp_sum (the pseudo header but its length,
 * and the ports). */
#define TCP_TMPL_LEN (STACK_ETH_HLEN + STACK_IP4_HLEN + TCP_HLEN)
struct tcp_tmpl {
	uint8_t hdr[TCP_TMPL_LEN];
	const struct stack_netif *nif;   /* built for this interface; NULL: not built */
	uint16_t *ip_id;                 /* the IPv4 id counter of the tuple */
	uint64_t ip_sum, tcp_sum;
};

/* Delivery rate estimation (draft-cheng-iccrg-delivery-rate-estimation,
 * as Linux's tcp_rate.c does it): bytes delivered so far and when that
 * count last moved, when the flight now in the network began, and up to
 * which count the samples are app-limited (0: not app-limited). */
struct tcp_rate {
	uint64_t delivered;
	uint32_t delivered_us, first_us;
	uint64_t app_limited;
	/* the last valid sample: bytes over us (tcpi_delivery_rate) */
	uint32_t last_bytes, last_interval_us;
	bool last_app_limited;
};

/* What one ACK delivered, from the most recently sent record among those
 * it delivered: tcp_rack_on_ack fills it, tcp_ack_loss_and_window turns it
 * into a rate. */
struct tcp_rate_sample {
	bool have, app_limited;
	bool valid;                      /* tcp_rate_on_ack: it makes a sample */
	uint32_t order;                  /* the record's transmission order */
	uint32_t prior_delivered, prior_us, send_elapsed_us;
	int32_t rtt_us;                  /* its round trip; -1: a retransmission (ambiguous) */
};

/* BBR (v1, as described by Cardwell et al., ACM Queue 2016, and the IETF
 * draft draft-cardwell-iccrg-bbr-congestion-control-00): a model of the
 * path (the bottleneck's bandwidth, a windowed max over 10 round trips, and
 * the round trip's floor, a min over 10 s) instead of loss as the signal;
 * cwnd is cwnd_gain bandwidth-delay products. Gains in 1/256. */
#define TCP_BBR_BW_ROUNDS 10u
struct tcp_bbr {
	uint8_t mode;                    /* TCP_BBR_STARTUP ... */
	uint8_t cycle_idx;               /* PROBE_BW's gain phase */
	uint8_t full_bw_cnt;             /* rounds without 25% growth */
	bool full_bw_reached, round_start, conserve, probe_rtt_round_done;
	uint16_t pacing_gain, cwnd_gain;
	uint32_t round_count;
	uint32_t next_round_delivered;   /* low 32 bits of rate.delivered */
	uint64_t full_bw;                /* bytes/s */
	uint64_t bw_round[TCP_BBR_BW_ROUNDS]; /* max sample of each of the last rounds */
	uint32_t min_rtt_us;             /* UINT32_MAX: none yet */
	uint64_t min_rtt_stamp_us;
	uint64_t probe_rtt_done_us;      /* 0: not yet timed */
	uint64_t cycle_stamp_us;
	uint32_t prior_cwnd;             /* cwnd before recovery or an RTO */
	/* ACK aggregation: bytes ACKed beyond what the bandwidth explains
	 * since an epoch began (a receiver ACKing batches, a sender's
	 * batched doorbells), a max over two windows of 5 rounds each */
	uint64_t ack_epoch_us;
	uint32_t ack_epoch_acked;
	uint32_t extra_acked[2];
	uint8_t extra_acked_idx, extra_acked_rounds;
};

struct tcp_cc_state {
	/* Cubic (RFC 9438) */
	uint64_t epoch_start_ms;         /* 0 = no epoch */
	double w_max, k, w_est, cwnd_at_epoch;
	struct tcp_bbr bbr;
};

struct tcp_pcb {
	struct tcp_ctx *ctx;
	const struct stack_netif *nif;   /* TX interface */
	enum tcp_state state;
	uint32_t local_ip, remote_ip;
	uint16_t local_port, remote_port;
	uint8_t dst_mac[6];
	bool bound, detached, dead, rd_shut, wr_shut, fin_rcvd, nodelay, quickack, keepalive;
	bool reuseport;                  /* SO_REUSEPORT: shares its address (tcp_pcb_set_reuseport) */
	struct tcp_tmpl tmpl;            /* headers of its segments (tcp_out.c) */
	struct tcp_callbacks cb;
	void *cb_arg;
	struct tcp_pcb *next, *prev;     /* ctx->pcbs (every pcb, dead ones until reaped) */
	struct tcp_pcb *hnext;           /* chain in ctx->conns or ctx->ports */
	uint8_t hashed;                  /* TCP_HASH_NONE / _CONN / _PORT */
	uint32_t conn_cookie;            /* the conn hook's word (tcp_ctx_set_conn_hook) */
	bool conn_told;                  /* the conn hook was told "on" and not yet "off" */
	struct tcp_pcb *parent;          /* listener of a child not yet accepted */
	unsigned backlog, pending_children;
	unsigned accept_queued;          /* established children not yet accepted */
	uint64_t syn_window_start_ms;
	uint32_t syn_in_window;

	/* send side */
	uint32_t iss, snd_una, snd_nxt, snd_max, snd_wnd, max_snd_wnd, snd_wl1, snd_wl2;
	uint8_t *sbuf;                   /* circular; byte at seq s is at (s - sbuf_seq + sbuf_off) */
	uint32_t sbuf_size, sbuf_len, sbuf_off, sbuf_seq; /* sbuf_seq: seq of the oldest byte */
	bool fin_queued, fin_sent, syn_acked;
	uint32_t snd_sml;                /* end of the last small segment sent (Minshall's Nagle) */
	uint32_t mss, peer_mss;
	uint32_t adv_mss, mss_clamp;     /* MSS we advertise; TCP_MAXSEG (0 = none) */
	struct tcp_route_metrics route;  /* of the route toward the peer (0s: none) */
	uint32_t syn_retries;
	uint32_t ka_idle_ms, ka_intvl_ms, ka_probes;
	uint8_t snd_wscale, rcv_wscale;
	bool ws_ok, ts_ok, sack_ok;
	uint32_t ts_recent, last_ack_sent;
	/* congestion control and recovery: fast recovery (in_recovery, until
	 * snd_una reaches recover) or the loss state after an RTO (in_loss,
	 * the same bound); dupacks only count without SACK */
	uint32_t cwnd, ssthresh, dupacks, recover, bytes_acked_ca;
	bool in_recovery, in_loss;
	/* How much of cwnd the sender used (Linux's tcp_cwnd_validate, for
	 * tcp_is_cwnd_limited): NewReno and Cubic grow cwnd only while it
	 * limits the sender. cwnd_limited: a transmission in the window that
	 * ends at cwnd_usage_seq found cwnd full; max_flight: the most in
	 * flight then (bytes). tcp_cc_note_usage writes them. */
	bool cwnd_limited;
	uint32_t max_flight, cwnd_usage_seq;
	uint64_t data_sent_ms;   /* when new data last left (0: never), for the restart after idle */
	/* PRR (RFC 6937, as Linux's tcp_cwnd_reduction): cwnd when recovery
	 * began, bytes delivered and sent since */
	uint32_t prior_cwnd, prr_delivered, prr_out;
	/* Undo (Linux's tcp_try_undo_dsack and tcp_try_undo_recovery): from
	 * a fast recovery's start (undo_marker = snd_una then) the segments
	 * resent, less those D-SACKs below snd_una and above the marker
	 * report as duplicates; none left: the reduction was needless and
	 * cwnd and ssthresh go back. -1: nothing resent yet. */
	bool undo_armed;
	uint32_t undo_marker, prior_ssthresh;
	int32_t undo_retrans;
	struct tcp_range sacked[TCP_SCOREBOARD_MAX];
	unsigned nsacked;
	/* Every transmission still unacknowledged, one record per segment
	 * (tcp_txq.c), and RACK's view of them (tcp_rack.c). */
	struct tcp_txq txq;
	struct tcp_rack rack;
	uint64_t delivered_segs;         /* segments cumulatively or selectively acknowledged */
	/* Delivery rate samples are taken only when a congestion control
	 * reads them (BBR): they cost a ping-pong round trip about 170
	 * instructions (callgrind, tests/bench/engine_instructions.sh). */
	bool rate_sampling;
	uint8_t cc_algo;                 /* enum tcp_cc_algo: the settings', a listener's, TCP_CONGESTION */
	struct tcp_rate rate;
	struct tcp_rate_sample rs;       /* of the ACK being processed */
	uint64_t dsack_bytes;            /* reported duplicate (D-SACK), ever */
	uint32_t dsack_dups;             /* segments reported duplicate (tcpi_dsack_dups) */
	uint32_t reord_seen;             /* segments delivered below one delivered later (tcpi_reord_seen) */
	struct tcp_cc_state cc;
	/* RTT (RFC 6298) */
	uint32_t srtt_ms, rttvar_ms, rto_ms, backoff;
	uint32_t min_rtt_ms;             /* smallest sample (tcpi_min_rtt); UINT32_MAX = none yet */
	bool rtt_timing;
	uint32_t rtt_seq;
	uint64_t rtt_start_ms;
	/* Microsecond RTT of the timed segment, for TCP_INFO only (timers
	 * keep the millisecond estimate above, which timestamps also feed):
	 * a veth or a NIC next door answers in well under a millisecond. */
	uint64_t rtt_start_us;
	uint32_t srtt_us, rttvar_us, min_rtt_us;   /* min: UINT32_MAX = none */
	uint64_t retransmits;
	uint64_t bytes_acked, segs_out, last_data_tx_ms;
	/* TCP_INFO's RFC 4898 counters: payload bytes sent (retransmissions
	 * included) and resent, segments carrying data, RTO expiries */
	uint64_t bytes_sent, bytes_retrans;
	uint32_t data_segs_out, total_rto;
	/* TCP_NOTSENT_LOWAT: the sent callback also fires (acked = 0) when
	 * transmitting takes the unsent bytes below this; UINT32_MAX = off */
	uint32_t notsent_lowat;
	bool counted_estab;              /* in cnt.curr_estab */
	/* TCP_USER_TIMEOUT (0 = off) and when the oldest unacknowledged data
	 * (or the SYN) was sent: the flight started, or an ACK moved snd_una */
	uint32_t user_timeout_ms;
	uint64_t una_since_ms;
	/* ECN (RFC 3168): negotiated; the peer saw CE from us and must hear
	 * ECE until its CWR (ecn_demand_cwr); our next new data carries CWR
	 * (ecn_queue_cwr); no further ECE reduction before snd_una passes
	 * ecn_high (one per window, as a loss) */
	bool ecn_ok, ecn_demand_cwr, ecn_queue_cwr, ecn_cwr_active;
	uint32_t ecn_high;

	/* receive side */
	uint32_t irs, rcv_nxt, rcv_adv, rcv_buf, rcv_unread;
	/* Auto-tuning (Linux's DRS): off once the app set rcv_buf; bytes the
	 * app consumed (rcv_copied), at the start of this measure (rcvq_seq,
	 * rcvq_time_us) and the most consumed in one measure (rcvq_space) */
	bool rcv_buf_locked;
	/* Send-buffer auto-tuning (tcp_sndbuf_expand): off once the app set
	 * snd_buf; snd_nospace: a write found the buffer full since the last
	 * check (Linux's SOCK_NOSPACE) */
	bool snd_buf_locked, snd_nospace;
	uint32_t rcv_copied, rcvq_seq, rcvq_space;
	uint64_t rcvq_time_us;
	/* Receiver RTT (Linux's rcv_rtt_est): from the echoed timestamps, else
	 * the time the peer takes to send a window; 0 = none yet */
	uint32_t rcv_rtt_us, rcv_rtt_seq;
	uint64_t rcv_rtt_time_us;
	/* Quick-ACK mode (Linux's icsk_ack.quick): ACKs left to send at once,
	 * granted at the first data and after an idle RTO (TCP_MAX_QUICKACKS) */
	uint8_t quick;
	struct ring_buf *ooo;            /* sorted by scratch[0] (seq), via link */
	struct ring_buf *ooo_tail;       /* last of ooo (highest start), NULL when empty */
	uint32_t ooo_max_end;            /* highest end of a queued buffer (when ooo) */
	uint32_t ooo_count, ooo_mem;
	/* when the out-of-order queue last made progress (became non-empty or
	 * gave bytes to rcv_nxt): a queue stale under frame pressure is reneged */
	uint64_t ooo_progress_ms;
	bool ooo_starved;                /* an insert was refused for frame pressure since */
	/* frames the socket layer holds of this connection's in-order data
	 * (tcp_rcv_held_set): in-order segments are refused beyond the ring's
	 * holder cap (ring_buf_pool_holder_cap) */
	uint32_t rcv_held;
	struct tcp_range sack_recent[3]; /* blocks to report, most recent first */
	/* D-SACK (RFC 2883) for a duplicate just received; it rides on the
	 * next pure ACK only, once, so a data segment never grows past the MSS */
	struct tcp_range dsack;
	bool dsack_pending;
	bool ack_now, ack_delayed;
	/* The ACK in-order data asked for waits for the end of the rx batch
	 * (tcp_batch.c): one per connection per batch, as Linux ACKs a GRO
	 * aggregate once; ack_batch_sack: it also reports out-of-order data
	 * the batch queued (sent even if rcv_nxt was ACKed already). */
	bool ack_batch, ack_batch_sack;
	/* when the last challenge ACK or ACK for an invalid segment left
	 * (invalid_ack_interval_ms); valid when invalid_acked */
	uint64_t invalid_ack_ms;
	bool invalid_acked;
	/* Interactive (request/response) mode, as Linux's "pingpong": set when
	 * our data carried a delayed ACK, cleared when the delack timer had to
	 * send one. Outside it, the app reading a pushed segment ACKs at once. */
	bool pingpong, ack_pushed;
	uint32_t segs_unacked;
	uint32_t rcv_mss;
	/* ACKs for out-of-order segments (tcp_ofo_ack): the first
	 * TCP_OFO_QUICK_ACKS for one rcv_nxt leave at once; later ones for
	 * segments we queued wait for the rx batch's end (one SACK per batch,
	 * as Linux's SACK compression), for ones we did not queue ride on one
	 * ACK per millisecond, either at most TCP_OFO_ACK_BATCH segments, so a
	 * peer spraying segments past a hole gets a trickle of ACKs. */
	uint32_t ofo_ack_rcv_nxt, ofo_quick_acks, ofo_held_acks;
	uint64_t bytes_received, segs_in, last_data_rx_ms, last_ack_rx_ms;
	uint32_t data_segs_in, rcv_ooopack;   /* segments with data; queued out of order */
	/* rx batch: in-order payload waiting for tcp_rx_batch_end */
	struct ring_buf *batch_head, *batch_tail;
	struct tcp_pcb *batch_next;      /* ctx->batch list, oldest first */
	bool in_batch;

	/* timers: absolute ms, 0 = off */
	uint64_t rto_at, delack_at, persist_at, keepalive_at, timewait_at, idle_since;
	uint32_t persist_backoff, keepalive_sent;
	/* Tail loss probe (RFC 8985 section 7): when no ACK comes for PTO with
	 * data out, one segment goes to draw an ACK (or SACK) instead of waiting
	 * for the RTO. One per episode: tlp_high (snd_nxt after the probe) is
	 * set until an ACK tells whether the probe repaired a loss. */
	uint64_t tlp_at;
	bool tlp_retrans;
	uint32_t tlp_high;
	/* RACK's reordering timer: a segment sent before the last delivered
	 * one is lost once its reordering window passes (absolute ms, 0 = off) */
	uint64_t rack_at;
	/* TCP_CORK: a partial segment at the tail waits for more data (full
	 * segments still go) until uncorked; cork_push lets one tcp_output
	 * send it anyway (TCP_NODELAY set, the ceiling below). cork_at is
	 * Linux's 200 ms ceiling: armed when corked data waits with nothing in
	 * flight (Linux's zero-window probe timer does it there), it sends
	 * the tail (absolute ms, 0 = off). */
	bool cork, cork_push;
	uint64_t cork_at;

	/* Moved here from another engine (tcp_pcb_move): a SYN reopening its
	 * TIME_WAIT goes to the engine of the port's listener when this one
	 * has none. */
	bool moved_in;

	/* Transmit stamps asked (tcp_tx_stamp_request); NULL until the first
	 * request, so a pcb without SO_TIMESTAMPING pays one pointer test per
	 * segment and per ACK. */
	struct tcp_tx_stamps *tx_stamps;
};

/* One stamped write: the sequence number after its last byte, its length
 * and the stamps still owed (TCP_TX_STAMP_*). */
struct tcp_tx_stamp_rec {
	uint32_t end, len;
	uint8_t owed;
};

/* Records in sequence order, a ring of TCP_TX_STAMPS_MAX: [head, head +
 * count). The first `sent` of them have had their segment sent (SCHED and
 * SND done, only ACK may be owed); the rest wait for transmission. */
struct tcp_tx_stamps {
	unsigned head, count, sent;
	struct tcp_tx_stamp_rec rec[TCP_TX_STAMPS_MAX];
};

/* tcp_out.c: stamps of records whose last byte is below end (a new
 * segment carried it): SCHED before the frame goes, SND after. */
void tcp_tx_stamp_transmit(struct tcp_pcb *pcb, uint32_t end, unsigned kind, const uint8_t *hdr, uint32_t hdr_len);
/* tcp_out.c: ACK stamps of records acknowledged (snd_una passed them),
 * before the send buffer drops their bytes. */
void tcp_tx_stamp_acked(struct tcp_pcb *pcb);

enum { TCP_HASH_NONE, TCP_HASH_CONN, TCP_HASH_PORT };

/* Chained hash table; grows by doubling so chains stay short. */
struct tcp_hash {
	struct tcp_pcb **bucket;
	uint32_t mask, count;
};

#define TCP_HANDED_RECENT 64
/* Listeners closed here lately while other processes serve the port. */
#define TCP_GONE_LISTENERS 4
/* How long segments of a connection that moved to another engine are
 * passed on: the ones that still come here were steered before the move
 * and land within one NAPI pass of it; the rest of the entry's life only
 * risks passing on a new connection that reuses the tuple. */
#define TCP_MOVED_GRACE_MS 2000

struct tcp_ctx {
	struct stack *st;
	const struct stack_netif *nif;
	struct tcp_settings set;
	struct tcp_counters cnt;
	uint64_t now_ms, next_fast_ms, next_slow_ms;
	uint64_t now_us;   /* the same clock in microseconds, for RTT samples */
	/* Lower bound of every pcb's fine deadline (RTO, TLP, recovery probe,
	 * delayed ACK, persist); UINT64_MAX = none. Lowered when one is armed,
	 * made exact by each timer scan, so a stale value only costs a scan. */
	uint64_t deadline_min;
	struct tcp_pcb *pcbs;
	unsigned npcbs, ndead;
	struct tcp_hash conns;           /* synchronized/SYN pcbs by 4-tuple */
	/* The conns lookup's last hit, tried before hashing: a ping-pong's or a
	 * stream's segments come one connection at a time. Cleared whenever a
	 * pcb enters or leaves conns, so it is always what the hash would give. */
	struct tcp_pcb *last_conn;
	struct tcp_hash ports;           /* bound, unconnected pcbs (listeners) by local port */
	unsigned depth;                  /* >0 inside input/timers: frees are deferred */
	uint64_t isn_key[2];
	uint64_t hash_key[2];            /* demux hash key, fixed at create */
	/* rx batch (tcp_rx_batch_begin/end) */
	unsigned batch_depth, batch_count;
	struct tcp_pcb *batch_first, *batch_last;
	/* Connections recently handed to the kernel (tcp_pcb_forget at fork):
	 * their segments already in our RX ring are dropped, never answered
	 * with a reset; the peer resends them to the kernel. */
	struct tcp_handed {
		uint32_t lip, rip;
		uint16_t lport, rport;
		/* What becomes of the tuple's segments: dropped (handed to
		 * the kernel), passed to the stray hook for another engine
		 * (moved away), or passed for the port's listener. */
		uint8_t kind;
		void *dest_arg;
		uint64_t at_ms;
	} handed[TCP_HANDED_RECENT];
	unsigned handed_next;
	/* tcp_ctx_listener_gone: until until_ms, a SYN for ip:port (ip 0:
	 * any) that finds no listener here is dropped, not reset. */
	struct {
		uint32_t ip;
		uint16_t port;
		uint64_t until_ms;
	} gone[TCP_GONE_LISTENERS];
	tcp_stray_fn stray_fn;
	void *stray_arg;
	/* Route metrics toward the sender of a SYN (tcp_ctx_set_route_hook). */
	tcp_route_fn route_fn;
	void *route_arg;
	/* Told of every connection entering and leaving the table
	 * (tcp_ctx_set_conn_hook). */
	tcp_conn_fn conn_fn;
	void *conn_arg;
};

enum { TCP_HANDED_KERNEL, TCP_HANDED_MOVED, TCP_HANDED_TO_LISTENER };
/* The record of (lip, lport, rip, rport) if it was handed to the kernel or
 * moved away lately, else NULL. */
const struct tcp_handed *tcp_handed_find(const struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip,
					 uint16_t rport);
void tcp_handed_note(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint8_t kind,
		     void *dest_arg);

/* tcp_in.c, shared with the fast path (tcp_fast.c), so both run the same
 * steps: an ACK of new data (SND.UNA < ack <= SND.MAX: RTT, snd_una, the
 * send buffer; returns the data bytes acknowledged); loss detection and the
 * window after an ACK; its timers and the sent callback (false: the pcb
 * died in it); in-order payload at rcv_nxt (taken from seg->buf, ACK
 * scheduled, delivered; false: the pcb died in the recv callback). */
uint32_t tcp_ack_new(struct tcp_pcb *pcb, const struct tcp_seg *seg);
void tcp_ack_loss_and_window(struct tcp_pcb *pcb, uint32_t acked, uint32_t delivered, bool dupack);
bool tcp_ack_done(struct tcp_pcb *pcb, uint32_t data_acked);
bool tcp_data_in_order(struct tcp_pcb *pcb, struct tcp_seg *seg);
/* tcp_fast.c: the predicted segment of an established connection (in
 * order, an ACK, the window unchanged, timestamps only): true when it was
 * handled, false for the full path (nothing changed then). */
bool tcp_fast_path(struct tcp_pcb *pcb, struct tcp_rx *rx, uint32_t hlen);

/* stack_ip4.c hands every unfragmented protocol-6 packet here. */
void tcp_input(struct stack *st, const struct stack_netif *nif, struct ring_buf *pkt,
	       const struct stack_ip4_info *ip, const uint8_t *src_mac);

/* tcp_pcb.c */
struct tcp_pcb *tcp_pcb_lookup(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport,
			       uint32_t rip, uint16_t rport);
void tcp_pcb_hash_conn(struct tcp_pcb *pcb);          /* 4-tuple set: make it findable */
void tcp_pcb_release(struct tcp_pcb *pcb);            /* frees, or defers inside callbacks */
/* The connection is over: frees a pcb the app closed, or leaves one the app
 * still holds in CLOSED (unfindable, timers off) until tcp_close/tcp_abort. */
void tcp_pcb_done(struct tcp_pcb *pcb);
void tcp_pcb_fail(struct tcp_pcb *pcb, int err);       /* err callback + release */
void tcp_enter_time_wait(struct tcp_pcb *pcb);
void tcp_reap(struct tcp_ctx *ctx);
/* tmpl: the listener a child inherits its settings from, or NULL (ctx defaults). */
struct tcp_pcb *tcp_pcb_alloc(struct tcp_ctx *ctx, const struct tcp_pcb *tmpl,
			      const struct stack_netif *nif);
/* The MSS the pcb announces (its netif, TCP_MAXSEG, route). */
uint32_t tcp_local_mss(const struct tcp_pcb *pcb);
/* The MSS a SYN announces on nif with TCP_MAXSEG mss_clamp and the route's
 * metrics rm (NULL: none). */
uint32_t tcp_mss_for(const struct tcp_ctx *ctx, const struct stack_netif *nif, uint32_t mss_clamp,
		     const struct tcp_route_metrics *rm);
/* The largest MSS we may send with there (before the peer's MSS bounds it):
 * the path MTU less 40, TCP_MAXSEG, VMA_MSS. */
uint32_t tcp_path_mss_for(const struct tcp_ctx *ctx, const struct stack_netif *nif, uint32_t mss_clamp,
			  const struct tcp_route_metrics *rm);
uint32_t tcp_path_mss(const struct tcp_pcb *pcb);
/* A pcb not connected yet (CLOSED, LISTEN, SYN_SENT before the answer):
 * both MSS values from its interface, clamp and route. */
void tcp_mss_reset(struct tcp_pcb *pcb);
uint8_t tcp_wscale_for(uint32_t rcv_buf);
/* The shift a pcb's SYN / SYN-ACK offers: from rcv_buf, or when it may
 * auto-tune, the largest window it may grow to. */
uint8_t tcp_pcb_wscale(const struct tcp_pcb *pcb);
void tcp_estab_count(struct tcp_pcb *pcb, bool on);   /* cnt.curr_estab bookkeeping */
/* tcp_state.c: every state change (allowed transitions, invariants, the
 * counters that are transitions, a FINE log line) */
void tcp_set_state(struct tcp_pcb *pcb, enum tcp_state to);
bool tcp_state_change_allowed(enum tcp_state from, enum tcp_state to);
/* rx batch: hands pcb's pending chain to recv now (before FIN/err); frees it if dead. */
void tcp_batch_flush_pcb(struct tcp_pcb *pcb);
void tcp_batch_drop_pcb(struct tcp_pcb *pcb);
/* Inside a batch: keeps chain for pcb (true); outside one: false, deliver now. */
bool tcp_batch_add(struct tcp_pcb *pcb, struct ring_buf *chain);
/* Inside a batch: pcb's ACK (with its SACK blocks) leaves at the batch's
 * end (true); outside one: false. */
bool tcp_batch_ack_later(struct tcp_pcb *pcb);

/* tcp_opt.c */
bool tcp_opts_parse(const uint8_t *p, uint32_t len, struct tcp_opts *o);
uint32_t tcp_isn(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport);
/* SYN cookies (tcp_opt.c): our ISN for a SYN answered without state, and
 * the check of the ACK that ends such a handshake (cookie = its ack - 1,
 * peer_isn = its seq - 1): true with the MSS the cookie carries. */
uint32_t tcp_syncookie_make(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport,
			    uint32_t peer_isn, uint32_t peer_mss);
bool tcp_syncookie_check(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport,
			 uint32_t peer_isn, uint32_t cookie, uint32_t *mss);
/* A SYN-ACK that keeps no state: MSS option only, an unscaled window. */
void tcp_send_synack_cookie(struct tcp_ctx *ctx, const struct tcp_rx *rx, uint32_t iss, uint32_t ack, uint32_t mss,
			    uint16_t wnd);
/* SipHash-2-4 of 16 bytes under key: for values a peer must not predict. */
uint64_t tcp_keyed_hash(const uint64_t key[2], uint64_t m0, uint64_t m1);

/* tcp_out.c */
int tcp_send_segment(struct tcp_pcb *pcb, uint32_t seq, uint32_t len, uint8_t flags);
void tcp_send_ack(struct tcp_pcb *pcb);
void tcp_send_rst_reply(struct tcp_ctx *ctx, const struct tcp_rx *rx);
void tcp_send_rst(struct tcp_pcb *pcb);
uint32_t tcp_flight(const struct tcp_pcb *pcb);
/* Nothing new to send, nothing lost, no FIN, no ACK owed (after every
 * ACK of a ping-pong): tcp_output would do nothing. Per-segment callers
 * test it inline, before paying for the call. */
static inline bool tcp_output_idle(const struct tcp_pcb *pcb)
{
	return pcb->snd_nxt == pcb->sbuf_seq + pcb->sbuf_len && !pcb->ack_now && !pcb->fin_queued &&
	       !pcb->txq.lost_segs;
}
/* The first n bytes of the send buffer were acknowledged. */
static inline void tcp_sbuf_drop(struct tcp_pcb *pcb, uint32_t n)
{
	if (!n)
		return;   /* also: a TIME_WAIT pcb has no buffer left */
	VMA_ASSERT(n <= pcb->sbuf_len && pcb->sbuf_len <= pcb->sbuf_size);
	pcb->sbuf_len -= n;
	pcb->sbuf_off += n;
	if (pcb->sbuf_off >= pcb->sbuf_size)
		pcb->sbuf_off -= pcb->sbuf_size;
	pcb->sbuf_seq += n;
}
void tcp_arm_rto(struct tcp_pcb *pcb);
/* Bytes in flight during recovery (RFC 6675 pipe, Linux's
 * tcp_packets_in_flight in bytes): sent, not acknowledged, not SACKed,
 * not deemed lost (a resent segment counts again). */
uint32_t tcp_recovery_pipe(const struct tcp_pcb *pcb);

/* tcp_txq.c: the records of transmissions (see struct tcp_txq) */
bool tcp_txq_init(struct tcp_txq *q, uint32_t sbuf_size);
void tcp_txq_free(struct tcp_txq *q);
/* Capacity for sbuf_size (keeps the records; false: unchanged). */
bool tcp_txq_resize(struct tcp_txq *q, uint32_t sbuf_size);
/* Room for a record of new data (always, when not tracked). */
static inline bool tcp_txq_room(const struct tcp_txq *q)
{
	return !q->seg || q->count <= q->mask;
}
static inline struct tcp_txseg *tcp_txq_at(const struct tcp_txq *q, uint32_t off)
{
	return &q->seg[(q->head + off) & q->mask];
}
/* [start, end) left: new data (start at snd_max) or a retransmission. */
void tcp_txq_sent(struct tcp_pcb *pcb, uint32_t start, uint32_t end, bool fin);
/* Offset of the first record ending after seq (count when none). */
uint32_t tcp_txq_find(const struct tcp_txq *q, uint32_t seq);
/* The oldest record left (cumulatively acknowledged); the oldest starts at una. */
void tcp_txq_pop(struct tcp_txq *q);
void tcp_txq_trim(struct tcp_txq *q, uint32_t una);
void tcp_txq_mark_lost(struct tcp_pcb *pcb, struct tcp_txseg *r);
void tcp_txq_mark_sacked(struct tcp_txq *q, struct tcp_txseg *r);
/* After an RTO: nothing lost (the whole flight is resent from snd_una),
 * SACK marks kept only if the scoreboard kept them; every record not SACKed
 * on the list in sequence order. */
void tcp_txq_rto_reset(struct tcp_pcb *pcb);

/* tcp_rack.c: RACK-TLP loss detection (RFC 8985) and PRR (RFC 6937) */
void tcp_rack_init(struct tcp_pcb *pcb);
/* Per ACK, after snd_una moved: records below it leave, records the
 * scoreboard now covers (newly: what it did not cover before) are SACKed;
 * the latest-sent of them becomes RACK's segment. */
void tcp_rack_on_ack(struct tcp_pcb *pcb, const struct tcp_range *newly, unsigned nnew);
/* A D-SACK came: the reordering window may widen (once per round). */
void tcp_rack_dsack(struct tcp_pcb *pcb, const struct tcp_range *d, uint32_t prior_una);
/* Per ACK: a D-SACK round ends when snd_una passes it. */
static inline void tcp_rack_update_round(struct tcp_pcb *pcb)
{
	struct tcp_rack *k = &pcb->rack;
	if (k->dsack_round_on && SEQ_GEQ(pcb->snd_una, k->dsack_round))
		k->dsack_round_on = false;
}
uint32_t tcp_rack_reo_wnd_us(const struct tcp_pcb *pcb);
/* Marks records lost per RACK and arms its timer; returns the newly lost. */
uint32_t tcp_rack_detect_loss_walk(struct tcp_pcb *pcb);
static inline uint32_t tcp_rack_detect_loss(struct tcp_pcb *pcb)
{
	if (pcb->txq.thead == TCP_TXQ_NONE) {
		pcb->rack_at = 0;   /* nothing in flight (every ACK of a ping-pong) */
		return 0;
	}
	return tcp_rack_detect_loss_walk(pcb);
}
/* Recovery begins / ends (PRR, the reordering window's persistence). */
void tcp_recovery_enter(struct tcp_pcb *pcb);
void tcp_recovery_exit(struct tcp_pcb *pcb);
/* PRR per ACK in recovery: cwnd lets out what the reduction allows. */
void tcp_prr_ack(struct tcp_pcb *pcb, uint32_t delivered, uint32_t newly_lost, bool una_advanced);
void tcp_arm_tlp(struct tcp_pcb *pcb);                 /* (re)arms or stops the tail loss probe */
void tcp_tlp_fire(struct tcp_pcb *pcb);                /* the probe timer expired */
/* An ACK after a probe: did the probe repair a loss (cwnd reduced)? */
void tcp_tlp_ack(struct tcp_pcb *pcb, uint32_t ack, bool una_advanced, bool dsack_tlp, bool not_dup);
/* RACK's timer expired. */
void tcp_rack_timeout(struct tcp_pcb *pcb);

/* tcp_sack.c */
/* Adds the SACK blocks of an ACK (ack: its cumulative ACK) to the
 * scoreboard; the ranges it did not cover before go to newly (at most max,
 * in sequence order; returns how many), a D-SACK block to *dsack (empty:
 * none). */
unsigned tcp_sack_update(struct tcp_pcb *pcb, const struct tcp_opts *o, uint32_t ack, struct tcp_range *newly,
			 unsigned max, struct tcp_range *dsack);
void tcp_sack_trim(struct tcp_pcb *pcb);               /* drop blocks below snd_una */
uint32_t tcp_sack_bytes(const struct tcp_pcb *pcb);
uint32_t tcp_sack_highest(const struct tcp_pcb *pcb);
bool tcp_sack_is_sacked(const struct tcp_pcb *pcb, uint32_t seq, uint32_t *run_end);
bool tcp_ooo_insert(struct tcp_pcb *pcb, struct ring_buf *buf, uint32_t seq);
struct ring_buf *tcp_ooo_take_ready(struct tcp_pcb *pcb); /* advances rcv_nxt */
void tcp_ooo_free(struct tcp_pcb *pcb);
/* Under frame pressure, drops an out-of-order queue stale for
 * TCP_OOO_RENEGE_MS and forgets its SACK blocks (slow timer). */
void tcp_ooo_renege_stale(struct tcp_pcb *pcb);
void tcp_rcv_sack_note(struct tcp_pcb *pcb, uint32_t seq, uint32_t end);
void tcp_rcv_dsack_note(struct tcp_pcb *pcb, uint32_t seq, uint32_t end);
/* The SACK blocks to send (at most max); dsack: the D-SACK block going
 * first in the same option, or NULL. */
unsigned tcp_rcv_sack_blocks(struct tcp_pcb *pcb, const struct tcp_range *dsack,
			     struct tcp_range *out, unsigned max);

/* tcp_pcb.c: after an ACK freed room in a buffer a write found full */
void tcp_sndbuf_expand(struct tcp_pcb *pcb);

/* tcp_cc.c */
void tcp_cc_init(struct tcp_pcb *pcb);
uint32_t tcp_cc_initial_window(uint32_t mss);    /* IW10 (RFC 6928), bytes */
void tcp_cc_on_ack(struct tcp_pcb *pcb, uint32_t acked);
void tcp_cc_on_loss(struct tcp_pcb *pcb);              /* ECE: sets ssthresh, cwnd */
/* New data is about to leave with nothing in flight: a cwnd left from
 * before an idle spell longer than the RTO shrinks first (Linux's
 * tcp_cwnd_restart). */
void tcp_cc_restart_after_idle(struct tcp_pcb *pcb);
/* After a transmission pass: pipe in flight now, sent whether it sent. */
void tcp_cc_note_usage(struct tcp_pcb *pcb, uint32_t pipe, bool sent);
void tcp_cc_set_ssthresh(struct tcp_pcb *pcb);         /* recovery: ssthresh only (PRR moves cwnd) */
void tcp_cc_on_rto(struct tcp_pcb *pcb);

/* Delivery rate samples (inline here). A record leaving copies the rate's
 * state (inline: every segment sent); the ACK that delivers it makes a
 * sample (tcp_rate_on_ack, before the congestion control sees the ACK);
 * the sender running out of data marks the samples to come app-limited. */
static inline void tcp_rate_stamp(struct tcp_pcb *pcb, struct tcp_txseg *r, uint32_t now_us)
{
	struct tcp_rate *rt = &pcb->rate;
	if (!pcb->rate_sampling)
		return;
	if (pcb->snd_una == pcb->snd_max) {
		/* nothing in flight: a new flight starts its clocks now */
		rt->first_us = rt->delivered_us = now_us;
	}
	r->rate_delivered = (uint32_t)rt->delivered;
	r->rate_delivered_us = rt->delivered_us;
	r->rate_first_us = rt->first_us;
	if (rt->app_limited)
		r->flags |= TCP_TXSEG_APP_LIMITED;
}
/* The record r was delivered by the ACK being processed (RACK's walk). */
static inline void tcp_rate_delivered(struct tcp_pcb *pcb, const struct tcp_txseg *r, int32_t rtt_us)
{
	struct tcp_rate_sample *rs = &pcb->rs;
	if (!pcb->rate_sampling || (rs->have && (int32_t)(r->order - rs->order) <= 0))
		return;   /* an earlier transmission than the one kept */
	rs->have = true;
	rs->order = r->order;
	rs->prior_delivered = r->rate_delivered;
	rs->prior_us = r->rate_delivered_us;
	rs->send_elapsed_us = r->xmit_us - r->rate_first_us;
	rs->app_limited = (r->flags & TCP_TXSEG_APP_LIMITED) != 0;
	rs->rtt_us = rtt_us;
	pcb->rate.first_us = r->xmit_us;   /* the next sample's send interval starts here */
}
/* Per ACK, before the congestion control: delivered (bytes this ACK
 * delivered, cumulatively and selectively) counted, and the sample of the
 * record kept by tcp_rate_delivered checked: rs.valid when it spans at
 * least the path's floor (a shorter one comes from ACKs bunched on the way
 * back and overstates the rate), its bytes and interval in last_*. The
 * division is left to whoever reads the rate (BBR, TCP_INFO). */
static inline void tcp_rate_on_ack(struct tcp_pcb *pcb, uint32_t delivered)
{
	struct tcp_rate *rt = &pcb->rate;
	struct tcp_rate_sample *rs = &pcb->rs;
	uint32_t now = (uint32_t)pcb->ctx->now_us;
	if (!pcb->rate_sampling)
		return;
	if (delivered) {
		rt->delivered += delivered;
		rt->delivered_us = now;
	}
	if (rt->app_limited && rt->delivered > rt->app_limited)
		rt->app_limited = 0;   /* what was in flight when the data ran out is delivered */
	if (!rs->have)
		return;
	uint32_t got = (uint32_t)rt->delivered - rs->prior_delivered;
	uint32_t ack_elapsed = now - rs->prior_us;
	uint32_t interval = rs->send_elapsed_us > ack_elapsed ? rs->send_elapsed_us : ack_elapsed;
	if (!got || !interval || (pcb->min_rtt_us != UINT32_MAX && interval < pcb->min_rtt_us))
		return;
	rs->valid = true;
	rt->last_bytes = got;
	rt->last_interval_us = interval;
	rt->last_app_limited = rs->app_limited;
}
static inline uint64_t tcp_rate_last_bps(const struct tcp_pcb *pcb)
{
	const struct tcp_rate *rt = &pcb->rate;
	return rt->last_interval_us ? (uint64_t)rt->last_bytes * 1000000u / rt->last_interval_us : 0;
}
/* The end of a transmit pass (tcp_output, pipe: bytes in flight): the
 * sender ran out of data (less than a segment unsent) with cwnd open and
 * nothing to resend, so what it delivers until the present flight is
 * delivered shows the application's pace, not the path's (Linux's
 * tcp_rate_check_app_limited). */
static inline void tcp_rate_check_app_limited(struct tcp_pcb *pcb, uint32_t pipe, uint32_t data_end)
{
	if (pcb->rate_sampling && SEQ_GT(pcb->snd_nxt + pcb->mss, data_end) && pipe < pcb->cwnd &&
	    !pcb->txq.lost_segs) {
		uint64_t until = pcb->rate.delivered + pipe;
		pcb->rate.app_limited = until ? until : 1;
	}
}

/* tcp_bbr.c */
enum { TCP_BBR_STARTUP, TCP_BBR_DRAIN, TCP_BBR_PROBE_BW, TCP_BBR_PROBE_RTT };
void tcp_bbr_init(struct tcp_pcb *pcb);
/* Every ACK (in recovery too): the model from the sample, then cwnd. */
void tcp_bbr_on_ack(struct tcp_pcb *pcb, uint32_t delivered, uint32_t newly_lost);
void tcp_bbr_save_cwnd(struct tcp_pcb *pcb);
void tcp_bbr_recovery_enter(struct tcp_pcb *pcb);
void tcp_bbr_restore_cwnd(struct tcp_pcb *pcb);        /* recovery or the loss state ended */
uint64_t tcp_bbr_bw(const struct tcp_pcb *pcb);        /* bytes/s; 0: no sample yet */
uint64_t tcp_bbr_pacing_rate(const struct tcp_pcb *pcb);

/* tcp_pcb.c: receive auto-tuning after the app consumed bytes; a
 * receiver RTT sample (us; win_dep: from a window's time, kept as a min) */
void tcp_rcv_space_adjust(struct tcp_pcb *pcb);
void tcp_rcv_rtt_update(struct tcp_pcb *pcb, uint32_t sample_us, bool win_dep);
/* Quick-ACK mode: up to max immediate ACKs (Linux's tcp_incr_quickack) */
void tcp_quickack_grant(struct tcp_pcb *pcb, uint32_t max);
/* Per segment of a connection past LISTEN: its counters and quick-ACK mode
 * (inline: the fast path runs it for every segment). */
static inline void tcp_segment_arrived(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
	struct tcp_ctx *ctx = pcb->ctx;
	pcb->segs_in++;
	pcb->last_ack_rx_ms = ctx->now_ms;
	if (seg->len) {
		/* Quick-ACK mode (Linux's tcp_event_data_recv): at the first
		 * data, and after a silence longer than the RTO (the sender
		 * restarts from a small window: it needs our ACKs now) */
		if (!pcb->data_segs_in || ctx->now_ms - pcb->last_data_rx_ms > pcb->rto_ms)
			tcp_quickack_grant(pcb, TCP_MAX_QUICKACKS);
		pcb->last_data_rx_ms = ctx->now_ms;
		pcb->data_segs_in++;
		if (seg->len > pcb->rcv_mss)
			pcb->rcv_mss = seg->len;
	}
}

/* tcp_timer.c */
void tcp_rtt_sample(struct tcp_pcb *pcb, uint32_t rtt_ms);
/* The timed segment (rtt_seq) was acknowledged, not resent: its RTT. */
void tcp_rtt_sample_us(struct tcp_pcb *pcb, uint64_t rtt_us);

/* Every fine timer is armed through this, so the socket layer learns when
 * to run tcp_timer_tick (tcp_ctx_next_deadline_ms). */
static inline uint64_t tcp_deadline(struct tcp_ctx *ctx, uint64_t at)
{
	if (at < ctx->deadline_min)
		ctx->deadline_min = at;
	return at;
}

static inline uint32_t tcp_min32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t tcp_max32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* Payload bytes per segment: the MSS counts no options (RFC 6691), so the
 * timestamps, and SACK blocks while we hold out-of-order data (reserved at
 * the 40-byte maximum), come out of it or the frame would exceed the MTU. */
static inline uint32_t tcp_seg_max(const struct tcp_pcb *pcb)
{
	uint32_t opt = (pcb->sack_ok && pcb->ooo) ? TCP_MAX_OPT_LEN : (pcb->ts_ok ? TCP_TS_OPT_LEN : 0u);
	return pcb->mss > opt + 32 ? pcb->mss - opt : 32;
}

#endif
