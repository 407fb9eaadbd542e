/*
 * procstat.c - parsing /proc/PID/stat.
 */
#include "procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The `n`th field (3 up) of a stat line, after the command name. */
static const char *procstat_field(const char *buf, int n)
{
	/* Field 2, the command name, may hold spaces and ')': skip past its
	 * last ')'; the later fields follow, one space before each. */
	const char *p = strrchr(buf, ')');

	for (int field = 3; p != NULL && field <= n; field++) {
		p = strchr(p, ' ');
		if (p != NULL)
			p++;
	}
	return p;
}

/* /proc/PID/stat into buf. 0; a negative errno from open(2); -EIO. */
static int procstat_read(pid_t pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	return 0;
}

/* Field `n` of `buf` as a number into *out. 0; -EINVAL. */
static int procstat_number(const char *buf, int n, uint64_t *out)
{
	const char *p = procstat_field(buf, n);
	unsigned long long v;
	char *end;

	if (p == NULL || *p < '0' || *p > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno != 0 || (*end != ' ' && *end != '\n'))
		return -EINVAL;
	*out = v;
	return 0;
}

int procstat_start_time(pid_t pid, uint64_t *out)
{
	char buf[2048];
	int err = procstat_read(pid, buf, sizeof(buf));

	return err < 0 ? err : procstat_number(buf, 22, out);
}

bool procstat_gone(pid_t pid, uint64_t start_time)
{
	char buf[2048];
	const char *state;
	uint64_t t, threads;
	int err;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	err = procstat_read(pid, buf, sizeof(buf));
	if (err == -ENOENT)
		return true;
	if (err < 0)
		return false;
	if (start_time != 0 && procstat_number(buf, 22, &t) == 0 &&
	    t != start_time)
		return true;
	state = procstat_field(buf, 3);
	/* Field 20: the threads of the group, the zombie leader included
	 * until it is reaped. */
	return state != NULL && (*state == 'Z' || *state == 'X') &&
	       procstat_number(buf, 20, &threads) == 0 && threads <= 1;
}
