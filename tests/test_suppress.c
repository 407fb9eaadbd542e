/*
 * test_suppress.c - suppression files (engine/suppress.c): what a user
 * writes in one, what it silences and what it says back.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suppress.h"
#include "testutil.h"

/* A data race between aclnnAdd in step() and hccl all_reduce. */
static const char *const race_acc[] = { "model.py:52 in step",
					"train.py:14 in main",
					"at_add+0x1f (/usr/lib/libtorch.so+0x1320)"
					" (BuildId: 0badc0de)" };
static const char *const race_prev[] = { "/opt/dep/libfoo.so+0x10",
					 "dist.py:17 in all_reduce_grads" };
static const char *const race_alloc[] = { "alloc.py:3 in buffer" };

static struct finding_view race(void)
{
	struct finding_view f = {
		.id = 7,
		.kind = "data_race",
		.has_alloc = true,
		.alloc = { .stack = { race_alloc, 1 } },
		.access = { .op = "aclnnAdd", .stack = { race_acc, 3 } },
		.has_previous = true,
		.previous = { .op = "hccl::all_reduce", .stack = { race_prev, 2 } },
	};

	return f;
}

/* The set parsed from `text`, which must parse. */
static struct suppress_set *parse_ok(const char *text)
{
	struct suppress_set *s = NULL;
	char err[SUPPRESS_ERR_MAX];
	int rc = suppress_parse("s.supp", text, strlen(text), &s, err);

	ck_assert_msg(rc == 0, "parse failed: %s", err);
	return s;
}

/* The error parsing `text` gives, which must fail with -EINVAL. */
static void parse_fails(const char *text, const char *want)
{
	struct suppress_set *s = NULL;
	char err[SUPPRESS_ERR_MAX];
	int rc = suppress_parse("s.supp", text, strlen(text), &s, err);

	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
}

/* Whether a file of one block with `body` suppresses the race. */
static bool block_matches(const char *body)
{
	char text[1024];
	struct suppress_set *s;
	struct finding_view f = race();
	bool hit;

	snprintf(text, sizeof(text), "{\n kind: data_race\n%s}\n", body);
	s = parse_ok(text);
	hit = suppress_match(s, &f) != NULL;
	suppress_free(s);
	return hit;
}

START_TEST(suppress_errors_name_file_and_line)
{
	parse_fails("{\n kind: data_race\n colour: red\n}\n",
		    "s.supp:3: unknown key 'colour'");
	parse_fails("# c\n{\n kind: data_race\n frame: foo[ab\n}\n",
		    "s.supp:4: bad pattern 'foo[ab': a '[' is never closed");
	parse_fails("{\n kind: data_race\n op: add\\\n}\n",
		    "s.supp:3: bad pattern");
	parse_fails("{\n kind: data_rac\n}\n",
		    "s.supp:2: unknown finding kind 'data_rac'");
	parse_fails("{\n op: x\n}\n", "s.supp:3: the block opened at line 1 "
				      "has no 'kind'");
	parse_fails("\n{\n kind: data_race\n", "s.supp:3: the block opened "
					       "at line 2 is not closed");
	parse_fails("kind: data_race\n", "s.supp:1: expected '{'");
	parse_fails("{\n kind: data_race\n{\n", "s.supp:3: '{' inside");
	parse_fails("}\n", "s.supp:1: '}' closes no block");
	parse_fails("{\n kind: data_race\n op:\n}\n", "s.supp:3: 'op' needs");
	parse_fails("{\n kind: data_race\n op: a\n op: b\n}\n",
		    "s.supp:4: 'op' given twice");
	parse_fails("{\n kind: data_race\n op: ...\n}\n", "s.supp:3: '...'");
	parse_fails("{\n kind: data_race\n just words\n}\n",
		    "s.supp:3: expected 'key: value'");
	{
		static const char nul[] = "{\n kind: data_race\n\0}\n";
		struct suppress_set *s = NULL;
		char err[SUPPRESS_ERR_MAX];

		ck_assert_int_eq(suppress_parse("s.supp", nul, sizeof(nul) - 1,
						&s, err),
				 -EINVAL);
		ck_assert_str_eq(err, "s.supp:3: a NUL byte: this is no text "
				      "file");
	}
}
END_TEST

