/*
 * replay.c - npusan-replay: replays traces through the real agent API.
 *
 * Each trace runs in a process of its own, forked from this one, which
 * takes the trace's identity (its `process` line's job and rank), enables
 * the agent with npusan_init(), and calls one npusan_*() function per
 * operation, so a daemon sees a live process registering and pushing; with
 * --rate it paces itself. All traces run at once, as the ranks of a job do.
 * This is the demo driver and the end-to-end test driver.
 *
 * A child reads its trace ahead, a window of up to REPLAY_WINDOW_OPS
 * operations at a time, and replays the window from memory: the replay
 * proper costs what the agent costs, so that a benchmark through the daemon
 * (tests/bench/daemon_bench.py) is not measuring the trace parser, and
 * --rate paces the window alone (reading the next one is no part of the
 * schedule).
 *
 * The children start replaying together, once each has read its first
 * window and started its agent (a barrier of two pipes: `loaded`, which
 * each child closes when ready and the parent reads to its end, and `go`,
 * which the parent then closes); --started FILE marks that moment for a
 * script that times the replay.
 *
 * NPUSAN_RECORD records each replaying child. The agent records a forked
 * child only to a path with %p, so a path without it is made one here:
 * the single replaying child records to PATH.%p, renamed to PATH once it
 * has exited; with several traces such a path is refused, as one file
 * cannot hold several processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "grow.h"
#include "npusan.h"
#include "symtab.h"
#include "text.h"
#include "trace.h"
#include "u64map.h"

#define REPLAY_OK 0
#define REPLAY_FAILED 1
#define REPLAY_USAGE 2
#define REPLAY_MAX_PAUSES 16
/* Operations read ahead at most: about 150 bytes each with their ranges,
 * so a window takes some 150 MiB, and a million-operation trace is read
 * before its first operation is replayed. */
#define REPLAY_WINDOW_OPS ((size_t)1 << 20)

/* Operations read ahead, their ranges and arguments copied out of the
 * reader's buffers, which the next trace_read() reuses. While it is being
 * filled, ops[i]'s pointers are unset and at[i] says where its lists
 * start; replay_window_fix() then points them into ranges and args, which
 * no longer move. */
struct replay_window {
	struct op *ops;
	struct replay_at {
		size_t ranges; /* its reads, then its writes */
		size_t args;   /* its read arguments, then its write ones */
	} *at;
	size_t nops, cap_ops, cap_at;
	struct op_range *ranges;
	size_t nranges, cap_ranges;
	uint32_t *args;
	size_t nargs, cap_args;
};

struct replay {
	struct symtab *syms;
	struct u64map names;  /* trace string id -> agent string id */
	struct u64map stacks; /* trace stack id -> agent stack id */
	uint32_t *args;       /* a launch's argument ids, the agent's */
	size_t args_cap;
	double rate;          /* operations per second, 0: as fast as possible */
	unsigned wait_ms;
	struct replay_pause {
		uint64_t at;	     /* after this many operations */
		enum replay_then {   /* once continued, wait until: */
			REPLAY_ATTACHED, /* attached, everything taken */
			REPLAY_DETACHED, /* detached, everything taken */
			REPLAY_GO,	 /* nothing: go on at once */
		} then;
	} pauses[REPLAY_MAX_PAUSES]; /* --pause-at, ascending */
	unsigned npauses;
	const char *path;
	const char *record; /* NPUSAN_RECORD without %p, or NULL */
	const char *started; /* --started FILE, or NULL */
	int loaded_fd;	     /* a child's ends of the barrier's pipes, */
	int go_fd;	     /* -1 when there is none (see the top) */
};

