/*
 * test_report.c - `npusanctl report --job J` and the daemon's finding log
 * lines, end to end as test_daemon.c runs the product: npusand (at its
 * default log level, stderr into a file) on a socket in a temporary
 * directory, npusan-replay pushing known traces, npusanctl asking.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* The default log level: finding lines must show there. */
#define DAEMON_ARGS NULL

/* A rank that makes no mistake (rank 1 of job demo). */
static const char clean_trace[] =
	"npusan-trace 1\n"
	"process pid=1 job=demo rank=1\n"
	"alloc ptr=0x1000 size=64 stream=0\n"
	"stream_create stream=1\n"
	"launch stream=0 op=fill write=0x1000+64\n"
	"stream_wait stream=1 on=0\n"
	"launch stream=1 op=use read=0x1000+64\n"
	"device_sync\n"
	"free ptr=0x1000\n";

/* `npusanctl ARGS...` (NULL-terminated); its stdout and stderr in *out
 * and *err (either NULL to discard). */
static int ctlv(char **out, char **err, ...)
{
	const char *argv[16];
	char *bin = strdup(tu_bin("npusanctl"));
	va_list ap;
	int n = 1, st;

	argv[0] = bin;
	va_start(ap, err);
	while ((argv[n] = va_arg(ap, const char *)) != NULL)
		ck_assert_int_lt(++n, 16);
	va_end(ap);
	st = tu_run(argv, NULL, out, err);
	free(bin);
	return st;
}

/* Runs npusan-replay on `a` and `b` (b may be NULL). */
static void replay(const char *a, const char *b)
{
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	const char *argv[] = { rep, a, b, NULL };

	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	free(rep);
}

/* Polls `npusanctl list --json --job JOB` until `n` processes exited, so
 * that their operation counts are final. */
static void wait_exited(const char *job, unsigned n)
{
	char *out = NULL;

	for (int i = 0; i < 500; i++) {
		free(out);
		out = NULL;
		ctlv(&out, NULL, "list", "--json", "--job", job, NULL);
		if (out != NULL && tu_count_lines(out, "\"exited\"") == n)
			break;
		tu_nap_ms(20);
	}
	ck_assert_msg(out && tu_count_lines(out, "\"exited\"") == n, "%s", out);
	free(out);
}

/* Polls the findings of `job` until there are `n`. */
static void wait_findings(const char *job, unsigned n)
{
	char *out = NULL;

	for (int i = 0; i < 500; i++) {
		free(out);
		out = NULL;
		ctlv(&out, NULL, "findings", "--json", "--job", job, NULL);
		if (out != NULL && tu_count_lines(out, "\"kind\"") >= n)
			break;
		tu_nap_ms(20);
	}
	ck_assert_msg(out && tu_count_lines(out, "\"kind\"") == n, "%s", out);
	free(out);
}

/* The whole of file `path` (caller frees); NULL when it does not exist. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long n;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = calloc(1, (size_t)n + 1);
	ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
	fclose(f);
	return text;
}

/* Occurrences of `needle` in `text`. */
static unsigned count_str(const char *text, const char *needle)
{
	unsigned n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

/* Entries of directory `dir` whose names contain `part`. */
static unsigned dir_count(const char *dir, const char *part)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		n += strstr(e->d_name, part) != NULL;
	closedir(d);
	return n;
}

/* Python's XML parser over `path`: the number of elements named `tag`
 * (or -1 when the file is not XML); -2 without python3. */
static int xml_count(const char *path, const char *tag)
{
	const char *py = access("/usr/bin/python3", X_OK) == 0 ?
				 "/usr/bin/python3" :
				 NULL;
	char code[512], *out = NULL;
	const char *argv[4];
	int st, n;

	if (py == NULL)
		return -2;
	snprintf(code, sizeof(code),
		 "import sys, xml.etree.ElementTree as E\n"
		 "try:\n t = E.parse(sys.stdin)\n"
		 "except E.ParseError as e:\n print(-1); sys.exit(0)\n"
		 "print(len(list(t.iter('%s'))))\n",
		 tag);
	argv[0] = py;
	argv[1] = "-c";
	argv[2] = code;
	argv[3] = NULL;
	{
		char *text = slurp(path);

		ck_assert_ptr_nonnull(text);
		st = tu_run(argv, text, &out, NULL);
		free(text);
	}
	ck_assert_int_eq(st, 0);
	n = atoi(out);
	free(out);
	return n;
}

