/* The Extra API header's ABI (include/mellanox/vma_extra.h): every value,
 * size and offset a program built against libvma 9.8's header relies on,
 * on LP64 Linux. And the members that answer without a socket: errors for
 * fds we do not offload, add_conf_rule, thread_offload. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include "config/cfg_rules.h"
#include "extra/extra.h"
#include "mellanox/vma_extra.h"
#include "sock/sock_offload.h"

#define OFF(type, member) offsetof(struct type, member)

START_TEST(constants)
{
	ck_assert_int_eq(SO_VMA_GET_API, 2800);
	ck_assert_int_eq(SO_VMA_USER_DATA, 2801);
	ck_assert_int_eq(SO_VMA_RING_ALLOC_LOGIC, 2810);
	ck_assert_int_eq(SO_VMA_RING_USER_MEMORY, 2811);
	ck_assert_int_eq(SO_VMA_FLOW_TAG, 2820);
	ck_assert_int_eq(SO_VMA_SHUTDOWN_RX, 2821);
	ck_assert_int_eq(MSG_VMA_ZCOPY_FORCE, 0x01000000);
	ck_assert_int_eq(MSG_VMA_ZCOPY, 0x00040000);
	ck_assert_int_eq(VMA_SND_FLAGS_DUMMY, 0x400);
	ck_assert_int_eq(VMA_PACKET_DROP, 0);
	ck_assert_int_eq(VMA_PACKET_RECV, 1);
	ck_assert_int_eq(VMA_PACKET_HOLD, 2);
	ck_assert_uint_eq((uint64_t)VMA_SOCKETXTREME_PACKET, 1ULL << 32);
	ck_assert_uint_eq((uint64_t)VMA_SOCKETXTREME_NEW_CONNECTION_ACCEPTED, 1ULL << 33);
	ck_assert_int_eq(RING_LOGIC_PER_INTERFACE, 0);
	ck_assert_int_eq(RING_LOGIC_PER_IP, 1);
	ck_assert_int_eq(RING_LOGIC_PER_SOCKET, 10);
	ck_assert_int_eq(RING_LOGIC_PER_USER_ID, 11);
	ck_assert_int_eq(RING_LOGIC_PER_THREAD, 20);
	ck_assert_int_eq(RING_LOGIC_PER_CORE, 30);
	ck_assert_int_eq(RING_LOGIC_PER_CORE_ATTACH_THREADS, 31);
	ck_assert_int_eq(VMA_RING_ALLOC_MASK_RING_PROFILE_KEY, 1);
	ck_assert_int_eq(VMA_RING_ALLOC_MASK_RING_USER_ID, 2);
	/* Our socket option code uses the same number and layout. */
	ck_assert_int_eq(SOCK_OFFLOAD_SO_RING_ALLOC_LOGIC, SO_VMA_RING_ALLOC_LOGIC);
	ck_assert_int_eq(SOCK_OFFLOAD_RING_ATTR_USER_ID, VMA_RING_ALLOC_MASK_RING_USER_ID);
}
END_TEST

