/*
 * npusanctl.c - the command-line client of npusan: dispatches to one
 * subcommand per verb.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "report.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "run", cli_run,
	  "run a job under npusan, then report its findings" },
	{ "analyze", cli_analyze,
	  "analyse recorded traces offline and report findings" },
	{ "list", cli_list, "the jobs and processes the daemon watches" },
	{ "findings", cli_findings,
	  "the daemon's findings, filtered, as a table or JSON; --follow" },
	{ "show", cli_show, "one finding in full, with its stacks" },
	{ "suppress", cli_suppress,
	  "a suppression entry for a finding, ready to paste" },
	{ "stats", cli_stats, "the daemon's uptime, throughput and database" },
	{ "report", cli_report,
	  "one job's summary and verdict; JSON or JUnit XML for CI" },
	{ "attach", cli_attach,
	  "start analysing running processes (NPUSAN=dormant)" },
	{ "detach", cli_detach, "stop analysing running processes" },
};

static void usage(FILE *out)
{
	fputs("Usage: npusanctl [--socket PATH] [--timeout SECONDS] COMMAND "
	      "[ARGS...]\n"
	      "\n"
	      "npusan finds stream-synchronization errors (data races and\n"
	      "missing record_stream calls) in accelerator jobs.\n"
	      "\n"
	      "Commands:\n",
	      out);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name,
			commands[i].summary);
	fputs("\n"
	      "Run 'npusanctl COMMAND --help' for a command's options.\n"
	      "\n"
	      "Exit status: 0 ok and no findings; 1 findings (run, analyze,\n"
	      "findings and report only); 2 usage error or bad input;\n"
	      "3 no daemon answered or it refused the request (run, list,\n"
	      "findings, show, suppress, stats, report, attach, detach);\n"
	      "4 nothing was analysed and 5 nothing found but operations\n"
	      "were lost, so the verdict is incomplete (run, analyze,\n"
	      "report; 0 with\n"
	      "--allow-incomplete). 'run' exits with the command's own status\n"
	      "when it failed.\n",
	      out);
}

/* How many words of argv[1..] are global options, which every command
 * that asks the daemon takes too: --socket PATH, --timeout SECONDS, in
 * either form (`--socket=PATH`). */
static int global_words(int argc, char **argv)
{
	static const char *const globals[] = { "--socket", "--timeout" };
	int i = 1;

	while (i < argc) {
		size_t len = 0;

		for (size_t g = 0; g < sizeof(globals) / sizeof(*globals); g++) {
			size_t n = strlen(globals[g]);

			if (strncmp(argv[i], globals[g], n) == 0 &&
			    (argv[i][n] == '\0' || argv[i][n] == '='))
				len = argv[i][n] == '=' ? 1 : 2;
		}
		if (len == 0 || i + (int)len > argc)
			break;
		i += (int)len;
	}
	return i - 1;
}

/*
 * `npusanctl --socket S list` means `npusanctl list --socket S`: the global
 * options move behind the command, whose own parser takes them.
 */
static void move_globals(int argc, char **argv)
{
	int n = global_words(argc, argv);
	char *verb;

	if (n == 0 || n + 1 >= argc)
		return;
	verb = argv[n + 1];
	memmove(&argv[2], &argv[1], (size_t)n * sizeof(*argv));
	argv[1] = verb;
}

int main(int argc, char **argv)
{
	const char *verb;

	if (global_words(argc, argv) == argc - 1 && argc > 1) {
		fprintf(stderr, "npusanctl: a command must follow '%s'\n"
				"Try 'npusanctl --help'.\n",
			argv[1]);
		return CLI_USAGE;
	}
	move_globals(argc, argv);
	verb = argc > 1 ? argv[1] : NULL;

	if (verb == NULL) {
		usage(stderr);
		return CLI_USAGE;
	}
	if (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0 ||
	    strcmp(verb, "help") == 0) {
		usage(stdout);
		return CLI_OK;
	}
	if (strcmp(verb, "--version") == 0) {
		printf("npusanctl %s\n", NPUSAN_VERSION);
		return CLI_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(verb, commands[i].name) == 0) {
			int rc = commands[i].run(argc - 1, argv + 1);

			report_fini();
			return rc;
		}
	}
	fprintf(stderr, "npusanctl: unknown command '%s'\n"
			"Try 'npusanctl --help'.\n",
		verb);
	return CLI_USAGE;
}
