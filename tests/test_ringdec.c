/*
 * test_ringdec.c - test_ring's decoder (common/ringdec.c): records to
 * operations, the strings and stacks that name them, and records it
 * cannot decode counted as lost.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "op.h"
#include "ring.h"
#include "ring_helpers.h"
#include "ringdec.h"
#include "ringread.h"
#include "symtab.h"
#include "testutil.h"

/* ---- ringdec: records to operations ----------------------------------- */

struct dec {
	struct symtab *syms;
	struct ringdec *d;
	struct op op;
};

static void dec_open(struct dec *x)
{
	ck_assert_int_eq(symtab_new(&x->syms), 0);
	ck_assert_int_eq(ringdec_new(x->syms, &x->d), 0);
}

static void dec_close(struct dec *x)
{
	ringdec_free(x->d);
	symtab_free(x->syms);
}

static int dec(struct dec *x, unsigned type, const void *p, size_t len)
{
	return ringdec_record(x->d, type, p, len, &x->op);
}

/* A record that carries an operation but cannot be decoded is that
 * operation lost: a gap of one. */
static void dec_lost(struct dec *x, unsigned type, const void *p, size_t len)
{
	ck_assert_int_eq(ringdec_record(x->d, type, p, len, &x->op), 1);
	ck_assert_int_eq(x->op.kind, OP_GAP);
	ck_assert(x->op.has_lost);
	ck_assert_uint_eq(x->op.lost, 1);
	ck_assert_str_ne(ringdec_error(x->d), "");
}

static const char *dec_str(const struct dec *x, uint32_t id)
{
	const char *s = symtab_str(x->syms, id, NULL);

	return s ? s : "(none)";
}

/* A buffer as the consumer hands them over: 8-byte aligned. */
union buf {
	uint64_t align;
	unsigned char b[512];
	struct ring_string s;
	struct ring_stack st;
	struct ring_op op;
	struct ring_launch l;
};

static size_t put_string(union buf *u, uint32_t id, const char *s)
{
	memset(u, 0, sizeof(*u));
	u->s.id = id;
	u->s.len = (uint32_t)strlen(s);
	memcpy(u->s.bytes, s, u->s.len);
	return ring_rec_size(sizeof(u->s) + u->s.len) - 8;
}

static size_t put_launch(union buf *u, uint32_t name, uint32_t nreads,
			 uint32_t nwrites)
{
	memset(u, 0, sizeof(*u));
	u->l.kind = OP_LAUNCH;
	u->l.stream = 7;
	u->l.name = name;
	u->l.nreads = nreads;
	u->l.nwrites = nwrites;
	for (uint32_t i = 0; i < nreads + nwrites; i++) {
		u->l.ranges[i].ptr = 0x1000 * (i + 1);
		u->l.ranges[i].len = 0x100;
	}
	return sizeof(u->l) + (nreads + nwrites) * sizeof(u->l.ranges[0]);
}

START_TEST(ringdec_launch_ranges_must_match_length)
{
	struct ringdec_counters n;
	union buf u;
	size_t len;
	struct dec x;

	dec_open(&x);
	len = put_launch(&u, 0, 2, 1);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_uint_eq(x.op.nreads, 2);
	ck_assert_uint_eq(x.op.nwrites, 1);
	ck_assert_str_eq(ringdec_error(x.d), "");
	dec_lost(&x, RING_REC_LAUNCH, &u, len - 16);
	dec_lost(&x, RING_REC_LAUNCH, &u, len + 16);
	ck_assert_ptr_nonnull(strstr(ringdec_error(x.d), "ranges"));
	u.l.nreads = UINT32_MAX; /* n * 16 must not wrap into a match */
	u.l.nwrites = 1;
	dec_lost(&x, RING_REC_LAUNCH, &u, len);
	dec_lost(&x, RING_REC_LAUNCH, &u, 24);
	put_launch(&u, 0, 0, 0);
	u.l.kind = OP_ALLOC;
	dec_lost(&x, RING_REC_LAUNCH, &u, 32);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 5);
	ck_assert_uint_eq(n.lost, 5);
	ck_assert_uint_eq(n.ops, 6);
	dec_close(&x);
}
END_TEST

