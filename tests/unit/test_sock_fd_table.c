/* The fd table: fd -> object, lock-free lookups, sized from RLIMIT_NOFILE. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "sock/sock_fd_table.h"
#include "sock/sock_passthrough.h"

/* Test objects live in a static array and count releases/destroys, so
 * every retirement the table performs is observable. */
#define TEST_OBJS 64
static struct sock_obj test_objs[TEST_OBJS];
static int test_released[TEST_OBJS];
static int test_destroyed[TEST_OBJS];

static void test_release(struct sock_obj *obj) { test_released[obj - test_objs]++; }
static void test_destroy(struct sock_obj *obj) { test_destroyed[obj - test_objs]++; }
static const struct sock_ops test_ops = { .kind = "test", .release = test_release, .destroy = test_destroy };

static struct sock_obj *test_obj(int i, int fd)
{
	test_objs[i].ops = &test_ops;
	test_objs[i].fd = fd;
	return &test_objs[i];
}

static void setup(void)
{
	memset(test_released, 0, sizeof(test_released));
	memset(test_destroyed, 0, sizeof(test_destroyed));
	ck_assert_int_eq(sock_fd_table_init(128), 0);
}

static void teardown(void)
{
	sock_fd_table_fini();
}

START_TEST(test_set_get_take)
{
	ck_assert_uint_eq(sock_fd_table_size(), 128);
	ck_assert_ptr_null(sock_fd_get(5));
	ck_assert_int_eq(sock_fd_set(5, test_obj(0, 5)), 0);
	ck_assert_ptr_eq(sock_fd_get(5), &test_objs[0]);
	ck_assert_ptr_null(sock_fd_get(4));
	ck_assert_ptr_null(sock_fd_get(6));
	ck_assert_uint_eq(sock_fd_tracked_count(), 1);

	ck_assert_ptr_eq(sock_fd_take(5), &test_objs[0]);
	ck_assert_ptr_null(sock_fd_get(5));
	ck_assert_ptr_null(sock_fd_take(5));
	ck_assert_uint_eq(sock_fd_tracked_count(), 0);
	/* take hands the object over: the table retired nothing. */
	ck_assert_int_eq(test_released[0], 0);
}
END_TEST

START_TEST(test_out_of_range)
{
	errno = 0;
	ck_assert_int_eq(sock_fd_set(128, test_obj(0, 128)), -1);
	ck_assert_int_eq(errno, EBADF);
	ck_assert_int_eq(sock_fd_set(-1, test_obj(0, -1)), -1);
	ck_assert_int_eq(sock_fd_set(3, NULL), -1);
	ck_assert_ptr_null(sock_fd_get(128));
	ck_assert_ptr_null(sock_fd_get(-1));
	ck_assert_ptr_null(sock_fd_get(1 << 30));
	ck_assert_ptr_null(sock_fd_take(-7));
	sock_fd_drop(100000);   /* must not crash */
	ck_assert_int_eq(sock_fd_set(127, test_obj(1, 127)), 0);
	ck_assert_ptr_eq(sock_fd_get(127), &test_objs[1]);
	/* A rejected object was not retired: the caller still owns it. */
	ck_assert_int_eq(test_released[0], 0);
}
END_TEST

START_TEST(test_reuse_after_drop)
{
	ck_assert_int_eq(sock_fd_set(7, test_obj(0, 7)), 0);
	sock_fd_drop(7);
	ck_assert_int_eq(test_released[0], 1);
	ck_assert_int_eq(test_destroyed[0], 0);   /* still in its grace period */
	ck_assert_ptr_null(sock_fd_get(7));
	ck_assert_int_eq(sock_fd_set(7, test_obj(1, 7)), 0);
	ck_assert_ptr_eq(sock_fd_get(7), &test_objs[1]);
	sock_obj_flush_retired();
	ck_assert_int_eq(test_destroyed[0], 1);
	ck_assert_int_eq(test_destroyed[1], 0);
}
END_TEST

START_TEST(test_stale_entry_replaced)
{
	ck_assert_int_eq(sock_fd_set(9, test_obj(0, 9)), 0);
	ck_assert_int_eq(sock_fd_set(9, test_obj(1, 9)), 0);
	ck_assert_ptr_eq(sock_fd_get(9), &test_objs[1]);
	ck_assert_int_eq(test_released[0], 1);
	ck_assert_int_eq(test_released[1], 0);
	ck_assert_uint_eq(sock_fd_tracked_count(), 1);
}
END_TEST

START_TEST(test_drop_range)
{
	for (int fd = 10; fd < 20; fd++)
		ck_assert_int_eq(sock_fd_set(fd, test_obj(fd, fd)), 0);
	sock_fd_drop_range(12, 15);
	for (int fd = 10; fd < 20; fd++) {
		bool dropped = fd >= 12 && fd <= 15;
		ck_assert_int_eq(test_released[fd], dropped ? 1 : 0);
		ck_assert(dropped ? sock_fd_get(fd) == NULL : sock_fd_get(fd) == &test_objs[fd]);
	}
	sock_fd_drop_range(18, ~0u);   /* close_range(18, ~0U) */
	ck_assert_ptr_null(sock_fd_get(18));
	ck_assert_ptr_null(sock_fd_get(19));
	ck_assert_ptr_eq(sock_fd_get(17), &test_objs[17]);
	sock_fd_drop_range(30, 20);    /* empty range */
	ck_assert_uint_eq(sock_fd_tracked_count(), 4);
}
END_TEST

