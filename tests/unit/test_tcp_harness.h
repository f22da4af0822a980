/* Two stacks joined by an in-memory wire with seeded loss, duplication,
 * reordering and delay, on a test clock. Used by the test_tcp_* programs. */
#ifndef TEST_TCP_HARNESS_H
#define TEST_TCP_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "ring/ring_buf.h"
#include "stack/stack.h"
#include "stack/tcp.h"

#define TH_WIRE_MAX 8192

struct th_frame { struct ring_buf *buf; uint64_t at; uint64_t order; int to; };

struct th_side {
	struct stack *st;
	struct tcp_ctx *tcp;
	struct stack_netif nif;
	struct ring_buf_pool *pool;
	int index;
	/* app state */
	struct tcp_pcb *pcb;           /* connected or accepted pcb */
	uint64_t rx_bytes, rx_bad;     /* bytes received, bytes not matching the pattern */
	bool hold_recved;              /* do not call tcp_recved (zero window tests) */
	uint64_t held;
	bool fin, connected;
	int err;
	uint64_t tx_bytes, tx_goal;    /* pattern bytes written / to write */
	bool close_when_sent;
	uint64_t frames_sent;
};

struct th_wire {
	struct th_side side[2];
	struct th_frame q[TH_WIRE_MAX];
	unsigned n;
	uint64_t order;
	uint64_t now;
	uint64_t rng;
	unsigned drop_ppm, dup_ppm, reorder_ppm, delay_ms;
	/* A bottleneck per direction (0: none): frames from side i leave one
	 * after another at this many bytes per ms, queued without limit, then
	 * take delay_ms; link_free_us[i]: when its last frame has left. */
	unsigned rate_bytes_per_ms;
	uint64_t link_free_us[2];
	bool drop_all;
	long drop_nth_data[2][8];      /* data frames from side i to drop (1-based counts), 0 = unused */
	uint64_t data_frames[2];
	uint32_t drop_ack_once[2];     /* the next pure ACK from side i with this ack number is dropped; 0 = off */
	bool capture;                  /* frames are kept in captured[] instead of delivered */
	/* Delivered frames get a wrong TCP checksum, as a veth's kernel sender
	 * leaves it (partial): only a receiver whose netif trusts L4
	 * checksums accepts them. */
	bool spoil_l4_csum;
	struct ring_buf *captured[256];
	unsigned ncaptured;
};

/* Buffers in each side's pool (2 KiB each), read by th_init; default 4096. */
extern unsigned th_pool_bufs;

void th_init(struct th_wire *w, const struct tcp_settings *a, const struct tcp_settings *b, uint64_t seed);
void th_fini(struct th_wire *w);   /* asserts no buffer leaks */
void th_step(struct th_wire *w);   /* deliver due frames, +1 ms, timers */
void th_run(struct th_wire *w, uint64_t ms);
/* Runs until done(w) or ms elapse; returns done(w). */
bool th_run_until(struct th_wire *w, bool (*done)(struct th_wire *), uint64_t ms);
uint8_t th_pattern(uint64_t off);
void th_pump(struct th_side *s);   /* writes pattern bytes as space allows */
/* Sends 40 full segments from side `from` and waits for them: the
 * receiver's quick-ACK mode of the connection start is spent, so a test
 * sees the delayed-ACK policy (within an RTO: no silence renews it). */
void th_spend_quickacks(struct th_wire *w, int from);
struct tcp_pcb *th_listen(struct th_side *s, uint16_t port);
struct tcp_pcb *th_connect(struct th_wire *w, int from, uint16_t lport, uint16_t rport);
extern const struct tcp_callbacks th_callbacks;

/* Crafted segments injected into side `to` as if from the other side. */
void th_inject(struct th_wire *w, int to, uint16_t sport, uint16_t dport, uint32_t seq,
	       uint32_t ack, uint8_t flags, uint16_t wnd, const uint8_t *opts, unsigned optlen,
	       const void *payload, unsigned len);
/* Parses a captured frame (TCP header fields); returns false if not TCP. */
struct th_tcp { uint32_t seq, ack; uint8_t flags; uint16_t wnd; unsigned len, optlen; uint8_t opts[40]; };
bool th_parse(const struct ring_buf *frame, struct th_tcp *out);
void th_capture_clear(struct th_wire *w);

#endif