START_TEST(suppress_good_file_parses_with_names)
{
	struct suppress_set *s = parse_ok("# a comment\r\n\n{\r\n  name: one\n"
					  "  kind: *\n}\n{\n kind: data_race\n"
					  " frame: [a-z]*.py:* in step\n}\n");

	ck_assert_uint_eq(suppress_entries(s), 2);
	ck_assert_str_eq(suppress_entry_name(s, 0), "one");
	ck_assert_uint_eq(suppress_entry_line(s, 0), 3);
	ck_assert_str_eq(suppress_entry_name(s, 1), "s.supp:7");
	suppress_free(s);
	s = parse_ok("");
	ck_assert_uint_eq(suppress_entries(s), 0);
	suppress_free(s);
}
END_TEST

START_TEST(suppress_kind_must_match)
{
	struct suppress_set *s = parse_ok("{\n kind: unjoined_capture\n}\n");
	struct finding_view f = race();

	ck_assert(block_matches(""));
	ck_assert_ptr_null(suppress_match(s, &f));
	suppress_free(s);
}
END_TEST

START_TEST(suppress_op_matches_either_access)
{
	ck_assert(block_matches(" op: aclnn*\n"));
	ck_assert(block_matches(" op: hccl::*\n"));
	ck_assert(!block_matches(" op: aten::*\n"));
}
END_TEST

START_TEST(suppress_frames_match_from_the_innermost)
{
	ck_assert(block_matches(" frame: model.py:* in step\n"));
	/* a prefix: the frames past the pattern are not looked at */
	ck_assert(block_matches(" frame: model.py:52 in step\n"
				" frame: train.py:14 in main\n"));
	/* the innermost frame is not train.py's */
	ck_assert(!block_matches(" frame: train.py:14 in main\n"));
	ck_assert(block_matches(" frame: ...\n frame: train.py:* in main\n"));
	ck_assert(block_matches(" frame: ...\n frame: *libtorch.so+*\n"));
	ck_assert(!block_matches(" frame: ...\n frame: nowhere.py:*\n"));
	/* '...' may stand for no frame at all */
	ck_assert(block_matches(" frame: model.py:*\n frame: ...\n"
				" frame: train.py:*\n"));
	/* the previous access's stack, as TSan's race: */
	ck_assert(block_matches(" frame: ...\n frame: dist.py:17 in *\n"));
	/* past the last frame */
	ck_assert(!block_matches(" frame: model.py:*\n frame: *\n frame: *\n"
				 " frame: *\n"));
}
END_TEST

START_TEST(suppress_patterns_bind_to_one_access)
{
	/* op of the access, frame of the previous one: no single access */
	ck_assert(!block_matches(" op: aclnnAdd\n frame: ...\n"
				 " frame: dist.py:*\n"));
	ck_assert(block_matches(" op: hccl::*\n frame: ...\n"
				" frame: dist.py:*\n"));
}
END_TEST

START_TEST(suppress_module_matches_path_or_name)
{
	ck_assert(block_matches(" module: libfoo.so\n"));
	ck_assert(block_matches(" module: /opt/dep/*\n"));
	ck_assert(block_matches(" module: train.py\n"));
	ck_assert(!block_matches(" module: libbar.so\n"));
	ck_assert(!block_matches(" module: libfoo.so\n op: aclnn*\n"));
	/* A native frame as the agent records it: the module is the path
	 * in parentheses, not the symbol before them. */
	ck_assert(block_matches(" module: libtorch.so\n op: aclnn*\n"));
	ck_assert(block_matches(" module: /usr/lib/*\n op: aclnn*\n"));
	ck_assert(!block_matches(" module: at_add\n"));
}
END_TEST

START_TEST(suppress_alloc_frames_match_the_allocation)
{
	struct finding_view f = race();
	struct suppress_set *s = parse_ok("{\n kind: data_race\n"
					  " alloc-frame: alloc.py:* in buffer\n}\n");

	ck_assert(block_matches(" alloc-frame: alloc.py:*\n"));
	ck_assert(!block_matches(" alloc-frame: model.py:*\n"));
	f.has_alloc = false;
	ck_assert_ptr_null(suppress_match(s, &f));
	suppress_free(s);
}
END_TEST

