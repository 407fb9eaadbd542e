/*
 * npusan.c - the agent: the public API (npusan.h). Its start-up from the
 * environment, and what happens to it across fork() and exit, are
 * lifecycle.c's; the state both share is agentint.h's.
 *
 * DESIGN
 *
 * 1. The state (npusan_state_, exported for npusan_active()) is the only
 *    thing a call reads when the agent is off: one load and a branch.
 *    AGENT_ON is stored (release) only after the rings exist; calls load it
 *    with acquire. It is a plain int used through __atomic builtins because
 *    the public header, which C++ includes too, declares it.
 * 2. Up to two rings take every operation: the daemon's (NPUSAN=1 or
 *    npusan_init()), which drops when full unless NPUSAN_RING_FULL=block,
 *    and the recorder's (NPUSAN_RECORD), which always waits for room.
 * 3. A string or stack is defined on a ring before the first record that
 *    uses its id: a thread that finds it undefined there pushes the
 *    definition itself, and marks it defined only once committed, so a
 *    record never precedes the definition of an id it carries (two racing
 *    threads may both define it; the consumer accepts equal definitions).
 * 4. Rings are never unmapped while the process runs: a thread may be
 *    pushing into one at any time, also during exit. After fork() the child
 *    abandons its parent's rings (AGENT_FORKED) and its first call makes its
 *    own, with a new generation, so every definition is sent again. So does
 *    a lost connection to the daemon: the next one may be a new daemon.
 * 5. While the daemon's ring exists, the lifetimes of streams, events and
 *    allocations are kept (live.h), and their records are pushed under the
 *    lock that keeps them. The daemon's ring is DETACHED (NPUSAN=dormant, or
 *    `npusanctl detach`), ATTACHING or ATTACHED. An attach, on the
 *    registration thread, makes it ATTACHING, so that lifetimes go to the
 *    ring again, pushes the snapshot of what is live and then a gap, and
 *    only then makes it ATTACHED: every other operation reaches the daemon
 *    after the gap, which is what makes the analysis start clean. A daemon
 *    that takes the ring over from another one gets the same snapshot and
 *    gap. With no other ring, a detached agent's state is AGENT_DORMANT,
 *    where only lifetime calls do anything.
 * 6. `agent.solo` names the ring slot that takes launches when exactly one
 *    does (a ring that exists and is ATTACHED), else NULL. It is derived,
 *    under agent_attach_lock, after every change of which rings exist or
 *    are attached (agent_route_locked()), and stored with release after
 *    them, so a launch that follows it sees what agent_launch_slow()'s loop
 *    would. A launch without args of at most AGENT_FAST_RANGES ranges a
 *    kind, whose name and stack are defined there already, and which the
 *    ring takes inline (ring_try_reserve()), is pushed inline in
 *    npusan_launch() (agent_launch_fast()). Anything else goes the whole
 *    way, agent_launch_slow(), having reserved nothing; there a launch the
 *    fast path would take is dropped at once when the ring has no room by
 *    a fresh tail (agent_launch_dropped()). (A call out of line in the
 *    fast path would cost it the frame's shrink-wrapping past the state
 *    check, and registers.)
 */
#include "npusan.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agentenv.h"
#include "agentint.h"
#include "agentlog.h"
#include "identity.h"
#include "intern.h"
#include "live.h"
#include "op.h"
#include "recorder.h"
#include "register.h"
#include "ring.h"
#include "stack.h"

NPUSAN_EXPORT int npusan_state_ = AGENT_OFF;
struct agent_globals agent = {
	.rings = { [AGENT_DAEMON] = { .slot = AGENT_DAEMON },
		   [AGENT_RECORDER] = { .slot = AGENT_RECORDER } },
};
_Static_assert(INTERN_RINGS == 2, "every ring slot is initialised");
pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t agent_attach_lock = PTHREAD_MUTEX_INITIALIZER;

_Static_assert(sizeof(struct npusan_range) == sizeof(struct ring_range),
	       "ranges are copied into the ring as they are");

/* ---- definitions ------------------------------------------------------- */

static bool agent_defined(const struct intern_head *h, int slot)
{
	/* Acquire: pairs with the release store in agent_mark(), after
	 * which the definition is in the ring ahead of our record. */
	return atomic_load_explicit(&h->sent[slot], memory_order_acquire) ==
	       agent_gen(slot);
}

