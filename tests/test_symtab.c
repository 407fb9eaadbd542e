/*
 * test_symtab.c - interning of strings and stacks.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "symtab.h"
#include "testutil.h"

START_TEST(symtab_equal_strings_get_equal_ids)
{
	struct symtab *t;
	uint32_t a, b, c;
	size_t len;

	ck_assert_int_eq(symtab_new(&t), 0);
	ck_assert_int_eq(symtab_intern(t, "aten::add", 9, &a), 0);
	ck_assert_int_eq(symtab_intern(t, "aten::mul", 9, &b), 0);
	ck_assert_int_eq(symtab_intern(t, "aten::add.Tensor", 9, &c), 0);
	ck_assert_uint_ge(a, 1);
	ck_assert_uint_ne(a, b);
	ck_assert_uint_eq(a, c);
	ck_assert_str_eq(symtab_str(t, b, &len), "aten::mul");
	ck_assert_uint_eq(len, 9);
	ck_assert_ptr_null(symtab_str(t, 0, NULL));
	ck_assert_ptr_null(symtab_str(t, 999, &len));
	ck_assert_uint_eq(len, 0);
	symtab_free(t);
}
END_TEST

START_TEST(symtab_many_strings_survive_growth)
{
	struct symtab *t;
	char buf[32];
	uint32_t ids[20000], id;

	ck_assert_int_eq(symtab_new(&t), 0);
	for (int i = 0; i < 20000; i++) {
		int n = snprintf(buf, sizeof(buf), "op%d", i);

		ck_assert_int_eq(symtab_intern(t, buf, (size_t)n, &ids[i]), 0);
	}
	for (int i = 0; i < 20000; i++) {
		int n = snprintf(buf, sizeof(buf), "op%d", i);

		ck_assert_int_eq(symtab_intern(t, buf, (size_t)n, &id), 0);
		ck_assert_uint_eq(id, ids[i]);
		ck_assert_str_eq(symtab_str(t, id, NULL), buf);
	}
	symtab_free(t);
}
END_TEST

START_TEST(symtab_stacks_interned_by_content)
{
	struct symtab *t;
	uint32_t f[3], s1, s2, s3, empty;
	const uint32_t *frames;

	ck_assert_int_eq(symtab_new(&t), 0);
	ck_assert_int_eq(symtab_intern(t, "a.py:1", 6, &f[0]), 0);
	ck_assert_int_eq(symtab_intern(t, "a.py:2", 6, &f[1]), 0);
	f[2] = f[0];
	ck_assert_int_eq(symtab_intern_stack(t, f, 3, &s1), 0);
	ck_assert_int_eq(symtab_intern_stack(t, f, 3, &s2), 0);
	ck_assert_int_eq(symtab_intern_stack(t, f, 2, &s3), 0);
	ck_assert_int_eq(symtab_intern_stack(t, f, 0, &empty), 0);
	ck_assert_uint_eq(s1, s2);
	ck_assert_uint_ne(s1, s3);
	ck_assert_uint_eq(empty, 0);
	ck_assert_uint_eq(symtab_stack(t, s1, &frames), 3);
	ck_assert_uint_eq(frames[2], f[0]);
	ck_assert_uint_eq(symtab_stack(t, 0, &frames), 0);
	f[1] = 12345;
	ck_assert_int_eq(symtab_intern_stack(t, f, 2, &s3), -EINVAL);
	symtab_free(t);
}
END_TEST

static Suite *symtab_suite(void)
{
	Suite *s = suite_create("symtab");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, symtab_equal_strings_get_equal_ids);
	tcase_add_test(tc, symtab_many_strings_survive_growth);
	tcase_add_test(tc, symtab_stacks_interned_by_content);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(symtab_suite());
}
