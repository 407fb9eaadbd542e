/*
 * test_trace_v2.c - test_trace's format version 2 (graphs): its good and
 * bad lines, the version the reader says, and the writers of each version.
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

void test_trace_v2_add(TCase *tc)
{
	tcase_add_loop_test(tc, trace_v2_accepts_graph_lines, 0,
			    ARRAY_SIZE(good_v2));
	tcase_add_loop_test(tc, trace_v2_rejects_bad_graph_lines, 0,
			    ARRAY_SIZE(bad_v2));
	tcase_add_test(tc, trace_reader_says_the_version);
	tcase_add_test(tc, trace_v2_writer_prints_graph_lines);
	tcase_add_test(tc, trace_v1_writer_refuses_graph_ops_until_upgraded);
}
