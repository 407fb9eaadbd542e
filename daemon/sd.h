/*
 * sd.h - the two things npusand asks of systemd, without libsystemd:
 * the listening socket it passes (socket activation, sd_listen_fds(3))
 * and the state notifications it takes (sd_notify(3)).
 *
 * Ownership: the descriptor sd_listen_take() returns is the caller's to
 * close. $NOTIFY_SOCKET is copied into this file's static storage by
 * sd_notify_init(); nothing is allocated.
 */
#ifndef NPUSAN_SD_H
#define NPUSAN_SD_H

#include <stddef.h>

/*
 * Takes the socket systemd passed when $LISTEN_PID is ours and
 * $LISTEN_FDS at least 1, and unsets the LISTEN_* variables so that no
 * child inherits them. Closes (with a warning) every passed socket after
 * the first; makes the first close-on-exec and non-blocking, and writes
 * its path (empty when unnamed) into `path`.
 * The fd; -ENOENT when none was passed; -ENOTSOCK when it is not a
 * listening Unix stream socket; another negative errno from fcntl(2).
 */
int sd_listen_take(char *path, size_t path_len);

/* Takes $NOTIFY_SOCKET (unsetting it, so that no child inherits it); a
 * warning when it is too long to use. Before sd_notify_send(). */
void sd_notify_init(void);

/*
 * Sends `msg` to the service manager, as sd_notify(3) does: one datagram
 * to $NOTIFY_SOCKET, a path or an abstract name ('@' first). 0 (also when
 * there is none); -EAFNOSUPPORT when it is neither; another negative
 * errno from socket(2) or sendto(2).
 */
int sd_notify_send(const char *msg);

#endif
