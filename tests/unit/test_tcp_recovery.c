/* Loss recovery as Linux does it, with the test playing a SACK peer by
 * hand against side 1's connection on a 10 ms round trip: RACK (RFC 8985)
 * finds a loss by time before three duplicate ACKs, a D-SACK widens its
 * reordering window so the same reordering is not taken for loss again, a
 * lost retransmission is found without the RTO; the tail loss probe comes
 * at Linux's PTO and a loss it repaired alone still reduces cwnd; PRR
 * (RFC 6937) lets out ssthresh / cwnd of what each ACK delivers. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_tcp_harness.h"

#define RTT_MS 10u
#define SEG 1460u

static struct th_wire *w;
static struct tcp_settings sa, sb;
static const uint16_t PEER = 0x2345, SRV = 80;
static const uint32_t PEER_ISN = 5000;
static uint32_t iss;              /* side 1's initial sequence number */
static struct tcp_pcb *pcb;       /* side 1's connection */
static unsigned seen;             /* captured frames already looked at */

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	tcp_settings_default(&sa);
	sa.timer_resolution_ms = 10;
	sa.timestamps = TCP_TS_OFF;   /* the peer sends none: RTT from timed segments */
	sb = sa;
}

static void teardown(void)
{
	if (pcb)
		tcp_abort(pcb);
	pcb = NULL;
	th_fini(w);
	free(w);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* An ACK from the peer: ack and the SACK blocks relative to side 1's
 * first data byte (blocks: start, end pairs). */
static void ack_sack(uint32_t ack, const uint32_t *blocks, unsigned nblocks)
{
	uint8_t o[40];
	unsigned n = 0;
	if (nblocks) {
		o[n++] = 1; o[n++] = 1; o[n++] = 5; o[n++] = (uint8_t)(2 + 8 * nblocks);
		for (unsigned i = 0; i < nblocks; i++) {
			put32(o + n, iss + 1 + blocks[2 * i]);
			put32(o + n + 4, iss + 1 + blocks[2 * i + 1]);
			n += 8;
		}
	}
	th_inject(w, 1, htons(PEER), htons(SRV), PEER_ISN + 1, iss + 1 + ack, 0x10, 65535, o, n, NULL, 0);
}

static void ack_only(uint32_t ack) { ack_sack(ack, NULL, 0); }

/* Side 1 accepts the peer's SYN (MSS 1460, SACK permitted, no window
 * scale or timestamps); the handshake takes one RTT. */
static void handshake(void)
{
	th_init(w, &sa, &sb, 7);
	w->capture = true;
	th_listen(&w->side[1], SRV);
	const uint8_t syn_opts[] = { 2, 4, 0x05, 0xb4, 1, 1, 4, 2 };
	th_inject(w, 1, htons(PEER), htons(SRV), PEER_ISN, 0, 0x02, 65535, syn_opts, sizeof(syn_opts), NULL, 0);
	struct th_tcp t;
	ck_assert_uint_eq(w->ncaptured, 1);
	ck_assert(th_parse(w->captured[0], &t));
	ck_assert_uint_eq(t.flags, 0x12);
	iss = t.seq;
	th_capture_clear(w);
	th_run(w, RTT_MS);
	th_inject(w, 1, htons(PEER), htons(SRV), PEER_ISN + 1, iss + 1, 0x10, 65535, NULL, 0, NULL, 0);
	ck_assert(w->side[1].connected);
	pcb = w->side[1].pcb;
	seen = 0;
}

/* Segments of len SEG side 1 writes (from the pattern: no checks here). */
static void write_segs(unsigned n)
{
	static uint8_t data[64 * SEG];
	ck_assert_uint_le(n * SEG, sizeof(data));
	ck_assert_int_eq(tcp_write(pcb, data, n * SEG, 0), (int)(n * SEG));
}

/* The next data frame side 1 sent since the last look: its sequence
 * number relative to the first data byte, or -1 when none. */
static long next_data(void)
{
	while (seen < w->ncaptured) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[seen++], &t));
		if (t.len)
			return (long)(t.seq - iss - 1);
	}
	return -1;
}

static unsigned data_frames_new(void)
{
	unsigned n = 0;
	while (next_data() >= 0)
		n++;
	return n;
}

static void forget_frames(void)
{
	th_capture_clear(w);
	seen = 0;
}

/* 10 segments out, the peer lost the 5th: one ACK for the first four with
 * a SACK of the 6th (one duplicate ACK). RACK knows segment 5 left before
 * a delivered one and resends it once min_rtt / 4 passed; the old rule
 * would wait for two more duplicate ACKs (none come) or the probe. */
