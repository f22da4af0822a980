/* Internet checksum: known vectors, a naive reference over random data at
 * every alignment, and chains split at odd lengths. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stack/stack_csum.h"

/* The textbook definition: big-endian 16-bit words, end-around carry. */
static uint16_t naive_sum(const uint8_t *p, size_t len)
{
	uint32_t sum = 0;
	for (size_t i = 0; i < len; i += 2) {
		uint16_t w = (uint16_t)(p[i] << 8);
		if (i + 1 < len)
			w |= p[i + 1];
		sum += w;
		sum = (sum & 0xffff) + (sum >> 16);
	}
	return (uint16_t)sum;
}

/* Our sums are memory images: read them back as the two bytes they store. */
static uint16_t as_be(uint16_t memory_image)
{
	uint8_t b[2];
	memcpy(b, &memory_image, 2);
	return (uint16_t)(b[0] << 8 | b[1]);
}

START_TEST(test_rfc1071_vector)
{
	const uint8_t data[] = { 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7 };
	ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_add(0, data, sizeof(data)))), 0xddf2);
	ck_assert_uint_eq(as_be(stack_csum_finish(stack_csum_add(0, data, sizeof(data)))), 0x220d);
}
END_TEST

START_TEST(test_ip_header_vector)
{
	uint8_t hdr[20] = { 0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
			    0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7 };
	uint16_t c = stack_csum_finish(stack_csum_add(0, hdr, sizeof(hdr)));
	ck_assert_uint_eq(as_be(c), 0xb861);
	memcpy(hdr + 10, &c, 2);
	ck_assert_uint_eq(hdr[10], 0xb8);
	ck_assert_uint_eq(hdr[11], 0x61);
	/* A header carrying its checksum sums to all ones. */
	ck_assert_uint_eq(stack_csum_fold(stack_csum_add(0, hdr, sizeof(hdr))), 0xffff);
}
END_TEST

START_TEST(test_odd_and_empty)
{
	const uint8_t one[] = { 0xab };
	ck_assert_uint_eq(stack_csum_fold(stack_csum_add(0, one, 0)), 0);
	ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_add(0, one, 1))), 0xab00);
	uint8_t ff[64];
	memset(ff, 0xff, sizeof(ff));
	ck_assert_uint_eq(stack_csum_fold(stack_csum_add(0, ff, sizeof(ff))), 0xffff);
}
END_TEST

START_TEST(test_random_against_naive)
{
	static uint8_t buf[4096 + 8];
	srand(1234);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (int iter = 0; iter < 3000; iter++) {
		size_t align = (size_t)rand() % 8;
		size_t len = (size_t)rand() % 4097;
		if (iter < 80)
			len = (size_t)iter;   /* every short length */
		uint16_t ours = as_be(stack_csum_fold(stack_csum_add(0, buf + align, len)));
		ck_assert_uint_eq(ours, naive_sum(buf + align, len));
	}
}
END_TEST

START_TEST(test_pseudo_header)
{
	/* src 10.0.0.1 dst 10.0.0.2 proto 17 len 12: 0a00+0001+0a00+0002+0011+000c */
	uint32_t src, dst;
	const uint8_t s[4] = { 10, 0, 0, 1 }, d[4] = { 10, 0, 0, 2 };
	memcpy(&src, s, 4);
	memcpy(&dst, d, 4);
	ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_pseudo(src, dst, 17, 12))),
			  0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 0x0011 + 0x000c);
}
END_TEST

START_TEST(test_chain_odd_splits)
{
	static uint8_t data[3000];
	srand(99);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)rand();
	for (int iter = 0; iter < 500; iter++) {
		struct ring_buf parts[4];
		memset(parts, 0, sizeof(parts));
		uint32_t cut[5] = { 0, 0, 0, 0, sizeof(data) };
		for (int i = 1; i < 4; i++)
			cut[i] = (uint32_t)rand() % sizeof(data);
		for (int i = 1; i < 4; i++)   /* sort the three cuts */
			for (int j = i + 1; j < 4; j++)
				if (cut[j] < cut[i]) {
					uint32_t t = cut[i]; cut[i] = cut[j]; cut[j] = t;
				}
		for (int i = 0; i < 4; i++) {
			parts[i].data = data + cut[i];
			parts[i].len = cut[i + 1] - cut[i];
			parts[i].next = i < 3 ? &parts[i + 1] : NULL;
		}
		uint32_t len = (uint32_t)rand() % (sizeof(data) + 1);
		ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_chain(0, &parts[0], len))),
				  naive_sum(data, len));
	}
}
END_TEST

