/*
 * test_trace.c - the trace reader and writer against
 * docs/trace-format.md.
 *
 * Every rejection rule of the format has a row in a table of bad inputs
 * (line and message checked), every accepted form a row in a table of good
 * ones (each op field checked); around them sit the boundaries (2^64, the
 * line limit, truncated input) and a randomized writer/reader round trip.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

#define H "npusan-trace 1\n"
#define H2 "npusan-trace 2\n"
#define NAME "t.trace"
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Appends a description of every field of `op` that is not zero. */
static void describe(FILE *f, const struct symtab *s, const struct op *op)
{
	const uint32_t *frames;
	size_t n;

	fputs(op_kind_name(op->kind) ? op_kind_name(op->kind) : "?", f);
	if (op->stream)
		fprintf(f, " stream=%llu", (unsigned long long)op->stream);
	if (op->on)
		fprintf(f, " on=%llu", (unsigned long long)op->on);
	if (op->event)
		fprintf(f, " event=%llu", (unsigned long long)op->event);
	if (op->ptr)
		fprintf(f, " ptr=0x%llx", (unsigned long long)op->ptr);
	if (op->size)
		fprintf(f, " size=%llu", (unsigned long long)op->size);
	if (op->lost)
		fprintf(f, " lost=%llu", (unsigned long long)op->lost);
	if (op->graph)
		fprintf(f, " graph=%llu", (unsigned long long)op->graph);
	if (op->has_stream)
		fputs(" has_stream", f);
	if (op->has_lost)
		fputs(" has_lost", f);
	if (op->has_graph)
		fputs(" has_graph", f);
	if (op->name)
		fprintf(f, " name='%s'", symtab_str(s, op->name, NULL));
	if (op->stack) {
		n = symtab_stack(s, op->stack, &frames);
		fputs(" stack=", f);
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%s%s", i ? "|" : "",
				symtab_str(s, frames[i], NULL));
	}
	for (int w = 0; w < 2; w++) {
		const struct op_range *v = w ? op->writes : op->reads;
		size_t nv = w ? op->nwrites : op->nreads;

		ck_assert(nv == 0 ? v == NULL : v != NULL);
		if (nv > 0)
			fputs(w ? " writes=" : " reads=", f);
		for (size_t i = 0; i < nv; i++)
			fprintf(f, "%s0x%llx+%llu", i ? "," : "",
				(unsigned long long)v[i].ptr,
				(unsigned long long)v[i].len);
	}
}

static char *describe_str(const struct symtab *s, const struct op *op)
{
	char *buf;
	size_t len;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	describe(f, s, op);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* The outcome of reading a whole input. */
struct result {
	int rc;                 /* 0, or the first error */
	char name[256];         /* trace_reader_name() */
	char msg[1024];         /* trace_reader_error() */
	char torn[1024];        /* trace_reader_torn(), "" for NULL */
	char *ops;              /* every op described, "; " between */
	struct trace_process process;
	char job[64];
	char pname[64];
};

/* Reads to the end or the first error from a reader over `syms`. */
static void drain(struct trace_reader *r, const struct symtab *syms,
		  struct result *out)
{
	const struct trace_process *p;
	size_t len;
	FILE *f = open_memstream(&out->ops, &len);
	struct op op;
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while ((out->rc = trace_read(r, &op)) == 1) {
		if (n++ > 0)
			fputs("; ", f);
		describe(f, syms, &op);
	}
	ck_assert_int_eq(fclose(f), 0);
	snprintf(out->msg, sizeof(out->msg), "%s", trace_reader_error(r));
	snprintf(out->torn, sizeof(out->torn), "%s",
		 trace_reader_torn(r) ? trace_reader_torn(r) : "");
	snprintf(out->name, sizeof(out->name), "%s", trace_reader_name(r));
	p = trace_reader_process(r);
	snprintf(out->job, sizeof(out->job), "%s", p->job ? p->job : "(null)");
	snprintf(out->pname, sizeof(out->pname), "%s",
		 p->name ? p->name : "(null)");
	/* The strings die with the reader; job and pname hold copies. */
	out->process = *p;
	out->process.job = out->process.name = NULL;
	if (out->rc < 0) {
		struct op again;

		/* An error sticks, message and all. */
		ck_assert_int_eq(trace_read(r, &again), out->rc);
		ck_assert_str_eq(trace_reader_error(r), out->msg);
	} else {
		struct op again;

		/* So does the end. */
		ck_assert_int_eq(trace_read(r, &again), 0);
	}
}

/* Reads `len` bytes from a buffer of exactly that size, so that ASan sees
 * any read past the input. */
static void read_text(const char *text, size_t len, struct result *out)
{
	struct symtab *syms;
	struct trace_reader *r;
	char *copy = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, text, len);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(copy, len, NAME, syms, &r), 0);
	drain(r, syms, out);
	trace_reader_close(r);
	symtab_free(syms);
	free(copy);
}

static void read_str(const char *text, struct result *out)
{
	read_text(text, strlen(text), out);
}

static void result_free(struct result *res)
{
	free(res->ops);
}

/* Asserts that the message is "FILE:LINE: " followed by text holding
 * `want`. */
static void assert_error(const struct result *res, unsigned long line,
			 const char *want)
{
	char prefix[300];

	snprintf(prefix, sizeof(prefix), "%s:%lu: ", res->name, line);
	ck_assert_msg(strncmp(res->msg, prefix, strlen(prefix)) == 0,
		      "message '%s' does not start with '%s'", res->msg,
		      prefix);
	ck_assert_msg(strstr(res->msg + strlen(prefix), want) != NULL,
		      "message '%s' lacks '%s'", res->msg, want);
	for (const char *p = res->msg; *p; p++)
		ck_assert_msg((unsigned char)*p >= 0x20,
			      "control byte in message '%s'", res->msg);
}

struct bad {
	const char *in;
	size_t len;
	unsigned long line;
	const char *msg;
};

#define BAD(in, line, msg) { in, sizeof(in) - 1, line, msg }

static const struct bad bad_lexical[] = {
	BAD(H "launch stream=1 op=a\0b\n", 2, "NUL byte"),
	BAD(H "launch stream=1 op=\"a\0b\"\n", 2, "NUL byte"),
	BAD(H "flush # comment \0\n", 2, "NUL byte"),
	BAD(H "\0", 2, "NUL byte"),
	BAD("\0" H, 1, "NUL byte"),
	BAD(H "launch stream=1 op=a\x01\n", 2, "control character 0x01"),
	BAD(H "launch stream=1 op=\"a\x1b\"\n", 2, "control character 0x1b"),
	BAD(H "flush # \x1f\n", 2, "control character 0x1f"),
	BAD(H "launch stream=1 op=a\rb\n", 2, "control character 0x0d"),
	BAD(H "flush\r", 2, "control character 0x0d"),
	BAD(H "flush\r\r\n", 2, "control character 0x0d"),
	BAD(H "\r\n\r\r\n", 3, "control character 0x0d"),
	BAD(H "flush\x0b\n", 2, "control character 0x0b"),
	BAD(H "launch stream=1 op=\xc3\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xe2\x82\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf0\x9f\x98\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xc0\xaf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xc1\xbf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xe0\x80\xaf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xe0\x9f\xbf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf0\x80\x80\xaf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf0\x8f\xbf\xbf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xed\xa0\x80\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xed\xbf\xbf\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf4\x90\x80\x80\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf5\x80\x80\x80\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xff\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\x80\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xe2\x28\xa1\n", 2, "invalid UTF-8"),
	BAD(H "launch stream=1 op=\xf0\x9f\x98\x28\n", 2, "invalid UTF-8"),
	BAD(H "# caf\xe9\n", 2, "invalid UTF-8 (byte 0xe9 at column 6)"),
	BAD(H "launch stream=1 op=\"\xe9\"\n", 2, "invalid UTF-8"),
};

static const struct bad bad_header[] = {
	BAD("", 1, "expected header 'npusan-trace 1'"),
	BAD("\n  \n# only a comment\n", 3, "expected header 'npusan-trace 1'"),
	BAD("launch stream=1 op=a\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace1\n", 1, "expected header 'npusan-trace 1'"),
	BAD("NPUSAN-TRACE 1\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace 1 x\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace 1.0\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace \"1\"\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace v1\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace 3\n", 1, "unsupported trace format version 3"),
	BAD("npusan-trace 0\n", 1, "unsupported trace format version 0"),
	BAD("npusan-trace 02\n", 1, "unsupported trace format version 02"),
	BAD("npusan-trace 2.0\n", 1, "expected header 'npusan-trace 1'"),
	BAD("npusan-trace 2 2\n", 1, "or 'npusan-trace 2'"),
	BAD(H2 H, 2, "unknown directive 'npusan-trace'"),
	BAD(H2 H2, 2, "unknown directive 'npusan-trace'"),
	BAD("\n# c\n  npusan-trace 10 # c\n", 3,
	    "unsupported trace format version 10"),
	BAD(H H, 2, "unknown directive 'npusan-trace'"),
};

