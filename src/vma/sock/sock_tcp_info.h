/* TCP_INFO as the running kernel lays it out (Linux 6.18's uapi struct
 * tcp_info, 280 bytes), which is longer than the build's headers may know:
 * the fields a header has sit at the same offsets (checked against
 * <linux/tcp.h> in sock_tcp_opt.c), the newer ones follow. */
#ifndef VMA_SOCK_TCP_INFO_H
#define VMA_SOCK_TCP_INFO_H

#include <stdint.h>

struct sock_tcp_info {
	uint8_t tcpi_state, tcpi_ca_state, tcpi_retransmits, tcpi_probes;
	uint8_t tcpi_backoff, tcpi_options;
	uint8_t tcpi_wscales;               /* snd_wscale : 4 (low bits), rcv_wscale : 4 */
	uint8_t tcpi_app_limited_bits;      /* delivery_rate_app_limited : 1, fastopen_client_fail : 2 */
	uint32_t tcpi_rto, tcpi_ato, tcpi_snd_mss, tcpi_rcv_mss;
	uint32_t tcpi_unacked, tcpi_sacked, tcpi_lost, tcpi_retrans, tcpi_fackets;
	uint32_t tcpi_last_data_sent, tcpi_last_ack_sent, tcpi_last_data_recv, tcpi_last_ack_recv;
	uint32_t tcpi_pmtu, tcpi_rcv_ssthresh, tcpi_rtt, tcpi_rttvar, tcpi_snd_ssthresh, tcpi_snd_cwnd;
	uint32_t tcpi_advmss, tcpi_reordering, tcpi_rcv_rtt, tcpi_rcv_space, tcpi_total_retrans;
	uint64_t tcpi_pacing_rate, tcpi_max_pacing_rate;
	uint64_t tcpi_bytes_acked, tcpi_bytes_received;
	uint32_t tcpi_segs_out, tcpi_segs_in;
	uint32_t tcpi_notsent_bytes, tcpi_min_rtt, tcpi_data_segs_in, tcpi_data_segs_out;
	uint64_t tcpi_delivery_rate;
	uint64_t tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited;
	uint32_t tcpi_delivered, tcpi_delivered_ce;
	uint64_t tcpi_bytes_sent, tcpi_bytes_retrans;
	uint32_t tcpi_dsack_dups, tcpi_reord_seen, tcpi_rcv_ooopack;
	uint32_t tcpi_snd_wnd, tcpi_rcv_wnd;          /* bytes, after scaling */
	uint32_t tcpi_rehash;                         /* 6.2 */
	uint16_t tcpi_total_rto, tcpi_total_rto_recoveries;   /* 6.7 */
	uint32_t tcpi_total_rto_time;
	uint32_t tcpi_received_ce;                    /* 6.18: Accurate ECN */
	uint32_t tcpi_delivered_e1_bytes, tcpi_delivered_e0_bytes, tcpi_delivered_ce_bytes;
	uint32_t tcpi_received_e1_bytes, tcpi_received_e0_bytes, tcpi_received_ce_bytes;
	uint16_t tcpi_accecn_fail_mode, tcpi_accecn_opt_seen;
};

_Static_assert(sizeof(struct sock_tcp_info) == 280, "Linux 6.18's struct tcp_info is 280 bytes");

/* TCP_INFO answers at most this many bytes: a kernel newer than this
 * layout gets our fields and zeros up to its own length. */
#define SOCK_TCP_INFO_MAX 512

#endif