/* The copy with its sum (a segment's payload out of the send buffer): the
 * bytes land intact and the sum is the checksum's, for every alignment of
 * either side and every length. */
START_TEST(test_copy_sums_and_copies)
{
	static uint8_t src[4096 + 8], dst[4096 + 16];
	srand(4321);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)rand();
	for (int iter = 0; iter < 3000; iter++) {
		size_t sa = (size_t)rand() % 8, da = (size_t)rand() % 8;
		size_t len = iter < 80 ? (size_t)iter : (size_t)rand() % 4097;
		memset(dst, 0xa5, sizeof(dst));
		uint64_t sum = stack_csum_copy(0, dst + da, src + sa, len);
		ck_assert_uint_eq(as_be(stack_csum_fold(sum)), naive_sum(src + sa, len));
		ck_assert_int_eq(memcmp(dst + da, src + sa, len), 0);
		ck_assert_uint_eq(dst[da + len], 0xa5);   /* not a byte more */
		if (da)
			ck_assert_uint_eq(dst[da - 1], 0xa5);
	}
}
END_TEST

/* The fold by rotation against the textbook one (halves added until no
 * carry is left), on edge values and random ones of every magnitude. */
static uint16_t slow_fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

START_TEST(test_fold_edges)
{
	const uint64_t edge[] = { 0, 1, 0xffff, 0x10000, 0x1fffe, 0xffffffffu, 0x100000000ull, 0xfffffffffffffffeull,
				  0xffffffffffffffffull, 0x8000000000000000ull, 0xffff0000ffff0000ull, 0x0000ffff0000ffffull };
	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
		ck_assert_uint_eq(stack_csum_fold(edge[i]), slow_fold(edge[i]));
	srand(99);
	for (int i = 0; i < 100000; i++) {
		uint64_t v = ((uint64_t)rand() << 62) ^ ((uint64_t)rand() << 31) ^ (uint64_t)rand();
		v >>= rand() % 64;
		ck_assert_uint_eq(stack_csum_fold(v), slow_fold(v));
	}
}
END_TEST

/* The unrolled sums (the IPv4 header, the timestamps option) against the
 * naive sum, the option's also added to a running sum near 2^64. */
START_TEST(test_word_helpers)
{
	uint8_t buf[20], dst[16];
	srand(7);
	for (int iter = 0; iter < 2000; iter++) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (uint8_t)rand();
		if (iter % 3 == 0)
			memset(buf, 0xff, sizeof(buf));   /* the largest words: carries everywhere */
		uint64_t start = iter % 2 ? 0xffffffffffffff00ull : 0;
		memset(dst, 0xa5, sizeof(dst));
		uint64_t sum = stack_csum_copy12(start, dst, buf);
		ck_assert_int_eq(memcmp(dst, buf, 12), 0);
		ck_assert_uint_eq(dst[12], 0xa5);   /* not a byte more */
		/* its fold is the running sum's plus the option's, end-around */
		uint32_t both = slow_fold(start) + stack_csum_fold(stack_csum_add(0, buf, 12));
		both = (both & 0xffff) + (both >> 16);
		ck_assert_uint_eq(stack_csum_fold(sum), both);
		ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_copy12(0, dst, buf))), naive_sum(buf, 12));
		ck_assert_uint_eq(as_be(stack_csum_fold(stack_csum_hdr20(buf))), naive_sum(buf, 20));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stack_csum");
	TCase *tc = tcase_create("csum");
	tcase_add_test(tc, test_rfc1071_vector);
	tcase_add_test(tc, test_ip_header_vector);
	tcase_add_test(tc, test_odd_and_empty);
	tcase_add_test(tc, test_random_against_naive);
	tcase_add_test(tc, test_copy_sums_and_copies);
	tcase_add_test(tc, test_pseudo_header);
	tcase_add_test(tc, test_chain_odd_splits);
	tcase_add_test(tc, test_fold_edges);
	tcase_add_test(tc, test_word_helpers);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
