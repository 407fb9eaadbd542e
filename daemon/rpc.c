/*
 * rpc.c - the queries of npusand's socket (the design is server_int.h's):
 * list, findings (and follows), show, stats, attach and detach. Store
 * reads run as jobs on libuv's thread pool (DESIGN 8), which pack the
 * reply there; the loop sends it.
 *
 * A job is freed when it is done (rpc_job_done_cb()), with what its reply
 * did not take. A findings cursor (c->cur) and a list answer (c->lcur)
 * are the connection's, freed when the answer is complete, on an error,
 * or with the connection (conn__free()); nothing frees them while a job
 * of theirs runs.
 */
#include "server_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

/* An answer frame is sent once its items pass this many bytes. */
#define RPC_FRAME_TARGET (128u * 1024)
/* A list answer naming more processes than this is refused: filter it. */
#define RPC_LIST_MAX_PROCS (1u << 20)
/* Processes a list answer walks at a time (DESIGN 3). */
#define RPC_LIST_PAGE 256

/*
 * The field numbers of npusan.proto that wire_batch_add() and
 * wire_batch_frame() take. protobuf-c 1.4 generates no *_FIELD_NUMBER
 * macros; what it offers at compile time is a oneof's case enum, whose
 * values are the fields' numbers, so the envelope's fields are those
 * (FromDaemon.list, FromDaemon.findings). The replies' own fields exist
 * only in their descriptors, read at run time: rpc__proto_matches()
 * checks these against them.
 */
#define RPC_ENV_LIST NPUSAN__FROM_DAEMON__MSG_LIST         /* 3 */
#define RPC_ENV_FINDINGS NPUSAN__FROM_DAEMON__MSG_FINDINGS /* 4 */
#define RPC_LIST_PROCESSES 1  /* ListReply.processes */
#define RPC_LIST_DONE 2	      /* ListReply.done */
#define RPC_FINDINGS_ITEMS 1  /* FindingsReply.findings */
#define RPC_FINDINGS_DONE 2   /* FindingsReply.done */

/* ---- jobs: queries off the loop (DESIGN 8) ---------------------------- */

struct rpc_job;
typedef void (*rpc_job_fn)(struct rpc_job *j);

/*
 * A query's store work. `work` runs on a pool thread and touches only the
 * job (never the connection); `reply` runs on the loop, the connection
 * still open. The job owns `frame`, `batch` and `frames` until reply
 * takes them; what is left is freed with the job in rpc_job_done_cb().
 */
struct rpc_job {
	uv_work_t req;
	struct conn *c;
	struct store *store;
	rpc_job_fn work, reply;
	int err;	/* work's: 0 or a negative errno */
	uint8_t *frame; /* a packed reply, or NULL */
	size_t len;
	struct wire_batch batch; /* a reply in the making */
	struct conn_out *frames, **ftail; /* packed replies, in order */
	void *owned; /* work's result, freed with the job unless reply took it */
	union {
		struct store_stats stats;
		struct {
			int64_t id;
			struct store_filter f;
		} show;
		struct {
			struct wire_strings strs;
			struct store_filter f;
			size_t n; /* ids, in `owned` */
		} list;
		struct {
			const int64_t *ids; /* the connection's lcur's */
			size_t n;
			bool done;
		} page;
		/* A copy of the connection's cursor, walked on the pool;
		 * its filter's strings stay the connection's, which
		 * outlive the job. */
		struct rpc_cursor walk;
	} u;
};

static void rpc_job_work_cb(uv_work_t *req)
{
	struct rpc_job *j = req->data;

	j->work(j);
}

