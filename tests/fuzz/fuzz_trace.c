/*
 * fuzz_trace.c - libFuzzer target for the trace reader and writer.
 *
 * Any input must be read without a crash, leak or undefined behaviour, and
 * give either ops or one sane error line. When it reads cleanly, the ops
 * written back by the writer must read back identical (strings compared,
 * not ids), and writing those again must give the same text: the writer's
 * output is canonical. Linked with standalone.c instead of libFuzzer, it
 * replays a corpus.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_trace: %s\n", what);
		abort();
	}
}

static bool same_str(const struct symtab *sa, uint32_t a,
		     const struct symtab *sb, uint32_t b)
{
	size_t la, lb;
	const char *pa = symtab_str(sa, a, &la), *pb = symtab_str(sb, b, &lb);

	if (pa == NULL || pb == NULL)
		return pa == pb;
	return la == lb && memcmp(pa, pb, la) == 0;
}

static bool same_stack(const struct symtab *sa, uint32_t a,
		       const struct symtab *sb, uint32_t b)
{
	const uint32_t *fa, *fb;
	size_t n = symtab_stack(sa, a, &fa);

	if (n != symtab_stack(sb, b, &fb))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!same_str(sa, fa[i], sb, fb[i]))
			return false;
	}
	return true;
}

static bool same_ranges(const struct op_range *a, const struct op_range *b,
			size_t n)
{
	return n == 0 || memcmp(a, b, n * sizeof(*a)) == 0;
}

/* Op `a` over symtab `sa` equals op `b` over `sb`. */
static bool same_op(const struct symtab *sa, const struct op *a,
		    const struct symtab *sb, const struct op *b)
{
	return a->kind == b->kind && a->has_stream == b->has_stream &&
	       a->has_lost == b->has_lost && a->stream == b->stream &&
	       a->on == b->on && a->event == b->event && a->ptr == b->ptr &&
	       a->size == b->size && a->lost == b->lost &&
	       a->has_graph == b->has_graph && a->graph == b->graph &&
	       a->nreads == b->nreads && a->nwrites == b->nwrites &&
	       same_ranges(a->reads, b->reads, a->nreads) &&
	       same_ranges(a->writes, b->writes, a->nwrites) &&
	       same_str(sa, a->name, sb, b->name) &&
	       same_stack(sa, a->stack, sb, b->stack);
}

static bool same_cstr(const char *a, const char *b)
{
	return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static bool same_process(const struct trace_process *a,
			 const struct trace_process *b)
{
	return a->present == b->present && a->has_rank == b->has_rank &&
	       a->pid == b->pid && a->rank == b->rank &&
	       same_cstr(a->job, b->job) && same_cstr(a->name, b->name);
}

/* A message is one line: "NAME:LINE: " and printable text. */
static void check_message(const char *msg, const char *name)
{
	size_t n = strlen(name);

	check(strncmp(msg, name, n) == 0 && msg[n] == ':', "message prefix");
	for (const char *p = msg; *p; p++)
		check((unsigned char)*p >= 0x20, "control byte in message");
	check(strlen(msg) < n + 600, "message too long");
}

/*
 * Reads all of `data` with `syms` and, when `f` is not NULL, writes every op
 * to it, in the version of its header. Returns what the last trace_read()
 * returned.
 */
static int copy_trace(const void *data, size_t size, struct symtab *syms,
		      FILE *f)
{
	struct trace_writer *w = NULL;
	struct trace_reader *r;
	struct op op;
	int rc;

	check(trace_reader_new_mem(data, size, "fuzz", syms, &r) == 0, "new");
	while ((rc = trace_read(r, &op)) == 1) {
		check(op.kind < OP_KIND_COUNT, "kind");
		if (f == NULL)
			continue;
		/* The process line precedes every op, so it is complete now. */
		if (w == NULL)
			check(trace_writer_new_version(
				      f, syms, trace_reader_process(r),
				      trace_reader_version(r), &w) == 0,
			      "writer_new");
		check(trace_write_op(w, &op) == 0, "the writer refused an op");
	}
	if (rc < 0) {
		check_message(trace_reader_error(r), "fuzz");
		check(trace_read(r, &op) == rc, "error does not stick");
	} else if (trace_reader_torn(r) != NULL) {
		check_message(trace_reader_torn(r), "fuzz");
	}
	if (rc == 0 && f != NULL && w == NULL) {
		check(trace_writer_new_version(f, syms, trace_reader_process(r),
					       trace_reader_version(r), &w) ==
			      0, "writer_new");
	}
	check(trace_writer_close(w) == 0, "writer_close");
	trace_reader_close(r);
	return rc;
}

/* Reads `a` over sa and `b` over sb in step; both must give equal ops. */
static void compare(const void *a, size_t alen, struct symtab *sa,
		    const void *b, size_t blen, struct symtab *sb)
{
	struct trace_reader *ra, *rb;
	struct op oa, ob;
	int rca, rcb;

	check(trace_reader_new_mem(a, alen, "a", sa, &ra) == 0, "new a");
	check(trace_reader_new_mem(b, blen, "b", sb, &rb) == 0, "new b");
	do {
		rca = trace_read(ra, &oa);
		rcb = trace_read(rb, &ob);
		check(rca == rcb, "written text reads differently");
		check(rca != 1 || same_op(sa, &oa, sb, &ob), "op changed");
	} while (rca == 1);
	check(trace_reader_version(ra) == trace_reader_version(rb),
	      "version changed");
	check(same_process(trace_reader_process(ra), trace_reader_process(rb)),
	      "process changed");
	trace_reader_close(ra);
	trace_reader_close(rb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct symtab *sa, *sb;
	char *text = NULL, *again = NULL;
	size_t len = 0, again_len = 0;
	FILE *f;

	check(symtab_new(&sa) == 0, "symtab_new");
	check(symtab_new(&sb) == 0, "symtab_new");
	f = open_memstream(&text, &len);
	check(f != NULL, "open_memstream");
	if (copy_trace(data, size, sa, f) == 0) {
		check(fclose(f) == 0, "fclose");
		compare(data, size, sa, text, len, sb);
		f = open_memstream(&again, &again_len);
		check(f != NULL, "open_memstream");
		check(copy_trace(text, len, sb, f) == 0, "reread failed");
		check(fclose(f) == 0, "fclose");
		check(len == again_len && memcmp(text, again, len) == 0,
		      "writer output is not canonical");
	} else {
		fclose(f);
	}
	free(text);
	free(again);
	symtab_free(sa);
	symtab_free(sb);
	return 0;
}
