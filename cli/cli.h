/*
 * cli.h - the subcommands of npusanctl.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status; none calls exit().
 */
#ifndef NPUSAN_CLI_H
#define NPUSAN_CLI_H

/* Exit statuses shared by every command (shared/spec/findings.md). */
enum {
	CLI_OK = 0,
	CLI_FINDINGS = 1,
	CLI_USAGE = 2, /* a usage error or bad input */
};

int cli_analyze(int argc, char **argv);

#endif
