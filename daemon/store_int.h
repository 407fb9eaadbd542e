/*
 * store_int.h - what the parts of the store share, and nobody else sees:
 * the struct store, the items of its write queue, the limits they keep.
 * store.c opens, migrates and closes the database and holds the SQL of
 * the rows the writer writes; store_writer.c owns the queue and the
 * writer thread that commits it; store_query.c answers the reads. The
 * invariants they keep are store.c's DESIGN block.
 *
 * Ownership: the struct store and everything it points at are freed by
 * store__free() (store.c), after store__writer_stop() joined the writer.
 * Queued items belong to the queue until their round settles them
 * (store_writer.c frees them); synchronous items live on their caller's
 * stack.
 */
#ifndef NPUSAN_STORE_INT_H
#define NPUSAN_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "store.h"
#include "u64map.h"

/* The most items one round commits (DESIGN 2); store_writer.c explains
 * the number. */
#define STORE_BATCH_MAX 2000

/* DESIGN 7: a string ('S') or a stack ('K', frames joined by NULs). */
struct store_cache_slot {
	uint64_t hash;
	int64_t id;
	char *key;
	size_t len;
	char tag;
};

/* A write waiting for its round. */
enum store_item_type {
	STORE_ITEM_UPDATE,
	STORE_ITEM_FINDING,
	STORE_ITEM_REGISTER,
	STORE_ITEM_PRUNE,
};

/* A provisional process id (DESIGN 10), handed out by
 * store_process_register_async(); all under `lock`. */
struct store_ref {
	struct store_ref *prev, *next; /* every ref, for the sweep and close */
	int64_t ref;                   /* negative */
	int64_t id;       /* the store's, once its registration ran */
	struct store_counters was;
	bool stored;      /* its registration committed */
	bool rejected;    /* SQLite refused its registration (DESIGN 2) */
	bool forgotten;   /* store_process_forget() */
	uint64_t last_seq; /* the last item queued with it */
};

struct store_item {
	struct store_item *next;
	enum store_item_type type;
	uint64_t seq;
	size_t bytes; /* its size (a finding's counts in fbytes); 0 when
		       * synchronous */
	/* Synchronous items live on their caller's stack: set `done` under
	 * the lock, and never touch them afterwards. */
	bool done;
	int rc;
	int64_t result;
	/* A finding's log line (DESIGN 9), written once its round commits. */
	char *logline;
	union {
		struct {
			int64_t id;
			struct store_counters c;
			int64_t last_ms;
			enum store_state st;
		} update;
		struct store_finding finding; /* strings follow the item */
		struct {
			const struct store_process *p;
			struct store_counters was;
			/* Queued ones: p points at `copy`, its strings follow
			 * the item; `ref` 0 when nobody asked for one. */
			struct store_process copy;
			int64_t ref;
		} reg;
		int64_t prune_before_ms;
	} u;
};

struct store {
	char *path;
	char *wal_path;
	unsigned retain_days;
	void (*commit_cb)(void *arg);
	void *commit_arg;

	sqlite3 *wdb; /* the writer thread's (DESIGN 1) */
	sqlite3_stmt *w_str_get, *w_str_put, *w_stack_get, *w_stack_put;
	sqlite3_stmt *w_register, *w_update, *w_finding, *w_repeat;
	sqlite3_stmt *w_proc; /* a process's identity, for finding log lines */
	char *wbuf; /* a stack's JSON */
	size_t wbuf_cap;
	char *kbuf; /* a stack's cache key */
	size_t kbuf_cap;
	struct store_cache_slot *cache;

	pthread_mutex_t rlock; /* the read connection */
	sqlite3 *rdb;
	sqlite3_stmt *r_stack;

	pthread_mutex_t lock; /* everything below */
	pthread_cond_t wake;  /* the writer waits: items, flush, stop */
	pthread_cond_t done;  /* flushers and synchronous callers wait */
	struct store_item *head, **tail;
	size_t nqueued;         /* items in the queue */
	size_t ntaken;          /* items the round in progress took */
	uint64_t seq;           /* the last item's number (DESIGN 3) */
	uint64_t taken_seq;     /* the last item a round took */
	uint64_t committed_seq; /* DESIGN 3 */
	uint64_t rounds;        /* rounds started */
	uint64_t failed_round;  /* the latest round that failed */
	uint64_t due_ns; /* when the next round starts on its own
			    (clock_mono_ns()) */
	bool urgent, stop, running;
	bool full_logged; /* queue-full line logged, until there is room */
	bool failing;     /* the latest round failed: rounds wait for `due` */
	unsigned episode_fails; /* failed rounds since all was stored */
	size_t max_bytes; /* findings' bytes that may wait (DESIGN 11) */
	size_t fbytes;    /* findings' bytes queued or being committed */
	uint64_t dropped; /* finding occurrences refused (DESIGN 11) */
	unsigned batch_max; /* items a round takes (DESIGN 2) */
	struct u64map refs; /* -ref -> struct store_ref * (DESIGN 10) */
	struct store_ref *ref_list;
	int64_t last_ref;
	size_t nforgotten;
	struct u64map updates; /* process id -> its queued update item */
	uint64_t last_reg_seq; /* the latest registration queued */
	unsigned test_max_pages;
	pthread_t writer;
};

/* One line per event in the daemon's log, naming the database; the level
 * is checked before anything is formatted. */
__attribute__((format(printf, 3, 4))) void
store__log(const struct store *s, enum log_level level, const char *fmt, ...);

/* A 64-bit unsigned column, stored with the bits of an int64 (DESIGN 8). */
static inline uint64_t store__col_u64(sqlite3_stmt *st, int c)
{
	return (uint64_t)sqlite3_column_int64(st, c);
}

/*
 * The rows the writer writes (store.c), on the write connection, inside
 * the writer's transaction; each returns an SQLite code.
 * store__w_finding() puts a new row's log line in *line (caller frees).
 */
int store__w_register(struct store *s, const struct store_process *p,
		      int64_t *id, struct store_counters *was);
int store__w_update(struct store *s, const struct store_item *it, int64_t id);
int store__w_finding(struct store *s, const struct store_finding *f,
		     char **line);
int store__w_prune(struct store *s, int64_t before_ms, int64_t *deleted);
/* Forgets the ids DESIGN 7 remembers, when their rows may have gone. */
void store__cache_clear(struct store *s);

/*
 * Starts the writer thread (store_writer.c), with every signal blocked:
 * they stay with the daemon's loop thread. 0; -ENOMEM.
 */
int store__writer_start(struct store *s);
/* Stops it once what is queued is committed (or given up) and joins it. */
void store__writer_stop(struct store *s);

/* Frees `s` and all it owns; the writer must not be running. */
void store__free(struct store *s);

#endif
