/*
 * rbtree_impl.h - the red-black algorithms, written once for both kinds of
 * link that rbtree.h offers: node pointers (rb_*) and 32-bit node indices
 * (rb32_*). Only rbtree.c includes it, once per kind, after defining:
 *   RB_(name)   the name of a function of this kind
 *   RB_NODE     the node struct: parent_color, left, right
 *   RB_ROOT     the root struct: node
 *   RB_LINK     a link: what left, right and root.node hold
 *   RB_PC       the type of parent_color (a link with the colour bit)
 *   RB_NIL      the link to no node
 *   RB_CTXP     the leading parameter naming where nodes live, with its
 *               comma (empty for pointers); RB_CTX passes it on
 *   RB_N(x)     the node that non-nil link x names
 * The DESIGN invariants are rbtree.c's.
 */

#define RB_BLACK ((RB_PC)1)
#define RB_PARENT(x) ((RB_LINK)(RB_N(x)->parent_color & ~RB_BLACK))

static bool RB_(is_red)(RB_CTXP RB_LINK n)
{
	return n != RB_NIL && !(RB_N(n)->parent_color & RB_BLACK);
}

static void RB_(set_black)(RB_CTXP RB_LINK n)
{
	RB_N(n)->parent_color |= RB_BLACK;
}

static void RB_(set_red)(RB_CTXP RB_LINK n)
{
	RB_N(n)->parent_color &= ~RB_BLACK;
}

static void RB_(set_parent)(RB_CTXP RB_LINK n, RB_LINK p)
{
	RB_N(n)->parent_color = (RB_N(n)->parent_color & RB_BLACK) | (RB_PC)p;
}

/* Makes `new` take `old`'s place under `parent` (or at the root). */
static void RB_(replace_child)(RB_CTXP RB_ROOT *root, RB_LINK parent,
			       RB_LINK old, RB_LINK new)
{
	if (parent == RB_NIL)
		root->node = new;
	else if (RB_N(parent)->left == old)
		RB_N(parent)->left = new;
	else
		RB_N(parent)->right = new;
}

static void RB_(rotate_left)(RB_CTXP RB_ROOT *root, RB_LINK x)
{
	RB_LINK y = RB_N(x)->right;
	RB_LINK p = RB_PARENT(x);

	RB_N(x)->right = RB_N(y)->left;
	if (RB_N(y)->left != RB_NIL)
		RB_(set_parent)(RB_CTX RB_N(y)->left, x);
	RB_(set_parent)(RB_CTX y, p);
	RB_(replace_child)(RB_CTX root, p, x, y);
	RB_N(y)->left = x;
	RB_(set_parent)(RB_CTX x, y);
}

static void RB_(rotate_right)(RB_CTXP RB_ROOT *root, RB_LINK x)
{
	RB_LINK y = RB_N(x)->left;
	RB_LINK p = RB_PARENT(x);

	RB_N(x)->left = RB_N(y)->right;
	if (RB_N(y)->right != RB_NIL)
		RB_(set_parent)(RB_CTX RB_N(y)->right, x);
	RB_(set_parent)(RB_CTX y, p);
	RB_(replace_child)(RB_CTX root, p, x, y);
	RB_N(y)->right = x;
	RB_(set_parent)(RB_CTX x, y);
}

/* Insert fix-up with the parent p of `node` a left child of g (`left`),
 * or the mirror image; returns the node to continue from. */
static RB_LINK RB_(insert_fix)(RB_CTXP RB_ROOT *root, RB_LINK node,
			       RB_LINK p, RB_LINK g, bool left)
{
	RB_LINK u = left ? RB_N(g)->right : RB_N(g)->left;

	if (RB_(is_red)(RB_CTX u)) {
		RB_(set_black)(RB_CTX p);
		RB_(set_black)(RB_CTX u);
		RB_(set_red)(RB_CTX g);
		return g;
	}
	if (node == (left ? RB_N(p)->right : RB_N(p)->left)) {
		if (left)
			RB_(rotate_left)(RB_CTX root, p);
		else
			RB_(rotate_right)(RB_CTX root, p);
		node = p;
		p = RB_PARENT(node);
	}
	RB_(set_black)(RB_CTX p);
	RB_(set_red)(RB_CTX g);
	if (left)
		RB_(rotate_right)(RB_CTX root, g);
	else
		RB_(rotate_left)(RB_CTX root, g);
	return node;
}

