/*
 * thread.h - starting the agent's own threads (the registration thread, the
 * recorder) so that they never disturb the application.
 */
#ifndef NPUSAN_AGENT_THREAD_H
#define NPUSAN_AGENT_THREAD_H

#include <pthread.h>

/*
 * Starts `fn(arg)` on a new thread with every signal blocked, so the
 * application's signals are never delivered to it, and returns only once
 * the thread runs: a fork() right after start-up then never copies a thread
 * half-way through its creation (whose allocator locks a child would
 * inherit held, under sanitizers that lack fork handlers). 0 or -errno
 * from pthread_create(3).
 */
int thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

#endif
