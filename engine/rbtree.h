/*
 * rbtree.h - an intrusive red-black tree.
 *
 * The engine keeps its allocations and its access history in address order
 * and needs "the entry at or below this address" and in-order neighbours in
 * O(log n) without an allocation per lookup. Nodes are embedded in the
 * caller's structs (recover them with container_of); the tree never
 * allocates or frees, and the caller does its own key comparisons while
 * searching, as Linux's and liburing's users of rbtree do.
 *
 * Insertion is two steps: walk down comparing keys to find the NULL link
 * where the node belongs and its parent, then rb_insert(root, node, parent,
 * link) places and rebalances it. The rb32_* functions below do the same
 * with 32-bit links, for structures that are mostly tree nodes.
 */
#ifndef NPUSAN_RBTREE_H
#define NPUSAN_RBTREE_H

#include <stddef.h>
#include <stdint.h>

struct rb_node {
	uintptr_t parent_color; /* parent pointer; low bit 1 = black */
	struct rb_node *left;
	struct rb_node *right;
};

struct rb_root {
	struct rb_node *node;
};

#define rb_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline struct rb_node *rb_parent(const struct rb_node *n)
{
	return (struct rb_node *)(n->parent_color & ~(uintptr_t)1);
}

/* Links `node` at `*link` (a NULL child pointer of `parent`, or the root's
 * pointer when parent is NULL) and rebalances. */
void rb_insert(struct rb_root *root, struct rb_node *node,
	       struct rb_node *parent, struct rb_node **link);

/* Unlinks `node`, which must be in the tree, and rebalances. */
void rb_erase(struct rb_root *root, struct rb_node *node);

/* `new` takes the place of `old`, of which it holds a copy: for moving a
 * node in memory. `root` is read only when `old` is the root. */
void rb_move(struct rb_root *root, struct rb_node *old, struct rb_node *new);

/* In-order neighbours; NULL past either end. */
struct rb_node *rb_first(const struct rb_root *root);
struct rb_node *rb_last(const struct rb_root *root);
struct rb_node *rb_next(const struct rb_node *node);
struct rb_node *rb_prev(const struct rb_node *node);

/*
 * Checks the red-black invariants and parent links; returns the black
 * height, or -1 when an invariant is broken. For tests.
 */
int rb_check(const struct rb_root *root);

/*
 * The same tree with 32-bit links, for nodes that live in chunks of
 * 1 << RB32_SHIFT bytes: a link is the chunk's number (its place in the
 * directory) shifted up, plus the node's offset in the chunk; 0 is no
 * node, so no node may start a chunk, and a node's offset must be even
 * (the colour bit). The directory holds, for chunk number n, the chunk's
 * address less n << RB32_SHIFT, so that a link plus its entry is the
 * node's address. The functions take the directory; it may move between
 * calls.
 */
#define RB32_SHIFT 12

struct rb32_node {
	uint32_t parent_color;
	uint32_t left;
	uint32_t right;
};

struct rb32_root {
	uint32_t node;
};

struct rb32_dir {
	uintptr_t *base;
};

/* The node that link i, not 0, names. */
static inline struct rb32_node *rb32_node_of(const struct rb32_dir *d,
					     uint32_t i)
{
	return (struct rb32_node *)(d->base[i >> RB32_SHIFT] + i);
}

/* The node that link i names, NULL for 0. */
static inline struct rb32_node *rb32_node(const struct rb32_dir *d,
					  uint32_t i)
{
	return i != 0 ? rb32_node_of(d, i) : NULL;
}

static inline uint32_t rb32_parent(const struct rb32_dir *d, uint32_t i)
{
	return rb32_node(d, i)->parent_color & ~UINT32_C(1);
}

void rb32_insert(const struct rb32_dir *d, struct rb32_root *root,
		 uint32_t node, uint32_t parent, uint32_t *link);
void rb32_erase(const struct rb32_dir *d, struct rb32_root *root,
		uint32_t node);
void rb32_move(const struct rb32_dir *d, struct rb32_root *root,
	       uint32_t old, uint32_t new);
uint32_t rb32_first(const struct rb32_dir *d, const struct rb32_root *root);
uint32_t rb32_last(const struct rb32_dir *d, const struct rb32_root *root);
uint32_t rb32_next(const struct rb32_dir *d, uint32_t node);
uint32_t rb32_prev(const struct rb32_dir *d, uint32_t node);
int rb32_check(const struct rb32_dir *d, const struct rb32_root *root);

#endif
