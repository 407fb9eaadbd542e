/*
 * rbtree.c - an intrusive red-black tree with parent pointers.
 *
 * The algorithms are the textbook ones (CLRS, chapter 13) with NULL for the
 * sentinel leaves, which is why erase fix-up carries the parent of the
 * possibly-NULL node it repairs. The colour lives in the low bit of the
 * parent pointer, which nodes' alignment leaves free, so a node is three
 * words.
 *
 * DESIGN
 *  1. Every red node has black children (NULL leaves are black).
 *  2. Every path from a node down to a NULL leaf passes the same number of
 *     black nodes, so the height is at most 2 log2(n + 1).
 *  3. The root is black.
 */
#include "rbtree.h"

#include <stdbool.h>

#define RB_BLACK ((uintptr_t)1)

static bool rb_is_red(const struct rb_node *n)
{
	return n != NULL && !(n->parent_color & RB_BLACK);
}

static void rb_set_black(struct rb_node *n)
{
	n->parent_color |= RB_BLACK;
}

static void rb_set_red(struct rb_node *n)
{
	n->parent_color &= ~RB_BLACK;
}

static void rb_set_parent(struct rb_node *n, struct rb_node *p)
{
	n->parent_color = (n->parent_color & RB_BLACK) | (uintptr_t)p;
}

/* Makes `new` take `old`'s place under `parent` (or at the root). */
static void rb_replace_child(struct rb_root *root, struct rb_node *parent,
			     struct rb_node *old, struct rb_node *new)
{
	if (parent == NULL)
		root->node = new;
	else if (parent->left == old)
		parent->left = new;
	else
		parent->right = new;
}

static void rb_rotate_left(struct rb_root *root, struct rb_node *x)
{
	struct rb_node *y = x->right;
	struct rb_node *p = rb_parent(x);

	x->right = y->left;
	if (y->left != NULL)
		rb_set_parent(y->left, x);
	rb_set_parent(y, p);
	rb_replace_child(root, p, x, y);
	y->left = x;
	rb_set_parent(x, y);
}

static void rb_rotate_right(struct rb_root *root, struct rb_node *x)
{
	struct rb_node *y = x->left;
	struct rb_node *p = rb_parent(x);

	x->left = y->right;
	if (y->right != NULL)
		rb_set_parent(y->right, x);
	rb_set_parent(y, p);
	rb_replace_child(root, p, x, y);
	y->right = x;
	rb_set_parent(x, y);
}

void rb_insert(struct rb_root *root, struct rb_node *node,
	       struct rb_node *parent, struct rb_node **link)
{
	struct rb_node *p, *g, *u;

	node->parent_color = (uintptr_t)parent; /* red */
	node->left = node->right = NULL;
	*link = node;

	while ((p = rb_parent(node)) != NULL && rb_is_red(p)) {
		g = rb_parent(p); /* p is red, so not the root */
		if (p == g->left) {
			u = g->right;
			if (rb_is_red(u)) {
				rb_set_black(p);
				rb_set_black(u);
				rb_set_red(g);
				node = g;
				continue;
			}
			if (node == p->right) {
				rb_rotate_left(root, p);
				node = p;
				p = rb_parent(node);
			}
			rb_set_black(p);
			rb_set_red(g);
			rb_rotate_right(root, g);
		} else {
			u = g->left;
			if (rb_is_red(u)) {
				rb_set_black(p);
				rb_set_black(u);
				rb_set_red(g);
				node = g;
				continue;
			}
			if (node == p->left) {
				rb_rotate_right(root, p);
				node = p;
				p = rb_parent(node);
			}
			rb_set_black(p);
			rb_set_red(g);
			rb_rotate_left(root, g);
		}
	}
	rb_set_black(root->node);
}

/*
 * Restores invariant 2 after a black node was removed from above `x`,
 * which may be NULL; hence `parent` is passed explicitly.
 */
static void rb_erase_fixup(struct rb_root *root, struct rb_node *x,
			   struct rb_node *parent)
{
	struct rb_node *w;

