/*
 * analyze.c - `npusanctl analyze`: the engine over recorded traces.
 *
 * Every trace is one process: it gets its own symtab and engine, and its
 * findings are numbered on from the previous trace's. Without --every the
 * engine deduplicates and the rows are printed once the trace is read, so
 * that each carries its final count; with --every each occurrence is
 * printed as soon as it is found.
 *
 * A bad trace does not stop the others: each is analysed up to its first
 * error, which is reported, and the exit status is 2 once all are done.
 * Without findings the verdict is clean (0) only when everything was seen:
 * traces with no operation at all are "nothing analysed" (4); operations
 * lost in gaps, skipped past the stream limit, or after a torn last line
 * (its writer was killed; analysed up to it with a warning) make it
 * incomplete (5, or 0 with --allow-incomplete), as `run` and `report` say.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "engine.h"
#include "grow.h"
#include "oppipe.h"
#include "report.h"
#include "trace.h"

struct analyze_opts {
	bool json;
	bool every;
	bool allow_incomplete;
	int error_exitcode;
	/* --op, --exclude-op, --print-limit, --output, --suppressions,
	 * --gen-suppressions */
	struct cli_print pr;
};

struct analysis {
	struct analyze_opts *o;
	const struct symtab *syms;                 /* the trace's */
	const struct trace_process *process; /* NULL or !present: unknown */
	struct finding_frames frames; /* for finding_view_of() */
	bool color;
	struct trace_reader *r;
	struct finding *rows; /* deduplicated rows, by id */
	size_t nrows;
	size_t cap;
	uint64_t next_id; /* the output's ids run on across traces */
	uint64_t counts[FINDING_KIND_COUNT];
	bool nomem;
	int ntraces;
	int nbad;  /* traces analysed only up to an error */
	int ntorn; /* traces analysed up to a torn last line */
	uint64_t ops;	  /* operations analysed, gaps aside */
	uint64_t lost;	  /* operations the traces' gaps (and skips) lost */
	uint64_t unknown; /* gaps that do not say how many they lost */
};

static const char analyze_usage[] =
	"Usage: npusanctl analyze [OPTIONS] TRACE...\n"
	"\n"
	"Analyse recorded traces (trace format v1) offline and report data\n"
	"races and missing record_stream calls. Each TRACE is one process;\n"
	"'-' reads standard input.\n"
	"\n"
	"Options:\n"
	"  --json               print findings as JSON Lines, one object per\n"
	"                       finding and nothing else on standard output\n"
	"  --every              print every occurrence instead of merging\n"
	"                       repeats of the same mistake\n"
	"  --error-exitcode N   exit with N (0-255) when there are findings\n"
	"                       (default 1)\n"
	"  --allow-incomplete   exit 0, not 5, when nothing was found but\n"
	"                       operations were lost\n"
	CLI_OUTPUT_HELP
	CLI_PRINT_LIMIT_HELP
	CLI_FILTER_HELP
	CLI_SUPPRESS_HELP
	CLI_GEN_SUPPRESSIONS_HELP
	"  -h, --help           show this help\n"
	"\n"
	"Every trace is analysed, also after a bad one. A trace whose last\n"
	"line is cut short (its writer was killed) is analysed up to that line,\n"
	"with a warning.\n"
	"\n"
	"Exit status: 0 no findings in everything the traces hold, 1 (or N)\n"
	"findings, 2 usage error or bad input (each error names the file and\n"
	"line; findings before it are printed), 4 the traces hold no operation,\n"
	"5 no findings, but operations were lost (gaps, a trace cut short).\n"
	"Findings left out by --op or --exclude-op, or suppressed, count as\n"
	"none; the verdict line still counts them.\n";

static void print_finding(struct analysis *a, struct finding *f)
{
	const struct trace_process *p = a->process;
	struct finding_view rf;

	f->id = ++a->next_id;
	a->counts[f->kind]++;
	if (finding_view_of(f, a->syms, &a->frames, &rf) < 0) {
		a->nomem = true;
		return;
	}
	if (p != NULL && p->present) {
		rf.has_pid = true;
		rf.pid = p->pid;
		rf.job = p->job;
		rf.has_rank = p->has_rank;
		rf.rank = p->rank;
	}
	cli_print_finding(&a->o->pr, stdout, a->o->json, a->color, &rf);
}

static void finding_cb(const struct finding *f, bool first, void *arg)
{
	struct analysis *a = arg;
	struct finding copy = *f;

	if (a->o->every) {
		print_finding(a, &copy);
		return;
	}
	if (!first) {
		/* engine ids count up from 1 in order of first detection */
		a->rows[f->id - 1].count = f->count;
		return;
	}
	if (grow_array((void **)&a->rows, &a->cap, a->nrows + 1,
		       sizeof(*a->rows)) < 0) {
		a->nomem = true;
		return;
	}
	a->rows[a->nrows++] = copy;
}