static const struct bad bad_directive[] = {
	BAD(H "foo stream=1\n", 2, "unknown directive 'foo'"),
	BAD(H "Launch stream=1 op=a\n", 2, "unknown directive 'Launch'"),
	BAD(H "launch=1\n", 2, "unknown directive 'launch=1'"),
	BAD(H "stream_destroy stream=1\n", 2,
	    "'stream_destroy' is reserved for a later version of the format"),
	/* Version 2's words in a version 1 trace. */
	BAD(H "capture_begin stream=1 graph=1\n", 2,
	    "'capture_begin' needs trace format version 2 (the header says "
	    "version 1)"),
	BAD(H "capture_end stream=1 graph=1\n", 2,
	    "'capture_end' needs trace format version 2"),
	BAD(H "graph_replay graph=1 stream=1\n", 2,
	    "'graph_replay' needs trace format version 2"),
	BAD(H "graph_destroy graph=1\n", 2,
	    "'graph_destroy' needs trace format version 2"),
	BAD(H "flush\nalloc ptr=0x10 size=1 graph=1\n", 3,
	    "'graph' needs trace format version 2 (the header says "
	    "version 1)"),
	BAD(H "launch stream=1 op=a graph=1\n", 2,
	    "unknown key 'graph' for launch"),
	BAD(H "ipc_export ptr=1\n", 2,
	    "'ipc_export' is reserved for a later version"),
	BAD(H "ipc_import ptr=1\n", 2,
	    "'ipc_import' is reserved for a later version"),
	BAD(H "launch stream=1 op=a foo=1\n", 2,
	    "unknown key 'foo' for launch"),
	BAD(H "launch stream=1 op=a event=1\n", 2,
	    "unknown key 'event' for launch"),
	BAD(H "free ptr=1 stream=1\n", 2, "unknown key 'stream' for free"),
	BAD(H "device_sync stream=0\n", 2,
	    "unknown key 'stream' for device_sync"),
	BAD(H "gap lost=1 size=2\n", 2, "unknown key 'size' for gap"),
	BAD(H "launch stream=1 op=a Op=b\n", 2, "unknown key 'Op' for launch"),
	BAD(H "process pid=1 stack=1\n", 2, "unknown key 'stack' for process"),
	BAD(H "stack id=1 frame=a stack=1\n", 2,
	    "unknown key 'stack' for stack"),
	BAD(H "launch stream=1 op=a stream=2\n", 2, "duplicate key 'stream'"),
	BAD(H "launch stream=1 op=a read=1 read=2\n", 2,
	    "duplicate key 'read'"),
	BAD(H "launch stream=1 op=a op=a\n", 2, "duplicate key 'op'"),
	BAD(H "stack id=1 frame=a id=2\n", 2, "duplicate key 'id'"),
	BAD(H "process pid=1 job=a job=b\n", 2, "duplicate key 'job'"),
	BAD(H "gap lost=1 lost=1\n", 2, "duplicate key 'lost'"),
	BAD(H "flush stack=1 stack=1\n", 2, "duplicate key 'stack'"),
	BAD(H "launch op=a\n", 2, "missing key 'stream' for launch"),
	BAD(H "launch stream=1\n", 2, "missing key 'op' for launch"),
	BAD(H "alloc ptr=1\n", 2, "missing key 'size' for alloc"),
	BAD(H "alloc size=1\n", 2, "missing key 'ptr' for alloc"),
	BAD(H "free\n", 2, "missing key 'ptr' for free"),
	BAD(H "record_stream ptr=1\n", 2,
	    "missing key 'stream' for record_stream"),
	BAD(H "event_record event=1\n", 2,
	    "missing key 'stream' for event_record"),
	BAD(H "event_wait stream=1\n", 2, "missing key 'event' for event_wait"),
	BAD(H "event_create\n", 2, "missing key 'event' for event_create"),
	BAD(H "event_destroy\n", 2, "missing key 'event' for event_destroy"),
	BAD(H "event_sync\n", 2, "missing key 'event' for event_sync"),
	BAD(H "stream_wait stream=1\n", 2, "missing key 'on' for stream_wait"),
	BAD(H "stream_create\n", 2, "missing key 'stream' for stream_create"),
	BAD(H "stream_sync\n", 2, "missing key 'stream' for stream_sync"),
	BAD(H "process job=x\n", 2, "missing key 'pid' for process"),
	BAD(H "stack id=1\n", 2, "missing key 'frame' for stack"),
	BAD(H "stack frame=a\n", 2, "missing key 'id' for stack"),
	BAD(H "launch stream=1 op\n", 2, "expected '=' after 'op'"),
	BAD(H "launch stream=1 op=a read\n", 2, "expected '=' after 'read'"),
	BAD(H "launch stream=1 op#=a\n", 2, "expected '=' after 'op'"),
	BAD(H "launch stream=1 =a\n", 2, "missing key before '='"),
	BAD(H "launch stream=1 op = a\n", 2, "expected '=' after 'op'"),
	BAD(H "stream_create stream=1\nprocess pid=1\n", 3,
	    "process line after the first operation"),
	BAD(H "process pid=1\nprocess pid=2\n", 3,
	    "second process line (the first is on line 2)"),
	BAD(H "launch stream=1 op=a stack=1\n", 2, "stack id 1 is not defined"),
	BAD(H "flush stack=1\nstack id=1 frame=f\n", 2,
	    "stack id 1 is not defined"),
	BAD(H "stack id=1 frame=a\nflush stack=2\n", 3,
	    "stack id 2 is not defined"),
	BAD(H "stack id=1 frame=a\nstack id=1 frame=a\n", 3,
	    "stack id 1 is already defined"),
	BAD(H "stack id=7 frame=a\nflush\nstack id=0x7 frame=b\n", 4,
	    "stack id 7 is already defined"),
};

static const struct bad bad_number[] = {
	BAD(H "stream_create stream=-1\n", 2,
	    "invalid number for 'stream': -1"),
	BAD(H "stream_create stream=+1\n", 2,
	    "invalid number for 'stream': +1"),
	BAD(H "stream_create stream=\n", 2, "empty number for 'stream'"),
	BAD(H "stream_create stream=#1\n", 2, "empty number for 'stream'"),
	BAD(H "stream_create stream=0X10\n", 2,
	    "invalid number for 'stream': 0X10"),
	BAD(H "stream_create stream=0x\n", 2,
	    "invalid number for 'stream': 0x"),
	BAD(H "stream_create stream=0xg1\n", 2, "invalid number"),
	BAD(H "stream_create stream=12a\n", 2, "invalid number"),
	BAD(H "stream_create stream=1.5\n", 2, "invalid number"),
	BAD(H "stream_create stream=1e3\n", 2, "invalid number"),
	BAD(H "stream_create stream=1=2\n", 2,
	    "invalid number for 'stream': 1=2"),
	BAD(H "stream_create stream=1\"\n", 2, "invalid number"),
	BAD(H "stream_create stream=\xc2\xb9\n", 2, "invalid number"),
	BAD(H "stream_create stream=\"1\"\n", 2,
	    "a number for 'stream' must not be quoted"),
	BAD(H "stream_create stream=18446744073709551616\n", 2,
	    "number out of range for 'stream': 18446744073709551616"),
	BAD(H "stream_create stream=0x10000000000000000\n", 2,
	    "number out of range for 'stream': 0x10000000000000000"),
	BAD(H "event_create event=99999999999999999999999\n", 2,
	    "number out of range for 'event'"),
	BAD(H "event_create event=99999999999999999999\n", 2,
	    "number out of range for 'event'"),
	BAD(H "event_create event=100000000000000000000\n", 2,
	    "number out of range for 'event'"),
	BAD(H "stream_create stream=0018446744073709551616\n", 2,
	    "number out of range for 'stream': 0018446744073709551616"),
	BAD(H "stream_create stream=0x00010000000000000000\n", 2,
	    "number out of range for 'stream'"),
	BAD(H "stream_create stream=18446744073709551616x\n", 2,
	    "invalid number for 'stream': 18446744073709551616x"),
	BAD(H "alloc ptr=0x1ffffffffffffffff size=1\n", 2,
	    "number out of range for 'ptr': 0x1ffffffffffffffff"),
	BAD(H "flush stack=abc\n", 2, "invalid number for 'stack': abc"),
	BAD(H "stack id=x frame=a\n", 2, "invalid number for 'id': x"),
	BAD(H "process pid=1 rank=-2\n", 2, "invalid number for 'rank'"),
	BAD(H "gap lost=0x\n", 2, "invalid number for 'lost'"),
	BAD(H "alloc ptr=0xffffffffffffffff size=2\n", 2,
	    "alloc range past 2^64: ptr=0xffffffffffffffff size=2"),
	BAD(H "alloc ptr=0xfffffffffffff000 size=4097\n", 2,
	    "alloc range past 2^64"),
};

static const struct bad bad_string[] = {
	BAD(H "launch stream=1 op=\n", 2, "empty value for 'op'"),
	BAD(H "launch stream=1 op= \n", 2, "empty value for 'op'"),
	BAD(H "launch stream=1 op=\"\"\n", 2, "empty value for 'op'"),
	BAD(H "launch stream=1 op=#x\n", 2, "empty value for 'op'"),
	BAD(H "launch stream=1 op=a=b\n", 2,
	    "'=' in the unquoted value of 'op': a=b"),
	BAD(H "launch stream=1 op=a\"b\n", 2,
	    "'\"' in the unquoted value of 'op'"),
	BAD(H "launch stream=1 op=a\"b c\"\n", 2,
	    "'\"' in the unquoted value of 'op'"),
	BAD(H "stack id=1 frame=a=b\n", 2,
	    "'=' in the unquoted value of 'frame'"),
	BAD(H "process pid=1 job=a\"b\n", 2,
	    "'\"' in the unquoted value of 'job'"),
	BAD(H "process pid=1 name==\n", 2,
	    "'=' in the unquoted value of 'name'"),
	BAD(H "launch stream=1 op=\"abc\n", 2,
	    "unterminated quoted string for 'op'"),
	BAD(H "launch stream=1 op=\"\nflush", 2, "unterminated quoted string"),
	BAD(H "launch stream=1 op=\"abc\\\"\n", 2,
	    "unterminated quoted string for 'op'"),
	BAD(H "launch stream=1 op=\"abc\\\n", 2,
	    "unterminated quoted string for 'op'"),
	BAD(H "launch stream=1 op=\"a#b\n", 2, "unterminated quoted string"),
	BAD(H "launch stream=1 op=\"a\\x\"\n", 2,
	    "invalid escape '\\x' in 'op'"),
	BAD(H "launch stream=1 op=\"a\\r\"\n", 2, "invalid escape '\\r'"),
	BAD(H "launch stream=1 op=\"a\\0\"\n", 2, "invalid escape '\\0'"),
	BAD(H "launch stream=1 op=\"a\\'\"\n", 2, "invalid escape"),
	BAD(H "launch stream=1 op=\"a\\ b\"\n", 2, "invalid escape '\\ '"),
	BAD(H "launch stream=1 op=\"a\\\tb\"\n", 2,
	    "invalid escape '\\\\t'"),
	BAD(H "launch stream=1 op=\"a\\\xc3\xa9\"\n", 2,
	    "invalid escape '\\\xc3\xa9' in 'op'"),
	BAD(H "stack id=1 frame=\"\\u0041\"\n", 2,
	    "invalid escape '\\u' in 'frame'"),
	BAD(H "launch stream=1 op=\"a\"b\n", 2,
	    "expected a blank after the closing quote of 'op'"),
	BAD(H "launch stream=1 op=\"a\"\"b\"\n", 2,
	    "expected a blank after the closing quote"),
	BAD(H "launch stream=1 op=\"a\"=x\n", 2,
	    "expected a blank after the closing quote"),
	BAD(H "process pid=1 job=\"a\",name=b\n", 2,
	    "expected a blank after the closing quote of 'job'"),
};

