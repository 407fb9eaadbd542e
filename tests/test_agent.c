/*
 * test_agent.c - libnpusan as an application sees it: an unmodified
 * program linked with the agent (tests/agent/agent_prog.c), run the way a
 * user runs it, with the agent's environment variables.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakedaemon.h"
#include "ringread.h"
#include "symtab.h"
#include "testutil.h"
#include "trace.h"

/* The operations agent_prog's "scenario" performs, as a trace. */
static const char scenario_trace[] =
	"npusan-trace 1\n"
	"stack id=1 frame=\"train.py:14 in step\" frame=\"train.py:30 in main\"\n"
	"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
	"alloc ptr=0x2000 size=64 stream=7\n"
	"launch stream=0 op=aten::randn write=0x1000+4096 stack=1\n"
	"stream_create stream=7\n"
	"event_create event=1\n"
	"launch stream=7 op=aten::add.Tensor read=0x1040+16 write=0x2000+64\n"
	"event_record event=1 stream=7\n"
	"launch stream=0 op=aten::mul read=0x2000+64 stack=1\n"
	"stream_wait stream=7 on=0\n"
	"record_stream ptr=0x2000 stream=0\n"
	"free ptr=0x1000\n"
	"free ptr=0x2000\n"
	"flush\n"
	"event_wait event=1 stream=0\n"
	"event_sync event=1\n"
	"stream_sync stream=7\n"
	"event_destroy event=1\n"
	"device_sync\n"
	"alloc ptr=0x3000 size=8\n"
	"gap lost=5\n"
	"gap\n";

/* Runs agent_prog with `arg` (and `arg2` when not NULL). */
static int run_prog(const char *arg, const char *arg2, char **out, char **err)
{
	char *prog = strdup(tu_bin("tests/agent_prog"));
	const char *argv[] = { prog, arg, arg2, NULL };
	int status = tu_run(argv, NULL, out, err);

	free(prog);
	return status;
}

/* One op as text, with names and frames spelled out, ids resolved. */
static void render(const struct symtab *syms, const struct op *op, char *buf,
		   size_t len)
{
	const uint32_t *frames;
	size_t n = symtab_stack(syms, op->stack, &frames), o;

	o = (size_t)snprintf(buf, len,
			     "%s s=%lu on=%lu e=%lu p=%lu z=%lu hs=%d l=%lu "
			     "hl=%d name=%s",
			     op_kind_name(op->kind),
			     (unsigned long)op->stream, (unsigned long)op->on,
			     (unsigned long)op->event, (unsigned long)op->ptr,
			     (unsigned long)op->size, op->has_stream,
			     (unsigned long)op->lost, op->has_lost,
			     op->name ? symtab_str(syms, op->name, NULL) : "-");
	for (size_t i = 0; i < op->nreads && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " r%lx+%lu",
				      (unsigned long)op->reads[i].ptr,
				      (unsigned long)op->reads[i].len);
	for (size_t i = 0; i < op->nwrites && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " w%lx+%lu",
				      (unsigned long)op->writes[i].ptr,
				      (unsigned long)op->writes[i].len);
	for (size_t i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " [%s]",
				      symtab_str(syms, frames[i], NULL));
	if ((op->graph != 0 || op->has_graph) && o < len)
		snprintf(buf + o, len - o, " g=%lu hg=%d",
			 (unsigned long)op->graph, op->has_graph);
}

/* Every op of a trace file, rendered, one per line (caller frees). */
static char *ops_of(const char *path, struct trace_process *proc)
{
	struct trace_reader *r;
	struct symtab *syms;
	size_t cap = 1 << 16, used = 0;
	char *all = malloc(cap), line[2048];
	struct op op;
	int ret;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_open(path, syms, &r, NULL), 0);
	all[0] = '\0';
	while ((ret = trace_read(r, &op)) == 1) {
		render(syms, &op, line, sizeof(line));
		if (used + strlen(line) + 2 > cap)
			all = realloc(all, cap *= 2);
		used += (size_t)sprintf(all + used, "%s\n", line);
	}
	ck_assert_msg(ret == 0, "%s", trace_reader_error(r));
	if (proc != NULL) {
		*proc = *trace_reader_process(r);
		proc->job = proc->name = NULL;
	}
	trace_reader_close(r);
	symtab_free(syms);
	return all;
}

