/* Unit tests of vma_stats' reader and views against real and hostile blocks. */
#include <check.h>
#include <fcntl.h>
#include <sys/stat.h>
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
	/* Shown at -v 1 only once a receive call polled with data queued. */
	ck_assert_ptr_null(strstr(t, "Rx drain polls"));
	free(t);
	t = render(2);
	ck_assert_ptr_nonnull(strstr(t, "Rx drain polls: 0 [ring polls with data queued]\n"));
	free(t);
	sock->c.rx_drain_polls = 7;
	t = render(1);
	ck_assert_ptr_nonnull(strstr(t, "Rx drain polls: 7 [ring polls with data queued]\n"));
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

/* ---- hostile blocks: never a crash, a hang or an escape to the terminal ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Values that tend to break bounds checks. */
static uint64_t nasty(uint64_t size)
{
	static const uint64_t fixed[] = { 0, 1, 7, 8, 0x7fffffff, 0x80000000u, 0xffffffffu,
					  0xffffffffffffffffULL, 0x8000000000000000ULL };
	switch (rnd() % 4) {
	case 0: return fixed[rnd() % (sizeof(fixed) / sizeof(fixed[0]))];
	case 1: return size - rnd() % 64;
	case 2: return (size + rnd() % 64) & ~7ULL;
	default: return rnd() % (size + 1);
	}
}

static void render_all(const struct stats_snapshot *prev, const struct stats_snapshot *s)
{
	char *text = NULL;
	size_t len;
	FILE *out = open_memstream(&text, &len);
	for (int view = 1; view <= 3; view++)
		stats_view_totals(out, s, view, NULL);
	stats_view_mc_groups(out, s);
	stats_view_netstat(out, s, NULL);
	stats_view_deltas(out, prev, s, 1.0, 1, NULL);
	stats_view_deltas(out, prev, s, 1.0, 3, NULL);
	fclose(out);
	free(text);
}

/* Thousands of blocks with header fields set to hostile values, random
 * bytes anywhere, or random sizes: each is refused, or loads and renders
 * in every view (ASan builds check every access). */
