/*
 * sd.c - socket activation and sd_notify for npusand, as sd_listen_fds(3)
 * and sd_notify(3) describe them, without linking libsystemd.
 *
 * It owns one static copy of $NOTIFY_SOCKET, taken at start; every
 * descriptor it opens to notify is closed before it returns.
 */
#include "sd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

/* The descriptor systemd passes first (sd_listen_fds(3)). */
#define SD_LISTEN_FDS_START 3

/* How many passed sockets $LISTEN_FDS may claim; more is not systemd. */
#define SD_LISTEN_FDS_MAX 64

/* The number of sockets passed to us, the LISTEN_* variables unset
 * whenever they were meant for us; 0 when none were. */
static long sd_listen_count(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	char *end;
	long n;

	if (pid == NULL || fds == NULL)
		return 0;
	errno = 0;
	if (strtol(pid, &end, 10) != (long)getpid() || *end != '\0')
		return 0; /* meant for another process */
	n = strtol(fds, &end, 10);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (*end != '\0' || n < 1 || n > SD_LISTEN_FDS_MAX)
		return 0;
	return n;
}

/* Whether `fd` listens as a Unix stream socket; its path into `path`. */
static int sd_listen_check(int fd, char *path, size_t path_len)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0, acc = 0;
	socklen_t tl = sizeof(type), al = sizeof(acc);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
	    sa.sun_family != AF_UNIX || type != SOCK_STREAM || !acc)
		return -ENOTSOCK;
	if (len > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0])
		snprintf(path, path_len, "%.*s",
			 (int)(len - offsetof(struct sockaddr_un, sun_path)),
			 sa.sun_path);
	return 0;
}

int sd_listen_take(char *path, size_t path_len)
{
	const int fd = SD_LISTEN_FDS_START;
	long n = sd_listen_count();
	int err;

	if (n == 0)
		return -ENOENT;
	for (long i = 1; i < n; i++) {
		log_warn("ignoring socket %ld that systemd passed: npusand "
			 "listens on one", SD_LISTEN_FDS_START + i);
		close((int)(SD_LISTEN_FDS_START + i));
	}
	err = sd_listen_check(fd, path, path_len);
	if (err < 0)
		return err;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		return -errno;
	return fd;
}

/* $NOTIFY_SOCKET, taken at start so that nothing else inherits it. */
static char sd_notify_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];

void sd_notify_init(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	if (e != NULL && strlen(e) < sizeof(sd_notify_path))
		strcpy(sd_notify_path, e);
	else if (e != NULL)
		log_warn("$NOTIFY_SOCKET too long; not notifying");
	unsetenv("NOTIFY_SOCKET");
}

int sd_notify_send(const char *msg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(sd_notify_path);
	socklen_t salen;
	int fd, err = 0;

	if (len == 0)
		return 0;
	if (sd_notify_path[0] != '/' && sd_notify_path[0] != '@')
		return -EAFNOSUPPORT;
	if (len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, sd_notify_path, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL,
		   (struct sockaddr *)&sa, salen) < 0)
		err = -errno;
	close(fd);
	return err;
}
