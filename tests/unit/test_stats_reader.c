/* Unit tests of vma_stats' reader and views against real and hostile blocks. */
#include <check.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "stats/stats.h"
#include "stats_reader.h"
#include "stats_view.h"

static char dir[64], path[128], bad[160];
static struct stats_socket *sock;

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/stats-rd.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/vmastat.%d", dir, (int)getpid());
	snprintf(bad, sizeof(bad), "%s/hostile", dir);
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 3, .process_name = "rd" };
	ck_assert_int_eq(stats_open(&st), 0);
	sock = stats_socket_slot_get(14, STATS_PROTO_UDP);
	sock->c.rx_packets = 2;
	sock->c.rx_bytes = 2048;
	sock->c.tx_packets = 3;
	sock->c.tx_bytes = 3072;
	sock->c.rx_poll_hit = 3;
	sock->c.rx_poll_miss = 1;
}

static void teardown(void)
{
	stats_close();
	unlink(bad);
	rmdir(dir);
}

/* Writes a modified copy of the live block to `bad` and loads it. */
static enum stats_read_result load_mutated(size_t off, const void *val, size_t len, size_t size)
{
	const struct stats_header *h = stats_block();
	unsigned char *img = malloc(h->total_size);
	memcpy(img, h, h->total_size);
	if (val)
		memcpy(img + off, val, len);
	int fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_eq(write(fd, img, size), (ssize_t)size);
	close(fd);
	free(img);
	struct stats_snapshot s;
	char why[256];
	enum stats_read_result r = stats_reader_load(bad, &s, why, sizeof(why));
	if (r == STATS_READ_OK) {
		ck_assert_uint_lt(strlen(s.h->process_name), STATS_NAME_SIZE);
		stats_snapshot_free(&s);
	} else {
		ck_assert_uint_gt(strlen(why), 0);
	}
	return r;
}

START_TEST(live_block_loads)
{
	struct stats_snapshot s;
	char why[256];
	ck_assert_int_eq(stats_reader_load(path, &s, why, sizeof(why)), STATS_READ_OK);
	ck_assert_str_eq(s.h->process_name, "rd");
	ck_assert_int_eq(stats_snap_socket(&s, 0)->fd, 14);
	ck_assert_ptr_null(stats_snap_socket(&s, 3));
	stats_snapshot_free(&s);
}
END_TEST

START_TEST(hostile_files_refused)
{
	size_t size = stats_block()->total_size;
	uint64_t u64;
	uint32_t u32;
	u64 = 0x1122334455667788ULL;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, magic), &u64, 8, size),
			 STATS_READ_BAD_MAGIC);
	u32 = STATS_LAYOUT_VERSION + 1;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, layout_version), &u32, 4, size),
			 STATS_READ_BAD_VERSION);
	ck_assert_int_eq(load_mutated(0, NULL, 0, size - 100), STATS_READ_TRUNCATED);
	ck_assert_int_eq(load_mutated(0, NULL, 0, 10), STATS_READ_TRUNCATED);
	ck_assert_int_eq(load_mutated(0, NULL, 0, 0), STATS_READ_TRUNCATED);
	u64 = size * 2;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, total_size), &u64, 8, size),
			 STATS_READ_TRUNCATED);
	u64 = size / 2;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, total_size), &u64, 8, size),
			 STATS_READ_CORRUPT);
	u32 = 0xffffffffu;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, socket_slots), &u32, 4, size),
			 STATS_READ_CORRUPT);
	u32 = STATS_MAX_SOCKETS; /* in range, but does not fit this file */
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, socket_slots), &u32, 4, size),
			 STATS_READ_CORRUPT);
	u64 = size - 8;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, mc_off), &u64, 8, size),
			 STATS_READ_CORRUPT);
	u64 = 3; /* misaligned, inside the header */
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, ring_off), &u64, 8, size),
			 STATS_READ_CORRUPT);
	u32 = 7;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, socket_size), &u32, 4, size),
			 STATS_READ_BAD_VERSION);
	char name[STATS_NAME_SIZE];
	memset(name, 'A', sizeof(name)); /* unterminated: loads, name cut */
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, process_name), name, sizeof(name),
				      size), STATS_READ_OK);
	char why[64];
	struct stats_snapshot s;
	ck_assert_int_eq(stats_reader_load("/nonexistent/vmastat.1", &s, why, sizeof(why)),
			 STATS_READ_NO_FILE);
}
END_TEST

