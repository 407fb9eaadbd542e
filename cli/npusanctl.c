/*
 * npusanctl.c - the command-line client of npusan: dispatches to one
 * subcommand per verb.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "analyze", cli_analyze,
	  "analyse recorded traces offline and report findings" },
};

static void usage(FILE *out)
{
	fputs("Usage: npusanctl COMMAND [ARGS...]\n"
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
	      "Exit status: 0 no findings, 1 findings, 2 usage error or bad "
	      "input.\n",
	      out);
}

int main(int argc, char **argv)
{
	const char *verb = argc > 1 ? argv[1] : NULL;

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
		if (strcmp(verb, commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "npusanctl: unknown command '%s'\n"
			"Try 'npusanctl --help'.\n",
		verb);
	return CLI_USAGE;
}
