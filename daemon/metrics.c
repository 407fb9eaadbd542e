/*
 * metrics.c - the daemon's counters in the Prometheus text exposition
 * format, served on GET /metrics and written to a textfile for
 * node_exporter, so that a cluster's own Prometheus and Grafana watch
 * every node's npusand.
 *
 * HTTP comes from libmicrohttpd (Debian's libmicrohttpd-dev): a small,
 * long-maintained C library (GNU) that parses requests, bounds their
 * memory, times out idle connections and caps their number, so the daemon
 * carries no HTTP parser of its own facing the network.
 *
 * DESIGN
 *
 * 1. The loop never waits on SQLite or the disk for metrics: every
 *    METRICS_RENDER_MS its uv_timer queues one job on libuv's thread pool
 *    (none while the last one runs), which reads the store and ingest,
 *    renders the whole exposition into a fresh buffer and publishes it
 *    under `lock`. The HTTP server's thread
 *    (MHD_USE_INTERNAL_POLLING_THREAD) only copies the published string
 *    under that lock, so a scrape never touches SQLite or ingest and a
 *    slow scraper never holds the loop. Only at start and stop, when no
 *    job runs, does the loop render itself.
 * 2. The textfile is written by that job every METRICS_FILE_MS, and at
 *    stop: PATH.tmp in the same directory, fsync, rename over PATH, so a
 *    reader sees the old file or the new one, never half of one.
 * 3. Cardinality rule: a label's values must come from a closed set known
 *    at build time (finding kinds, process states, the version), never
 *    from what agents send (jobs, ranks, pids, operators, paths). Per-job
 *    or per-rank series are allowed only for jobs with a running process,
 *    at most a fixed number of them, and must disappear when the job
 *    ends; there are none yet. Everything else is aggregated per node.
 * 4. No client holds HTTP for long: at most METRICS_MAX_CONNS connections,
 *    METRICS_PER_IP_CONNS from one address, each idle at most
 *    METRICS_TIMEOUT_S, and each request (from the connection's start or
 *    its previous answer to the end of its answer) at most
 *    METRICS_REQUEST_MS, however slowly it trickles in: MHD's idle timeout
 *    alone keeps a client that sends a byte a second forever. `conns`
 *    lists the open connections (MHD's thread adds and removes them under
 *    `conns_lock`); the loop's timer shuts down those past their time,
 *    under the same lock, and MHD then closes them. MHD tells us a
 *    connection closed before it closes its descriptor, so the descriptor
 *    shut down is always that connection's.
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "clock.h"
#include "engine.h"
#include "log.h"
#include "paths.h"

#define METRICS_RENDER_MS 1000
#define METRICS_FILE_MS 2000
#define METRICS_MAX_CONNS 256       /* HTTP connections at once */
#define METRICS_PER_IP_CONNS 64     /* from one address: a quarter */
#define METRICS_TIMEOUT_S 10        /* an idle HTTP connection's life */
#define METRICS_REQUEST_MS 5000     /* a request's, however slow (DESIGN 4) */
#define METRICS_CONN_MEMORY 16384   /* a request's head must fit in this */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics {
	uv_timer_t timer; /* first: the close callback frees the struct */
	uv_work_t job;	  /* DESIGN 1: the render in flight, if `busy` */
	bool busy;	  /* loop thread's, as `stopping` */
	bool stopping;	  /* stopped while a job ran: its end closes */
	bool file_due;	  /* the job also writes the textfile */
	int file_err;	  /* the job's write: 0 or -errno */
	struct store *store;
	struct ingest *ingest;
	const char *version;
	uint64_t start_ns;
	char *textfile;
	int64_t file_due_ms; /* uv_now() when the textfile is next written */
	struct MHD_Daemon *mhd;
	pthread_mutex_t lock; /* guards text and len (DESIGN 1) */
	char *text;
	size_t len;
	pthread_mutex_t conns_lock; /* guards conns (DESIGN 4) */
	struct metrics_conn *conns;
};

/* An open HTTP connection (DESIGN 4); MHD's socket context. */
struct metrics_conn {
	struct metrics_conn *prev, *next;
	int fd;
	int64_t since_ms; /* start, or the end of its previous answer */
	bool cut;	  /* shut down; MHD closes it */
};

/* ---- the address ------------------------------------------------------- */

