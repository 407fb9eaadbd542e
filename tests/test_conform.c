/*
 * test_conform.c - the daemon reports exactly what `analyze` reports.
 *
 * Every trace of a corpus (the cases in tests/conform/, the examples, and
 * the valid traces of the fuzz corpus) goes through npusan-replay and the
 * real agent into a daemon of its own, and `npusanctl findings --json`
 * must then print, line for line and byte for byte, what `npusanctl
 * analyze --json` prints for the trace: the same findings, ids, counts and
 * text. Only what differs by design is left out: the daemon's first_seen
 * and last_seen, which analyze has not, and the process's pid, which is
 * the replaying process's own (the kernel's word, not the trace's).
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "op.h"
#include "testutil.h"

static const char *const DIFFERS_BY_DESIGN[] = { "pid", "first_seen",
						 "last_seen", NULL };

/* `npusanctl A0 A1 A2` (A1, A2 may be NULL); its exit status, stdout in
 * *out. */
static int ctl(char **out, const char *a0, const char *a1, const char *a2)
{
	char *bin = strdup(tu_bin("npusanctl"));
	const char *argv[] = { bin, a0, a1, a2, NULL };
	int st = tu_run(argv, NULL, out, NULL);

	free(bin);
	return st;
}

/* Waits until the daemon lists one process, exited: everything its ring
 * held is then analysed and stored. */
static void wait_exited(const char *trace)
{
	char *list = NULL;

	for (int i = 0; i < 1000; i++) {
		free(list);
		list = NULL;
		ctl(&list, "list", "--json", NULL);
		if (list != NULL && tu_count_lines(list, "\"exited\"") == 1)
			break;
		tu_nap_ms(10);
	}
	ck_assert_msg(tu_count_lines(list, "\"exited\"") == 1,
		      "%s: the replay never exited in the daemon: %s", trace,
		      list != NULL ? list : "(nothing)");
	free(list);
}

/*
 * Replays `trace` into a fresh daemon; appends to *report what differs
 * from analyze. Returns whether the trace was one analyze accepts.
 */
static bool conform_one(const char *trace, char **report)
{
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	char *bin = strdup(tu_bin("npusanctl"));
	const char *av[] = { bin, "analyze", "--json", trace, NULL };
	const char *rv[] = { rep, trace, NULL };
	char *expect = NULL, *got = NULL, *e, *g, *err = NULL, *old;
	struct tu_daemon d;
	int st;

	st = tu_run(av, NULL, &expect, NULL);
	/* 2 is a trace analyze rejects: not ours. 4 (no operation) and 5
	 * (operations lost in its gaps) are valid traces. */
	if (st != 0 && st != 1 && st != 4 && st != 5) {
		free(expect);
		free(rep);
		free(bin);
		return false;
	}
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	st = tu_run(rv, NULL, NULL, &err);
	ck_assert_msg(st == 0, "%s: npusan-replay exited %d: %s", trace, st,
		      err);
	wait_exited(trace);
	ck_assert_int_le(ctl(&got, "findings", "--json", NULL), 1);
	e = tu_json_lines(expect, "\"kind\"", DIFFERS_BY_DESIGN);
	g = tu_json_lines(got, "\"kind\"", DIFFERS_BY_DESIGN);
	if (strcmp(e, g) != 0) {
		old = *report;
		ck_assert_int_gt(asprintf(report,
					  "%s%s:\n analyze:\n%s daemon:\n%s",
					  old, trace, e, g),
				 0);
		free(old);
	}
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(e);
	free(g);
	free(got);
	free(expect);
	free(err);
	free(d.dir);
	free(rep);
	free(bin);
	return true;
}

/* Every *.trace of `dir` that analyze accepts; at least `min` of them. */
static void conform_dir(const char *dir, unsigned min)
{
	char path[PATH_MAX], *report = strdup("");
	struct dirent **names;
	unsigned valid = 0;
	int n = scandir(dir, &names, NULL, alphasort);

	ck_assert_msg(n >= 0, "cannot read %s", dir);
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]->d_name);

		if (len > 6 &&
		    strcmp(names[i]->d_name + len - 6, ".trace") == 0) {
			snprintf(path, sizeof(path), "%s/%s", dir,
				 names[i]->d_name);
			valid += conform_one(path, &report);
		}
		free(names[i]);
	}
	free(names);
	/* On stderr: a long text does not fit in Check's message. */
	if (report[0] != '\0')
		fprintf(stderr, "the daemon differs from analyze:\n%s", report);
	ck_assert_msg(report[0] == '\0',
		      "%s: the daemon differs from analyze (see above)", dir);
	ck_assert_msg(valid >= min, "%s: %u valid traces, expected %u", dir,
		      valid, min);
	free(report);
}

START_TEST(conform_own_cases)
{
	conform_dir(NPUSAN_SOURCE_DIR "/tests/conform", 6);
}
END_TEST

START_TEST(conform_examples)
{
	conform_dir(NPUSAN_SOURCE_DIR "/examples", 1);
}
END_TEST

START_TEST(conform_fuzz_corpus)
{
	conform_dir(NPUSAN_SOURCE_DIR "/tests/fuzz/corpus", 10);
}
END_TEST

/* Text at the live path's limits (op.h): a stack deeper than OP_MAX_FRAMES,
 * a frame and an operator longer than OP_MAX_STRING with a character across
 * the cut. Built here: the trace is too large to keep in the tree. */
START_TEST(conform_text_past_the_limits)
{
	size_t cap = 3 * OP_MAX_STRING + 64 * OP_MAX_FRAMES, len = 0;
	char *text = malloc(cap), *report = strdup(""), *path;

	ck_assert_ptr_nonnull(text);
	len += (size_t)snprintf(text + len, cap - len,
				"npusan-trace 1\nstack id=1");
	for (unsigned i = 0; i < OP_MAX_FRAMES + 44; i++)
		len += (size_t)snprintf(text + len, cap - len, " frame=f%u", i);
	len += (size_t)snprintf(text + len, cap - len, "\nstack id=2 frame=");
	memset(text + len, 'x', OP_MAX_STRING - 1);
	len += OP_MAX_STRING - 1;
	len += (size_t)snprintf(text + len, cap - len,
				"\xc3\xa9tail\nlaunch stream=1 op=");
	memset(text + len, 'o', OP_MAX_STRING + 10);
	len += OP_MAX_STRING + 10;
	snprintf(text + len, cap - len,
		 " write=0x10 stack=1\nlaunch stream=2 op=r read=0x10 "
		 "stack=2\n");
	path = tu_write_file("limits.trace", text);
	ck_assert(conform_one(path, &report));
	if (report[0] != '\0')
		fprintf(stderr, "the daemon differs from analyze:\n%s", report);
	ck_assert_msg(report[0] == '\0', "limits.trace: the daemon differs "
					  "from analyze (see above)");
	free(path);
	free(report);
	free(text);
}
END_TEST

static Suite *conform_suite(void)
{
	Suite *s = suite_create("conform");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, conform_own_cases);
	tcase_add_test(tc, conform_examples);
	tcase_add_test(tc, conform_fuzz_corpus);
	tcase_add_test(tc, conform_text_past_the_limits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(conform_suite());
}