/* The only file in `dir` (its path; caller frees), or NULL. */
static char *only_file(const char *dir, int *count)
{
	struct dirent *e;
	char *path = NULL;
	DIR *d = opendir(dir);

	*count = 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		(*count)++;
		free(path);
		path = malloc(PATH_MAX);
		snprintf(path, PATH_MAX, "%s/%s", dir, e->d_name);
	}
	closedir(d);
	return path;
}

static char *record_into(const char *dir, const char *arg, const char *arg2)
{
	char tmpl[PATH_MAX];

	snprintf(tmpl, sizeof(tmpl), "%s/rec.%%p.trace", dir);
	setenv("NPUSAN_RECORD", tmpl, 1);
	ck_assert_int_eq(run_prog(arg, arg2, NULL, NULL), 0);
	unsetenv("NPUSAN_RECORD");
	return NULL;
}

/* `npusanctl analyze --json --every` of a trace, pids blanked. */
static char *analyze_json(const char *path)
{
	char *ctl = strdup(tu_bin("npusanctl")), *out = NULL, *p;
	const char *argv[] = { ctl, "analyze", "--json", "--every", path,
			       NULL };

	ck_assert_int_eq(tu_run(argv, NULL, &out, NULL), 1);
	free(ctl);
	while ((p = strstr(out, "\"pid\":")) != NULL) {
		char *end = p + 6;

		memcpy(p, "\"PID\":", 6);
		while (*end != ',' && *end != '}')
			end++;
		memmove(p + 6, end, strlen(end) + 1);
	}
	return out;
}

START_TEST(agent_recording_equals_the_operations)
{
	char *dir = tu_tmpdir(), *want_path, *got_path, *want, *got;
	struct trace_process proc;
	int n;

	record_into(dir, "scenario", NULL);
	got_path = only_file(dir, &n);
	ck_assert_int_eq(n, 1);
	want_path = tu_write_file("scenario.trace", scenario_trace);
	want = ops_of(want_path, NULL);
	got = ops_of(got_path, &proc);
	ck_assert_str_eq(got, want);
	ck_assert(proc.present);
	ck_assert_uint_gt(proc.pid, 0);
	free(want);
	free(got);
	/* The analysis of the recording is that of the operations. */
	want = analyze_json(want_path);
	got = analyze_json(got_path);
	ck_assert_str_eq(got, want);
	ck_assert_ptr_nonnull(strstr(got, "\"data_race\""));
	ck_assert_ptr_nonnull(strstr(got, "\"missing_record_stream\""));
	free(want);
	free(got);
	free(want_path);
	free(got_path);
	free(dir);
}
END_TEST

