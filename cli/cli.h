/*
 * cli.h - the subcommands of npusanctl.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status; none calls exit().
 */
#ifndef NPUSAN_CLI_H
#define NPUSAN_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "finding_view.h"

/*
 * Exit statuses shared by every command: 0-2 as docs/findings.md
 * gives them to the tools that report findings.
 */
enum {
	CLI_OK = 0,
	CLI_FINDINGS = 1,
	CLI_USAGE = 2,  /* a usage error or bad input */
	CLI_DAEMON = 3, /* no daemon answered, or it refused the request */
	/* `run` and `report`: npusan analysed no operation of the job. */
	CLI_NOTHING_ANALYSED = 4,
	/* `run` and `report`: no findings, but operations were lost (unless
	 * --allow-incomplete). */
	CLI_INCOMPLETE = 5,
};

/*
 * --job JOB and --pid PID, the processes a command is about (cli/target.c):
 * put CLI_LONGOPT_JOB and CLI_LONGOPT_PID in its getopt_long() options and
 * hand what they return to cli_target_option().
 */
#define CLI_OPT_JOB 'J'
#define CLI_OPT_PID 'P'
#define CLI_LONGOPT_JOB { "job", required_argument, NULL, CLI_OPT_JOB }
#define CLI_LONGOPT_PID { "pid", required_argument, NULL, CLI_OPT_PID }

struct cli_target {
	const char *job; /* NULL when not given */
	bool has_pid;
	uint32_t pid;
};

/* cli_target_option()'s flags: an empty --job is refused. */
#define CLI_TARGET_NAMED 1u

/*
 * Option `c`, CLI_OPT_JOB or CLI_OPT_PID, with its value `arg`, into *t for
 * command `cmd`: -1 to go on parsing, else CLI_USAGE after saying what is
 * wrong (a pid is a number from 1 to 2^32-1).
 */
int cli_target_option(const char *cmd, int c, const char *arg,
		      unsigned flags, struct cli_target *t);

/*
 * After getopt_long(): CLI_USAGE, after naming the first one, when
 * operands are left in argv from `optind` on, for a command `cmd` that
 * takes none; else -1 to go on.
 */
int cli_no_operands(const char *cmd, int argc, char **argv);

/*
 * What a command prints of its findings, and where (cli/filter.c):
 * --op PATTERN and --exclude-op PATTERN (fnmatch(3) globs over the
 * operators of a finding's access and previous access, repeatable),
 * --print-limit N and --output FILE. Put the CLI_LONGOPT_* a command takes
 * in its getopt_long() options and hand what they return to
 * cli_print_option().
 */
#define CLI_OPT_OP 0x200
#define CLI_OPT_EXCLUDE_OP 0x201
#define CLI_OPT_PRINT_LIMIT 0x202
#define CLI_OPT_OUTPUT 0x203
#define CLI_LONGOPT_OP { "op", required_argument, NULL, CLI_OPT_OP }
#define CLI_LONGOPT_EXCLUDE_OP                                           \
	{ "exclude-op", required_argument, NULL, CLI_OPT_EXCLUDE_OP }
#define CLI_LONGOPT_PRINT_LIMIT                                          \
	{ "print-limit", required_argument, NULL, CLI_OPT_PRINT_LIMIT }
#define CLI_LONGOPT_OUTPUT { "output", required_argument, NULL, CLI_OPT_OUTPUT }
/* --suppressions FILE (docs/suppressions.md; default $NPUSAN_SUPPRESSIONS)
 * and --gen-suppressions. */
#define CLI_OPT_SUPPRESSIONS 0x204
#define CLI_OPT_GEN_SUPPRESSIONS 0x205
#define CLI_LONGOPT_SUPPRESSIONS                                         \
	{ "suppressions", required_argument, NULL, CLI_OPT_SUPPRESSIONS }
#define CLI_LONGOPT_GEN_SUPPRESSIONS                                     \
	{ "gen-suppressions", no_argument, NULL, CLI_OPT_GEN_SUPPRESSIONS }

/* Their --help lines. */
#define CLI_FILTER_HELP                                                      \
	"  --op PATTERN         only findings whose access or previous access\n" \
	"                       ran an operator matching the glob PATTERN\n"     \
	"                       (fnmatch(3); repeatable: any matches)\n"         \
	"  --exclude-op PATTERN leave out findings whose access or previous\n"   \
	"                       access ran an operator matching PATTERN\n"       \
	"                       (repeatable); findings left out do not count\n"  \
	"                       toward exit status 1, and standard error says\n" \
	"                       how many were\n"
#define CLI_PRINT_LIMIT_HELP                                                 \
	"  --print-limit N      print at most N findings (0: none); standard\n"  \
	"                       error says how many more there were; the\n"      \
	"                       verdict and exit status are unchanged\n"
#define CLI_OUTPUT_HELP                                                      \
	"  --output FILE        the report (text or JSON) into FILE (created\n"  \
	"                       0644, truncated) instead of standard output;\n"  \
	"                       %p is npusanctl's pid, %q{VAR} the value of\n"   \
	"                       $VAR, %% a '%'\n"

#define CLI_SUPPRESS_HELP                                                    \
	"  --suppressions FILE  leave out the findings FILE's suppressions\n"   \
	"                       match (docs/suppressions.md; default\n"         \
	"                       $NPUSAN_SUPPRESSIONS): they do not count\n"     \
	"                       toward exit status 1, and standard error\n"     \
	"                       says how many each suppressed and which\n"      \
	"                       matched nothing\n"
