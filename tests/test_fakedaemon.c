/*
 * test_fakedaemon.c - the stand-in daemon other suites and the agent
 * benchmark rely on: it must accept, hand over the ring, keep the
 * connection, and drain a ring into the ops that were pushed.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fakedaemon.h"
#include "frame.h"
#include "npusan.pb-c.h"
#include "ring.h"
#include "ringread.h"
#include "testutil.h"

struct fdt {
	char dir[64];
	char path[96];
	struct fakedaemon *d;
};

static void fdt_start(struct fdt *t)
{
	strcpy(t->dir, "/tmp/npusan-fdt.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/sock", t->dir);
	ck_assert_int_eq(fakedaemon_start(t->path, &t->d), 0);
}

static void fdt_stop(struct fdt *t)
{
	fakedaemon_stop(t->d);
	ck_assert_int_eq(access(t->path, F_OK), -1);
	rmdir(t->dir);
}

/* Connects as an agent and sends a Register carrying `memfd`. */
static int fdt_register(const struct fdt *t, int memfd)
{
	Npusan__Register r = NPUSAN__REGISTER__INIT;
	Npusan__ToDaemon env = NPUSAN__TO_DAEMON__INIT;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint8_t buf[512];
	size_t len;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(s, 0);
	strcpy(sa.sun_path, t->path);
	ck_assert_int_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	r.has_pid = 1;
	r.pid = 4242;
	r.job = (char *)"job-7";
	r.has_rank = 1;
	r.rank = 3;
	r.has_ring_size = 1;
	r.ring_size = RING_MIN_CAPACITY;
	env.msg_case = NPUSAN__TO_DAEMON__MSG_REGISTER;
	env.register_ = &r;
	len = npusan__to_daemon__pack(&env, buf);
	ck_assert_int_eq(frame_send(s, buf, len, memfd, 1000), 0);
	return s;
}

static void fdt_expect_accepted(int s)
{
	Npusan__FromDaemon *m;
	uint8_t buf[512];
	size_t len;

	ck_assert_int_eq(frame_recv(s, buf, sizeof(buf), &len, NULL, 2000), 0);
	m = npusan__from_daemon__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case,
			 NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY);
	ck_assert(m->register_reply->has_accepted);
	ck_assert(m->register_reply->accepted);
	npusan__from_daemon__free_unpacked(m, NULL);
}

START_TEST(fakedaemon_register_is_accepted_and_queued)
{
	struct fakedaemon_agent a;
	struct stat st;
	struct pollfd p;
	struct fdt t;
	struct ring *r;
	int s;

	fdt_start(&t);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	s = fdt_register(&t, ring_fd(r));
	fdt_expect_accepted(s);
	ck_assert_int_eq(fakedaemon_next(t.d, 2000, &a), 0);
	ck_assert_int_eq(a.pid, 4242);
	ck_assert_str_eq(a.job, "job-7");
	ck_assert(a.has_rank);
	ck_assert_int_eq(a.rank, 3);
	ck_assert_uint_eq(a.ring_size, RING_MIN_CAPACITY);
	ck_assert_int_ge(a.fd, 0);
	ck_assert_int_eq(fstat(a.fd, &st), 0);
	ck_assert_int_eq(st.st_size,
			 ring_map_size(RING_MIN_CAPACITY, r->max_record));
	/* The connection stays up: a close would mean a daemon restart. */
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 50), 0);
	ck_assert_uint_eq(fakedaemon_connections(t.d), 1);
	close(a.fd);
	close(s);
	ring_destroy(r);
	fdt_stop(&t);
}
END_TEST

START_TEST(fakedaemon_next_times_out)
{
	struct fakedaemon_agent a;
	struct fdt t;

	fdt_start(&t);
	ck_assert_int_eq(fakedaemon_next(t.d, 20, &a), -ETIMEDOUT);
	fdt_stop(&t);
}
END_TEST

START_TEST(fakedaemon_disconnect_closes_connections)
{
	struct fakedaemon_agent a;
	struct fdt t;
	struct ring *r;
	uint8_t buf[16];
	size_t len;
	int s;

	fdt_start(&t);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	s = fdt_register(&t, ring_fd(r));
	fdt_expect_accepted(s);
	ck_assert_int_eq(fakedaemon_next(t.d, 2000, &a), 0);
	close(a.fd);
	ck_assert_int_eq(fakedaemon_disconnect(t.d), 0);
	ck_assert_uint_eq(fakedaemon_connections(t.d), 0);
	ck_assert_int_eq(frame_recv(s, buf, sizeof(buf), &len, NULL, 2000),
			 -ECONNRESET);
	close(s);
	/* The listener is still up: registering again works. */
	s = fdt_register(&t, ring_fd(r));
	fdt_expect_accepted(s);
	ck_assert_int_eq(fakedaemon_next(t.d, 2000, &a), 0);
	close(a.fd);
	close(s);
	ring_destroy(r);
	fdt_stop(&t);
}
END_TEST

START_TEST(fakedaemon_stop_closes_untaken_fds)
{
	struct fdt t;
	struct ring *r;
	int s;

	fdt_start(&t);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	s = fdt_register(&t, ring_fd(r));
	fdt_expect_accepted(s);
	fdt_stop(&t); /* leak-checked under ASan; must not hang */
	close(s);
	ring_destroy(r);
}
END_TEST

/* ---- collecting -------------------------------------------------------- */

