/* Shared text forms of the statistics; see stats_format.h. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "stats/stats_format.h"

void stats_format_addr(char out[STATS_ADDR_TEXT_SIZE], uint32_t addr, uint16_t port)
{
	const unsigned char *b = (const unsigned char *)&addr;
	if (port)
		snprintf(out, STATS_ADDR_TEXT_SIZE, "%u.%u.%u.%u:%u", b[0], b[1], b[2], b[3],
			 (unsigned)ntohs(port));
	else
		snprintf(out, STATS_ADDR_TEXT_SIZE, "%u.%u.%u.%u:*", b[0], b[1], b[2], b[3]);
}

const char *stats_tcp_state_name(uint32_t state)
{
	static const char *const names[STATS_TCP_STATE_COUNT] = {
		"CLOSED", "LISTEN", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT1",
		"FIN_WAIT2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT",
	};
	return state < STATS_TCP_STATE_COUNT ? names[state] : "UNKNOWN";
}

double stats_hit_percent(uint64_t hit, uint64_t miss)
{
	double total = (double)hit + (double)miss;
	return total > 0 ? 100.0 * (double)hit / total : 0.0;
}

static double drop_percent(uint64_t dropped, uint64_t delivered)
{
	double total = (double)dropped + (double)delivered;
	return total > 0 ? 100.0 * (double)dropped / total : 0.0;
}

int stats_socket_had_traffic(const struct stats_socket *s)
{
	const struct stats_socket_counters *c = &s->c;
	return (c->rx_packets | c->tx_packets | c->rx_os_packets | c->tx_os_packets |
		c->rx_errors | c->tx_errors | c->rx_os_errors | c->tx_os_errors) != 0;
}

/* Appends one line if it fits whole, so a short buffer never holds half a line. */
static void add_line(char *buf, size_t size, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void add_line(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
	if (*len >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *len, size - *len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size - *len)
		buf[*len] = '\0';
	else
		*len += (size_t)n;
}

size_t stats_format_socket_record(char *buf, size_t size, const struct stats_socket *s)
{
	const struct stats_socket_counters *c = &s->c;
	size_t len = 0;
	int fd = s->fd;
	if (size == 0)
		return 0;
	buf[0] = '\0';
	add_line(buf, size, &len,
		 "VMA: [fd=%d] Tx Offload: %llu KB / %llu / %llu / %llu [bytes/packets/drops/errors]\n",
		 fd, (unsigned long long)(c->tx_bytes / 1024), (unsigned long long)c->tx_packets,
		 (unsigned long long)c->tx_eagain, (unsigned long long)c->tx_errors);
	if (c->tx_dummy)   /* the Extra API's dummy sends (VMA_SND_FLAGS_DUMMY), never on the wire */
		add_line(buf, size, &len, "VMA: [fd=%d] Tx Dummy messages : %llu\n", fd,
			 (unsigned long long)c->tx_dummy);
	add_line(buf, size, &len, "VMA: [fd=%d] Tx OS info: %llu KB / %llu / %llu [bytes/packets/errors]\n",
		 fd, (unsigned long long)(c->tx_os_bytes / 1024), (unsigned long long)c->tx_os_packets,
		 (unsigned long long)c->tx_os_errors);
	add_line(buf, size, &len,
		 "VMA: [fd=%d] Rx Offload: %llu KB / %llu / %llu / %llu [bytes/packets/eagains/errors]\n",
		 fd, (unsigned long long)(c->rx_bytes / 1024), (unsigned long long)c->rx_packets,
		 (unsigned long long)c->rx_eagain, (unsigned long long)c->rx_errors);
	add_line(buf, size, &len, "VMA: [fd=%d] Rx byte: max %llu / dropped %llu (%.2f%%) / limit %llu\n",
		 fd, (unsigned long long)c->rx_ready_bytes_max,
		 (unsigned long long)c->rx_ready_bytes_dropped,
		 drop_percent(c->rx_ready_bytes_dropped, c->rx_bytes),
		 (unsigned long long)s->rx_ready_bytes_limit);
	add_line(buf, size, &len, "VMA: [fd=%d] Rx pkt : max %llu / dropped %llu (%.2f%%)\n", fd,
		 (unsigned long long)c->rx_ready_pkts_max, (unsigned long long)c->rx_ready_pkts_dropped,
		 drop_percent(c->rx_ready_pkts_dropped, c->rx_packets));
	add_line(buf, size, &len, "VMA: [fd=%d] Rx OS info: %llu KB / %llu / %llu [bytes/packets/errors]\n",
		 fd, (unsigned long long)(c->rx_os_bytes / 1024), (unsigned long long)c->rx_os_packets,
		 (unsigned long long)c->rx_os_errors);
	add_line(buf, size, &len, "VMA: [fd=%d] Rx poll: %llu / %llu (%.2f%%) [miss/hit]\n", fd,
		 (unsigned long long)c->rx_poll_miss, (unsigned long long)c->rx_poll_hit,
		 stats_hit_percent(c->rx_poll_hit, c->rx_poll_miss));
	if (c->rx_drain_polls)
		add_line(buf, size, &len, "VMA: [fd=%d] Rx drain polls: %llu [ring polls with data queued]\n", fd,
			 (unsigned long long)c->rx_drain_polls);
	return len;
}