static void rpc_job_done_cb(uv_work_t *req, int status)
{
	struct rpc_job *j = req->data;
	struct conn *c = j->c;

	c->job = NULL;
	if (c->closed) {
		conn__free(c);
	} else if (!c->dead) {
		if (status == 0)
			j->reply(j);
		else
			conn__error(c, EIO, "the query was cancelled", false);
		if (!c->dead) {
			c->since_ms = clock_mono_ms();
			conn__update(c);
		}
	}
	free(j->owned);
	free(j->frame);
	wire_batch_free(&j->batch);
	while (j->frames != NULL) {
		struct conn_out *o = j->frames;

		j->frames = o->next;
		free(o->data);
		free(o);
	}
	free(j);
}

/* A new job for `c`, or NULL (out of memory: an Error was sent). */
static struct rpc_job *rpc_job_new(struct conn *c, rpc_job_fn work,
				   rpc_job_fn reply)
{
	struct rpc_job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		conn__error(c, ENOMEM, "out of memory", false);
		return NULL;
	}
	j->c = c;
	j->store = c->srv->store;
	j->work = work;
	j->reply = reply;
	j->req.data = j;
	j->ftail = &j->frames;
	return j;
}

/* Runs `j` on the pool; `c` reads nothing until it is done. */
static void rpc_job_start(struct conn *c, struct rpc_job *j)
{
	int err = uv_queue_work(c->srv->loop, &j->req, rpc_job_work_cb,
				rpc_job_done_cb);

	if (err < 0) {
		free(j);
		conn__error(c, EIO, uv_strerror(err), false);
		return;
	}
	c->job = j;
	conn__update(c);
}

/* Sends the job's frame, or an Error for its err. */
static void rpc_job_send(struct rpc_job *j)
{
	if (j->err == 0 && j->frame != NULL) {
		conn__send(j->c, j->frame, j->len);
		j->frame = NULL; /* conn__send() took it */
		return;
	}
	conn__error(j->c, j->err == -ENOMEM ? ENOMEM : EIO,
		    j->err == -ENOMEM ? "out of memory" : "database error",
		    false);
}

/* ---- queries ----------------------------------------------------------- */

/* The store filter's uid part: a non-root peer sees only its own. */
static void rpc_restrict(const struct conn *c, struct store_filter *f)
{
	if (c->uid != 0) {
		f->has_uid = true;
		f->uid = (uint32_t)c->uid;
	}
}

static void rpc_process_msg(const struct store_process *p, Npusan__Process *m)
{
	npusan__process__init(m);
	m->has_id = m->has_pid = m->has_start_time = m->has_uid = 1;
	m->id = p->id;
	m->pid = p->pid;
	m->start_time = p->start_time;
	m->uid = p->uid;
	m->hostname = (char *)p->host;
	m->executable = (char *)p->exe;
	m->job = (char *)p->job;
	m->run = (char *)p->run;
	m->has_rank = p->has_rank;
	m->rank = p->rank;
	m->has_local_rank = p->has_local_rank;
	m->local_rank = p->local_rank;
	m->has_world_size = p->has_world_size;
	m->world_size = p->world_size;
	m->state = (char *)store_state_name(p->state);
	m->has_events = m->has_lost = m->has_findings = 1;
	m->events = p->events;
	m->lost = p->lost;
	m->findings = p->findings;
	m->has_first_ms = m->has_last_ms = 1;
	m->first_ms = p->first_ms;
	m->last_ms = p->last_ms;
	m->has_gaps = 1;
	m->gaps = p->gaps;
	m->has_suppressed = 1;
	m->suppressed = p->suppressed;
}

static void rpc_access_msg(const struct finding_view_access *a,
			   Npusan__Access *m)
{
	npusan__access__init(m);
	m->has_stream = m->has_seq = m->has_write = 1;
	m->stream = a->stream;
	m->seq = a->seq;
	m->write = a->write;
	m->op = (char *)a->op;
	m->arg = (char *)a->arg;
	m->n_stack = a->stack.n;
	m->stack = (char **)a->stack.frames;
	m->has_graph = a->has_graph;
	m->graph = a->graph;
}

