/* See stats_view.h. */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "stats/stats_format.h"
#include "stats_view.h"

#define RULE "======================================================\n"

typedef unsigned long long ull;

int stats_filter_parse(struct stats_fd_filter *f, const char *text)
{
	f->count = 0;
	const char *p = text;
	while (*p) {
		char *end;
		long lo = strtol(p, &end, 10), hi = lo;
		if (end == p || lo < 0 || lo > INT_MAX)
			return -1;
		p = end;
		if (*p == '-') {
			hi = strtol(p + 1, &end, 10);
			if (end == p + 1 || hi < lo || hi > INT_MAX)
				return -1;
			p = end;
		}
		if (f->count == STATS_FILTER_MAX)
			return -1;
		f->lo[f->count] = (int)lo;
		f->hi[f->count++] = (int)hi;
		if (*p == ',')
			p++;
		else if (*p)
			return -1;
	}
	return f->count ? 0 : -1;
}

int stats_filter_match(const struct stats_fd_filter *f, int fd)
{
	if (!f || !f->count)
		return 1;
	for (int i = 0; i < f->count; i++)
		if (fd >= f->lo[i] && fd <= f->hi[i])
			return 1;
	return 0;
}

static const char *proto_name(uint32_t proto)
{
	return proto == STATS_PROTO_TCP ? "TCP" : proto == STATS_PROTO_UDP ? "UDP" : "???";
}

static void print_groups_of(FILE *out, const struct stats_snapshot *s, int fd)
{
	int first = 1;
	for (uint32_t i = 0; i < s->h->mc_slots; i++) {
		const struct stats_mc_group *g = stats_snap_mc(s, i);
		if (!g->refs || g->fd != fd)
			continue;
		const unsigned char *b = (const unsigned char *)&g->group;
		fprintf(out, "%s%u.%u.%u.%u", first ? "- Member of = [" : ", ", b[0], b[1], b[2], b[3]);
		first = 0;
	}
	if (!first)
		fprintf(out, "]\n");
}

static void print_socket(FILE *out, const struct stats_snapshot *s, const struct stats_socket *k,
			 int view)
{
	const struct stats_socket_counters *c = &k->c;
	char local[STATS_ADDR_TEXT_SIZE], peer[STATS_ADDR_TEXT_SIZE];
	stats_format_addr(local, k->local_addr, k->local_port);
	stats_format_addr(peer, k->peer_addr, k->peer_port);
	fprintf(out, RULE "\tFd=[%d]\n", k->fd);
	fprintf(out, "- %s, %s, %s", proto_name(k->proto), k->offloaded ? "Offloaded" : "Not offloaded",
		k->blocking ? "Blocked" : "Non-blocked");
	if (k->proto == STATS_PROTO_UDP)
		fprintf(out, ", MC Loop %s", k->mc_loop ? "Enabled" : "Disabled");
	if (k->proto == STATS_PROTO_TCP)
		fprintf(out, ", %s", stats_tcp_state_name(k->tcp_state));
	fprintf(out, "\n- Local Address = [%s]\n- Foreign Address = [%s]\n", local, peer);
	/* A socket that moved between lanes says so (and where it is now);
	 * -v 2 shows every socket's lane. */
	if (k->ring_migrations || (view >= 2 && k->offloaded))
		fprintf(out, "- Ring migrations = [%u], lane [%u]\n", k->ring_migrations, k->ring_id >> 16);
	print_groups_of(out, s, k->fd);
	fprintf(out, "Rx Offload: %llu / %llu / %llu / %llu [kilobytes/packets/eagains/errors]\n",
		(ull)(c->rx_bytes / 1024), (ull)c->rx_packets, (ull)c->rx_eagain, (ull)c->rx_errors);
	fprintf(out, "Tx Offload: %llu / %llu / %llu / %llu [kilobytes/packets/eagains/errors]\n",
		(ull)(c->tx_bytes / 1024), (ull)c->tx_packets, (ull)c->tx_eagain, (ull)c->tx_errors);
	if (view >= 2 || c->rx_os_packets || c->rx_os_errors || c->rx_os_eagain)
		fprintf(out, "Rx OS info: %llu / %llu / %llu / %llu [kilobytes/packets/eagains/errors]\n",
			(ull)(c->rx_os_bytes / 1024), (ull)c->rx_os_packets, (ull)c->rx_os_eagain,
			(ull)c->rx_os_errors);
	if (view >= 2 || c->tx_os_packets || c->tx_os_errors || c->tx_os_eagain)
		fprintf(out, "Tx OS info: %llu / %llu / %llu / %llu [kilobytes/packets/eagains/errors]\n",
			(ull)(c->tx_os_bytes / 1024), (ull)c->tx_os_packets, (ull)c->tx_os_eagain,
			(ull)c->tx_os_errors);
	fprintf(out, "Rx poll: %llu / %llu (%.2f%%) [miss/hit]\n", (ull)c->rx_poll_miss,
		(ull)c->rx_poll_hit, stats_hit_percent(c->rx_poll_hit, c->rx_poll_miss));
	if (view >= 2 || c->rx_drain_polls)
		fprintf(out, "Rx drain polls: %llu [ring polls with data queued]\n", (ull)c->rx_drain_polls);
	if (view >= 2) {
		fprintf(out, "Rx byte: cur %llu / max %llu / dropped %llu / limit %llu\n",
			(ull)k->rx_ready_bytes_cur, (ull)c->rx_ready_bytes_max,
			(ull)c->rx_ready_bytes_dropped, (ull)k->rx_ready_bytes_limit);
		fprintf(out, "Rx pkt : cur %llu / max %llu / dropped %llu\n", (ull)k->rx_ready_pkts_cur,
			(ull)c->rx_ready_pkts_max, (ull)c->rx_ready_pkts_dropped);
		fprintf(out, "Tx dummy: %llu / Retransmissions: %llu\n", (ull)c->tx_dummy,
			(ull)c->tx_retransmits);
	}
}

