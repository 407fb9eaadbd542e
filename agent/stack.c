/*
 * stack.c - return addresses from the frame-pointer chain or from glibc's
 * unwinder, and their names: the module, its path and build id from
 * dl_iterate_phdr(), the nearest dynamic symbol from dladdr().
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
#include <elf.h>
#include <link.h>
#include <limits.h>
#include <errno.h>
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The loaded module holding an address, as dl_iterate_phdr() shows it. */
struct stack_module {
	uintptr_t addr;        /* in: the address looked up */
	const char *name;      /* the loader's name; "" for the executable */
	uintptr_t bias;        /* load bias: address - bias = ELF address */
	const uint8_t *build_id; /* NT_GNU_BUILD_ID's bytes, or NULL */
	size_t build_id_len;
};

/* The GNU build id in the PT_NOTE segment `ph` of a module loaded at
 * `bias`, read in memory; every note header is bounds-checked. */
static void stack_note_build_id(const ElfW(Phdr) *ph, uintptr_t bias,
				struct stack_module *m)
{
	uintptr_t p = bias + ph->p_vaddr, end = p + ph->p_memsz;
	size_t align = ph->p_align == 8 ? 8 : 4;

	while (end - p >= sizeof(ElfW(Nhdr))) {
		const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
		size_t name = (nh->n_namesz + align - 1) & ~(align - 1);
		size_t desc = (nh->n_descsz + align - 1) & ~(align - 1);
		const char *nm = (const char *)(nh + 1);

		if (name > end - p - sizeof(*nh) ||
		    desc > end - p - sizeof(*nh) - name)
			return;
		if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
		    memcmp(nm, "GNU", 4) == 0 && nh->n_descsz > 0) {
			m->build_id = (const uint8_t *)nm + name;
			m->build_id_len = nh->n_descsz;
			return;
		}
		p += sizeof(*nh) + name + desc;
	}
}

/* dl_iterate_phdr()'s callback: 1, filling the stack_module, when a
 * PT_LOAD segment of `info` covers m->addr. */
static int stack_module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct stack_module *m = arg;
	int hit = 0;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum && !hit; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		hit = ph->p_type == PT_LOAD && m->addr >= lo &&
		      m->addr - lo < ph->p_memsz;
	}
	if (!hit)
		return 0;
	m->name = info->dlpi_name != NULL ? info->dlpi_name : "";
	m->bias = info->dlpi_addr;
	for (int i = 0; i < info->dlpi_phnum && m->build_id == NULL; i++)
		if (info->dlpi_phdr[i].p_type == PT_NOTE)
			stack_note_build_id(&info->dlpi_phdr[i],
					    info->dlpi_addr, m);
	return 1;
}

static char stack_exe_path[PATH_MAX];
static pthread_once_t stack_exe_once = PTHREAD_ONCE_INIT;

/* The executable's absolute path, once: the loader names it "". */
static void stack_exe_lookup(void)
{
	ssize_t n = readlink("/proc/self/exe", stack_exe_path,
			     sizeof(stack_exe_path) - 1);

	stack_exe_path[n > 0 ? n : 0] = '\0';
}

/* The path that names module `m` in a frame, absolute where it can be:
 * into `tmp` (PATH_MAX bytes) when it has to be made. */
static const char *stack_module_path(const struct stack_module *m, char *tmp)
{
	const char *path = m->name;

	if (path[0] == '\0') {
		pthread_once(&stack_exe_once, stack_exe_lookup);
		path = stack_exe_path;
	} else if (path[0] != '/' && realpath(path, tmp) != NULL) {
		path = tmp; /* dlopen("./libx.so") */
	}
	return path[0] != '\0' ? path : "?";
}

/* " (BuildId: HEX)" for `m`, or "" when it has none, into `out`. */
static const char *stack_build_id_text(const struct stack_module *m,
				       char out[STACK_BUILD_ID_TEXT])
{
	static const char hex[] = "0123456789abcdef";
	size_t n, k;

	if (m->build_id == NULL)
		return "";
	n = m->build_id_len;
	if (n > NATIVE_FRAME_BUILD_ID_MAX)
		n = NATIVE_FRAME_BUILD_ID_MAX; /* never: GNU ld writes 20 bytes */
	k = (size_t)sprintf(out, "%s", NATIVE_FRAME_BUILD_ID_OPEN);
	for (size_t i = 0; i < n; i++) {
		out[k++] = hex[m->build_id[i] >> 4];
		out[k++] = hex[m->build_id[i] & 15];
	}
	out[k++] = ')';
	out[k] = '\0';
	return out;
}

/* `buf` names `pc` in module `m`: see stack.h. */
static int stack_name_in_module(uintptr_t pc, const struct stack_module *m,
				char *buf, size_t len)
{
	char tmp[PATH_MAX], bid[STACK_BUILD_ID_TEXT];
	const char *path = stack_module_path(m, tmp);
	const char *ids = stack_build_id_text(m, bid);
	Dl_info info;

	/* dladdr() only for the symbol: the module is dl_iterate_phdr()'s. */
	if (dladdr((void *)(pc - 1), &info) != 0 && info.dli_sname != NULL &&
	    info.dli_saddr != NULL)
		return snprintf(buf, len,
				"%s+0x%" PRIxPTR " (%s+0x%" PRIxPTR ")%s",
				info.dli_sname, pc - (uintptr_t)info.dli_saddr,
				path, pc - m->bias, ids);
	return snprintf(buf, len, "%s+0x%" PRIxPTR "%s", path, pc - m->bias,
			ids);
}

int stack_symbolize(uintptr_t pc, char *buf, size_t len)
{
	struct stack_module m = { .addr = pc - 1 };
	int saved = errno, n;

	if (len == 0)
		return -ENOSPC;
	/* pc - 1: see stack.h. dl_iterate_phdr() only compares it. */
	if (pc != 0 && dl_iterate_phdr(stack_module_cb, &m) != 0)
		n = stack_name_in_module(pc, &m, buf, len);
	else
		n = snprintf(buf, len, "0x%" PRIxPTR, pc);
	errno = saved;
	if (n < 0) {
		buf[0] = '\0';
		return -EINVAL;
	}
	return (size_t)n < len ? n : -ENOSPC;
}
