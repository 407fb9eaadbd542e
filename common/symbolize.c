/*
 * symbolize.c - native frames to "file:line in function" with libdw.
 *
 * Owns a cache of modules, one per (path, build id) met, each holding the
 * libdw session (Dwfl) that reported it, or none when it did not resolve;
 * symbolizer_close() frees them all. The text parsed is the caller's.
 *
 * DESIGN
 * 1. A module is used only when its build id is the one the frame records:
 *    the file at the path first, then DEBUG_DIR/.build-id/xx/rest.debug.
 *    A frame that records none (a module linked without --build-id) is
 *    looked up by path alone, as addr2line would.
 * 2. Lines come from DWARF only; a module with symbols but no line table
 *    gives no line, and the caller keeps the raw frame.
 * 3. The address looked up is the return address minus one, the call
 *    instruction, as the agent's dladdr() lookup does.
 * 4. A frame's path comes from a traced process, which may be another
 *    user's: only a regular file is opened (O_NONBLOCK, so that a FIFO
 *    cannot hang the reader), and debug files are searched for under
 *    DEBUG_DIR only, never beside the module, where that user could put
 *    anything.
 */
#include "symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

#ifdef NPUSAN_HAVE_LIBDW
#include <dwarf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

/* A source file's absolute path, made of its directory and its name. */
#define SYMBOLIZE_PATH_MAX 4096

#ifdef NPUSAN_HAVE_LIBDW

/* One module met: its key and, when it resolved, its libdw session. */
struct symbolize_module {
	char *path;
	uint8_t build_id[NATIVE_FRAME_BUILD_ID_MAX];
	size_t build_id_len;
	Dwfl *dwfl;        /* NULL: it did not resolve */
	Dwfl_Module *mod;  /* owned by dwfl */
	int err;           /* why not, when dwfl is NULL */
};

struct symbolizer {
	char *debug_path; /* libdw's debuginfo_path: DIR alone (DESIGN 4) */
	char *debug_dir;
	Dwfl_Callbacks callbacks;
	struct symbolize_module *mods;
	size_t n_mods, cap_mods;
};

int symbolizer_open(const char *debug_dir, struct symbolizer **out)
{
	struct symbolizer *s = calloc(1, sizeof(*s));

	if (debug_dir == NULL || debug_dir[0] == '\0')
		debug_dir = SYMBOLIZE_DEBUG_DIR;
	if (s == NULL)
		return -ENOMEM;
	s->debug_dir = strdup(debug_dir);
	s->debug_path = strdup(debug_dir);
	if (s->debug_dir == NULL || s->debug_path == NULL) {
		symbolizer_close(s);
		return -ENOMEM;
	}
	s->callbacks.find_elf = dwfl_build_id_find_elf;
	/* By build id under debug_dir only: dwfl_standard_find_debuginfo()
	 * also asks the servers in DEBUGINFOD_URLS (symbolize.h). */
	s->callbacks.find_debuginfo = dwfl_build_id_find_debuginfo;
	s->callbacks.section_address = dwfl_offline_section_address;
	s->callbacks.debuginfo_path = &s->debug_path;
	*out = s;
	return 0;
}

void symbolizer_close(struct symbolizer *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->n_mods; i++) {
		free(s->mods[i].path);
		if (s->mods[i].dwfl != NULL)
			dwfl_end(s->mods[i].dwfl);
	}
	free(s->mods);
	free(s->debug_path);
	free(s->debug_dir);
	free(s);
}

/* `path` opened for reading when it is a regular file (DESIGN 4); the
 * descriptor, or -ENOENT. */
static int symbolize_open_file(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/*
 * Reports the file at `path` into a new session: 0 with *dwfl and *mod
 * when its build id is `m`'s (or `m` records none); -ENOENT when it cannot
 * be read as ELF; -ESTALE when it is another build.
 */
static int symbolize_report(struct symbolizer *s,
			    const struct symbolize_module *m, const char *path,
			    Dwfl **dwfl, Dwfl_Module **mod)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	int fd = symbolize_open_file(path), n;
	Dwfl_Module *md;
	Dwfl *d;

	if (fd < 0)
		return fd;
	d = dwfl_begin(&s->callbacks);
	if (d == NULL) {
		close(fd);
		return -ENOMEM;
	}
	/* It takes fd on success only. */
	md = dwfl_report_offline(d, path, path, fd);
	if (md == NULL)
		close(fd);
	if (md == NULL || dwfl_report_end(d, NULL, NULL) != 0) {
		dwfl_end(d);
		return -ENOENT;
	}
	n = dwfl_module_build_id(md, &bits, &vaddr);
	if (m->build_id_len > 0 &&
	    (n != (int)m->build_id_len ||
	     memcmp(bits, m->build_id, m->build_id_len) != 0)) {
		dwfl_end(d);
		return -ESTALE;
	}
	*dwfl = d;
	*mod = md;
	return 0;
}

