/*
 * test_stack.c - native stack capture and symbolisation.
 *
 * The target is built with -fno-omit-frame-pointer and linked with
 * -rdynamic, so the stk_* functions below have frame pointers and dynamic
 * symbols that dladdr() can name. They are noipa (no inlining, cloning or
 * sibling calls into them) and store to stk_sink after each call, so that
 * every one of them keeps its own frame.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <alloca.h>

#include "stack.h"
#include "testutil.h"

#ifdef __clang__
#define STK_NOIPA __attribute__((noinline))
#else
#define STK_NOIPA __attribute__((noipa))
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const enum stack_method stk_methods[] = {
	STACK_FRAME_POINTERS,
	STACK_UNWIND,
};

static volatile int stk_sink;
static uintptr_t stk_inner_frame;

/* Exported, so that -rdynamic puts them in the dynamic symbol table. */
int stk_inner(enum stack_method m, uintptr_t *pcs, int max, int skip);
int stk_middle(enum stack_method m, uintptr_t *pcs, int max, int skip);
int stk_outer(enum stack_method m, uintptr_t *pcs, int max, int skip);
int stk_recurse(int depth, enum stack_method m, uintptr_t *pcs, int max);

STK_NOIPA int stk_inner(enum stack_method m, uintptr_t *pcs, int max,
			int skip)
{
	int n = stack_capture(m, pcs, max, skip);

	stk_inner_frame = (uintptr_t)__builtin_frame_address(0);
	stk_sink = n;
	return n;
}

STK_NOIPA int stk_middle(enum stack_method m, uintptr_t *pcs, int max,
			 int skip)
{
	int n = stk_inner(m, pcs, max, skip);

	stk_sink = n;
	return n;
}

STK_NOIPA int stk_outer(enum stack_method m, uintptr_t *pcs, int max,
			int skip)
{
	int n = stk_middle(m, pcs, max, skip);

	stk_sink = n;
	return n;
}

STK_NOIPA int stk_recurse(int depth, enum stack_method m, uintptr_t *pcs,
			  int max)
{
	int n;

	if (depth == 0)
		n = stack_capture(m, pcs, max, 0);
	else
		n = stk_recurse(depth - 1, m, pcs, max);
	stk_sink = n;
	return n;
}

/*
 * A call to a noreturn function may be a function's last instruction, so
 * its return address is the next function's first byte, or padding.
 */
static jmp_buf stk_jmp;
static uintptr_t stk_noreturn_pcs[4];
static int stk_noreturn_n;

void stk_noreturn(void);
void stk_ends_in_noreturn(void);

__attribute__((noreturn)) STK_NOIPA void stk_noreturn(void)
{
	stk_noreturn_n = stack_capture(STACK_FRAME_POINTERS, stk_noreturn_pcs,
				       ARRAY_SIZE(stk_noreturn_pcs), 0);
	longjmp(stk_jmp, 1);
}

STK_NOIPA void stk_ends_in_noreturn(void)
{
	stk_noreturn();
}

/* Static: in no symbol table dladdr() reads, so named by module only. */
static STK_NOIPA int stk_hidden(uintptr_t *pcs, int max)
{
	int n = stack_capture(STACK_FRAME_POINTERS, pcs, max, 0);

	stk_sink = n;
	return n;
}

#if defined(__x86_64__)
/*
 * Calls stack_capture(m, pcs, max, 0) with %rbp set to `rbp`, the way code
 * built without frame pointers may leave it, then restores it. No CFI on
 * purpose: the unwinder has to stop here too.
 */
int stk_call_with_rbp(uintptr_t rbp, enum stack_method m, uintptr_t *pcs,
		      int max);
