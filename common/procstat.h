/*
 * procstat.h - a process's start time and whether it is gone, from
 * /proc/PID/stat.
 *
 * With the pid, the start time names one process for good: a later
 * process that reuses the pid starts later. The agent sends its own when
 * it registers; the daemon checks it against the kernel's and uses it to
 * tell when a registered process is gone.
 */
#ifndef NPUSAN_PROCSTAT_H
#define NPUSAN_PROCSTAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Field 22 of /proc/PID/stat (clock ticks after boot) into *out. 0; a
 * negative errno from open(2) (-ENOENT: no such process); -EIO when it
 * could not be read; -EINVAL when it does not parse.
 */
int procstat_start_time(pid_t pid, uint64_t *out);

/*
 * Whether process `pid`, started at `start_time` (0: not known), can run
 * no more code: there is no such process, a later one has its pid, or it
 * is a zombie (it exited and waits to be reaped; a zombie leader whose
 * threads still run is not gone). False when /proc cannot tell (hidepid)
 * but the process exists. The one test of "gone" that the daemon's drain
 * and npusanctl's wait for it share.
 */
bool procstat_gone(pid_t pid, uint64_t start_time);

#endif