/* The bytes of the file at `path` (caller frees), their count in *size. */
static char *read_whole(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long len;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	ck_assert_int_ge(len, 0);
	rewind(f);
	text = malloc((size_t)len + 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*size = (size_t)len;
	return text;
}

/* A process that ends in _exit() (every multiprocessing fork worker) or
 * SIGKILL runs no exit handler: the recording is whole all the same. */
START_TEST(agent_recording_survives_exit_without_handlers)
{
	static const struct {
		const char *mode;
		int status;
	} ends[] = { { "exit", 0 }, { "kill", 128 + 9 } };
	char *dir = tu_tmpdir(), *want_path, *want, *got, *path;
	char tmpl[PATH_MAX];

	want_path = tu_write_file("scenario.trace", scenario_trace);
	want = ops_of(want_path, NULL);
	for (size_t i = 0; i < 2; i++) {
		snprintf(tmpl, sizeof(tmpl), "%s/%s.%%p.trace", dir,
			 ends[i].mode);
		setenv("NPUSAN_RECORD", tmpl, 1);
		ck_assert_int_eq(run_prog(ends[i].mode, NULL, NULL, NULL),
				 ends[i].status);
		unsetenv("NPUSAN_RECORD");
	}
	for (size_t i = 0; i < 2; i++) {
		char sub[PATH_MAX];
		struct dirent *e;
		DIR *d = opendir(dir);

		path = NULL;
		while ((e = readdir(d)) != NULL) {
			if (strncmp(e->d_name, ends[i].mode,
				    strlen(ends[i].mode)) == 0) {
				snprintf(sub, sizeof(sub), "%s/%s", dir,
					 e->d_name);
				path = sub;
			}
		}
		closedir(d);
		ck_assert_msg(path != NULL, "%s: no recording", ends[i].mode);
		got = ops_of(path, NULL);
		ck_assert_str_eq(got, want);
		free(got);
	}
	free(want);
	free(want_path);
	free(dir);
}
END_TEST

/* Killed while it pushes as fast as it can, perhaps in the middle of a
 * write(2): the file holds a prefix of what it did, in order, in whole
 * lines, as every page of it ends at a line's end, and `analyze` reads
 * it. */
START_TEST(agent_recording_of_a_killed_flood_reads_in_order)
{
	char *dir = tu_tmpdir(), tmpl[PATH_MAX], *path, *ops, *p, want[96];
	char *ctl = strdup(tu_bin("npusanctl")), *err, *text;
	const char *argv[] = { ctl, "analyze", NULL, NULL };
	unsigned long n = 0;
	size_t size;
	int files, status;

	snprintf(tmpl, sizeof(tmpl), "%s/flood.%%p.trace", dir);
	setenv("NPUSAN_RECORD", tmpl, 1);
	setenv("NPUSAN_RING_SIZE", "1M", 1);
	ck_assert_int_eq(run_prog("flood", "300000", NULL, NULL), 128 + 9);
	unsetenv("NPUSAN_RECORD");
	path = only_file(dir, &files);
	ck_assert_int_eq(files, 1);
	ops = ops_of(path, NULL);
	for (p = ops; *p != '\0'; p = strchr(p, '\n') + 1, n++) {
		snprintf(want, sizeof(want),
			 "launch s=1 on=0 e=0 p=0 z=0 hs=0 l=0 hl=0 "
			 "name=flood w%lx+8\n", n * 8);
		ck_assert_msg(strncmp(p, want, strlen(want)) == 0,
			      "op %lu: %.80s", n, p);
	}
	/* Its ring was far smaller than the flood: most had to be written. */
	ck_assert_uint_gt(n, 10000);
	text = read_whole(path, &size);
	for (size_t at = 4096; at < size; at += 4096)
		ck_assert_msg(text[at - 1] == '\n', "page at %zu", at);
	free(text);
	argv[2] = path;
	status = tu_run(argv, NULL, NULL, &err);
	if (status == 2)
		ck_assert_msg(strstr(err, "cut short") != NULL &&
				      tu_count_lines(err, "") == 1,
			      "%s", err);
	else
		ck_assert_msg(status == 0, "%d: %s", status, err);
	free(err);
	free(ops);
	free(path);
	free(ctl);
	free(dir);
}
END_TEST

START_TEST(agent_recording_names_job_and_rank)
{
	char *dir = tu_tmpdir(), *path, *text;
	int n;

	setenv("SLURM_JOB_ID", "slurm-17", 1);
	setenv("OMPI_COMM_WORLD_RANK", "5", 1);
	record_into(dir, "scenario", NULL);
	path = only_file(dir, &n);
	text = analyze_json(path);
	ck_assert_ptr_nonnull(strstr(text, "\"job\":\"slurm-17\""));
	ck_assert_ptr_nonnull(strstr(text, "\"rank\":5"));
	free(text);
	free(path);
	free(dir);
}
END_TEST

/* With NPUSAN=1 and no daemon anywhere, the application is untouched. */
START_TEST(agent_without_daemon_leaves_the_application_alone)
{
	char *out_off, *err_off, *out_on, *err_on;
	int st_off, st_on;

	unsetenv("NPUSAN");
	st_off = run_prog("noisy", NULL, &out_off, &err_off);
	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", "/nonexistent/npusan.sock", 1);
	st_on = run_prog("noisy", NULL, &out_on, &err_on);
	ck_assert_int_eq(st_off, 3);
	ck_assert_int_eq(st_on, 3);
	ck_assert_str_eq(out_on, out_off);
	ck_assert_str_eq(err_on, err_off);
	ck_assert_str_eq(out_on,
			 "hello from the application\ngoodbye\n");
	free(out_off);
	free(err_off);
	free(out_on);
	free(err_on);
}
END_TEST

START_TEST(agent_bad_configuration_is_reported_on_stderr_only)
{
	char *out, *err;

	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", "/nonexistent/npusan.sock", 1);
	setenv("NPUSAN_RING_SIZE", "3000", 1);
	setenv("NPUSAN_RING_FULL", "sometimes", 1);
	ck_assert_int_eq(run_prog("noisy", NULL, &out, &err), 3);
	ck_assert_str_eq(out, "hello from the application\ngoodbye\n");
	ck_assert_ptr_nonnull(strstr(err, "NPUSAN_RING_SIZE=3000"));
	ck_assert_ptr_nonnull(strstr(err, "NPUSAN_RING_FULL=sometimes"));
	free(out);
	free(err);
}
END_TEST

/* Each process of a fork records its own operations, under its own pid. */
START_TEST(agent_fork_child_gets_its_own_ring)
{
	char *dir = tu_tmpdir(), path[PATH_MAX], *ops;
	struct trace_process proc;
	struct dirent *e;
	int files = 0, parent = 0, child = 0;
	DIR *d;

	record_into(dir, "fork", NULL);
	d = opendir(dir);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		files++;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ops = ops_of(path, &proc);
		if (strstr(ops, "parent_kernel") != NULL) {
			parent++;
			ck_assert_ptr_null(strstr(ops, "child_kernel"));
		} else {
			child++;
			ck_assert_ptr_nonnull(strstr(ops, "child_kernel"));
			/* The parent's stream 1 was made before the fork:
			 * the child's own ring starts after it. */
			ck_assert_ptr_null(strstr(ops, "s=1 "));
		}
		ck_assert_ptr_nonnull(strstr(e->d_name, "rec."));
		free(ops);
	}
	closedir(d);
	ck_assert_int_eq(files, 2);
	ck_assert_int_eq(parent, 1);
	ck_assert_int_eq(child, 1);
	free(dir);
}
END_TEST