__asm__(".pushsection .text\n"
	".globl stk_call_with_rbp\n"
	".type stk_call_with_rbp, @function\n"
	"stk_call_with_rbp:\n"
	"	push %rbp\n"
	"	mov %rdi, %rbp\n"
	"	mov %esi, %edi\n"
	"	mov %rdx, %rsi\n"
	"	mov %ecx, %edx\n"
	"	xor %ecx, %ecx\n"
	"	call stack_capture@PLT\n"
	"	pop %rbp\n"
	"	ret\n"
	".size stk_call_with_rbp, .-stk_call_with_rbp\n"
	".popsection\n");
#endif

/* Asserts that pc symbolises as "<name>+0x..." (with its module). */
static void stk_expect_name(uintptr_t pc, const char *name)
{
	char buf[STACK_SYMBOL_LEN], want[128];
	int n;

	n = stack_symbolize(pc, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	snprintf(want, sizeof(want), "%s+0x", name);
	ck_assert_msg(strncmp(buf, want, strlen(want)) == 0,
		      "%#jx is \"%s\", expected \"%s...\"", (uintmax_t)pc, buf,
		      want);
	ck_assert_msg(strstr(buf, "/test_stack+0x") != NULL,
		      "\"%s\" lacks its module's path", buf);
	ck_assert_msg(strstr(buf, ") (BuildId: ") != NULL,
		      "\"%s\" lacks its module's build id", buf);
}

/* Asserts that pc symbolises as "/.../test_stack+0x... (BuildId: ...)",
 * with no symbol: the executable's absolute path, from /proc/self/exe. */
static void stk_expect_module(uintptr_t pc)
{
	char buf[STACK_SYMBOL_LEN], exe[PATH_MAX], want[PATH_MAX + 8];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	snprintf(want, sizeof(want), "%s+0x", exe);
	ck_assert_int_gt(stack_symbolize(pc, buf, sizeof(buf)), 0);
	ck_assert_msg(strncmp(buf, want, strlen(want)) == 0, "%s", buf);
	ck_assert_msg(strstr(buf, " (BuildId: ") != NULL, "%s", buf);
	ck_assert_int_eq(buf[strlen(buf) - 1], ')');
}

static void stk_expect_callers(enum stack_method m, const uintptr_t *pcs,
			       int n)
{
	ck_assert_msg(n >= 3, "%s: %d frames", stack_method_name(m), n);
	stk_expect_name(pcs[0], "stk_inner");
	stk_expect_name(pcs[1], "stk_middle");
	stk_expect_name(pcs[2], "stk_outer");
}

START_TEST(stack_fp_finds_callers_innermost_first)
{
	uintptr_t pcs[16];
	int n = stk_outer(STACK_FRAME_POINTERS, pcs, ARRAY_SIZE(pcs), 0);

	stk_expect_callers(STACK_FRAME_POINTERS, pcs, n);
	/* What STACK_FP_ALIGN relies on, on a gcc frame. */
	ck_assert_uint_eq(stk_inner_frame % 16, 0);
}
END_TEST

START_TEST(stack_unwind_finds_callers_innermost_first)
{
	uintptr_t pcs[16];
	int n = stk_outer(STACK_UNWIND, pcs, ARRAY_SIZE(pcs), 0);

	stk_expect_callers(STACK_UNWIND, pcs, n);
}
END_TEST

START_TEST(stack_methods_agree)
{
	uintptr_t fp[8], uw[8];
	int nfp = stk_outer(STACK_FRAME_POINTERS, fp, ARRAY_SIZE(fp), 0);
	int nuw = stk_outer(STACK_UNWIND, uw, ARRAY_SIZE(uw), 0);

	/* The same call sites inside stk_*, so the same return addresses;
	 * the fourth, in this test, is a call site of its own. */
	ck_assert_int_ge(nfp, 4);
	ck_assert_int_ge(nuw, 4);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(fp[i], uw[i]);
	ck_assert_uint_ne(fp[3], uw[3]);
	stk_expect_module(fp[3]);
	stk_expect_module(uw[3]);
}
END_TEST

START_TEST(stack_skip_drops_innermost_frames)
{
	enum stack_method m = stk_methods[_i];
	uintptr_t all[16], skipped[16];
	int nall = stk_outer(m, all, ARRAY_SIZE(all), 0);
	int n = stk_outer(m, skipped, ARRAY_SIZE(skipped), 2);

	ck_assert_int_ge(nall, 4);
	ck_assert_int_ge(n, 2);
	stk_expect_name(skipped[0], "stk_outer");
	/* The one frame both captures share a call site for. */
	ck_assert_uint_eq(skipped[0], all[2]);
	/* Skipping more than there is leaves nothing. */
	ck_assert_int_eq(stk_outer(m, skipped, ARRAY_SIZE(skipped), 100000),
			 0);
}
END_TEST

START_TEST(stack_max_bounds_count)
{
	enum stack_method m = stk_methods[_i];
	uintptr_t pcs[4] = { 1, 1, 1, 1 };

	ck_assert_int_eq(stk_outer(m, pcs, 2, 0), 2);
	stk_expect_name(pcs[0], "stk_inner");
	stk_expect_name(pcs[1], "stk_middle");
	ck_assert_uint_eq(pcs[2], 1);
	ck_assert_uint_eq(pcs[3], 1);
	ck_assert_int_eq(stk_outer(m, pcs, 0, 0), 0);
	ck_assert_int_eq(stk_outer(m, pcs, -1, 0), 0);
	ck_assert_uint_eq(pcs[2], 1);
	ck_assert_int_eq(stack_capture(STACK_METHOD_COUNT, pcs, 4, 0), 0);
}
END_TEST

START_TEST(stack_deep_stack_fills_max)
{
	enum stack_method m = stk_methods[_i];
	uintptr_t pcs[STACK_MAX_DEPTH];
	int n;

	n = stk_recurse(40, m, pcs, 32);
	ck_assert_int_eq(n, 32);
	for (int i = 0; i < n; i++)
		stk_expect_name(pcs[i], "stk_recurse");
	n = stk_recurse(STACK_MAX_DEPTH + 10, m, pcs, STACK_MAX_DEPTH);
	ck_assert_int_eq(n, STACK_MAX_DEPTH);
}
END_TEST

struct stk_thread_arg {
	enum stack_method m;
	uintptr_t pcs[16];
	int n;
};

static void *stk_thread(void *p)
{
	struct stk_thread_arg *a = p;

	a->n = stk_outer(a->m, a->pcs, ARRAY_SIZE(a->pcs), 0);
	return NULL;
}

START_TEST(stack_capture_on_other_thread)
{
	struct stk_thread_arg a = { .m = stk_methods[_i] };
	pthread_t t;

	ck_assert_int_eq(pthread_create(&t, NULL, stk_thread, &a), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	stk_expect_callers(a.m, a.pcs, a.n);
	/* The thread's start routine is the next frame. */
	ck_assert_int_ge(a.n, 4);
	stk_expect_module(a.pcs[3]);
}
END_TEST

START_TEST(stack_prepare_then_capture)
{
	enum stack_method m = stk_methods[_i];
	uintptr_t pcs[16];

	ck_assert_int_eq(stack_prepare(m), 0);
	ck_assert_int_eq(stack_prepare(m), 0);
	stk_expect_callers(m, pcs, stk_outer(m, pcs, ARRAY_SIZE(pcs), 0));
	ck_assert_int_eq(stack_prepare(STACK_METHOD_COUNT), -EINVAL);
}
END_TEST

#if defined(__x86_64__)
START_TEST(stack_capture_survives_garbage_rbp)
{
	uintptr_t pcs[16], *fake, *heap = malloc(64);
	char buf[STACK_SYMBOL_LEN];
	int n;

	ck_assert_ptr_nonnull(heap);
	/* A fake frame further up this thread's own stack: {next 0, pc}. */
	fake = (uintptr_t *)(((uintptr_t)alloca(64) + 15) & ~(uintptr_t)15);
	fake[0] = 0;
	fake[1] = 0x5000;
	heap[0] = (uintptr_t)heap; /* were it followed, a cycle */
	heap[1] = 0x5000;

	/* Below the stack, in the heap, off by 8: one frame, then stop. */
	n = stk_call_with_rbp(0x1234, STACK_FRAME_POINTERS, pcs, 16);
	ck_assert_int_eq(n, 1);
	ck_assert_int_gt(stack_symbolize(pcs[0], buf, sizeof(buf)), 0);
	ck_assert_msg(strncmp(buf, "stk_call_with_rbp+0x", 20) == 0, "%s", buf);
	n = stk_call_with_rbp((uintptr_t)heap, STACK_FRAME_POINTERS, pcs, 16);
	ck_assert_int_eq(n, 1);
	n = stk_call_with_rbp((uintptr_t)fake + 8, STACK_FRAME_POINTERS, pcs,
			      16);
	ck_assert_int_eq(n, 1);
	n = stk_call_with_rbp(UINTPTR_MAX - 15, STACK_FRAME_POINTERS, pcs, 16);
	ck_assert_int_eq(n, 1);
	/* Inside the stack and plausible: followed, and the walk still ends. */
	n = stk_call_with_rbp((uintptr_t)fake, STACK_FRAME_POINTERS, pcs, 16);
	ck_assert_int_eq(n, 2);
	ck_assert_uint_eq(pcs[1], 0x5000);

	/* The unwinder follows CFI, of which the asm has none. */
	n = stk_call_with_rbp(0x1234, STACK_UNWIND, pcs, 16);
	ck_assert_int_ge(n, 0);
	n = stk_call_with_rbp((uintptr_t)heap, STACK_UNWIND, pcs, 16);
	ck_assert_int_ge(n, 0);
	free(heap);
}
END_TEST
#endif

static volatile sig_atomic_t stk_signal_n = -1;

static void stk_on_signal(int sig)
{
	uintptr_t pcs[16];

	(void)sig;
	stk_signal_n = stack_capture(STACK_FRAME_POINTERS, pcs, 16, 0);
}

/* The walk's bounds are the thread's stack: elsewhere it declines. */
START_TEST(stack_fp_on_sigaltstack_captures_nothing)
{
	struct sigaction sa = { .sa_handler = stk_on_signal };
	stack_t ss = { .ss_size = 1 << 16 };

	ck_assert_int_eq(stack_prepare(STACK_FRAME_POINTERS), 0);
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	ck_assert_int_eq(raise(SIGUSR1), 0);
	ck_assert_int_ge(stk_signal_n, 1);

	ss.ss_sp = malloc(ss.ss_size);
	ck_assert_ptr_nonnull(ss.ss_sp);
	ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
	sa.sa_flags = SA_ONSTACK;
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	ck_assert_int_eq(raise(SIGUSR1), 0);
	ck_assert_int_eq(stk_signal_n, 0);
	ss.ss_flags = SS_DISABLE;
	ck_assert_int_eq(sigaltstack(&ss, NULL), 0);
	free(ss.ss_sp);
}
END_TEST

/*
 * A fake stack on the heap, so that ASan's redzones sit right below and
 * above it: any read outside [lo, hi) is reported.
 */
#define STK_WORDS 32

struct stk_fake {
	uintptr_t *w;
	uintptr_t lo, hi;
};

static void stk_fake_init(struct stk_fake *f)
{
	f->w = aligned_alloc(16, STK_WORDS * sizeof(uintptr_t));
	ck_assert_ptr_nonnull(f->w);
	memset(f->w, 0, STK_WORDS * sizeof(uintptr_t));
	f->lo = (uintptr_t)f->w;
	f->hi = (uintptr_t)(f->w + STK_WORDS);
}

/* Frame at word `at`: {next frame's address, pc}. */
static uintptr_t stk_frame(struct stk_fake *f, int at, uintptr_t next,
			   uintptr_t pc)
{
	f->w[at] = next;
	f->w[at + 1] = pc;
	return (uintptr_t)&f->w[at];
}

static uintptr_t stk_word(struct stk_fake *f, int at)
{
	return (uintptr_t)&f->w[at];
}

START_TEST(stack_walk_follows_chain_to_the_top)
{
	struct stk_fake f;
	uintptr_t pcs[8];
	uintptr_t fp;

	stk_fake_init(&f);
	/* The last frame is the last two words of the buffer. */
	stk_frame(&f, STK_WORDS - 2, 0, 0x4003);
	stk_frame(&f, 8, stk_word(&f, STK_WORDS - 2), 0x4002);
	fp = stk_frame(&f, 0, stk_word(&f, 8), 0x4001);
	ck_assert_int_eq(stack__walk(fp, f.lo, f.hi, pcs, 8, 0), 3);
	ck_assert_uint_eq(pcs[0], 0x4001);
	ck_assert_uint_eq(pcs[1], 0x4002);
	ck_assert_uint_eq(pcs[2], 0x4003);
	ck_assert_int_eq(stack__walk(fp, f.lo, f.hi, pcs, 8, 1), 2);
	ck_assert_uint_eq(pcs[0], 0x4002);
	ck_assert_int_eq(stack__walk(fp, f.lo, f.hi, pcs, 2, 0), 2);
	ck_assert_int_eq(stack__walk(fp, f.lo, f.hi, pcs, 0, 0), 0);
	ck_assert_int_eq(stack__walk(fp, f.lo, f.hi, pcs, 8, 3), 0);
	/* An empty or inverted range. */
	ck_assert_int_eq(stack__walk(fp, f.lo, f.lo + 8, pcs, 8, 0), 0);
	ck_assert_int_eq(stack__walk(fp, f.hi, f.lo, pcs, 8, 0), 0);
	free(f.w);
}
END_TEST

START_TEST(stack_walk_stops_at_cycle)
{
	struct stk_fake f;
	uintptr_t pcs[64];

	stk_fake_init(&f);
	/* 0 -> 4 -> 0 and a frame pointing at itself. */
	stk_frame(&f, 0, stk_word(&f, 4), 0x4001);
	stk_frame(&f, 4, stk_word(&f, 0), 0x4002);
	stk_frame(&f, 8, stk_word(&f, 8), 0x4003);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 64, 0),
			 2);
	ck_assert_uint_eq(pcs[1], 0x4002);
	ck_assert_int_eq(stack__walk(stk_word(&f, 8), f.lo, f.hi, pcs, 64, 0),
			 1);
	free(f.w);
}
END_TEST

