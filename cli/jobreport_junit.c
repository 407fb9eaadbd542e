/*
 * jobreport_junit.c - `npusanctl report --junit FILE`: the job as JUnit XML
 * that CI systems display natively, a test case per process and a failure
 * per finding, written to a temporary file renamed over FILE. The job and
 * its sums come from jobreport.c (jobreport_int.h); the strings are the
 * daemon's, escaped here as XML 1.0 allows.
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

static void jr_junit_failure(FILE *f, const Npusan__Finding *pf)
{
	struct finding_view rf;
	char *text = NULL, *msg = NULL;
	size_t len = 0;
	FILE *m;

	client_finding(pf, &rf); /* checked as the reply came */
	if (rf.has_previous)
		(void)!asprintf(&msg, "%s: %s / %s", rf.kind,
				rf.access.op ? rf.access.op : "?",
				rf.previous.op ? rf.previous.op : "?");
	else
		(void)!asprintf(&msg, "%s: %s", rf.kind,
				rf.access.op ? rf.access.op : "?");
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
	fputs("    <testcase classname=\"npusan.", f);
	xml_put(f, r->job, true);
	fprintf(f, "\" name=\"npusan analysis\">\n"
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
	size_t tests = r->nprocs + errors;
	char name[64];

	for (size_t i = 0; i < r->nprocs; i++)
		failed += r->procs[i].nfinds > 0;
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
		   "      <property name=\"findings\" value=\"%zu\"/>\n",
		tests, failed, errors, s->ranks, s->events, s->lost,
		s->findings);
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

		jr__proc_name(p, name, sizeof(name));
		fputs("    <testcase classname=\"npusan.", f);
		xml_put(f, r->job, true);
		fprintf(f, "\" name=\"%s\"%s\n", name, p->nfinds ? ">" : "/>");
		for (size_t j = 0; j < p->nfinds; j++)
			jr_junit_failure(f, r->finds[p->finds[j]]);
		if (p->nfinds)
			fputs("    </testcase>\n", f);
	}
	fputs("    <system-out>", f);
	xml_put(f, verdict, false);
	fputs("</system-out>\n  </testsuite>\n</testsuites>\n", f);
}

int jr__junit(const struct jr *r, const struct jr_sum *s, const char *verdict)
{
	size_t n = strlen(r->junit);
	char *tmp = malloc(n + 16);
	mode_t mask;
	FILE *f;
	int fd, err;

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
