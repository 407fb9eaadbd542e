/*
 * trace_write.c - the writer of the trace format, versions 1 and 2.
 *
 * Ops are printed in the canonical form (decimal ids and sizes, lowercase
 * hex pointers, strings bare where the format allows), each stack defined
 * by a `stack` line before its first use. Every line is rendered into a
 * buffer and checked before any byte of it reaches the stream, so an op the
 * reader would not accept back is refused whole. The buffer collects whole
 * lines and goes to the stream in one fwrite() at TRACE_WRITER_BATCH bytes
 * and when flushed, so an unbuffered stream gets whole lines per write(2).
 */
#include "trace.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "text.h"

/* Pending bytes that send the lines to the stream without a flush. */
#define TRACE_WRITER_BATCH (256u * 1024)

struct trace_writer {
	FILE *f;
	const struct symtab *syms;
	char *buf; /* whole lines not yet sent, then the op being rendered */
	size_t len;
	size_t cap;
	unsigned version; /* of the header written; 2 takes graph ops */
	bool oom;
	bool failed;
	/* The `stack` id written for each symtab stack id; 0 = not yet. */
	uint32_t *stack_ids;
	size_t stack_ids_cap;
	uint32_t nstacks;
};

static void put(struct trace_writer *w, const char *s, size_t n)
{
	if (n > SIZE_MAX - w->len ||
	    grow_array((void **)&w->buf, &w->cap, w->len + n, 1) < 0) {
		w->oom = true;
		return;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static void put_s(struct trace_writer *w, const char *s)
{
	put(w, s, strlen(s));
}

static void put_dec(struct trace_writer *w, uint64_t v)
{
	char tmp[20], *p = tmp + sizeof(tmp);

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	put(w, p, (size_t)(tmp + sizeof(tmp) - p));
}

static void put_hex(struct trace_writer *w, uint64_t v)
{
	char tmp[18], *p = tmp + sizeof(tmp);

	do {
		*--p = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v != 0);
	*--p = 'x';
	*--p = '0';
	put(w, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* " key=N" in decimal, or in hex when `hex`. */
static void put_num(struct trace_writer *w, const char *key, uint64_t v,
		    bool hex)
{
	put_s(w, " ");
	put_s(w, key);
	put_s(w, "=");
	if (hex)
		put_hex(w, v);
	else
		put_dec(w, v);
}

static bool needs_quotes(const char *s, size_t len)
{
	if (len == 0)
		return true;
	for (size_t i = 0; i < len; i++) {
		if (strchr(" \t\"#=\\\n", s[i]) != NULL)
			return true;
	}
	return false;
}

/* " key=VALUE", VALUE bare when the reader takes it back as it is. */
static void put_str(struct trace_writer *w, const char *key, const char *s,
		    size_t len)
{
	put_s(w, " ");
	put_s(w, key);
	put_s(w, "=");
	if (!needs_quotes(s, len)) {
		put(w, s, len);
		return;
	}
	put_s(w, "\"");
	for (size_t i = 0; i < len; i++) {
		const char *esc = s[i] == '"'  ? "\\\"" :
				  s[i] == '\\' ? "\\\\" :
				  s[i] == '\n' ? "\\n" :
				  s[i] == '\t' ? "\\t" : NULL;

		if (esc != NULL)
			put_s(w, esc);
		else
			put(w, s + i, 1);
	}
	put_s(w, "\"");
}

/* A memory list; `args` (NULL: none) names each element's argument. */
static void put_list(struct trace_writer *w, const char *key,
		     const struct op_range *v, const uint32_t *args, size_t n)
{
	if (n == 0)
		return;
	put_s(w, " ");
	put_s(w, key);
	put_s(w, "=");
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			put_s(w, ",");
		put_hex(w, v[i].ptr);
		if (v[i].len != 1) {
			put_s(w, "+");
			put_dec(w, v[i].len);
		}
		if (args != NULL && args[i] != 0) {
			put_s(w, "@");
			put_s(w, symtab_str(w->syms, args[i], NULL));
		}
	}
}

/*
 * True when the reader takes `s` back unchanged: every character is one
 * the trace format carries (text_trace_char(), the one policy).
 */
static bool str_ok(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n;

	for (size_t i = 0; i < len; i += n) {
		if (!text_trace_char(p + i, len - i, &n))
			return false;
	}
	return true;
}

static bool cstr_ok(const char *s)
{
	return s == NULL || str_ok(s, strlen(s));
}

static bool ranges_ok(const struct op_range *v, size_t n)
{
	if (n > 0 && v == NULL)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (v[i].len == 0 || v[i].len - 1 > UINT64_MAX - v[i].ptr)
			return false;
	}
	return true;
}

/* Whether every argument name of a list (NULL: none) reads back. */
static bool args_ok(const struct trace_writer *w, const uint32_t *args,
		    size_t n)
{
	for (size_t i = 0; args != NULL && i < n; i++) {
		size_t len;
		const char *s = symtab_str(w->syms, args[i], &len);

		if (args[i] != 0 && !op_arg_ok(s, len))
			return false;
	}
	return true;
}

/* Whether the stack of op, when not written yet, has writable frames. */
static bool stack_ok(const struct trace_writer *w, uint32_t stack)
{
	const uint32_t *frames;
	size_t n;

	if (stack == 0 || (stack < w->stack_ids_cap && w->stack_ids[stack]))
		return true;
	n = symtab_stack(w->syms, stack, &frames);
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *s = symtab_str(w->syms, frames[i], &len);

		if (s == NULL || !str_ok(s, len))
			return false;
	}
	return true;
}

static bool op_ok(const struct trace_writer *w, const struct op *op)
{
	const char *name;
	size_t len;

	if ((unsigned)op->kind >= OP_KIND_COUNT || !stack_ok(w, op->stack))
		return false;
	if (op_is_v2(op) && w->version < 2)
		return false;
	if (op->kind == OP_ALLOC)
		return op->size <= 1 || op->size - 1 <= UINT64_MAX - op->ptr;
	if (op->kind != OP_LAUNCH)
		return true;
	name = symtab_str(w->syms, op->name, &len);
	return name != NULL && len > 0 && str_ok(name, len) &&
	       ranges_ok(op->reads, op->nreads) &&
	       ranges_ok(op->writes, op->nwrites) &&
	       args_ok(w, op->read_args, op->nreads) &&
	       args_ok(w, op->write_args, op->nwrites);
}

/* Makes stack_ids hold index `stack`. */
static int stack_ids_reserve(struct trace_writer *w, uint32_t stack)
{
	size_t old = w->stack_ids_cap;

	if (grow_array((void **)&w->stack_ids, &w->stack_ids_cap,
		       (size_t)stack + 1, sizeof(*w->stack_ids)) < 0)
		return -ENOMEM;
	memset(w->stack_ids + old, 0,
	       (w->stack_ids_cap - old) * sizeof(*w->stack_ids));
	return 0;
}

static void put_stack_line(struct trace_writer *w, uint32_t stack)
{
	const uint32_t *frames;
	size_t n = symtab_stack(w->syms, stack, &frames);

	put_s(w, "stack");
	put_num(w, "id", w->nstacks + 1, false);
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *s = symtab_str(w->syms, frames[i], &len);

		put_str(w, "frame", s, len);
	}
	put_s(w, "\n");
}

