/*
 * suppress.c - parsing suppression files, matching findings against them
 * and writing entries for findings (docs/suppressions.md).
 *
 * The parser works on the file's text in memory, so that a caller may
 * take the text from anywhere; suppress_load() is the one place that
 * reads a file. A set owns copies of every string it keeps; the views
 * handed to suppress_match() are only borrowed for the call.
 *
 * DESIGN
 *  1. An entry matches when its kind matches and one access (the access
 *     or the previous one) satisfies op, module and frame together, and
 *     the allocation's stack satisfies alloc-frame.
 *  2. A frame list matches the stack from its innermost frame on, like a
 *     prefix: frames past the last pattern are not looked at; `...`
 *     stands for any number of frames, none included.
 *  3. Every pattern is checked when it is parsed, so that a bad one is a
 *     FILE:LINE error, never a silent non-match.
 */
#include "suppress.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "grow.h"
#include "native_frame.h"
#include "text.h"

/* The pattern that stands for any number of frames. */
#define SUPPRESS_ANY_FRAMES "..."
/* Bytes of a suppression file read at most: it is written by a person. */
#define SUPPRESS_FILE_MAX (16u << 20)

struct suppress_pats {
	char **v;
	size_t n, cap;
};

struct suppress_entry {
	char *name;
	unsigned line; /* of its '{' */
	char *kind;    /* a kind's name, or "*" */
	char *op;      /* NULL: any */
	char *module;  /* NULL: any */
	struct suppress_pats frames, alloc;
	uint64_t matched;
};

struct suppress_set {
	struct suppress_entry *v;
	size_t n, cap;
};

/* X(key, field kind): the keys of a block, in the order docs give them. */
#define SUPPRESS_KEYS(X)             \
	X(NAME, "name")              \
	X(KIND, "kind")              \
	X(OP, "op")                  \
	X(FRAME, "frame")            \
	X(ALLOC_FRAME, "alloc-frame") \
	X(MODULE, "module")

enum suppress_key {
#define SUPPRESS_KEY_ENUM(k, s) SUPPRESS_KEY_##k,
	SUPPRESS_KEYS(SUPPRESS_KEY_ENUM)
	SUPPRESS_KEY_COUNT
};

static const char *const suppress_key_names[] = {
#define SUPPRESS_KEY_NAME(k, s) s,
	SUPPRESS_KEYS(SUPPRESS_KEY_NAME)
};

/* The parser's position and the block it is in. */
struct suppress_parser {
	const char *file;
	unsigned line;
	struct suppress_set *set;
	struct suppress_entry *cur; /* NULL outside a block */
	char *err;
};

/* ---- entries ------------------------------------------------------------- */

static void suppress_pats_free(struct suppress_pats *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
}

static void suppress_entry_free(struct suppress_entry *e)
{
	free(e->name);
	free(e->kind);
	free(e->op);
	free(e->module);
	suppress_pats_free(&e->frames);
	suppress_pats_free(&e->alloc);
}

void suppress_free(struct suppress_set *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->n; i++)
		suppress_entry_free(&s->v[i]);
	free(s->v);
	free(s);
}

/* Appends `pat` (taken over: freed on failure) to `p`. 0; -ENOMEM. */
static int suppress_pats_add(struct suppress_pats *p, char *pat)
{
	if (grow_array((void **)&p->v, &p->cap, p->n + 1, sizeof(*p->v)) < 0) {
		free(pat);
		return -ENOMEM;
	}
	p->v[p->n++] = pat;
	return 0;
}

/* ---- parsing ------------------------------------------------------------- */

