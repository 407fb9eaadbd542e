/*
 * test_ctl_limits.c - `npusanctl show --print-limit` and `npusanctl
 * findings --op/--exclude-op` against test_ctl's fake daemon
 * (ctl_helpers.h). Part of test_ctl's suite (ctl_limits_add()).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_helpers.h"
#include "testutil.h"

START_TEST(ctl_show_print_limit_0_prints_nothing_and_says_so)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out, *err;

	cf_spec(&a, true);
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "--print-limit", "0",
				"1", NULL),
			 0);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl: 1 more finding not printed "
			      "(--print-limit 0)\n");
	free(out);
	free(err);
	fq_free(q);
	q = fq_new();
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "--json",
				"--print-limit", "1", "1", NULL),
			 0);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\":\"data_race\""), 1);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	fq_free(q);
	ck_assert_int_eq(ctl(NULL, &err, "show", "--print-limit", "x", "1",
			     NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--print-limit needs a number"));
	free(err);
}
END_TEST

/* Runs `findings ARGS...` against a daemon holding the spec's two
 * findings (a data race after aten::randn, a missing record_stream). */
#define FINDINGS_OF_SPEC(status, out, err, ...)                            \
	do {                                                               \
		struct fq *q_ = fq_new();                                  \
		struct cf race_, mrs_;                                     \
		struct cf *v_[] = { &race_, &mrs_ };                       \
                                                                           \
		cf_spec(&race_, true);                                     \
		cf_spec(&mrs_, false);                                     \
		fq_findings(q_, v_, 2, true);                              \
		ck_assert_int_eq(ctl_fq(q_, out, err, "findings",          \
					__VA_ARGS__, NULL),                \
				 status);                                  \
		fq_free(q_);                                               \
	} while (0)

START_TEST(ctl_findings_op_filters_rows_and_exit_status)
{
	char *out, *err;

	FINDINGS_OF_SPEC(1, &out, &err, "--json", "--op", "aten::rand?");
	ck_assert_uint_eq(tu_count_lines(out, "{\"id\":"), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\":\"data_race\""), 1);
	ck_assert_str_eq(err, "npusanctl: 1 finding filtered out by "
			      "--op/--exclude-op\n");
	free(out);
	free(err);
	/* Every finding filtered out: no rows, exit 0, said on stderr. */
	FINDINGS_OF_SPEC(0, &out, &err, "--exclude-op", "*add*");
	ck_assert_str_eq(out, "No findings.\n");
	ck_assert_str_eq(err, "npusanctl: 2 findings filtered out by "
			      "--op/--exclude-op\n");
	free(out);
	free(err);
	FINDINGS_OF_SPEC(1, &out, &err, "--op", "none", "--op",
			 "aten::add.Tensor");
	ck_assert_uint_eq(tu_count_lines(out, "demo"), 2);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "findings", "--exclude-op", "", NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--exclude-op needs a pattern"));
	free(err);
}
END_TEST

void ctl_limits_add(TCase *tc)
{
	tcase_add_test(tc, ctl_show_print_limit_0_prints_nothing_and_says_so);
	tcase_add_test(tc, ctl_findings_op_filters_rows_and_exit_status);
}