START_TEST(stack_walk_stops_outside_bounds)
{
	struct stk_fake f;
	uintptr_t pcs[8];

	stk_fake_init(&f);
	/* Past the top, and with its pc word past the top. */
	stk_frame(&f, 0, f.hi, 0x4001);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 1);
	ck_assert_int_eq(
		stack__walk(stk_word(&f, 0), f.lo, f.hi - 8, pcs, 8, 0), 1);
	stk_frame(&f, 0, stk_word(&f, STK_WORDS - 2), 0x4001);
	stk_frame(&f, STK_WORDS - 2, 0, 0x4002);
	ck_assert_int_eq(
		stack__walk(stk_word(&f, 0), f.lo, f.hi - 16, pcs, 8, 0), 1);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 2);
	/* Starting below lo, or at or above hi. */
	ck_assert_int_eq(stack__walk(f.lo - 16, f.lo, f.hi, pcs, 8, 0), 0);
	ck_assert_int_eq(stack__walk(f.hi, f.lo, f.hi, pcs, 8, 0), 0);
	ck_assert_int_eq(stack__walk(0, f.lo, f.hi, pcs, 8, 0), 0);
	ck_assert_int_eq(stack__walk(UINTPTR_MAX & ~(uintptr_t)15, f.lo, f.hi,
				     pcs, 8, 0),
			 0);
	/* At the top of the address space fp + 16 wraps to 0: no read. */
	ck_assert_int_eq(stack__walk(UINTPTR_MAX & ~(uintptr_t)15,
				     UINTPTR_MAX - 64, UINTPTR_MAX, pcs, 8, 0),
			 0);
	free(f.w);
}
END_TEST

