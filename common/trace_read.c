/*
 * trace_read.c - the strict reader of trace format v1.
 *
 * Input arrives in large blocks (or as the caller's buffer), is cut into
 * lines with memchr() and parsed in place; the first deviation from
 * docs/trace-format.md stops the reader with "FILE:LINE: message".
 * Memory grows with the longest line and with the interned content, never
 * with the number of lines.
 *
 * DESIGN
 *  1. A line is parsed as (pointer, length) and never written to, so a
 *     memory reader parses the caller's bytes directly and no NUL is needed.
 *  2. Every byte of a line passes line_check() before the tokenizer sees it:
 *     from there on the line is valid UTF-8 whose only control character is
 *     tab, which keeps quoted input in messages printable.
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
 */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"
#include "u64map.h"
#include "utf8.h"

#define READ_BLOCK (64 * 1024)
/* Room for a message after "FILE:LINE: ". */
#define MSG_MAX 512
/* At most this many bytes of input (plus the rest of a UTF-8 character)
 * are quoted in a message, each escaped into at most 4 bytes. */
#define QUOTE_MAX 40
#define QUOTE_BUF ((QUOTE_MAX + 3) * 4 + 4)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

enum val_type { VAL_NUM, VAL_STR, VAL_LIST };

/* X(enum suffix, key, value type) for every key of format v1. */
#define TRACE_KEYS(X)                \
	X(PID, "pid", VAL_NUM)       \
	X(JOB, "job", VAL_STR)       \
	X(RANK, "rank", VAL_NUM)     \
	X(NAME, "name", VAL_STR)     \
	X(ID, "id", VAL_NUM)         \
	X(FRAME, "frame", VAL_STR)   \
	X(STREAM, "stream", VAL_NUM) \
	X(EVENT, "event", VAL_NUM)   \
	X(ON, "on", VAL_NUM)         \
	X(PTR, "ptr", VAL_NUM)       \
	X(SIZE, "size", VAL_NUM)     \
	X(OP, "op", VAL_STR)         \
	X(READ, "read", VAL_LIST)    \
	X(WRITE, "write", VAL_LIST)  \
	X(LOST, "lost", VAL_NUM)     \
	X(STACK, "stack", VAL_NUM)

enum key {
#define KEY_ENUM(name, str, type) KEY_##name,
	TRACE_KEYS(KEY_ENUM)
#undef KEY_ENUM
	KEY_COUNT
};

static const struct key_def {
	const char *name;
	unsigned char len;
	unsigned char type;
} keys[] = {
#define KEY_DEF(name, str, type) { str, sizeof(str) - 1, type },
	TRACE_KEYS(KEY_DEF)
#undef KEY_DEF
};

#define BIT(k) (1u << KEY_##k)

enum dir_class { DIR_OP, DIR_PROCESS, DIR_STACK, DIR_RESERVED };

struct directive {
	const char *word;
	unsigned char len;
	unsigned char cls;
	unsigned char kind;
	uint32_t allowed;
	uint32_t required;
};

#define DIR(word, cls, kind, req, opt) \
	{ word, sizeof(word) - 1, cls, kind, (req) | (opt), req }
#define OP_DIR(word, kind, req, opt) \
	DIR(word, DIR_OP, kind, req, (opt) | BIT(STACK))
#define RESERVED_DIR(word) DIR(word, DIR_RESERVED, 0, 0, 0)

/* Most frequent first: the lookup is a linear scan. */
static const struct directive directives[] = {
	OP_DIR("launch", OP_LAUNCH, BIT(STREAM) | BIT(OP),
	       BIT(READ) | BIT(WRITE)),
	OP_DIR("alloc", OP_ALLOC, BIT(PTR) | BIT(SIZE), BIT(STREAM)),
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
	DIR("stack", DIR_STACK, 0, BIT(ID) | BIT(FRAME), 0),
	DIR("process", DIR_PROCESS, 0, BIT(PID),
	    BIT(JOB) | BIT(RANK) | BIT(NAME)),
	RESERVED_DIR("stream_destroy"),
	RESERVED_DIR("capture_begin"),
	RESERVED_DIR("capture_end"),
	RESERVED_DIR("ipc_export"),
	RESERVED_DIR("ipc_import"),
};

