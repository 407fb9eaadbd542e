/*
 * test_engine_scale.c - the engine past its small sizes.
 *
 * The engine keeps small things small (one read inline, a pair list before
 * a pair set, a dedup table of 32, an allocation hash of 128, 16 launch
 * elements on the stack's scratch) and grows past them. The scenarios in
 * test_engine.c stay below those sizes; each test here crosses one, and
 * asserts the exact findings the trace format's rules give, computed
 * independently of the engine, so a slip where the engine grows or
 * coalesces shows as a lost or invented finding. tu_analyze() also checks
 * the engine's invariants after every operation.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "testutil.h"

static struct tu_findings F;

static void teardown(void)
{
	tu_findings_free(&F);
}

/* A growing trace body; the tests build traces of hundreds of lines. */
struct body {
	char *text;
	size_t len;
	FILE *f;
};

static void body_open(struct body *b)
{
	b->text = NULL;
	b->f = open_memstream(&b->text, &b->len);
	ck_assert_ptr_nonnull(b->f);
	fputs("npusan-trace 1\n", b->f);
}

/* Analyses what was written, closing the body. */
static void body_run(struct body *b, bool dedup)
{
	ck_assert_int_eq(fclose(b->f), 0);
	tu_findings_free(&F);
	tu_analyze(b->text, dedup, &F);
	free(b->text);
	ck_assert_msg(F.err >= 0, "analysis failed: %d %s", F.err, F.errmsg);
}

static void assert_counts(size_t races, size_t mrs)
{
	ck_assert_msg(tu_count(&F, FINDING_DATA_RACE) == races &&
			      tu_count(&F, FINDING_MISSING_RECORD_STREAM) == mrs,
		      "expected %zu races and %zu missing record_stream, got "
		      "%zu and %zu",
		      races, mrs, tu_count(&F, FINDING_DATA_RACE),
		      tu_count(&F, FINDING_MISSING_RECORD_STREAM));
}

/*
 * One write against 40 unordered reads, each on a stream of its own and
 * each a range nested in the next, so the write meets the same reads in
 * many segments: each pair is one finding, 40 in all, however often the
 * pair is met.
 */
START_TEST(engine_one_access_pairs_with_forty_earlier_reads)
{
	uint64_t seen = 0;
	struct body b;

	body_open(&b);
	for (int k = 1; k <= 40; k++) {
		fprintf(b.f, "stream_create stream=%d\n", k);
		fprintf(b.f, "launch stream=%d op=rd%d read=0x1000+%d\n", k, k,
			4 * k);
	}
	fputs("launch stream=0 op=wr write=0x1000+160\n", b.f);
	body_run(&b, false);
	assert_counts(40, 0);
	for (size_t i = 0; i < F.n; i++) {
		uint64_t s = F.v[i].previous.stream;

		ck_assert(F.v[i].access.write && !F.v[i].previous.write);
		ck_assert_msg(s >= 1 && s <= 40 && !(seen >> s & 1),
			      "stream %llu paired twice or unknown",
			      (unsigned long long)s);
		seen |= 1ull << s;
	}
}
END_TEST

/* Exactly 16 and 17 earlier reads: the edge of the pair list. */
START_TEST(engine_pairs_at_the_edge_of_the_pair_list)
{
	for (int n = 15; n <= 17; n++) {
		struct body b;

		body_open(&b);
		for (int k = 1; k <= n; k++)
			fprintf(b.f, "launch stream=%d op=rd read=0x10+%d\n",
				k, k);
		fputs("launch stream=0 op=wr write=0x10+32\n", b.f);
		body_run(&b, false);
		assert_counts((size_t)n, 0);
	}
}
END_TEST

/*
 * 40 distinct mistakes, each made twice on fresh memory: with
 * deduplication, 40 findings with a count of 2 each (the table grows past
 * its first size while holding them).
 */
