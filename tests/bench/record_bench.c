/*
 * record_bench.c - what NPUSAN_RECORD costs a process: launches through
 * libnpusan.so with the recorder writing the trace, and the wait at exit
 * for the rest of it.
 *
 * Not a test. Each run is a fresh process (the agent reads NPUSAN_RECORD
 * once, at load) that times launches with 2 read and 2 write ranges and a
 * pre-interned name; its parent times it from fork to reaped exit and takes
 * its CPU time (every thread's, the recorder's included) from wait4().
 *   flood   back to back: the recorder's ring blocks when full, so once the
 *           recorder lags a launch costs what the recorder takes to decode
 *           and write a record; the figure is the recorder's throughput
 *   bursts  100 launches, then a 1 ms nap, 1000 times: a training loop's
 *           pace, where the recorder wakes and writes often
 * Each figure is the median of BENCH_RUNS runs.
 *
 * Build in Release and run:
 *   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF
 *   cmake --build build-bench --target record_bench
 *   build-bench/record_bench [DIR]     (the traces go to DIR, default /tmp)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "npusan.h"

#define BENCH_RUNS 7
#define BENCH_FLOOD 2000000L
#define BENCH_BURSTS 1000L
#define BENCH_BURST 100L

struct bench_result {
	double push_ns; /* per launch, in the process */
	double wall_ms; /* fork to reaped exit */
	double cpu_ms;	/* user + system, every thread */
	long long bytes;
};

static double bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The timed process: prints ns per launch on stdout, then exits, which
 * waits for the recorder. */
static int bench_child(const char *mode)
{
	struct npusan_range r[2] = { { 0, 64 }, { 0, 64 } };
	struct npusan_range w[2] = { { 0, 64 }, { 0, 64 } };
	struct timespec nap = { 0, 1000000 };
	uint32_t op = npusan_intern("aten::add.Tensor");
	bool flood = strcmp(mode, "flood") == 0;
	long n = flood ? BENCH_FLOOD : BENCH_BURSTS * BENCH_BURST;
	double t0, pushed = 0;

	if (!npusan_enabled()) {
		fprintf(stderr, "record_bench: the agent is off\n");
		return 1;
	}
	t0 = bench_now_ns();
	for (long i = 0; i < n; i++) {
		uint64_t base = 0x7f0000000000ull + (uint64_t)(i & 4095) * 256;

		r[0].ptr = base;
		r[1].ptr = base + 64;
		w[0].ptr = base + 128;
		w[1].ptr = base + 192;
		npusan_launch((uint64_t)(i & 3), op, r, 2, w, 2,
			      NPUSAN_STACK_NONE);
		if (!flood && (i + 1) % BENCH_BURST == 0) {
			pushed += bench_now_ns() - t0;
			nanosleep(&nap, NULL);
			t0 = bench_now_ns();
		}
	}
	if (flood)
		pushed = bench_now_ns() - t0;
	printf("%f\n", pushed / (double)n);
	return 0;
}

static int bench_run(const char *self, const char *mode, const char *path,
		     struct bench_result *out)
{
	char env[4400], buf[64] = "";
	char *argv[] = { (char *)self, "--child", (char *)mode, NULL };
	char *envp[] = { env, NULL };
	struct rusage ru;
	struct stat st;
	int fds[2], status;
	double t0;
	ssize_t n;
	pid_t pid;

	snprintf(env, sizeof(env), "NPUSAN_RECORD=%s", path);
	if (pipe(fds) < 0)
		return -errno;
	t0 = bench_now_ns();
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execve(self, argv, envp);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || n <= 0 ||
	    !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;
	out->wall_ms = (bench_now_ns() - t0) / 1e6;
	out->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
	out->push_ns = strtod(buf, NULL);
	out->bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
	unlink(path);
	return 0;
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double bench_median(double *v)
{
	qsort(v, BENCH_RUNS, sizeof(*v), bench_cmp);
	return v[BENCH_RUNS / 2];
}

int main(int argc, char **argv)
{
	static const char *const modes[] = { "flood", "bursts" };
	const char *dir = argc > 1 ? argv[1] : "/tmp";
	char self[4096], path[4200];
	ssize_t len;

	if (argc == 3 && strcmp(argv[1], "--child") == 0)
		return bench_child(argv[2]);
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return 1;
	self[len] = '\0';
	snprintf(path, sizeof(path), "%s/record_bench.%d.trace", dir,
		 (int)getpid());
	printf("record_bench: medians of %d runs; traces in %s\n", BENCH_RUNS,
	       dir);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		double push[BENCH_RUNS], wall[BENCH_RUNS], cpu[BENCH_RUNS];
		struct bench_result res = { 0 };

		for (int i = 0; i < BENCH_RUNS; i++) {
			if (bench_run(self, modes[m], path, &res) < 0) {
				fprintf(stderr, "record_bench: %s: run %d "
					"failed\n", modes[m], i);
				return 1;
			}
			push[i] = res.push_ns;
			wall[i] = res.wall_ms;
			cpu[i] = res.cpu_ms;
		}
		printf("%-6s launch %7.1f ns, process %8.1f ms wall, %8.1f ms "
		       "CPU, trace %lld bytes\n",
		       modes[m], bench_median(push), bench_median(wall),
		       bench_median(cpu), res.bytes);
	}
	return 0;
}
