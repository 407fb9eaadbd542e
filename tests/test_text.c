/*
 * test_text.c - the one policy for text from outside (common/text.h).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "testutil.h"

/* What displays refuse: C0, DEL, C1 and bytes that are not UTF-8. */
START_TEST(text_clean_makes_controls_and_invalid_bytes_safe)
{
	char out[32];

	ck_assert_ptr_null(text_clean(NULL, out, sizeof(out)));
	ck_assert_ptr_null(text_clean("", out, sizeof(out)));
	ck_assert_str_eq(text_clean("a\tb\nc\x7f" "d\x1b[31m", out,
				    sizeof(out)),
			 "a?b?c?d?[31m");
	ck_assert_str_eq(text_clean("\xc2\x9b" "1\xc2\x85\xc2\xa0", out,
				    sizeof(out)),
			 "?1?\xc2\xa0");
	ck_assert_str_eq(text_clean("\xff\xc0\xaf\xed\xa0\x80", out,
				    sizeof(out)),
			 "??????");
	ck_assert_str_eq(text_clean("\xc3\xa9\xe6\xb5\x81", out, sizeof(out)),
			 "\xc3\xa9\xe6\xb5\x81");
	ck_assert_str_eq(text_clean("ab\xe2\x82\xac", out, 5), "ab");
}
END_TEST

/* In place, as the CLI's tables clean their cells. */
START_TEST(text_clean_in_place)
{
	char s[] = "\xc2\x85x\ty";

	ck_assert_ptr_eq(text_clean(s, s, sizeof(s)), s);
	ck_assert_str_eq(s, "?x?y");
}
END_TEST

/* What is stored: everything a trace can carry, tab, newline, DEL and C1
 * included; a NUL or other C0 control and invalid bytes become '?'. */
START_TEST(text_keep_keeps_what_traces_carry)
{
	static const char in[] = "a\tb\nc\x7f\xc2\x85\r\0\x1b\xff";
	char out[32];
	size_t n = text_keep(in, sizeof(in) - 1, out, sizeof(out));

	ck_assert_uint_eq(n, 12);
	ck_assert_mem_eq(out, "a\tb\nc\x7f\xc2\x85????", 13);
	ck_assert_uint_eq(text_keep("", 0, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(text_put_writes_what_clean_makes)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	text_put(f, "op\n\xc2\x9b" "x\xe6\xb5\x81");
	fclose(f);
	ck_assert_str_eq(buf, "op??x\xe6\xb5\x81");
	free(buf);
}
END_TEST

/* The boundaries of the policy, code point by code point: U+0000-U+001F,
 * U+007F-U+009F refused, their neighbours shown. */
START_TEST(text_shown_refuses_c0_del_and_c1_only)
{
	for (unsigned cp = 0; cp < 0x800; cp++) {
		unsigned char s[2];
		size_t len = 1, n = 0;
		bool control = cp < 0x20 || (cp >= 0x7f && cp < 0xa0);

		s[0] = (unsigned char)cp;
		if (cp >= 0x80) {
			s[0] = (unsigned char)(0xc0 | cp >> 6);
			s[1] = (unsigned char)(0x80 | (cp & 0x3f));
			len = 2;
		}
		ck_assert_msg(text_shown(s, len, &n) == !control, "U+%04X", cp);
		ck_assert_uint_eq(n, len);
	}
}
END_TEST

/* Stored as it came (a C1 control a trace carries), yet never raw on a
 * terminal: what text_keep() keeps, text_put() still cleans. */
START_TEST(text_kept_controls_never_reach_a_terminal)
{
	static const char in[] = "\x1b[2J\xc2\x9b" "2J\xc2\x9d" "0;t\x07\x7f";
	char kept[32], *buf = NULL;
	size_t len = 0, n = text_keep(in, sizeof(in) - 1, kept, sizeof(kept));
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	/* ESC and BEL become '?'; the C1 controls and DEL are kept. */
	ck_assert_uint_eq(n, sizeof(in) - 1);
	ck_assert_str_eq(kept, "?[2J\xc2\x9b" "2J\xc2\x9d" "0;t?\x7f");
	text_put(f, kept);
	fclose(f);
	ck_assert_str_eq(buf, "?[2J?2J?0;t??");
	for (size_t i = 0; i < len; i++)
		ck_assert((unsigned char)buf[i] >= 0x20 &&
			  (unsigned char)buf[i] < 0x7f);
	free(buf);
}
END_TEST

static Suite *text_suite(void)
{
	Suite *s = suite_create("text");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, text_clean_makes_controls_and_invalid_bytes_safe);
	tcase_add_test(tc, text_clean_in_place);
	tcase_add_test(tc, text_keep_keeps_what_traces_carry);
	tcase_add_test(tc, text_put_writes_what_clean_makes);
	tcase_add_test(tc, text_shown_refuses_c0_del_and_c1_only);
	tcase_add_test(tc, text_kept_controls_never_reach_a_terminal);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(text_suite());
}