/* Threads push at once into a ring far too small for them: the recording
 * still holds every operation, in each thread's order. */
START_TEST(agent_threads_record_everything_in_order)
{
	char *dir = tu_tmpdir(), *path, *ops, *p, want[64];
	unsigned long next[9] = { 0 };
	unsigned long stream, ptr;
	int n;

	setenv("NPUSAN_RING_SIZE", "64K", 1);
	record_into(dir, "threads", "8");
	path = only_file(dir, &n);
	ops = ops_of(path, NULL);
	for (p = ops; (p = strstr(p, "launch s=")) != NULL; p++) {
		ck_assert_int_eq(sscanf(p, "launch s=%lu", &stream), 1);
		snprintf(want, sizeof(want), " w%lx+8", (stream << 32) +
			 next[stream] * 8);
		ck_assert_ptr_nonnull(strstr(p, want));
		ck_assert_ptr_eq(strstr(p, want), strstr(p, " w"));
		ptr = next[stream]++;
		(void)ptr;
	}
	for (int s = 1; s <= 8; s++)
		ck_assert_uint_eq(next[s], 1000);
	ck_assert_ptr_null(strstr(ops, "gap"));
	free(ops);
	free(path);
	free(dir);
}
END_TEST

START_TEST(agent_native_stack_names_the_caller)
{
	char *dir = tu_tmpdir(), *path, *ops;
	int n;

	setenv("NPUSAN_STACKS", "4", 1);
	record_into(dir, "native", NULL);
	path = only_file(dir, &n);
	ops = ops_of(path, NULL);
	/* The innermost frame is the application's, not the agent's. */
	ck_assert_msg(strstr(ops, "name=native [native_caller+") != NULL,
		      "%s", ops);
	ck_assert_ptr_nonnull(strstr(ops, "[main+"));
	free(ops);
	free(path);
	free(dir);
}
END_TEST

START_TEST(agent_disabled_records_nothing)
{
	char *dir = tu_tmpdir(), *path;
	int n;

	ck_assert_int_eq(run_prog("scenario", NULL, NULL, NULL), 0);
	path = only_file(dir, &n);
	ck_assert_int_eq(n, 0);
	ck_assert_ptr_null(path);
	free(dir);
}
END_TEST

START_TEST(agent_exports_only_its_api)
{
	char *lib = strdup(tu_bin("agent/libnpusan.so"));
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);

	ck_assert_msg(h != NULL, "%s", dlerror());
	ck_assert_ptr_nonnull(dlsym(h, "npusan_launch"));
	ck_assert_ptr_nonnull(dlsym(h, "npusan_init"));
	ck_assert_ptr_nonnull(dlvsym(h, "npusan_capture_begin", "NPUSAN_1.2"));
	ck_assert_ptr_nonnull(dlvsym(h, "npusan_alloc_graph", "NPUSAN_1.2"));
	ck_assert_ptr_nonnull(dlvsym(h, "npusan_free_at", "NPUSAN_1.3"));
	ck_assert_ptr_nonnull(dlvsym(h, "npusan_launch_args", "NPUSAN_1.3"));
	ck_assert_ptr_null(dlsym(h, "ring_create"));
	ck_assert_ptr_null(dlsym(h, "intern_string"));
	ck_assert_ptr_null(dlsym(h, "register_start"));
	ck_assert_ptr_null(dlsym(h, "trace_write_op"));
	ck_assert_ptr_null(dlsym(h, "npusan__register__pack"));
	dlclose(h);
	free(lib);
}
END_TEST