/* A wire Finding and the parts it points at. */
struct rpc_finding {
	Npusan__Finding m;
	Npusan__Alloc alloc;
	Npusan__Access acc, prev;
	Npusan__Free free;
};

/* The one encoder of a finding into the wire's Finding (client_finding()
 * in cli/client.c is the one decoder). r->m borrows from f and from the
 * other parts of `r`. */
static void rpc_finding_msg(const struct store_finding *f,
			    struct rpc_finding *r)
{
	const struct finding_view *v = &f->v;
	Npusan__Finding *m = &r->m;
	Npusan__Alloc *alloc = &r->alloc;
	Npusan__Access *acc = &r->acc, *prev = &r->prev;

	npusan__finding__init(m);
	m->has_id = m->has_process_id = m->has_ptr = m->has_count = 1;
	m->id = (int64_t)v->id;
	m->process_id = f->process_id;
	m->kind = (char *)v->kind;
	m->detected_at = (char *)v->detected_at;
	m->ptr = v->ptr;
	m->count = v->count;
	m->has_first_ms = v->has_first;
	m->first_ms = v->first_ms;
	m->has_last_ms = v->has_last;
	m->last_ms = v->last_ms;
	m->has_pid = v->has_pid;
	m->pid = (uint32_t)v->pid;
	m->job = (char *)v->job;
	m->has_rank = v->has_rank;
	m->rank = (uint32_t)v->rank;
	m->suppressed = (char *)v->suppressed;
	if (v->has_alloc) {
		npusan__alloc__init(alloc);
		alloc->has_ptr = alloc->has_size = 1;
		alloc->ptr = v->alloc.ptr;
		alloc->size = v->alloc.size;
		alloc->has_stream = v->alloc.has_stream;
		alloc->stream = v->alloc.stream;
		alloc->n_stack = v->alloc.stack.n;
		alloc->stack = (char **)v->alloc.stack.frames;
		m->alloc = alloc;
	}
	rpc_access_msg(&v->access, acc);
	m->access = acc;
	if (v->has_previous) {
		rpc_access_msg(&v->previous, prev);
		m->previous = prev;
	}
	if (v->has_free) {
		npusan__free__init(&r->free);
		r->free.n_stack = v->free_stack.n;
		r->free.stack = (char **)v->free_stack.frames;
		m->free = &r->free;
	}
}

/* Sends the batch as one frame of `env_field`. False when the connection
 * closed. */
static bool rpc_send_batch(struct conn *c, struct wire_batch *b,
			   unsigned env_field, unsigned done_field, bool done)
{
	uint8_t *f;
	size_t len;

	if (wire_batch_frame(b, env_field, done_field, done, &f, &len) < 0) {
		conn__close(c);
		return false;
	}
	return conn__send(c, f, len) == 0;
}

struct rpc_list_walk {
	struct rpc_job *j;
};

/* Packs the job's batch as a List frame after the job's other frames. */
static int rpc_list_frame(struct rpc_job *j, bool done)
{
	struct conn_out *o = calloc(1, sizeof(*o));

	if (o == NULL)
		return -ENOMEM;
	if (wire_batch_frame(&j->batch, RPC_ENV_LIST, RPC_LIST_DONE, done,
			     &o->data, &o->len) < 0) {
		free(o);
		return -ENOMEM;
	}
	*j->ftail = o;
	j->ftail = &o->next;
	return 0;
}

/* On the pool (DESIGN 8): a process into the job's frames. */
static int rpc_list_cb(void *arg, const struct store_process *p)
{
	struct rpc_list_walk *w = arg;
	struct wire_batch *b = &w->j->batch;
	Npusan__Process m;
	int err;

	rpc_process_msg(p, &m);
	err = wire_batch_add(b, RPC_LIST_PROCESSES, &m.base);
	if (err == -E2BIG && b->n > 0) {
		if ((err = rpc_list_frame(w->j, false)) < 0)
			return err;
		err = wire_batch_add(b, RPC_LIST_PROCESSES, &m.base);
	}
	if (err == -E2BIG) {
		log_warn("process %" PRId64 " does not fit a frame; left out",
			 p->id);
		return 0;
	}
	if (err < 0)
		return err;
	if (b->len >= RPC_FRAME_TARGET)
		return rpc_list_frame(w->j, false);
	return 0;
}

