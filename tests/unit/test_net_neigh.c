/* Neighbour resolution policy against a scripted fake kernel and clock. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/neighbour.h>

#include "config/cfg_params.h"
#include "net/net.h"

#define IFX 3

/* One scripted change of the kernel's entry, delay_ms after the previous one
 * (measured in fake time spent waiting). */
struct step {
	uint64_t delay_ms;
	bool present;
	uint16_t state;
	bool with_mac;
};

struct fake_kernel {
	uint64_t now;
	bool present;
	struct net_neigh entry;
	uint64_t seq;
	int triggers;
	int trigger_rc;
	int waits;
	struct step steps[8];
	int nsteps, next;
	uint64_t into_step; /* time already waited toward steps[next] */
};

static struct fake_kernel fk;
static struct net_neigh_tracker tracker;
static struct net_neigh_settings settings;
static const uint8_t peer_mac[NET_MAC_LEN] = { 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x01 };

static in_addr_t peer(void)
{
	return inet_addr("198.19.0.2");
}

static int fake_lookup(void *ctx, int ifindex, in_addr_t ip, struct net_neigh *out)
{
	struct fake_kernel *k = ctx;
	if (!k->present || ifindex != k->entry.ifindex || ip != k->entry.ip)
		return -ENOENT;
	*out = k->entry;
	return 0;
}

static int fake_trigger(void *ctx, int ifindex, in_addr_t ip)
{
	struct fake_kernel *k = ctx;
	ck_assert_int_eq(ifindex, k->entry.ifindex ? k->entry.ifindex : IFX);
	ck_assert_uint_eq(ip, k->entry.ip ? k->entry.ip : peer());
	k->triggers++;
	return k->trigger_rc;
}

static void set_entry(bool present, uint16_t state, bool with_mac, bool as_event)
{
	fk.present = present;
	fk.entry.ifindex = IFX;
	fk.entry.ip = peer();
	fk.entry.state = state;
	fk.entry.mac_len = with_mac ? NET_MAC_LEN : 0;
	memcpy(fk.entry.mac, with_mac ? peer_mac : (const uint8_t[NET_MAC_LEN]){ 0 }, NET_MAC_LEN);
	if (as_event)
		fk.entry.event_seq = ++fk.seq;
}

static void fake_wait(void *ctx, int timeout_ms)
{
	struct fake_kernel *k = ctx;
	ck_assert_int_gt(timeout_ms, 0);
	k->waits++;
	if (k->next >= k->nsteps) {
		k->now += (uint64_t)timeout_ms;
		return;
	}
	struct step *s = &k->steps[k->next];
	uint64_t left = s->delay_ms - k->into_step;
	if (left > (uint64_t)timeout_ms) {
		k->now += (uint64_t)timeout_ms;
		k->into_step += (uint64_t)timeout_ms;
		return;
	}
	k->now += left;
	k->into_step = 0;
	k->next++;
	set_entry(s->present, s->state, s->with_mac, true);
}

static uint64_t fake_now(void *ctx)
{
	return ((struct fake_kernel *)ctx)->now;
}

static const struct net_neigh_ops ops = {
	.ctx = &fk, .lookup = fake_lookup, .trigger = fake_trigger, .wait = fake_wait, .now_ms = fake_now,
};

static void script(uint64_t delay_ms, uint16_t state, bool with_mac)
{
	fk.steps[fk.nsteps++] = (struct step){ .delay_ms = delay_ms, .present = true, .state = state,
					       .with_mac = with_mac };
}

static void setup(void)
{
	memset(&fk, 0, sizeof(fk));
	fk.now = 1000000;
	net_neigh_tracker_init(&tracker);
	net_neigh_settings_default(&settings);
}

static void teardown(void)
{
	net_neigh_tracker_destroy(&tracker);
}

static int resolve(uint8_t mac[NET_MAC_LEN], int timeout_ms)
{
	memset(mac, 0, NET_MAC_LEN);
	return net_neigh_resolve_with(&ops, &tracker, &settings, IFX, peer(), mac, timeout_ms);
}