static const struct bad bad_list[] = {
	BAD(H "launch stream=1 op=a read=0x10,,0x20\n", 2,
	    "empty element in 'read'"),
	BAD(H "launch stream=1 op=a read=0x10,\n", 2,
	    "empty element in 'read'"),
	BAD(H "launch stream=1 op=a write=,0x10\n", 2,
	    "empty element in 'write'"),
	BAD(H "launch stream=1 op=a read=,\n", 2, "empty element in 'read'"),
	BAD(H "launch stream=1 op=a read=0x10,#c\n", 2,
	    "empty element in 'read'"),
	BAD(H "launch stream=1 op=a read=0x10+0\n", 2,
	    "zero length for 'read': 0x10+0"),
	BAD(H "launch stream=1 op=a write=0x10,0x20+0x0\n", 2,
	    "zero length for 'write': 0x20+0x0"),
	BAD(H "launch stream=1 op=a write=0xffffffffffffffff+2\n", 2,
	    "range past 2^64 for 'write': 0xffffffffffffffff+2"),
	BAD(H "launch stream=1 op=a read=2+18446744073709551615\n", 2,
	    "range past 2^64 for 'read'"),
	BAD(H "launch stream=1 op=a read=0x10+\n", 2,
	    "invalid element for 'read': 0x10+"),
	BAD(H "launch stream=1 op=a read=+4\n", 2,
	    "invalid element for 'read': +4"),
	BAD(H "launch stream=1 op=a read=0x10+4+4\n", 2,
	    "invalid element for 'read': 0x10+4+4"),
	BAD(H "launch stream=1 op=a read=0x10;0x20\n", 2,
	    "invalid element for 'read'"),
	BAD(H "launch stream=1 op=a read=-0x10\n", 2,
	    "invalid element for 'read'"),
	BAD(H "launch stream=1 op=a read=0X10\n", 2,
	    "invalid element for 'read': 0X10"),
	BAD(H "launch stream=1 op=a read=0x10 0x20\n", 2,
	    "expected '=' after '0x20'"),
	BAD(H "launch stream=1 op=a read=0x10, 0x20\n", 2,
	    "empty element in 'read'"),
	BAD(H "launch stream=1 op=a read=\"0x10\"\n", 2,
	    "a list for 'read' must not be quoted"),
	BAD(H "launch stream=1 op=a read=0x1ffffffffffffffff\n", 2,
	    "number out of range for 'read': 0x1ffffffffffffffff"),
	BAD(H "launch stream=1 op=a read=0x10+0x10000000000000000\n", 2,
	    "number out of range for 'read'"),
	BAD(H "launch stream=1 op=a read=18446744073709551616\n", 2,
	    "number out of range for 'read'"),
};

static void check_bad(const struct bad *row)
{
	struct result res;

	read_text(row->in, row->len, &res);
	ck_assert_msg(res.rc == -EINVAL, "%s: rc %d, expected -EINVAL (%s)",
		      row->msg, res.rc, res.msg);
	assert_error(&res, row->line, row->msg);
	result_free(&res);
}

START_TEST(trace_rejects_lexical_errors)
{
	check_bad(&bad_lexical[_i]);
}
END_TEST

START_TEST(trace_rejects_bad_header)
{
	check_bad(&bad_header[_i]);
}
END_TEST

START_TEST(trace_rejects_bad_directives_and_keys)
{
	check_bad(&bad_directive[_i]);
}
END_TEST

START_TEST(trace_rejects_bad_numbers)
{
	check_bad(&bad_number[_i]);
}
END_TEST

START_TEST(trace_rejects_bad_strings)
{
	check_bad(&bad_string[_i]);
}
END_TEST

START_TEST(trace_rejects_bad_pointer_lists)
{
	check_bad(&bad_list[_i]);
}
END_TEST

struct good {
	const char *in;
	size_t len;
	const char *ops; /* describe() of each op, "; " between */
};

#define GOOD(in, ops) { in, sizeof(in) - 1, ops }

static const struct good good[] = {
	/* Every directive. */
	GOOD(H "stream_create stream=7\n", "stream_create stream=7"),
	GOOD(H "event_create event=3\n", "event_create event=3"),
	GOOD(H "event_destroy event=3\n", "event_destroy event=3"),
	GOOD(H "event_record event=3 stream=4\n",
	     "event_record stream=4 event=3"),
	GOOD(H "event_wait event=3 stream=4\n", "event_wait stream=4 event=3"),
	GOOD(H "event_sync event=3\n", "event_sync event=3"),
	GOOD(H "stream_wait stream=1 on=2\n", "stream_wait stream=1 on=2"),
	GOOD(H "stream_sync stream=5\n", "stream_sync stream=5"),
	GOOD(H "device_sync\n", "device_sync"),
	GOOD(H "alloc ptr=0x1000 size=4096\n", "alloc ptr=0x1000 size=4096"),
	GOOD(H "alloc ptr=0x1000 size=0 stream=0\n",
	     "alloc ptr=0x1000 has_stream"),
	GOOD(H "alloc ptr=0x1000 size=16 stream=3\n",
	     "alloc stream=3 ptr=0x1000 size=16 has_stream"),
	GOOD(H "free ptr=0x1000\n", "free ptr=0x1000"),
	GOOD(H "record_stream ptr=0x1000 stream=2\n",
	     "record_stream stream=2 ptr=0x1000"),
	GOOD(H "launch stream=2 op=aten::add.Tensor read=0x10,0x20+16 "
	       "write=0x30+4096\n",
	     "launch stream=2 name='aten::add.Tensor' "
	     "reads=0x10+1,0x20+16 writes=0x30+4096"),
	GOOD(H "flush\n", "flush"),
	GOOD(H "gap\n", "gap"),
	GOOD(H "gap lost=0\n", "gap has_lost"),
	GOOD(H "gap lost=12\n", "gap lost=12 has_lost"),
	GOOD(H "stack id=1 frame=f\ndevice_sync stack=1\n",
	     "device_sync stack=f"),
	/* Blanks, comments and line endings. */
	GOOD(H "launch write=0x20 op=mm read=0x10 stream=2\n",
	     "launch stream=2 name='mm' reads=0x10+1 writes=0x20+1"),
	GOOD(H "launch stream=1 op=add#x\n", "launch stream=1 name='add'"),
	GOOD(H "launch stream=1 op=add read=0x10#c\n",
	     "launch stream=1 name='add' reads=0x10+1"),
	GOOD(H "stream_create stream=1#c\n", "stream_create stream=1"),
	GOOD(H "device_sync#comment\n", "device_sync"),
	GOOD(H "flush # trailing comment\n", "flush"),
	GOOD(H "  \t launch stream=1 op=a\n", "launch stream=1 name='a'"),
	GOOD(H "launch\tstream=1\top=a\t \n", "launch stream=1 name='a'"),
	GOOD(H "\n \t\n# c \"unterminated\n#\n\nflush\n\n", "flush"),
	GOOD("npusan-trace 1\r\nflush\r\n\r\ngap\n", "flush; gap"),
	GOOD(H "flush", "flush"),
	GOOD(H "flush\r\n", "flush"),
	GOOD("# a comment first\n\n  npusan-trace\t1  # ok\nflush\n", "flush"),
	GOOD("npusan-trace 1#c\nflush\n", "flush"),
	GOOD("npusan-trace 1", ""),
	GOOD(H "# \x7f is not a control character\nflush # \xf4\x8f\xbf\xbf\n",
	     "flush"),
	/* Numbers. */
	GOOD(H "free ptr=0xABCdef\n", "free ptr=0xabcdef"),
	GOOD(H "free ptr=4096\n", "free ptr=0x1000"),
	GOOD(H "stream_create stream=007\n", "stream_create stream=7"),
	GOOD(H "stream_create stream=0x0000000000000000000010\n",
	     "stream_create stream=16"),
	GOOD(H "stream_create stream=0\n", "stream_create"),
	GOOD(H "stream_create stream=18446744073709551615\n",
	     "stream_create stream=18446744073709551615"),
	GOOD(H "event_create event=0xffffffffffffffff\n",
	     "event_create event=18446744073709551615"),
	GOOD(H "event_create event=0xFFFFFFFFFFFFFFFF\n",
	     "event_create event=18446744073709551615"),
	GOOD(H "event_create event=0x0000ffffffffffffffff\n",
	     "event_create event=18446744073709551615"),
	GOOD(H "stream_create stream=0000000000000000000000"
	       "18446744073709551615\n",
	     "stream_create stream=18446744073709551615"),
	GOOD(H "stream_create stream=9999999999999999999\n",
	     "stream_create stream=9999999999999999999"),
	GOOD(H "stream_create stream=10000000000000000000\n",
	     "stream_create stream=10000000000000000000"),
	GOOD(H "alloc ptr=0xffffffffffffffff size=0\n",
	     "alloc ptr=0xffffffffffffffff"),
	GOOD(H "alloc ptr=0xffffffffffffffff size=1\n",
	     "alloc ptr=0xffffffffffffffff size=1"),
	GOOD(H "alloc ptr=0xfffffffffffff000 size=4096\n",
	     "alloc ptr=0xfffffffffffff000 size=4096"),
	GOOD(H "alloc ptr=0 size=18446744073709551615\n",
	     "alloc size=18446744073709551615"),
	/* Pointer lists. */
	GOOD(H "launch stream=0 op=a read=0xffffffffffffffff "
	       "write=0xfffffffffffff000+4096\n",
	     "launch name='a' reads=0xffffffffffffffff+1 "
	     "writes=0xfffffffffffff000+4096"),
	GOOD(H "launch stream=0 op=a read=1+18446744073709551615,"
	       "0+0xffffffffffffffff\n",
	     "launch name='a' reads=0x1+18446744073709551615,"
	     "0x0+18446744073709551615"),
	GOOD(H "launch stream=1 op=a read= write=\n",
	     "launch stream=1 name='a'"),
	GOOD(H "launch stream=1 op=a read=#c\n", "launch stream=1 name='a'"),
	GOOD(H "launch stream=1 op=a read=0x10,0x10+1,0x8+16 write=0x10\n",
	     "launch stream=1 name='a' reads=0x10+1,0x10+1,0x8+16 "
	     "writes=0x10+1"),
	GOOD(H "launch stream=1 op=a write=0x30,0x10,0x20+0x10\n",
	     "launch stream=1 name='a' writes=0x30+1,0x10+1,0x20+16"),
	/* Strings. */
	GOOD(H "launch stream=1 op=\"a b\"\n", "launch stream=1 name='a b'"),
	GOOD(H "launch stream=1 op=\"x\\\"y\\\\z\\n\\t\"\n",
	     "launch stream=1 name='x\"y\\z\n\t'"),
	GOOD(H "launch stream=1 op=\"#not a comment\"\n",
	     "launch stream=1 name='#not a comment'"),
	GOOD(H "launch stream=1 op=\"a=b\"\n", "launch stream=1 name='a=b'"),
	GOOD(H "launch stream=1 op=\"a\tb\"\n", "launch stream=1 name='a\tb'"),
	GOOD(H "launch stream=1 op=\"a\"#c\n", "launch stream=1 name='a'"),
	GOOD(H "launch stream=1 op=\"a\"\t\n", "launch stream=1 name='a'"),
	GOOD(H "launch stream=1 op=\xc3\xa9\xe2\x86\x92\xf0\x9f\x98\x80\n",
	     "launch stream=1 name='\xc3\xa9\xe2\x86\x92\xf0\x9f\x98\x80'"),
	GOOD(H "launch stream=1 op=a\x7f" "b\n",
	     "launch stream=1 name='a\x7f" "b'"),
	GOOD(H "launch stream=1 op=a\\b'c,d+e\n",
	     "launch stream=1 name='a\\b'c,d+e'"),
	GOOD(H "stack id=5 frame=\"f 1\" frame=g frame=\"\" frame=\n"
	       "launch stream=1 op=a stack=5\n",
	     "launch stream=1 name='a' stack=f 1|g||"),
	GOOD(H "stack id=18446744073709551615 frame=a frame=a\n"
	       "flush stack=0xffffffffffffffff\n",
	     "flush stack=a|a"),
	GOOD(H "stack id=0 frame=z\nflush stack=0\n", "flush stack=z"),
	/* Header directives anywhere before their use. */
	GOOD(H "stack id=1 frame=a\nprocess pid=3\nflush stack=1\n",
	     "flush stack=a"),
	GOOD(H "flush\nstack id=1 frame=a\nflush stack=1\n",
	     "flush; flush stack=a"),
	GOOD(H "process pid=1\n", ""),
};

