/*
 * show.c - `npusanctl show ID`: one finding in full, with its stacks, as
 * `analyze` prints it, and when the daemon first and last saw it; and
 * `npusanctl suppress ID`: a suppression entry (docs/suppressions.md)
 * that matches it, ready to paste.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cli.h"
#include "client.h"
#include "suppress.h"

#define SHOW_CMD "npusanctl show"
#define SUPPRESS_CMD "npusanctl suppress"

static const char show_usage[] =
	"Usage: npusanctl show [OPTIONS] ID\n"
	"\n"
	"Finding ID (from 'npusanctl findings') in full: the accesses with\n"
	"their streams, operators and stacks, the allocation, how to fix it,\n"
	"how often and when it was seen; the same report 'npusanctl analyze'\n"
	"prints.\n"
	"\n"
	"Options:\n"
	"  --json               the finding as one line of JSON, as\n"
	"                       'npusanctl findings --json' prints it\n"
	CLI_PRINT_LIMIT_HELP
	CLI_GEN_SUPPRESSIONS_HELP
	CLIENT_OPTIONS_HELP
	"\n"
	"Exit status: 0 shown, 2 usage error or no finding ID (that this user\n"
	"may see), 3 no daemon answered or it refused the request.\n";

static const char suppress_usage[] =
	"Usage: npusanctl suppress [OPTIONS] ID\n"
	"\n"
	"A suppression entry that matches finding ID (from 'npusanctl\n"
	"findings'), ready to paste into a file for --suppressions or\n"
	"npusand --suppressions: its kind, the access's operator and every\n"
	"frame of its stack (docs/suppressions.md says how to widen it).\n"
	"\n"
	"Options:\n"
	CLIENT_OPTIONS_HELP
	"\n"
	"Exit status: 0 printed, 2 usage error or no finding ID (that this\n"
	"user may see), 3 no daemon answered or it refused the request.\n";

struct show {
	const char *cmd;
	const char *usage;
	bool json;
	bool shown;
	bool entry_only; /* `suppress`: the entry alone */
	struct cli_print pr; /* --print-limit, --gen-suppressions */
};

static int show_reply_cb(void *arg, Npusan__FromDaemon *m)
{
	struct show *s = arg;
	struct finding_view f;
	int err = -EBADMSG;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_SHOW ||
	    m->show->finding == NULL ||
	    client_finding(m->show->finding, &f) < 0)
		goto out;
	/* Asked for by its id: shown even when suppressed, saying so. */
	if (s->entry_only) {
		suppress_gen(stdout, &f);
	} else if (cli_print_room(&s->pr)) {
		if (s->json)
			report_json(stdout, &f);
		else
			report_text(stdout, report_want_color(stdout), &f);
		cli_print_gen(&s->pr, stdout, s->json, &f);
	}
	s->shown = true;
	err = CLIENT_DONE;
out:
	npusan__from_daemon__free_unpacked(m, NULL);
	return err;
}

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct show *s, Npusan__ShowRequest *req)
{
	static const struct option show_longopts[] = {
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLI_LONGOPT_PRINT_LIMIT,
		CLI_LONGOPT_GEN_SUPPRESSIONS,
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	static const struct option suppress_longopts[] = {
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	const struct option *longopts =
		s->entry_only ? suppress_longopts : show_longopts;
	uint64_t id;
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == CLIENT_OPT_JSON) {
			s->json = true;
			continue;
		}
		if (c == CLI_OPT_PRINT_LIMIT || c == CLI_OPT_GEN_SUPPRESSIONS) {
			status = cli_print_option(s->cmd, c, optarg, &s->pr);
			if (status >= 0)
				return status;
			continue;
		}
		status = client_option(s->cmd, c, s->usage, argv, co);
		if (status >= 0)
			return status;
	}
	if (argc - optind != 1) {
		fprintf(stderr, "%s: %s\nTry '%s --help'.\n", s->cmd,
			optind == argc ? "which finding? Give its ID" :
					 "one ID at a time",
			s->cmd);
		return CLI_USAGE;
	}
	if (client_parse_u64(argv[optind], 1, INT64_MAX, &id) < 0) {
		fprintf(stderr, "%s: a finding ID is a number from 1 up, not "
				"'%s'\n",
			s->cmd, argv[optind]);
		return CLI_USAGE;
	}
	req->has_id = true;
	req->id = (int64_t)id;
	return -1;
}

static int show_main(int argc, char **argv, struct show *s)
{
	Npusan__ShowRequest req = NPUSAN__SHOW_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct client_opts co;
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, s, &req);
	if (status >= 0)
		return status;
	q.q_case = NPUSAN__QUERY__Q_SHOW;
	q.show = &req;
	status = client_query(&co, s->cmd, &q, show_reply_cb, s);
	cli_print_say(&s->pr);
	return client_end_output(s->cmd, status);
}

int cli_show(int argc, char **argv)
{
	struct show s = { .cmd = SHOW_CMD, .usage = show_usage };

	return show_main(argc, argv, &s);
}

int cli_suppress(int argc, char **argv)
{
	struct show s = { .cmd = SUPPRESS_CMD, .usage = suppress_usage,
			  .entry_only = true };

	return show_main(argc, argv, &s);
}