	while (x != root->node && !rb_is_red(x)) {
		if (x == parent->left) {
			w = parent->right;
			if (rb_is_red(w)) {
				rb_set_black(w);
				rb_set_red(parent);
				rb_rotate_left(root, parent);
				w = parent->right;
			}
			if (!rb_is_red(w->left) && !rb_is_red(w->right)) {
				rb_set_red(w);
				x = parent;
				parent = rb_parent(x);
				continue;
			}
			if (!rb_is_red(w->right)) {
				rb_set_black(w->left);
				rb_set_red(w);
				rb_rotate_right(root, w);
				w = parent->right;
			}
			w->parent_color = (w->parent_color & ~RB_BLACK) |
					  (parent->parent_color & RB_BLACK);
			rb_set_black(parent);
			rb_set_black(w->right);
			rb_rotate_left(root, parent);
		} else {
			w = parent->left;
			if (rb_is_red(w)) {
				rb_set_black(w);
				rb_set_red(parent);
				rb_rotate_right(root, parent);
				w = parent->left;
			}
			if (!rb_is_red(w->left) && !rb_is_red(w->right)) {
				rb_set_red(w);
				x = parent;
				parent = rb_parent(x);
				continue;
			}
			if (!rb_is_red(w->left)) {
				rb_set_black(w->right);
				rb_set_red(w);
				rb_rotate_left(root, w);
				w = parent->left;
			}
			w->parent_color = (w->parent_color & ~RB_BLACK) |
					  (parent->parent_color & RB_BLACK);
			rb_set_black(parent);
			rb_set_black(w->left);
			rb_rotate_right(root, parent);
		}
		x = root->node;
		break;
	}
	if (x != NULL)
		rb_set_black(x);
}

void rb_erase(struct rb_root *root, struct rb_node *z)
{
	struct rb_node *child, *parent, *y;
	uintptr_t removed_color;

	if (z->left == NULL || z->right == NULL) {
		child = z->left != NULL ? z->left : z->right;
		parent = rb_parent(z);
		removed_color = z->parent_color & RB_BLACK;
		if (child != NULL)
			rb_set_parent(child, parent);
		rb_replace_child(root, parent, z, child);
	} else {
		/* Two children: z's successor y, which has no left child,
		 * takes z's place and colour; y's old spot loses a node. */
		y = z->right;
		while (y->left != NULL)
			y = y->left;
		child = y->right;
		parent = rb_parent(y);
		removed_color = y->parent_color & RB_BLACK;
		if (parent == z) {
			parent = y;
		} else {
			if (child != NULL)
				rb_set_parent(child, parent);
			parent->left = child;
			y->right = z->right;
			rb_set_parent(z->right, y);
		}
		y->parent_color = z->parent_color;
		y->left = z->left;
		rb_set_parent(z->left, y);
		rb_replace_child(root, rb_parent(z), z, y);
	}
	if (removed_color == RB_BLACK)
		rb_erase_fixup(root, child, parent);
}

struct rb_node *rb_first(const struct rb_root *root)
{
	struct rb_node *n = root->node;

	if (n == NULL)
		return NULL;
	while (n->left != NULL)
		n = n->left;
	return n;
}

struct rb_node *rb_last(const struct rb_root *root)
{
	struct rb_node *n = root->node;

	if (n == NULL)
		return NULL;
	while (n->right != NULL)
		n = n->right;
	return n;
}

struct rb_node *rb_next(const struct rb_node *n)
{
	struct rb_node *p;

	if (n->right != NULL) {
		n = n->right;
		while (n->left != NULL)
			n = n->left;
		return (struct rb_node *)n;
	}
	while ((p = rb_parent(n)) != NULL && n == p->right)
		n = p;
	return p;
}

struct rb_node *rb_prev(const struct rb_node *n)
{
	struct rb_node *p;

	if (n->left != NULL) {
		n = n->left;
		while (n->right != NULL)
			n = n->right;
		return (struct rb_node *)n;
	}
	while ((p = rb_parent(n)) != NULL && n == p->left)
		n = p;
	return p;
}

static int rb_check_subtree(const struct rb_node *n,
			    const struct rb_node *parent)
{
	int lh, rh;

	if (n == NULL)
		return 1;
	if (rb_parent(n) != parent)
		return -1;
	if (rb_is_red(n) && (rb_is_red(n->left) || rb_is_red(n->right)))
		return -1;
	lh = rb_check_subtree(n->left, n);
	rh = rb_check_subtree(n->right, n);
	if (lh < 0 || rh < 0 || lh != rh)
		return -1;
	return lh + !rb_is_red(n);
}

int rb_check(const struct rb_root *root)
{
	if (rb_is_red(root->node))
		return -1;
	return rb_check_subtree(root->node, NULL);
}
