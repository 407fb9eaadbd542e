/*
 * cli.h - the subcommands of npusanctl.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status; none calls exit().
 */
#ifndef NPUSAN_CLI_H
#define NPUSAN_CLI_H

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