/* A launch with RING_LAUNCH_HAS_ARGS: each range's argument, in step
 * with the ranges kept (an empty range goes, its argument with it); an
 * argument never defined, or a name op_arg_ok() refuses, is none; a
 * record whose length leaves out the args is one operation lost. */
START_TEST(ringdec_launch_args_follow_their_ranges)
{
	static const char *const names[] = { "self", "bad name", "out" };
	struct ringdec_counters n;
	uint32_t *args;
	union buf u;
	size_t len;
	struct dec x;

	dec_open(&x);
	for (uint32_t i = 0; i < 3; i++) {
		len = put_string(&u, 10 + i, names[i]);
		ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), 0);
	}
	put_launch(&u, 0, 3, 2);
	u.l.flags = RING_LAUNCH_HAS_ARGS;
	u.l.ranges[1].len = 0; /* dropped, with its argument */
	args = (uint32_t *)(u.l.ranges + 5);
	args[0] = 10;	/* self */
	args[1] = 12;	/* out, on the empty range */
	args[2] = 11;	/* "bad name": none */
	args[3] = 99;	/* never defined: none */
	args[4] = 12;	/* out */
	len = ring_launch_size(5, 1);
	ck_assert_uint_eq(len, 32 + 5 * 16 + 24);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_uint_eq(x.op.nreads, 2);
	ck_assert_uint_eq(x.op.nwrites, 2);
	ck_assert_ptr_nonnull(x.op.read_args);
	ck_assert_str_eq(dec_str(&x, x.op.read_args[0]), "self");
	ck_assert_uint_eq(x.op.read_args[1], 0);
	ck_assert_ptr_nonnull(x.op.write_args);
	ck_assert_uint_eq(x.op.write_args[0], 0);
	ck_assert_str_eq(dec_str(&x, x.op.write_args[1]), "out");
	/* Only unnamed arguments: no list at all. */
	args[0] = args[4] = 0;
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_ptr_null(x.op.read_args);
	ck_assert_ptr_null(x.op.write_args);
	/* Without the flag the same length does not match. */
	u.l.flags = 0;
	dec_lost(&x, RING_REC_LAUNCH, &u, len);
	u.l.flags = RING_LAUNCH_HAS_ARGS;
	dec_lost(&x, RING_REC_LAUNCH, &u, ring_launch_size(5, 0));
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.lost, 2);
	ck_assert_uint_eq(n.undefined, 2);
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_unknown_kind_rejected)
{
	union buf u = { 0 };
	struct dec x;

	dec_open(&x);
	u.op.kind = OP_FREE;
	u.op.a = 0x42;
	ck_assert_int_eq(dec(&x, RING_REC_OP, &u, sizeof(u.op)), 1);
	ck_assert_int_eq(x.op.kind, OP_FREE);
	ck_assert_uint_eq(x.op.ptr, 0x42);
	u.op.kind = OP_KIND_COUNT;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = 0xff;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = OP_LAUNCH; /* launches have their own record */
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = OP_FREE;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op) + 8);
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op) - 8);
	dec_lost(&x, RING_REC_PAD, &u, 0);
	dec_lost(&x, 63, &u, sizeof(u.op));
	ck_assert_ptr_nonnull(strstr(ringdec_error(x.d), "type 63"));
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_string_past_payload_rejected)
{
	struct ringdec_counters n;
	union buf u;
	size_t len;
	struct dec x;

	dec_open(&x);
	len = put_string(&u, 3, "aten::mm"); /* 16 bytes, no slack */
	u.s.len = 9;
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	u.s.len = UINT32_MAX;
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	u.s.len = 0; /* 8 bytes of slack: more than padding */
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, 4), -EBADMSG);
	len = put_string(&u, 0, "x"); /* id 0 is "none" */
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	/* Nothing was defined: id 3 is still a placeholder. */
	len = put_launch(&u, 3, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<operator 3>");
	/* A stack whose frames run past its payload. */
	memset(&u, 0, sizeof(u));
	u.st.id = 1;
	u.st.nframes = 3;
	ck_assert_int_eq(dec(&x, RING_REC_STACK, &u, 16), -EBADMSG);
	u.st.nframes = UINT32_MAX;
	ck_assert_int_eq(dec(&x, RING_REC_STACK, &u, 16), -EBADMSG);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 7);
	ck_assert_uint_eq(n.strings, 0);
	ck_assert_uint_eq(n.stacks, 0);
	dec_close(&x);
}
END_TEST