static void agent_mark(struct intern_head *h, int slot)
{
	/* Release: pairs with the acquire load in agent_defined(). */
	atomic_store_explicit(&h->sent[slot], agent_gen(slot),
			      memory_order_release);
}

/* Whether string `id` is defined on ring `slot`: a launch's question,
 * asked inline so that the answer it nearly always gets costs no call
 * into a function that saves registers for the definition. */
static inline bool agent_string_defined(int slot, uint32_t id)
{
	const struct intern_str *s = intern_string_get(id);

	return s != NULL && agent_defined(&s->h, slot);
}

/* The same of stack `id`. */
static inline bool agent_stack_defined(int slot, uint32_t id)
{
	const struct intern_stack *st = intern_stack_get(id);

	return st != NULL && agent_defined(&st->h, slot);
}

/* Defines string `id` on ring `slot` unless it is. 0 or -errno. */
static __attribute__((noinline)) int agent_define_string(int slot, uint32_t id)
{
	struct intern_str *s = (struct intern_str *)intern_string_get(id);
	struct ring_string *def;
	struct ring_slot rs;
	int err;

	if (s == NULL)
		return -ENOENT;
	if (agent_defined(&s->h, slot))
		return 0;
	err = ring_reserve(agent_ring_get(slot), RING_REC_STRING,
			   sizeof(*def) + s->h.n, &rs);
	if (err < 0)
		return err;
	def = rs.payload;
	def->id = id;
	def->len = s->h.n;
	memcpy(def->bytes, s->bytes, s->h.n);
	ring_commit(&rs);
	agent_mark(&s->h, slot);
	return 0;
}

/* Defines stack `id`, and its frames, on ring `slot`. 0 or -errno. */
static __attribute__((noinline)) int agent_define_stack(int slot, uint32_t id)
{
	struct intern_stack *st = (struct intern_stack *)intern_stack_get(id);
	struct ring_stack *def;
	struct ring_slot rs;
	int err;

	if (st == NULL)
		return -ENOENT;
	if (agent_defined(&st->h, slot))
		return 0;
	for (uint32_t i = 0; i < st->h.n; i++) {
		err = agent_define_string(slot, st->frames[i]);
		if (err < 0)
			return err;
	}
	err = ring_reserve(agent_ring_get(slot), RING_REC_STACK,
			   sizeof(*def) + st->h.n * sizeof(def->frames[0]),
			   &rs);
	if (err < 0)
		return err;
	def = rs.payload;
	def->id = id;
	def->nframes = st->h.n;
	memcpy(def->frames, st->frames, st->h.n * sizeof(def->frames[0]));
	ring_commit(&rs);
	agent_mark(&st->h, slot);
	return 0;
}

/*
 * The stack id to send: a given one, or the native stack captured now.
 * Called only from agent_launch_slow(), agent_alloc() and agent_free(),
 * never inlined, each called only from the API functions, and the agent is
 * built without sibling calls, so the frames to skip are always these
 * three: itself, its caller and the API function.
 */
__attribute__((noinline)) static uint32_t agent_stack(uint32_t stack)
{
	uintptr_t pcs[STACK_MAX_DEPTH];
	int n;

	if (stack != NPUSAN_STACK_NATIVE)
		return stack;
	/* Dormant, an allocation costs a lock, not a stack walk: its stack
	 * matters only if an attach ever comes. Relaxed: a hint. */
	if (agent.stacks.depth == 0 ||
	    agent_state_load(__ATOMIC_RELAXED) == AGENT_DORMANT)
		return 0;
	n = stack_capture(agent.stacks.method, pcs, agent.stacks.depth, 3);
	return n > 0 ? intern_native(pcs, (size_t)n) : 0;
}

/* ---- pushing ----------------------------------------------------------- */

/* Whether lifetime calls do anything now (DESIGN 5). */
static inline bool agent_live(void)
{
	/* Acquire: as in agent_on(). */
	int s = agent_state_load(__ATOMIC_ACQUIRE);

	if (likely(s == AGENT_ON || s == AGENT_DORMANT))
		return true;
	if (s != AGENT_FORKED)
		return false;
	s = agent__wake();
	return s == AGENT_ON || s == AGENT_DORMANT;
}

/* The ring `slot` when it exists and takes records of `level` (an enum
 * agent_attach), with `stack` defined on it (a stack that cannot be defined
 * is sent as none); else NULL. */