/* Replays traces at once, each in a process of its own; returns the status. */
static int replay(const char *const *traces, size_t n, char **err)
{
	const char *argv[8] = { NULL };
	char *bin = strdup(tu_bin("agent/npusan-replay"));
	int status;

	argv[0] = bin;
	for (size_t i = 0; i < n && i < 6; i++)
		argv[i + 1] = traces[i];
	status = tu_run(argv, NULL, NULL, err);
	free(bin);
	return status;
}

/* Replaying through the real agent, recorded, gives the same findings, the
 * trace's job and rank included, from one process per trace. */
START_TEST(agent_replay_reproduces_each_trace)
{
	char *dir = tu_tmpdir(), *scenario = tu_write_file("s.trace",
							scenario_trace);
	char demo[PATH_MAX], tmpl[PATH_MAX], path[PATH_MAX];
	const char *traces[] = { demo, scenario };
	char *want[2], *got, *err;
	struct dirent *e;
	int files = 0, matched[2] = { 0, 0 };
	DIR *d;

	snprintf(demo, sizeof(demo), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	snprintf(tmpl, sizeof(tmpl), "%s/rec.%%p.trace", dir);
	setenv("NPUSAN_RECORD", tmpl, 1);
	ck_assert_int_eq(replay(traces, 2, &err), 0);
	ck_assert_msg(strstr(err, "npusan") == NULL, "%s", err);
	for (int i = 0; i < 2; i++)
		want[i] = analyze_json(traces[i]);
	d = opendir(dir);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		files++;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		got = analyze_json(path);
		for (int i = 0; i < 2; i++)
			matched[i] += strcmp(got, want[i]) == 0;
		free(got);
	}
	closedir(d);
	ck_assert_int_eq(files, 2);
	ck_assert_int_eq(matched[0], 1);
	ck_assert_int_eq(matched[1], 1);
	ck_assert_ptr_nonnull(strstr(want[0], "\"job\":\"demo\""));
	free(want[0]);
	free(want[1]);
	free(err);
	free(scenario);
	free(dir);
}
END_TEST

/* NPUSAN_RECORD without %p: the replaying process is recorded to that very
 * path, or, for several traces, the replay says why it cannot be. */
START_TEST(agent_replay_records_to_a_path_without_pid)
{
	char *dir = tu_tmpdir(), *scenario = tu_write_file("s.trace",
							scenario_trace);
	char *torn = tu_write_file("torn.trace", "npusan-trace 1\n"
				   "stream_create stream=3\n"
				   "launch stream=3 op=a wri");
	const char *traces[] = { scenario, scenario };
	char rec[PATH_MAX], *want, *got, *err, *path;
	int n;

	snprintf(rec, sizeof(rec), "%s/run.trace", dir);
	setenv("NPUSAN_RECORD", rec, 1);
	ck_assert_int_eq(replay(traces, 1, &err), 0);
	ck_assert_msg(strstr(err, "npusan") == NULL, "%s", err);
	free(err);
	path = only_file(dir, &n);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(path, rec);
	free(path);
	want = ops_of(scenario, NULL);
	got = ops_of(rec, NULL);
	ck_assert_str_eq(got, want);
	free(want);
	free(got);
	unlink(rec);
	/* Two processes cannot share one file: refused, nothing replayed. */
	ck_assert_int_eq(replay(traces, 2, &err), 2);
	ck_assert_msg(strstr(err, "NPUSAN_RECORD") != NULL &&
			      strstr(err, "%p") != NULL,
		      "%s", err);
	free(err);
	only_file(dir, &n);
	ck_assert_int_eq(n, 0);
	/* A torn last line is replayed up to it, and lost: a gap. */
	traces[0] = torn;
	ck_assert_int_eq(replay(traces, 1, &err), 0);
	ck_assert_msg(strstr(err, "torn.trace:3: warning: the last line is "
				  "cut short") != NULL,
		      "%s", err);
	free(err);
	got = ops_of(rec, NULL);
	ck_assert_msg(strstr(got, "stream_create s=3") == got &&
			      strstr(got, "\ngap ") != NULL &&
			      strstr(got, "launch") == NULL,
		      "%s", got);
	free(got);
	unsetenv("NPUSAN_RECORD");
	free(torn);
	free(scenario);
	free(dir);
}
END_TEST

