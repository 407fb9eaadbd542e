/*
 * thread.c - a thread start that blocks signals and waits for the thread.
 */
#include "thread.h"

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>

struct thread_boot {
	void *(*fn)(void *);
	void *arg;
	_Atomic int running;
};

static void *thread_main(void *p)
{
	struct thread_boot *boot = p;
	void *(*fn)(void *) = boot->fn;
	void *arg = boot->arg;

	/* Release: pairs with the acquire load in thread_start(); after it
	 * the creator's `boot` is gone, so it is read before. */
	atomic_store_explicit(&boot->running, 1, memory_order_release);
	return fn(arg);
}

int thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	struct thread_boot boot = { .fn = fn, .arg = arg };
	sigset_t all, old;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(thread, NULL, thread_main, &boot);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0)
		return -err;
	/* Acquire: pairs with the release store in thread_main(). */
	while (!atomic_load_explicit(&boot.running, memory_order_acquire))
		sched_yield();
	return 0;
}