START_TEST(trace_accepts_valid_lines)
{
	const struct good *row = &good[_i];
	struct result res;

	read_text(row->in, row->len, &res);
	ck_assert_msg(res.rc == 0, "'%s' rejected: %s", row->ops, res.msg);
	ck_assert_str_eq(res.msg, "");
	ck_assert_str_eq(res.ops, row->ops);
	result_free(&res);
}
END_TEST

START_TEST(trace_process_line_fields)
{
	struct result res;

	read_str(H "process pid=42 job=\"my job\" rank=3 name=trainer\n", &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert(res.process.present);
	ck_assert(res.process.has_rank);
	ck_assert_uint_eq(res.process.pid, 42);
	ck_assert_uint_eq(res.process.rank, 3);
	ck_assert_str_eq(res.job, "my job");
	ck_assert_str_eq(res.pname, "trainer");
	result_free(&res);

	read_str(H "process pid=0x10 job=\"\"\nflush\n", &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert(res.process.present);
	ck_assert(!res.process.has_rank);
	ck_assert_uint_eq(res.process.pid, 16);
	ck_assert_str_eq(res.job, "");
	ck_assert_str_eq(res.pname, "(null)");
	result_free(&res);

	read_str(H "flush\n", &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert(!res.process.present);
	ck_assert_str_eq(res.job, "(null)");
	result_free(&res);
}
END_TEST

START_TEST(trace_line_and_offset_follow_input)
{
	static const char text[] = H "\n# c\nflush\r\n\n  gap lost=1\n"
				     "stack id=1 frame=a\ndevice_sync";
	struct symtab *syms;
	struct trace_reader *r;
	struct op op;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(text, strlen(text), NAME, syms,
					      &r), 0);
	ck_assert_str_eq(trace_reader_name(r), NAME);
	ck_assert_str_eq(trace_reader_error(r), "");
	ck_assert_uint_eq(trace_reader_offset(r), 0);
	ck_assert_int_eq(trace_read(r, &op), 1);
	ck_assert_uint_eq(trace_reader_line(r), 4);
	ck_assert_uint_eq(trace_reader_offset(r), strlen(H "\n# c\nflush\r\n"));
	ck_assert_int_eq(trace_read(r, &op), 1);
	ck_assert_uint_eq(trace_reader_line(r), 6);
	ck_assert_int_eq(trace_read(r, &op), 1);
	ck_assert_uint_eq(trace_reader_line(r), 8);
	ck_assert_int_eq(op.kind, OP_DEVICE_SYNC);
	ck_assert_int_eq(trace_read(r, &op), 0);
	ck_assert_int_eq(trace_read(r, &op), 0);
	ck_assert_uint_eq(trace_reader_line(r), 8);
	ck_assert_uint_eq(trace_reader_offset(r), strlen(text));
	trace_reader_close(r);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_same_frames_share_a_symtab_stack)
{
	static const char text[] = H "stack id=1 frame=a frame=b\n"
				     "stack id=2 frame=a frame=b\n"
				     "stack id=3 frame=b frame=a\n"
				     "flush stack=1\nflush stack=2\n"
				     "flush stack=3\nlaunch stream=0 op=a\n";
	struct symtab *syms;
	struct trace_reader *r;
	uint32_t ids[4], a;
	struct op op;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(text, strlen(text), NAME, syms,
					      &r), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(trace_read(r, &op), 1);
		ids[i] = i < 3 ? op.stack : op.name;
	}
	ck_assert_uint_ne(ids[0], 0);
	ck_assert_uint_eq(ids[0], ids[1]);
	ck_assert_uint_ne(ids[0], ids[2]);
	/* Operator names and frames share the string table. */
	ck_assert_int_eq(symtab_intern(syms, "a", 1, &a), 0);
	ck_assert_uint_eq(ids[3], a);
	trace_reader_close(r);
	symtab_free(syms);
}
END_TEST

/* The reader keeps what the live path carries (op.h): a stack's innermost
 * OP_MAX_FRAMES frames, a string's first OP_MAX_STRING bytes, never
 * splitting a character. */
START_TEST(trace_keeps_what_the_live_path_carries)
{
	size_t cap = 2 * OP_MAX_STRING + 16 * OP_MAX_FRAMES, len = 0, n;
	char *text = malloc(cap);
	const uint32_t *frames;
	struct symtab *syms;
	struct trace_reader *r;
	const char *name;
	struct op op;

	ck_assert_ptr_nonnull(text);
	len += (size_t)snprintf(text, cap, H "stack id=1");
	for (unsigned i = 0; i <= OP_MAX_FRAMES; i++)
		len += (size_t)snprintf(text + len, cap - len, " frame=f%u", i);
	len += (size_t)snprintf(text + len, cap - len,
				"\nlaunch stream=0 stack=1 op=");
	memset(text + len, 'o', OP_MAX_STRING - 1);
	len += OP_MAX_STRING - 1;
	snprintf(text + len, cap - len, "\xc3\xa9z\n");
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(text, strlen(text), NAME, syms,
					      &r), 0);
	ck_assert_int_eq(trace_read(r, &op), 1);
	n = symtab_stack(syms, op.stack, &frames);
	ck_assert_uint_eq(n, OP_MAX_FRAMES);
	ck_assert_str_eq(symtab_str(syms, frames[0], NULL), "f0");
	ck_assert_str_eq(symtab_str(syms, frames[n - 1], NULL), "f255");
	name = symtab_str(syms, op.name, &n);
	ck_assert_uint_eq(n, OP_MAX_STRING - 1);
	ck_assert_int_eq(name[n - 1], 'o');
	trace_reader_close(r);
	symtab_free(syms);
	free(text);
}
END_TEST

