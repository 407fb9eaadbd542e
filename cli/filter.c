/*
 * filter.c - which findings a command prints, how many, and where:
 * --op/--exclude-op, --print-limit, --output, --suppressions and
 * --gen-suppressions (cli.h), parsed and applied once for `run`,
 * `analyze`, `show`, `findings` and `report`.
 *
 * A finding filtered out by --op/--exclude-op is not printed and does not
 * count toward exit status 1; one past --print-limit is not printed but
 * counts as ever. Either way standard error says how many (cli_print_say()),
 * so that nothing found is passed over in silence. A suppressed finding
 * (docs/suppressions.md) is neither printed nor counted toward exit
 * status 1, and standard error says which suppression took how many.
 * Owns the suppressions cli_print_load() read; the patterns point into
 * argv.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "grow.h"
#include "report.h"
#include "suppress.h"
#include "text.h"

/* ---- options ------------------------------------------------------------- */

static int cli_print_pattern(const char *cmd, const char *opt,
			     const char *arg, const char **list, size_t *n)
{
	if (arg[0] == '\0') {
		fprintf(stderr, "%s: %s needs a pattern\n", cmd, opt);
		return CLI_USAGE;
	}
	if (*n == CLI_PRINT_MAX_PATTERNS) {
		fprintf(stderr, "%s: at most %d %s patterns\n", cmd,
			CLI_PRINT_MAX_PATTERNS, opt);
		return CLI_USAGE;
	}
	list[(*n)++] = arg;
	return -1;
}

int cli_print_option(const char *cmd, int c, const char *arg,
		     struct cli_print *p)
{
	uint64_t v;

	switch (c) {
	case CLI_OPT_OP:
		return cli_print_pattern(cmd, "--op", arg, p->ops, &p->nops);
	case CLI_OPT_EXCLUDE_OP:
		return cli_print_pattern(cmd, "--exclude-op", arg, p->excl,
					 &p->nexcl);
	case CLI_OPT_PRINT_LIMIT:
		if (client_parse_u64(arg, 0, UINT64_MAX, &v) < 0) {
			fprintf(stderr, "%s: --print-limit needs a number "
					"(0 up), not '%s'\n",
				cmd, arg);
			return CLI_USAGE;
		}
		p->has_limit = true;
		p->limit = v;
		return -1;
	case CLI_OPT_OUTPUT:
		p->output = arg;
		return -1;
	case CLI_OPT_SUPPRESSIONS:
		p->supp_path = arg;
		return -1;
	case CLI_OPT_GEN_SUPPRESSIONS:
		p->gen = true;
		return -1;
	}
	return -2;
}

int cli_print_load(const char *cmd, struct cli_print *p)
{
	const char *path = p->supp_path;
	char err[SUPPRESS_ERR_MAX];

	if (path == NULL)
		path = getenv("NPUSAN_SUPPRESSIONS");
	if (path == NULL || path[0] == '\0')
		return -1;
	if (suppress_load(path, &p->supp, err) == 0)
		return -1;
	fprintf(stderr, "%s: %s\n", cmd, err);
	return CLI_USAGE;
}

void cli_print_free(struct cli_print *p)
{
	suppress_free(p->supp);
	p->supp = NULL;
	for (size_t i = 0; i < p->ntally; i++)
		free(p->tally[i].name);
	free(p->tally);
	p->tally = NULL;
	p->ntally = p->cap_tally = 0;
	free(p->output_path);
	p->output_path = NULL;
}

/* Counts one finding under the daemon's suppression `name`; without
 * memory for a new name, only in the total. */
static void cli_print_tally(struct cli_print *p, const char *name)
{
	size_t i = 0;

	while (i < p->ntally && strcmp(p->tally[i].name, name) != 0)
		i++;
	if (i == p->ntally) {
		char *copy = strdup(name);

		if (copy == NULL ||
		    grow_array((void **)&p->tally, &p->cap_tally, i + 1,
			       sizeof(*p->tally)) < 0) {
			free(copy);
			return;
		}
		p->tally[p->ntally++] = (struct cli_print_tally){ copy, 0 };
	}
	p->tally[i].n++;
}

/* ---- filters and limit --------------------------------------------------- */

static bool cli_print_match(const char *const *pats, size_t n,
			    const struct finding_view *f)
{
	for (size_t i = 0; i < n; i++) {
		if (f->access.op != NULL && fnmatch(pats[i], f->access.op, 0) == 0)
			return true;
		if (f->has_previous && f->previous.op != NULL &&
		    fnmatch(pats[i], f->previous.op, 0) == 0)
			return true;
	}
	return false;
}

bool cli_print_suppressed(struct cli_print *p, const struct finding_view *f)
{
	if (f->suppressed != NULL) {
		p->daemon_suppressed++;
		cli_print_tally(p, f->suppressed);
		return true;
	}
	if (suppress_match(p->supp, f) == NULL)
		return false;
	p->suppressed++;
	return true;
}

bool cli_print_wanted(struct cli_print *p, const struct finding_view *f)
{
	bool keep;

	if (cli_print_suppressed(p, f))
		return false;
	keep = (p->nops == 0 || cli_print_match(p->ops, p->nops, f)) &&
	       !cli_print_match(p->excl, p->nexcl, f);
	p->filtered += !keep;
	p->kept += keep;
	return keep;
}

bool cli_print_room(struct cli_print *p)
{
	if (p->has_limit && p->printed >= p->limit) {
		p->unprinted++;
		return false;
	}
	p->printed++;
	return true;
}

bool cli_print_finding(struct cli_print *p, FILE *out, bool json, bool color,
		       const struct finding_view *f)
{
	if (!cli_print_wanted(p, f))
		return false;
	if (!cli_print_room(p))
		return true;
	if (json)
		report_json(out, f);
	else
		report_text(out, color, f);
	cli_print_gen(p, out, json, f);
	return true;
}

