/*
 * gcov_exec.c - the coverage build's (NPUSAN_COVERAGE) wrappers of fork(),
 * execv(), execvp() and _exit() for npusanctl, linked with --wrap, so that
 * what `npusanctl run` does in its children counts: gcov writes a
 * process's counters at exit(), which a child that execs or leaves with
 * _exit() never reaches, and GCC no longer redirects these calls to
 * libgcov's own wrappers. A child starts from zero (it would otherwise
 * write its parent's counts again) and writes its own before it execs or
 * leaves. Not in any other build.
 */
#include <sys/types.h>

#include <gcov.h>

pid_t __real_fork(void);
int __real_execv(const char *path, char *const argv[]);
int __real_execvp(const char *file, char *const argv[]);
void __real__exit(int status) __attribute__((noreturn));

pid_t __wrap_fork(void);
int __wrap_execv(const char *path, char *const argv[]);
int __wrap_execvp(const char *file, char *const argv[]);
void __wrap__exit(int status) __attribute__((noreturn));

pid_t __wrap_fork(void)
{
	pid_t pid = __real_fork();

	if (pid == 0)
		__gcov_reset();
	return pid;
}

/* Written before the exec; counted afresh after one that failed. */
int __wrap_execv(const char *path, char *const argv[])
{
	int ret;

	__gcov_dump();
	ret = __real_execv(path, argv);
	__gcov_reset();
	return ret;
}

int __wrap_execvp(const char *file, char *const argv[])
{
	int ret;

	__gcov_dump();
	ret = __real_execvp(file, argv);
	__gcov_reset();
	return ret;
}

void __wrap__exit(int status)
{
	__gcov_dump();
	__real__exit(status);
}
