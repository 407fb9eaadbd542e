/*
 * test_trace.c - the trace reader and writer against
 * docs/trace-format.md: the suite, and the reader's accepted forms.
 *
 * Every rejection rule of the format has a row in a table of bad inputs
 * (line and message checked: test_trace_reject.c), every accepted form a
 * row in a table of good ones (each op field checked: here); around them
 * sit the boundaries (2^64, the line limit, truncated input), reading from
 * files, a randomized writer/reader round trip and the writer
 * (test_trace_write.c), and format version 2 (test_trace_v2.c). The files
 * share trace_helpers.h and add their tests to the one TCase below.
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
	/* Operator arguments (@NAME), on some elements or all. */
	GOOD(H "launch stream=1 op=a read=0x10@self,0x20+8,0x30@other "
	       "write=0x40+4@out\n",
	     "launch stream=1 name='a' reads=0x10+1@self,0x20+8,0x30+1@other "
	     "writes=0x40+4@out"),
	GOOD(H "launch stream=1 op=a read=0x10@x.y_1#c\n",
	     "launch stream=1 name='a' reads=0x10+1@x.y_1"),
	GOOD(H "launch stream=1 op=a write=0x10@\xc3\xa9\n",
	     "launch stream=1 name='a' writes=0x10+1@\xc3\xa9"),
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

/* One number of `n` digits (hex when `hex`, in mixed case, or decimal)
 * into `out`, from `rnd`; a leading zero when `zero`. */
static void number_text(char *out, unsigned n, bool hex, bool zero,
			unsigned *rnd)
{
	static const char digits[] = "0123456789abcdefABCDEF";
	char *o = out;

	if (hex) {
		*o++ = '0';
		*o++ = 'x';
	}
	for (unsigned i = 0; i < n; i++) {
		*rnd = *rnd * 1103515245u + 12345u;
		*o = digits[(*rnd >> 16) % (hex ? 22u : 10u)];
		if (i == 0 && (zero || *o == '0'))
			*o = zero ? '0' : '1';
		o++;
	}
	*o = '\0';
}

START_TEST(trace_numbers_of_every_length)
{
	/* The reader reads numbers a word at a time where it can: every
	 * length, either base, each ending it may have, at the end of the
	 * input (fewer bytes left than a word) and before more lines. */
	static const char *const after[] = { "\n", " \n", "#c\n", "", "\r\n" };
	unsigned rnd = 1;

	for (unsigned n = 1; n <= 21; n++) {
		for (int form = 0; form < 4; form++) {
			bool hex = form & 1, zero = form & 2;
			char num[32], in[256];
			struct trace_reader *r;
			struct symtab *syms;
			unsigned long long want;
			struct op op;
			char *end;
			bool range;
			int rc;

			number_text(num, n, hex, zero, &rnd);
			errno = 0;
			want = strtoull(num, &end, hex ? 16 : 10);
			range = errno == ERANGE;
			for (size_t a = 0; a < ARRAY_SIZE(after); a++) {
				/* A length of 0 is an error of its own. */
				int len = snprintf(in, sizeof(in), H
						   "launch stream=%s op=k "
						   "read=%s+1 write=1+%s%s%s",
						   num, num, want ? num : "1",
						   after[a],
						   a == 3 ? "" : "flush\n");

				ck_assert_int_eq(symtab_new(&syms), 0);
				ck_assert_int_eq(trace_reader_new_mem(
					in, (size_t)len, NAME, syms, &r), 0);
				rc = trace_read(r, &op);
				if (range) {
					/* A bad last line without a newline
					 * is a torn one. */
					ck_assert_msg(rc == (a == 3 ? 0 :
							     -EINVAL), "%s", in);
					ck_assert_ptr_nonnull(strstr(a == 3 ?
						trace_reader_torn(r) :
						trace_reader_error(r),
						"out of range"));
				} else {
					ck_assert_msg(rc == 1, "%s: %s", in,
						      trace_reader_error(r));
					ck_assert_uint_eq(op.stream, want);
					ck_assert_uint_eq(op.reads[0].ptr, want);
					ck_assert_uint_eq(op.writes[0].len,
							  want ? want : 1);
					ck_assert_uint_eq(op.nreads, 1);
					ck_assert_uint_eq(op.nwrites, 1);
				}
				trace_reader_close(r);
				symtab_free(syms);
			}
		}
	}
}
END_TEST

/* The next of a fixed sequence of pseudo-random numbers below n. */
static unsigned fast_rand(unsigned *rnd, unsigned n)
{
	*rnd = *rnd * 1103515245u + 12345u;
	return (*rnd >> 16) % n;
}

/* A number as the writer writes it, or longer, of mixed case. */
static char *fast_number(char *o, unsigned *rnd)
{
	bool zero = fast_rand(rnd, 8) == 0;

	number_text(o, 1 + fast_rand(rnd, 20), fast_rand(rnd, 2), zero, rnd);
	return o + strlen(o);
}

/* An element list of 1 to 5 ranges; a length may be 0 (an error). */
static char *fast_list(char *o, unsigned *rnd)
{
	unsigned n = 1 + fast_rand(rnd, 5);

	for (unsigned i = 0; i < n; i++) {
		if (i > 0)
			*o++ = ',';
		o = fast_number(o, rnd);
		if (fast_rand(rnd, 2)) {
			*o++ = '+';
			o = fast_number(o, rnd);
		}
	}
	return o;
}

