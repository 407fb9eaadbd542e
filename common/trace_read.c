/*
 * trace_read.c - the strict reader of the trace format, versions 1 and 2.
 *
 * Input arrives in large blocks (or as the caller's buffer), is cut into
 * lines with memchr() and parsed in place; the first deviation from
 * docs/trace-format.md stops the reader with "FILE:LINE: message".
 * Memory grows with the longest line and with the interned content, never
 * with the number of lines. This file cuts lines and makes operations of
 * them; trace_lex.c reads a line's fields (trace_int.h joins the two).
 *
 * DESIGN
 *  1. A line is parsed as (pointer, length) and never written to, so a
 *     memory reader parses the caller's bytes directly and no NUL is needed.
 *  2. Every byte of a line passes line_check() before the tokenizer sees it:
 *     from there on the line is valid UTF-8 whose only control character is
 *     tab, which keeps quoted input in messages printable. The search for
 *     the line's end notes whether any byte is not printable ASCII; a line
 *     without such a byte passes line_check() and skips it.
 *  3. Unescaped strings go to `scratch`, which is grown to the line's length
 *     before the first of them, so none of a line's strings moves while the
 *     line is parsed.
 *  4. An error sticks: `err` and `msg` are set once and returned forever.
 *  5. Only the input's last line can be torn: one that ends without a
 *     newline and does not parse, though it starts as a line of the trace
 *     does (its first word begins, or is, a directive, or before the
 *     header the header's), as a writer killed in the middle of it leaves
 *     it. It ends the trace (`torn` holds why), and the reader returns 0 as
 *     at a clean end. A last line that parses is the spec's last line
 *     without a newline; any line followed by another is strict.
 *  6. Lines as the writer writes them (one blank between fields, unquoted
 *     values, numbers of up to 15 digits, lists without argument names)
 *     take a fast path, trace__parse_fast(), which gives up at anything
 *     else before it has changed anything but `f` and the range lists;
 *     trace__parse_fields() then reads the line and says what is wrong.
 *     What the fast path accepts, trace__parse_fields() accepts with the
 *     same fields (test_trace: fast_path_agrees_with_the_full_reader).
 */
#include "trace_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"

#define READ_BLOCK (256 * 1024)
/* Room for a message after "FILE:LINE: ". */
#define MSG_MAX 512
/* The newest version of the format this reader reads. */
#define TRACE_VERSION_MAX 2u

/* What a header error asks for. */
#define HEADER_WANT "'" TRACE_MAGIC " 1' or '" TRACE_MAGIC " 2'"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define DIR(word, cls, kind, version, req, opt) \
	{ word, sizeof(word) - 1, cls, kind, version, (req) | (opt), req }
#define OP_DIR(word, kind, req, opt) \
	DIR(word, DIR_OP, kind, 1, req, (opt) | BIT(STACK))
/* A directive version 2 adds (graphs); an error in a version 1 trace. */
#define OP_DIR2(word, kind, req, opt) \
	DIR(word, DIR_OP, kind, 2, req, (opt) | BIT(STACK))
#define RESERVED_DIR(word) DIR(word, DIR_RESERVED, 0, 1, 0, 0)

