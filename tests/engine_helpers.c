/*
 * engine_helpers.c - test_engine's shared helpers (engine_helpers.h): a
 * trace body analysed into F, and the findings in it asserted.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "engine_helpers.h"
#include "testutil.h"

struct tu_findings F;

void teardown(void)
{
	tu_findings_free(&F);
}

/* Analyses `body` (a trace without its header line). */
void run_mode(const char *body, bool dedup)
{
	char *text;

	ck_assert_int_gt(asprintf(&text, "npusan-trace 1\n%s", body), 0);
	tu_findings_free(&F);
	tu_analyze(text, dedup, &F);
	free(text);
	ck_assert_msg(F.err >= 0, "analysis failed: %d %s", F.err, F.errmsg);
}

void run(const char *body)
{
	run_mode(body, false);
}

void assert_findings(size_t races, size_t mrs)
{
	ck_assert_msg(tu_count(&F, FINDING_DATA_RACE) == races &&
			      tu_count(&F, FINDING_MISSING_RECORD_STREAM) == mrs,
		      "expected %zu races and %zu missing record_stream, got "
		      "%zu and %zu",
		      races, mrs, tu_count(&F, FINDING_DATA_RACE),
		      tu_count(&F, FINDING_MISSING_RECORD_STREAM));
}

void assert_race(size_t i, uint64_t stream, bool write,
		 uint64_t prev_stream, bool prev_write)
{
	const struct finding *f;

	ck_assert_uint_lt(i, F.n);
	f = &F.v[i];
	ck_assert_int_eq(f->kind, FINDING_DATA_RACE);
	ck_assert(f->has_previous);
	ck_assert_uint_eq(f->access.stream, stream);
	ck_assert_int_eq(f->access.write, write);
	ck_assert_uint_eq(f->previous.stream, prev_stream);
	ck_assert_int_eq(f->previous.write, prev_write);
	ck_assert_int_eq(f->detected_at, DETECTED_AT_LAUNCH);
}

void assert_mrs(size_t i, uint64_t ptr, uint64_t alloc_stream,
		uint64_t use_stream, uint64_t seq)
{
	const struct finding *f;

	ck_assert_uint_lt(i, F.n);
	f = &F.v[i];
	ck_assert_int_eq(f->kind, FINDING_MISSING_RECORD_STREAM);
	ck_assert(!f->has_previous);
	ck_assert(f->has_alloc);
	ck_assert_uint_eq(f->ptr, ptr);
	ck_assert_uint_eq(f->alloc.ptr, ptr);
	ck_assert(f->alloc.has_stream);
	ck_assert_uint_eq(f->alloc.stream, alloc_stream);
	ck_assert_uint_eq(f->access.stream, use_stream);
	ck_assert_uint_eq(f->access.seq, seq);
}
