/*
 * trace_bench.c - how fast the trace reader parses a trace, and how fast
 * `npusanctl analyze` goes through the same file as a whole process.
 *
 * Not a test: it prints figures and never fails on one. The reader is
 * timed over the file held in memory (trace_reader_new_mem(): parsing and
 * interning alone) and over the file itself (trace_reader_open(): read(2)
 * blocks too, as analyze reads it); with --analyze, the given npusanctl is
 * run on the file with its output thrown away, and the wall time of the
 * process over the file's size is its throughput. Each figure is the
 * median of --runs runs, in wall time and in CPU time (the process's
 * user and system time), which a loaded machine inflates less. A large training-like trace comes from
 * `engine_bench --write-trace FILE` (trace_bench.sh makes one).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "symtab.h"
#include "trace.h"

static const char usage[] =
	"Usage: trace_bench [--runs R] [--analyze NPUSANCTL] [--mem-only] "
	"TRACE\n"
	"\n"
	"Times the trace reader over TRACE (in memory, then from the file)\n"
	"and, with --analyze, the process `NPUSANCTL analyze TRACE`; prints\n"
	"MB/s, each the median of R runs (default 5). --mem-only times the\n"
	"reader in memory once and nothing else (for callgrind).\n";

static void die(const char *what)
{
	fprintf(stderr, "trace_bench: %s\n", what);
	exit(2);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double now(void)
{
	return (double)clock_mono_ns() / 1e9;
}

/* Seconds of CPU this process has used. */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double tv_s(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t n = 0;
	char *buf;

	if (fd < 0 || fstat(fd, &st) < 0)
		die(strerror(errno));
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		die("out of memory");
	while (n < (size_t)st.st_size) {
		ssize_t got = read(fd, buf + n, (size_t)st.st_size - n);

		if (got <= 0)
			die("reading the trace failed");
		n += (size_t)got;
	}
	close(fd);
	*len = n;
	return buf;
}

/* Reads every op of r; the count of ops. Exits on a format error. */
static size_t read_all(struct trace_reader *r)
{
	struct op op;
	size_t n = 0;
	int rc;

	while ((rc = trace_read(r, &op)) == 1)
		n++;
	if (rc < 0) {
		fprintf(stderr, "trace_bench: %s\n", trace_reader_error(r));
		exit(1);
	}
	return n;
}

/* Seconds to read the trace: from memory when buf is not NULL, else from
 * the file at path. The op count goes to *nops. */
static double time_reader(const char *buf, size_t len, const char *path,
			  size_t *nops, double *cpu)
{
	struct trace_reader *r;
	struct symtab *syms;
	double c0 = cpu_now(), t0 = now(), t1;
	int err;

	if (symtab_new(&syms) < 0)
		die("out of memory");
	err = buf ? trace_reader_new_mem(buf, len, path, syms, &r) :
		    trace_reader_open(path, syms, &r, NULL);
	if (err < 0)
		die(strerror(-err));
	*nops = read_all(r);
	t1 = now();
	*cpu = cpu_now() - c0;
	trace_reader_close(r);
	symtab_free(syms);
	return t1 - t0;
}

/* Seconds `npusanctl analyze path` runs, output to /dev/null; its CPU
 * seconds in *cpu. */
static double time_analyze(const char *ctl, const char *path, double *cpu)
{
	double t0 = now();
	struct rusage ru;
	int status;
	pid_t pid = fork();

	if (pid < 0)
		die(strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execl(ctl, ctl, "analyze", path, (char *)NULL);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) < 0)
		die(strerror(errno));
	*cpu = tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
	/* 0 clean, 1 findings, 5 incomplete: each read the whole file. */
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 2 ||
	    WEXITSTATUS(status) == 127)
		die("npusanctl analyze failed on the trace");
	return now() - t0;
}

static void report(const char *what, double *secs, double *cpu,
		   unsigned runs, size_t len, size_t nops)
{
	double med = median(secs, runs), cmed = median(cpu, runs);

	printf("%s: %.0f MB/s (%.3f s, %.2e ops/s), median of %u runs "
	       "(fastest %.0f MB/s); CPU time: %.0f MB/s (%.3f s)\n",
	       what, (double)len / 1e6 / med, med, (double)nops / med, runs,
	       (double)len / 1e6 / secs[0], (double)len / 1e6 / cmed, cmed);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "runs", required_argument, NULL, 'r' },
		{ "analyze", required_argument, NULL, 'a' },
		{ "mem-only", no_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ctl = NULL, *path;
	unsigned runs = 5;
	bool mem_only = false;
	size_t len, nops = 0;
	double *secs, *cpu, unused;
	char *buf;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'r' && atoi(optarg) > 0)
			runs = (unsigned)atoi(optarg);
		else if (c == 'a')
			ctl = optarg;
		else if (c == 'm')
			mem_only = true;
		else {
			fputs(usage, c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind + 1 != argc) {
		fputs(usage, stderr);
		return 2;
	}
	path = argv[optind];
	buf = slurp(path, &len);
	if (mem_only) {
		time_reader(buf, len, path, &nops, &unused);
		free(buf);
		return 0;
	}
	secs = malloc(runs * sizeof(*secs));
	cpu = malloc(runs * sizeof(*cpu));
	if (secs == NULL || cpu == NULL)
		die("out of memory");
	printf("trace %s: %.1f MB\n", path, (double)len / 1e6);
	for (unsigned i = 0; i < runs; i++)
		secs[i] = time_reader(buf, len, path, &nops, &cpu[i]);
	report("reader, from memory", secs, cpu, runs, len, nops);
	free(buf);
	for (unsigned i = 0; i < runs; i++)
		secs[i] = time_reader(NULL, 0, path, &nops, &cpu[i]);
	report("reader, from the file", secs, cpu, runs, len, nops);
	if (ctl != NULL) {
		for (unsigned i = 0; i < runs; i++)
			secs[i] = time_analyze(ctl, path, &cpu[i]);
		report("npusanctl analyze, whole process", secs, cpu, runs,
		       len, nops);
	}
	free(secs);
	free(cpu);
	return 0;
}