static int suppress_fail(struct suppress_parser *ps, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "FILE:LINE: " and the message into ps->err. -EINVAL. */
static int suppress_fail(struct suppress_parser *ps, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(ps->err, SUPPRESS_ERR_MAX, "%s:%u: ", ps->file, ps->line);
	if (n < 0 || n >= SUPPRESS_ERR_MAX)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(ps->err + n, SUPPRESS_ERR_MAX - (size_t)n, fmt, ap);
	va_end(ap);
	text_clean(ps->err, ps->err, SUPPRESS_ERR_MAX);
	return -EINVAL;
}

/*
 * Why glob `pat` is no pattern fnmatch(3) reads as written (a '[' never
 * closed, a '\' escaping nothing), or NULL when it is one. fnmatch()
 * itself would take either silently as a literal character.
 */
static const char *suppress_pattern_flaw(const char *pat)
{
	for (const char *p = pat; *p != '\0'; p++) {
		if (*p == '\\') {
			if (*++p == '\0')
				return "it ends in a '\\' that escapes nothing";
		} else if (*p == '[') {
			const char *q = p + 1;

			if (*q == '!' || *q == '^')
				q++;
			if (*q == ']')
				q++;
			q = strchr(q, ']');
			if (q == NULL)
				return "a '[' is never closed by ']'";
			p = q;
		}
	}
	return NULL;
}

static bool suppress_kind_known(const char *name)
{
	enum finding_kind k;

	return strcmp(name, "*") == 0 || finding_kind_of(name, &k);
}

/* Writes the known kinds, comma-separated, into `out` (`cap` bytes). */
static void suppress_kind_list(char *out, size_t cap)
{
	size_t len = 0;

	out[0] = '\0';
	for (int k = 0; k < FINDING_KIND_COUNT && len < cap; k++)
		len += (size_t)snprintf(out + len, cap - len, "%s%s",
					k ? ", " : "",
					finding_kind_name((enum finding_kind)k));
}

/* Stores `val` into the single-valued field *dst for key `key`. */
static int suppress_set_once(struct suppress_parser *ps, const char *key,
			     char **dst, const char *val)
{
	if (*dst != NULL)
		return suppress_fail(ps, "'%s' given twice in one block", key);
	*dst = strdup(val);
	return *dst == NULL ? -ENOMEM : 0;
}

static int suppress_value(struct suppress_parser *ps, enum suppress_key key,
			  const char *val)
{
	struct suppress_entry *e = ps->cur;
	const char *name = suppress_key_names[key];
	const char *flaw = suppress_pattern_flaw(val);
	char kinds[256];

	if (key == SUPPRESS_KEY_NAME)
		return suppress_set_once(ps, name, &e->name, val);
	if (flaw != NULL)
		return suppress_fail(ps, "bad pattern '%s': %s", val, flaw);
	if (key == SUPPRESS_KEY_FRAME || key == SUPPRESS_KEY_ALLOC_FRAME) {
		char *pat = strdup(val);

		if (pat == NULL)
			return -ENOMEM;
		return suppress_pats_add(key == SUPPRESS_KEY_FRAME ? &e->frames
								   : &e->alloc,
					 pat);
	}
	if (strcmp(val, SUPPRESS_ANY_FRAMES) == 0)
		return suppress_fail(ps, "'...' stands for frames: it goes "
					 "in 'frame' and 'alloc-frame' only");
	if (key == SUPPRESS_KEY_OP)
		return suppress_set_once(ps, name, &e->op, val);
	if (key == SUPPRESS_KEY_MODULE)
		return suppress_set_once(ps, name, &e->module, val);
	assert(key == SUPPRESS_KEY_KIND);
	if (!suppress_kind_known(val)) {
		suppress_kind_list(kinds, sizeof(kinds));
		return suppress_fail(ps, "unknown finding kind '%s' (known: "
					 "%s, or * for any)",
				     val, kinds);
	}
	return suppress_set_once(ps, name, &e->kind, val);
}

/* The key of `key` (`n` bytes) into *out. false when it is none. */
static bool suppress_key_of(const char *key, size_t n, enum suppress_key *out)
{
	for (int k = 0; k < SUPPRESS_KEY_COUNT; k++) {
		if (strlen(suppress_key_names[k]) == n &&
		    memcmp(suppress_key_names[k], key, n) == 0) {
			*out = (enum suppress_key)k;
			return true;
		}
	}
	return false;
}

/* One "key: value" line of a block, blanks trimmed already. */
static int suppress_pair(struct suppress_parser *ps, char *s)
{
	char *colon = strchr(s, ':'), *val;
	size_t klen;
	enum suppress_key key;

	if (colon == NULL)
		return suppress_fail(ps, "expected 'key: value' or '}', not "
					 "'%s'",
				     s);
	klen = (size_t)(colon - s);
	while (klen > 0 && (s[klen - 1] == ' ' || s[klen - 1] == '\t'))
		klen--;
	if (!suppress_key_of(s, klen, &key))
		return suppress_fail(ps, "unknown key '%.*s' (known: name, "
					 "kind, op, frame, alloc-frame, "
					 "module)",
				     (int)klen, s);
	val = colon + 1;
	val += strspn(val, " \t");
	if (*val == '\0')
		return suppress_fail(ps, "'%s' needs a value",
				     suppress_key_names[key]);
	return suppress_value(ps, key, val);
}

/* Opens a block at '{'. */
static int suppress_open(struct suppress_parser *ps)
{
	struct suppress_set *set = ps->set;

	if (ps->cur != NULL)
		return suppress_fail(ps, "'{' inside a block: the one opened "
					 "at line %u is not closed",
				     ps->cur->line);
	if (grow_array((void **)&set->v, &set->cap, set->n + 1,
		       sizeof(*set->v)) < 0)
		return -ENOMEM;
	ps->cur = &set->v[set->n++];
	memset(ps->cur, 0, sizeof(*ps->cur));
	ps->cur->line = ps->line;
	return 0;
}

/* Closes the block at '}': it needs a kind; it is named after its place
 * when it has no name. */
static int suppress_close(struct suppress_parser *ps)
{
	struct suppress_entry *e = ps->cur;
	char name[SUPPRESS_ERR_MAX];

	if (e == NULL)
		return suppress_fail(ps, "'}' closes no block");
	if (e->kind == NULL)
		return suppress_fail(ps, "the block opened at line %u has no "
					 "'kind'",
				     e->line);
	if (e->name == NULL) {
		snprintf(name, sizeof(name), "%s:%u", ps->file, e->line);
		e->name = strdup(name);
		if (e->name == NULL)
			return -ENOMEM;
	}
	ps->cur = NULL;
	return 0;
}

/* One line, its end-of-line blanks (and a '\r') trimmed. */
static int suppress_line(struct suppress_parser *ps, char *s)
{
	size_t n;

	s += strspn(s, " \t");
	n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' ||
			 s[n - 1] == '\r'))
		s[--n] = '\0';
	if (n == 0 || s[0] == '#')
		return 0;
	if (strcmp(s, "{") == 0)
		return suppress_open(ps);
	if (strcmp(s, "}") == 0)
		return suppress_close(ps);
	if (ps->cur == NULL)
		return suppress_fail(ps, "expected '{' to open a block, not "
					 "'%s'",
				     s);
	return suppress_pair(ps, s);
}

