/*
 * wire.c - frames and envelopes on npusand's socket (see wire.h).
 *
 * Answers are built by hand at the outermost two levels: each item of a
 * long answer is packed on its own as it comes (wire_batch_add()), and the
 * reply and envelope around the items are three length-delimited fields
 * written here. That is exactly protobuf's encoding of the nested messages,
 * so clients unpack a FromDaemon as usual, and the daemon never copies the
 * strings the store lends its callbacks.
 */
#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "text.h"

/* ---- receiving --------------------------------------------------------- */

void wire_rx_next(struct wire_rx *rx, uint8_t **p, size_t *n)
{
	if (rx->hdr_got < FRAME_HEADER_SIZE) {
		*p = rx->hdr + rx->hdr_got;
		*n = FRAME_HEADER_SIZE - rx->hdr_got;
	} else {
		*p = rx->buf + rx->got;
		*n = rx->len - rx->got;
	}
}

int wire_rx_advance(struct wire_rx *rx, size_t n)
{
	uint32_t len;

	if (rx->hdr_got < FRAME_HEADER_SIZE) {
		rx->hdr_got += (uint32_t)n;
		if (rx->hdr_got < FRAME_HEADER_SIZE)
			return 0;
		if (frame_header_decode(rx->hdr, &len) < 0 ||
		    len > WIRE_RX_MAX)
			return -EMSGSIZE;
		rx->len = len;
		rx->got = 0;
		/* One byte at least, so a whole frame always has a buffer. */
		rx->buf = malloc(len > 0 ? len : 1);
		if (rx->buf == NULL)
			return -ENOMEM;
		return len == 0 ? 1 : 0;
	}
	rx->got += (uint32_t)n;
	return rx->got == rx->len ? 1 : 0;
}

void wire_rx_reset(struct wire_rx *rx)
{
	free(rx->buf);
	memset(rx, 0, sizeof(*rx));
}

/* ---- decoding ---------------------------------------------------------- */

int wire_decode(const uint8_t *p, size_t len, Npusan__ToDaemon **out,
		const char **why)
{
	Npusan__ToDaemon *m = npusan__to_daemon__unpack(NULL, len, p);

	if (m == NULL) {
		*why = "malformed message";
		return -EBADMSG;
	}
	if ((m->msg_case == NPUSAN__TO_DAEMON__MSG_REGISTER &&
	     m->register_ != NULL) ||
	    (m->msg_case == NPUSAN__TO_DAEMON__MSG_QUERY && m->query != NULL)) {
		*out = m;
		return 0;
	}
	npusan__to_daemon__free_unpacked(m, NULL);
	*why = "unknown message";
	return -EPROTO;
}

char *wire_clean(const char *s, char *out, size_t cap)
{
	if (s == NULL || cap == 0)
		return NULL;
	return text_keep(s, strlen(s), out, cap) > 0 ? out : NULL;
}

int wire_register_process(const Npusan__Register *r, struct wire_strings *strs,
			  struct store_process *p, const char **why)
{
	if (!r->has_protocol_version ||
	    r->protocol_version != WIRE_PROTOCOL_VERSION) {
		*why = "unsupported protocol version";
		return -EPROTO;
	}
	if (!r->has_pid) {
		*why = "no pid";
		return -EPROTO;
	}
	memset(p, 0, sizeof(*p));
	p->pid = r->pid;
	p->start_time = r->has_start_time ? r->start_time : 0;
	p->host = wire_clean(r->hostname, strs->host, sizeof(strs->host));
	p->exe = wire_clean(r->executable, strs->exe, sizeof(strs->exe));
	p->job = wire_clean(r->job, strs->job, sizeof(strs->job));
	p->run = wire_clean(r->run, strs->run, sizeof(strs->run));
	p->has_rank = r->has_rank;
	p->rank = r->has_rank ? r->rank : 0;
	p->has_local_rank = r->has_local_rank;
	p->local_rank = r->has_local_rank ? r->local_rank : 0;
	p->has_world_size = r->has_world_size;
	p->world_size = r->has_world_size ? r->world_size : 0;
	p->state = r->has_dormant && r->dormant ? STORE_DORMANT : STORE_RUNNING;
	return 0;
}

int wire_query_check(const Npusan__Query *q, const char **why)
{
	if (!q->has_protocol_version ||
	    q->protocol_version != WIRE_PROTOCOL_VERSION) {
		*why = "unsupported protocol version";
		return -EPROTO;
	}
	switch (q->q_case) {
	case NPUSAN__QUERY__Q_LIST:
		if (q->list != NULL)
			return 0;
		break;
	case NPUSAN__QUERY__Q_FINDINGS:
		if (q->findings != NULL)
			return 0;
		break;
	case NPUSAN__QUERY__Q_SHOW:
		if (q->show != NULL)
			return 0;
		break;
	case NPUSAN__QUERY__Q_STATS:
		if (q->stats != NULL)
			return 0;
		break;
	case NPUSAN__QUERY__Q_ATTACH:
		if (q->attach != NULL)
			return 0;
		break;
	default:
		break;
	}
	*why = "unknown query";
	return -EPROTO;
}