START_TEST(stack_walk_stops_at_misaligned)
{
	struct stk_fake f;
	uintptr_t pcs[8];

	stk_fake_init(&f);
	stk_frame(&f, 0, stk_word(&f, 6) + 1, 0x4001);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 1);
	/* 8-byte aligned is not enough. */
	stk_frame(&f, 0, stk_word(&f, 5), 0x4001);
	stk_frame(&f, 5, 0, 0x4002);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 1);
	ck_assert_int_eq(stack__walk(stk_word(&f, 1), f.lo, f.hi, pcs, 8, 0),
			 0);
	free(f.w);
}
END_TEST

START_TEST(stack_walk_stops_at_decreasing)
{
	struct stk_fake f;
	uintptr_t pcs[8];

	stk_fake_init(&f);
	stk_frame(&f, 0, 0, 0x4000);
	stk_frame(&f, 8, stk_word(&f, 0), 0x4001);
	ck_assert_int_eq(stack__walk(stk_word(&f, 8), f.lo, f.hi, pcs, 8, 0),
			 1);
	ck_assert_uint_eq(pcs[0], 0x4001);
	free(f.w);
}
END_TEST

START_TEST(stack_walk_stops_at_low_pc)
{
	struct stk_fake f;
	uintptr_t pcs[8];

	stk_fake_init(&f);
	stk_frame(&f, 0, stk_word(&f, 4), 0x4001);
	stk_frame(&f, 4, stk_word(&f, 8), 4095);
	stk_frame(&f, 8, 0, 0x4003);
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 1);
	f.w[5] = 0;
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 1);
	f.w[5] = 4096;
	ck_assert_int_eq(stack__walk(stk_word(&f, 0), f.lo, f.hi, pcs, 8, 0),
			 3);
	free(f.w);
}
END_TEST

