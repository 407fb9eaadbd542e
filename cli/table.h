/*
 * table.h - aligned columns for people to read.
 *
 * Rows are added, then flushed: the first flush prints the header and
 * sizes every column to its widest cell so far; later flushes (rows a
 * followed query pushed) widen a column when a new cell needs it but never
 * reprint what is out. Cells are copied; the last column is not padded, so
 * no line ends in spaces. Colour codes never count towards a width.
 */
#ifndef NPUSAN_TABLE_H
#define NPUSAN_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum table_align { TABLE_LEFT, TABLE_RIGHT };

struct table_col {
	const char *title;
	enum table_align align;
};

struct table;

/*
 * A table of `ncols` columns (`cols` is borrowed and must outlive it),
 * coloured when `color`. Caller owns *out; release with table_free(),
 * which accepts NULL. 0; -ENOMEM.
 */
int table_new(const struct table_col *cols, size_t ncols, bool color,
	      struct table **out);
void table_free(struct table *t);

/*
 * Adds a row of ncols cells (NULL prints as "-"), which are copied;
 * `paint` is NULL or ncols ANSI colour codes (NULL entries for none): the
 * array is copied, the codes themselves borrowed (string literals); they
 * are used only when colouring. 0; -ENOMEM.
 */
int table_add(struct table *t, const char *const *cells,
	      const char *const *paint);

/* Adds an empty line between rows (a group's end). 0; -ENOMEM. */
int table_break(struct table *t);

/* Prints the rows added since the last flush (the header the first time). */
void table_flush(struct table *t, FILE *out);

#endif