START_TEST(trace_messages_stay_short_and_printable)
{
	static char key[3001];
	struct result res;
	char text[4096];

	memset(key, 'k', 3000);
	snprintf(text, sizeof(text), H "launch stream=1 op=a %s=1\n", key);
	read_str(text, &res);
	assert_error(&res, 2, "unknown key 'kkkkkkkkkkkkkkkkkkkk"
			      "kkkkkkkkkkkkkkkkkkkk...' for launch");
	ck_assert_uint_lt(strlen(res.msg), 120);
	result_free(&res);

	read_str(H "stream_create stream=1\x7f\t\n", &res);
	assert_error(&res, 2, "invalid number for 'stream': 1\\x7f");
	result_free(&res);

	/* A cut never splits a character. */
	snprintf(text, sizeof(text), H "flush o%s=1\n",
		     "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
		     "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
		     "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
	read_str(text, &res);
	assert_error(&res, 2, "\xc3\xa9...' for flush");
	result_free(&res);
}
END_TEST

/* A launch whose read list takes about `bytes` bytes. */
static char *big_launch(size_t bytes, size_t *len)
{
	size_t cap = bytes + 256, n = 0;
	char *text = malloc(cap);

	ck_assert_ptr_nonnull(text);
	n += (size_t)sprintf(text, H "launch stream=1 op=big read=");
	for (uint64_t i = 0; n < bytes; i++)
		n += (size_t)sprintf(text + n, "%s0x7f00%08llx+64",
				     i ? "," : "", (unsigned long long)i * 64);
	n += (size_t)sprintf(text + n, " write=0x10\nflush\n");
	*len = n;
	return text;
}

static char *tmp_file(const char *name, const char *data, size_t len)
{
	char *path = tu_write_file(name, "");
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

/* Reads the file at `path` like read_text() reads memory. */
static void read_file(const char *path, struct result *out)
{
	struct symtab *syms;
	struct trace_reader *r;
	char *err;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_open(path, syms, &r, &err), 0);
	ck_assert_ptr_null(err);
	drain(r, syms, out);
	trace_reader_close(r);
	symtab_free(syms);
}

START_TEST(trace_accepts_1mb_line)
{
	size_t len;
	char *text = big_launch(1 << 20, &len), *path;
	struct result res;

	ck_assert_uint_gt(len, 1 << 20);
	path = tmp_file("big.trace", text, len);
	for (int from_file = 0; from_file < 2; from_file++) {
		if (from_file)
			read_file(path, &res);
		else
			read_text(text, len, &res);
		ck_assert_msg(res.rc == 0, "%s", res.msg);
		ck_assert(strncmp(res.ops, "launch stream=1 name='big' "
				  "reads=0x7f0000000000+64,0x7f0000000040+64,",
				  64) == 0);
		ck_assert(strstr(res.ops, " writes=0x10+1; flush") != NULL);
		result_free(&res);
	}
	free(path);
	free(text);
}
END_TEST

/* A comment line of exactly `len` bytes, then `ending` and an op. */
static char *comment_line(size_t len, const char *ending, size_t *total)
{
	size_t hl = strlen(H), el = strlen(ending);
	char *text = malloc(hl + len + el + 6);

	ck_assert_ptr_nonnull(text);
	memcpy(text, H, hl);
	memset(text + hl, 'c', len);
	text[hl] = '#';
	memcpy(text + hl + len, ending, el);
	memcpy(text + hl + len + el, "flush", 5);
	*total = hl + len + el + 5;
	return text;
}

static void check_limit(size_t line_len, const char *ending, bool file,
			bool ok)
{
	size_t len;
	char *text = comment_line(line_len, ending, &len), *path = NULL;
	struct result res;

	if (file) {
		path = tmp_file("limit.trace", text, len);
		free(text);
		read_file(path, &res);
	} else {
		read_text(text, len, &res);
		free(text);
	}
	if (ok) {
		ck_assert_msg(res.rc == 0, "%s", res.msg);
		ck_assert_str_eq(res.ops, "flush");
	} else {
		ck_assert_int_eq(res.rc, -E2BIG);
		assert_error(&res, 2, "line longer than 67108864 bytes");
	}
	result_free(&res);
	if (path != NULL) {
		unlink(path);
		free(path);
	}
}

START_TEST(trace_line_limit_is_exact)
{
	check_limit(TRACE_MAX_LINE, "\r\n", true, true);
	check_limit(TRACE_MAX_LINE + 1, "\n", true, false);
	check_limit(TRACE_MAX_LINE, "\n", false, true);
	check_limit(TRACE_MAX_LINE + 1, "\r\n", false, false);
}
END_TEST

START_TEST(trace_rejects_endless_line)
{
	/* No newline at all: the reader must stop buffering at the limit. */
	size_t len = TRACE_MAX_LINE + 100;
	char *text = malloc(len), *path;
	struct result res;

	ck_assert_ptr_nonnull(text);
	memset(text, ' ', len);
	memcpy(text, H, strlen(H));
	path = tmp_file("endless.trace", text, len);
	read_file(path, &res);
	ck_assert_int_eq(res.rc, -E2BIG);
	assert_error(&res, 2, "line longer than");
	result_free(&res);
	read_text(text, len, &res);
	ck_assert_int_eq(res.rc, -E2BIG);
	result_free(&res);
	unlink(path);
	free(path);
	free(text);
}
END_TEST

START_TEST(trace_every_prefix_parses_or_fails_cleanly)
{
	static const char text[] =
		"# prefix test\r\nnpusan-trace 1\n"
		"process pid=4242 job=\"d\xc3\xa9mo \\\"x\\\"\" rank=0 name=w\n"
		"stack id=1 frame=\"train.py:14 in step\" frame=\xe2\x86\x92\n"
		"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
		"launch stream=0 op=aten::randn write=0x1000+4096 stack=1\r\n"
		"stream_create stream=7\n"
		"launch stream=7 op=\"add\\tx\" read=0x1000,0x1010+16 "
		"write=0x2000 # race\n"
		"event_record event=18446744073709551615 stream=7\n"
		"gap lost=12\n"
		"free ptr=0x1000";
	size_t full_ops = 0;

	for (size_t len = 0; len <= strlen(text); len++) {
		struct result res;
		size_t nops;

		read_text(text, len, &res);
		nops = res.ops[0] ? 1 : 0;
		for (const char *p = res.ops; (p = strstr(p, "; ")); p++)
			nops++;
		if (res.rc == 0) {
			ck_assert_str_eq(res.msg, "");
		} else {
			ck_assert_msg(res.rc == -EINVAL, "%zu: rc %d", len,
				      res.rc);
			ck_assert(strncmp(res.msg, NAME ":", 8) == 0);
			ck_assert(strchr(res.msg, '\n') == NULL);
		}
		if (len == strlen(text)) {
			ck_assert_int_eq(res.rc, 0);
			full_ops = nops;
		}
		result_free(&res);
	}
	ck_assert_uint_eq(full_ops, 7);
}
END_TEST

START_TEST(trace_reads_file_path)
{
	static const char text[] = H "process pid=9\nstream_create stream=1\n"
				     "launch stream=1 op=a read=0x10\n";
	char *path = tu_write_file("ok.trace", text);
	struct result res;

	read_file(path, &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_str_eq(res.ops, "stream_create stream=1; "
				  "launch stream=1 name='a' reads=0x10+1");
	ck_assert_uint_eq(res.process.pid, 9);
	result_free(&res);
	free(path);
}
END_TEST

START_TEST(trace_error_names_the_file_as_given)
{
	char *path = tu_write_file("bad.trace", H "flush\nbogus\n");
	struct symtab *syms;
	struct trace_reader *r;
	char want[4200];
	struct op op;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_open(path, syms, &r, NULL), 0);
	ck_assert_int_eq(trace_read(r, &op), 1);
	ck_assert_int_eq(trace_read(r, &op), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: unknown directive 'bogus'", path);
	ck_assert_str_eq(trace_reader_error(r), want);
	ck_assert_str_eq(trace_reader_name(r), path);
	ck_assert_uint_eq(trace_reader_line(r), 2);
	trace_reader_close(r);
	symtab_free(syms);
	free(path);
}
END_TEST

START_TEST(trace_missing_file_gives_enoent)
{
	struct symtab *syms;
	struct trace_reader *r = NULL;
	char *err = NULL;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_open("/nonexistent/x.trace", syms, &r,
					   &err), -ENOENT);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(err);
	ck_assert_str_eq(err,
			 "/nonexistent/x.trace: No such file or directory");
	free(err);
	ck_assert_int_eq(trace_reader_open("/nonexistent/x.trace", syms, &r,
					   NULL), -ENOENT);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_directory_gives_read_error)
{
	struct symtab *syms;
	struct trace_reader *r;
	struct op op;

	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_open("/", syms, &r, NULL), 0);
	ck_assert_int_eq(trace_read(r, &op), -EIO);
	ck_assert_str_eq(trace_reader_error(r),
			 "/:1: read error: Is a directory");
	trace_reader_close(r);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_dash_reads_stdin)
{
	char *path = tu_write_file("stdin.trace", H "gap lost=3\n");
	int fd = open(path, O_RDONLY);
	struct result res;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, 0), 0);
	close(fd);
	read_file("-", &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_str_eq(res.ops, "gap lost=3 has_lost");
	result_free(&res);
	/* The reader left fd 0 open. */
	ck_assert_int_ne(fcntl(0, F_GETFD), -1);
	free(path);
}
END_TEST

/* A last line cut short by a killed writer: no newline, not a valid line,
 * but its first word starts a directive. */
struct torn {
	const char *in;
	size_t len;
	unsigned long line;
	const char *why; /* in the warning */
	const char *ops; /* the ops before it */
};

#define TORN(in, line, why, ops) { in, sizeof(in) - 1, line, why, ops }

static const struct torn torn_rows[] = {
	TORN(H "flush\nlaunch stream=2 op=b wri", 3, "expected '=' after 'wri'",
	     "flush"),
	TORN(H "flush\nlaunch stream=1 op=\"abc", 3,
	     "unterminated quoted string for 'op'", "flush"),
	TORN(H "flush\nlaunch stream=1 op=\"", 3, "unterminated quoted string",
	     "flush"),
	TORN(H "flush\nlaunch stream=1 op=\xc3", 3, "invalid UTF-8", "flush"),
	TORN(H "flush\nlaunch stream=1 op=a read=0x10,", 3,
	     "empty element in 'read'", "flush"),
	TORN(H "flush\nalloc ptr=0x10", 3, "missing key 'size' for alloc",
	     "flush"),
	TORN(H "flush\nstream_w", 3, "unknown directive 'stream_w'", "flush"),
	TORN(H "flush\nlaunch", 3, "missing key", "flush"),
	TORN(H "gap lost=1\n  event_record event=1 stream=", 3,
	     "empty number for 'stream'", "gap lost=1 has_lost"),
	TORN(H2 "capture_begin stream=1 graph=1\ngraph_replay graph=1 str", 3,
	     "expected '=' after 'str'", "capture_begin stream=1 graph=1"),
	TORN(H2 "flush\ncapture_e", 3, "unknown directive 'capture_e'",
	     "flush"),
	TORN("npusan-tr", 1, "expected header", ""),
	TORN("# comment\nnpusan-trace", 2, "expected header", ""),
};

static void check_torn(const struct result *res, const struct torn *row)
{
	char prefix[300];

	ck_assert_msg(res->rc == 0, "%s: rc %d (%s)", row->why, res->rc,
		      res->msg);
	ck_assert_str_eq(res->msg, "");
	ck_assert_str_eq(res->ops, row->ops);
	snprintf(prefix, sizeof(prefix),
		 "%s:%lu: warning: the last line is cut short", res->name,
		 row->line);
	ck_assert_msg(strncmp(res->torn, prefix, strlen(prefix)) == 0,
		      "warning '%s' does not start with '%s'", res->torn,
		      prefix);
	ck_assert_msg(strstr(res->torn, row->why) != NULL,
		      "warning '%s' lacks '%s'", res->torn, row->why);
}

START_TEST(trace_torn_last_line_ends_the_trace)
{
	const struct torn *row = &torn_rows[_i];
	char *path = tmp_file(NAME, row->in, row->len);
	struct result res;

	read_text(row->in, row->len, &res);
	check_torn(&res, row);
	result_free(&res);
	read_file(path, &res);
	check_torn(&res, row);
	result_free(&res);
	unlink(path);
	free(path);
}
END_TEST

/* Not the last line, ended by a newline, a word that starts no directive:
 * each is an error as it always was. */
START_TEST(trace_only_a_last_line_may_be_torn)
{
	static const struct bad rows[] = {
		BAD(H "launch stream=2 op=b wri\nflush\n", 2,
		    "expected '=' after 'wri'"),
		BAD(H "launch stream=2 op=b wri\nflush", 2,
		    "expected '=' after 'wri'"),
		BAD(H "flush\nlaunch stream=2 op=b wri\n", 3,
		    "expected '=' after 'wri'"),
		BAD(H "flush\nlaunch stream=2 op=b wri\r\n", 3,
		    "expected '=' after 'wri'"),
		BAD(H "flush\nbogus", 3, "unknown directive 'bogus'"),
		BAD(H "flush\nflushed", 3, "unknown directive 'flushed'"),
		BAD(H "flush\ncapture_begin graph=1", 3,
		    "needs trace format version 2"),
		BAD(H2 "flush\ncapture_begin graph=1\nflush", 3,
		    "missing key 'stream' for capture_begin"),
		BAD(H "flush\n\x01launch", 3, "control character 0x01"),
	};
	struct result res;

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		read_text(rows[i].in, rows[i].len, &res);
		ck_assert_msg(res.rc == -EINVAL, "%s: rc %d", rows[i].msg,
			      res.rc);
		assert_error(&res, rows[i].line, rows[i].msg);
		ck_assert_str_eq(res.torn, "");
		result_free(&res);
	}
}
END_TEST

START_TEST(trace_file_and_memory_readers_agree)
{
	/* Many blocks' worth, lines crossing block edges, some long. */
	char *text, *path;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	struct result a, b;

	ck_assert_ptr_nonnull(f);
	fputs(H "stack id=1 frame=\"a b\" frame=c\n", f);
	for (int i = 0; i < 20000; i++) {
		fprintf(f, "launch stream=%d op=k%d read=0x%x+64 stack=1\n",
			i % 7, i % 13, i * 64);
		if (i % 5000 == 17) {
			fputs("launch stream=0 op=\"long\" write=", f);
			for (int j = 0; j < 30000; j++)
				fprintf(f, "%s0x%x", j ? "," : "", j);
			fputs("\r\n", f);
		}
	}
	ck_assert_int_eq(fclose(f), 0);
	path = tmp_file("agree.trace", text, len);
	read_text(text, len, &a);
	read_file(path, &b);
	ck_assert_int_eq(a.rc, 0);
	ck_assert_int_eq(b.rc, 0);
	ck_assert(strcmp(a.ops, b.ops) == 0);
	result_free(&a);
	result_free(&b);
	unlink(path);
	free(path);
	free(text);
}
END_TEST