START_TEST(stack_symbolize_names_exported_function)
{
	uintptr_t pcs[4];
	char buf[STACK_SYMBOL_LEN];
	int n;

	ck_assert_int_ge(stk_outer(STACK_FRAME_POINTERS, pcs, 4, 0), 1);
	n = stack_symbolize(pcs[0], buf, sizeof(buf));
	ck_assert_int_eq(n, (int)strlen(buf));
	stk_expect_name(pcs[0], "stk_inner");
	ck_assert_int_eq(buf[n - 1], ')');
}
END_TEST

START_TEST(stack_symbolize_names_call_ending_function)
{
	if (setjmp(stk_jmp) == 0)
		stk_ends_in_noreturn();
	ck_assert_int_ge(stk_noreturn_n, 2);
	stk_expect_name(stk_noreturn_pcs[0], "stk_noreturn");
	stk_expect_name(stk_noreturn_pcs[1], "stk_ends_in_noreturn");
}
END_TEST

START_TEST(stack_capture_keeps_errno)
{
	enum stack_method m = stk_methods[_i];
	uintptr_t pcs[16];
	char buf[STACK_SYMBOL_LEN];

	/* The first capture on a thread is the one that calls into libc. */
	errno = 4321;
	ck_assert_int_ge(stk_outer(m, pcs, ARRAY_SIZE(pcs), 0), 3);
	ck_assert_int_eq(errno, 4321);
	ck_assert_int_gt(stack_symbolize(pcs[0], buf, sizeof(buf)), 0);
	ck_assert_int_gt(stack_symbolize(0x1234, buf, sizeof(buf)), 0);
	ck_assert_int_eq(errno, 4321);
}
END_TEST

