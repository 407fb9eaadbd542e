/*
 * paths.h - where npusan's pieces find each other.
 *
 * Every component (the agent, npusand, npusanctl) resolves the daemon's
 * socket with the same function, so that a job, a user's private daemon and
 * the system service agree without configuration.
 */
#ifndef NPUSAN_PATHS_H
#define NPUSAN_PATHS_H

#include <stdbool.h>
#include <stddef.h>

/* The longest socket path: sockaddr_un's sun_path less its NUL. */
#define PATHS_SOCKET_MAX 107

/* The system service's socket and database, and their directories. */
#define PATHS_SYSTEM_RUN_DIR "/run/npusan"
#define PATHS_SYSTEM_SOCKET PATHS_SYSTEM_RUN_DIR "/npusand.sock"
#define PATHS_SYSTEM_STATE_DIR "/var/lib/npusan"
#define PATHS_SYSTEM_DB PATHS_SYSTEM_STATE_DIR "/npusan.db"

/* The names inside a directory the functions below return. */
#define PATHS_SOCKET_NAME "npusand.sock"
#define PATHS_DB_NAME "npusan.db"

/*
 * The daemon's socket, into `buf` (`len` bytes, NUL included):
 *  1. $NPUSAN_SOCKET when set and not empty;
 *  2. else $XDG_RUNTIME_DIR/npusan/npusand.sock when $XDG_RUNTIME_DIR is an
 *     absolute path and $XDG_RUNTIME_DIR/npusan is a directory: a per-user
 *     daemon is running or has run there. Checking the npusan directory, not
 *     $XDG_RUNTIME_DIR alone, matters: every login session has
 *     $XDG_RUNTIME_DIR, and its jobs must still find the system service
 *     when the user runs no daemon of their own;
 *  3. else, when $XDG_RUNTIME_DIR is unset or not absolute,
 *     /tmp/npusan-UID/npusand.sock (UID: the real uid) when that directory
 *     exists, is ours and is private (paths_private_dir()): where a user's
 *     daemon binds without $XDG_RUNTIME_DIR (paths_user_run_dir());
 *  4. else PATHS_SYSTEM_SOCKET.
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

/*
 * The directory of an ordinary user's daemon socket, into `buf`:
 * $XDG_RUNTIME_DIR/npusan when `xdg_runtime_dir` is absolute, else
 * /tmp/npusan-UID, which the daemon creates with mode 0700 and both sides
 * use only when paths_private_dir() holds (/tmp is everyone's: another user
 * could have made the directory first to catch our rings).
 * 0; -ENAMETOOLONG when the socket in it would exceed PATHS_SOCKET_MAX.
 */
int paths_user_run_dir(const char *xdg_runtime_dir, unsigned uid, char *buf,
		       size_t len);

/*
 * The socket an ordinary user's daemon binds by default, into `buf`:
 * paths_user_run_dir()'s directory and PATHS_SOCKET_NAME in it.
 * 0; -ENAMETOOLONG as paths_user_run_dir().
 */
int paths_user_socket(const char *xdg_runtime_dir, unsigned uid, char *buf,
		      size_t len);

/*
 * The directory of an ordinary user's database, into `buf`:
 * $XDG_STATE_HOME/npusan when `xdg_state_home` is absolute, else
 * HOME/.local/state/npusan when `home` is absolute.
 * 0; -ENOENT when neither is; -ENAMETOOLONG past `len` - 1.
 */
int paths_user_state_dir(const char *xdg_state_home, const char *home,
			 char *buf, size_t len);

/*
 * An ordinary user's database, into `buf`: PATHS_DB_NAME in
 * paths_user_state_dir()'s directory. 0; the errors of
 * paths_user_state_dir(), and -ENAMETOOLONG when the name does not fit.
 */
int paths_user_db(const char *xdg_state_home, const char *home, char *buf,
		  size_t len);

/* The directory part of `path` into `buf`: "." when it has no slash. */
void paths_dir_of(const char *path, char *buf, size_t len);

/*
 * Whether `dir` is a directory (not a link to one) owned by `uid` that no
 * one else may enter or write (no group or other permission bits).
 */
int paths_private_dir(const char *dir, unsigned uid);

/*
 * Whether a file written to `path` must be written in place: `path` names
 * something that exists and is not a regular file (/dev/null, /dev/stdout,
 * a FIFO). A report is otherwise written beside its target and renamed
 * over it, so that a reader never sees half of it; renamed over a device,
 * it would replace the device itself (as root, /dev/null).
 */
bool paths_write_in_place(const char *path);

#endif
