/*
 * npusan.h - the agent API: tell npusan what an accelerator process does.
 *
 * A framework adapter (or any runtime shim) calls one function per
 * operation of the trace format (docs/trace-format.md): streams,
 * events, synchronisations, allocations and kernel launches with the memory
 * they read and write. The agent pushes each one into a lock-free
 * shared-memory ring that the npusan daemon drains and analyses, and, with
 * NPUSAN_RECORD, into a trace file.
 *
 * Every function is safe from any thread, never blocks the caller (unless
 * NPUSAN_RING_FULL=block asks it to wait for room), never writes to stdout,
 * never calls exit() and never raises a signal. When the agent is disabled
 * each operation costs a load and a branch.
 *
 * Environment:
 *   NPUSAN=1                 enable and register with the daemon (else the
 *                            agent is off unless npusan_init() is called)
 *   NPUSAN=dormant           register, but push nothing until the daemon
 *                            attaches the process (npusanctl attach); only
 *                            allocations, frees, and stream and event
 *                            creations are kept, for the snapshot an
 *                            attach sends
 *   NPUSAN_SOCKET=PATH       the daemon's socket (default: the per-user or
 *                            system socket, see the README)
 *   NPUSAN_RECORD=PATH       also write a text trace; "%p" is the pid
 *                            (format version 1, or 2 once a graph call
 *                            was made)
 *   NPUSAN_RING_SIZE=BYTES   ring capacity, a power of two, K/M/G allowed
 *                            (default 8M)
 *   NPUSAN_RING_FULL=drop|block   what a full ring does (default drop:
 *                            the record is counted and reported as a gap)
 *   NPUSAN_STACKS=N          capture up to N native frames (0 to 128) per
 *                            launch, allocation and free that passes
 *                            NPUSAN_STACK_NATIVE (default 16; 0: off)
 *   NPUSAN_STACK_METHOD=fp|unwind   how: frame pointers (default) or
 *                            the unwinder
 *   NPUSAN_LOG=info|debug    diagnostics on stderr (default: only errors in
 *                            the configuration)
 */
#ifndef NPUSAN_H
#define NPUSAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPUSAN_API_VERSION 1

/* npusan_alloc(): the allocation stream is not known. */
#define NPUSAN_NO_STREAM UINT64_MAX

/* Stack arguments: no stack, or capture the native one (NPUSAN_STACKS). */
#define NPUSAN_STACK_NONE 0u
#define NPUSAN_STACK_NATIVE UINT32_MAX

/* npusan_gap(): the number lost is not known. */
#define NPUSAN_LOST_UNKNOWN UINT64_MAX

/* The bytes [ptr, ptr + len); an empty range (len 0) is ignored. */
struct npusan_range {
	uint64_t ptr;
	uint64_t len;
};

/*
 * The agent's state, exported only for the inline checks below; never
 * write it. Its values are the agent's own, named here for those checks.
 */
extern int npusan_state_;

#define NPUSAN_STATE_OFF_ 0     /* off: every call returns at once */
#define NPUSAN_STATE_ON_ 1      /* every operation is pushed */
#define NPUSAN_STATE_FORKED_ 2  /* a child of fork(): the next call starts
				   the child's own agent */
#define NPUSAN_STATE_DORMANT_ 3 /* registered, not attached: only
				   lifetimes are kept */

/*
 * Whether calling npusan_*() now can do anything. A call into a disabled
 * agent costs a few nanoseconds, most of it the call itself; a hot path
 * that guards its calls with this inline check pays one load instead:
 *
 *	if (npusan_active())
 *		npusan_alloc(ptr, size, stream, NPUSAN_STACK_NATIVE);
 *
 * It is also true in a child just after fork(), so that the child's first
 * call can start the child's own agent, and while dormant, when the
 * lifetimes of streams, events and allocations are still kept.
 */
static inline int npusan_active(void)
{
	return __atomic_load_n(&npusan_state_, __ATOMIC_RELAXED) !=
	       NPUSAN_STATE_OFF_;
}

/*
 * Whether launches, records, waits, syncs, record_stream, flush and gap
 * can do anything now: npusan_active(), less the dormant state, which
 * takes only npusan_stream_create(), npusan_event_create(),
 * npusan_event_destroy(), npusan_alloc() and npusan_free(). The guard for
 * the hottest calls, so that a dormant agent costs one load per launch:
 *
 *	if (npusan_pushing())
 *		npusan_launch(stream, op, reads, 2, writes, 2, NPUSAN_STACK_NONE);
 */
static inline int npusan_pushing(void)
{
	int s = __atomic_load_n(&npusan_state_, __ATOMIC_RELAXED);

	return s == NPUSAN_STATE_ON_ || s == NPUSAN_STATE_FORKED_;
}

/*
 * Enables the agent as NPUSAN=1 does (unless NPUSAN=0; with NPUSAN=dormant,
 * as that does): creates the ring and starts registering with the daemon
 * in the background. Idempotent.
 * Returns 0, or a negative errno when the ring could not be created (the
 * agent then stays off).
 */
int npusan_init(void);

/* 1 when operations are being recorded, else 0. */
int npusan_enabled(void);

/*
 * 1 when the daemon has this process attached: every operation goes to
 * its ring (NPUSAN=1, or NPUSAN=dormant after `npusanctl attach`, once the
 * snapshot of what was live is in the ring), else 0.
 */
int npusan_attached(void);

/*
 * The id of a string (an operator name or a stack frame, the empty one
 * included), at least 1; the same string always gets the same id. 0 when s
 * is NULL, or out of memory. Ids are valid in this process and its forked
 * children.
 */
