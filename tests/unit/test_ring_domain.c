/* The ring domain's frame accounting without sockets: the header over
 * anonymous shared memory, fill and completion rings of our own playing the
 * kernel's part. What a member frees reaches the fill ring once; completions
 * return TX frames to the free stack; a member killed holding the lock is
 * repaired after; a dead member's frames come back. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "config/cfg_params.h"
#include "ring/ring.h"
#include "ring/ring_domain.h"

#define RX_FRAMES 64u
#define TX_FRAMES 32u

struct fake_ring {
	uint32_t producer, consumer, flags, pad;
	uint64_t addrs[RX_FRAMES];
};

static struct ring_domain dom;
static void *mem;
static size_t mem_size;
static struct fake_ring *fill, *comp;

static void fake_attach(struct ring_xsk_ring *r, struct fake_ring *f, uint32_t size)
{
	memset(r, 0, sizeof(*r));
	r->producer = &f->producer;
	r->consumer = &f->consumer;
	r->flags = &f->flags;
	r->descs = f->addrs;
	r->size = size;
	r->mask = size - 1;
}

static void setup(void)
{
	struct ring_domain_geometry geo = { RX_FRAMES, TX_FRAMES, 32, 32, false };
	mem_size = ring_domain_size(&geo);
	mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(mem, MAP_FAILED);
	fill = mmap(NULL, 2 * sizeof(struct fake_ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(fill, MAP_FAILED);
	comp = fill + 1;
	memset(&dom, 0, sizeof(dom));
	ck_assert_int_eq(ring_domain_init_memory(&dom, mem, mem_size, &geo, 7, 0), 0);
	fake_attach(&dom.fill, fill, RX_FRAMES);
	fake_attach(&dom.comp, comp, TX_FRAMES);
	/* As create does: every RX frame is with the kernel. */
	for (uint32_t f = 0; f < RX_FRAMES; f++)
		fill->addrs[f] = (uint64_t)f * RING_XDP_FRAME_SIZE;
	fill->producer = RX_FRAMES;
}

static void teardown(void)
{
	munmap(mem, mem_size);
	munmap(fill, 2 * sizeof(struct fake_ring));
}

/* The kernel takes n frames from the fill ring and "delivers" them to slot. */
static void kernel_delivers(uint32_t n, unsigned slot, uint64_t *out)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = fill->addrs[fill->consumer++ & (RX_FRAMES - 1)];
		uint32_t frame = ring_domain_frame_of(&dom, addr);
		ck_assert_uint_eq(ring_domain_get_state(&dom, frame), RING_DOMAIN_STATE(RING_DOMAIN_ST_FILL, 0));
		ring_domain_set_state(&dom, frame, RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, slot));
		out[i] = addr;
	}
}

START_TEST(init_rejects_bad_geometry)
{
	struct ring_domain d;
	struct ring_domain_geometry odd = { 48, 32, 32, 32, false };
	ck_assert_int_eq(ring_domain_init_memory(&d, mem, mem_size, &odd, 1, 0), -EINVAL);
	struct ring_domain_geometry big = { RX_FRAMES * 2, TX_FRAMES, 32, 32, false };
	ck_assert_int_eq(ring_domain_init_memory(&d, mem, mem_size, &big, 1, 0), -EINVAL);
}
END_TEST

START_TEST(freed_rx_frames_return_to_the_fill_ring_once)
{
	uint64_t got[8];
	kernel_delivers(8, 3, got);
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_fill_locked(&dom, 3, got, 8), 8);
	/* The same frames again: not held by slot 3 any more. */
	ck_assert_uint_eq(ring_domain_fill_locked(&dom, 3, got, 8), 8);
	ring_domain_unlock(&dom);
	ck_assert_uint_eq(fill->producer, RX_FRAMES + 8);
	ck_assert_uint_eq(dom.sh->counters.double_returns, 8);
	for (int i = 0; i < 8; i++)
		ck_assert_uint_eq(fill->addrs[(RX_FRAMES + i) & (RX_FRAMES - 1)], got[i]);
}
END_TEST

START_TEST(another_members_frame_is_not_refilled)
{
	uint64_t got[1];
	kernel_delivers(1, 2, got);
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_fill_locked(&dom, 5, got, 1), 1);
	ring_domain_unlock(&dom);
	ck_assert_uint_eq(fill->producer, RX_FRAMES);
	ck_assert_uint_eq(dom.sh->counters.double_returns, 1);
}
END_TEST

START_TEST(full_fill_ring_defers_the_rest)
{
	uint64_t got[4];
	kernel_delivers(4, 1, got);
	/* The kernel has taken 4 but not published its consumer yet. */
	fill->consumer -= 4;
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_fill_locked(&dom, 1, got, 4), 0);
	ring_domain_unlock(&dom);
	ck_assert_uint_eq(dom.sh->counters.fill_deferred, 1);
	fill->consumer += 4;
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_fill_locked(&dom, 1, got, 4), 4);
	ring_domain_unlock(&dom);
}
END_TEST