static void print_iomux(FILE *out, const char *name, const struct stats_iomux *m, int cpu_enabled)
{
	const struct stats_iomux_counters *c = &m->c;
	if (!m->in_use)
		return;
	fprintf(out, "%s Rx Ready: %llu / %llu [os/offload]\n", name, (ull)c->os_ready,
		(ull)c->offload_ready);
	fprintf(out, "%s Polls: %llu / %llu (%.2f%%) [miss/hit]\n", name, (ull)c->poll_miss,
		(ull)c->poll_hit, stats_hit_percent(c->poll_hit, c->poll_miss));
	fprintf(out, "%s Calls: %llu / timeouts %llu / errors %llu\n", name, (ull)c->calls,
		(ull)c->timeouts, (ull)c->errors);
	double cpu = c->total_ns ? 100.0 * (double)c->polling_ns / (double)c->total_ns : 0.0;
	if (cpu > 100.0)
		cpu = 100.0;
	fprintf(out, "%s CPU usage: %.0f%%%s\n", name, cpu, cpu_enabled ? "" : " (VMA_CPU_USAGE_STATS off)");
}

static void print_iomuxes(FILE *out, const struct stats_snapshot *s)
{
	int cpu = s->h->cpu_usage_enabled != 0;
	print_iomux(out, "select()", stats_snap_select(s), cpu);
	print_iomux(out, "poll()", stats_snap_poll(s), cpu);
	for (uint32_t i = 0; i < s->h->epoll_slots; i++) {
		const struct stats_iomux *e = stats_snap_epoll(s, i);
		char name[48];
		snprintf(name, sizeof(name), "epoll_wait(epfd=%d)", e->epfd);
		print_iomux(out, name, e, cpu);
	}
}

/* The lane's protection counters (docs/security.md), one "name value" per
 * line so scripts can pick them out. */
