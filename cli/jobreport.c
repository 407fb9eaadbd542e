/*
 * jobreport.c - `npusanctl report --job J`: one job's summary for a
 * scheduler's epilog or a CI step, computed here from two existing queries
 * (the job's findings, then its processes), so that no protocol change is
 * needed: ranks and processes seen, operations analysed and lost, findings
 * by kind and by rank, and a one-line verdict; or one JSON object; and
 * optionally a JUnit XML file (a test case per rank, a failure per
 * finding) that CI systems display natively.
 *
 * Findings are asked for first: a finding names its process (by the
 * daemon's process id, else by pid and rank), so every process a finding
 * names is in the list asked for after it (a process pruned in between
 * gets a test case of its own from the finding).
 *
 * Suppressed findings (the daemon's, or --suppressions') are taken out
 * of the findings once the run is chosen: counted as suppressed in the
 * verdict, the JSON and the JUnit file, never as findings.
 *
 * The JUnit file is written by jobreport_junit.c, over jobreport_int.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "grow.h"
#include "jobreport.h"
#include "jobreport_int.h"
#include "settle.h"
#include "table.h"

#define JR_CMD "npusanctl report"

static const char jr_usage[] =
	"Usage: npusanctl report --job JOB [OPTIONS]\n"
	"\n"
	"A summary of job JOB for a scheduler's epilog or a CI step: the\n"
	"ranks and processes npusand saw, operations analysed and lost,\n"
	"findings by kind and by rank, and on the last line a verdict:\n"
	"  npusan: job JOB: N findings (K data race, ...) on ranks R...;\n"
	"  N ranks, N operations, N lost\n"
	"or '... clean; ...'. Without findings, operations lost make it\n"
	"'no findings in what was analysed', and no operation analysed at\n"
	"all 'nothing analysed', with why. 'npusanctl findings --job JOB'\n"
	"lists the findings, 'npusanctl show ID' prints one in full.\n"
	"\n"
	"Options:\n"
	"  --job JOB            the job (required)\n"
	"  --json               one JSON object instead of the text:\n"
	"                         job, run (the run reported, or null),\n"
	"                         runs (of JOB), verdict (the verdict line),\n"
	"                         clean (no findings, operations analysed\n"
	"                         and none lost), analysed (some operation\n"
	"                         was),\n"
	"                         complete (no operation lost),\n"
	"                         ranks (distinct ranks), processes,\n"
	"                         operations, lost, findings (finding rows),\n"
	"                         occurrences (their counts summed), by_kind\n"
	"                         ({kind: findings}), by_rank (an array, one\n"
	"                         object per process by rank: rank (or null),\n"
	"                         pid, state, operations, lost, findings,\n"
	"                         by_kind, ids (its finding ids))\n"
	"  --junit FILE         also write a JUnit XML file: a testsuite for\n"
	"                       the job, a testcase per rank (classname\n"
	"                       'npusan.JOB.HOST', name 'rank 0'; none for a\n"
	"                       launcher), a <failure> per finding (message:\n"
	"                       its kind, operators and top frames; body:\n"
	"                       its report),\n"
	"                       and a testcase 'npusan analysis' with an\n"
	"                       <error> when the exit status is 4 or 5;\n"
	"                       written to a temporary file and renamed\n"
	"  --error-exitcode N   exit with N (0-255) when there are findings\n"
	"  --allow-incomplete   exit 0, not 5, when operations were lost and\n"
	"                       nothing was found\n"
	"  --run ID             the run ID of JOB (each 'npusanctl run' is one,\n"
	"                       named by $NPUSAN_RUN); default: the latest\n"
	"  --all                every run of JOB together\n"
	CLI_SUPPRESS_HELP
	CLIENT_OPTIONS_HELP
	"\n"
	"Processes of JOB that have exited are waited for (up to --timeout)\n"
	"until the daemon has stored all they left.\n"
	"\n"
	"Suppressed findings (by npusand's or --suppressions' file) are counted\n"
	"apart and never make the status 1.\n"
	"\n"
	"Exit status: 0 no findings, 1 findings (or --error-exitcode N),\n"
	"2 usage error, an unknown job (no process of JOB is known to the\n"
	"daemon: was it run under npusan?) or a JUnit file that cannot be\n"
	"written, 3 no daemon answered or it refused the request, 4 npusan\n"
	"analysed no operation of the job, 5 no findings but operations were\n"
	"lost (the verdict is incomplete; 0 with --allow-incomplete).\n";

static int jr_findings_cb(void *arg, Npusan__FromDaemon *m)
{
	struct jr *r = arg;
	const Npusan__FindingsReply *fr = m->findings;
	struct finding_view f;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_FINDINGS)
		goto bad;
	for (size_t i = 0; i < fr->n_findings; i++) {
		if (client_finding(fr->findings[i], &f) < 0)
			goto bad;
	}
	if (grow_array((void **)&r->finds, &r->finds_cap,
		       r->nfinds + fr->n_findings + 1, sizeof(*r->finds)) < 0 ||
	    client_replies_keep(&r->replies, m) < 0) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < fr->n_findings; i++)
		r->finds[r->nfinds++] = fr->findings[i];
	return fr->has_done && fr->done ? CLIENT_DONE : CLIENT_MORE;
bad:
	npusan__from_daemon__free_unpacked(m, NULL);
	return -EBADMSG;
}

static struct jr_proc *jr_add_proc(struct jr *r)
{
	if (grow_array((void **)&r->procs, &r->procs_cap, r->nprocs + 1,
		       sizeof(*r->procs)) < 0)
		return NULL;
	memset(&r->procs[r->nprocs], 0, sizeof(r->procs[0]));
	return &r->procs[r->nprocs++];
}

static int jr_list_cb(void *arg, Npusan__FromDaemon *m)
{
	struct jr *r = arg;
	const Npusan__ListReply *lr = m->list;
	bool done;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_LIST) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -EBADMSG;
	}
	done = lr->has_done && lr->done;
	if (client_replies_keep(&r->replies, m) < 0) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < lr->n_processes; i++) {
		const Npusan__Process *p = lr->processes[i];
		struct jr_proc *jp;

		/* The daemon filters by job; a process of another is not
		 * this job's, whatever a daemon sends. */
		if (p->job == NULL || strcmp(p->job, r->job) != 0)
			continue;
		if (r->since_ms != 0 && p->has_last_ms &&
		    p->last_ms < r->since_ms)
			continue;
		jp = jr_add_proc(r);
		if (jp == NULL)
			return -ENOMEM;
		jp->has_id = p->has_id;
		jp->id = p->id;
		jp->has_rank = p->has_rank;
		jp->rank = p->rank;
		jp->has_pid = p->has_pid;
		jp->pid = p->pid;
		jp->state = p->state;
		jp->run = p->run;
		jp->host = p->hostname;
		jp->exe = p->executable;
		jp->first_ms = p->has_first_ms ? p->first_ms : 0;
		jp->launcher = !p->has_rank &&
			       (!p->has_events || p->events == 0) &&
			       (!p->has_lost || p->lost == 0) &&
			       (!p->has_findings || p->findings == 0);
		jp->events = p->has_events ? p->events : 0;
		jp->lost = p->has_lost ? p->lost : 0;
	}
	r->answered = r->answered || done;
	return done ? CLIENT_DONE : CLIENT_MORE;
}

