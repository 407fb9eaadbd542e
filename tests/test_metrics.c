/*
 * test_metrics.c - npusand's Prometheus metrics as a scraper sees them: the
 * real daemon with --metrics-listen on a free local port and
 * --metrics-textfile, scraped over plain HTTP/1.1 sockets before and after
 * a replay of examples/demo.trace, checked with promtool (`test_metrics
 * promtool`, a skip where it is not installed), and fed requests that are malformed, oversized or never finished.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

struct daemon {
	struct tu_daemon t;
	char prom[PATH_MAX];
	char listen[64];
	unsigned port;
	pid_t pid;
};

/* A port nobody listens on now: the kernel's pick for port 0. */
static unsigned free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* The loopback address the next connections come from; NULL: 127.0.0.1.
 * Another one is another scraper to npusand's limit per address. */
static const char *http_from;

/* A connected socket to the metrics port, or -1. */
static int http_connect(unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct timeval tv = { 10, 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (http_from != NULL) {
		struct sockaddr_in from = { .sin_family = AF_INET };

		ck_assert_int_eq(inet_pton(AF_INET, http_from,
					   &from.sin_addr), 1);
		ck_assert_int_eq(bind(fd, (struct sockaddr *)&from,
				      sizeof(from)), 0);
	}
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * Sends `req` (len bytes) and reads the reply to EOF. The status code, or
 * -1 when the connection failed or closed without a status line; the whole
 * reply in *out when out is not NULL (caller frees).
 */
static int http_raw(unsigned port, const char *req, size_t len, char **out)
{
	size_t n = 0, cap = 65536, off = 0;
	char *buf = malloc(cap);
	int fd = http_connect(port), status = -1;
	ssize_t r;

	ck_assert_ptr_nonnull(buf);
	if (fd >= 0) {
		while (off < len) {
			r = send(fd, req + off, len - off, MSG_NOSIGNAL);
			if (r <= 0)
				break; /* the server may stop reading: fine */
			off += (size_t)r;
		}
		while ((r = recv(fd, buf + n, cap - n - 1, 0)) > 0) {
			n += (size_t)r;
			if (n + 1 == cap) {
				cap *= 2;
				buf = realloc(buf, cap);
				ck_assert_ptr_nonnull(buf);
			}
		}
		close(fd);
	}
	buf[n] = '\0';
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
		status = -1;
	if (out != NULL)
		*out = buf;
	else
		free(buf);
	return status;
}

/* GET `path`; the status, the body in *body (caller frees). */
static int http_get(unsigned port, const char *path, char **body)
{
	char req[256], *all, *b;
	int st;

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n"
		 "Connection: close\r\n\r\n", path);
	st = http_raw(port, req, strlen(req), &all);
	b = strstr(all, "\r\n\r\n");
	*body = strdup(b ? b + 4 : "");
	if (st == 200)
		ck_assert_msg(strstr(all, "Content-Type: text/plain; "
				     "version=0.0.4") != NULL, "%s", all);
	free(all);
	return st;
}

/* The value of the sample `series` (name and labels, as exposed), or -1. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = text; l && *l; l = strchr(l, '\n')) {
		if (*l == '\n')
			l++;
		if (strncmp(l, series, n) == 0 && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	}
	return -1;
}

static char *scrape(const struct daemon *d)
{
	char *body;

	ck_assert_int_eq(http_get(d->port, "/metrics", &body), 200);
	return body;
}

/* Starts npusand with its metrics port and textfile; with `fifo` >= 0
 * the textfile is a FIFO, whose reading end (non-blocking) goes into
 * *fifo. */
static void daemon_start_fifo(struct daemon *d, int *fifo)
{
	const char *args[5] = { "--metrics-listen", d->listen,
				"--metrics-textfile", d->prom, NULL };
	int fd;

	tu_daemon_init(&d->t);
	snprintf(d->prom, sizeof(d->prom), "%s/npusan.prom", d->t.dir);
	if (fifo != NULL) {
		ck_assert_int_eq(mkfifo(d->prom, 0600), 0);
		*fifo = open(d->prom, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		ck_assert_int_ge(*fifo, 0);
	}
	d->port = free_port();
	snprintf(d->listen, sizeof(d->listen), "127.0.0.1:%u", d->port);
	tu_daemon_start(&d->t, args);
	/* The metrics port opens after the socket: wait for it too. */
	for (int i = 0; i < 1000 && (fd = http_connect(d->port)) < 0; i++)
		tu_nap_ms(10);
	ck_assert_msg(fd >= 0, "npusand's metrics port did not open");
	close(fd);
}

static void daemon_start(struct daemon *d)
{
	daemon_start_fifo(d, NULL);
}

/* Stops the daemon; its directory stays, for the caller to look in and
 * free. */
static int daemon_stop_keep(struct daemon *d)
{
	return tu_daemon_stop(&d->t, SIGTERM);
}

static int daemon_stop(struct daemon *d)
{
	int status = daemon_stop_keep(d);

	free(d->t.dir);
	return status;
}

/* promtool on PATH, or NULL. Static storage. */
static const char *promtool(void)
{
	static char path[PATH_MAX];
	const char *p = getenv("PATH");

	while (p != NULL && *p != '\0') {
		size_t n = strcspn(p, ":");

		snprintf(path, sizeof(path), "%.*s/promtool", (int)n, p);
		if (access(path, X_OK) == 0)
			return path;
		p += n + (p[n] == ':');
	}
	return NULL;
}

static void check_with_promtool(const char *text)
{
	const char *tool = promtool();
	char *out = NULL, *err = NULL;
	const char *argv[] = { tool, "check", "metrics", NULL };
	int st;

	ck_assert_ptr_nonnull(tool); /* main() skips without it */
	st = tu_run(argv, text, &out, &err);
	ck_assert_msg(st == 0 && (out == NULL || out[0] == '\0'),
		      "promtool check metrics: %d\n%s%s", st, out ? out : "",
		      err ? err : "");
	free(out);
	free(err);
}

/* demo.trace as ranks 0 to n - 1, each its own process, replayed at
 * `rate` operations/s each (0: as fast as possible); returns the
 * replay's pid, running. */
static pid_t replay_demo_ranks(unsigned n, const char *rate)
{
	char path[PATH_MAX], name[32], *text, *traces[8] = { NULL };
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	const char *argv[12];
	unsigned a = 0;
	FILE *f;
	long len;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = calloc(1, (size_t)len + 1);
	ck_assert_int_eq(fread(text, 1, (size_t)len, f), len);
	fclose(f);
	argv[a++] = rep;
	if (rate != NULL) {
		argv[a++] = "--rate";
		argv[a++] = rate;
	}
	for (unsigned r = 0; r < n && r < 8; r++) {
		strstr(text, "rank=")[5] = (char)('0' + r);
		snprintf(name, sizeof(name), "rank%u.trace", r);
		traces[r] = tu_write_file(name, text);
		argv[a++] = traces[r];
	}
	argv[a] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execv(rep, (char *const *)argv);
		_exit(127);
	}
	for (unsigned r = 0; r < 8; r++)
		free(traces[r]);
	free(text);
	free(rep);
	return pid;
}

static int replay_wait(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int replay_demo(void)
{
	return replay_wait(replay_demo_ranks(1, NULL));
}

/* A 4-rank replay of demo.trace (29 operations each, a data race and a
 * missing record_stream each), paced to last a few seconds: scrapes while
 * it runs see the counters rise, and at the end they hold every rank. */
START_TEST(metrics_scrape_rises_with_replay)
{
	struct daemon d;
	char *before, *after = NULL;
	double seen[3] = { -1, -1, -1 }, v;
	unsigned distinct = 0;
	pid_t rep;

	daemon_start(&d);
	before = scrape(&d);
	ck_assert_msg(sample(before, "npusan_findings_total{kind=\"data_race\"}")
			      == 0, "%s", before);
	ck_assert(sample(before, "npusan_operations_analysed_total") == 0);
	ck_assert(sample(before, "npusan_build_info{version=\"" NPUSAN_TEST_VERSION
			 "\"}") == 1);
	rep = replay_demo_ranks(4, "10");
	/* Rendered every second; the replay takes about three. */
	for (int i = 0; i < 100 && distinct < 3; i++) {
		free(after);
		after = scrape(&d);
		v = sample(after, "npusan_operations_analysed_total");
		if (v > 0 && v < 116 && (distinct == 0 || v > seen[distinct - 1]))
			seen[distinct++] = v;
		tu_nap_ms(100);
	}
	ck_assert_msg(distinct >= 2, "no rise seen while the replay ran");
	ck_assert_int_eq(replay_wait(rep), 0);
	for (int i = 0; i < 100; i++) {
		free(after);
		after = scrape(&d);
		if (sample(after, "npusan_operations_analysed_total") >= 116 &&
		    sample(after, "npusan_processes{state=\"exited\"}") == 4)
			break;
		tu_nap_ms(100);
	}
	ck_assert_msg(sample(after, "npusan_findings_total{kind=\"data_race\"}")
			      >= 4, "%s", after);
	ck_assert(sample(after, "npusan_findings_total{kind=\""
			 "missing_record_stream\"}") >= 4);
	/* Every kind has its series, at 0 until one is found: a graph
	 * mistake shows as a rate from its first occurrence. */
	ck_assert(sample(after, "npusan_findings_total{kind=\""
			 "stale_graph_address\"}") == 0);
	ck_assert(sample(after, "npusan_findings_total{kind=\""
			 "unjoined_capture\"}") == 0);
	ck_assert_msg(sample(after, "npusan_operations_analysed_total") == 116,
		      "%s", after);
	ck_assert(sample(after, "npusan_operations_lost_total") == 0);
	ck_assert(sample(after, "npusan_processes{state=\"running\"}") == 0);
	ck_assert(sample(after, "npusan_database_findings") == 8);
	ck_assert(sample(after, "npusan_database_size_bytes") > 0);
	ck_assert(sample(after, "npusan_ring_fill_ratio") >= 0);
	ck_assert(sample(after, "npusan_analysis_lag_seconds") >= 0);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop(&d)), 0);
	free(before);
	free(after);
}
END_TEST

