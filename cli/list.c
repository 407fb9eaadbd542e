/*
 * list.c - `npusanctl list`: the processes the daemon watches, by job.
 *
 * The daemon answers newest activity first; jobs keep that order (the job
 * with the latest activity first) and within a job processes go by rank,
 * then pid, so that a job's ranks read top to bottom.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "grow.h"
#include "table.h"

#define LIST_CMD "npusanctl list"
#define LIST_RED "\033[1;31m"

static const char list_usage[] =
	"Usage: npusanctl list [OPTIONS]\n"
	"\n"
	"The processes npusand watches, grouped by job: pid, job, rank, state\n"
	"(running; dormant: registered, not analysed until 'npusanctl\n"
	"attach'; or exited), operations analysed (EVENTS), operations lost\n"
	"when a ring was full or a daemon died (LOST), gaps in the analysis\n"
	"(GAPS: lost operations, attaches, daemon restarts; a finding never\n"
	"spans one), findings (and how many of them npusand's suppressions\n"
	"matched: 'N (S suppressed)'), and AGE, the time since the process's\n"
	"last activity. '-' is unknown.\n"
	"\n"
	"Options:\n"
	"  --job JOB            only the processes of job JOB\n"
	"  --pid PID            only process PID\n"
	"  --json               one JSON object per process (JSON Lines), in\n"
	"                       the same order\n" CLIENT_OPTIONS_HELP
	"\n" CLIENT_EXIT_HELP;

struct list {
	bool json;
	struct client_replies replies; /* kept for their processes */
	const Npusan__Process **procs;
	size_t nprocs, capprocs;
};

/* The position of each process's job in the daemon's order, for sorting. */
struct list_row {
	const Npusan__Process *p;
	size_t group, order;
};

/* Keeps `m` and its processes. 0; -ENOMEM (`m` is then not kept). */
static int list_keep(struct list *l, Npusan__FromDaemon *m)
{
	const Npusan__ListReply *r = m->list;

	if (grow_array((void **)&l->procs, &l->capprocs,
		       l->nprocs + r->n_processes, sizeof(*l->procs)) < 0 ||
	    client_replies_keep(&l->replies, m) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_processes; i++)
		l->procs[l->nprocs++] = r->processes[i];
	return 0;
}

static int list_reply_cb(void *arg, Npusan__FromDaemon *m)
{
	struct list *l = arg;
	bool done;
	int err = -EBADMSG;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_LIST)
		goto err;
	done = m->list->has_done && m->list->done;
	err = list_keep(l, m);
	if (err < 0)
		goto err;
	return done ? CLIENT_DONE : CLIENT_MORE;
err:
	npusan__from_daemon__free_unpacked(m, NULL);
	return err;
}

static bool same_job(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct list_row *a = pa, *b = pb;

	if (a->group != b->group)
		return a->group < b->group ? -1 : 1;
	if (a->p->has_rank != b->p->has_rank)
		return a->p->has_rank ? -1 : 1;
	if (a->p->has_rank && a->p->rank != b->p->rank)
		return a->p->rank < b->p->rank ? -1 : 1;
	if (a->p->pid != b->p->pid)
		return a->p->pid < b->p->pid ? -1 : 1;
	return a->order < b->order ? -1 : a->order > b->order;
}

/* Rows by job (no job first), then in the daemon's order. */
static int job_cmp(const void *pa, const void *pb)
{
	const struct list_row *a = pa, *b = pb;
	const char *ja = a->p->job, *jb = b->p->job;
	int c = ja == NULL ? -(jb != NULL) : jb == NULL ? 1 : strcmp(ja, jb);

	if (c != 0)
		return c;
	return a->order < b->order ? -1 : a->order > b->order;
}

/*
 * The processes in print order, grouped by job in the order of each job's
 * first process; NULL when out of memory. Sorting by job finds the groups
 * in n log n: a host's list holds tens of thousands of processes.
 */
static struct list_row *list_rows(const struct list *l)
{
	struct list_row *rows = calloc(l->nprocs ? l->nprocs : 1,
				       sizeof(*rows));

	if (rows == NULL)
		return NULL;
	for (size_t i = 0; i < l->nprocs; i++)
		rows[i] = (struct list_row){ l->procs[i], i, i };
	qsort(rows, l->nprocs, sizeof(*rows), job_cmp);
	for (size_t i = 1; i < l->nprocs; i++) {
		if (same_job(rows[i - 1].p->job, rows[i].p->job))
			rows[i].group = rows[i - 1].group;
	}
	qsort(rows, l->nprocs, sizeof(*rows), row_cmp);
	return rows;
}

static void json_u64(const char *name, bool has, uint64_t v)
{
	if (has)
		printf(",\"%s\":%" PRIu64, name, v);
	else
		printf(",\"%s\":null", name);
}

static void json_str(const char *name, const char *s)
{
	printf(",\"%s\":", name);
	if (s != NULL)
		report_json_string(stdout, s, strlen(s));
	else
		fputs("null", stdout);
}

static void json_time(const char *name, bool has, int64_t ms)
{
	char buf[REPORT_TIME_MAX];

	if (has && report_time(ms, buf) == 0)
		printf(",\"%s\":\"%s\"", name, buf);
	else
		printf(",\"%s\":null", name);
}