static bool jr_owns(const struct jr_proc *c, const Npusan__Finding *f)
{
	if (c->has_id && f->has_process_id)
		return c->id == f->process_id;
	return c->has_rank == f->has_rank &&
	       (!f->has_rank || c->rank == f->rank) &&
	       c->has_pid == f->has_pid && (!f->has_pid || c->pid == f->pid);
}

static bool jr_same_run(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* The run to report when none was asked for: the latest. */
static const char *jr_latest_run(const struct jr *r)
{
	const struct jr_proc *latest = NULL;

	for (size_t i = 0; i < r->nprocs; i++) {
		if (latest == NULL || r->procs[i].first_ms > latest->first_ms)
			latest = &r->procs[i];
	}
	return latest != NULL ? latest->run : NULL;
}

/*
 * Keeps the processes of the run reported (all with r->all) and their
 * findings, counting the job's runs and the processes seen (r->nseen);
 * leaves out launchers when only what was active since r->since_ms is
 * asked for (run's own verdict).
 */
static void jr_select(struct jr *r)
{
	size_t keep = 0;

	if (!r->all && !r->has_run) {
		r->run = jr_latest_run(r);
		r->has_run = r->nprocs > 0;
	}
	for (size_t i = 0; i < r->nprocs; i++) {
		size_t j = 0;

		while (j < i && !jr_same_run(r->procs[j].run, r->procs[i].run))
			j++;
		r->nruns += j == i;
	}
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];

		if (r->has_run && !jr_same_run(p->run, r->run))
			continue;
		r->nseen++;
		if (r->since_ms != 0 && p->launcher)
			continue;
		r->procs[keep++] = *p;
	}
	r->nprocs = keep;
	if (!r->has_run)
		return;
	keep = 0;
	for (size_t i = 0; i < r->nfinds; i++) {
		for (size_t j = 0; j < r->nprocs; j++) {
			if (jr_owns(&r->procs[j], r->finds[i])) {
				r->finds[keep++] = r->finds[i];
				break;
			}
		}
	}
	r->nfinds = keep;
}