/* Ends c's list answer, if any. */
void rpc__list_done(struct conn *c)
{
	if (c->lcur == NULL)
		return;
	free(c->lcur->ids);
	free(c->lcur);
	c->lcur = NULL;
}

/* The error reply of a list job that failed. */
static void rpc_list_failed(struct conn *c, int err)
{
	if (err == -E2BIG)
		conn__error(c, E2BIG,
			    "too many processes: filter by job or pid", false);
	else
		conn__error(c, err == -ENOMEM ? ENOMEM : EIO,
			    err == -ENOMEM ? "out of memory" : "database error",
			    false);
}

/*
 * On the pool: one page of c's list answer (DESIGN 3), the processes
 * lcur->ids[next, next + n), as frames, the last of the answer with done.
 * The ids are the connection's, which nothing frees while a job runs.
 */
static void rpc_list_page_work(struct rpc_job *j)
{
	struct rpc_list_walk w = { .j = j };

	j->err = store_list_get(j->store, j->u.page.ids, j->u.page.n,
				rpc_list_cb, &w);
	if (j->err == 0 && (j->batch.n > 0 || j->u.page.done))
		j->err = rpc_list_frame(j, j->u.page.done);
}

/* On the loop: the page's frames out, then the next page, if any. */
static void rpc_list_page_reply(struct rpc_job *j)
{
	struct conn *c = j->c;

	if (j->err < 0) {
		rpc__list_done(c);
		rpc_list_failed(c, j->err);
		return;
	}
	while (j->frames != NULL && !c->dead) {
		struct conn_out *o = j->frames;

		j->frames = o->next;
		conn__send(c, o->data, o->len); /* takes the data */
		free(o);
	}
	if (c->dead)
		return;
	c->lcur->next += j->u.page.n;
	if (j->u.page.done)
		rpc__list_done(c);
	rpc__pump(c);
}

/* Starts the next page of c's list answer (rpc__pump()). */
static void rpc_list_page(struct conn *c)
{
	struct rpc_list_cursor *lc = c->lcur;
	struct rpc_job *j =
		rpc_job_new(c, rpc_list_page_work, rpc_list_page_reply);
	size_t k = lc->n - lc->next < RPC_LIST_PAGE ? lc->n - lc->next :
							  RPC_LIST_PAGE;

	if (j == NULL)
		return;
	j->u.page.ids = lc->ids + lc->next;
	j->u.page.n = k;
	j->u.page.done = lc->next + k == lc->n;
	rpc_job_start(c, j);
}

/*
 * On the pool: the ids of the processes the answer will hold. Everything
 * queued before the request is committed first, so that a process whose
 * registration still waits in the store's queue is listed: `run` and
 * `report` decide from the list whether every process of a job is in,
 * and one missing would make the job look blind or clean. A store that
 * cannot commit now (-EIO) answers with what it has.
 */
static void rpc_list_ids_work(struct rpc_job *j)
{
	int64_t *ids = NULL;

	(void)store_flush(j->store);

	j->err = store_list_ids(j->store, &j->u.list.f, RPC_LIST_MAX_PROCS,
				&ids, &j->u.list.n);
	j->owned = ids;
}

/* On the loop: the ids become c's list answer, walked page by page. */
static void rpc_list_ids_reply(struct rpc_job *j)
{
	struct conn *c = j->c;
	struct rpc_list_cursor *lc;

	if (j->err < 0) {
		rpc_list_failed(c, j->err);
		return;
	}
	if ((lc = calloc(1, sizeof(*lc))) == NULL) {
		conn__error(c, ENOMEM, "out of memory", false);
		return;
	}
	lc->ids = j->owned;
	lc->n = j->u.list.n;
	j->owned = NULL; /* c's now */
	c->lcur = lc;
	rpc__pump(c);
}