static const char replay_usage[] =
	"usage: npusan-replay [--rate OPS] [--wait MS] TRACE...\n"
	"\n"
	"Replays each trace through the npusan agent in a process of its own,\n"
	"all at once, so that a running npusand analyses them as live processes.\n"
	"\n"
	"  --rate OPS   replay at most OPS operations per second per trace\n"
	"  --wait MS    at the end, wait up to MS milliseconds for the daemon\n"
	"               to take every operation (default 10000; 0: do not wait)\n"
	"  --pause-at N[:detached|:go]\n"
	"               after the Nth operation of each trace, wait (a second\n"
	"               at most) until the daemon took everything, stop\n"
	"               (SIGSTOP), and once continued (SIGCONT) wait (--wait)\n"
	"               until the agent is attached (with :detached, detached)\n"
	"               and a daemon took everything again, or (:go) go on at\n"
	"               once: a point at which to attach or detach, or to stop,\n"
	"               kill or restart the daemon; up to 16 times\n"
	"  --started FILE\n"
	"               once every trace is read ahead and its agent started,\n"
	"               the replays start together: then create FILE, for a\n"
	"               script that times them\n"
	"  --help       show this help\n"
	"\n"
	"The agent's environment applies (NPUSAN_SOCKET, NPUSAN_RECORD, ...);\n"
	"NPUSAN_RING_FULL defaults to block, so that nothing is dropped.\n"
	"NPUSAN_RECORD records each replaying process; without %p in it, only\n"
	"one TRACE may be given. A trace whose last line is cut short is\n"
	"replayed up to it, with a warning, and a gap for the lost line.\n"
	"Exit status: 0 when every trace was replayed, 1 when one could not be\n"
	"read, 2 on a usage error.\n";

/* The agent's id for trace string `id`. */
static uint32_t replay_name(struct replay *rp, uint32_t id)
{
	const uint64_t *v = u64map_get(&rp->names, id);
	uint32_t agent_id;

	if (v != NULL)
		return (uint32_t)*v;
	agent_id = npusan_intern(symtab_str(rp->syms, id, NULL));
	if (agent_id != 0 && u64map_put(&rp->names, id, agent_id) < 0)
		return 0;
	return agent_id;
}

/* The agent's id for trace stack `id`. */
static uint32_t replay_stack(struct replay *rp, uint32_t id)
{
	const uint64_t *v = u64map_get(&rp->stacks, id);
	uint32_t frames[OP_MAX_FRAMES], agent_id;
	const uint32_t *f;
	size_t n;

	if (id == 0)
		return NPUSAN_STACK_NONE;
	if (v != NULL)
		return (uint32_t)*v;
	n = symtab_stack(rp->syms, id, &f);
	if (n > OP_MAX_FRAMES)
		n = OP_MAX_FRAMES;
	for (size_t i = 0; i < n; i++)
		frames[i] = replay_name(rp, f[i]);
	agent_id = npusan_intern_stack(frames, n);
	if (agent_id != 0 && u64map_put(&rp->stacks, id, agent_id) < 0)
		return NPUSAN_STACK_NONE;
	return agent_id;
}

/* A launch, with its arguments when it names any; these cannot be
 * pushed without memory, and then the launch goes without them. */
static void replay_launch(struct replay *rp, const struct op *op)
{
	size_t nr = op->nreads, n = nr + op->nwrites;
	uint32_t *ra = NULL, *wa = NULL;

	if ((op->read_args != NULL || op->write_args != NULL) &&
	    grow_array((void **)&rp->args, &rp->args_cap, n ? n : 1,
		       sizeof(*rp->args)) == 0) {
		for (size_t i = 0; i < n; i++) {
			const uint32_t *v = i < nr ? op->read_args
						   : op->write_args;
			uint32_t id = v != NULL ? v[i < nr ? i : i - nr] : 0;

			rp->args[i] = id != 0 ? replay_name(rp, id) : 0;
		}
		ra = op->read_args != NULL ? rp->args : NULL;
		wa = op->write_args != NULL ? rp->args + nr : NULL;
	}
	npusan_launch_args(op->stream, replay_name(rp, op->name),
			   (const struct npusan_range *)op->reads, ra, nr,
			   (const struct npusan_range *)op->writes, wa,
			   op->nwrites, replay_stack(rp, op->stack));
}

