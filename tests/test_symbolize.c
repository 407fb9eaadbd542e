/*
 * test_symbolize.c - native frames to source lines: the frame text the
 * agent writes (module path, offset, build id), and npusanctl showing the
 * recorded stacks of agent_prog (built with -g) as file:line, now or later
 * from a debug file, and raw wherever the line could be wrong.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbolize.h"
#include "testutil.h"

START_TEST(symbolize_parses_native_frames)
{
	struct native_frame r;

	ck_assert_int_eq(native_frame_parse("race+0x1d (/usr/bin/myjob+0x1320) "
					 "(BuildId: 0a1bff)",
					 &r),
			 0);
	ck_assert_uint_eq(r.path_len, strlen("/usr/bin/myjob"));
	ck_assert(memcmp(r.path, "/usr/bin/myjob", r.path_len) == 0);
	ck_assert_uint_eq(r.off, 0x1320);
	ck_assert_uint_eq(r.build_id_len, 3);
	ck_assert_uint_eq(r.build_id[0], 0x0a);
	ck_assert_uint_eq(r.build_id[2], 0xff);
	/* Without a symbol, a path with blanks, without a build id. */
	ck_assert_int_eq(native_frame_parse("/opt/my lib/libx.so+0x10", &r), 0);
	ck_assert_uint_eq(r.path_len, strlen("/opt/my lib/libx.so"));
	ck_assert_uint_eq(r.off, 0x10);
	ck_assert_uint_eq(r.build_id_len, 0);
	ck_assert_int_eq(native_frame_parse("f+0x1 (/a (b)/c+0xAb) (BuildId: 00)",
					 &r),
			 0);
	ck_assert_uint_eq(r.path_len, strlen("/a (b)/c"));
	ck_assert_uint_eq(r.off, 0xab);
}
END_TEST

/* What is not a native frame, or not one this release can place. */
static const char *const symbolize_not_native[] = {
	"train.py:14 in step",
	"0x1234",
	"myjob+0x1320", /* an old trace's: the base name only */
	"race+0x1d (myjob+0x1320)",
	"race+0x1d (/x/myjob+0x1320",
	"/x/myjob+0x",
	"/x/myjob+0xzz",
	"/x/myjob+0x11111111111111111",
	"/x/myjob+0x10 (BuildId: abc)",
	"/x/myjob+0x10 (BuildId: )",
	"race (/x/myjob+0x10)x",
	"",
};

START_TEST(symbolize_rejects_other_frames)
{
	struct native_frame r = { .off = 7 };
	struct symbolizer *s;
	char buf[64];

	ck_assert_int_eq(native_frame_parse(symbolize_not_native[_i], &r),
			 -EINVAL);
	ck_assert_uint_eq(r.off, 7); /* *out only on success */
	ck_assert_int_eq(symbolizer_open(NULL, &s), 0);
	ck_assert_int_eq(symbolizer_frame(s, symbolize_not_native[_i], buf,
					  sizeof(buf)),
			 -EINVAL);
	symbolizer_close(s);
}
END_TEST

/* The line of agent_prog.c after the one holding `marker`. */
static int tsym_line_after(const char *marker)
{
	char path[PATH_MAX], line[256];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/tests/agent/agent_prog.c",
		 NPUSAN_SOURCE_DIR);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		n++;
		if (strstr(line, marker) != NULL)
			break;
	}
	fclose(f);
	return n + 1;
}

/* The line of agent_prog.c its native stacks' innermost frame is at. */
static int tsym_race_line(void)
{
	return tsym_line_after("NATIVE_RACE_LINE is the next");
}