/* The message for an engine error on the op of `line`. */
static void engine_error(const struct trace_reader *r, unsigned long line,
			 int err)
{
	fprintf(stderr, "%s:%lu: %s\n", trace_reader_name(r), line,
		strerror(-err));
}

/* Operations skipped for naming a stream beyond the engine's limit. */
struct analyze_skips {
	bool skipping;
	uint64_t lost, gaps;
};

/* engine_feed_or_skip(), counting what it skipped as the daemon does,
 * and what the trace says it analysed and lost. */
static int analyze_feed(struct analysis *a, struct engine *e,
			const struct op *op, struct analyze_skips *sk)
{
	int rc = engine_feed_or_skip(e, op, &sk->skipping);

	if (op->kind != OP_GAP)
		a->ops += rc == 0;
	else if (!op->has_lost)
		a->unknown++;
	else
		a->lost = a->lost + op->lost < a->lost ? UINT64_MAX :
							 a->lost + op->lost;

	if (rc > 0) {
		sk->lost++;
		sk->gaps += rc == ENGINE_SKIPPED_GAP;
	}
	return rc;
}

static void analyze_say_skips(const struct trace_reader *r,
			      const struct analyze_skips *sk)
{
	if (sk->lost == 0)
		return;
	fprintf(stderr, "%s: %" PRIu64 " operation%s on streams beyond the "
			"first %d were not analysed (counted lost, in %" PRIu64
			" gap%s: no finding spans them)\n",
		trace_reader_name(r), sk->lost, sk->lost == 1 ? "" : "s",
		ENGINE_MAX_STREAMS, sk->gaps, sk->gaps == 1 ? "" : "s");
}

/* An op read on the engine's thread, when the reader has none of its own. */
struct analyze_op {
	struct op op;
	unsigned long line;
};

/* The next ops of the trace: a batch from the reader's thread when there
 * is one, else one op from the reader itself, into *one (as trace_read()). */
static int analyze_next(struct analysis *a, struct oppipe *p,
			struct analyze_op *one, const struct op **ops,
			const unsigned long **lines, size_t *n)
{
	int rc;

	if (p != NULL)
		return oppipe_next(p, ops, lines, n);
	rc = trace_read(a->r, &one->op);
	one->line = trace_reader_line(a->r);
	*ops = &one->op;
	*lines = &one->line;
	*n = 1;
	return rc;
}

/* analyze_feed() of the n ops at ops; 0, or the engine's error with the
 * index of the op that caused it in *at. */
static int analyze_feed_all(struct analysis *a, struct engine *e,
			    const struct op *ops, size_t n,
			    struct analyze_skips *sk, size_t *at)
{
	int fed;

	for (size_t i = 0; i < n; i++) {
		fed = analyze_feed(a, e, &ops[i], sk);
		if (fed < 0) {
			*at = i;
			return fed;
		}
	}
	return 0;
}

/*
 * Whether the trace at `path` is a regular file, whose reads never wait
 * for a writer: only then does its reader run ahead on a thread of its
 * own, since an engine error stops the analysis by joining that thread,
 * which must not hang on a pipe that stays open.
 */
static bool analyze_regular(const char *path)
{
	struct stat st;
	int rc = strcmp(path, "-") == 0 ? fstat(STDIN_FILENO, &st) :
					  stat(path, &st);

	return rc == 0 && S_ISREG(st.st_mode);
}

/*
 * Reads every op of the open trace into engine `e`; 0, or a negative errno
 * after printing why. The reader of a regular file runs on a thread of its
 * own (oppipe.c) unless --every prints findings as they come, which reads
 * the symtab the reader interns into; the output is the same either way.
 */
static int analyze_ops(struct analysis *a, struct engine *e, bool regular)
{
	struct analyze_skips sk = { 0 };
	struct oppipe *p = NULL;
	const struct op *ops;
	const unsigned long *lines;
	struct analyze_op one;
	unsigned long line = 0;
	const char *msg;
	size_t n, at = 0;
	int rc, fed = 0;

	if (regular && !a->o->every && oppipe_start(a->r, &p) < 0)
		p = NULL; /* the same, on one thread */
	while ((rc = analyze_next(a, p, &one, &ops, &lines, &n)) == 1 &&
	       (fed = analyze_feed_all(a, e, ops, n, &sk, &at)) >= 0)
		;
	if (fed < 0)
		line = lines[at]; /* before oppipe_free() frees the batch */
	oppipe_free(p);
	analyze_say_skips(a->r, &sk);
	a->lost += sk.lost;
	if (fed < 0) {
		engine_error(a->r, line, fed);
		return fed;
	}
	msg = rc < 0 ? trace_reader_error(a->r) : trace_reader_torn(a->r);
	/* The pipe's own failure leaves the reader without a message. */
	if (rc < 0 && *msg == '\0') {
		fprintf(stderr, "npusanctl: %s: %s\n", trace_reader_name(a->r),
			strerror(-rc));
		return rc;
	}
	if (msg != NULL) {
		/* It quotes the trace: cleaned as all outside text is. */
		text_put(stderr, msg);
		fputc('\n', stderr);
	}
	return rc;
}