void RB_(insert)(RB_CTXP RB_ROOT *root, RB_LINK node, RB_LINK parent,
		 RB_LINK *link)
{
	RB_LINK p, g;

	RB_N(node)->parent_color = (RB_PC)parent; /* red */
	RB_N(node)->left = RB_N(node)->right = RB_NIL;
	*link = node;

	while ((p = RB_PARENT(node)) != RB_NIL && RB_(is_red)(RB_CTX p)) {
		g = RB_PARENT(p); /* p is red, so not the root */
		node = RB_(insert_fix)(RB_CTX root, node, p, g,
				       p == RB_N(g)->left);
	}
	RB_(set_black)(RB_CTX root->node);
}

/*
 * One step of the erase fix-up for x, a left child of `parent` (`left`),
 * or the mirror image: returns the node to continue from, the root when
 * done.
 */
static RB_LINK RB_(erase_fix)(RB_CTXP RB_ROOT *root, RB_LINK parent,
			      bool left)
{
#define RB_NEAR(n) (left ? RB_N(n)->left : RB_N(n)->right)
#define RB_FAR(n) (left ? RB_N(n)->right : RB_N(n)->left)
	RB_LINK w = RB_FAR(parent);

	if (RB_(is_red)(RB_CTX w)) {
		RB_(set_black)(RB_CTX w);
		RB_(set_red)(RB_CTX parent);
		if (left)
			RB_(rotate_left)(RB_CTX root, parent);
		else
			RB_(rotate_right)(RB_CTX root, parent);
		w = RB_FAR(parent);
	}
	if (!RB_(is_red)(RB_CTX RB_N(w)->left) &&
	    !RB_(is_red)(RB_CTX RB_N(w)->right)) {
		RB_(set_red)(RB_CTX w);
		return parent;
	}
	if (!RB_(is_red)(RB_CTX RB_FAR(w))) {
		RB_(set_black)(RB_CTX RB_NEAR(w));
		RB_(set_red)(RB_CTX w);
		if (left)
			RB_(rotate_right)(RB_CTX root, w);
		else
			RB_(rotate_left)(RB_CTX root, w);
		w = RB_FAR(parent);
	}
	RB_N(w)->parent_color = (RB_N(w)->parent_color & ~RB_BLACK) |
				(RB_N(parent)->parent_color & RB_BLACK);
	RB_(set_black)(RB_CTX parent);
	RB_(set_black)(RB_CTX RB_FAR(w));
	if (left)
		RB_(rotate_left)(RB_CTX root, parent);
	else
		RB_(rotate_right)(RB_CTX root, parent);
	return root->node;
#undef RB_NEAR
#undef RB_FAR
}

/*
 * Restores invariant 2 after a black node was removed from above `x`,
 * which may be nil; hence `parent` is passed explicitly.
 */
static void RB_(erase_fixup)(RB_CTXP RB_ROOT *root, RB_LINK x,
			     RB_LINK parent)
{
	while (x != root->node && !RB_(is_red)(RB_CTX x)) {
		x = RB_(erase_fix)(RB_CTX root, parent,
				   x == RB_N(parent)->left);
		if (x != root->node)
			parent = RB_PARENT(x);
	}
	if (x != RB_NIL)
		RB_(set_black)(RB_CTX x);
}

/* Erase of z with two children: z's successor y, which has no left child,
 * takes z's place and colour; y's old spot loses a node. Returns the
 * colour removed, with *child and *parent where the fix-up starts. */
static RB_PC RB_(erase_two)(RB_CTXP RB_ROOT *root, RB_LINK z,
			    RB_LINK *child, RB_LINK *parent)
{
	RB_LINK y = RB_N(z)->right;
	RB_PC removed;

	while (RB_N(y)->left != RB_NIL)
		y = RB_N(y)->left;
	*child = RB_N(y)->right;
	*parent = RB_PARENT(y);
	removed = RB_N(y)->parent_color & RB_BLACK;
	if (*parent == z) {
		*parent = y;
	} else {
		if (*child != RB_NIL)
			RB_(set_parent)(RB_CTX *child, *parent);
		RB_N(*parent)->left = *child;
		RB_N(y)->right = RB_N(z)->right;
		RB_(set_parent)(RB_CTX RB_N(z)->right, y);
	}
	RB_N(y)->parent_color = RB_N(z)->parent_color;
	RB_N(y)->left = RB_N(z)->left;
	RB_(set_parent)(RB_CTX RB_N(z)->left, y);
	RB_(replace_child)(RB_CTX root, RB_PARENT(z), z, y);
	return removed;
}