enum num_status { NUM_OK, NUM_EMPTY, NUM_BAD, NUM_RANGE };

struct str {
	const char *p;
	size_t len;
};

/* The values of one line; frames and lists live in the reader. */
struct fields {
	uint32_t seen;
	uint64_t num[KEY_COUNT];
	struct str str[KEY_COUNT];
	size_t nreads;
	size_t nwrites;
	size_t nframes;
};

struct trace_reader {
	struct symtab *syms;
	char *name;
	int fd; /* -1 for a memory reader */
	bool close_fd;
	bool eof;
	/* Unparsed input is buf[start, end); no '\n' in buf[start, scan). */
	const char *buf;
	char *own; /* buf of a file reader, `cap` bytes */
	size_t cap;
	size_t start;
	size_t scan;
	size_t end;
	uint64_t base; /* input bytes before buf[0] */
	unsigned long line;
	unsigned long op_line;
	unsigned long process_line;
	size_t line_len;
	bool header_seen;
	bool ops_seen;
	int err;
	char *msg;
	size_t msg_cap;
	size_t msg_prefix; /* the "FILE:LINE: " of msg */
	char *torn; /* why the last line was dropped (DESIGN 5), or NULL */
	struct trace_process process;
	char *job;
	char *pname;
	struct u64map stacks; /* trace stack ids to symtab stack ids */
	struct op_range *reads;
	struct op_range *writes;
	size_t reads_cap;
	size_t writes_cap;
	uint32_t *frames;
	size_t frames_cap;
	char *scratch;
	size_t scratch_cap;
	size_t scratch_used;
};

__attribute__((format(printf, 3, 4)))
static int fail(struct trace_reader *r, int err, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(r->msg, r->msg_cap, "%s:%lu: ", r->name, r->line);
	r->msg_prefix = (size_t)n;
	va_start(ap, fmt);
	vsnprintf(r->msg + n, r->msg_cap - (size_t)n, fmt, ap);
	va_end(ap);
	r->err = err;
	return err;
}

static int fail_symtab(struct trace_reader *r, int err)
{
	if (err == -ENOMEM)
		return fail(r, err, "out of memory");
	return fail(r, err, "too many distinct names or stacks");
}

/*
 * Input bytes made printable for a message: control characters and DEL
 * escaped, cut after QUOTE_MAX bytes at a character boundary. Returns `out`,
 * which holds QUOTE_BUF bytes.
 */
static const char *quote(char *out, const char *p, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char *o = out;
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)p[i];

		if (i >= QUOTE_MAX && (c & 0xc0) != 0x80)
			break;
		if (c == '\t') {
			*o++ = '\\';
			*o++ = 't';
		} else if (c < 0x20 || c == 0x7f) {
			*o++ = '\\';
			*o++ = 'x';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else {
			*o++ = (char)c;
		}
	}
	if (i < len) {
		memcpy(o, "...", 3);
		o += 3;
	}
	*o = '\0';
	return out;
}

/* Byte classes of the tokenizer; one table lookup per byte. */
enum { C_BLANK = 1, C_HASH = 2, C_EQ = 4, C_QUOTE = 8 };
static const unsigned char cls[256] = {
	[' '] = C_BLANK, ['\t'] = C_BLANK, ['#'] = C_HASH, ['='] = C_EQ,
	['"'] = C_QUOTE,
};

static bool is_blank(char c)
{
	return cls[(unsigned char)c] & C_BLANK;
}

/* A blank or the start of a comment ends a bare token. */
static bool ends_token(char c)
{
	return cls[(unsigned char)c] & (C_BLANK | C_HASH);
}

/* The first byte in [p, end) of a class in `mask`, or end. */
static const char *scan_to(const char *p, const char *end, unsigned mask)
{
	while (p < end && !(cls[(unsigned char)*p] & mask))
		p++;
	return p;
}

static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end && is_blank(*p))
		p++;
	return p;
}

/* The end of a bare token: a blank, a comment or the end of the line. */
static const char *token_end(const char *p, const char *end)
{
	return scan_to(p, end, C_BLANK | C_HASH);
}

/* True when none of the 8 bytes at p is a control character or non-ASCII. */
static bool plain8(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	return (((w - 0x2020202020202020ULL) | w) & 0x8080808080808080ULL) == 0;
}