/* Most frequent first: the lookup is a linear scan. */
static const struct directive directives[] = {
	OP_DIR("launch", OP_LAUNCH, BIT(STREAM) | BIT(OP),
	       BIT(READ) | BIT(WRITE)),
	/* `graph` is a version 2 key: trace__parse_fields() refuses it in
	 * a version 1 trace. */
	OP_DIR("alloc", OP_ALLOC, BIT(PTR) | BIT(SIZE),
	       BIT(STREAM) | BIT(GRAPH)),
	OP_DIR("free", OP_FREE, BIT(PTR), 0),
	OP_DIR("record_stream", OP_RECORD_STREAM, BIT(PTR) | BIT(STREAM), 0),
	OP_DIR("event_record", OP_EVENT_RECORD, BIT(EVENT) | BIT(STREAM), 0),
	OP_DIR("event_wait", OP_EVENT_WAIT, BIT(EVENT) | BIT(STREAM), 0),
	OP_DIR("stream_wait", OP_STREAM_WAIT, BIT(STREAM) | BIT(ON), 0),
	OP_DIR("event_create", OP_EVENT_CREATE, BIT(EVENT), 0),
	OP_DIR("event_destroy", OP_EVENT_DESTROY, BIT(EVENT), 0),
	OP_DIR("event_sync", OP_EVENT_SYNC, BIT(EVENT), 0),
	OP_DIR("stream_create", OP_STREAM_CREATE, BIT(STREAM), 0),
	OP_DIR("stream_sync", OP_STREAM_SYNC, BIT(STREAM), 0),
	OP_DIR("device_sync", OP_DEVICE_SYNC, 0, 0),
	OP_DIR("flush", OP_FLUSH, 0, 0),
	OP_DIR("gap", OP_GAP, 0, BIT(LOST)),
	OP_DIR2("graph_replay", OP_GRAPH_REPLAY, BIT(GRAPH) | BIT(STREAM), 0),
	OP_DIR2("capture_begin", OP_CAPTURE_BEGIN, BIT(STREAM) | BIT(GRAPH),
		0),
	OP_DIR2("capture_end", OP_CAPTURE_END, BIT(STREAM) | BIT(GRAPH), 0),
	OP_DIR2("graph_destroy", OP_GRAPH_DESTROY, BIT(GRAPH), 0),
	DIR("stack", DIR_STACK, 0, 1, BIT(ID) | BIT(FRAME), 0),
	DIR("process", DIR_PROCESS, 0, 1, BIT(PID),
	    BIT(JOB) | BIT(RANK) | BIT(NAME)),
	RESERVED_DIR("stream_destroy"),
	RESERVED_DIR("ipc_export"),
	RESERVED_DIR("ipc_import"),
};

/* The number of key k, 0 when the line lacks it. */
static uint64_t num(const struct fields *f, enum key k)
{
	return f->seen & 1u << k ? f->num[k] : 0;
}

static int take_stack(struct trace_reader *r, const struct fields *f)
{
	uint64_t id = num(f, KEY_ID);
	uint32_t sid;
	int err;

	if (u64map_get(&r->stacks, id) != NULL)
		return trace__fail(r, -EINVAL,
				   "stack id %" PRIu64 " is already defined",
				   id);
	err = symtab_intern_stack(r->syms, r->frames, f->nframes, &sid);
	if (err < 0)
		return trace__fail_symtab(r, err);
	if (u64map_put(&r->stacks, id, sid) < 0)
		return trace__fail(r, -ENOMEM, "out of memory");
	return 0;
}

static char *copy_str(const struct fields *f, enum key k)
{
	if (!(f->seen & 1u << k))
		return NULL;
	return strndup(f->str[k].p, f->str[k].len);
}

static int take_process(struct trace_reader *r, const struct fields *f)
{
	if (r->process.present)
		return trace__fail(r, -EINVAL,
				   "second process line (the first is on line "
				   "%lu)", r->process_line);
	if (r->ops_seen)
		return trace__fail(r, -EINVAL,
				   "process line after the first operation");
	r->job = copy_str(f, KEY_JOB);
	r->pname = copy_str(f, KEY_NAME);
	if ((r->job == NULL && (f->seen & BIT(JOB))) ||
	    (r->pname == NULL && (f->seen & BIT(NAME))))
		return trace__fail(r, -ENOMEM, "out of memory");
	r->process = (struct trace_process){
		.present = true,
		.has_rank = (f->seen & BIT(RANK)) != 0,
		.pid = num(f, KEY_PID),
		.rank = num(f, KEY_RANK),
		.job = r->job,
		.name = r->pname,
	};
	r->process_line = r->line;
	return 0;
}

/* The slot of names[] for the `len` (at least 1) bytes at p: a hash of
 * the last 8 bytes or fewer, which tell apart "aten::"-prefixed names. */
static size_t name_slot(const char *p, size_t len)
{
	uint64_t w = 0;

	memcpy(&w, p + (len > 8 ? len - 8 : 0), len > 8 ? 8 : len);
	return (size_t)(((w ^ len) * 0x9e3779b97f4a7c15ULL) >> 58);
}

/* Whether the `len` bytes at a and b are the same: 8 at a time, without
 * a call, for the names of a few dozen bytes that most lines carry. */
static bool name_same(const char *a, const char *b, size_t len)
{
	uint64_t x, y;

	if (len < 8)
		return memcmp(a, b, len) == 0;
	for (size_t i = 0; i + 8 < len; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		if (x != y)
			return false;
	}
	memcpy(&x, a + len - 8, 8);
	memcpy(&y, b + len - 8, 8);
	return x == y;
}

