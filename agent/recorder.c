/*
 * recorder.c - the recorder thread: ring -> ringdec -> trace writer.
 *
 * The recording must survive the process however it ends: exit(), which
 * runs recorder_stop(), but also _exit() (every multiprocessing fork
 * worker) and SIGKILL, which run nothing. So nothing waits in user space
 * for an exit hook: after each batch it takes from the ring, the thread
 * writes that batch's lines to the file, whole lines in one write(2) (an
 * unbuffered stream), and only then takes the next. What the thread took
 * is in the file; what it had not taken yet when the process died (pushed
 * during its last nap: 100 us while busy, 2 ms when idle) is lost, unless
 * the process waited with npusan_wait_drained(), which returns once the
 * recorder took everything and wrote it (recorder_settle()): the PyTorch
 * adapter does so as a multiprocessing worker's last finalizer, before
 * its os._exit().
 *
 * SIGKILL can also cut a write(2) short: Linux copies a write into a file
 * page by page and gives up between pages for a fatal signal. A line cut
 * there may even parse (`launch stream=1 op=x` without its `write=`), so
 * the file is padded: where a line would cross a page boundary, a blank
 * line of spaces (which readers skip) fills the page first, and every page
 * ends at a line's end. Only a line longer than a page can still be torn,
 * and then readers take it for what it is (common/trace.h).
 *
 * The trace is version 1 until the process makes its first graph call;
 * then the header's version digit is rewritten to 2 in place (both headers
 * are the same length), after every line before it is in the file and
 * before the graph op's line is written, so the file is a valid trace at
 * every moment: a process without graphs leaves a version 1 trace, which
 * every reader of version 1 reads.
 */
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agentlog.h"
#include "grow.h"
#include "ring.h"
#include "ringdec.h"
#include "ringread.h"
#include "symtab.h"
#include "thread.h"

#define RECORDER_BATCH 4096 /* records taken, then written, at a time */

struct recorder {
	pthread_t thread;
	_Atomic bool stop;
	/* Held by the thread while it drains and writes, and by fork()'s
	 * prepare handler, so a child never inherits the file, the decoder or
	 * an allocator in the middle of the thread's work. Released only with
	 * every line the thread wrote in the file, none pending. */
	pthread_mutex_t busy;
	FILE *f;
	char *path;
	char *job;
	char *name;
	struct ringread *rr;
	struct symtab *syms;
	struct ringdec *dec;
	struct trace_writer *w;
	struct recorder_file *file; /* under f; freed by fclose(f) */
	bool v2; /* the header says version 2 */
	struct trace_process proc; /* strings owned by job and name */
	int err; /* the first write error; the thread's own until joined */
};

static void recorder_free(struct recorder *rec)
{
	trace_writer_close(rec->w);
	if (rec->f != NULL)
		fclose(rec->f);
	ringdec_free(rec->dec);
	symtab_free(rec->syms);
	ringread_unmap(rec->rr);
	pthread_mutex_destroy(&rec->busy);
	free(rec->path);
	free(rec->job);
	free(rec->name);
	free(rec);
}

/* The file under the writer's stream (see the top). */
struct recorder_file {
	int fd;
	size_t page;
	uint64_t off; /* bytes in the file */
	char *buf;    /* a write's lines, padded */
	size_t cap;
};

/* Pads `chunk` (whole lines) so that no line of a page or less crosses a
 * page boundary, into f->buf; the padded length. */
static size_t recorder_file_pad(struct recorder_file *f, const char *chunk,
				size_t len)
{
	const char *p = chunk, *end = chunk + len, *nl;
	size_t n = 0, line, room;

	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		line = nl != NULL ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		room = f->page - (size_t)((f->off + n) % f->page);
		if (line > room && line <= f->page) {
			memset(f->buf + n, ' ', room - 1);
			f->buf[n + room - 1] = '\n';
			n += room;
		}
		memcpy(f->buf + n, p, line);
		n += line;
		p += line;
	}
	return n;
}