/* Replays `trace` recorded to `rec`; the recording's bytes. */
static char *replay_recorded(const char *trace, const char *rec)
{
	const char *traces[] = { trace };
	char *err, *want, *got, *text;
	size_t size;

	setenv("NPUSAN_RECORD", rec, 1);
	ck_assert_int_eq(replay(traces, 1, &err), 0);
	unsetenv("NPUSAN_RECORD");
	ck_assert_msg(strstr(err, "npusan") == NULL, "%s", err);
	free(err);
	want = ops_of(trace, NULL);
	got = ops_of(rec, NULL);
	ck_assert_str_eq(got, want);
	free(want);
	free(got);
	text = read_whole(rec, &size);
	text[size] = '\0';
	return text;
}

/* Graph calls through the agent: replayed and recorded as they were, in a
 * version 2 recording whose header was upgraded after lines of version 1;
 * a process without graph calls still leaves version 1. */
START_TEST(agent_records_graph_calls_as_version_2)
{
	char *dir = tu_tmpdir(), *text;
	char *v2 = tu_write_file("g.trace", "npusan-trace 2\n"
				 "stream_create stream=1\n"
				 "alloc ptr=0x1000 size=4096 stream=0\n"
				 "alloc ptr=0x9000 size=4096 stream=1 graph=1\n"
				 "alloc ptr=0xa000 size=64 graph=2\n"
				 "capture_begin stream=1 graph=1\n"
				 "launch stream=1 op=mm read=0x1000+4096\n"
				 "capture_end stream=1 graph=1\n"
				 "graph_replay graph=1 stream=0\n"
				 "graph_destroy graph=1\n");
	char *v1 = tu_write_file("p.trace", "npusan-trace 1\n"
				 "alloc ptr=0x1000 size=4096 stream=0\n");
	char rec[PATH_MAX];

	snprintf(rec, sizeof(rec), "%s/run.trace", dir);
	text = replay_recorded(v2, rec);
	ck_assert_msg(strncmp(text, "npusan-trace 2\n", 15) == 0, "%s", text);
	free(text);
	unlink(rec);
	text = replay_recorded(v1, rec);
	ck_assert_msg(strncmp(text, "npusan-trace 1\n", 15) == 0, "%s", text);
	free(text);
	unlink(rec);
	free(v1);
	free(v2);
	free(dir);
}
END_TEST

START_TEST(agent_replay_reports_a_bad_trace)
{
	char *bad = tu_write_file("bad.trace", "npusan-trace 1\n"
				  "launch stream=1\n");
	const char *traces[] = { bad };
	char *err;

	ck_assert_int_eq(replay(traces, 1, &err), 1);
	ck_assert_msg(strstr(err, "bad.trace:2:") != NULL, "%s", err);
	free(err);
	ck_assert_int_eq(replay(NULL, 0, &err), 2);
	ck_assert_ptr_nonnull(strstr(err, "usage: npusan-replay"));
	free(err);
	free(bad);
}
END_TEST

struct rendered {
	const struct symtab *syms;
	char *text;
	size_t len, cap;
};

static int render_cb(void *arg, const struct op *op)
{
	struct rendered *r = arg;
	char line[2048];
	size_t n;

	render(r->syms, op, line, sizeof(line));
	n = strlen(line);
	if (r->len + n + 2 > r->cap) {
		r->cap = (r->len + n + 2) * 2;
		r->text = realloc(r->text, r->cap);
	}
	memcpy(r->text + r->len, line, n);
	r->len += n;
	r->text[r->len++] = '\n';
	r->text[r->len] = '\0';
	return 0;
}

/* A daemon gets the process's identity and ring, and the ring holds every
 * operation, exactly as the process did them. */
