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

static Suite *rbtree_suite(void)
{
	Suite *s = suite_create("rbtree");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, rbtree_random_inserts_and_erases_keep_order_and_balance);
	tcase_add_test(tc, rbtree_sequential_keys_stay_logarithmic);
	tcase_add_test(tc, rbtree_erase_root_of_small_trees);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(rbtree_suite());
}
