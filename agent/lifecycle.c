/*
 * lifecycle.c - the agent's start-up from the environment (or
 * npusan_init()), npusan_wait_drained(), and what happens to the agent
 * across fork() and exit. The invariants are npusan.c's DESIGN (4 and 5
 * above all); the state they share is agentint.h's.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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
#include "live.h"
#include "register.h"

/* ---- start-up ---------------------------------------------------------- */

/* Creates the ring of `slot`, taking records of `attach`. 0 or -errno. */
static int agent_ring_new(int slot, uint32_t flags, int attach)
{
	struct ring *r;
	int err = ring_create(agentenv_ring_size(), flags, AGENT_BLOCK_TIMEOUT_MS,
			      &r);

	if (err < 0)
		return err;
	atomic_store_explicit(&agent.rings[slot].gen, agent_next_gen(),
			      memory_order_relaxed);
	atomic_store_explicit(&agent.rings[slot].attach, attach,
			      memory_order_relaxed);
	/* Release: pairs with the acquire load in agent_ring_get(); the
	 * generation and attach state above come first. */
	atomic_store_explicit(&agent.rings[slot].ring, r,
			      memory_order_release);
	return 0;
}

static int agent_start_daemon(void)
{
	struct register_cfg cfg = { 0 };
	struct ring *r;
	int err = agent_ring_new(AGENT_DAEMON, agentenv_ring_flags(),
				 agent.want_dormant ? AGENT_DETACHED :
						      AGENT_ATTACHED);

	if (err < 0)
		return err;
	r = agent_ring_get(AGENT_DAEMON);
	cfg.memfd = ring_fd(r);
	cfg.ring_size = r->capacity;
	cfg.ring_header_size = RING_HEADER_SIZE;
	cfg.ring_flags = r->flags;
	cfg.dormant = agent.want_dormant;
	cfg.event_cb = agent__register_cb;
	err = register_start(&cfg);
	if (err < 0) {
		/* Nobody could ever drain it: no ring rather than one that
		 * only costs time. No thread has seen it yet. */
		atomic_store_explicit(&agent.rings[AGENT_DAEMON].ring, NULL,
				      memory_order_relaxed);
		ring_destroy(r);
		agent_log("cannot register with the daemon: %s",
			  strerror(-err));
	}
	return err;
}

static int agent_start_recorder(const char *tmpl, bool child)
{
	struct trace_process proc = { .present = true };
	struct identity id;
	char path[PATH_MAX], exe[PATH_MAX];
	ssize_t n;
	int err;

	if (!agentenv_record_path(tmpl, child, path, sizeof(path)))
		return child ? 0 : -ENAMETOOLONG;
	err = agent_ring_new(AGENT_RECORDER, RING_F_BLOCK, AGENT_ATTACHED);
	if (err < 0)
		return err;
	identity_from_env(&id);
	proc.pid = (uint64_t)getpid();
	proc.job = id.job;
	proc.has_rank = id.has_rank;
	proc.rank = id.rank;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		proc.name = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	}
	err = recorder_start(path, agent_ring_get(AGENT_RECORDER), &proc,
			     &agent.recorder);
	if (err < 0)
		agent_log("NPUSAN_RECORD: cannot record to %s: %s",
			  path, strerror(-err));
	return err;
}

static void agent_atfork_prepare(void);
static void agent_atfork_parent(void);
static void agent_atfork_child(void);

/*
 * Under agent_lock: creates the rings the environment asks for (the
 * daemon's when `daemon`), starts registration and recording, and turns the
 * agent on. 0, or a negative errno with the agent left off.
 */
static int agent_start(bool daemon, bool child)
{
	const char *record = getenv("NPUSAN_RECORD");
	int err = 0;

	if (stack_config_from_env(&agent.stacks) < 0) {
		agent_log("NPUSAN_STACKS or NPUSAN_STACK_METHOD not "
			  "understood; native stacks are off");
		agent.stacks.depth = 0;
	}
	if (agent.stacks.depth > 0)
		stack_prepare(agent.stacks.method);
	if (!agent.atfork_done &&
	    pthread_atfork(agent_atfork_prepare, agent_atfork_parent,
			   agent_atfork_child) == 0)
		agent.atfork_done = true;
	if (daemon)
		err = agent_start_daemon();
	if (record != NULL && *record != '\0') {
		int rerr = agent_start_recorder(record, child);

		err = err < 0 ? err : rerr;
	}
	agent__route();
	/* Release: pairs with the acquire loads in agent_on() and
	 * agent_live(). */
	if (agent_ring_get(AGENT_RECORDER) != NULL ||
	    (agent_ring_get(AGENT_DAEMON) != NULL &&
	     agent_attach_load(AGENT_DAEMON) == AGENT_ATTACHED))
		agent_state_store(AGENT_ON, __ATOMIC_RELEASE);
	else if (agent_ring_get(AGENT_DAEMON) != NULL)
		agent_state_store(AGENT_DORMANT, __ATOMIC_RELEASE);
	return err;
}

