/*
 * metrics.h - the daemon's Prometheus metrics: an HTTP endpoint serving
 * GET /metrics, and a textfile for node_exporter's textfile collector,
 * both in the text exposition format (version 0.0.4).
 *
 * The loop thread renders the exposition on a timer; the HTTP server's
 * thread only copies the latest rendering. Caller owns the struct metrics;
 * release with metrics_stop(), which accepts NULL.
 */
#ifndef NPUSAN_METRICS_H
#define NPUSAN_METRICS_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "ingest.h"
#include "store.h"

struct metrics;

struct metrics_opts {
	uv_loop_t *loop;
	struct store *store;   /* must outlive the metrics */
	struct ingest *ingest; /* must outlive the metrics */
	const char *listen;    /* ADDR:PORT or [ADDR6]:PORT; NULL: no HTTP */
	const char *textfile;  /* NULL: none */
	const char *version;   /* for npusan_build_info; static */
	uint64_t start_ns;     /* uv_hrtime() at start, for the uptime */
};

/*
 * Parses `s`, a numeric IPv4 address and port ("127.0.0.1:9464") or an
 * IPv6 one in brackets ("[::1]:9464"), into *out and *len. 0; -EINVAL.
 */
int metrics_parse_listen(const char *s, struct sockaddr_storage *out,
			 socklen_t *len);

/*
 * Renders a first exposition, writes the textfile once, and starts the
 * HTTP server and the timer. 0; -EINVAL (a bad address); -EADDRINUSE or
 * another -errno when the HTTP server cannot listen or the textfile
 * cannot be written (logged); -ENOMEM.
 */
int metrics_start(const struct metrics_opts *o, struct metrics **out);

/*
 * Stops the HTTP server, writes the textfile a last time and closes the
 * timer; the struct is freed in its close callback, so the loop must run
 * once more. Loop thread. Accepts NULL.
 */
void metrics_stop(struct metrics *m);

#endif
