/*
 * stack.c - return addresses from the frame-pointer chain or from glibc's
 * unwinder, and their names from dladdr().
 *
 * DESIGN
 * 1. The frame-pointer walk dereferences only 16-byte aligned addresses
 *    in [its own frame, the thread's stack top - 16]. Everything from the
 *    current stack pointer up to the top of the thread's own stack is
 *    mapped, so garbage in %rbp cannot fault it.
 * 2. Each frame followed lies strictly above the previous one, so the walk
 *    ends, at the latest after (top - frame) / 16 frames, even on a cycle.
 * 3. After a thread's first capture the fp path is one initial-exec TLS
 *    load and the loop: no allocation, lock or system call.
 * 4. stack_capture() is never inlined, so that its own frame and return
 *    address are where `skip` counts from, for both methods.
 */
#include "stack.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The SysV x86-64 ABI has %rsp + 8 16-byte aligned at every function entry,
 * so the `push %rbp; mov %rsp, %rbp` prologue leaves %rbp 16-byte aligned;
 * test_stack checks it on real frames. Demanding it rejects half of the
 * 8-byte aligned garbage a frame without frame pointers leaves.
 */
#define STACK_FP_ALIGN 16
/* Below this no code is mapped: a 0 return address ends clone()'s and
 * _start's chains. */
#define STACK_MIN_PC 4096
/* backtrace()'s buffer, on the unwind path only. */
#define STACK_UNWIND_MAX 256

static const char *const stack_method_names[] = {
#define STACK_METHOD_NAME(name, str) str,
	STACK_METHODS(STACK_METHOD_NAME)
#undef STACK_METHOD_NAME
};

_Static_assert(sizeof(stack_method_names) / sizeof(stack_method_names[0]) ==
		       STACK_METHOD_COUNT,
	       "one name per stack method");

/* The calling thread's stack, looked up on its first capture. */
struct stack_bounds {
	uintptr_t lo;
	uintptr_t hi;
	int state; /* 0: not looked up; 1: known; -1: lookup failed */
};

/*
 * initial-exec: the agent may be LD_PRELOADed or dlopen()ed, and the
 * default global-dynamic model would call __tls_get_addr(), which can
 * allocate on a thread's first access. The 24 bytes come out of glibc's
 * static TLS surplus.
 */
static _Thread_local struct stack_bounds stack_tls
	__attribute__((tls_model("initial-exec")));

const char *stack_method_name(enum stack_method m)
{
	if ((unsigned)m >= STACK_METHOD_COUNT)
		return NULL;
	return stack_method_names[m];
}

int stack_config_parse(const char *depth, const char *method,
		       struct stack_config *out)
{
	struct stack_config c = {
		.depth = STACK_DEFAULT_DEPTH,
		.method = STACK_FRAME_POINTERS,
	};

	if (depth != NULL && depth[0] != '\0') {
		unsigned long v = 0;
		const char *p;

		for (p = depth; *p >= '0' && *p <= '9'; p++) {
			/* Saturate: the range check below rejects it. */
			if (v <= STACK_MAX_DEPTH)
				v = v * 10 + (unsigned long)(*p - '0');
		}
		if (*p != '\0')
			return -EINVAL;
		if (v > STACK_MAX_DEPTH)
			return -ERANGE;
		c.depth = (int)v;
	}
	if (method != NULL && method[0] != '\0') {
		int i;

		for (i = 0; i < STACK_METHOD_COUNT; i++)
			if (strcmp(method, stack_method_names[i]) == 0)
				break;
		if (i == STACK_METHOD_COUNT)
			return -EINVAL;
		c.method = (enum stack_method)i;
	}
	*out = c;
	return 0;
}

int stack_config_from_env(struct stack_config *out)
{
	return stack_config_parse(getenv(STACK_ENV_DEPTH),
				  getenv(STACK_ENV_METHOD), out);
}

/* Out of line and cold so that the hot path stays a few instructions. */
static __attribute__((noinline, cold)) int
stack_bounds_lookup(struct stack_bounds *b)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;
	int saved = errno, err;

	/* On the main thread glibc reads /proc/self/maps here. */
	err = pthread_getattr_np(pthread_self(), &attr);
	if (err == 0) {
		err = pthread_attr_getstack(&attr, &addr, &size);
		pthread_attr_destroy(&attr);
	}
	errno = saved;
	if (err != 0 || (uintptr_t)addr + size < (uintptr_t)addr) {
		b->state = -1;
		return err != 0 ? -err : -ERANGE;
	}
	b->lo = (uintptr_t)addr;
	b->hi = (uintptr_t)addr + size;
	b->state = 1;
	return 0;
}

/*
 * Inlined into both callers so that stack_capture() walks without a call
 * of its own (whose frame would shift `skip`) and tests see the same code.
 */