/* demo.trace as rank 0 and a clean rank 1 of job demo: exit 1, the
 * verdict, the JSON, a JUnit file with a testcase per rank and a failure
 * per finding, and exactly one log line per finding row. */
START_TEST(report_job_with_findings)
{
	char demo[PATH_MAX], junit[PATH_MAX + 16], *clean, *out, *err, *xml,
		*log;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	snprintf(demo, sizeof(demo), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	clean = tu_write_file("clean.trace", clean_trace);
	replay(demo, clean);
	wait_findings("demo", 2);
	wait_exited("demo", 2);
	snprintf(junit, sizeof(junit), "%s/out.xml", d.dir);

	ck_assert_int_eq(ctlv(&out, &err, "report", "--job", "demo",
			      "--junit", junit, NULL),
			 1);
	ck_assert_msg(strstr(out, "npusan: job demo: 2 findings (1 data race, "
				  "1 missing record_stream) on rank 0; 2 "
				  "ranks, 36 operations, 0 lost\n") != NULL,
		      "%s", out);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);

	/* --error-exitcode, and --json. */
	ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", "demo",
			      "--error-exitcode", "7", NULL),
			 7);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "demo", "--json",
			      NULL),
			 1);
	ck_assert_uint_eq(tu_count_lines(out, "{"), 1);
	ck_assert_ptr_nonnull(strstr(out, "{\"job\":\"demo\",\"run\":null,"
					  "\"runs\":1,\"verdict\":"
					  "\"npusan: job demo: 2 findings"));
	ck_assert_ptr_nonnull(strstr(out, "\"clean\":false,\"analysed\":true,"
					  "\"complete\":true,\"ranks\":2,\"processes\":2,"
					  "\"operations\":36,\"lost\":0,"
					  "\"findings\":2,\"suppressed\":0,"
					  "\"occurrences\":2,"
					  "\"by_kind\":{\"data_race\":1,"
					  "\"missing_record_stream\":1},"
					  "\"by_rank\":[{\"rank\":0,"));
	ck_assert_ptr_nonnull(strstr(out, "\"operations\":29,\"lost\":0,"
					  "\"findings\":2,"));
	ck_assert_ptr_nonnull(strstr(out, "{\"rank\":1,"));
	ck_assert_ptr_nonnull(strstr(out, "\"operations\":7,\"lost\":0,"
					  "\"findings\":0,\"by_kind\":{},"
					  "\"ids\":[]}]}\n"));
	free(out);

	/* The JUnit file: one testcase per rank, one failure per finding,
	 * each with its report; no temporary file left beside it. */
	xml = slurp(junit);
	ck_assert_ptr_nonnull(xml);
	ck_assert_uint_eq(count_str(xml, "<testcase "), 2);
	ck_assert_uint_eq(count_str(xml, "<failure "), 2);
	ck_assert_uint_eq(count_str(xml, "</failure>"), 2);
	ck_assert_ptr_nonnull(strstr(xml, " name=\"rank 0\">"));
	ck_assert_ptr_nonnull(strstr(xml, " name=\"rank 1\"/>"));
	ck_assert_ptr_nonnull(strstr(xml, "message=\"data_race: "
					  "hccl::all_reduce / aten::mm; at "
					  "dist.py:17 in all_reduce_grads, "
					  "train.py:90 in step; previous at "
					  "model.py:52 in backward, train.py:88 "
					  "in step\""));
	ck_assert_ptr_nonnull(strstr(xml, "message=\"missing_record_stream: "
					  "aten::_to_copy; at metrics.py:12 in "
					  "log_loss, train.py:98 in step\""));
	ck_assert_ptr_nonnull(strstr(xml, "type=\"missing_record_stream\""));
	ck_assert_ptr_nonnull(strstr(xml, "npusan detected a possible data "
					  "race"));
	/* The clean rank's testcase is empty. */
	ck_assert_ptr_null(strstr(strstr(xml, "\"rank 1\""), "<failure"));
	if (xml_count(junit, "failure") != -2) {
		ck_assert_int_eq(xml_count(junit, "failure"), 2);
		ck_assert_int_eq(xml_count(junit, "testcase"), 2);
		ck_assert_int_eq(xml_count(junit, "testsuite"), 1);
	}
	ck_assert_uint_eq(dir_count(d.dir, "out.xml"), 1);
	free(xml);

	/* One log line per finding row, at the default log level. */
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	snprintf(junit, sizeof(junit), "%s/npusand.log", d.dir);
	log = slurp(junit);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(tu_count_lines(log, ": finding id=") == 2, "%s", log);
	ck_assert_uint_eq(tu_count_lines(log, "info: finding id=1 kind=data_race "
					   "job=demo rank=0 pid="),
			  1);
	ck_assert_uint_eq(tu_count_lines(log, "info: finding id=2 kind="
					   "missing_record_stream job=demo "
					   "rank=0 pid="),
			  1);
	ck_assert_uint_eq(tu_count_lines(log, "op=hccl::all_reduce "
					   "previous_op=aten::mm stream=1 "
					   "previous_stream=0 ptr=0x"),
			  1);
	/* The clean rank registered, and has no finding line. */
	ck_assert_uint_eq(tu_count_lines(log, "job demo rank 1"), 1);
	ck_assert_uint_eq(tu_count_lines(log, "rank=1"), 0);
	ck_assert_uint_eq(tu_count_lines(log, "finding id=3"), 0);
	free(log);
	free(clean);
	free(d.dir);
}
END_TEST

