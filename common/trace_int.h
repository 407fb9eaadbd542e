/*
 * trace_int.h - what the two halves of the trace reader share: the reader's
 * state, the keys of the format and the tokenizer's byte classes. Internal:
 * only trace_read.c (lines, directives, the operations they make) and
 * trace_lex.c (the fields of one line and their values) include it.
 */
#ifndef NPUSAN_TRACE_INT_H
#define NPUSAN_TRACE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"
#include "u64map.h"

/* At most this many bytes of input (plus the rest of a UTF-8 character)
 * are quoted in a message, each escaped into at most 4 bytes. */
#define QUOTE_MAX 40
#define QUOTE_BUF ((QUOTE_MAX + 3) * 4 + 4)

enum val_type { VAL_NUM, VAL_STR, VAL_LIST };

/* X(enum suffix, key, value type, the first format version with it) for
 * every key of the format. */
#define TRACE_KEYS(X)                \
	X(PID, "pid", VAL_NUM, 1)       \
	X(JOB, "job", VAL_STR, 1)       \
	X(RANK, "rank", VAL_NUM, 1)     \
	X(NAME, "name", VAL_STR, 1)     \
	X(ID, "id", VAL_NUM, 1)         \
	X(FRAME, "frame", VAL_STR, 1)   \
	X(STREAM, "stream", VAL_NUM, 1) \
	X(EVENT, "event", VAL_NUM, 1)   \
	X(ON, "on", VAL_NUM, 1)         \
	X(PTR, "ptr", VAL_NUM, 1)       \
	X(SIZE, "size", VAL_NUM, 1)     \
	X(OP, "op", VAL_STR, 1)         \
	X(READ, "read", VAL_LIST, 1)    \
	X(WRITE, "write", VAL_LIST, 1)  \
	X(LOST, "lost", VAL_NUM, 1)     \
	X(STACK, "stack", VAL_NUM, 1)   \
	X(GRAPH, "graph", VAL_NUM, 2)

enum key {
#define KEY_ENUM(name, str, type, version) KEY_##name,
	TRACE_KEYS(KEY_ENUM)
#undef KEY_ENUM
	KEY_COUNT
};

struct trace__key_def {
	const char *name;
	unsigned char len;
	unsigned char type;
	unsigned char version; /* the first format version with the key */
};

extern const struct trace__key_def trace__keys[KEY_COUNT];

#define BIT(k) (1u << KEY_##k)

enum dir_class { DIR_OP, DIR_PROCESS, DIR_STACK, DIR_RESERVED };

struct directive {
	const char *word;
	unsigned char len;
	unsigned char cls;
	unsigned char kind;
	unsigned char version; /* the first format version with the word */
	uint32_t allowed;
	uint32_t required;
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
	bool named_reads, named_writes; /* an element said @NAME */
};

/* Operator names a reader interned lately, by a hash of their bytes: a
 * launch's name is nearly always one of a few dozen (trace_read.c). */
#define NAME_CACHE 64

struct trace_name {
	const char *p; /* the symtab's copy, stable until symtab_free() */
	size_t len;
	uint32_t id;
};

/* A "key=" as a word of its bytes (the first in the lowest byte), for
 * the fast path's one compare; an empty slot matches nothing. */
struct trace__fast_key {
	uint64_t word;
	uint64_t mask;
	unsigned char key;
	unsigned char len; /* with the '=' */
	unsigned char type;
};

#define FAST_KEY_SLOTS 32

struct trace_reader {
	struct symtab *syms;
	char *name;
	int fd; /* -1 for a memory reader */
	bool close_fd;
	bool eof;
	/* Unparsed input is buf[start, end); no '\n' in buf[start, scan),
	 * and `dirty` when a byte of it is not printable ASCII (DESIGN 2). */
	const char *buf;
	char *own; /* buf of a file reader, `cap` bytes */
	size_t cap;
	size_t start;
	size_t scan;
	size_t end;
	bool dirty;
	uint64_t base; /* input bytes before buf[0] */
	unsigned long line;
	unsigned long op_line;
	unsigned long process_line;
	size_t line_len;
	unsigned version; /* of the header; 0 before it */
	uint32_t version_keys; /* bits of the keys of `version` */
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
	/* Each element's @NAME (len 0: none) while the line is read, then
	 * its symtab id for the op; grown with reads and writes. */
	struct str *read_names;
	struct str *write_names;
	size_t read_names_cap;
	size_t write_names_cap;
	uint32_t *read_args;
	uint32_t *write_args;
	size_t read_args_cap;
	size_t write_args_cap;
	uint32_t *frames;
	size_t frames_cap;
	char *scratch;
	size_t scratch_cap;
	size_t scratch_used;
	struct trace_name names[NAME_CACHE];
	struct trace__fast_key fast_keys[FAST_KEY_SLOTS];
};

