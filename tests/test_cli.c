/*
 * test_cli.c - `npusanctl` as a user types it: real processes, real files,
 * exit statuses and output checked against docs/findings.md.
 */
#include <check.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static const char spec_example[] =
	"npusan-trace 1\n"
	"process pid=4242 job=demo rank=0\n"
	"stack id=1 frame=\"train.py:14 in step\" frame=\"train.py:30 in main\"\n"
	"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
	"launch stream=0 op=aten::randn write=0x1000 stack=1\n"
	"stream_create stream=7\n"
	"launch stream=7 op=aten::add.Tensor read=0x1000 write=0x2000\n"
	"# missing: stream_wait stream=7 on=0  -> data race on 0x1000\n"
	"free ptr=0x1000\n"
	"# stream 0 never waited for stream 7 -> missing_record_stream on 0x1000\n";

static const char clean[] = "npusan-trace 1\n"
			    "launch stream=1 op=a write=0x10\n"
			    "stream_wait stream=2 on=1\n"
			    "launch stream=2 op=b read=0x10\n";

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Runs `npusanctl ARGS...` with `input` on stdin. */
static int ctl(const char *input, char **out, char **err, ...)
{
	const char *argv[16] = { tu_bin("npusanctl") };
	va_list ap;
	int n = 1;

	va_start(ap, err);
	while (n < 15 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	return tu_run(argv, input, out, err);
}

START_TEST(cli_analyze_json_of_spec_example_is_exact)
{
	char *path = tu_write_file("spec.trace", spec_example), *out, *err;
	int rc = ctl(NULL, &out, &err, "analyze", "--json", path, NULL);

	ck_assert_int_eq(rc, 1);
	ck_assert_str_eq(
		out,
		"{\"id\":1,\"kind\":\"data_race\",\"process\":{\"pid\":4242,"
		"\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\",\"alloc\":{"
		"\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,\"stack\":["
		"\"train.py:14 in step\",\"train.py:30 in main\"]},\"access\":{"
		"\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"
		"\"aten::add.Tensor\",\"arg\":null,\"stack\":[],\"graph\":null},\"previous\":{\"stream\":0,"
		"\"seq\":1,\"type\":\"write\",\"op\":\"aten::randn\",\"arg\":null,\"stack\":["
		"\"train.py:14 in step\",\"train.py:30 in main\"],\"graph\":null},"
		"\"free\":null,\"detected_at\":\"launch\",\"count\":1}\n"
		"{\"id\":2,\"kind\":\"missing_record_stream\",\"process\":{"
		"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\","
		"\"alloc\":{\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,"
		"\"stack\":[\"train.py:14 in step\",\"train.py:30 in main\"]},"
		"\"access\":{\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"
		"\"aten::add.Tensor\",\"arg\":null,\"stack\":[],\"graph\":null},\"previous\":null,"
		"\"free\":{\"stack\":[]},\"detected_at\":\"free\",\"count\":1}\n");
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	free(path);
}
END_TEST

START_TEST(cli_analyze_text_report_explains_both_kinds)
{
	char *out, *err;
	int rc = ctl(NULL, &out, &err, "analyze",
		     NPUSAN_SOURCE_DIR "/examples/demo.trace", NULL);

	ck_assert_int_eq(rc, 1);
	ck_assert_ptr_nonnull(strstr(out, "possible data race"));
	ck_assert_ptr_nonnull(strstr(out, "Previous access by stream 0"));
	ck_assert_ptr_nonnull(strstr(out, "dist.py:17 in all_reduce_grads"));
	ck_assert_ptr_nonnull(strstr(out, "missing record_stream"));
	ck_assert_ptr_nonnull(strstr(out, "record_stream(s)"));
	ck_assert_ptr_nonnull(strstr(out, "wait_stream"));
	ck_assert_ptr_nonnull(strstr(out, "Memory was allocated at"));
	ck_assert_ptr_nonnull(strstr(out, "rank 0"));
	ck_assert_ptr_nonnull(
		strstr(out, "2 findings in 1 trace: 1 data race, 1 missing"));
	/* not a terminal: no colour codes */
	ck_assert_ptr_null(strchr(out, '\033'));
	free(out);
	free(err);
}
END_TEST

/* A missing record_stream found at a free shows where the memory was
 * freed, after its allocation, as ASan's "freed by thread T0 here"; one a
 * flush found has no such block, and its JSON `free` is null. */
START_TEST(cli_analyze_names_where_memory_was_freed)
{
	static const char trace[] =
		"npusan-trace 1\n"
		"stack id=1 frame=\"train.py:40 in cleanup\" "
		"frame=\"train.py:50 in main\"\n"
		"stream_create stream=7\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"launch stream=7 op=use read=0x1000\n"
		"free ptr=0x1000 stack=1\n"
		"alloc ptr=0x2000 size=64 stream=0\n"
		"launch stream=7 op=other read=0x2000\n"
		"flush\n";
	char *out, *err, *freed, *flushed;

	ck_assert_int_eq(ctl(trace, &out, &err, "analyze", "-", NULL), 1);
	freed = strstr(out, "Memory was allocated at 0x1000 (64 bytes on "
			    "stream 0) with stack trace:\n"
			    "  (no stack recorded)\n"
			    "Memory was freed here:\n"
			    "  train.py:40 in cleanup\n"
			    "  train.py:50 in main\n"
			    "Fix it in either");
	ck_assert_msg(freed != NULL, "%s", out);
	flushed = strstr(out, "at 0x2000");
	ck_assert_ptr_nonnull(flushed);
	ck_assert_ptr_null(strstr(flushed, "freed here"));
	free(out);
	free(err);
	ck_assert_int_eq(ctl(trace, &out, &err, "analyze", "--json", "-",
			     NULL), 1);
	ck_assert_ptr_nonnull(strstr(out, ",\"previous\":null,\"free\":{"
					  "\"stack\":[\"train.py:40 in "
					  "cleanup\",\"train.py:50 in main\"]},"
					  "\"detected_at\":\"free\","));
	ck_assert_ptr_nonnull(strstr(out, ",\"previous\":null,\"free\":null,"
					  "\"detected_at\":\"flush\","));
	free(out);
	free(err);
}
END_TEST

START_TEST(cli_analyze_exit_status_follows_findings)
{
	char *ok = tu_write_file("clean.trace", clean);
	char *bad = tu_write_file("bad.trace", spec_example);

	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", ok, NULL), 0);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", bad, NULL), 1);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--error-exitcode",
			     "7", bad, NULL),
			 7);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze",
			     "--error-exitcode=0", bad, NULL),
			 0);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--error-exitcode",
			     "7", ok, NULL),
			 0);
	free(ok);
	free(bad);
}
END_TEST