static inline __attribute__((always_inline)) int
stack_walk(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, int max,
	   int skip)
{
	uintptr_t last;
	int n = 0;

	if (hi < lo || hi - lo < 2 * sizeof(uintptr_t))
		return 0;
	last = hi - 2 * sizeof(uintptr_t); /* the highest frame that fits */
	while (n < max) {
		const uintptr_t *frame;
		uintptr_t next, pc;

		/* DESIGN 1: both words of the frame inside [lo, hi). */
		if (fp < lo || fp > last || fp % STACK_FP_ALIGN != 0)
			break;
		frame = (const uintptr_t *)fp;
		next = frame[0];
		pc = frame[1];
		if (pc < STACK_MIN_PC)
			break;
		if (skip > 0)
			skip--;
		else
			pcs[n++] = pc;
		/* DESIGN 2. */
		if (next <= fp)
			break;
		fp = next;
	}
	return n;
}

int stack__walk(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *pcs,
		int max, int skip)
{
	if (max <= 0)
		return 0;
	return stack_walk(fp, lo, hi, pcs, max, skip < 0 ? 0 : skip);
}

/*
 * backtrace() lists the frames of this function and of stack_capture()
 * first; rather than count them, which inlining or a sibling call would
 * change, drop everything up to `caller`, stack_capture()'s return address.
 */
static __attribute__((noinline)) int
stack_unwind(uintptr_t caller, uintptr_t *pcs, int max, int skip)
{
	void *buf[STACK_UNWIND_MAX];
	int saved = errno, want, got, i, n = 0;

	/* This frame, stack_capture()'s, and slack for what a sibling call
	 * or the unwinder's own frames add; written so that it cannot
	 * overflow. */
	want = STACK_UNWIND_MAX;
	if (max < STACK_UNWIND_MAX - 4 && skip < STACK_UNWIND_MAX - 4 - max)
		want = max + skip + 4;
	got = backtrace(buf, want);
	errno = saved;
	for (i = 0; i < got; i++)
		if ((uintptr_t)buf[i] == caller)
			break;
	if (skip >= got - i)
		return 0;
	for (i += skip; i < got && n < max; i++)
		pcs[n++] = (uintptr_t)buf[i];
	return n;
}

int stack_prepare(enum stack_method m)
{
	struct stack_bounds *b = &stack_tls;
	uintptr_t pc;
	int err = 0;

	if ((unsigned)m >= STACK_METHOD_COUNT)
		return -EINVAL;
	if (b->state == 0)
		err = stack_bounds_lookup(b);
	else if (b->state < 0)
		err = -ENOENT;
	if (m == STACK_UNWIND)
		stack_capture(m, &pc, 1, 0);
	return err;
}

/* DESIGN 4: noinline. */
__attribute__((noinline)) int stack_capture(enum stack_method m,
					    uintptr_t *pcs, int max, int skip)
{
	struct stack_bounds *b = &stack_tls;
	uintptr_t fp;

	if (max <= 0)
		return 0;
	if (skip < 0)
		skip = 0;
	if (m == STACK_UNWIND)
		return stack_unwind((uintptr_t)__builtin_return_address(0),
				    pcs, max, skip);
	if (m != STACK_FRAME_POINTERS)
		return 0;
	if (__builtin_expect(b->state != 1, 0)) {
		if (b->state < 0 || stack_bounds_lookup(b) < 0)
			return 0;
	}
	/*
	 * Using __builtin_frame_address() gives this function a frame pointer
	 * whatever the flags: [fp] is the caller's %rbp, [fp + 8] the return
	 * address into the caller.
	 */
	fp = (uintptr_t)__builtin_frame_address(0);
	if (fp < b->lo || fp >= b->hi)
		return 0; /* a sigaltstack or a coroutine's stack */
	return stack_walk(fp, fp, b->hi, pcs, max, skip);
}

int stack_symbolize(uintptr_t pc, char *buf, size_t len)
{
	Dl_info info;
	int saved = errno, found = 0, n;

	if (len == 0)
		return -ENOSPC;
	/* pc - 1: see stack.h. dladdr() only compares the address. */
	if (pc != 0)
		found = dladdr((void *)(pc - 1), &info) != 0 &&
			info.dli_fname != NULL;
	errno = saved;
	if (!found) {
		n = snprintf(buf, len, "0x%" PRIxPTR, pc);
	} else {
		const char *module = strrchr(info.dli_fname, '/');
		uintptr_t base = (uintptr_t)info.dli_fbase;

		module = module != NULL ? module + 1 : info.dli_fname;
		if (module[0] == '\0')
			module = "?";
		if (info.dli_sname != NULL && info.dli_saddr != NULL)
			n = snprintf(buf, len,
				     "%s+0x%" PRIxPTR " (%s+0x%" PRIxPTR ")",
				     info.dli_sname,
				     pc - (uintptr_t)info.dli_saddr, module,
				     pc - base);
		else
			n = snprintf(buf, len, "%s+0x%" PRIxPTR, module,
				     pc - base);
	}
	if (n < 0) {
		buf[0] = '\0';
		return -EINVAL;
	}
	return (size_t)n < len ? n : -ENOSPC;
}