START_TEST(tx_frames_cycle_through_completions)
{
	uint32_t frames[TX_FRAMES];
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_tx_take_locked(&dom, 4, frames, TX_FRAMES + 5), TX_FRAMES);
	ck_assert_uint_eq(ring_domain_tx_take_locked(&dom, 4, frames, 1), 0);
	ring_domain_unlock(&dom);
	for (uint32_t i = 0; i < TX_FRAMES; i++) {
		ck_assert_uint_ge(frames[i], RX_FRAMES);
		ck_assert_uint_eq(ring_domain_get_state(&dom, frames[i]), RING_DOMAIN_STATE(RING_DOMAIN_ST_HELD, 4));
	}
	/* Ten go to the wire and complete (completion addresses carry the
	 * data offset inside the frame). */
	for (uint32_t i = 0; i < 10; i++) {
		ring_domain_set_state(&dom, frames[i], RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, 4));
		comp->addrs[comp->producer++ & (TX_FRAMES - 1)] = (uint64_t)frames[i] * RING_XDP_FRAME_SIZE + 2;
	}
	ck_assert(ring_domain_has_completions(&dom));
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_reap_locked(&dom), 10);
	ck_assert_uint_eq(dom.sh->tx_free_count, 10);
	ring_domain_tx_give_locked(&dom, frames + 10, TX_FRAMES - 10);
	ck_assert_uint_eq(dom.sh->tx_free_count, TX_FRAMES);
	ring_domain_unlock(&dom);
	ck_assert(!ring_domain_has_completions(&dom));
}
END_TEST

START_TEST(lock_left_by_a_dead_member_is_repaired)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Dies inside a pop: the count moved, the state word did not. */
		ring_domain_lock(&dom);
		dom.sh->tx_free_count -= 3;
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ring_domain_lock(&dom);
	ck_assert_uint_eq(dom.sh->counters.lock_repairs, 1);
	ck_assert_uint_eq(dom.sh->tx_free_count, TX_FRAMES);
	ring_domain_unlock(&dom);
	/* The lock works normally after. */
	ring_domain_lock(&dom);
	ring_domain_unlock(&dom);
	ck_assert_uint_eq(dom.sh->counters.lock_repairs, 1);
}
END_TEST

START_TEST(members_get_distinct_slots_until_full)
{
	bool seen[RING_XDP_MAX_MEMBERS] = { false };
	for (unsigned i = 0; i < RING_XDP_MAX_MEMBERS; i++) {
		int slot = ring_domain_member_add(&dom, -1, 100 + (pid_t)i, 1000);
		ck_assert_int_ge(slot, 0);
		ck_assert(!seen[slot]);
		seen[slot] = true;
		ck_assert_uint_eq(dom.sh->members[slot].state, RING_DOMAIN_M_ACTIVE);
	}
	ck_assert_int_eq(ring_domain_member_add(&dom, -1, 999, 1000), -ENOSPC);
}
END_TEST

START_TEST(a_dead_members_frames_come_back)
{
	int slot = ring_domain_member_add(&dom, -1, 4242, 0);
	ck_assert_int_ge(slot, 0);
	uint64_t rx[6];
	kernel_delivers(6, (unsigned)slot, rx);
	uint32_t tx[8];
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_tx_take_locked(&dom, (unsigned)slot, tx, 8), 8);
	ring_domain_unlock(&dom);
	/* Two were sent: the kernel still has them, their completions come
	 * later through the shared ring. */
	ring_domain_set_state(&dom, tx[0], RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, slot));
	ring_domain_set_state(&dom, tx[1], RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, slot));
	uint32_t produced = fill->producer;

	/* No XSK to read the rings through: the state words alone. */
	unsigned back = ring_domain_member_reclaim(&dom, (unsigned)slot, -1, -1);
	ck_assert_uint_eq(back, 6 + 6);
	ck_assert_uint_eq(fill->producer, produced + 6);
	ck_assert_uint_eq(dom.sh->tx_free_count, TX_FRAMES - 2);
	ck_assert_uint_eq(dom.sh->members[slot].state, RING_DOMAIN_M_FREE);
	ck_assert_uint_eq(dom.sh->counters.members_reaped, 1);
	ck_assert_uint_eq(ring_domain_get_state(&dom, tx[0]), RING_DOMAIN_STATE(RING_DOMAIN_ST_TXQ, slot));
	comp->addrs[comp->producer++ & (TX_FRAMES - 1)] = (uint64_t)tx[0] * RING_XDP_FRAME_SIZE;
	comp->addrs[comp->producer++ & (TX_FRAMES - 1)] = (uint64_t)tx[1] * RING_XDP_FRAME_SIZE;
	ring_domain_lock(&dom);
	ck_assert_uint_eq(ring_domain_reap_locked(&dom), 2);
	ring_domain_unlock(&dom);
	ck_assert_uint_eq(dom.sh->tx_free_count, TX_FRAMES);
}
END_TEST

