/*
 * report.c - rendering findings as text and as JSON.
 *
 * Only the cli formats for humans. Both formatters read a struct
 * finding_view: the engine's findings are resolved into one by
 * finding_view_of(), the daemon's by client_finding() (cli/client.c).
 */
#include "report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "symbolize.h"
#include "text.h"

#define BOLD "\033[1m"
#define RED "\033[1;31m"
#define RESET "\033[0m"
/* A symbolized frame: a source path, a function and a module name. */
#define REPORT_FRAME_MAX 4096

bool report_want_color(FILE *f)
{
	const char *no = getenv("NO_COLOR");

	return (no == NULL || no[0] == '\0') && isatty(fileno(f));
}

static const char *paint(bool color, const char *code)
{
	return color ? code : "";
}

/*
 * The symbolizer of this process's text reports, opened at the first frame
 * shown and kept, with its cache of modules, until report_fini(). Only the
 * text form symbolizes: JSON keeps the frames as recorded, which are part
 * of a finding's identity.
 */
static struct symbolizer *report_syms;
static bool report_syms_failed;

void report_fini(void)
{
	symbolizer_close(report_syms);
	report_syms = NULL;
	report_syms_failed = false;
}

static void print_frame_line(FILE *out, const char *line)
{
	fputs("  ", out);
	text_put(out, line);
	fputc('\n', out);
}

/* `frame` as "file:line in function (module+0xoff)" when it is a native
 * frame that resolves, a line more for each function the code there was
 * inlined into; as recorded otherwise. */
static void print_frame(FILE *out, const char *frame)
{
	char buf[REPORT_FRAME_MAX], *line, *next;

	if (report_syms == NULL && !report_syms_failed)
		report_syms_failed = symbolizer_open(getenv(REPORT_ENV_DEBUG_DIR),
						     &report_syms) < 0;
	if (report_syms == NULL ||
	    symbolizer_frame(report_syms, frame, buf, sizeof(buf)) <= 0) {
		print_frame_line(out, frame);
		return;
	}
	for (line = buf; line != NULL; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		print_frame_line(out, line);
	}
}

static void print_stack(FILE *out, const struct finding_stack *s)
{
	if (s->n == 0)
		fputs("  (no stack recorded)\n", out);
	for (size_t i = 0; i < s->n; i++)
		print_frame(out, s->frames[i]);
}

static void print_process(FILE *out, const struct finding_view *f)
{
	const char *sep = " in";

	if (f->has_pid) {
		fprintf(out, " in process %" PRIu64, f->pid);
		sep = ",";
	}
	if (f->job != NULL) {
		fprintf(out, "%s job ", sep);
		text_put(out, f->job);
		sep = ",";
	}
	if (f->has_rank)
		fprintf(out, "%s rank %" PRIu64, sep, f->rank);
}

/* Whether the accesses of `f` are numbered within a capture (graphs.md:
 * capture-local numbers), not by the stream's launches. */
static bool in_capture(const struct finding_view *f)
{
	return f->detected_at != NULL &&
	       (strcmp(f->detected_at, detected_at_name(DETECTED_AT_CAPTURE)) ==
			0 ||
		strcmp(f->detected_at,
		       detected_at_name(DETECTED_AT_CAPTURE_END)) == 0);
}

/* "(seq 5)", with the graph that recorded or replayed the access. */
static void print_seq(FILE *out, const struct finding_view *f,
		      const struct finding_view_access *a)
{
	fprintf(out, "(seq %" PRIu64, a->seq);
	if (a->has_graph && in_capture(f))
		fprintf(out, " in the capture of graph %" PRIu64, a->graph);
	else if (a->has_graph)
		fprintf(out, ", replay of graph %" PRIu64, a->graph);
	fputc(')', out);
}

/* What an access touched: "0x1000" (or "it"), or, when its operator's
 * argument is known, "argument out of aten::add, at 0x1000". */
static void print_what(FILE *out, const struct finding_view_access *a,
		       const char *what)
{
	if (a->arg == NULL) {
		fputs(what, out);
		return;
	}
	fputs("argument ", out);
	text_put(out, a->arg);
	fputs(" of ", out);
	text_put(out, a->op != NULL ? a->op : "(unknown operator)");
	if (strcmp(what, "it") != 0)
		fprintf(out, ", at %s", what);
}

static void print_access(FILE *out, bool color, const struct finding_view *f,
			 const char *who, const struct finding_view_access *a,
			 const char *what)
{
	fprintf(out, "%s by stream %" PRIu64 " ", who, a->stream);
	print_seq(out, f, a);
	fprintf(out, " during kernel:\n%s", paint(color, BOLD));
	text_put(out, a->op != NULL ? a->op : "(unknown operator)");
	fprintf(out, "%s\n%s ", paint(color, RESET),
		a->write ? "writing to" : "reading from");
	print_what(out, a, what);
	fputs("\nWith stack trace:\n", out);
	print_stack(out, &a->stack);
}

