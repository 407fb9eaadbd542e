/*
 * store_helpers.h - what test_store's files share: a store on a fresh
 * database, the processes and findings the tests store (a data race of
 * three stacks), the store's walks collected (struct seen, struct procs),
 * and SQL run on the file behind the store's back. Built into test_store
 * alone (store_helpers.c).
 *
 * Each test_store_*.c file adds its tests to the one TCase through its
 * store_*_add(), in the order test_store.c's suite calls them.
 */
#ifndef NPUSAN_TESTS_STORE_HELPERS_H
#define NPUSAN_TESTS_STORE_HELPERS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define DAY_MS INT64_C(86400000)
#define NOW_MS INT64_C(1700000000000)

/* The frames of race()'s stacks: its access, previous access, allocation. */
extern const char *const stack_a[2];
extern const char *const stack_b[3];
extern const char *const stack_c[1];

/* The findings a walk saw, each rendered to one line. */
struct seen {
	int64_t ids[256];
	struct store_finding f[256];
	uint32_t pids[256];
	char text[65536];
	size_t n, len;
	int stop_after; /* return -42 after this many; 0: never */
};

/* The processes a walk saw, their strings copied. */
struct procs {
	struct store_process p[64];
	char jobs[64][32];
	char runs[64][32];
	size_t n;
};

/* npusan.db in a fresh temporary directory (caller frees). */
char *db_path(void);

/* The store on `path`, keeping `retain_days` (0: the default). */
struct store *open_store(const char *path, unsigned retain_days);

/* A running process of `job` with `rank` (of 8), owned by `uid`. */
struct store_process proc(uint32_t pid, const char *job,
			  uint32_t rank, uint32_t uid);

/* Counters to update a process with; store_process_update() copies them. */
const struct store_counters *cnt(uint64_t events, uint64_t lost);

/* Registers `p`: its row id. */
int64_t reg(struct store *s, const struct store_process *p);

/* A data race of process `pid_id`: write on stream 1 against a read on 2. */
struct store_finding race(int64_t process_id);

/* store_findings()' callback: adds the finding to the struct seen in
 * `arg`, rendered to a line of its text. */
int seen_cb(void *arg, const struct store_finding *sf,
	    const struct store_process *p);

/* Every finding `f` selects, into a zeroed *v. */
void findings(struct store *s, const struct store_filter *f,
	      struct seen *v);

/* store_list()'s callback: adds the process to the struct procs in
 * `arg`. */
int procs_cb(void *arg, const struct store_process *p);

/* Every process `f` selects, into a zeroed *v. */
void list(struct store *s, const struct store_filter *f,
	  struct procs *v);

/* One integer from the database through SQLite itself. */
int64_t sql_int(const char *path, const char *sql);

/* Runs `sql` on the database at `path` through SQLite itself. */
void sql_exec(const char *path, const char *sql);

/* The tests of each test_store_*.c file, added to `tc`. */
void store_query_add(TCase *tc);
void store_schema_add(TCase *tc);
void store_durability_add(TCase *tc);
void store_blocked_add(TCase *tc);

#endif