/* A string definition of `n` bytes of `fill` in a fresh aligned buffer;
 * its payload length in *len (caller frees). */
static struct ring_string *big_string(uint32_t id, size_t n, char fill,
				      size_t *len)
{
	size_t size = ring_rec_size(sizeof(struct ring_string) + n);
	struct ring_string *s = calloc(1, size);

	ck_assert_ptr_nonnull(s);
	s->id = id;
	s->len = (uint32_t)n;
	memset(s->bytes, fill, n);
	*len = size - 8;
	return s;
}

/* Issue 12: 100 distinct 4 MiB operator names took 409 MiB. A string is
 * cut at OP_MAX_STRING bytes, as the agent and the trace reader cut it. */
START_TEST(ringdec_long_string_cut_as_the_agent_cuts)
{
	size_t len, n;
	struct ring_string *big = big_string(5, (size_t)4 << 20, 'a', &len);
	struct ringdec_counters c;
	const char *name;
	union buf u;
	struct dec x;

	dec_open(&x);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, big, len), 0);
	len = put_launch(&u, 5, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	name = symtab_str(x.syms, x.op.name, &n);
	ck_assert_uint_eq(n, OP_MAX_STRING);
	ck_assert_uint_eq(strspn(name, "a"), OP_MAX_STRING);
	ck_assert_uint_lt(symtab_bytes(x.syms), 1 << 20); /* not 4 MiB */
	ringdec_counters(x.d, &c);
	ck_assert_uint_eq(c.truncated, 1);
	/* One exactly at the bound is whole. */
	free(big);
	big = big_string(6, OP_MAX_STRING, 'b', &len);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, big, len), 0);
	len = put_launch(&u, 6, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	symtab_str(x.syms, x.op.name, &n);
	ck_assert_uint_eq(n, OP_MAX_STRING);
	ringdec_counters(x.d, &c);
	ck_assert_uint_eq(c.truncated, 1);
	free(big);
	dec_close(&x);
}
END_TEST

/* A process's strings count against its cap: past it they are one
 * placeholder, and nothing more is held. */
START_TEST(ringdec_strings_bounded_by_max_bytes)
{
	const size_t cap = 256 << 10;
	struct ringdec_counters c;
	size_t len;
	union buf u;
	struct dec x;

	dec_open(&x);
	ringdec_set_max_bytes(x.d, cap);
	for (uint32_t id = 1; id <= 2000; id++) {
		struct ring_string *s = big_string(id, 1000, 'a', &len);

		memcpy(s->bytes, &id, sizeof(id)); /* distinct */
		s->bytes[0] |= 0x40;
		s->bytes[1] |= 0x40;
		s->bytes[2] |= 0x40;
		s->bytes[3] |= 0x40;
		ck_assert_int_eq(dec(&x, RING_REC_STRING, s, len), 0);
		free(s);
	}
	/* Room for its tables to grow once more, no more. */
	ck_assert_uint_le(symtab_bytes(x.syms), 2 * cap);
	ringdec_counters(x.d, &c);
	ck_assert_uint_gt(c.over_cap, 0);
	ck_assert_uint_lt(c.strings, 2000);
	len = put_launch(&u, 2000, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), RINGDEC_OVER_CAP);
	len = put_launch(&u, 1, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_uint_eq(strlen(dec_str(&x, x.op.name)), 1000);
	dec_close(&x);
}
END_TEST