/* ---- VMA_MEM_ALLOC_TYPE: the memory the frames live in ---- */

/* Bytes of free huge pages the system has right now (0 when none). */
static size_t free_huge_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long free_pages = 0, kb = 0;
	char line[128];
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Free: %lu", &free_pages);
		sscanf(line, "Hugepagesize: %lu kB", &kb);
	}
	fclose(f);
	return (size_t)free_pages * kb * 1024;
}

/* The memfd is usable for size bytes: mapped shared, written, read back. */
static void assert_usable(int fd, size_t size)
{
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_ge((size_t)st.st_size, size);
	uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	p[0] = 0x5a;
	p[size - 1] = 0xa5;
	ck_assert_uint_eq(p[0] + p[size - 1], 0xff);
	munmap(p, size);
}

START_TEST(mem_alloc_type_2_asks_for_huge_pages)
{
	cfg_params_load(&g_cfg, NULL);
	struct ring_config cfg;
	struct ring_sizes sizes;
	ring_config_from_params(&cfg);
	ring_sizes_compute(&cfg, RING_XDP_FRAME_SIZE, &sizes);
	ck_assert(!sizes.huge_pages);   /* default 1 (contiguous): ordinary pages */
	g_cfg.mem_alloc_type = 2;
	ring_config_from_params(&cfg);
	ring_sizes_compute(&cfg, RING_XDP_FRAME_SIZE, &sizes);
	ck_assert(sizes.huge_pages);
}
END_TEST

START_TEST(memfd_on_huge_pages_or_one_warning_and_ordinary_pages)
{
	const size_t want = (size_t)3 << 20;   /* not a multiple of a 2 MiB page */
	bool expect_huge = free_huge_bytes() >= ((size_t)4 << 20);

	/* Ordinary pages when not asked, whatever the system has. */
	size_t size = want;
	int fd = ring_domain_memfd(&size, false);
	ck_assert_int_ge(fd, 0);
	ck_assert(!ring_domain_memfd_is_huge(fd));
	ck_assert_uint_eq(size, want);
	assert_usable(fd, size);
	close(fd);

	/* The log (fd 2) into a file, to count the fallback warnings. */
	char path[] = "/tmp/test_ring_domain_XXXXXX";
	int log = mkstemp(path);
	ck_assert_int_ge(log, 0);
	unlink(path);
	int saved = dup(2);
	dup2(log, 2);
	for (int round = 0; round < 2; round++) {
		size = want;
		fd = ring_domain_memfd(&size, true);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ring_domain_memfd_is_huge(fd), expect_huge);
		if (expect_huge)
			ck_assert_uint_eq(size, (size_t)4 << 20);   /* rounded up to whole huge pages */
		else
			ck_assert_uint_eq(size, want);
		assert_usable(fd, size);
		close(fd);
	}
	dup2(saved, 2);
	close(saved);
	char text[1024] = "";
	ssize_t n = pread(log, text, sizeof(text) - 1, 0);
	text[n > 0 ? n : 0] = '\0';
	close(log);
	const char *warning = "VMA_MEM_ALLOC_TYPE=2: no huge pages for the packet frames";
	if (expect_huge) {
		ck_assert_msg(!strstr(text, warning), "unexpected: %s", text);
	} else {
		/* Two domains, one warning. */
		const char *first = strstr(text, warning);
		ck_assert_msg(first, "no warning in: %s", text);
		ck_assert_ptr_null(strstr(first + 1, warning));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring_domain");
	TCase *tc = tcase_create("frames");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, init_rejects_bad_geometry);
	tcase_add_test(tc, freed_rx_frames_return_to_the_fill_ring_once);
	tcase_add_test(tc, another_members_frame_is_not_refilled);
	tcase_add_test(tc, full_fill_ring_defers_the_rest);
	tcase_add_test(tc, tx_frames_cycle_through_completions);
	tcase_add_test(tc, lock_left_by_a_dead_member_is_repaired);
	tcase_add_test(tc, members_get_distinct_slots_until_full);
	tcase_add_test(tc, a_dead_members_frames_come_back);
	suite_add_tcase(s, tc);
	tc = tcase_create("memory");
	tcase_add_test(tc, mem_alloc_type_2_asks_for_huge_pages);
	tcase_add_test(tc, memfd_on_huge_pages_or_one_warning_and_ordinary_pages);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
