/* VMA_EXCEPTION_HANDLING's policy (sock_unsupported.c): for each mode, the
 * verdict, the errno, the log line and its level, and the abort. The
 * sockets that act on the verdict are tested end to end by
 * tests/integration/exception_handling.sh. Check forks every test, so
 * g_cfg and the logger start fresh in each. */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "log/vlog.h"
#include "sock/sock_unsupported.h"

static char log_path[64];
static char logged[8192];

/* Logs to a file at level, with mode in force. */
static void start(int mode, int level)
{
	cfg_params_load(&g_cfg, NULL);
	g_cfg.exception_handling = mode;
	snprintf(log_path, sizeof(log_path), "/tmp/test_sock_unsupported.XXXXXX");
	int fd = mkstemp(log_path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	struct vlog_settings settings = { .level = level, .details = 0, .colors = 0, .file = log_path };
	ck_assert_int_eq(vlog_configure(&settings), 0);
}

static const char *log_text(void)
{
	FILE *f = fopen(log_path, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(logged, 1, sizeof(logged) - 1, f);
	logged[n] = '\0';
	fclose(f);
	unlink(log_path);
	return logged;
}

static void assert_logged(const char *needle)
{
	ck_assert_msg(strstr(logged, needle), "the log \"%s\" lacks \"%s\"", logged, needle);
}

START_TEST(default_mode_goes_on_and_logs_only_at_debug)
{
	ck_assert_int_eq(cfg_params_load(&g_cfg, NULL), 0);
	ck_assert_int_eq(g_cfg.exception_handling, SOCK_UNSUPPORTED_LOG_DEBUG);
	start(SOCK_UNSUPPORTED_LOG_DEBUG, VLOG_INFO);
	errno = 0;
	ck_assert_int_eq(sock_unsupported_option(7, SOL_SOCKET, SO_PRIORITY, NULL), SOCK_UNSUPPORTED_GO_ON);
	ck_assert_int_eq(sock_unsupported(7, "send(MSG_OOB)", "its connection lives in our stack", EOPNOTSUPP),
			 SOCK_UNSUPPORTED_GO_ON);
	ck_assert_int_eq(errno, 0);
	ck_assert_str_eq(log_text(), "");
}
END_TEST

START_TEST(default_mode_debug_line)
{
	start(SOCK_UNSUPPORTED_LOG_DEBUG, VLOG_DEBUG);
	sock_unsupported_option(7, IPPROTO_TCP, TCP_DEFER_ACCEPT, NULL);
	log_text();
	assert_logged("VMA DEBUG: fd 7: setsockopt(IPPROTO_TCP, TCP_DEFER_ACCEPT) is not supported on an offloaded socket");
	assert_logged("(VMA_EXCEPTION_HANDLING=-1)");
}
END_TEST

START_TEST(mode_0_moves_to_the_kernel_at_debug_level)
{
	start(SOCK_UNSUPPORTED_DEBUG_TO_KERNEL, VLOG_INFO);
	ck_assert_int_eq(sock_unsupported_option(9, SOL_SOCKET, SO_PRIORITY, NULL), SOCK_UNSUPPORTED_TO_KERNEL);
	ck_assert_str_eq(log_text(), "");

	start(SOCK_UNSUPPORTED_DEBUG_TO_KERNEL, VLOG_DEBUG);
	ck_assert_int_eq(sock_unsupported_option(9, SOL_SOCKET, SO_PRIORITY, NULL), SOCK_UNSUPPORTED_TO_KERNEL);
	log_text();
	assert_logged("VMA DEBUG: fd 9: setsockopt(SOL_SOCKET, SO_PRIORITY) is not supported on an offloaded "
		      "socket: the socket moves to the kernel path (VMA_EXCEPTION_HANDLING=0)");
}
END_TEST

START_TEST(mode_1_moves_to_the_kernel_with_an_error)
{
	start(SOCK_UNSUPPORTED_ERROR_TO_KERNEL, VLOG_INFO);
	ck_assert_int_eq(sock_unsupported_option(9, IPPROTO_IP, IP_RECVERR, NULL), SOCK_UNSUPPORTED_TO_KERNEL);
	log_text();
	assert_logged("VMA ERROR: fd 9: setsockopt(IPPROTO_IP, IP_RECVERR) is not supported on an offloaded socket: "
		      "the socket moves to the kernel path (VMA_EXCEPTION_HANDLING=1)");
}
END_TEST

START_TEST(modes_0_and_1_go_on_when_the_socket_cannot_move)
{
	start(SOCK_UNSUPPORTED_ERROR_TO_KERNEL, VLOG_INFO);
	errno = 0;
	ck_assert_int_eq(sock_unsupported(5, "recv(MSG_OOB)", "its connection lives in our stack", EOPNOTSUPP),
			 SOCK_UNSUPPORTED_GO_ON);
	ck_assert_int_eq(errno, 0);
	log_text();
	assert_logged("VMA ERROR: fd 5: recv(MSG_OOB) is not supported on an offloaded socket, which cannot move to "
		      "the kernel path (its connection lives in our stack)");

	start(SOCK_UNSUPPORTED_DEBUG_TO_KERNEL, VLOG_INFO);
	ck_assert_int_eq(sock_unsupported(5, "recv(MSG_OOB)", "stuck", EOPNOTSUPP), SOCK_UNSUPPORTED_GO_ON);
	ck_assert_str_eq(log_text(), "");
}
END_TEST

START_TEST(mode_2_fails_with_the_errno)
{
	start(SOCK_UNSUPPORTED_ERROR_FAIL, VLOG_INFO);
	errno = 0;
	ck_assert_int_eq(sock_unsupported_option(4, IPPROTO_TCP, TCP_DEFER_ACCEPT, NULL), SOCK_UNSUPPORTED_FAIL);
	ck_assert_int_eq(errno, ENOPROTOOPT);
	errno = 0;
	ck_assert_int_eq(sock_unsupported(4, "send(MSG_OOB)", "stuck", EOPNOTSUPP), SOCK_UNSUPPORTED_FAIL);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	log_text();
	assert_logged("VMA ERROR: fd 4: setsockopt(IPPROTO_TCP, TCP_DEFER_ACCEPT) is not supported on an offloaded socket: "
		      "the call fails with ENOPROTOOPT (VMA_EXCEPTION_HANDLING=2)");
	assert_logged("VMA ERROR: fd 4: send(MSG_OOB) is not supported on an offloaded socket: the call fails with "
		      "EOPNOTSUPP");
}
END_TEST

START_TEST(mode_3_aborts_after_the_error_line)
{
	start(SOCK_UNSUPPORTED_ERROR_ABORT, VLOG_INFO);
	/* The line is in the file before abort() (one write per line); the
	 * child dies here, which is what Check expects of this test. */
	sock_unsupported_option(3, SOL_SOCKET, SO_PRIORITY, NULL);
	ck_abort_msg("mode 3 returned");
}
END_TEST

START_TEST(mode_3_line_is_written_before_the_abort)
{
	/* The parent of a forked child that takes the abort path reads the
	 * line the child wrote. */
	start(SOCK_UNSUPPORTED_ERROR_ABORT, VLOG_INFO);
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		sock_unsupported_option(3, SOL_SOCKET, SO_PRIORITY, NULL);
		_exit(0);
	}
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %#x", status);
	log_text();
	assert_logged("VMA ERROR: fd 3: setsockopt(SOL_SOCKET, SO_PRIORITY) is not supported on an offloaded socket: "
		      "aborting the process (VMA_EXCEPTION_HANDLING=3)");
}
END_TEST

START_TEST(option_names)
{
	char buf[80];
	ck_assert_str_eq(sock_unsupported_option_name(SOL_SOCKET, SO_BINDTODEVICE, buf, sizeof(buf)),
			 "SOL_SOCKET, SO_BINDTODEVICE");
	ck_assert_str_eq(sock_unsupported_option_name(IPPROTO_TCP, 999, buf, sizeof(buf)), "IPPROTO_TCP, option 999");
	ck_assert_str_eq(sock_unsupported_option_name(4242, 5, buf, sizeof(buf)), "level 4242, option 5");
}
END_TEST

static Suite *sock_unsupported_suite(void)
{
	Suite *s = suite_create("sock_unsupported");
	TCase *tc = tcase_create("modes");
	tcase_add_test(tc, default_mode_goes_on_and_logs_only_at_debug);
	tcase_add_test(tc, default_mode_debug_line);
	tcase_add_test(tc, mode_0_moves_to_the_kernel_at_debug_level);
	tcase_add_test(tc, mode_1_moves_to_the_kernel_with_an_error);
	tcase_add_test(tc, modes_0_and_1_go_on_when_the_socket_cannot_move);
	tcase_add_test(tc, mode_2_fails_with_the_errno);
	tcase_add_test_raise_signal(tc, mode_3_aborts_after_the_error_line, SIGABRT);
	tcase_add_test(tc, mode_3_line_is_written_before_the_abort);
	tcase_add_test(tc, option_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sock_unsupported_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
