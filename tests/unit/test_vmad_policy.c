/* vmad's policy file: grammar, errors naming the line, and who may use
 * which interface (numeric ids, so the test needs no users on the host). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmad/vmad_policy.h"

static struct vmad_policy pol;
static char err[200];

START_TEST(default_allows_everyone_everywhere_without_sharing_uids)
{
	gid_t g = 100;
	vmad_policy_default(&pol);
	ck_assert(vmad_policy_allows(&pol, 1000, &g, 1, "eth0"));
	ck_assert(vmad_policy_allows(&pol, 0, NULL, 0, "anything"));
	ck_assert(!pol.share_uids);
}
END_TEST

START_TEST(user_rule_limits_interfaces)
{
	gid_t g = 100;
	ck_assert_int_eq(vmad_policy_parse(&pol, "# markets\nallow user 1000 on eth0,eth1\n", err, sizeof(err)), 0);
	ck_assert(vmad_policy_allows(&pol, 1000, &g, 1, "eth0"));
	ck_assert(vmad_policy_allows(&pol, 1000, &g, 1, "eth1"));
	ck_assert(!vmad_policy_allows(&pol, 1000, &g, 1, "eth2"));
	ck_assert(!vmad_policy_allows(&pol, 1001, &g, 1, "eth0"));
	/* root is always allowed */
	ck_assert(vmad_policy_allows(&pol, 0, &g, 1, "eth2"));
}
END_TEST

START_TEST(group_rule_matches_any_of_the_callers_groups)
{
	gid_t gids[] = { 100, 2000, 3000 };
	ck_assert_int_eq(vmad_policy_parse(&pol, "allow group 3000 on *\nshare-uids yes\n", err, sizeof(err)), 0);
	ck_assert(vmad_policy_allows(&pol, 1000, gids, 3, "veth9"));
	ck_assert(!vmad_policy_allows(&pol, 1000, gids, 2, "veth9"));
	ck_assert(pol.share_uids);
}
END_TEST

START_TEST(empty_file_allows_only_root)
{
	gid_t g = 0;
	ck_assert_int_eq(vmad_policy_parse(&pol, "\n# nothing\n", err, sizeof(err)), 0);
	ck_assert(!vmad_policy_allows(&pol, 1000, &g, 1, "eth0"));
	ck_assert(vmad_policy_allows(&pol, 0, &g, 1, "eth0"));
}
END_TEST

START_TEST(errors_name_the_line_and_fall_back_to_the_default)
{
	ck_assert_int_eq(vmad_policy_parse(&pol, "allow user 1000 on eth0\nallow usr 1000 on eth0\n", err, sizeof(err)),
			 -EINVAL);
	ck_assert_msg(strstr(err, "line 2") != NULL, "%s", err);
	ck_assert(!pol.from_file);
	ck_assert_int_eq(vmad_policy_parse(&pol, "share-uids maybe\n", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "line 1") != NULL, "%s", err);
	ck_assert_int_eq(vmad_policy_parse(&pol, "allow user no-such-user-here on eth0\n", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "no-such-user-here") != NULL, "%s", err);
	ck_assert_int_eq(vmad_policy_parse(&pol, "allow user 1 on averyveryverylongname\n", err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(vmad_policy_parse(&pol, "allow group * on eth0\n", err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(load_reports_a_missing_file)
{
	ck_assert_int_eq(vmad_policy_load(&pol, "/nonexistent/vmad.policy", err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/vmad.policy") != NULL, "%s", err);
	char path[] = "/tmp/vmad-policy-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char text[] = "allow user * on lo\n";
	ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	gid_t g = 5;
	ck_assert_int_eq(vmad_policy_load(&pol, path, err, sizeof(err)), 0);
	unlink(path);
	ck_assert(vmad_policy_allows(&pol, 4242, &g, 1, "lo"));
	ck_assert(!vmad_policy_allows(&pol, 4242, &g, 1, "eth0"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vmad_policy");
	TCase *tc = tcase_create("policy");
	tcase_add_test(tc, default_allows_everyone_everywhere_without_sharing_uids);
	tcase_add_test(tc, user_rule_limits_interfaces);
	tcase_add_test(tc, group_rule_matches_any_of_the_callers_groups);
	tcase_add_test(tc, empty_file_allows_only_root);
	tcase_add_test(tc, errors_name_the_line_and_fall_back_to_the_default);
	tcase_add_test(tc, load_reports_a_missing_file);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