/* DEBUG_DIR/.build-id/xx/rest.debug for `m`'s build id, into *out. */
static int symbolize_debug_file(const struct symbolizer *s,
				const struct symbolize_module *m, char **out)
{
	static const char hex[] = "0123456789abcdef";
	char id[2 * NATIVE_FRAME_BUILD_ID_MAX + 1];

	for (size_t i = 0; i < m->build_id_len; i++) {
		id[2 * i] = hex[m->build_id[i] >> 4];
		id[2 * i + 1] = hex[m->build_id[i] & 15];
	}
	id[2 * m->build_id_len] = '\0';
	if (asprintf(out, "%s/.build-id/%.2s/%s.debug", s->debug_dir, id,
		     id + 2) < 0)
		return -ENOMEM;
	return 0;
}

/* DESIGN 1: the file at the path, then the debug file of the build id. */
static void symbolize_resolve(struct symbolizer *s, struct symbolize_module *m)
{
	char *debug;
	int err;

	m->err = symbolize_report(s, m, m->path, &m->dwfl, &m->mod);
	if (m->err == 0 || m->build_id_len == 0)
		return;
	if (symbolize_debug_file(s, m, &debug) < 0)
		return;
	err = symbolize_report(s, m, debug, &m->dwfl, &m->mod);
	free(debug);
	if (err == 0 || err == -ESTALE)
		m->err = err; /* else keep why the path failed */
}

/* The cached module of `r`, resolved on first sight; NULL on -ENOMEM. */
static struct symbolize_module *symbolize_module(struct symbolizer *s,
						 const struct native_frame *r)
{
	struct symbolize_module *m;

	for (size_t i = 0; i < s->n_mods; i++) {
		m = &s->mods[i];
		if (strlen(m->path) == r->path_len &&
		    memcmp(m->path, r->path, r->path_len) == 0 &&
		    m->build_id_len == r->build_id_len &&
		    memcmp(m->build_id, r->build_id, r->build_id_len) == 0)
			return m;
	}
	if (grow_array((void **)&s->mods, &s->cap_mods, s->n_mods + 1,
		       sizeof(*s->mods)) < 0)
		return NULL;
	m = &s->mods[s->n_mods];
	memset(m, 0, sizeof(*m));
	m->path = strndup(r->path, r->path_len);
	if (m->path == NULL)
		return NULL;
	memcpy(m->build_id, r->build_id, r->build_id_len);
	m->build_id_len = r->build_id_len;
	s->n_mods++;
	symbolize_resolve(s, m);
	return m;
}

/*
 * `file` made absolute with the compilation's directory `dir` (as gdb and
 * addr2line show it), "." and ".." taken out, into `out`: "../x.c" compiled
 * in /src/build is /src/x.c. `file` as it is when it is absolute already,
 * `dir` is unknown, or the result does not fit.
 */
static const char *symbolize_source_path(const char *file, const char *dir,
					 char *out, size_t cap)
{
	size_t n = 0;
	const char *p;

	if (file[0] == '/' || dir == NULL || dir[0] != '/' ||
	    strlen(dir) + strlen(file) + 2 > cap)
		return file;
	for (int part = 0; part < 2; part++) {
		for (p = part == 0 ? dir : file; *p != '\0';) {
			size_t k = strcspn(p, "/");

			if (k == 2 && p[0] == '.' && p[1] == '.') {
				while (n > 0 && out[--n] != '/')
					;
			} else if (k > 0 && !(k == 1 && p[0] == '.')) {
				out[n++] = '/';
				memcpy(out + n, p, k);
				n += k;
			}
			p += k + (p[k] == '/');
		}
	}
	if (n == 0)
		out[n++] = '/';
	out[n] = '\0';
	return out;
}

/* Whether DWARF scope `d` is a function: a subprogram or a function
 * inlined into another. */
static bool symbolize_is_function(Dwarf_Die *d)
{
	int tag = dwarf_tag(d);

	return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine;
}

/* The most scopes nested at one address that are kept: past them, the
 * outermost are what shows. */
#define SYMBOLIZE_SCOPES_MAX 64
/* The deepest DIE looked into: a module's DWARF may come from another user
 * (DESIGN 4), and nesting must not run the stack out. */