static struct ring *agent_ring_for(int slot, int level, uint32_t *stack)
{
	struct ring *r = agent_ring_get(slot);

	if (r == NULL || agent_attach_load(slot) < level)
		return NULL;
	if (*stack != 0 && agent_define_stack(slot, *stack) < 0)
		*stack = 0;
	return r;
}

/* `op` is a struct ring_op, or the start of a struct ring_op_graph when it
 * says so (ring_op_size()). */
static void agent_push_op_to(int slot, int level, const struct ring_op *op)
{
	struct ring_slot rs;
	uint32_t stack = op->stack;
	struct ring *r = agent_ring_for(slot, level, &stack);
	size_t len = ring_op_size(op);

	if (r == NULL || ring_reserve(r, RING_REC_OP, len, &rs))
		return;
	memcpy(rs.payload, op, len);
	((struct ring_op *)rs.payload)->stack = stack;
	ring_commit(&rs);
}

static void agent_push_op(const struct ring_op *op, int level)
{
	for (int slot = 0; slot < INTERN_RINGS; slot++)
		agent_push_op_to(slot, level, op);
}

static void agent_op(enum op_kind kind, uint64_t a, uint64_t b)
{
	if (!agent_on())
		return;
	struct ring_op op = { .kind = (uint8_t)kind, .a = a, .b = b };

	agent_push_op(&op, AGENT_ATTACHED);
}

/* live.h's push function for a lifetime record. */
static void agent_push_lifetime_cb(void *arg)
{
	agent_push_op(arg, AGENT_ATTACHING);
}

/* Whether lifetimes are kept: while the daemon's ring exists. */
static bool agent_keeps_lifetimes(void)
{
	return agent_ring_get(AGENT_DAEMON) != NULL;
}

/* A stream or event created or destroyed (DESIGN 5). */
static void agent_lifetime(enum op_kind kind, uint64_t id)
{
	if (!agent_live())
		return;
	struct ring_op op = { .kind = (uint8_t)kind, .a = id };

	if (!agent_keeps_lifetimes())
		agent_push_op(&op, AGENT_ATTACHING);
	else if (kind == OP_STREAM_CREATE)
		live_stream_create(id, agent_push_lifetime_cb, &op);
	else if (kind == OP_EVENT_CREATE)
		live_event_create(id, agent_push_lifetime_cb, &op);
	else
		live_event_destroy(id, agent_push_lifetime_cb, &op);
}

/* The operator's arguments of a launch's ranges: NULL pointers for
 * none (npusan_launch_args()). */
struct agent_args {
	const uint32_t *reads;
	const uint32_t *writes;
};

/*
 * The arguments of a launch on ring `slot`, reads then writes: with `out`
 * NULL, defines them, ahead of the launch's own record, which may name
 * only what precedes it; else their ids into `out`, one that could not be
 * defined as none.
 */
static void agent_args_to(int slot, const struct agent_args *args,
			  size_t nreads, size_t nwrites, uint32_t *out)
{
	for (size_t i = 0; i < nreads + nwrites; i++) {
		const uint32_t *v = i < nreads ? args->reads : args->writes;
		uint32_t id = v != NULL ? v[i < nreads ? i : i - nreads] : 0;

		if (out == NULL && id != 0 && !agent_string_defined(slot, id))
			(void)agent_define_string(slot, id);
		else if (out != NULL)
			out[i] = agent_string_defined(slot, id) ? id : 0;
	}
}

/* Writes a launch record but for its args. */
static inline void agent_fill_launch(struct ring_launch *l, uint64_t stream,
				     uint32_t name,
				     const struct npusan_range *reads,
				     size_t nreads,
				     const struct npusan_range *writes,
				     size_t nwrites, uint32_t stack, bool named)
{
	l->kind = OP_LAUNCH;
	l->flags = named ? RING_LAUNCH_HAS_ARGS : 0;
	l->reserved = 0;
	l->stack = stack;
	l->stream = stream;
	l->name = name;
	l->nreads = (uint32_t)nreads;
	l->nwrites = (uint32_t)nwrites;
	l->reserved2 = 0;
	/* A loop, not memcpy(): launches carry a handful of ranges, and a
	 * call into libc costs more than copying them. */
	for (size_t i = 0; i < nreads; i++)
		l->ranges[i] = (struct ring_range){ reads[i].ptr, reads[i].len };
	for (size_t i = 0; i < nwrites; i++)
		l->ranges[nreads + i] =
			(struct ring_range){ writes[i].ptr, writes[i].len };
}

