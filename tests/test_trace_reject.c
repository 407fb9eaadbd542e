/*
 * test_trace_reject.c - test_trace's table of bad inputs: every rejection
 * rule of the version 1 format has a row, its line and message checked.
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
	BAD(H "launch stream=1 op=a read=0x10@\n", 2,
	    "invalid argument name for 'read': @"),
	BAD(H "launch stream=1 op=a read=0x10@,0x20\n", 2,
	    "invalid argument name for 'read': @"),
	BAD(H "launch stream=1 op=a write=0x10@a@b\n", 2,
	    "invalid argument name for 'write': @a@b"),
	BAD(H "launch stream=1 op=a write=0x10@a\"b\"\n", 2,
	    "invalid argument name for 'write'"),
	BAD(H "launch stream=1 op=a read=0x10+0@x\n", 2,
	    "invalid element for 'read': 0x10+0@x"),
	BAD(H "launch stream=1 op=a read=@x\n", 2,
	    "invalid element for 'read': @x"),
	BAD(H "launch stream=1 op=a read=0x10@x=1\n", 2,
	    "invalid argument name for 'read'"),
	BAD(H "launch stream=1 op=a read=0x10@"
	      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	      "\n", 2, "invalid argument name for 'read'"),
};

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

void test_trace_reject_add(TCase *tc)
{
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
}
