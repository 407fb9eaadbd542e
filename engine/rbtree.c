/*
 * rbtree.c - an intrusive red-black tree with parent pointers, in two kinds:
 * links that are node pointers (rb_*), and links that are 32-bit indices
 * into chunks of nodes (rb32_*), which make a node 12 bytes instead of 24.
 *
 * The algorithms are the textbook ones (CLRS, chapter 13) with nil for the
 * sentinel leaves, which is why erase fix-up carries the parent of the
 * possibly-nil node it repairs. They are written once, in rbtree_impl.h,
 * and compiled here for each kind of link. The colour lives in the low bit
 * of the parent link, which nodes' alignment leaves free.
 *
 * DESIGN
 *  1. Every red node has black children (nil leaves are black).
 *  2. Every path from a node down to a nil leaf passes the same number of
 *     black nodes, so the height is at most 2 log2(n + 1).
 *  3. The root is black.
 */
#include "rbtree.h"

#include <stdbool.h>

/* ---- links that are pointers ------------------------------------------ */

/* Names for the link types, so that one declaration can name several. */
typedef struct rb_node *rb_link;
typedef const struct rb_node *rb_clink;

#define RB_(name) rb_##name
#define RB_NODE struct rb_node
#define RB_ROOT struct rb_root
#define RB_LINK rb_link
#define RB_CLINK rb_clink
#define RB_PC uintptr_t
#define RB_NIL NULL
#define RB_CTXP
#define RB_CTX
#define RB_N(x) (x)
#include "rbtree_impl.h"
#undef RB_
#undef RB_NODE
#undef RB_ROOT
#undef RB_LINK
#undef RB_CLINK
#undef RB_PC
#undef RB_NIL
#undef RB_CTXP
#undef RB_CTX
#undef RB_N

/* ---- links that are 32-bit indices ------------------------------------ */

#define RB_(name) rb32_##name
#define RB_NODE struct rb32_node
#define RB_ROOT struct rb32_root
#define RB_LINK uint32_t
#define RB_CLINK uint32_t
#define RB_PC uint32_t
#define RB_NIL 0
#define RB_CTXP const struct rb32_dir *d,
#define RB_CTX d,
#define RB_N(x) rb32_node_of(d, (x))
#include "rbtree_impl.h"
