/*
 * clock.h - the one monotonic clock: every timeout, deadline, rate and
 * age in npusan is measured on CLOCK_MONOTONIC, which neither jumps with
 * the wall clock nor stops for it. Wall-clock times (findings' first_seen,
 * the store) use time() and say so where they do.
 */
#ifndef NPUSAN_COMMON_CLOCK_H
#define NPUSAN_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC, from an unspecified start. */
static inline uint64_t clock_mono_ns(void)
{
	struct timespec ts;

	/* Cannot fail: CLOCK_MONOTONIC exists and &ts is valid. */
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds on CLOCK_MONOTONIC, from an unspecified start. */
static inline uint64_t clock_mono_ms(void)
{
	return clock_mono_ns() / 1000000u;
}

#endif
