/*
 * test_ctl_list.c - `npusanctl list` and `stats` against the fake daemon:
 * processes grouped by job in an aligned table, JSON and filters, and the
 * daemon's counters.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_helpers.h"
#include "npusan.pb-c.h"
#include "testutil.h"

/* ---- list ---------------------------------------------------------------- */

static void proc_init(Npusan__Process *p, uint32_t pid, const char *job,
		      int rank, const char *state, uint64_t events,
		      uint64_t lost, uint64_t findings, int64_t last_ms)
{
	*p = (Npusan__Process)NPUSAN__PROCESS__INIT;
	p->has_id = p->has_pid = true;
	p->id = pid + 1000;
	p->pid = pid;
	p->job = (char *)job;
	p->has_rank = rank >= 0;
	p->rank = rank >= 0 ? (uint32_t)rank : 0;
	p->state = (char *)state;
	p->has_events = p->has_lost = p->has_findings = p->has_gaps = true;
	p->events = events;
	p->lost = lost;
	p->gaps = lost > 0; /* the gap that lost them */
	p->findings = findings;
	p->has_first_ms = true;
	p->first_ms = T0_MS;
	p->has_last_ms = last_ms != 0;
	p->last_ms = last_ms;
}

/* Four processes of two jobs and none, newest activity first. */
struct procs {
	Npusan__Process p[4];
	Npusan__Process *v[4];
};

static void procs_init(struct procs *s)
{
	int64_t now = (int64_t)time(NULL) * 1000;

	proc_init(&s->p[0], 4243, "demo", 1, "running", 1500000, 0, 2,
		  now - 150 * 1000);
	proc_init(&s->p[1], 99, "other", -1, "exited", 10, 3, 0,
		  now - 3 * 3600 * 1000 - 60000);
	proc_init(&s->p[2], 4242, "demo", 0, "running", 20, 0, 1,
		  now - 26 * 3600 * 1000);
	proc_init(&s->p[3], 7, NULL, -1, "exited", 0, 0, 0, 0);
	s->p[3].has_events = false;
	for (int i = 0; i < 4; i++)
		s->v[i] = &s->p[i];
}

START_TEST(ctl_list_groups_by_job_in_an_aligned_table)
{
	struct fq *q = fq_new();
	struct procs s;
	char *out, *err;

	procs_init(&s);
	fq_list(q, s.v, 2, false);
	fq_list(q, s.v + 2, 2, true);
	ck_assert_msg(ctl_fq(q, &out, &err, "list", NULL) == 0, "%s", err);
	ck_assert_str_eq(out,
			 "JOB     PID  RANK  STATE     EVENTS  LOST  GAPS  "
			 "FINDINGS  AGE\n"
			 "demo   4242     0  running       20     0     0  "
			 "       1  1d\n"
			 "demo   4243     1  running  1500000     0     0  "
			 "       2  2m\n"
			 "\n"
			 "other    99     -  exited        10     3     1  "
			 "       0  3h\n"
			 "\n"
			 "-         7     -  exited         -     0     0  "
			 "       0  -\n");
	ck_assert_str_eq(err, "");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_LIST);
	ck_assert(!fq_query(q)->list->has_pid);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_list_json_and_filters)
{
	struct fq *q = fq_new();
	struct procs s;
	char *out;

	procs_init(&s);
	s.p[0].has_last_ms = false;
	s.p[0].hostname = (char *)"node\"1";
	s.p[0].executable = (char *)"/usr/bin/python3";
	s.p[0].has_local_rank = s.p[0].has_world_size = true;
	s.p[0].local_rank = 1;
	s.p[0].world_size = 8;
	s.p[0].has_uid = s.p[0].has_start_time = true;
	s.p[0].uid = 1000;
	s.p[0].start_time = 123456;
	fq_list(q, s.v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "list", "--json", "--job",
				"demo", "--pid", "4243", NULL),
			 0);
	ck_assert_str_eq(out, "{\"id\":5243,\"pid\":4243,\"job\":\"demo\","
			      "\"rank\":1,\"local_rank\":1,\"world_size\":8,"
			      "\"state\":\"running\",\"events\":1500000,"
			      "\"lost\":0,\"gaps\":0,\"findings\":2,"
			      "\"suppressed\":null,\"uid\":1000,"
			      "\"host\":\"node\\\"1\",\"executable\":"
			      "\"/usr/bin/python3\",\"run\":null,"
			      "\"start_time\":123456,"
			      "\"first_seen\":\"" T0 "\",\"last_seen\":null}\n");
	ck_assert_str_eq(fq_query(q)->list->job, "demo");
	ck_assert(fq_query(q)->list->has_pid);
	ck_assert_uint_eq(fq_query(q)->list->pid, 4243);
	free(out);
	fq_free(q);

	q = fq_new();
	fq_list(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "list", NULL), 0);
	ck_assert_str_eq(out, "No processes.\n");
	free(out);
	fq_free(q);
}
END_TEST

/* ---- stats --------------------------------------------------------------- */

START_TEST(ctl_stats_text_and_json)
{
	struct fq *q = fq_new();
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply r = NPUSAN__STATS_REPLY__INIT;
	char *out;

	r.has_uptime_ms = r.has_processes_running = r.has_processes_exited =
		true;
	r.has_events = r.has_events_per_s = r.has_lost = r.has_findings =
		r.has_db_bytes = true;
	r.uptime_ms = (3 * 86400 + 4 * 3600 + 5 * 60) * INT64_C(1000);
	r.processes_running = 3;
	r.processes_exited = 2;
	r.events = 123456789;
	r.events_per_s = 2000000.4;
	r.lost = 17;
	r.findings = 12;
	r.db_bytes = 5 * 1024 * 1024 + 300 * 1024;
	r.daemon_version = (char *)"0.1.0";
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &r;
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "stats", NULL), 0);
	ck_assert_str_eq(out, "uptime           3d 4h\n"
			      "processes        5 (3 running, 2 exited)\n"
			      "events/s         2000000\n"
			      "events           123456789\n"
			      "records dropped  17\n"
			      "findings         12\n"
			      "database size    5.3 MiB\n"
			      "daemon version   0.1.0\n");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_STATS);
	free(out);
	fq_free(q);

	q = fq_new();
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "stats", "--json", NULL), 0);
	ck_assert_str_eq(out, "{\"uptime_ms\":273900000,\"processes_running\":3,"
			      "\"processes_exited\":2,\"events_per_s\":"
			      "2000000.4,\"events\":123456789,\"lost\":17,"
			      "\"findings\":12,\"db_bytes\":5550080,"
			      "\"daemon_version\":\"0.1.0\"}\n");
	free(out);
	fq_free(q);
}
END_TEST

void ctl_list_add(TCase *tc)
{
	tcase_add_test(tc, ctl_list_groups_by_job_in_an_aligned_table);
	tcase_add_test(tc, ctl_list_json_and_filters);
	tcase_add_test(tc, ctl_stats_text_and_json);
}
