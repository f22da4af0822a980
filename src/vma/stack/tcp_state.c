/* Every TCP state change goes through tcp_set_state: the transitions RFC
 * 9293 allows (checked in debug builds), what must hold in the state
 * entered, the SNMP counters that are transitions (as Linux's
 * tcp_set_state: active and passive opens, failed attempts, the curr_estab
 * gauge of ESTABLISHED and CLOSE_WAIT), and a FINE log line per change. */
#include "stack/tcp_priv.h"
#include "log/vlog.h"

#include <arpa/inet.h>

static const char *const state_names[] = {
	"CLOSED", "LISTEN", "SYN_SENT", "SYN_RCVD", "ESTABLISHED", "FIN_WAIT_1",
	"FIN_WAIT_2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT"
};

const char *tcp_state_name(enum tcp_state s)
{
	return (unsigned)s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : "?";
}

#define S(x) (1u << TCP_##x)
/* The states each state may move to (RFC 9293 figure 5, with the
 * shortcuts of this engine: a cookie child is born ESTABLISHED, a SYN in
 * TIME_WAIT restarts it, CLOSED is reachable from anywhere by a reset, a
 * timeout or the application). */
static const uint16_t allowed[] = {
	[TCP_CLOSED] = S(CLOSED) | S(LISTEN) | S(SYN_SENT) | S(SYN_RCVD) | S(ESTABLISHED),
	[TCP_LISTEN] = S(CLOSED) | S(LISTEN),
	[TCP_SYN_SENT] = S(CLOSED) | S(SYN_RCVD) | S(ESTABLISHED),
	[TCP_SYN_RCVD] = S(CLOSED) | S(ESTABLISHED) | S(FIN_WAIT_1) | S(CLOSE_WAIT),
	[TCP_ESTABLISHED] = S(CLOSED) | S(FIN_WAIT_1) | S(CLOSE_WAIT),
	[TCP_FIN_WAIT_1] = S(CLOSED) | S(FIN_WAIT_2) | S(CLOSING) | S(TIME_WAIT),
	[TCP_FIN_WAIT_2] = S(CLOSED) | S(TIME_WAIT),
	[TCP_CLOSE_WAIT] = S(CLOSED) | S(LAST_ACK),
	[TCP_CLOSING] = S(CLOSED) | S(TIME_WAIT),
	[TCP_LAST_ACK] = S(CLOSED),
	[TCP_TIME_WAIT] = S(CLOSED) | S(TIME_WAIT),
};
#undef S

bool tcp_state_change_allowed(enum tcp_state from, enum tcp_state to)
{
	return (unsigned)from < sizeof(allowed) / sizeof(allowed[0]) && (allowed[from] >> to & 1u);
}

void tcp_estab_count(struct tcp_pcb *pcb, bool on)
{
	if (pcb->counted_estab == on)
		return;
	pcb->counted_estab = on;
	if (on)
		pcb->ctx->cnt.curr_estab++;
	else
		pcb->ctx->cnt.curr_estab--;
}

/* What the state entered requires of the pcb. */
static void state_invariants(const struct tcp_pcb *pcb)
{
	switch (pcb->state) {
	case TCP_LISTEN:
		VMA_ASSERT(pcb->bound && !pcb->remote_port);
		break;
	case TCP_SYN_SENT: case TCP_SYN_RCVD:
		VMA_ASSERT(pcb->remote_port && pcb->hashed == TCP_HASH_CONN);
		break;
	case TCP_ESTABLISHED:
		VMA_ASSERT(pcb->syn_acked);
		/* fall through */
	case TCP_CLOSE_WAIT: case TCP_FIN_WAIT_1: case TCP_FIN_WAIT_2: case TCP_CLOSING: case TCP_LAST_ACK:
		VMA_ASSERT(pcb->remote_port);
		VMA_ASSERT(SEQ_LEQ(pcb->snd_una, pcb->snd_nxt) && SEQ_LEQ(pcb->snd_nxt, pcb->snd_max));
		VMA_ASSERT(pcb->sbuf_len <= pcb->sbuf_size);
		break;
	case TCP_TIME_WAIT:
		VMA_ASSERT(pcb->fin_rcvd);
		break;
	default:
		break;
	}
	/* the FIN we received moved us to (or through) these */
	VMA_ASSERT(pcb->fin_rcvd || (pcb->state != TCP_CLOSE_WAIT && pcb->state != TCP_LAST_ACK &&
				      pcb->state != TCP_CLOSING));
}

void tcp_set_state(struct tcp_pcb *pcb, enum tcp_state to)
{
	struct tcp_ctx *ctx = pcb->ctx;
	enum tcp_state from = pcb->state;
	VMA_ASSERT(tcp_state_change_allowed(from, to));
	pcb->state = to;
	if (from == TCP_CLOSED && to == TCP_SYN_SENT)
		ctx->cnt.active_opens++;
	else if (from == TCP_CLOSED && (to == TCP_SYN_RCVD || to == TCP_ESTABLISHED))
		ctx->cnt.passive_opens++;   /* a child of a listener (SYN, or a SYN cookie's ACK) */
	else if (to == TCP_CLOSED && (from == TCP_SYN_SENT || from == TCP_SYN_RCVD))
		ctx->cnt.attempt_fails++;
	tcp_estab_count(pcb, to == TCP_ESTABLISHED || to == TCP_CLOSE_WAIT);
	state_invariants(pcb);
	if (vlog_enabled(VLOG_FINE) && from != to) {
		char l[INET_ADDRSTRLEN], r[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &pcb->local_ip, l, sizeof(l));
		inet_ntop(AF_INET, &pcb->remote_ip, r, sizeof(r));
		vlog_fine("tcp %s:%u > %s:%u: %s -> %s", l, ntohs(pcb->local_port), r, ntohs(pcb->remote_port),
			  tcp_state_name(from), tcp_state_name(to));
	}
}