/* Takes the suppressed findings out of r->finds, counting them. */
static void jr_suppress(struct jr *r)
{
	struct finding_view f;
	size_t keep = 0;
	bool out;

	for (size_t i = 0; i < r->nfinds; i++) {
		/* Checked in jr_findings_cb(). */
		(void)client_finding(r->finds[i], &f);
		out = r->pr != NULL ? cli_print_suppressed(r->pr, &f)
				    : f.suppressed != NULL;
		r->nsuppressed += out;
		if (!out)
			r->finds[keep++] = r->finds[i];
	}
	r->nfinds = keep;
}

static int proc_cmp(const void *pa, const void *pb)
{
	const struct jr_proc *a = pa, *b = pb;

	if (a->has_rank != b->has_rank)
		return a->has_rank ? -1 : 1;
	if (a->has_rank && a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* Gives each finding to its process. 0; -ENOMEM. */
static int jr_assign(struct jr *r)
{
	for (size_t i = 0; i < r->nfinds; i++) {
		const Npusan__Finding *f = r->finds[i];
		struct jr_proc *p = NULL;

		for (size_t j = 0; j < r->nprocs && p == NULL; j++) {
			if (jr_owns(&r->procs[j], f))
				p = &r->procs[j];
		}
		if (p == NULL) { /* pruned since: a testcase of its own */
			p = jr_add_proc(r);
			if (p == NULL)
				return -ENOMEM;
			p->has_id = f->has_process_id;
			p->id = f->process_id;
			p->has_rank = f->has_rank;
			p->rank = f->rank;
			p->has_pid = f->has_pid;
			p->pid = f->pid;
		}
		if (grow_array((void **)&p->finds, &p->finds_cap,
			       p->nfinds + 1, sizeof(*p->finds)) < 0)
			return -ENOMEM;
		p->finds[p->nfinds++] = i;
	}
	if (r->nprocs > 1) /* qsort() takes no NULL, even for none */
		qsort(r->procs, r->nprocs, sizeof(r->procs[0]), proc_cmp);
	return 0;
}

/* ---- counting ------------------------------------------------------------ */

static void jr_count_kind(struct jr_kind *k, size_t *nk, size_t max,
			  const char *kind)
{
	for (size_t i = 0; i < *nk; i++) {
		if (strcmp(k[i].kind, kind) == 0) {
			k[i].n++;
			return;
		}
	}
	if (*nk < max)
		k[(*nk)++] = (struct jr_kind){ kind, 1 };
}

static void jr_sum(const struct jr *r, struct jr_sum *s)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];

		s->events += p->events;
		s->lost += p->lost;
		if (p->has_rank && (i == 0 || !r->procs[i - 1].has_rank ||
				    r->procs[i - 1].rank != p->rank))
			s->ranks++;
	}
	for (int k = 0; k < FINDING_KIND_COUNT; k++)
		s->kinds[s->nkinds++] = (struct jr_kind){
			finding_kind_name((enum finding_kind)k), 0
		};
	for (size_t i = 0; i < r->nfinds; i++) {
		jr_count_kind(s->kinds, &s->nkinds, 16, r->finds[i]->kind);
		s->occurrences += r->finds[i]->has_count ? r->finds[i]->count :
							   1;
	}
	s->findings = r->nfinds;
	s->unstored = r->unstored;
	s->suppressed = r->nsuppressed;
}