/* splitmix64: a deterministic stream for the round trip. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Mostly small numbers, with the edges of the range often enough. */
static uint64_t rnd_num(uint64_t *s)
{
	switch (rnd(s) % 6) {
	case 0:
		return 0;
	case 1:
		return UINT64_MAX - rnd(s) % 3;
	case 2:
		return rnd(s);
	default:
		return rnd(s) % 100;
	}
}

static uint32_t rnd_string(struct symtab *syms, uint64_t *s, bool nonempty)
{
	static const char *const parts[] = {
		"a", "aten::add.Tensor", " ", "\t", "\n", "\"", "\\", "#", "=",
		",", "+", "'", "\x7f", "\xc3\xa9", "\xe2\x86\x92",
		"\xf0\x9f\x98\x80", "train.py:14 in step", "x y", "0x10",
	};
	char buf[256] = "";
	size_t n = rnd(s) % 5;
	uint32_t id;

	for (size_t i = 0; i < n; i++)
		strcat(buf, parts[rnd(s) % ARRAY_SIZE(parts)]);
	if (nonempty && buf[0] == '\0')
		strcpy(buf, "op");
	ck_assert_int_eq(symtab_intern(syms, buf, strlen(buf), &id), 0);
	return id;
}

static struct op_range *rnd_ranges(uint64_t *s, size_t *n)
{
	struct op_range *v;

	*n = rnd(s) % 4;
	if (*n == 0)
		return NULL;
	v = malloc(*n * sizeof(*v));
	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < *n; i++) {
		v[i].ptr = rnd_num(s);
		/* len - 1 <= UINT64_MAX - ptr keeps the range below 2^64;
		 * only [0, 2^64) itself does not fit in len. */
		v[i].len = 1 + (rnd_num(s) & (UINT64_MAX - v[i].ptr));
		if (v[i].len == 0)
			v[i].len = UINT64_MAX;
	}
	return v;
}

/* A random op that a trace of `version` holds. */
static void rnd_op(struct symtab *syms, const uint32_t *stacks, uint64_t *s,
		   unsigned version, struct op *op)
{
	memset(op, 0, sizeof(*op));
	op->kind = (enum op_kind)(rnd(s) % (version == 1 ? OP_FIRST_V2 :
							     OP_KIND_COUNT));
	op->stack = rnd(s) % 3 ? stacks[rnd(s) % 8] : 0;
	switch (op->kind) {
	case OP_EVENT_RECORD:
	case OP_EVENT_WAIT:
		op->stream = rnd_num(s);
		/* fall through */
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
	case OP_EVENT_SYNC:
		op->event = rnd_num(s);
		break;
	case OP_STREAM_WAIT:
		op->on = rnd_num(s);
		/* fall through */
	case OP_STREAM_CREATE:
	case OP_STREAM_SYNC:
		op->stream = rnd_num(s);
		break;
	case OP_ALLOC:
		op->ptr = rnd_num(s);
		op->size = rnd_num(s) & (UINT64_MAX - op->ptr);
		op->has_stream = rnd(s) % 2;
		op->stream = op->has_stream ? rnd_num(s) : 0;
		op->has_graph = version == 2 && rnd(s) % 2;
		op->graph = op->has_graph ? rnd_num(s) : 0;
		break;
	case OP_RECORD_STREAM:
		op->stream = rnd_num(s);
		/* fall through */
	case OP_FREE:
		op->ptr = rnd_num(s);
		break;
	case OP_LAUNCH:
		op->stream = rnd_num(s);
		op->name = rnd_string(syms, s, true);
		op->reads = rnd_ranges(s, &op->nreads);
		op->writes = rnd_ranges(s, &op->nwrites);
		break;
	case OP_GAP:
		op->has_lost = rnd(s) % 2;
		op->lost = op->has_lost ? rnd_num(s) : 0;
		break;
	case OP_CAPTURE_BEGIN:
	case OP_CAPTURE_END:
	case OP_GRAPH_REPLAY:
		op->stream = rnd_num(s);
		/* fall through */
	case OP_GRAPH_DESTROY:
		op->graph = rnd_num(s);
		break;
	default:
		break;
	}
}

/* _i: the format version written and read back. */
START_TEST(trace_round_trip_random_ops)
{
	enum { NOPS = 600 };
	unsigned version = (unsigned)_i;
	uint64_t seed = 42;
	struct symtab *syms, *back;
	struct trace_process proc = { .present = true, .has_rank = true,
				      .pid = 77, .rank = UINT64_MAX,
				      .job = "j\xc3\xb6" "b \"1\"",
				      .name = "" };
	struct trace_writer *w;
	struct trace_reader *r;
	struct op *ops = calloc(NOPS, sizeof(*ops)), op;
	uint32_t stacks[8];
	char *text;
	size_t len;
	FILE *f;

	ck_assert_ptr_nonnull(ops);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(symtab_new(&back), 0);
	for (int i = 0; i < 8; i++) {
		uint32_t frames[4];
		size_t n = 1 + rnd(&seed) % 4;

		for (size_t j = 0; j < n; j++)
			frames[j] = rnd_string(syms, &seed, false);
		ck_assert_int_eq(symtab_intern_stack(syms, frames, n,
						     &stacks[i]), 0);
	}
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new_version(f, syms, &proc, version, &w),
			 0);
	for (int i = 0; i < NOPS; i++) {
		rnd_op(syms, stacks, &seed, version, &ops[i]);
		ck_assert_int_eq(trace_write_op(w, &ops[i]), 0);
	}
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);

	ck_assert_int_eq(trace_reader_new_mem(text, len, "rt", back, &r), 0);
	for (int i = 0; i < NOPS; i++) {
		char *want = describe_str(syms, &ops[i]), *got;

		ck_assert_msg(trace_read(r, &op) == 1, "op %d: %s", i,
			      trace_reader_error(r));
		got = describe_str(back, &op);
		ck_assert_str_eq(got, want);
		free(want);
		free(got);
	}
	ck_assert_int_eq(trace_read(r, &op), 0);
	ck_assert_uint_eq(trace_reader_version(r), version);
	ck_assert(trace_reader_process(r)->present);
	ck_assert(trace_reader_process(r)->has_rank);
	ck_assert_uint_eq(trace_reader_process(r)->pid, 77);
	ck_assert_uint_eq(trace_reader_process(r)->rank, UINT64_MAX);
	ck_assert_str_eq(trace_reader_process(r)->job, proc.job);
	ck_assert_str_eq(trace_reader_process(r)->name, "");
	trace_reader_close(r);
	for (int i = 0; i < NOPS; i++) {
		free((void *)ops[i].reads);
		free((void *)ops[i].writes);
	}
	free(ops);
	free(text);
	symtab_free(syms);
	symtab_free(back);
}
END_TEST

static uint32_t intern(struct symtab *syms, const char *s)
{
	uint32_t id;

	ck_assert_int_eq(symtab_intern(syms, s, strlen(s), &id), 0);
	return id;
}

static uint32_t stack_of(struct symtab *syms, const char *a, const char *b)
{
	uint32_t frames[2] = { intern(syms, a), b ? intern(syms, b) : 0 }, id;

	ck_assert_int_eq(symtab_intern_stack(syms, frames, b ? 2 : 1, &id), 0);
	return id;
}