static void tsym_copy(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb"), *out;
	char buf[1 << 16];
	size_t n;

	ck_assert_ptr_nonnull(in);
	unlink(to);
	out = fopen(to, "wb");
	ck_assert_ptr_nonnull(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
	fclose(in);
	ck_assert_int_eq(fclose(out), 0);
	ck_assert_int_eq(chmod(to, 0755), 0);
}

/* Runs `prog MODE` recording into `dir`; the trace's path. */
static char *tsym_record_mode(const char *prog, const char *mode,
			      const char *dir)
{
	char tmpl[PATH_MAX], *path = NULL;
	const char *argv[] = { prog, mode, NULL };
	struct dirent *e;
	DIR *d;

	snprintf(tmpl, sizeof(tmpl), "%s/rec.%%p.trace", dir);
	setenv("NPUSAN_RECORD", tmpl, 1);
	setenv("NPUSAN_STACKS", "4", 1);
	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	unsetenv("NPUSAN_RECORD");
	unsetenv("NPUSAN_STACKS");
	d = opendir(dir);
	while ((e = readdir(d)) != NULL)
		if (strstr(e->d_name, ".trace") != NULL) {
			ck_assert_ptr_null(path);
			ck_assert_int_ge(asprintf(&path, "%s/%s", dir,
						  e->d_name),
					 0);
		}
	closedir(d);
	ck_assert_ptr_nonnull(path);
	return path;
}

/* Runs `prog native_race` recording into `dir`; the trace's path. */
static char *tsym_record(const char *prog, const char *dir)
{
	return tsym_record_mode(prog, "native_race", dir);
}

/* `npusanctl analyze [--json] TRACE`'s output, with NPUSAN_DEBUG_DIR set
 * to `debug_dir` (unset for NULL): one data race between native stacks. */
static char *tsym_analyze(const char *trace, const char *debug_dir, bool json)
{
	char *ctl = strdup(tu_bin("npusanctl")), *out = NULL;
	const char *argv[] = { ctl, "analyze", json ? "--json" : trace,
			       json ? trace : NULL, NULL };

	if (debug_dir != NULL)
		setenv("NPUSAN_DEBUG_DIR", debug_dir, 1);
	ck_assert_int_eq(tu_run(argv, NULL, &out, NULL), 1);
	unsetenv("NPUSAN_DEBUG_DIR");
	free(ctl);
	ck_assert_msg(strstr(out, "data_race") != NULL ||
			      strstr(out, "data race") != NULL,
		      "%s", out);
	return out;
}

/* Asserts that `report` shows the race's frames in `module` at their
 * source line; `when` says in which case. */
static void tsym_expect_line_in(const char *report, const char *module,
				const char *when)
{
	char want[128], main_[64];

	snprintf(want, sizeof(want), "agent_prog.c:%d in native_racer "
		 "(%s+0x", tsym_race_line(), module);
	snprintf(main_, sizeof(main_), " in main (%s+0x", module);
	ck_assert_msg(tu_count_lines(report, want) == 2,
		      "%s: no two \"%s\" in:\n%s", when, want, report);
	ck_assert_msg(tu_count_lines(report, main_) == 2, "%s", report);
}

static void tsym_expect_line(const char *report, const char *when)
{
	tsym_expect_line_in(report, "agent_prog", when);
}

/* Asserts that `report` shows the race's frames as recorded. */
static void tsym_expect_raw(const char *report, const char *when)
{
	ck_assert_msg(strstr(report, ".c:") == NULL, "%s:\n%s", when, report);
	ck_assert_msg(tu_count_lines(report, "  native_racer+0x") == 2, "%s",
		      report);
	ck_assert_ptr_nonnull(strstr(report, "/agent_prog+0x"));
	ck_assert_ptr_nonnull(strstr(report, ") (BuildId: "));
}

START_TEST(symbolize_analyze_shows_source_lines)
{
	char *dir = tu_tmpdir(), *trace, *text;

	trace = tsym_record(tu_bin("tests/agent_prog"), dir);
	text = tsym_analyze(trace, NULL, false);
	tsym_expect_line(text, "the module at its path");
	free(text);
	/* JSON keeps the frames as recorded: they key the finding. */
	text = tsym_analyze(trace, NULL, true);
	ck_assert_ptr_null(strstr(text, "agent_prog.c:"));
	ck_assert_ptr_nonnull(strstr(text, "\"native_racer+0x"));
	ck_assert_ptr_nonnull(strstr(text, "(BuildId: "));
	free(text);
	free(trace);
	free(dir);
}
END_TEST

/* Through the daemon: the agent's ring, the store, npusanctl run's report
 * of what the daemon found. */
START_TEST(symbolize_daemon_findings_show_source_lines)
{
	char *ctl = strdup(tu_bin("npusanctl")), *out = NULL;
	char *prog = strdup(tu_bin("tests/agent_prog")), *err = NULL;
	const char *argv[] = { ctl, "run", "--job", "symbolize", "--",
			       prog, "native_race", NULL };
	struct tu_daemon d;
	int status;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN_STACKS", "4", 1);
	status = tu_run(argv, NULL, &out, &err);
	unsetenv("NPUSAN_STACKS");
	ck_assert_msg(status == 1, "npusanctl run: %d\n%s\n%s", status, out,
		      err);
	tsym_expect_line(out, "npusanctl run");
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	free(err);
	free(out);
	free(prog);
	free(ctl);
	free(d.dir);
}
END_TEST

/* A program linked at a fixed address (not a PIE): its frames' ELF
 * addresses are the return addresses themselves. */
START_TEST(symbolize_fixed_address_executable)
{
	char *dir = tu_tmpdir(), *trace, *text;

	trace = tsym_record(tu_bin("tests/agent_prog_nopie"), dir);
	text = tsym_analyze(trace, NULL, false);
	tsym_expect_line_in(text, "agent_prog_nopie", "not a PIE");
	free(text);
	free(trace);
	free(dir);
}
END_TEST

/* The build id a trace's frames record, as hex, into `hex`. */
static void tsym_build_id(const char *trace, char hex[129])
{
	FILE *f = fopen(trace, "r");
	char line[8192], *p = NULL;
	size_t n = 0;

	ck_assert_ptr_nonnull(f);
	while (p == NULL && fgets(line, sizeof(line), f) != NULL)
		p = strstr(line, "agent_prog+0x");
	fclose(f);
	ck_assert_ptr_nonnull(p);
	p = strstr(p, "(BuildId: ");
	ck_assert_ptr_nonnull(p);
	for (p += 10; *p != ')' && n < 128; p++)
		hex[n++] = *p;
	hex[n] = '\0';
	ck_assert_uint_ge(n, 2);
}

/* `from` copied to `to` with one byte of its build id (`hex`) changed:
 * the same code and DWARF, but another build as far as anyone can tell. */
static void tsym_copy_other_build(const char *from, const char *to,
				  const char *hex)
{
	unsigned char id[64], *data, *at;
	size_t n = strlen(hex) / 2, size;
	FILE *f;

	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(sscanf(hex + 2 * i, "%2hhx", &id[i]), 1);
	tsym_copy(from, to);
	f = fopen(to, "r+b");
	ck_assert_ptr_nonnull(f);
	data = malloc(1 << 24);
	size = fread(data, 1, 1 << 24, f);
	at = memmem(data, size, id, n);
	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(fseek(f, at - data, SEEK_SET), 0);
	ck_assert_int_eq(fputc(at[0] ^ 0xff, f), at[0] ^ 0xff);
	ck_assert_int_eq(fclose(f), 0);
	free(data);
}

/* Stores `file` at DEBUG_DIR/.build-id/xx/rest.debug for `hex`. */
static void tsym_install_debug(const char *debug_dir, const char *hex,
			       const char *file)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/.build-id", debug_dir);
	mkdir(debug_dir, 0755);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s", debug_dir, hex);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", debug_dir,
		 hex, hex + 2);
	tsym_copy(file, path);
}