START_TEST(test_graveyard_delays_destroy)
{
	ck_assert_int_eq(sock_fd_set(3, test_obj(0, 3)), 0);
	sock_fd_drop(3);
	/* Exactly SOCK_OBJ_GRAVE_SLOTS later retirements push it out. */
	for (int i = 0; i < SOCK_OBJ_GRAVE_SLOTS - 1; i++)
		sock_obj_retire(test_obj(1, 4));
	ck_assert_int_eq(test_destroyed[0], 0);
	sock_obj_retire(test_obj(1, 4));
	ck_assert_int_eq(test_destroyed[0], 1);
}
END_TEST

/* A thread cancelled inside its calls (a blocking recv, and a call of a
 * signal handler that interrupted it) must let go of their objects: a
 * closed socket it pinned would otherwise never be freed. */
static int calls_nested;
static volatile int calls_entered;

static void *cancelled_caller(void *arg)
{
	(void)arg;
	for (int i = 0; i < calls_nested; i++)
		sock_obj_call_begin(test_obj(i, 10 + i));
	__atomic_store_n(&calls_entered, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();   /* a cancellation point, as the call's sleep */
	return NULL;
}

static void cancel_inside_calls(int nested)
{
	pthread_t t;
	void *res = NULL;
	calls_nested = nested;
	calls_entered = 0;
	ck_assert_int_eq(pthread_create(&t, NULL, cancelled_caller, NULL), 0);
	while (!__atomic_load_n(&calls_entered, __ATOMIC_ACQUIRE))
		usleep(1000);
	ck_assert_int_eq(pthread_cancel(t), 0);
	ck_assert_int_eq(pthread_join(t, &res), 0);
	ck_assert_ptr_eq(res, PTHREAD_CANCELED);
}

START_TEST(test_cancelled_call_unpins)
{
	cancel_inside_calls(2);
	ck_assert_uint_eq(test_objs[0].pins, 0);
	ck_assert_uint_eq(test_objs[1].pins, 0);
	/* Closed afterwards: destroyed once evicted. */
	sock_obj_retire(&test_objs[0]);
	sock_obj_retire(&test_objs[1]);
	sock_obj_flush_retired();
	ck_assert_int_eq(test_destroyed[0], 1);
	ck_assert_int_eq(test_destroyed[1], 1);
	/* The calling thread's own calls are untouched by another's exit. */
	sock_obj_call_begin(test_obj(2, 12));
	ck_assert_uint_eq(test_objs[2].pins, 1);
	sock_obj_call_end(&test_objs[2]);
	ck_assert_uint_eq(test_objs[2].pins, 0);
	ck_assert_uint_eq(sock_obj_calls.depth, 0);
}
END_TEST

START_TEST(test_cancelled_calls_beyond_depth)
{
	/* Calls nested deeper than SOCK_OBJ_CALL_DEPTH are not kept: those
	 * objects stay pinned (never freed), the others are let go. */
	cancel_inside_calls(SOCK_OBJ_CALL_DEPTH + 1);
	for (int i = 0; i < SOCK_OBJ_CALL_DEPTH; i++)
		ck_assert_uint_eq(test_objs[i].pins, 0);
	ck_assert_uint_eq(test_objs[SOCK_OBJ_CALL_DEPTH].pins, 1);
}
END_TEST

/* Readers must only ever see NULL or the object set for that very fd. */
#define RACE_FDS 32
#define RACE_ROUNDS 20000
static volatile bool race_stop;

static void *race_reader(void *arg)
{
	(void)arg;
	long bad = 0;
	while (!__atomic_load_n(&race_stop, __ATOMIC_ACQUIRE))
		for (int fd = 0; fd < RACE_FDS; fd++) {
			struct sock_obj *obj = sock_fd_get(fd);
			if (obj && obj->fd != fd)
				bad++;
		}
	return (void *)bad;
}

START_TEST(test_concurrent_readers_with_writer)
{
	pthread_t readers[3];
	race_stop = false;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&readers[i], NULL, race_reader, NULL), 0);
	for (int round = 0; round < RACE_ROUNDS; round++) {
		int fd = round % RACE_FDS;
		if (sock_fd_get(fd))
			sock_fd_drop(fd);
		else
			ck_assert_int_eq(sock_fd_set(fd, test_obj(fd, fd)), 0);
	}
	__atomic_store_n(&race_stop, true, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++) {
		void *bad;
		pthread_join(readers[i], &bad);
		ck_assert_int_eq((long)bad, 0);
	}
}
END_TEST