static void print_lane(FILE *out, const struct stats_lane_counters *l)
{
	const struct {
		const char *name;
		uint64_t v;
	} rows[] = {
		{ "tcp_frame_pressure_drops", l->tcp_frame_pressure_drops },
		{ "udp_frame_pressure_drops", l->udp_frame_pressure_drops },
		{ "tcp_ooo_drops", l->tcp_ooo_drops },
		{ "tcp_ooo_reneged", l->tcp_ooo_reneged },
		{ "tcp_coalesced", l->tcp_coalesced },
		{ "tcp_syncookies_sent", l->tcp_syncookies_sent },
		{ "tcp_syncookies_ok", l->tcp_syncookies_ok },
		{ "tcp_syncookies_bad", l->tcp_syncookies_bad },
		{ "tcp_accept_queue_full", l->tcp_accept_queue_full },
		{ "tcp_syn_rate_limited", l->tcp_syn_rate_limited },
		{ "tcp_challenge_acks", l->tcp_challenge_acks },
		{ "tcp_challenge_acks_limited", l->tcp_challenge_acks_limited },
		{ "tcp_invalid_acks_limited", l->tcp_invalid_acks_limited },
		{ "tcp_rst_ignored", l->tcp_rst_ignored },
		{ "tcp_out_of_window", l->tcp_out_of_window },
		{ "tcp_bad_segments", l->tcp_bad_segments },
		{ "malformed_frames", l->malformed_frames },
		{ "reass_evicted", l->reass_evicted },
	};
	fprintf(out, "Lane stack (drops and defences):\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fprintf(out, "  %-28s %llu\n", rows[i].name, (ull)rows[i].v);
}

static void print_rings_pools(FILE *out, const struct stats_snapshot *s)
{
	for (uint32_t i = 0; i < s->h->ring_slots; i++) {
		const struct stats_ring *r = stats_snap_ring(s, i);
		if (!r->in_use)
			continue;
		const struct stats_ring_counters *c = &r->c;
		fprintf(out, RULE "RING=[%u] (%s)\n", r->id, r->ifname);
		fprintf(out, "Rx Offload: %llu / %llu [kilobytes/packets]\n", (ull)(c->rx_bytes / 1024),
			(ull)c->rx_packets);
		fprintf(out, "Tx Offload: %llu / %llu [kilobytes/packets]\n", (ull)(c->tx_bytes / 1024),
			(ull)c->tx_packets);
		fprintf(out, "Retransmissions: %llu / Dummy sends: %llu\n", (ull)c->tx_retransmits,
			(ull)c->tx_dummy);
		fprintf(out, "Interrupts: %llu / %llu [requests/received]\n",
			(ull)c->interrupts_requested, (ull)c->interrupts_received);
		fprintf(out, "Tx doorbells: %llu / %llu / %llu [rung/sends held/tails stranded]\n",
			(ull)c->tx_doorbells, (ull)c->tx_held, (ull)c->tx_stranded);
		fprintf(out, "Moderation: %u / %u [frame count/usec period]\n", r->moderation_count,
			r->moderation_period_usec);
		fprintf(out, "CQ=[%u] Packets dropped: %llu / Packets queue len: %u / Drained max: %llu / "
			"Buffer pool size: %u\n", r->id, (ull)c->cq_packets_dropped, r->cq_queue_len,
			(ull)c->cq_drained_max, r->cq_buffer_pool_size);
		if (r->has_lane)
			print_lane(out, &r->lane);
	}
	for (uint32_t i = 0; i < s->h->pool_slots; i++) {
		const struct stats_pool *p = stats_snap_pool(s, i);
		if (!p->in_use)
			continue;
		fprintf(out, RULE "BUFFER_POOL(%s)=[%u] Size: %llu / No buffers error: %llu\n",
			p->kind == STATS_POOL_TX ? "TX" : "RX", p->id, (ull)p->size,
			(ull)p->no_buffer_errors);
	}
}

void stats_view_totals(FILE *out, const struct stats_snapshot *s, int view,
		       const struct stats_fd_filter *f)
{
	for (uint32_t i = 0; i < s->h->socket_slots; i++) {
		const struct stats_socket *k = stats_snap_socket(s, i);
		if (k->in_use && stats_filter_match(f, k->fd))
			print_socket(out, s, k, view);
	}
	if (view >= 2) {
		fprintf(out, RULE);
		print_iomuxes(out, s);
	}
	if (view >= 3)
		print_rings_pools(out, s);
	fprintf(out, RULE);
}

/* Rate of one counter; a counter that went down (-z) counts from zero. */
static uint64_t rate(uint64_t now, uint64_t before, double seconds)
{
	uint64_t d = now >= before ? now - before : now;
	/* A counter near 2^64 (a corrupt block, or one that went down to a
	 * huge value) gives a rate a uint64_t cannot hold, and converting such
	 * a double is undefined behaviour (found by tests/fuzz, regress-rate-
	 * overflow): saturate instead. A non-positive interval shows the
	 * difference itself. */
	if (!(seconds > 0))
		return d;
	double r = (double)d / seconds + 0.5;
	return r >= 0x1p64 ? UINT64_MAX : (uint64_t)r;
}

/* A copy of cur whose counters are per-second rates against prev; slots that
 * changed owner between the two reads are shown against zero. */
static struct stats_snapshot make_rates(const struct stats_snapshot *prev,
					const struct stats_snapshot *cur, double seconds)
{
	struct stats_snapshot r = { malloc(cur->size), cur->size, NULL };
	if (!r.data)
		return r;
	memcpy(r.data, cur->data, cur->size);
	r.h = (const struct stats_header *)r.data;
	int same = prev && prev->size == cur->size;
	for (uint32_t i = 0; i < cur->h->socket_slots; i++) {
		struct stats_socket *k = (struct stats_socket *)stats_snap_socket(&r, i);
		const struct stats_socket *p = same ? stats_snap_socket(prev, i) : NULL;
		int match = p && p->in_use && p->fd == k->fd;
		uint64_t *now = (uint64_t *)&k->c;
		const uint64_t *old = match ? (const uint64_t *)&p->c : NULL;
		for (size_t j = 0; j < sizeof(k->c) / sizeof(uint64_t); j++)
			now[j] = rate(now[j], old ? old[j] : 0, seconds);
		const struct stats_socket *c = stats_snap_socket(cur, i);
		k->c.rx_ready_bytes_max = c->c.rx_ready_bytes_max; /* maxima are not rates */
		k->c.rx_ready_pkts_max = c->c.rx_ready_pkts_max;
	}
	for (uint32_t i = 0; i < cur->h->ring_slots; i++) {
		struct stats_ring *k = (struct stats_ring *)stats_snap_ring(&r, i);
		const struct stats_ring *p = same ? stats_snap_ring(prev, i) : NULL;
		uint64_t *now = (uint64_t *)&k->c;
		const uint64_t *old = p && p->in_use && p->id == k->id ? (const uint64_t *)&p->c : NULL;
		for (size_t j = 0; j < sizeof(k->c) / sizeof(uint64_t); j++)
			now[j] = rate(now[j], old ? old[j] : 0, seconds);
		k->c.cq_drained_max = stats_snap_ring(cur, i)->c.cq_drained_max;
	}
	const struct stats_iomux *mux_now[2 + STATS_EPOLL_SLOTS], *mux_old[2 + STATS_EPOLL_SLOTS];
	uint32_t n = 0;
	mux_now[n] = stats_snap_select(&r); mux_old[n++] = same ? stats_snap_select(prev) : NULL;
	mux_now[n] = stats_snap_poll(&r);   mux_old[n++] = same ? stats_snap_poll(prev) : NULL;
	for (uint32_t i = 0; i < cur->h->epoll_slots; i++) {
		mux_now[n] = stats_snap_epoll(&r, i);
		mux_old[n++] = same ? stats_snap_epoll(prev, i) : NULL;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t *now = (uint64_t *)&((struct stats_iomux *)mux_now[i])->c;
		const uint64_t *old = mux_old[i] ? (const uint64_t *)&mux_old[i]->c : NULL;
		for (size_t j = 0; j < sizeof(struct stats_iomux_counters) / sizeof(uint64_t); j++)
			now[j] = rate(now[j], old ? old[j] : 0, seconds);
	}
	return r;
}

void stats_view_deltas(FILE *out, const struct stats_snapshot *prev, const struct stats_snapshot *cur,
		       double seconds, int view, const struct stats_fd_filter *f)
{
	if (seconds <= 0)
		seconds = 1;
	struct stats_snapshot r = make_rates(prev, cur, seconds);
	if (!r.data)
		return;
	if (view >= 3) {
		stats_view_totals(out, &r, view, f);
		free(r.data);
		return;
	}
	fprintf(out, "%-9s%-38s%s\n", "", "---------------- offloaded ----------------",
		"------------ os ------------");
	fprintf(out, "%-5s%-4s%10s%10s%10s%10s%8s%10s%10s%10s\n", "fd", "", "pkt/s", "Kbyte/s",
		"eagain/s", "error/s", "poll%", "pkt/s", "Kbyte/s", "error/s");
	for (uint32_t i = 0; i < r.h->socket_slots; i++) {
		const struct stats_socket *k = stats_snap_socket(&r, i);
		if (!k->in_use || !stats_filter_match(f, k->fd))
			continue;
		const struct stats_socket_counters *c = &k->c;
		fprintf(out, "%-5d%-4s%10llu%10llu%10llu%10llu%8.1f%10llu%10llu%10llu\n", k->fd, "Rx:",
			(ull)c->rx_packets, (ull)(c->rx_bytes / 1024), (ull)c->rx_eagain,
			(ull)c->rx_errors, stats_hit_percent(c->rx_poll_hit, c->rx_poll_miss),
			(ull)c->rx_os_packets, (ull)(c->rx_os_bytes / 1024), (ull)c->rx_os_errors);
		fprintf(out, "%-5s%-4s%10llu%10llu%10llu%10llu%8s%10llu%10llu%10llu\n", "", "Tx:",
			(ull)c->tx_packets, (ull)(c->tx_bytes / 1024), (ull)c->tx_eagain,
			(ull)c->tx_errors, "", (ull)c->tx_os_packets, (ull)(c->tx_os_bytes / 1024),
			(ull)c->tx_os_errors);
	}
	if (view >= 2)
		print_iomuxes(out, &r);
	free(r.data);
}

void stats_view_mc_groups(FILE *out, const struct stats_snapshot *s)
{
	fprintf(out, "VMA Group Membership Information\n%-20s%s\n", "Group", "fd number");
	for (uint32_t i = 0; i < s->h->mc_slots; i++) {
		const struct stats_mc_group *g = stats_snap_mc(s, i);
		int seen = 0;
		if (!g->refs)
			continue;
		for (uint32_t j = 0; j < i && !seen; j++) {
			const struct stats_mc_group *e = stats_snap_mc(s, j);
			seen = e->refs && e->group == g->group;
		}
		if (seen)
			continue; /* its line was printed with the first member */
		char addr[24];
		const unsigned char *b = (const unsigned char *)&g->group;
		snprintf(addr, sizeof(addr), "[%u.%u.%u.%u]", b[0], b[1], b[2], b[3]);
		fprintf(out, "%-20s", addr);
		for (uint32_t j = i; j < s->h->mc_slots; j++) {
			const struct stats_mc_group *e = stats_snap_mc(s, j);
			if (e->refs && e->group == g->group)
				fprintf(out, " %d", e->fd);
		}
		fprintf(out, "\n");
	}
}

void stats_view_netstat_header(FILE *out)
{
	fprintf(out, "%-6s%-10s%-23s%-23s%-13s%-10s%s\n", "Proto", "Offloaded", "Local Address",
		"Foreign Address", "State", "Inode", "PID/Program name");
}

static unsigned long socket_inode(int pid, int fd)
{
	char path[64], link[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	unsigned long ino = 0;
	if (n > 0) {
		link[n] = '\0';
		sscanf(link, "socket:[%lu]", &ino);
	}
	return ino;
}

void stats_view_netstat(FILE *out, const struct stats_snapshot *s, const struct stats_fd_filter *f)
{
	for (uint32_t i = 0; i < s->h->socket_slots; i++) {
		const struct stats_socket *k = stats_snap_socket(s, i);
		if (!k->in_use || !stats_filter_match(f, k->fd))
			continue;
		char local[STATS_ADDR_TEXT_SIZE], peer[STATS_ADDR_TEXT_SIZE], prog[96];
		stats_format_addr(local, k->local_addr, k->local_port);
		stats_format_addr(peer, k->peer_addr, k->peer_port);
		snprintf(prog, sizeof(prog), "%d/%s", (int)s->h->pid, s->h->process_name);
		fprintf(out, "%-6s%-10s%-23s%-23s%-13s%-10lu%s\n", k->proto == STATS_PROTO_TCP ? "tcp" : "udp",
			k->offloaded ? "Yes" : "No", local, peer,
			k->proto == STATS_PROTO_TCP ? stats_tcp_state_name(k->tcp_state) : "",
			socket_inode(s->h->pid, k->fd), prog);
	}
}
