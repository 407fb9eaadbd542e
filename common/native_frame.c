/*
 * native_frame.c - reads the text the agent writes for a native frame.
 *
 * Owns nothing: a parsed frame points into the caller's text. The form is
 * defined once, in native_frame.h; the agent writes it (agent/stack.c),
 * the symbolizer and the suppressions' module patterns read it here.
 */
#include "native_frame.h"

#include <errno.h>
#include <string.h>

static int native_frame_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The build id in "HEX" (`n` characters, an even count) into `r`. */
static int native_frame_parse_build_id(const char *hex, size_t n,
				    struct native_frame *r)
{
	if (n == 0 || n % 2 != 0 || n / 2 > NATIVE_FRAME_BUILD_ID_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 2) {
		int hi = native_frame_hex_digit(hex[i]);
		int lo = native_frame_hex_digit(hex[i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		r->build_id[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	r->build_id_len = n / 2;
	return 0;
}

/* "/path+0xOFF" (`n` bytes) into `r`'s path and offset. */
static int native_frame_parse_module(const char *s, size_t n,
				  struct native_frame *r)
{
	size_t k = n, digits;
	uint64_t off = 0;

	while (k >= 3 && memcmp(s + k - 3, "+0x", 3) != 0)
		k--;
	if (k < 4 || s[0] != '/')
		return -EINVAL; /* no "+0x", or a path that is not absolute */
	digits = n - k;
	if (digits == 0 || digits > 16)
		return -EINVAL;
	for (size_t i = k; i < n; i++) {
		int d = native_frame_hex_digit(s[i]);

		if (d < 0)
			return -EINVAL;
		off = off << 4 | (uint64_t)d;
	}
	r->path = s;
	r->path_len = k - 3;
	r->off = off;
	return 0;
}

int native_frame_parse(const char *frame, struct native_frame *out)
{
	struct native_frame r = { 0 };
	size_t n = strlen(frame), open = sizeof(NATIVE_FRAME_BUILD_ID_OPEN) - 1;
	const char *bid, *paren;

	/* " (BuildId: HEX)" at the end, the last such text. */
	if (n > 0 && frame[n - 1] == ')') {
		for (bid = frame + n - 1; bid > frame; bid--)
			if (strncmp(bid, NATIVE_FRAME_BUILD_ID_OPEN, open) == 0)
				break;
		if (bid > frame) {
			if (native_frame_parse_build_id(bid + open,
						     (size_t)(frame + n - 1 -
							      bid - open),
						     &r) < 0)
				return -EINVAL;
			n = (size_t)(bid - frame);
		}
	}
	/* "symbol+0xoff (MODULE)": a symbol never holds a blank; a path
	 * (the form without a symbol) may. */
	paren = frame[0] != '/' ? memchr(frame, ' ', n) : NULL;
	if (paren != NULL) {
		if (paren == frame || paren + 2 >= frame + n ||
		    paren[1] != '(' || frame[n - 1] != ')')
			return -EINVAL;
		n -= (size_t)(paren + 2 - frame) + 1;
		frame = paren + 2;
	}
	if (native_frame_parse_module(frame, n, &r) < 0)
		return -EINVAL;
	*out = r;
	return 0;
}
