/*
 * test_u64map.c - the 64-bit key map, walked through its own API.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"
#include "u64map.h"

#define N 1000

START_TEST(u64map_next_visits_every_key_once)
{
	static unsigned char seen[N];
	struct u64map m;
	size_t pos = 0, n = 0;
	uint64_t key, val;

	ck_assert_int_eq(u64map_init(&m), 0);
	/* Keys spread over 64 bits, past several growths. */
	for (uint64_t i = 0; i < N; i++)
		ck_assert_int_eq(u64map_put(&m, i << 40 | 0xff, i * 7), 0);
	for (uint64_t i = 0; i < N; i += 3)
		ck_assert(u64map_del(&m, i << 40 | 0xff));
	memset(seen, 0, sizeof(seen));
	while (u64map_next(&m, &pos, &key, &val)) {
		uint64_t i = key >> 40;

		ck_assert_uint_eq(key & 0xffffffffffu, 0xff);
		ck_assert_uint_lt(i, N);
		ck_assert_uint_ne(i % 3, 0);
		ck_assert_uint_eq(val, i * 7);
		ck_assert_uint_eq(seen[i], 0);
		seen[i] = 1;
		n++;
	}
	ck_assert_uint_eq(n, m.count);
	ck_assert_uint_eq(n, N - (N + 2) / 3);
	/* Exhausted, it stays so; NULL out-pointers are allowed. */
	ck_assert(!u64map_next(&m, &pos, NULL, NULL));
	u64map_fini(&m);
}
END_TEST

START_TEST(u64map_next_on_empty_and_zeroed_maps)
{
	struct u64map m;
	size_t pos = 0;

	memset(&m, 0, sizeof(m));
	ck_assert(!u64map_next(&m, &pos, NULL, NULL));
	ck_assert_int_eq(u64map_init(&m), 0);
	ck_assert(!u64map_next(&m, &pos, NULL, NULL));
	ck_assert_int_eq(u64map_put(&m, 0, 1), 0);
	u64map_clear(&m);
	pos = 0;
	ck_assert(!u64map_next(&m, &pos, NULL, NULL));
	u64map_fini(&m);
	pos = 0;
	ck_assert(!u64map_next(&m, &pos, NULL, NULL));
}
END_TEST

static Suite *u64map_suite(void)
{
	Suite *s = suite_create("u64map");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, u64map_next_visits_every_key_once);
	tcase_add_test(tc, u64map_next_on_empty_and_zeroed_maps);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(u64map_suite());
}
