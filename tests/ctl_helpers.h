/*
 * ctl_helpers.h - what test_ctl's files share: the fake npusand (struct
 * fq), a script of steps a thread plays to the one client it accepts; the
 * canned finding of docs/findings.md's example (struct cf) and its JSON
 * and trace; npusanctl run against it. Built into test_ctl alone
 * (ctl_helpers.c).
 *
 * Each test_ctl_*.c file adds its tests to the one TCase through its
 * ctl_*_add(), in the order test_ctl.c's suite calls them.
 */
#ifndef NPUSAN_TESTS_CTL_HELPERS_H
#define NPUSAN_TESTS_CTL_HELPERS_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "npusan.pb-c.h"

enum fq_act {
	FQ_SEND,  /* bytes as they are (a frame, or garbage) */
	FQ_SLEEP, /* ms */
	FQ_GO,    /* wait until the test calls fq_go() */
	FQ_CLOSE, /* close at once instead of waiting for the client */
	FQ_ACCEPT, /* close, and take the client's next connection's query */
};

struct fq_step {
	enum fq_act act;
	uint8_t *data;
	size_t len;
	int ms;
};

struct fq {
	char path[108];
	int lfd;
	int stop[2];
	int go[2];
	pthread_t th;
	struct fq_step steps[32];
	size_t nsteps;
	/* What the thread saw; read after fq_stop(). */
	unsigned nconn;
	Npusan__ToDaemon *got;
	bool peer_closed; /* the client closed its end */
};

#define T0_MS INT64_C(1714557600000) /* 2024-05-01T10:00:00.000Z */
#define T1_MS INT64_C(1714561205042) /* 2024-05-01T11:00:05.042Z */
#define T0 "2024-05-01T10:00:00.000Z"
#define T1 "2024-05-01T11:00:05.042Z"

/* A finding with its parts, all in one place. */
struct cf {
	Npusan__Finding f;
	Npusan__Alloc alloc;
	Npusan__Access access, previous;
	Npusan__Free free;
};

/* The stack of the example's allocation and previous access. */
extern char *spec_stack[2];

/* The JSON of the spec example as `analyze --json` prints it. */
#define SPEC_RACE_JSON                                                        \
	"{\"id\":1,\"kind\":\"data_race\",\"process\":{\"pid\":4242,"         \
	"\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\",\"alloc\":{"         \
	"\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,\"stack\":["           \
	"\"train.py:14 in step\",\"train.py:30 in main\"]},\"access\":{"      \
	"\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"                    \
	"\"aten::add.Tensor\",\"arg\":null,\"stack\":[],\"graph\":null},"      \
	"\"previous\":{\"stream\":0,\"seq\":1,\"type\":\"write\",\"op\":"     \
	"\"aten::randn\",\"arg\":null,\"stack\":[\"train.py:14 in step\","      \
	"\"train.py:30 in main\"],\"graph\":null},\"free\":null,"               \
	"\"detected_at\":\"launch\",\"count\":1"
#define SPEC_MRS_JSON SPEC_MRS_HEAD ",\"count\":1"
#define SPEC_MRS_HEAD                                                         \
	"{\"id\":2,\"kind\":\"missing_record_stream\",\"process\":{"          \
	"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\","       \
	"\"alloc\":{\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,"           \
	"\"stack\":[\"train.py:14 in step\",\"train.py:30 in main\"]},"       \
	"\"access\":{\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"        \
	"\"aten::add.Tensor\",\"arg\":null,\"stack\":[],\"graph\":null},"      \
	"\"previous\":null,\"free\":{\"stack\":[]},\"detected_at\":\"free\""
#define SEEN_JSON ",\"first_seen\":\"" T0 "\",\"last_seen\":\"" T1 "\"}\n"

/* The example's operations as a trace, for `npusanctl analyze`. */
extern const char spec_trace[];

/* A fake daemon in a fresh directory; NPUSAN_SOCKET names it. */
struct fq *fq_new(void);

/* Queues `m` as one frame. */
void fq_frame(struct fq *q, const Npusan__FromDaemon *m);

/* Queues `len` raw bytes. */
void fq_raw(struct fq *q, const void *p, size_t len);

/* The script sleeps `ms` before its next step. */
void fq_sleep(struct fq *q, int ms);

/* The script waits here for fq_go(). */
void fq_wait_go(struct fq *q);

/* Lets a script waiting in fq_wait_go() go on. */
void fq_go(struct fq *q);

/* The script closes the connection at once. */
void fq_close(struct fq *q);

/* The script goes on with the client's next connection. */
void fq_next(struct fq *q);

/* Starts the thread that plays the script. */
void fq_start(struct fq *q);

/* Stops the thread; what it saw stays readable until fq_free(). */
void fq_stop(struct fq *q);

/* Stops the thread if it runs and frees `q`, which accepts NULL. */
void fq_free(struct fq *q);

/* The query the fake daemon received. */
const Npusan__Query *fq_query(const struct fq *q);

/* Fills `a`: an access on `stream` at `seq`, of `n` frames. */
void cf_access(Npusan__Access *a, uint64_t stream, uint64_t seq,
	       bool write, const char *op, char **stack, size_t n);

/*
 * docs/findings.md's example: the data race (id 1) or the missing
 * record_stream (id 2) of process 4242, job demo, rank 0.
 */
void cf_spec(struct cf *c, bool race);

/* Queues a FindingsReply frame of `n` findings. */
void fq_findings(struct fq *q, struct cf *const *v, size_t n,
		 bool done);

/* Queues a ShowReply frame of `c` (NULL: no such finding). */
void fq_show(struct fq *q, struct cf *c);

/* Queues an Error reply of `code` saying `msg`. */
void fq_error(struct fq *q, const char *msg, int code);

/* Runs `npusanctl ARGS...` (NULL-terminated). */
int ctl(char **out, char **err, ...);

/* Runs `npusanctl ARGS...` against `q`, stopped after. */
int ctl_fq(struct fq *q, char **out, char **err, ...);

/* Starts npusanctl with its standard output on `out_fd`. */
pid_t ctl_spawn(const char *const *argv, int out_fd);

/*
 * Reads `fd` into *buf (NUL-terminated, grown as needed) until it holds
 * `want` (NULL: until end of file, or EIO, a pty's end) or 20 s pass.
 */
void read_until(int fd, char **buf, size_t *len, const char *want);

/* Reaps `pid`: its exit status, or 128 + the signal that ended it. */
int wait_status(pid_t pid);

/* Runs npusanctl with a terminal on standard output; what it printed. */
int ctl_tty(char **out, const char *const *argv);

/* Queues a ListReply frame of `n` processes. */
void fq_list(struct fq *q, Npusan__Process **v, size_t n, bool done);

/* The tests of each test_ctl_*.c file, added to `tc`. */
void ctl_findings_add(TCase *tc);
void ctl_errors_add(TCase *tc);
void ctl_show_add(TCase *tc);
void ctl_list_add(TCase *tc);
void ctl_limits_add(TCase *tc);

#endif