START_TEST(rack_finds_loss_before_three_dupacks)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	ck_assert_uint_eq(data_frames_new(), 10);
	th_run(w, RTT_MS);
	const uint32_t sack6[] = { 5 * SEG, 6 * SEG };
	ack_sack(4 * SEG, sack6, 1);
	uint64_t t_sack = w->now;
	ck_assert_uint_eq(data_frames_new(), 0);   /* the reordering window first */
	long seq = -1;
	while (seq < 0 && w->now < t_sack + 50) {
		th_step(w);
		seq = next_data();
	}
	ck_assert_int_eq(seq, 4 * SEG);
	/* min_rtt / 4 = 2.5 ms, on the 1 ms clock */
	ck_assert_uint_ge(w->now - t_sack, 2);
	ck_assert_uint_le(w->now - t_sack, 4);
	ck_assert_uint_eq(c->tx_rack_lost, 1);
	ck_assert_uint_eq(c->tx_fast_retransmits, 1);
	ck_assert_uint_eq(c->tx_tail_probes, 0);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	ck_assert(in.in_recovery);
	ck_assert_uint_eq(in.sacked, 1);
	ck_assert_uint_eq(in.unacked, 6);
	th_run(w, RTT_MS);
	ack_only(10 * SEG);
	tcp_pcb_get_info(pcb, &in);
	ck_assert(!in.in_recovery);
	ck_assert_uint_eq(in.unacked, 0);
	ck_assert_uint_eq(c->tx_retransmits, 1);
	/* a real loss: no D-SACK, the reduction stands */
	ck_assert_uint_lt(in.cwnd, 10 * SEG);
	ck_assert_uint_eq(c->tx_dsack_undos, 0);
}
END_TEST

/* Segment 5 arrives 4 ms late. The first time RACK (2.5 ms window) resends
 * it; the duplicate comes back as a D-SACK, and the window grows a step
 * (2 * min_rtt / 4 = 5 ms). The same reordering is then waited out. */
START_TEST(dsack_widens_the_reordering_window)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	const uint32_t sack6[] = { 5 * SEG, 6 * SEG };
	ack_sack(4 * SEG, sack6, 1);
	forget_frames();
	th_run(w, 4);
	ck_assert_uint_eq(c->tx_retransmits, 1);   /* taken for lost: spurious */
	ack_only(10 * SEG);                         /* the original arrived: all in order */
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	ck_assert(!in.in_recovery);
	ck_assert_uint_lt(in.cwnd, 10 * SEG);       /* recovery ended, reduced */
	th_run(w, RTT_MS);
	const uint32_t dsack5[] = { 4 * SEG, 5 * SEG };
	ack_sack(10 * SEG, dsack5, 1);              /* and the resent copy: a D-SACK */
	ck_assert_uint_eq(c->rx_dsacks, 1);
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.dsack_dups, 1);        /* TCP_INFO's tcpi_dsack_dups */
	ck_assert_uint_eq(in.retransmits, 1);
	/* the only retransmission was needless: the reduction is undone
	 * (Linux's TCPDSACKUndo), cwnd back to the initial window */
	ck_assert_uint_eq(c->tx_dsack_undos, 1);
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_ge(in.cwnd, 10 * SEG);
	forget_frames();

	/* the same 4 ms of reordering on the next flight: no retransmission */
	write_segs(3);
	ck_assert_uint_eq(data_frames_new(), 3);
	th_run(w, RTT_MS);
	const uint32_t sack12[] = { 11 * SEG, 12 * SEG };
	ack_sack(10 * SEG, sack12, 1);
	th_run(w, 4);
	ck_assert_uint_eq(data_frames_new(), 0);
	ack_only(13 * SEG);
	th_run(w, 20);
	ck_assert_uint_eq(c->tx_retransmits, 1);
	ck_assert_uint_eq(c->tx_rack_lost, 1);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.unacked, 0);
}
END_TEST

/* Reordering seen without a retransmission (a segment delivered below the
 * highest SACKed one) keeps the window open even with DupThresh segments
 * SACKed, where it would otherwise be 0. */