/* In a forked child, on its first call: start again with new rings.
 * Returns the state it leaves. */
int agent__wake(void)
{
	pthread_mutex_lock(&agent_lock);
	if (agent_state_load(__ATOMIC_RELAXED) == AGENT_FORKED) {
		agent_state_store(AGENT_OFF, __ATOMIC_RELAXED);
		(void)agent_start(agent.want_daemon, true);
	}
	pthread_mutex_unlock(&agent_lock);
	return agent_state_load(__ATOMIC_ACQUIRE);
}

static bool agent_env_says(const char *want)
{
	const char *v = getenv("NPUSAN");

	return v != NULL && strcmp(v, want) == 0;
}

NPUSAN_EXPORT int npusan_init(void)
{
	int err = 0;

	if (agent_env_says("0"))
		return 0;
	pthread_mutex_lock(&agent_lock);
	agent.want_daemon = true;
	switch (agent_state_load(__ATOMIC_RELAXED)) {
	case AGENT_OFF:
		agent.want_dormant = agent_env_says("dormant");
		err = agent_start(true, false);
		break;
	case AGENT_ON:
		if (agent_ring_get(AGENT_DAEMON) == NULL) {
			err = agent_start_daemon();
			agent__route();
		}
		break;
	case AGENT_DORMANT: /* NPUSAN=dormant: an attach decides */
		break;
	default: /* AGENT_FORKED: the first call starts it */
		break;
	}
	pthread_mutex_unlock(&agent_lock);
	return err;
}

/* Whether a ring's consumer has taken everything pushed to it so far. */
static bool agent_drained(const struct ring *r)
{
	/* Acquire: pairs with the consumer's release store of tail. */
	return ring_load_acquire(&r->hdr->tail) ==
	       ring_load_relaxed(&r->hdr->head);
}

/*
 * Nobody will take what `r` holds: no consumer ever beat on it and, for the
 * daemon's ring, no registration is in flight and no daemon has the ring.
 * A daemon that accepted the ring has not always beaten on it yet: that is
 * a wait, not an orphan. `pending` is read before `connected`, as the reply
 * stores them in the other order (register_pending()).
 */
static bool agent_ring_orphan(int slot, struct ring *r)
{
	/* Relaxed: the beat only tells whether a consumer ever was. */
	if (ring_load_relaxed(&r->hdr->beat) != 0)
		return false;
	return slot != AGENT_DAEMON ||
	       (!register_pending() && !register_connected());
}

/*
 * npusan_wait_drained() for one ring: 0; -ENOTCONN when nobody ever
 * drained it and nobody is about to; -ETIMEDOUT. Waits until it is
 * drained and, for the daemon's ring, the process is registered. A
 * registration in flight is waited for even when nothing was pushed: a
 * process that sent no operation must still be known to the daemon before
 * it exits, or its job looks as if it never ran instead of "registered,
 * nothing analysed". A daemon that is gone takes nothing: wait for the
 * next one to register, and for what its registration pushed.
 */
