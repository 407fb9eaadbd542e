/*
 * agent_prog.c - an application linked with libnpusan, driven by
 * test_agent.c: it performs a known sequence of operations through the
 * agent API in one of several ways (argv[1]).
 *
 *   scenario   the operations of SCENARIO_TRACE in test_agent.c: a data
 *              race and a missing record_stream among correct ones
 *   noisy      prints to stdout and stderr and exits with status 3, doing
 *              operations in between
 *   fork       a parent and a forked child, each with its own operations
 *   threads N  N threads, each creating its stream and launching 1000
 *              kernels on it
 *   native     one launch with a native stack from a named function
 *   native_race  a data race between two launches with native stacks,
 *              from native_racer() on streams 0 and 1
 *   exit, kill the scenario, then, once the recorder wrote its last line,
 *              the end of a process that runs no exit handler: _exit(0)
 *              (as every multiprocessing fork worker ends) or SIGKILL
 *   flood N    N launches on one stream, then SIGKILL at once
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npusan.h"

static void scenario(void)
{
	uint32_t step = npusan_intern("train.py:14 in step");
	uint32_t main_ = npusan_intern("train.py:30 in main");
	uint32_t frames[] = { step, main_ };
	uint32_t stack = npusan_intern_stack(frames, 2);
	struct npusan_range x = { 0x1000, 4096 }, y = { 0x2000, 64 };
	struct npusan_range view = { 0x1000 + 64, 16 };

	npusan_alloc(0x1000, 4096, 0, stack);
	npusan_alloc(0x2000, 64, 7, NPUSAN_STACK_NONE);
	npusan_launch(0, npusan_intern("aten::randn"), NULL, 0, &x, 1, stack);
	npusan_stream_create(7);
	npusan_event_create(1);
	npusan_launch(7, npusan_intern("aten::add.Tensor"), &view, 1, &y, 1,
		      NPUSAN_STACK_NONE);
	npusan_event_record(1, 7);
	npusan_launch(0, npusan_intern("aten::mul"), &y, 1, NULL, 0, stack);
	npusan_stream_wait(7, 0);
	npusan_record_stream(0x2000, 0);
	npusan_free(0x1000);
	npusan_free(0x2000);
	npusan_flush();
	npusan_event_wait(1, 0);
	npusan_event_sync(1);
	npusan_stream_sync(7);
	npusan_event_destroy(1);
	npusan_device_sync();
	npusan_alloc(0x3000, 8, NPUSAN_NO_STREAM, NPUSAN_STACK_NONE);
	npusan_gap(5);
	npusan_gap(NPUSAN_LOST_UNKNOWN);
}

static void *thread_main(void *arg)
{
	uint64_t stream = (uint64_t)(uintptr_t)arg;
	uint32_t op = npusan_intern("kernel");
	struct npusan_range r = { stream << 32, 8 };

	npusan_stream_create(stream);
	for (int i = 0; i < 1000; i++) {
		r.ptr = (stream << 32) + (uint64_t)i * 8;
		npusan_launch(stream, op, NULL, 0, &r, 1, NPUSAN_STACK_NONE);
	}
	return NULL;
}

static int threads(int n)
{
	pthread_t t[64];

	if (n < 1 || n > 64)
		return 2;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_main,
			       (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int forked(void)
{
	int status;
	pid_t pid;

	npusan_stream_create(1);
	pid = fork();
	if (pid == 0) {
		npusan_stream_create(2);
		npusan_launch(2, npusan_intern("child_kernel"), NULL, 0, NULL,
			      0, NPUSAN_STACK_NONE);
		exit(0);
	}
	npusan_launch(1, npusan_intern("parent_kernel"), NULL, 0, NULL, 0,
		      NPUSAN_STACK_NONE);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Whether the file NPUSAN_RECORD names for this process ends with
 * `tail`. */
static int recorded(const char *tail)
{
	const char *tmpl = getenv("NPUSAN_RECORD"), *p = strstr(tmpl, "%p");
	char path[4096], buf[64];
	size_t n = strlen(tail);
	int ok = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%.*s%d%s", (int)(p - tmpl), tmpl,
		 (int)getpid(), p + 2);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fseek(f, -(long)n, SEEK_END) == 0 && fread(buf, 1, n, f) == n)
		ok = memcmp(buf, tail, n) == 0;
	fclose(f);
	return ok;
}

