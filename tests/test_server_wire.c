/*
 * test_server_wire.c - the wire code (daemon/wire.c) the daemon frames
 * with: names cleaned, batches split, frames reassembled.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "server_helpers.h"
#include "testutil.h"
#include "wire.h"

/* ---- wire ---------------------------------------------------------------- */

/* Names are kept as the trace format carries them (text.h): tab, newline,
 * DEL and C1 stay, for displays to clean; what no trace can hold does not. */
START_TEST(wire_clean_keeps_what_traces_carry)
{
	char out[16];

	ck_assert_ptr_null(wire_clean(NULL, out, sizeof(out)));
	ck_assert_ptr_null(wire_clean("", out, sizeof(out)));
	ck_assert_str_eq(wire_clean("a\tb\x7f" "c\n", out, sizeof(out)),
			 "a\tb\x7f" "c\n");
	ck_assert_str_eq(wire_clean("a\rb\x1b", out, sizeof(out)), "a?b?");
	/* Invalid UTF-8, an overlong '/', a C1 control, a surrogate. */
	ck_assert_str_eq(wire_clean("\xff" "x\xc0\xaf" "\xc2\x85"
				    "\xed\xa0\x80", out, sizeof(out)),
			 "?x??\xc2\x85???");
	/* Valid UTF-8 stays; a cut never splits a character. */
	ck_assert_str_eq(wire_clean("\xc3\xa9t\xc3\xa9", out, sizeof(out)),
			 "\xc3\xa9t\xc3\xa9");
	ck_assert_str_eq(wire_clean("ab\xe2\x82\xac", out, 5), "ab");
	ck_assert_str_eq(wire_clean("abcdef", out, 4), "abc");
}
END_TEST

START_TEST(wire_batch_splits_under_frame_max)
{
	static char frame[64];
	char *stack[64];
	struct wire_batch b = { 0 };
	size_t added = 0, got = 0, frames = 0;
	Npusan__Finding f;
	Npusan__Access acc;

	for (size_t i = 0; i < 64; i++)
		stack[i] = frame;
	memset(frame, 'f', sizeof(frame) - 1);
	npusan__finding__init(&f);
	npusan__access__init(&acc);
	acc.n_stack = 64;
	acc.stack = stack;
	acc.op = (char *)"aten::add";
	f.access = &acc;
	f.kind = (char *)"data_race";
	f.has_id = 1;
	/* About 4 KiB a finding: 1000 of them take several frames. */
	while (added < 1000 || b.n > 0) {
		uint8_t *fr;
		size_t len;
		uint32_t plen;
		Npusan__FromDaemon *m;
		int err = -E2BIG;

		if (added < 1000) {
			f.id = (int64_t)added + 1;
			err = wire_batch_add(&b, 1, &f.base);
		}
		if (err == 0) {
			added++;
			continue;
		}
		ck_assert_int_eq(err, -E2BIG);
		ck_assert_int_eq(wire_batch_frame(&b, 4, 2, added == 1000, &fr,
						  &len),
				 0);
		ck_assert_int_eq(frame_header_decode(fr, &plen), 0);
		ck_assert_uint_eq(plen + FRAME_HEADER_SIZE, len);
		ck_assert_uint_le(plen, FRAME_MAX);
		m = npusan__from_daemon__unpack(NULL, plen,
						fr + FRAME_HEADER_SIZE);
		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
		ck_assert(m->findings->has_done);
		ck_assert_int_eq(m->findings->done, added == 1000);
		for (size_t i = 0; i < m->findings->n_findings; i++)
			ck_assert_int_eq(m->findings->findings[i]->id,
					 (int64_t)(got + i + 1));
		got += m->findings->n_findings;
		frames++;
		npusan__from_daemon__free_unpacked(m, NULL);
		free(fr);
	}
	ck_assert_uint_eq(got, 1000);
	ck_assert_uint_gt(frames, 2);
	wire_batch_free(&b);
}
END_TEST

START_TEST(wire_rx_reassembles_byte_by_byte)
{
	static const uint8_t stream[] = { 3, 0, 0, 0, 'a', 'b', 'c',
					  0, 0, 0, 0 };
	struct wire_rx rx = { 0 };
	size_t off = 0, frames = 0;

	while (off < sizeof(stream)) {
		uint8_t *p;
		size_t n, len;
		int r;

		wire_rx_next(&rx, &p, &n);
		ck_assert_uint_gt(n, 0);
		*p = stream[off++];
		r = wire_rx_advance(&rx, 1);
		ck_assert_int_ge(r, 0);
		if (r == 1) {
			const uint8_t *pl = wire_rx_payload(&rx, &len);

			ck_assert_uint_eq(len, frames == 0 ? 3 : 0);
			if (len > 0)
				ck_assert_int_eq(memcmp(pl, "abc", 3), 0);
			frames++;
			wire_rx_reset(&rx);
		}
	}
	ck_assert_uint_eq(frames, 2);
	ck_assert(wire_rx_idle(&rx));
}
END_TEST

void server_wire_add(TCase *tc)
{
	tcase_add_test(tc, wire_clean_keeps_what_traces_carry);
	tcase_add_test(tc, wire_batch_splits_under_frame_max);
	tcase_add_test(tc, wire_rx_reassembles_byte_by_byte);
}