/* symtab_intern() of an operator's name, through names[]; 0 or its
 * error. */
static int intern_name(struct trace_reader *r, const char *p, size_t len,
		       uint32_t *id)
{
	struct trace_name *n = &r->names[name_slot(p, len)];
	int err;

	_Static_assert(NAME_CACHE == 64, "name_slot() keeps 6 bits");
	if (n->len == len && name_same(n->p, p, len)) {
		*id = n->id;
		return 0;
	}
	err = symtab_intern(r->syms, p, len, id);
	if (err < 0)
		return err;
	n->p = symtab_str(r->syms, *id, &n->len);
	n->id = *id;
	return 0;
}

/* The symtab ids of a list's `n` element names into *args (0: none),
 * grown to hold them. 0 or a negative errno (the reader's error). */
static int make_args(struct trace_reader *r, const struct str *names,
		     size_t n, uint32_t **args, size_t *cap)
{
	int err;

	if (grow_array((void **)args, cap, n, sizeof(**args)) < 0)
		return trace__fail(r, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		(*args)[i] = 0;
		if (names[i].len > 0 &&
		    (err = symtab_intern(r->syms, names[i].p, names[i].len,
					 &(*args)[i])) < 0)
			return trace__fail_symtab(r, err);
	}
	return 0;
}

/* Fills *op from the fields of an operation line; 1 or a negative errno. */
static int make_op(struct trace_reader *r, const struct directive *d,
		   const struct fields *f, struct op *op)
{
	uint64_t size = num(f, KEY_SIZE);
	uint32_t stack = 0, name = 0;
	const uint64_t *sid;
	int err;

	if (f->seen & BIT(STACK)) {
		sid = u64map_get(&r->stacks, num(f, KEY_STACK));
		if (sid == NULL)
			return trace__fail(r, -EINVAL,
					   "stack id %" PRIu64 " is not "
					   "defined", num(f, KEY_STACK));
		stack = (uint32_t)*sid;
	}
	if (d->kind == OP_ALLOC &&
	    !trace__range_fits(num(f, KEY_PTR), size ? size : 1))
		return trace__fail(r, -EINVAL,
				   "alloc range past 2^64: ptr=0x%" PRIx64
				   " size=%" PRIu64, num(f, KEY_PTR), size);
	if (f->seen & BIT(OP)) {
		if (f->str[KEY_OP].len == 0)
			return trace__fail(r, -EINVAL, "empty value for 'op'");
		err = intern_name(r, f->str[KEY_OP].p,
				  op_cut_string(f->str[KEY_OP].p,
						f->str[KEY_OP].len),
				  &name);
		if (err < 0)
			return trace__fail_symtab(r, err);
	}
	if ((f->named_reads && make_args(r, r->read_names, f->nreads,
					 &r->read_args, &r->read_args_cap) <
				       0) ||
	    (f->named_writes && make_args(r, r->write_names, f->nwrites,
					  &r->write_args,
					  &r->write_args_cap) < 0))
		return r->err;
	*op = (struct op){
		.kind = (enum op_kind)d->kind,
		.stack = stack,
		.name = name,
		.has_stream = d->kind == OP_ALLOC && (f->seen & BIT(STREAM)),
		.has_lost = (f->seen & BIT(LOST)) != 0,
		.has_graph = d->kind == OP_ALLOC && (f->seen & BIT(GRAPH)),
		.stream = num(f, KEY_STREAM),
		.on = num(f, KEY_ON),
		.event = num(f, KEY_EVENT),
		.ptr = num(f, KEY_PTR),
		.size = size,
		.lost = num(f, KEY_LOST),
		.graph = num(f, KEY_GRAPH),
		.reads = f->nreads ? r->reads : NULL,
		.writes = f->nwrites ? r->writes : NULL,
		.read_args = f->named_reads ? r->read_args : NULL,
		.write_args = f->named_writes ? r->write_args : NULL,
		.nreads = f->nreads,
		.nwrites = f->nwrites,
	};
	r->ops_seen = true;
	r->op_line = r->line;
	return 1;
}

static bool word_is(const char *p, const char *q, const char *word)
{
	size_t len = strlen(word);

	return (size_t)(q - p) == len && memcmp(p, word, len) == 0;
}

