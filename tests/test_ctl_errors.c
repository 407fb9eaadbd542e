/*
 * test_ctl_errors.c - what npusanctl makes of a daemon's errors: an Error
 * reply, a finding that is not there, malformed replies and silence.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_helpers.h"
#include "npusan.pb-c.h"
#include "testutil.h"

/* ---- errors from the daemon ---------------------------------------------- */

START_TEST(ctl_error_reply_is_reported_and_exits_3)
{
	struct fq *q = fq_new();
	char *out, *err;

	fq_error(q, "database error\033[31m", EIO);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "42", NULL), 3);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl show: the daemon refused the "
			      "request: database error?[31m\n");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_SHOW);
	ck_assert_int_eq(fq_query(q)->show->id, 42);
	free(out);
	free(err);
	fq_free(q);

	/* No message: the code speaks. */
	q = fq_new();
	fq_error(q, NULL, EPROTO);
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "stats", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, strerror(EPROTO)));
	free(err);
	fq_free(q);
}
END_TEST

/* No such finding is the asker's mistake, not a missing daemon: 2. */
START_TEST(ctl_show_of_no_such_finding_exits_2)
{
	struct fq *q = fq_new();
	char *out, *err;

	fq_error(q, "no finding 42\033[31m", ENOENT);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "42", NULL), 2);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl show: no finding 42?[31m\n");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_malformed_replies_exit_3)
{
	static const uint8_t garbage[] = { 5, 0, 0, 0, 0xff, 0xff, 0xff,
					   0xff, 0xff };
	static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0x7f };
	struct fq *q = fq_new();
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply st = NPUSAN__STATS_REPLY__INIT;
	struct cf a;
	struct cf *v[] = { &a };
	char *out, *err;

	/* not protobuf */
	fq_raw(q, garbage, sizeof(garbage));
	ck_assert_int_eq(ctl_fq(q, &out, &err, "list", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(out);
	free(err);
	fq_free(q);

	/* a frame past FRAME_MAX */
	q = fq_new();
	fq_raw(q, huge, sizeof(huge));
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "findings", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(err);
	fq_free(q);

	/* the wrong kind of reply */
	q = fq_new();
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &st;
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "list", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(err);
	fq_free(q);

	/* a finding without its access */
	q = fq_new();
	cf_spec(&a, true);
	a.f.access = NULL;
	fq_findings(q, v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 3);
	ck_assert_str_eq(out, "");
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_silent_daemon_times_out)
{
	struct fq *q = fq_new();
	char *out, *err;
	time_t t0 = time(NULL);

	ck_assert_int_eq(ctl_fq(q, &out, &err, "list", "--timeout", "0.3", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "did not answer within 0.3 s"));
	ck_assert_str_eq(out, "");
	ck_assert_int_le(time(NULL) - t0, 5);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

void ctl_errors_add(TCase *tc)
{
	tcase_add_test(tc, ctl_error_reply_is_reported_and_exits_3);
	tcase_add_test(tc, ctl_show_of_no_such_finding_exits_2);
	tcase_add_test(tc, ctl_malformed_replies_exit_3);
	tcase_add_test(tc, ctl_silent_daemon_times_out);
}