START_TEST(reordering_seen_keeps_the_window)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	const uint32_t sack6[] = { 5 * SEG, 6 * SEG };
	ack_sack(4 * SEG, sack6, 1);
	th_run(w, 1);
	ack_only(6 * SEG);      /* segment 5 arrived late, within the window */
	ack_only(10 * SEG);
	ck_assert_uint_eq(c->tx_retransmits, 0);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.reord_seen, 1);   /* TCP_INFO's tcpi_reord_seen: segment 5 */
	ck_assert_uint_eq(in.dsack_dups, 0);
	forget_frames();
	/* now three SACKed segments past a late one: still a window */
	write_segs(10);
	th_run(w, RTT_MS);
	const uint32_t sack_3[] = { 15 * SEG, 18 * SEG };
	ack_sack(14 * SEG, sack_3, 1);
	ck_assert_uint_eq(c->tx_retransmits, 0);
	th_run(w, 1);
	ack_only(20 * SEG);
	th_run(w, 20);
	ck_assert_uint_eq(c->tx_retransmits, 0);
	ck_assert_uint_eq(c->tx_rack_lost, 0);
}
END_TEST

/* PRR: 20 segments out (cwnd 20 after slow start), the first lost; each
 * later one is SACKed by its own ACK. Recovery starts at the third
 * (DupThresh SACKed: no reordering window), the lost segment is resent at
 * once, then new data leaves for every other ACK (ssthresh / prior cwnd =
 * 1/2 with NewReno), not nothing until the flight halved. Once the pipe
 * is below ssthresh, one segment per ACK (the reduction bound). */
START_TEST(prr_sends_half_a_segment_per_ack)
{
	handshake();
	write_segs(10);
	th_run(w, RTT_MS);
	for (unsigned i = 1; i <= 10; i++)
		ack_only(i * SEG);   /* slow start: cwnd 10 -> 20 segments */
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.cwnd, 20 * SEG);
	write_segs(40);
	forget_frames();
	th_run(w, RTT_MS);
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.unacked, 20);
	uint32_t base = 10 * SEG;   /* the lost one: [base, base + SEG) */
	unsigned sent[20] = { 0 };
	long first_resent = -1;
	for (unsigned k = 1; k < 20; k++) {
		const uint32_t blk[] = { base + SEG, base + (k + 1) * SEG };
		ack_sack(base, blk, 1);
		long s;
		while ((s = next_data()) >= 0) {
			if (s == (long)base && first_resent < 0)
				first_resent = k;
			sent[k]++;
		}
	}
	tcp_pcb_get_info(pcb, &in);
	ck_assert(in.in_recovery);
	ck_assert_uint_eq(in.ssthresh, 10 * SEG);   /* NewReno: half the flight */
	ck_assert_int_eq(first_resent, 3);           /* the third duplicate ACK */
	ck_assert_uint_eq(sent[1] + sent[2], 0);
	ck_assert_uint_eq(sent[3], 1);               /* the retransmission */
	/* proportional part: pipe above ssthresh, one segment per two ACKs */
	unsigned prop = 0;
	for (unsigned k = 4; k < 12; k++)
		prop += sent[k];
	ck_assert_uint_eq(prop, 4);
	for (unsigned k = 4; k < 12; k++)
		ck_assert_uint_le(sent[k], 1);
	/* all of recovery: about ssthresh / prior cwnd of the 19 delivered */
	unsigned total = 0;
	for (unsigned k = 1; k < 20; k++)
		total += sent[k];
	ck_assert_uint_ge(total, 9);
	ck_assert_uint_le(total, 11);
	tcp_pcb_get_info(pcb, &in);
	ack_only(in.snd_nxt - iss - 1);
	tcp_pcb_get_info(pcb, &in);
	ck_assert(!in.in_recovery);
	ck_assert_uint_eq(in.cwnd, in.ssthresh);   /* PRR ends at ssthresh */
}
END_TEST

/* The tail of a flight (two segments) lost: no ACK comes, so the probe
 * at PTO = 2 * srtt + 2 ms (Linux's, with more than one segment out)
 * resends the last one; its SACK lets RACK find the other, resent at once.
 * No RTO. */
START_TEST(tlp_at_linux_pto_then_rack)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	ack_only(8 * SEG);
	uint64_t t_ack = w->now;
	forget_frames();
	long s = -1;
	while (s < 0 && w->now < t_ack + 300)
		{ th_step(w); s = next_data(); }
	ck_assert_int_eq(s, 9 * SEG);                    /* the last segment */
	ck_assert_uint_eq(w->now - t_ack, 2 * RTT_MS + 2);
	ck_assert_uint_eq(c->tx_tail_probes, 1);
	th_run(w, RTT_MS);
	const uint32_t sack10[] = { 9 * SEG, 10 * SEG };
	ack_sack(8 * SEG, sack10, 1);
	ck_assert_int_eq(next_data(), 8 * SEG);          /* RACK: segment 9, at once */
	th_run(w, RTT_MS);
	ack_only(10 * SEG);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
	ck_assert_uint_eq(c->tx_retransmits, 2);
}
END_TEST

