/*
 * agentenv.c - what the agent reads from its environment to set up its
 * rings: their size, what a full ring does, where a recording goes. Owns
 * nothing; a value it cannot use is logged once and the default taken,
 * never a failure of the job.
 */
#include "agentenv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentlog.h"
#include "ring_layout.h"

/* NPUSAN_RING_SIZE: bytes with an optional K, M or G; default 8 MiB. */
uint64_t agentenv_ring_size(void)
{
	const char *v = getenv("NPUSAN_RING_SIZE");
	unsigned long long n;
	char *end;

	if (v == NULL || *v == '\0')
		return RING_DEFAULT_CAPACITY;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (*end == 'K' || *end == 'k')
		n <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		n <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		n <<= 30, end++;
	if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 ||
	    n < RING_MIN_CAPACITY || n > RING_MAX_CAPACITY ||
	    (n & (n - 1)) != 0) {
		agent_log("NPUSAN_RING_SIZE=%s is not a power of two "
			  "from 64K to 1G; using 8M", v);
		return RING_DEFAULT_CAPACITY;
	}
	return n;
}

uint32_t agentenv_ring_flags(void)
{
	const char *v = getenv("NPUSAN_RING_FULL");

	if (v == NULL || *v == '\0' || strcmp(v, "drop") == 0)
		return 0;
	if (strcmp(v, "block") == 0)
		return RING_F_BLOCK;
	agent_log("NPUSAN_RING_FULL=%s is neither drop nor block; "
		  "dropping", v);
	return 0;
}

/* NPUSAN_RECORD with %p replaced by the pid into buf; false when the
 * result does not fit or, in a forked child, names the parent's file. */
bool agentenv_record_path(const char *tmpl, bool child, char *buf,
		    size_t len)
{
	size_t o = 0;
	bool has_pid = false;
	int n;

	for (const char *p = tmpl; *p != '\0' && o < len; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			n = snprintf(buf + o, len - o, "%d", (int)getpid());
			o += n > 0 ? (size_t)n : 0;
			has_pid = true;
			p++;
		} else {
			buf[o++] = *p;
		}
	}
	if (o >= len)
		return false;
	buf[o] = '\0';
	return has_pid || !child;
}
