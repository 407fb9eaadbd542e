/*
 * live.h - what is live in this process: its streams, events and
 * allocations, kept for the snapshot an agent sends when the daemon starts
 * analysing it mid-run (an attach, or a daemon that restarted).
 *
 * Without the snapshot, memory allocated before the attach would belong to
 * no allocation; with it, and the gap that follows it, such memory is
 * named in findings and exempt from the record_stream check (whose calls
 * were missed), as docs/trace-format.md's `gap` says.
 *
 * Allocations live in striped tables, each under its own mutex, so that
 * threads allocating at once rarely meet. Every update runs a caller's
 * push function while it still holds the lock, and so does the snapshot:
 * for each allocation, the ring sees its snapshot entry and its own alloc
 * or free in the order the table saw them.
 *
 * Everything belongs to this module; live_fini() releases it. All calls are
 * safe from any thread. Out of memory, an entry is not kept: the snapshot
 * then misses it, which forgoes detail but never invents a finding.
 */
#ifndef NPUSAN_AGENT_LIVE_H
#define NPUSAN_AGENT_LIVE_H

#include <stdbool.h>
#include <stdint.h>

struct live_alloc {
	uint64_t ptr;
	uint64_t size;
	uint64_t stream; /* valid when has_stream */
	uint64_t graph;  /* valid when has_graph: from that graph's pool */
	uint32_t stack;
	bool has_stream;
	bool has_graph;
};

/* Runs with the entry's lock held, after the table changed. */
typedef void (*live_push_fn)(void *arg);

/* A new stream; `push(arg)` under the streams' lock. */
void live_stream_create(uint64_t stream, live_push_fn push, void *arg);

/* An event created or destroyed; `push(arg)` under the events' lock. */
void live_event_create(uint64_t event, live_push_fn push, void *arg);
void live_event_destroy(uint64_t event, live_push_fn push, void *arg);

/* An allocation made (replacing one at the same start) or freed;
 * `push(arg)` under its stripe's lock. */
void live_alloc(const struct live_alloc *a, live_push_fn push, void *arg);
void live_free(uint64_t ptr, live_push_fn push, void *arg);

struct live_snapshot_cbs {
	void (*stream)(uint64_t stream, void *arg);
	void (*event)(uint64_t event, void *arg);
	void (*alloc)(const struct live_alloc *a, void *arg);
	void *arg;
};

/*
 * Calls the callbacks for every live stream, event and allocation, each
 * table locked while its entries are passed. Callbacks must not call back
 * into this module.
 */
void live_snapshot(const struct live_snapshot_cbs *cbs);

/* pthread_atfork() handlers: every lock is held across fork(); the child
 * starts empty, since its parent's device memory is not its own. */
void live_atfork_prepare(void);
void live_atfork_parent(void);
void live_atfork_child(void);

/* Frees every table. Only when no thread can use them. */
void live_fini(void);

#endif
