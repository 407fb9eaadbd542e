/*
 * target.c - --job and --pid, parsed once for every command that takes
 * them (cli.h). Owns nothing: *t points into argv.
 */
#include <assert.h>
#include <stdio.h>

#include "cli.h"
#include "client.h"

int cli_target_option(const char *cmd, int c, const char *arg,
		      unsigned flags, struct cli_target *t)
{
	uint64_t v;

	assert(c == CLI_OPT_JOB || c == CLI_OPT_PID);
	if (c == CLI_OPT_JOB) {
		if ((flags & CLI_TARGET_NAMED) && arg[0] == '\0') {
			fprintf(stderr, "%s: --job needs a name\n", cmd);
			return CLI_USAGE;
		}
		t->job = arg;
		return -1;
	}
	if (client_parse_u64(arg, 1, UINT32_MAX, &v) < 0) {
		fprintf(stderr, "%s: --pid needs a process id, not '%s'\n"
				"Try '%s --help'.\n",
			cmd, arg, cmd);
		return CLI_USAGE;
	}
	t->has_pid = true;
	t->pid = (uint32_t)v;
	return -1;
}

int cli_no_operands(const char *cmd, int argc, char **argv)
{
	if (optind >= argc)
		return -1;
	fprintf(stderr, "%s: unexpected argument '%s'\nTry '%s --help'.\n",
		cmd, argv[optind], cmd);
	return CLI_USAGE;
}