static void rpc_list(struct conn *c, const Npusan__ListRequest *r)
{
	struct rpc_job *j =
		rpc_job_new(c, rpc_list_ids_work, rpc_list_ids_reply);

	if (j == NULL)
		return;
	wire_list_filter(r, &j->u.list.strs, &j->u.list.f);
	rpc_restrict(c, &j->u.list.f);
	rpc_job_start(c, j);
}

struct rpc_findings_walk {
	struct rpc_cursor *cur;
	struct wire_batch b;
	unsigned skipped;
};

/* Stops a walk whose batch is full; not an error. */
#define RPC_WALK_FULL (-ECANCELED)

static int rpc_findings_cb(void *arg, const struct store_finding *f,
			   const struct store_process *p)
{
	struct rpc_findings_walk *w = arg;
	int64_t id = (int64_t)f->v.id;
	struct rpc_finding r;
	int err;

	(void)p; /* f->v holds the process's identity */
	rpc_finding_msg(f, &r);
	err = wire_batch_add(&w->b, RPC_FINDINGS_ITEMS, &r.m.base);
	if (err == -E2BIG && w->b.n > 0)
		return RPC_WALK_FULL; /* this one starts the next frame */
	if (err == -E2BIG) {
		w->skipped++;
		log_warn("finding %" PRId64 " does not fit a frame; left out",
			 id);
	} else if (err < 0) {
		return err;
	}
	w->cur->after_id = id;
	if (w->cur->limited && w->cur->left > 0)
		w->cur->left--;
	if (w->b.len >= RPC_FRAME_TARGET)
		return RPC_WALK_FULL;
	if (w->cur->limited && w->cur->left == 0)
		return RPC_WALK_FULL;
	return 0;
}

/*
 * One walk of the cursor, on the pool (DESIGN 8): a frame of findings
 * after cur->after_id, into the job's copy of the cursor.
 */
static void rpc_walk_work(struct rpc_job *j)
{
	struct rpc_cursor *cur = &j->u.walk;
	struct rpc_findings_walk w = { .cur = cur };
	struct store_filter f = cur->f;

	f.after_id = cur->after_id;
	f.limit = cur->following || !cur->limited ? 0 : cur->left;
	if (!cur->following && cur->limited && cur->left == 0)
		j->err = 0; /* the limit is reached: nothing more to send */
	else
		j->err = store_findings(j->store, &f, rpc_findings_cb, &w);
	j->batch = w.b;
}

/*
 * The walk's frame, on the loop: for the first answer each frame goes
 * out, the last with done; a follow walk sends only frames with findings
 * in them. Then the next walk, if there is one to make now. The cursor
 * is the connection's still: nothing frees it while a job runs.
 */
static void rpc_walk_reply(struct rpc_job *j)
{
	struct conn *c = j->c;
	struct rpc_cursor *cur = c->cur;
	struct wire_batch *b = &j->batch;
	bool complete;
	int err = j->err;

	cur->after_id = j->u.walk.after_id;
	cur->left = j->u.walk.left;
	complete = err == 0 || (err == RPC_WALK_FULL && !cur->following &&
				cur->limited && cur->left == 0);
	if (err < 0 && err != RPC_WALK_FULL) {
		free(c->cur);
		c->cur = NULL;
		conn__error(c, err == -ENOMEM ? ENOMEM : EIO,
			    err == -ENOMEM ? "out of memory" : "database error",
			    false);
		return;
	}
	/* A follower's walk that found nothing sends nothing. */
	if (!(cur->following && b->n == 0) &&
	    !rpc_send_batch(c, b, RPC_ENV_FINDINGS, RPC_FINDINGS_DONE,
			    complete))
		return;
	if (complete && !cur->following && !cur->follow) {
		free(c->cur);
		c->cur = NULL;
		return;
	}
	/* `pending` stays as commits since the walk started left it. */
	if (complete)
		cur->following = true;
	rpc__pump(c);
}