/* The probe's SACK comes back faster than the fastest round trip seen
 * (7 of 10 ms, or 2 of 10: min_rtt sampled while the connection was busy,
 * the probe on an idle path; tcp_wire saw answers in 16-20 us where min_rtt
 * said 38-60). Linux's rule takes a retransmission ACKed under min_rtt for
 * an answer to its original; a probe's original left a PTO earlier and
 * would have been answered long ago, so the SACK counts however fast and
 * RACK resends segment 9 at once instead of waiting for the RTO. */
static void tlp_answered_after(unsigned tenths_of_rtt)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	ack_only(8 * SEG);
	th_run(w, 2 * RTT_MS + 2);
	ck_assert_uint_eq(c->tx_tail_probes, 1);
	forget_frames();
	th_run(w, RTT_MS * tenths_of_rtt / 10);
	const uint32_t sack10[] = { 9 * SEG, 10 * SEG };
	ack_sack(8 * SEG, sack10, 1);
	ck_assert_int_eq(next_data(), 8 * SEG);
	ck_assert_uint_eq(c->tx_rack_lost, 1);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
}

START_TEST(tlp_answered_under_min_rtt_counts)
{
	tlp_answered_after(7);
}
END_TEST

START_TEST(tlp_answered_far_under_min_rtt_counts)
{
	tlp_answered_after(2);
}
END_TEST

/* The data frames side 1 sent since the last look: their sequence
 * numbers (relative) and whether each carried PSH, up to max. */
static unsigned data_frames_psh(long *seq, bool *psh, unsigned max)
{
	unsigned n = 0;
	while (seen < w->ncaptured && n < max) {
		struct th_tcp t;
		ck_assert(th_parse(w->captured[seen++], &t));
		if (!t.len)
			continue;
		seq[n] = (long)(t.seq - iss - 1);
		psh[n++] = (t.flags & 0x08) != 0;
	}
	return n;
}

/* PSH where the sender waits for an ACK: on the last segment cwnd lets
 * out while more data waits, on a tail loss probe carrying new data, and
 * at the end of the data. A Linux receiver ACKs a full-sized pushed segment
 * as soon as its reader takes it, but delays the ACK of an unpushed lone
 * one up to 40 ms: the time a flight whose only ACK was lost would stall
 * (1% lossy router, libvma to kernel: 16-40 -> 44-72 MB/s). */
START_TEST(psh_where_the_sender_waits)
{
	handshake();
	long seq[32];
	bool psh[32];
	write_segs(20);
	unsigned n = data_frames_psh(seq, psh, 32);
	ck_assert_uint_eq(n, 10);                       /* the initial window */
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(seq[i], (long)(i * SEG));
		ck_assert_msg(psh[i] == (i == 9), "segment %u PSH %d", i, psh[i]);
	}
	th_run(w, 2 * RTT_MS + 2);                      /* no ACK: the probe */
	ck_assert_uint_eq(tcp_ctx_counters(w->side[1].tcp)->tx_tail_probes, 1);
	n = data_frames_psh(seq, psh, 32);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(seq[0], 10 * SEG);              /* new data */
	ck_assert(psh[0]);
	ack_only(11 * SEG);
	n = data_frames_psh(seq, psh, 32);
	ck_assert_uint_eq(n, 9);
	for (unsigned i = 0; i < n; i++)
		ck_assert_msg(psh[i] == (i == 8), "segment %u PSH %d", 11 + i, psh[i]);
}
END_TEST

/* Only the last segment lost: the probe resends it and the peer's ACK
 * covers everything with no D-SACK, so the probe repaired a loss; once an
 * ACK goes past the probe, cwnd is reduced once (Linux's
 * TCPLossProbeRecovery), without entering recovery. */
START_TEST(tlp_repairing_a_loss_reduces_cwnd)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	for (unsigned i = 1; i <= 4; i++)
		ack_only(2 * i * SEG);
	uint64_t t_ack = w->now;
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	uint32_t cwnd = in.cwnd;
	forget_frames();
	long s = -1;
	while (s < 0 && w->now < t_ack + 300)
		{ th_step(w); s = next_data(); }
	ck_assert_int_eq(s, 9 * SEG);
	ck_assert_uint_eq(w->now - t_ack, 2 * RTT_MS + 2);
	th_run(w, RTT_MS);
	ack_only(10 * SEG);                 /* the probe filled the hole: no D-SACK */
	ck_assert_uint_eq(c->tx_tlp_recoveries, 0);
	write_segs(2);
	th_run(w, RTT_MS);
	ack_only(12 * SEG);
	ck_assert_uint_eq(c->tx_tlp_recoveries, 1);
	tcp_pcb_get_info(pcb, &in);
	ck_assert(!in.in_recovery);
	ck_assert_uint_lt(in.cwnd, cwnd);
	ck_assert_uint_eq(in.cwnd, in.ssthresh);
	ck_assert_uint_eq(c->tx_fast_retransmits, 0);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
}
END_TEST

