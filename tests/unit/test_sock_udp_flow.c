/* How an offloaded UDP socket is steered and polled.
 * VMA_UDP_3T_RULES: which key an offloaded UDP socket is steered with. A
 * connected socket gets its 5-tuple only with the parameter at 0, and never
 * while its port's steering is shared; the key is fixed when the flow is
 * chosen, so detach (after connect() changed the peer) finds what attach
 * put in. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "config/cfg_params.h"
#include "ring/ring_flow.h"
#include "sock/sock_udp_internal.h"

static struct sock_udp sock;
static struct sock_offload lane;

static void setup(void)
{
	cfg_params_load(&g_cfg, NULL);   /* the documented defaults */
	memset(&sock, 0, sizeof(sock));
	memset(&lane, 0, sizeof(lane));
	lane.nifs = 1;
	lane.ifs[0].nif.ip = inet_addr("198.18.0.1");
	/* Bound to INADDR_ANY:5000, connected to 198.18.0.2:6000. */
	sock.flow = (struct ring_flow){ .proto = IPPROTO_UDP, .local_ip = INADDR_ANY, .local_port = htons(5000) };
	sock.connected = true;
	sock.remote_ip = inet_addr("198.18.0.2");
	sock.remote_port = htons(6000);
}

static int key_kind(void)
{
	union ring_flow_key key;
	struct ring_flow flow = sock_udp_slot_flow(&sock, &lane, 0);
	ck_assert_uint_eq(flow.local_ip, inet_addr("198.18.0.1"));
	return ring_flow_key(&flow, &key);
}

START_TEST(default_steers_connected_sockets_by_3_tuple)
{
	ck_assert_int_eq(g_cfg.udp_3t_rules, 1);
	sock_udp_flow_choose_tuple(&sock);
	ck_assert_int_eq(key_kind(), RING_FLOW_3TUPLE);
}
END_TEST

START_TEST(zero_steers_connected_sockets_by_5_tuple)
{
	g_cfg.udp_3t_rules = 0;
	sock_udp_flow_choose_tuple(&sock);
	ck_assert_int_eq(key_kind(), RING_FLOW_5TUPLE);
	struct ring_flow flow = sock_udp_slot_flow(&sock, &lane, 0);
	ck_assert_uint_eq(flow.remote_ip, inet_addr("198.18.0.2"));
	ck_assert_uint_eq(flow.remote_port, htons(6000));

	/* connect() to another peer changes the socket, not the attached key:
	 * detach still computes the 5-tuple attach used. */
	sock.remote_port = htons(7000);
	ck_assert_uint_eq(sock_udp_slot_flow(&sock, &lane, 0).remote_port, htons(6000));
	sock_udp_flow_choose_tuple(&sock);   /* the re-attach */
	ck_assert_uint_eq(sock_udp_slot_flow(&sock, &lane, 0).remote_port, htons(7000));

	/* Disconnected (connect AF_UNSPEC): back to the 3-tuple. */
	sock.connected = false;
	sock.remote_ip = 0;
	sock.remote_port = 0;
	sock_udp_flow_choose_tuple(&sock);
	ck_assert_int_eq(key_kind(), RING_FLOW_3TUPLE);
}
END_TEST

START_TEST(zero_keeps_shared_ports_on_the_3_tuple)
{
	g_cfg.udp_3t_rules = 0;
	sock.share = true;   /* SO_REUSEPORT, or several processes after fork */
	sock_udp_flow_choose_tuple(&sock);
	ck_assert_int_eq(key_kind(), RING_FLOW_3TUPLE);
}
END_TEST

/* VMA_RX_POLL_INIT: the poll budget of a socket nothing is steered to yet. */
START_TEST(rx_poll_init_until_something_is_steered)
{
	g_cfg.rx_poll = 1000;
	g_cfg.rx_poll_init = 7;
	ck_assert_int_eq(sock_udp_rx_poll_budget(&sock), 7);
	sock.flow_slots = 1;   /* bound to an offloaded address */
	ck_assert_int_eq(sock_udp_rx_poll_budget(&sock), 1000);
	sock.flow_slots = 0;
	sock.ngroups = 2;      /* two memberships, the second steered */
	sock.groups[1].active = true;
	ck_assert_int_eq(sock_udp_rx_poll_budget(&sock), 1000);
	sock.groups[1].active = false;
	ck_assert_int_eq(sock_udp_rx_poll_budget(&sock), 7);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sock_udp_flow");
	TCase *tc = tcase_create("tuple");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, default_steers_connected_sockets_by_3_tuple);
	tcase_add_test(tc, zero_steers_connected_sockets_by_5_tuple);
	tcase_add_test(tc, zero_keeps_shared_ports_on_the_3_tuple);
	tcase_add_test(tc, rx_poll_init_until_something_is_steered);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
