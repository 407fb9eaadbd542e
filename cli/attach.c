/*
 * attach.c - `npusanctl attach` and `npusanctl detach`: start or stop the
 * analysis of running processes whose agent is loaded (NPUSAN=dormant, or
 * a process detached earlier), by pid or by job.
 *
 * The daemon tells each agent; an attaching agent first sends what it
 * knows is live (streams, events, allocations with their allocation
 * streams), then a gap, so that nothing missed before makes a finding,
 * while every error made after it is found.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"

struct attach {
	const char *cmd;
	bool detach;
	const char *job;
	size_t changed;
	size_t unknown;
};

static const char attach_usage[] =
	"Usage: npusanctl attach [OPTIONS] PID...\n"
	"       npusanctl attach [OPTIONS] --job JOB\n"
	"\n"
	"Starts analysing running processes whose npusan agent is loaded but\n"
	"dormant (they run with NPUSAN=dormant, or were detached): the\n"
	"processes named by pid, or every registered process of job JOB.\n"
	"Each first sends what it knows is live (streams, events and\n"
	"allocations), then a gap: history from before the attach makes no\n"
	"finding, and every error made after it is found. 'npusanctl detach'\n"
	"stops the analysis again; the process keeps running either way.\n"
	"\n"
	"Options:\n"
	"  --job JOB            every registered process of job JOB\n"
	CLIENT_OPTIONS_HELP
	"\n"
	"Prints a line per process attached. Exit status: 0 every process named\n"
	"was attached; 2 usage error, or a pid or job the daemon has no\n"
	"registered process of (a user may name only their own processes);\n"
	"3 no daemon answered or it refused the request.\n";

static const char detach_usage[] =
	"Usage: npusanctl detach [OPTIONS] PID...\n"
	"       npusanctl detach [OPTIONS] --job JOB\n"
	"\n"
	"Stops analysing the processes named by pid, or every registered\n"
	"process of job JOB: their agents push nothing more until 'npusanctl\n"
	"attach'. Their findings so far stay; the processes keep running.\n"
	"\n"
	"Options:\n"
	"  --job JOB            every registered process of job JOB\n"
	CLIENT_OPTIONS_HELP
	"\n"
	"Prints a line per process detached. Exit status: 0 every process\n"
	"named was detached; 2 usage error, or a pid or job the daemon has no\n"
	"registered process of; 3 no daemon answered or it refused the\n"
	"request.\n";

static void attach_print(const struct attach *a, const Npusan__Process *p)
{
	printf("%s pid %" PRIu32, a->detach ? "detached" : "attached", p->pid);
	if (p->job != NULL || p->has_rank) {
		fputs(" (", stdout);
		if (p->job != NULL) {
			fputs("job ", stdout);
			text_put(stdout, p->job);
		}
		if (p->has_rank)
			printf("%srank %" PRIu32, p->job != NULL ? ", " : "",
			       p->rank);
		putchar(')');
	}
	putchar('\n');
}

static int attach_reply_cb(void *arg, Npusan__FromDaemon *m)
{
	struct attach *a = arg;
	const Npusan__AttachReply *r = m->attach;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_ATTACH) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -EBADMSG;
	}
	for (size_t i = 0; i < r->n_processes; i++) {
		if (r->processes[i]->has_pid)
			attach_print(a, r->processes[i]);
	}
	for (size_t i = 0; i < r->n_unknown_pids; i++)
		fprintf(stderr, "%s: no registered process %" PRIu32 " (is it "
				"running with NPUSAN=dormant or NPUSAN=1, and "
				"is it yours?)\n",
			a->cmd, r->unknown_pids[i]);
	a->changed = r->n_processes;
	a->unknown = r->n_unknown_pids;
	npusan__from_daemon__free_unpacked(m, NULL);
	return CLIENT_DONE;
}

/* Parses the options and the pids into `req`: -1 to go on, else a status. */
static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct attach *a, Npusan__AttachRequest *req)
{
	static const struct option longopts[] = {
		CLI_LONGOPT_JOB,
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	const char *usage = a->detach ? detach_usage : attach_usage;
	struct cli_target t = { 0 };
	uint64_t v;
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == CLI_OPT_JOB)
			status = cli_target_option(a->cmd, c, optarg, 0, &t);
		else
			status = client_option(a->cmd, c, usage, argv, co);
		if (status >= 0)
			return status;
	}
	a->job = t.job;
	if ((optind == argc) == (a->job == NULL)) {
		fprintf(stderr, "%s: %s\nTry '%s --help'.\n", a->cmd,
			a->job == NULL ? "which processes? Give PIDs or --job JOB"
				       : "give PIDs or --job JOB, not both",
			a->cmd);
		return CLI_USAGE;
	}
	req->pids = calloc((size_t)(argc - optind) + 1, sizeof(*req->pids));
	if (req->pids == NULL) {
		fprintf(stderr, "%s: out of memory\n", a->cmd);
		return CLI_DAEMON;
	}
	for (int i = optind; i < argc; i++) {
		if (client_parse_u64(argv[i], 1, INT32_MAX, &v) < 0) {
			fprintf(stderr, "%s: a process id is a number from 1 "
					"up, not '%s'\n",
				a->cmd, argv[i]);
			return CLI_USAGE;
		}
		req->pids[req->n_pids++] = (uint32_t)v;
	}
	req->job = (char *)a->job;
	return -1;
}

static int attach_main(int argc, char **argv, bool detach)
{
	Npusan__AttachRequest req = NPUSAN__ATTACH_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct attach a = {
		.cmd = detach ? "npusanctl detach" : "npusanctl attach",
		.detach = detach,
	};
	struct client_opts co;
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &a, &req);
	if (status < 0) {
		req.has_detach = detach;
		req.detach = detach;
		q.q_case = NPUSAN__QUERY__Q_ATTACH;
		q.attach = &req;
		status = client_query(&co, a.cmd, &q, attach_reply_cb, &a);
	}
	if (status == CLI_OK && a.job != NULL && a.changed == 0) {
		fprintf(stderr, "%s: no registered process of job '", a.cmd);
		text_put(stderr, a.job);
		fputs("' (is the job running under npusan, and is it "
		      "yours?)\n", stderr);
		status = CLI_USAGE;
	}
	if (status == CLI_OK && a.unknown > 0)
		status = CLI_USAGE;
	free(req.pids);
	return client_end_output(a.cmd, status);
}

int cli_attach(int argc, char **argv)
{
	return attach_main(argc, argv, false);
}

int cli_detach(int argc, char **argv)
{
	return attach_main(argc, argv, true);
}
