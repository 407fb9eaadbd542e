/*
 * procstat.h - a process's start time, from /proc/PID/stat.
 *
 * With the pid, the start time names one process for good: a later
 * process that reuses the pid starts later. The agent sends its own when
 * it registers; the daemon checks it against the kernel's and uses it to
 * tell when a registered process is gone.
 */
#ifndef NPUSAN_PROCSTAT_H
#define NPUSAN_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Field 22 of /proc/PID/stat (clock ticks after boot) into *out. 0; a
 * negative errno from open(2) (-ENOENT: no such process); -EIO when it
 * could not be read; -EINVAL when it does not parse.
 */
int procstat_start_time(pid_t pid, uint64_t *out);

#endif
