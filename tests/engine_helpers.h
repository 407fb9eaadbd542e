/*
 * engine_helpers.h - what test_engine's files share: a trace body
 * analysed into F, the findings of the test that runs, and assertions on
 * them. Built into test_engine alone (engine_helpers.c).
 *
 * Each test_engine_*.c file adds its tests to its TCase through its
 * engine_*_add(), which test_engine.c's suite calls in its order.
 */
#ifndef NPUSAN_TESTS_ENGINE_HELPERS_H
#define NPUSAN_TESTS_ENGINE_HELPERS_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "testutil.h"

/* The findings of the last run_mode(), freed by teardown(). */
extern struct tu_findings F;

/* The TCases' checked fixture: frees F after each test. */
void teardown(void);

/* Analyses `body` (a trace without its header line). */
void run_mode(const char *body, bool dedup);

/* run_mode() without deduplication. */
void run(const char *body);

/* F holds `races` data races and `mrs` missing record_streams. */
void assert_findings(size_t races, size_t mrs);

/* Finding `i` is a race found at a launch: the access on `stream`
 * against the previous one on `prev_stream`, each a write or not. */
void assert_race(size_t i, uint64_t stream, bool write,
		 uint64_t prev_stream, bool prev_write);

/* Finding `i` is a missing record_stream of the allocation at `ptr`
 * made on `alloc_stream`, used on `use_stream` by launch `seq`. */
void assert_mrs(size_t i, uint64_t ptr, uint64_t alloc_stream,
		uint64_t use_stream, uint64_t seq);

/* The tests of each test_engine_*.c file, added to `tc`. */
void engine_csan_add(TCase *tc);
void engine_memory_add(TCase *tc);
void engine_ranges_add(TCase *tc);
void engine_api_add(TCase *tc);
/* The API tests that take seconds each (tagged "slow"). */
void engine_api_long_add(TCase *tc);

#endif