/* The same race twice in one process is one row with count 2: one log
 * line, not two. Markup and quotes in the job and the operator are
 * escaped in the log line and in the JUnit file, which stays XML. */
START_TEST(report_repeat_logs_once_and_escapes)
{
	static const char trace[] =
		"npusan-trace 1\n"
		"process pid=1 job=\"a<&\\\"b c\" rank=0\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"stream_create stream=1\n"
		"launch stream=0 op=\"fill <&\\\"]]>x\" write=0x1000+64\n"
		"launch stream=1 op=use read=0x1000+64\n"
		"alloc ptr=0x2000 size=64 stream=0\n"
		"launch stream=0 op=\"fill <&\\\"]]>x\" write=0x2000+64\n"
		"launch stream=1 op=use read=0x2000+64\n";
	char junit[PATH_MAX + 16], *t = tu_write_file("rep.trace", trace),
				   *out, *xml, *log;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	replay(t, NULL);
	wait_findings("a<&\"b c", 1);
	wait_exited("a<&\"b c", 1);
	ck_assert_int_eq(ctlv(&out, NULL, "findings", "--json", NULL), 1);
	ck_assert_ptr_nonnull(strstr(out, "\"count\":2"));
	free(out);
	snprintf(junit, sizeof(junit), "%s/escaped.xml", d.dir);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "a<&\"b c",
			      "--junit", junit, NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(out, "npusan: job a<&\"b c: 1 finding "
					  "(1 data race) on rank 0; 1 rank, 7 "
					  "operations, 0 lost\n"));
	free(out);
	xml = slurp(junit);
	ck_assert_ptr_nonnull(strstr(xml, "name=\"npusan job a&lt;&amp;&quot;b "
					  "c\""));
	ck_assert_ptr_nonnull(strstr(xml, "message=\"data_race: use / fill "
					  "&lt;&amp;&quot;]]&gt;x\""));
	ck_assert_ptr_null(strstr(xml, "]]>x"));
	if (xml_count(junit, "failure") != -2)
		ck_assert_int_eq(xml_count(junit, "failure"), 1);
	free(xml);
	tu_daemon_stop(&d, SIGTERM);
	snprintf(junit, sizeof(junit), "%s/npusand.log", d.dir);
	log = slurp(junit);
	ck_assert_msg(tu_count_lines(log, ": finding id=") == 1, "%s", log);
	ck_assert_uint_eq(tu_count_lines(log, "finding id=1 kind=data_race "
					   "job=\"a<&\\\"b c\" rank=0 pid="),
			  1);
	ck_assert_uint_eq(tu_count_lines(log, "op=use previous_op=\"fill "
					   "<&\\\"]]>x\" stream=1"),
			  1);
	free(log);
	free(t);
	free(d.dir);
}
END_TEST

