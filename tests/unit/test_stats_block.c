/* Unit tests of the library side of the statistics block (src/vma/stats). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "stats/stats.h"

static char dir[64];
static char path[128];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/stats-ut.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/vmastat.%d", dir, (int)getpid());
}

static void open_block(int fd_num, const char *stats_file)
{
	make_dir();
	struct stats_settings st = { .shmem_dir = dir, .fd_num = fd_num, .stats_file = stats_file,
				     .process_name = "unit", .lib_version = "9.9" };
	ck_assert_int_eq(stats_open(&st), 0);
}

START_TEST(file_created_0600_with_header)
{
	open_block(4, NULL);
	struct stat sb;
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 0777, 0600);
	const struct stats_header *h = stats_block();
	ck_assert_uint_eq(h->magic, STATS_MAGIC);
	ck_assert_uint_eq(h->layout_version, STATS_LAYOUT_VERSION);
	ck_assert_uint_eq(h->total_size, (uint64_t)sb.st_size);
	ck_assert_uint_eq(h->socket_slots, 4);
	ck_assert_int_eq(h->pid, getpid());
	ck_assert_str_eq(h->process_name, "unit");
	ck_assert_str_eq(stats_path(), path);
	stats_close();
	ck_assert_int_eq(access(path, F_OK), -1);
	rmdir(dir);
}
END_TEST

START_TEST(slots_overflow_to_dummy)
{
	open_block(2, NULL);
	struct stats_socket *a = stats_socket_slot_get(10, STATS_PROTO_UDP);
	struct stats_socket *b = stats_socket_slot_get(11, STATS_PROTO_TCP);
	struct stats_socket *c = stats_socket_slot_get(12, STATS_PROTO_UDP);
	ck_assert(!stats_slot_is_dummy(a) && !stats_slot_is_dummy(b));
	ck_assert_ptr_nonnull(c);
	ck_assert(stats_slot_is_dummy(c));
	c->c.rx_packets++; /* must be harmless */
	ck_assert_int_eq(a->fd, 10);
	ck_assert_uint_eq(b->proto, STATS_PROTO_TCP);
	stats_socket_slot_put(a);
	struct stats_socket *d = stats_socket_slot_get(13, STATS_PROTO_UDP);
	ck_assert_ptr_eq(d, a); /* the freed slot is reused, counters cleared */
	ck_assert_uint_eq(d->c.rx_packets, 0);
	ck_assert_int_eq(d->fd, 13);
	stats_socket_slot_put(c); /* putting the dummy is a no-op */
	for (unsigned i = 0; i < STATS_RING_SLOTS; i++)
		ck_assert(!stats_slot_is_dummy(stats_ring_slot_get(i, "eth0")));
	ck_assert(stats_slot_is_dummy(stats_ring_slot_get(99, "eth0")));
	struct stats_iomux *e1 = stats_iomux_slot_get(STATS_IOMUX_EPOLL, 5);
	ck_assert_int_eq(e1->epfd, 5);
	ck_assert_ptr_eq(stats_iomux_slot_get(STATS_IOMUX_SELECT, -1),
			 stats_iomux_slot_get(STATS_IOMUX_SELECT, -1));
	stats_close();
	rmdir(dir);
}
END_TEST

START_TEST(counters_visible_in_file)
{
	open_block(8, NULL);
	struct stats_socket *s = stats_socket_slot_get(7, STATS_PROTO_UDP);
	for (int i = 0; i < 1000; i++) {
		s->c.rx_packets++;
		s->c.rx_bytes += 64;
	}
	const struct stats_header *h = stats_block();
	int fd = open(path, O_RDONLY);
	struct stats_socket copy;
	size_t index = (size_t)(s - (struct stats_socket *)((char *)h + h->socket_off));
	ck_assert_int_eq(pread(fd, &copy, sizeof(copy), (off_t)(h->socket_off + index * sizeof(copy))),
			 sizeof(copy));
	close(fd);
	ck_assert_uint_eq(copy.in_use, 1);
	ck_assert_int_eq(copy.fd, 7);
	ck_assert_uint_eq(copy.c.rx_packets, 1000);
	ck_assert_uint_eq(copy.c.rx_bytes, 64000);
	stats_close();
	rmdir(dir);
}
END_TEST

