/*
 * stack.h - the application's native call stack at a launch or an
 * allocation: captured on the hot path as raw return addresses, named on
 * the slow path, once per distinct stack.
 *
 * NPUSAN_STACKS=N captures up to N frames (0 turns capture off) and
 * NPUSAN_STACK_METHOD=fp|unwind chooses how; stack_config_from_env() reads
 * both. The interning of PC arrays into stack ids is not here.
 *
 * Two methods:
 *
 *   fp      walks the %rbp chain. Code built without frame pointers (most of
 *           Debian, CPython) leaves %rbp holding anything, so the walk reads
 *           only the calling thread's own stack, [its own frame, stack top),
 *           which is always mapped, and stops at the first frame that is not
 *           16-byte aligned, not strictly above the previous one, or whose
 *           return address is below 4096. It never faults; through code
 *           without frame pointers it stops early, skips callers, or yields
 *           a few addresses that are not return addresses (they then
 *           symbolise as "0x..." or into the wrong place, and make extra
 *           distinct stacks). The agent's own sources must be compiled with
 *           -fno-omit-frame-pointer so that `skip` counts its frames exactly.
 *   unwind  glibc's backtrace(), which follows the DWARF unwind tables, so it
 *           sees through code without frame pointers. Its first call loads
 *           libgcc_s (dlopen: allocates, takes the loader lock).
 *
 * Cost, from tests/bench/stack_bench.c (Release build, this 2-core AMD EPYC
 * VM, hot caches, medians): fp 13, 23 and 43 ns at depths 8, 16 and 32,
 * about 1.3 ns a frame, a chain of dependent loads; unwind 2.3, 3.7 and
 * 6.9 us, about 200 times as much. A launch from a cold, deep stack adds
 * cache misses to both. stack_symbolize() costs 0.2 us for a frame in a
 * module with few dynamic symbols and 5 to 8 us in libc (3000 of them):
 * dladdr() scans the module's dynamic symbols, so a frame in a library
 * with 100000 symbols would take hundreds of us. Finding the module, its
 * path and build id with dl_iterate_phdr() adds about 1000 instructions a
 * frame (callgrind, a process with 5 modules: 2.5% of a libc frame's),
 * more in a process with many modules loaded before the frame's. Name
 * each distinct PC once, off the application's thread. One-offs: a
 * thread's first capture looks up its stack bounds with
 * pthread_getattr_np(), about 1-2 us on a new thread and 100 us on the
 * main thread, where glibc reads /proc/self/maps; the first unwind
 * capture loads libgcc_s, about 200 us.
 * stack_prepare() does both ahead of time.
 *
 * Nothing here allocates memory the caller must free.
 */
#ifndef NPUSAN_STACK_H
#define NPUSAN_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "native_frame.h"

/* X(enum suffix, name in NPUSAN_STACK_METHOD) for every capture method. */
#define STACK_METHODS(X)          \
	X(FRAME_POINTERS, "fp")   \
	X(UNWIND, "unwind")

enum stack_method {
#define STACK_METHOD_ENUM(name, str) STACK_##name,
	STACK_METHODS(STACK_METHOD_ENUM)
#undef STACK_METHOD_ENUM
	STACK_METHOD_COUNT
};

#define STACK_ENV_DEPTH "NPUSAN_STACKS"
#define STACK_ENV_METHOD "NPUSAN_STACK_METHOD"
#define STACK_DEFAULT_DEPTH 16
#define STACK_MAX_DEPTH 128
/* Enough for stack_symbolize() on all but very long C++ symbols or paths. */
#define STACK_SYMBOL_LEN 1024
/* The text " (BuildId: HEX)" of the most build id bytes a frame carries,
 * with its ')' and NUL (the form: common/native_frame.h). */
#define STACK_BUILD_ID_TEXT \
	(sizeof(NATIVE_FRAME_BUILD_ID_OPEN ")") + 2 * NATIVE_FRAME_BUILD_ID_MAX)