/* Parses a copy of the text, line by line, into ps->set. */
static int suppress_lines(struct suppress_parser *ps, char *buf, size_t len)
{
	char *s = buf, *end = buf + len, *nl;
	int err = 0;

	while (s < end && err == 0) {
		nl = memchr(s, '\n', (size_t)(end - s));
		if (nl == NULL)
			nl = end;
		*nl = '\0';
		ps->line++;
		if (strlen(s) != (size_t)(nl - s))
			return suppress_fail(ps, "a NUL byte: this is no text "
						 "file");
		err = suppress_line(ps, s);
		s = nl + 1;
	}
	if (err == 0 && ps->cur != NULL)
		err = suppress_fail(ps, "the block opened at line %u is not "
					"closed by '}'",
				    ps->cur->line);
	return err;
}

int suppress_parse(const char *file, const char *text, size_t len,
		   struct suppress_set **out, char err[SUPPRESS_ERR_MAX])
{
	struct suppress_parser ps = { .file = file, .err = err };
	char *buf = malloc(len + 1);
	int rc = -ENOMEM;

	err[0] = '\0';
	ps.set = calloc(1, sizeof(*ps.set));
	if (buf != NULL && ps.set != NULL) {
		memcpy(buf, text, len);
		buf[len] = '\0';
		rc = suppress_lines(&ps, buf, len);
	}
	free(buf);
	if (rc == -ENOMEM && err[0] == '\0')
		snprintf(err, SUPPRESS_ERR_MAX, "%s: out of memory", file);
	if (rc < 0) {
		suppress_free(ps.set);
		return rc;
	}
	*out = ps.set;
	return 0;
}

