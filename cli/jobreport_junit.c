/*
 * jobreport_junit.c - `npusanctl report --junit FILE`: the job as JUnit XML
 * that CI systems display natively, a test case per rank (launchers left
 * out) named the same from run to run and a failure per finding, written
 * to a temporary file renamed over FILE. The job and its sums come from
 * jobreport.c (jobreport_int.h); the strings are the daemon's, escaped
 * here as XML 1.0 allows.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "jobreport_int.h"
#include "native_frame.h"
#include "paths.h"
#include "text.h"

#define XML_FFFD "\xef\xbf\xbd" /* U+FFFD, the replacement character */

/*
 * One character that text_shown() shows, n bytes at p: markup characters
 * as entities; U+FFFE and U+FFFF (no XML 1.0 characters, not even as
 * references) as U+FFFD.
 */
static void xml_put_shown(FILE *f, const unsigned char *p, size_t n,
			  bool attr)
{
	if (n == 3 && p[0] == 0xef && p[1] == 0xbf && p[2] >= 0xbe)
		fputs(XML_FFFD, f);
	else if (n > 1)
		fwrite(p, 1, n, f);
	else if (p[0] == '&')
		fputs("&amp;", f);
	else if (p[0] == '<')
		fputs("&lt;", f);
	else if (p[0] == '>')
		fputs("&gt;", f);
	else if (p[0] == '"' && attr)
		fputs("&quot;", f);
	else
		fputc(p[0], f);
}

/*
 * `s` as XML character data or an attribute value. What text_shown()
 * (common/text.h, the one policy) refuses becomes U+FFFD, except tab,
 * newline and CR, which XML allows: as they are in character data, as
 * references in attributes (which survive attribute normalisation).
 */
static void xml_put(FILE *f, const char *s, bool attr)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t avail = strlen(s), n;

	for (; avail > 0; p += n, avail -= n) {
		if (text_shown(p, avail, &n))
			xml_put_shown(f, p, n, attr);
		else if (*p != '\t' && *p != '\n' && *p != '\r')
			fputs(XML_FFFD, f);
		else if (attr)
			fprintf(f, "&#%u;", *p);
		else
			fputc(*p, f);
	}
}

/* Frames of a stack in a failure's signature: enough to tell two
 * findings of one operator apart, few enough to survive a refactoring. */
#define JR_JUNIT_FRAMES 2

/*
 * A frame as a signature shows it. A native frame is its symbol and its
 * module's file name ("symbol in libfoo.so", or "libfoo.so" without a
 * symbol): the offsets, the build id and the directory change with every
 * build, and a signature must not. Any other frame is shown as recorded.
 */
static void jr_junit_frame(FILE *m, const char *frame)
{
	struct native_frame nf;
	const char *base, *sym_end;

	if (native_frame_parse(frame, &nf) < 0) {
		fputs(frame, m);
		return;
	}
	base = nf.path + nf.path_len;
	while (base > nf.path && base[-1] != '/')
		base--;
	if (frame[0] != '/') { /* "symbol+0xoff (/path..." */
		sym_end = nf.path - 2;
		while (sym_end > frame && *sym_end != '+')
			sym_end--;
		if (sym_end > frame)
			fprintf(m, "%.*s in ", (int)(sym_end - frame), frame);
	}
	fprintf(m, "%.*s", (int)(nf.path + nf.path_len - base), base);
}

static void jr_junit_frames(FILE *m, const char *what,
			    const struct finding_stack *st)
{
	size_t n = st->n < JR_JUNIT_FRAMES ? st->n : JR_JUNIT_FRAMES;

	if (n == 0)
		return;
	fprintf(m, "; %s ", what);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ", " : "", m);
		jr_junit_frame(m, st->frames[i]);
	}
}

/*
 * The finding's signature, what CI systems compare from run to run: its
 * kind, operators and top frames, never an id, a pid or a pointer. "?"
 * for an operator the agent did not know. Caller frees; NULL: no memory.
 */