/* The exposition as Prometheus's own checker reads it: before any process,
 * and with a replay's findings, processes and rings in it. */
START_TEST(metrics_exposition_passes_promtool)
{
	struct daemon d;
	char *text;

	daemon_start(&d);
	text = scrape(&d);
	check_with_promtool(text);
	ck_assert_int_eq(replay_demo(), 0);
	for (int i = 0; i < 100; i++) {
		free(text);
		text = scrape(&d);
		if (sample(text, "npusan_processes{state=\"exited\"}") == 1)
			break;
		tu_nap_ms(100);
	}
	ck_assert_msg(sample(text, "npusan_findings_total{kind=\"data_race\"}")
			      >= 1, "%s", text);
	check_with_promtool(text);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop(&d)), 0);
	free(text);
}
END_TEST

START_TEST(metrics_other_paths_and_methods_refused)
{
	struct daemon d;
	char *body, *all;
	const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\n"
			    "Content-Length: 3\r\nConnection: close\r\n\r\nabc";

	daemon_start(&d);
	ck_assert_int_eq(http_get(d.port, "/", &body), 404);
	free(body);
	ck_assert_int_eq(http_get(d.port, "/metrics/x", &body), 404);
	free(body);
	ck_assert_int_eq(http_raw(d.port, post, strlen(post), &all), 405);
	ck_assert_ptr_nonnull(strstr(all, "Allow: GET"));
	free(all);
	daemon_stop(&d);
}
END_TEST

