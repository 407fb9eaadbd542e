/*
 * stats.c - `npusanctl stats`: how the daemon is doing.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "client.h"

#define STATS_CMD "npusanctl stats"

static const char stats_usage[] =
	"Usage: npusanctl stats [OPTIONS]\n"
	"\n"
	"How npusand is doing: its uptime, the processes it watches (running\n"
	"and exited), operations analysed per second (over the last few\n"
	"seconds) and in all, operations lost because a ring was full or no\n"
	"daemon ran (records dropped), findings stored, and the size of its\n"
	"database.\n"
	"\n"
	"Options:\n"
	"  --json               the same as one JSON object\n"
	CLIENT_OPTIONS_HELP
	"\n" CLIENT_EXIT_HELP;

static void json_u64(const char *name, bool has, uint64_t v)
{
	if (has)
		printf(",\"%s\":%" PRIu64, name, v);
	else
		printf(",\"%s\":null", name);
}

static void stats_json(const Npusan__StatsReply *r)
{
	fputs("{\"uptime_ms\":", stdout);
	if (r->has_uptime_ms)
		printf("%" PRId64, r->uptime_ms);
	else
		fputs("null", stdout);
	json_u64("processes_running", r->has_processes_running,
		 r->processes_running);
	json_u64("processes_exited", r->has_processes_exited,
		 r->processes_exited);
	fputs(",\"events_per_s\":", stdout);
	if (r->has_events_per_s && isfinite(r->events_per_s))
		printf("%.1f", r->events_per_s);
	else
		fputs("null", stdout);
	json_u64("events", r->has_events, r->events);
	json_u64("lost", r->has_lost, r->lost);
	json_u64("findings", r->has_findings, r->findings);
	json_u64("db_bytes", r->has_db_bytes, r->db_bytes);
	fputs(",\"daemon_version\":", stdout);
	if (r->daemon_version != NULL)
		report_json_string(stdout, r->daemon_version,
				   strlen(r->daemon_version));
	else
		fputs("null", stdout);
	fputs("}\n", stdout);
}

static void line_u64(const char *name, bool has, uint64_t v)
{
	if (has)
		printf("%-16s %" PRIu64 "\n", name, v);
	else
		printf("%-16s -\n", name);
}

static void stats_text(const Npusan__StatsReply *r)
{
	char buf[64];

	if (r->has_uptime_ms) {
		client_span(r->uptime_ms, buf, sizeof(buf));
		printf("%-16s %s\n", "uptime", buf);
	} else {
		printf("%-16s -\n", "uptime");
	}
	printf("%-16s %" PRIu64 " (%" PRIu32 " running, %" PRIu32
	       " exited)\n",
	       "processes",
	       (uint64_t)r->processes_running + r->processes_exited,
	       r->processes_running, r->processes_exited);
	if (r->has_events_per_s && isfinite(r->events_per_s))
		printf("%-16s %.0f\n", "events/s", r->events_per_s);
	else
		printf("%-16s -\n", "events/s");
	line_u64("events", r->has_events, r->events);
	line_u64("records dropped", r->has_lost, r->lost);
	line_u64("findings", r->has_findings, r->findings);
	if (r->has_db_bytes) {
		client_bytes(r->db_bytes, buf, sizeof(buf));
		printf("%-16s %s\n", "database size", buf);
	} else {
		printf("%-16s -\n", "database size");
	}
	if (r->daemon_version != NULL) {
		printf("%-16s ", "daemon version");
		text_put(stdout, r->daemon_version);
		putchar('\n');
	}
}

static int stats_reply_cb(void *arg, Npusan__FromDaemon *m)
{
	bool json = *(bool *)arg;
	int err = -EBADMSG;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_STATS)
		goto out;
	if (json)
		stats_json(m->stats);
	else
		stats_text(m->stats);
	err = CLIENT_DONE;
out:
	npusan__from_daemon__free_unpacked(m, NULL);
	return err;
}

int cli_stats(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	Npusan__StatsRequest req = NPUSAN__STATS_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct client_opts co;
	bool json = false;
	int c, status;

	client_opts_init(&co);
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == CLIENT_OPT_JSON) {
			json = true;
			continue;
		}
		status = client_option(STATS_CMD, c, stats_usage, argv, &co);
		if (status >= 0)
			return status;
	}
	if (cli_no_operands(STATS_CMD, argc, argv) >= 0)
		return CLI_USAGE;
	q.q_case = NPUSAN__QUERY__Q_STATS;
	q.stats = &req;
	status = client_query(&co, STATS_CMD, &q, stats_reply_cb, &json);
	return client_end_output(STATS_CMD, status);
}
