/*
 * log.c - npusand's log lines (see log.h).
 *
 * The file descriptor lines go to never changes: log_open() dups the file
 * onto a private descriptor and log_reopen() dup2()s the new file over it,
 * which is atomic, so a thread writing a line while SIGHUP reopens writes
 * it to the old file or to the new one, never to a closed descriptor.
 *
 * Owns the descriptor and the path log_open() copies, until log_close();
 * a finding's line (log_finding_line()) belongs to its caller.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

atomic_int log__level = LOG_INFO;

static int log_fd = -1;        /* the file's descriptor; -1: stderr */
static char *log_path;         /* the file, for log_reopen() */
static int log_journal;        /* stderr is the journal: "<N>" prefixes */

static const char *const log_names[] = {
#define LOG_LEVEL_NAME(name, str, prio) str,
	LOG_LEVELS(LOG_LEVEL_NAME)
#undef LOG_LEVEL_NAME
};

static const int log_prio[] = {
#define LOG_LEVEL_PRIO(name, str, prio) prio,
	LOG_LEVELS(LOG_LEVEL_PRIO)
#undef LOG_LEVEL_PRIO
};

int log_level_parse(const char *s, enum log_level *out)
{
	for (unsigned i = 0; i < LOG_LEVEL_COUNT; i++) {
		if (strcmp(s, log_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* Whether stderr is the stream $JOURNAL_STREAM ("DEV:INO") names. */
static int log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return 0;
	return fstat(STDERR_FILENO, &st) == 0 &&
	       (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

static int log_open_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
				    O_NOCTTY, 0640);

	return fd < 0 ? -errno : fd;
}

int log_open(enum log_level level, const char *path)
{
	int fd;

	atomic_store(&log__level, (int)level);
	log_journal = path == NULL && log_stderr_is_journal();
	if (path == NULL)
		return 0;
	fd = log_open_file(path);
	if (fd < 0)
		return fd;
	log_path = strdup(path);
	if (log_path == NULL) {
		close(fd);
		return -ENOMEM;
	}
	log_fd = fd;
	return 0;
}

int log_reopen(void)
{
	int fd;

	if (log_path == NULL)
		return 0;
	fd = log_open_file(log_path);
	if (fd < 0)
		return fd;
	/* Atomic: a concurrent line lands in the old file or the new. */
	if (dup3(fd, log_fd, O_CLOEXEC) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	close(fd);
	return 0;
}

void log_close(void)
{
	if (log_fd >= 0)
		close(log_fd);
	log_fd = -1;
	free(log_path);
	log_path = NULL;
}

void log_write(enum log_level level, const char *fmt, ...)
{
	char line[1024];
	size_t off = 0, max = sizeof(line) - 1; /* room for the '\n' */
	int saved = errno, n;
	va_list ap;

	if ((unsigned)level >= LOG_LEVEL_COUNT)
		level = LOG_ERROR;
	if (log_journal) {
		n = snprintf(line, max, "<%d>", log_prio[level]);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		off = strftime(line, max, "%Y-%m-%dT%H:%M:%S", &tm);
		n = snprintf(line + off, max - off, ".%03ld npusand[%d]: %s: ",
			     ts.tv_nsec / 1000000, (int)getpid(),
			     log_names[level]);
	}
	if (n > 0)
		off += (size_t)n < max - off ? (size_t)n : max - off - 1;
	va_start(ap, fmt);
	n = vsnprintf(line + off, max - off, fmt, ap);
	va_end(ap);
	if (n > 0)
		off += (size_t)n < max - off ? (size_t)n : max - off - 1;
	/* One event, one line: a newline inside a message would fake one. */
	for (size_t i = 0; i < off; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[off++] = '\n';
	while (write(log_fd >= 0 ? log_fd : STDERR_FILENO, line, off) < 0 &&
	       errno == EINTR)
		;
	errno = saved;
}

/* Appends ` key=value` to `b`: the value bare when it is a non-empty run
 * of printable ASCII without space, '"', '=' or '\\', else in double
 * quotes with \\, \", \n, \r, \t and \xNN escapes (bytes from 0x80 as
 * they are), cut after 200 bytes of output with "..." so that a line of
 * three such values stays whole within log_write()'s 1 KiB line. */
static void log_fmt_str(FILE *b, const char *key, const char *v)
{
	size_t n = strlen(v), out = 0, i;
	bool bare = n > 0 && n <= 200;

	for (i = 0; i < n && bare; i++) {
		unsigned char c = (unsigned char)v[i];

		bare = c > ' ' && c < 0x7f && c != '"' && c != '=' && c != '\\';
	}
	fprintf(b, " %s=", key);
	if (bare) {
		fputs(v, b);
		return;
	}
	fputc('"', b);
	for (i = 0; i < n && out < 200; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c == '"' || c == '\\')
			out += (size_t)fprintf(b, "\\%c", c);
		else if (c == '\n')
			out += (size_t)fprintf(b, "\\n");
		else if (c == '\r')
			out += (size_t)fprintf(b, "\\r");
		else if (c == '\t')
			out += (size_t)fprintf(b, "\\t");
		else if (c < ' ' || c == 0x7f)
			out += (size_t)fprintf(b, "\\x%02x", c);
		else
			out += fputc(c, b) != EOF;
	}
	fputs(i < n ? "...\"" : "\"", b);
}

int log_finding_line(int64_t id, const struct finding_view *f,
		     const struct store_process *p, char **out)
{
	char *line = NULL;
	size_t len = 0;
	FILE *b = open_memstream(&line, &len);

	if (b == NULL)
		return -ENOMEM;
	fprintf(b, "finding id=%" PRId64 " kind=%s", id, f->kind);
	if (p != NULL) {
		if (p->job != NULL)
			log_fmt_str(b, "job", p->job);
		if (p->has_rank)
			fprintf(b, " rank=%" PRIu32, p->rank);
		fprintf(b, " pid=%" PRIu32, p->pid);
	}
	if (f->access.op != NULL)
		log_fmt_str(b, "op", f->access.op);
	if (f->has_previous && f->previous.op != NULL)
		log_fmt_str(b, "previous_op", f->previous.op);
	fprintf(b, " stream=%" PRIu64, f->access.stream);
	if (f->has_previous)
		fprintf(b, " previous_stream=%" PRIu64, f->previous.stream);
	else if (f->has_alloc && f->alloc.has_stream)
		fprintf(b, " alloc_stream=%" PRIu64, f->alloc.stream);
	if (f->access.has_graph)
		fprintf(b, " graph=%" PRIu64, f->access.graph);
	fprintf(b, " ptr=0x%" PRIx64 " detected_at=%s", f->ptr,
		f->detected_at);
	if (fclose(b) != 0) {
		free(line);
		return -ENOMEM;
	}
	*out = line;
	return 0;
}
