/*
 * suppress.h - suppression files (docs/suppressions.md): which findings a
 * user has looked at and chosen not to be told about again.
 *
 * A file holds blocks, each keyed on a finding kind, with globs over an
 * access's operator, its stack (a sequence of frame patterns, `...` for
 * any frames), its module, and the allocation's stack. A block matches a
 * finding when one of its accesses (the access or the previous one)
 * satisfies every access pattern, as TSan's `race:` matches either stack.
 * The one parser and matcher for npusanctl and npusand: both suppress the
 * same findings for the same file.
 *
 * A set owns copies of everything it parsed; it counts, per entry, the
 * findings suppress_match() gave it, which only its owner may call;
 * suppress_find() may be called from any number of threads at once.
 */
#ifndef NPUSAN_SUPPRESS_H
#define NPUSAN_SUPPRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "finding_view.h"

/* A message names the file and line: "FILE:LINE: what is wrong". */
#define SUPPRESS_ERR_MAX 512

struct suppress_set;

/*
 * Parses `len` bytes of `text`, the content of the file named `file` (used
 * in messages and in default entry names), into *out; the caller owns it,
 * to free with suppress_free(). 0; -EINVAL with "FILE:LINE: what is wrong"
 * in `err` (an unknown key, a bad pattern, an unknown kind, a block left
 * open, a NUL byte); -ENOMEM. An empty file is an empty set.
 */
int suppress_parse(const char *file, const char *text, size_t len,
		   struct suppress_set **out, char err[SUPPRESS_ERR_MAX]);

/* Reads file `path` and parses it as suppress_parse() does. 0; a negative
 * errno with "PATH: why" or "PATH:LINE: why" in `err`. */
int suppress_load(const char *path, struct suppress_set **out,
		  char err[SUPPRESS_ERR_MAX]);

/* Frees `s`; accepts NULL. */
void suppress_free(struct suppress_set *s);

/*
 * The index of the first entry of `s` (in file order) that matches `f`;
 * -1 when none does or `s` is NULL. Counts nothing and writes nothing, so
 * that several threads may ask one set at once.
 */
long suppress_find(const struct suppress_set *s, const struct finding_view *f);

/*
 * The name of the first entry of `s` (in file order) that matches `f`,
 * counting `f` for it; NULL when none does or `s` is NULL. The name lives
 * as long as `s`.
 */
const char *suppress_match(struct suppress_set *s,
			   const struct finding_view *f);

/* How many entries `s` holds (0 for NULL). */
size_t suppress_entries(const struct suppress_set *s);

/* Entry `i`'s name, the line its block opened at, and how many findings
 * suppress_match() gave it. */
const char *suppress_entry_name(const struct suppress_set *s, size_t i);
unsigned suppress_entry_line(const struct suppress_set *s, size_t i);
uint64_t suppress_entry_matched(const struct suppress_set *s, size_t i);

/*
 * The summary of a run on `out`, each line prefixed by `who`: how many
 * findings each entry suppressed and which entries matched nothing (as
 * TSan's print_suppressions and valgrind -v do). Nothing for NULL.
 */
void suppress_say(FILE *out, const char *who, const struct suppress_set *s);

/*
 * Writes to `out` an entry that matches `f`, ready to paste into a
 * suppression file: its kind, the access's operator and every frame of
 * its stack, glob characters escaped (suppress_parse() reads it back as
 * an entry matching `f`). Named after the kind and the finding's id.
 */
void suppress_gen(FILE *out, const struct finding_view *f);

#endif