/* Whole: the first metric first, the last one last, a newline at the end. */
static bool textfile_whole(const char *t, size_t n)
{
	return n > 0 && t[n - 1] == '\n' && strlen(t) == n &&
	       strncmp(t, "# HELP npusan_build_info ", 25) == 0 &&
	       strstr(t, "\nnpusan_database_size_bytes ") != NULL;
}

static char *slurp(const char *path, size_t *len, ino_t *ino)
{
	struct stat st;
	char *buf;
	FILE *f = fopen(path, "rb");
	size_t n;

	if (f == NULL)
		return NULL;
	fstat(fileno(f), &st);
	*ino = st.st_ino;
	buf = malloc((size_t)st.st_size + 65536);
	n = fread(buf, 1, (size_t)st.st_size + 65535, f);
	buf[n] = '\0';
	fclose(f);
	*len = n;
	return buf;
}

/* Read in a loop across several rewrites: every read is a whole file. */
START_TEST(metrics_textfile_never_half_written)
{
	struct daemon d;
	char *t, tmp[PATH_MAX + 8];
	size_t n, reads = 0;
	ino_t ino, first = 0;
	unsigned rewrites = 0;
	struct timespec t0, now;

	/* The check itself tells a cut file from a whole one. */
	ck_assert(textfile_whole("# HELP npusan_build_info x\n"
				 "npusan_database_size_bytes 1\n", 56));
	ck_assert(!textfile_whole("# HELP npusan_build_info x\n"
				  "npusan_database_size_bytes 1", 55));
	ck_assert(!textfile_whole("# HELP npusan_build_info x\nnpusan_d", 35));

	daemon_start(&d);
	ck_assert_int_eq(replay_demo(), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		t = slurp(d.prom, &n, &ino);
		ck_assert_msg(t != NULL, "%s: %s", d.prom, strerror(errno));
		ck_assert_msg(textfile_whole(t, n), "read %zu: %zu bytes:\n%s",
			      reads, n, t);
		free(t);
		if (first == 0)
			first = ino;
		else if (ino != first) {
			rewrites++;
			first = ino;
		}
		reads++;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < 5);
	ck_assert_msg(rewrites >= 2, "%u rewrites in 5 s", rewrites);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop(&d)), 0);
	/* The last one, written at exit, counts the whole replay. */
	t = slurp(d.prom, &n, &ino);
	ck_assert(textfile_whole(t, n));
	ck_assert_msg(sample(t, "npusan_operations_analysed_total") == 29,
		      "%s", t);
	free(t);
	snprintf(tmp, sizeof(tmp), "%s.tmp", d.prom);
	ck_assert_int_eq(access(tmp, F_OK), -1);
	fprintf(stderr, "test_metrics: %zu whole reads, %u rewrites\n", reads,
		rewrites);
}
END_TEST

