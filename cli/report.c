/*
 * report.c - rendering findings as text and as JSON.
 *
 * Only the cli formats for humans; the engine hands over ids, which are
 * resolved here through the process's symtab.
 */
#include "report.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOLD "\033[1m"
#define RED "\033[1;31m"
#define RESET "\033[0m"

bool report_want_color(FILE *f)
{
	const char *no = getenv("NO_COLOR");

	return (no == NULL || no[0] == '\0') && isatty(fileno(f));
}

static const char *paint(const struct report_ctx *c, const char *code)
{
	return c->color ? code : "";
}

static const char *op_name(const struct report_ctx *c, uint32_t id)
{
	const char *s = symtab_str(c->syms, id, NULL);

	return s != NULL ? s : "(unknown operator)";
}

static void print_stack(FILE *out, const struct report_ctx *c, uint32_t id)
{
	const uint32_t *frames;
	size_t n = symtab_stack(c->syms, id, &frames);

	if (n == 0)
		fputs("  (no stack recorded)\n", out);
	for (size_t i = 0; i < n; i++)
		fprintf(out, "  %s\n", symtab_str(c->syms, frames[i], NULL));
}

static void print_process(FILE *out, const struct report_ctx *c)
{
	const struct trace_process *p = c->process;

	if (p == NULL || !p->present)
		return;
	fprintf(out, " in process %" PRIu64, p->pid);
	if (p->job != NULL)
		fprintf(out, ", job %s", p->job);
	if (p->has_rank)
		fprintf(out, ", rank %" PRIu64, p->rank);
}

static void print_access(FILE *out, const struct report_ctx *c,
			 const char *who, const struct finding_access *a,
			 const char *what)
{
	fprintf(out, "%s by stream %" PRIu64 " (seq %" PRIu64
		     ") during kernel:\n%s%s%s\n%s %s\nWith stack trace:\n",
		who, a->stream, a->seq, paint(c, BOLD), op_name(c, a->op),
		paint(c, RESET), a->write ? "writing to" : "reading from",
		what);
	print_stack(out, c, a->stack);
}

static void print_alloc(FILE *out, const struct report_ctx *c,
			const struct finding *f)
{
	if (!f->has_alloc) {
		fputs("The memory belongs to no allocation the trace saw.\n",
		      out);
		return;
	}
	fprintf(out, "Memory was allocated at 0x%" PRIx64 " (%" PRIu64
		     " bytes",
		f->alloc.ptr, f->alloc.size);
	if (f->alloc.has_stream)
		fprintf(out, " on stream %" PRIu64, f->alloc.stream);
	fputs(") with stack trace:\n", out);
	print_stack(out, c, f->alloc.stack);
}

static void print_header(FILE *out, const struct report_ctx *c,
			 const struct finding *f, const char *what)
{
	fprintf(out, "============================\n%snpusan detected %s on "
		     "memory at 0x%" PRIx64,
		paint(c, RED), what, f->ptr);
	print_process(out, c);
	fprintf(out, "%s\n", paint(c, RESET));
	if (f->count > 1)
		fprintf(out, "Seen %" PRIu64 " times; the first occurrence "
			     "is shown.\n",
			f->count);
}

static void race_text(FILE *out, const struct report_ctx *c,
		      const struct finding *f)
{
	char here[40];

	print_header(out, c, f, "a possible data race");
	snprintf(here, sizeof(here), "0x%" PRIx64, f->ptr);
	print_access(out, c, "Access", &f->access, here);
	print_access(out, c, "Previous access", &f->previous, "it");
	print_alloc(out, c, f);
	fprintf(out, "Nothing orders the access after the previous one. Fix it "
		     "by making stream %" PRIu64 " wait\nfor stream %" PRIu64
		     " after the previous access and before this one: "
		     "wait_stream, or record\nan event on stream %" PRIu64
		     " and wait_event it on stream %" PRIu64 ".\n",
		f->access.stream, f->previous.stream, f->previous.stream,
		f->access.stream);
}