/*
 * `report --junit` into a FIFO in `dir`, as into /dev/stdout or /dev/null:
 * the report goes through it, and it is still a FIFO afterwards. A file
 * renamed over it would replace it (as root, /dev/null itself).
 */
static void junit_into_fifo(char *junit, size_t len, const char *dir)
{
	struct stat st;
	pid_t reader;
	int status;

	snprintf(junit, len, "%s/junit.fifo", dir);
	ck_assert_int_eq(mkfifo(junit, 0600), 0);
	reader = fork();
	ck_assert_int_ge(reader, 0);
	if (reader == 0) {
		char buf[4096];
		ssize_t n, got = 0;
		int fd = open(junit, O_RDONLY);

		while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
			got += n;
		_exit(got > 0 ? 0 : 1);
	}
	ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", "demo",
			      "--junit", junit, NULL),
			 0);
	ck_assert_int_eq(stat(junit, &st), 0);
	if (!S_ISFIFO(st.st_mode))
		kill(reader, SIGKILL); /* blocked on the FIFO now gone */
	ck_assert_int_eq(waitpid(reader, &status, 0), reader);
	ck_assert_msg(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A clean job exits 0 and says so; an unknown job is bad input (2), and
 * no JUnit file is written for it. */
START_TEST(report_clean_and_unknown_job)
{
	char junit[PATH_MAX + 16], *clean, *out, *err, *log;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	clean = tu_write_file("clean.trace", clean_trace);
	replay(clean, NULL);
	wait_exited("demo", 1);
	snprintf(junit, sizeof(junit), "%s/clean.xml", d.dir);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "demo",
			      "--junit", junit, NULL),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "npusan: job demo: clean; 1 rank, 7 "
					  "operations, 0 lost\n"));
	free(out);
	out = slurp(junit);
	ck_assert_uint_eq(count_str(out, "<testcase "), 1);
	ck_assert_uint_eq(count_str(out, "<failure"), 0);
	free(out);
	junit_into_fifo(junit, sizeof(junit), d.dir);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "demo", "--json",
			      NULL),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "\"clean\":true,"));
	ck_assert_ptr_nonnull(strstr(out, "\"findings\":0,"));
	free(out);

	snprintf(junit, sizeof(junit), "%s/none.xml", d.dir);
	ck_assert_int_eq(ctlv(&out, &err, "report", "--job", "nosuchjob",
			      "--junit", junit, NULL),
			 2);
	ck_assert_str_eq(out, "");
	ck_assert_ptr_nonnull(strstr(err, "no process of job 'nosuchjob'"));
	ck_assert_int_eq(access(junit, F_OK), -1);
	free(out);
	free(err);
	/* Usage errors. */
	ck_assert_int_eq(ctlv(NULL, NULL, "report", NULL), 2);
	ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", "demo",
			      "--error-exitcode", "256", NULL),
			 2);
	ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", "demo", "extra",
			      NULL),
			 2);
	/* A JUnit file that cannot be written. */
	ck_assert_int_eq(ctlv(NULL, &err, "report", "--job", "demo", "--junit",
			      "/nonexistent/dir/x.xml", NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "cannot write"));
	free(err);
	tu_daemon_stop(&d, SIGTERM);
	snprintf(junit, sizeof(junit), "%s/npusand.log", d.dir);
	log = slurp(junit);
	ck_assert_uint_eq(tu_count_lines(log, "finding id="), 0);
	free(log);
	free(clean);
	free(d.dir);
}
END_TEST