/* A probe whose copy and original both arrived (a D-SACK for the probe)
 * repaired nothing: cwnd stays, and the D-SACK does not widen RACK's
 * window. */
START_TEST(tlp_with_dsack_keeps_cwnd)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(10);
	th_run(w, RTT_MS);
	ack_only(8 * SEG);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	uint32_t cwnd = in.cwnd;
	th_run(w, 2 * RTT_MS + 2);
	ck_assert_uint_eq(c->tx_tail_probes, 1);
	ack_only(10 * SEG);                 /* the late ACK of the originals */
	const uint32_t dsack[] = { 9 * SEG, 10 * SEG };
	ack_sack(10 * SEG, dsack, 1);       /* and of the probe's copy */
	ck_assert_uint_eq(c->rx_dsacks, 1);
	write_segs(2);
	th_run(w, RTT_MS);
	ack_only(12 * SEG);
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(c->tx_tlp_recoveries, 0);
	ck_assert_uint_ge(in.cwnd, cwnd);
}
END_TEST

/* A retransmission lost too: new data sent after it is SACKed, so RACK
 * finds the retransmission lost once that segment's round trip and the
 * window passed, and resends it again; no RTO. */
START_TEST(rack_finds_a_lost_retransmission)
{
	handshake();
	const struct tcp_counters *c = tcp_ctx_counters(w->side[1].tcp);
	write_segs(40);
	th_run(w, RTT_MS);
	/* segment 3 lost; 4..10 SACKed: recovery, segment 3 resent */
	const uint32_t sack[] = { 3 * SEG, 10 * SEG };
	ack_sack(2 * SEG, sack, 1);
	ck_assert_uint_eq(c->tx_retransmits, 1);
	forget_frames();
	/* new data left with it (PRR); one round trip later the peer SACKs
	 * the new data, not the retransmission */
	th_run(w, RTT_MS);
	const uint32_t sack2[] = { 3 * SEG, 12 * SEG };
	ack_sack(2 * SEG, sack2, 1);
	long s = -1;
	uint64_t t0 = w->now;
	while (s != (long)(2 * SEG) && w->now < t0 + 50) {
		s = next_data();
		if (s < 0)
			th_step(w);
	}
	ck_assert_int_eq(s, 2 * SEG);
	ck_assert_uint_le(w->now - t0, 3);
	ck_assert_uint_eq(c->tx_lost_rexmits, 1);
	ck_assert_uint_eq(c->tx_rto_expiries, 0);
}
END_TEST

/* Slow start counts every segment an ACK covers (Linux's tcp_slow_start),
 * so a receiver that ACKs a batch once (a GRO aggregate) does not slow the
 * ramp: one ACK for 10 segments takes cwnd from 10 to 20, not 11. */
START_TEST(slow_start_counts_stretch_acks)
{
	handshake();
	write_segs(10);
	th_run(w, RTT_MS);
	ack_only(10 * SEG);
	struct tcp_pcb_info in;
	tcp_pcb_get_info(pcb, &in);
	ck_assert_uint_eq(in.cwnd, 20 * SEG);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tcp_recovery");
	TCase *t = tcase_create("recovery");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, rack_finds_loss_before_three_dupacks);
	tcase_add_test(t, dsack_widens_the_reordering_window);
	tcase_add_test(t, reordering_seen_keeps_the_window);
	tcase_add_test(t, prr_sends_half_a_segment_per_ack);
	tcase_add_test(t, tlp_at_linux_pto_then_rack);
	tcase_add_test(t, tlp_answered_under_min_rtt_counts);
	tcase_add_test(t, tlp_answered_far_under_min_rtt_counts);
	tcase_add_test(t, tlp_repairing_a_loss_reduces_cwnd);
	tcase_add_test(t, tlp_with_dsack_keeps_cwnd);
	tcase_add_test(t, rack_finds_a_lost_retransmission);
	tcase_add_test(t, slow_start_counts_stretch_acks);
	tcase_add_test(t, psh_where_the_sender_waits);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