START_TEST(defaults_match_the_parameter_table)
{
	struct net_neigh_settings s;
	net_neigh_settings_default(&s);
	ck_assert_uint_eq(s.uc_arp_quota, 3);
	ck_assert_uint_eq(s.uc_arp_delay_msec, 10000);
	ck_assert_uint_eq(s.num_err_retries, 1);
	ck_assert_int_eq(cfg_param_find("VMA_NEIGH_UC_ARP_QUATA")->default_int, 3);
	ck_assert_int_eq(cfg_param_find("VMA_NEIGH_UC_ARP_DELAY_MSEC")->default_int, 10000);
	ck_assert_int_eq(cfg_param_find("VMA_NEIGH_NUM_ERR_RETRIES")->default_int, 1);
}
END_TEST

/* The process's environment, as the library reads it at load. */
static const char *neigh_env(const char *name)
{
	if (!strcmp(name, "VMA_NEIGH_UC_ARP_QUATA"))
		return "1";
	if (!strcmp(name, "VMA_NEIGH_UC_ARP_DELAY_MSEC"))
		return "50";
	if (!strcmp(name, "VMA_NEIGH_NUM_ERR_RETRIES"))
		return "0";
	return NULL;
}

START_TEST(parameters_drive_the_policy)
{
	uint8_t mac[NET_MAC_LEN];
	ck_assert_int_eq(cfg_params_load(&g_cfg, neigh_env), 0);
	net_neigh_settings_from_params(&settings);
	ck_assert_uint_eq(settings.uc_arp_quota, 1);
	ck_assert_uint_eq(settings.uc_arp_delay_msec, 50);
	ck_assert_uint_eq(settings.num_err_retries, 0);

	/* VMA_NEIGH_NUM_ERR_RETRIES=0: the first failure is final, where the
	 * default (1) restarts and gets the answer. */
	script(10, NUD_FAILED, false);
	script(10, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 1000), -EHOSTUNREACH);
	ck_assert_int_eq(fk.triggers, 1);

	/* VMA_NEIGH_UC_ARP_QUATA=1, _DELAY_MSEC=50: one re-validation of a
	 * STALE entry, then it is distrusted 50 ms later (the defaults would
	 * allow three, 10 s apart). */
	memset(&fk, 0, sizeof(fk));
	fk.now = 1000000;
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 1);
	fk.now += 50;
	ck_assert_int_eq(resolve(mac, 100), -ETIMEDOUT);
	ck_assert_int_eq(fk.triggers, 2);
}
END_TEST

START_TEST(usable_states_answer_at_once)
{
	static const uint16_t states[] = { NUD_REACHABLE, NUD_DELAY, NUD_PROBE, NUD_PERMANENT, NUD_NOARP };
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		uint8_t mac[NET_MAC_LEN];
		set_entry(true, states[i], true, false);
		ck_assert_int_eq(resolve(mac, 1000), 0);
		ck_assert_mem_eq(mac, peer_mac, NET_MAC_LEN);
	}
	ck_assert_int_eq(fk.triggers, 0);
	ck_assert_int_eq(fk.waits, 0);
	ck_assert(!net_neigh_state_usable(NUD_INCOMPLETE));
	ck_assert(!net_neigh_state_usable(NUD_FAILED));
	ck_assert(!net_neigh_state_usable(NUD_NONE));
}
END_TEST

START_TEST(stale_without_tracker_is_used_as_is)
{
	uint8_t mac[NET_MAC_LEN];
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(net_neigh_resolve_with(&ops, NULL, &settings, IFX, peer(), mac, 100), 0);
	ck_assert_mem_eq(mac, peer_mac, NET_MAC_LEN);
	ck_assert_int_eq(fk.triggers, 0);
}
END_TEST

START_TEST(miss_triggers_and_waits_for_the_answer)
{
	uint8_t mac[NET_MAC_LEN];
	script(30, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 1000), 0);
	ck_assert_mem_eq(mac, peer_mac, NET_MAC_LEN);
	ck_assert_int_eq(fk.triggers, 1);
	ck_assert_uint_eq(fk.now, 1000030);
}
END_TEST

