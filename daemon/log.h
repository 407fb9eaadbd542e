/*
 * log.h - npusand's log: one line per event, to stderr (the journal under
 * systemd) or to a file that SIGHUP reopens.
 *
 * The level is checked before any formatting, so a disabled log_debug()
 * costs a load and a compare. Every line goes out in one write(), so lines
 * from the loop, the drain threads and the store's writer never interleave.
 * Any thread may log; log_open() and log_reopen() belong to the loop.
 */
#ifndef NPUSAN_DAEMON_LOG_H
#define NPUSAN_DAEMON_LOG_H

#include <stdatomic.h>
#include <stdint.h>

struct finding_view;
struct store_process;

/* X(enum suffix, name on the command line, syslog priority) */
#define LOG_LEVELS(X)          \
	X(ERROR, "error", 3)   \
	X(WARN, "warn", 4)     \
	X(INFO, "info", 6)     \
	X(DEBUG, "debug", 7)

enum log_level {
#define LOG_LEVEL_ENUM(name, str, prio) LOG_##name,
	LOG_LEVELS(LOG_LEVEL_ENUM)
#undef LOG_LEVEL_ENUM
	LOG_LEVEL_COUNT
};

/* The level named `s` into *out. 0; -EINVAL for an unknown name. */
int log_level_parse(const char *s, enum log_level *out);

/* The most verbose level written; read before formatting. */
extern atomic_int log__level;

/*
 * Starts logging at `level` to `path` (appended, created 0640), or to
 * stderr when `path` is NULL. Lines carry a syslog priority prefix ("<6>")
 * when stderr is the journal ($JOURNAL_STREAM names it), else a time stamp.
 * 0; a negative errno from open(2) (logging stays on stderr).
 */
int log_open(enum log_level level, const char *path);

/*
 * Reopens the file given to log_open() (after logrotate moved it); on
 * failure the old one stays in use. 0 (also without a file); -errno.
 */
int log_reopen(void);

/* Closes the file; later lines go to stderr. */
void log_close(void);

void log_write(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_at(level, ...)                                               \
	do {                                                             \
		if ((int)(level) <= atomic_load_explicit(&log__level,    \
							 memory_order_relaxed)) \
			log_write((level), __VA_ARGS__);                 \
	} while (0)

#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

/*
 * The info line of new finding `id` (daemon/README.md): "finding id=7
 * kind=... job=... rank=... pid=... op=..." in logfmt, its process's
 * fields from `p` (none when `p` is NULL: a process not found), into *out
 * (caller frees; pass it to log_write(LOG_INFO, "%s", ...)). Callers
 * check the level first. 0; -ENOMEM.
 */
int log_finding_line(int64_t id, const struct finding_view *f,
		     const struct store_process *p, char **out);

#endif