START_TEST(cli_analyze_dedups_unless_every)
{
	static const char step[] = "alloc ptr=0x1000 size=64 stream=0\n"
				   "launch stream=0 op=fwd write=0x1000+64\n"
				   "launch stream=1 op=comm read=0x1000+64\n"
				   "free ptr=0x1000\n";
	char text[1024], *path, *out;

	snprintf(text, sizeof(text), "npusan-trace 1\n%s%s%s%s", step, step,
		 step, step);
	path = tu_write_file("loop.trace", text);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", "--json", path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 2);
	ck_assert_ptr_nonnull(strstr(out, "\"count\":4}"));
	free(out);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", "--json", "--every",
			     path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 8);
	ck_assert_ptr_nonnull(strstr(out, "{\"id\":8,"));
	ck_assert_ptr_null(strstr(out, "\"count\":2"));
	free(out);
	free(path);
}
END_TEST

START_TEST(cli_analyze_reads_stdin_and_numbers_across_traces)
{
	char *path = tu_write_file("spec2.trace", spec_example), *out;
	int rc = ctl(spec_example, &out, NULL, "analyze", "--json", "-", path,
		     NULL);

	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(count_lines(out), 4);
	ck_assert_ptr_nonnull(strstr(out, "{\"id\":3,\"kind\":\"data_race\""));
	ck_assert_ptr_nonnull(strstr(out, "{\"id\":4,"));
	free(out);
	free(path);
}
END_TEST