/* ---- the verdict --------------------------------------------------------- */

/* Findings first: a finding is true whatever else was missed. */
enum jobreport_verdict jr__outcome(const struct jr_sum *s)
{
	if (s->findings > 0)
		return JOBREPORT_FINDINGS;
	if (s->events == 0 && s->unstored == 0)
		return JOBREPORT_NOTHING;
	return s->lost > 0 || s->unstored > 0 ? JOBREPORT_INCOMPLETE :
						JOBREPORT_CLEAN;
}

int jobreport_status(enum jobreport_verdict v, int error_exitcode,
		     bool allow_incomplete)
{
	switch (v) {
	case JOBREPORT_CLEAN:
		return CLI_OK;
	case JOBREPORT_FINDINGS:
		return error_exitcode;
	case JOBREPORT_INCOMPLETE:
		return allow_incomplete ? CLI_OK : CLI_INCOMPLETE;
	case JOBREPORT_NOTHING:
		break;
	}
	return CLI_NOTHING_ANALYSED;
}

/* Why nothing was analysed, as plainly as the daemon's answer allows. */
static void jr_why_nothing(const struct jr *r, FILE *b)
{
	if (r->nseen == 0) {
		fputs("nothing analysed: no process of the job registered "
		      "with the daemon (was the agent loaded? an 'npusan:' "
		      "line above may say why not)",
		      b);
		return;
	}
	fprintf(b, "nothing analysed: %zu process%s registered, but npusan "
		   "received no operation to analyse (an adapter that turned "
		   "off, or a device it does not watch? an 'npusan: off:' "
		   "line above says why)",
		r->nseen, r->nseen == 1 ? "" : "es");
}

static const char *kind_words(const char *kind, size_t n)
{
	if (strcmp(kind, "data_race") == 0)
		return n == 1 ? "data race" : "data races";
	if (strcmp(kind, "missing_record_stream") == 0)
		return "missing record_stream";
	if (strcmp(kind, "stale_graph_address") == 0)
		return n == 1 ? "stale graph address" : "stale graph addresses";
	if (strcmp(kind, "unjoined_capture") == 0)
		return n == 1 ? "unjoined capture" : "unjoined captures";
	return kind;
}

/* Where the findings are: " on rank 0", " on ranks 0, 1 and 3", " on
 * rank 0 and pid 77" (a process without a rank). Processes come sorted. */
static void jr_where(const struct jr *r, FILE *b)
{
	size_t n = 0, at = 0;
	bool all_ranked = true;

	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];
		const struct jr_proc *q = i > 0 ? &r->procs[i - 1] : NULL;

		if (p->nfinds == 0 || (i > 0 && q->nfinds > 0 && p->has_rank &&
				       q->has_rank && q->rank == p->rank))
			continue; /* none, or a rank already named */
		n++;
		all_ranked = all_ranked && p->has_rank;
	}
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];
		const struct jr_proc *q = i > 0 ? &r->procs[i - 1] : NULL;

		if (p->nfinds == 0 || (i > 0 && q->nfinds > 0 && p->has_rank &&
				       q->has_rank && q->rank == p->rank))
			continue;
		at++;
		fputs(at == 1 ? " on " : at == n ? " and " : ", ", b);
		if (all_ranked)
			fprintf(b, "%s%" PRIu32,
				at > 1 ? "" : n > 1 ? "ranks " : "rank ",
				p->rank);
		else if (p->has_rank)
			fprintf(b, "rank %" PRIu32, p->rank);
		else if (p->has_pid)
			fprintf(b, "pid %" PRIu32, p->pid);
		else
			fputs("a process without rank or pid", b);
	}
}