static int agent_wait_ring(int slot, unsigned timeout_ms)
{
	struct timespec nap = { 0, 1000000 };
	struct ring *r = agent_ring_get(slot);

	if (r == NULL)
		return 0;
	for (unsigned ms = 0; !agent_drained(r) ||
			      (slot == AGENT_DAEMON && !register_connected());
	     ms++) {
		if (agent_ring_orphan(slot, r))
			return agent_drained(r) ? 0 : -ENOTCONN;
		if (ms >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
	return 0;
}

NPUSAN_EXPORT int npusan_wait_drained(unsigned timeout_ms)
{
	int err = 0, rc;

	if (!agent_on())
		return 0;
	/* Every ring, also when one has no consumer: a recording is written
	 * whether or not a daemon listens. The first error is the answer. */
	for (int slot = 0; slot < INTERN_RINGS; slot++) {
		rc = agent_wait_ring(slot, timeout_ms);
		if (err == 0)
			err = rc;
	}
	/* Taken by the recorder is written only once its batch is. Under
	 * agent_lock, which agent_dtor() holds while it frees the recorder;
	 * the order agent_lock, then the recorder's own, is fork's too. */
	pthread_mutex_lock(&agent_lock);
	recorder_settle(agent.recorder);
	pthread_mutex_unlock(&agent_lock);
	return err;
}

/* ---- fork and exit ----------------------------------------------------- */

/* Lock order: the registration thread's step, agent_lock,
 * agent_attach_lock, then the modules' own, as that thread takes the step
 * lock and then the last two. */
static void agent_atfork_prepare(void)
{
	register_atfork_prepare();
	pthread_mutex_lock(&agent_lock);
	pthread_mutex_lock(&agent_attach_lock);
	intern_atfork_prepare();
	recorder_atfork_prepare(agent.recorder);
	live_atfork_prepare();
}

static void agent_atfork_parent(void)
{
	live_atfork_parent();
	recorder_atfork_parent(agent.recorder);
	intern_atfork_parent();
	pthread_mutex_unlock(&agent_attach_lock);
	pthread_mutex_unlock(&agent_lock);
	register_atfork_release();
}

/* The child has one thread, this one: drop the parent's rings (no other
 * thread can be pushing into them here), its registration and its
 * recorder. */
static void agent_atfork_child(void)
{
	int s = agent_state_load(__ATOMIC_RELAXED);

	live_atfork_child();
	intern_atfork_child();
	if (s == AGENT_ON || s == AGENT_DORMANT) {
		/* The child is analysed as its parent was at the fork. */
		if (agent_ring_get(AGENT_DAEMON) != NULL)
			agent.want_dormant = agent_attach_load(AGENT_DAEMON) !=
					     AGENT_ATTACHED;
		register_atfork_child();
		recorder_atfork_child(agent.recorder);
		agent.recorder = NULL;
		atomic_store_explicit(&agent.solo, NULL,
				      memory_order_relaxed);
		for (int slot = 0; slot < INTERN_RINGS; slot++) {
			ring_destroy(agent_ring_get(slot));
			atomic_store_explicit(&agent.rings[slot].ring, NULL,
					      memory_order_relaxed);
		}
		agent_state_store(AGENT_FORKED, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&agent_attach_lock);
	pthread_mutex_unlock(&agent_lock);
	register_atfork_release();
}

__attribute__((constructor)) static void agent_ctor(void)
{
	const char *record = getenv("NPUSAN_RECORD");
	const char *v = getenv("NPUSAN");
	int err;

	bool daemon = agent_env_says("1") || agent_env_says("dormant");

	if (v != NULL && *v != '\0' && strcmp(v, "0") != 0 && !daemon)
		agent_log("NPUSAN=%s not understood (0, 1 or "
			  "dormant); the agent stays off", v);
	if (!daemon && (record == NULL || *record == '\0'))
		return;
	if (agent_env_says("0"))
		return;
	pthread_mutex_lock(&agent_lock);
	agent.want_daemon = daemon;
	agent.want_dormant = agent_env_says("dormant");
	err = agent_start(agent.want_daemon, false);
	pthread_mutex_unlock(&agent_lock);
	if (err < 0)
		agent_log("the agent could not start: %s; the job "
			  "runs without it", strerror(-err));
}

/*
 * At exit the recorder writes what is left. The rings stay mapped for
 * threads still pushing (DESIGN 4); the daemon drains its own mapping.
 */
__attribute__((destructor)) static void agent_dtor(void)
{
	struct ring *r;

	pthread_mutex_lock(&agent_lock);
	if (agent.recorder != NULL) {
		recorder_stop(agent.recorder);
		agent.recorder = NULL;
		/* No consumer any more: a thread still pushing must not wait
		 * for one. Relaxed: a hint, as in ring__consumer_alive(). */
		r = agent_ring_get(AGENT_RECORDER);
		ring_store_relaxed(&r->stalled_beat,
				   ring_load_relaxed(&r->hdr->beat));
	}
	pthread_mutex_unlock(&agent_lock);
}