/* Whether the cursor has findings, or a list answer processes, to walk
 * now. */
bool rpc__walking(const struct conn *c)
{
	return c->lcur != NULL ||
	       (c->cur != NULL && (!c->cur->following || c->cur->pending));
}

/*
 * Starts the cursor's next walk while the output queue has room (DESIGN
 * 3), one walk at a time: the next starts when its reply is sent, or
 * once the output drains (the poll callback pumps again).
 */
void rpc__pump(struct conn *c)
{
	struct rpc_job *j;

	if (c->dead || c->closing || c->job != NULL ||
	    c->out_bytes >= SERVER_OUT_HIGH || !rpc__walking(c))
		return;
	if (c->lcur != NULL) {
		rpc_list_page(c);
		return;
	}
	j = rpc_job_new(c, rpc_walk_work, rpc_walk_reply);
	if (j == NULL)
		return;
	j->u.walk = *c->cur;
	c->cur->pending = false; /* a commit from now on walks again */
	rpc_job_start(c, j);
}

static void rpc_findings(struct conn *c, const Npusan__FindingsRequest *r)
{
	struct rpc_cursor *cur = calloc(1, sizeof(*cur));
	const char *why;

	if (cur == NULL) {
		conn__error(c, ENOMEM, "out of memory", true);
		return;
	}
	if (wire_findings_filter(r, &cur->strs, &cur->f, &why) < 0) {
		free(cur);
		conn__error(c, EINVAL, why, false);
		return;
	}
	rpc_restrict(c, &cur->f);
	cur->limited = cur->f.limit > 0;
	cur->left = cur->f.limit;
	cur->follow = r->has_follow && r->follow;
	c->cur = cur;
	rpc__pump(c);
}

/* ---- show and stats ---------------------------------------------------- */

/* Packs finding `f` of process `p` as a Show reply into the job. */
static int rpc_show_cb(void *arg, const struct store_finding *f,
		       const struct store_process *p)
{
	struct rpc_job *j = arg;
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ShowReply sr = NPUSAN__SHOW_REPLY__INIT;
	struct rpc_finding r;
	Npusan__Process pm;

	if (j->frame != NULL)
		return 0;
	rpc_finding_msg(f, &r);
	sr.finding = &r.m;
	if (p != NULL) {
		rpc_process_msg(p, &pm);
		sr.process = &pm;
	}
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_SHOW;
	m.show = &sr;
	return wire_pack(&m, &j->frame, &j->len);
}

static void rpc_show_work(struct rpc_job *j)
{
	j->err = store_finding_get(j->store, j->u.show.id, &j->u.show.f,
				   rpc_show_cb, j);
}

static void rpc_show_reply(struct rpc_job *j)
{
	char msg[64];

	if (j->err == -ENOENT || (j->err == 0 && j->frame == NULL)) {
		snprintf(msg, sizeof(msg), "no finding %" PRId64,
			 j->u.show.id);
		conn__error(j->c, ENOENT, msg, false);
		return;
	}
	rpc_job_send(j);
}

static void rpc_show(struct conn *c, const Npusan__ShowRequest *r)
{
	struct rpc_job *j;

	if (!r->has_id) {
		conn__error(c, EINVAL, "show needs a finding id", false);
		return;
	}
	j = rpc_job_new(c, rpc_show_work, rpc_show_reply);
	if (j == NULL)
		return;
	j->u.show.id = r->id;
	rpc_restrict(c, &j->u.show.f);
	rpc_job_start(c, j);
}

static void rpc_stats_work(struct rpc_job *j)
{
	j->err = store_stats(j->store, &j->u.stats);
}