/* The lexical rules that hold for every byte of a line (DESIGN 2). */
static int line_check(struct trace_reader *r, const char *line, size_t len)
{
	const unsigned char *p = (const unsigned char *)line;
	size_t i = 0;

	while (i < len) {
		unsigned char c;
		size_t n;

		while (len - i >= 8 && plain8(p + i))
			i += 8;
		if (i == len)
			break;
		c = p[i];
		if ((c >= 0x20 && c < 0x80) || c == '\t') {
			i++;
			continue;
		}
		if (c == 0)
			return fail(r, -EINVAL, "NUL byte");
		if (c < 0x20)
			return fail(r, -EINVAL, "control character 0x%02x", c);
		n = utf8_seq(p + i, len - i);
		if (n == 0)
			return fail(r, -EINVAL,
				    "invalid UTF-8 (byte 0x%02x at column %zu)",
				    c, i + 1);
		i += n;
	}
	return 0;
}

/* Hex digit values plus one; 0 for anything else. */
static const unsigned char hexdig[256] = {
	['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,
	['5'] = 6,  ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10,
	['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
	['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14,
	['E'] = 15, ['F'] = 16,
};

/* Whether the decimal digits [p, q), the first not a 0, exceed 2^64 - 1. */
static bool dec_overflows(const char *p, const char *q)
{
	uint64_t v = 0;

	if (q - p != 20)
		return q - p > 20;
	/* 19 digits always fit; the 20th may not. */
	for (; p < q - 1; p++)
		v = v * 10 + (unsigned)(*p - '0');
	return v > (UINT64_MAX - (unsigned)(*p - '0')) / 10;
}

/*
 * Reads the decimal or 0x-hex digits at p up to the first other byte, whose
 * position goes to *stop: NUM_OK with the value in *out, NUM_EMPTY when
 * there is no digit, NUM_RANGE past 2^64 - 1. What may follow the number
 * is the caller's business, so that a number is scanned only once.
 */
static int scan_u64(const char *p, const char *end, uint64_t *out,
		    const char **stop)
{
	const char *digits, *lead;
	uint64_t v = 0;
	bool hex = end - p > 2 && p[0] == '0' && p[1] == 'x' &&
		   hexdig[(unsigned char)p[2]];
	unsigned d;

	/* Accumulate freely; a count of significant digits tells overflow. */
	if (hex) {
		for (digits = p += 2;
		     p < end && (d = hexdig[(unsigned char)*p]) != 0; p++)
			v = v << 4 | (d - 1);
	} else {
		for (digits = p; p < end && (d = (unsigned)(*p - '0')) <= 9;
		     p++)
			v = v * 10 + d;
	}
	*stop = p;
	if (p == digits)
		return NUM_EMPTY;
	for (lead = digits; lead < p - 1 && *lead == '0';)
		lead++;
	if (hex ? p - lead > 16 : dec_overflows(lead, p))
		return NUM_RANGE;
	*out = v;
	return NUM_OK;
}

/* The status of all of [p, q) as one number. */
static int parse_u64(const char *p, const char *q, uint64_t *out)
{
	const char *stop;
	int st = scan_u64(p, q, out, &stop);

	return stop == q ? st : NUM_BAD;
}

/* True when [ptr, ptr + len) ends at or before 2^64; len is at least 1. */
static bool range_fits(uint64_t ptr, uint64_t len)
{
	return len - 1 <= UINT64_MAX - ptr;
}

/* The error of the number token [p, q), which is not a valid number. */
static int num_error(struct trace_reader *r, enum key k, const char *p,
		     const char *q)
{
	char qb[QUOTE_BUF];
	uint64_t v;

	if (p < q && *p == '"')
		return fail(r, -EINVAL, "a number for '%s' must not be quoted",
			    keys[k].name);
	switch (parse_u64(p, q, &v)) {
	case NUM_EMPTY:
		return fail(r, -EINVAL, "empty number for '%s'", keys[k].name);
	case NUM_RANGE:
		return fail(r, -EINVAL, "number out of range for '%s': %s",
			    keys[k].name, quote(qb, p, (size_t)(q - p)));
	default:
		return fail(r, -EINVAL, "invalid number for '%s': %s",
			    keys[k].name, quote(qb, p, (size_t)(q - p)));
	}
}

static int take_num(struct trace_reader *r, enum key k, const char **pp,
		    const char *end, uint64_t *out)
{
	const char *p = *pp, *q;

	if (scan_u64(p, end, out, &q) == NUM_OK &&
	    (q == end || ends_token(*q))) {
		*pp = q;
		return 0;
	}
	return num_error(r, k, p, token_end(p, end));
}

/* Makes room for element `n` of a range array. */
static int ranges_reserve(struct op_range **v, size_t *cap, size_t n)
{
	return grow_array((void **)v, cap, n + 1, sizeof(**v));
}

/* The error of the list element at p, which is not a valid element. */
static int element_error(struct trace_reader *r, enum key k, const char *p,
			 const char *end)
{
	const char *name = keys[k].name, *e = p, *plus;
	uint64_t ptr = 0, len = 1;
	char qb[QUOTE_BUF];
	int st;

	while (e < end && *e != ',' && !ends_token(*e))
		e++;
	if (e == p)
		return fail(r, -EINVAL, "empty element in '%s'", name);
	plus = memchr(p, '+', (size_t)(e - p));
	st = parse_u64(p, plus ? plus : e, &ptr);
	if (st == NUM_OK && plus != NULL)
		st = parse_u64(plus + 1, e, &len);
	quote(qb, p, (size_t)(e - p));
	if (st == NUM_RANGE)
		return fail(r, -EINVAL, "number out of range for '%s': %s",
			    name, qb);
	if (st != NUM_OK)
		return fail(r, -EINVAL, "invalid element for '%s': %s", name,
			    qb);
	if (len == 0)
		return fail(r, -EINVAL, "zero length for '%s': %s", name, qb);
	return fail(r, -EINVAL, "range past 2^64 for '%s': %s", name, qb);
}

/* The element PTR or PTR+LEN at p into *out, its end into *next. */
static int take_element(struct trace_reader *r, enum key k, const char *p,
			const char *end, struct op_range *out,
			const char **next)
{
	const char *q;
	int st;

	out->len = 1;
	st = scan_u64(p, end, &out->ptr, &q);
	if (st == NUM_OK && q < end && *q == '+')
		st = scan_u64(q + 1, end, &out->len, &q);
	if (st == NUM_OK && (q == end || *q == ',' || ends_token(*q)) &&
	    out->len != 0 && range_fits(out->ptr, out->len)) {
		*next = q;
		return 0;
	}
	return element_error(r, k, p, end);
}

static int take_list(struct trace_reader *r, enum key k, const char **pp,
		     const char *end, struct fields *f)
{
	bool rd = k == KEY_READ;
	struct op_range **v = rd ? &r->reads : &r->writes;
	size_t *cap = rd ? &r->reads_cap : &r->writes_cap;
	size_t *n = rd ? &f->nreads : &f->nwrites;
	const char *p = *pp;
	int err;

	if (p < end && *p == '"')
		return fail(r, -EINVAL, "a list for '%s' must not be quoted",
			    keys[k].name);
	/* `read=` is the empty list. */
	if (p == end || ends_token(*p))
		return 0;
	for (;;) {
		if (ranges_reserve(v, cap, *n) < 0)
			return fail(r, -ENOMEM, "out of memory");
		err = take_element(r, k, p, end, &(*v)[*n], pp);
		if (err < 0)
			return err;
		(*n)++;
		if (*pp == end || **pp != ',')
			return 0;
		p = *pp + 1;
	}
}

/* Unescapes the quoted string [p, q), whose escapes are valid, into
 * scratch (DESIGN 3). */
static int unescape(struct trace_reader *r, const char *p, const char *q,
		    struct str *out)
{
	char *o;

	if (grow_array((void **)&r->scratch, &r->scratch_cap, r->line_len,
		       1) < 0)
		return fail(r, -ENOMEM, "out of memory");
	o = r->scratch + r->scratch_used;
	out->p = o;
	for (; p < q; p++) {
		if (*p == '\\') {
			p++;
			*o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
		} else {
			*o++ = *p;
		}
	}
	out->len = (size_t)(o - out->p);
	r->scratch_used += out->len;
	return 0;
}

/* Bytes of the character at p, which line_check() found valid. */
static size_t char_len(const char *p, const char *end)
{
	unsigned char c = (unsigned char)*p;
	size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;

	return n < (size_t)(end - p) ? n : (size_t)(end - p);
}

/* The closing quote of the string opening before p, or an error. */
static int find_quote_end(struct trace_reader *r, enum key k, const char *p,
			  const char *end, const char **qend, bool *escaped)
{
	char qb[QUOTE_BUF];

	for (; p < end; p++) {
		if (*p == '"') {
			*qend = p;
			return 0;
		}
		if (*p != '\\' || p + 1 == end)
			continue;
		p++;
		if (*p != '"' && *p != '\\' && *p != 'n' && *p != 't')
			return fail(r, -EINVAL, "invalid escape '%s' in '%s'",
				    quote(qb, p - 1, 1 + char_len(p, end)),
				    keys[k].name);
		*escaped = true;
	}
	return fail(r, -EINVAL, "unterminated quoted string for '%s'",
		    keys[k].name);
}

static int take_quoted(struct trace_reader *r, enum key k, const char **pp,
		       const char *end, struct str *out)
{
	const char *p = *pp + 1, *q = NULL;
	bool escaped = false;
	int err;

	err = find_quote_end(r, k, p, end, &q, &escaped);
	if (err < 0)
		return err;
	if (q + 1 < end && !ends_token(q[1]))
		return fail(r, -EINVAL,
			    "expected a blank after the closing quote of '%s'",
			    keys[k].name);
	*pp = q + 1;
	if (escaped)
		return unescape(r, p, q, out);
	out->p = p;
	out->len = (size_t)(q - p);
	return 0;
}

static int take_str(struct trace_reader *r, enum key k, const char **pp,
		    const char *end, struct str *out)
{
	const char *p = *pp, *q;
	char qb[QUOTE_BUF];

	if (p < end && *p == '"')
		return take_quoted(r, k, pp, end, out);
	q = scan_to(p, end, C_BLANK | C_HASH | C_EQ | C_QUOTE);
	if (q < end && (*q == '"' || *q == '='))
		return fail(r, -EINVAL,
			    "'%c' in the unquoted value of '%s': %s", *q,
			    keys[k].name,
			    quote(qb, p, (size_t)(token_end(q, end) - p)));
	*pp = q;
	out->p = p;
	out->len = (size_t)(q - p);
	return 0;
}

/* Interns one `frame` value and appends its id to the line's frames. */
static int add_frame(struct trace_reader *r, struct fields *f,
		     const struct str *s)
{
	uint32_t id;
	int err;

	if (f->nframes == OP_MAX_FRAMES) /* as the live path keeps it */
		return 0;
	if (grow_array((void **)&r->frames, &r->frames_cap, f->nframes + 1,
		       sizeof(*r->frames)) < 0)
		return fail(r, -ENOMEM, "out of memory");
	err = symtab_intern(r->syms, s->p, op_cut_string(s->p, s->len), &id);
	if (err < 0)
		return fail_symtab(r, err);
	r->frames[f->nframes++] = id;
	return 0;
}

/* The key [p, p + len), or -1. Each memcmp() has a constant length, so
 * it compiles to a compare or two. */
static int find_key(const char *p, size_t len)
{
#define KEY_MATCH(name, str, type)                     \
	if (len == sizeof(str) - 1 &&                  \
	    memcmp(p, str, sizeof(str) - 1) == 0)      \
		return KEY_##name;
	TRACE_KEYS(KEY_MATCH)
#undef KEY_MATCH
	return -1;
}

/* Reads the value of key `k` at *pp into f. */
static int take_value(struct trace_reader *r, enum key k, const char **pp,
		      const char *end, struct fields *f)
{
	int err;

	switch (keys[k].type) {
	case VAL_NUM:
		return take_num(r, k, pp, end, &f->num[k]);
	case VAL_LIST:
		return take_list(r, k, pp, end, f);
	default:
		err = take_str(r, k, pp, end, &f->str[k]);
		if (err == 0 && k == KEY_FRAME)
			err = add_frame(r, f, &f->str[k]);
		return err;
	}
}

/* Parses the key=value fields of directive d in [p, end). */
static int parse_fields(struct trace_reader *r, const struct directive *d,
			const char *p, const char *end, struct fields *f)
{
	char qb[QUOTE_BUF];
	uint32_t missing;

	for (;;) {
		const char *key;
		int k, err;

		p = skip_blanks(p, end);
		if (p == end || *p == '#')
			break;
		key = p;
		p = scan_to(p, end, C_BLANK | C_HASH | C_EQ);
		if (p == end || *p != '=')
			return fail(r, -EINVAL, "expected '=' after '%s'",
				    quote(qb, key, (size_t)(p - key)));
		if (p == key)
			return fail(r, -EINVAL, "missing key before '='");
		k = find_key(key, (size_t)(p - key));
		if (k < 0 || !(d->allowed & 1u << k))
			return fail(r, -EINVAL, "unknown key '%s' for %s",
				    quote(qb, key, (size_t)(p - key)), d->word);
		if ((f->seen & 1u << k) && k != KEY_FRAME)
			return fail(r, -EINVAL, "duplicate key '%s'",
				    keys[k].name);
		f->seen |= 1u << k;
		p++;
		err = take_value(r, (enum key)k, &p, end, f);
		if (err < 0)
			return err;
	}
	missing = d->required & ~f->seen;
	for (int k = 0; missing != 0; k++) {
		if (missing & 1u << k)
			return fail(r, -EINVAL, "missing key '%s' for %s",
				    keys[k].name, d->word);
	}
	return 0;
}

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
		return fail(r, -EINVAL,
			    "stack id %" PRIu64 " is already defined", id);
	err = symtab_intern_stack(r->syms, r->frames, f->nframes, &sid);
	if (err < 0)
		return fail_symtab(r, err);
	if (u64map_put(&r->stacks, id, sid) < 0)
		return fail(r, -ENOMEM, "out of memory");
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
		return fail(r, -EINVAL,
			    "second process line (the first is on line %lu)",
			    r->process_line);
	if (r->ops_seen)
		return fail(r, -EINVAL,
			    "process line after the first operation");
	r->job = copy_str(f, KEY_JOB);
	r->pname = copy_str(f, KEY_NAME);
	if ((r->job == NULL && (f->seen & BIT(JOB))) ||
	    (r->pname == NULL && (f->seen & BIT(NAME))))
		return fail(r, -ENOMEM, "out of memory");
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
			return fail(r, -EINVAL,
				    "stack id %" PRIu64 " is not defined",
				    num(f, KEY_STACK));
		stack = (uint32_t)*sid;
	}
	if (d->kind == OP_ALLOC &&
	    !range_fits(num(f, KEY_PTR), size ? size : 1))
		return fail(r, -EINVAL,
			    "alloc range past 2^64: ptr=0x%" PRIx64
			    " size=%" PRIu64, num(f, KEY_PTR), size);
	if (f->seen & BIT(OP)) {
		if (f->str[KEY_OP].len == 0)
			return fail(r, -EINVAL, "empty value for 'op'");
		err = symtab_intern(r->syms, f->str[KEY_OP].p,
				    op_cut_string(f->str[KEY_OP].p,
						  f->str[KEY_OP].len),
				    &name);
		if (err < 0)
			return fail_symtab(r, err);
	}
	*op = (struct op){
		.kind = (enum op_kind)d->kind,
		.stack = stack,
		.name = name,
		.has_stream = d->kind == OP_ALLOC && (f->seen & BIT(STREAM)),
		.has_lost = (f->seen & BIT(LOST)) != 0,
		.stream = num(f, KEY_STREAM),
		.on = num(f, KEY_ON),
		.event = num(f, KEY_EVENT),
		.ptr = num(f, KEY_PTR),
		.size = size,
		.lost = num(f, KEY_LOST),
		.reads = f->nreads ? r->reads : NULL,
		.writes = f->nwrites ? r->writes : NULL,
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
	const char *magic = p, *magic_end = token_end(p, end);
	const char *ver = skip_blanks(magic_end, end);
	const char *ver_end = token_end(ver, end);
	const char *rest = skip_blanks(ver_end, end), *ver_digits = ver;
	char qb[QUOTE_BUF];

	if (!word_is(magic, magic_end, "npusan-trace") || ver == ver_end ||
	    (rest < end && *rest != '#'))
		return fail(r, -EINVAL, "expected header 'npusan-trace 1'");
	if (word_is(ver, ver_end, "1")) {
		r->header_seen = true;
		return 0;
	}
	while (ver_digits < ver_end && *ver_digits >= '0' && *ver_digits <= '9')
		ver_digits++;
	if (ver_digits == ver_end)
		return fail(r, -EINVAL,
			    "unsupported trace format version %s (this reader "
			    "reads version 1)",
			    quote(qb, ver, (size_t)(ver_end - ver)));
	return fail(r, -EINVAL, "expected header 'npusan-trace 1'");
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

/* One line without its ending; 1 with an op, 0 for any other line. */
static int parse_line(struct trace_reader *r, const char *p, size_t len,
		      struct op *op)
{
	const char *end = p + len, *word_end;
	const struct directive *d;
	struct fields f;
	char qb[QUOTE_BUF];
	int err;

	err = line_check(r, p, len);
	if (err < 0)
		return err;
	p = skip_blanks(p, end);
	if (p == end || *p == '#')
		return 0;
	if (!r->header_seen)
		return parse_header(r, p, end);
	word_end = token_end(p, end);
	d = find_directive(p, (size_t)(word_end - p));
	if (d == NULL)
		return fail(r, -EINVAL, "unknown directive '%s'",
			    quote(qb, p, (size_t)(word_end - p)));
	if (d->cls == DIR_RESERVED)
		return fail(r, -EINVAL, "'%s' is reserved for a later "
			    "version of the format", d->word);
	f.seen = 0;
	f.nreads = f.nwrites = f.nframes = 0;
	r->line_len = len;
	r->scratch_used = 0;
	err = parse_fields(r, d, word_end, end, &f);
	if (err < 0)
		return err;
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
	return fail(r, -E2BIG, "line longer than %u bytes", TRACE_MAX_LINE);
}

/* The next line, its ending removed, in *line; 1, 0 at the end, or an
 * error. Counts the line in r->line. *last: the input ends with this line
 * and no newline. */
static int next_line(struct trace_reader *r, struct str *line, bool *last)
{
	const char *nl;
	size_t len;
	int err;

	for (;;) {
		nl = memchr(r->buf + r->scan, '\n', r->end - r->scan);
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
				return fail(r, err, "out of memory");
			return fail(r, -EIO, "read error: %s", strerror(-err));
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
	if (nl != NULL && len > 0 && line->p[len - 1] == '\r')
		len--;
	if (len > TRACE_MAX_LINE)
		return too_long(r);
	line->len = len;
	return 1;
}

/* Whether the word [p, p + n) is directive d, or when it is not `whole`
 * (the line ends in it), the start of d. */
static bool word_starts(const struct directive *d, const char *p, size_t n,
			bool whole)
{
	return d->cls != DIR_RESERVED && n <= d->len &&
	       memcmp(d->word, p, n) == 0 && (!whole || n == d->len);
}

/* Whether the line [p, p + len) starts as a line of this trace may. */
static bool line_starts_well(const struct trace_reader *r, const char *p,
			     size_t len)
{
	static const struct directive header = DIR("npusan-trace", DIR_OP, 0,
						   0, 0);
	const char *end = p + len, *q;
	size_t n;

	p = skip_blanks(p, end);
	q = token_end(p, end);
	n = (size_t)(q - p);
	if (!r->header_seen)
		return word_starts(&header, p, n, q < end);
	for (size_t i = 0; i < ARRAY_SIZE(directives); i++) {
		if (word_starts(&directives[i], p, n, q < end))
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
		return fail(r, -ENOMEM, "out of memory");
	}
	r->err = 0;
	r->msg[0] = '\0';
	return 0;
}

int trace_read(struct trace_reader *r, struct op *op)
{
	struct str line = { NULL, 0 };
	bool last = false;
	int rc;

	while (r->err == 0) {
		rc = next_line(r, &line, &last);
		if (rc == 0 && !r->header_seen && r->torn == NULL) {
			r->line = r->line ? r->line : 1;
			return fail(r, -EINVAL,
				    "expected header 'npusan-trace 1', found "
				    "the end of the trace");
		}
		if (rc <= 0)
			return rc;
		rc = parse_line(r, line.p, line.len, op);
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
	/* Room for the name, a line number and the message (fail()). */
	r->msg_cap = strlen(name) + 32 + MSG_MAX;
	r->msg = calloc(1, r->msg_cap);
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

uint64_t trace_reader_offset(const struct trace_reader *r)
{
	return r->base + r->start;
}