START_TEST(cli_analyze_without_process_line_has_null_process)
{
	char *out;

	ck_assert_int_eq(ctl("npusan-trace 1\n"
			     "launch stream=1 op=a write=0x10\n"
			     "launch stream=2 op=b write=0x10\n",
			     &out, NULL, "analyze", "--json", "-", NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(
		out, "\"process\":{\"pid\":null,\"job\":null,\"rank\":null}"));
	ck_assert_ptr_nonnull(strstr(out, "\"alloc\":null"));
	free(out);
}
END_TEST

START_TEST(cli_analyze_json_escapes_strings)
{
	char *out;

	ck_assert_int_eq(
		ctl("npusan-trace 1\n"
		    "process pid=1 job=\"a \\\"quoted\\\" job\"\n"
		    "stack id=1 frame=\"tab\\there\" frame=\"\xc3\xa9t\xc3\xa9\"\n"
		    "launch stream=1 op=\"x\\\\y\" write=0x10 stack=1\n"
		    "launch stream=2 op=b write=0x10\n",
		    &out, NULL, "analyze", "--json", "-", NULL),
		1);
	ck_assert_ptr_nonnull(strstr(out, "\"job\":\"a \\\"quoted\\\" job\""));
	ck_assert_ptr_nonnull(
		strstr(out, "\"stack\":[\"tab\\there\",\"\xc3\xa9t\xc3\xa9\"]"));
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"x\\\\y\""));
	free(out);
}
END_TEST

/* Text from a trace is displayed safely (common/text.h): the text report
 * shows control characters as '?', JSON escapes them, C1 and DEL too. */
START_TEST(cli_analyze_displays_controls_safely)
{
	static const char trace[] =
		"npusan-trace 1\n"
		"process pid=1 job=\"j\\tk\"\n"
		"stack id=1 frame=\"f\\nx\x7f\xc2\x9b[2J\"\n"
		"launch stream=1 op=\"a\\nb\" write=0x10 stack=1\n"
		"launch stream=2 op=b write=0x10\n";
	char *out;

	ck_assert_int_eq(ctl(trace, &out, NULL, "analyze", "-", NULL), 1);
	ck_assert_ptr_nonnull(strstr(out, "job j?k"));
	ck_assert_ptr_nonnull(strstr(out, "\na?b\n"));
	ck_assert_ptr_nonnull(strstr(out, "  f?x??[2J\n"));
	free(out);
	ck_assert_int_eq(ctl(trace, &out, NULL, "analyze", "--json", "-",
			     NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(out, "\"job\":\"j\\tk\""));
	ck_assert_ptr_nonnull(strstr(out, "\"f\\nx\\u007f\\u009b[2J\""));
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"a\\nb\""));
	free(out);
}
END_TEST

/* Bad input: exit 2, FILE:LINE on stderr, and what was found before the
 * bad line is still reported. */
START_TEST(cli_analyze_bad_line_names_file_and_line)
{
	char *path = tu_write_file("broken.trace",
				   "npusan-trace 1\n"
				   "launch stream=1 op=a write=0x10\n"
				   "launch stream=2 op=b write=0x10\n"
				   "launch stream=2 op=c write=0x10 bogus=1\n");
	char *out, *err, *want;
	int rc = ctl(NULL, &out, &err, "analyze", "--json", path, NULL);

	ck_assert_int_eq(rc, 2);
	ck_assert_int_gt(asprintf(&want, "%s:4: ", path), 0);
	ck_assert_msg(strstr(err, want) != NULL, "stderr: %s", err);
	ck_assert_ptr_nonnull(strstr(err, "bogus"));
	ck_assert_uint_eq(count_lines(out), 1);
	free(want);
	free(out);
	free(err);
	free(path);
}
END_TEST

/* A trace read from a file goes through analyze's reader thread in
 * batches (cli/oppipe.c); one read from a pipe does not. Over many
 * batches, a launch of more ranges than a batch starts with, findings
 * on late lines and a bad line at the end, both say the same. */