/*
 * Through a real ring: a string and a stack defined by records, then a
 * launch naming them decodes to their text; ids never defined decode to a
 * placeholder, id 0 to "none"; a lost stretch and a gap become gaps.
 */
/* Names are kept as a trace carries them (text.h): tab, newline, DEL and
 * C1 stay; an empty frame is a frame; an empty operator is none, as a
 * trace's `op` is never empty. */
START_TEST(ringdec_keeps_text_as_traces_carry_it)
{
	static const char name[] = "a\tb\nc\x7f\xc2\x85\x1b";
	union buf u;
	struct dec x;
	size_t len;

	dec_open(&x);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, put_string(&u, 1, name)),
			 0);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, put_string(&u, 2, "")),
			 0);
	len = put_launch(&u, 1, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "a\tb\nc\x7f\xc2\x85?");
	len = put_launch(&u, 2, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<no operator>");
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_names_ids_through_the_ring)
{
	static const char name[] = "aten::add\x01\xff";
	struct ringdec_counters n;
	const uint32_t *frames;
	struct ring_slot s;
	struct got g = { 0 };
	union buf u;
	struct dec x;
	struct rt t;
	size_t len;

	dec_open(&x);
	rt_open(&t, 0, 0, 0 - 64);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_STRING,
				      sizeof(u.s) + strlen(name), &s), 0);
	put_string(&u, 7, name);
	memcpy(s.payload, &u, sizeof(u.s) + strlen(name));
	ring_commit(&s);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_STACK, 16, &s), 0);
	memset(&u, 0, sizeof(u));
	u.st.id = 4;
	u.st.nframes = 2;
	u.st.frames[0] = 7;
	u.st.frames[1] = 8;
	memcpy(s.payload, &u, 16);
	ring_commit(&s);
	len = put_launch(&u, 7, 1, 1);
	u.l.stack = 4;
	u.l.ranges[0].len = 0;                   /* empty: dropped */
	u.l.ranges[1].ptr = UINT64_MAX - 0xf;    /* cut at 2^64 */
	u.l.ranges[1].len = 0x100;
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, len, &s), 0);
	memcpy(s.payload, &u, len);
	ring_commit(&s);
	put_launch(&u, 9, 0, 0);
	u.l.stack = 5;
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 32, &s), 0);
	memcpy(s.payload, &u, 32);
	ring_commit(&s);
	put_launch(&u, 0, 0, 0);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 32, &s), 0);
	memcpy(s.payload, &u, 32);
	ring_commit(&s);
	ck_assert_int_eq(ring_reserve(t.p, 1, MAXREC, &s), -EMSGSIZE);
	rt_push(&t, RING_REC_OP, 0, 0); /* after a gap; malformed itself */
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &s), 0);
	ck_assert_uint_eq(rt_drain(&t, RINGREAD_DEAD, &g), 8);

	ck_assert_int_eq(dec(&x, g.v[0].type, g.v[0].data, g.v[0].len), 0);
	ck_assert_int_eq(dec(&x, g.v[1].type, g.v[1].data, g.v[1].len), 0);
	ck_assert_int_eq(dec(&x, g.v[2].type, g.v[2].data, g.v[2].len), 1);
	ck_assert_int_eq(x.op.kind, OP_LAUNCH);
	ck_assert_str_eq(dec_str(&x, x.op.name), "aten::add??");
	ck_assert_uint_eq(x.op.stream, 7);
	ck_assert_uint_eq(x.op.nreads, 0);
	ck_assert_uint_eq(x.op.nwrites, 1);
	ck_assert_uint_eq(x.op.writes[0].ptr, UINT64_MAX - 0xf);
	ck_assert_uint_eq(x.op.writes[0].len, 0x10);
	ck_assert_uint_eq(symtab_stack(x.syms, x.op.stack, &frames), 2);
	ck_assert_str_eq(dec_str(&x, frames[0]), "aten::add??");
	ck_assert_str_eq(dec_str(&x, frames[1]), "<frame 8>");
	ck_assert_int_eq(dec(&x, g.v[3].type, g.v[3].data, g.v[3].len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<operator 9>");
	ck_assert_uint_eq(x.op.stack, 0);
	ck_assert_int_eq(dec(&x, g.v[4].type, g.v[4].data, g.v[4].len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<no operator>");
	ck_assert_int_eq(dec(&x, g.v[5].type, g.v[5].data, g.v[5].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GAP);
	ck_assert(x.op.has_lost);
	ck_assert_uint_eq(x.op.lost, 1);
	dec_lost(&x, g.v[6].type, g.v[6].data, g.v[6].len);
	ck_assert_uint_eq(g.v[7].type, RINGREAD_LOST);
	ck_assert_int_eq(dec(&x, g.v[7].type, g.v[7].data, g.v[7].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GAP);
	ck_assert(!x.op.has_lost);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.strings, 1);
	ck_assert_uint_eq(n.stacks, 1);
	ck_assert_uint_eq(n.ops, 6);
	ck_assert_uint_eq(n.malformed, 1);
	ck_assert_uint_eq(n.lost, 1);
	ck_assert_uint_eq(n.undefined, 3); /* frame 8, operator 9, stack 5 */
	got_free(&g);
	rt_close(&t);
	dec_close(&x);
}
END_TEST

/* Pushes `len` bytes of `rec` as one RING_REC_OP. */
static void push_op(struct rt *t, const void *rec, size_t len)
{
	struct ring_slot s;

	ck_assert_int_eq(ring_reserve(t->p, RING_REC_OP, len, &s), 0);
	memcpy(s.payload, rec, len);
	ring_commit(&s);
}

/* The four graph kinds and a graph-pool alloc, from the producer through
 * the consumer and the decoder; a v1 alloc beside them is unchanged. */
START_TEST(ringdec_graph_records_through_the_ring)
{
	const struct ring_op ops[] = {
		{ .kind = RING_OP_CAPTURE_BEGIN, .a = 1, .b = 7 },
		{ .kind = RING_OP_CAPTURE_END, .a = 1, .b = 7 },
		{ .kind = RING_OP_GRAPH_REPLAY, .a = 7, .b = 2 },
		{ .kind = RING_OP_GRAPH_DESTROY, .a = UINT64_MAX },
		{ .kind = RING_OP_ALLOC, .a = 0x9000, .b = 4096, .c = 3,
		  .flags = RING_OP_HAS_STREAM },
	};
	const struct ring_op_graph pool = {
		.op = { .kind = RING_OP_ALLOC, .a = 0x9000, .b = 64,
			.flags = RING_OP_HAS_GRAPH },
		.graph = UINT64_MAX - 1,
	};
	struct ringdec_counters n;
	struct got g = { 0 };
	struct dec x;
	struct rt t;

	dec_open(&x);
	rt_open(&t, 0, 0, 0 - 64);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		push_op(&t, &ops[i], ring_op_size(&ops[i]));
	ck_assert_uint_eq(ring_op_size(&pool.op), 40);
	push_op(&t, &pool, ring_op_size(&pool.op));
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 6);
	/* Every one is an operation record the consumer accounts for. */
	ck_assert_uint_eq(ring_load_relaxed(&t.p->hdr->consumed), 6);
	ck_assert_uint_eq(g.v[4].len, 32); /* layout v1's alloc */
	ck_assert_uint_eq(g.v[5].len, 40);

	ck_assert_int_eq(dec(&x, g.v[0].type, g.v[0].data, g.v[0].len), 1);
	ck_assert_int_eq(x.op.kind, OP_CAPTURE_BEGIN);
	ck_assert_uint_eq(x.op.stream, 1);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_int_eq(dec(&x, g.v[1].type, g.v[1].data, g.v[1].len), 1);
	ck_assert_int_eq(x.op.kind, OP_CAPTURE_END);
	ck_assert_uint_eq(x.op.stream, 1);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_int_eq(dec(&x, g.v[2].type, g.v[2].data, g.v[2].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GRAPH_REPLAY);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_uint_eq(x.op.stream, 2);
	ck_assert_int_eq(dec(&x, g.v[3].type, g.v[3].data, g.v[3].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GRAPH_DESTROY);
	ck_assert_uint_eq(x.op.graph, UINT64_MAX);
	ck_assert_uint_eq(x.op.stream, 0);
	ck_assert_int_eq(dec(&x, g.v[4].type, g.v[4].data, g.v[4].len), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert(x.op.has_stream);
	ck_assert(!x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, 0);
	ck_assert_int_eq(dec(&x, g.v[5].type, g.v[5].data, g.v[5].len), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert_uint_eq(x.op.ptr, 0x9000);
	ck_assert_uint_eq(x.op.size, 64);
	ck_assert(!x.op.has_stream);
	ck_assert(x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, UINT64_MAX - 1);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.ops, 6);
	ck_assert_uint_eq(n.malformed, 0);
	got_free(&g);
	rt_close(&t);
	dec_close(&x);
}
END_TEST

/* A graph record of the wrong shape is one operation lost, named and
 * counted, never an op made up from its bytes. */
START_TEST(ringdec_corrupt_graph_record_is_one_op_lost)
{
	struct ringdec_counters n;
	struct ring_op_graph r;
	union buf u;
	struct dec x;

	dec_open(&x);
	memset(&r, 0, sizeof(r));
	r.op.kind = RING_OP_ALLOC;
	r.op.a = 0x9000;
	r.op.b = 16;
	r.graph = 5;
	/* 40 bytes without the flag: not a v1 op, not a graph alloc. */
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	ck_assert_str_eq(ringdec_error(x.d),
			 "malformed operation (record type 4, 40 bytes)");
	/* The flag on 32 bytes: the graph would be read past the record. */
	r.op.flags = RING_OP_HAS_GRAPH;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r.op));
	ck_assert_str_eq(ringdec_error(x.d),
			 "malformed operation (record type 4, 32 bytes)");
	/* Only an alloc comes from a pool. */
	r.op.kind = RING_OP_GRAPH_DESTROY;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	r.op.kind = RING_OP_FREE;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	/* Longer or shorter than either shape. */
	memset(&u, 0, sizeof(u));
	memcpy(&u, &r, sizeof(r));
	u.op.kind = RING_OP_ALLOC;
	dec_lost(&x, RING_REC_OP, &u, sizeof(r) + 8);
	dec_lost(&x, RING_REC_OP, &u, sizeof(r) - 4);
	dec_lost(&x, RING_REC_OP, &u, 4);
	/* A kind past the newest. */
	u.op.kind = RING_OP_KIND_COUNT;
	u.op.flags = 0;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	/* A good one still decodes after them. */
	r.op.kind = RING_OP_ALLOC;
	ck_assert_int_eq(dec(&x, RING_REC_OP, &r, sizeof(r)), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert(x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, 5);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 8);
	ck_assert_uint_eq(n.lost, 8);
	ck_assert_uint_eq(n.ops, 9);
	dec_close(&x);
}
END_TEST

void test_ringdec_add(TCase *dc)
{
	tcase_add_test(dc, ringdec_launch_ranges_must_match_length);
	tcase_add_test(dc, ringdec_launch_args_follow_their_ranges);
	tcase_add_test(dc, ringdec_unknown_kind_rejected);
	tcase_add_test(dc, ringdec_string_past_payload_rejected);
	tcase_add_test(dc, ringdec_keeps_text_as_traces_carry_it);
	tcase_add_test(dc, ringdec_names_ids_through_the_ring);
	tcase_add_test(dc, ringdec_long_string_cut_as_the_agent_cuts);
	tcase_add_test(dc, ringdec_strings_bounded_by_max_bytes);
	tcase_add_test(dc, ringdec_graph_records_through_the_ring);
	tcase_add_test(dc, ringdec_corrupt_graph_record_is_one_op_lost);
}