/*
 * A job npusan saw nothing of (a rank registered, no operation came) and
 * one it saw only part of (operations lost, nothing found): neither is
 * clean, in the verdict, the exit status, the JSON or the JUnit file.
 */
START_TEST(report_blind_or_incomplete_job_is_not_clean)
{
	static const char blind_trace[] = "npusan-trace 1\n"
					  "process pid=1 job=blind rank=0\n";
	static const char lossy_trace[] = "npusan-trace 1\n"
					  "process pid=1 job=lossy rank=0\n"
					  "launch stream=0 op=a write=0x10+8\n"
					  "gap lost=12\n"
					  "launch stream=0 op=b write=0x10+8\n";
	char junit[PATH_MAX + 16], *blind, *lossy, *out, *xml;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	blind = tu_write_file("blind.trace", blind_trace);
	lossy = tu_write_file("lossy.trace", lossy_trace);
	replay(blind, NULL);
	replay(lossy, NULL);
	wait_exited("blind", 1);
	wait_exited("lossy", 1);
	snprintf(junit, sizeof(junit), "%s/blind.xml", d.dir);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "blind",
			      "--junit", junit, NULL),
			 4);
	ck_assert_msg(strstr(out, "npusan: job blind: nothing analysed: 1 "
				  "process registered, but npusan received no "
				  "operation") != NULL,
		      "%s", out);
	ck_assert_ptr_null(strstr(out, "clean"));
	free(out);
	xml = slurp(junit);
	ck_assert_ptr_nonnull(strstr(xml, "errors=\"1\""));
	ck_assert_ptr_nonnull(strstr(xml, "<error type=\"nothing_analysed"));
	free(xml);
	if (xml_count(junit, "error") != -2)
		ck_assert_int_eq(xml_count(junit, "error"), 1);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "blind", "--json",
			      NULL),
			 4);
	ck_assert_ptr_nonnull(strstr(out, "\"clean\":false,"
					  "\"analysed\":false,"));
	free(out);

	snprintf(junit, sizeof(junit), "%s/lossy.xml", d.dir);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "lossy",
			      "--junit", junit, NULL),
			 5);
	ck_assert_msg(strstr(out, "npusan: job lossy: no findings in what was "
				  "analysed; 1 rank, 2 operations, 12 lost") !=
			      NULL,
		      "%s", out);
	free(out);
	xml = slurp(junit);
	ck_assert_ptr_nonnull(strstr(xml, "<error type=\"incomplete\""));
	free(xml);
	/* The user's opt-in: 0, and a JUnit file without the error. */
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "lossy",
			      "--allow-incomplete", "--junit", junit, NULL),
			 0);
	free(out);
	xml = slurp(junit);
	ck_assert_ptr_null(strstr(xml, "<error"));
	ck_assert_ptr_nonnull(strstr(xml, "errors=\"0\""));
	free(xml);
	ck_assert_int_eq(ctlv(&out, NULL, "report", "--job", "lossy", "--json",
			      "--allow-incomplete", NULL),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "\"clean\":false,\"analysed\":true,"
					  "\"complete\":false,"));
	free(out);
	tu_daemon_stop(&d, SIGTERM);
	free(blind);
	free(lossy);
	free(d.dir);
}
END_TEST

/*
 * Asked the moment a job's processes exited, report and findings tell
 * what the processes left in their rings, not "clean" a drain too early.
 */
START_TEST(report_right_after_exit_sees_the_last_operations)
{
	char trace[512], job[32], *path, *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	for (int i = 0; i < 3; i++) {
		snprintf(job, sizeof(job), "quick%d", i);
		snprintf(trace, sizeof(trace),
			 "npusan-trace 1\n"
			 "process pid=1 job=%s rank=0\n"
			 "stream_create stream=1\n"
			 "launch stream=0 op=w write=0x1000+64\n"
			 "launch stream=1 op=r read=0x1000+64\n",
			 job);
		path = tu_write_file("quick.trace", trace);
		replay(path, NULL);
		ck_assert_int_eq(ctlv(&out, &err, i == 1 ? "findings" : "report",
				      "--job", job, NULL),
				 1);
		ck_assert_msg(strstr(out, i == 1 ? "data_race" :
						   "1 finding (1 data race)"),
			      "%s%s", out, err);
		free(out);
		free(err);
		free(path);
	}
	tu_daemon_stop(&d, SIGTERM);
	free(d.dir);
}
END_TEST