START_TEST(cli_analyze_file_and_pipe_agree_over_many_batches)
{
	char *text, *path, *out[2], *err[2], *want;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	int rc[2];

	ck_assert_ptr_nonnull(f);
	fputs("npusan-trace 1\n", f);
	for (int i = 0; i < 5000; i++) {
		fprintf(f, "launch stream=%d op=k%d read=0x%x write=0x%x\n",
			1 + i % 3, i % 7, 0x9000 + (i % 40) * 16,
			0x1000 + (i % 50) * 16);
		if (i == 2500) {
			fputs("launch stream=1 op=wide read=", f);
			for (int j = 0; j < 3000; j++)
				fprintf(f, "%s0x%x+8", j ? "," : "", j * 16);
			fputc('\n', f);
		}
	}
	fputs("launch stream=1 op=a bogus=1\n", f);
	ck_assert_int_eq(fclose(f), 0);
	path = tu_write_file("batches.trace", text);
	rc[0] = ctl(NULL, &out[0], &err[0], "analyze", "--json", path, NULL);
	rc[1] = ctl(text, &out[1], &err[1], "analyze", "--json", "-", NULL);
	ck_assert_int_eq(rc[0], 2);
	ck_assert_int_eq(rc[1], 2);
	ck_assert_str_eq(out[0], out[1]);
	ck_assert_uint_gt(count_lines(out[0]), 1);
	ck_assert_int_gt(asprintf(&want, "%s:5003: ", path), 0);
	ck_assert_msg(strstr(err[0], want) != NULL, "stderr: %s", err[0]);
	ck_assert_ptr_nonnull(strstr(err[1], "-:5003: "));
	for (int i = 0; i < 2; i++) {
		free(out[i]);
		free(err[i]);
	}
	free(want);
	free(path);
	free(text);
}
END_TEST

/* Argument names (PTR@NAME) live in the reader's lists, which the next
 * line overwrites: the ops in a batch of analyze's reader thread keep
 * their own, and a file says what the pipe does. */
START_TEST(cli_analyze_file_keeps_argument_names)
{
	char *text, *path, *out[2], *err[2];
	size_t len;
	FILE *f = open_memstream(&text, &len);
	int rc[2];

	ck_assert_ptr_nonnull(f);
	fputs("npusan-trace 1\n"
	      "alloc ptr=0x1000 size=4096 stream=1\n"
	      "launch stream=1 op=producer write=0x1000+16@out\n"
	      "launch stream=2 op=consumer read=0x1000+16@inp\n"
	      "launch stream=1 op=other write=", f);
	/* More names than the reader's lists held: they move. */
	for (int j = 0; j < 100; j++)
		fprintf(f, "%s0x%x+8@a%d", j ? "," : "", 0x9000 + j * 16, j);
	fputc('\n', f);
	ck_assert_int_eq(fclose(f), 0);
	path = tu_write_file("args.trace", text);
	rc[0] = ctl(NULL, &out[0], &err[0], "analyze", path, NULL);
	rc[1] = ctl(text, &out[1], &err[1], "analyze", "-", NULL);
	ck_assert_int_eq(rc[0], 1);
	ck_assert_int_eq(rc[1], 1);
	ck_assert_str_eq(out[0], out[1]);
	ck_assert_msg(strstr(out[0], "writing to argument out of producer"),
		      "stdout: %s", out[0]);
	ck_assert_msg(strstr(out[0], "reading from argument inp of consumer"),
		      "stdout: %s", out[0]);
	for (int i = 0; i < 2; i++) {
		free(out[i]);
		free(err[i]);
	}
	free(path);
	free(text);
}
END_TEST

static const char race[] = "npusan-trace 1\n"
			   "launch stream=1 op=a write=0x10\n"
			   "launch stream=2 op=b write=0x10\n";

/* A bad trace does not hide the traces after it: each is analysed, each
 * bad one named, and only then the exit status says bad input. */
