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

int cli_analyze(int argc, char **argv);

/* The queries to npusand (cli/list.c, findings.c, show.c, stats.c). */
int cli_list(int argc, char **argv);
int cli_findings(int argc, char **argv);
int cli_show(int argc, char **argv);
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