/* The reply: the store's figures from the job, ingest's read now. */
static void rpc_stats_reply(struct rpc_job *j)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply sr = NPUSAN__STATS_REPLY__INIT;
	const struct store_stats *ss = &j->u.stats;
	struct server *srv = j->c->srv;
	struct ingest_stats is;

	if (j->err < 0) {
		rpc_job_send(j);
		return;
	}
	ingest_get_stats(srv->ingest, &is);
	sr.has_uptime_ms = sr.has_processes_running = 1;
	sr.uptime_ms = (int64_t)((uv_hrtime() - srv->start_ns) / 1000000);
	sr.processes_running = is.running;
	sr.has_processes_exited = sr.has_events = sr.has_events_per_s = 1;
	sr.processes_exited = ss->processes[STORE_EXITED];
	sr.events = is.events;
	sr.events_per_s = is.events_per_s;
	sr.has_lost = sr.has_findings = sr.has_db_bytes = 1;
	sr.lost = is.lost;
	sr.findings = ss->findings;
	sr.db_bytes = ss->db_bytes;
	sr.daemon_version = (char *)NPUSAN_VERSION;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &sr;
	conn__send_msg(j->c, &m);
}

static void rpc_stats(struct conn *c)
{
	struct rpc_job *j = rpc_job_new(c, rpc_stats_work, rpc_stats_reply);

	if (j != NULL)
		rpc_job_start(c, j);
}

/* ---- attach and detach ------------------------------------------------- */

/* Whether agent connection `a` is one `r` names, and `c`'s peer may see. */
static bool rpc_attach_matches(const struct conn *c, const struct conn *a,
			       const Npusan__AttachRequest *r, const char *job)
{
	bool named = job != NULL && strcmp(a->agent->job, job) == 0;

	for (size_t i = 0; i < r->n_pids && !named; i++)
		named = (pid_t)r->pids[i] == a->pid;
	return named && (c->uid == 0 || c->uid == a->uid);
}

/* Tells agent `a` to attach or detach; false when its connection closed. */
static bool rpc_attach_send(struct conn *a, bool attach)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__Control ctl = NPUSAN__CONTROL__INIT;

	ctl.has_attach = 1;
	ctl.attach = attach;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_CONTROL;
	m.control = &ctl;
	conn__send_msg(a, &m);
	if (a->dead)
		return false;
	a->agent->state = attach ? STORE_RUNNING : STORE_DORMANT;
	ingest_set_state(a->proc, a->agent->state);
	log_info("%s pid %d", attach ? "attached" : "detached", (int)a->pid);
	return true;
}

/* The reply's entry for agent `a`, borrowing its strings. */
static void rpc_attach_process_msg(const struct conn *a, Npusan__Process *m)
{
	npusan__process__init(m);
	/* No id while the store has not stored its row yet. */
	m->id = ingest_proc_id(a->proc);
	m->has_id = m->id != 0;
	m->has_pid = m->has_uid = 1;
	m->pid = (uint32_t)a->pid;
	m->uid = (uint32_t)a->uid;
	m->job = a->agent->job[0] ? (char *)a->agent->job : NULL;
	m->has_rank = a->agent->has_rank;
	m->rank = a->agent->rank;
	m->state = (char *)store_state_name(a->agent->state);
}

/* Which of the request's pids matched none of the `n` processes in `got`. */
static size_t rpc_attach_unknown(const Npusan__AttachRequest *r,
				 Npusan__Process *got, size_t n, uint32_t *out)
{
	size_t k = 0;

	for (size_t i = 0; i < r->n_pids; i++) {
		bool found = false;

		for (size_t j = 0; j < n && !found; j++)
			found = got[j].pid == r->pids[i];
		if (!found)
			out[k++] = r->pids[i];
	}
	return k;
}

