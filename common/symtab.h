/*
 * symtab.h - interned strings and stacks of one process.
 *
 * Operator names and stack frames repeat millions of times in a run; they are
 * stored here once and referred to everywhere else by a 32-bit id. Equal
 * contents always get the same id, so ids can be compared instead of
 * strings (the engine's deduplication relies on that). Id 0 means "none":
 * no string, or the empty stack.
 *
 * Caller owns the symtab; release with symtab_free(), which accepts NULL.
 * Pointers returned by symtab_str() and symtab_stack() stay valid until
 * symtab_free().
 */
#ifndef NPUSAN_SYMTAB_H
#define NPUSAN_SYMTAB_H

#include <stddef.h>
#include <stdint.h>

struct symtab;

/* 0, or -ENOMEM. */
int symtab_new(struct symtab **out);
void symtab_free(struct symtab *t);

/*
 * Interns the `len` bytes at `s` (which may hold any byte but NUL) and
 * stores the id, at least 1, in *id. 0; -ENOMEM; -E2BIG when the table
 * holds 2^32 - 1 entries already.
 */
int symtab_intern(struct symtab *t, const char *s, size_t len, uint32_t *id);

/*
 * The NUL-terminated string of `id`, its length in *len when len is not
 * NULL; NULL (and *len 0) for id 0 or an id this table never gave out.
 */
const char *symtab_str(const struct symtab *t, uint32_t id, size_t *len);

/*
 * Interns the stack of `n` frames (string ids from symtab_intern(),
 * innermost first) and stores its id in *id: 0 for n == 0, else at least 1.
 * 0; -ENOMEM; -EINVAL when a frame is not a string id of this table;
 * -E2BIG as for symtab_intern().
 */
int symtab_intern_stack(struct symtab *t, const uint32_t *frames, size_t n,
			uint32_t *id);

/*
 * The frames of stack `id` in *frames (innermost first) and their number;
 * 0 for id 0 or an unknown id.
 */
size_t symtab_stack(const struct symtab *t, uint32_t id,
		    const uint32_t **frames);

/* Bytes of memory the table holds. */
size_t symtab_bytes(const struct symtab *t);

#endif