/*
 * A trace recorded from a copy of agent_prog, read after the copy is gone
 * or replaced: what another machine sees. The line comes only from a file
 * of the recorded build.
 */
START_TEST(symbolize_later_only_from_the_same_build)
{
	char *dir = tu_tmpdir(), *trace, *text, prog[PATH_MAX];
	char debug[PATH_MAX], stripped[PATH_MAX], cmd[3 * PATH_MAX], hex[129];
	char *orig = strdup(tu_bin("tests/agent_prog")); /* static storage */

	snprintf(prog, sizeof(prog), "%s/agent_prog", dir);
	snprintf(debug, sizeof(debug), "%s/debug", dir);
	tsym_copy(orig, prog);
	trace = tsym_record(prog, dir);
	tsym_build_id(trace, hex);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_line(text, "the copy at its path");
	free(text);

	/* The module is gone: raw. */
	ck_assert_int_eq(unlink(prog), 0);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_raw(text, "the module gone");
	free(text);

	/* Another build at its path: raw, even when only the build id
	 * differs. */
	tsym_copy_other_build(orig, prog, hex);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_raw(text, "another build id at its path");
	free(text);
	tsym_copy(tu_bin("npusanctl"), prog);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_raw(text, "another program at its path");
	free(text);

	/* A FIFO at its path is never opened for reading, which would wait
	 * for a writer: raw, at once. */
	ck_assert_int_eq(unlink(prog), 0);
	ck_assert_int_eq(mkfifo(prog, 0600), 0);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_raw(text, "a FIFO at its path");
	free(text);

	/* The same build, stripped of its debug information: raw. */
	snprintf(stripped, sizeof(stripped), "%s/stripped", dir);
	snprintf(cmd, sizeof(cmd), "strip -g -o '%s' '%s'", stripped, orig);
	ck_assert_int_eq(system(cmd), 0);
	tsym_copy(stripped, prog);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_raw(text, "the build stripped");
	free(text);

	/* Its debug file installed by build id: the lines, stripped module
	 * or another build at the path alike. */
	tsym_install_debug(debug, hex, orig);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_line(text, "stripped, its debug file installed");
	free(text);
	tsym_copy(tu_bin("npusanctl"), prog);
	text = tsym_analyze(trace, debug, false);
	tsym_expect_line(text, "another build, the debug file installed");
	free(text);
	free(trace);
	free(orig);
	free(dir);
}
END_TEST

/* Code inlined into another function shows both, as addr2line -i does:
 * the inlined function at its line, then the one it was inlined into at
 * the line of the call, at the same address; in a program optimised at
 * link time too (agent_prog_lto). */
static const char *const tsym_inline_progs[] = { "agent_prog",
						 "agent_prog_lto" };