static ssize_t recorder_file_write(void *arg, const char *chunk, size_t len)
{
	struct recorder_file *f = arg;
	/* A pad per page the chunk spans, each less than a page. */
	size_t need = len + (len / f->page + 2) * f->page, n, done = 0;
	ssize_t w;

	if (grow_array((void **)&f->buf, &f->cap, need, 1) < 0)
		return -1;
	n = recorder_file_pad(f, chunk, len);
	while (done < n) {
		w = write(f->fd, f->buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		done += (size_t)w;
	}
	f->off += n;
	return (ssize_t)len;
}

static int recorder_file_close(void *arg)
{
	struct recorder_file *f = arg;
	int err = close(f->fd);

	free(f->buf);
	free(f);
	return err;
}

/* The stream of a new file at `path`, unbuffered: the writer batches
 * whole lines itself, which stdio must not cut; the file under it in
 * *file, which fclose() frees. NULL with errno set. */
static FILE *recorder_file_open(const char *path, struct recorder_file **file)
{
	cookie_io_functions_t io = { .write = recorder_file_write,
				     .close = recorder_file_close };
	struct recorder_file *f = calloc(1, sizeof(*f));
	long page = sysconf(_SC_PAGESIZE);
	FILE *stream;

	if (f == NULL)
		return NULL;
	f->page = page > 0 ? (size_t)page : 4096;
	f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (f->fd < 0) {
		free(f);
		return NULL;
	}
	stream = fopencookie(f, "w", io);
	if (stream == NULL) {
		int err = errno;

		recorder_file_close(f);
		errno = err;
		return NULL;
	}
	setvbuf(stream, NULL, _IONBF, 0);
	*file = f;
	return stream;
}

static void recorder_fail(struct recorder *rec, int err)
{
	if (rec->err != 0)
		return;
	rec->err = err;
	agent_log("recording to %s failed (%s); the rest of the run is not "
		  "recorded", rec->path, strerror(-err));
}

/*
 * Creates the file at the first operation, so that a process that never
 * does any (a launcher, a replay's parent) leaves no empty trace behind.
 */
static int recorder_open(struct recorder *rec)
{
	int err;

	rec->f = recorder_file_open(rec->path, &rec->file);
	if (rec->f == NULL)
		return -errno;
	err = trace_writer_new(rec->f, rec->syms, &rec->proc, &rec->w);
	if (err < 0) {
		fclose(rec->f);
		rec->f = NULL;
	}
	return err;
}

/* Makes the trace version 2 (see the top): the lines so far to the file,
 * then the header's digit. 0, or -EIO. */
static int recorder_upgrade(struct recorder *rec)
{
	ssize_t n;
	int err = trace_writer_flush(rec->w);

	if (err < 0)
		return err;
	do
		n = pwrite(rec->file->fd, "2", 1, TRACE_VERSION_AT);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return -EIO;
	trace_writer_upgrade(rec->w);
	rec->v2 = true;
	return 0;
}

static void recorder_write(struct recorder *rec, const struct op *op)
{
	int err = 0;

	if (rec->err != 0)
		return;
	if (rec->w == NULL)
		err = recorder_open(rec);
	if (err == 0 && !rec->v2 && op_is_v2(op))
		err = recorder_upgrade(rec);
	if (err == 0)
		err = trace_write_op(rec->w, op);
	if (err < 0)
		recorder_fail(rec, err);
}

static int recorder_cb(void *arg, unsigned type, const void *payload,
		       size_t len)
{
	struct recorder *rec = arg;
	struct op op;

	if (ringdec_record(rec->dec, type, payload, len, &op) == 1)
		recorder_write(rec, &op);
	return 0;
}

/* Writes the lines of the ops taken so far to the file, those before a
 * failure too, so that none is left pending (see `busy`). */
static void recorder_flush(struct recorder *rec)
{
	int err;

	if (rec->w == NULL)
		return;
	err = trace_writer_flush(rec->w);
	if (err < 0)
		recorder_fail(rec, err);
}

/* Drains until nothing is committed, each batch written before the next is
 * taken; the number of records taken. */
static unsigned recorder_drain_all(struct recorder *rec)
{
	unsigned total = 0;
	int n;

	while ((n = ringread_drain(rec->rr, RECORDER_BATCH, 0, recorder_cb,
				   rec)) > 0) {
		total += (unsigned)n;
		recorder_flush(rec);
	}
	return total;
}

static void *recorder_main(void *arg)
{
	struct recorder *rec = arg;
	struct timespec nap = { 0, 0 };
	unsigned idle = 0, n;

	/* Acquire: pairs with the release store in recorder_stop(). */
	while (!atomic_load_explicit(&rec->stop, memory_order_acquire)) {
		pthread_mutex_lock(&rec->busy);
		n = recorder_drain_all(rec);
		pthread_mutex_unlock(&rec->busy);
		if (n > 0) {
			idle = 0;
			continue;
		}
		/* Short naps while busy, longer ones when idle: latency
		 * only matters to a producer waiting for room. */
		nap.tv_nsec = idle++ < 100 ? 100000 : 2000000;
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/* The process line, its strings copied so the recorder owns them. */
static int recorder_process(struct recorder *rec, const struct trace_process *p)
{
	rec->proc = *p;
	if (p->job != NULL && (rec->job = strdup(p->job)) == NULL)
		return -ENOMEM;
	if (p->name != NULL && (rec->name = strdup(p->name)) == NULL)
		return -ENOMEM;
	rec->proc.job = rec->job;
	rec->proc.name = rec->name;
	return 0;
}

int recorder_start(const char *path, const struct ring *ring,
		   const struct trace_process *process, struct recorder **out)
{
	struct recorder *rec = calloc(1, sizeof(*rec));
	int err = -ENOMEM;

	if (rec == NULL)
		return -ENOMEM;
	pthread_mutex_init(&rec->busy, NULL);
	if ((rec->path = strdup(path)) == NULL ||
	    recorder_process(rec, process) < 0 ||
	    symtab_new(&rec->syms) < 0 ||
	    ringdec_new(rec->syms, &rec->dec) < 0)
		goto err;
	err = ringread_borrow(ring->hdr, ring->map_len, &rec->rr, NULL);
	if (err == 0)
		err = thread_start(&rec->thread, recorder_main, rec);
	if (err < 0)
		goto err;
	*out = rec;
	return 0;
err:
	recorder_free(rec);
	return err;
}

int recorder_stop(struct recorder *rec)
{
	struct op gap = { .kind = OP_GAP, .has_lost = true };
	int err;

	if (rec == NULL)
		return 0;
	/* Release: pairs with the acquire load in recorder_main(). */
	atomic_store_explicit(&rec->stop, true, memory_order_release);
	pthread_join(rec->thread, NULL);
	recorder_drain_all(rec);
	gap.lost = ringread_take_pending(rec->rr);
	if (gap.lost != 0)
		recorder_write(rec, &gap);
	if (rec->w != NULL) {
		err = trace_writer_close(rec->w);
		rec->w = NULL;
		if (err < 0)
			recorder_fail(rec, err);
		if (fclose(rec->f) != 0)
			recorder_fail(rec, -errno);
		rec->f = NULL;
	}
	err = rec->err;
	recorder_free(rec);
	return err < 0 ? -EIO : 0;
}

void recorder_settle(struct recorder *rec)
{
	if (rec == NULL)
		return;
	/* The thread holds `busy` from taking a batch until its lines are
	 * written: once we hold it, what was taken before is written. */
	pthread_mutex_lock(&rec->busy);
	pthread_mutex_unlock(&rec->busy);
}

void recorder_atfork_prepare(struct recorder *rec)
{
	if (rec != NULL)
		pthread_mutex_lock(&rec->busy);
}

void recorder_atfork_parent(struct recorder *rec)
{
	if (rec != NULL)
		pthread_mutex_unlock(&rec->busy);
}

void recorder_atfork_child(struct recorder *rec)
{
	if (rec == NULL)
		return;
	pthread_mutex_unlock(&rec->busy);
	/* Nothing is pending (see `busy`): freeing writes none of the
	 * parent's lines a second time. */
	recorder_free(rec);
}