int metrics_parse_listen(const char *s, struct sockaddr_storage *out,
			 socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 1], *end;
	const char *colon;
	unsigned long port;
	size_t n;
	bool v6 = s[0] == '[';

	if (v6) {
		const char *rb = strchr(s, ']');

		if (rb == NULL || rb[1] != ':')
			return -EINVAL;
		n = (size_t)(rb - s - 1);
		if (n >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, n);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
			return -EINVAL;
		n = (size_t)(colon - s);
		memcpy(host, s, n);
	}
	host[n] = '\0';
	if (colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || errno != 0 || port == 0 || port > 65535)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		*len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)out;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		*len = sizeof(*a);
	}
	return 0;
}

/* ---- rendering --------------------------------------------------------- */

static void metrics_head(FILE *f, const char *name, const char *type,
			 const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* What ingest counts: findings, operations, rings. */
static void metrics_render_ingest(FILE *f, const struct ingest_stats *is)
{
	metrics_head(f, "npusan_findings_total", "counter",
		     "Findings detected since npusand started, every "
		     "occurrence counted (a repeat of a known finding too).");
	for (int k = 0; k < FINDING_KIND_COUNT; k++)
		fprintf(f, "npusan_findings_total{kind=\"%s\"} %" PRIu64 "\n",
			finding_kind_name((enum finding_kind)k),
			is->findings[k]);
	metrics_head(f, "npusan_findings_suppressed_total", "counter",
		     "Of npusan_findings_total, the occurrences a suppression "
		     "of npusand --suppressions matched (stored all the "
		     "same).");
	for (int k = 0; k < FINDING_KIND_COUNT; k++)
		fprintf(f, "npusan_findings_suppressed_total{kind=\"%s\"} %"
			   PRIu64 "\n",
			finding_kind_name((enum finding_kind)k),
			is->suppressed[k]);
	metrics_head(f, "npusan_operations_analysed_total", "counter",
		     "Stream operations analysed since npusand started.");
	fprintf(f, "npusan_operations_analysed_total %" PRIu64 "\n",
		is->events);
	metrics_head(f, "npusan_operations_lost_total", "counter",
		     "Stream operations lost (dropped by agents on full rings, "
		     "or left unfinished) since npusand started.");
	fprintf(f, "npusan_operations_lost_total %" PRIu64 "\n", is->lost);
	metrics_head(f, "npusan_ring_fill_ratio", "gauge",
		     "The fullest ring being drained, (head - tail) / capacity "
		     "after its latest drain round, 0 to 1.");
	fprintf(f, "npusan_ring_fill_ratio %.6f\n", is->ring_fill);
	metrics_head(f, "npusan_analysis_lag_seconds", "gauge",
		     "Over the rings being drained, the longest time since a "
		     "drain found the ring empty right after draining it; 0 "
		     "when every ring was empty at its latest drain.");
	fprintf(f, "npusan_analysis_lag_seconds %.3f\n", is->lag_s);
}

/* The store's writer: whether it commits, and what waits or was dropped. */
static void metrics_render_health(FILE *f, const struct store_health *sh)
{
	metrics_head(f, "npusan_store_commits_failing", "gauge",
		     "1 while the database takes no writes (a full disk, a "
		     "lock another program holds): writes wait in memory.");
	fprintf(f, "npusan_store_commits_failing %d\n", sh->failing ? 1 : 0);
	metrics_head(f, "npusan_store_writes_waiting", "gauge",
		     "Writes (findings, counters, registrations) waiting to "
		     "be committed to the database.");
	fprintf(f, "npusan_store_writes_waiting %" PRIu64 "\n", sh->queued);
	metrics_head(f, "npusan_store_findings_dropped_total", "counter",
		     "Finding occurrences dropped since npusand started "
		     "because too many waited for the database; their "
		     "operations are counted lost.");
	fprintf(f, "npusan_store_findings_dropped_total %" PRIu64 "\n",
		sh->findings_dropped);
}

/* What the database holds: processes by state, findings, its size. */
static void metrics_render_store(FILE *f, const struct store_stats *ss)
{
	metrics_head(f, "npusan_processes", "gauge",
		     "Processes in the database, by state (running: "
		     "being watched).");
	for (int s = 0; s < STORE_STATE_COUNT; s++)
		fprintf(f, "npusan_processes{state=\"%s\"} %" PRIu32 "\n",
			store_state_name((enum store_state)s),
			ss->processes[s]);
	metrics_head(f, "npusan_database_findings", "gauge",
		     "Distinct findings kept in the database.");
	fprintf(f, "npusan_database_findings %" PRIu64 "\n", ss->findings);
	metrics_head(f, "npusan_database_size_bytes", "gauge",
		     "Size of the SQLite database and its WAL.");
	fprintf(f, "npusan_database_size_bytes %" PRIu64 "\n", ss->db_bytes);
}

/* The exposition, as a malloc'd string in *out (length *len). The job's,
 * or the loop's when no job runs (DESIGN 1). 0; -ENOMEM. */
static int metrics_render(struct metrics *m, char **out, size_t *len)
{
	struct ingest_stats is;
	struct store_stats ss;
	struct store_health sh;
	bool have_store;
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	if (f == NULL)
		return -ENOMEM;
	ingest_get_stats(m->ingest, &is);
	store_get_health(m->store, &sh);
	have_store = store_stats(m->store, &ss) == 0;

	metrics_head(f, "npusan_build_info", "gauge",
		     "Always 1; the npusand version in the label.");
	fprintf(f, "npusan_build_info{version=\"%s\"} 1\n", m->version);
	metrics_head(f, "npusan_uptime_seconds", "gauge",
		     "Seconds since npusand started.");
	fprintf(f, "npusan_uptime_seconds %.3f\n",
		(double)(uv_hrtime() - m->start_ns) / 1e9);
	metrics_render_ingest(f, &is);
	metrics_render_health(f, &sh);
	if (have_store)
		metrics_render_store(f, &ss);
	if (fclose(f) != 0 || buf == NULL) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* Renders and publishes (DESIGN 1). */
static void metrics_refresh(struct metrics *m)
{
	char *text, *old;
	size_t len;

	if (metrics_render(m, &text, &len) < 0) {
		log_warn("metrics: out of memory rendering");
		return;
	}
	pthread_mutex_lock(&m->lock);
	old = m->text;
	m->text = text;
	m->len = len;
	pthread_mutex_unlock(&m->lock);
	free(old);
}

/* The published text into `fd`, all of it. 0; -errno. Only the thread
 * that renders replaces m->text, and only one renders at a time
 * (DESIGN 1): no lock needed to read it. */
static int metrics_write_all(struct metrics *m, int fd)
{
	size_t off = 0;
	ssize_t w;

	while (off < m->len) {
		w = write(fd, m->text + off, m->len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		off += (size_t)w;
	}
	return 0;
}

/* Writes the published text to the textfile (DESIGN 2): beside it and
 * renamed over it, or in place where it is a device or a FIFO
 * (paths_write_in_place()). 0; -errno. */
static int metrics_write_file(struct metrics *m)
{
	char tmp[PATH_MAX];
	bool in_place = paths_write_in_place(m->textfile);
	int fd, err;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", m->textfile) >=
	    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* Non-blocking in place: a FIFO without a reader is an error to log,
	 * never a render thread stuck in open(). */
	fd = in_place ? open(m->textfile, O_WRONLY | O_CLOEXEC | O_NONBLOCK) :
			open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
					  O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	err = metrics_write_all(m, fd);
	if (err == 0 && !in_place && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && err == 0)
		err = -errno;
	if (in_place)
		return err;
	if (err == 0 && rename(tmp, m->textfile) < 0)
		err = -errno;
	if (err < 0)
		unlink(tmp);
	return err;
}

/* Shuts down the connections past METRICS_REQUEST_MS (DESIGN 4). Loop
 * thread. */
static void metrics_cut_slow(struct metrics *m)
{
	/* Signed: MHD's thread may stamp a since_ms later than `now`. */
	int64_t now = (int64_t)clock_mono_ms();
	unsigned cut = 0;

	pthread_mutex_lock(&m->conns_lock);
	for (struct metrics_conn *c = m->conns; c != NULL; c = c->next) {
		if (c->cut || now - c->since_ms < METRICS_REQUEST_MS)
			continue;
		shutdown(c->fd, SHUT_RDWR);
		c->cut = true;
		cut++;
	}
	pthread_mutex_unlock(&m->conns_lock);
	if (cut > 0)
		log_debug("metrics: closed %u HTTP connections slower than "
			  "%d ms", cut, METRICS_REQUEST_MS);
}

/* On the pool (DESIGN 1): render, publish, and the textfile when due. */
static void metrics_job_cb(uv_work_t *w)
{
	struct metrics *m = w->data;

	metrics_refresh(m);
	m->file_err = m->file_due ? metrics_write_file(m) : 0;
}

static void metrics_close_cb(uv_handle_t *h);

/* The last render and textfile, then the close (metrics_stop()). */
static void metrics_close(struct metrics *m)
{
	int err;

	if (m->textfile != NULL) {
		metrics_refresh(m);
		err = metrics_write_file(m);
		if (err < 0)
			log_warn("metrics: cannot write %s: %s", m->textfile,
				 strerror(-err));
	}
	uv_close((uv_handle_t *)&m->timer, metrics_close_cb);
}

/* Back on the loop: the job is done; a stop that waited for it closes. */
static void metrics_job_done_cb(uv_work_t *w, int status)
{
	struct metrics *m = w->data;

	m->busy = false;
	if (status == 0 && m->file_err < 0)
		log_warn("metrics: cannot write %s: %s", m->textfile,
			 strerror(-m->file_err));
	if (m->stopping)
		metrics_close(m);
}

static void metrics_timer_cb(uv_timer_t *t)
{
	struct metrics *m = (struct metrics *)t;

	metrics_cut_slow(m);
	if (m->busy)
		return; /* a slow store: the next tick renders again */
	m->file_due = m->textfile != NULL &&
		      (int64_t)uv_now(t->loop) >= m->file_due_ms;
	if (m->file_due)
		m->file_due_ms = (int64_t)uv_now(t->loop) + METRICS_FILE_MS;
	m->job.data = m;
	if (uv_queue_work(t->loop, &m->job, metrics_job_cb,
			  metrics_job_done_cb) == 0)
		m->busy = true;
}

/* ---- HTTP -------------------------------------------------------------- */

static enum MHD_Result metrics_reply(struct MHD_Connection *c,
				     unsigned status, const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* MHD's thread: copies the published text (DESIGN 1). */
static enum MHD_Result metrics_request_cb(void *cls, struct MHD_Connection *c,
					  const char *url, const char *method,
					  const char *version,
					  const char *upload_data,
					  size_t *upload_data_size,
					  void **con_cls)
{
	struct metrics *m = cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char *copy;
	size_t len;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return metrics_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				     "only GET /metrics\n");
	if (strcmp(url, "/metrics") != 0)
		return metrics_reply(c, MHD_HTTP_NOT_FOUND,
				     "npusand serves /metrics only\n");
	pthread_mutex_lock(&m->lock);
	len = m->len;
	copy = malloc(len ? len : 1);
	if (copy != NULL)
		memcpy(copy, m->text, len);
	pthread_mutex_unlock(&m->lock);
	if (copy == NULL)
		return MHD_NO;
	r = MHD_create_response_from_buffer(len, copy, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(copy);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				METRICS_CONTENT_TYPE);
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

static void metrics_mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	log_debug("metrics: http: %s", line);
}

/* MHD opened or closed a connection (DESIGN 4). MHD's thread. */
static void metrics_conn_cb(void *cls, struct MHD_Connection *connection,
			    void **socket_context,
			    enum MHD_ConnectionNotificationCode toe)
{
	struct metrics *m = cls;
	struct metrics_conn *c = *socket_context;
	const union MHD_ConnectionInfo *info;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		info = MHD_get_connection_info(connection,
					       MHD_CONNECTION_INFO_CONNECTION_FD);
		c = calloc(1, sizeof(*c));
		if (c == NULL || info == NULL) {
			/* Untimed, but MHD's idle timeout still holds. */
			free(c);
			return;
		}
		c->fd = info->connect_fd;
		c->since_ms = (int64_t)clock_mono_ms();
		pthread_mutex_lock(&m->conns_lock);
		c->next = m->conns;
		if (m->conns != NULL)
			m->conns->prev = c;
		m->conns = c;
		pthread_mutex_unlock(&m->conns_lock);
		*socket_context = c;
		return;
	}
	if (c == NULL)
		return;
	pthread_mutex_lock(&m->conns_lock);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&m->conns_lock);
	free(c);
	*socket_context = NULL;
}

/* A request was answered: the connection's next one has its own time.
 * MHD's thread. */
static void metrics_completed_cb(void *cls, struct MHD_Connection *connection,
				 void **con_cls,
				 enum MHD_RequestTerminationCode toe)
{
	struct metrics *m = cls;
	const union MHD_ConnectionInfo *info = MHD_get_connection_info(
		connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct metrics_conn *c = info != NULL ? info->socket_context : NULL;

	(void)con_cls;
	(void)toe;
	if (c == NULL)
		return;
	pthread_mutex_lock(&m->conns_lock);
	c->since_ms = (int64_t)clock_mono_ms();
	pthread_mutex_unlock(&m->conns_lock);
}

static int metrics_listen(struct metrics *m, const char *addr)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	sigset_t all, old;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			 MHD_USE_ERROR_LOG;

	if (metrics_parse_listen(addr, &sa, &salen) < 0)
		return -EINVAL;
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* The loop thread handles signals; MHD's thread never does. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	m->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, metrics_request_cb, m,
		MHD_OPTION_EXTERNAL_LOGGER, metrics_mhd_log_cb, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT,
		(unsigned)METRICS_PER_IP_CONNS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT,
		(size_t)METRICS_CONN_MEMORY,
		MHD_OPTION_NOTIFY_CONNECTION, metrics_conn_cb, m,
		MHD_OPTION_NOTIFY_COMPLETED, metrics_completed_cb, m,
		MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (m->mhd == NULL) {
		/* MHD says why only through the logger: probe the usual. */
		int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int one = 1, err = -EIO;

		if (fd >= 0) {
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
				   sizeof(one));
			err = bind(fd, (struct sockaddr *)&sa, salen) < 0 ?
				      -errno : -EIO;
			close(fd);
		}
		return err;
	}
	return 0;
}