START_TEST(agent_daemon_receives_every_operation)
{
	char *dir = tu_tmpdir(), sock[PATH_MAX], *want_path, *want;
	struct rendered got = { 0 };
	struct fakedaemon_collected stats;
	struct fakedaemon_agent agent;
	struct fakedaemon *d;
	struct symtab *syms;

	snprintf(sock, sizeof(sock), "%s/npusand.sock", dir);
	ck_assert_int_eq(fakedaemon_start(sock, &d), 0);
	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", sock, 1);
	setenv("NPUSAN_JOB", "e2e", 1);
	setenv("RANK", "2", 1);
	ck_assert_int_eq(run_prog("scenario", NULL, NULL, NULL), 0);
	ck_assert_int_eq(fakedaemon_next(d, 5000, &agent), 0);
	ck_assert_str_eq(agent.job, "e2e");
	ck_assert(agent.has_rank);
	ck_assert_uint_eq(agent.rank, 2);
	ck_assert_uint_eq(agent.ring_size, 8u << 20);
	ck_assert_int_eq(symtab_new(&syms), 0);
	got.syms = syms;
	/* The process has exited: what it committed is all there is. */
	ck_assert_int_ge(fakedaemon_collect(agent.fd, 0, RINGREAD_DEAD, syms,
					    render_cb, &got, &stats), 0);
	want_path = tu_write_file("scenario.trace", scenario_trace);
	want = ops_of(want_path, NULL);
	ck_assert_str_eq(got.text, want);
	ck_assert_uint_eq(stats.dropped, 0);
	ck_assert_uint_eq(stats.malformed, 0);
	close(agent.fd);
	fakedaemon_stop(d);
	symtab_free(syms);
	free(got.text);
	free(want);
	free(want_path);
	free(dir);
}
END_TEST

/* The launches in `text`, rendered or read. */
static unsigned count_launches(const char *text)
{
	unsigned n = 0;

	for (const char *p = text; (p = strstr(p, "launch")) != NULL; p++)
		n++;
	return n;
}

/* With the daemon's ring and a recording both on, no ring is the only one
 * that takes launches (the fast path's agent.solo is none): each still
 * gets every launch, also the repeats of a name already defined, which
 * with one ring would take the fast path. */
START_TEST(agent_daemon_and_recording_both_get_every_launch)
{
	char *dir = tu_tmpdir(), sock[PATH_MAX], *rec = tu_tmpdir(), *path;
	struct rendered got = { 0 };
	struct fakedaemon_collected stats;
	struct fakedaemon_agent agent;
	struct fakedaemon *d;
	struct symtab *syms;
	char *recorded;
	int n;

	snprintf(sock, sizeof(sock), "%s/npusand.sock", dir);
	ck_assert_int_eq(fakedaemon_start(sock, &d), 0);
	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", sock, 1);
	record_into(rec, "threads", "2");
	ck_assert_int_eq(fakedaemon_next(d, 5000, &agent), 0);
	ck_assert_int_eq(symtab_new(&syms), 0);
	got.syms = syms;
	ck_assert_int_ge(fakedaemon_collect(agent.fd, 0, RINGREAD_DEAD, syms,
					    render_cb, &got, &stats), 0);
	ck_assert_uint_eq(stats.dropped, 0);
	ck_assert_uint_eq(count_launches(got.text), 2000);
	path = only_file(rec, &n);
	ck_assert_int_eq(n, 1);
	recorded = ops_of(path, NULL);
	ck_assert_uint_eq(count_launches(recorded), 2000);
	close(agent.fd);
	fakedaemon_stop(d);
	symtab_free(syms);
	free(got.text);
	free(recorded);
	free(path);
	free(rec);
	free(dir);
}
END_TEST

/* A process that sends no operation still waits, in npusan_wait_drained(),
 * for the daemon to answer its registration, however busy the daemon: it
 * must be known before it exits, or its job looks as if it never ran
 * ("no process registered") instead of "registered, nothing analysed". */
