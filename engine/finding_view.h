/*
 * finding_view.h - a finding with every string resolved, as
 * docs/findings.md defines it: the one structure that carries a finding
 * from the engine to the store, over the wire and into the reports.
 *
 * The engine hands out findings whose operators and stacks are ids into
 * the process's symtab; finding_view_of() resolves one into a view, the
 * one place that does, for both the daemon (daemon/ingest.c) and
 * `npusanctl analyze`. The store keeps views, rpc encodes them into the
 * wire's Finding and the cli decodes that back into a view, so that every
 * command prints a finding with the same formatter (cli/report.c).
 *
 * A view borrows every pointer: it is valid as long as what it points at
 * (a symtab and a struct finding_frames, a database row, a reply).
 */
#ifndef NPUSAN_FINDING_VIEW_H
#define NPUSAN_FINDING_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "symtab.h"

/* A stack: `n` frames, innermost first. */
struct finding_stack {
	const char *const *frames;
	size_t n;
};

/* One access of a launch. */
struct finding_view_access {
	uint64_t stream;
	uint64_t seq;
	bool write;
	const char *op; /* NULL when unknown */
	const char *arg; /* the operator's argument; NULL when unknown */
	struct finding_stack stack;
	/* The graph whose capture recorded it or whose replay made it. */
	bool has_graph;
	uint64_t graph;
};

struct finding_view_alloc {
	uint64_t ptr;
	uint64_t size;
	bool has_stream;
	uint64_t stream;
	struct finding_stack stack;
};

struct finding_view {
	uint64_t id;
	/* Names, not enums, so that a cli shows a newer daemon's kinds. */
	const char *kind;
	const char *detected_at;
	bool has_pid, has_rank;
	uint64_t pid, rank;
	const char *job; /* NULL: none */
	uint64_t ptr;
	bool has_alloc;
	struct finding_view_alloc alloc;
	struct finding_view_access access;
	bool has_previous;
	struct finding_view_access previous;
	/* A missing_record_stream found at a free: the free's stack. */
	bool has_free;
	struct finding_stack free_stack;
	uint64_t count;
	/* The daemon's first and latest occurrence (Unix ms); absent offline. */
	bool has_first, has_last;
	int64_t first_ms, last_ms;
	/* The name of the daemon's suppression (npusand --suppressions) that
	 * matched it; NULL: none did, or not from a daemon. */
	const char *suppressed;
};

/* Storage for the frames of resolved findings, reused from call to call;
 * zero-initialised is empty. */
struct finding_frames {
	const char **v;
	size_t cap;
};

/*
 * Resolves engine finding `f` through its process's symtab into *out: id,
 * kind, detected_at, pointer, allocation, both accesses, the free and
 * count; the
 * process and the times are left unknown, for the caller. *out points into
 * `syms` and into `fr` (valid until the next call with `fr` or
 * finding_frames_free()). 0; -ENOMEM with *out unwritten.
 */
int finding_view_of(const struct finding *f, const struct symtab *syms,
		    struct finding_frames *fr, struct finding_view *out);

/* Frees what finding_view_of() kept in `fr`; it may be used again. */
void finding_frames_free(struct finding_frames *fr);

/* The kind named `name` into *out: true; false for a name this build
 * does not know (or NULL). */
bool finding_kind_of(const char *name, enum finding_kind *out);

/* The same for detected_at's names. */
bool detected_at_of(const char *name, enum detected_at *out);

#endif
