/*
 * frame.c - length-prefixed frames with descriptors, over a stream socket.
 *
 * Every send and receive is non-blocking (MSG_DONTWAIT) and waits in poll()
 * against one deadline, so a blocking socket and a non-blocking one behave
 * the same and a frame never takes longer than its caller allowed.
 */
#include "frame.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

/* Descriptors one recvmsg() takes in; more are discarded by the kernel. */
#define FRAME_MAX_FDS 8

/* No deadline: wait forever. */
#define FRAME_FOREVER INT64_MAX

int frame_header_encode(size_t len, uint8_t hdr[FRAME_HEADER_SIZE])
{
	if (len > FRAME_MAX)
		return -EMSGSIZE;
	for (unsigned i = 0; i < FRAME_HEADER_SIZE; i++)
		hdr[i] = (uint8_t)(len >> (8 * i));
	return 0;
}

int frame_header_decode(const uint8_t hdr[FRAME_HEADER_SIZE], uint32_t *len)
{
	uint32_t n = 0;

	for (unsigned i = 0; i < FRAME_HEADER_SIZE; i++)
		n |= (uint32_t)hdr[i] << (8 * i);
	if (n > FRAME_MAX)
		return -EMSGSIZE;
	*len = n;
	return 0;
}

static int64_t frame_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? FRAME_FOREVER : (int64_t)clock_mono_ms() + timeout_ms;
}

/*
 * Waits until `sock` is ready for `events` or the deadline passes.
 * 0 when ready (or in error, which the next call on it reports);
 * -ETIMEDOUT; -EBADF; a negative errno from poll(2).
 */
static int frame_wait(int sock, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = sock, .events = events };
		int64_t left = deadline - (int64_t)clock_mono_ms();
		int timeout = deadline == FRAME_FOREVER ? -1 :
			      left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
		int n = poll(&p, 1, timeout);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			return p.revents & POLLNVAL ? -EBADF : 0;
		if (n == 0 && left <= 0)
			return -ETIMEDOUT;
	}
}

int frame_send(int sock, const void *payload, size_t len, int fd,
	       int timeout_ms)
{
	int64_t deadline = frame_deadline(timeout_ms);
	uint8_t hdr[FRAME_HEADER_SIZE];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov[2] = {
		{ .iov_base = hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	int err = frame_header_encode(len, hdr);

	if (err < 0)
		return err;
	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	while (msg.msg_iovlen > 0) {
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			err = frame_wait(sock, POLLOUT, deadline);
			if (err < 0)
				return err;
			continue;
		}
		/* The descriptor went with the first byte; never send it twice. */
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		while (msg.msg_iovlen > 0 && (size_t)n >= msg.msg_iov->iov_len) {
			n -= (ssize_t)msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			msg.msg_iov->iov_base = (uint8_t *)msg.msg_iov->iov_base + n;
			msg.msg_iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/*
 * Keeps the first descriptor in `c` for *fd (when fd is not NULL and holds
 * none yet) and closes every other one.
 */
static void frame_take_fds(struct cmsghdr *c, int *fd)
{
	size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

	for (size_t i = 0; i < n; i++) {
		int got;

		memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
		if (fd != NULL && *fd < 0)
			*fd = got;
		else
			close(got);
	}
}

/* One recvmsg(): bytes read, 0 at end of stream, or a negative errno. */
static ssize_t frame_recv_some(int sock, void *p, size_t n, int *fd)
{
	union {
		char buf[CMSG_SPACE(FRAME_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = p, .iov_len = n };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	ssize_t r = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (r < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL;
	     c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			frame_take_fds(c, fd);
	}
	return r;
}

/*
 * Reads until `n` bytes are at `p` or the stream ends; *got counts what
 * arrived (it may be < n at the end of the stream, which returns 0).
 * 0; -ETIMEDOUT; a negative errno from recvmsg(2) or poll(2).
 */
static int frame_read(int sock, uint8_t *p, size_t n, size_t *got, int *fd,
		      int64_t deadline)
{
	while (*got < n) {
		ssize_t r = frame_recv_some(sock, p + *got, n - *got, fd);
		int err;

		if (r > 0) {
			*got += (size_t)r;
			continue;
		}
		if (r == 0)
			return 0;
		if (r == -EINTR)
			continue;
		if (r != -EAGAIN && r != -EWOULDBLOCK)
			return (int)r;
		err = frame_wait(sock, POLLIN, deadline);
		if (err < 0)
			return err;
	}
	return 0;
}

/* The header's length into *plen; the errors of frame_recv(). */
static int frame_read_header(int sock, size_t cap, uint32_t *plen, int *fd,
			     int64_t deadline)
{
	uint8_t hdr[FRAME_HEADER_SIZE];
	size_t got = 0;
	int err = frame_read(sock, hdr, sizeof(hdr), &got, fd, deadline);

	if (err == -ETIMEDOUT && got == 0)
		return -EAGAIN;
	if (err < 0)
		return err;
	if (got == 0)
		return -ECONNRESET;
	if (got < sizeof(hdr))
		return -EPROTO;
	err = frame_header_decode(hdr, plen);
	if (err < 0)
		return err;
	return *plen > cap ? -EMSGSIZE : 0;
}

int frame_recv(int sock, void *buf, size_t cap, size_t *len, int *fd,
	       int timeout_ms)
{
	int64_t deadline = frame_deadline(timeout_ms);
	int rfd = -1, *want = fd != NULL ? &rfd : NULL;
	uint32_t n;
	size_t got = 0;
	int err = frame_read_header(sock, cap, &n, want, deadline);

	if (err < 0)
		goto err;
	err = frame_read(sock, buf, n, &got, want, deadline);
	if (err == 0 && got < n)
		err = -EBADMSG;
	if (err < 0)
		goto err;
	*len = n;
	if (fd != NULL)
		*fd = rfd;
	return 0;
err:
	if (rfd >= 0)
		close(rfd);
	return err;
}