static void replay_op(struct replay *rp, const struct op *op)
{
	switch (op->kind) {
	case OP_STREAM_CREATE: npusan_stream_create(op->stream); break;
	case OP_EVENT_CREATE: npusan_event_create(op->event); break;
	case OP_EVENT_DESTROY: npusan_event_destroy(op->event); break;
	case OP_EVENT_RECORD: npusan_event_record(op->event, op->stream); break;
	case OP_EVENT_WAIT: npusan_event_wait(op->event, op->stream); break;
	case OP_EVENT_SYNC: npusan_event_sync(op->event); break;
	case OP_STREAM_WAIT: npusan_stream_wait(op->stream, op->on); break;
	case OP_STREAM_SYNC: npusan_stream_sync(op->stream); break;
	case OP_DEVICE_SYNC: npusan_device_sync(); break;
	case OP_ALLOC:
		/* npusan_alloc_graph() takes no stack: the trace's is lost
		 * (and no native one is taken, see replay_trace()). */
		if (op->has_graph)
			npusan_alloc_graph(op->ptr, op->size,
					   op->has_stream ? op->stream :
							    NPUSAN_NO_STREAM,
					   op->graph);
		else if (op->has_stream)
			npusan_alloc_on(op->ptr, op->size, op->stream,
					replay_stack(rp, op->stack));
		else
			npusan_alloc(op->ptr, op->size, NPUSAN_NO_STREAM,
				     replay_stack(rp, op->stack));
		break;
	case OP_FREE:
		npusan_free_at(op->ptr, replay_stack(rp, op->stack));
		break;
	case OP_RECORD_STREAM: npusan_record_stream(op->ptr, op->stream); break;
	case OP_LAUNCH: replay_launch(rp, op); break;
	case OP_FLUSH: npusan_flush(); break;
	case OP_GAP: npusan_gap(op->has_lost ? op->lost : NPUSAN_LOST_UNKNOWN); break;
	case OP_CAPTURE_BEGIN: npusan_capture_begin(op->stream, op->graph); break;
	case OP_CAPTURE_END: npusan_capture_end(op->stream, op->graph); break;
	case OP_GRAPH_REPLAY: npusan_graph_replay(op->graph, op->stream); break;
	case OP_GRAPH_DESTROY: npusan_graph_destroy(op->graph); break;
	default: break;
	}
}

_Static_assert(sizeof(struct npusan_range) == sizeof(struct op_range),
	       "trace ranges are passed to the agent as they are");

/* A trace reader's message, which quotes the trace: cleaned as all
 * outside text is. */
static void replay_say_trace(const char *msg)
{
	fputs("npusan-replay: ", stderr);
	text_put(stderr, msg);
	fputc('\n', stderr);
}

/* Sleeps until operation `n` is due at rp->rate. */
static void replay_pace(const struct replay *rp, uint64_t start_ns, uint64_t n)
{
	double due = (double)n / rp->rate;
	double ahead = due - (double)(clock_mono_ns() - start_ns) / 1e9;
	struct timespec nap;

	/* Sleep in steps of a millisecond or more: a nap per operation
	 * would cost more than the operations at high rates. */
	if (ahead < 0.001)
		return;
	nap.tv_sec = (time_t)ahead;
	nap.tv_nsec = (long)((ahead - (double)nap.tv_sec) * 1e9);
	nanosleep(&nap, NULL);
}

/* A --pause-at point (see the usage). A live daemon drains in
 * milliseconds; a second is plenty before the stop, while one that is gone
 * (a test restarting it) takes nothing however long we wait. */
static void replay_pause(const struct replay *rp, enum replay_then then)
{
	struct timespec nap = { 0, 1000000 };
	int want = then == REPLAY_ATTACHED ? 1 : 0;

	(void)npusan_wait_drained(rp->wait_ms < 1000 ? rp->wait_ms : 1000);
	kill(getpid(), SIGSTOP);
	if (then == REPLAY_GO)
		return;
	for (unsigned ms = 0; ms < rp->wait_ms && npusan_attached() != want;
	     ms++)
		nanosleep(&nap, NULL);
	(void)npusan_wait_drained(rp->wait_ms);
}

