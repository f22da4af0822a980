/* Neighbour resolution policy. ARP itself stays with the kernel: we only ask
 * it to resolve (or re-validate) and watch what it reports. */
#include "net/net.h"
#include "config/cfg_params.h"

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/neighbour.h>

void net_neigh_settings_default(struct net_neigh_settings *settings)
{
	/* Defaults of VMA_NEIGH_UC_ARP_QUATA, _UC_ARP_DELAY_MSEC, _NUM_ERR_RETRIES. */
	settings->uc_arp_quota = 3;
	settings->uc_arp_delay_msec = 10000;
	settings->num_err_retries = 1;
}

void net_neigh_settings_from_params(struct net_neigh_settings *settings)
{
	/* The table keeps all three non-negative. */
	settings->uc_arp_quota = (unsigned int)g_cfg.neigh_uc_arp_quata;
	settings->uc_arp_delay_msec = (unsigned int)g_cfg.neigh_uc_arp_delay_msec;
	settings->num_err_retries = (unsigned int)g_cfg.neigh_num_err_retries;
}

bool net_neigh_state_usable(unsigned int nud_state)
{
	return nud_state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP);
}

/* The kernel vouches for these right now; STALE/DELAY/PROBE are only hopes. */
static bool state_confirmed(unsigned int nud_state)
{
	return nud_state & (NUD_REACHABLE | NUD_PERMANENT | NUD_NOARP);
}

void net_mcast_mac(in_addr_t group, uint8_t mac[NET_MAC_LEN])
{
	uint32_t host = ntohl(group);
	mac[0] = 0x01;
	mac[1] = 0x00;
	mac[2] = 0x5e;
	mac[3] = (host >> 16) & 0x7f;
	mac[4] = (host >> 8) & 0xff;
	mac[5] = host & 0xff;
}

void net_neigh_tracker_init(struct net_neigh_tracker *tr)
{
	memset(tr->slots, 0, sizeof(tr->slots));
	pthread_mutex_init(&tr->lock, NULL);
}

void net_neigh_tracker_destroy(struct net_neigh_tracker *tr)
{
	pthread_mutex_destroy(&tr->lock);
}

static struct net_neigh_memo *memo_get(struct net_neigh_tracker *tr, int ifindex, in_addr_t ip, uint64_t now)
{
	struct net_neigh_memo *victim = NULL;
	for (size_t i = 0; i < NET_NEIGH_MEMO_SLOTS; i++) {
		struct net_neigh_memo *m = &tr->slots[i];
		if (m->ifindex && m->ifindex == ifindex && m->ip == ip) {
			m->last_use_ms = now;
			return m;
		}
		/* An empty slot (ifindex 0) beats any used one; else least recently used. */
		if (!victim || (victim->ifindex && (!m->ifindex || m->last_use_ms < victim->last_use_ms)))
			victim = m;
	}
	memset(victim, 0, sizeof(*victim));
	victim->ifindex = ifindex;
	victim->ip = ip;
	victim->last_use_ms = now;
	return victim;
}

static void memo_forget(struct net_neigh_tracker *tr, int ifindex, in_addr_t ip)
{
	if (!tr)
		return;
	pthread_mutex_lock(&tr->lock);
	for (size_t i = 0; i < NET_NEIGH_MEMO_SLOTS; i++)
		if (tr->slots[i].ifindex == ifindex && tr->slots[i].ip == ip)
			memset(&tr->slots[i], 0, sizeof(tr->slots[i]));
	pthread_mutex_unlock(&tr->lock);
}

static bool has_mac(const struct net_neigh *n)
{
	return n->mac_len == NET_MAC_LEN;
}

/* A STALE entry is used as is, while the kernel re-validates it in the
 * background (our traffic bypasses the kernel, which would otherwise never
 * notice the neighbour is in use). Returns true when it may be used. */
static bool stale_entry_usable(const struct net_neigh_ops *ops, struct net_neigh_tracker *tr,
			       const struct net_neigh_settings *set, const struct net_neigh *n)
{
	if (!tr)
		return true;
	uint64_t now = ops->now_ms(ops->ctx);
	bool usable = true, trigger = false;
	pthread_mutex_lock(&tr->lock);
	struct net_neigh_memo *m = memo_get(tr, n->ifindex, n->ip, now);
	bool due = m->uc_sent == 0 || now - m->last_uc_ms >= set->uc_arp_delay_msec;
	if (m->uc_sent < set->uc_arp_quota) {
		if (due) {
			trigger = true;
			m->uc_sent++;
			m->last_uc_ms = now;
		}
	} else {
		/* Quota spent and still not confirmed: distrust the MAC once the
		 * last re-validation has had its delay; a confirmed answer is due. */
		usable = !due;
	}
	pthread_mutex_unlock(&tr->lock);
	if (trigger)
		ops->trigger(ops->ctx, n->ifindex, n->ip);
	return usable;
}

int net_neigh_resolve_with(const struct net_neigh_ops *ops, struct net_neigh_tracker *tr,
			   const struct net_neigh_settings *set, int ifindex, in_addr_t next_hop,
			   uint8_t mac_out[NET_MAC_LEN], int timeout_ms)
{
	struct net_neigh cur;
	bool found = ops->lookup(ops->ctx, ifindex, next_hop, &cur) == 0;

	if (found && has_mac(&cur) && net_neigh_state_usable(cur.state)) {
		bool usable = true;
		if (cur.state & NUD_STALE)
			usable = stale_entry_usable(ops, tr, set, &cur);
		else if (state_confirmed(cur.state))
			memo_forget(tr, ifindex, next_hop);
		if (usable) {
			memcpy(mac_out, cur.mac, NET_MAC_LEN);
			return 0;
		}
	}
	/* From here on only an answer the kernel gives after our trigger counts
	 * when we come from a distrusted STALE entry. */
	bool need_confirmed = found && (cur.state & NUD_STALE) && has_mac(&cur);

	uint64_t start = ops->now_ms(ops->ctx);
	uint64_t deadline = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	unsigned int restarts = 0;
	uint64_t seen_seq = found ? cur.event_seq : 0;
	int rc = ops->trigger(ops->ctx, ifindex, next_hop);
	if (rc < 0)
		return rc;

	for (;;) {
		uint64_t now = ops->now_ms(ops->ctx);
		if (now >= deadline)
			return -ETIMEDOUT;
		ops->wait(ops->ctx, (int)(deadline - now));

		if (ops->lookup(ops->ctx, ifindex, next_hop, &cur) != 0)
			continue;
		bool fresh = cur.event_seq > seen_seq;
		if (has_mac(&cur) && (need_confirmed ? state_confirmed(cur.state) && fresh
						     : net_neigh_state_usable(cur.state))) {
			memo_forget(tr, ifindex, next_hop);
			memcpy(mac_out, cur.mac, NET_MAC_LEN);
			return 0;
		}
		if ((cur.state & NUD_FAILED) && fresh) {
			/* The kernel gave up on this attempt. */
			if (restarts >= set->num_err_retries)
				return -EHOSTUNREACH;
			restarts++;
			seen_seq = cur.event_seq;
			rc = ops->trigger(ops->ctx, ifindex, next_hop);
			if (rc < 0)
				return rc;
		}
	}
}
