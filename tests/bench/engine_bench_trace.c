/*
 * engine_bench_trace.c - engine_bench and traces: a recorded trace
 * (--trace) parsed into a workload before anything is timed, a workload
 * written as a trace (--write-trace, and the text the reader is timed
 * over), and the reader's time over it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_bench.h"
#include "grow.h"
#include "op.h"
#include "symtab.h"
#include "trace.h"

/* ---- a recorded trace ------------------------------------------------ */

/* The whole file at path, read into memory; *len its length. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	size_t cap = 1 << 20, n = 0, got;
	char *buf;

	if (f == NULL) {
		fprintf(stderr, "engine_bench: %s: %s\n", path,
			strerror(errno));
		exit(2);
	}
	buf = xrealloc(NULL, cap);
	while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap &&
		    grow_array((void **)&buf, &cap, n + 1, sizeof(*buf)) < 0)
			die("out of memory");
	}
	if (ferror(f)) {
		fprintf(stderr, "engine_bench: reading %s failed\n", path);
		exit(2);
	}
	if (f != stdin)
		fclose(f);
	*len = n;
	return buf;
}

/*
 * The operations of a recorded trace, parsed into memory before anything
 * is timed, with their ranges copied out of the reader's buffers.
 */
void load_trace(struct workload *w, const char *path)
{
	struct trace_reader *r;
	struct op op, *dst;
	struct op_range *rg;
	size_t len;
	char *text = slurp(path, &len);
	int rc;

	memset(w, 0, sizeof(*w));
	if (symtab_new(&w->syms) < 0 ||
	    trace_reader_new_mem(text, len, path, w->syms, &r) < 0)
		die("out of memory");
	while ((rc = trace_read(r, &op)) == 1) {
		rg = workload_ranges(w, op.nreads + op.nwrites);
		if (op.nreads)
			memcpy(rg, op.reads, op.nreads * sizeof(*rg));
		if (op.nwrites)
			memcpy(rg + op.nreads, op.writes,
			       op.nwrites * sizeof(*rg));
		dst = workload_emit(w, op.kind);
		*dst = op;
		dst->reads = op.nreads ? rg : NULL;
		dst->writes = op.nwrites ? rg + op.nreads : NULL;
		if (op.kind == OP_LAUNCH) {
			w->launches++;
			w->accesses += op.nreads + op.nwrites;
		}
	}
	if (rc < 0) {
		fprintf(stderr, "engine_bench: %s\n", trace_reader_error(r));
		exit(2);
	}
	trace_reader_close(r);
	free(text);
}

static const struct trace_process bench_process = {
	.present = true, .pid = 4242, .job = "engine_bench", .has_rank = true,
	.rank = 3,
};

void write_trace(const struct workload *w, FILE *f, const char *name)
{
	struct trace_writer *tw;
	int err;

	if ((err = trace_writer_new(f, w->syms, &bench_process, &tw)) < 0)
		goto err;
	for (size_t i = 0; i < w->nops; i++) {
		if ((err = trace_write_op(tw, &w->ops[i])) < 0) {
			trace_writer_close(tw);
			goto err;
		}
	}
	if ((err = trace_writer_close(tw)) < 0)
		goto err;
	return;
err:
	fprintf(stderr, "engine_bench: writing %s: %s\n", name, strerror(-err));
	exit(1);
}

/* Seconds the reader takes over the trace in buf, interning included. */
double time_parse(const char *buf, size_t len, size_t expect)
{
	struct symtab *syms;
	struct trace_reader *r;
	struct op op;
	size_t n = 0;
	double t0, t1;
	int rc;

	t0 = now();
	if (symtab_new(&syms) < 0 ||
	    trace_reader_new_mem(buf, len, "bench.trace", syms, &r) < 0)
		die("out of memory");
	while ((rc = trace_read(r, &op)) == 1)
		n++;
	t1 = now();
	if (rc < 0) {
		fprintf(stderr, "engine_bench: %s\n", trace_reader_error(r));
		exit(1);
	}
	if (n != expect)
		die("the trace read back holds a different number of ops");
	trace_reader_close(r);
	symtab_free(syms);
	return t1 - t0;
}