void cli_print_gen(const struct cli_print *p, FILE *out, bool json,
		   const struct finding_view *f)
{
	if (p->gen)
		suppress_gen(json ? stderr : out, f);
}

void cli_print_say(const struct cli_print *p)
{
	if (p->unprinted > 0)
		fprintf(stderr, "npusanctl: %" PRIu64 " more finding%s not "
				"printed (--print-limit %" PRIu64 ")\n",
			p->unprinted, p->unprinted == 1 ? "" : "s", p->limit);
	if (p->filtered > 0)
		fprintf(stderr, "npusanctl: %" PRIu64 " finding%s filtered out "
				"by --op/--exclude-op\n",
			p->filtered, p->filtered == 1 ? "" : "s");
	if (p->daemon_suppressed > 0)
		fprintf(stderr, "npusanctl: %" PRIu64 " finding%s suppressed "
				"by npusand's suppressions\n",
			p->daemon_suppressed,
			p->daemon_suppressed == 1 ? "" : "s");
	for (size_t i = 0; i < p->ntally; i++) {
		fprintf(stderr, "npusanctl:   %" PRIu64 " by '",
			p->tally[i].n);
		text_put(stderr, p->tally[i].name);
		fputs("'\n", stderr);
	}
	suppress_say(stderr, "npusanctl", p->supp);
}

/* ---- --output ------------------------------------------------------------ */

/* Appends `s` (n bytes) to `out` (`cap` bytes, `*len` used). -ENAMETOOLONG. */
static int cli_output_put(char *out, size_t cap, size_t *len, const char *s,
			  size_t n)
{
	if (*len + n >= cap)
		return -ENAMETOOLONG;
	memcpy(out + *len, s, n);
	*len += n;
	out[*len] = '\0';
	return 0;
}

/* The value of %q{NAME} at `s` (just past "%q"), its length into *used. */
static const char *cli_output_env(const char *cmd, const char *s,
				  size_t *used)
{
	const char *end = s[0] == '{' ? strchr(s, '}') : NULL;
	char name[256];
	const char *v;

	if (end == NULL || end == s + 1 || (size_t)(end - s) > sizeof(name)) {
		fprintf(stderr, "%s: --output: '%%q' must be followed by "
				"{NAME} with a closing '}'\n",
			cmd);
		return NULL;
	}
	memcpy(name, s + 1, (size_t)(end - s) - 1);
	name[end - s - 1] = '\0';
	v = getenv(name);
	if (v == NULL)
		fprintf(stderr, "%s: --output: %%q{%s}: $%s is not set\n", cmd,
			name, name);
	*used = (size_t)(end - s) + 1;
	return v;
}

int cli_output_name(const char *cmd, const char *tmpl, char *out, size_t cap)
{
	size_t len = 0, used;
	char pid[24];
	const char *s = tmpl, *v;
	int err = 0;

	out[0] = '\0';
	while (*s != '\0' && err == 0) {
		if (*s != '%') {
			err = cli_output_put(out, cap, &len, s++, 1);
			continue;
		}
		if (s[1] == '%') {
			err = cli_output_put(out, cap, &len, "%", 1);
		} else if (s[1] == 'p') {
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			err = cli_output_put(out, cap, &len, pid, strlen(pid));
		} else if (s[1] == 'q') {
			v = cli_output_env(cmd, s + 2, &used);
			if (v == NULL)
				return CLI_USAGE;
			err = cli_output_put(out, cap, &len, v, strlen(v));
			s += used;
		} else {
			fprintf(stderr, "%s: --output: unknown '%%%.1s' in '%s' "
					"(known: %%p, %%q{NAME}, %%%%)\n",
				cmd, s[1] ? s + 1 : "", tmpl);
			return CLI_USAGE;
		}
		s += 2;
	}
	if (err == 0 && len == 0)
		err = -ENOENT;
	if (err < 0) {
		fprintf(stderr, "%s: --output '%s': %s\n", cmd, tmpl,
			err == -ENOENT ? "names no file" : strerror(-err));
		return CLI_USAGE;
	}
	return -1;
}

int cli_output_open(const char *cmd, struct cli_print *p, int *fd)
{
	char name[4096];
	int status;

	*fd = -1;
	if (p->output == NULL)
		return -1;
	status = cli_output_name(cmd, p->output, name, sizeof(name));
	if (status >= 0)
		return status;
	*fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (*fd < 0) {
		fprintf(stderr, "%s: cannot open --output file '%s': %s\n", cmd,
			name, strerror(errno));
		return CLI_USAGE;
	}
	/* Without the name the file is only never discarded. */
	p->output_path = strdup(name);
	return -1;
}

void cli_output_discard(const char *cmd, const struct cli_print *p)
{
	struct stat st;

	/* A device or a FIFO (--output /dev/stderr) is not ours to remove. */
	if (p->output_path == NULL || lstat(p->output_path, &st) < 0 ||
	    !S_ISREG(st.st_mode) || unlink(p->output_path) < 0)
		return;
	fprintf(stderr, "%s: removed the --output file '%s': no verdict was "
			"reached\n",
		cmd, p->output_path);
}

int cli_output_to(const char *cmd, int fd)
{
	int err = 0;

	if (fd < 0)
		return -1;
	if (fflush(stdout) != 0 || dup2(fd, STDOUT_FILENO) < 0)
		err = errno;
	close(fd);
	if (err == 0)
		return -1;
	fprintf(stderr, "%s: cannot write to the --output file: %s\n", cmd,
		strerror(err));
	return CLI_USAGE;
}
