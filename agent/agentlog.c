/*
 * agentlog.c - the agent's one logger (see agentlog.h).
 */
#include "agentlog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define AGENT_LOG_PREFIX "npusan: "

void agent_vlog(const char *fmt, va_list ap)
{
	char line[512] = AGENT_LOG_PREFIX;
	size_t off = sizeof(AGENT_LOG_PREFIX) - 1;
	int saved = errno;
	int n = vsnprintf(line + off, sizeof(line) - off - 1, fmt, ap);

	if (n >= 0) {
		/* Cut to what fits, leaving room for the newline. */
		off += (size_t)n < sizeof(line) - off - 1 ?
			       (size_t)n :
			       sizeof(line) - off - 2;
		line[off++] = '\n';
		while (write(STDERR_FILENO, line, off) < 0 && errno == EINTR)
			;
	}
	errno = saved;
}

void agent_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	agent_vlog(fmt, ap);
	va_end(ap);
}
