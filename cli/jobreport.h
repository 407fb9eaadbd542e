/*
 * jobreport.h - one job's findings and verdict, as `npusanctl report`
 * computes them, for the commands that end with them (`npusanctl run`).
 */
#ifndef NPUSAN_JOBREPORT_H
#define NPUSAN_JOBREPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

/*
 * Asks the daemon for job `job`'s findings last seen at or after `since_ms`
 * (Unix ms) and its processes active since then, leaving out any without
 * a rank that did nothing (a launcher). Prints each finding in full (with
 * `json`, as shared/spec/findings.md's JSON Lines) on standard output, then
 * report's verdict line (on standard error with `json`, so that standard
 * output holds JSON alone). *nfindings is how many findings there were.
 * Returns CLI_OK; CLI_DAEMON after saying what went wrong (prefixed `cmd`).
 */
int jobreport_findings(const struct client_opts *co, const char *cmd,
		       const char *job, int64_t since_ms, bool json,
		       size_t *nfindings);

#endif
