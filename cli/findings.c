/*
 * findings.c - `npusanctl findings`: the daemon's findings, filtered, as a
 * table or as the JSON Lines of docs/findings.md, optionally
 * followed as the daemon stores new ones.
 *
 * JSON lines are printed as frames arrive; the table waits for the whole
 * answer so that its columns line up, then (with --follow) prints each
 * later finding as a row of its own. Following asks the daemon again every
 * second (client_follow()) for what was seen lately, and prints a finding
 * again when its count grew: a new row, or an updated one.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "grow.h"
#include "settle.h"
#include "table.h"
#include "u64map.h"

#define FINDINGS_CMD "npusanctl findings"
#define FINDINGS_RED "\033[1;31m"
/* Following asks for the findings last seen this long before the previous
 * ask began: a finding is stored a little after it was last seen (the
 * daemon's drain, then its writer's commit). What was printed is not
 * printed again unless its count grew. */
#define FINDINGS_FOLLOW_OVERLAP_MS 10000

static const char findings_usage[] =
	"Usage: npusanctl findings [OPTIONS]\n"
	"\n"
	"The findings npusand stored, oldest first: a table with the\n"
	"finding's id, kind, job, rank, pid, operators (OPS), streams, count\n"
	"of occurrences and the time since it was last seen. OPS and STREAMS\n"
	"name the flagged access first, then the earlier access it races\n"
	"with (data_race) or the allocation's stream (missing_record_stream,\n"
	"stale_graph_address); '?' where there is none (unjoined_capture).\n"
	"'npusanctl show ID' prints a finding in full.\n"
	"\n"
	"Options:\n"
	"  --job JOB            only findings of job JOB\n"
	"  --pid PID            only findings of process PID\n"
	"  --rank RANK          only findings of rank RANK\n"
	"  --kind KIND          only findings of KIND: data_race,\n"
	"                       missing_record_stream, stale_graph_address or\n"
	"                       unjoined_capture\n"
	"  --since WHEN         only findings last seen at or after WHEN: a\n"
	"                       duration back from now (30s, 10m, 2h, 1d, 1w,\n"
	"                       1h30m) or a timestamp (2024-05-01T10:00:00Z,\n"
	"                       UTC unless it has an offset such as +02:00)\n"
	"  --limit N            at most the newest N findings of those the\n"
	"                       other options keep (--op, --exclude-op and\n"
	"                       suppressions too; 0: all)\n"
	"  --json               JSON Lines exactly as docs/findings.md\n"
	"                       defines them, first_seen and last_seen in UTC\n"
	"  --follow             then print each finding the daemon stores or\n"
	"                       updates (its count grew), within a second,\n"
	"                       until interrupted (Ctrl-C: exit status 0); a\n"
	"                       daemon that restarts is waited for\n"
	CLI_FILTER_HELP
	CLI_SUPPRESS_HELP
	CLIENT_OPTIONS_HELP
	"\n"
	"With --job or --pid, the findings of processes that have exited are\n"
	"waited for (up to --timeout) until the daemon has stored all they\n"
	"left.\n"
	"\n"
	"Exit status: 0 no findings (or --follow ended by SIGINT or SIGTERM),\n"
	"1 findings (those left out by --op or --exclude-op, or suppressed,\n"
	"count as none),\n"
	"2 usage error, 3 no daemon answered or it refused the request.\n";

struct findings {
	bool json, follow;
	bool answered; /* the first `done` came */
	struct table *t;
	uint64_t printed;
	struct cli_print pr; /* --op, --exclude-op */
	/* Following: the count printed of each finding id, the user's
	 * --since (0: none) and when the latest ask began (Unix ms). */
	struct u64map shown;
	int64_t since_ms, asked_ms;
	/*
	 * --limit N (0: all), counted here after every filter, the daemon's
	 * suppressions among them: a limit the daemon applied first would
	 * let N newer findings the filters leave out hide every older one
	 * they keep, and exit 0 on them. The first answer is held whole
	 * (its frames, and a view of each kept finding into them) until
	 * `done`, then its newest N kept are printed.
	 */
	bool has_limit, asked_again;
	uint64_t limit;
	struct client_replies held;
	struct finding_view *kept;
	size_t nkept, capkept;
};