/* An operator name of 1 to 40 bytes; now and then one the format
 * refuses unquoted, or one beyond ASCII. */
static char *fast_name(char *o, unsigned *rnd)
{
	static const char chars[] = "abcxyzABZ019:_.-<>()[]";
	unsigned n = 1 + fast_rand(rnd, 40);

	for (unsigned i = 0; i < n; i++)
		*o++ = chars[fast_rand(rnd, sizeof(chars) - 1)];
	switch (fast_rand(rnd, 16)) {
	case 0:
		*o++ = '=';
		break;
	case 1:
		o += sprintf(o, "\xc3\xa9");
		break;
	default:
		break;
	}
	return o;
}

/* One line of fields, `sep` between them, their order shuffled now and
 * then; every value as the writer writes it or a little beyond. */
static void fast_line(char *o, char sep, unsigned *rnd)
{
	static const char *const words[] = { "launch", "launch", "launch",
					     "alloc", "free", "event_record",
					     "stream_wait", "gap" };
	static const char *const keys[][4] = {
		{ "stream", "op", "read", "write" },
		{ "stream", "op", "read", "write" },
		{ "stream", "op", "write", "read" },
		{ "ptr", "size", "stream", NULL },
		{ "ptr", NULL, NULL, NULL },
		{ "event", "stream", NULL, NULL },
		{ "stream", "on", NULL, NULL },
		{ "lost", NULL, NULL, NULL },
	};
	unsigned w = fast_rand(rnd, ARRAY_SIZE(words));
	unsigned first = fast_rand(rnd, 4) == 0 ? 1 : 0;

	o += sprintf(o, "%s", words[w]);
	for (unsigned i = 0; i < 4; i++) {
		const char *k = keys[w][(i + first) % 4];

		if (k == NULL || (i > 1 && fast_rand(rnd, 3) == 0))
			continue;
		o += sprintf(o, "%c%s=", sep, k);
		if (strcmp(k, "op") == 0)
			o = fast_name(o, rnd);
		else if (strcmp(k, "read") == 0 || strcmp(k, "write") == 0)
			o = fast_list(o, rnd);
		else
			o = fast_number(o, rnd);
	}
	*o = '\0';
}

START_TEST(trace_fast_path_agrees_with_the_full_reader)
{
	/* Lines as the writer writes them (one blank between fields) go
	 * through trace_read.c's fast path; the same lines with tabs, or
	 * a blank at the end, through trace__parse_fields() alone. Each
	 * line alone (its numbers near the end of the input), then all in
	 * one trace: the same ops, or the same error. */
	enum { LINES = 3000 };
	char *all[2] = { NULL, NULL };
	size_t all_len[2] = { 0, 0 };
	FILE *f[2] = { open_memstream(&all[0], &all_len[0]),
		       open_memstream(&all[1], &all_len[1]) };
	unsigned rnd = 7;
	struct result a, b;

	ck_assert_ptr_nonnull(f[0]);
	ck_assert_ptr_nonnull(f[1]);
	fputs(H, f[0]);
	fputs(H, f[1]);
	for (int i = 0; i < LINES; i++) {
		char line[2][1024], in[2][1100];
		unsigned seed = rnd;

		fast_line(line[0], ' ', &rnd);
		fast_line(line[1], i % 2 ? '\t' : ' ', &seed);
		if (i % 2 == 0)
			strcat(line[1], " ");
		for (int v = 0; v < 2; v++) {
			snprintf(in[v], sizeof(in[v]), H "%s%s", line[v],
				 i % 3 ? "\n" : "");
		}
		read_str(in[0], &a);
		read_str(in[1], &b);
		ck_assert_msg(a.rc == b.rc && strcmp(a.ops, b.ops) == 0 &&
			      strcmp(a.msg, b.msg) == 0 &&
			      strcmp(a.torn, b.torn) == 0,
			      "'%s': rc %d '%s' '%s' '%s'; rc %d '%s' '%s' '%s'",
			      line[0], a.rc, a.ops, a.msg, a.torn, b.rc, b.ops,
			      b.msg, b.torn);
		if (a.rc == 0 && a.torn[0] == '\0') {
			fprintf(f[0], "%s\n", line[0]);
			fprintf(f[1], "%s\n", line[1]);
		}
		result_free(&a);
		result_free(&b);
	}
	ck_assert_int_eq(fclose(f[0]), 0);
	ck_assert_int_eq(fclose(f[1]), 0);
	read_text(all[0], all_len[0], &a);
	read_text(all[1], all_len[1], &b);
	ck_assert_int_eq(a.rc, 0);
	ck_assert_int_eq(b.rc, 0);
	ck_assert(strlen(a.ops) > LINES);
	ck_assert(strcmp(a.ops, b.ops) == 0);
	result_free(&a);
	result_free(&b);
	free(all[0]);
	free(all[1]);
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

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	test_trace_reject_add(tc);
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
	tcase_add_test(tc, trace_numbers_of_every_length);
	tcase_add_test(tc, trace_fast_path_agrees_with_the_full_reader);
	test_trace_write_add(tc);
	test_trace_v2_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(trace_suite());
}
