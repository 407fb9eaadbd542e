/*
 * procstat.c - parsing /proc/PID/stat.
 */
#include "procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int procstat_start_time(pid_t pid, uint64_t *out)
{
	char path[64], buf[2048], *p, *end;
	unsigned long long t;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* Field 2, the command name, may hold spaces and ')': skip past its
	 * last ')'; fields 3 to 22 follow, one space before each. */
	p = strrchr(buf, ')');
	for (int field = 3; p != NULL && field <= 22; field++) {
		p = strchr(p, ' ');
		if (p != NULL)
			p++;
	}
	if (p == NULL || *p < '0' || *p > '9')
		return -EINVAL;
	errno = 0;
	t = strtoull(p, &end, 10);
	if (errno != 0 || (*end != ' ' && *end != '\n'))
		return -EINVAL;
	*out = t;
	return 0;
}