/*
 * Whether `f` is to be printed. When following, only when new or its
 * count grew, and the filters are asked once per finding, so that what
 * they left out is counted once however often its count grows: `shown`
 * keeps each id's count shifted left by one over whether it was kept.
 * 0 no, 1 yes; -ENOMEM.
 */
static int findings_news(struct findings *s, const struct finding_view *f)
{
	uint64_t *was;
	bool keep;

	if (!s->follow)
		return cli_print_wanted(&s->pr, f);
	was = u64map_get(&s->shown, f->id);
	if (was != NULL && *was >> 1 == f->count)
		return 0;
	keep = was != NULL ? (*was & 1) : cli_print_wanted(&s->pr, f);
	if (u64map_put(&s->shown, f->id, f->count << 1 | keep) < 0)
		return -ENOMEM;
	return keep;
}

/* client_again_cb: the next ask covers what was seen since the last. */
static void findings_again_cb(void *arg, Npusan__Query *q)
{
	struct findings *s = arg;
	Npusan__FindingsRequest *req = q->findings;
	int64_t since = s->asked_ms - FINDINGS_FOLLOW_OVERLAP_MS;

	req->has_since_ms = true;
	req->since_ms = since > s->since_ms ? since : s->since_ms;
	s->asked_again = true;
	s->asked_ms = client_now_ms();
	s->answered = false;
}

/* Adds `f`'s row. 0; -ENOMEM. */
static int findings_row(struct table *t, const struct finding_view *f)
{
	static const char *const paint[9] = { [1] = FINDINGS_RED };
	char num[5][24], streams[48], seen[32];
	char *ops = NULL;
	const char *cells[9];
	int n, err;

	snprintf(num[0], sizeof(num[0]), "%" PRIu64, f->id);
	snprintf(num[1], sizeof(num[1]), "%" PRIu64, f->rank);
	snprintf(num[2], sizeof(num[2]), "%" PRIu64, f->pid);
	snprintf(num[3], sizeof(num[3]), "%" PRIu64, f->count);
	snprintf(num[4], sizeof(num[4]), "%" PRIu64,
		 f->has_previous ? f->previous.stream : f->alloc.stream);
	snprintf(streams, sizeof(streams), "%" PRIu64 "/%s", f->access.stream,
		 f->has_previous || (f->has_alloc && f->alloc.has_stream) ?
			 num[4] :
			 "?");
	if (f->has_previous)
		n = asprintf(&ops, "%s/%s", f->access.op ? f->access.op : "?",
			     f->previous.op ? f->previous.op : "?");
	else
		n = asprintf(&ops, "%s", f->access.op ? f->access.op : "?");
	if (n < 0)
		return -ENOMEM;
	if (f->has_last) {
		client_age(client_now_ms() - f->last_ms, seen, sizeof(seen));
		strcat(seen, " ago");
	}
	cells[0] = num[0];
	cells[1] = f->kind;
	cells[2] = f->job;
	cells[3] = f->has_rank ? num[1] : NULL;
	cells[4] = f->has_pid ? num[2] : NULL;
	cells[5] = ops;
	cells[6] = streams;
	cells[7] = num[3];
	cells[8] = f->has_last ? seen : NULL;
	err = table_add(t, cells, paint);
	free(ops);
	return err;
}

/* Prints `f`, one the filters kept. 0; -ENOMEM. */
static int findings_print(struct findings *s, const struct finding_view *f)
{
	int err = 0;

	if (s->json)
		report_json(stdout, f);
	else
		err = findings_row(s->t, f);
	s->printed += err == 0;
	return err;
}

/* Whether the answer is being held for --limit: the first one only, as
 * following prints what is new since. */
static bool findings_holding(const struct findings *s)
{
	return s->has_limit && s->limit > 0 && !s->asked_again;
}

/* Holds frame `m` and the view `f` of one of its findings that the
 * filters kept, for --limit. 0; -ENOMEM. */
