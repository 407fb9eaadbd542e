/*
 * wire.h - what crosses npusand's socket, without the socket: reassembling
 * frames from a byte stream, decoding and checking the envelopes clients
 * send, cleaning the strings in them, and packing answers into frames.
 *
 * Pure (no I/O, no libuv, no store): server.c drives it from its sockets,
 * and tests/fuzz/fuzz_frame.c drives exactly the same code from a fuzzer.
 * Everything a client sends is untrusted; nothing here asserts on it.
 */
#ifndef NPUSAN_DAEMON_WIRE_H
#define NPUSAN_DAEMON_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "store.h"

/* The protocol_version of Register and Query this daemon speaks. */
#define WIRE_PROTOCOL_VERSION 1

/*
 * The largest request frame the daemon takes. Below FRAME_MAX on purpose:
 * a Register is a few KiB at most and a Query less, and the bound is what
 * an idle connection may make the daemon hold. A larger announced length
 * is answered as an oversized frame.
 */
#define WIRE_RX_MAX (64u * 1024)

/* Payload bytes the items of one answer frame may take (FRAME_MAX less
 * the envelope's tag, length and `done`). */
#define WIRE_BATCH_MAX (FRAME_MAX - 16u)

/* Longest strings kept from a Register or a query, in bytes. */
#define WIRE_HOST_MAX 255
#define WIRE_EXE_MAX 4095
#define WIRE_JOB_MAX 255

/* ---- receiving --------------------------------------------------------- */

/* One connection's frame in the making. Zero-initialised is idle. */
struct wire_rx {
	uint8_t hdr[FRAME_HEADER_SIZE];
	uint32_t hdr_got;
	uint32_t len; /* the payload length, once the header is whole */
	uint32_t got;
	uint8_t *buf; /* the payload, allocated once the header is whole */
};

/*
 * Where the stream's next bytes go: at most *n bytes at *p, never past the
 * current frame (so a descriptor sent with a frame's first byte arrives
 * with that frame's header).
 */
void wire_rx_next(struct wire_rx *rx, uint8_t **p, size_t *n);

/*
 * `n` bytes arrived where wire_rx_next() pointed. 1 when a frame is whole
 * (see wire_rx_payload(); then wire_rx_reset()); 0 when more is needed;
 * -EMSGSIZE when the header announces more than WIRE_RX_MAX (the stream is
 * out of step: close); -ENOMEM.
 */
int wire_rx_advance(struct wire_rx *rx, size_t n);

/* The whole frame's payload after wire_rx_advance() returned 1. */
static inline const uint8_t *wire_rx_payload(const struct wire_rx *rx,
					     size_t *len)
{
	*len = rx->len;
	return rx->buf;
}

/* True between frames: nothing of a next frame has arrived. */
static inline bool wire_rx_idle(const struct wire_rx *rx)
{
	return rx->hdr_got == 0;
}

/* Forgets the frame (whole or not) and frees its buffer. */
void wire_rx_reset(struct wire_rx *rx);

/* ---- decoding ---------------------------------------------------------- */

/*
 * Unpacks one envelope. 0 with *out (free with
 * npusan__to_daemon__free_unpacked(*out, NULL)); -EBADMSG when it does not
 * decode; -EPROTO when it decodes but carries no message this daemon knows
 * (an empty envelope, or a field of a newer protocol). *why says why, a
 * static string.
 */
int wire_decode(const uint8_t *p, size_t len, Npusan__ToDaemon **out,
		const char **why);

/*
 * A copy of `s` into `out` (`cap` bytes, NUL included) as text_keep()
 * keeps text to store and pass on (common/text.h): valid UTF-8, which
 * protobuf-c does not check, holding what the trace format can carry; the
 * rest becomes '?', and displays clean it. The copy is cut at `cap` - 1
 * bytes, on a character boundary. Returns `out`, or NULL when `s` is NULL
 * or the copy is empty.
 */
char *wire_clean(const char *s, char *out, size_t cap);

/* Cleaned strings a store_process or store_filter built here points to. */
struct wire_strings {
	char host[WIRE_HOST_MAX + 1];
	char exe[WIRE_EXE_MAX + 1];
	char job[WIRE_JOB_MAX + 1];
	char run[WIRE_JOB_MAX + 1];
};

/*
 * Checks a Register and fills *p from it: pid, start_time, host, exe, job,
 * run, ranks, world size and state (dormant or running), strings cleaned into
 * *strs. The caller sets what
 * the message must not decide: uid (from SO_PEERCRED), state and times.
 * 0; -EPROTO for a protocol version other than WIRE_PROTOCOL_VERSION or a
 * missing pid (*why).
 */
int wire_register_process(const Npusan__Register *r, struct wire_strings *strs,
			  struct store_process *p, const char **why);

/*
 * Checks a Query: 0 when it is of WIRE_PROTOCOL_VERSION and asks for
 * something; -EPROTO otherwise (*why).
 */
int wire_query_check(const Npusan__Query *q, const char **why);

/* The store filter of a list request; strings point into *strs. */
void wire_list_filter(const Npusan__ListRequest *r, struct wire_strings *strs,
		      struct store_filter *f);

/*
 * The store filter of a findings request; strings point into *strs.
 * 0; -EINVAL for a kind findings.md does not define (*why).
 */
int wire_findings_filter(const Npusan__FindingsRequest *r,
			 struct wire_strings *strs, struct store_filter *f,
			 const char **why);

/* ---- sending ----------------------------------------------------------- */

/*
 * One whole FromDaemon as a frame (header and payload) in *frame, which
 * the caller frees. 0; -EMSGSIZE past FRAME_MAX; -ENOMEM.
 */
int wire_pack(const Npusan__FromDaemon *m, uint8_t **frame, size_t *len);

/* An Error frame: `code` a positive errno, `msg` cleaned. As wire_pack(). */
int wire_error(int code, const char *msg, uint8_t **frame, size_t *len);

/*
 * The items of one long answer (ListReply.processes or
 * FindingsReply.findings), packed as they come, so that a callback's
 * borrowed strings need no copy. Zero-initialised is empty.
 */
struct wire_batch {
	uint8_t *buf;
	size_t len, cap;
	unsigned n; /* items */
};

/*
 * Appends `m` as repeated field `field` of the reply. 0; -E2BIG when it
 * does not fit the frame's WIRE_BATCH_MAX (send the batch, then add it
 * again; in an empty batch the item alone is too large); -ENOMEM.
 */
int wire_batch_add(struct wire_batch *b, unsigned field,
		   const ProtobufCMessage *m);

/*
 * The frame of a FromDaemon whose field `env_field` is a reply holding the
 * batch's items and, in its field `done_field`, `done`. Empties the batch.
 * 0 with *frame (caller frees); -ENOMEM (the batch is kept).
 */
int wire_batch_frame(struct wire_batch *b, unsigned env_field,
		     unsigned done_field, bool done, uint8_t **frame,
		     size_t *len);

void wire_batch_free(struct wire_batch *b);

#endif