START_TEST(capability_bits)
{
	static const long long bits[] = {
		VMA_EXTRA_API_REGISTER_RECV_CALLBACK, VMA_EXTRA_API_RECVFROM_ZCOPY,
		VMA_EXTRA_API_FREE_PACKETS, VMA_EXTRA_API_ADD_CONF_RULE,
		VMA_EXTRA_API_THREAD_OFFLOAD, VMA_EXTRA_API_DUMP_FD_STATS,
		VMA_EXTRA_API_SOCKETXTREME_POLL, VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_PACKETS,
		VMA_EXTRA_API_SOCKETXTREME_REF_VMA_BUFF, VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_BUFF,
		VMA_EXTRA_API_GET_SOCKET_RINGS_NUM, VMA_EXTRA_API_GET_SOCKET_RINGS_FDS,
		VMA_EXTRA_API_GET_SOCKET_TX_RING_FD, VMA_EXTRA_API_GET_SOCKET_NETWORK_HEADER,
		VMA_EXTRA_API_GET_RING_DIRECT_DESCRIPTORS, VMA_EXTRA_API_REGISTER_MEMORY_ON_RING,
		VMA_EXTRA_API_DEREGISTER_MEMORY_ON_RING, VMA_EXTRA_API_ADD_RING_PROFILE,
		VMA_EXTRA_API_MODIFY_RING, VMA_EXTRA_API_IOCTL, VMA_EXTRA_API_GET_DPCP_DEVICES,
	};
	for (unsigned i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		ck_assert_int_eq(bits[i], 1LL << i);
}
END_TEST

START_TEST(socketxtreme_layouts)
{
	ck_assert_uint_eq(sizeof(struct vma_buff_t), 24);
	ck_assert_uint_eq(OFF(vma_buff_t, next), 0);
	ck_assert_uint_eq(OFF(vma_buff_t, payload), 8);
	ck_assert_uint_eq(OFF(vma_buff_t, len), 16);
	ck_assert_uint_eq(sizeof(struct vma_packet_desc_t), 24);
	ck_assert_uint_eq(OFF(vma_packet_desc_t, num_bufs), 0);
	ck_assert_uint_eq(OFF(vma_packet_desc_t, total_len), 8);
	ck_assert_uint_eq(OFF(vma_packet_desc_t, buff_lst), 16);
	ck_assert_uint_eq(sizeof(struct vma_completion_t), 64);
	ck_assert_uint_eq(OFF(vma_completion_t, packet), 0);
	ck_assert_uint_eq(OFF(vma_completion_t, events), 24);
	ck_assert_uint_eq(OFF(vma_completion_t, user_data), 32);
	ck_assert_uint_eq(OFF(vma_completion_t, src), 40);
	ck_assert_uint_eq(OFF(vma_completion_t, listen_fd), 56);
}
END_TEST

START_TEST(zcopy_layouts)
{
	ck_assert_uint_eq(sizeof(struct vma_packet_t), 16);
	ck_assert_uint_eq(OFF(vma_packet_t, packet_id), 0);
	ck_assert_uint_eq(OFF(vma_packet_t, sz_iov), 8);
	ck_assert_uint_eq(OFF(vma_packet_t, iov), 16);
	ck_assert_uint_eq(sizeof(struct vma_packets_t), 8);
	ck_assert_uint_eq(OFF(vma_packets_t, n_packet_num), 0);
	ck_assert_uint_eq(OFF(vma_packets_t, pkts), 8);
	ck_assert_uint_eq(sizeof(struct vma_info_t), 80);
	ck_assert_uint_eq(OFF(vma_info_t, struct_sz), 0);
	ck_assert_uint_eq(OFF(vma_info_t, packet_id), 8);
	ck_assert_uint_eq(OFF(vma_info_t, src), 16);
	ck_assert_uint_eq(OFF(vma_info_t, dst), 24);
	ck_assert_uint_eq(OFF(vma_info_t, payload_sz), 32);
	ck_assert_uint_eq(OFF(vma_info_t, socket_ready_queue_pkt_count), 40);
	ck_assert_uint_eq(OFF(vma_info_t, socket_ready_queue_byte_count), 44);
	ck_assert_uint_eq(OFF(vma_info_t, hw_timestamp), 48);
	ck_assert_uint_eq(OFF(vma_info_t, sw_timestamp), 64);
	ck_assert_uint_eq(sizeof(struct vma_rate_limit_t), 12);
	ck_assert_uint_eq(sizeof(struct vma_ring_alloc_logic_attr), 20);
	ck_assert_uint_eq(OFF(vma_ring_alloc_logic_attr, comp_mask), 0);
	ck_assert_uint_eq(OFF(vma_ring_alloc_logic_attr, ring_alloc_logic), 4);
	ck_assert_uint_eq(OFF(vma_ring_alloc_logic_attr, ring_profile_key), 8);
	ck_assert_uint_eq(OFF(vma_ring_alloc_logic_attr, user_id), 12);
	ck_assert_uint_eq(sizeof(struct sock_offload_ring_logic_attr), sizeof(struct vma_ring_alloc_logic_attr));
	ck_assert_uint_eq(sizeof(struct vma_modify_ring_attr), 16);
	ck_assert_uint_eq(OFF(vma_modify_ring_attr, ring_fd), 4);
}
END_TEST

START_TEST(api_table_order)
{
	/* Packed, one pointer each, in this order: the order is the ABI. */
	ck_assert_uint_eq(OFF(vma_api_t, register_recv_callback), 0);
	ck_assert_uint_eq(OFF(vma_api_t, recvfrom_zcopy), 8);
	ck_assert_uint_eq(OFF(vma_api_t, free_packets), 16);
	ck_assert_uint_eq(OFF(vma_api_t, add_conf_rule), 24);
	ck_assert_uint_eq(OFF(vma_api_t, thread_offload), 32);
	ck_assert_uint_eq(OFF(vma_api_t, socketxtreme_poll), 40);
	ck_assert_uint_eq(OFF(vma_api_t, get_socket_rings_num), 48);
	ck_assert_uint_eq(OFF(vma_api_t, get_socket_rings_fds), 56);
	ck_assert_uint_eq(OFF(vma_api_t, get_socket_tx_ring_fd), 64);
	ck_assert_uint_eq(OFF(vma_api_t, socketxtreme_free_vma_packets), 72);
	ck_assert_uint_eq(OFF(vma_api_t, socketxtreme_ref_vma_buff), 80);
	ck_assert_uint_eq(OFF(vma_api_t, socketxtreme_free_vma_buff), 88);
	ck_assert_uint_eq(OFF(vma_api_t, dump_fd_stats), 96);
	ck_assert_uint_eq(OFF(vma_api_t, vma_add_ring_profile), 104);
	ck_assert_uint_eq(OFF(vma_api_t, get_socket_network_header), 112);
	ck_assert_uint_eq(OFF(vma_api_t, get_ring_direct_descriptors), 120);
	ck_assert_uint_eq(OFF(vma_api_t, register_memory_on_ring), 128);
	ck_assert_uint_eq(OFF(vma_api_t, deregister_memory_on_ring), 136);
	ck_assert_uint_eq(OFF(vma_api_t, vma_modify_ring), 144);
	ck_assert_uint_eq(OFF(vma_api_t, vma_extra_supported_mask), 152);
	ck_assert_uint_eq(OFF(vma_api_t, ioctl), 160);
	ck_assert_uint_eq(OFF(vma_api_t, get_dpcp_devices), 168);
	ck_assert_uint_eq(sizeof(struct vma_api_t), 176);
}
END_TEST

START_TEST(no_library_no_api)
{
	/* This program is not preloaded: the kernel refuses fd -1. */
	ck_assert_ptr_null(vma_get_api());
}
END_TEST

START_TEST(members_refuse_what_is_not_offloaded)
{
	errno = 0;
	ck_assert_int_eq(extra_register_recv_callback(-1, NULL, NULL), -1);
	ck_assert_int_eq(errno, EBADF);
	errno = 0;
	ck_assert_int_eq(extra_register_recv_callback(0, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	struct vma_packet_t pkt = { .packet_id = &pkt, .sz_iov = 0 };
	errno = 0;
	ck_assert_int_eq(extra_free_packets(0, &pkt, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(extra_get_socket_rings_num(-1), -1);
	ck_assert_int_eq(errno, EBADF);
	errno = 0;
	ck_assert_int_eq(extra_get_socket_rings_num(0), -1);
	ck_assert_int_eq(errno, EINVAL);
	int fds[2];
	ck_assert_int_eq(extra_get_socket_rings_fds(0, fds, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	uint16_t len = 0;
	errno = 0;
	ck_assert_int_eq(extra_get_socket_network_header(0, NULL, &len), -1);
	ck_assert_int_eq(errno, EINVAL);
	uint32_t key;
	char mem[64];
	errno = 0;
	ck_assert_int_eq(extra_register_memory_on_ring(0, mem, sizeof(mem), &key), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* zero copy of a kernel fd under FORCE: refused. */
	int flags = MSG_VMA_ZCOPY_FORCE;
	char buf[256];
	errno = 0;
	ck_assert_int_eq(extra_recvfrom_zcopy(0, buf, sizeof(buf), &flags, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(flags & MSG_VMA_ZCOPY, 0);
}
END_TEST

START_TEST(add_conf_rule_first)
{
	cfg_rules_clear();
	ck_assert_int_eq(extra_add_conf_rule("use os udp_receiver *:5001"), 0);
	ck_assert_int_eq(extra_add_conf_rule("use vma udp_receiver *:*"), 0);
	ck_assert_uint_eq(cfg_rules_count(), 2);
	struct sockaddr_in local = { .sin_family = AF_INET, .sin_port = htons(5001) };
	/* The later rule went first: vma wins for every port. */
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_UDP_RECEIVER, &local, NULL), CFG_TRANSPORT_VMA);
	errno = 0;
	ck_assert_int_eq(extra_add_conf_rule("use sometimes udp_receiver"), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(extra_add_conf_rule(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(cfg_rules_count(), 2);
	cfg_rules_clear();
}
END_TEST

static void *other_thread(void *arg)
{
	(void)arg;
	return (void *)(uintptr_t)extra_thread_offload_wanted();
}

START_TEST(thread_offload_per_thread)
{
	g_cfg.offloaded_sockets = 1;
	ck_assert(extra_thread_offload_wanted());
	ck_assert_int_eq(extra_thread_offload(0, pthread_self()), 0);
	ck_assert(!extra_thread_offload_wanted());
	/* Another thread keeps the process's setting. */
	pthread_t t;
	void *ret;
	ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
	pthread_join(t, &ret);
	ck_assert_int_eq((int)(uintptr_t)ret, 1);
	/* And the other way round under VMA_OFFLOADED_SOCKETS=0. */
	g_cfg.offloaded_sockets = 0;
	ck_assert_int_eq(extra_thread_offload(1, pthread_self()), 0);
	ck_assert(extra_thread_offload_wanted());
	g_cfg.offloaded_sockets = 1;
}
END_TEST

static Suite *extra_suite(void)
{
	Suite *s = suite_create("extra_layout");
	TCase *tc = tcase_create("abi");
	tcase_add_test(tc, constants);
	tcase_add_test(tc, capability_bits);
	tcase_add_test(tc, socketxtreme_layouts);
	tcase_add_test(tc, zcopy_layouts);
	tcase_add_test(tc, api_table_order);
	tcase_add_test(tc, no_library_no_api);
	suite_add_tcase(s, tc);
	TCase *tm = tcase_create("members");
	tcase_add_test(tm, members_refuse_what_is_not_offloaded);
	tcase_add_test(tm, add_conf_rule_first);
	tcase_add_test(tm, thread_offload_per_thread);
	suite_add_tcase(s, tm);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(extra_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