static int findings_keep(struct findings *s, const struct finding_view *f)
{
	if (grow_array((void **)&s->kept, &s->capkept, s->nkept + 1,
		       sizeof(*s->kept)) < 0)
		return -ENOMEM;
	s->kept[s->nkept++] = *f;
	return 0;
}

/* The held answer's newest --limit kept findings, printed in the order
 * they came (oldest first, as the daemon sends them). 0; -ENOMEM. */
static int findings_print_held(struct findings *s)
{
	size_t from = s->nkept > s->limit ? s->nkept - (size_t)s->limit : 0;
	int err = 0;

	for (size_t i = from; i < s->nkept && err == 0; i++)
		err = findings_print(s, &s->kept[i]);
	return err;
}

/* Frees the held frames and views. */
static void findings_drop_held(struct findings *s)
{
	client_replies_free(&s->held);
	free(s->kept);
	s->kept = NULL;
	s->nkept = s->capkept = 0;
}

/* Prints, or holds for --limit, each finding of reply `r` the filters
 * keep. 0; -EBADMSG; -ENOMEM. */
static int findings_take(struct findings *s, const Npusan__FindingsReply *r)
{
	for (size_t i = 0; i < r->n_findings; i++) {
		struct finding_view f;
		int err = client_finding(r->findings[i], &f);

		if (err == 0)
			err = findings_news(s, &f);
		if (err < 0)
			return err;
		if (err == 0)
			continue;
		err = findings_holding(s) ? findings_keep(s, &f) :
					    findings_print(s, &f);
		if (err < 0)
			return err;
	}
	return 0;
}

/* The end of an answer: the held findings, then the table. 0; -ENOMEM. */
static int findings_answered(struct findings *s, bool held)
{
	int err = held ? findings_print_held(s) : 0;

	if (held)
		findings_drop_held(s);
	if (err == 0 && !s->json) {
		if (s->printed == 0 && !s->follow)
			puts("No findings.");
		else
			table_flush(s->t, stdout);
	}
	return err;
}

static int findings_reply_cb(void *arg, Npusan__FromDaemon *m)
{
	struct findings *s = arg;
	bool hold = findings_holding(s);
	int err = -EBADMSG;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_FINDINGS)
		goto out;
	if (hold && (err = client_replies_keep(&s->held, m)) < 0)
		goto out;
	err = findings_take(s, m->findings);
	s->answered = m->findings->has_done && m->findings->done;
	if (hold)
		m = NULL; /* s->held frees it */
	if (err == 0 && s->answered)
		err = findings_answered(s, hold);
	if (err == 0)
		err = s->answered ? CLIENT_DONE : CLIENT_MORE;
out:
	if (m != NULL)
		npusan__from_daemon__free_unpacked(m, NULL);
	return err;
}

/* Exactly `n` ASCII digits at *p, into *v; advances *p. */
static bool digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return false;
		*v = *v * 10 + (**p - '0');
	}
	return true;
}

/*
 * An RFC 3339 timestamp (the time and its seconds optional, 'T' or a
 * space before the time, no zone meaning UTC) as Unix ms. 0; -EINVAL.
 */
static int parse_timestamp(const char *s, int64_t *ms)
{
	struct tm tm = { 0 };
	int y, mo, d, h = 0, mi = 0, sec = 0, oh, om, frac = 0;
	int64_t off = 0;
	time_t t;

	if (!digits(&s, 4, &y) || *s++ != '-' || !digits(&s, 2, &mo) ||
	    *s++ != '-' || !digits(&s, 2, &d))
		return -EINVAL;
	if (*s == 'T' || *s == 't' || *s == ' ') {
		s++;
		if (!digits(&s, 2, &h) || *s++ != ':' || !digits(&s, 2, &mi))
			return -EINVAL;
		if (*s == ':' && (s++, !digits(&s, 2, &sec)))
			return -EINVAL;
		if (*s == '.') {
			int scale = 100;

			if (*++s < '0' || *s > '9')
				return -EINVAL;
			for (; *s >= '0' && *s <= '9'; s++, scale /= 10)
				frac += (*s - '0') * scale;
		}
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		int sign = *s++ == '-' ? -1 : 1;

		if (!digits(&s, 2, &oh) || *s++ != ':' || !digits(&s, 2, &om) ||
		    oh > 23 || om > 59)
			return -EINVAL;
		off = sign * ((int64_t)oh * 60 + om) * 60000;
	}
	if (*s != '\0' || y < 1970 || mo < 1 || mo > 12 || d < 1 || h > 23 ||
	    mi > 59 || sec > 60)
		return -EINVAL;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	/* timegm() normalises: 2024-02-30 came back as March. */
	if (t == (time_t)-1 || tm.tm_mday != d || tm.tm_mon != mo - 1)
		return -EINVAL;
	*ms = (int64_t)t * 1000 + frac - off;
	return 0;
}