/* The first line that is not blank or a comment, from its first word. */
static int parse_header(struct trace_reader *r, const char *p, const char *end)
{
	const char *magic = p, *magic_end = trace__token_end(p, end);
	const char *ver = trace__skip_blanks(magic_end, end);
	const char *ver_end = trace__token_end(ver, end);
	const char *rest = trace__skip_blanks(ver_end, end), *ver_digits = ver;
	char qb[QUOTE_BUF];

	if (!word_is(magic, magic_end, TRACE_MAGIC) || ver == ver_end ||
	    (rest < end && *rest != '#'))
		return trace__fail(r, -EINVAL, "expected header " HEADER_WANT);
	if (ver_end - ver == 1 && *ver >= '1' &&
	    (unsigned)(*ver - '0') <= TRACE_VERSION_MAX) {
		trace__set_version(r, (unsigned)(*ver - '0'));
		return 0;
	}
	while (ver_digits < ver_end && *ver_digits >= '0' && *ver_digits <= '9')
		ver_digits++;
	if (ver_digits == ver_end)
		return trace__fail(r, -EINVAL,
				   "unsupported trace format version %s (this "
				   "reader reads versions 1 and 2)",
				   trace__quote(qb, ver,
				   (size_t)(ver_end - ver)));
	return trace__fail(r, -EINVAL, "expected header " HEADER_WANT);
}

static const struct directive *find_directive(const char *p, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(directives); i++) {
		if (directives[i].len == len && directives[i].word[0] == p[0] &&
		    memcmp(directives[i].word, p, len) == 0)
			return &directives[i];
	}
	return NULL;
}

/*
 * The directive whose word starts at p, its end in *word_end; NULL when
 * the word is none. Most lines are launches, allocs and frees: their words
 * are told by one compare of constant length each, before any scan.
 */
static const struct directive *directive_at(const char *p, const char *end,
					    const char **word_end)
{
	ptrdiff_t room = end - p;

#define DIR_AT(i, w)                                                   \
	if (room > (ptrdiff_t)sizeof(w) - 1 &&                         \
	    memcmp(p, w, sizeof(w) - 1) == 0 &&                        \
	    trace__ends_token(p[sizeof(w) - 1])) {                     \
		assert(strcmp(directives[i].word, w) == 0);            \
		*word_end = p + sizeof(w) - 1;                         \
		return &directives[i];                                 \
	}
	DIR_AT(0, "launch")
	DIR_AT(1, "alloc")
	DIR_AT(2, "free")
#undef DIR_AT
	*word_end = trace__token_end(p, end);
	return find_directive(p, (size_t)(*word_end - p));
}

static void fields_clear(struct fields *f)
{
	f->seen = 0;
	f->nreads = f->nwrites = f->nframes = 0;
	f->named_reads = f->named_writes = false;
}

/* One line without its ending, `plain` when every byte of it is printable
 * ASCII; 1 with an op, 0 for any other line. */
static int parse_line(struct trace_reader *r, const char *p, size_t len,
		      bool plain, struct op *op)
{
	const char *end = p + len, *word_end;
	const struct directive *d;
	struct fields f;
	char qb[QUOTE_BUF];
	int err;

	err = plain ? 0 : trace__line_check(r, p, len);
	if (err < 0)
		return err;
	p = trace__skip_blanks(p, end);
	if (p == end || *p == '#')
		return 0;
	if (r->version == 0)
		return parse_header(r, p, end);
	d = directive_at(p, end, &word_end);
	if (d == NULL)
		return trace__fail(r, -EINVAL, "unknown directive '%s'",
				   trace__quote(qb, p, (size_t)(word_end - p)));
	if (d->cls == DIR_RESERVED)
		return trace__fail(r, -EINVAL, "'%s' is reserved for a later "
				   "version of the format", d->word);
	if (d->version > r->version)
		return trace__fail(r, -EINVAL,
				   "'%s' needs trace format version %u (the "
				   "header says version %u)",
				   d->word, d->version, r->version);
	fields_clear(&f);
	if (!trace__parse_fast(r, d, word_end, end, &f)) {
		fields_clear(&f);
		r->line_len = len;
		r->scratch_used = 0;
		err = trace__parse_fields(r, d, word_end, end, &f);
		if (err < 0)
			return err;
	}
	if (d->cls == DIR_PROCESS)
		return take_process(r, &f);
	if (d->cls == DIR_STACK)
		return take_stack(r, &f);
	return make_op(r, d, &f, op);
}

