/*
 * text.c - the one policy for text from outside (see text.h).
 */
#include "text.h"

#include <string.h>

#include "utf8.h"

/* The length of the character at p, 0 for a byte that starts none. */
static size_t text_seq(const unsigned char *p, size_t avail)
{
	return p[0] < 0x80 ? 1 : utf8_seq(p, avail);
}

bool text_shown(const unsigned char *p, size_t avail, size_t *n)
{
	size_t len = text_seq(p, avail);

	*n = len > 0 ? len : 1;
	if (len == 1)
		return p[0] >= 0x20 && p[0] != 0x7f;
	/* C1 controls are U+0080..U+009F: 0xc2 0x80..0x9f. */
	return len > 1 && !(p[0] == 0xc2 && p[1] < 0xa0);
}

bool text_trace_char(const unsigned char *p, size_t avail, size_t *n)
{
	size_t len = text_seq(p, avail);

	*n = len > 0 ? len : 1;
	if (len == 1)
		return p[0] >= 0x20 || p[0] == '\t' || p[0] == '\n';
	return len > 1;
}

/* Copies what `ok` accepts of [s, s + len) into out, the rest as '?'. */
static size_t text_copy(const char *s, size_t len, char *out, size_t cap,
			bool (*ok)(const unsigned char *, size_t, size_t *))
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0, n;

	if (cap == 0)
		return 0;
	while (len > 0) {
		bool keep = ok(p, len, &n);
		size_t put = keep ? n : 1;

		if (o + put > cap - 1)
			break;
		if (keep)
			memmove(out + o, p, n);
		else
			out[o] = '?';
		o += put;
		p += n;
		len -= n;
	}
	out[o] = '\0';
	return o;
}

char *text_clean(const char *s, char *out, size_t cap)
{
	if (s == NULL || cap == 0)
		return NULL;
	return text_copy(s, strlen(s), out, cap, text_shown) > 0 ? out : NULL;
}

size_t text_keep(const char *s, size_t len, char *out, size_t cap)
{
	return text_copy(s, len, out, cap, text_trace_char);
}

void text_put(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t avail = strlen(s), n;

	while (avail > 0) {
		if (text_shown(p, avail, &n))
			fwrite(p, 1, n, f);
		else
			fputc('?', f);
		p += n;
		avail -= n;
	}
}