struct stack_config {
	int depth; /* frames per capture, 0 to STACK_MAX_DEPTH; 0: off */
	enum stack_method method;
};

/* The name of `m` ("fp", "unwind"), or NULL when `m` is out of range. */
const char *stack_method_name(enum stack_method m);

/*
 * Parses the values of NPUSAN_STACKS (`depth`, a decimal count) and
 * NPUSAN_STACK_METHOD (`method`, a stack_method_name()); NULL or "" means
 * unset, which gives STACK_DEFAULT_DEPTH and "fp". Returns 0; -EINVAL when
 * depth is not a non-negative decimal number or method is not a method's
 * name; -ERANGE when depth exceeds STACK_MAX_DEPTH. *out is written only
 * on success.
 */
int stack_config_parse(const char *depth, const char *method,
		       struct stack_config *out);

/*
 * stack_config_parse() of the environment. Call once at start-up: getenv()
 * races with a concurrent setenv().
 */
int stack_config_from_env(struct stack_config *out);

/*
 * Does on the calling thread, now, the one-off work its first capture with
 * `m` would do: looks up the thread's stack bounds (pthread_getattr_np();
 * allocates, and reads /proc/self/maps on the main thread), and for
 * STACK_UNWIND calls backtrace() once so that libgcc_s is loaded. Call
 * from the agent's start-up, never from a signal handler. Returns 0;
 * -EINVAL for an unknown method; a negative errno when the bounds cannot
 * be found, in which case fp captures on this thread return 0 frames.
 */
int stack_prepare(enum stack_method m);

/*
 * Writes up to `max` return addresses of the caller's stack into `pcs`,
 * innermost first, after skipping the `skip` innermost ones: with skip 0,
 * pcs[0] is in the function that called stack_capture(). Returns the count
 * written, 0 to max; 0 for an unknown method, max <= 0, or when the caller
 * runs on a stack other than its thread's own (a sigaltstack, a coroutine).
 *
 * STACK_FRAME_POINTERS never faults, allocates, locks or enters the kernel,
 * except on a thread's first call (see stack_prepare()). STACK_UNWIND gives
 * fewer than 256 - skip frames and may allocate and lock; it is async-
 * signal-unsafe until stack_prepare(STACK_UNWIND) has run. Both keep errno.
 */
int stack_capture(enum stack_method m, uintptr_t *pcs, int max, int skip);

/*
 * Names the return address `pc` into `buf` the way AddressSanitizer does
 * when it does not symbolize, so that a frame can be symbolized later, on
 * another machine (common/symbolize.h, docs/trace-format.md "Native
 * frames"):
 *
 *   "symbol+0xoff (/path/module+0xoff) (BuildId: hex)"
 *   "/path/module+0xoff (BuildId: hex)"   when no dynamic symbol covers it
 *   "0x..."                               when it is in no loaded module
 *
 * The path is the module's absolute path (the executable's from
 * /proc/self/exe); its offset is pc minus the module's load bias, the
 * ELF address that addr2line and libdw take. The build id is the module's
 * NT_GNU_BUILD_ID note, read from its mapped PT_NOTE segment (no file
 * I/O); " (BuildId: ...)" is left out for a module without one. The symbol
 * lookup is at pc - 1, so that a call ending a function (to a noreturn
 * function) is named after that function; a function's own address
 * therefore names the function before it. Symbols are not demangled.
 *
 * Returns the length written; -ENOSPC when it does not fit in `len` bytes,
 * in which case buf holds as much as fits. buf is NUL-terminated whenever
 * len > 0. Keeps errno. Slow path: dl_iterate_phdr() and dladdr() take the
 * loader lock, and dladdr() scans the module's dynamic symbols.
 */
int stack_symbolize(uintptr_t pc, char *buf, size_t len);

/*
 * The frame-pointer walk alone, over the words in [lo, hi), from the frame
 * at `fp`: what stack_capture() runs over the real stack, exposed for
 * tests. Reads nothing outside [lo, hi). Returns the count written.
 */
int stack__walk(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *pcs,
		int max, int skip);

#endif