/* Takes the trace's identity before the agent reads the environment. */
static void replay_identity(const struct trace_process *p)
{
	char buf[32];

	if (!p->present)
		return;
	if (p->job != NULL)
		setenv("NPUSAN_JOB", p->job, 1);
	if (p->has_rank) {
		snprintf(buf, sizeof(buf), "%" PRIu64, p->rank);
		setenv("RANK", buf, 1);
	}
}

/* Copies `op`, which points into the reader's buffers, into `w`.
 * 0; -ENOMEM. */
static int replay_window_add(struct replay_window *w, const struct op *op)
{
	size_t nr = op->nreads + op->nwrites;
	size_t na = (op->read_args != NULL ? op->nreads : 0) +
		    (op->write_args != NULL ? op->nwrites : 0);

	if (grow_array((void **)&w->ops, &w->cap_ops, w->nops + 1,
		       sizeof(*w->ops)) < 0 ||
	    grow_array((void **)&w->at, &w->cap_at, w->nops + 1,
		       sizeof(*w->at)) < 0 ||
	    grow_array((void **)&w->ranges, &w->cap_ranges, w->nranges + nr,
		       sizeof(*w->ranges)) < 0 ||
	    grow_array((void **)&w->args, &w->cap_args, w->nargs + na,
		       sizeof(*w->args)) < 0)
		return -ENOMEM;
	if (op->nreads != 0)
		memcpy(w->ranges + w->nranges, op->reads,
		       op->nreads * sizeof(*op->reads));
	if (op->nwrites != 0)
		memcpy(w->ranges + w->nranges + op->nreads, op->writes,
		       op->nwrites * sizeof(*op->writes));
	if (op->read_args != NULL && op->nreads != 0)
		memcpy(w->args + w->nargs, op->read_args,
		       op->nreads * sizeof(*op->read_args));
	if (op->write_args != NULL && op->nwrites != 0)
		memcpy(w->args + w->nargs +
			       (op->read_args != NULL ? op->nreads : 0),
		       op->write_args, op->nwrites * sizeof(*op->write_args));
	w->at[w->nops] = (struct replay_at){ w->nranges, w->nargs };
	w->ops[w->nops++] = *op;
	w->nranges += nr;
	w->nargs += na;
	return 0;
}

/* Points the window's operations at their copied lists (see struct
 * replay_window); a list that was NULL stays NULL. */
static void replay_window_fix(struct replay_window *w)
{
	for (size_t i = 0; i < w->nops; i++) {
		struct op *op = &w->ops[i];
		struct op_range *r = w->ranges ? w->ranges + w->at[i].ranges
					       : NULL;
		uint32_t *a = w->args ? w->args + w->at[i].args : NULL;

		op->reads = op->reads != NULL ? r : NULL;
		op->writes = op->writes != NULL && r ? r + op->nreads : NULL;
		op->read_args = op->read_args != NULL ? a : NULL;
		op->write_args = op->write_args == NULL || a == NULL ? NULL :
				 a + (op->read_args != NULL ? op->nreads : 0);
	}
}

/*
 * Reads the next window of operations into `w`. trace_read()'s result for
 * the last operation read: 1 when the window is full (more may follow),
 * 0 at the end, < 0 on an error. Without the memory to copy an
 * operation, the window ends before it, *direct is set and `op` holds it,
 * valid until the next read: to be replayed as it is, after the window.
 */
static int replay_window_load(struct trace_reader *r, struct replay_window *w,
			      struct op *op, bool *direct)
{
	int ret = 1;

	w->nops = w->nranges = w->nargs = 0;
	*direct = false;
	while (w->nops < REPLAY_WINDOW_OPS && (ret = trace_read(r, op)) == 1) {
		if (replay_window_add(w, op) < 0) {
			*direct = true;
			break;
		}
	}
	replay_window_fix(w);
	return ret;
}

static void replay_window_free(struct replay_window *w)
{
	free(w->ops);
	free(w->at);
	free(w->ranges);
	free(w->args);
}

/* Replays one operation, paced, and stops at the --pause-at points it
 * reaches; `*done` counts the operations replayed. */