/*
 * Pushes a launch to ring `r` of `slot`, which takes every record. Inline
 * in agent_launch_slow(), the path of a launch with args or to two rings,
 * whose ids are nearly always defined already (agent_string_defined()).
 */
static inline void agent_push_launch(struct ring *r, int slot,
				     uint64_t stream, uint32_t name,
				     const struct npusan_range *reads,
				     size_t nreads,
				     const struct npusan_range *writes,
				     size_t nwrites, uint32_t stack,
				     const struct agent_args *args)
{
	struct ring_launch *l;
	struct ring_slot rs;
	bool named = args != NULL;

	if (stack != 0 && !agent_stack_defined(slot, stack) &&
	    agent_define_stack(slot, stack) < 0)
		stack = 0;
	if (name != 0 && !agent_string_defined(slot, name) &&
	    agent_define_string(slot, name) < 0)
		name = 0;
	if (named)
		agent_args_to(slot, args, nreads, nwrites, NULL);
	/* Past the ring's record limit the reservation fails and counts the
	 * drop, as for a launch of too many ranges. */
	if (ring_reserve(r, RING_REC_LAUNCH,
			 ring_launch_size((uint64_t)nreads + nwrites, named),
			 &rs))
		return;
	l = rs.payload;
	agent_fill_launch(l, stream, name, reads, nreads, writes, nwrites,
			  stack, named);
	if (named)
		agent_args_to(slot, args, nreads, nwrites,
			      (uint32_t *)(l->ranges + nreads + nwrites));
	ring_commit(&rs);
}

/* The most read, and write, ranges a launch on the fast path has: its
 * record then never exceeds any ring's max_record. One less than a power
 * of two, so that (nreads | nwrites) checks both. */
#define AGENT_FAST_RANGES 63u
_Static_assert(sizeof(struct ring_rec) + sizeof(struct ring_launch) +
			       2 * AGENT_FAST_RANGES *
				       sizeof(struct ring_range) <=
		       RING_MAX_RECORD_MIN,
	       "a fast launch fits every ring");

/* agent_defined() with the generation of `slot` at hand. */
static inline bool agent_defined_gen(const struct intern_head *h, int slot,
				     uint32_t gen)
{
	/* Acquire: as in agent_defined(). */
	return atomic_load_explicit(&h->sent[slot], memory_order_acquire) ==
	       gen;
}

/* Whether the launch's name and stack (0: none) are defined on `slot`. */
static inline bool agent_launch_defined(int slot, uint32_t gen,
					uint32_t name, uint32_t stack)
{
	const struct intern_str *s;
	const struct intern_stack *st;

	if (name != 0 && ((s = intern_string_get(name)) == NULL ||
			  !agent_defined_gen(&s->h, slot, gen)))
		return false;
	return stack == 0 || ((st = intern_stack_get(stack)) != NULL &&
			      agent_defined_gen(&st->h, slot, gen));
}

/*
 * The fast path of a launch without args (DESIGN 6): true when it is
 * pushed; false, with nothing reserved or counted, when
 * agent_launch_slow() must do it. NPUSAN_STACK_NATIVE is never a defined
 * stack, so a launch that asks for one goes the whole way.
 */
static inline bool agent_launch_fast(uint64_t stream, uint32_t name,
				     const struct npusan_range *reads,
				     size_t nreads,
				     const struct npusan_range *writes,
				     size_t nwrites, uint32_t stack)
{
	/* Acquire: pairs with the release store in agent_route_locked();
	 * the ring, its generation and its attach state are set before. */
	const struct agent_ring *ar = atomic_load_explicit(
		&agent.solo, memory_order_acquire);
	struct ring_slot rs;
	struct ring *r;
	uint32_t gen;

	if (ar == NULL || (nreads | nwrites) > AGENT_FAST_RANGES)
		return false;
	/* Relaxed: ordered by the acquire load of solo above; never NULL
	 * while solo names its slot (agent_route_locked()). */
	r = atomic_load_explicit(&ar->ring, memory_order_relaxed);
	/* Relaxed: as in agent_gen(). */
	gen = atomic_load_explicit(&ar->gen, memory_order_relaxed);
	if (!agent_launch_defined(ar->slot, gen, name, stack))
		return false;
	if (!ring_try_reserve(r, RING_REC_LAUNCH,
			      ring_rec_size(ring_launch_size(nreads + nwrites,
							     0)),
			      &rs))
		return false;
	agent_fill_launch(rs.payload, stream, name, reads, nreads, writes,
			  nwrites, stack, false);
	ring_commit(&rs);
	return true;
}