START_TEST(suppress_counts_first_match_and_says_unmatched)
{
	struct suppress_set *s = parse_ok("{\n name: first\n kind: *\n"
					  " op: aclnn*\n}\n{\n name: second\n"
					  " kind: data_race\n}\n{\n"
					  " name: never\n kind: data_race\n"
					  " op: nothing\n}\n");
	struct finding_view f = race();
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	ck_assert_str_eq(suppress_match(s, &f), "first");
	ck_assert_str_eq(suppress_match(s, &f), "first");
	f.access.op = "aten::mm";
	ck_assert_str_eq(suppress_match(s, &f), "second");
	ck_assert_uint_eq(suppress_entry_matched(s, 0), 2);
	ck_assert_uint_eq(suppress_entry_matched(s, 1), 1);
	ck_assert_uint_eq(suppress_entry_matched(s, 2), 0);
	suppress_say(out, "t", s);
	fclose(out);
	ck_assert_str_eq(buf, "t: 3 findings suppressed\n"
			      "t:   2 by 'first' (line 1)\n"
			      "t:   1 by 'second' (line 6)\n"
			      "t:   suppression 'never' (line 10) matched "
			      "nothing\n");
	free(buf);
	suppress_free(s);
}
END_TEST

/* What suppress_gen() writes for `f`. */
static char *gen(const struct finding_view *f)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	suppress_gen(out, f);
	fclose(out);
	return buf;
}

START_TEST(suppress_gen_round_trips)
{
	static const char *const odd[] = { "weird[1]*?.py:3 in f\\g",
					   "...", " lead\ttab ",
					   "x.py:1 in ok" };
	struct finding_view f = race(), other = race();
	struct suppress_set *s;
	char *text;

	f.access.stack.frames = odd;
	f.access.stack.n = 4;
	f.access.op = "op[*]";
	text = gen(&f);
	ck_assert_msg(strstr(text, "   kind: data_race\n") != NULL, "%s", text);
	s = parse_ok(text);
	ck_assert_ptr_nonnull(suppress_match(s, &f));
	/* and it is no catch-all: another stack or operator is not hit */
	other.has_previous = false;
	ck_assert_ptr_null(suppress_match(s, &other));
	other = f;
	other.has_previous = false;
	other.access.op = "opX*]";
	ck_assert_ptr_null(suppress_match(s, &other));
	other.access.op = f.access.op;
	other.access.stack.n = 3;
	ck_assert_ptr_null(suppress_match(s, &other));
	suppress_free(s);
	free(text);
}
END_TEST

START_TEST(suppress_load_names_missing_file)
{
	struct suppress_set *s = NULL;
	char err[SUPPRESS_ERR_MAX];
	char *dir = tu_tmpdir(), *path;

	ck_assert_int_eq(suppress_load("/nonexistent/x.supp", &s, err),
			 -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/x.supp: No such file or directory");
	path = tu_write_file("bad.supp", "{\n kind: data_race\n op: [\n}\n");
	ck_assert_int_eq(suppress_load(path, &s, err), -EINVAL);
	ck_assert_msg(strstr(err, "bad.supp:3: bad pattern '['") != NULL, "%s",
		      err);
	free(path);
	free(dir);
}
END_TEST

static Suite *suppress_suite(void)
{
	Suite *s = suite_create("suppress");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, suppress_errors_name_file_and_line);
	tcase_add_test(tc, suppress_good_file_parses_with_names);
	tcase_add_test(tc, suppress_kind_must_match);
	tcase_add_test(tc, suppress_op_matches_either_access);
	tcase_add_test(tc, suppress_frames_match_from_the_innermost);
	tcase_add_test(tc, suppress_patterns_bind_to_one_access);
	tcase_add_test(tc, suppress_module_matches_path_or_name);
	tcase_add_test(tc, suppress_alloc_frames_match_the_allocation);
	tcase_add_test(tc, suppress_counts_first_match_and_says_unmatched);
	tcase_add_test(tc, suppress_gen_round_trips);
	tcase_add_test(tc, suppress_load_names_missing_file);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(suppress_suite());
}