static int seen_level = -100, seen_details = -100, seen_dump_fd = -100, seen_dump_level = -100;
static void cb_level(int l) { seen_level = l; }
static void cb_details(int d) { seen_details = d; }
static void cb_dump(int fd, int l) { seen_dump_fd = fd; seen_dump_level = l; }

static void post(struct stats_request *r, int value, int arg)
{
	r->value = value;
	r->arg = arg;
	r->seq++;
}

START_TEST(control_requests_applied_once)
{
	open_block(4, NULL);
	struct stats_socket *s = stats_socket_slot_get(3, STATS_PROTO_UDP);
	s->c.tx_packets = 5;
	s->c.rx_ready_pkts_max = 9;
	stats_socket_ready_add(s, 100);
	struct stats_control *c = &((struct stats_header *)stats_block())->control;
	struct stats_control_ops ops = { cb_level, cb_details, cb_dump };
	ck_assert_int_eq(stats_service_control(&ops), 0);
	post(&c->zero, 0, 0);
	post(&c->log_level, 5, 0);
	post(&c->log_details, 2, 0);
	post(&c->fd_dump, 3, 4);
	ck_assert_int_eq(stats_service_control(&ops), STATS_APPLIED_ZERO | STATS_APPLIED_LOG_LEVEL |
			 STATS_APPLIED_LOG_DETAILS | STATS_APPLIED_FD_DUMP);
	ck_assert_uint_eq(s->c.tx_packets, 0);
	ck_assert_uint_eq(s->c.rx_ready_pkts_max, 0);
	ck_assert_uint_eq(s->rx_ready_pkts_cur, 1);      /* gauges survive -z */
	ck_assert_uint_eq(s->rx_ready_bytes_cur, 100);
	ck_assert_int_eq(seen_level, 5);
	ck_assert_int_eq(seen_details, 2);
	ck_assert_int_eq(seen_dump_fd, 3);
	ck_assert_int_eq(seen_dump_level, 4);
	ck_assert_uint_eq(c->zero.done, c->zero.seq);
	ck_assert_int_eq(stats_service_control(&ops), 0); /* nothing new */
	post(&c->log_level, 42, 0);                        /* out of range: ignored */
	seen_level = -100;
	ck_assert_int_eq(stats_service_control(&ops), 0);
	ck_assert_int_eq(seen_level, -100);
	ck_assert_uint_eq(c->log_level.done, c->log_level.seq);
	stats_close();
	rmdir(dir);
}
END_TEST

START_TEST(stats_file_record_on_close)
{
	char file[160];
	make_dir();
	snprintf(file, sizeof(file), "%s/stats.log", dir);
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 4, .stats_file = file };
	ck_assert_int_eq(stats_open(&st), 0);
	struct stats_socket *quiet = stats_socket_slot_get(9, STATS_PROTO_UDP);
	struct stats_socket *s = stats_socket_slot_get(10, STATS_PROTO_UDP);
	s->c.tx_packets = 233020;
	s->c.tx_bytes = 455 * 1024 + 10;
	s->c.rx_packets = 233020;
	s->c.rx_bytes = 455 * 1024;
	s->c.rx_poll_hit = 233020;
	s->c.rx_ready_bytes_max = 200;
	s->rx_ready_bytes_limit = 2000000;
	s->c.rx_ready_pkts_max = 1;
	s->c.rx_drain_polls = 12;
	stats_socket_slot_put(quiet); /* no traffic: no record */
	stats_socket_slot_put(s);
	stats_close();
	char buf[2048] = { 0 };
	int fd = open(file, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_gt(read(fd, buf, sizeof(buf) - 1), 0);
	close(fd);
	ck_assert_str_eq(buf,
		"VMA: [fd=10] Tx Offload: 455 KB / 233020 / 0 / 0 [bytes/packets/drops/errors]\n"
		"VMA: [fd=10] Tx OS info: 0 KB / 0 / 0 [bytes/packets/errors]\n"
		"VMA: [fd=10] Rx Offload: 455 KB / 233020 / 0 / 0 [bytes/packets/eagains/errors]\n"
		"VMA: [fd=10] Rx byte: max 200 / dropped 0 (0.00%) / limit 2000000\n"
		"VMA: [fd=10] Rx pkt : max 1 / dropped 0 (0.00%)\n"
		"VMA: [fd=10] Rx OS info: 0 KB / 0 / 0 [bytes/packets/errors]\n"
		"VMA: [fd=10] Rx poll: 0 / 233020 (100.00%) [miss/hit]\n"
		"VMA: [fd=10] Rx drain polls: 12 [ring polls with data queued]\n");
	unlink(file);
	rmdir(dir);
}
END_TEST