/* ---- the API ----------------------------------------------------------- */

/* A launch as the API received it; args NULL for none. */
struct agent_launch_req {
	uint64_t stream;
	const struct npusan_range *reads, *writes;
	size_t nreads, nwrites;
	uint32_t name, stack;
	const struct agent_args *args;
};

/*
 * Whether launch `q`, one the fast path takes when the ring has room, was
 * dropped (and counted) because the one ring that takes launches has none
 * now: at once, as the whole way would after defining what the launch
 * names, which would itself find no room. What a full ring costs a launch.
 */
static bool agent_launch_dropped(const struct agent_launch_req *q)
{
	/* Acquire: as in agent_launch_fast(). */
	const struct agent_ring *ar = atomic_load_explicit(
		&agent.solo, memory_order_acquire);

	/* Relaxed: as in agent_launch_fast(). */
	return ar != NULL && q->args == NULL &&
	       (q->nreads | q->nwrites) <= AGENT_FAST_RANGES &&
	       ring_drop_if_full(atomic_load_explicit(&ar->ring,
						      memory_order_relaxed),
				 ring_rec_size(ring_launch_size(
					 q->nreads + q->nwrites, 0)));
}

/* A launch the whole way: to every ring that takes it, defining what it
 * names first. Called only from npusan_launch() and npusan_launch_args()
 * (agent_stack()'s frames). */
static __attribute__((noinline)) void agent_launch_slow(
	const struct agent_launch_req *q)
{
	size_t nreads = q->nreads, nwrites = q->nwrites;
	uint32_t stack = q->stack;
	struct ring *r;

	if (agent_launch_dropped(q))
		return;
	if (!agent_on())
		return; /* a forked child's agent that did not start */
	/* More ranges than a record holds: ring_reserve() refuses the
	 * record and counts it as dropped; the counts must not wrap. */
	if (nreads > UINT32_MAX || nwrites > UINT32_MAX)
		nreads = nwrites = UINT32_MAX;
	if (stack == NPUSAN_STACK_NATIVE)
		stack = agent_stack(stack);
	/* agent_ring_for(), inline: a launch takes a ring only ATTACHED. */
	for (int slot = 0; slot < INTERN_RINGS; slot++) {
		r = agent_ring_get(slot);
		if (r != NULL && agent_attach_load(slot) >= AGENT_ATTACHED)
			agent_push_launch(r, slot, q->stream, q->name, q->reads,
					  nreads, q->writes, nwrites, stack,
					  q->args);
	}
}

/*
 * The fast path is inline here, not in a function of its own, so that a
 * launch makes one call, not two. A forked child's first launch goes the
 * slow way, which starts its agent (agent_on()): then the one branch past
 * the state check is the only code that needs a stack frame, and the
 * compiler sets the frame up past the check, so that the disabled path is
 * a load, a compare and a return.
 */
NPUSAN_EXPORT void npusan_launch(uint64_t stream, uint32_t op,
				 const struct npusan_range *reads,
				 size_t nreads,
				 const struct npusan_range *writes,
				 size_t nwrites, uint32_t stack)
{
	/* Acquire: as in agent_on(). */
	int s = agent_state_load(__ATOMIC_ACQUIRE);

	if (likely(s == AGENT_ON || s == AGENT_FORKED) &&
	    (s != AGENT_ON ||
	     !agent_launch_fast(stream, op, reads, nreads, writes, nwrites,
				stack))) {
		struct agent_launch_req q = {
			.stream = stream, .reads = reads, .writes = writes,
			.nreads = nreads, .nwrites = nwrites, .name = op,
			.stack = stack,
		};

		agent_launch_slow(&q);
	}
}