/* ---- the API ----------------------------------------------------------- */

static void metrics_free(struct metrics *m)
{
	assert(m->conns == NULL); /* MHD_stop_daemon() closed them */
	pthread_mutex_destroy(&m->conns_lock);
	pthread_mutex_destroy(&m->lock);
	free(m->text);
	free(m->textfile);
	free(m);
}

static void metrics_close_cb(uv_handle_t *h)
{
	metrics_free((struct metrics *)h);
}

int metrics_start(const struct metrics_opts *o, struct metrics **out)
{
	struct metrics *m = calloc(1, sizeof(*m));
	int err;

	if (m == NULL)
		return -ENOMEM;
	m->store = o->store;
	m->ingest = o->ingest;
	m->version = o->version;
	m->start_ns = o->start_ns;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->conns_lock, NULL);
	if (o->textfile != NULL && (m->textfile = strdup(o->textfile)) == NULL) {
		metrics_free(m);
		return -ENOMEM;
	}
	metrics_refresh(m);
	if (m->text == NULL) {
		metrics_free(m);
		return -ENOMEM;
	}
	if (m->textfile != NULL) {
		err = metrics_write_file(m);
		if (err < 0) {
			log_error("metrics: cannot write %s: %s", m->textfile,
				  strerror(-err));
			metrics_free(m);
			return err;
		}
	}
	if (o->listen != NULL) {
		err = metrics_listen(m, o->listen);
		if (err < 0) {
			log_error("metrics: cannot listen on %s: %s", o->listen,
				  strerror(-err));
			metrics_free(m);
			return err;
		}
		log_info("metrics on http://%s/metrics", o->listen);
	}
	uv_timer_init(o->loop, &m->timer);
	uv_unref((uv_handle_t *)&m->timer); /* never keeps the loop up */
	m->file_due_ms = (int64_t)uv_now(o->loop) + METRICS_FILE_MS;
	uv_timer_start(&m->timer, metrics_timer_cb, METRICS_RENDER_MS,
		       METRICS_RENDER_MS);
	*out = m;
	return 0;
}

void metrics_stop(struct metrics *m)
{
	if (m == NULL)
		return;
	if (m->mhd != NULL)
		MHD_stop_daemon(m->mhd);
	m->mhd = NULL;
	uv_timer_stop(&m->timer);
	if (m->busy) /* its end closes (metrics_job_done_cb()) */
		m->stopping = true;
	else
		metrics_close(m);
}