static void replay_one(struct replay *rp, const struct op *op,
		       uint64_t start_ns, uint64_t *done, unsigned *pause)
{
	if (rp->rate > 0)
		replay_pace(rp, start_ns, *done);
	replay_op(rp, op);
	++*done;
	while (*pause < rp->npauses && rp->pauses[*pause].at == *done) {
		replay_pause(rp, rp->pauses[*pause].then);
		++*pause;
	}
}

/* Starts the agent as the trace's process; 0, or an exit status. */
static int replay_start(struct replay *rp, struct trace_reader *r)
{
	int err;

	/* The header and process line come before the first op. */
	replay_identity(trace_reader_process(r));
	setenv("NPUSAN_RING_FULL", "block", 0);
	/* Every stack comes from the trace: npusan_alloc_graph(), which
	 * takes none, must not capture this program's own. */
	setenv("NPUSAN_STACKS", "0", 1);
	err = npusan_init();
	if (err < 0) {
		fprintf(stderr, "npusan-replay: %s: the agent could not start: "
			"%s\n", rp->path, strerror(-err));
		return REPLAY_FAILED;
	}
	return REPLAY_OK;
}

/* Says this child is ready, and waits for the others (see the top). */
static void replay_barrier(struct replay *rp)
{
	char c = 1;
	ssize_t n;

	if (rp->loaded_fd >= 0) {
		/* Closing is the signal; the byte only makes it plain. */
		(void)!write(rp->loaded_fd, &c, 1);
		close(rp->loaded_fd);
		rp->loaded_fd = -1;
	}
	if (rp->go_fd >= 0) {
		do
			n = read(rp->go_fd, &c, 1);
		while (n > 0 || (n < 0 && errno == EINTR));
		close(rp->go_fd);
		rp->go_fd = -1;
	}
}

/* Replays the trace's windows; trace_read()'s last result. The first
 * window is read before the agent starts; reading a later one is left out
 * of the --rate schedule. */
static int replay_windows(struct replay *rp, struct trace_reader *r,
			  struct replay_window *w)
{
	uint64_t start = 0, done = 0, t;
	unsigned pause = 0;
	bool direct, started = false;
	struct op op;
	int ret;

	do {
		t = clock_mono_ns();
		ret = replay_window_load(r, w, &op, &direct);
		if (!started) {
			if (replay_start(rp, r) != REPLAY_OK)
				return -ECANCELED;
			replay_barrier(rp);
			started = true;
			start = clock_mono_ns();
		} else {
			start += clock_mono_ns() - t;
		}
		for (size_t i = 0; i < w->nops; i++)
			replay_one(rp, &w->ops[i], start, &done, &pause);
		if (direct)
			replay_one(rp, &op, start, &done, &pause);
	} while (ret == 1);
	return ret;
}

/* Replays one trace in this (child) process. An exit status. */
static int replay_trace(struct replay *rp, struct trace_reader *r)
{
	struct replay_window w = { 0 };
	int ret, err;

	ret = replay_windows(rp, r, &w);
	replay_window_free(&w);
	if (ret == -ECANCELED)
		return REPLAY_FAILED;
	if (ret < 0) {
		replay_say_trace(trace_reader_error(r));
		return REPLAY_FAILED;
	}
	if (trace_reader_torn(r) != NULL) {
		/* Whatever the torn line was is lost to the analysis. */
		replay_say_trace(trace_reader_torn(r));
		npusan_gap(NPUSAN_LOST_UNKNOWN);
	}
	err = rp->wait_ms != 0 ? npusan_wait_drained(rp->wait_ms) : 0;
	if (err == -ETIMEDOUT)
		fprintf(stderr, "npusan-replay: %s: the daemon did not take "
			"every operation within %u ms\n", rp->path,
			rp->wait_ms);
	return REPLAY_OK;
}

