/*
 * trace_lex.c - the fields of one trace line: keys, numbers, strings and
 * pointer lists, checked and unescaped in place (trace_read.c's DESIGN 1-3
 * hold here). trace_read.c cuts the input into lines and makes operations
 * of the fields; this file owns nothing but the reader's lists, frames and
 * scratch space it grows (freed by trace_reader_close()).
 */
#include "trace_int.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "utf8.h"

/* x86-64 has SSE2 in its baseline: the scans that find line ends and
 * tokens use it there, and portable words of 8 bytes elsewhere (or where
 * NPUSAN_TRACE_PORTABLE is defined, to test them on x86-64). */
#if defined(__SSE2__) && !defined(NPUSAN_TRACE_PORTABLE)
#include <emmintrin.h>
#define TRACE_SSE2 1
#else
#define TRACE_SSE2 0
#endif

const struct trace__key_def trace__keys[KEY_COUNT] = {
#define KEY_DEF(name, str, type, version) \
	[KEY_##name] = { str, sizeof(str) - 1, type, version },
	TRACE_KEYS(KEY_DEF)
#undef KEY_DEF
};

const unsigned char trace__cls[256] = {
	[' '] = C_BLANK, ['\t'] = C_BLANK, ['#'] = C_HASH, ['='] = C_EQ,
	['"'] = C_QUOTE,
};

__attribute__((format(printf, 3, 4)))
int trace__fail(struct trace_reader *r, int err, const char *fmt, ...)
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

int trace__fail_symtab(struct trace_reader *r, int err)
{
	if (err == -ENOMEM)
		return trace__fail(r, err, "out of memory");
	return trace__fail(r, err, "too many distinct names or stacks");
}

/*
 * Input bytes made printable for a message: control characters and DEL
 * escaped, cut after QUOTE_MAX bytes at a character boundary. Returns `out`,
 * which holds QUOTE_BUF bytes.
 */
const char *trace__quote(char *out, const char *p, size_t len)
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

/* True when none of the 8 bytes at p is a control character or non-ASCII. */
static bool plain8(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	return (((w - 0x2020202020202020ULL) | w) & 0x8080808080808080ULL) == 0;
}

/* plain8() of 32 bytes, with one test for the four words. */
static bool plain32(const unsigned char *p)
{
	uint64_t w[4];

	memcpy(w, p, sizeof(w));
	return (((w[0] - 0x2020202020202020ULL) | w[0] |
		 (w[1] - 0x2020202020202020ULL) | w[1] |
		 (w[2] - 0x2020202020202020ULL) | w[2] |
		 (w[3] - 0x2020202020202020ULL) | w[3]) &
		0x8080808080808080ULL) == 0;
}

/* The 8 bytes at p as a word whose lowest byte is the first, on a host of
 * either byte order: the word tricks below count on it. */
static inline uint64_t lex_load8(const char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	w = __builtin_bswap64(w);
#endif
	return w;
}

/* The index of the first byte of the 8 at p that is not printable ASCII,
 * or 8. A borrow of the subtraction only runs upwards from a byte below
 * 0x20, so the lowest byte flagged is exact. */
static unsigned lex_special8(const char *p)
{
	uint64_t w = lex_load8(p), m;

	m = ((w - 0x2020202020202020ULL) | w) & 0x8080808080808080ULL;
	return m == 0 ? 8 : (unsigned)__builtin_ctzll(m) / 8;
}

#if TRACE_SSE2
/* The first special byte of the 32 at p, or NULL: a signed compare
 * below 0x20 flags control characters and every byte from 0x80. */
static inline const char *lex_special32(const char *p)
{
	const __m128i lim = _mm_set1_epi8(0x20);
	__m128i a = _mm_cmplt_epi8(_mm_loadu_si128((const __m128i *)p), lim);
	__m128i b = _mm_cmplt_epi8(_mm_loadu_si128((const __m128i *)p + 1),
				   lim);
	unsigned ma, mb;

	if (_mm_movemask_epi8(_mm_or_si128(a, b)) == 0)
		return NULL;
	ma = (unsigned)_mm_movemask_epi8(a);
	mb = (unsigned)_mm_movemask_epi8(b);
	return p + __builtin_ctzll((uint64_t)mb << 16 | ma);
}
#endif

const char *trace__find_special(const char *p, const char *end)
{
	unsigned i;

#if TRACE_SSE2
	for (; end - p >= 32; p += 32) {
		const char *s = lex_special32(p);

		if (s != NULL)
			return s;
	}
#endif
	for (; end - p >= 8; p += 8) {
		i = lex_special8(p);
		if (i < 8)
			return p + i;
	}
	while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80)
		p++;
	return p;
}

