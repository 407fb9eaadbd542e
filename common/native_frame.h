/*
 * native_frame.h - the one definition of a native frame's text.
 *
 * The agent names a native frame once, cheaply, the way AddressSanitizer
 * does when it does not symbolize:
 *
 *   "symbol+0xoff (/path/module+0xoff) (BuildId: hex)"
 *   "/path/module+0xoff (BuildId: hex)"
 *
 * (" (BuildId: hex)" left out for a module without one). The module's
 * path, the return address's ELF address in it and its GNU build id are
 * enough to find the source line later, on this machine or another.
 */
#ifndef NPUSAN_COMMON_NATIVE_FRAME_H
#define NPUSAN_COMMON_NATIVE_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* The most build id bytes a frame may carry (GNU ld writes 20). */
#define NATIVE_FRAME_BUILD_ID_MAX 64
/* What precedes the build id's hex digits; a ')' follows them. */
#define NATIVE_FRAME_BUILD_ID_OPEN " (BuildId: "

/* A native frame's module part, pointing into the frame's text. */
struct native_frame {
	const char *path; /* absolute; not NUL-terminated */
	size_t path_len;
	uint64_t off; /* the return address's ELF address in the module */
	uint8_t build_id[NATIVE_FRAME_BUILD_ID_MAX];
	size_t build_id_len; /* 0: the frame names none */
};

/*
 * Parses `frame` (NUL-terminated) in one of the forms above. 0; -EINVAL
 * when it is not a native frame with an absolute module path (a Python
 * frame, "0x...", an old trace's "module+0xoff"). *out is written only on
 * success.
 */
int native_frame_parse(const char *frame, struct native_frame *out);

#endif
