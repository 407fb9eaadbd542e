/*
 * trace_helpers.c - test_trace's shared helpers (trace_helpers.h): reading
 * a whole input and describing what the reader made of it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "trace_helpers.h"

/* Appends a description of every field of `op` that is not zero. */
static void describe(FILE *f, const struct symtab *s, const struct op *op)
{
	const uint32_t *frames;
	size_t n;

	fputs(op_kind_name(op->kind) ? op_kind_name(op->kind) : "?", f);
	if (op->stream)
		fprintf(f, " stream=%llu", (unsigned long long)op->stream);
	if (op->on)
		fprintf(f, " on=%llu", (unsigned long long)op->on);
	if (op->event)
		fprintf(f, " event=%llu", (unsigned long long)op->event);
	if (op->ptr)
		fprintf(f, " ptr=0x%llx", (unsigned long long)op->ptr);
	if (op->size)
		fprintf(f, " size=%llu", (unsigned long long)op->size);
	if (op->lost)
		fprintf(f, " lost=%llu", (unsigned long long)op->lost);
	if (op->graph)
		fprintf(f, " graph=%llu", (unsigned long long)op->graph);
	if (op->has_stream)
		fputs(" has_stream", f);
	if (op->has_lost)
		fputs(" has_lost", f);
	if (op->has_graph)
		fputs(" has_graph", f);
	if (op->name)
		fprintf(f, " name='%s'", symtab_str(s, op->name, NULL));
	if (op->stack) {
		n = symtab_stack(s, op->stack, &frames);
		fputs(" stack=", f);
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%s%s", i ? "|" : "",
				symtab_str(s, frames[i], NULL));
	}
	for (int w = 0; w < 2; w++) {
		const struct op_range *v = w ? op->writes : op->reads;
		const uint32_t *args = w ? op->write_args : op->read_args;
		size_t nv = w ? op->nwrites : op->nreads;

		ck_assert(nv == 0 ? v == NULL : v != NULL);
		ck_assert(nv > 0 || args == NULL);
		if (nv > 0)
			fputs(w ? " writes=" : " reads=", f);
		for (size_t i = 0; i < nv; i++) {
			fprintf(f, "%s0x%llx+%llu", i ? "," : "",
				(unsigned long long)v[i].ptr,
				(unsigned long long)v[i].len);
			if (args != NULL && args[i] != 0)
				fprintf(f, "@%s", symtab_str(s, args[i], NULL));
		}
	}
}

char *describe_str(const struct symtab *s, const struct op *op)
{
	char *buf;
	size_t len;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	describe(f, s, op);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* Reads to the end or the first error from a reader over `syms`. */
void drain(struct trace_reader *r, const struct symtab *syms,
	   struct result *out)
{
	const struct trace_process *p;
	size_t len;
	FILE *f = open_memstream(&out->ops, &len);
	struct op op;
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while ((out->rc = trace_read(r, &op)) == 1) {
		if (n++ > 0)
			fputs("; ", f);
		describe(f, syms, &op);
	}
	ck_assert_int_eq(fclose(f), 0);
	snprintf(out->msg, sizeof(out->msg), "%s", trace_reader_error(r));
	snprintf(out->torn, sizeof(out->torn), "%s",
		 trace_reader_torn(r) ? trace_reader_torn(r) : "");
	snprintf(out->name, sizeof(out->name), "%s", trace_reader_name(r));
	p = trace_reader_process(r);
	snprintf(out->job, sizeof(out->job), "%s", p->job ? p->job : "(null)");
	snprintf(out->pname, sizeof(out->pname), "%s",
		 p->name ? p->name : "(null)");
	/* The strings die with the reader; job and pname hold copies. */
	out->process = *p;
	out->process.job = out->process.name = NULL;
	if (out->rc < 0) {
		struct op again;

		/* An error sticks, message and all. */
		ck_assert_int_eq(trace_read(r, &again), out->rc);
		ck_assert_str_eq(trace_reader_error(r), out->msg);
	} else {
		struct op again;

		/* So does the end. */
		ck_assert_int_eq(trace_read(r, &again), 0);
	}
}

/* Reads `len` bytes from a buffer of exactly that size, so that ASan sees
 * any read past the input. */
void read_text(const char *text, size_t len, struct result *out)
{
	struct symtab *syms;
	struct trace_reader *r;
	char *copy = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, text, len);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(copy, len, NAME, syms, &r), 0);
	drain(r, syms, out);
	trace_reader_close(r);
	symtab_free(syms);
	free(copy);
}

void read_str(const char *text, struct result *out)
{
	read_text(text, strlen(text), out);
}

void result_free(struct result *res)
{
	free(res->ops);
}

/* Asserts that the message is "FILE:LINE: " followed by text holding
 * `want`. */
void assert_error(const struct result *res, unsigned long line,
		  const char *want)
{
	char prefix[300];

	snprintf(prefix, sizeof(prefix), "%s:%lu: ", res->name, line);
	ck_assert_msg(strncmp(res->msg, prefix, strlen(prefix)) == 0,
		      "message '%s' does not start with '%s'", res->msg,
		      prefix);
	ck_assert_msg(strstr(res->msg + strlen(prefix), want) != NULL,
		      "message '%s' lacks '%s'", res->msg, want);
	for (const char *p = res->msg; *p; p++)
		ck_assert_msg((unsigned char)*p >= 0x20,
			      "control byte in message '%s'", res->msg);
}

void check_bad(const struct bad *row)
{
	struct result res;

	read_text(row->in, row->len, &res);
	ck_assert_msg(res.rc == -EINVAL, "%s: rc %d, expected -EINVAL (%s)",
		      row->msg, res.rc, res.msg);
	assert_error(&res, row->line, row->msg);
	result_free(&res);
}

uint32_t intern(struct symtab *syms, const char *s)
{
	uint32_t id;

	ck_assert_int_eq(symtab_intern(syms, s, strlen(s), &id), 0);
	return id;
}

uint32_t stack_of(struct symtab *syms, const char *a, const char *b)
{
	uint32_t frames[2] = { intern(syms, a), b ? intern(syms, b) : 0 }, id;

	ck_assert_int_eq(symtab_intern_stack(syms, frames, b ? 2 : 1, &id), 0);
	return id;
}