static char *jr_junit_signature(const struct finding_view *rf)
{
	char *sig = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&sig, &len);

	if (m == NULL)
		return NULL;
	fprintf(m, "%s: %s", rf->kind, rf->access.op ? rf->access.op : "?");
	if (rf->has_previous)
		fprintf(m, " / %s", rf->previous.op ? rf->previous.op : "?");
	jr_junit_frames(m, "at", &rf->access.stack);
	if (rf->has_previous)
		jr_junit_frames(m, "previous at", &rf->previous.stack);
	if (fclose(m) != 0) {
		free(sig);
		return NULL;
	}
	return sig;
}

/* A failure per finding: its signature as the message, its text report
 * as the body, without the pid (the testcase names the rank), so that
 * the same job gives the same file from run to run. */
static void jr_junit_failure(FILE *f, const Npusan__Finding *pf)
{
	struct finding_view rf;
	char *text = NULL, *msg;
	size_t len = 0;
	FILE *m;

	client_finding(pf, &rf); /* checked as the reply came */
	msg = jr_junit_signature(&rf);
	rf.has_pid = false;
	fputs("      <failure type=\"", f);
	xml_put(f, rf.kind, true);
	fputs("\" message=\"", f);
	xml_put(f, msg ? msg : rf.kind, true);
	fputs("\">", f);
	m = open_memstream(&text, &len);
	if (m != NULL) {
		report_text(m, false, &rf);
		if (fclose(m) == 0)
			xml_put(f, text, false);
	}
	fputs("</failure>\n", f);
	free(text);
	free(msg);
}

/*
 * A testcase's classname: npusan.JOB.HOST, the node's name in it so that
 * the files of a job's nodes merge without two testcases of one name;
 * npusan.JOB when the node is unknown.
 */
static void jr_junit_class(FILE *f, const struct jr *r, const char *host)
{
	fputs("classname=\"npusan.", f);
	xml_put(f, r->job, true);
	if (host != NULL && host[0] != '\0') {
		fputc('.', f);
		xml_put(f, host, true);
	}
	fputc('"', f);
}

/*
 * A testcase's name, the same from run to run: "rank 1"; for a process
 * without a rank, its executable's name ("python3 without a rank"), as
 * no pid names a test twice.
 */
static void jr_junit_name(FILE *f, const struct jr_proc *p)
{
	const char *exe = p->exe != NULL ? strrchr(p->exe, '/') : NULL;

	fputs(" name=\"", f);
	if (p->has_rank) {
		fprintf(f, "rank %" PRIu32, p->rank);
	} else {
		exe = exe != NULL ? exe + 1 : p->exe;
		xml_put(f, exe != NULL && exe[0] != '\0' ? exe : "process",
			true);
		fputs(" without a rank", f);
	}
	fputc('"', f);
}

/* The node of the job's processes (the first known), for the analysis
 * testcase: NULL when none is known. */
static const char *jr_junit_host(const struct jr *r)
{
	for (size_t i = 0; i < r->nprocs; i++) {
		if (r->procs[i].host != NULL)
			return r->procs[i].host;
	}
	return NULL;
}

/*
 * Whether the file gets an errored testcase: a job npusan saw nothing of,
 * or saw only part of without findings, must not look green in CI.
 */
static bool jr_junit_error(const struct jr *r, const struct jr_sum *s)
{
	enum jobreport_verdict v = jr__outcome(s);

	return v == JOBREPORT_NOTHING ||
	       (v == JOBREPORT_INCOMPLETE && !r->allow_incomplete);
}

static void jr_junit_analysis(FILE *f, const struct jr *r,
			      const struct jr_sum *s, const char *verdict)
{
	fputs("    <testcase ", f);
	jr_junit_class(f, r, jr_junit_host(r));
	fprintf(f, " name=\"npusan analysis\">\n"
		   "      <error type=\"%s\" message=\"",
		jr__outcome(s) == JOBREPORT_NOTHING ? "nothing_analysed" :
						     "incomplete");
	xml_put(f, verdict, true);
	fputs("\">", f);
	xml_put(f, verdict, false);
	fputs("</error>\n    </testcase>\n", f);
}

