/*
 * test_rbtree.c - the red-black tree against a sorted-array model.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "rbtree.h"
#include "testutil.h"

struct item {
	struct rb_node node;
	uint64_t key;
	bool in;
};

static uint64_t rng_state = 88172645463325252ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void insert(struct rb_root *root, struct item *it)
{
	struct rb_node **link = &root->node, *parent = NULL;

	while (*link != NULL) {
		parent = *link;
		if (it->key < rb_container_of(parent, struct item, node)->key)
			link = &parent->left;
		else
			link = &parent->right;
	}
	rb_insert(root, &it->node, parent, link);
	it->in = true;
}

/* The tree's keys in order must be exactly the model's keys in order. */
static void check_against_model(const struct rb_root *root,
				const struct item *items, size_t n)
{
	size_t in = 0, seen = 0;
	const struct rb_node *node;
	uint64_t prev = 0;

	ck_assert_int_ge(rb_check(root), 1);
	for (size_t i = 0; i < n; i++)
		in += items[i].in;
	for (node = rb_first(root); node != NULL; node = rb_next(node)) {
		const struct item *it = rb_container_of(node, struct item, node);

		ck_assert(it->in);
		ck_assert(seen == 0 || it->key >= prev);
		prev = it->key;
		seen++;
	}
	ck_assert_uint_eq(seen, in);
	for (node = rb_last(root); node != NULL; node = rb_prev(node))
		seen--;
	ck_assert_uint_eq(seen, 0);
}

START_TEST(rbtree_random_inserts_and_erases_keep_order_and_balance)
{
	enum { N = 2000 };
	struct item *items = calloc(N, sizeof(*items));
	struct rb_root root = { NULL };

	ck_assert_ptr_nonnull(items);
	for (size_t i = 0; i < N; i++)
		items[i].key = rng() % 500; /* duplicates on purpose */
	for (int round = 0; round < 20000; round++) {
		struct item *it = &items[rng() % N];

		if (it->in) {
			rb_erase(&root, &it->node);
			it->in = false;
		} else {
			insert(&root, it);
		}
		if (round % 97 == 0)
			check_against_model(&root, items, N);
	}
	check_against_model(&root, items, N);
	free(items);
}
END_TEST

START_TEST(rbtree_sequential_keys_stay_logarithmic)
{
	enum { N = 1 << 14 };
	struct item *items = calloc(N, sizeof(*items));
	struct rb_root root = { NULL };
	int bh;

	ck_assert_ptr_nonnull(items);
	for (size_t i = 0; i < N; i++) {
		items[i].key = i;
		insert(&root, &items[i]);
	}
	bh = rb_check(&root);
	/* height <= 2 * black height, and 2 log2(N + 1) bounds the height */
	ck_assert_int_le(2 * bh, 2 * 15 + 2);
	for (size_t i = 0; i < N; i += 2)
		rb_erase(&root, &items[i].node), items[i].in = false;
	check_against_model(&root, items, N);
	for (size_t i = 1; i < N; i += 2)
		rb_erase(&root, &items[i].node), items[i].in = false;
	ck_assert_ptr_null(root.node);
	ck_assert_ptr_null(rb_first(&root));
	free(items);
}
END_TEST

START_TEST(rbtree_erase_root_of_small_trees)
{
	struct item items[3] = { { .key = 1 }, { .key = 2 }, { .key = 3 } };

	for (int victim = 0; victim < 3; victim++) {
		struct rb_root root = { NULL };

		for (int i = 0; i < 3; i++)
			insert(&root, &items[i]);
		rb_erase(&root, &items[victim].node);
		items[victim].in = false;
		check_against_model(&root, items, 3);
		for (int i = 0; i < 3; i++) {
			if (items[i].in)
				rb_erase(&root, &items[i].node);
			items[i].in = false;
		}
		ck_assert_ptr_null(root.node);
	}
}
END_TEST

/* rb_move(): every node, the root included, copied to another place and
 * moved there, leaves the same keys in order and the tree balanced, and
 * inserts and erases go on from the moved nodes. */
START_TEST(rbtree_move_every_node_elsewhere)
{
	enum { N = 300 };
	struct item *a = calloc(N, sizeof(*a)), *b = calloc(N, sizeof(*b));
	struct rb_root root = { NULL };

	ck_assert(a != NULL && b != NULL);
	for (size_t i = 0; i < N; i++) {
		a[i].key = rng() % 1000;
		insert(&root, &a[i]);
	}
	for (size_t i = 0; i < N; i++) {
		b[i] = a[i];
		rb_move(&root, &a[i].node, &b[i].node);
		a[i].in = false;
		a[i].node = (struct rb_node){ 0 }; /* nothing may still name it */
		ck_assert_int_ge(rb_check(&root), 1);
	}
	check_against_model(&root, b, N);
	for (size_t i = 0; i < N; i += 2) {
		rb_erase(&root, &b[i].node);
		b[i].in = false;
	}
	check_against_model(&root, b, N);
	free(a);
	free(b);
}
END_TEST

/* ---- 32-bit links ----------------------------------------------------- */

/* Items in chunks of 1 << RB32_SHIFT bytes, named as rbtree.h says: the
 * directory entry of chunk n is its address less n << RB32_SHIFT. */