#define CLI_GEN_SUPPRESSIONS_HELP                                            \
	"  --gen-suppressions   after each finding printed, a suppression\n"    \
	"                       entry that matches it, ready to paste into a\n" \
	"                       --suppressions file (on standard error with\n"  \
	"                       --json)\n"

#define CLI_PRINT_MAX_PATTERNS 32

struct suppress_set;

struct cli_print {
	const char *ops[CLI_PRINT_MAX_PATTERNS]; /* --op */
	size_t nops;
	const char *excl[CLI_PRINT_MAX_PATTERNS]; /* --exclude-op */
	size_t nexcl;
	bool has_limit; /* --print-limit */
	uint64_t limit;
	const char *output; /* --output's template, or NULL */
	char *output_path;  /* its file, once cli_output_open() made it */
	const char *supp_path;	   /* --suppressions, or NULL */
	struct suppress_set *supp; /* its entries, once cli_print_load() */
	bool gen;		   /* --gen-suppressions */
	/* Findings left out by supp, and by the daemon's own suppressions
	 * (a finding_view's `suppressed`), those by each name (copied). */
	uint64_t suppressed, daemon_suppressed;
	struct cli_print_tally {
		char *name;
		uint64_t n;
	} *tally;
	size_t ntally, cap_tally;
	uint64_t kept, filtered;    /* by the filters */
	uint64_t printed, unprinted; /* of those kept, by the limit */
};

/*
 * Option `c` with its value `arg` into *p for command `cmd`: -1 to go on
 * parsing; CLI_USAGE after saying what is wrong; -2 when `c` is none of
 * CLI_OPT_OP, CLI_OPT_EXCLUDE_OP, CLI_OPT_PRINT_LIMIT, CLI_OPT_OUTPUT,
 * CLI_OPT_SUPPRESSIONS, CLI_OPT_GEN_SUPPRESSIONS.
 */
int cli_print_option(const char *cmd, int c, const char *arg,
		     struct cli_print *p);

/*
 * After the options: reads --suppressions' file, else
 * $NPUSAN_SUPPRESSIONS's when set and not empty, into p->supp. -1 to go
 * on; CLI_USAGE after printing "cmd: FILE:LINE: what is wrong". Release
 * with cli_print_free().
 */
int cli_print_load(const char *cmd, struct cli_print *p);

/* Frees what cli_print_load() read and the names the daemon's
 * suppressions were counted under; *p may be loaded again. */
void cli_print_free(struct cli_print *p);

/* Whether `f` is suppressed: by the daemon's suppressions or by p->supp;
 * counts it as such. */
bool cli_print_suppressed(struct cli_print *p, const struct finding_view *f);

/* Whether `f` is neither suppressed nor left out by --op and
 * --exclude-op; counts it as suppressed, kept or filtered. */
bool cli_print_wanted(struct cli_print *p, const struct finding_view *f);

/* With --gen-suppressions, a suppression entry for `f` on `out` (on
 * standard error when `json`). */
void cli_print_gen(const struct cli_print *p, FILE *out, bool json,
		   const struct finding_view *f);

/* Whether one more kept finding may be printed under --print-limit;
 * counts it as printed or not. */
bool cli_print_room(struct cli_print *p);

/* `f` as report_json() or report_text() prints it on `out`, when it passes
 * the filters and the limit. Whether it passed the filters (counts toward
 * the exit status). */
bool cli_print_finding(struct cli_print *p, FILE *out, bool json, bool color,
		       const struct finding_view *f);

/* The lines on standard error for what was not printed, if any, and
 * for each suppression how many findings it matched. */
void cli_print_say(const struct cli_print *p);

/*
 * --output's template `tmpl` expanded into `out` (`cap` bytes): %p
 * npusanctl's pid, %q{NAME} $NAME, %% '%'. -1 when done; CLI_USAGE after
 * saying what is wrong (an unknown %x, %q without {NAME}, $NAME unset, an
 * empty or too long result).
 */
int cli_output_name(const char *cmd, const char *tmpl, char *out, size_t cap);

/* Creates (0644, truncated, close-on-exec) p->output's file into *fd (-1
 * without --output), its name into p->output_path: -1 to go on; CLI_USAGE
 * after saying why it cannot. */
int cli_output_open(const char *cmd, struct cli_print *p, int *fd);

/*
 * Removes the --output file when it is a regular file, saying so: no
 * verdict was reached, and an empty or cut-short report left behind would
 * read as a clean one.
 */
void cli_output_discard(const char *cmd, const struct cli_print *p);

/* From now on standard output is `fd` (none when -1), which is closed:
 * -1 to go on; CLI_USAGE after saying why it cannot. */
int cli_output_to(const char *cmd, int fd);

int cli_analyze(int argc, char **argv);

/* The queries to npusand (cli/list.c, findings.c, show.c, stats.c). */
int cli_list(int argc, char **argv);
int cli_findings(int argc, char **argv);
int cli_show(int argc, char **argv);
/* `suppress ID` (cli/show.c): a suppression entry for finding ID. */
int cli_suppress(int argc, char **argv);
int cli_stats(int argc, char **argv);

/* `report --job J` (cli/jobreport.c): a job's summary, JSON, JUnit XML. */
int cli_report(int argc, char **argv);

/* `run -- CMD` (cli/run.c): a job under npusan, then its findings. */
int cli_run(int argc, char **argv);

/* `attach` and `detach` (cli/attach.c): start and stop the analysis of
 * running processes. */
int cli_attach(int argc, char **argv);
int cli_detach(int argc, char **argv);

#endif