START_TEST(empty_dir_means_no_file_but_counters_work)
{
	struct stats_settings st = { .shmem_dir = "", .fd_num = 2 };
	ck_assert_int_eq(stats_open(&st), 0);
	ck_assert_str_eq(stats_path(), "");
	struct stats_socket *s = stats_socket_slot_get(4, STATS_PROTO_UDP);
	ck_assert(!stats_slot_is_dummy(s));
	s->c.rx_packets++;
	stats_close();
}
END_TEST

START_TEST(fork_child_gets_own_file)
{
	open_block(4, NULL);
	struct stats_socket *s = stats_socket_slot_get(5, STATS_PROTO_UDP);
	s->c.rx_packets = 3;
	pid_t child = fork();
	if (child == 0) {
		stats_after_fork_child();
		char mine[160];
		snprintf(mine, sizeof(mine), "%s/vmastat.%d", dir, (int)getpid());
		int ok = strcmp(stats_path(), mine) == 0 && access(mine, F_OK) == 0 &&
			 s->c.rx_packets == 3 && stats_block()->pid == getpid();
		s->c.rx_packets = 1000; /* must not reach the parent's file */
		stats_close();
		_exit(ok && access(mine, F_OK) != 0 ? 0 : 1);
	}
	int status;
	waitpid(child, &status, 0);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_uint_eq(s->c.rx_packets, 3);
	ck_assert_int_eq(access(path, F_OK), 0); /* the child left ours alone */
	stats_close();
	rmdir(dir);
}
END_TEST

static void write_file(const char *file, const char *text, mode_t mode);

/* A child that leaves with _exit() (a fork-per-connection server's) never
 * removes its file: the parent does, once the child is gone. */
START_TEST(parent_removes_files_of_children_gone)
{
	open_block(4, NULL);
	char theirs[160];
	pid_t child = fork();
	if (child == 0) {
		stats_after_fork_child();
		_exit(access(stats_path(), F_OK) == 0 ? 0 : 1);
	}
	stats_note_child(child);
	snprintf(theirs, sizeof(theirs), "%s/vmastat.%d", dir, (int)child);
	int status;
	waitpid(child, &status, 0);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(access(theirs, F_OK), 0);   /* left behind by _exit */
	ck_assert_int_eq(stats_reap_children(), 0);  /* none left to watch */
	ck_assert_int_eq(access(theirs, F_OK), -1);
	ck_assert_int_eq(access(path, F_OK), 0);     /* ours stays */
	/* A live child is kept in view, its file left alone. */
	int go[2];
	ck_assert_int_eq(pipe(go), 0);
	child = fork();
	if (child == 0) {
		stats_after_fork_child();
		char b;
		close(go[1]);
		ssize_t r = read(go[0], &b, 1);
		stats_close();
		_exit(r >= 0 ? 0 : 1);
	}
	close(go[0]);
	stats_note_child(child);
	snprintf(theirs, sizeof(theirs), "%s/vmastat.%d", dir, (int)child);
	for (int i = 0; i < 200 && access(theirs, F_OK) != 0; i++)
		usleep(10000);
	ck_assert_int_eq(stats_reap_children(), 1);
	ck_assert_int_eq(access(theirs, F_OK), 0);
	close(go[1]);
	waitpid(child, &status, 0);
	ck_assert_int_eq(stats_reap_children(), 0);
	stats_close();
	rmdir(dir);
}
END_TEST

/* Files of processes killed with SIGKILL: the next process to open a file
 * in the directory removes those of dead processes of its own user, and
 * leaves the living alone. */