NPUSAN_EXPORT void npusan_launch_args(uint64_t stream, uint32_t op,
				      const struct npusan_range *reads,
				      const uint32_t *read_args, size_t nreads,
				      const struct npusan_range *writes,
				      const uint32_t *write_args,
				      size_t nwrites, uint32_t stack)
{
	struct agent_args args = { read_args, write_args };

	if (agent_on()) {
		struct agent_launch_req q = {
			.stream = stream, .reads = reads, .writes = writes,
			.nreads = nreads, .nwrites = nwrites, .name = op,
			.stack = stack,
			.args = read_args != NULL || write_args != NULL ? &args
									: NULL,
		};

		agent_launch_slow(&q);
	}
}

/* The alloc record of `a`, for the allocation itself and for a snapshot:
 * a struct ring_op_graph whose `op` is pushed (ring_op_size()). The pool
 * is a property of the memory, so a snapshot keeps it, though no graph
 * travels in a snapshot. */
static struct ring_op_graph agent_alloc_op(const struct live_alloc *a)
{
	struct ring_op_graph g = {
		.op = { .kind = OP_ALLOC, .a = a->ptr, .b = a->size,
			.stack = a->stack },
	};

	if (a->has_stream) {
		g.op.flags |= RING_OP_HAS_STREAM;
		g.op.c = a->stream;
	}
	if (a->has_graph) {
		g.op.flags |= RING_OP_HAS_GRAPH;
		g.graph = a->graph;
	}
	return g;
}

/* `a` less its stack, which is taken here (agent_stack()'s frames). */
static __attribute__((noinline)) void agent_alloc(struct live_alloc a,
						  uint32_t stack)
{
	struct ring_op_graph g;

	a.stack = agent_stack(stack);
	g = agent_alloc_op(&a);
	if (agent_keeps_lifetimes())
		live_alloc(&a, agent_push_lifetime_cb, &g.op);
	else
		agent_push_op(&g.op, AGENT_ATTACHING);
}

NPUSAN_EXPORT void npusan_alloc(uint64_t ptr, uint64_t size, uint64_t stream,
				uint32_t stack)
{
	if (agent_live())
		agent_alloc((struct live_alloc){
				    .ptr = ptr, .size = size, .stream = stream,
				    .has_stream = stream != NPUSAN_NO_STREAM },
			    stack);
}

NPUSAN_EXPORT void npusan_alloc_on(uint64_t ptr, uint64_t size,
				   uint64_t stream, uint32_t stack)
{
	if (agent_live())
		agent_alloc((struct live_alloc){ .ptr = ptr, .size = size,
						 .stream = stream,
						 .has_stream = true },
			    stack);
}

NPUSAN_EXPORT void npusan_alloc_graph(uint64_t ptr, uint64_t size,
				      uint64_t stream, uint64_t graph)
{
	if (agent_live())
		agent_alloc((struct live_alloc){
				    .ptr = ptr, .size = size, .stream = stream,
				    .has_stream = stream != NPUSAN_NO_STREAM,
				    .graph = graph, .has_graph = true },
			    NPUSAN_STACK_NATIVE);
}

/* The body of npusan_free() and npusan_free_at(), out of line for
 * agent_stack()'s frames. */
static __attribute__((noinline)) void agent_free(uint64_t ptr, uint32_t stack)
{
	struct ring_op op = { .kind = OP_FREE, .a = ptr,
			      .stack = agent_stack(stack) };

	if (agent_keeps_lifetimes())
		live_free(ptr, agent_push_lifetime_cb, &op);
	else
		agent_push_op(&op, AGENT_ATTACHING);
}

NPUSAN_EXPORT void npusan_free(uint64_t ptr)
{
	if (agent_live())
		agent_free(ptr, NPUSAN_STACK_NONE);
}

NPUSAN_EXPORT void npusan_free_at(uint64_t ptr, uint32_t stack)
{
	if (agent_live())
		agent_free(ptr, stack);
}

NPUSAN_EXPORT void npusan_stream_create(uint64_t stream)
{
	agent_lifetime(OP_STREAM_CREATE, stream);
}

NPUSAN_EXPORT void npusan_event_create(uint64_t event)
{
	agent_lifetime(OP_EVENT_CREATE, event);
}

NPUSAN_EXPORT void npusan_event_destroy(uint64_t event)
{
	agent_lifetime(OP_EVENT_DESTROY, event);
}

NPUSAN_EXPORT void npusan_event_record(uint64_t event, uint64_t stream)
{
	agent_op(OP_EVENT_RECORD, event, stream);
}