#define SYMBOLIZE_NEST_MAX 256

/* Whether DIE `d` holds no code itself but may hold DIEs that do: C++
 * puts a namespace's functions inside it. */
static bool symbolize_is_container(Dwarf_Die *d)
{
	switch (dwarf_tag(d)) {
	case DW_TAG_namespace:
	case DW_TAG_class_type:
	case DW_TAG_structure_type:
	case DW_TAG_union_type:
	case DW_TAG_module:
		return true;
	default:
		return false;
	}
}

/* Whether DIE `d` is a scope of code: a function, a function inlined, or
 * a block inside one. */
static bool symbolize_is_code(Dwarf_Die *d)
{
	switch (dwarf_tag(d)) {
	case DW_TAG_subprogram:
	case DW_TAG_inlined_subroutine:
	case DW_TAG_lexical_block:
	case DW_TAG_try_block:
	case DW_TAG_catch_block:
		return true;
	default:
		return false;
	}
}

/*
 * The scopes of code under `parent`, `nest` DIEs deep, that hold `pc`,
 * outermost first, into chain[depth...]; returns the depth reached (depth
 * itself for none). Not dwarf_getscopes(), which finds none in the units
 * GCC's link-time optimisation writes (elfutils 0.188), where addr2line
 * finds them all. Units that dwz imports hold no code (code has addresses
 * of its own, so it is never shared), and are not looked into.
 */
static int symbolize_descend(Dwarf_Die *parent, Dwarf_Addr pc,
			     Dwarf_Die *chain, int depth, int nest)
{
	Dwarf_Die child;
	int reached;

	if (nest == SYMBOLIZE_NEST_MAX || dwarf_child(parent, &child) != 0)
		return depth;
	do {
		if (symbolize_is_code(&child) && dwarf_haspc(&child, pc) > 0) {
			if (depth == SYMBOLIZE_SCOPES_MAX)
				return depth;
			chain[depth] = child;
			return symbolize_descend(&child, pc, chain, depth + 1,
						 nest + 1);
		}
		if (!symbolize_is_container(&child))
			continue;
		reached = symbolize_descend(&child, pc, chain, depth, nest + 1);
		if (reached > depth)
			return reached;
	} while (dwarf_siblingof(&child, &child) == 0);
	return depth;
}

/* The scopes of code in `cu` holding `pc`, innermost first, as
 * dwarf_getscopes() orders them; returns how many. */
static int symbolize_scopes(Dwarf_Die *cu, Dwarf_Addr pc, Dwarf_Die *scopes)
{
	int n = symbolize_descend(cu, pc, scopes, 0, 0);

	for (int i = 0; i < n / 2; i++) {
		Dwarf_Die t = scopes[i];

		scopes[i] = scopes[n - 1 - i];
		scopes[n - 1 - i] = t;
	}
	return n;
}

/* The name of the first function among scopes[from...], else of the
 * symbol at `addr`; NULL when neither names one. *at: its index, or n. */
static const char *symbolize_function(Dwfl_Module *mod, Dwarf_Addr addr,
				      Dwarf_Die *scopes, int n, int from,
				      int *at)
{
	const char *name;

	for (*at = from; *at < n; (*at)++) {
		if (symbolize_is_function(&scopes[*at]) &&
		    (name = dwarf_diename(&scopes[*at])) != NULL)
			return name;
	}
	return dwfl_module_addrname(mod, addr);
}

/* Appends "file:line in fn (module+0xoff)" ("file:line (module+0xoff)"
 * without fn) as one line to buf[*o...]: a line break first unless it is
 * the first, and none inside (a name holding one shows '?'). */
static int symbolize_put_line(char *buf, size_t len, size_t *o,
			      const char *file, int line, const char *fn,
			      const char *module, uint64_t off)
{
	size_t at = *o + (*o > 0);
	int n;

	if (at >= len)
		return -ENOSPC;
	if (fn != NULL)
		n = snprintf(buf + at, len - at, "%s:%d in %s (%s+0x%" PRIx64
			     ")", file, line, fn, module, off);
	else
		n = snprintf(buf + at, len - at, "%s:%d (%s+0x%" PRIx64 ")",
			     file, line, module, off);
	if (n < 0 || (size_t)n >= len - at)
		return -ENOSPC;
	for (size_t i = at; i < at + (size_t)n; i++)
		buf[i] = buf[i] == '\n' ? '?' : buf[i];
	if (*o > 0)
		buf[*o] = '\n';
	*o = at + (size_t)n;
	return 0;
}