/* A duration such as 90s, 10m, 1h30m, 2d, 1w or 500ms, in ms. */
static int parse_duration(const char *s, int64_t *ms)
{
	static const struct {
		const char *name;
		int64_t ms;
	} units[] = {
		{ "ms", 1 },	     { "s", 1000 },	  { "m", 60000 },
		{ "h", 3600000 },    { "d", 86400000 },	  { "w", 604800000 },
	};
	int64_t total = 0;

	if (*s == '\0')
		return -EINVAL;
	while (*s != '\0') {
		uint64_t v = 0;
		size_t u;

		if (*s < '0' || *s > '9')
			return -EINVAL;
		for (; *s >= '0' && *s <= '9'; s++) {
			v = v * 10 + (uint64_t)(*s - '0');
			if (v > INT64_MAX / 604800000)
				return -EINVAL;
		}
		for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
			size_t n = strlen(units[u].name);

			if (strncmp(s, units[u].name, n) == 0 &&
			    (s[n] == '\0' || (s[n] >= '0' && s[n] <= '9')))
				break;
		}
		if (u == sizeof(units) / sizeof(units[0]))
			return -EINVAL;
		s += strlen(units[u].name);
		total += (int64_t)v * units[u].ms;
		if (total > INT64_MAX / 2)
			return -EINVAL;
	}
	*ms = total;
	return 0;
}

/* --since WHEN as Unix ms. 0; -EINVAL. */
static int parse_since(const char *s, int64_t *ms)
{
	int64_t d;

	if (strlen(s) >= 5 && s[4] == '-')
		return parse_timestamp(s, ms);
	if (parse_duration(s, &d) < 0)
		return -EINVAL;
	*ms = client_now_ms() - d;
	return 0;
}

static int bad_value(const char *opt, const char *want, const char *arg)
{
	fprintf(stderr, FINDINGS_CMD ": %s needs %s, not '%s'\n"
				     "Try '" FINDINGS_CMD " --help'.\n",
		opt, want, arg);
	return CLI_USAGE;
}

/* One of findings' own options, or a client's (client_option()): -1 to
 * go on, else a status. */
static int findings_option(int c, char **argv, struct client_opts *co,
			   struct findings *s, Npusan__FindingsRequest *req)
{
	uint64_t v;