static void jr_junit_body(FILE *f, const struct jr *r, const struct jr_sum *s,
			  const char *verdict)
{
	size_t failed = 0, errors = jr_junit_error(r, s) ? 1 : 0;
	size_t tests = errors;

	for (size_t i = 0; i < r->nprocs; i++) {
		failed += r->procs[i].nfinds > 0;
		tests += !r->procs[i].launcher;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<testsuites name=\"npusan\" tests=\"%zu\" "
		   "failures=\"%zu\" errors=\"%zu\">\n"
		   "  <testsuite name=\"npusan job ",
		tests, failed, errors);
	xml_put(f, r->job, true);
	fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
		   "skipped=\"0\">\n"
		   "    <properties>\n"
		   "      <property name=\"ranks\" value=\"%zu\"/>\n"
		   "      <property name=\"operations\" value=\"%" PRIu64
		   "\"/>\n"
		   "      <property name=\"lost\" value=\"%" PRIu64 "\"/>\n"
		   "      <property name=\"findings\" value=\"%zu\"/>\n"
		   "      <property name=\"suppressed\" value=\"%zu\"/>\n",
		tests, failed, errors, s->ranks, s->events, s->lost,
		s->findings, s->suppressed);
	if (r->has_run && r->run != NULL) {
		fputs("      <property name=\"run\" value=\"", f);
		xml_put(f, r->run, true);
		fputs("\"/>\n", f);
	}
	fputs("    </properties>\n", f);
	if (errors > 0)
		jr_junit_analysis(f, r, s, verdict);
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct jr_proc *p = &r->procs[i];

		if (p->launcher) /* as the verdict: no test of the job's */
			continue;
		fputs("    <testcase ", f);
		jr_junit_class(f, r, p->host);
		jr_junit_name(f, p);
		fputs(p->nfinds ? ">\n" : "/>\n", f);
		for (size_t j = 0; j < p->nfinds; j++)
			jr_junit_failure(f, r->finds[p->finds[j]]);
		if (p->nfinds)
			fputs("    </testcase>\n", f);
	}
	fputs("    <system-out>", f);
	xml_put(f, verdict, false);
	fputs("</system-out>\n  </testsuite>\n</testsuites>\n", f);
}

/* The report written straight into r->junit, a device or a FIFO
 * (paths_write_in_place()). 0; -errno; -EIO. */
static int jr_junit_in_place(const struct jr *r, const struct jr_sum *s,
			     const char *verdict)
{
	FILE *f = fopen(r->junit, "we");
	int err;

	if (f == NULL)
		return -errno;
	jr_junit_body(f, r, s, verdict);
	err = fflush(f) != 0 || ferror(f) ? -EIO : 0;
	if (fclose(f) != 0 && err == 0)
		err = -EIO;
	return err;
}

int jr__junit(const struct jr *r, const struct jr_sum *s, const char *verdict)
{
	size_t n = strlen(r->junit);
	char *tmp;
	mode_t mask;
	FILE *f;
	int fd, err;

	if (paths_write_in_place(r->junit))
		return jr_junit_in_place(r, s, verdict);
	tmp = malloc(n + 16);
	if (tmp == NULL)
		return -ENOMEM;
	snprintf(tmp, n + 16, "%s.tmp.XXXXXX", r->junit);
	fd = mkstemp(tmp);
	if (fd < 0) {
		err = -errno;
		free(tmp);
		return err;
	}
	mask = umask(0);
	umask(mask);
	f = fdopen(fd, "w");
	if (f == NULL) {
		err = -errno;
		close(fd);
		goto err;
	}
	jr_junit_body(f, r, s, verdict);
	err = fflush(f) != 0 || ferror(f) ? -EIO : 0;
	if (err == 0 && (fchmod(fd, 0666 & ~mask) < 0 || fsync(fd) < 0))
		err = -errno;
	if (fclose(f) != 0 && err == 0)
		err = -EIO;
	if (err == 0 && rename(tmp, r->junit) < 0)
		err = -errno;
	if (err == 0) {
		free(tmp);
		return 0;
	}
err:
	unlink(tmp);
	free(tmp);
	return err;
}
