/*
 * store_writer.c - the store's write queue and the writer thread that
 * commits it (store.c's DESIGN 1-3, 10 and 11): the callers' side copies
 * each write into an item and queues it, never waiting for the disk
 * unless it asked to (store_flush(), store_process_register(),
 * store_prune()); the writer takes a batch at a time, commits it through
 * store.c's statements, and settles the items.
 *
 * Ownership: a queued item is the queue's from store__enqueue_locked() on;
 * the writer frees it once its round committed (or store__writer_stop()
 * gives it up). Synchronous items live on their caller's stack; the
 * writer only sets their `done`, under `lock`, and never touches them
 * afterwards. Provisional ids (struct store_ref) live until forgotten and
 * settled (store__ref_sweep()), or until store__free().
 */
#include "store_int.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

/*
 * The batching rule: a round starts 50 ms after the first item of a batch
 * was queued, or as soon as STORE_BATCH_MAX (2000) items wait, whichever
 * comes first (or at once for a flush, a registration or a prune). 50 ms
 * keeps a finding's way to followers well under what a person notices,
 * while one commit then carries everything a busy daemon queued meanwhile
 * instead of costing a WAL append and lock round trip per finding; 2000
 * items bounds the work (and the time the write lock is held) when a
 * flood fills the queue faster than the timer runs.
 */
#define STORE_BATCH_MS 50
/* After a failed round, the next try waits this long, doubling. */
#define STORE_RETRY_MAX_MS 1000
/* store_close() tries this many rounds before it gives queued items up. */
#define STORE_CLOSE_TRIES 3
#define STORE_MS_PER_DAY INT64_C(86400000)

/* The next round is due `ms` from now, unless one starts earlier. */
static void store__due_in(struct store *s, unsigned ms)
{
	s->due_ns = clock_mono_ns() + (uint64_t)ms * 1000000u;
}

/* Waits for `wake` until the round that is due. Holds the lock. */
static void store__wait_due(struct store *s)
{
	struct timespec ts = {
		.tv_sec = (time_t)(s->due_ns / 1000000000u),
		.tv_nsec = (long)(s->due_ns % 1000000000u),
	};

	/* `wake` runs on CLOCK_MONOTONIC (store.c), as clock_mono_ns(). */
	pthread_cond_timedwait(&s->wake, &s->lock, &ts);
}

/* ---- the queue ---- */

static void store__item_free(struct store_item *it)
{
	if (it->bytes != 0) {
		free(it->logline);
		free(it);
	}
}

/* Appends `it` and wakes the writer when it has a reason to run. Holds
 * the lock. */
static void store__enqueue_locked(struct store *s, struct store_item *it,
				  bool urgent)
{
	it->next = NULL;
	it->seq = ++s->seq;
	*s->tail = it;
	s->tail = &it->next;
	if (it->type == STORE_ITEM_REGISTER)
		s->last_reg_seq = it->seq;
	if (s->nqueued++ == 0 && !s->failing)
		store__due_in(s, STORE_BATCH_MS);
	if (urgent)
		s->urgent = true;
	if (s->nqueued == 1 || s->nqueued == s->batch_max || urgent)
		pthread_cond_signal(&s->wake);
}

/* The provisional id `ref`'s entry, or NULL. Holds the lock. */
static struct store_ref *store__ref_find(const struct store *s, int64_t ref)
{
	uint64_t *v;

	if (ref >= 0)
		return NULL;
	v = u64map_get(&s->refs, (uint64_t)-ref);
	return v != NULL ? (struct store_ref *)(uintptr_t)*v : NULL;
}

/* Item `it`, just queued with process id `id`, is the latest of its
 * provisional id (DESIGN 10). Holds the lock. */
static void store__ref_touch(struct store *s, int64_t id,
			     const struct store_item *it)
{
	struct store_ref *r = store__ref_find(s, id);

	if (r != NULL)
		r->last_seq = it->seq;
}