void RB_(erase)(RB_CTXP RB_ROOT *root, RB_LINK z)
{
	RB_LINK child, parent;
	RB_PC removed;

	if (RB_N(z)->left == RB_NIL || RB_N(z)->right == RB_NIL) {
		child = RB_N(z)->left != RB_NIL ? RB_N(z)->left
						: RB_N(z)->right;
		parent = RB_PARENT(z);
		removed = RB_N(z)->parent_color & RB_BLACK;
		if (child != RB_NIL)
			RB_(set_parent)(RB_CTX child, parent);
		RB_(replace_child)(RB_CTX root, parent, z, child);
	} else {
		removed = RB_(erase_two)(RB_CTX root, z, &child, &parent);
	}
	if (removed == RB_BLACK)
		RB_(erase_fixup)(RB_CTX root, child, parent);
}

/* `new`, a copy of node `old` (links and colour), takes its place in the
 * tree: its parent's link (or root->node) and its children's parent links
 * name it instead. `root` is read only when `old` is the root. */
void RB_(move)(RB_CTXP RB_ROOT *root, RB_LINK old, RB_LINK new)
{
	RB_(replace_child)(RB_CTX root, RB_PARENT(new), old, new);
	if (RB_N(new)->left != RB_NIL)
		RB_(set_parent)(RB_CTX RB_N(new)->left, new);
	if (RB_N(new)->right != RB_NIL)
		RB_(set_parent)(RB_CTX RB_N(new)->right, new);
}

RB_LINK RB_(first)(RB_CTXP const RB_ROOT *root)
{
	RB_LINK n = root->node;

	if (n == RB_NIL)
		return RB_NIL;
	while (RB_N(n)->left != RB_NIL)
		n = RB_N(n)->left;
	return n;
}

RB_LINK RB_(last)(RB_CTXP const RB_ROOT *root)
{
	RB_LINK n = root->node;

	if (n == RB_NIL)
		return RB_NIL;
	while (RB_N(n)->right != RB_NIL)
		n = RB_N(n)->right;
	return n;
}

RB_LINK RB_(next)(RB_CTXP RB_CLINK cn)
{
	RB_LINK n = (RB_LINK)cn, p;

	if (RB_N(n)->right != RB_NIL) {
		n = RB_N(n)->right;
		while (RB_N(n)->left != RB_NIL)
			n = RB_N(n)->left;
		return n;
	}
	while ((p = RB_PARENT(n)) != RB_NIL && n == RB_N(p)->right)
		n = p;
	return p;
}

RB_LINK RB_(prev)(RB_CTXP RB_CLINK cn)
{
	RB_LINK n = (RB_LINK)cn, p;

	if (RB_N(n)->left != RB_NIL) {
		n = RB_N(n)->left;
		while (RB_N(n)->right != RB_NIL)
			n = RB_N(n)->right;
		return n;
	}
	while ((p = RB_PARENT(n)) != RB_NIL && n == RB_N(p)->left)
		n = p;
	return p;
}

static int RB_(check_subtree)(RB_CTXP RB_LINK n, RB_LINK parent)
{
	int lh, rh;

	if (n == RB_NIL)
		return 1;
	if (RB_PARENT(n) != parent)
		return -1;
	if (RB_(is_red)(RB_CTX n) && (RB_(is_red)(RB_CTX RB_N(n)->left) ||
				      RB_(is_red)(RB_CTX RB_N(n)->right)))
		return -1;
	lh = RB_(check_subtree)(RB_CTX RB_N(n)->left, n);
	rh = RB_(check_subtree)(RB_CTX RB_N(n)->right, n);
	if (lh < 0 || rh < 0 || lh != rh)
		return -1;
	return lh + !RB_(is_red)(RB_CTX n);
}

int RB_(check)(RB_CTXP const RB_ROOT *root)
{
	if (RB_(is_red)(RB_CTX root->node))
		return -1;
	return RB_(check_subtree)(RB_CTX root->node, RB_NIL);
}

#undef RB_BLACK
#undef RB_PARENT