START_TEST(trace_writer_prints_canonical_lines)
{
	static const char want[] =
		"npusan-trace 1\n"
		"process pid=4242 job=demo rank=0 name=\"my trainer\"\n"
		"stream_create stream=1\n"
		"stack id=1 frame=\"train.py:14 in step\" frame=main\n"
		"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
		"launch stream=0 op=aten::add read=0x1000,0x2000+16 "
		"write=0x3ff0+4096 stack=1\n"
		"stack id=2 frame=\"\"\n"
		"launch stream=18446744073709551615 op=\"a b\\\"#=\\\\\\n\\t\" "
		"stack=2\n"
		"alloc ptr=0xffffffffffffffff size=0\n"
		"free ptr=0xabc stack=1\n"
		"record_stream ptr=0x0 stream=3\n"
		"event_create event=5\nevent_destroy event=5\n"
		"event_record event=5 stream=2\nevent_wait event=5 stream=3\n"
		"event_sync event=5\nstream_wait stream=3 on=2\n"
		"stream_sync stream=2\ndevice_sync\nflush\ngap\ngap lost=3\n";
	static const struct op_range reads[] = { { 0x1000, 1 },
						 { 0x2000, 16 } };
	static const struct op_range writes[] = { { 0x3ff0, 4096 } };
	struct trace_process proc = { .present = true, .pid = 4242,
				      .job = "demo", .has_rank = true,
				      .name = "my trainer" };
	struct symtab *syms;
	uint32_t s_empty, s_main;
	struct trace_writer *w;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	/* The writer numbers stacks by first use, not by symtab id. */
	s_empty = stack_of(syms, "", NULL);
	s_main = stack_of(syms, "train.py:14 in step", "main");
	const struct op ops[] = {
		{ .kind = OP_STREAM_CREATE, .stream = 1 },
		{ .kind = OP_ALLOC, .ptr = 0x1000, .size = 4096,
		  .has_stream = true, .stack = s_main },
		{ .kind = OP_LAUNCH, .name = intern(syms, "aten::add"),
		  .reads = reads, .nreads = 2, .writes = writes, .nwrites = 1,
		  .stack = s_main },
		{ .kind = OP_LAUNCH, .stream = UINT64_MAX,
		  .name = intern(syms, "a b\"#=\\\n\t"), .stack = s_empty },
		{ .kind = OP_ALLOC, .ptr = UINT64_MAX },
		{ .kind = OP_FREE, .ptr = 0xabc, .stack = s_main },
		{ .kind = OP_RECORD_STREAM, .stream = 3 },
		{ .kind = OP_EVENT_CREATE, .event = 5 },
		{ .kind = OP_EVENT_DESTROY, .event = 5 },
		{ .kind = OP_EVENT_RECORD, .event = 5, .stream = 2 },
		{ .kind = OP_EVENT_WAIT, .event = 5, .stream = 3 },
		{ .kind = OP_EVENT_SYNC, .event = 5 },
		{ .kind = OP_STREAM_WAIT, .stream = 3, .on = 2 },
		{ .kind = OP_STREAM_SYNC, .stream = 2 },
		{ .kind = OP_DEVICE_SYNC },
		{ .kind = OP_FLUSH },
		{ .kind = OP_GAP },
		{ .kind = OP_GAP, .has_lost = true, .lost = 3 },
	};

	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new(f, syms, &proc, &w), 0);
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		ck_assert_int_eq(trace_write_op(w, &ops[i]), 0);
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(text, want);
	free(text);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_writer_refuses_invalid_ops_whole)
{
	static const struct op_range empty[] = { { 0x10, 0 } };
	static const struct op_range past[] = { { 0x10, 1 },
						{ UINT64_MAX, 2 } };
	static const struct op_range fine[] = { { 0x10, 1 } };
	struct symtab *syms;
	uint32_t name, s_ok, s_cr;
	struct trace_writer *w;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	name = intern(syms, "k");
	s_ok = stack_of(syms, "f", NULL);
	s_cr = stack_of(syms, "f\r", NULL);
	const struct op bad[] = {
		{ .kind = OP_KIND_COUNT },
		{ .kind = (enum op_kind)-1 },
		{ .kind = OP_LAUNCH, .stack = s_ok },
		{ .kind = OP_LAUNCH, .name = 999 },
		{ .kind = OP_LAUNCH, .name = intern(syms, "") },
		{ .kind = OP_LAUNCH, .name = intern(syms, "a\x01") },
		{ .kind = OP_LAUNCH, .name = intern(syms, "a\r") },
		{ .kind = OP_LAUNCH, .name = intern(syms, "\xff") },
		{ .kind = OP_LAUNCH, .name = intern(syms, "\xed\xa0\x80") },
		{ .kind = OP_LAUNCH, .name = intern(syms, "\xc3") },
		{ .kind = OP_LAUNCH, .name = name, .reads = empty, .nreads = 1,
		  .stack = s_ok },
		{ .kind = OP_LAUNCH, .name = name, .writes = past,
		  .nwrites = 2 },
		{ .kind = OP_LAUNCH, .name = name, .nreads = 1 },
		{ .kind = OP_FLUSH, .stack = 999 },
		{ .kind = OP_FLUSH, .stack = s_cr },
		{ .kind = OP_ALLOC, .ptr = UINT64_MAX, .size = 2,
		  .stack = s_ok },
	};
	const struct op good_op = { .kind = OP_LAUNCH, .name = name,
				    .reads = fine, .nreads = 1, .stack = s_ok };

	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), 0);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_msg(trace_write_op(w, &bad[i]) == -EINVAL, "op %zu",
			      i);
		ck_assert_int_eq(fflush(f), 0);
		ck_assert_uint_eq(len, strlen(H));
	}
	/* The refused ops used no stack number. */
	ck_assert_int_eq(trace_write_op(w, &good_op), 0);
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(text, H "stack id=1 frame=f\n"
				 "launch stream=0 op=k read=0x10 stack=1\n");
	free(text);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_writer_refuses_overlong_line)
{
	char *big = malloc(TRACE_MAX_LINE);
	struct symtab *syms;
	struct trace_writer *w;
	uint32_t name, frame, stack;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_ptr_nonnull(big);
	memset(big, 'a', TRACE_MAX_LINE);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(symtab_intern(syms, big, TRACE_MAX_LINE, &name), 0);
	ck_assert_int_eq(symtab_intern(syms, big, TRACE_MAX_LINE - 10, &frame),
			 0);
	ck_assert_int_eq(symtab_intern_stack(syms, &frame, 1, &stack), 0);
	free(big);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), 0);
	/* "launch stream=0 op=" and the name pass the limit... */
	ck_assert_int_eq(trace_write_op(w, &(struct op){ .kind = OP_LAUNCH,
							 .name = name }),
			 -E2BIG);
	/* ...and so do "stack id=1 frame=" and the frame. */
	ck_assert_int_eq(trace_write_op(w, &(struct op){ .kind = OP_FLUSH,
							 .stack = stack }),
			 -E2BIG);
	ck_assert_int_eq(fflush(f), 0);
	ck_assert_uint_eq(len, strlen(H));
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	free(text);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_writer_refuses_unwritable_process)
{
	struct trace_process proc = { .present = true, .job = "a\rb" };
	struct trace_process absent = { .present = false, .job = "a\rb" };
	struct symtab *syms;
	struct trace_writer *w = NULL;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new(f, syms, &proc, &w), -EINVAL);
	ck_assert_ptr_null(w);
	ck_assert_int_eq(trace_writer_new(f, syms, &absent, &w), 0);
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(trace_writer_close(NULL), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(text, H);
	free(text);
	symtab_free(syms);
}
END_TEST

START_TEST(trace_writer_reports_write_errors)
{
	struct symtab *syms;
	struct trace_writer *w;
	struct op op = { .kind = OP_FLUSH };
	FILE *f = fopen("/dev/full", "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(setvbuf(f, NULL, _IONBF, 0), 0);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), -EIO);
	fclose(f);
	/* Buffered, the error shows when the writer flushes at close. */
	f = fopen("/dev/full", "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), 0);
	ck_assert_int_eq(trace_write_op(w, &op), 0);
	ck_assert_int_eq(trace_writer_close(w), -EIO);
	fclose(f);
	symtab_free(syms);
}
END_TEST

/* A stream that records where each write(2)-like call ended. */
struct chunks {
	char *text;
	size_t len;
	unsigned n;
	bool whole; /* every chunk ended with a newline */
};

static ssize_t chunks_write(void *arg, const char *buf, size_t len)
{
	struct chunks *c = arg;

	c->text = realloc(c->text, c->len + len + 1);
	ck_assert_ptr_nonnull(c->text);
	memcpy(c->text + c->len, buf, len);
	c->len += len;
	c->text[c->len] = '\0';
	c->n++;
	c->whole = c->whole && len > 0 && buf[len - 1] == '\n';
	return (ssize_t)len;
}

/* On an unbuffered stream, each write ends at a line's end, so a writer
 * killed between two of them leaves whole lines; a flush sends the rest. */
START_TEST(trace_writer_hands_whole_lines_to_the_stream)
{
	struct chunks c = { .whole = true };
	cookie_io_functions_t io = { .write = chunks_write };
	struct symtab *syms;
	struct trace_writer *w;
	struct op_range r = { 0, 8 };
	struct op op = { .kind = OP_LAUNCH, .writes = &r, .nwrites = 1 };
	size_t before;
	unsigned lines = 0;
	FILE *f = fopencookie(&c, "w", io);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(setvbuf(f, NULL, _IONBF, 0), 0);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(symtab_intern(syms, "k", 1, &op.name), 0);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), 0);
	ck_assert_str_eq(c.text, H);
	for (int i = 0; i < 20000; i++) {
		r.ptr = 0x7f0000000000ull + (uint64_t)i * 8;
		op.stream = (uint64_t)i % 7;
		ck_assert_int_eq(trace_write_op(w, &op), 0);
	}
	/* Batched: some lines went, the last ones wait for the flush. */
	ck_assert_uint_gt(c.n, 2);
	before = c.len;
	ck_assert_int_eq(trace_write_op(w, &(struct op){ .kind = OP_FLUSH }),
			 0);
	ck_assert_uint_eq(c.len, before);
	ck_assert_int_eq(trace_writer_flush(w), 0);
	ck_assert_uint_gt(c.len, before);
	ck_assert(c.whole);
	for (const char *p = c.text; (p = strchr(p, '\n')) != NULL; p++)
		lines++;
	ck_assert_uint_eq(lines, 20000 + 2);
	ck_assert_ptr_nonnull(strstr(c.text, "\nflush\n"));
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	free(c.text);
	symtab_free(syms);
}
END_TEST

/* ---- format version 2: graphs ------------------------------------------ */

static const struct good good_v2[] = {
	GOOD(H2 "capture_begin stream=1 graph=7\n",
	     "capture_begin stream=1 graph=7"),
	GOOD(H2 "capture_end graph=7 stream=1\n",
	     "capture_end stream=1 graph=7"),
	GOOD(H2 "graph_replay graph=7 stream=2\n",
	     "graph_replay stream=2 graph=7"),
	GOOD(H2 "graph_destroy graph=0xffffffffffffffff\n",
	     "graph_destroy graph=18446744073709551615"),
	GOOD(H2 "graph_destroy graph=0\n", "graph_destroy"),
	GOOD(H2 "alloc ptr=0x9000 size=4096 stream=1 graph=1\n",
	     "alloc stream=1 ptr=0x9000 size=4096 graph=1 has_stream "
	     "has_graph"),
	GOOD(H2 "alloc ptr=0x9000 size=16 graph=0\n",
	     "alloc ptr=0x9000 size=16 has_graph"),
	GOOD(H2 "alloc ptr=0x9000 size=16\n", "alloc ptr=0x9000 size=16"),
	GOOD(H2 "stack id=3 frame=g\ncapture_begin stream=1 graph=2 stack=3\n"
		"capture_end stream=1 graph=2 stack=3\n"
		"graph_replay graph=2 stream=0 stack=3\n"
		"graph_destroy graph=2 stack=3\n"
		"alloc ptr=1 size=1 graph=2 stack=3\n",
	     "capture_begin stream=1 graph=2 stack=g; "
	     "capture_end stream=1 graph=2 stack=g; "
	     "graph_replay graph=2 stack=g; graph_destroy graph=2 stack=g; "
	     "alloc ptr=0x1 size=1 graph=2 has_graph stack=g"),
	/* Every version 1 line means the same in version 2. */
	GOOD(H2 "launch stream=2 op=mm read=0x10 write=0x20+8\ngap lost=1\n",
	     "launch stream=2 name='mm' reads=0x10+1 writes=0x20+8; "
	     "gap lost=1 has_lost"),
	GOOD("# c\n  npusan-trace\t2 # c\r\nflush\n", "flush"),
	GOOD("npusan-trace 2", ""),
};

START_TEST(trace_v2_accepts_graph_lines)
{
	const struct good *row = &good_v2[_i];
	struct result res;

	read_text(row->in, row->len, &res);
	ck_assert_msg(res.rc == 0, "'%s' rejected: %s", row->ops, res.msg);
	ck_assert_str_eq(res.ops, row->ops);
	result_free(&res);
}
END_TEST