START_TEST(fuzzed_blocks_never_crash)
{
	const struct stats_header *live = stats_block();
	size_t size = live->total_size;
	unsigned char *img = malloc(size + 64);
	struct stats_snapshot prev;
	char why[256];
	ck_assert_int_eq(stats_reader_load(path, &prev, why, sizeof(why)), STATS_READ_OK);
	int loaded = 0;
	/* On tmpfs when there is one: rewriting a file 3000 times on a disk
	 * mounted with discard takes seconds. */
	char fuzz[sizeof(bad)] = "/dev/shm/stats-rd-fuzz.XXXXXX";
	int tmp = mkstemp(fuzz);
	if (tmp < 0) {
		snprintf(fuzz, sizeof(fuzz), "%s", bad);
	} else {
		close(tmp);
	}
	for (int round = 0; round < 3000; round++) {
		memcpy(img, live, size);
		size_t len = size;
		int edits = 1 + (int)(rnd() % 4);
		for (int e = 0; e < edits; e++) {
			size_t at = (size_t)(rnd() % offsetof(struct stats_header, process_name)) & ~3u;
			uint64_t v = nasty(size);
			if (rnd() % 2 && at % 8 == 0)
				memcpy(img + at, &v, 8);
			else
				memcpy(img + at, &v, 4);
		}
		if (rnd() % 8 == 0)
			for (int k = 0; k < 64; k++)
				img[rnd() % size] = (unsigned char)rnd();
		if (rnd() % 16 == 0)
			for (size_t k = sizeof(struct stats_header); k < size; k++)
				img[k] = (unsigned char)rnd();
		if (rnd() % 16 == 0)
			len = (size_t)(rnd() % (size + 64));
		if (len > size)
			memset(img + size, 0xff, len - size);
		int fd = open(fuzz, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		ck_assert_int_eq(write(fd, img, len), (ssize_t)len);
		close(fd);
		struct stats_snapshot s;
		if (stats_reader_load(fuzz, &s, why, sizeof(why)) == STATS_READ_OK) {
			loaded++;
			render_all(&prev, &s);
			render_all(&s, &prev);
			stats_snapshot_free(&s);
		} else {
			ck_assert_uint_gt(strlen(why), 0);
		}
	}
	/* Some mutations (a counter, a name) still load: the views ran. */
	ck_assert_int_gt(loaded, 0);
	unlink(fuzz);
	stats_snapshot_free(&prev);
	free(img);
}
END_TEST

/* A FIFO planted under a block's name: refused at once, not a hang (Check's
 * timeout fails the test if it blocks). */
START_TEST(planted_fifo_never_blocks)
{
	char fifo[160];
	snprintf(fifo, sizeof(fifo), "%s/vmastat.1", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	struct stats_snapshot s;
	char why[256];
	ck_assert_int_eq(stats_reader_load(fifo, &s, why, sizeof(why)), STATS_READ_NO_FILE);
	ck_assert_ptr_nonnull(strstr(why, "not a regular file"));
	ck_assert_int_eq(stats_reader_request(fifo, STATS_REQ_ZERO, 0, 0, 0), -1);
	unlink(fifo);
}
END_TEST

START_TEST(names_cannot_reach_the_terminal)
{
	static const char evil[] = "\033]0;owned\007\033[2J\r\x9b";
	char name[STATS_NAME_SIZE] = { 0 };
	memcpy(name, evil, sizeof(evil));
	size_t size = stats_block()->total_size;
	ck_assert_int_eq(load_mutated(offsetof(struct stats_header, process_name), name, sizeof(name),
				      size), STATS_READ_OK);
	struct stats_snapshot s;
	char why[128];
	ck_assert_int_eq(stats_reader_load(bad, &s, why, sizeof(why)), STATS_READ_OK);
	for (const char *p = s.h->process_name; *p; p++)
		ck_assert_msg(*p >= 0x20 && *p < 0x7f, "byte 0x%02x kept", (unsigned char)*p);
	ck_assert_str_eq(s.h->process_name, "?]0;owned??[2J??");
	char *text = NULL;
	size_t len;
	FILE *out = open_memstream(&text, &len);
	stats_view_netstat(out, &s, NULL);
	fclose(out);
	ck_assert_ptr_null(strchr(text, '\033'));
	free(text);
	stats_snapshot_free(&s);
}
END_TEST

/* Copies the live block to file with mode and owner (owner < 0: ours). */
static void plant(const char *file, mode_t mode, int owner)
{
	const struct stats_header *h = stats_block();
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_eq(write(fd, h, h->total_size), (ssize_t)h->total_size);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	if (owner >= 0)
		ck_assert_int_eq(fchown(fd, (uid_t)owner, (gid_t)owner), 0);
	close(fd);
}

START_TEST(blocks_libvma_did_not_write_refused)
{
	struct stats_snapshot s;
	char why[256], file[160];
	/* world-writable: anyone could have written it */
	plant(bad, 0666, -1);
	ck_assert_int_ne(stats_reader_load(bad, &s, why, sizeof(why)), STATS_READ_OK);
	ck_assert_ptr_nonnull(strstr(why, "writable by other users"));
	/* named after a process the block is not from */
	snprintf(file, sizeof(file), "%s/vmastat.1", dir);
	plant(file, 0600, -1);
	ck_assert_int_ne(stats_reader_load(file, &s, why, sizeof(why)), STATS_READ_OK);
	ck_assert_ptr_nonnull(strstr(why, "belongs to pid"));
	ck_assert_int_eq(stats_reader_request(file, STATS_REQ_ZERO, 0, 0, 0), -1);
	unlink(file);
	if (geteuid() == 0) {
		/* another user's file under the name of a process of ours */
		char other[64];
		snprintf(other, sizeof(other), "/tmp/stats-rd2.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(other));
		snprintf(file, sizeof(file), "%s/vmastat.%d", other, (int)getpid());
		plant(file, 0600, 65534);
		ck_assert_int_ne(stats_reader_load(file, &s, why, sizeof(why)), STATS_READ_OK);
		ck_assert_ptr_nonnull(strstr(why, "owned by uid 65534"));
		unlink(file);
		rmdir(other);
	}
	/* the real one still loads */
	ck_assert_int_eq(stats_reader_load(path, &s, why, sizeof(why)), STATS_READ_OK);
	stats_snapshot_free(&s);
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
	tcase_add_test(tc, fuzzed_blocks_never_crash);
	tcase_add_test(tc, planted_fifo_never_blocks);
	tcase_add_test(tc, names_cannot_reach_the_terminal);
	tcase_add_test(tc, blocks_libvma_did_not_write_refused);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