static void put_fields(struct trace_writer *w, const struct op *op)
{
	size_t len;
	const char *name;

	switch (op->kind) {
	case OP_EVENT_RECORD:
	case OP_EVENT_WAIT:
		put_num(w, "event", op->event, false);
		put_num(w, "stream", op->stream, false);
		break;
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
	case OP_EVENT_SYNC:
		put_num(w, "event", op->event, false);
		break;
	case OP_STREAM_CREATE:
	case OP_STREAM_SYNC:
		put_num(w, "stream", op->stream, false);
		break;
	case OP_STREAM_WAIT:
		put_num(w, "stream", op->stream, false);
		put_num(w, "on", op->on, false);
		break;
	case OP_ALLOC:
		put_num(w, "ptr", op->ptr, true);
		put_num(w, "size", op->size, false);
		if (op->has_stream)
			put_num(w, "stream", op->stream, false);
		if (op->has_graph)
			put_num(w, "graph", op->graph, false);
		break;
	case OP_FREE:
		put_num(w, "ptr", op->ptr, true);
		break;
	case OP_RECORD_STREAM:
		put_num(w, "ptr", op->ptr, true);
		put_num(w, "stream", op->stream, false);
		break;
	case OP_LAUNCH:
		name = symtab_str(w->syms, op->name, &len);
		put_num(w, "stream", op->stream, false);
		put_str(w, "op", name, len);
		put_list(w, "read", op->reads, op->read_args, op->nreads);
		put_list(w, "write", op->writes, op->write_args, op->nwrites);
		break;
	case OP_GAP:
		if (op->has_lost)
			put_num(w, "lost", op->lost, false);
		break;
	case OP_CAPTURE_BEGIN:
	case OP_CAPTURE_END:
		put_num(w, "stream", op->stream, false);
		put_num(w, "graph", op->graph, false);
		break;
	case OP_GRAPH_REPLAY:
		put_num(w, "graph", op->graph, false);
		put_num(w, "stream", op->stream, false);
		break;
	case OP_GRAPH_DESTROY:
		put_num(w, "graph", op->graph, false);
		break;
	default:
		break;
	}
}