NPUSAN_EXPORT void npusan_event_wait(uint64_t event, uint64_t stream)
{
	agent_op(OP_EVENT_WAIT, event, stream);
}

NPUSAN_EXPORT void npusan_event_sync(uint64_t event)
{
	agent_op(OP_EVENT_SYNC, event, 0);
}

NPUSAN_EXPORT void npusan_stream_wait(uint64_t stream, uint64_t on)
{
	agent_op(OP_STREAM_WAIT, stream, on);
}

NPUSAN_EXPORT void npusan_stream_sync(uint64_t stream)
{
	agent_op(OP_STREAM_SYNC, stream, 0);
}

NPUSAN_EXPORT void npusan_device_sync(void)
{
	agent_op(OP_DEVICE_SYNC, 0, 0);
}

NPUSAN_EXPORT void npusan_record_stream(uint64_t ptr, uint64_t stream)
{
	agent_op(OP_RECORD_STREAM, ptr, stream);
}

NPUSAN_EXPORT void npusan_flush(void)
{
	agent_op(OP_FLUSH, 0, 0);
}

/* Graph ops are device-side work, not lifetimes: like launches, none is
 * kept while dormant, and a snapshot carries no graph (the gap after it
 * makes the daemon forget graphs anyway). */
NPUSAN_EXPORT void npusan_capture_begin(uint64_t stream, uint64_t graph)
{
	agent_op(OP_CAPTURE_BEGIN, stream, graph);
}

NPUSAN_EXPORT void npusan_capture_end(uint64_t stream, uint64_t graph)
{
	agent_op(OP_CAPTURE_END, stream, graph);
}

NPUSAN_EXPORT void npusan_graph_replay(uint64_t graph, uint64_t stream)
{
	agent_op(OP_GRAPH_REPLAY, graph, stream);
}

NPUSAN_EXPORT void npusan_graph_destroy(uint64_t graph)
{
	agent_op(OP_GRAPH_DESTROY, graph, 0);
}

NPUSAN_EXPORT void npusan_gap(uint64_t lost)
{
	if (!agent_on())
		return;
	struct ring_op op = { .kind = OP_GAP, .a = lost };

	if (lost != NPUSAN_LOST_UNKNOWN)
		op.flags = RING_OP_HAS_LOST;
	else
		op.a = 0;
	agent_push_op(&op, AGENT_ATTACHED);
}

NPUSAN_EXPORT uint32_t npusan_intern(const char *s)
{
	return s != NULL ? intern_string(s, strlen(s)) : 0;
}

NPUSAN_EXPORT uint32_t npusan_intern_stack(const uint32_t *frames, size_t n)
{
	return frames != NULL ? intern_stack(frames, n) : 0;
}

NPUSAN_EXPORT int npusan_enabled(void)
{
	return agent_on();
}

NPUSAN_EXPORT int npusan_attached(void)
{
	return agent_live() && agent_ring_get(AGENT_DAEMON) != NULL &&
	       agent_attach_load(AGENT_DAEMON) == AGENT_ATTACHED;
}

/* ---- attach and detach (DESIGN 5) --------------------------------------- */

static void agent_snap_stream_cb(uint64_t stream, void *arg)
{
	struct ring_op op = { .kind = OP_STREAM_CREATE, .a = stream };

	(void)arg;
	agent_push_op_to(AGENT_DAEMON, AGENT_ATTACHING, &op);
}

static void agent_snap_event_cb(uint64_t event, void *arg)
{
	struct ring_op op = { .kind = OP_EVENT_CREATE, .a = event };

	(void)arg;
	agent_push_op_to(AGENT_DAEMON, AGENT_ATTACHING, &op);
}

static void agent_snap_alloc_cb(const struct live_alloc *a, void *arg)
{
	struct ring_op_graph g = agent_alloc_op(a);

	(void)arg;
	agent_push_op_to(AGENT_DAEMON, AGENT_ATTACHING, &g.op);
}

/* What is live, then a gap of `lost` (NPUSAN_LOST_UNKNOWN: unknown), to the
 * daemon's ring alone: the recorder saw everything. */