/*
 * A filter's string, kept as names are. One that this emptied stays a
 * filter ("" matches nothing, as the store keeps no empty name).
 */
static const char *wire_filter_str(const char *s, char *out, size_t cap)
{
	const char *c = wire_clean(s, out, cap);

	return s == NULL ? NULL : c != NULL ? c : "";
}

void wire_list_filter(const Npusan__ListRequest *r, struct wire_strings *strs,
		      struct store_filter *f)
{
	memset(f, 0, sizeof(*f));
	f->job = wire_filter_str(r->job, strs->job, sizeof(strs->job));
	f->has_pid = r->has_pid;
	f->pid = r->pid;
}

int wire_findings_filter(const Npusan__FindingsRequest *r,
			 struct wire_strings *strs, struct store_filter *f,
			 const char **why)
{
	memset(f, 0, sizeof(*f));
	if (r->kind != NULL) {
		unsigned k;

		for (k = 0; k < FINDING_KIND_COUNT; k++)
			if (strcmp(r->kind, finding_kind_name(k)) == 0)
				break;
		if (k == FINDING_KIND_COUNT) {
			*why = "unknown finding kind";
			return -EINVAL;
		}
		f->has_kind = true;
		f->kind = (enum finding_kind)k;
	}
	f->job = wire_filter_str(r->job, strs->job, sizeof(strs->job));
	f->has_pid = r->has_pid;
	f->pid = r->pid;
	f->has_rank = r->has_rank;
	f->rank = r->rank;
	f->since_ms = r->has_since_ms && r->since_ms > 0 ? r->since_ms : 0;
	f->limit = r->has_limit ? r->limit : 0;
	return 0;
}

/* ---- sending ----------------------------------------------------------- */

/* Bytes of `v` as a protobuf varint. */
static size_t wire_varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *wire_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* The key of field `field` with protobuf wire type `type`. */
static uint64_t wire_key(unsigned field, unsigned type)
{
	return (uint64_t)field << 3 | type;
}

#define WIRE_VARINT 0u
#define WIRE_LEN 2u

int wire_pack(const Npusan__FromDaemon *m, uint8_t **frame, size_t *len)
{
	size_t n = npusan__from_daemon__get_packed_size(m);
	uint8_t *f;

	if (n > FRAME_MAX)
		return -EMSGSIZE;
	f = malloc(FRAME_HEADER_SIZE + n);
	if (f == NULL)
		return -ENOMEM;
	frame_header_encode(n, f);
	npusan__from_daemon__pack(m, f + FRAME_HEADER_SIZE);
	*frame = f;
	*len = FRAME_HEADER_SIZE + n;
	return 0;
}

int wire_error(int code, const char *msg, uint8_t **frame, size_t *len)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__Error e = NPUSAN__ERROR__INIT;
	char clean[256];

	e.message = wire_clean(msg, clean, sizeof(clean));
	e.has_code = 1;
	e.code = code;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_ERROR;
	m.error = &e;
	return wire_pack(&m, frame, len);
}

int wire_batch_add(struct wire_batch *b, unsigned field,
		   const ProtobufCMessage *m)
{
	size_t size = protobuf_c_message_get_packed_size(m);
	uint64_t key = wire_key(field, WIRE_LEN);
	size_t need = wire_varint_len(key) + wire_varint_len(size) + size;
	uint8_t *p;

	if (need > WIRE_BATCH_MAX || b->len + need > WIRE_BATCH_MAX)
		return -E2BIG;
	if (grow_array((void **)&b->buf, &b->cap, b->len + need, 1) < 0)
		return -ENOMEM;
	p = wire_varint(b->buf + b->len, key);
	p = wire_varint(p, size);
	p += protobuf_c_message_pack(m, p);
	b->len = (size_t)(p - b->buf);
	b->n++;
	return 0;
}

int wire_batch_frame(struct wire_batch *b, unsigned env_field,
		     unsigned done_field, bool done, uint8_t **frame,
		     size_t *len)
{
	uint64_t env_key = wire_key(env_field, WIRE_LEN);
	uint64_t done_key = wire_key(done_field, WIRE_VARINT);
	size_t inner = b->len + wire_varint_len(done_key) + 1;
	size_t payload = wire_varint_len(env_key) + wire_varint_len(inner) +
			 inner;
	uint8_t *f, *p;

	/* wire_batch_add() kept b->len within WIRE_BATCH_MAX. */
	if (payload > FRAME_MAX)
		return -EMSGSIZE;
	f = malloc(FRAME_HEADER_SIZE + payload);
	if (f == NULL)
		return -ENOMEM;
	frame_header_encode(payload, f);
	p = wire_varint(f + FRAME_HEADER_SIZE, env_key);
	p = wire_varint(p, inner);
	if (b->len > 0)
		memcpy(p, b->buf, b->len);
	p += b->len;
	p = wire_varint(p, done_key);
	*p = done ? 1 : 0;
	*frame = f;
	*len = FRAME_HEADER_SIZE + payload;
	b->len = 0;
	b->n = 0;
	return 0;
}

void wire_batch_free(struct wire_batch *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}