static int replay_child(struct replay *rp)
{
	struct trace_reader *r = NULL;
	char *msg = NULL, *record = NULL;
	int ret = REPLAY_FAILED, err;

	/* Read by the agent at this child's first operation. */
	if (rp->record != NULL &&
	    (asprintf(&record, "%s.%%p", rp->record) < 0 ||
	     setenv("NPUSAN_RECORD", record, 1) < 0)) {
		fprintf(stderr, "npusan-replay: out of memory\n");
		return REPLAY_FAILED;
	}
	free(record);
	if (symtab_new(&rp->syms) < 0 || u64map_init(&rp->names) < 0 ||
	    u64map_init(&rp->stacks) < 0) {
		fprintf(stderr, "npusan-replay: out of memory\n");
		return REPLAY_FAILED;
	}
	err = trace_reader_open(rp->path, rp->syms, &r, &msg);
	if (err < 0)
		fprintf(stderr, "npusan-replay: %s\n",
			msg ? msg : strerror(-err));
	else
		ret = replay_trace(rp, r);
	free(msg);
	trace_reader_close(r);
	u64map_fini(&rp->names);
	u64map_fini(&rp->stacks);
	free(rp->args);
	symtab_free(rp->syms);
	return ret;
}

/* One --pause-at: N[:detached|:go], N from 1 up and above the one
 * before. 0 or -1. */
static int replay_parse_pause(struct replay *rp, const char *v)
{
	enum replay_then then = REPLAY_ATTACHED;
	unsigned long long n;
	char *end;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (strcmp(end, ":detached") == 0)
		then = REPLAY_DETACHED;
	else if (strcmp(end, ":go") == 0)
		then = REPLAY_GO;
	else if (*end != '\0')
		n = 0;
	if (rp->npauses == REPLAY_MAX_PAUSES || v[0] < '0' || v[0] > '9' ||
	    errno != 0 || n == 0 ||
	    (rp->npauses > 0 && n <= rp->pauses[rp->npauses - 1].at)) {
		fprintf(stderr, "npusan-replay: --pause-at needs an operation "
			"number from 1 up, each above the last, optionally with "
			":detached or :go, at most %d times, not '%s'\n",
			REPLAY_MAX_PAUSES, v);
		return -1;
	}
	rp->pauses[rp->npauses++] = (struct replay_pause){ n, then };
	return 0;
}

static int replay_parse(int argc, char **argv, struct replay *rp)
{
	static const struct option opts[] = {
		{ "rate", required_argument, NULL, 'r' },
		{ "wait", required_argument, NULL, 'w' },
		{ "pause-at", required_argument, NULL, 'p' },
		{ "started", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			rp->rate = strtod(optarg, &end);
			if (*end != '\0' || !(rp->rate > 0)) {
				fprintf(stderr, "npusan-replay: --rate needs a "
					"positive number, not '%s'\n", optarg);
				return -1;
			}
			break;
		case 'w':
			rp->wait_ms = (unsigned)strtoul(optarg, &end, 10);
			if (*end != '\0' || optarg[0] < '0' || optarg[0] > '9') {
				fprintf(stderr, "npusan-replay: --wait needs "
					"milliseconds, not '%s'\n", optarg);
				return -1;
			}
			break;
		case 'p':
			if (replay_parse_pause(rp, optarg) < 0)
				return -1;
			break;
		case 's':
			rp->started = optarg;
			break;
		case 'h':
			fputs(replay_usage, stdout);
			exit(REPLAY_OK);
		default:
			fputs(replay_usage, stderr);
			return -1;
		}
	}
	if (optind == argc) {
		fputs(replay_usage, stderr);
		return -1;
	}
	return 0;
}

/* Sets rp->record for an NPUSAN_RECORD without %p (see the top); 0, or -1
 * after saying why it cannot be done. */
static int replay_record_setup(struct replay *rp, int ntraces)
{
	const char *record = getenv("NPUSAN_RECORD");
	const char *off = getenv("NPUSAN");

	if (record == NULL || *record == '\0' || strstr(record, "%p") ||
	    (off != NULL && strcmp(off, "0") == 0))
		return 0;
	if (ntraces > 1) {
		fprintf(stderr, "npusan-replay: NPUSAN_RECORD=%s names one "
			"file, but the %d traces are replayed by %d processes; "
			"put %%p (the pid) in it to record each\n", record,
			ntraces, ntraces);
		return -1;
	}
	rp->record = record;
	return 0;
}