START_TEST(cli_analyze_reads_every_trace_and_reports_each_bad_one)
{
	char *a = tu_write_file("a.trace", race);
	char *bad = tu_write_file("bad.trace", "npusan-trace 1\nbogus\n");
	char *c = tu_write_file("c.trace", race);
	char *out, *err, *want;

	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", a, bad,
			     "/nonexistent/x.trace", c, NULL),
			 2);
	/* a's finding and c's, numbered across the bad ones. */
	ck_assert_uint_eq(count_lines(out), 2);
	ck_assert_ptr_nonnull(strstr(out, "{\"id\":2,\"kind\":\"data_race\""));
	ck_assert_int_gt(asprintf(&want, "%s:2: unknown directive 'bogus'",
				  bad), 0);
	ck_assert_msg(strstr(err, want) != NULL, "%s", err);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.trace: No such"));
	free(want);
	free(out);
	free(err);
	/* The text summary counts every trace and says it is incomplete. */
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", bad, c, NULL), 2);
	ck_assert_msg(strstr(out, "npusan: 1 finding in 2 traces: 1 data race, "
				  "0 missing record_stream; incomplete: 1 "
				  "trace read only up to an error") != NULL,
		      "%s", out);
	free(out);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", c, bad, NULL), 2);
	ck_assert_ptr_nonnull(strstr(out, "1 finding in 2 traces"));
	free(out);
	free(a);
	free(bad);
	free(c);
}
END_TEST

/* Every exit 2 says what was wrong, naming the file and line. */
START_TEST(cli_analyze_every_bad_input_is_explained)
{
	size_t big = 65u << 20; /* a comment line past the 64 MiB limit */
	char *path = tu_write_file("comment.trace", ""), *err;
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs("npusan-trace 1\n# ", f);
	for (size_t i = 0; i < big; i += 4096)
		ck_assert_int_eq(fprintf(f, "%4096s", ""), 4096);
	fputs("\nflush\n", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", path, NULL), 2);
	ck_assert_msg(strstr(err, path) != NULL &&
			      strstr(err, ":2: line longer than") != NULL,
		      "%s", err);
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", "/dev/zero", NULL),
			 2);
	ck_assert_msg(strstr(err, "/dev/zero:1: line longer than") != NULL,
		      "%s", err);
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", "/", NULL), 2);
	ck_assert_msg(strstr(err, "/:1: read error: Is a directory") != NULL,
		      "%s", err);
	free(err);
	unlink(path);
	free(path);
}
END_TEST

/* A trace cut short by a killed writer is analysed up to its torn last
 * line, with a warning; without findings it is no proof of a clean run. */
/*
 * analyze never calls clean what it did not see: traces that hold no
 * operation are "nothing analysed" (4), operations lost in gaps make the
 * verdict incomplete (5, or 0 with --allow-incomplete), as `run` and
 * `report` say; with --json the verdict goes to standard error.
 */
START_TEST(cli_analyze_blind_or_incomplete_is_not_clean)
{
	char *empty = tu_write_file("empty.trace", "npusan-trace 1\n"
						   "process pid=1 job=j\n");
	char *lossy = tu_write_file("lossy.trace",
				    "npusan-trace 1\n"
				    "launch stream=0 op=a write=0x10\n"
				    "gap lost=7\n"
				    "launch stream=1 op=b read=0x10\n");
	char *unknown = tu_write_file("unknown.trace",
				      "npusan-trace 1\n"
				      "launch stream=0 op=a write=0x10\n"
				      "gap\n");
	char *out, *err;

	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", empty, NULL), 4);
	ck_assert_msg(strstr(out, "npusan: nothing analysed: the trace holds "
				  "no operation") != NULL, "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", lossy, NULL), 5);
	ck_assert_msg(strstr(out, "no findings in 1 trace; 7 operations lost: "
				  "the verdict may be incomplete") != NULL,
		      "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", unknown,
			     NULL),
			 5);
	ck_assert_str_eq(out, "");
	ck_assert_msg(strstr(err, "1 gap of unknown size") != NULL, "%s", err);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--allow-incomplete",
			     lossy, NULL),
			 0);
	free(out);
	free(err);
	free(empty);
	free(lossy);
	free(unknown);
}
END_TEST

START_TEST(cli_analyze_torn_last_line_is_read_up_to_it)
{
	char *torn = tu_write_file("torn.trace",
				   "npusan-trace 1\n"
				   "launch stream=1 op=a write=0x10\n"
				   "launch stream=2 op=b write=0x10\n"
				   "launch stream=2 op=c wri");
	char *quiet = tu_write_file("quiet.trace",
				    "npusan-trace 1\n"
				    "launch stream=1 op=a write=0x10\n"
				    "launch stream=1 op=c write=0x");
	char *out, *err, *want;

	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", torn,
			     NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 1);
	ck_assert_int_gt(asprintf(&want, "%s:4: warning: the last line is "
				  "cut short", torn), 0);
	ck_assert_msg(strstr(err, want) != NULL, "%s", err);
	free(want);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", quiet, NULL), 5);
	ck_assert_int_gt(asprintf(&want, "%s:3: warning: the last line is "
				  "cut short", quiet), 0);
	ck_assert_msg(strstr(err, want) != NULL, "%s", err);
	ck_assert_msg(strstr(out, "npusan: no findings in 1 trace; "
				  "incomplete: 1 trace cut short") != NULL,
		      "%s", out);
	free(want);
	free(out);
	free(err);
	free(torn);
	free(quiet);
}
END_TEST

