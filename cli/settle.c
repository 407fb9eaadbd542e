/*
 * settle.c - a query about a job waits for what its exited processes left.
 *
 * A process's last operations reach the store a little after it exits:
 * the daemon notices its agent's connection close, finds the process gone,
 * drains what the ring still holds, and its writer commits the findings
 * and marks the process exited. A query in between would say "clean" of a
 * job whose race is one drain away. So before such a query the process
 * list is polled until every process that is gone here (procstat_gone(),
 * the daemon's own test) shows exited there.
 *
 * A process of another host (its hostname is not ours) cannot be checked
 * and is not waited for; neither is a process still running, whose
 * analysis goes on by design.
 */
#include "settle.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "procstat.h"

#define SETTLE_NAP_MS 20

struct settle {
	const char *job;
	int64_t since_ms;
	char host[256];
	size_t pending; /* gone here, not exited there */
};

/* Whether the daemon's process `p` is ours to check and gone, unstored. */
static bool settle_pending(const struct settle *s, const Npusan__Process *p)
{
	if (p->state == NULL || strcmp(p->state, "exited") == 0 ||
	    !p->has_pid || p->pid == 0)
		return false;
	if (s->job != NULL && (p->job == NULL || strcmp(p->job, s->job) != 0))
		return false;
	if (s->since_ms != 0 && p->has_last_ms && p->last_ms < s->since_ms)
		return false;
	if (p->hostname != NULL && p->hostname[0] != '\0' &&
	    strcmp(p->hostname, s->host) != 0)
		return false;
	return procstat_gone((pid_t)p->pid,
			     p->has_start_time ? p->start_time : 0);
}

static int settle_list_cb(void *arg, Npusan__FromDaemon *m)
{
	struct settle *s = arg;
	const Npusan__ListReply *lr = m->list;
	bool done;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_LIST) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -EBADMSG;
	}
	for (size_t i = 0; i < lr->n_processes; i++)
		s->pending += settle_pending(s, lr->processes[i]);
	done = lr->has_done && lr->done;
	npusan__from_daemon__free_unpacked(m, NULL);
	return done ? CLIENT_DONE : CLIENT_MORE;
}

static void settle_nap(void)
{
	struct timespec ts = { 0, SETTLE_NAP_MS * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int settle_wait(const struct client_opts *co, const char *cmd,
		const char *job, uint32_t pid, int64_t since_ms,
		int timeout_ms, size_t *left)
{
	Npusan__ListRequest req = NPUSAN__LIST_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;
	struct settle s = { .job = job, .since_ms = since_ms };
	int64_t deadline = client_mono_ms() + timeout_ms;
	int status;

	if (gethostname(s.host, sizeof(s.host) - 1) < 0)
		s.host[0] = '\0';
	req.job = (char *)job;
	req.has_pid = pid != 0;
	req.pid = pid;
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &req;
	for (;;) {
		s.pending = 0;
		status = client_query(co, cmd, &q, settle_list_cb, &s);
		if (status != CLI_OK || s.pending == 0)
			break;
		if (client_mono_ms() >= deadline) {
			fprintf(stderr, "%s: %zu process%s that exited %s not "
					"been stored by the daemon after %g s: "
					"what follows may be incomplete\n",
				cmd, s.pending, s.pending == 1 ? "" : "es",
				s.pending == 1 ? "has" : "have",
				timeout_ms / 1000.0);
			break;
		}
		settle_nap();
	}
	*left = status == CLI_OK ? s.pending : 0;
	return status;
}