/* Reads all of `fd` into *buf (malloc'd), its length into *len. */
static int suppress_read(int fd, char **buf, size_t *len)
{
	size_t cap = 0, n = 0;
	char *b = NULL;
	ssize_t got = 0;

	for (;;) {
		if (n == SUPPRESS_FILE_MAX) {
			free(b);
			return -EFBIG;
		}
		if (grow_array((void **)&b, &cap, n + 4096, 1) < 0) {
			free(b);
			return -ENOMEM;
		}
		got = read(fd, b + n, cap - n < SUPPRESS_FILE_MAX - n
					      ? cap - n
					      : SUPPRESS_FILE_MAX - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
	}
	if (got < 0) {
		free(b);
		return -errno;
	}
	*buf = b;
	*len = n;
	return 0;
}

int suppress_load(const char *path, struct suppress_set **out,
		  char err[SUPPRESS_ERR_MAX])
{
	char *buf = NULL;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0) {
		rc = -errno;
	} else {
		rc = suppress_read(fd, &buf, &len);
		close(fd);
	}
	if (rc < 0) {
		snprintf(err, SUPPRESS_ERR_MAX, "%s: %s", path,
			 rc == -EFBIG ? "larger than 16 MiB: no suppression "
					"file"
				      : strerror(-rc));
		text_clean(err, err, SUPPRESS_ERR_MAX);
		return rc;
	}
	rc = suppress_parse(path, buf, len, out, err);
	free(buf);
	return rc;
}

/* ---- matching ------------------------------------------------------------ */

static bool suppress_glob(const char *pat, const char *s)
{
	return s != NULL && fnmatch(pat, s, 0) == 0;
}

/*
 * Whether frame patterns `p` match stack `st` from its innermost frame
 * on (DESIGN 2): a wildcard match where `...` is the star, backtracking
 * only to the latest `...`, which is enough and keeps it O(patterns x
 * frames).
 */
static bool suppress_frames(const struct suppress_pats *p,
			    const struct finding_stack *st)
{
	size_t i = 0, j = 0, star = SIZE_MAX, mark = 0;

	while (i < p->n) {
		if (strcmp(p->v[i], SUPPRESS_ANY_FRAMES) == 0) {
			star = i++;
			mark = j;
		} else if (j < st->n && suppress_glob(p->v[i], st->frames[j])) {
			i++;
			j++;
		} else if (star != SIZE_MAX && mark < st->n) {
			i = star + 1;
			j = ++mark;
		} else {
			return false;
		}
	}
	return true;
}

/*
 * The module part of `frame` into `out` (`cap` bytes): the module path of
 * a native frame as the agent records it (common/native_frame.h), what
 * comes before the last "+0x" of an old trace's "libfoo.so+0x1320", before
 * the last ":LINE" of "train.py:14 in step", else all of it.
 */
static const char *suppress_module_of(const char *frame, char *out,
				      size_t cap)
{
	struct native_frame nf;
	const char *end = NULL, *p;
	size_t n;

	if (native_frame_parse(frame, &nf) == 0) {
		frame = nf.path;
		end = nf.path + nf.path_len;
	}
	if (end == NULL)
		for (p = strstr(frame, "+0x"); p != NULL;
		     p = strstr(p + 1, "+0x"))
			end = p;
	for (p = frame; end == NULL && *p != '\0'; p++)
		if (*p == ':' && p[1] >= '0' && p[1] <= '9')
			end = p;
	n = end != NULL ? (size_t)(end - frame) : strlen(frame);
	if (n >= cap)
		n = cap - 1;
	memcpy(out, frame, n);
	out[n] = '\0';
	return out;
}

/* Whether a frame of `st` lies in a module matching `pat`: by its path or
 * by the path's last component. */
static bool suppress_module(const char *pat, const struct finding_stack *st)
{
	char mod[4096];
	const char *base;

	for (size_t i = 0; i < st->n; i++) {
		if (st->frames[i] == NULL)
			continue;
		suppress_module_of(st->frames[i], mod, sizeof(mod));
		base = strrchr(mod, '/');
		if (suppress_glob(pat, mod) ||
		    (base != NULL && suppress_glob(pat, base + 1)))
			return true;
	}
	return false;
}

