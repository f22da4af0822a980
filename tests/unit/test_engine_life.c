/* engine/: exit hooks, shutdown (normal and from a signal), fork child. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "config/cfg_params.h"
#include "engine/engine.h"

static const char *no_env(const char *name) { (void)name; return NULL; }
static void setup(void) { cfg_params_load(&g_cfg, no_env); }

static char ran[64];
static int nran;
static long hook_tid[64];
static void hook(void *arg)
{
	hook_tid[nran] = syscall(SYS_gettid);
	ran[nran++] = *(const char *)arg;
}

static bool wait_for(const int *flag, int want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= want)
			return true;
		usleep(1000);
	}
	return false;
}

static int thread_count(void)
{
	int n = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

START_TEST(hooks_run_once_in_reverse_order)
{
	ck_assert_int_eq(engine_exit_hook_add(hook, "1", 0), 0);
	ck_assert_int_eq(engine_exit_hook_add(hook, "2", 0), 0);
	ck_assert_int_eq(engine_exit_hook_add(hook, "3", ENGINE_HOOK_FORK_SAFE), 0);
	ck_assert_int_eq(engine_start(), 0);
	int threads = thread_count();
	engine_shutdown();
	/* pthread_join returns once the thread cleared its tid, a moment
	 * before the kernel drops it from the group's count: wait up to 2 s */
	for (int i = 0; i < 2000 && thread_count() != threads - 1; i++)
		usleep(1000);
	ck_assert_int_eq(thread_count(), threads - 1);
	ck_assert(!engine_running());
	ck_assert_int_eq(nran, 3);
	ck_assert(memcmp(ran, "321", 3) == 0);
	engine_shutdown();
	ck_assert_int_eq(nran, 3);
	ck_assert_int_eq(engine_exit_hook_add(hook, "4", 0), -ESHUTDOWN);
	ck_assert_int_eq(engine_start(), -ESHUTDOWN);
	ck_assert(!engine_running());
}
END_TEST

START_TEST(hook_table_is_bounded)
{
	for (int i = 0; i < ENGINE_EXIT_HOOKS_MAX; i++)
		ck_assert_int_eq(engine_exit_hook_add(hook, "x", 0), 0);
	ck_assert_int_eq(engine_exit_hook_add(hook, "x", 0), -ENOSPC);
	ck_assert_int_eq(engine_exit_hook_add(NULL, "x", 0), -EINVAL);
}
END_TEST

static void on_signal(int sig) { (void)sig; engine_shutdown_from_signal(); }

