/* Which environment the library reads (config/cfg_env.c). The privileged
 * case itself (AT_SECURE) is exercised by tests/integration/t_local_trust.sh,
 * which runs a set-group-ID copy of a program loading libvma. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "config/cfg_env.h"

START_TEST(ignored_only_when_secure)
{
	char *env[] = { "VMA_TRACELEVEL=debug", "PATH=/bin", "VMA_LOG_FILE=", "VMAX=1",
			"LD_PRELOAD=libvma.so", "VMA_CONFIG_FILE=/etc/shadow", "VMA_NO_VALUE", NULL };
	ck_assert_int_eq(cfg_env_ignored_count(false, env), 0);
	ck_assert_int_eq(cfg_env_ignored_count(true, env), 3);
	ck_assert_int_eq(cfg_env_ignored_count(true, NULL), 0);
	char *none[] = { "HOME=/root", NULL };
	ck_assert_int_eq(cfg_env_ignored_count(true, none), 0);
}
END_TEST

START_TEST(ordinary_process_reads_its_environment)
{
	ck_assert(!cfg_env_is_secure());
	ck_assert_int_eq(setenv("VMA_CFG_ENV_TEST", "42", 1), 0);
	ck_assert_ptr_nonnull(cfg_env_get("VMA_CFG_ENV_TEST"));
	ck_assert_str_eq(cfg_env_get("VMA_CFG_ENV_TEST"), "42");
	ck_assert_ptr_null(cfg_env_get("VMA_CFG_ENV_TEST_UNSET"));
	ck_assert_int_eq(cfg_env_warn_ignored("/etc/libvma.conf"), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cfg_env");
	TCase *tc = tcase_create("env");
	tcase_add_test(tc, ignored_only_when_secure);
	tcase_add_test(tc, ordinary_process_reads_its_environment);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
