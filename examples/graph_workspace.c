/*
 * graph_workspace.c - npusan-graph-workspace: a graph replayed on a
 * workspace that moved (seed 002), through the agent API (npusan.h).
 *
 * A kernel-mode context (an attention operator's, say) keeps a workspace
 * that its kernels read and write. Its kernels are captured into a graph
 * on the capture stream, and the graph is replayed on the default stream.
 * Between two replays the context needs a bigger workspace and grows it as
 * a buffer grows: free the old one, allocate a bigger one. The graph still
 * replays the kernels at the old workspace's address, which now belongs to
 * the allocator: npusan reports one stale_graph_address at the replay
 * after the growth, naming the captured kernel and where the workspace was
 * allocated.
 *
 * --fixed allocates the workspace from the graph's private memory pool
 * (npusan_alloc_graph(), as the caching allocator does for memory a
 * capture allocates): the pool keeps that memory for the graph, so the
 * growth leaves the graph's memory in place, and npusan finds nothing.
 *
 * Run it under npusan:  npusanctl run -- npusan-graph-workspace [--fixed]
 * It exits 0 whatever npusan finds; `npusanctl run` then exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npusan.h"

enum { DEFAULT_STREAM = 0, CAPTURE_STREAM = 1 };
enum { GRAPH = 1, REPLAYS = 3, GROW_AT = 1 };

#define STR_(x) #x
#define STR(x) STR_(x)
/* A one-frame stack naming this line of this file, as an adapter reports
 * a Python frame. */
#define HERE(fn) here("graph_workspace.c:" STR(__LINE__) " in " fn)

static uint32_t here(const char *frame)
{
	uint32_t id = npusan_intern(frame);

	return npusan_intern_stack(&id, 1);
}

struct context {
	int fixed;
	uint64_t workspace, size;
};

/* The context's workspace of `size` bytes, for the default stream, which
 * its kernels run on (the graph is replayed there). */
static int workspace_alloc(struct context *c, uint64_t size)
{
	void *p = malloc(size);

	if (p == NULL)
		return -ENOMEM;
	c->workspace = (uint64_t)(uintptr_t)p;
	c->size = size;
	if (c->fixed)
		npusan_alloc_graph(c->workspace, size, DEFAULT_STREAM, GRAPH);
	else
		npusan_alloc(c->workspace, size, DEFAULT_STREAM,
			     HERE("workspace_alloc")); /* line: alloc */
	return 0;
}

static void workspace_free(struct context *c)
{
	npusan_free(c->workspace);
	free((void *)(uintptr_t)c->workspace);
}

/* The context's kernel: reads the input and its workspace, writes the
 * workspace and the output. */
static void attention(struct context *c, uint64_t in, uint64_t out,
		      uint64_t bytes)
{
	struct npusan_range reads[2] = { { in, bytes }, { c->workspace, c->size } };
	struct npusan_range writes[2] = { { c->workspace, c->size }, { out, bytes } };

	npusan_launch(CAPTURE_STREAM, npusan_intern("npu::attention"), reads,
		      2, writes, 2, HERE("attention")); /* line: launch */
}

static int run(int fixed)
{
	struct context c = { .fixed = fixed };
	uint64_t bytes = 4096;
	char *in = calloc(1, bytes), *out = calloc(1, bytes);
	int err = -ENOMEM;

	npusan_stream_create(CAPTURE_STREAM);
	if (in == NULL || out == NULL || workspace_alloc(&c, 1 << 16) < 0)
		goto out;
	npusan_alloc((uintptr_t)in, bytes, DEFAULT_STREAM, HERE("run"));
	npusan_alloc((uintptr_t)out, bytes, DEFAULT_STREAM, HERE("run"));
	npusan_device_sync();
	npusan_capture_begin(CAPTURE_STREAM, GRAPH);
	attention(&c, (uintptr_t)in, (uintptr_t)out, bytes);
	npusan_capture_end(CAPTURE_STREAM, GRAPH);
	for (int step = 0; step < REPLAYS; step++) {
		if (step == GROW_AT) {
			/* The context grows its workspace: the mistake. */
			workspace_free(&c);
			if (workspace_alloc(&c, 1 << 17) < 0)
				goto out;
		}
		npusan_graph_replay(GRAPH, DEFAULT_STREAM); /* line: replay */
	}
	npusan_device_sync();
	npusan_graph_destroy(GRAPH);
	workspace_free(&c);
	npusan_free((uintptr_t)in);
	npusan_free((uintptr_t)out);
	err = 0;
out:
	free(in);
	free(out);
	return err;
}

int main(int argc, char **argv)
{
	int fixed = argc == 2 && strcmp(argv[1], "--fixed") == 0;

	if (argc > 2 || (argc == 2 && !fixed)) {
		fprintf(stderr, "usage: npusan-graph-workspace [--fixed]\n"
				"Replays a graph whose workspace was freed and "
				"allocated again (--fixed: from the graph's "
				"pool), for npusanctl run.\n");
		return 2;
	}
	if (run(fixed) < 0) {
		fprintf(stderr, "npusan-graph-workspace: out of memory\n");
		return 1;
	}
	/* Short-lived: let the daemon take everything before exiting. */
	if (npusan_wait_drained(5000) == -ETIMEDOUT)
		fprintf(stderr, "npusan-graph-workspace: the daemon did not "
				"take every operation in time\n");
	printf("%d replays done\n", REPLAYS);
	return 0;
}