START_TEST(symbolize_inlined_code_shows_where_it_was_inlined)
{
	const char *name = tsym_inline_progs[_i];
	char *dir = tu_tmpdir(), *trace, *text, path[64], inner[160],
	     outer[160];
	const char *p, *next;

	snprintf(path, sizeof(path), "tests/%s", name);
	trace = tsym_record_mode(tu_bin(path), "native_inline_race", dir);
	text = tsym_analyze(trace, NULL, false);
	snprintf(inner, sizeof(inner), "agent_prog.c:%d in native_inlined "
		 "(%s+0x",
		 tsym_line_after("NATIVE_INLINED_LINE is the next"), name);
	snprintf(outer, sizeof(outer), "agent_prog.c:%d in native_inliner "
		 "(%s+0x",
		 tsym_line_after("NATIVE_INLINE_CALL_LINE is the next"), name);
	ck_assert_msg(tu_count_lines(text, inner) == 2, "%s", text);
	ck_assert_msg(tu_count_lines(text, outer) == 2, "%s", text);
	/* The line right after the inlined function's is its caller's. */
	p = strchr(strstr(text, inner), '\n');
	ck_assert_ptr_nonnull(p);
	next = strchr(p + 1, '\n');
	ck_assert_ptr_nonnull(next);
	ck_assert_msg(memmem(p, (size_t)(next - p), outer, strlen(outer)),
		      "no \"%s\" right after the inlined frame:\n%s", outer,
		      text);
	free(text);
	free(trace);
	free(dir);
}
END_TEST

/* A listening TCP socket on 127.0.0.1 that accepts nothing; its port. */
static int tsym_listen(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/*
 * Text reports read debug information from this machine's files only:
 * with DEBUGINFOD_URLS set, as Debian's login shells set it where
 * libdebuginfod-common is installed, a module without debug information
 * is shown raw at once, and no debuginfod server is asked, which could
 * stall a CI step for minutes or download gigabytes.
 */
START_TEST(symbolize_never_asks_a_debuginfod_server)
{
	char *dir = tu_tmpdir(), *trace, *text, prog[PATH_MAX];
	char url[64], cache[PATH_MAX], cmd[3 * PATH_MAX];
	char *orig = strdup(tu_bin("tests/agent_prog")); /* static storage */
	int port, fd = tsym_listen(&port);

	snprintf(prog, sizeof(prog), "%s/agent_prog", dir);
	tsym_copy(orig, prog);
	trace = tsym_record(prog, dir);
	snprintf(cmd, sizeof(cmd), "strip -g '%s'", prog);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	snprintf(cache, sizeof(cache), "%s/debuginfod-cache", dir);
	setenv("DEBUGINFOD_URLS", url, 1);
	setenv("DEBUGINFOD_TIMEOUT", "1", 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	text = tsym_analyze(trace, dir, false);
	unsetenv("DEBUGINFOD_URLS");
	unsetenv("DEBUGINFOD_TIMEOUT");
	unsetenv("DEBUGINFOD_CACHE_PATH");
	tsym_expect_raw(text, "stripped, DEBUGINFOD_URLS set");
	ck_assert_msg(accept(fd, NULL, NULL) < 0 && errno == EAGAIN,
		      "npusanctl connected to the debuginfod server at %s",
		      url);
	close(fd);
	free(text);
	free(trace);
	free(orig);
	free(dir);
}
END_TEST

static Suite *symbolize_suite(void)
{
	Suite *s = suite_create("symbolize");
	TCase *tc = tcase_create("frames");
	TCase *e2e = tcase_create("npusanctl");

	tcase_add_test(tc, symbolize_parses_native_frames);
	tcase_add_loop_test(tc, symbolize_rejects_other_frames, 0,
			    (int)(sizeof(symbolize_not_native) /
				  sizeof(symbolize_not_native[0])));
	suite_add_tcase(s, tc);
	tcase_add_test(e2e, symbolize_analyze_shows_source_lines);
	tcase_add_test(e2e, symbolize_later_only_from_the_same_build);
	tcase_add_test(e2e, symbolize_never_asks_a_debuginfod_server);
	tcase_add_loop_test(e2e, symbolize_inlined_code_shows_where_it_was_inlined,
			    0, (int)(sizeof(tsym_inline_progs) /
				     sizeof(tsym_inline_progs[0])));
	tcase_add_test(e2e, symbolize_daemon_findings_show_source_lines);
	tcase_add_test(e2e, symbolize_fixed_address_executable);
	suite_add_tcase(s, e2e);
	return s;
}

int main(void)
{
	unsetenv("NPUSAN");
	unsetenv("NPUSAN_RECORD");
	unsetenv("NPUSAN_STACKS");
	unsetenv("NPUSAN_DEBUG_DIR");
	return tu_main(symbolize_suite());
}
