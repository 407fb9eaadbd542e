/*
 * jobreport.h - one job's findings and verdict, as `npusanctl report`
 * computes them, for the commands that end with them (`npusanctl run`).
 */
#ifndef NPUSAN_JOBREPORT_H
#define NPUSAN_JOBREPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "client.h"

/* What a job's verdict says, worst first after findings. */
enum jobreport_verdict {
	JOBREPORT_CLEAN,	/* operations analysed, none lost, no finding */
	JOBREPORT_FINDINGS,	/* at least one finding */
	JOBREPORT_INCOMPLETE,	/* no finding, but operations were lost */
	JOBREPORT_NOTHING,	/* no finding, and no operation analysed */
};

/*
 * The exit status for verdict `v`: CLI_OK; `error_exitcode` for findings;
 * CLI_INCOMPLETE (CLI_OK when `allow_incomplete`); CLI_NOTHING_ANALYSED.
 * The one mapping `report` and `run` share.
 */
int jobreport_status(enum jobreport_verdict v, int error_exitcode,
		     bool allow_incomplete);

/*
 * Asks the daemon for the findings of run `run` (NULL: the processes
 * without one) of job `job` last seen at or after `since_ms` (Unix ms) and
 * its processes active since then (`unstored` of them, which
 * exited, were not stored in time: settle_wait()'s *left), leaving out any without
 * a rank that did nothing (a launcher). Prints each finding in full (with
 * `json`, as docs/findings.md's JSON Lines) on standard output, then
 * report's verdict line (on standard error with `json`, so that standard
 * output holds JSON alone); only those `pr` (NULL: all) wants and has
 * room for (--op, --exclude-op, --print-limit: cli/filter.c), the verdict
 * still counting every one. *verdict is what the verdict says.
 * Returns CLI_OK; CLI_DAEMON after saying what went wrong (prefixed `cmd`).
 */
int jobreport_findings(const struct client_opts *co, const char *cmd,
		       const char *job, const char *run, int64_t since_ms,
		       size_t unstored, bool json, struct cli_print *pr,
		       enum jobreport_verdict *verdict);

#endif
