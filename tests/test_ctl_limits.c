/*
 * test_ctl_limits.c - `npusanctl show --print-limit` and `npusanctl
 * findings --op/--exclude-op` against a fake npusand of its own: a thread
 * that takes one connection, reads its query, answers with one canned
 * frame and holds on until the client hangs up. Part of test_ctl's suite
 * (test_ctl_limits_add()).
 */
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "testutil.h"

void test_ctl_limits_add(TCase *tc);

/* ---- the fake daemon ----------------------------------------------------- */

struct lim_fake {
	char path[108];
	int lfd;
	uint8_t *frame; /* the one reply */
	size_t len;
	pthread_t th;
};

static void *lim_fake_main(void *arg)
{
	struct lim_fake *q = arg;
	uint8_t *buf = malloc(FRAME_MAX);
	struct pollfd p = { .events = POLLIN };
	size_t len;
	int c = accept4(q->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (c >= 0 && buf != NULL &&
	    frame_recv(c, buf, FRAME_MAX, &len, NULL, 10000) == 0) {
		send(c, q->frame, q->len, MSG_NOSIGNAL);
		p.fd = c;
		while (poll(&p, 1, 30000) > 0 && recv(c, buf, FRAME_MAX, 0) > 0)
			;
	}
	if (c >= 0)
		close(c);
	free(buf);
	return NULL;
}

/* A fake daemon in a fresh directory that answers `m`; NPUSAN_SOCKET
 * names it. */
static struct lim_fake *lim_fake_new(const Npusan__FromDaemon *m)
{
	struct lim_fake *q = calloc(1, sizeof(*q));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char *dir = tu_tmpdir();
	size_t len = npusan__from_daemon__get_packed_size(m);

	ck_assert_ptr_nonnull(q);
	ck_assert_int_lt(snprintf(q->path, sizeof(q->path), "%s/npusand.sock",
				  dir),
			 (int)sizeof(sa.sun_path));
	free(dir);
	strcpy(sa.sun_path, q->path);
	q->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(q->lfd, 0);
	ck_assert_int_eq(bind(q->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(q->lfd, 8), 0);
	q->frame = malloc(FRAME_HEADER_SIZE + len);
	ck_assert_ptr_nonnull(q->frame);
	ck_assert_int_eq(frame_header_encode(len, q->frame), 0);
	npusan__from_daemon__pack(m, q->frame + FRAME_HEADER_SIZE);
	q->len = FRAME_HEADER_SIZE + len;
	setenv("NPUSAN_SOCKET", q->path, 1);
	ck_assert_int_eq(pthread_create(&q->th, NULL, lim_fake_main, q), 0);
	return q;
}

static void lim_fake_free(struct lim_fake *q)
{
	pthread_join(q->th, NULL);
	close(q->lfd);
	unlink(q->path);
	free(q->frame);
	free(q);
}

/* ---- canned findings ----------------------------------------------------- */

/* A finding with its parts, all in one place. */
struct lim_cf {
	Npusan__Finding f;
	Npusan__Access access, previous;
};

static void lim_access(Npusan__Access *a, uint64_t stream, const char *op)
{
	*a = (Npusan__Access)NPUSAN__ACCESS__INIT;
	a->has_stream = a->has_seq = a->has_write = true;
	a->stream = stream;
	a->seq = 1;
	a->op = (char *)op;
}

/* docs/findings.md's example: the data race (id 1, aten::add.Tensor after
 * aten::randn) or the missing record_stream (id 2, aten::add.Tensor). */
static void lim_cf_spec(struct lim_cf *c, bool race)
{
	Npusan__Finding *f = &c->f;

	*f = (Npusan__Finding)NPUSAN__FINDING__INIT;
	lim_access(&c->access, 7, "aten::add.Tensor");
	lim_access(&c->previous, 0, "aten::randn");
	f->has_id = f->has_pid = f->has_ptr = f->has_count = true;
	f->id = race ? 1 : 2;
	f->kind = (char *)(race ? "data_race" : "missing_record_stream");
	f->pid = 4242;
	f->job = (char *)"demo";
	f->ptr = 0x1000;
	f->access = &c->access;
	f->previous = race ? &c->previous : NULL;
	f->detected_at = (char *)(race ? "launch" : "free");
	f->count = 1;
}

/* A fake daemon answering a findings query with both spec findings. */
static struct lim_fake *lim_fake_findings(void)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__FindingsReply r = NPUSAN__FINDINGS_REPLY__INIT;
	struct lim_cf race, mrs;
	Npusan__Finding *fs[2] = { &race.f, &mrs.f };

	lim_cf_spec(&race, true);
	lim_cf_spec(&mrs, false);
	r.n_findings = 2;
	r.findings = fs;
	r.has_done = r.done = true;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_FINDINGS;
	m.findings = &r;
	return lim_fake_new(&m);
}

/* A fake daemon answering `show` with the spec's data race. */
static struct lim_fake *lim_fake_show(void)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ShowReply r = NPUSAN__SHOW_REPLY__INIT;
	struct lim_cf race;

	lim_cf_spec(&race, true);
	r.finding = &race.f;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_SHOW;
	m.show = &r;
	return lim_fake_new(&m);
}