START_TEST(open_sweeps_files_of_dead_processes)
{
	make_dir();
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	char gone[160], alive[160], other[160];
	snprintf(gone, sizeof(gone), "%s/vmastat.%d", dir, (int)dead);
	snprintf(alive, sizeof(alive), "%s/vmastat.%d", dir, (int)getppid());
	snprintf(other, sizeof(other), "%s/notvmastat.%d", dir, (int)dead);
	write_file(gone, "stale\n", 0600);
	write_file(alive, "live\n", 0600);
	write_file(other, "other\n", 0600);
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 2 };
	ck_assert_int_eq(stats_open(&st), 0);
	ck_assert_int_eq(access(gone, F_OK), -1);
	ck_assert_int_eq(access(alive, F_OK), 0);
	ck_assert_int_eq(access(other, F_OK), 0);
	stats_close();
	unlink(alive);
	unlink(other);
	rmdir(dir);
}
END_TEST

START_TEST(mc_groups_refcounted)
{
	open_block(4, NULL);
	const struct stats_header *h = stats_block();
	const struct stats_mc_group *g = (const struct stats_mc_group *)((const char *)h + h->mc_off);
	stats_mc_group_ref(5, 0x010404e0);
	stats_mc_group_ref(5, 0x010404e0);
	ck_assert_uint_eq(g[0].refs, 2);
	stats_mc_group_unref(5, 0x010404e0);
	ck_assert_uint_eq(g[0].refs, 1);
	stats_mc_group_unref(5, 0x010404e0);
	ck_assert_uint_eq(g[0].refs, 0);
	stats_close();
	rmdir(dir);
}
END_TEST

/* ---- local trust: the file, VMA_STATS_FILE, the mapping as data ---- */

static int saved_stderr = -1, capture_fd = -1;
static char captured[8192];

static void capture_begin(void)
{
	char tmp[] = "/tmp/stats-ut-log.XXXXXX";
	capture_fd = mkstemp(tmp);
	ck_assert_int_ge(capture_fd, 0);
	unlink(tmp);
	saved_stderr = dup(2);
	ck_assert_int_eq(dup2(capture_fd, 2), 2);
}

static const char *capture_end(void)
{
	ck_assert_int_eq(dup2(saved_stderr, 2), 2);
	close(saved_stderr);
	ssize_t n = pread(capture_fd, captured, sizeof(captured) - 1, 0);
	captured[n > 0 ? n : 0] = '\0';
	close(capture_fd);
	return captured;
}

