/* The peers list (src/vma/vmad/vmad_peers.c): what the library lists is
 * what vmad's walk finds, a freed entry is gone, a clean exit lists
 * nothing, and a list forgotten at fork ignores the parent's cookies. */
#include <check.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmad/vmad_peers.h"

struct seen {
	unsigned n;
	struct ring_xdp_key5 keys[8];
};

static void collect(void *arg, const struct ring_xdp_key5 *key)
{
	struct seen *s = arg;
	if (s->n < 8)
		s->keys[s->n] = *key;
	s->n++;
}

static bool seen_port(const struct seen *s, uint16_t remote_port)
{
	for (unsigned i = 0; i < s->n && i < 8; i++)
		if (s->keys[i].remote_port == htons(remote_port))
			return true;
	return false;
}

START_TEST(listed_freed_and_walked)
{
	uint32_t cookies[3] = { 0, 0, 0 };
	/* No list yet: nothing is listed and the cookie stays 0. */
	vmad_peers_add(htonl(0xc6120002), htons(80), htonl(0xc6120001), htons(40000), &cookies[0]);
	ck_assert_uint_eq(cookies[0], 0);
	int fd = vmad_peers_fd();
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(vmad_peers_fd(), fd);   /* one list per process */
	for (unsigned i = 0; i < 3; i++)
		vmad_peers_add(htonl(0xc6120002), htons(80), htonl(0xc6120001), htons((uint16_t)(40000 + i)),
			       &cookies[i]);
	ck_assert(cookies[0] && cookies[1] && cookies[2]);
	ck_assert(cookies[0] != cookies[1] && cookies[1] != cookies[2]);
	vmad_peers_del(&cookies[1]);
	ck_assert_uint_eq(cookies[1], 0);
	struct seen s = { 0 };
	ck_assert_int_eq(vmad_peers_walk(fd, collect, &s), 2);
	ck_assert_uint_eq(s.n, 2);
	ck_assert(seen_port(&s, 40000) && seen_port(&s, 40002) && !seen_port(&s, 40001));
	ck_assert_uint_eq(s.keys[0].local_ip, htonl(0xc6120002));
	ck_assert_uint_eq(s.keys[0].local_port, htons(80));
	ck_assert_uint_eq(s.keys[0].proto, IPPROTO_TCP);

	/* A forked child forgets the parent's list: the parent's cookies
	 * free nothing of the child's own list. */
	vmad_peers_after_fork_child();
	int fd2 = vmad_peers_fd();
	ck_assert_int_ge(fd2, 0);
	uint32_t mine = 0;
	vmad_peers_add(htonl(0xc6120002), htons(81), htonl(0xc6120001), htons(50000), &mine);
	ck_assert_uint_ne(mine, 0);
	uint32_t parents = cookies[0];
	vmad_peers_del(&parents);
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(vmad_peers_walk(fd2, collect, &s), 1);
	ck_assert(seen_port(&s, 50000));

	/* A clean exit: nothing to probe. */
	vmad_peers_mark_clean();
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(vmad_peers_walk(fd2, collect, &s), 0);
	ck_assert_uint_eq(s.n, 0);
}
END_TEST

START_TEST(walk_refuses_what_is_not_a_list)
{
	FILE *f = tmpfile();
	ck_assert_ptr_nonnull(f);
	ck_assert_int_lt(vmad_peers_walk(fileno(f), collect, NULL), 0);   /* too short */
	fclose(f);
	ck_assert_int_lt(vmad_peers_walk(-1, collect, NULL), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vmad_peers");
	TCase *t = tcase_create("list");
	tcase_add_test(t, listed_freed_and_walked);
	tcase_add_test(t, walk_refuses_what_is_not_a_list);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