START_TEST(incomplete_or_macless_entries_are_misses)
{
	uint8_t mac[NET_MAC_LEN];
	set_entry(true, NUD_INCOMPLETE, false, false);
	script(5, NUD_INCOMPLETE, false);
	script(5, NUD_REACHABLE, false); /* usable state but no MAC yet: keep waiting */
	script(5, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 1000), 0);
	ck_assert_int_eq(fk.triggers, 1);
	ck_assert_int_eq(fk.waits, 3);
	ck_assert_uint_eq(fk.now, 1000015);
}
END_TEST

START_TEST(no_answer_times_out_on_the_bound)
{
	uint8_t mac[NET_MAC_LEN];
	ck_assert_int_eq(resolve(mac, 250), -ETIMEDOUT);
	ck_assert_uint_eq(fk.now, 1000250);
	ck_assert_int_eq(fk.triggers, 1);
	/* Zero timeout: kick the kernel, do not wait. */
	ck_assert_int_eq(resolve(mac, 0), -ETIMEDOUT);
	ck_assert_int_eq(fk.triggers, 2);
	ck_assert_int_eq(fk.waits, 1);
}
END_TEST

START_TEST(failed_restarts_up_to_num_err_retries)
{
	uint8_t mac[NET_MAC_LEN];
	script(10, NUD_FAILED, false);
	script(10, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 1000), 0);
	ck_assert_int_eq(fk.triggers, 2);
	ck_assert_mem_eq(mac, peer_mac, NET_MAC_LEN);
}
END_TEST

START_TEST(failed_after_retries_is_ehostunreach)
{
	uint8_t mac[NET_MAC_LEN];
	script(10, NUD_FAILED, false);
	script(10, NUD_FAILED, false);
	script(10, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 1000), -EHOSTUNREACH);
	ck_assert_int_eq(fk.triggers, 2);
	ck_assert_uint_eq(fk.now, 1000020);

	memset(&fk, 0, sizeof(fk));
	settings.num_err_retries = 0;
	script(10, NUD_FAILED, false);
	ck_assert_int_eq(resolve(mac, 1000), -EHOSTUNREACH);
	ck_assert_int_eq(fk.triggers, 1);
}
END_TEST

START_TEST(failed_from_before_the_request_is_not_news)
{
	uint8_t mac[NET_MAC_LEN];
	set_entry(true, NUD_FAILED, false, true);
	settings.num_err_retries = 0;
	ck_assert_int_eq(resolve(mac, 100), -ETIMEDOUT);
	ck_assert_int_eq(fk.triggers, 1);
}
END_TEST

START_TEST(trigger_error_is_returned)
{
	uint8_t mac[NET_MAC_LEN];
	fk.trigger_rc = -ENETUNREACH;
	ck_assert_int_eq(resolve(mac, 1000), -ENETUNREACH);
	ck_assert_int_eq(fk.waits, 0);
}
END_TEST

START_TEST(stale_revalidated_within_quota_and_delay)
{
	uint8_t mac[NET_MAC_LEN];
	settings.uc_arp_quota = 3;
	settings.uc_arp_delay_msec = 1000;
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 1);
	fk.now += 500; /* not due yet */
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 1);
	fk.now += 500;
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 2);
	fk.now += 1000;
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 3);
	ck_assert_int_eq(fk.waits, 0);
	ck_assert_mem_eq(mac, peer_mac, NET_MAC_LEN);

	/* Quota spent, still STALE, delay over: the MAC is distrusted until the
	 * kernel confirms it; an unconfirmed state does not count. */
	fk.now += 1000;
	script(10, NUD_DELAY, true);
	script(10, NUD_PROBE, true);
	script(10, NUD_REACHABLE, true);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 4);
	ck_assert_int_eq(fk.waits, 3);

	/* Confirmed: the quota starts over. */
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 5);
	ck_assert_int_eq(fk.waits, 3);
}
END_TEST