START_TEST(cli_analyze_missing_file_is_named)
{
	char *err;

	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze",
			     "/nonexistent/x.trace", NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.trace"));
	free(err);
}
END_TEST

/* Past the engine's stream limit, analyze goes on: the operations it
 * skips are counted lost in a gap, as the daemon counts them, and the race
 * after them is found. */
START_TEST(cli_analyze_streams_past_the_limit_are_skipped_as_lost)
{
	size_t cap = 64 * 2000, off = 0;
	char *text = malloc(cap), *out, *err;

	ck_assert_ptr_nonnull(text);
	off += (size_t)snprintf(text, cap, "npusan-trace 1\n");
	for (int i = 1; i <= 1100; i++)
		off += (size_t)snprintf(text + off, cap - off,
					"stream_create stream=%d\n", i);
	off += (size_t)snprintf(text + off, cap - off,
				"launch stream=0 op=w write=0x1000+8\n"
				"launch stream=1 op=r read=0x1000+8\n");
	ck_assert_int_eq(ctl(text, &out, &err, "analyze", "--json", "-", NULL),
			 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"data_race\""), 1);
	/* Streams 0 to 1023 fit; 1024 to 1100 do not. */
	ck_assert_msg(strstr(err, "-: 77 operations on streams beyond the "
				  "first 1024 were not analysed (counted lost, "
				  "in 1 gap") != NULL,
		      "%s", err);
	free(out);
	free(err);
	free(text);
}
END_TEST

/* The whole of file `path` (caller frees), or NULL when it cannot be read. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;
	FILE *m;
	int c;

	if (f == NULL)
		return NULL;
	m = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(m);
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(f);
	fclose(m);
	return buf;
}

/* The one entry of directory `dir` (caller frees), or NULL if none. */
static char *only_entry(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char *name = NULL;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		ck_assert_msg(name == NULL, "more than one file in %s", dir);
		name = strdup(e->d_name);
	}
	closedir(d);
	return name;
}

START_TEST(cli_analyze_output_file_takes_the_report)
{
	char *path = tu_write_file("spec.trace", spec_example), *dir = tu_tmpdir();
	char tmpl[512], want[512], file[1024], *name, *out, *err, *json;
	struct stat st;
	int pid;

	umask(022);
	setenv("NPUSAN_TEST_TAG", "ci-7", 1);
	snprintf(tmpl, sizeof(tmpl), "%s/npusan-%%p-%%q{NPUSAN_TEST_TAG}-%%%%.json",
		 dir);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", "--output",
			     tmpl, path, NULL),
			 1);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "");
	name = only_entry(dir);
	ck_assert_ptr_nonnull(name);
	ck_assert_int_eq(sscanf(name, "npusan-%d-ci-7-%%.json", &pid), 1);
	snprintf(want, sizeof(want), "npusan-%d-ci-7-%%.json", pid);
	ck_assert_str_eq(name, want);
	snprintf(file, sizeof(file), "%s/%s", dir, name);
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0644);
	json = slurp(file);
	ck_assert_uint_eq(count_lines(json), 2);
	ck_assert_ptr_nonnull(strstr(json, "{\"id\":1,\"kind\":\"data_race\""));
	free(json);
	free(out);
	free(err);
	/* Text: the verdict goes with the report; the file is truncated. */
	snprintf(file, sizeof(file), "%s/report.txt", dir);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--output", file,
			     path, NULL),
			 1);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", "--output", file,
			     "--op", "aten::randn", path, NULL),
			 1);
	ck_assert_str_eq(out, "");
	json = slurp(file);
	ck_assert_ptr_null(strstr(json, "detected a missing record_stream"));
	ck_assert_ptr_nonnull(strstr(json, "possible data race"));
	ck_assert_ptr_nonnull(strstr(json, "npusan: 2 findings in 1 trace"));
	ck_assert_ptr_null(strstr(json, "{\"id\":"));
	free(json);
	free(out);
	free(name);
	free(dir);
	free(path);
}
END_TEST