/* Sends the pending lines to the stream in one fwrite(); 0 or -EIO. They
 * are gone either way. */
static int flush_lines(struct trace_writer *w)
{
	size_t len = w->len;

	w->len = 0;
	if (len > 0 && fwrite(w->buf, 1, len, w->f) != len) {
		w->failed = true;
		return -EIO;
	}
	return 0;
}

int trace_write_op(struct trace_writer *w, const struct op *op)
{
	size_t start = w->len, stack_end;
	bool new_stack;

	if (!op_ok(w, op))
		return -EINVAL;
	new_stack = op->stack != 0 && (op->stack >= w->stack_ids_cap ||
				       w->stack_ids[op->stack] == 0);
	if (new_stack && stack_ids_reserve(w, op->stack) < 0)
		return -ENOMEM;
	w->oom = false;
	if (new_stack)
		put_stack_line(w, op->stack);
	stack_end = w->len;
	put_s(w, op_kind_name(op->kind));
	put_fields(w, op);
	if (op->stack != 0)
		put_num(w, "stack",
			new_stack ? w->nstacks + 1 : w->stack_ids[op->stack],
			false);
	put_s(w, "\n");
	/* Both lengths count the newline, which the limit does not. */
	if (w->oom || stack_end - start > TRACE_MAX_LINE + 1 ||
	    w->len - stack_end > TRACE_MAX_LINE + 1) {
		w->len = start; /* refused whole: the pending lines stay */
		return w->oom ? -ENOMEM : -E2BIG;
	}
	if (new_stack)
		w->stack_ids[op->stack] = ++w->nstacks;
	return w->len >= TRACE_WRITER_BATCH ? flush_lines(w) : 0;
}

int trace_writer_flush(struct trace_writer *w)
{
	int err = flush_lines(w);

	if (fflush(w->f) != 0)
		w->failed = true;
	return err < 0 || w->failed ? -EIO : 0;
}

static void put_process(struct trace_writer *w, const struct trace_process *p)
{
	put_s(w, "process");
	put_num(w, "pid", p->pid, false);
	if (p->job != NULL)
		put_str(w, "job", p->job, strlen(p->job));
	if (p->has_rank)
		put_num(w, "rank", p->rank, false);
	if (p->name != NULL)
		put_str(w, "name", p->name, strlen(p->name));
	put_s(w, "\n");
}

int trace_writer_new(FILE *f, const struct symtab *syms,
		     const struct trace_process *process,
		     struct trace_writer **out)
{
	return trace_writer_new_version(f, syms, process, 1, out);
}

int trace_writer_new_version(FILE *f, const struct symtab *syms,
			     const struct trace_process *process,
			     unsigned version, struct trace_writer **out)
{
	bool with_process = process != NULL && process->present;
	struct trace_writer *w;
	size_t header_len;
	int err;

	if ((version != 1 && version != 2) ||
	    (with_process && (!cstr_ok(process->job) || !cstr_ok(process->name))))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->f = f;
	w->syms = syms;
	w->version = version;
	put_s(w, TRACE_MAGIC " ");
	put_dec(w, version);
	put_s(w, "\n");
	header_len = w->len;
	if (with_process)
		put_process(w, process);
	if (w->oom)
		err = -ENOMEM;
	else if (w->len - header_len > TRACE_MAX_LINE + 1)
		err = -E2BIG;
	else
		err = flush_lines(w);
	if (err < 0) {
		trace_writer_close(w);
		return err;
	}
	*out = w;
	return 0;
}

void trace_writer_upgrade(struct trace_writer *w)
{
	w->version = 2;
}

int trace_writer_close(struct trace_writer *w)
{
	int err;

	if (w == NULL)
		return 0;
	err = trace_writer_flush(w) < 0 || ferror(w->f) ? -EIO : 0;
	free(w->buf);
	free(w->stack_ids);
	free(w);
	return err;
}