START_TEST(stale_past_quota_without_confirmation_times_out)
{
	uint8_t mac[NET_MAC_LEN];
	settings.uc_arp_quota = 1;
	settings.uc_arp_delay_msec = 50;
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 1);
	fk.now += 10; /* within the delay the spent quota still allows the MAC */
	ck_assert_int_eq(resolve(mac, 100), 0);
	fk.now += 40;
	ck_assert_int_eq(resolve(mac, 100), -ETIMEDOUT);
	ck_assert_int_eq(fk.triggers, 2);
}
END_TEST

START_TEST(reachable_resets_the_quota)
{
	uint8_t mac[NET_MAC_LEN];
	settings.uc_arp_delay_msec = 1000;
	set_entry(true, NUD_STALE, true, false);
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 1);
	set_entry(true, NUD_REACHABLE, true, true);
	ck_assert_int_eq(resolve(mac, 100), 0);
	set_entry(true, NUD_STALE, true, true);
	fk.now += 1; /* well within the delay, but the memory was reset */
	ck_assert_int_eq(resolve(mac, 100), 0);
	ck_assert_int_eq(fk.triggers, 2);
}
END_TEST

/* Resolves a STALE neighbour at ip on IFX; returns how many triggers it caused. */
static int touch_stale(in_addr_t ip)
{
	uint8_t mac[NET_MAC_LEN];
	int before = fk.triggers;
	fk.now++;
	set_entry(true, NUD_STALE, true, false);
	fk.entry.ip = ip;
	ck_assert_int_eq(net_neigh_resolve_with(&ops, &tracker, &settings, IFX, ip, mac, 100), 0);
	return fk.triggers - before;
}

START_TEST(tracker_forgets_the_least_recently_used)
{
	settings.uc_arp_delay_msec = 1000000;
	in_addr_t first = peer();
	ck_assert_int_eq(touch_stale(first), 1);
	for (uint32_t i = 0; i < NET_NEIGH_MEMO_SLOTS - 1; i++)
		ck_assert_int_eq(touch_stale(htonl(0xc6130100u + i)), 1);
	/* All slots used; `first` is remembered and becomes the most recent. */
	ck_assert_int_eq(touch_stale(first), 0);
	/* One more neighbour takes the slot of the least recently used (index 0). */
	ck_assert_int_eq(touch_stale(htonl(0xc6130200u)), 1);
	ck_assert_int_eq(touch_stale(first), 0);
	ck_assert_int_eq(touch_stale(htonl(0xc6130100u)), 1);
}
END_TEST

START_TEST(multicast_mac_mapping)
{
	uint8_t mac[NET_MAC_LEN];
	static const uint8_t want[NET_MAC_LEN] = { 0x01, 0x00, 0x5e, 0x01, 0x02, 0x03 };
	net_mcast_mac(inet_addr("239.129.2.3"), mac); /* the 24th bit is dropped */
	ck_assert_mem_eq(mac, want, NET_MAC_LEN);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("net_neigh");
	TCase *tc = tcase_create("resolve");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, defaults_match_the_parameter_table);
	tcase_add_test(tc, parameters_drive_the_policy);
	tcase_add_test(tc, usable_states_answer_at_once);
	tcase_add_test(tc, stale_without_tracker_is_used_as_is);
	tcase_add_test(tc, miss_triggers_and_waits_for_the_answer);
	tcase_add_test(tc, incomplete_or_macless_entries_are_misses);
	tcase_add_test(tc, no_answer_times_out_on_the_bound);
	tcase_add_test(tc, failed_restarts_up_to_num_err_retries);
	tcase_add_test(tc, failed_after_retries_is_ehostunreach);
	tcase_add_test(tc, failed_from_before_the_request_is_not_news);
	tcase_add_test(tc, trigger_error_is_returned);
	tcase_add_test(tc, stale_revalidated_within_quota_and_delay);
	tcase_add_test(tc, stale_past_quota_without_confirmation_times_out);
	tcase_add_test(tc, reachable_resets_the_quota);
	tcase_add_test(tc, tracker_forgets_the_least_recently_used);
	tcase_add_test(tc, multicast_mac_mapping);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