static const struct bad bad_v2[] = {
	/* graph= where version 2 does not define it. */
	BAD(H2 "launch stream=1 op=a graph=1\n", 2,
	    "unknown key 'graph' for launch"),
	BAD(H2 "free ptr=1 graph=1\n", 2, "unknown key 'graph' for free"),
	BAD(H2 "stream_create stream=1 graph=1\n", 2,
	    "unknown key 'graph' for stream_create"),
	BAD(H2 "event_record event=1 stream=1 graph=1\n", 2,
	    "unknown key 'graph' for event_record"),
	BAD(H2 "record_stream ptr=1 stream=1 graph=1\n", 2,
	    "unknown key 'graph' for record_stream"),
	BAD(H2 "gap graph=1\n", 2, "unknown key 'graph' for gap"),
	BAD(H2 "stack id=1 frame=a graph=1\n", 2,
	    "unknown key 'graph' for stack"),
	BAD(H2 "process pid=1 graph=1\n", 2, "unknown key 'graph' for process"),
	/* Other keys on the new directives. */
	BAD(H2 "graph_destroy graph=1 stream=1\n", 2,
	    "unknown key 'stream' for graph_destroy"),
	BAD(H2 "graph_replay graph=1 stream=1 event=1\n", 2,
	    "unknown key 'event' for graph_replay"),
	/* Missing fields. */
	BAD(H2 "capture_begin stream=1\n", 2,
	    "missing key 'graph' for capture_begin"),
	BAD(H2 "capture_begin graph=1\n", 2,
	    "missing key 'stream' for capture_begin"),
	BAD(H2 "capture_end stream=1\n", 2,
	    "missing key 'graph' for capture_end"),
	BAD(H2 "capture_end graph=1\n", 2,
	    "missing key 'stream' for capture_end"),
	BAD(H2 "graph_replay graph=1\n", 2,
	    "missing key 'stream' for graph_replay"),
	BAD(H2 "graph_replay stream=1\n", 2,
	    "missing key 'graph' for graph_replay"),
	BAD(H2 "graph_destroy\n", 2, "missing key 'graph' for graph_destroy"),
	BAD(H2 "alloc ptr=1 graph=1\n", 2, "missing key 'size' for alloc"),
	/* Bad numbers and repeats. */
	BAD(H2 "graph_destroy graph=\n", 2, "empty number for 'graph'"),
	BAD(H2 "graph_destroy graph=0x\n", 2, "invalid number for 'graph'"),
	BAD(H2 "graph_destroy graph=-1\n", 2, "invalid number for 'graph': -1"),
	BAD(H2 "graph_destroy graph=1x\n", 2,
	    "invalid number for 'graph': 1x"),
	BAD(H2 "graph_destroy graph=18446744073709551616\n", 2,
	    "number out of range for 'graph'"),
	BAD(H2 "graph_destroy graph=0x10000000000000000\n", 2,
	    "number out of range for 'graph'"),
	BAD(H2 "graph_destroy graph=\"1\"\n", 2,
	    "a number for 'graph' must not be quoted"),
	BAD(H2 "capture_begin stream=1 graph=1 graph=2\n", 2,
	    "duplicate key 'graph'"),
	BAD(H2 "alloc ptr=1 size=1 graph=1 graph=1\n", 2,
	    "duplicate key 'graph'"),
	BAD(H2 "capture_end stream=1 graph=1 stack=9\n", 2,
	    "stack id 9 is not defined"),
	/* What version 2 does not add stays an error. */
	BAD(H2 "stream_destroy stream=1\n", 2,
	    "'stream_destroy' is reserved for a later version"),
	BAD(H2 "ipc_export ptr=1\n", 2,
	    "'ipc_export' is reserved for a later version"),
	BAD(H2 "graph_create graph=1\n", 2,
	    "unknown directive 'graph_create'"),
	BAD(H2 "Capture_begin stream=1 graph=1\n", 2,
	    "unknown directive 'Capture_begin'"),
};

START_TEST(trace_v2_rejects_bad_graph_lines)
{
	check_bad(&bad_v2[_i]);
}
END_TEST

START_TEST(trace_reader_says_the_version)
{
	static const char *const in[] = { H "flush\n", H2 "flush\n" };
	struct symtab *syms;
	struct trace_reader *r;
	struct op op;

	ck_assert_int_eq(symtab_new(&syms), 0);
	for (unsigned v = 1; v <= 2; v++) {
		ck_assert_int_eq(trace_reader_new_mem(in[v - 1],
						      strlen(in[v - 1]), NAME,
						      syms, &r), 0);
		ck_assert_uint_eq(trace_reader_version(r), 0);
		ck_assert_int_eq(trace_read(r, &op), 1);
		ck_assert_uint_eq(trace_reader_version(r), v);
		trace_reader_close(r);
	}
	symtab_free(syms);
}
END_TEST

/* The writer's lines for each version 2 op, read back as they were. */
START_TEST(trace_v2_writer_prints_graph_lines)
{
	static const char want[] =
		"npusan-trace 2\n"
		"stack id=1 frame=cap\n"
		"capture_begin stream=1 graph=7 stack=1\n"
		"capture_end stream=1 graph=7\n"
		"graph_replay graph=7 stream=0\n"
		"graph_destroy graph=18446744073709551615\n"
		"alloc ptr=0x9000 size=4096 stream=1 graph=7\n"
		"alloc ptr=0x9000 size=16 graph=0\n"
		"alloc ptr=0x9000 size=16\n";
	struct symtab *syms;
	struct trace_writer *w;
	struct result res;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	const struct op ops[] = {
		{ .kind = OP_CAPTURE_BEGIN, .stream = 1, .graph = 7,
		  .stack = stack_of(syms, "cap", NULL) },
		{ .kind = OP_CAPTURE_END, .stream = 1, .graph = 7 },
		{ .kind = OP_GRAPH_REPLAY, .graph = 7 },
		{ .kind = OP_GRAPH_DESTROY, .graph = UINT64_MAX },
		{ .kind = OP_ALLOC, .ptr = 0x9000, .size = 4096,
		  .has_stream = true, .stream = 1, .has_graph = true,
		  .graph = 7 },
		{ .kind = OP_ALLOC, .ptr = 0x9000, .size = 16,
		  .has_graph = true },
		/* A graph without has_graph is no pool: as in version 1. */
		{ .kind = OP_ALLOC, .ptr = 0x9000, .size = 16, .graph = 3 },
	};
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new_version(f, syms, NULL, 2, &w), 0);
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		ck_assert_int_eq(trace_write_op(w, &ops[i]), 0);
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(text, want);
	read_text(text, len, &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_str_eq(res.ops,
			 "capture_begin stream=1 graph=7 stack=cap; "
			 "capture_end stream=1 graph=7; graph_replay graph=7; "
			 "graph_destroy graph=18446744073709551615; "
			 "alloc stream=1 ptr=0x9000 size=4096 graph=7 "
			 "has_stream has_graph; "
			 "alloc ptr=0x9000 size=16 has_graph; "
			 "alloc ptr=0x9000 size=16");
	result_free(&res);
	free(text);
	symtab_free(syms);
}
END_TEST

/* A version 1 writer refuses graph ops whole, until upgraded; a version
 * it cannot write is refused. */
START_TEST(trace_v1_writer_refuses_graph_ops_until_upgraded)
{
	const struct op v2ops[] = {
		{ .kind = OP_CAPTURE_BEGIN, .stream = 1, .graph = 1 },
		{ .kind = OP_CAPTURE_END, .stream = 1, .graph = 1 },
		{ .kind = OP_GRAPH_REPLAY, .graph = 1 },
		{ .kind = OP_GRAPH_DESTROY, .graph = 1 },
		{ .kind = OP_ALLOC, .ptr = 1, .size = 1, .has_graph = true },
	};
	struct symtab *syms;
	struct trace_writer *w;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(trace_writer_new_version(f, syms, NULL, 0, &w),
			 -EINVAL);
	ck_assert_int_eq(trace_writer_new_version(f, syms, NULL, 3, &w),
			 -EINVAL);
	ck_assert_int_eq(trace_writer_new(f, syms, NULL, &w), 0);
	for (size_t i = 0; i < ARRAY_SIZE(v2ops); i++)
		ck_assert_int_eq(trace_write_op(w, &v2ops[i]), -EINVAL);
	ck_assert_int_eq(trace_write_op(w, &(struct op){ .kind = OP_FLUSH }),
			 0);
	ck_assert_int_eq(trace_writer_flush(w), 0);
	ck_assert_str_eq(text, "npusan-trace 1\nflush\n");
	/* What the recorder does: the digit at TRACE_VERSION_AT, then. */
	ck_assert_int_eq(text[TRACE_VERSION_AT], '1');
	trace_writer_upgrade(w);
	ck_assert_int_eq(trace_write_op(w, &v2ops[3]), 0);
	ck_assert_int_eq(trace_writer_close(w), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(text, "npusan-trace 1\nflush\ngraph_destroy graph=1\n");
	free(text);
	symtab_free(syms);
}
END_TEST

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, trace_rejects_lexical_errors, 0,
			    ARRAY_SIZE(bad_lexical));
	tcase_add_loop_test(tc, trace_rejects_bad_header, 0,
			    ARRAY_SIZE(bad_header));
	tcase_add_loop_test(tc, trace_rejects_bad_directives_and_keys, 0,
			    ARRAY_SIZE(bad_directive));
	tcase_add_loop_test(tc, trace_rejects_bad_numbers, 0,
			    ARRAY_SIZE(bad_number));
	tcase_add_loop_test(tc, trace_rejects_bad_strings, 0,
			    ARRAY_SIZE(bad_string));
	tcase_add_loop_test(tc, trace_rejects_bad_pointer_lists, 0,
			    ARRAY_SIZE(bad_list));
	tcase_add_loop_test(tc, trace_accepts_valid_lines, 0, ARRAY_SIZE(good));
	tcase_add_test(tc, trace_process_line_fields);
	tcase_add_test(tc, trace_line_and_offset_follow_input);
	tcase_add_test(tc, trace_same_frames_share_a_symtab_stack);
	tcase_add_test(tc, trace_keeps_what_the_live_path_carries);
	tcase_add_test(tc, trace_messages_stay_short_and_printable);
	tcase_add_test(tc, trace_accepts_1mb_line);
	tcase_add_test(tc, trace_line_limit_is_exact);
	tcase_add_test(tc, trace_rejects_endless_line);
	tcase_add_test(tc, trace_every_prefix_parses_or_fails_cleanly);
	tcase_add_test(tc, trace_reads_file_path);
	tcase_add_test(tc, trace_error_names_the_file_as_given);
	tcase_add_test(tc, trace_missing_file_gives_enoent);
	tcase_add_test(tc, trace_directory_gives_read_error);
	tcase_add_test(tc, trace_dash_reads_stdin);
	tcase_add_loop_test(tc, trace_torn_last_line_ends_the_trace, 0,
			    ARRAY_SIZE(torn_rows));
	tcase_add_test(tc, trace_only_a_last_line_may_be_torn);
	tcase_add_test(tc, trace_file_and_memory_readers_agree);
	tcase_add_loop_test(tc, trace_round_trip_random_ops, 1, 3);
	tcase_add_test(tc, trace_writer_prints_canonical_lines);
	tcase_add_test(tc, trace_writer_refuses_invalid_ops_whole);
	tcase_add_test(tc, trace_writer_refuses_overlong_line);
	tcase_add_test(tc, trace_writer_refuses_unwritable_process);
	tcase_add_test(tc, trace_writer_reports_write_errors);
	tcase_add_test(tc, trace_writer_hands_whole_lines_to_the_stream);
	tcase_add_loop_test(tc, trace_v2_accepts_graph_lines, 0,
			    ARRAY_SIZE(good_v2));
	tcase_add_loop_test(tc, trace_v2_rejects_bad_graph_lines, 0,
			    ARRAY_SIZE(bad_v2));
	tcase_add_test(tc, trace_reader_says_the_version);
	tcase_add_test(tc, trace_v2_writer_prints_graph_lines);
	tcase_add_test(tc, trace_v1_writer_refuses_graph_ops_until_upgraded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(trace_suite());
}
