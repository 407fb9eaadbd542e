/*
 * paths.h - where npusan's pieces find each other.
 *
 * Every component (the agent, npusand, npusanctl) resolves the daemon's
 * socket with the same function, so that a job, a user's private daemon and
 * the system service agree without configuration.
 */
#ifndef NPUSAN_PATHS_H
#define NPUSAN_PATHS_H

#include <stddef.h>

/* The longest socket path: sockaddr_un's sun_path less its NUL. */
#define PATHS_SOCKET_MAX 107

/* The system service's socket. */
#define PATHS_SYSTEM_SOCKET "/run/npusan/npusand.sock"

/*
 * The daemon's socket, into `buf` (`len` bytes, NUL included):
 *  1. $NPUSAN_SOCKET when set and not empty;
 *  2. else $XDG_RUNTIME_DIR/npusan/npusand.sock when $XDG_RUNTIME_DIR is an
 *     absolute path and $XDG_RUNTIME_DIR/npusan is a directory: a per-user
 *     daemon is running or has run there. Checking the npusan directory, not
 *     $XDG_RUNTIME_DIR alone, matters: every login session has
 *     $XDG_RUNTIME_DIR, and its jobs must still find the system service
 *     when the user runs no daemon of their own;
 *  3. else PATHS_SYSTEM_SOCKET.
 * 0; -ENAMETOOLONG when the path exceeds PATHS_SOCKET_MAX or `len` - 1
 * (`buf` then holds an empty string when len > 0).
 * Reads the environment: not safe against a concurrent setenv().
 */
int paths_socket(char *buf, size_t len);

/*
 * paths_socket() with the two variables given (NULL when unset), for a
 * caller that read the environment once and resolves again later, as the
 * agent's registration thread does each time it retries.
 */
int paths_socket_from(const char *npusan_socket, const char *xdg_runtime_dir,
		      char *buf, size_t len);

#endif