static void push_string(struct ring *r, uint32_t id, const char *s)
{
	struct ring_string *def;
	struct ring_slot rs;

	ck_assert_int_eq(ring_reserve(r, RING_REC_STRING,
				      sizeof(*def) + strlen(s), &rs), 0);
	def = rs.payload;
	def->id = id;
	def->len = (uint32_t)strlen(s);
	memcpy(def->bytes, s, strlen(s));
	ring_commit(&rs);
}

static int push_launch(struct ring *r, uint32_t name, uint64_t base)
{
	struct ring_launch *l;
	struct ring_slot rs;
	int err = ring_reserve(r, RING_REC_LAUNCH,
			       sizeof(*l) + 4 * sizeof(struct ring_range), &rs);

	if (err < 0)
		return err;
	l = rs.payload;
	memset(l, 0, sizeof(*l));
	l->kind = OP_LAUNCH;
	l->stream = 7;
	l->name = name;
	l->nreads = 2;
	l->nwrites = 2;
	for (unsigned i = 0; i < 4; i++)
		l->ranges[i] = (struct ring_range){ base + i * 0x100, 0x10 };
	ring_commit(&rs);
	return 0;
}

struct seen {
	struct symtab *syms;
	unsigned launches, gaps;
	uint64_t lost;
	uint64_t last_ptr;
};

static int seen_cb(void *arg, const struct op *op)
{
	struct seen *s = arg;

	if (op->kind == OP_GAP) {
		s->gaps++;
		s->lost += op->lost;
		return 0;
	}
	ck_assert_int_eq(op->kind, OP_LAUNCH);
	ck_assert_str_eq(symtab_str(s->syms, op->name, NULL), "gemm");
	ck_assert_uint_eq(op->stream, 7);
	ck_assert_uint_eq(op->nreads, 2);
	ck_assert_uint_eq(op->nwrites, 2);
	s->last_ptr = op->writes[1].ptr;
	s->launches++;
	return 0;
}

START_TEST(fakedaemon_collect_decodes_launches)
{
	struct fakedaemon_collected st;
	struct seen s = { 0 };
	struct ring *r;

	ck_assert_int_eq(symtab_new(&s.syms), 0);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	push_string(r, 9, "gemm");
	for (unsigned i = 0; i < 100; i++)
		ck_assert_int_eq(push_launch(r, 9, 0x1000 * i), 0);
	ck_assert_int_eq(fakedaemon_collect(ring_fd(r), 20, 0, s.syms, seen_cb,
					    &s, &st),
			 100);
	ck_assert_uint_eq(s.launches, 100);
	ck_assert_uint_eq(s.last_ptr, 0x1000 * 99 + 0x300);
	ck_assert_uint_eq(st.records, 101);
	ck_assert_uint_eq(st.ops, 100);
	ck_assert_uint_eq(st.malformed, 0);
	ck_assert_uint_eq(st.dropped, 0);
	ring_destroy(r);
	symtab_free(s.syms);
}
END_TEST

START_TEST(fakedaemon_collect_dead_reports_pending_drops)
{
	struct fakedaemon_collected st;
	struct seen s = { 0 };
	unsigned pushed = 0;
	struct ring *r;

	ck_assert_int_eq(symtab_new(&s.syms), 0);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	push_string(r, 9, "gemm");
	/* Fill the ring and drop three; no later record reports the drops,
	 * as when the producer died. */
	while (push_launch(r, 9, 0) == 0)
		pushed++;
	ck_assert_int_eq(push_launch(r, 9, 0), -ENOBUFS);
	ck_assert_int_eq(push_launch(r, 9, 0), -ENOBUFS);
	/* A drop may report an earlier one in a gap record that still fits;
	 * the last is left pending and comes as the final gap. */
	ck_assert_int_eq(fakedaemon_collect(ring_fd(r), 0, RINGREAD_DEAD,
					    s.syms, seen_cb, &s, &st),
			 (int)(pushed + s.gaps));
	ck_assert_uint_eq(s.launches, pushed);
	ck_assert_uint_ge(s.gaps, 1);
	ck_assert_uint_eq(s.lost, 3);
	ck_assert_uint_eq(st.dropped, 3);
	ring_destroy(r);
	symtab_free(s.syms);
}
END_TEST

/* A quiet ring returns after about quiet_ms, not at once, not never. */
START_TEST(fakedaemon_collect_waits_quiet_ms)
{
	struct seen s = { 0 };
	struct timespec a, b;
	struct ring *r;
	double ms;

	ck_assert_int_eq(symtab_new(&s.syms), 0);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &r), 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	ck_assert_int_eq(fakedaemon_collect(ring_fd(r), 50, 0, s.syms, seen_cb,
					    &s, NULL),
			 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ms = (double)(b.tv_sec - a.tv_sec) * 1e3 +
	     (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	ck_assert(ms >= 45 && ms < 2000);
	ring_destroy(r);
	symtab_free(s.syms);
}
END_TEST

static Suite *fakedaemon_suite(void)
{
	Suite *s = suite_create("fakedaemon");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, fakedaemon_register_is_accepted_and_queued);
	tcase_add_test(tc, fakedaemon_next_times_out);
	tcase_add_test(tc, fakedaemon_disconnect_closes_connections);
	tcase_add_test(tc, fakedaemon_stop_closes_untaken_fds);
	tcase_add_test(tc, fakedaemon_collect_decodes_launches);
	tcase_add_test(tc, fakedaemon_collect_dead_reports_pending_drops);
	tcase_add_test(tc, fakedaemon_collect_waits_quiet_ms);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(fakedaemon_suite());
}