START_TEST(engine_dedup_keeps_forty_distinct_findings_apart)
{
	struct body b;

	body_open(&b);
	for (int round = 0; round < 2; round++) {
		for (int k = 1; k <= 40; k++) {
			unsigned long p = 0x100000ul * (unsigned long)(round + 1) +
					  0x100ul * (unsigned long)k;

			fprintf(b.f, "launch stream=0 op=w%d write=%#lx\n", k, p);
			fprintf(b.f, "launch stream=%d op=r%d read=%#lx\n", k, k,
				p);
		}
	}
	body_run(&b, true);
	assert_counts(40, 0);
	for (size_t i = 0; i < F.n; i++)
		ck_assert_uint_eq(F.v[i].count, 2);
}
END_TEST

/*
 * 70 reads of one byte from 70 call sites of one stream, then an unordered
 * write: every read is a distinct earlier access, so 70 races. (Reads of
 * the same site may be merged; distinct sites never are.)
 */
START_TEST(engine_seventy_reads_from_distinct_sites_all_race)
{
	struct body b;

	body_open(&b);
	fputs("stream_create stream=1\n", b.f);
	for (int k = 0; k < 70; k++)
		fprintf(b.f, "launch stream=1 op=site%d read=0x2000\n", k);
	fputs("launch stream=0 op=wr write=0x2000\n", b.f);
	body_run(&b, false);
	assert_counts(70, 0);
}
END_TEST

/*
 * 300 live allocations at once (the allocation hash grows twice): each is
 * written on stream 0, read at an interior pointer on stream 1 without a
 * wait (a race), and freed without record_stream (a missing
 * record_stream), so the allocation must still be found by its start and
 * by an interior pointer after the growth.
 */
START_TEST(engine_three_hundred_live_allocations_are_all_found)
{
	struct body b;

	body_open(&b);
	for (int k = 0; k < 300; k++)
		fprintf(b.f, "alloc ptr=%#x size=256 stream=0\n",
			0x100000 + 0x1000 * k);
	for (int k = 0; k < 300; k++) {
		unsigned p = 0x100000u + 0x1000u * (unsigned)k;

		fprintf(b.f, "launch stream=0 op=init write=%#x+256\n", p);
		fprintf(b.f, "launch stream=1 op=use read=%#x+8\n", p + 8);
	}
	for (int k = 0; k < 300; k++)
		fprintf(b.f, "free ptr=%#x\n", 0x100000 + 0x1000 * k);
	body_run(&b, false);
	assert_counts(300, 300);
	for (size_t i = 0; i < F.n; i++) {
		if (F.v[i].kind == FINDING_DATA_RACE)
			ck_assert_uint_eq(F.v[i].alloc.ptr, F.v[i].ptr - 8);
	}
}
END_TEST

/* A launch of 24 reads and 20 writes, each in an allocation of its own,
 * after unordered writes to all of them: 44 races, one per element. */
START_TEST(engine_launch_with_many_elements_checks_each)
{
	struct body b;

	body_open(&b);
	for (int k = 0; k < 44; k++) {
		fprintf(b.f, "alloc ptr=%#x size=64 stream=0\n",
			0x10000 + 0x100 * k);
		fprintf(b.f, "launch stream=0 op=init write=%#x+64\n",
			0x10000 + 0x100 * k);
	}
	fputs("launch stream=1 op=wide read=", b.f);
	for (int k = 0; k < 24; k++)
		fprintf(b.f, "%s%#x+64", k ? "," : "", 0x10000 + 0x100 * k);
	fputs(" write=", b.f);
	for (int k = 24; k < 44; k++)
		fprintf(b.f, "%s%#x+64", k > 24 ? "," : "", 0x10000 + 0x100 * k);
	fputs("\n", b.f);
	body_run(&b, false);
	assert_counts(44, 0);
}
END_TEST

/*
 * An allocation written whole, then written in part: the part's history
 * is new, the rest keeps the whole write. A read of the first byte on
 * another stream races with the whole write.
 */
START_TEST(engine_part_use_keeps_the_rest_of_a_whole_history)
{
	struct body b;

	body_open(&b);
	fputs("alloc ptr=0x1000 size=64 stream=0\n"
	      "launch stream=0 op=whole write=0x1000+64\n"
	      "launch stream=0 op=part write=0x1010+4\n"
	      "launch stream=1 op=rd read=0x1000\n",
	      b.f);
	body_run(&b, false);
	assert_counts(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "whole");
}
END_TEST

