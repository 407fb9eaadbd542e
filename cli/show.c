/*
 * show.c - `npusanctl show ID`: one finding in full, with its stacks, as
 * `analyze` prints it, and when the daemon first and last saw it.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cli.h"
#include "client.h"

#define SHOW_CMD "npusanctl show"

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
	CLIENT_OPTIONS_HELP
	"\n"
	"Exit status: 0 shown, 2 usage error or no finding ID (that this user\n"
	"may see), 3 no daemon answered or it refused the request.\n";

struct show {
	bool json;
	bool shown;
	struct cli_print pr; /* --print-limit */
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
	cli_print_finding(&s->pr, stdout, s->json, report_want_color(stdout),
			  &f);
	s->shown = true;
	err = CLIENT_DONE;
out:
	npusan__from_daemon__free_unpacked(m, NULL);
	return err;
}

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct show *s, Npusan__ShowRequest *req)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLI_LONGOPT_PRINT_LIMIT,
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	uint64_t id;
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == CLIENT_OPT_JSON) {
			s->json = true;
			continue;
		}
		if (c == CLI_OPT_PRINT_LIMIT) {
			status = cli_print_option(SHOW_CMD, c, optarg, &s->pr);
			if (status >= 0)
				return status;
			continue;
		}
		status = client_option(SHOW_CMD, c, show_usage, argv, co);
		if (status >= 0)
			return status;
	}
	if (argc - optind != 1) {
		fprintf(stderr, SHOW_CMD ": %s\nTry '" SHOW_CMD " --help'.\n",
			optind == argc ? "which finding? Give its ID" :
					 "one ID at a time");
		return CLI_USAGE;
	}
	if (client_parse_u64(argv[optind], 1, INT64_MAX, &id) < 0) {
		fprintf(stderr, SHOW_CMD ": a finding ID is a number from 1 "
					 "up, not '%s'\n",
			argv[optind]);
		return CLI_USAGE;
	}
	req->has_id = true;
	req->id = (int64_t)id;
	return -1;
}

int cli_show(int argc, char **argv)
{
	Npusan__ShowRequest req = NPUSAN__SHOW_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct client_opts co;
	struct show s = { 0 };
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &s, &req);
	if (status >= 0)
		return status;
	q.q_case = NPUSAN__QUERY__Q_SHOW;
	q.show = &req;
	status = client_query(&co, SHOW_CMD, &q, show_reply_cb, &s);
	cli_print_say(&s.pr);
	return client_end_output(SHOW_CMD, status);
}