/*
 * A textfile that is a FIFO (a collector reading a pipe) is written in
 * place: renaming a fresh file over it would replace the FIFO, as it once
 * replaced /dev/null.
 */
START_TEST(metrics_textfile_fifo_stays_a_fifo)
{
	struct daemon d;
	char buf[1 << 16] = "", tmp[PATH_MAX + 8];
	size_t got = 0;
	struct stat st;
	int fifo;

	daemon_start_fifo(&d, &fifo);
	for (int i = 0; i < 500 && !strstr(buf, "npusan_build_info"); i++) {
		ssize_t n = read(fifo, buf + got, sizeof(buf) - 1 - got);

		if (n > 0)
			got += (size_t)n;
		buf[got] = '\0';
		if (got == sizeof(buf) - 1)
			got = 0;
		tu_nap_ms(10);
	}
	ck_assert_msg(strstr(buf, "npusan_build_info") != NULL,
		      "nothing came through the FIFO: '%s'", buf);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop_keep(&d)), 0);
	ck_assert_int_eq(lstat(d.prom, &st), 0);
	ck_assert_msg(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	snprintf(tmp, sizeof(tmp), "%s.tmp", d.prom);
	ck_assert_int_eq(access(tmp, F_OK), -1);
	close(fifo);
	free(d.t.dir);
}
END_TEST

static int ctl_stats(void)
{
	char *bin = strdup(tu_bin("npusanctl"));
	const char *argv[] = { bin, "stats", NULL };
	int st = tu_run(argv, NULL, NULL, NULL);

	free(bin);
	return st;
}

#define IDLE_CONNS 200

/* Malformed, oversized and idle requests leave both sockets serving. */
START_TEST(metrics_bad_requests_leave_daemon_serving)
{
	static const char bad[] = "\x01\x02 nonsense\r\n\r\n";
	static const char nohttp[] = "GET /metrics SPDY/9\r\n\r\n";
	size_t big_len = (size_t)1 << 20;
	char *big = malloc(big_len + 64), *body;
	int idle[IDLE_CONNS], st;
	struct daemon d;

	daemon_start(&d);
	st = http_raw(d.port, bad, sizeof(bad) - 1, NULL);
	ck_assert_msg(st == -1 || st == 400, "%d", st);
	st = http_raw(d.port, nohttp, sizeof(nohttp) - 1, NULL);
	ck_assert_msg(st == -1 || (st >= 400 && st < 600), "%d", st);
	/* A 1 MB header line. */
	ck_assert_ptr_nonnull(big);
	strcpy(big, "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(big + strlen(big), 'a', big_len);
	strcpy(big + big_len - 4, "\r\n\r\n");
	st = http_raw(d.port, big, big_len, NULL);
	ck_assert_msg(st == -1 || st == 431 || st == 413 || st == 400, "%d",
		      st);
	ck_assert_int_eq(http_get(d.port, "/metrics", &body), 200);
	free(body);
	/* Idle connections, some with half a request. */
	for (int i = 0; i < IDLE_CONNS; i++) {
		idle[i] = http_connect(d.port);
		ck_assert_int_ge(idle[i], 0);
		if (i % 2)
			send(idle[i], "GET /met", 8, MSG_NOSIGNAL);
	}
	/* Another scraper: one address holds at most a quarter. */
	http_from = "127.0.0.2";
	ck_assert_int_eq(http_get(d.port, "/metrics", &body), 200);
	http_from = NULL;
	ck_assert(sample(body, "npusan_uptime_seconds") >= 0);
	free(body);
	ck_assert_int_eq(ctl_stats(), 0);
	for (int i = 0; i < IDLE_CONNS; i++)
		close(idle[i]);
	/* Served again from that address once MHD has seen them close. */
	for (int i = 0; i < 50 && (st = http_get(d.port, "/metrics", &body)) !=
					  200;
	     i++) {
		free(body);
		tu_nap_ms(100);
	}
	ck_assert_int_eq(st, 200);
	free(body);
	ck_assert_int_eq(ctl_stats(), 0);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop(&d)), 0);
	free(big);
}
END_TEST