START_TEST(request_round_trip)
{
	/* Nobody services the block yet: posted but not applied. */
	ck_assert_int_eq(stats_reader_request(path, STATS_REQ_ZERO, 0, 0, 0), 1);
	ck_assert_int_eq(stats_service_control(NULL), STATS_APPLIED_ZERO);
	ck_assert_uint_eq(sock->c.rx_packets, 0);
	ck_assert_int_eq(stats_reader_request(bad, STATS_REQ_ZERO, 0, 0, 0), -1);
}
END_TEST

static char *render(int view)
{
	struct stats_snapshot s;
	char why[128], *text = NULL;
	size_t len;
	ck_assert_int_eq(stats_reader_load(path, &s, why, sizeof(why)), STATS_READ_OK);
	FILE *out = open_memstream(&text, &len);
	if (view == 4)
		stats_view_mc_groups(out, &s);
	else if (view == 5)
		stats_view_netstat(out, &s, NULL);
	else
		stats_view_totals(out, &s, view, NULL);
	fclose(out);
	stats_snapshot_free(&s);
	return text;
}

START_TEST(views_show_counters)
{
	stats_mc_group_ref(14, 0x030104e0);
	char *t = render(1);
	ck_assert_ptr_nonnull(strstr(t, "\tFd=[14]\n"));
	ck_assert_ptr_nonnull(strstr(t, "Rx Offload: 2 / 2 / 0 / 0 [kilobytes/packets/eagains/errors]\n"));
	ck_assert_ptr_nonnull(strstr(t, "Tx Offload: 3 / 3 / 0 / 0 [kilobytes/packets/eagains/errors]\n"));
	ck_assert_ptr_nonnull(strstr(t, "Rx poll: 1 / 3 (75.00%) [miss/hit]\n"));
	ck_assert_ptr_nonnull(strstr(t, "- Member of = [224.4.1.3]\n"));
	free(t);
	t = render(4);
	ck_assert_ptr_nonnull(strstr(t, "[224.4.1.3]          14\n"));
	free(t);
	t = render(5);
	ck_assert_ptr_nonnull(strstr(t, "udp   Yes"));
	free(t);
}
END_TEST

START_TEST(deltas_per_second)
{
	struct stats_snapshot a, b;
	char why[128], *text = NULL;
	size_t len;
	ck_assert_int_eq(stats_reader_load(path, &a, why, sizeof(why)), STATS_READ_OK);
	sock->c.rx_packets += 400;
	ck_assert_int_eq(stats_reader_load(path, &b, why, sizeof(why)), STATS_READ_OK);
	FILE *out = open_memstream(&text, &len);
	stats_view_deltas(out, &a, &b, 2.0, 1, NULL);
	fclose(out);
	ck_assert_msg(strstr(text, "14   Rx:        200") != NULL, "%s", text);
	free(text);
	stats_snapshot_free(&a);
	stats_snapshot_free(&b);
}
END_TEST

START_TEST(filter_parse)
{
	struct stats_fd_filter f;
	ck_assert_int_eq(stats_filter_parse(&f, "4-16,1,9"), 0);
	ck_assert(stats_filter_match(&f, 4) && stats_filter_match(&f, 16) && stats_filter_match(&f, 9));
	ck_assert(!stats_filter_match(&f, 3) && !stats_filter_match(&f, 17));
	ck_assert_int_eq(stats_filter_parse(&f, "5-2"), -1);
	ck_assert_int_eq(stats_filter_parse(&f, "x"), -1);
	ck_assert_int_eq(stats_filter_parse(&f, ""), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stats_reader");
	TCase *tc = tcase_create("reader");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, live_block_loads);
	tcase_add_test(tc, hostile_files_refused);
	tcase_add_test(tc, request_round_trip);
	tcase_add_test(tc, views_show_counters);
	tcase_add_test(tc, deltas_per_second);
	tcase_add_test(tc, filter_parse);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
