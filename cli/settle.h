/*
 * settle.h - waiting until the daemon has stored everything the exited
 * processes of a job pushed, so that a query about the job tells all of
 * it (`report`, `findings`, `run`).
 */
#ifndef NPUSAN_SETTLE_H
#define NPUSAN_SETTLE_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/*
 * Waits, up to `timeout_ms`, until no process of job `job` (NULL: any)
 * or of pid `pid` (0: any) that has exited on this host still shows as
 * running or dormant in the daemon, whose last drain of its ring then has
 * not been stored yet. Processes last active before `since_ms` (Unix ms;
 * 0: all) are not waited for. On a timeout, says on standard error
 * (prefixed `cmd`) how many were not stored, and that what follows may
 * be incomplete. *left is that number (0 when all were stored).
 * Returns CLI_OK; CLI_DAEMON after client_query() said why.
 */
int settle_wait(const struct client_opts *co, const char *cmd,
		const char *job, uint32_t pid, int64_t since_ms,
		int timeout_ms, size_t *left);

#endif
