/*
 * symbolize.h - native frames to source lines, through DWARF, off the job.
 *
 * The agent names a native frame once, cheaply, the way AddressSanitizer
 * does when it does not symbolize (agent/stack.h):
 *
 *   "symbol+0xoff (/path/module+0xoff) (BuildId: hex)"
 *   "/path/module+0xoff (BuildId: hex)"
 *
 * The module's path, its offset (the ELF address) and its GNU build id are
 * enough to find the line later, on this machine or another. The symbolizer
 * turns such a frame into "file:line in function (module+0xoff)" with
 * elfutils' libdw, reading the module file at its path, or, when that file
 * is missing or is another build, DEBUG_DIR/.build-id/xx/rest.debug (what
 * Debian's -dbgsym packages install). Never a debuginfod server, even with
 * DEBUGINFOD_URLS set: a report must not wait on the network nor download
 * debug files behind the user's back. A frame it cannot resolve exactly
 * stays as it is: never a line from a file whose build id differs from the
 * one recorded, never a line from a module without debug information.
 *
 * Each module is opened once per symbolizer and kept, whether or not it
 * resolved. Built only where libdw is (NPUSAN_HAVE_LIBDW); elsewhere every
 * frame stays raw. Not thread-safe: one symbolizer per thread.
 */
#ifndef NPUSAN_COMMON_SYMBOLIZE_H
#define NPUSAN_COMMON_SYMBOLIZE_H

#include <stddef.h>

#include "native_frame.h"

/* Where Debian installs detached debug information. */
#define SYMBOLIZE_DEBUG_DIR "/usr/lib/debug"

struct symbolizer;

/*
 * A symbolizer that looks for detached debug information under `debug_dir`
 * (NULL: SYMBOLIZE_DEBUG_DIR). 0; -ENOMEM. Caller owns *out; release with
 * symbolizer_close(), which accepts NULL.
 */
int symbolizer_open(const char *debug_dir, struct symbolizer **out);
void symbolizer_close(struct symbolizer *s);

/*
 * Writes `frame`'s source line, "file:line in function (module+0xoff)"
 * ("file:line (module+0xoff)" when no function is named), into `buf`;
 * where that function was inlined, a line more for each function it was
 * inlined into, at the line of the call, outwards, as addr2line -i shows
 * them. Lines are separated by '\n' (a name holding one shows '?').
 * Returns the length; -EINVAL when `frame` is not a native frame;
 * -ENOENT when its module (or a debug file of its build id) cannot be
 * read; -ESTALE when the file at its path is another build and no debug
 * file of the recorded build is there; -ENODATA when the module has no
 * line for the address; -ENOSPC when the text does not fit in `len`;
 * -ENOTSUP without libdw. On error buf holds nothing to show.
 */
int symbolizer_frame(struct symbolizer *s, const char *frame, char *buf,
		     size_t len);

#endif
