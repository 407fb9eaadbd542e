/*
 * finding_view.c - resolving an engine finding into a struct finding_view
 * (the one place ids become strings), and the names of kinds and
 * detection points back into the engine's enums.
 *
 * Owns nothing of its own: a view points into the caller's symtab and
 * struct finding_frames, which finding_frames_free() releases.
 */
#include "finding_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

/* Points `s` at the frames of stack `id`, stored at fr->v + *used. */
static void finding_view_stack(const struct symtab *syms, uint32_t id,
			       struct finding_frames *fr, size_t *used,
			       struct finding_stack *s)
{
	const uint32_t *ids;
	size_t n = symtab_stack(syms, id, &ids);

	s->frames = fr->v + *used;
	s->n = n;
	for (size_t i = 0; i < n; i++)
		fr->v[(*used)++] = symtab_str(syms, ids[i], NULL);
}

static void finding_view_access(const struct symtab *syms,
				const struct finding_access *a,
				struct finding_frames *fr, size_t *used,
				struct finding_view_access *out)
{
	out->stream = a->stream;
	out->seq = a->seq;
	out->write = a->write;
	out->op = symtab_str(syms, a->op, NULL);
	out->arg = a->arg != 0 ? symtab_str(syms, a->arg, NULL) : NULL;
	finding_view_stack(syms, a->stack, fr, used, &out->stack);
	out->has_graph = a->has_graph;
	out->graph = a->has_graph ? a->graph : 0;
}

int finding_view_of(const struct finding *f, const struct symtab *syms,
		    struct finding_frames *fr, struct finding_view *out)
{
	const uint32_t *ids;
	struct finding_view v = { 0 };
	size_t need = 0, used = 0;

	need += symtab_stack(syms, f->has_alloc ? f->alloc.stack : 0, &ids);
	need += symtab_stack(syms, f->access.stack, &ids);
	need += symtab_stack(syms, f->has_previous ? f->previous.stack : 0,
			     &ids);
	need += symtab_stack(syms, f->has_free ? f->free_stack : 0, &ids);
	if (grow_array((void **)&fr->v, &fr->cap, need ? need : 1,
		       sizeof(*fr->v)) < 0)
		return -ENOMEM;
	v.id = f->id;
	v.kind = finding_kind_name(f->kind);
	v.detected_at = detected_at_name(f->detected_at);
	v.ptr = f->ptr;
	v.has_alloc = f->has_alloc;
	if (f->has_alloc) {
		v.alloc.ptr = f->alloc.ptr;
		v.alloc.size = f->alloc.size;
		v.alloc.has_stream = f->alloc.has_stream;
		v.alloc.stream = f->alloc.has_stream ? f->alloc.stream : 0;
		finding_view_stack(syms, f->alloc.stack, fr, &used,
				   &v.alloc.stack);
	} else {
		finding_view_stack(syms, 0, fr, &used, &v.alloc.stack);
	}
	finding_view_access(syms, &f->access, fr, &used, &v.access);
	v.has_previous = f->has_previous;
	if (f->has_previous)
		finding_view_access(syms, &f->previous, fr, &used,
				    &v.previous);
	else
		finding_view_stack(syms, 0, fr, &used, &v.previous.stack);
	v.has_free = f->has_free;
	finding_view_stack(syms, f->has_free ? f->free_stack : 0, fr, &used,
			   &v.free_stack);
	v.count = f->count;
	*out = v;
	return 0;
}

void finding_frames_free(struct finding_frames *fr)
{
	free(fr->v);
	fr->v = NULL;
	fr->cap = 0;
}

bool finding_kind_of(const char *name, enum finding_kind *out)
{
	for (int k = 0; name != NULL && k < FINDING_KIND_COUNT; k++) {
		if (strcmp(name, finding_kind_name((enum finding_kind)k)) == 0) {
			*out = (enum finding_kind)k;
			return true;
		}
	}
	return false;
}

bool detected_at_of(const char *name, enum detected_at *out)
{
	for (int a = 0; name != NULL && a < DETECTED_AT_COUNT; a++) {
		if (strcmp(name, detected_at_name((enum detected_at)a)) == 0) {
			*out = (enum detected_at)a;
			return true;
		}
	}
	return false;
}