/* The verdict line, without its newline (caller frees); NULL: no memory. */
static char *jr_verdict(const struct jr *r, const struct jr_sum *s)
{
	char *out = NULL;
	size_t len = 0;
	bool first = true;
	FILE *b = open_memstream(&out, &len);

	if (b == NULL)
		return NULL;
	fputs("npusan: job ", b);
	text_put(b, r->job);
	fputs(": ", b);
	if (jr__outcome(s) == JOBREPORT_NOTHING) {
		jr_why_nothing(r, b);
	} else if (s->findings == 0) {
		fputs(s->lost > 0 || s->unstored > 0 ?
			      "no findings in what was analysed" :
			      "clean",
		      b);
	} else {
		fprintf(b, "%zu finding%s (", s->findings,
			s->findings == 1 ? "" : "s");
		for (size_t k = 0; k < s->nkinds; k++) {
			if (s->kinds[k].n == 0)
				continue;
			fprintf(b, "%s%zu ", first ? "" : ", ", s->kinds[k].n);
			text_put(b, kind_words(s->kinds[k].kind,
						       s->kinds[k].n));
			first = false;
		}
		fputs(")", b);
		jr_where(r, b);
	}
	if (s->suppressed > 0)
		fprintf(b, " (%zu suppressed)", s->suppressed);
	fprintf(b, "; %zu rank%s", s->ranks, s->ranks == 1 ? "" : "s");
	if (r->nprocs != s->ranks)
		fprintf(b, " (%zu process%s)", r->nprocs,
			r->nprocs == 1 ? "" : "es");
	fprintf(b, ", %" PRIu64 " operations, %" PRIu64 " lost", s->events,
		s->lost);
	if (s->lost > 0)
		fputs(" (operations were lost: the verdict may be incomplete)",
		      b);
	if (s->unstored > 0)
		fprintf(b, " (%zu exited process%s not stored by the daemon "
			   "yet: the verdict may be incomplete)",
			s->unstored, s->unstored == 1 ? "" : "es");
	if (fclose(b) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- text ---------------------------------------------------------------- */

/* Prints `t` and a blank line unless `err` (table_add()'s), frees `t`;
 * returns `err`. */
static int jr_table_done(struct table *t, int err)
{
	if (err == 0) {
		table_flush(t, stdout);
		putchar('\n');
	}
	table_free(t);
	return err;
}

/* The table of the job's processes, a blank line after it. */
static int jr_text_procs(const struct jr *r, bool color)
{
	static const struct table_col cols[] = {
		{ "RANK", TABLE_RIGHT },	{ "PID", TABLE_RIGHT },
		{ "STATE", TABLE_LEFT },	{ "OPERATIONS", TABLE_RIGHT },
		{ "LOST", TABLE_RIGHT },	{ "FINDINGS", TABLE_RIGHT },
	};
	struct table *t;
	char num[5][24];
	int err = 0;

	if (table_new(cols, 6, color, &t) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < r->nprocs && err == 0; i++) {
		const struct jr_proc *p = &r->procs[i];
		const char *cells[6] = { p->has_rank ? num[0] : NULL,
					 p->has_pid ? num[1] : NULL,
					 p->state, num[2], num[3], num[4] };

		snprintf(num[0], sizeof(num[0]), "%" PRIu32, p->rank);
		snprintf(num[1], sizeof(num[1]), "%" PRIu32, p->pid);
		snprintf(num[2], sizeof(num[2]), "%" PRIu64, p->events);
		snprintf(num[3], sizeof(num[3]), "%" PRIu64, p->lost);
		snprintf(num[4], sizeof(num[4]), "%zu", p->nfinds);
		err = table_add(t, cells, NULL);
	}
	return jr_table_done(t, err);
}

/* The table of findings by kind, a blank line after it; none without
 * findings. */
static int jr_text_kinds(const struct jr_sum *s, bool color)
{
	static const struct table_col cols[] = {
		{ "KIND", TABLE_LEFT },
		{ "FINDINGS", TABLE_RIGHT },
	};
	struct table *t;
	char num[24];
	int err = 0;

	if (s->findings == 0)
		return 0;
	if (table_new(cols, 2, color, &t) < 0)
		return -ENOMEM;
	for (size_t k = 0; k < s->nkinds && err == 0; k++) {
		const char *cells[2] = { s->kinds[k].kind, num };

		if (s->kinds[k].n == 0)
			continue;
		snprintf(num, sizeof(num), "%zu", s->kinds[k].n);
		err = table_add(t, cells, NULL);
	}
	return jr_table_done(t, err);
}

static int jr_text(const struct jr *r, const struct jr_sum *s,
		   const char *verdict)
{
	bool color = report_want_color(stdout);

	fputs("Job ", stdout);
	text_put(stdout, r->job);
	if (r->has_run && r->run != NULL) {
		fputs(", run ", stdout);
		text_put(stdout, r->run);
	}
	if (r->has_run && r->nruns > 1)
		printf(" (of %zu runs under this name: --run ID or --all for "
		       "the others)",
		       r->nruns);
	fputs("\n\n", stdout);
	if (jr_text_procs(r, color) < 0 || jr_text_kinds(s, color) < 0)
		return -ENOMEM;
	puts(verdict);
	return 0;
}

/* ---- JSON ---------------------------------------------------------------- */

static void jr_json_kinds(const struct jr_kind *k, size_t n)
{
	bool first = true;

	putchar('{');
	for (size_t i = 0; i < n; i++) {
		if (k[i].n == 0)
			continue;
		if (!first)
			putchar(',');
		report_json_string(stdout, k[i].kind, strlen(k[i].kind));
		printf(":%zu", k[i].n);
		first = false;
	}
	putchar('}');
}

static void jr_json(const struct jr *r, const struct jr_sum *s,
		    const char *verdict)
{
	fputs("{\"job\":", stdout);
	report_json_string(stdout, r->job, strlen(r->job));
	fputs(",\"run\":", stdout);
	if (r->has_run && r->run != NULL)
		report_json_string(stdout, r->run, strlen(r->run));
	else
		fputs("null", stdout);
	printf(",\"runs\":%zu,\"verdict\":", r->nruns);
	report_json_string(stdout, verdict, strlen(verdict));
	printf(",\"clean\":%s,\"analysed\":%s,\"complete\":%s,"
	       "\"ranks\":%zu,\"processes\":%zu,\"operations\":%" PRIu64
	       ",\"lost\":%" PRIu64 ",\"findings\":%zu,\"suppressed\":%zu,"
	       "\"occurrences\":%" PRIu64 ",\"by_kind\":",
	       jr__outcome(s) == JOBREPORT_CLEAN ? "true" : "false",
	       s->events > 0 ? "true" : "false",
	       s->lost == 0 ? "true" : "false", s->ranks, r->nprocs, s->events,
	       s->lost, s->findings, s->suppressed, s->occurrences);
	jr_json_kinds(s->kinds, s->nkinds);
	fputs(",\"by_rank\":[", stdout);
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];
		struct jr_kind k[16];
		size_t nk = 0;

		printf("%s{\"rank\":", i ? "," : "");
		if (p->has_rank)
			printf("%" PRIu32, p->rank);
		else
			fputs("null", stdout);
		fputs(",\"pid\":", stdout);
		if (p->has_pid)
			printf("%" PRIu32, p->pid);
		else
			fputs("null", stdout);
		fputs(",\"state\":", stdout);
		if (p->state != NULL)
			report_json_string(stdout, p->state, strlen(p->state));
		else
			fputs("null", stdout);
		printf(",\"operations\":%" PRIu64 ",\"lost\":%" PRIu64
		       ",\"findings\":%zu,\"by_kind\":",
		       p->events, p->lost, p->nfinds);
		for (size_t j = 0; j < p->nfinds; j++)
			jr_count_kind(k, &nk, 16, r->finds[p->finds[j]]->kind);
		jr_json_kinds(k, nk);
		fputs(",\"ids\":[", stdout);
		for (size_t j = 0; j < p->nfinds; j++)
			printf("%s%" PRId64, j ? "," : "",
			       r->finds[p->finds[j]]->id);
		fputs("]}", stdout);
	}
	fputs("]}\n", stdout);
}

