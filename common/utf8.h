/*
 * utf8.h - the one UTF-8 validator the trace reader and writer share, so
 * that the writer refuses exactly the strings the reader would reject.
 */
#ifndef NPUSAN_UTF8_H
#define NPUSAN_UTF8_H

#include <stddef.h>

/*
 * Length of the valid UTF-8 sequence of 2 to 4 bytes at p (avail bytes
 * readable), or 0 when it is not one: overlong forms, surrogates and code
 * points past U+10FFFF are invalid (RFC 3629).
 */
static inline size_t utf8_seq(const unsigned char *p, size_t avail)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80; /* overlong */
		hi = c == 0xed ? 0x9f : 0xbf; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		lo = c == 0xf0 ? 0x90 : 0x80; /* overlong */
		hi = c == 0xf4 ? 0x8f : 0xbf; /* past U+10FFFF */
	} else {
		return 0;
	}
	if (avail < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	}
	return n;
}

#endif