/* `f`'s allocation: "<what> at 0x... (N bytes on stream S)" and its stack. */
static void print_alloc_as(FILE *out, const struct finding_view *f,
			   const char *what)
{
	fprintf(out, "%s at 0x%" PRIx64 " (%" PRIu64 " bytes", what,
		f->alloc.ptr, f->alloc.size);
	if (f->alloc.has_stream)
		fprintf(out, " on stream %" PRIu64, f->alloc.stream);
	fputs(") with stack trace:\n", out);
	print_stack(out, &f->alloc.stack);
}

static void print_alloc(FILE *out, const struct finding_view *f)
{
	if (!f->has_alloc) {
		fputs("The memory belongs to no allocation the trace saw.\n",
		      out);
		return;
	}
	print_alloc_as(out, f, "Memory was allocated");
}

/* When the daemon saw `f`: first and last occurrence. */
static void print_seen(FILE *out, const struct finding_view *f)
{
	char first[REPORT_TIME_MAX] = "?", last[REPORT_TIME_MAX] = "?";

	if (f->has_first)
		report_time(f->first_ms, first);
	if (f->has_last)
		report_time(f->last_ms, last);
	if (f->count <= 1)
		fprintf(out, "Seen once, at %s.\n", f->has_first ? first : last);
	else
		fprintf(out, "Seen %" PRIu64 " times from %s to %s; the first "
			     "occurrence is shown.\n",
			f->count, first, last);
}

static void print_header(FILE *out, bool color, const struct finding_view *f,
			 const char *what)
{
	fprintf(out, "============================\n%snpusan detected %s on "
		     "memory at 0x%" PRIx64,
		paint(color, RED), what, f->ptr);
	print_process(out, f);
	fprintf(out, "%s\n", paint(color, RESET));
	if (f->has_first || f->has_last)
		print_seen(out, f);
	else if (f->count > 1)
		fprintf(out, "Seen %" PRIu64 " times; the first occurrence "
			     "is shown.\n",
			f->count);
}

static void race_text(FILE *out, bool color, const struct finding_view *f)
{
	char here[40];

	print_header(out, color, f, "a possible data race");
	snprintf(here, sizeof(here), "0x%" PRIx64, f->ptr);
	print_access(out, color, f, "Access", &f->access, here);
	print_access(out, color, f, "Previous access", &f->previous, "it");
	print_alloc(out, f);
	fprintf(out, "Nothing orders the access after the previous one. Fix it "
		     "by making stream %" PRIu64 " wait\nfor stream %" PRIu64
		     " after the previous access and before this one: "
		     "wait_stream, or record\nan event on stream %" PRIu64
		     " and wait_event it on stream %" PRIu64 ".\n",
		f->access.stream, f->previous.stream, f->previous.stream,
		f->access.stream);
}

static void missing_record_stream_text(FILE *out, bool color,
				       const struct finding_view *f)
{
	uint64_t use = f->access.stream, alloc = f->alloc.stream;
	bool flush = f->detected_at != NULL &&
		     strcmp(f->detected_at, "flush") == 0;

	print_header(out, color, f, "a missing record_stream");
	fprintf(out, "Allocated on stream %" PRIu64 ", used on stream %" PRIu64
		     ", then %s while stream %" PRIu64 " was not ordered after "
		     "that use\nand record_stream was never called for stream %"
		     PRIu64 ": the caching allocator may hand the memory out "
		     "again\nwhile the use is still running.\n",
		alloc, use, flush ? "still live at a flush" : "freed", alloc,
		use);
	print_access(out, color, f, "Last use", &f->access, "it");
	print_alloc(out, f);
	if (f->has_free) {
		fputs("Memory was freed here:\n", out);
		print_stack(out, &f->free_stack);
	}
	fprintf(out, "Fix it in either of two ways:\n"
		     "  - call tensor.record_stream(s) for the usage stream s "
		     "(stream %" PRIu64 ") after the use, or\n"
		     "  - make the allocation stream wait for the usage stream "
		     "before the free:\n"
		     "    alloc_stream.wait_stream(usage_stream), i.e. stream %"
		     PRIu64 " waits for stream %" PRIu64 ".\n",
		use, alloc, use);
}