static bool suppress_access(const struct suppress_entry *e,
			    const struct finding_view_access *a)
{
	/* An operator npusan could not name is "?", as reports print it
	 * and npusand stores it. */
	const char *op = a->op != NULL ? a->op : "?";

	return (e->op == NULL || suppress_glob(e->op, op)) &&
	       (e->module == NULL || suppress_module(e->module, &a->stack)) &&
	       suppress_frames(&e->frames, &a->stack);
}

static bool suppress_entry_matches(const struct suppress_entry *e,
				   const struct finding_view *f)
{
	if (!suppress_glob(e->kind, f->kind))
		return false;
	if (e->alloc.n > 0 &&
	    !(f->has_alloc && suppress_frames(&e->alloc, &f->alloc.stack)))
		return false;
	return suppress_access(e, &f->access) ||
	       (f->has_previous && suppress_access(e, &f->previous));
}

long suppress_find(const struct suppress_set *s, const struct finding_view *f)
{
	for (size_t i = 0; s != NULL && i < s->n; i++) {
		if (suppress_entry_matches(&s->v[i], f))
			return (long)i;
	}
	return -1;
}

const char *suppress_match(struct suppress_set *s,
			   const struct finding_view *f)
{
	long i = suppress_find(s, f);

	if (i < 0)
		return NULL;
	s->v[i].matched++;
	return s->v[i].name;
}

size_t suppress_entries(const struct suppress_set *s)
{
	return s != NULL ? s->n : 0;
}

const char *suppress_entry_name(const struct suppress_set *s, size_t i)
{
	assert(i < s->n);
	return s->v[i].name;
}

unsigned suppress_entry_line(const struct suppress_set *s, size_t i)
{
	assert(i < s->n);
	return s->v[i].line;
}

uint64_t suppress_entry_matched(const struct suppress_set *s, size_t i)
{
	assert(i < s->n);
	return s->v[i].matched;
}

/* ---- reporting ----------------------------------------------------------- */

void suppress_say(FILE *out, const char *who, const struct suppress_set *s)
{
	uint64_t total = 0;

	if (s == NULL || s->n == 0)
		return;
	for (size_t i = 0; i < s->n; i++)
		total += s->v[i].matched;
	fprintf(out, "%s: %" PRIu64 " finding%s suppressed\n", who, total,
		total == 1 ? "" : "s");
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].matched > 0)
			fprintf(out, "%s:   %" PRIu64 " by '", who,
				s->v[i].matched);
		else
			fprintf(out, "%s:   suppression '", who);
		text_put(out, s->v[i].name);
		fprintf(out, "' (line %u)%s\n", s->v[i].line,
			s->v[i].matched > 0 ? "" : " matched nothing");
	}
}

/*
 * Writes `s` as a glob that matches `s`: every character fnmatch(3) reads
 * specially is escaped, and a value "..." too; what a line cannot carry
 * as it is (a control character, a blank at either end, which the parser
 * trims) becomes '?', which matches it.
 */
static void suppress_gen_literal(FILE *out, const char *s)
{
	size_t n = strlen(s);

	if (strcmp(s, SUPPRESS_ANY_FRAMES) == 0) {
		fputs("\\...", out);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		bool edge = i == 0 || i == n - 1;

		if (c < 0x20 || c == 0x7f || (edge && c == ' '))
			c = '?';
		else if (strchr("*?[]\\", c) != NULL)
			fputc('\\', out);
		fputc(c, out);
	}
}

static void suppress_gen_line(FILE *out, const char *key, const char *val)
{
	fprintf(out, "   %s: ", key);
	suppress_gen_literal(out, val);
	fputc('\n', out);
}

void suppress_gen(FILE *out, const struct finding_view *f)
{
	fprintf(out, "{\n   name: %s-%" PRIu64 "\n", f->kind, f->id);
	suppress_gen_line(out, "kind", f->kind);
	if (f->access.op != NULL)
		suppress_gen_line(out, "op", f->access.op);
	for (size_t i = 0; i < f->access.stack.n; i++)
		if (f->access.stack.frames[i] != NULL)
			suppress_gen_line(out, "frame",
					  f->access.stack.frames[i]);
		else
			fputs("   frame: *\n", out);
	fputs("}\n", out);
}