/* Sets the reader's error, "FILE:LINE: " and the message (DESIGN 4 of
 * trace_read.c); returns `err`. */
__attribute__((format(printf, 3, 4)))
int trace__fail(struct trace_reader *r, int err, const char *fmt, ...);

/* The error of a symtab that refused to intern; returns `err`. */
int trace__fail_symtab(struct trace_reader *r, int err);

/*
 * Input bytes made printable for a message: control characters and DEL
 * escaped, cut after QUOTE_MAX bytes at a character boundary. Returns `out`,
 * which holds QUOTE_BUF bytes.
 */
const char *trace__quote(char *out, const char *p, size_t len);

/*
 * The first byte in [p, end) that is not printable ASCII (0x20 to 0x7f):
 * a '\n', another control character or a byte of a UTF-8 sequence; end
 * when there is none. A line without one passes trace__line_check(), so
 * the search for its end checks it too (DESIGN 2). 16 bytes at a time
 * with SSE2, 8 elsewhere; it loads no byte outside [p, end).
 */
const char *trace__find_special(const char *p, const char *end);

/* The lexical rules that hold for every byte of a line (DESIGN 2). */
int trace__line_check(struct trace_reader *r, const char *line, size_t len);

/* Parses the key=value fields of directive d in [p, end) into f, which
 * the caller zeroed. 0 or the error (trace__fail()). */
int trace__parse_fields(struct trace_reader *r, const struct directive *d,
			const char *p, const char *end, struct fields *f);

/*
 * trace__parse_fields() of the lines the writer writes (trace_read.c's
 * DESIGN 6): 1 with their fields in f, which the caller zeroed; 0 when
 * the line is not one of them, with f to be zeroed again and the line
 * read by trace__parse_fields(). Nothing else changes but the reader's
 * range lists, which the next line overwrites anyway.
 */
int trace__parse_fast(struct trace_reader *r, const struct directive *d,
		      const char *p, const char *end, struct fields *f);

/* Fills the reader's fast_keys[]. */
void trace__index_keys(struct trace_reader *r);

/* Sets the version of the header just read, and the keys it has. */
void trace__set_version(struct trace_reader *r, unsigned version);

/* Byte classes of the tokenizer; one table lookup per byte. */
enum { C_BLANK = 1, C_HASH = 2, C_EQ = 4, C_QUOTE = 8 };
extern const unsigned char trace__cls[256];

static inline bool trace__is_blank(char c)
{
	return trace__cls[(unsigned char)c] & C_BLANK;
}

/* A blank or the start of a comment ends a bare token. */
static inline bool trace__ends_token(char c)
{
	return trace__cls[(unsigned char)c] & (C_BLANK | C_HASH);
}

/* The first byte in [p, end) of a class in `mask`, or end. */
static inline const char *trace__scan_to(const char *p, const char *end,
					 unsigned mask)
{
	while (p < end && !(trace__cls[(unsigned char)*p] & mask))
		p++;
	return p;
}

static inline const char *trace__skip_blanks(const char *p, const char *end)
{
	while (p < end && trace__is_blank(*p))
		p++;
	return p;
}

/* The end of a bare token: a blank, a comment or the end of the line. */
static inline const char *trace__token_end(const char *p, const char *end)
{
	return trace__scan_to(p, end, C_BLANK | C_HASH);
}

/* True when [ptr, ptr + len) ends at or before 2^64; len is at least 1. */
static inline bool trace__range_fits(uint64_t ptr, uint64_t len)
{
	return len - 1 <= UINT64_MAX - ptr;
}

#endif