/* Feeds one trace to a fresh engine; 0, or CLI_USAGE after printing why. */
static int analyze_one(struct analysis *a, const char *path)
{
	struct engine_opts eo = { .dedup = !a->o->every,
				  .finding_cb = finding_cb, .arg = a };
	struct symtab *syms = NULL;
	struct engine *e = NULL;
	char *msg = NULL;
	int rc, status = CLI_USAGE;

	if (symtab_new(&syms) < 0 || engine_new(&eo, &e) < 0) {
		fprintf(stderr, "npusanctl: %s: out of memory\n", path);
		goto out;
	}
	rc = trace_reader_open(path, syms, &a->r, &msg);
	if (rc < 0) {
		fprintf(stderr, "npusanctl: %s\n", msg ? msg : strerror(-rc));
		goto out;
	}
	a->syms = syms;
	a->process = trace_reader_process(a->r);
	a->nrows = 0;
	a->nomem = false;
	rc = analyze_ops(a, e, analyze_regular(path));
	a->ntorn += rc == 0 && trace_reader_torn(a->r) != NULL;
	/* What was found before a bad line is real: report it all the same. */
	for (size_t i = 0; i < a->nrows; i++)
		print_finding(a, &a->rows[i]);
	if (a->nomem)
		fprintf(stderr, "npusanctl: %s: out of memory: findings are "
			"missing\n", path);
	else if (rc == 0)
		status = CLI_OK;
out:
	trace_reader_close(a->r);
	a->r = NULL;
	engine_free(e);
	symtab_free(syms);
	free(msg);
	return status;
}

/* Whether the traces lost operations (analysed, but not all). */
static bool analysis_incomplete(const struct analysis *a)
{
	return a->ntorn > 0 || a->lost > 0 || a->unknown > 0;
}

/* Says, after the counts, why they may not be the whole truth. */
static void print_incomplete(FILE *out, const struct analysis *a)
{
	if (a->lost > 0 || a->unknown > 0) {
		fprintf(out, "; %" PRIu64 " operation%s lost", a->lost,
			a->lost == 1 ? "" : "s");
		if (a->unknown > 0)
			fprintf(out, " (and %" PRIu64 " gap%s of unknown size)",
				a->unknown, a->unknown == 1 ? "" : "s");
		fputs(": the verdict may be incomplete", out);
	}
	if (a->nbad + a->ntorn == 0)
		return;
	fprintf(out, "; incomplete:");
	if (a->nbad > 0)
		fprintf(out, " %d trace%s read only up to an error", a->nbad,
			a->nbad == 1 ? "" : "s");
	if (a->nbad > 0 && a->ntorn > 0)
		fprintf(out, ",");
	if (a->ntorn > 0)
		fprintf(out, " %d trace%s cut short", a->ntorn,
			a->ntorn == 1 ? "" : "s");
	fprintf(out, " (see above)");
}

/* The verdict line: on standard output with the report, on standard error
 * with --json (whose standard output holds findings only). */
static void print_summary(FILE *out, const struct analysis *a)
{
	uint64_t races = a->counts[FINDING_DATA_RACE];
	uint64_t mrs = a->counts[FINDING_MISSING_RECORD_STREAM];
	uint64_t stale = a->counts[FINDING_STALE_GRAPH_ADDRESS];
	uint64_t unjoined = a->counts[FINDING_UNJOINED_CAPTURE];
	uint64_t all = races + mrs + stale + unjoined;
	int ntraces = a->ntraces;

	if (all == 0 && a->ops == 0 && a->nbad == 0)
		fprintf(out, "npusan: nothing analysed: %s hold%s no "
			     "operation", ntraces == 1 ? "the trace" :
			     "the traces", ntraces == 1 ? "s" : "");
	else if (all == 0)
		fprintf(out, "npusan: no findings in %d trace%s", ntraces,
			ntraces == 1 ? "" : "s");
	else
		fprintf(out, "npusan: %" PRIu64 " finding%s in %d trace%s: %"
			PRIu64 " data race%s, %" PRIu64 " missing "
			"record_stream",
			all, all == 1 ? "" : "s", ntraces,
			ntraces == 1 ? "" : "s", races, races == 1 ? "" : "s",
			mrs);
	/* The graph kinds only when there are some, so that the line of a
	 * version 1 trace reads as it always did. */
	if (stale > 0)
		fprintf(out, ", %" PRIu64 " stale graph address%s", stale,
			stale == 1 ? "" : "es");
	if (unjoined > 0)
		fprintf(out, ", %" PRIu64 " unjoined capture%s", unjoined,
			unjoined == 1 ? "" : "s");
	print_incomplete(out, a);
	fputc('\n', out);
}

