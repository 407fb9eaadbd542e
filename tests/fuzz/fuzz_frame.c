/*
 * fuzz_frame.c - libFuzzer target for what npusand does with the bytes a
 * client sends (daemon/wire.c): reassembling frames from a stream that
 * arrives in arbitrary pieces, decoding each envelope, checking a Register
 * or a Query, and cleaning and filtering its strings.
 *
 * The input is the byte stream of one connection. It is fed twice: whole,
 * and in pieces of 1 to 16 bytes chosen from the input itself, as recv()
 * might return them; both must give the same frames and the same verdicts,
 * and the stream must end where the server would close. Every cleaned
 * string must be valid UTF-8 without control characters; every answer
 * frame built from a decoded request must unpack again. Linked with
 * standalone.c instead of libFuzzer, it replays tests/fuzz/corpus_frame.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_frame: %s\n", what);
		abort();
	}
}

/* A kept string (wire_clean(), text_keep()): valid UTF-8, no C0 control
 * but tab and newline (what a trace can carry), short enough. */
static void check_clean(const char *s, size_t cap)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len;

	if (s == NULL)
		return;
	len = strlen(s);
	check(len > 0 && len < cap, "cleaned length");
	for (size_t i = 0; i < len;) {
		size_t n = 1;

		if (p[i] >= 0x80) {
			n = utf8_seq(p + i, len - i);
			check(n != 0, "cleaned string is not UTF-8");
		} else {
			check(p[i] >= 0x20 || p[i] == '\t' || p[i] == '\n',
			      "control left in");
		}
		i += n;
	}
}

/* A finding answer built from a request's filter strings unpacks back. */
static void check_answer(const char *job)
{
	Npusan__Finding f = NPUSAN__FINDING__INIT;
	struct wire_batch b = { 0 };
	Npusan__FromDaemon *m;
	uint8_t *fr;
	size_t len;
	uint32_t plen;

	f.job = (char *)job;
	f.has_id = 1;
	f.id = 7;
	check(wire_batch_add(&b, 1, &f.base) == 0, "batch_add");
	check(wire_batch_frame(&b, 4, 2, true, &fr, &len) == 0, "batch_frame");
	check(frame_header_decode(fr, &plen) == 0 &&
		      plen + FRAME_HEADER_SIZE == len, "answer header");
	m = npusan__from_daemon__unpack(NULL, plen, fr + FRAME_HEADER_SIZE);
	check(m != NULL && m->msg_case == NPUSAN__FROM_DAEMON__MSG_FINDINGS &&
		      m->findings->n_findings == 1 && m->findings->done &&
		      m->findings->findings[0]->id == 7,
	      "answer does not unpack");
	check((job == NULL) == (m->findings->findings[0]->job == NULL) &&
		      (job == NULL ||
		       strcmp(job, m->findings->findings[0]->job) == 0),
	      "answer string changed");
	npusan__from_daemon__free_unpacked(m, NULL);
	free(fr);
	wire_batch_free(&b);
}

/*
 * The verdict on one frame, as a small number: what the server would do.
 * 1 register accepted for checking, 2 register refused, 3 query served,
 * 4 query refused, 5 filter refused, negative: the decode error.
 */
static int frame_verdict(const uint8_t *p, size_t len)
{
	struct wire_strings strs;
	struct store_process proc;
	struct store_filter f;
	Npusan__ToDaemon *m;
	const char *why = NULL;
	int err = wire_decode(p, len, &m, &why), v;

	if (err < 0) {
		check(err == -EBADMSG || err == -EPROTO, "decode error code");
		check(why != NULL, "no reason");
		return err;
	}
	if (m->msg_case == NPUSAN__TO_DAEMON__MSG_REGISTER) {
		v = wire_register_process(m->register_, &strs, &proc, &why) == 0
			    ? 1 : 2;
		if (v == 1) {
			check_clean(proc.host, sizeof(strs.host));
			check_clean(proc.exe, sizeof(strs.exe));
			check_clean(proc.job, sizeof(strs.job));
			check(proc.pid == m->register_->pid, "pid changed");
			check_answer(proc.job);
		} else {
			check(why != NULL, "no reason");
		}
	} else {
		const Npusan__Query *q = m->query;

		v = wire_query_check(q, &why) == 0 ? 3 : 4;
		if (v == 3 && q->q_case == NPUSAN__QUERY__Q_LIST) {
			wire_list_filter(q->list, &strs, &f);
			if (f.job != NULL && f.job[0] != '\0')
				check_clean(f.job, sizeof(strs.job));
			check_answer(f.job);
		} else if (v == 3 && q->q_case == NPUSAN__QUERY__Q_FINDINGS) {
			if (wire_findings_filter(q->findings, &strs, &f, &why) <
			    0) {
				v = 5;
			} else {
				if (f.job != NULL && f.job[0] != '\0')
					check_clean(f.job, sizeof(strs.job));
				check(!f.has_kind || f.kind < FINDING_KIND_COUNT,
				      "kind out of range");
				check(f.since_ms >= 0, "negative since");
			}
		}
		if (v == 4)
			check(why != NULL, "no reason");
	}
	npusan__to_daemon__free_unpacked(m, NULL);
	return v;
}

#define MAX_FRAMES 4096

struct run {
	int verdicts[MAX_FRAMES];
	size_t nframes;
	int end; /* 0: clean end between frames; 1: truncated; -errno */
};

/*
 * Feeds the stream to a wire_rx in pieces (`chunked`: sizes drawn from the
 * data; else as much as it asks for) until the server would stop: the end
 * of the data, an oversized header, or a frame after which it closes.
 */
static void feed(const uint8_t *data, size_t size, bool chunked,
		 struct run *out)
{
	struct wire_rx rx = { 0 };
	size_t off = 0, k = 0;

	memset(out, 0, sizeof(*out));
	while (off < size && out->nframes < MAX_FRAMES) {
		uint8_t *p;
		size_t n;
		int r;

		wire_rx_next(&rx, &p, &n);
		check(n > 0, "nothing asked for");
		if (chunked) {
			size_t piece = 1 + data[k++ % size] % 16;

			n = n < piece ? n : piece;
		}
		n = n < size - off ? n : size - off;
		memcpy(p, data + off, n);
		off += n;
		r = wire_rx_advance(&rx, n);
		if (r < 0) {
			check(r == -EMSGSIZE, "rx error other than size");
			out->end = r;
			wire_rx_reset(&rx);
			return;
		}
		if (r == 1) {
			size_t len;
			const uint8_t *pl = wire_rx_payload(&rx, &len);

			check(len <= WIRE_RX_MAX, "frame past the cap");
			out->verdicts[out->nframes++] = frame_verdict(pl, len);
			wire_rx_reset(&rx);
		}
	}
	out->end = wire_rx_idle(&rx) ? 0 : 1;
	wire_rx_reset(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct run whole, pieces;
	char out[8];

	feed(data, size, false, &whole);
	feed(data, size, true, &pieces);
	check(whole.nframes == pieces.nframes, "frame count depends on reads");
	check(whole.end == pieces.end, "the end depends on reads");
	check(memcmp(whole.verdicts, pieces.verdicts,
		     whole.nframes * sizeof(whole.verdicts[0])) == 0,
	      "verdicts depend on reads");
	/* The cleaner alone, on the raw input as a string. */
	if (size > 0 && memchr(data, '\0', size) != NULL)
		check_clean(wire_clean((const char *)data, out, sizeof(out)),
			    sizeof(out));
	return 0;
}