START_TEST(test_size_from_rlimit)
{
	/* Check runs each test in its own process, so lowering the hard limit
	 * does not leak into other tests. */
	sock_fd_table_fini();
	struct rlimit limit = { .rlim_cur = 500, .rlim_max = 777 };
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &limit), 0);
	ck_assert_uint_eq(sock_fd_table_size_from_rlimit(), 777);
	ck_assert_int_eq(sock_fd_table_init(0), 0);
	ck_assert_uint_eq(sock_fd_table_size(), 777);
	/* The hard limit, not the soft one: the application may raise its
	 * soft limit later and get fds up to the hard one. */
	ck_assert_int_eq(sock_fd_set(776, test_obj(0, 776)), 0);
	ck_assert_int_eq(sock_fd_set(777, test_obj(1, 777)), -1);
	/* Initialising again keeps the table. */
	ck_assert_int_eq(sock_fd_table_init(5), 0);
	ck_assert_uint_eq(sock_fd_table_size(), 777);
}
END_TEST

START_TEST(test_size_capped)
{
	ck_assert_uint_le(sock_fd_table_size_from_rlimit(), SOCK_FD_TABLE_MAX);
	sock_fd_table_fini();
	ck_assert_int_eq(sock_fd_table_init(SOCK_FD_TABLE_MAX * 4u), 0);
	ck_assert_uint_eq(sock_fd_table_size(), SOCK_FD_TABLE_MAX);
	ck_assert_int_eq(sock_fd_set(SOCK_FD_TABLE_MAX - 1, test_obj(0, SOCK_FD_TABLE_MAX - 1)), 0);
}
END_TEST

START_TEST(test_no_table_means_untracked)
{
	sock_fd_table_fini();
	ck_assert_uint_eq(sock_fd_table_size(), 0);
	ck_assert_ptr_null(sock_fd_get(0));
	ck_assert_int_eq(sock_fd_set(0, test_obj(0, 0)), -1);
	ck_assert_ptr_null(sock_fd_take(0));
}
END_TEST

START_TEST(test_passthrough_kinds)
{
	ck_assert(sock_passthrough_wanted(AF_INET, SOCK_STREAM));
	ck_assert(sock_passthrough_wanted(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC));
	ck_assert(!sock_passthrough_wanted(AF_UNIX, SOCK_STREAM));
	ck_assert(!sock_passthrough_wanted(AF_INET, SOCK_RAW));
	struct sock_obj *obj = sock_passthrough_new(42, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 17);
	ck_assert_ptr_nonnull(obj);
	ck_assert_int_eq(obj->fd, 42);
	ck_assert_int_eq(obj->type, SOCK_DGRAM);
	ck_assert_int_eq(obj->protocol, 17);
	ck_assert_str_eq(obj->ops->kind, "passthrough");
	obj->ops->destroy(obj);
}
END_TEST

/* The passthrough has no data op (the interposer makes the application's
 * own call) and its control ops reach the kernel on its fd. */
START_TEST(test_passthrough_io)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	struct sock_obj *a = sock_passthrough_new(sv[0], AF_INET, SOCK_STREAM, 0);
	struct sock_obj *b = sock_passthrough_new(sv[1], AF_INET, SOCK_STREAM, 0);
	ck_assert_ptr_null(a->ops->recvmsg);
	ck_assert_ptr_null(a->ops->sendmsg);
	ck_assert_ptr_null(a->ops->sendmmsg);
	ck_assert_int_eq(write(sv[0], "hello", 5), 5);
	ck_assert_int_eq(b->ops->shutdown(b, SHUT_WR), 0);
	char buf[8] = { 0 };
	ck_assert_int_eq(read(sv[1], buf, sizeof(buf)), 5);
	ck_assert_str_eq(buf, "hello");
	ck_assert_int_eq(read(sv[0], buf, sizeof(buf)), 0);   /* EOF: the shutdown reached the kernel */
	close(sv[0]);
	errno = 0;
	ck_assert_int_eq(a->ops->shutdown(a, SHUT_RDWR), -1);
	ck_assert_int_eq(errno, EBADF);
	close(sv[1]);
	a->ops->destroy(a);
	b->ops->destroy(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sock_fd_table");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_set_get_take);
	tcase_add_test(tc, test_out_of_range);
	tcase_add_test(tc, test_reuse_after_drop);
	tcase_add_test(tc, test_stale_entry_replaced);
	tcase_add_test(tc, test_drop_range);
	tcase_add_test(tc, test_graveyard_delays_destroy);
	tcase_add_test(tc, test_cancelled_call_unpins);
	tcase_add_test(tc, test_cancelled_calls_beyond_depth);
	tcase_add_test(tc, test_concurrent_readers_with_writer);
	tcase_add_test(tc, test_size_from_rlimit);
	tcase_add_test(tc, test_size_capped);
	tcase_add_test(tc, test_no_table_means_untracked);
	tcase_add_test(tc, test_passthrough_kinds);
	tcase_add_test(tc, test_passthrough_io);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