START_TEST(stack_symbolize_module_offset_without_symbol)
{
	uintptr_t pcs[4];
	char buf[STACK_SYMBOL_LEN];

	ck_assert_int_ge(stk_hidden(pcs, 4), 1);
	stk_expect_module(pcs[0]);
	/* The length returned is the string's. */
	ck_assert_int_eq(stack_symbolize(pcs[0], buf, sizeof(buf)),
			 (int)strlen(buf));
}
END_TEST

START_TEST(stack_symbolize_unmapped_address_as_hex)
{
	char buf[STACK_SYMBOL_LEN];
	char *heap = malloc(16);

	ck_assert_ptr_nonnull(heap);
	ck_assert_int_eq(stack_symbolize(0x1234, buf, sizeof(buf)), 6);
	ck_assert_str_eq(buf, "0x1234");
	ck_assert_int_eq(stack_symbolize(0, buf, sizeof(buf)), 3);
	ck_assert_str_eq(buf, "0x0");
	ck_assert_int_gt(stack_symbolize((uintptr_t)heap, buf, sizeof(buf)), 0);
	ck_assert_msg(strncmp(buf, "0x", 2) == 0, "%s", buf);
	ck_assert_int_gt(stack_symbolize(UINTPTR_MAX, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "0xffffffffffffffff");
	free(heap);
}
END_TEST

START_TEST(stack_symbolize_small_buffer_is_enospc)
{
	uintptr_t pcs[4];
	char buf[8] = "xxxxxxx";

	/* Below 64 KiB (vm.mmap_min_addr) so that no module is there, even
	 * under valgrind, which loads a PIE at 0x108000. */
	ck_assert_int_eq(stack_symbolize(0x1234, buf, 4), -ENOSPC);
	ck_assert_str_eq(buf, "0x1");
	/* Exactly the length plus its NUL fits; one byte less does not. */
	ck_assert_int_eq(stack_symbolize(0x1234, buf, 7), 6);
	ck_assert_str_eq(buf, "0x1234");
	ck_assert_int_eq(stack_symbolize(0x1234, buf, 6), -ENOSPC);
	ck_assert_str_eq(buf, "0x123");
	buf[0] = 'x';
	ck_assert_int_eq(stack_symbolize(0x1234, buf, 0), -ENOSPC);
	ck_assert_int_eq(buf[0], 'x');
	ck_assert_int_ge(stk_outer(STACK_FRAME_POINTERS, pcs, 4, 0), 1);
	ck_assert_int_eq(stack_symbolize(pcs[0], buf, sizeof(buf)), -ENOSPC);
	ck_assert_str_eq(buf, "stk_inn");
}
END_TEST

START_TEST(stack_config_parses_values)
{
	struct stack_config c;

	ck_assert_int_eq(stack_config_parse(NULL, NULL, &c), 0);
	ck_assert_int_eq(c.depth, STACK_DEFAULT_DEPTH);
	ck_assert_int_eq(c.method, STACK_FRAME_POINTERS);
	ck_assert_int_eq(stack_config_parse("0", "unwind", &c), 0);
	ck_assert_int_eq(c.depth, 0);
	ck_assert_int_eq(c.method, STACK_UNWIND);
	ck_assert_int_eq(stack_config_parse("", "", &c), 0);
	ck_assert_int_eq(c.depth, STACK_DEFAULT_DEPTH);
	ck_assert_int_eq(c.method, STACK_FRAME_POINTERS);
	ck_assert_int_eq(stack_config_parse("128", "fp", &c), 0);
	ck_assert_int_eq(c.depth, STACK_MAX_DEPTH);
	ck_assert_int_eq(stack_config_parse("007", NULL, &c), 0);
	ck_assert_int_eq(c.depth, 7);
}
END_TEST

START_TEST(stack_config_rejects_bad_values)
{
	static const char *const bad[] = { "-1", "+3", " 3", "3 ", "16x",
					   "x", "0x10", "1e3" };
	struct stack_config c = { .depth = -7, .method = STACK_UNWIND };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(stack_config_parse(bad[i], NULL, &c) == -EINVAL,
			      "%s", bad[i]);
	ck_assert_int_eq(stack_config_parse("129", NULL, &c), -ERANGE);
	ck_assert_int_eq(
		stack_config_parse("99999999999999999999999", NULL, &c),
		-ERANGE);
	ck_assert_int_eq(stack_config_parse("8", "FP", &c), -EINVAL);
	ck_assert_int_eq(stack_config_parse("8", "dwarf", &c), -EINVAL);
	/* *out untouched on failure. */
	ck_assert_int_eq(c.depth, -7);
	ck_assert_int_eq(c.method, STACK_UNWIND);
}
END_TEST

START_TEST(stack_config_reads_environment)
{
	struct stack_config c;

	ck_assert_int_eq(setenv(STACK_ENV_DEPTH, "24", 1), 0);
	ck_assert_int_eq(setenv(STACK_ENV_METHOD, "unwind", 1), 0);
	ck_assert_int_eq(stack_config_from_env(&c), 0);
	ck_assert_int_eq(c.depth, 24);
	ck_assert_int_eq(c.method, STACK_UNWIND);
	ck_assert_int_eq(setenv(STACK_ENV_DEPTH, "lots", 1), 0);
	ck_assert_int_eq(stack_config_from_env(&c), -EINVAL);
}
END_TEST

START_TEST(stack_method_names_round_trip)
{
	struct stack_config c;

	for (int m = 0; m < STACK_METHOD_COUNT; m++) {
		const char *name = stack_method_name((enum stack_method)m);

		ck_assert_ptr_nonnull(name);
		ck_assert_int_eq(stack_config_parse(NULL, name, &c), 0);
		ck_assert_int_eq(c.method, m);
	}
	ck_assert_str_eq(stack_method_name(STACK_UNWIND), "unwind");
	ck_assert_ptr_null(stack_method_name(STACK_METHOD_COUNT));
}
END_TEST

static Suite *stack_suite(void)
{
	Suite *s = suite_create("stack");
	TCase *tc = tcase_create("core");
	int nm = (int)ARRAY_SIZE(stk_methods);

	tcase_add_test(tc, stack_fp_finds_callers_innermost_first);
	tcase_add_test(tc, stack_unwind_finds_callers_innermost_first);
	tcase_add_test(tc, stack_methods_agree);
	tcase_add_loop_test(tc, stack_skip_drops_innermost_frames, 0, nm);
	tcase_add_loop_test(tc, stack_max_bounds_count, 0, nm);
	tcase_add_loop_test(tc, stack_deep_stack_fills_max, 0, nm);
	tcase_add_loop_test(tc, stack_capture_on_other_thread, 0, nm);
	tcase_add_loop_test(tc, stack_prepare_then_capture, 0, nm);
#if defined(__x86_64__)
	tcase_add_test(tc, stack_capture_survives_garbage_rbp);
#endif
	tcase_add_test(tc, stack_fp_on_sigaltstack_captures_nothing);
	tcase_add_test(tc, stack_walk_follows_chain_to_the_top);
	tcase_add_test(tc, stack_walk_stops_at_cycle);
	tcase_add_test(tc, stack_walk_stops_outside_bounds);
	tcase_add_test(tc, stack_walk_stops_at_misaligned);
	tcase_add_test(tc, stack_walk_stops_at_decreasing);
	tcase_add_test(tc, stack_walk_stops_at_low_pc);
	tcase_add_test(tc, stack_symbolize_names_exported_function);
	tcase_add_test(tc, stack_symbolize_names_call_ending_function);
	tcase_add_loop_test(tc, stack_capture_keeps_errno, 0, nm);
	tcase_add_test(tc, stack_symbolize_module_offset_without_symbol);
	tcase_add_test(tc, stack_symbolize_unmapped_address_as_hex);
	tcase_add_test(tc, stack_symbolize_small_buffer_is_enospc);
	tcase_add_test(tc, stack_config_parses_values);
	tcase_add_test(tc, stack_config_rejects_bad_values);
	tcase_add_test(tc, stack_config_reads_environment);
	tcase_add_test(tc, stack_method_names_round_trip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(stack_suite());
}