/* Where inlined function `d` was called: its file (made absolute with
 * `dir`, into src) and line. NULL when DWARF does not say. */
static const char *symbolize_call_site(Dwarf_Die *cu, Dwarf_Die *d,
				       const char *dir, char *src,
				       size_t cap, int *line)
{
	Dwarf_Attribute at;
	Dwarf_Word idx, ln;
	Dwarf_Files *files;
	size_t nfiles;
	const char *file;

	if (dwarf_formudata(dwarf_attr(d, DW_AT_call_file, &at), &idx) != 0 ||
	    dwarf_formudata(dwarf_attr(d, DW_AT_call_line, &at), &ln) != 0 ||
	    ln == 0 || ln > INT32_MAX ||
	    dwarf_getsrcfiles(cu, &files, &nfiles) != 0 || idx >= nfiles ||
	    (file = dwarf_filesrc(files, idx, NULL, NULL)) == NULL)
		return NULL;
	*line = (int)ln;
	return symbolize_source_path(file, dir, src, cap);
}

/*
 * The lines of `addr`, whose line table says file:line: the innermost
 * function there, then, for each function inlined, the function it was
 * inlined into, at the line of the call, as addr2line -i shows them.
 */
static int symbolize_lines(const struct symbolize_module *m,
			   Dwarf_Addr addr, const char *file, int line,
			   const char *dir, uint64_t off, char *buf,
			   size_t len)
{
	const char *base = strrchr(m->path, '/') + 1; /* absolute path */
	Dwarf_Addr bias;
	Dwarf_Die *cu = dwfl_module_addrdie(m->mod, addr, &bias);
	Dwarf_Die scopes[SYMBOLIZE_SCOPES_MAX];
	int n = cu != NULL ? symbolize_scopes(cu, addr - bias, scopes) : 0;
	char src[SYMBOLIZE_PATH_MAX];
	const char *fn;
	size_t o = 0;
	int err, at = 0;

	fn = symbolize_function(m->mod, addr, scopes, n, 0, &at);
	err = symbolize_put_line(buf, len, &o, file, line, fn, base, off);
	while (err == 0 && at < n &&
	       dwarf_tag(&scopes[at]) == DW_TAG_inlined_subroutine) {
		file = symbolize_call_site(cu, &scopes[at], dir, src,
					   sizeof(src), &line);
		if (file == NULL)
			break;
		fn = symbolize_function(m->mod, addr, scopes, n, at + 1, &at);
		err = symbolize_put_line(buf, len, &o, file, line, fn, base,
					 off);
	}
	return err < 0 ? err : (int)o;
}

int symbolizer_frame(struct symbolizer *s, const char *frame, char *buf,
		     size_t len)
{
	struct native_frame r;
	struct symbolize_module *m;
	GElf_Addr bias;
	Dwarf_Addr addr;
	Dwfl_Line *line;
	const char *file, *dir;
	char src[SYMBOLIZE_PATH_MAX];
	int lineno = 0;

	if (native_frame_parse(frame, &r) < 0 || r.off == 0)
		return -EINVAL;
	m = symbolize_module(s, &r);
	if (m == NULL)
		return -ENOMEM;
	if (m->dwfl == NULL)
		return m->err;
	if (dwfl_module_getelf(m->mod, &bias) == NULL)
		return -ENOENT;
	addr = r.off - 1 + bias; /* DESIGN 3 */
	line = dwfl_module_getsrc(m->mod, addr);
	file = line != NULL ? dwfl_lineinfo(line, NULL, &lineno, NULL, NULL,
					    NULL)
			    : NULL;
	if (file == NULL || lineno <= 0)
		return -ENODATA; /* DESIGN 2 */
	dir = dwfl_line_comp_dir(line);
	file = symbolize_source_path(file, dir, src, sizeof(src));
	return symbolize_lines(m, addr, file, lineno, dir, r.off, buf, len);
}

#else /* !NPUSAN_HAVE_LIBDW */

struct symbolizer {
	int unused;
};

int symbolizer_open(const char *debug_dir, struct symbolizer **out)
{
	(void)debug_dir;
	*out = calloc(1, sizeof(**out));
	return *out != NULL ? 0 : -ENOMEM;
}

void symbolizer_close(struct symbolizer *s)
{
	free(s);
}

int symbolizer_frame(struct symbolizer *s, const char *frame, char *buf,
		     size_t len)
{
	(void)s;
	(void)frame;
	(void)buf;
	(void)len;
	return -ENOTSUP;
}

#endif