static void stale_graph_address_text(FILE *out, bool color,
				     const struct finding_view *f)
{
	const struct finding_view_access *a = &f->access;
	char graph[32] = "the graph";

	if (a->has_graph)
		snprintf(graph, sizeof(graph), "graph %" PRIu64, a->graph);
	print_header(out, color, f, "a stale graph address");
	fprintf(out, "A replay of %s on stream %" PRIu64 " (seq %" PRIu64
		     ") ran a captured kernel on memory whose\nallocation was "
		     "freed (or reallocated) after the capture: the replay %s\n"
		     "memory that is no longer the graph's, and may now belong "
		     "to another tensor.\n",
		graph, a->stream, a->seq, a->write ? "writes" : "reads");
	fprintf(out, "Captured kernel:\n%s", paint(color, BOLD));
	text_put(out, a->op != NULL ? a->op : "(unknown operator)");
	fprintf(out, "%s\n%s the captured allocation\nWith stack trace (at "
		     "its capture):\n",
		paint(color, RESET), a->write ? "writing to" : "reading from");
	print_stack(out, &a->stack);
	if (f->has_alloc)
		print_alloc_as(out, f, "The captured allocation (gone since) "
				       "was allocated");
	fprintf(out, "Fix it in one of three ways:\n"
		     "  - keep the tensor alive (hold a reference to it) for as "
		     "long as %s can be\n    replayed,\n"
		     "  - copy new data into the captured buffer "
		     "(captured.copy_(new)) instead of\n"
		     "    binding a new tensor in its place, or\n"
		     "  - allocate it from the graph's memory pool, so that "
		     "the graph keeps the\n    memory.\n",
		graph);
}

static void unjoined_capture_text(FILE *out, bool color,
				  const struct finding_view *f)
{
	const struct finding_view_access *a = &f->access;
	char graph[32] = "a graph", here[40] = "no memory";

	if (a->has_graph)
		snprintf(graph, sizeof(graph), "graph %" PRIu64, a->graph);
	if (f->ptr != 0)
		snprintf(here, sizeof(here), "0x%" PRIx64, f->ptr);
	print_header(out, color, f, "an unjoined graph capture");
	fprintf(out, "The capture of %s ended while stream %" PRIu64 ", which "
		     "joined it, had captured work\nthe capture's origin "
		     "stream was never made to wait for: the runtime fails the\n"
		     "capture (CUDA: unjoined work; ACL: "
		     "ACL_ERROR_RT_STREAM_UNJOINED).\n",
		graph, a->stream);
	print_access(out, color, f, "Last captured launch", a, here);
	fprintf(out, "Fix it by making the origin stream wait for stream %"
		     PRIu64 " after that kernel and\nbefore the capture ends: "
		     "origin.wait_stream(stream %" PRIu64 "), or record an "
		     "event on\nstream %" PRIu64 " and wait_event it on the "
		     "origin stream.\n",
		a->stream, a->stream, a->stream);
}

/* A kind this build does not know (a newer daemon's): the facts only. */
static void other_text(FILE *out, bool color, const struct finding_view *f)
{
	char what[128], here[40];

	snprintf(what, sizeof(what), "a finding of kind '%s'",
		 f->kind != NULL ? f->kind : "?");
	text_clean(what, what, sizeof(what));
	print_header(out, color, f, what);
	snprintf(here, sizeof(here), "0x%" PRIx64, f->ptr);
	print_access(out, color, f, "Access", &f->access, here);
	if (f->has_previous)
		print_access(out, color, f, "Previous access", &f->previous, "it");
	print_alloc(out, f);
}

void report_text(FILE *out, bool color, const struct finding_view *f)
{
	const char *kind = f->kind != NULL ? f->kind : "";

	if (strcmp(kind, finding_kind_name(FINDING_DATA_RACE)) == 0)
		race_text(out, color, f);
	else if (strcmp(kind, finding_kind_name(
				      FINDING_MISSING_RECORD_STREAM)) == 0)
		missing_record_stream_text(out, color, f);
	else if (strcmp(kind, finding_kind_name(
				      FINDING_STALE_GRAPH_ADDRESS)) == 0)
		stale_graph_address_text(out, color, f);
	else if (strcmp(kind, finding_kind_name(FINDING_UNJOINED_CAPTURE)) ==
		 0)
		unjoined_capture_text(out, color, f);
	else
		other_text(out, color, f);
	if (f->suppressed != NULL) {
		fputs("Suppressed by npusand's suppression '", out);
		text_put(out, f->suppressed);
		fputs("': stored and counted, not reported.\n", out);
	}
	fputc('\n', out);
}

void report_json_string(FILE *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n;

	fputc('"', out);
	for (size_t i = 0; i < len; i += n) {
		unsigned char ch = p[i];

		if (text_shown(p + i, len - i, &n)) {
			if (ch == '"' || ch == '\\')
				fputc('\\', out);
			fwrite(p + i, 1, n, out);
		} else if (ch == '\n') {
			fputs("\\n", out);
		} else if (ch == '\t') {
			fputs("\\t", out);
		} else if (ch < 0x80) {
			fprintf(out, "\\u%04x", ch);
		} else if (n == 2) { /* a C1 control, U+0080..U+009F */
			fprintf(out, "\\u%04x", (unsigned)p[i + 1]);
		} else {
			fputs("\\ufffd", out);
		}
	}
	fputc('"', out);
}