/* The lexical rules that hold for every byte of a line (DESIGN 2). */
int trace__line_check(struct trace_reader *r, const char *line, size_t len)
{
	const unsigned char *p = (const unsigned char *)line;
	size_t i = 0;

	while (i < len) {
		unsigned char c;
		size_t n;

		while (len - i >= 32 && plain32(p + i))
			i += 32;
		while (len - i >= 8 && plain8(p + i))
			i += 8;
		/* Fewer than 8 left: the last 8, overlapping checked ones. */
		if (i == len || (len - i < 8 && len >= 8 &&
				 plain8(p + len - 8)))
			break;
		c = p[i];
		if ((c >= 0x20 && c < 0x80) || c == '\t') {
			i++;
			continue;
		}
		if (c == 0)
			return trace__fail(r, -EINVAL, "NUL byte");
		if (c < 0x20)
			return trace__fail(r, -EINVAL,
					   "control character 0x%02x", c);
		n = utf8_seq(p + i, len - i);
		if (n == 0)
			return trace__fail(r, -EINVAL, "invalid UTF-8 (byte "
					   "0x%02x at column %zu)", c, i + 1);
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
 * Numbers eight bytes at a time. A word holds the 8 bytes at p, the first
 * in its lowest byte; the length of a run of digits is the index of the
 * first byte that is not one (carries and borrows between bytes only go
 * upwards, past that byte, so the bytes below it are classed exactly),
 * and a value is made of the first n bytes shifted to the top, the bytes
 * shifted in being leading zeros.
 */
#define LEX_ONES 0x0101010101010101ULL

/* A bit set in each byte of w that is not a decimal digit. */
static inline uint64_t lex_dec_others(uint64_t w)
{
	uint64_t hi = w & LEX_ONES * 0xf0;
	uint64_t hi6 = (w + LEX_ONES * 6) & LEX_ONES * 0xf0;

	return (hi ^ LEX_ONES * 0x30) | (hi6 ^ LEX_ONES * 0x30);
}

/* 0x80 in each byte of w strictly between lo and hi (both at most 127;
 * exact per byte: it works on each byte's low 7 bits, which never carry). */
static inline uint64_t lex_between(uint64_t w, unsigned lo, unsigned hi)
{
	uint64_t low7 = w & LEX_ONES * 127;

	return (LEX_ONES * (127 + hi) - low7) & ~w &
	       (low7 + LEX_ONES * (127 - lo)) & LEX_ONES * 128;
}

/* 0x80 in each byte of w that is not a hex digit (of either case, as
 * hexdig[] takes them). */
static inline uint64_t lex_hex_others(uint64_t w)
{
	uint64_t hex = lex_between(w, '0' - 1, '9' + 1) |
		       lex_between(w | LEX_ONES * 0x20, 'a' - 1, 'f' + 1);

	return ~hex & LEX_ONES * 128;
}

/* The value of the first n (1 to 8) bytes of w, all decimal digits. */
static inline uint64_t lex_dec_value(uint64_t w, unsigned n)
{
	uint64_t v = (w - LEX_ONES * '0') << (8 * (8 - n));

	v = (v * 2561) >> 8 & 0x00ff00ff00ff00ffULL;
	v = (v * 6553601) >> 16 & 0x0000ffff0000ffffULL;
	return (v * 42949672960001ULL) >> 32;
}

/* The value of the first n (1 to 8) bytes of w, all hex digits. */
static inline uint64_t lex_hex_value(uint64_t w, unsigned n)
{
	uint64_t v = ((w & LEX_ONES * 15) + 9 * (w >> 6 & LEX_ONES))
		     << (8 * (8 - n));

	v = (v << 4 | v >> 8) & 0x00ff00ff00ff00ffULL;
	v = (v << 8 | v >> 16) & 0x0000ffff0000ffffULL;
	return (v << 16 | v >> 32) & 0xffffffffULL;
}

static const uint64_t lex_pow10[9] = {
	1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
};

/* The index of the lowest byte of m != 0 with a bit set. */
static inline unsigned lex_first_byte(uint64_t m)
{
	return (unsigned)__builtin_ctzll(m) / 8;
}

/*
 * The 1 to 15 decimal (or hex) digits at p, read as two words: true with
 * their value and the byte after them; false when there are none or 16
 * or more, which the byte loop then reads. p has 16 bytes before lim.
 */
static inline bool lex_digits_fast(const char *p, bool hex, uint64_t *out,
				   const char **stop)
{
	uint64_t w = lex_load8(p), w2, m, v;
	unsigned n;

	m = hex ? lex_hex_others(w) : lex_dec_others(w);
	if (m != 0) {
		n = lex_first_byte(m);
		if (n == 0)
			return false;
		*out = hex ? lex_hex_value(w, n) : lex_dec_value(w, n);
		*stop = p + n;
		return true;
	}
	w2 = lex_load8(p + 8);
	m = hex ? lex_hex_others(w2) : lex_dec_others(w2);
	if (m == 0)
		return false;
	n = lex_first_byte(m);
	v = hex ? lex_hex_value(w, 8) : lex_dec_value(w, 8);
	if (n > 0)
		v = hex ? v << 4 * n | lex_hex_value(w2, n) :
			  v * lex_pow10[n] + lex_dec_value(w2, n);
	*out = v;
	*stop = p + 8 + n;
	return true;
}

/*
 * The number at p read a word at a time, loading bytes up to lim but
 * taking none at or past end: true with its value and the first byte
 * after it; false when the byte loop must decide (near lim, no digit, 16
 * digits or more, digits running past end).
 */
static inline bool lex_scan_fast(const char *p, const char *end,
				 const char *lim, uint64_t *out,
				 const char **stop)
{
	bool hex;

	if (lim - p < 18)
		return false;
	hex = p[0] == '0' && p[1] == 'x';
	return lex_digits_fast(hex ? p + 2 : p, hex, out, stop) && *stop <= end;
}

/*
 * Reads the decimal or 0x-hex digits at p up to the first other byte, whose
 * position goes to *stop: NUM_OK with the value in *out, NUM_EMPTY when
 * there is no digit, NUM_RANGE past 2^64 - 1. What may follow the number
 * is the caller's business, so that a number is scanned only once. Bytes
 * from end up to lim may be loaded (never taken): they are the reader's.
 */
static int scan_u64_bytes(const char *p, const char *end, uint64_t *out,
			  const char **stop);

static inline int scan_u64(const char *p, const char *end, const char *lim,
			   uint64_t *out, const char **stop)
{
	if (lex_scan_fast(p, end, lim, out, stop))
		return NUM_OK;
	return scan_u64_bytes(p, end, out, stop);
}

/* scan_u64() a byte at a time. */
__attribute__((noinline))
static int scan_u64_bytes(const char *p, const char *end, uint64_t *out,
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
	int st = scan_u64(p, q, q, out, &stop);

	return stop == q ? st : NUM_BAD;
}

/* The error of the number token [p, q), which is not a valid number. */
static int num_error(struct trace_reader *r, enum key k, const char *p,
		     const char *q)
{
	char qb[QUOTE_BUF];
	uint64_t v;

	if (p < q && *p == '"')
		return trace__fail(r, -EINVAL,
				   "a number for '%s' must not be quoted",
				   trace__keys[k].name);
	switch (parse_u64(p, q, &v)) {
	case NUM_EMPTY:
		return trace__fail(r, -EINVAL, "empty number for '%s'",
				   trace__keys[k].name);
	case NUM_RANGE:
		return trace__fail(r, -EINVAL,
				   "number out of range for '%s': %s",
				   trace__keys[k].name,
				   trace__quote(qb, p, (size_t)(q - p)));
	default:
		return trace__fail(r, -EINVAL, "invalid number for '%s': %s",
				   trace__keys[k].name,
				   trace__quote(qb, p, (size_t)(q - p)));
	}
}

/* The end of the bytes a number may load beyond its line: the reader's
 * input, which holds the line (trace_read.c's next_line()). */
static const char *lex_limit(const struct trace_reader *r)
{
	return r->buf + r->end;
}

static int take_num(struct trace_reader *r, enum key k, const char **pp,
		    const char *end, uint64_t *out)
{
	const char *p = *pp, *q;

	if (scan_u64(p, end, lex_limit(r), out, &q) == NUM_OK &&
	    (q == end || trace__ends_token(*q))) {
		*pp = q;
		return 0;
	}
	return num_error(r, k, p, trace__token_end(p, end));
}

/* Makes room for element `n` of a range array. */
static int ranges_reserve(struct op_range **v, size_t *cap, size_t n)
{
	if (n < *cap) /* the common case, without a call */
		return 0;
	return grow_array((void **)v, cap, n + 1, sizeof(**v));
}

/* The error of the list element at p, which is not a valid element. */
static int element_error(struct trace_reader *r, enum key k, const char *p,
			 const char *end)
{
	const char *name = trace__keys[k].name, *e = p, *plus;
	uint64_t ptr = 0, len = 1;
	char qb[QUOTE_BUF];
	int st;

	while (e < end && *e != ',' && !trace__ends_token(*e))
		e++;
	if (e == p)
		return trace__fail(r, -EINVAL, "empty element in '%s'", name);
	plus = memchr(p, '+', (size_t)(e - p));
	st = parse_u64(p, plus ? plus : e, &ptr);
	if (st == NUM_OK && plus != NULL)
		st = parse_u64(plus + 1, e, &len);
	trace__quote(qb, p, (size_t)(e - p));
	if (st == NUM_RANGE)
		return trace__fail(r, -EINVAL,
				   "number out of range for '%s': %s",
				   name, qb);
	if (st != NUM_OK)
		return trace__fail(r, -EINVAL, "invalid element for '%s': %s",
				   name,
				   qb);
	if (len == 0)
		return trace__fail(r, -EINVAL, "zero length for '%s': %s", name,
				   qb);
	return trace__fail(r, -EINVAL, "range past 2^64 for '%s': %s", name,
			   qb);
}

/* The @NAME at *pp (after an element), its end into *pp: the operator's
 * argument (op_arg_ok()). 0; -EINVAL naming what is wrong. */
static int take_arg(struct trace_reader *r, enum key k, const char **pp,
		    const char *end, struct str *name)
{
	const char *p = *pp + 1, *e = p;
	char qb[QUOTE_BUF];

	while (e < end && *e != ',' && !trace__ends_token(*e))
		e++;
	if (op_arg_ok(p, (size_t)(e - p))) {
		*name = (struct str){ p, (size_t)(e - p) };
		*pp = e;
		return 0;
	}
	trace__quote(qb, *pp, (size_t)(e - *pp));
	return trace__fail(r, -EINVAL, "invalid argument name for '%s': %s",
			   trace__keys[k].name, qb);
}

/* The element PTR, PTR+LEN, PTR@NAME or PTR+LEN@NAME at p into *out and
 * *name (len 0 without a name), its end into *next. */
static int take_element(struct trace_reader *r, enum key k, const char *p,
			const char *end, struct op_range *out,
			struct str *name, const char **next)
{
	const char *q;
	int st;

	out->len = 1;
	*name = (struct str){ NULL, 0 };
	st = scan_u64(p, end, lex_limit(r), &out->ptr, &q);
	if (st == NUM_OK && q < end && *q == '+')
		st = scan_u64(q + 1, end, lex_limit(r), &out->len, &q);
	if (st == NUM_OK && q < end && *q == '@' && out->len != 0 &&
	    trace__range_fits(out->ptr, out->len))
	{
		*next = q;
		return take_arg(r, k, next, end, name);
	}
	if (st == NUM_OK && (q == end || *q == ',' || trace__ends_token(*q)) &&
	    out->len != 0 && trace__range_fits(out->ptr, out->len)) {
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
	struct str **names = rd ? &r->read_names : &r->write_names;
	size_t *ncap = rd ? &r->read_names_cap : &r->write_names_cap;
	size_t *n = rd ? &f->nreads : &f->nwrites;
	bool *named = rd ? &f->named_reads : &f->named_writes;
	const char *p = *pp;
	int err;

	if (p < end && *p == '"')
		return trace__fail(r, -EINVAL,
				   "a list for '%s' must not be quoted",
				   trace__keys[k].name);
	/* `read=` is the empty list. */
	if (p == end || trace__ends_token(*p))
		return 0;
	for (;;) {
		if (ranges_reserve(v, cap, *n) < 0 ||
		    (*n >= *ncap && grow_array((void **)names, ncap, *n + 1,
					       sizeof(**names)) < 0))
			return trace__fail(r, -ENOMEM, "out of memory");
		err = take_element(r, k, p, end, &(*v)[*n], &(*names)[*n], pp);
		if (err < 0)
			return err;
		*named |= (*names)[*n].len > 0;
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
		return trace__fail(r, -ENOMEM, "out of memory");
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

/* Bytes of the character at p, which trace__line_check() found valid. */
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
			return trace__fail(r, -EINVAL,
					   "invalid escape '%s' in '%s'",
					   trace__quote(qb, p - 1,
							1 + char_len(p, end)),
					   trace__keys[k].name);
		*escaped = true;
	}
	return trace__fail(r, -EINVAL, "unterminated quoted string for '%s'",
			   trace__keys[k].name);
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
	if (q + 1 < end && !trace__ends_token(q[1]))
		return trace__fail(r, -EINVAL,
				   "expected a blank after the closing quote "
				   "of '%s'", trace__keys[k].name);
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
	q = trace__scan_to(p, end, C_BLANK | C_HASH | C_EQ | C_QUOTE);
	if (q < end && (*q == '"' || *q == '=')) {
		size_t n = (size_t)(trace__token_end(q, end) - p);

		return trace__fail(r, -EINVAL,
				   "'%c' in the unquoted value of '%s': %s", *q,
				   trace__keys[k].name, trace__quote(qb, p, n));
	}
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
		return trace__fail(r, -ENOMEM, "out of memory");
	err = symtab_intern(r->syms, s->p, op_cut_string(s->p, s->len), &id);
	if (err < 0)
		return trace__fail_symtab(r, err);
	r->frames[f->nframes++] = id;
	return 0;
}

/* The key [p, p + len), or -1. Each memcmp() has a constant length, so
 * it compiles to a compare or two. */
static int find_key(const char *p, size_t len)
{
#define KEY_MATCH(name, str, type, v)                   \
	if (len == sizeof(str) - 1 &&                  \
	    memcmp(p, str, sizeof(str) - 1) == 0)      \
		return KEY_##name;
	TRACE_KEYS(KEY_MATCH)
#undef KEY_MATCH
	return -1;
}

/*
 * The key of the "key=" that starts at p, told by its first byte and one
 * compare of constant length, without scanning for the '='; -1 when p
 * starts no such key, and the scan in trace__parse_fields() then finds
 * the key or says what is wrong. A key missing here is only slower.
 */
static int key_at(const char *p, const char *end)
{
	ptrdiff_t room = end - p;

#define KEY_AT(K, s)                                                  \
	if (room > (ptrdiff_t)sizeof(s) - 1 &&                        \
	    memcmp(p, s "=", sizeof(s)) == 0) {                       \
		assert(strcmp(trace__keys[KEY_##K].name, s) == 0);    \
		return KEY_##K;                                       \
	}
	switch (*p) {
	case 's':
		KEY_AT(STREAM, "stream");
		KEY_AT(SIZE, "size");
		KEY_AT(STACK, "stack");
		break;
	case 'p':
		KEY_AT(PTR, "ptr");
		KEY_AT(PID, "pid");
		break;
	case 'o':
		KEY_AT(OP, "op");
		KEY_AT(ON, "on");
		break;
	case 'r':
		KEY_AT(READ, "read");
		KEY_AT(RANK, "rank");
		break;
	case 'w':
		KEY_AT(WRITE, "write");
		break;
	case 'e':
		KEY_AT(EVENT, "event");
		break;
	case 'f':
		KEY_AT(FRAME, "frame");
		break;
	case 'g':
		KEY_AT(GRAPH, "graph");
		break;
	default:
		break;
	}
#undef KEY_AT
	return -1;
}

/* Reads the value of key `k` at *pp into f. */
static int take_value(struct trace_reader *r, enum key k, const char **pp,
		      const char *end, struct fields *f)
{
	int err;

	switch (trace__keys[k].type) {
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

/*
 * The key at p, scanned up to its '=' and checked in the order that makes
 * the messages: an '=', a name, a key of the directive, of the trace's
 * version, not given before. Its end ('=') goes to *pp. k or the error.
 */
static int scan_key(struct trace_reader *r, const struct directive *d,
		    const struct fields *f, const char **pp, const char *end)
{
	const char *key = *pp, *p;
	char qb[QUOTE_BUF];
	int k;

	p = trace__scan_to(key, end, C_BLANK | C_HASH | C_EQ);
	if (p == end || *p != '=')
		return trace__fail(r, -EINVAL, "expected '=' after '%s'",
				   trace__quote(qb, key, (size_t)(p - key)));
	if (p == key)
		return trace__fail(r, -EINVAL, "missing key before '='");
	k = find_key(key, (size_t)(p - key));
	if (k < 0 || !(d->allowed & 1u << k))
		return trace__fail(r, -EINVAL, "unknown key '%s' for %s",
				   trace__quote(qb, key, (size_t)(p - key)),
				   d->word);
	if (trace__keys[k].version > r->version)
		return trace__fail(r, -EINVAL,
				   "'%s' needs trace format version %u "
				   "(the header says version %u)",
				   trace__keys[k].name, trace__keys[k].version,
				   r->version);
	if ((f->seen & 1u << k) && k != KEY_FRAME)
		return trace__fail(r, -EINVAL, "duplicate key '%s'",
				   trace__keys[k].name);
	*pp = p;
	return k;
}

/* The keys of the format's `version`. */
static uint32_t version_keys(unsigned version)
{
	uint32_t keys = 0;

	for (int k = 0; k < KEY_COUNT; k++)
		keys |= trace__keys[k].version <= version ? 1u << k : 0;
	return keys;
}

int trace__parse_fields(struct trace_reader *r, const struct directive *d,
			const char *p, const char *end, struct fields *f)
{
	/* The keys this line may still take without an error: key_at()'s
	 * finds in it skip every check of scan_key(). */
	uint32_t open = d->allowed & r->version_keys, missing;

	assert(r->version_keys == version_keys(r->version));
	for (;;) {
		int k, err;

		p = trace__skip_blanks(p, end);
		if (p == end || *p == '#')
			break;
		k = key_at(p, end);
		if (k >= 0 && (open & 1u << k))
			p += trace__keys[k].len;
		else if ((k = scan_key(r, d, f, &p, end)) < 0)
			return k;
		if (k != KEY_FRAME) /* the one key that repeats */
			open &= ~(1u << k);
		f->seen |= 1u << k;
		p++;
		err = take_value(r, (enum key)k, &p, end, f);
		if (err < 0)
			return err;
	}
	missing = d->required & ~f->seen;
	for (int k = 0; missing != 0; k++) {
		if (missing & 1u << k)
			return trace__fail(r, -EINVAL,
					   "missing key '%s' for %s",
					   trace__keys[k].name, d->word);
	}
	return 0;
}

/*
 * The fast path (trace_read.c's DESIGN 6). Hex digits 16 at a time with
 * SSE2: the count of digits at p and the value of the first n of them
 * (1 to 15); false for none or 16 or more. p has 16 bytes before the
 * reader's limit.
 */
#if TRACE_SSE2
static inline bool lex_fast_hex(const char *p, uint64_t *out, const char **stop)
{
	__m128i v = _mm_loadu_si128((const __m128i *)p);
	__m128i lc = _mm_or_si128(v, _mm_set1_epi8(0x20));
	__m128i dig = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)),
				    _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
	__m128i af = _mm_and_si128(_mm_cmpgt_epi8(lc, _mm_set1_epi8('a' - 1)),
				   _mm_cmplt_epi8(lc, _mm_set1_epi8('f' + 1)));
	unsigned m = ~(unsigned)_mm_movemask_epi8(_mm_or_si128(dig, af)) &
		     0xffff, n;
	__m128i nib, pairs;
	uint64_t w;

	if (m == 0 || (m & 1))
		return false;
	n = (unsigned)__builtin_ctz(m);
	/* Each byte's nibble: its low 4 bits, plus 9 for a letter; a byte
	 * past the digits gives at most 15, so it stays in its nibble. */
	nib = _mm_add_epi8(_mm_and_si128(v, _mm_set1_epi8(15)),
			   _mm_and_si128(af, _mm_set1_epi8(9)));
	/* Byte i of the pairs: nibble 2i above nibble 2i + 1. */
	pairs = _mm_or_si128(_mm_slli_epi16(nib, 4), _mm_srli_epi16(nib, 8));
	pairs = _mm_and_si128(pairs, _mm_set1_epi16(0xff));
	w = (uint64_t)_mm_cvtsi128_si64(_mm_packus_epi16(pairs, pairs));
	*out = __builtin_bswap64(w) >> (4 * (16 - n));
	*stop = p + n;
	return true;
}
#else
static inline bool lex_fast_hex(const char *p, uint64_t *out, const char **stop)
{
	return lex_digits_fast(p, true, out, stop);
}
#endif

/* The number at p, as scan_u64() reads it, when it is one of up to 15
 * digits away from the reader's limit `lim`; false to let scan_u64()
 * decide. */
static inline bool lex_fast_num(const char *p, const char *lim, uint64_t *out,
				const char **stop)
{
	if (lim - p < 18)
		return false;
	if (p[0] == '0' && p[1] == 'x')
		return lex_fast_hex(p + 2, out, stop);
	return lex_digits_fast(p, false, out, stop);
}

/* The end of the unquoted value at p: the first blank, '#', '=' or '"',
 * or end. */
static inline const char *lex_fast_str_end(const char *p, const char *end,
					   const char *lim)
{
#if TRACE_SSE2
	while (lim - p >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)p);
		__m128i hit = _mm_or_si128(
			_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
				     _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))),
			_mm_or_si128(
				_mm_or_si128(
					_mm_cmpeq_epi8(v, _mm_set1_epi8('#')),
					_mm_cmpeq_epi8(v, _mm_set1_epi8('='))),
				_mm_cmpeq_epi8(v, _mm_set1_epi8('"'))));
		unsigned m = (unsigned)_mm_movemask_epi8(hit);

		/* Bytes past end (the line's ending, the next line) may
		 * hit: the value then runs to end. */
		if (m != 0)
			return p + __builtin_ctz(m) < end ?
				       p + __builtin_ctz(m) : end;
		if (end - p <= 16)
			return end;
		p += 16;
	}
#else
	(void)lim;
#endif
	return trace__scan_to(p, end, C_BLANK | C_HASH | C_EQ | C_QUOTE);
}

/* A list of PTR and PTR+LEN elements at *pp, ended by a blank or the end
 * of the line; false for anything else (names, an empty list). */
static bool lex_fast_list(struct trace_reader *r, enum key k, const char **pp,
			  const char *end, const char *lim, struct fields *f)
{
	bool rd = k == KEY_READ;
	struct op_range **v = rd ? &r->reads : &r->writes;
	size_t *cap = rd ? &r->reads_cap : &r->writes_cap;
	const char *p = *pp, *q;
	size_t n = 0;
	uint64_t ptr, len;

	for (;;) {
		if (n == *cap && grow_array((void **)v, cap, n + 1,
					    sizeof(**v)) < 0)
			return false;
		if (!lex_fast_num(p, lim, &ptr, &q))
			return false;
		len = 1;
		if (q < end && *q == '+' && !lex_fast_num(q + 1, lim, &len, &q))
			return false;
		if (q > end || len == 0 || !trace__range_fits(ptr, len))
			return false;
		(*v)[n++] = (struct op_range){ ptr, len };
		if (q == end || *q == ' ')
			break;
		if (*q != ',')
			return false;
		p = q + 1;
	}
	*(rd ? &f->nreads : &f->nwrites) = n;
	*pp = q;
	return true;
}

/* The value of key k, of `type`, at *pp, its end into *pp; false to give
 * up. */
static bool lex_fast_value(struct trace_reader *r, enum key k, unsigned type,
			   const char **pp, const char *end, const char *lim,
			   struct fields *f)
{
	const char *p = *pp, *q;

	switch (type) {
	case VAL_NUM:
		if (!lex_fast_num(p, lim, &f->num[k], &q) || q > end ||
		    (q < end && *q != ' '))
			return false;
		*pp = q;
		return true;
	case VAL_LIST:
		return lex_fast_list(r, k, pp, end, lim, f);
	default:
		q = lex_fast_str_end(p, end, lim);
		if (q == p || (q < end && *q != ' '))
			return false;
		f->str[k] = (struct str){ p, (size_t)(q - p) };
		*pp = q;
		return true;
	}
}

/* The slot of fast_keys[] for the word at p: a perfect hash of the first
 * three bytes of every "key=" (trace__index_keys() asserts it). */
static inline size_t lex_fast_key_slot(uint64_t w)
{
	return (size_t)(((w & 0xffffff) * 0xbcc99ae80f0c8a89ULL) >> 59);
}

void trace__index_keys(struct trace_reader *r)
{
	_Static_assert(FAST_KEY_SLOTS == 32, "the slot is 5 bits of the hash");
	for (size_t i = 0; i < FAST_KEY_SLOTS; i++)
		r->fast_keys[i] = (struct trace__fast_key){ .word = 1 };
	for (int k = 0; k < KEY_COUNT; k++) {
		struct trace__fast_key *e;
		size_t len = trace__keys[k].len;
		char text[8] = { 0 };
		uint64_t w;

		assert(len + 1 <= sizeof(text));
		memcpy(text, trace__keys[k].name, len);
		text[len] = '=';
		w = lex_load8(text);
		e = &r->fast_keys[lex_fast_key_slot(w)];
		assert(e->mask == 0);
		*e = (struct trace__fast_key){
			.word = w,
			.mask = ~0ULL >> 8 * (7 - len),
			.key = (unsigned char)k,
			.len = (unsigned char)(len + 1),
			.type = trace__keys[k].type,
		};
	}
}

/* The key of the "key=" at p, its length with the '=' and its value's
 * type; -1 for none. */
static inline int lex_fast_key(const struct trace_reader *r, const char *p,
			       const char *end, const char *lim, size_t *len,
			       unsigned *type)
{
	const struct trace__fast_key *e;
	uint64_t w;
	int k;

	if (lim - p < 8) {
		k = key_at(p, end);
		*len = k < 0 ? 0 : trace__keys[k].len + 1u;
		*type = k < 0 ? 0 : trace__keys[k].type;
		return k;
	}
	/* Bytes past end may be loaded, never matched: the byte at end
	 * ends the line ('\n' or '\r'), which no key holds. */
	w = lex_load8(p);
	e = &r->fast_keys[lex_fast_key_slot(w)];
	if ((w & e->mask) != e->word)
		return -1;
	*len = e->len;
	*type = e->type;
	return e->key;
}

int trace__parse_fast(struct trace_reader *r, const struct directive *d,
		      const char *p, const char *end, struct fields *f)
{
	const char *lim = lex_limit(r);
	uint32_t keys = d->allowed & r->version_keys & ~BIT(FRAME);
	uint32_t open = keys;
	size_t len;
	unsigned type;
	int k;

	assert(r->version_keys == version_keys(r->version));
	while (p < end) {
		if (*p != ' ' || ++p == end)
			return 0;
		k = lex_fast_key(r, p, end, lim, &len, &type);
		if (k < 0 || !(open & 1u << k))
			return 0;
		open &= ~(1u << k);
		p += len;
		if (!lex_fast_value(r, (enum key)k, type, &p, end, lim, f))
			return 0;
	}
	f->seen = keys & ~open;
	return (d->required & ~f->seen) == 0;
}

void trace__set_version(struct trace_reader *r, unsigned version)
{
	r->version = version;
	r->version_keys = version_keys(version);
}