static void rpc_attach(struct conn *c, const Npusan__AttachRequest *r)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__AttachReply ar = NPUSAN__ATTACH_REPLY__INIT;
	char jobbuf[WIRE_JOB_MAX + 1];
	const char *job = wire_clean(r->job, jobbuf, sizeof(jobbuf));
	size_t n = 0, cap = c->srv->nconns;
	Npusan__Process *procs = calloc(cap ? cap : 1, sizeof(*procs));
	Npusan__Process **ptrs = calloc(cap ? cap : 1, sizeof(*ptrs));
	uint32_t *unknown = calloc(r->n_pids ? r->n_pids : 1, sizeof(*unknown));
	bool attach = !(r->has_detach && r->detach);

	if (procs == NULL || ptrs == NULL || unknown == NULL) {
		conn__error(c, ENOMEM, "out of memory", false);
		goto out;
	}
	if (r->n_pids == 0 && job == NULL) {
		conn__error(c, EINVAL, "attach needs pids or a job", false);
		goto out;
	}
	for (struct conn *a = c->srv->conns; a != NULL && n < cap; a = a->next) {
		if (a->kind != CONN_AGENT || a->agent == NULL || a->dead ||
		    a->closing || !rpc_attach_matches(c, a, r, job))
			continue;
		if (!rpc_attach_send(a, attach))
			continue;
		rpc_attach_process_msg(a, &procs[n]);
		ptrs[n] = &procs[n];
		n++;
	}
	ar.n_processes = n;
	ar.processes = ptrs;
	ar.n_unknown_pids = rpc_attach_unknown(r, procs, n, unknown);
	ar.unknown_pids = unknown;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_ATTACH;
	m.attach = &ar;
	conn__send_msg(c, &m);
out:
	free(procs);
	free(ptrs);
	free(unknown);
}

void rpc__on_query(struct conn *c, const Npusan__Query *q)
{
	const char *why;

	if (c->kind == CONN_AGENT) {
		conn__error(c, EPROTO, "a query on an agent's connection",
			    true);
		return;
	}
	if (wire_query_check(q, &why) < 0) {
		conn__error(c, EPROTO, why, true);
		return;
	}
	if (c->kind == CONN_NEW && server__limit_refused(c, CONN_QUERY, -1))
		return;
	if (c->kind == CONN_NEW)
		server__set_kind(c, CONN_QUERY);
	switch (q->q_case) {
	case NPUSAN__QUERY__Q_LIST:
		rpc_list(c, q->list);
		break;
	case NPUSAN__QUERY__Q_FINDINGS:
		rpc_findings(c, q->findings);
		break;
	case NPUSAN__QUERY__Q_SHOW:
		rpc_show(c, q->show);
		break;
	case NPUSAN__QUERY__Q_ATTACH:
		rpc_attach(c, q->attach);
		break;
	default: /* wire_query_check() left only stats */
		rpc_stats(c);
		break;
	}
	if (!c->dead)
		c->since_ms = clock_mono_ms();
}


/* ---- the field numbers ------------------------------------------------- */

/* Whether message `d` has a field `name` numbered `id`. */
static bool rpc_field_is(const ProtobufCMessageDescriptor *d,
			 const char *name, unsigned id)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field_by_name(d, name);

	return f != NULL && f->id == id;
}

bool rpc__proto_matches(void)
{
	const ProtobufCMessageDescriptor *env =
		&npusan__from_daemon__descriptor;

	return rpc_field_is(env, "list", RPC_ENV_LIST) &&
	       rpc_field_is(env, "findings", RPC_ENV_FINDINGS) &&
	       rpc_field_is(&npusan__list_reply__descriptor, "processes",
			    RPC_LIST_PROCESSES) &&
	       rpc_field_is(&npusan__list_reply__descriptor, "done",
			    RPC_LIST_DONE) &&
	       rpc_field_is(&npusan__findings_reply__descriptor, "findings",
			    RPC_FINDINGS_ITEMS) &&
	       rpc_field_is(&npusan__findings_reply__descriptor, "done",
			    RPC_FINDINGS_DONE);
}