/* `analyze --output TMPL` of `trace` exits 2, says `says`, makes no file. */
static void output_refused(const char *trace, const char *dir,
			   const char *tmpl, const char *says)
{
	char *out, *err, *left;

	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--output", tmpl,
			     trace, NULL),
			 2);
	ck_assert_msg(strstr(err, says) != NULL, "%s: %s", tmpl, err);
	ck_assert_str_eq(out, "");
	left = only_entry(dir);
	ck_assert_msg(left == NULL, "%s left %s", tmpl, left);
	free(out);
	free(err);
}

START_TEST(cli_analyze_output_errors_are_usage_errors)
{
	char *path = tu_write_file("spec.trace", spec_example), *dir = tu_tmpdir();
	char tmpl[512];

	unsetenv("NPUSAN_TEST_UNSET");
	snprintf(tmpl, sizeof(tmpl), "%s/r-%%y", dir);
	output_refused(path, dir, tmpl, "--output: unknown '%y'");
	snprintf(tmpl, sizeof(tmpl), "%s/r-%%", dir);
	output_refused(path, dir, tmpl, "--output: unknown '%'");
	snprintf(tmpl, sizeof(tmpl), "%s/r-%%q{HOME", dir);
	output_refused(path, dir, tmpl, "'%q' must be followed by {NAME} "
					"with a closing '}'");
	snprintf(tmpl, sizeof(tmpl), "%s/r-%%qHOME", dir);
	output_refused(path, dir, tmpl, "with a closing '}'");
	snprintf(tmpl, sizeof(tmpl), "%s/r-%%q{NPUSAN_TEST_UNSET}", dir);
	output_refused(path, dir, tmpl,
		       "%q{NPUSAN_TEST_UNSET}: $NPUSAN_TEST_UNSET is not set");
	snprintf(tmpl, sizeof(tmpl), "%s/no/such/dir/r", dir);
	output_refused(path, dir, tmpl, "cannot open --output file");
	output_refused(path, dir, "", "names no file");
	free(dir);
	free(path);
}
END_TEST

START_TEST(cli_analyze_print_limit_prints_the_first_n)
{
	char *path = tu_write_file("spec.trace", spec_example), *out, *err;

	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json",
			     "--print-limit", "1", path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 1);
	ck_assert_ptr_nonnull(strstr(out, "{\"id\":1,\"kind\":\"data_race\""));
	ck_assert_str_eq(err, "npusanctl: 1 more finding not printed "
			      "(--print-limit 1)\n");
	free(out);
	free(err);
	/* 0: none printed, the verdict and exit status as ever. */
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--print-limit", "0",
			     path, NULL),
			 1);
	ck_assert_ptr_null(strstr(out, "possible data race"));
	ck_assert_ptr_nonnull(strstr(out, "npusan: 2 findings in 1 trace"));
	ck_assert_str_eq(err, "npusanctl: 2 more findings not printed "
			      "(--print-limit 0)\n");
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json",
			     "--print-limit", "5", path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 2);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", "--print-limit", "-1",
			     path, NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--print-limit needs a number"));
	free(err);
	free(path);
}
END_TEST