START_TEST(signal_path_runs_hooks_on_the_internal_thread)
{
	signal(SIGTERM, on_signal);
	engine_exit_hook_add(hook, "a", 0);
	engine_exit_hook_add(hook, "b", ENGINE_HOOK_SIGNAL_SAFE);
	engine_exit_hook_add(hook, "c", 0);
	ck_assert_int_eq(engine_start(), 0);
	raise(SIGTERM);
	ck_assert_int_eq(nran, 3);
	ck_assert(memcmp(ran, "cba", 3) == 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_ne(hook_tid[i], syscall(SYS_gettid));
	raise(SIGTERM);
	engine_shutdown();
	ck_assert_int_eq(nran, 3);
	ck_assert(!engine_running());
	ck_assert_int_eq(engine_start(), -ESHUTDOWN);
}
END_TEST

START_TEST(signal_path_without_thread_runs_only_signal_safe_hooks)
{
	signal(SIGINT, on_signal);
	engine_exit_hook_add(hook, "a", 0);
	engine_exit_hook_add(hook, "b", ENGINE_HOOK_SIGNAL_SAFE);
	raise(SIGINT);
	ck_assert_int_eq(nran, 1);
	ck_assert_int_eq(ran[0], 'b');
	engine_shutdown();
	ck_assert_int_eq(nran, 2);
	ck_assert_int_eq(ran[1], 'a');
}
END_TEST

static int timer_hits;
static void timer_hit(void *arg) { (void)arg; __atomic_add_fetch(&timer_hits, 1, __ATOMIC_RELEASE); }
static int poller_calls;
static int poller(void *arg, int budget) { (void)arg; (void)budget; __atomic_add_fetch(&poller_calls, 1, __ATOMIC_RELEASE); return 0; }
static int fd_hits;
static void fd_hit(int fd, uint32_t ev, void *arg)
{
	(void)ev; (void)arg;
	uint64_t v;
	if (read(fd, &v, 8) == 8)
		__atomic_add_fetch(&fd_hits, 1, __ATOMIC_RELEASE);
}

/* Child exit status bits: what went wrong. */
enum { CHILD_PARENT_HOOK_RAN = 1, CHILD_FORK_SAFE_MISSING = 2, CHILD_STILL_RUNNING = 4,
       CHILD_INHERITED_ARMED = 8, CHILD_TIMER_DEAD = 16, CHILD_FD_DEAD = 32, CHILD_OWN_HOOK = 64,
       CHILD_POLLER_RAN = 128 };

START_TEST(fork_child_leaves_the_parent_alone_and_restarts_lazily)
{
	g_cfg.progress_engine_interval = 10;
	struct engine_timer parent_timer;
	struct engine_poller parent_poller = { 0 };
	engine_timer_init(&parent_timer);
	int parent_fd = eventfd(0, EFD_NONBLOCK);
	engine_exit_hook_add(hook, "P", 0);
	engine_exit_hook_add(hook, "F", ENGINE_HOOK_FORK_SAFE);
	ck_assert_int_eq(engine_start(), 0);
	engine_timer_add(&parent_timer, 10, 10, timer_hit, NULL);
	engine_poller_register(&parent_poller, poller, NULL);
	ck_assert_int_eq(engine_fd_add(parent_fd, EPOLLIN, fd_hit, NULL), 0);
	ck_assert(wait_for(&poller_calls, 1, 2000));

	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		engine_after_fork_child();
		engine_after_fork_child();   /* once per child, whoever calls */
		int status = 0;
		if (engine_running())
			status |= CHILD_STILL_RUNNING;
		if (engine_timer_armed(&parent_timer) || engine_timer_cancel(&parent_timer))
			status |= CHILD_INHERITED_ARMED;
		engine_poller_unregister(&parent_poller);   /* must be harmless */
		/* The inherited fd is not watched here: deleting it must not
		 * touch the parent's epoll set. */
		if (engine_fd_del(parent_fd) != -ENOENT)
			status |= CHILD_INHERITED_ARMED;
		int before = timer_hits, polls = poller_calls;
		struct engine_timer own;
		engine_timer_init(&own);
		engine_timer_add(&own, 5, 0, timer_hit, NULL);
		engine_exit_hook_add(hook, "C", 0);
		int own_fd = eventfd(0, EFD_NONBLOCK);
		if (engine_start() != 0 || !wait_for(&timer_hits, before + 1, 2000))
			status |= CHILD_TIMER_DEAD;
		uint64_t one = 1;
		if (engine_fd_add(own_fd, EPOLLIN, fd_hit, NULL) != 0 || write(own_fd, &one, 8) != 8 ||
		    !wait_for(&fd_hits, 1, 2000))
			status |= CHILD_FD_DEAD;
		usleep(50000);
		if (poller_calls != polls || timer_hits != before + 1)
			status |= CHILD_POLLER_RAN;
		nran = 0;
		engine_shutdown();
		if (memchr(ran, 'P', (size_t)nran))
			status |= CHILD_PARENT_HOOK_RAN;
		if (!memchr(ran, 'F', (size_t)nran))
			status |= CHILD_FORK_SAFE_MISSING;
		if (nran < 1 || ran[0] != 'C')
			status |= CHILD_OWN_HOOK;
		_exit(status);
	}
	int status = -1;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	/* The parent's thread, timer, poller and fd carry on. */
	ck_assert_int_eq(nran, 0);
	ck_assert(engine_running());
	int hits = timer_hits, polls = poller_calls;
	ck_assert(wait_for(&timer_hits, hits + 2, 2000));
	ck_assert(wait_for(&poller_calls, polls + 2, 2000));
	uint64_t one = 1;
	ck_assert_int_eq(write(parent_fd, &one, 8), 8);
	ck_assert(wait_for(&fd_hits, 1, 2000));
	engine_poller_unregister(&parent_poller);
	engine_timer_cancel_sync(&parent_timer);
	engine_fd_del(parent_fd);
	engine_shutdown();
	ck_assert_int_eq(nran, 2);
	ck_assert(memcmp(ran, "FP", 2) == 0);
	close(parent_fd);
}
END_TEST

static Suite *life_suite(void)
{
	Suite *s = suite_create("engine-life");
	TCase *tc = tcase_create("lifecycle");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, hooks_run_once_in_reverse_order);
	tcase_add_test(tc, hook_table_is_bounded);
	tcase_add_test(tc, signal_path_runs_hooks_on_the_internal_thread);
	tcase_add_test(tc, signal_path_without_thread_runs_only_signal_safe_hooks);
	tcase_add_test(tc, fork_child_leaves_the_parent_alone_and_restarts_lazily);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(life_suite());
	srunner_run_all(runner, CK_NORMAL);
	int failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
