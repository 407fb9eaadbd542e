/*
 * recorder.h - NPUSAN_RECORD: a thread of the agent that drains a ring of
 * its own and writes everything the process did as a v1 text trace
 * (common/trace.h), readable by `npusanctl analyze`.
 *
 * The recorder's ring blocks instead of dropping, so the trace holds every
 * operation; producers wait only while this thread lags behind. Each batch
 * it takes reaches the file in whole lines before it takes the next, so a
 * process that ends in _exit() or SIGKILL leaves a trace of all but its
 * last moment (recorder.c). When the file cannot be written (a full disk),
 * the thread says so once on stderr and goes on draining without writing,
 * so the application never stalls.
 *
 * Caller owns the struct recorder; recorder_stop() releases it.
 */
#ifndef NPUSAN_AGENT_RECORDER_H
#define NPUSAN_AGENT_RECORDER_H

#include "trace.h"

struct recorder;
struct ring;

/*
 * Starts the thread draining `ring` (this process's own mapping of it,
 * which must outlive the recorder) into a trace at `path`, `process`
 * (copied) as its process line. The file is created (truncated) at the
 * first operation, so a process that does none leaves no file; a failure
 * to create it is reported on stderr then. 0; a negative errno from
 * ringread_borrow or pthread_create; -ENOMEM.
 */
int recorder_start(const char *path, const struct ring *ring,
		   const struct trace_process *process, struct recorder **out);

/*
 * Drains every record committed so far, reports records the ring dropped
 * as a gap, closes the file and frees the recorder. 0, or -EIO when any
 * write failed. Accepts NULL.
 */
int recorder_stop(struct recorder *rec);

/*
 * Waits until the lines of every record the thread has taken so far are in
 * the file (the thread writes a batch before it lets the next be taken),
 * so that a caller who saw the recorder's ring drained knows they are
 * written. NULL is fine.
 */
void recorder_settle(struct recorder *rec);

/*
 * pthread_atfork() handlers. Prepare waits until the thread is between
 * batches, so the child inherits no lock or buffer it holds half-way. The
 * child's handler forgets the parent's recorder, whose thread does not
 * exist there, without writing the parent's buffered bytes a second time.
 * All accept NULL.
 */
void recorder_atfork_prepare(struct recorder *rec);
void recorder_atfork_parent(struct recorder *rec);
void recorder_atfork_child(struct recorder *rec);

#endif