/* ---- the command --------------------------------------------------------- */

/* One of report's own options, or a client's (client_option()): -1 to go
 * on, else a status. */
static int jr_option(int c, char **argv, struct client_opts *co,
		     struct jr *r)
{
	struct cli_target t = { 0 };
	int status = -1;

	switch (c) {
	case CLI_OPT_JOB:
		status = cli_target_option(JR_CMD, c, optarg, 0, &t);
		r->job = t.job;
		break;
	case 'U':
		if (optarg[0] == '\0') {
			fprintf(stderr, JR_CMD ": --junit needs a file name\n");
			return CLI_USAGE;
		}
		r->junit = optarg;
		break;
	case 'x':
		return client_parse_exitcode(JR_CMD, optarg,
					     &r->error_exitcode);
	case 'I':
		r->allow_incomplete = true;
		break;
	case 'r':
		r->has_run = true;
		r->run = optarg;
		break;
	case 'a':
		r->all = true;
		break;
	case CLIENT_OPT_JSON:
		r->json = true;
		break;
	case CLI_OPT_SUPPRESSIONS:
		return cli_print_option(JR_CMD, c, optarg, r->pr);
	default:
		return client_option(JR_CMD, c, jr_usage, argv, co);
	}
	return status;
}

/* What the options say together: -1 to go on, else a status. */
static int jr_check_opts(const struct jr *r)
{
	const char *wrong = NULL;

	if (r->job == NULL || r->job[0] == '\0')
		wrong = "which job? Give --job JOB";
	else if (r->has_run && r->all)
		wrong = "--run and --all exclude each other";
	if (wrong == NULL)
		return -1;
	fprintf(stderr, JR_CMD ": %s\nTry '" JR_CMD " --help'.\n", wrong);
	return CLI_USAGE;
}

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct jr *r)
{
	static const struct option longopts[] = {
		CLI_LONGOPT_JOB,
		{ "junit", required_argument, NULL, 'U' },
		{ "error-exitcode", required_argument, NULL, 'x' },
		{ "allow-incomplete", no_argument, NULL, 'I' },
		{ "run", required_argument, NULL, 'r' },
		{ "all", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		CLI_LONGOPT_SUPPRESSIONS,
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		status = jr_option(c, argv, co, r);
		if (status >= 0)
			return status;
	}
	if (cli_no_operands(JR_CMD, argc, argv) >= 0)
		return CLI_USAGE;
	return jr_check_opts(r);
}

/* Asks for the job's findings, then its processes (see the top). */
static int jr_fetch(struct jr *r, const struct client_opts *co)
{
	Npusan__FindingsRequest freq = NPUSAN__FINDINGS_REQUEST__INIT;
	Npusan__ListRequest lreq = NPUSAN__LIST_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	int status;

	freq.job = (char *)r->job;
	freq.has_since_ms = r->since_ms != 0;
	freq.since_ms = r->since_ms;
	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = &freq;
	status = client_query(co, r->cmd, &q, jr_findings_cb, r);
	if (status != CLI_OK)
		return status;
	lreq.job = (char *)r->job;
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lreq;
	return client_query(co, r->cmd, &q, jr_list_cb, r);
}

static void jr_free(struct jr *r)
{
	for (size_t i = 0; i < r->nprocs; i++)
		free(r->procs[i].finds);
	free(r->procs);
	free(r->finds);
	client_replies_free(&r->replies);
}

static int jr_run(struct jr *r, const struct client_opts *co)
{
	struct jr_sum s;
	char *verdict;
	int status, err;

	status = settle_wait(co, JR_CMD, r->job, 0, 0, co->timeout_ms,
			     &r->unstored);
	if (status == CLI_OK)
		status = jr_fetch(r, co);
	if (status != CLI_OK)
		return status;
	jr_select(r);
	jr_suppress(r);
	if (r->nprocs == 0 && r->nfinds == 0 && r->nsuppressed == 0) {
		fputs(JR_CMD ": no process of job '", stderr);
		text_put(stderr, r->job);
		if (r->has_run && r->nruns > 0) {
			fputs("' ran as run '", stderr);
			text_put(stderr, r->run ? r->run : "");
			fputs("' (see 'npusanctl list --job JOB --json')\n",
			      stderr);
			return CLI_USAGE;
		}
		fputs("' is known to the daemon (was it run under npusan, "
		      "and is the job's name right?)\n",
		      stderr);
		return CLI_USAGE;
	}
	if (jr_assign(r) < 0)
		goto oom;
	jr_sum(r, &s);
	verdict = jr_verdict(r, &s);
	if (verdict == NULL)
		goto oom;
	if (r->junit != NULL && (err = jr__junit(r, &s, verdict)) < 0) {
		fprintf(stderr, JR_CMD ": cannot write %s: %s\n", r->junit,
			strerror(-err));
		free(verdict);
		return CLI_USAGE;
	}
	if (r->json)
		jr_json(r, &s, verdict);
	else if (jr_text(r, &s, verdict) < 0) {
		free(verdict);
		goto oom;
	}
	free(verdict);
	return jobreport_status(jr__outcome(&s), r->error_exitcode,
				r->allow_incomplete);
oom:
	fprintf(stderr, JR_CMD ": out of memory\n");
	return CLI_DAEMON;
}

int cli_report(int argc, char **argv)
{
	struct client_opts co;
	struct cli_print pr = { 0 };
	struct jr r = { .error_exitcode = CLI_FINDINGS, .cmd = JR_CMD,
			.pr = &pr };
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &r);
	if (status < 0)
		status = cli_print_load(JR_CMD, &pr);
	if (status >= 0)
		return status;
	status = jr_run(&r, &co);
	cli_print_say(&pr);
	cli_print_free(&pr);
	jr_free(&r);
	return client_end_output(JR_CMD, status);
}