static int parse_opts(int argc, char **argv, struct analyze_opts *o)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "every", no_argument, NULL, 'e' },
		{ "error-exitcode", required_argument, NULL, 'x' },
		{ "allow-incomplete", no_argument, NULL, 'a' },
		CLI_LONGOPT_OUTPUT,
		CLI_LONGOPT_PRINT_LIMIT,
		CLI_LONGOPT_OP,
		CLI_LONGOPT_EXCLUDE_OP,
		CLI_LONGOPT_SUPPRESSIONS,
		CLI_LONGOPT_GEN_SUPPRESSIONS,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, status;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o->json = true;
			break;
		case 'e':
			o->every = true;
			break;
		case 'a':
			o->allow_incomplete = true;
			break;
		case 'x':
			status = client_parse_exitcode("npusanctl analyze",
						       optarg,
						       &o->error_exitcode);
			if (status >= 0)
				return status;
			break;
		case CLI_OPT_OUTPUT:
		case CLI_OPT_PRINT_LIMIT:
		case CLI_OPT_OP:
		case CLI_OPT_EXCLUDE_OP:
		case CLI_OPT_SUPPRESSIONS:
		case CLI_OPT_GEN_SUPPRESSIONS:
			status = cli_print_option("npusanctl analyze", c, optarg,
						  &o->pr);
			if (status >= 0)
				return status;
			break;
		case 'h':
			fputs(analyze_usage, stdout);
			return CLI_OK;
		case ':':
			fprintf(stderr, "npusanctl analyze: %s needs a value\n",
				argv[optind - 1]);
			return CLI_USAGE;
		default:
			fprintf(stderr, "npusanctl analyze: unknown option "
					"'%s'\n",
				argv[optind - 1]);
			return CLI_USAGE;
		}
	}
	if (optind == argc) {
		fprintf(stderr, "npusanctl analyze: no trace given\n"
				"Try 'npusanctl analyze --help'.\n");
		return CLI_USAGE;
	}
	return -1;
}

/* The exit status once every trace is analysed. */
static int analyze_status(const struct analysis *a)
{
	const struct analyze_opts *o = a->o;

	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "npusanctl: writing the report failed: %s\n",
			strerror(errno));
		return CLI_USAGE;
	}
	if (a->nbad > 0)
		return CLI_USAGE;
	if (o->pr.kept > 0)
		return o->error_exitcode;
	if (a->ops == 0)
		return CLI_NOTHING_ANALYSED;
	/* No findings in part of a run is no proof of a clean run. */
	if (analysis_incomplete(a) && !o->allow_incomplete)
		return CLI_INCOMPLETE;
	return CLI_OK;
}

int cli_analyze(int argc, char **argv)
{
	struct analyze_opts o = { .error_exitcode = CLI_FINDINGS };
	struct analysis a = { .o = &o };
	int status = parse_opts(argc, argv, &o), fd;

	if (status < 0)
		status = cli_print_load("npusanctl analyze", &o.pr);
	if (status < 0)
		status = cli_output_open("npusanctl analyze", &o.pr, &fd);
	if (status < 0)
		status = cli_output_to("npusanctl analyze", fd);
	if (status >= 0) {
		cli_print_free(&o.pr);
		return status;
	}
	a.color = !o.json && report_want_color(stdout);
	for (int i = optind; i < argc; i++, a.ntraces++)
		a.nbad += analyze_one(&a, argv[i]) != CLI_OK;
	free(a.rows);
	finding_frames_free(&a.frames);
	/* With --json the verdict goes to standard error, but only when it
	 * is not plain: findings or a clean analysis say it on stdout. */
	if (!o.json)
		print_summary(stdout, &a);
	else if (o.pr.kept == 0 && (a.ops == 0 || analysis_incomplete(&a)))
		print_summary(stderr, &a);
	cli_print_say(&o.pr);
	cli_print_free(&o.pr);
	return analyze_status(&a);
}