/* `s` as a JSON string, or null when NULL. */
static void json_string_or_null(FILE *out, const char *s)
{
	if (s != NULL)
		report_json_string(out, s, strlen(s));
	else
		fputs("null", out);
}

static void json_stack(FILE *out, const struct finding_stack *s)
{
	fputc('[', out);
	for (size_t i = 0; i < s->n; i++) {
		if (i > 0)
			fputc(',', out);
		report_json_string(out, s->frames[i], strlen(s->frames[i]));
	}
	fputc(']', out);
}

static void json_access(FILE *out, const struct finding_view_access *a)
{
	fprintf(out, "{\"stream\":%" PRIu64 ",\"seq\":%" PRIu64
		     ",\"type\":\"%s\",\"op\":",
		a->stream, a->seq, a->write ? "write" : "read");
	json_string_or_null(out, a->op != NULL ? a->op : "");
	fputs(",\"arg\":", out);
	json_string_or_null(out, a->arg);
	fputs(",\"stack\":", out);
	json_stack(out, &a->stack);
	if (a->has_graph)
		fprintf(out, ",\"graph\":%" PRIu64 "}", a->graph);
	else
		fputs(",\"graph\":null}", out);
}

static void json_process(FILE *out, const struct finding_view *f)
{
	fputs("{\"pid\":", out);
	if (f->has_pid)
		fprintf(out, "%" PRIu64, f->pid);
	else
		fputs("null", out);
	fputs(",\"job\":", out);
	json_string_or_null(out, f->job);
	if (f->has_rank)
		fprintf(out, ",\"rank\":%" PRIu64 "}", f->rank);
	else
		fputs(",\"rank\":null}", out);
}

static void json_time(FILE *out, bool has, int64_t ms)
{
	char buf[REPORT_TIME_MAX];

	if (has && report_time(ms, buf) == 0)
		fprintf(out, "\"%s\"", buf);
	else
		fputs("null", out);
}

void report_json(FILE *out, const struct finding_view *f)
{
	fprintf(out, "{\"id\":%" PRIu64 ",\"kind\":", f->id);
	json_string_or_null(out, f->kind);
	fputs(",\"process\":", out);
	json_process(out, f);
	fprintf(out, ",\"ptr\":\"0x%" PRIx64 "\",\"alloc\":", f->ptr);
	if (f->has_alloc) {
		fprintf(out, "{\"ptr\":\"0x%" PRIx64 "\",\"size\":%" PRIu64
			     ",\"stream\":",
			f->alloc.ptr, f->alloc.size);
		if (f->alloc.has_stream)
			fprintf(out, "%" PRIu64, f->alloc.stream);
		else
			fputs("null", out);
		fputs(",\"stack\":", out);
		json_stack(out, &f->alloc.stack);
		fputc('}', out);
	} else {
		fputs("null", out);
	}
	fputs(",\"access\":", out);
	json_access(out, &f->access);
	fputs(",\"previous\":", out);
	if (f->has_previous)
		json_access(out, &f->previous);
	else
		fputs("null", out);
	fputs(",\"free\":", out);
	if (f->has_free) {
		fputs("{\"stack\":", out);
		json_stack(out, &f->free_stack);
		fputc('}', out);
	} else {
		fputs("null", out);
	}
	fputs(",\"detected_at\":", out);
	json_string_or_null(out, f->detected_at);
	fprintf(out, ",\"count\":%" PRIu64, f->count);
	if (f->has_first || f->has_last) {
		fputs(",\"first_seen\":", out);
		json_time(out, f->has_first, f->first_ms);
		fputs(",\"last_seen\":", out);
		json_time(out, f->has_last, f->last_ms);
	}
	fputs("}\n", out);
}

int report_time(int64_t ms, char buf[REPORT_TIME_MAX])
{
	/* Floor division: a time before 1970 keeps its positive milliseconds. */
	int64_t sec = ms / 1000, frac = ms % 1000;
	struct tm tm;
	time_t t;

	if (frac < 0) {
		frac += 1000;
		sec--;
	}
	t = (time_t)sec;
	if (gmtime_r(&t, &tm) == NULL || tm.tm_year < -1900 ||
	    tm.tm_year > 9999 - 1900) {
		snprintf(buf, REPORT_TIME_MAX, "?");
		return -ERANGE;
	}
	/* The remainders change nothing; they bound each field for gcc. */
	snprintf(buf, REPORT_TIME_MAX, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
		 (tm.tm_year + 1900) % 10000, (tm.tm_mon + 1) % 100,
		 tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
		 tm.tm_sec % 100, (int)frac % 1000);
	return 0;
}