/* The scenario, then an end that runs no exit handler once the recorder
 * wrote its last op (10 s at most): only the recorder's thread, never an
 * exit hook, can have written it. */
static int scenario_then(const char *how)
{
	struct timespec nap = { 0, 1000000 };

	scenario();
	for (int ms = 0; ms < 10000 && !recorded("\ngap\n"); ms++)
		nanosleep(&nap, NULL);
	if (strcmp(how, "kill") == 0)
		raise(SIGKILL);
	_exit(0);
}

static int flood(long n)
{
	uint32_t op = npusan_intern("flood");
	struct npusan_range r = { 0, 8 };

	for (long i = 0; i < n; i++) {
		r.ptr = (uint64_t)i * 8;
		npusan_launch(1, op, NULL, 0, &r, 1, NPUSAN_STACK_NONE);
	}
	raise(SIGKILL);
	return 1;
}

/* Not static: -rdynamic exports it, so its frame is named. */
void native_caller(void);

__attribute__((noinline)) void native_caller(void)
{
	npusan_launch(0, npusan_intern("native"), NULL, 0, NULL, 0,
		      NPUSAN_STACK_NATIVE);
	__asm__ volatile("" ::: "memory"); /* keep the call a call */
}

/*
 * Not static, for the same reason. test_symbolize looks for the line after
 * the one that says NATIVE_RACE_LINE: its stacks' innermost frame.
 */
void native_racer(uint64_t stream);

__attribute__((noinline)) void native_racer(uint64_t stream)
{
	struct npusan_range x = { 0x1000, 64 };
	uint32_t op = npusan_intern("native_write");

	/* NATIVE_RACE_LINE is the next one. */
	npusan_launch(stream, op, NULL, 0, &x, 1, NPUSAN_STACK_NATIVE);
	__asm__ volatile("" ::: "memory"); /* keep the call a call */
}

/*
 * Inlined into native_inliner at any optimisation level: test_symbolize
 * shows its line (the one after NATIVE_INLINED_LINE), then the function
 * it was inlined into at the call's (after NATIVE_INLINE_CALL_LINE).
 */
static inline __attribute__((always_inline)) void
native_inlined(uint64_t stream)
{
	struct npusan_range x = { 0x2000, 64 };
	uint32_t op = npusan_intern("inlined_write");

	/* NATIVE_INLINED_LINE is the next one. */
	npusan_launch(stream, op, NULL, 0, &x, 1, NPUSAN_STACK_NATIVE);
	__asm__ volatile("" ::: "memory"); /* keep the call a call */
}

/* Not static, so that -rdynamic names its frame too. */
void native_inliner(uint64_t stream);

__attribute__((noinline)) void native_inliner(uint64_t stream)
{
	/* NATIVE_INLINE_CALL_LINE is the next one. */
	native_inlined(stream);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "scenario") == 0) {
		scenario();
		return 0;
	}
	if (strcmp(argv[1], "noisy") == 0) {
		printf("hello from the application\n");
		scenario();
		fprintf(stderr, "application warning\n");
		printf("goodbye\n");
		return 3;
	}
	if (strcmp(argv[1], "fork") == 0)
		return forked();
	if (strcmp(argv[1], "threads") == 0 && argc == 3)
		return threads(atoi(argv[2]));
	if (strcmp(argv[1], "exit") == 0 || strcmp(argv[1], "kill") == 0)
		return scenario_then(argv[1]);
	if (strcmp(argv[1], "flood") == 0 && argc == 3)
		return flood(atol(argv[2]));
	if (strcmp(argv[1], "native") == 0) {
		native_caller();
		return 0;
	}
	if (strcmp(argv[1], "native_race") == 0) {
		npusan_stream_create(1);
		native_racer(0);
		native_racer(1);
		/* Under npusanctl run, not before the daemon has it all. */
		npusan_wait_drained(10000);
		return 0;
	}
	if (strcmp(argv[1], "native_inline_race") == 0) {
		npusan_stream_create(1);
		native_inliner(0);
		native_inliner(1);
		npusan_wait_drained(10000);
		return 0;
	}
	if (strcmp(argv[1], "drain") == 0) {
		/* One operation, then what waiting for the daemon says. */
		npusan_stream_sync(0);
		printf("%d\n", npusan_wait_drained(10000));
		return 0;
	}
	return 2;
}
