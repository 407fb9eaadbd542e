/*
 * agentint.h - what the agent's API (npusan.c) and its life cycle
 * (lifecycle.c: start-up, fork and exit) share: the rings, the state, the
 * locks, and the inline reads of them every call makes. Internal to
 * libnpusan; the DESIGN of npusan.c describes the invariants.
 */
#ifndef NPUSAN_AGENT_AGENTINT_H
#define NPUSAN_AGENT_AGENTINT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "intern.h"
#include "npusan.h"
#include "recorder.h"
#include "register.h"
#include "ring.h"
#include "stack.h"

#define NPUSAN_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)

#define AGENT_DAEMON 0   /* ring slot of the daemon's ring */
#define AGENT_RECORDER 1 /* ring slot of the recorder's ring */
#define AGENT_BLOCK_TIMEOUT_MS 5000

enum agent_state {
	AGENT_OFF = NPUSAN_STATE_OFF_,	       /* every call returns at once */
	AGENT_ON = NPUSAN_STATE_ON_,	       /* some ring takes every operation */
	AGENT_FORKED = NPUSAN_STATE_FORKED_,   /* in a child of fork(): the next
						  call restarts */
	AGENT_DORMANT = NPUSAN_STATE_DORMANT_, /* the daemon's ring only, and
						  detached (DESIGN 5) */
};

/* What a ring takes (DESIGN 5); the recorder's is always ATTACHED. */
enum agent_attach {
	AGENT_DETACHED,	 /* nothing */
	AGENT_ATTACHING, /* lifetimes and the snapshot */
	AGENT_ATTACHED,	 /* everything */
};

struct agent_ring {
	/* Set (release) after gen, cleared only in a forked child. */
	_Atomic(struct ring *) ring;
	_Atomic uint32_t gen; /* this ring's generation, never 0 */
	_Atomic int attach;   /* enum agent_attach */
	int slot;	      /* its index in agent.rings, constant */
};

#define agent_state_load(order) __atomic_load_n(&npusan_state_, (order))
#define agent_state_store(v, order) \
	__atomic_store_n(&npusan_state_, (v), (order))
/* The agent's state but for npusan_state_; defined in npusan.c. */
struct agent_globals {
	struct agent_ring rings[INTERN_RINGS];
	_Atomic(struct agent_ring *) solo; /* DESIGN 6 */
	struct stack_config stacks;
	struct recorder *recorder;
	_Atomic uint32_t next_gen;
	bool want_daemon; /* NPUSAN=1 or npusan_init(): also after fork() */
	bool want_dormant; /* register detached: also after fork() */
	bool atfork_done;
};

/* Hidden, so that the library reaches them without its GOT. */
#define AGENT_HIDDEN __attribute__((visibility("hidden")))
extern AGENT_HIDDEN struct agent_globals agent;
/* Serialises start-up (agent_start()) and the recorder's end. */
extern AGENT_HIDDEN pthread_mutex_t agent_lock;
/* Serialises attach, detach, the snapshot (DESIGN 5) and agent.solo's
 * derivation (DESIGN 6). */
extern AGENT_HIDDEN pthread_mutex_t agent_attach_lock;

/* The ring of `slot`, or NULL. */
static inline struct ring *agent_ring_get(int slot)
{
	/* Acquire: pairs with the release store in agent_ring_new(). */
	return atomic_load_explicit(&agent.rings[slot].ring,
				    memory_order_acquire);
}

/* Relaxed: a thread that races a new generation (a fork, or a lost
 * daemon) may send a record of the old one without its definition; the
 * consumer then shows the id, never a wrong name. */
static inline uint32_t agent_gen(int slot)
{
	return atomic_load_explicit(&agent.rings[slot].gen,
				    memory_order_relaxed);
}

/* A generation never used before, never 0. */
static inline uint32_t agent_next_gen(void)
{
	/* Relaxed: only uniqueness matters. */
	uint32_t g = atomic_fetch_add_explicit(&agent.next_gen, 1,
					       memory_order_relaxed) + 1;

	return g != 0 ? g : agent_next_gen();
}

static inline int agent_attach_load(int slot)
{
	/* Acquire: pairs with the release stores in agent_attach(); a thread
	 * that sees ATTACHED reserves after the snapshot's gap. */
	return atomic_load_explicit(&agent.rings[slot].attach,
				    memory_order_acquire);
}

/* In a forked child, on its first call: starts the agent again with new
 * rings (lifecycle.c). Returns the state it leaves. */
int agent__wake(void) __attribute__((noinline, cold));

/* Whether every call should push now; starts a forked child's agent. */
static inline bool agent_on(void)
{
	/* Acquire: pairs with the release stores in agent_start() and
	 * agent_attach(); the rings are set up before the state says so. */
	int s = agent_state_load(__ATOMIC_ACQUIRE);

	if (likely(s == AGENT_ON))
		return true;
	return s == AGENT_FORKED && agent__wake() == AGENT_ON;
}

/* npusan.c's, for the life cycle: derives agent.solo (DESIGN 6), taking
 * agent_attach_lock; and register.h's event callback. */
void agent__route(void);
void agent__register_cb(enum register_event ev, void *arg);

#endif