static int count_of(const char *haystack, const char *needle)
{
	int n = 0;
	for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void write_file(const char *file, const char *text, mode_t mode)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

static void expect_content(const char *file, const char *text)
{
	char buf[256] = { 0 };
	int fd = open(file, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(read(fd, buf, sizeof(buf) - 1), 0);
	close(fd);
	ck_assert_str_eq(buf, text);
}

/* stats_open on a name someone planted: one warning naming the file and the
 * reason, -1, no file of ours, counters still work in private memory, and
 * neither stats_close nor the exit hook touches the planted name. */
static void expect_planted_refused(const char *why)
{
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 2 };
	capture_begin();
	int rc = stats_open(&st);
	capture_end();
	ck_assert_int_eq(rc, -1);
	char want[512];
	snprintf(want, sizeof(want), "VMA WARNING: VMA_STATS_SHMEM_DIR: refusing the statistics file "
		 "%s: %s. This process's statistics stay private", path, why);
	ck_assert_msg(strstr(captured, want), "want '%s' in '%s'", want, captured);
	ck_assert_int_eq(count_of(captured, "WARNING"), 1);
	ck_assert_str_eq(stats_path(), "");
	struct stats_socket *s = stats_socket_slot_get(4, STATS_PROTO_UDP);
	ck_assert(!stats_slot_is_dummy(s));
	s->c.rx_packets++;
	stats_unlink_own_file();
	stats_close();
	struct stat sb;
	ck_assert_int_eq(lstat(path, &sb), 0); /* still there */
}

START_TEST(planted_symlink_refused)
{
	make_dir();
	char target[160];
	snprintf(target, sizeof(target), "%s/precious", dir);
	write_file(target, "precious\n", 0600);
	ck_assert_int_eq(symlink(target, path), 0);
	expect_planted_refused("it is a symbolic link");
	expect_content(target, "precious\n");
	/* a dangling link is not created through either */
	unlink(path);
	unlink(target);
	ck_assert_int_eq(symlink(target, path), 0);
	expect_planted_refused("it is a symbolic link");
	ck_assert_int_eq(access(target, F_OK), -1);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(planted_file_of_another_user_refused)
{
	if (geteuid() != 0)
		return; /* needs root to give a file away */
	make_dir();
	ck_assert_int_eq(chmod(dir, 01777), 0);
	write_file(path, "planted\n", 0666);
	ck_assert_int_eq(chown(path, 65534, 65534), 0);
	expect_planted_refused("it belongs to another user (uid 65534)");
	expect_content(path, "planted\n");
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(planted_fifo_refused)
{
	make_dir();
	ck_assert_int_eq(mkfifo(path, 0666), 0);
	expect_planted_refused("it is not a regular file");
	unlink(path);
	rmdir(dir);
}
END_TEST

/* A regular file of ours under our pid was left by a dead process (pid
 * reuse) or by this process before exec: replaced, silently, by a new one
 * that is ours alone whatever the umask. */
START_TEST(stale_own_file_replaced)
{
	make_dir();
	write_file(path, "stale\n", 0644);
	struct stat old;
	ck_assert_int_eq(stat(path, &old), 0);
	mode_t mask = umask(0);
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 2 };
	capture_begin();
	int rc = stats_open(&st);
	capture_end();
	umask(mask);
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(captured, "");
	struct stat sb;
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0600);
	ck_assert_uint_eq(sb.st_size, stats_block()->total_size);
	ck_assert_uint_eq(stats_block()->magic, STATS_MAGIC);
	stats_close();
	ck_assert_int_eq(access(path, F_OK), -1);
	rmdir(dir);
}
END_TEST

/* Whatever a writer of the file puts in the header (offsets, counts) or in
 * a slot's kind, the library writes only where it decided at open. */
START_TEST(mapping_offsets_and_counts_never_followed)
{
	open_block(4, NULL);
	struct stats_header *h = (struct stats_header *)stats_block();
	struct stats_header orig = *h;
	struct stats_iomux *sel = stats_iomux_slot_get(STATS_IOMUX_SELECT, -1);
	struct stats_socket *before = stats_socket_slot_get(3, STATS_PROTO_UDP);
	before->c.rx_packets = 5;
	uint64_t far = 1ULL << 44;
	h->socket_off = h->ring_off = h->pool_off = h->select_off = h->poll_off = far;
	h->epoll_off = h->mc_off = far;
	h->socket_slots = h->ring_slots = h->pool_slots = h->epoll_slots = h->mc_slots = 0xffffffffu;
	h->total_size = 1;
	sel->kind = STATS_IOMUX_EPOLL;

	struct stats_socket *s = stats_socket_slot_get(7, STATS_PROTO_TCP);
	ck_assert_ptr_eq(s, (struct stats_socket *)((char *)h + orig.socket_off) + 1);
	for (int i = 0; i < 3; i++) /* 4 slots in all; the 5th get is the dummy */
		ck_assert(!stats_slot_is_dummy(stats_socket_slot_get(10 + i, STATS_PROTO_UDP)) == (i < 2));
	struct stats_ring *r = stats_ring_slot_get(1, "eth0");
	ck_assert_ptr_eq(r, (struct stats_ring *)((char *)h + orig.ring_off));
	struct stats_pool *p = stats_pool_slot_get(1, STATS_POOL_RX);
	ck_assert_ptr_eq(p, (struct stats_pool *)((char *)h + orig.pool_off));
	struct stats_iomux *e = stats_iomux_slot_get(STATS_IOMUX_EPOLL, 9);
	ck_assert_ptr_eq(e, (struct stats_iomux *)((char *)h + orig.epoll_off));
	ck_assert_ptr_eq(stats_iomux_slot_get(STATS_IOMUX_POLL, -1),
			 (struct stats_iomux *)((char *)h + orig.poll_off));
	stats_mc_group_ref(7, 0x010404e0);
	ck_assert_uint_eq(((struct stats_mc_group *)((char *)h + orig.mc_off))->refs, 1);
	stats_mc_group_unref(7, 0x010404e0);
	/* the select slot stays published: its kind field is data */
	stats_iomux_slot_put(sel);
	ck_assert_uint_eq(sel->in_use, 1);
	stats_iomux_slot_put(e);
	ck_assert_uint_eq(e->in_use, 0);
	/* -z and -S through the control block */
	h->control.zero.seq++;
	h->control.fd_dump.value = 0;
	h->control.fd_dump.arg = 9; /* out of range: INFO */
	h->control.fd_dump.seq++;
	capture_begin();
	int applied = stats_service_control(NULL);
	capture_end();
	ck_assert_int_eq(applied, STATS_APPLIED_ZERO | STATS_APPLIED_FD_DUMP);
	ck_assert_uint_eq(before->c.rx_packets, 0);
	ck_assert_ptr_nonnull(strstr(captured, "[fd=3]"));
	stats_zero_all();
	stats_close();
	rmdir(dir);
}
END_TEST

static void expect_stats_file_refused(const char *file, const char *why)
{
	make_dir();
	struct stats_settings st = { .shmem_dir = dir, .fd_num = 2, .stats_file = file };
	capture_begin();
	int rc = stats_open(&st);
	capture_end();
	ck_assert_int_eq(rc, 0);
	char want[512];
	snprintf(want, sizeof(want), "VMA WARNING: VMA_STATS_FILE=%s refused: %s; socket records are "
		 "not written", file, why);
	ck_assert_msg(strstr(captured, want), "want '%s' in '%s'", want, captured);
	ck_assert_int_eq(count_of(captured, "WARNING"), 1);
	struct stats_socket *s = stats_socket_slot_get(10, STATS_PROTO_UDP);
	s->c.tx_packets = 1;
	stats_socket_slot_put(s);
	stats_close();
	rmdir(dir);
}

START_TEST(stats_file_symlink_refused)
{
	char target[] = "/tmp/stats-ut-target.XXXXXX", link_path[64];
	int fd = mkstemp(target);
	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(target, "mine\n", 0600);
	snprintf(link_path, sizeof(link_path), "%s.link", target);
	ck_assert_int_eq(symlink(target, link_path), 0);
	expect_stats_file_refused(link_path, "it is a symbolic link");
	expect_content(target, "mine\n");
	unlink(link_path);
	unlink(target);
}
END_TEST

START_TEST(stats_file_of_another_user_refused)
{
	if (geteuid() != 0)
		return;
	char file[] = "/tmp/stats-ut-theirs.XXXXXX";
	int fd = mkstemp(file);
	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(file, "theirs\n", 0666);
	ck_assert_int_eq(chown(file, 65534, 65534), 0);
	expect_stats_file_refused(file, "it belongs to another user (uid 65534)");
	expect_content(file, "theirs\n");
	unlink(file);
}
END_TEST

START_TEST(stats_file_created_0600)
{
	char file[160];
	make_dir();
	snprintf(file, sizeof(file), "%s/records", dir);
	mode_t mask = umask(0);
	struct stats_settings st = { .shmem_dir = "", .fd_num = 2, .stats_file = file };
	ck_assert_int_eq(stats_open(&st), 0);
	umask(mask);
	struct stat sb;
	ck_assert_int_eq(stat(file, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 0777, 0600);
	stats_close();
	unlink(file);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stats_block");
	TCase *tc = tcase_create("block");
	tcase_add_test(tc, file_created_0600_with_header);
	tcase_add_test(tc, slots_overflow_to_dummy);
	tcase_add_test(tc, counters_visible_in_file);
	tcase_add_test(tc, control_requests_applied_once);
	tcase_add_test(tc, stats_file_record_on_close);
	tcase_add_test(tc, empty_dir_means_no_file_but_counters_work);
	tcase_add_test(tc, fork_child_gets_own_file);
	tcase_add_test(tc, mc_groups_refcounted);
	tcase_add_test(tc, planted_symlink_refused);
	tcase_add_test(tc, planted_file_of_another_user_refused);
	tcase_add_test(tc, planted_fifo_refused);
	tcase_add_test(tc, stale_own_file_replaced);
	tcase_add_test(tc, mapping_offsets_and_counts_never_followed);
	tcase_add_test(tc, stats_file_symlink_refused);
	tcase_add_test(tc, stats_file_of_another_user_refused);
	tcase_add_test(tc, stats_file_created_0600);
	tcase_add_test(tc, parent_removes_files_of_children_gone);
	tcase_add_test(tc, open_sweeps_files_of_dead_processes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