uint32_t npusan_intern(const char *s);

/*
 * The id of a stack of `n` frames (ids from npusan_intern(), innermost
 * first), at least 1; 0 when n is 0 or above 256, a frame id is unknown,
 * or out of memory.
 */
uint32_t npusan_intern_stack(const uint32_t *frames, size_t n);

void npusan_stream_create(uint64_t stream);
void npusan_event_create(uint64_t event);
void npusan_event_destroy(uint64_t event);
/* `event` captures the work submitted to `stream` so far. */
void npusan_event_record(uint64_t event, uint64_t stream);
/* Later work on `stream` waits for `event` (device side). */
void npusan_event_wait(uint64_t event, uint64_t stream);
/* The host waits for `event`. */
void npusan_event_sync(uint64_t event);
/* Later work on `stream` waits for the work submitted to `on` so far. */
void npusan_stream_wait(uint64_t stream, uint64_t on);
/* The host waits for `stream` to drain. */
void npusan_stream_sync(uint64_t stream);
/* The host waits for every stream to drain. */
void npusan_device_sync(void);

/* [ptr, ptr + size) was allocated for `stream` (NPUSAN_NO_STREAM when
 * unknown). `stack`: a stack id, NPUSAN_STACK_NONE or NPUSAN_STACK_NATIVE.
 * A stream whose id is UINT64_MAX needs npusan_alloc_on(). */
void npusan_alloc(uint64_t ptr, uint64_t size, uint64_t stream,
		  uint32_t stack);
/* As npusan_alloc() with a known allocation stream, which may have any id,
 * UINT64_MAX included. */
void npusan_alloc_on(uint64_t ptr, uint64_t size, uint64_t stream,
		     uint32_t stack);
/* The allocation starting at ptr went back to the allocator. */
void npusan_free(uint64_t ptr);
/* As npusan_free(), where the free was made: `stack` is a stack id,
 * NPUSAN_STACK_NONE or NPUSAN_STACK_NATIVE. A missing record_stream this
 * free reveals names that stack as where the memory was freed, which is
 * where its fix goes. Since NPUSAN_1.3. */
void npusan_free_at(uint64_t ptr, uint32_t stack);
/* The allocator was told the allocation containing ptr is used on stream. */
void npusan_record_stream(uint64_t ptr, uint64_t stream);

/*
 * A kernel (or an asynchronous copy) named by operator id `op` (from
 * npusan_intern()) on `stream` that reads and writes the given ranges.
 */
void npusan_launch(uint64_t stream, uint32_t op,
		   const struct npusan_range *reads, size_t nreads,
		   const struct npusan_range *writes, size_t nwrites,
		   uint32_t stack);

/*
 * As npusan_launch(), naming the operator's argument of each range:
 * read_args[i] (and write_args[i]) is the id, from npusan_intern(), of the
 * name of the argument through which the kernel touches reads[i] ("self",
 * "other", "out", as the operator's schema names them), or 0 for none;
 * either array may be NULL for none at all. A finding names the argument
 * of each access. A name of more than 255 bytes, or holding a blank, a
 * control character or one of `" # = , @`, is shown as none. Since
 * NPUSAN_1.3.
 */
void npusan_launch_args(uint64_t stream, uint32_t op,
			const struct npusan_range *reads,
			const uint32_t *read_args, size_t nreads,
			const struct npusan_range *writes,
			const uint32_t *write_args, size_t nwrites,
			uint32_t stack);

/*
 * Graph capture and replay (format version 2; CUDA graphs, ACLGraph).
 * Graph ids are the caller's, any 64-bit number, like stream ids.
 */
/* `stream` starts capturing graph `graph`: its work is recorded, not run. */
void npusan_capture_begin(uint64_t stream, uint64_t graph);
/* The capture of `graph` that began on `stream` ends. */
void npusan_capture_end(uint64_t stream, uint64_t graph);
/* The work captured in `graph` runs once, on `stream`. */
void npusan_graph_replay(uint64_t graph, uint64_t stream);
/* `graph` is reset or destroyed. */
void npusan_graph_destroy(uint64_t graph);
/* As npusan_alloc(), for memory from the private memory pool of `graph`
 * (which need not exist yet); its stack is the native one when
 * NPUSAN_STACKS asks for stacks. Kept while dormant, as allocations are. */
void npusan_alloc_graph(uint64_t ptr, uint64_t size, uint64_t stream,
			uint64_t graph);

/* Check every live allocation for a missing record_stream now. */
void npusan_flush(void);

/* `lost` operations (NPUSAN_LOST_UNKNOWN: an unknown number) happened that
 * the agent was not told about. */
void npusan_gap(uint64_t lost);

/*
 * Waits up to `timeout_ms` until every operation pushed so far has been
 * taken from the ring by the daemon (and, with NPUSAN_RECORD, written to
 * the trace file, in whole lines); after a daemon went away, until a new
 * one has registered the process and taken them; while a registration is
 * in flight, until the daemon has answered it, even when nothing was
 * pushed. Taken is not yet analysed nor stored: a query made at once may
 * not show their findings. A query about the job or process once it has
 * exited (`npusanctl report --job`, `findings --job`, `run`) waits until
 * the daemon has stored everything the process left. 0; -ETIMEDOUT, also
 * when a daemon has accepted the ring but not taken everything yet;
 * -ENOTCONN when no daemon ever had the ring and none is answering a
 * registration; 0 at once when the agent is off or dormant. For
 * short-lived processes and replay; it may block.
 */
int npusan_wait_drained(unsigned timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