struct item32 {
	struct rb32_node node;
	uint32_t pad;
	uint64_t key;
	bool in;
};

enum { PER_CHUNK = ((1 << RB32_SHIFT) - 32) / sizeof(struct item32) };

struct items32 {
	struct rb32_dir dir;
	void *chunks[8];
	size_t n;
};

static struct item32 *item32_at(struct items32 *t, size_t i)
{
	return (struct item32 *)((char *)t->chunks[i / PER_CHUNK] + 32 +
				 i % PER_CHUNK * sizeof(struct item32));
}

static uint32_t item32_link(struct items32 *t, size_t i)
{
	size_t c = i / PER_CHUNK;

	return (uint32_t)(c << RB32_SHIFT |
			  ((uintptr_t)item32_at(t, i) - (uintptr_t)t->chunks[c]));
}

static void items32_new(struct items32 *t, size_t n)
{
	static uintptr_t base[8];

	ck_assert_uint_le(n, 8 * PER_CHUNK);
	t->n = n;
	t->dir.base = base;
	for (size_t c = 0; c < 8; c++) {
		t->chunks[c] = aligned_alloc(1 << RB32_SHIFT, 1 << RB32_SHIFT);
		ck_assert_ptr_nonnull(t->chunks[c]);
		base[c] = (uintptr_t)t->chunks[c] - (c << RB32_SHIFT);
	}
	for (size_t i = 0; i < n; i++)
		*item32_at(t, i) = (struct item32){ .key = rng() % 300 };
}

static void insert32(struct items32 *t, struct rb32_root *root, size_t i)
{
	uint32_t *link = &root->node, parent = 0;
	struct item32 *it = item32_at(t, i);

	while (*link != 0) {
		struct item32 *p = (struct item32 *)rb32_node(&t->dir, *link);

		parent = *link;
		link = it->key < p->key ? &p->node.left : &p->node.right;
	}
	rb32_insert(&t->dir, root, item32_link(t, i), parent, link);
	it->in = true;
}

static void check32_against_model(struct items32 *t,
				  const struct rb32_root *root)
{
	size_t in = 0, seen = 0;
	uint64_t prev = 0;

	ck_assert_int_ge(rb32_check(&t->dir, root), 1);
	for (size_t i = 0; i < t->n; i++)
		in += item32_at(t, i)->in;
	for (uint32_t l = rb32_first(&t->dir, root); l != 0;
	     l = rb32_next(&t->dir, l)) {
		const struct item32 *it =
			(const struct item32 *)rb32_node(&t->dir, l);

		ck_assert(it->in);
		ck_assert(seen == 0 || it->key >= prev);
		prev = it->key;
		seen++;
	}
	ck_assert_uint_eq(seen, in);
	for (uint32_t l = rb32_last(&t->dir, root); l != 0;
	     l = rb32_prev(&t->dir, l))
		seen--;
	ck_assert_uint_eq(seen, 0);
}

START_TEST(rbtree32_random_inserts_and_erases_keep_order_and_balance)
{
	struct items32 t;
	struct rb32_root root = { 0 };

	items32_new(&t, 8 * PER_CHUNK);
	for (int round = 0; round < 20000; round++) {
		size_t i = rng() % t.n;

		if (item32_at(&t, i)->in) {
			rb32_erase(&t.dir, &root, item32_link(&t, i));
			item32_at(&t, i)->in = false;
		} else {
			insert32(&t, &root, i);
		}
		if (round % 97 == 0)
			check32_against_model(&t, &root);
	}
	check32_against_model(&t, &root);
	for (size_t i = 0; i < t.n; i++) {
		if (item32_at(&t, i)->in)
			rb32_erase(&t.dir, &root, item32_link(&t, i));
	}
	ck_assert_uint_eq(root.node, 0);
	for (size_t c = 0; c < 8; c++)
		free(t.chunks[c]);
}
END_TEST

/* rb32_move(): each node of a tree on the first chunks moved to the same
 * place on the last ones keeps the tree ordered and balanced. */
START_TEST(rbtree32_move_every_node_elsewhere)
{
	struct items32 t;
	struct rb32_root root = { 0 };
	size_t half = 4 * PER_CHUNK;

	items32_new(&t, 8 * PER_CHUNK);
	for (size_t i = 0; i < half; i++)
		insert32(&t, &root, i);
	for (size_t i = 0; i < half; i++) {
		*item32_at(&t, i + half) = *item32_at(&t, i);
		rb32_move(&t.dir, &root, item32_link(&t, i),
			  item32_link(&t, i + half));
		*item32_at(&t, i) = (struct item32){ 0 };
		check32_against_model(&t, &root);
	}
	for (size_t c = 0; c < 8; c++)
		free(t.chunks[c]);
}
END_TEST

static Suite *rbtree_suite(void)
{
	Suite *s = suite_create("rbtree");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, rbtree_random_inserts_and_erases_keep_order_and_balance);
	tcase_add_test(tc, rbtree_sequential_keys_stay_logarithmic);
	tcase_add_test(tc, rbtree_erase_root_of_small_trees);
	tcase_add_test(tc, rbtree_move_every_node_elsewhere);
	tcase_add_test(tc, rbtree32_random_inserts_and_erases_keep_order_and_balance);
	tcase_add_test(tc, rbtree32_move_every_node_elsewhere);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(rbtree_suite());
}