/* Moves the recording of child `pid` to the path the user gave. */
static int replay_record_finish(const struct replay *rp, pid_t pid)
{
	char from[PATH_MAX];

	snprintf(from, sizeof(from), "%s.%d", rp->record, (int)pid);
	if (rename(from, rp->record) == 0)
		return REPLAY_OK;
	if (errno == ENOENT)
		fprintf(stderr, "npusan-replay: nothing was recorded to %s: "
			"no operation was replayed, or the recording failed "
			"(see above)\n", rp->record);
	else
		fprintf(stderr, "npusan-replay: the recording is in %s: it "
			"cannot be renamed to %s: %s\n", from, rp->record,
			strerror(errno));
	return REPLAY_FAILED;
}

/* The barrier's pipes (see the top): loaded[2], then go[2]; all -1 when
 * they cannot be made, and the children then start as they are ready. */
static void replay_barrier_open(int fds[4])
{
	if (pipe2(fds, O_CLOEXEC) < 0) {
		fds[0] = fds[1] = fds[2] = fds[3] = -1;
	} else if (pipe2(fds + 2, O_CLOEXEC) < 0) {
		close(fds[0]);
		close(fds[1]);
		fds[0] = fds[1] = fds[2] = fds[3] = -1;
	}
}

/* In a child: keeps its ends of the barrier (see the top). */
static void replay_barrier_child(struct replay *rp, const int fds[4])
{
	rp->loaded_fd = fds[1];
	rp->go_fd = fds[2];
	if (fds[0] >= 0) {
		close(fds[0]);
		close(fds[3]);
	}
}

/* In the parent, once every child is forked: waits until each is ready
 * or gone, creates --started's file, and lets them go. REPLAY_OK, or
 * REPLAY_FAILED when the file could not be created (said). */
static int replay_release(const struct replay *rp, const int fds[4])
{
	int ret = REPLAY_OK, fd;
	char buf[64];
	ssize_t n;

	if (fds[0] >= 0) {
		close(fds[1]);
		close(fds[2]);
		do
			n = read(fds[0], buf, sizeof(buf));
		while (n > 0 || (n < 0 && errno == EINTR));
		close(fds[0]);
	}
	if (rp->started != NULL) {
		fd = open(rp->started, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			  0644);
		if (fd < 0) {
			fprintf(stderr, "npusan-replay: --started %s: %s\n",
				rp->started, strerror(errno));
			ret = REPLAY_FAILED;
		} else {
			close(fd);
		}
	}
	if (fds[3] >= 0)
		close(fds[3]);
	return ret;
}

int main(int argc, char **argv)
{
	struct replay rp = { .wait_ms = 10000 };
	int status, ret = REPLAY_OK, fds[4];
	pid_t pid, child = -1;

	if (replay_parse(argc, argv, &rp) < 0 ||
	    replay_record_setup(&rp, argc - optind) < 0)
		return REPLAY_USAGE;
	fflush(stdout);
	replay_barrier_open(fds);
	for (int i = optind; i < argc; i++) {
		rp.path = argv[i];
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "npusan-replay: fork: %s\n",
				strerror(errno));
			ret = REPLAY_FAILED;
			break;
		}
		/* exit(), not _exit(): the agent's destructor finishes the
		 * recording; stdout was flushed before the fork. */
		if (pid == 0) {
			replay_barrier_child(&rp, fds);
			exit(replay_child(&rp));
		}
		child = pid;
	}
	if (replay_release(&rp, fds) != REPLAY_OK)
		ret = REPLAY_FAILED;
	while ((pid = wait(&status)) > 0 || errno == EINTR) {
		if (pid > 0 && (!WIFEXITED(status) || WEXITSTATUS(status)))
			ret = REPLAY_FAILED;
	}
	if (rp.record != NULL && child > 0 &&
	    replay_record_finish(&rp, child) != REPLAY_OK)
		ret = REPLAY_FAILED;
	return ret;
}
