/* vmad's flow table index against a model: random links and releases
 * over a few buckets (long chains), every chain walked after each step
 * must hold exactly the entries linked with its hash, the free list must
 * never hand out an entry in use, and full capacity answers -1. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "vmad/vmad_flow_index.h"

#define CAP 64
#define BUCKETS 4

struct model {
	bool allocated[CAP];
	bool linked[CAP];
	uint32_t hash[CAP];
};

/* Every chain holds exactly the linked entries of its bucket, once each.
 * Returns what is wrong, or NULL (plain checks: check's asserts write to a
 * pipe each, too slow for a walk after every step). */
static const char *chains_wrong(const struct vmad_flow_index *x, const struct model *m)
{
	int seen[CAP];

	memset(seen, 0, sizeof(seen));
	for (uint32_t b = 0; b < BUCKETS; b++) {
		int steps = 0;
		for (int e = vmad_flow_index_first(x, b); e >= 0; e = vmad_flow_index_next(x, e)) {
			if (e >= CAP)
				return "an entry number past the capacity";
			if (!m->linked[e])
				return "an entry in a chain that is not linked";
			if ((m->hash[e] & (BUCKETS - 1)) != b)
				return "an entry in another bucket's chain";
			seen[e]++;
			if (++steps > CAP)
				return "a cycle";
		}
	}
	for (int e = 0; e < CAP; e++)
		if (seen[e] != (m->linked[e] ? 1 : 0))
			return "a linked entry missing from its chain, or one twice";
	return NULL;
}

START_TEST(chains_match_a_model_under_random_churn)
{
	struct vmad_flow_index x;
	struct model m;
	unsigned seed = 12345;

	memset(&m, 0, sizeof(m));
	ck_assert_int_eq(vmad_flow_index_init(&x, CAP, BUCKETS), 0);
	for (int step = 0; step < 20000; step++) {
		int e = (int)(rand_r(&seed) % CAP);
		switch (rand_r(&seed) % 3) {
		case 0: { /* allocate, and link it (or give it back unlinked, as a refused FLOW_ADD does) */
			int got = vmad_flow_index_alloc(&x);
			if (got < 0) {
				for (int i = 0; i < CAP; i++)
					if (!m.allocated[i])
						ck_abort_msg("step %d: -1 while entry %d is free", step, i);
				break;
			}
			if (got >= CAP || m.allocated[got])
				ck_abort_msg("step %d: entry %d handed out twice or past the capacity", step, got);
			m.allocated[got] = true;
			if (rand_r(&seed) % 8 == 0) {
				vmad_flow_index_release(&x, got, 0, 0);
				m.allocated[got] = false;
				break;
			}
			m.hash[got] = rand_r(&seed);
			vmad_flow_index_link(&x, got, m.hash[got]);
			m.linked[got] = true;
			break;
		}
		default: /* release a linked entry */
			if (!m.linked[e])
				break;
			vmad_flow_index_release(&x, e, m.hash[e], 1);
			m.linked[e] = m.allocated[e] = false;
			break;
		}
		const char *wrong = chains_wrong(&x, &m);
		if (wrong)
			ck_abort_msg("step %d: %s", step, wrong);
		if (vmad_flow_index_high(&x) > CAP)
			ck_abort_msg("step %d: high mark %d", step, vmad_flow_index_high(&x));
	}
	vmad_flow_index_fini(&x);
}
END_TEST

START_TEST(full_table_answers_minus_one_and_reuses_released_entries)
{
	struct vmad_flow_index x;

	ck_assert_int_eq(vmad_flow_index_init(&x, 3, 2), 0);
	ck_assert_int_eq(vmad_flow_index_alloc(&x), 0);
	ck_assert_int_eq(vmad_flow_index_alloc(&x), 1);
	ck_assert_int_eq(vmad_flow_index_alloc(&x), 2);
	ck_assert_int_eq(vmad_flow_index_alloc(&x), -1);
	vmad_flow_index_link(&x, 1, 7);
	vmad_flow_index_release(&x, 1, 7, 1);
	ck_assert_int_eq(vmad_flow_index_first(&x, 7), -1);
	ck_assert_int_eq(vmad_flow_index_alloc(&x), 1);
	ck_assert_int_eq(vmad_flow_index_high(&x), 3);
	vmad_flow_index_fini(&x);
}
END_TEST

START_TEST(init_refuses_bad_sizes)
{
	struct vmad_flow_index x;

	ck_assert_int_eq(vmad_flow_index_init(&x, 0, 4), -EINVAL);
	ck_assert_int_eq(vmad_flow_index_init(&x, 8, 3), -EINVAL);
	ck_assert_int_eq(vmad_flow_index_init(&x, 8, 0), -EINVAL);
	vmad_flow_index_fini(&x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vmad_flow_index");
	TCase *tc = tcase_create("index");
	tcase_add_test(tc, chains_match_a_model_under_random_churn);
	tcase_add_test(tc, full_table_answers_minus_one_and_reuses_released_entries);
	tcase_add_test(tc, init_refuses_bad_sizes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