/* Queues a finding within max_bytes (DESIGN 11); frees it when refused. */
static int store__enqueue_finding(struct store *s, struct store_item *it)
{
	pthread_mutex_lock(&s->lock);
	if (s->fbytes + it->bytes > s->max_bytes) {
		s->dropped += it->u.finding.v.count;
		if (!s->full_logged)
			store__log(s, LOG_ERROR,
				   "%zu bytes of findings wait for the "
				   "database; dropping new ones (counted, "
				   "their processes' operations counted lost) "
				   "until they are stored; analysis goes on",
				   s->fbytes);
		s->full_logged = true;
		pthread_mutex_unlock(&s->lock);
		free(it);
		return -ENOBUFS;
	}
	s->full_logged = false;
	s->fbytes += it->bytes;
	store__enqueue_locked(s, it, false);
	store__ref_touch(s, it->u.finding.process_id, it);
	/* Its process's next update goes after it (DESIGN 11). */
	u64map_del(&s->updates, (uint64_t)it->u.finding.process_id);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Queues a synchronous item and waits for its round: its rc. */
static int store__enqueue_sync(struct store *s, struct store_item *it)
{
	it->bytes = 0;
	it->done = false;
	it->rc = -EIO;
	pthread_mutex_lock(&s->lock);
	store__enqueue_locked(s, it, true);
	while (!it->done)
		pthread_cond_wait(&s->done, &s->lock);
	pthread_mutex_unlock(&s->lock);
	return it->rc;
}

/*
 * Merges update `it` into its process's update still waiting in the queue
 * with nothing of its process after it (DESIGN 11), unless a registration
 * was queued since (DESIGN 1). Whether it did; the caller frees `it` then.
 * Holds the lock.
 */
static bool store__update_merge(struct store *s, const struct store_item *it)
{
	uint64_t *v = u64map_get(&s->updates, (uint64_t)it->u.update.id);
	struct store_item *q;

	if (v == NULL)
		return false;
	q = (struct store_item *)(uintptr_t)*v;
	if (q->seq < s->last_reg_seq) {
		u64map_del(&s->updates, (uint64_t)it->u.update.id);
		return false;
	}
	/* As the UPDATE would have done in turn: last_ms never goes back. */
	if (q->u.update.last_ms > it->u.update.last_ms) {
		int64_t last = q->u.update.last_ms;

		q->u.update = it->u.update;
		q->u.update.last_ms = last;
	} else {
		q->u.update = it->u.update;
	}
	return true;
}

int store_process_update(struct store *s, int64_t id,
			 const struct store_counters *c, int64_t last_ms,
			 enum store_state st)
{
	struct store_item *it;

	if (store_state_name(st) == NULL)
		return -EINVAL;
	it = calloc(1, sizeof(*it));
	if (it == NULL)
		return -ENOMEM;
	it->type = STORE_ITEM_UPDATE;
	it->bytes = sizeof(*it);
	it->u.update.id = id;
	it->u.update.c = *c;
	it->u.update.last_ms = last_ms;
	it->u.update.st = st;
	pthread_mutex_lock(&s->lock);
	if (!store__update_merge(s, it)) {
		store__enqueue_locked(s, it, false);
		store__ref_touch(s, id, it);
		/* Without memory the next update is queued on its own. */
		u64map_put(&s->updates, (uint64_t)id, (uint64_t)(uintptr_t)it);
		it = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	free(it);
	return 0;
}

static size_t store__stack_bytes(const char *const *frames, size_t n)
{
	size_t len = n * sizeof(char *);

	for (size_t i = 0; i < n; i++)
		len += strlen(frames[i] ? frames[i] : "") + 1;
	return len;
}

/* Copies a string into the item's tail at *cur. */
static const char *store__copy_str(char **cur, const char *src)
{
	char *dst = *cur;
	size_t len;

	if (src == NULL)
		return NULL;
	len = strlen(src) + 1;
	memcpy(dst, src, len);
	*cur += len;
	return dst;
}

/* Copies a stack: its pointer array at *parr, its texts at *cur. */
static const char *const *store__copy_stack(char ***parr, char **cur,
					    const char *const *frames, size_t n)
{
	char **arr = *parr;

	for (size_t i = 0; i < n; i++)
		arr[i] = (char *)store__copy_str(cur,
						 frames[i] ? frames[i] : "");
	*parr += n;
	return (const char *const *)arr;
}

/* The bytes of a finding's item: the item, then v's stacks and texts. */
static size_t store__finding_bytes(const struct finding_view *v,
				   size_t anstack, size_t pnstack,
				   size_t fnstack)
{
	size_t len = sizeof(struct store_item);

	len += store__stack_bytes(v->alloc.stack.frames, anstack);
	len += store__stack_bytes(v->access.stack.frames, v->access.stack.n);
	len += store__stack_bytes(v->previous.stack.frames, pnstack);
	len += store__stack_bytes(v->free_stack.frames, fnstack);
	if (v->access.op != NULL)
		len += strlen(v->access.op) + 1;
	if (v->access.arg != NULL)
		len += strlen(v->access.arg) + 1;
	if (v->has_previous && v->previous.op != NULL)
		len += strlen(v->previous.op) + 1;
	if (v->suppressed != NULL)
		len += strlen(v->suppressed) + 1;
	if (v->has_previous && v->previous.arg != NULL)
		len += strlen(v->previous.arg) + 1;
	return len;
}

/* Copies `a`'s op, argument and stack (n frames) into the item's tail. */
static void store__copy_access(char ***parr, char **cur,
			       struct finding_view_access *a, size_t n)
{
	a->op = store__copy_str(cur, a->op);
	a->arg = store__copy_str(cur, a->arg);
	a->stack.frames = store__copy_stack(parr, cur, a->stack.frames, n);
	a->stack.n = n;
}

int store_finding_submit(struct store *s, const struct store_finding *f)
{
	const struct finding_view *v = &f->v;
	struct finding_view *c;
	struct store_item *it;
	size_t anstack = v->has_alloc ? v->alloc.stack.n : 0;
	size_t pnstack = v->has_previous ? v->previous.stack.n : 0;
	size_t fnstack = v->has_free ? v->free_stack.n : 0;
	enum finding_kind kind;
	enum detected_at at;
	size_t len;
	char **arr, *cur;

	if (!finding_kind_of(v->kind, &kind) || !detected_at_of(v->detected_at,
								&at))
		return -EINVAL;
	len = store__finding_bytes(v, anstack, pnstack, fnstack);
	it = malloc(len);
	if (it == NULL)
		return -ENOMEM;
	memset(it, 0, sizeof(*it));
	it->type = STORE_ITEM_FINDING;
	it->bytes = len;
	it->u.finding = *f;
	c = &it->u.finding.v;
	/* The names are engine.h's own, which outlive the item; the
	 * process is the store's to know. */
	c->kind = finding_kind_name(kind);
	c->detected_at = detected_at_name(at);
	c->has_pid = c->has_rank = false;
	c->job = NULL;
	/* Pointer arrays first (aligned after the item), then texts. */
	arr = (char **)(it + 1);
	cur = (char *)(arr + anstack + v->access.stack.n + pnstack + fnstack);
	c->alloc.stack.frames = store__copy_stack(&arr, &cur,
						  v->alloc.stack.frames,
						  anstack);
	c->alloc.stack.n = anstack;
	store__copy_access(&arr, &cur, &c->access, v->access.stack.n);
	if (v->has_previous)
		store__copy_access(&arr, &cur, &c->previous, pnstack);
	else
		memset(&c->previous, 0, sizeof(c->previous));
	c->suppressed = store__copy_str(&cur, v->suppressed);
	c->free_stack.frames = store__copy_stack(&arr, &cur,
						 v->free_stack.frames, fnstack);
	c->free_stack.n = fnstack;
	return store__enqueue_finding(s, it);
}

int store_process_register(struct store *s, const struct store_process *p,
			   int64_t *id, struct store_counters *was)
{
	struct store_item it = { .type = STORE_ITEM_REGISTER, .u.reg.p = p };
	int rc;

	if (p->state != STORE_RUNNING && p->state != STORE_DORMANT)
		return -EINVAL;
	rc = store__enqueue_sync(s, &it);
	/* No row back: the process is stored under another uid. */
	if (rc == 0 && it.result == 0)
		return -EPERM;
	if (rc == 0) {
		*id = it.result;
		if (was != NULL)
			*was = it.u.reg.was;
	}
	return rc;
}

static size_t store__str_bytes(const char *str)
{
	return str != NULL ? strlen(str) + 1 : 0;
}

/* A new provisional id for a registration queued as `it`. Holds the lock. */
static int store__ref_new(struct store *s, struct store_item *it)
{
	struct store_ref *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return -ENOMEM;
	r->ref = -++s->last_ref;
	if (u64map_put(&s->refs, (uint64_t)-r->ref, (uint64_t)(uintptr_t)r) <
	    0) {
		free(r);
		return -ENOMEM;
	}
	r->next = s->ref_list;
	if (r->next != NULL)
		r->next->prev = r;
	s->ref_list = r;
	it->u.reg.ref = r->ref;
	return 0;
}

int store_process_register_async(struct store *s,
				 const struct store_process *p, int64_t *ref)
{
	size_t len = sizeof(struct store_item) + store__str_bytes(p->host) +
		     store__str_bytes(p->exe) + store__str_bytes(p->job) +
		     store__str_bytes(p->run);
	struct store_item *it;
	char *cur;
	int err = 0;

	if (p->state != STORE_RUNNING && p->state != STORE_DORMANT)
		return -EINVAL;
	it = calloc(1, len);
	if (it == NULL)
		return -ENOMEM;
	it->type = STORE_ITEM_REGISTER;
	it->bytes = len;
	it->u.reg.copy = *p;
	cur = (char *)(it + 1);
	it->u.reg.copy.host = store__copy_str(&cur, p->host);
	it->u.reg.copy.exe = store__copy_str(&cur, p->exe);
	it->u.reg.copy.job = store__copy_str(&cur, p->job);
	it->u.reg.copy.run = store__copy_str(&cur, p->run);
	it->u.reg.p = &it->u.reg.copy;
	pthread_mutex_lock(&s->lock);
	if (ref != NULL)
		err = store__ref_new(s, it);
	if (err == 0) {
		/* At once, unless rounds are failing: then with the next try,
		 * which is the back-off's to time (DESIGN 2). */
		store__enqueue_locked(s, it, !s->failing);
		store__ref_touch(s, it->u.reg.ref, it);
		if (ref != NULL)
			*ref = it->u.reg.ref;
		it = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	free(it);
	return err;
}

int store_process_registered(struct store *s, int64_t ref, int64_t *id,
			     struct store_counters *was)
{
	struct store_ref *r;
	int rc = -ENOENT;

	pthread_mutex_lock(&s->lock);
	r = store__ref_find(s, ref);
	if (r != NULL && r->stored) {
		*id = r->id;
		if (was != NULL)
			*was = r->was;
		rc = 1;
	} else if (r != NULL) {
		rc = r->rejected ? -EIO : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Frees forgotten refs whose writes are all settled (DESIGN 10). Holds
 * the lock. */
static void store__ref_sweep(struct store *s)
{
	struct store_ref *r = s->ref_list, *next;

	for (; r != NULL && s->nforgotten > 0; r = next) {
		next = r->next;
		if (!r->forgotten || r->last_seq > s->committed_seq)
			continue;
		if (r->prev != NULL)
			r->prev->next = r->next;
		else
			s->ref_list = r->next;
		if (r->next != NULL)
			r->next->prev = r->prev;
		u64map_del(&s->refs, (uint64_t)-r->ref);
		s->nforgotten--;
		free(r);
	}
}

void store_process_forget(struct store *s, int64_t ref)
{
	struct store_ref *r;

	if (ref >= 0)
		return;
	pthread_mutex_lock(&s->lock);
	r = store__ref_find(s, ref);
	if (r != NULL && !r->forgotten) {
		r->forgotten = true;
		s->nforgotten++;
		store__ref_sweep(s);
	}
	pthread_mutex_unlock(&s->lock);
}

void store_get_health(struct store *s, struct store_health *out)
{
	pthread_mutex_lock(&s->lock);
	out->failing = s->failing;
	out->queued = s->nqueued + s->ntaken;
	out->findings_dropped = s->dropped;
	pthread_mutex_unlock(&s->lock);
}

/* Where a prune at `now_ms` cuts: processes idle since before it go. */
static int64_t store__prune_before(const struct store *s, int64_t now_ms)
{
	return now_ms - (int64_t)s->retain_days * STORE_MS_PER_DAY;
}

int store_prune(struct store *s, int64_t now_ms)
{
	struct store_item it = { .type = STORE_ITEM_PRUNE };
	int rc;

	if (s->retain_days == 0)
		return 0;
	it.u.prune_before_ms = store__prune_before(s, now_ms);
	rc = store__enqueue_sync(s, &it);
	return rc < 0 ? rc : (int)it.result;
}

int store_prune_async(struct store *s, int64_t now_ms)
{
	struct store_item *it;

	if (s->retain_days == 0)
		return 0;
	it = calloc(1, sizeof(*it));
	if (it == NULL)
		return -ENOMEM;
	it->type = STORE_ITEM_PRUNE;
	it->bytes = sizeof(*it);
	it->u.prune_before_ms = store__prune_before(s, now_ms);
	pthread_mutex_lock(&s->lock);
	store__enqueue_locked(s, it, false);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int store_flush(struct store *s)
{
	uint64_t target, start;
	int rc;

	pthread_mutex_lock(&s->lock);
	target = s->seq;
	start = s->rounds;
	if (s->committed_seq < target) {
		s->urgent = true;
		pthread_cond_signal(&s->wake);
	}
	/* Done when everything up to target is stored, failed when a round
	 * that started after this call (so held all of it) failed. */
	while (s->committed_seq < target && s->failed_round <= start)
		pthread_cond_wait(&s->done, &s->lock);
	rc = s->committed_seq >= target ? 0 : -EIO;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* ---- the writer ---- */

/* Errors SQLite raises for one item itself, whatever the state of the
 * disk: retrying the item cannot help (DESIGN 2). */
static bool store__item_error(int rc)
{
	return rc == SQLITE_CONSTRAINT || rc == SQLITE_MISMATCH ||
	       rc == SQLITE_TOOBIG || rc == SQLITE_RANGE;
}

/* The store's id for process id `id`: itself, or the one a provisional
 * id's registration got (DESIGN 10); 0 when it got none. */
static int64_t store__w_resolve(struct store *s, int64_t id)
{
	const struct store_ref *r;
	int64_t out;

	if (id >= 0)
		return id;
	pthread_mutex_lock(&s->lock);
	r = store__ref_find(s, id);
	out = r != NULL ? r->id : 0;
	pthread_mutex_unlock(&s->lock);
	return out;
}

/* A provisional id's registration ran in this round (DESIGN 10). */
static void store__w_registered(struct store *s, const struct store_item *it)
{
	struct store_ref *r;

	pthread_mutex_lock(&s->lock);
	r = store__ref_find(s, it->u.reg.ref);
	if (r != NULL) {
		r->id = it->result;
		r->was = it->u.reg.was;
	}
	pthread_mutex_unlock(&s->lock);
}

static int store__w_item(struct store *s, struct store_item *it, bool *wrote)
{
	struct store_finding f;
	int64_t id;
	int rc = SQLITE_OK;

	switch (it->type) {
	case STORE_ITEM_UPDATE:
		id = store__w_resolve(s, it->u.update.id);
		rc = id != 0 ? store__w_update(s, it, id) : SQLITE_CONSTRAINT;
		break;
	case STORE_ITEM_FINDING:
		f = it->u.finding;
		f.process_id = store__w_resolve(s, f.process_id);
		rc = f.process_id != 0 ? store__w_finding(s, &f, &it->logline)
				       : SQLITE_CONSTRAINT;
		break;
	case STORE_ITEM_REGISTER:
		rc = store__w_register(s, it->u.reg.p, &it->result,
				       &it->u.reg.was);
		if (rc == SQLITE_OK && it->u.reg.ref != 0)
			store__w_registered(s, it);
		break;
	case STORE_ITEM_PRUNE:
		rc = store__w_prune(s, it->u.prune_before_ms, &it->result);
		break;
	}
	if (rc == SQLITE_OK) {
		*wrote = *wrote || it->type != STORE_ITEM_PRUNE ||
			 it->result > 0;
		it->rc = 0;
	}
	return rc;
}

/*
 * Commits `batch` in one transaction: SQLITE_OK, or the code that failed
 * the whole round (nothing stored, DESIGN 2). Items SQLite rejects alone
 * are marked with it->rc = -EIO and skipped.
 */
static int store__w_commit(struct store *s, struct store_item *batch,
			   bool *wrote)
{
	int rc;

	*wrote = false;
	rc = sqlite3_exec(s->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return rc;
	for (struct store_item *it = batch; it != NULL; it = it->next) {
		it->rc = -EIO;
		rc = store__w_item(s, it, wrote);
		if (rc == SQLITE_OK)
			continue;
		if (!store__item_error(rc))
			goto fail;
		store__log(s, LOG_WARN,
			   "dropped a write the database rejects: %s",
			   sqlite3_errmsg(s->wdb));
	}
	rc = sqlite3_exec(s->wdb, "COMMIT", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		return SQLITE_OK;
fail:
	store__log(s, LOG_DEBUG, "commit failed, %s: %s", sqlite3_errstr(rc),
		   sqlite3_errmsg(s->wdb));
	store__cache_clear(s); /* DESIGN 7 */
	/* SQLite may have rolled back itself (SQLITE_FULL can). */
	if (!sqlite3_get_autocommit(s->wdb))
		sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
	return rc == SQLITE_OK ? SQLITE_ERROR : rc;
}

static void store__w_set_max_pages(struct store *s, unsigned pages)
{
	char sql[64];

	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %u", pages);
	sqlite3_exec(s->wdb, sql, NULL, NULL, NULL);
}

/*
 * Takes the first batch_max items off the queue (DESIGN 2): an update
 * taken can no longer be merged into. Holds the lock. The batch.
 */
static struct store_item *store__w_take(struct store *s, size_t *taken)
{
	struct store_item *batch = s->head, *last = NULL;
	size_t n = 0;

	for (struct store_item *it = batch; it != NULL && n < s->batch_max;
	     it = it->next, n++) {
		uint64_t *v;

		last = it;
		if (it->type != STORE_ITEM_UPDATE)
			continue;
		v = u64map_get(&s->updates, (uint64_t)it->u.update.id);
		if (v != NULL && *v == (uint64_t)(uintptr_t)it)
			u64map_del(&s->updates, (uint64_t)it->u.update.id);
	}
	assert(last != NULL);
	s->taken_seq = last->seq;
	s->head = last->next;
	if (s->head == NULL)
		s->tail = &s->head;
	last->next = NULL;
	s->nqueued -= n;
	s->ntaken = n;
	*taken = n;
	return batch;
}

/* After a round: rounds grow back to full size as commits work, shrink
 * while they fail, so that a disk with a little room takes what fits; a
 * failed round's retry waits, doubling (DESIGN 2). Holds the lock. */
static void store__w_pace(struct store *s, bool ok, size_t taken,
			  unsigned fails)
{
	s->failing = !ok;
	if (ok) {
		s->batch_max = s->batch_max * 2 > STORE_BATCH_MAX
				       ? STORE_BATCH_MAX
				       : s->batch_max * 2;
		return;
	}
	s->batch_max = taken > 1 ? (unsigned)(taken / 2) : 1;
	store__due_in(s, fails >= 5 ? STORE_RETRY_MAX_MS
				    : STORE_BATCH_MS << (fails - 1));
}

/*
 * A round failed: the synchronous items still queued behind it fail too,
 * as they would have in a round that took the whole queue, rather than
 * wait for the disk (DESIGN 2). Holds the lock.
 */
static void store__w_fail_waiting(struct store *s)
{
	struct store_item **link = &s->head, *it;

	while ((it = *link) != NULL) {
		if (it->bytes != 0) {
			link = &it->next;
			continue;
		}
		*link = it->next;
		s->nqueued--;
		it->rc = -EIO;
		it->done = true;
	}
	s->tail = link;
}

/* A round's batch and what became of it. */
struct store_round {
	struct store_item *batch; /* what it took; then what is left to
				     settle under the lock */
	struct store_item *keep, **ktail; /* to retry, after a failure */
	size_t taken, kept;
	size_t ffreed; /* findings' bytes freed */
	uint64_t round;
	int rc; /* the commit's SQLite code */
	bool wrote;
};

/* A queued item of round `r`, done with: its log lines once stored (a
 * retried round formats them again), then freed, or kept for the retry. */
static void store__w_round_release(struct store *s, struct store_round *r,
				   struct store_item *it)
{
	bool ok = r->rc == SQLITE_OK;

	if (it->logline != NULL && ok && it->rc == 0)
		log_write(LOG_INFO, "%s", it->logline);
	if (it->type == STORE_ITEM_PRUNE && ok && it->result > 0)
		store__log(s, LOG_INFO,
			   "pruned %" PRId64 " processes inactive for %u days",
			   it->result, s->retain_days);
	free(it->logline);
	it->logline = NULL;
	if (!ok) {
		*r->ktail = it;
		r->ktail = &it->next;
		r->kept++;
		return;
	}
	r->ffreed += it->type == STORE_ITEM_FINDING ? it->bytes : 0;
	free(it);
}

/* Settles outside the lock what needs no lock; leaves in r->batch the
 * synchronous items and the stored registrations (their refs). */
static void store__w_round_unlocked(struct store *s, struct store_round *r)
{
	struct store_item *next, **prev = &r->batch;

	for (struct store_item *it = r->batch; it != NULL; it = next) {
		next = it->next;
		if (it->bytes == 0 ||
		    (r->rc == SQLITE_OK && it->type == STORE_ITEM_REGISTER)) {
			prev = &it->next;
			continue;
		}
		*prev = next;
		store__w_round_release(s, r, it);
	}
	*r->ktail = NULL;
}

/* Settles what store__w_round_unlocked() left. Holds the lock. */
static void store__w_round_locked(struct store *s, struct store_round *r)
{
	struct store_item *next;

	for (struct store_item *it = r->batch; it != NULL; it = next) {
		next = it->next;
		if (r->rc != SQLITE_OK)
			it->rc = -EIO;
		if (it->bytes != 0) { /* a queued registration, stored */
			struct store_ref *ref = store__ref_find(s,
								it->u.reg.ref);

			if (ref != NULL) {
				ref->stored = it->rc == 0;
				ref->rejected = it->rc != 0;
			}
			free(it);
			continue;
		}
		it->done = true; /* its caller may now return: DESIGN 1 */
	}
	s->fbytes -= r->ffreed;
	s->ntaken = 0;
}

/* The round committed. Holds the lock. */
static void store__w_round_ok(struct store *s)
{
	/* Every item taken so far is stored now, or was a synchronous one
	 * that failed with its round. */
	s->committed_seq = s->taken_seq;
	store__ref_sweep(s);
	/* One line when all that waited is in, not one per round while a
	 * disk with little room takes a batch at a time. */
	if (s->episode_fails > 0 && s->head == NULL) {
		store__log(s, LOG_WARN,
			   "commits work again after %u failed rounds; "
			   "everything waiting is stored; %" PRIu64
			   " finding occurrences were dropped since the start",
			   s->episode_fails, s->dropped);
		s->episode_fails = 0;
	}
}

/* The round failed: its items back in front, in order (DESIGN 2). Holds
 * the lock. */
static void store__w_round_failed(struct store *s, struct store_round *r)
{
	if (r->keep != NULL) {
		*r->ktail = s->head;
		if (s->head == NULL)
			s->tail = r->ktail;
		s->head = r->keep;
		s->nqueued += r->kept;
	}
	s->failed_round = r->round;
	store__w_fail_waiting(s);
	if (s->episode_fails++ == 0)
		store__log(s, LOG_ERROR,
			   "commit failed (%s): %zu writes wait in memory and "
			   "are retried, backing off up to %d ms; "
			   "registrations, analysis and queries go on",
			   sqlite3_errstr(r->rc), s->nqueued,
			   STORE_RETRY_MAX_MS);
}

/*
 * One round: takes a batch off the queue, commits it, settles its items.
 * Called and returns with the lock held. Returns whether the round
 * succeeded.
 */
static bool store__w_round(struct store *s, unsigned *fails)
{
	struct store_round r = { .round = ++s->rounds };
	unsigned pages = s->test_max_pages;

	r.batch = store__w_take(s, &r.taken);
	r.ktail = &r.keep;
	s->urgent = false;
	s->test_max_pages = 0;
	pthread_mutex_unlock(&s->lock);

	if (pages != 0)
		store__w_set_max_pages(s, pages);
	r.rc = store__w_commit(s, r.batch, &r.wrote);
	store__w_round_unlocked(s, &r);
	/*
	 * Before anyone waiting learns of the commit, so that a flush
	 * returns after the callback ran. Unlocked: the callback may queue
	 * writes (but must not wait for this thread: no store_flush(),
	 * register, prune or close).
	 */
	if (r.rc == SQLITE_OK && r.wrote && s->commit_cb != NULL)
		s->commit_cb(s->commit_arg);

	pthread_mutex_lock(&s->lock);
	store__w_round_locked(s, &r);
	store__w_pace(s, r.rc == SQLITE_OK, r.taken, *fails + 1);
	if (r.rc == SQLITE_OK) {
		store__w_round_ok(s);
		*fails = 0;
	} else {
		store__w_round_failed(s, &r);
		(*fails)++;
	}
	/* An empty queue is all settled, also items store__w_fail_waiting()
	 * took out of it (DESIGN 3). */
	if (s->head == NULL)
		s->committed_seq = s->seq;
	pthread_cond_broadcast(&s->done);
	return r.rc == SQLITE_OK;
}

static void *store__writer_main(void *arg)
{
	struct store *s = arg;
	unsigned fails = 0;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		/* A long queue starts a round at once, unless rounds fail:
		 * then only the back-off's time does (DESIGN 2). */
		while (!s->stop && !s->urgent &&
		       (s->failing || s->nqueued < s->batch_max) &&
		       (s->head == NULL || clock_mono_ns() < s->due_ns)) {
			if (s->head == NULL)
				pthread_cond_wait(&s->wake, &s->lock);
			else
				store__wait_due(s);
		}
		if (s->head == NULL) {
			s->urgent = false;
			if (s->stop)
				break;
			continue;
		}
		if (store__w_round(s, &fails) || !s->stop ||
		    fails < STORE_CLOSE_TRIES)
			continue;
		/* Closing, and the disk still refuses: say what is lost. */
		store__log(s, LOG_ERROR,
			   "closing: %zu queued writes could not be stored "
			   "and are lost", s->nqueued);
		while (s->head != NULL) {
			struct store_item *it = s->head;

			s->head = it->next;
			store__item_free(it);
		}
		s->tail = &s->head;
		s->nqueued = 0;
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int store__writer_start(struct store *s)
{
	sigset_t all, old;
	int rc;

	/* Signals stay with the daemon's loop thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->writer, NULL, store__writer_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return -ENOMEM;
	s->running = true;
	return 0;
}

void store__writer_stop(struct store *s)
{
	if (!s->running)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->writer, NULL);
	s->running = false;
}

/* A test hook: the next round sets PRAGMA max_page_count on the writer's
 * connection (0 leaves it), so that tests can fill the "disk". */
int store__max_pages(struct store *s, unsigned pages);
int store__max_pages(struct store *s, unsigned pages)
{
	pthread_mutex_lock(&s->lock);
	s->test_max_pages = pages;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