/* A launcher: no rank, and it does nothing of its own. */
static const char launcher_trace[] = "npusan-trace 1\n"
				     "process pid=1 job=demo\n";

/* The testcase lines of `xml` (up to their '>') that contain `part`. */
static unsigned testcases_with(const char *xml, const char *part)
{
	unsigned n = 0;

	for (const char *p = xml; (p = strstr(p, "<testcase ")) != NULL; p++) {
		const char *end = strchr(p, '>');
		const char *hit = strstr(p, part);

		ck_assert_ptr_nonnull(end);
		n += hit != NULL && hit < end;
	}
	return n;
}

/* `s` with every time of day of a finding report ("Seen once, at
 * 2026-12-02T02:28:51.123Z") as 'T's: all that may differ between runs. */
static void mask_times(char *s)
{
	for (char *p = s; *p != '\0'; p++) {
		size_t n = strspn(p, "0123456789-:.T");

		if (n >= 20 && p[4] == '-' && p[10] == 'T' && p[n] == 'Z')
			memset(p, 'T', n);
	}
}

/* Job demo (demo.trace as rank 0, a clean rank 1, a launcher) on a fresh
 * daemon; its JUnit file (caller frees). Pids differ from call to call. */
static char *junit_of_demo_run(void)
{
	char demo[PATH_MAX], junit[PATH_MAX + 16], *clean, *launcher, *xml;
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	snprintf(demo, sizeof(demo), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	clean = tu_write_file("clean.trace", clean_trace);
	launcher = tu_write_file("launcher.trace", launcher_trace);
	{
		const char *argv[] = { rep, demo, clean, launcher, NULL };

		ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	}
	wait_findings("demo", 2);
	wait_exited("demo", 3);
	snprintf(junit, sizeof(junit), "%s/run.xml", d.dir);
	ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", "demo", "--junit",
			      junit, NULL),
			 1);
	xml = slurp(junit);
	ck_assert_ptr_nonnull(xml);
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(launcher);
	free(clean);
	free(rep);
	free(d.dir);
	return xml;
}

/* CI servers tell "fixed" and "regressed" by the testcases' names: two
 * runs of one job give the same file, named by job, node and rank, no
 * pid in any testcase, no testcase for the launcher. */
START_TEST(report_junit_same_from_run_to_run)
{
	char *a = junit_of_demo_run(), *b = junit_of_demo_run();
	char host[256], cls[300];

	mask_times(a);
	mask_times(b);
	ck_assert_msg(strcmp(a, b) == 0, "the two runs' JUnit files differ");
	ck_assert_uint_eq(count_str(a, "<testcase "), 2);
	ck_assert_uint_eq(testcases_with(a, "pid"), 0);
	ck_assert_uint_eq(testcases_with(a, "without a rank"), 0);
	ck_assert_uint_eq(testcases_with(a, " name=\"rank 0\""), 1);
	ck_assert_uint_eq(testcases_with(a, " name=\"rank 1\""), 1);
	ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
	host[sizeof(host) - 1] = '\0';
	snprintf(cls, sizeof(cls), "classname=\"npusan.demo.%s\"", host);
	ck_assert_uint_eq(testcases_with(a, cls), 2);
	ck_assert_ptr_nonnull(strstr(a, "tests=\"2\" failures=\"1\""));
	free(a);
	free(b);
}
END_TEST

/* A race between native stacks as build `b` of the program recorded it:
 * each build has its own offsets, build id and directory. */
