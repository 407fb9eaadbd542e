/*
 * table.c - aligned columns (see table.h).
 */
#include "table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "text.h"

#define TABLE_BOLD "\033[1m"
#define TABLE_RESET "\033[0m"
#define TABLE_GAP "  "

struct table_row {
	char **cells;       /* NULL: a break */
	const char **paint; /* NULL, or a code (a literal) per cell */
};

struct table {
	const struct table_col *cols;
	size_t ncols;
	bool color;
	bool started; /* the header is out */
	size_t *width;
	struct table_row *rows; /* added since the last flush */
	size_t nrows, cap, ncells;
};

int table_new(const struct table_col *cols, size_t ncols, bool color,
	      struct table **out)
{
	struct table *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return -ENOMEM;
	t->width = calloc(ncols, sizeof(*t->width));
	if (t->width == NULL) {
		free(t);
		return -ENOMEM;
	}
	t->cols = cols;
	t->ncols = ncols;
	t->color = color;
	*out = t;
	return 0;
}

static void table_drop(struct table *t, size_t from)
{
	for (size_t i = from; i < t->nrows; i++) {
		if (t->rows[i].cells == NULL)
			continue;
		for (size_t c = 0; c < t->ncols; c++)
			free(t->rows[i].cells[c]);
		free(t->rows[i].cells);
		free(t->rows[i].paint);
	}
	t->nrows = from;
}

void table_free(struct table *t)
{
	if (t == NULL)
		return;
	table_drop(t, 0);
	free(t->rows);
	free(t->width);
	free(t);
}

static int table_push(struct table *t, struct table_row r)
{
	if (grow_array((void **)&t->rows, &t->cap, t->nrows + 1,
		       sizeof(*t->rows)) < 0)
		return -ENOMEM;
	t->rows[t->nrows++] = r;
	return 0;
}

int table_add(struct table *t, const char *const *cells,
	      const char *const *paint)
{
	struct table_row r = { calloc(t->ncols, sizeof(char *)), NULL };

	if (r.cells == NULL)
		return -ENOMEM;
	if (paint != NULL) {
		r.paint = malloc(t->ncols * sizeof(*r.paint));
		if (r.paint == NULL)
			goto err;
		memcpy(r.paint, paint, t->ncols * sizeof(*r.paint));
	}
	for (size_t c = 0; c < t->ncols; c++) {
		r.cells[c] = strdup(cells[c] != NULL ? cells[c] : "-");
		if (r.cells[c] == NULL)
			goto err;
		/* Cells hold a daemon's text: made safe before widths count. */
		text_clean(r.cells[c], r.cells[c], strlen(r.cells[c]) + 1);
	}
	if (table_push(t, r) < 0)
		goto err;
	t->ncells++;
	return 0;
err:
	for (size_t c = 0; c < t->ncols; c++)
		free(r.cells[c]);
	free(r.cells);
	free(r.paint);
	return -ENOMEM;
}

int table_break(struct table *t)
{
	return table_push(t, (struct table_row){ NULL, NULL });
}

/* Columns on a terminal: UTF-8 code points, not bytes. */
static size_t table_width(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

static void table_cell(const struct table *t, FILE *out, size_t c,
		       const char *s, const char *paint)
{
	size_t w = table_width(s), pad = t->width[c] > w ? t->width[c] - w : 0;
	bool last = c + 1 == t->ncols;

	if (c > 0)
		fputs(TABLE_GAP, out);
	if (t->cols[c].align == TABLE_RIGHT)
		fprintf(out, "%*s", (int)pad, "");
	if (paint != NULL && t->color)
		fprintf(out, "%s%s%s", paint, s, TABLE_RESET);
	else
		fputs(s, out);
	if (t->cols[c].align == TABLE_LEFT && !last)
		fprintf(out, "%*s", (int)pad, "");
}

void table_flush(struct table *t, FILE *out)
{
	for (size_t c = 0; c < t->ncols; c++) {
		size_t w = table_width(t->cols[c].title);

		if (w > t->width[c])
			t->width[c] = w;
	}
	for (size_t i = 0; i < t->nrows; i++) {
		for (size_t c = 0; t->rows[i].cells != NULL && c < t->ncols;
		     c++) {
			size_t w = table_width(t->rows[i].cells[c]);

			if (w > t->width[c])
				t->width[c] = w;
		}
	}
	if (!t->started) {
		const char *bold = t->color ? TABLE_BOLD : NULL;

		for (size_t c = 0; c < t->ncols; c++)
			table_cell(t, out, c, t->cols[c].title, bold);
		fputc('\n', out);
		t->started = true;
	}
	for (size_t i = 0; i < t->nrows; i++) {
		const struct table_row *r = &t->rows[i];

		for (size_t c = 0; r->cells != NULL && c < t->ncols; c++)
			table_cell(t, out, c, r->cells[c],
				   r->paint != NULL ? r->paint[c] : NULL);
		fputc('\n', out);
	}
	/* What is out is not needed again: only the widths stay. */
	table_drop(t, 0);
}