START_TEST(cli_analyze_op_filters_choose_findings_and_exit_status)
{
	char *path = tu_write_file("spec.trace", spec_example), *out, *err;
	char *lossy = tu_write_file("lossy.trace",
				    "npusan-trace 1\n"
				    "launch stream=0 op=fwd write=0x10\n"
				    "gap lost=7\n"
				    "launch stream=1 op=comm read=0x10\n");

	/* The previous access's operator is enough for --op. */
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", "--op",
			     "aten::rand*", path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 1);
	ck_assert_ptr_nonnull(strstr(out, "\"kind\":\"data_race\""));
	ck_assert_str_eq(err, "npusanctl: 1 finding filtered out by "
			      "--op/--exclude-op\n");
	free(out);
	free(err);
	/* Repeatable: any pattern matches. */
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", "--op",
			     "nothing*", "--op", "aten::add.Tensor", path,
			     NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 2);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json",
			     "--exclude-op", "aten::randn", path, NULL),
			 1);
	ck_assert_uint_eq(count_lines(out), 1);
	ck_assert_ptr_nonnull(strstr(out, "\"kind\":\"missing_record_stream\""));
	free(out);
	free(err);
	/* All filtered out: exit 0, and stderr says what was left out. */
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--exclude-op",
			     "aten::*", path, NULL),
			 0);
	ck_assert_ptr_null(strstr(out, "possible data race"));
	ck_assert_ptr_nonnull(strstr(err, "npusanctl: 2 findings filtered out "
					  "by --op/--exclude-op"));
	free(out);
	free(err);
	/* ...but what lost operations is still not clean. */
	ck_assert_int_eq(ctl(NULL, &out, &err, "analyze", "--json", "--op",
			     "none", lossy, NULL),
			 5);
	ck_assert_ptr_nonnull(strstr(err, "the verdict may be incomplete"));
	free(out);
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", "--op", "", path,
			     NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--op needs a pattern"));
	free(err);
	free(lossy);
	free(path);
}
END_TEST

START_TEST(cli_usage_errors_exit_2_and_help_exits_0)
{
	char *out, *err;

	ck_assert_int_eq(ctl(NULL, NULL, NULL, NULL), 2);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "frobnicate", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "unknown command 'frobnicate'"));
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, &err, "analyze", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "no trace given"));
	free(err);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--bogus", "x",
			     NULL),
			 2);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--error-exitcode",
			     "300", "x", NULL),
			 2);
	ck_assert_int_eq(ctl(NULL, NULL, NULL, "analyze", "--error-exitcode",
			     NULL),
			 2);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "analyze"));
	free(out);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "analyze", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "--error-exitcode"));
	ck_assert_ptr_nonnull(strstr(out, "Exit status"));
	free(out);
	ck_assert_int_eq(ctl(NULL, &out, NULL, "--version", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "npusanctl "));
	free(out);
}
END_TEST

static Suite *cli_suite(void)
{
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("analyze");

	tcase_add_test(tc, cli_analyze_json_of_spec_example_is_exact);
	tcase_add_test(tc, cli_analyze_text_report_explains_both_kinds);
	tcase_add_test(tc, cli_analyze_names_where_memory_was_freed);
	tcase_add_test(tc, cli_analyze_exit_status_follows_findings);
	tcase_add_test(tc, cli_analyze_dedups_unless_every);
	tcase_add_test(tc, cli_analyze_reads_stdin_and_numbers_across_traces);
	tcase_add_test(tc, cli_analyze_without_process_line_has_null_process);
	tcase_add_test(tc, cli_analyze_json_escapes_strings);
	tcase_add_test(tc, cli_analyze_bad_line_names_file_and_line);
	tcase_add_test(tc, cli_analyze_file_and_pipe_agree_over_many_batches);
	tcase_add_test(tc, cli_analyze_file_keeps_argument_names);
	tcase_add_test(tc, cli_analyze_reads_every_trace_and_reports_each_bad_one);
	tcase_add_test(tc, cli_analyze_every_bad_input_is_explained);
	tcase_add_test(tc, cli_analyze_torn_last_line_is_read_up_to_it);
	tcase_add_test(tc, cli_analyze_missing_file_is_named);
	tcase_add_test(tc, cli_analyze_displays_controls_safely);
	tcase_add_test(tc, cli_analyze_blind_or_incomplete_is_not_clean);
	tcase_add_test(tc, cli_analyze_streams_past_the_limit_are_skipped_as_lost);
	tcase_add_test(tc, cli_analyze_output_file_takes_the_report);
	tcase_add_test(tc, cli_analyze_output_errors_are_usage_errors);
	tcase_add_test(tc, cli_analyze_print_limit_prints_the_first_n);
	tcase_add_test(tc, cli_analyze_op_filters_choose_findings_and_exit_status);
	tcase_add_test(tc, cli_usage_errors_exit_2_and_help_exits_0);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(cli_suite());
}