/* Whether the server closed `fd` (EOF, or a reset) without waiting. */
static bool http_closed(int fd)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

#define SLOW_CONNS 70  /* past npusand's 64 from one address */
#define SLOW_LIMIT_S 5 /* its time for a request, however slow */

/*
 * Issue 12: /metrics was down under 260 connections that each sent a byte
 * every 2 s: MHD's idle timeout never fired. One address now holds at most
 * 64 connections, and a request's time is bounded however it trickles.
 */
START_TEST(metrics_slow_clients_are_cut)
{
	static const char slow_head[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
	int fds[SLOW_CONNS], open_now = 0, refused = 0;
	struct daemon d;
	char *body;

	daemon_start(&d);
	for (int i = 0; i < SLOW_CONNS; i++) {
		fds[i] = http_connect(d.port);
		ck_assert_int_ge(fds[i], 0);
		send(fds[i], slow_head, strlen(slow_head), MSG_NOSIGNAL);
	}
	tu_nap_ms(500);
	for (int i = 0; i < SLOW_CONNS; i++) {
		if (!http_closed(fds[i]))
			continue;
		close(fds[i]);
		fds[i] = -1;
		refused++;
	}
	ck_assert_int_eq(refused, SLOW_CONNS - 64);
	/* Another address is served meanwhile. */
	http_from = "127.0.0.2";
	ck_assert_int_eq(http_get(d.port, "/metrics", &body), 200);
	http_from = NULL;
	free(body);
	/* A byte a second, for at most twice the bound: all are cut. */
	for (int s = 0; s < 2 * SLOW_LIMIT_S; s++) {
		open_now = 0;
		for (int i = 0; i < SLOW_CONNS; i++) {
			if (fds[i] < 0)
				continue;
			if (http_closed(fds[i]) ||
			    send(fds[i], "a", 1, MSG_NOSIGNAL) < 0) {
				close(fds[i]);
				fds[i] = -1;
				continue;
			}
			open_now++;
		}
		if (open_now == 0)
			break;
		tu_nap_ms(1000);
	}
	ck_assert_msg(open_now == 0, "%d slow connections still open after "
		      "%d s", open_now, 2 * SLOW_LIMIT_S);
	ck_assert_int_eq(http_get(d.port, "/metrics", &body), 200);
	free(body);
	ck_assert_int_eq(WEXITSTATUS(daemon_stop(&d)), 0);
}
END_TEST

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("metrics");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, metrics_scrape_rises_with_replay);
	tcase_add_test(tc, metrics_other_paths_and_methods_refused);
	tcase_add_test(tc, metrics_textfile_never_half_written);
	tcase_add_test(tc, metrics_textfile_fifo_stays_a_fifo);
	tcase_add_test(tc, metrics_bad_requests_leave_daemon_serving);
	tcase_add_test(tc, metrics_slow_clients_are_cut);
	suite_add_tcase(s, tc);
	return s;
}

/* The test that needs promtool (Debian's prometheus). */
static Suite *promtool_suite(void)
{
	Suite *s = suite_create("promtool");
	TCase *tc = tcase_create("promtool");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, metrics_exposition_passes_promtool);
	suite_add_tcase(s, tc);
	return s;
}

/*
 * `test_metrics promtool` runs the test that needs promtool (its CTest
 * entry test_metrics_promtool), and exits 77, CTest's skip, without it:
 * never a pass.
 */
int main(int argc, char **argv)
{
	if (argc < 2)
		return tu_main(metrics_suite());
	if (strcmp(argv[1], "promtool") != 0) {
		fprintf(stderr, "test_metrics: no group %s\n", argv[1]);
		return 2;
	}
	if (promtool() == NULL) {
		fprintf(stderr, "test_metrics promtool: skipped, promtool not "
				"installed (Debian's prometheus)\n");
		return 77;
	}
	return tu_main(promtool_suite());
}