/* A read of a middle part splits the write's segment; the part after it
 * keeps the write as its last write. */
START_TEST(engine_split_segment_keeps_its_last_write)
{
	struct body b;

	body_open(&b);
	fputs("alloc ptr=0x1000 size=64 stream=0\n"
	      "launch stream=0 op=whole write=0x1000+64\n"
	      "launch stream=0 op=part read=0x1010+4\n"
	      "launch stream=1 op=rd read=0x1030\n",
	      b.f);
	body_run(&b, false);
	assert_counts(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "whole");
}
END_TEST

/*
 * A later write to the front of an earlier one trims the earlier one's
 * history exactly: streams 0 and 2 are ordered after the first write
 * (stream 1), the second write (stream 0) is not ordered before stream 2,
 * so of a read of the two bytes at the seam, the byte of the second
 * write (stream 0) races and the byte after it does not.
 */
START_TEST(engine_overwrite_trims_history_at_the_exact_byte)
{
	struct body b;

	body_open(&b);
	fputs("stream_create stream=1\nstream_create stream=2\n"
	      "launch stream=1 op=first write=0x1000+64\n"
	      "stream_wait stream=2 on=1\n"
	      "stream_wait stream=0 on=1\n"
	      "launch stream=0 op=second write=0x1000+16\n"
	      "launch stream=2 op=rd read=0x100f+2\n",
	      b.f);
	body_run(&b, false);
	assert_counts(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "second");
	ck_assert_uint_eq(F.v[0].previous.stream, 0);
}
END_TEST

/*
 * Nested writes in one launch: the later-listed element is the last write
 * of the bytes they share, so freeing by its start (no allocation there)
 * drops exactly those bytes' history; the outer element's own bytes keep
 * theirs.
 */
START_TEST(engine_nested_writes_free_by_inner_start)
{
	struct body b;

	body_open(&b);
	fputs("stream_create stream=2\n"
	      "launch stream=1 op=k write=0x100+64,0x110+16\n"
	      "free ptr=0x110\n"
	      "launch stream=2 op=inner read=0x118\n"
	      "launch stream=2 op=outer read=0x108\n",
	      b.f);
	body_run(&b, false);
	assert_counts(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, false), "outer");
}
END_TEST

/*
 * Memory no allocation covers: a free by an access's start drops that
 * access's history through its last byte; a free naming its last byte
 * drops nothing.
 */
START_TEST(engine_free_of_unallocated_memory_reaches_its_last_byte)
{
	struct body b;

	body_open(&b);
	fputs("stream_create stream=2\n"
	      "launch stream=1 op=a write=0x300+16\n"
	      "launch stream=1 op=b write=0x400+16\n"
	      "free ptr=0x300\n"
	      "free ptr=0x40f\n"
	      "launch stream=2 op=ra read=0x30f\n"
	      "launch stream=2 op=rb read=0x40f\n",
	      b.f);
	body_run(&b, false);
	assert_counts(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, false), "rb");
}
END_TEST

static Suite *engine_scale_suite(void)
{
	Suite *s = suite_create("engine_scale");
	TCase *tc = tcase_create("scale");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, engine_one_access_pairs_with_forty_earlier_reads);
	tcase_add_test(tc, engine_pairs_at_the_edge_of_the_pair_list);
	tcase_add_test(tc, engine_dedup_keeps_forty_distinct_findings_apart);
	tcase_add_test(tc, engine_seventy_reads_from_distinct_sites_all_race);
	tcase_add_test(tc, engine_three_hundred_live_allocations_are_all_found);
	tcase_add_test(tc, engine_launch_with_many_elements_checks_each);
	tcase_add_test(tc, engine_part_use_keeps_the_rest_of_a_whole_history);
	tcase_add_test(tc, engine_split_segment_keeps_its_last_write);
	tcase_add_test(tc, engine_overwrite_trims_history_at_the_exact_byte);
	tcase_add_test(tc, engine_nested_writes_free_by_inner_start);
	tcase_add_test(tc, engine_free_of_unallocated_memory_reaches_its_last_byte);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(engine_scale_suite());
}