START_TEST(agent_without_operations_waits_for_its_registration)
{
	static const char blind[] = "npusan-trace 1\n"
				    "process pid=1 job=blind rank=0\n";
	char *dir = tu_tmpdir(), sock[PATH_MAX], *trace, *err;
	const char *traces[1];
	struct fakedaemon_agent agent;
	struct fakedaemon *d;
	unsigned n = 0;

	snprintf(sock, sizeof(sock), "%s/npusand.sock", dir);
	ck_assert_int_eq(fakedaemon_start(sock, &d), 0);
	fakedaemon_delay_replies(d, 300);
	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", sock, 1);
	trace = tu_write_file("blind.trace", blind);
	traces[0] = trace;
	ck_assert_int_eq(replay(traces, 1, &err), 0);
	/* Every process that registered (npusan-replay and its child for
	 * the trace) took its reply, none had exited before it came. */
	while (fakedaemon_next(d, n == 0 ? 5000 : 500, &agent) == 0) {
		close(agent.fd);
		n++;
	}
	ck_assert_uint_gt(n, 0);
	for (int i = 0; i < 100 && fakedaemon_replies(d) < n; i++)
		tu_nap_ms(10);
	ck_assert_uint_eq(fakedaemon_replies(d), n);
	fakedaemon_stop(d);
	free(err);
	free(trace);
	free(dir);
}
END_TEST

/* A daemon that accepted the process but has not drained its ring yet is
 * waited for: npusan_wait_drained() times out and npusan-replay says the
 * daemon did not take everything, instead of returning at once as if no
 * daemon had the ring (-ENOTCONN) and saying nothing. */
START_TEST(agent_waits_for_a_daemon_that_has_not_drained_yet)
{
	static const char one[] = "npusan-trace 1\n"
				  "process pid=1 job=slow rank=0\n"
				  "alloc ptr=0x1000 size=64 stream=0\n";
	char *dir = tu_tmpdir(), sock[PATH_MAX], *trace, *err;
	const char *argv[] = { NULL, "--wait", "300", NULL, NULL };
	struct fakedaemon_agent agent;
	struct fakedaemon *d;
	char *bin = strdup(tu_bin("agent/npusan-replay"));

	snprintf(sock, sizeof(sock), "%s/npusand.sock", dir);
	ck_assert_int_eq(fakedaemon_start(sock, &d), 0);
	setenv("NPUSAN", "1", 1);
	setenv("NPUSAN_SOCKET", sock, 1);
	trace = tu_write_file("slow.trace", one);
	argv[0] = bin;
	argv[3] = trace;
	ck_assert_int_eq(tu_run(argv, NULL, NULL, &err), 0);
	ck_assert_msg(strstr(err, "did not take every operation") != NULL,
		      "%s", err);
	while (fakedaemon_next(d, 100, &agent) == 0)
		close(agent.fd);
	fakedaemon_stop(d);
	free(bin);
	free(err);
	free(trace);
	free(dir);
}
END_TEST

static Suite *agent_suite(void)
{
	Suite *s = suite_create("agent");
	TCase *tc = tcase_create("agent");
	/* Producer threads and the recorder's thread in one process, forking
	 * nothing: the case ThreadSanitizer runs too (tests/CMakeLists.txt). */
	TCase *threads = tcase_create("threads");

	tcase_set_timeout(tc, 60);
	tcase_set_timeout(threads, 60);
	tcase_add_test(threads, agent_recording_equals_the_operations);
	tcase_add_test(threads, agent_threads_record_everything_in_order);
	tcase_add_test(threads, agent_daemon_and_recording_both_get_every_launch);
	tcase_add_test(tc, agent_recording_names_job_and_rank);
	tcase_add_test(tc, agent_recording_survives_exit_without_handlers);
	tcase_add_test(tc, agent_recording_of_a_killed_flood_reads_in_order);
	tcase_add_test(tc, agent_without_daemon_leaves_the_application_alone);
	tcase_add_test(tc, agent_bad_configuration_is_reported_on_stderr_only);
	tcase_add_test(tc, agent_fork_child_gets_its_own_ring);
	tcase_add_test(tc, agent_native_stack_names_the_caller);
	tcase_add_test(tc, agent_disabled_records_nothing);
	tcase_add_test(tc, agent_exports_only_its_api);
	tcase_add_test(tc, agent_replay_reproduces_each_trace);
	tcase_add_test(tc, agent_replay_reports_a_bad_trace);
	tcase_add_test(tc, agent_records_graph_calls_as_version_2);
	tcase_add_test(tc, agent_replay_records_to_a_path_without_pid);
	tcase_add_test(tc, agent_daemon_receives_every_operation);
	tcase_add_test(tc, agent_without_operations_waits_for_its_registration);
	tcase_add_test(tc, agent_waits_for_a_daemon_that_has_not_drained_yet);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, threads);
	return s;
}

int main(void)
{
	unsetenv("NPUSAN");
	unsetenv("NPUSAN_RECORD");
	unsetenv("NPUSAN_STACKS");
	return tu_main(agent_suite());
}
