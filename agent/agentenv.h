/*
 * agentenv.h - the agent's ring settings from its environment (agentenv.c).
 */
#ifndef NPUSAN_AGENTENV_H
#define NPUSAN_AGENTENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* NPUSAN_RING_SIZE: bytes with an optional K, M or G, a power of two from
 * RING_MIN_CAPACITY to RING_MAX_CAPACITY; RING_DEFAULT_CAPACITY when unset
 * or unusable (logged). */
uint64_t agentenv_ring_size(void);

/* NPUSAN_RING_FULL: RING_F_BLOCK for "block"; 0 (drop) for "drop", unset
 * or anything else (logged). */
uint32_t agentenv_ring_flags(void);

/* NPUSAN_RECORD's template `tmpl` with %p replaced by the pid into buf;
 * false when the result does not fit or, in a forked child (`child`),
 * names the parent's file (no %p). */
bool agentenv_record_path(const char *tmpl, bool child, char *buf,
			  size_t len);

#endif