	switch (c) {
	case 'R':
		if (client_parse_u64(optarg, 0, UINT32_MAX, &v) < 0)
			return bad_value("--rank", "a rank (0 or more)",
					 optarg);
		req->has_rank = true;
		req->rank = (uint32_t)v;
		return -1;
	case 'K':
		if (!finding_kind_of(optarg, &(enum finding_kind){ 0 }))
			return bad_value("--kind",
					 "data_race, missing_record_stream, "
					 "stale_graph_address or "
					 "unjoined_capture",
					 optarg);
		req->kind = optarg;
		return -1;
	case 'S':
		if (parse_since(optarg, &req->since_ms) < 0)
			return bad_value("--since",
					 "a duration (10m, 2h, 1d) or a "
					 "timestamp (2024-05-01T10:00:00Z)",
					 optarg);
		req->has_since_ms = true;
		return -1;
	case 'L':
		if (client_parse_u64(optarg, 0, UINT32_MAX, &v) < 0)
			return bad_value("--limit", "a count", optarg);
		s->has_limit = true;
		s->limit = v;
		return -1;
	case CLI_OPT_OP:
	case CLI_OPT_EXCLUDE_OP:
	case CLI_OPT_SUPPRESSIONS:
		return cli_print_option(FINDINGS_CMD, c, optarg, &s->pr);
	case 'F':
		s->follow = true;
		return -1;
	case CLIENT_OPT_JSON:
		s->json = true;
		return -1;
	default:
		return client_option(FINDINGS_CMD, c, findings_usage, argv, co);
	}
}

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct findings *s, Npusan__FindingsRequest *req)
{
	static const struct option longopts[] = {
		CLI_LONGOPT_JOB,
		CLI_LONGOPT_PID,
		{ "rank", required_argument, NULL, 'R' },
		{ "kind", required_argument, NULL, 'K' },
		{ "since", required_argument, NULL, 'S' },
		{ "limit", required_argument, NULL, 'L' },
		{ "follow", no_argument, NULL, 'F' },
		CLI_LONGOPT_OP,
		CLI_LONGOPT_EXCLUDE_OP,
		CLI_LONGOPT_SUPPRESSIONS,
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_target t = { 0 };
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == CLI_OPT_JOB || c == CLI_OPT_PID)
			status = cli_target_option(FINDINGS_CMD, c, optarg, 0,
						   &t);
		else
			status = findings_option(c, argv, co, s, req);
		if (status >= 0)
			return status;
	}
	if (cli_no_operands(FINDINGS_CMD, argc, argv) >= 0)
		return CLI_USAGE;
	req->job = (char *)t.job;
	req->has_pid = t.has_pid;
	req->pid = t.pid;
	return -1;
}

static const struct table_col findings_cols[] = {
	{ "ID", TABLE_RIGHT },	   { "KIND", TABLE_LEFT },
	{ "JOB", TABLE_LEFT },	   { "RANK", TABLE_RIGHT },
	{ "PID", TABLE_RIGHT },	   { "OPS", TABLE_LEFT },
	{ "STREAMS", TABLE_LEFT }, { "COUNT", TABLE_RIGHT },
	{ "LAST SEEN", TABLE_LEFT },
};

/* Asks (and with --follow, asks on) for the findings, printing them. A
 * status. */
static int findings_main(const struct client_opts *co, struct findings *s,
			 Npusan__FindingsRequest *req)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	size_t unstored;
	int status;

	/* A job's or a process's findings include what it left at exit. */
	if (req->job != NULL || req->has_pid) {
		status = settle_wait(co, FINDINGS_CMD, req->job,
				     req->has_pid ? req->pid : 0, 0,
				     co->timeout_ms, &unstored);
		if (status != CLI_OK)
			return status;
	}
	if (!s->json &&
	    table_new(findings_cols,
		      sizeof(findings_cols) / sizeof(findings_cols[0]),
		      report_want_color(stdout), &s->t) < 0) {
		fprintf(stderr, FINDINGS_CMD ": out of memory\n");
		return CLI_DAEMON;
	}
	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = req;
	if (!s->follow) {
		status = client_query(co, FINDINGS_CMD, &q, findings_reply_cb,
				      s);
	} else if (u64map_init(&s->shown) < 0) {
		fprintf(stderr, FINDINGS_CMD ": out of memory\n");
		status = CLI_DAEMON;
	} else {
		s->since_ms = req->has_since_ms ? req->since_ms : 0;
		s->asked_ms = client_now_ms();
		status = client_follow(co, FINDINGS_CMD, &q, findings_again_cb,
				       findings_reply_cb, s);
		u64map_fini(&s->shown);
	}
	table_free(s->t);
	return status;
}

int cli_findings(int argc, char **argv)
{
	Npusan__FindingsRequest req = NPUSAN__FINDINGS_REQUEST__INIT;
	struct client_opts co;
	struct findings s = { 0 };
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &s, &req);
	if (status < 0)
		status = cli_print_load(FINDINGS_CMD, &s.pr);
	if (status >= 0)
		return status;
	status = findings_main(&co, &s, &req);
	findings_drop_held(&s);
	cli_print_say(&s.pr);
	cli_print_free(&s.pr);
	if (status == CLI_OK && !s.follow && s.printed > 0)
		status = CLI_FINDINGS;
	return client_end_output(FINDINGS_CMD, status);
}