/* Reads more input after what is left; 0, -ENOMEM or -errno of read(2). */
static int refill(struct trace_reader *r)
{
	size_t keep = r->end - r->start;
	ssize_t n;

	if (r->start > 0) {
		memmove(r->own, r->own + r->start, keep);
		r->base += r->start;
		r->scan -= r->start;
		r->start = 0;
		r->end = keep;
	}
	if (r->end == r->cap) {
		size_t cap = r->cap * 2 > TRACE_MAX_LINE + 2 ?
				     TRACE_MAX_LINE + 2 : r->cap * 2;
		char *own = realloc(r->own, cap);

		if (own == NULL)
			return -ENOMEM;
		r->own = own;
		r->buf = own;
		r->cap = cap;
	}
	do
		n = read(r->fd, r->own + r->end, r->cap - r->end);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		r->eof = true;
	r->end += (size_t)n;
	return 0;
}

static int too_long(struct trace_reader *r)
{
	return trace__fail(r, -E2BIG, "line longer than %u bytes",
			   TRACE_MAX_LINE);
}

/* The first '\n' in buf[scan, end), or NULL; notes in `dirty` a byte
 * before it that is not printable ASCII, for line_check() (DESIGN 2). */
static const char *next_newline(struct trace_reader *r)
{
	const char *end = r->buf + r->end;
	const char *s = trace__find_special(r->buf + r->scan, end);

	if (s == end)
		return NULL;
	if (*s == '\n')
		return s;
	r->dirty = true;
	return memchr(s, '\n', (size_t)(end - s));
}

/* The next line, its ending removed, in *line; 1, 0 at the end, or an
 * error. Counts the line in r->line. *last: the input ends with this line
 * and no newline. *plain: every byte of the line is printable ASCII. */
static int next_line(struct trace_reader *r, struct str *line, bool *last,
		     bool *plain)
{
	const char *nl;
	size_t len;
	int err;

	for (;;) {
		nl = next_newline(r);
		if (nl != NULL || r->eof)
			break;
		r->scan = r->end;
		if (r->end - r->start > (size_t)TRACE_MAX_LINE + 1) {
			r->line++;
			return too_long(r);
		}
		err = refill(r);
		if (err < 0) {
			r->line++;
			if (err == -ENOMEM)
				return trace__fail(r, err, "out of memory");
			return trace__fail(r, -EIO, "read error: %s",
					   strerror(-err));
		}
	}
	if (nl == NULL && r->start == r->end)
		return 0;
	r->line++;
	line->p = r->buf + r->start;
	len = (size_t)((nl ? nl : r->buf + r->end) - line->p);
	r->start += len + (nl != NULL);
	r->scan = r->start;
	*last = nl == NULL;
	*plain = !r->dirty;
	r->dirty = false;
	if (nl != NULL && len > 0 && line->p[len - 1] == '\r')
		len--;
	if (len > TRACE_MAX_LINE)
		return too_long(r);
	line->len = len;
	return 1;
}

/* Whether the word [p, p + n) is directive d of a trace of `version`, or
 * when it is not `whole` (the line ends in it), the start of d. */
static bool word_starts(const struct directive *d, unsigned version,
			const char *p, size_t n, bool whole)
{
	return d->cls != DIR_RESERVED && d->version <= version && n <= d->len &&
	       memcmp(d->word, p, n) == 0 && (!whole || n == d->len);
}

/* Whether the line [p, p + len) starts as a line of this trace may. */
static bool line_starts_well(const struct trace_reader *r, const char *p,
			     size_t len)
{
	static const struct directive header = DIR(TRACE_MAGIC, DIR_OP, 0, 1,
						   0, 0);
	const char *end = p + len, *q;
	size_t n;

	p = trace__skip_blanks(p, end);
	q = trace__token_end(p, end);
	n = (size_t)(q - p);
	if (r->version == 0)
		return word_starts(&header, 1, p, n, q < end);
	for (size_t i = 0; i < ARRAY_SIZE(directives); i++) {
		if (word_starts(&directives[i], r->version, p, n, q < end))
			return true;
	}
	return false;
}

/* Turns the format error of the last line into the end of the trace
 * (DESIGN 5); 0 or -ENOMEM. */