static void list_json(const Npusan__Process *p)
{
	printf("{\"id\":");
	if (p->has_id)
		printf("%" PRId64, p->id);
	else
		fputs("null", stdout);
	json_u64("pid", p->has_pid, p->pid);
	json_str("job", p->job);
	json_u64("rank", p->has_rank, p->rank);
	json_u64("local_rank", p->has_local_rank, p->local_rank);
	json_u64("world_size", p->has_world_size, p->world_size);
	json_str("state", p->state);
	json_u64("events", p->has_events, p->events);
	json_u64("lost", p->has_lost, p->lost);
	json_u64("gaps", p->has_gaps, p->gaps);
	json_u64("findings", p->has_findings, p->findings);
	json_u64("suppressed", p->has_suppressed, p->suppressed);
	json_u64("uid", p->has_uid, p->uid);
	json_str("host", p->hostname);
	json_str("executable", p->executable);
	json_str("run", p->run);
	json_u64("start_time", p->has_start_time, p->start_time);
	json_time("first_seen", p->has_first_ms, p->first_ms);
	json_time("last_seen", p->has_last_ms, p->last_ms);
	fputs("}\n", stdout);
}

/* Adds `p`'s row to `t`. 0; -ENOMEM. */
static int list_row_add(struct table *t, const Npusan__Process *p,
			int64_t now)
{
	char num[7][24];
	char finds[64];
	const char *cells[9], *paint[9] = { NULL };
	uint64_t supp = p->has_suppressed ? p->suppressed : 0;

	snprintf(num[0], sizeof(num[0]), "%" PRIu32, p->pid);
	snprintf(num[1], sizeof(num[1]), "%" PRIu32, p->rank);
	snprintf(num[2], sizeof(num[2]), "%" PRIu64, p->events);
	snprintf(num[3], sizeof(num[3]), "%" PRIu64, p->lost);
	snprintf(num[4], sizeof(num[4]), "%" PRIu64, p->findings);
	if (supp > 0)
		snprintf(finds, sizeof(finds), "%s (%" PRIu64 " suppressed)",
			 num[4], supp);
	else
		snprintf(finds, sizeof(finds), "%s", num[4]);
	client_age(now - p->last_ms, num[5], sizeof(num[5]));
	snprintf(num[6], sizeof(num[6]), "%" PRIu64, p->gaps);
	cells[0] = p->job;
	cells[1] = p->has_pid ? num[0] : NULL;
	cells[2] = p->has_rank ? num[1] : NULL;
	cells[3] = p->state;
	cells[4] = p->has_events ? num[2] : NULL;
	cells[5] = p->has_lost ? num[3] : NULL;
	cells[6] = p->has_gaps ? num[6] : NULL;
	cells[7] = p->has_findings ? finds : NULL;
	cells[8] = p->has_last_ms ? num[5] : NULL;
	if (p->has_lost && p->lost > 0)
		paint[5] = LIST_RED;
	/* Red for findings no suppression matched. */
	if (p->has_findings && p->findings > supp)
		paint[7] = LIST_RED;
	return table_add(t, cells, paint);
}

static int list_table(const struct list_row *rows, size_t n)
{
	static const struct table_col cols[] = {
		{ "JOB", TABLE_LEFT },	   { "PID", TABLE_RIGHT },
		{ "RANK", TABLE_RIGHT },   { "STATE", TABLE_LEFT },
		{ "EVENTS", TABLE_RIGHT }, { "LOST", TABLE_RIGHT },
		{ "GAPS", TABLE_RIGHT },   { "FINDINGS", TABLE_RIGHT },
		{ "AGE", TABLE_LEFT },
	};
	int64_t now = client_now_ms();
	struct table *t;

	if (table_new(cols, sizeof(cols) / sizeof(cols[0]),
		      report_want_color(stdout), &t) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && rows[i].group != rows[i - 1].group &&
		    table_break(t) < 0)
			goto err;
		if (list_row_add(t, rows[i].p, now) < 0)
			goto err;
	}
	table_flush(t, stdout);
	table_free(t);
	return 0;
err:
	table_free(t);
	return -1;
}

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct list *l, Npusan__ListRequest *req)
{
	static const struct option longopts[] = {
		CLI_LONGOPT_JOB,
		CLI_LONGOPT_PID,
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_target t = { 0 };
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		status = -1;
		if (c == CLI_OPT_JOB || c == CLI_OPT_PID)
			status = cli_target_option(LIST_CMD, c, optarg, 0, &t);
		else if (c == CLIENT_OPT_JSON)
			l->json = true;
		else
			status = client_option(LIST_CMD, c, list_usage, argv,
					       co);
		if (status >= 0)
			return status;
	}
	if (cli_no_operands(LIST_CMD, argc, argv) >= 0)
		return CLI_USAGE;
	req->job = (char *)t.job;
	req->has_pid = t.has_pid;
	req->pid = t.pid;
	return -1;
}

int cli_list(int argc, char **argv)
{
	Npusan__ListRequest req = NPUSAN__LIST_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct client_opts co;
	struct list l = { 0 };
	struct list_row *rows = NULL;
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &l, &req);
	if (status >= 0)
		return status;
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &req;
	status = client_query(&co, LIST_CMD, &q, list_reply_cb, &l);
	if (status == CLI_OK) {
		rows = list_rows(&l);
		if (rows == NULL) {
			fprintf(stderr, LIST_CMD ": out of memory\n");
			status = CLI_DAEMON;
		} else if (l.json) {
			for (size_t i = 0; i < l.nprocs; i++)
				list_json(rows[i].p);
		} else if (l.nprocs == 0) {
			puts(req.job != NULL || req.has_pid ?
				     "No process matches." :
				     "No processes.");
		} else if (list_table(rows, l.nprocs) < 0) {
			fprintf(stderr, LIST_CMD ": out of memory\n");
			status = CLI_DAEMON;
		}
	}
	free(rows);
	client_replies_free(&l.replies);
	free(l.procs);
	return client_end_output(LIST_CMD, status);
}
