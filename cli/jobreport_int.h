/*
 * jobreport_int.h - what jobreport.c and jobreport_junit.c share and no
 * other file sees: the job as its two queries gave it (struct jr: its
 * processes, struct jr_proc, and the findings, owned by the replies kept
 * in replies until jr_free()), the sums the verdict is made of, and the
 * helpers both use.
 */
#ifndef NPUSAN_JOBREPORT_INT_H
#define NPUSAN_JOBREPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobreport.h"
#include "npusan.pb-c.h"

/* A process of the job and its findings (a testcase). */
struct jr_proc {
	bool has_id, has_rank, has_pid;
	int64_t id; /* the daemon's process id */
	uint32_t rank, pid;
	const char *state;
	const char *run;  /* NULL: none */
	const char *host; /* its node's hostname; NULL: unknown */
	const char *exe;  /* its executable; NULL: unknown */
	int64_t first_ms; /* when it registered */
	bool launcher;    /* no rank, and did nothing */
	uint64_t events, lost;
	size_t *finds; /* indexes into jr.finds */
	size_t nfinds, finds_cap;
};

struct jr {
	const char *job;
	const char *cmd;
	/* jobreport_findings(): only what was active since, Unix ms; and no
	 * process without a rank that did nothing (a launcher). */
	int64_t since_ms;
	bool json;
	const char *junit;
	int error_exitcode;
	bool allow_incomplete;
	/* The run reported: `run` (NULL: none) when has_run, else the
	 * latest (that of the process that registered last), unless all. */
	bool has_run, all;
	const char *run;
	size_t nruns; /* distinct runs of the job's processes listed */
	/* The job's processes listed, launchers left out of nprocs or not:
	 * whether any registered at all, for the verdict. */
	size_t nseen;
	/* Processes that exited but the daemon had not stored in time. */
	size_t unstored;
	struct client_replies replies; /* every reply, kept for its strings */
	const Npusan__Finding **finds;
	size_t nfinds, finds_cap;
	struct jr_proc *procs;
	size_t nprocs, procs_cap;
	bool answered;
	/* --suppressions (NULL: only the daemon's), and the findings of the
	 * run reported that a suppression matched: out of finds, counted. */
	struct cli_print *pr;
	size_t nsuppressed;
};

/* A kind of finding and how many of the job's findings are of it. */
struct jr_kind {
	const char *kind;
	size_t n;
};

struct jr_sum {
	size_t ranks, findings, unstored, suppressed;
	uint64_t events, lost, occurrences;
	struct jr_kind kinds[16]; /* known kinds first, then others */
	size_t nkinds;
};

/* What the sums say: findings first, a finding being true whatever else
 * was missed. */
enum jobreport_verdict jr__outcome(const struct jr_sum *s);

/*
 * Writes r->junit, the JUnit XML file of the job (jobreport_junit.c): a
 * test case per process but launchers, named by what stays the same from
 * run to run (job, node, rank), a failure per finding, `verdict` as the
 * suite's output. A temporary file beside it, renamed over it. 0; a negative
 * errno (nothing is left behind).
 */
int jr__junit(const struct jr *r, const struct jr_sum *s, const char *verdict);

#endif
