/*
 * agentlog.h - the agent's one logger: one line to stderr, never stdout,
 * which belongs to the user's job. Owns nothing.
 */
#ifndef NPUSAN_AGENTLOG_H
#define NPUSAN_AGENTLOG_H

#include <stdarg.h>

/*
 * Writes "npusan: " and the formatted message as one line to stderr in one
 * write(), so that the lines of a job's processes never mix; a message too
 * long for a line is cut. Keeps errno.
 */
void agent_vlog(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