static void missing_record_stream_text(FILE *out, const struct report_ctx *c,
				       const struct finding *f)
{
	uint64_t use = f->access.stream, alloc = f->alloc.stream;

	print_header(out, c, f, "a missing record_stream");
	fprintf(out, "Allocated on stream %" PRIu64 ", used on stream %" PRIu64
		     ", then %s while stream %" PRIu64 " was not ordered after "
		     "that use\nand record_stream was never called for stream %"
		     PRIu64 ": the caching allocator may hand the memory out "
		     "again\nwhile the use is still running.\n",
		alloc, use,
		f->detected_at == DETECTED_AT_FLUSH ? "still live at a flush"
						    : "freed",
		alloc, use);
	print_access(out, c, "Last use", &f->access, "it");
	print_alloc(out, c, f);
	fprintf(out, "Fix it in either of two ways:\n"
		     "  - call tensor.record_stream(s) for the usage stream s "
		     "(stream %" PRIu64 ") after the use, or\n"
		     "  - make the allocation stream wait for the usage stream "
		     "before the free:\n"
		     "    alloc_stream.wait_stream(usage_stream), i.e. stream %"
		     PRIu64 " waits for stream %" PRIu64 ".\n",
		use, alloc, use);
}

void report_text(FILE *out, const struct report_ctx *c,
		 const struct finding *f)
{
	if (f->kind == FINDING_DATA_RACE)
		race_text(out, c, f);
	else
		missing_record_stream_text(out, c, f);
	fputc('\n', out);
}

void report_json_string(FILE *out, const char *s, size_t len)
{
	fputc('"', out);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\')
			fprintf(out, "\\%c", ch);
		else if (ch == '\n')
			fputs("\\n", out);
		else if (ch == '\t')
			fputs("\\t", out);
		else if (ch < 0x20)
			fprintf(out, "\\u%04x", ch);
		else
			fputc(ch, out);
	}
	fputc('"', out);
}

static void json_stack(FILE *out, const struct report_ctx *c, uint32_t id)
{
	const uint32_t *frames;
	size_t n = symtab_stack(c->syms, id, &frames);

	fputc('[', out);
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *s = symtab_str(c->syms, frames[i], &len);

		if (i > 0)
			fputc(',', out);
		report_json_string(out, s, len);
	}
	fputc(']', out);
}

static void json_access(FILE *out, const struct report_ctx *c,
			const struct finding_access *a)
{
	size_t len;
	const char *op = symtab_str(c->syms, a->op, &len);

	fprintf(out, "{\"stream\":%" PRIu64 ",\"seq\":%" PRIu64
		     ",\"type\":\"%s\",\"op\":",
		a->stream, a->seq, a->write ? "write" : "read");
	report_json_string(out, op != NULL ? op : "", len);
	fputs(",\"stack\":", out);
	json_stack(out, c, a->stack);
	fputc('}', out);
}

static void json_process(FILE *out, const struct report_ctx *c)
{
	const struct trace_process *p = c->process;

	if (p == NULL || !p->present) {
		fputs("{\"pid\":null,\"job\":null,\"rank\":null}", out);
		return;
	}
	fprintf(out, "{\"pid\":%" PRIu64 ",\"job\":", p->pid);
	if (p->job != NULL)
		report_json_string(out, p->job, strlen(p->job));
	else
		fputs("null", out);
	if (p->has_rank)
		fprintf(out, ",\"rank\":%" PRIu64 "}", p->rank);
	else
		fputs(",\"rank\":null}", out);
}

void report_json(FILE *out, const struct report_ctx *c,
		 const struct finding *f)
{
	fprintf(out, "{\"id\":%" PRIu64 ",\"kind\":\"%s\",\"process\":", f->id,
		finding_kind_name(f->kind));
	json_process(out, c);
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
		json_stack(out, c, f->alloc.stack);
		fputc('}', out);
	} else {
		fputs("null", out);
	}
	fputs(",\"access\":", out);
	json_access(out, c, &f->access);
	fputs(",\"previous\":", out);
	if (f->has_previous)
		json_access(out, c, &f->previous);
	else
		fputs("null", out);
	fprintf(out, ",\"detected_at\":\"%s\",\"count\":%" PRIu64 "}\n",
		detected_at_name(f->detected_at), f->count);
}