static void agent_snapshot(uint64_t lost)
{
	const struct live_snapshot_cbs cbs = {
		.stream = agent_snap_stream_cb,
		.event = agent_snap_event_cb,
		.alloc = agent_snap_alloc_cb,
	};
	struct ring_op gap = { .kind = OP_GAP };

	live_snapshot(&cbs);
	if (lost != NPUSAN_LOST_UNKNOWN) {
		gap.flags = RING_OP_HAS_LOST;
		gap.a = lost;
	}
	agent_push_op_to(AGENT_DAEMON, AGENT_ATTACHING, &gap);
}

/*
 * Under agent_attach_lock: derives agent.solo (DESIGN 6) from the rings.
 * A ring pointer is cleared only where no thread can be pushing and solo
 * cannot name it: in a forked child, after solo is cleared, and when the
 * daemon's ring fails to register, before agent_start() routes it.
 */
static void agent_route_locked(void)
{
	struct agent_ring *solo = NULL;
	int n = 0;

	for (int slot = 0; slot < INTERN_RINGS; slot++) {
		if (agent_ring_get(slot) != NULL &&
		    agent_attach_load(slot) >= AGENT_ATTACHED) {
			solo = &agent.rings[slot];
			n++;
		}
	}
	/* Release: pairs with the acquire load in agent_launch_fast(). */
	atomic_store_explicit(&agent.solo, n == 1 ? solo : NULL,
			      memory_order_release);
}

/* agent_route_locked(), taking the lock; never under it. */
void agent__route(void)
{
	pthread_mutex_lock(&agent_attach_lock);
	agent_route_locked();
	pthread_mutex_unlock(&agent_attach_lock);
}

static void agent_attach_store(int v)
{
	/* Release: pairs with the acquire load in agent_attach_load(). */
	atomic_store_explicit(&agent.rings[AGENT_DAEMON].attach, v,
			      memory_order_release);
}

/* Moves the state from `from` to `to` if it is `from`. */
static void agent_state_move(int from, int to)
{
	/* Release: pairs with the acquire loads in agent_on() and
	 * agent_live(); the ring's attach state is stored before. */
	__atomic_compare_exchange_n(&npusan_state_, &from, to, false,
				    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

static void agent_attach(void)
{
	pthread_mutex_lock(&agent_attach_lock);
	if (agent_ring_get(AGENT_DAEMON) != NULL &&
	    agent_attach_load(AGENT_DAEMON) == AGENT_DETACHED) {
		agent_attach_store(AGENT_ATTACHING);
		agent_snapshot(NPUSAN_LOST_UNKNOWN);
		/* On before ATTACHED: whoever sees npusan_attached() also
		 * gets past the state check (and pushes nothing before). */
		agent_state_move(AGENT_DORMANT, AGENT_ON);
		agent_attach_store(AGENT_ATTACHED);
		agent_route_locked();
		register_set_dormant(false);
	}
	pthread_mutex_unlock(&agent_attach_lock);
}

static void agent_detach(void)
{
	pthread_mutex_lock(&agent_attach_lock);
	if (agent_attach_load(AGENT_DAEMON) == AGENT_ATTACHED) {
		agent_attach_store(AGENT_DETACHED);
		agent_route_locked();
		register_set_dormant(true);
		if (agent_ring_get(AGENT_RECORDER) == NULL)
			agent_state_move(AGENT_ON, AGENT_DORMANT);
	}
	pthread_mutex_unlock(&agent_attach_lock);
}

/* A daemon took the ring again, perhaps a new one that knows nothing of
 * this process: the same snapshot and gap as an attach. The gap lost
 * nothing of ours (drops have their own gaps), hence 0. */
static void agent_resync(void)
{
	pthread_mutex_lock(&agent_attach_lock);
	if (agent_attach_load(AGENT_DAEMON) == AGENT_ATTACHED)
		agent_snapshot(0);
	pthread_mutex_unlock(&agent_attach_lock);
}

/* register.h's event callback, on the registration thread. */
void agent__register_cb(enum register_event ev, void *arg)
{
	(void)arg;
	switch (ev) {
	case REGISTER_UP:
		break;
	case REGISTER_UP_AGAIN:
		agent_resync();
		break;
	case REGISTER_DOWN:
		/* DESIGN 4: definitions again for whoever drains next. */
		atomic_store_explicit(&agent.rings[AGENT_DAEMON].gen,
				      agent_next_gen(), memory_order_relaxed);
		break;
	case REGISTER_ATTACH:
		agent_attach();
		break;
	case REGISTER_DETACH:
		agent_detach();
		break;
	}
}

