/*
 * frame.h - the framing of everything on npusand's Unix socket.
 *
 * A frame is a 4-byte little-endian payload length followed by that many
 * bytes of one protobuf envelope (proto/npusan.proto); a length over
 * FRAME_MAX is a protocol error. A file descriptor may travel with a frame
 * as SCM_RIGHTS data on its first byte.
 *
 * frame_header_encode()/frame_header_decode() are pure, so that an event
 * loop (the daemon's libuv one) can frame its own buffers. frame_send() and
 * frame_recv() do whole frames on a stream socket, blocking or not, waiting
 * at most a timeout in poll(); they never raise SIGPIPE (MSG_NOSIGNAL).
 */
#ifndef NPUSAN_FRAME_H
#define NPUSAN_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_HEADER_SIZE 4u
#define FRAME_MAX (1u << 20)

/* Writes the header of a `len`-byte payload. 0; -EMSGSIZE past FRAME_MAX. */
int frame_header_encode(size_t len, uint8_t hdr[FRAME_HEADER_SIZE]);

/*
 * The payload length a header announces, into *len. 0; -EMSGSIZE when it
 * exceeds FRAME_MAX (the peer is broken: close the connection).
 */
int frame_header_decode(const uint8_t hdr[FRAME_HEADER_SIZE], uint32_t *len);

/*
 * Sends one frame of `len` payload bytes, with `fd` attached when it is not
 * negative (the caller keeps its fd; the peer gets a duplicate). Waits at
 * most `timeout_ms` (-1: forever) for room in the socket.
 * 0; -EMSGSIZE past FRAME_MAX; -ETIMEDOUT; -EPIPE or -ECONNRESET when the
 * peer is gone; another negative errno from sendmsg(2) or poll(2). After
 * an error part of the frame may have gone out: close the connection.
 */
int frame_send(int sock, const void *payload, size_t len, int fd,
	       int timeout_ms);

/*
 * Receives one frame into `buf` (`cap` bytes), its payload length into
 * *len, waiting at most `timeout_ms` (-1: forever) in total. When `fd` is
 * not NULL, *fd is the first descriptor that came with the frame, or -1;
 * the caller owns and closes it. Descriptors beyond the first, or any when
 * `fd` is NULL, are closed. Received descriptors are close-on-exec.
 * 0 with a frame;
 * -ECONNRESET: the peer closed (or reset) the connection between frames;
 * -EPROTO: the stream ended inside a header (a truncated frame);
 * -EBADMSG: the stream ended inside a payload (EOF mid-frame);
 * -EMSGSIZE: the header announces more than FRAME_MAX or `cap` bytes;
 * -EAGAIN: the time ran out before the first byte of a frame arrived; the
 *  stream is still in step and a later call may receive the frame;
 * -ETIMEDOUT: the time ran out inside a frame;
 * another negative errno from recvmsg(2) or poll(2).
 * After any error but -EAGAIN the stream is out of step: close the
 * connection. On any error *len and *fd are untouched and nothing received
 * is left open.
 */
int frame_recv(int sock, void *buf, size_t cap, size_t *len, int *fd,
	       int timeout_ms);

#endif