static int torn_line(struct trace_reader *r)
{
	if (asprintf(&r->torn, "%.*s: warning: the last line is cut short "
		     "(no newline, and %s), as when its writer is killed; "
		     "it is ignored",
		     (int)(r->msg_prefix - 2), r->msg,
		     r->msg + r->msg_prefix) < 0) {
		r->torn = NULL;
		return trace__fail(r, -ENOMEM, "out of memory");
	}
	r->err = 0;
	r->msg[0] = '\0';
	return 0;
}

int trace_read(struct trace_reader *r, struct op *op)
{
	struct str line = { NULL, 0 };
	bool last = false, plain = false;
	int rc;

	while (r->err == 0) {
		rc = next_line(r, &line, &last, &plain);
		if (rc == 0 && r->version == 0 && r->torn == NULL) {
			r->line = r->line ? r->line : 1;
			return trace__fail(r, -EINVAL,
					   "expected header " HEADER_WANT
					   ", found the end of the trace");
		}
		if (rc <= 0)
			return rc;
		rc = parse_line(r, line.p, line.len, plain, op);
		if (rc == -EINVAL && last &&
		    line_starts_well(r, line.p, line.len))
			rc = torn_line(r);
		if (rc != 0)
			return rc;
	}
	return r->err;
}

static int reader_new(const char *name, struct symtab *syms,
		      struct trace_reader **out)
{
	struct trace_reader *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return -ENOMEM;
	r->fd = -1;
	r->syms = syms;
	r->name = strdup(name);
	/* Room for the name, a line number and the message (trace__fail()). */
	r->msg_cap = strlen(name) + 32 + MSG_MAX;
	r->msg = calloc(1, r->msg_cap);
	trace__index_keys(r);
	if (r->name == NULL || r->msg == NULL || u64map_init(&r->stacks) < 0) {
		trace_reader_close(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

int trace_reader_new_mem(const void *data, size_t len, const char *name,
			 struct symtab *syms, struct trace_reader **out)
{
	struct trace_reader *r;
	int err = reader_new(name, syms, &r);

	if (err < 0)
		return err;
	/* memchr() must not see a NULL pointer, even for 0 bytes. */
	r->buf = len ? data : "";
	r->end = len;
	r->eof = true;
	*out = r;
	return 0;
}

int trace_reader_open(const char *path, struct symtab *syms,
		      struct trace_reader **out, char **errmsg)
{
	bool is_stdin = strcmp(path, "-") == 0;
	struct trace_reader *r;
	int fd, err;

	if (errmsg != NULL)
		*errmsg = NULL;
	fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		if (errmsg != NULL &&
		    asprintf(errmsg, "%s: %s", path, strerror(-err)) < 0)
			*errmsg = NULL;
		return err;
	}
	err = reader_new(path, syms, &r);
	if (err == 0) {
		r->own = malloc(READ_BLOCK);
		r->fd = fd;
		r->close_fd = !is_stdin;
		if (r->own == NULL) {
			trace_reader_close(r);
			return -ENOMEM;
		}
		r->buf = r->own;
		r->cap = READ_BLOCK;
		*out = r;
	} else if (!is_stdin) {
		close(fd);
	}
	return err;
}

void trace_reader_close(struct trace_reader *r)
{
	if (r == NULL)
		return;
	if (r->close_fd)
		close(r->fd);
	free(r->name);
	free(r->msg);
	free(r->torn);
	free(r->own);
	free(r->job);
	free(r->pname);
	u64map_fini(&r->stacks);
	free(r->reads);
	free(r->writes);
	free(r->read_names);
	free(r->write_names);
	free(r->read_args);
	free(r->write_args);
	free(r->frames);
	free(r->scratch);
	free(r);
}

const char *trace_reader_error(const struct trace_reader *r)
{
	return r->msg;
}

const char *trace_reader_torn(const struct trace_reader *r)
{
	return r->torn;
}

unsigned long trace_reader_line(const struct trace_reader *r)
{
	return r->op_line;
}

const char *trace_reader_name(const struct trace_reader *r)
{
	return r->name;
}

const struct trace_process *trace_reader_process(const struct trace_reader *r)
{
	return &r->process;
}

unsigned trace_reader_version(const struct trace_reader *r)
{
	return r->version;
}

uint64_t trace_reader_offset(const struct trace_reader *r)
{
	return r->base + r->start;
}

