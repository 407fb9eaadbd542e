/*
 * test_trace_write.c - test_trace's writer: a randomized writer/reader
 * round trip, the canonical lines, and what the writer refuses.
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
#include "trace_helpers.h"

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
		"stream_sync stream=2\ndevice_sync\nflush\ngap\ngap lost=3\n"
		"launch stream=0 op=aten::add read=0x1000@self,0x2000+16 "
		"write=0x3ff0+4096@out\n";
	static const struct op_range reads[] = { { 0x1000, 1 },
						 { 0x2000, 16 } };
	static const struct op_range writes[] = { { 0x3ff0, 4096 } };
	struct trace_process proc = { .present = true, .pid = 4242,
				      .job = "demo", .has_rank = true,
				      .name = "my trainer" };
	struct symtab *syms;
	uint32_t s_empty, s_main, read_args[2], write_args[1];
	struct trace_writer *w;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	/* The writer numbers stacks by first use, not by symtab id. */
	s_empty = stack_of(syms, "", NULL);
	s_main = stack_of(syms, "train.py:14 in step", "main");
	read_args[0] = intern(syms, "self");
	read_args[1] = 0;
	write_args[0] = intern(syms, "out");
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
		{ .kind = OP_LAUNCH, .name = intern(syms, "aten::add"),
		  .reads = reads, .read_args = read_args, .nreads = 2,
		  .writes = writes, .write_args = write_args, .nwrites = 1 },
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
	uint32_t name, s_ok, s_cr, bad_arg[1], no_arg[1];
	struct trace_writer *w;
	char *text;
	size_t len;
	FILE *f;

	ck_assert_int_eq(symtab_new(&syms), 0);
	name = intern(syms, "k");
	s_ok = stack_of(syms, "f", NULL);
	s_cr = stack_of(syms, "f\r", NULL);
	/* names a reader would not take back: refused, never dropped */
	bad_arg[0] = intern(syms, "a,b");
	no_arg[0] = 999;
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
		{ .kind = OP_LAUNCH, .name = name, .reads = fine,
		  .read_args = bad_arg, .nreads = 1 },
		{ .kind = OP_LAUNCH, .name = name, .writes = fine,
		  .write_args = no_arg, .nwrites = 1 },
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

void test_trace_write_add(TCase *tc)
{
	tcase_add_loop_test(tc, trace_round_trip_random_ops, 1, 3);
	tcase_add_test(tc, trace_writer_prints_canonical_lines);
	tcase_add_test(tc, trace_writer_refuses_invalid_ops_whole);
	tcase_add_test(tc, trace_writer_refuses_overlong_line);
	tcase_add_test(tc, trace_writer_refuses_unwritable_process);
	tcase_add_test(tc, trace_writer_reports_write_errors);
	tcase_add_test(tc, trace_writer_hands_whole_lines_to_the_stream);
}