/* Runs `npusanctl ARGS...` (NULL-terminated). */
static int lim_ctl(char **out, char **err, ...)
{
	const char *argv[16] = { tu_bin("npusanctl") };
	va_list ap;
	int n = 1;

	va_start(ap, err);
	while (n < 15 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	return tu_run(argv, NULL, out, err);
}

/* ---- the tests ----------------------------------------------------------- */

START_TEST(ctl_show_print_limit_0_prints_nothing_and_says_so)
{
	struct lim_fake *q = lim_fake_show();
	char *out, *err;

	ck_assert_int_eq(lim_ctl(&out, &err, "show", "--print-limit", "0", "1",
				 NULL),
			 0);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl: 1 more finding not printed "
			      "(--print-limit 0)\n");
	free(out);
	free(err);
	lim_fake_free(q);
	q = lim_fake_show();
	ck_assert_int_eq(lim_ctl(&out, &err, "show", "--json", "--print-limit",
				 "1", "1", NULL),
			 0);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\":\"data_race\""), 1);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	lim_fake_free(q);
	ck_assert_int_eq(lim_ctl(NULL, &err, "show", "--print-limit", "x", "1",
				 NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--print-limit needs a number"));
	free(err);
}
END_TEST

START_TEST(ctl_findings_op_filters_rows_and_exit_status)
{
	struct lim_fake *q = lim_fake_findings();
	char *out, *err;

	ck_assert_int_eq(lim_ctl(&out, &err, "findings", "--json", "--op",
				 "aten::rand?", NULL),
			 1);
	ck_assert_uint_eq(tu_count_lines(out, "{\"id\":"), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\":\"data_race\""), 1);
	ck_assert_str_eq(err, "npusanctl: 1 finding filtered out by "
			      "--op/--exclude-op\n");
	free(out);
	free(err);
	lim_fake_free(q);
	/* Every finding filtered out: no rows, exit 0, said on stderr. */
	q = lim_fake_findings();
	ck_assert_int_eq(lim_ctl(&out, &err, "findings", "--exclude-op",
				 "*add*", NULL),
			 0);
	ck_assert_str_eq(out, "No findings.\n");
	ck_assert_str_eq(err, "npusanctl: 2 findings filtered out by "
			      "--op/--exclude-op\n");
	free(out);
	free(err);
	lim_fake_free(q);
	q = lim_fake_findings();
	ck_assert_int_eq(lim_ctl(&out, &err, "findings", "--op", "none",
				 "--op", "aten::add.Tensor", NULL),
			 1);
	ck_assert_uint_eq(tu_count_lines(out, "demo"), 2);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	lim_fake_free(q);
	ck_assert_int_eq(lim_ctl(NULL, &err, "findings", "--exclude-op", "",
				 NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--exclude-op needs a pattern"));
	free(err);
}
END_TEST

void test_ctl_limits_add(TCase *tc)
{
	tcase_add_test(tc, ctl_show_print_limit_0_prints_nothing_and_says_so);
	tcase_add_test(tc, ctl_findings_op_filters_rows_and_exit_status);
}