int jobreport_findings(const struct client_opts *co, const char *cmd,
		       const char *job, const char *run, int64_t since_ms,
		       size_t unstored, bool json, struct cli_print *pr,
		       enum jobreport_verdict *outcome)
{
	struct jr r = { .job = job, .cmd = cmd, .since_ms = since_ms,
			.unstored = unstored, .has_run = true, .run = run,
			.pr = pr };
	bool color = report_want_color(stdout);
	struct finding_view f;
	struct jr_sum s;
	char *verdict = NULL;
	int status = jr_fetch(&r, co);

	if (status != CLI_OK)
		goto out;
	jr_select(&r);
	jr_suppress(&r);
	status = CLI_DAEMON;
	if (jr_assign(&r) < 0)
		goto oom;
	jr_sum(&r, &s);
	verdict = jr_verdict(&r, &s);
	if (verdict == NULL)
		goto oom;
	for (size_t i = 0; i < r.nfinds; i++) {
		/* Checked in jr_findings_cb(). */
		(void)client_finding(r.finds[i], &f);
		if (pr != NULL &&
		    !(cli_print_wanted(pr, &f) && cli_print_room(pr)))
			continue;
		if (json)
			report_json(stdout, &f);
		else
			report_text(stdout, color, &f);
		if (pr != NULL)
			cli_print_gen(pr, stdout, json, &f);
	}
	fprintf(json ? stderr : stdout, "%s\n", verdict);
	*outcome = jr__outcome(&s);
	status = CLI_OK;
	goto out;
oom:
	fprintf(stderr, "%s: out of memory\n", cmd);
out:
	free(verdict);
	jr_free(&r);
	return status;
}