static char *native_race_trace(int b)
{
	char text[2048], name[32];

	snprintf(text, sizeof(text),
		 "npusan-trace 1\n"
		 "process pid=%d job=native%d rank=0\n"
		 "stack id=1 frame=\"step+0x%x (/opt/build%d/bin/train+0x%x) "
		 "(BuildId: %02x11223344)\" frame=\"/opt/build%d/lib/libk.so+0x%x "
		 "(BuildId: %02x55667788)\"\n"
		 "stream_create stream=1\n"
		 "alloc ptr=0x1000 size=64 stream=0 stack=1\n"
		 "launch stream=0 op=a write=0x1000+64 stack=1\n"
		 "launch stream=1 op=b write=0x1000+64 stack=1\n",
		 100 + b, b, 0x10 + b, b, 0x2000 + b, b, b, 0x300 + b, b);
	snprintf(name, sizeof(name), "native%d.trace", b);
	return tu_write_file(name, text);
}

/* The failure message of the first failure in `xml` (caller frees). */
static char *junit_message(const char *xml)
{
	const char *p = strstr(xml, "<failure "), *q, *end;

	ck_assert_ptr_nonnull(p);
	q = strstr(p, "message=\"");
	ck_assert_ptr_nonnull(q);
	q += strlen("message=\"");
	end = strchr(q, '"');
	ck_assert_ptr_nonnull(end);
	return strndup(q, (size_t)(end - q));
}

/* A failure's message is its signature, which CI servers compare from
 * build to build: native frames appear as symbol and module name, without
 * what each build changes (offsets, build id, directory). */
START_TEST(report_junit_signature_survives_a_rebuild)
{
	char *rep = strdup(tu_bin("agent/npusan-replay")), *msg[2], *xml;
	char junit[PATH_MAX + 16], job[16];
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	for (int b = 0; b < 2; b++) {
		char *trace = native_race_trace(b);
		const char *argv[] = { rep, trace, NULL };

		ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
		snprintf(job, sizeof(job), "native%d", b);
		wait_findings(job, 1);
		wait_exited(job, 1);
		snprintf(junit, sizeof(junit), "%s/%s.xml", d.dir, job);
		ck_assert_int_eq(ctlv(NULL, NULL, "report", "--job", job,
				      "--junit", junit, NULL),
				 1);
		xml = slurp(junit);
		ck_assert_ptr_nonnull(xml);
		msg[b] = junit_message(xml);
		free(xml);
		free(trace);
	}
	ck_assert_str_eq(msg[0], msg[1]);
	ck_assert_str_eq(msg[0], "data_race: b / a; at step in train, libk.so; "
				 "previous at step in train, libk.so");
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(msg[0]);
	free(msg[1]);
	free(rep);
	free(d.dir);
}
END_TEST

START_TEST(report_without_daemon_exits_3)
{
	char *dir = tu_tmpdir(), sock[PATH_MAX], junit[PATH_MAX], *err;

	snprintf(sock, sizeof(sock), "%s/none.sock", dir);
	snprintf(junit, sizeof(junit), "%s/x.xml", dir);
	setenv("NPUSAN_SOCKET", sock, 1);
	ck_assert_int_eq(ctlv(NULL, &err, "report", "--job", "demo", "--junit",
			      junit, NULL),
			 3);
	ck_assert_ptr_nonnull(strstr(err, sock));
	ck_assert_int_eq(access(junit, F_OK), -1);
	free(err);
	free(dir);
}
END_TEST

static Suite *report_suite(void)
{
	Suite *s = suite_create("report");
	TCase *tc = tcase_create("report");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, report_job_with_findings);
	tcase_add_test(tc, report_repeat_logs_once_and_escapes);
	tcase_add_test(tc, report_clean_and_unknown_job);
	tcase_add_test(tc, report_blind_or_incomplete_job_is_not_clean);
	tcase_add_test(tc, report_right_after_exit_sees_the_last_operations);
	tcase_add_test(tc, report_junit_same_from_run_to_run);
	tcase_add_test(tc, report_junit_signature_survives_a_rebuild);
	tcase_add_test(tc, report_without_daemon_exits_3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(report_suite());
}
