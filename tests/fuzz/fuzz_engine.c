/*
 * fuzz_engine.c - libFuzzer target for the analysis engine.
 *
 * The input is read as a trace, and the ops it yields up to its first error
 * are fed to two engines, one deduplicating and one reporting every
 * occurrence. Whatever the ops, neither may crash, leak or hit undefined
 * behaviour; every finding must be well formed; and the two modes must
 * agree: as many occurrences, and each deduplicated row counting exactly
 * the occurrences that share its key. Linked with standalone.c instead of
 * libFuzzer, it replays a corpus.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "trace.h"

/* Enough for any trace of a few kilobytes; a hostile one meets the limit
 * and must fail cleanly. */
#define FUZZ_MAX_BYTES (64u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct found {
	struct finding *v;
	size_t n;
	size_t cap;
	const struct symtab *syms;
};

static void check(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_engine: %s\n", what);
		abort();
	}
}

static void check_access(const struct symtab *syms,
			 const struct finding_access *a)
{
	const uint32_t *frames;

	check(symtab_str(syms, a->op, NULL) != NULL, "unknown operator");
	check(a->stack == 0 || symtab_stack(syms, a->stack, &frames) > 0,
	      "unknown stack");
	check(a->seq >= 1, "sequence number below 1");
}

static void collect_cb(const struct finding *f, bool first, void *arg)
{
	struct found *out = arg;

	check((unsigned)f->kind < FINDING_KIND_COUNT, "bad kind");
	check((unsigned)f->detected_at < DETECTED_AT_COUNT, "bad site");
	check_access(out->syms, &f->access);
	if (f->kind == FINDING_DATA_RACE) {
		check(f->has_previous &&
			      (f->detected_at == DETECTED_AT_LAUNCH ||
			       f->detected_at == DETECTED_AT_CAPTURE ||
			       f->detected_at == DETECTED_AT_REPLAY),
		      "race without its previous access");
		check_access(out->syms, &f->previous);
		check(f->previous.stream != f->access.stream,
		      "race on one stream");
		check(f->previous.seq < f->access.seq, "race out of order");
	} else if (f->kind == FINDING_MISSING_RECORD_STREAM) {
		check(!f->has_previous && f->has_alloc && f->alloc.has_stream &&
			      f->alloc.stream != f->access.stream &&
			      f->ptr == f->alloc.ptr,
		      "malformed missing_record_stream");
	} else { /* graphs.md: stale_graph_address, unjoined_capture */
		check(!f->has_previous && f->access.has_graph &&
			      f->has_alloc == (f->kind ==
					       FINDING_STALE_GRAPH_ADDRESS) &&
			      (!f->has_alloc || f->ptr == f->alloc.ptr),
		      "malformed graph finding");
	}
	if (!first) {
		check(f->id >= 1 && f->id <= out->n, "repeat of an unknown id");
		check(f->count == out->v[f->id - 1].count + 1, "count skipped");
		out->v[f->id - 1].count = f->count;
		return;
	}
	check(f->id == out->n + 1 && f->count == 1, "ids out of order");
	if (out->n == out->cap) {
		out->cap = out->cap ? out->cap * 2 : 16;
		out->v = realloc(out->v, out->cap * sizeof(*out->v));
		check(out->v != NULL, "out of memory");
	}
	out->v[out->n++] = *f;
}

/* Whether a and b merge into one row: the engine's own key. */
static bool same_key(const struct finding *a, const struct finding *b)
{
	struct finding_key ka, kb;

	finding_key(a, NULL, &ka);
	finding_key(b, NULL, &kb);
	return memcmp(&ka, &kb, sizeof(ka)) == 0;
}

static void compare_modes(const struct found *rows, const struct found *all)
{
	uint64_t total = 0;

	for (size_t i = 0; i < rows->n; i++) {
		uint64_t n = 0;

		for (size_t j = 0; j < all->n; j++)
			n += same_key(&rows->v[i], &all->v[j]);
		check(n == rows->v[i].count, "dedup count differs from --every");
		total += n;
	}
	check(total == all->n, "an occurrence has no deduplicated row");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct found rows = { 0 }, all = { 0 };
	struct engine_opts od = { .dedup = true, .finding_cb = collect_cb,
				  .arg = &rows, .max_bytes = FUZZ_MAX_BYTES };
	struct engine_opts oa = { .finding_cb = collect_cb, .arg = &all,
				  .max_bytes = FUZZ_MAX_BYTES };
	struct engine *ed, *ea;
	struct trace_reader *r;
	struct symtab *syms;
	bool comparable = true;
	struct op op;

	check(symtab_new(&syms) == 0, "symtab_new");
	rows.syms = all.syms = syms;
	check(trace_reader_new_mem(data, size, "fuzz", syms, &r) == 0,
	      "reader");
	check(engine_new(&od, &ed) == 0 && engine_new(&oa, &ea) == 0,
	      "engine_new");
	while (trace_read(r, &op) == 1) {
		int rd = engine_feed(ed, &op), ra = engine_feed(ea, &op);
		const char *broken;

		check(rd == ra || rd == -ENOMEM || ra == -ENOMEM,
		      "modes disagree on an op");
		check(rd == 0 || rd == -ENOMEM || rd == -E2BIG,
		      "a valid op was refused");
		if (rd == -ENOMEM || ra == -ENOMEM)
			comparable = false;
		if (rd == -E2BIG)
			break;
		if ((broken = engine_check(ed)) == NULL)
			broken = engine_check(ea);
		check(broken == NULL, broken);
	}
	if (comparable)
		compare_modes(&rows, &all);
	engine_free(ed);
	engine_free(ea);
	trace_reader_close(r);
	symtab_free(syms);
	free(rows.v);
	free(all.v);
	return 0;
}
