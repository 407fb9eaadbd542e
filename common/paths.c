/*
 * paths.c - resolving the daemon's socket (see paths.h for the order) and
 * its defaults for an ordinary user: the one definition of where the
 * socket and the database live, for npusand, npusanctl and the agent.
 * Every function writes into the caller's buffer; nothing is allocated.
 */
#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int paths_put(char *buf, size_t len, const char *a, const char *b)
{
	int n = snprintf(buf, len, "%s%s", a, b);

	if (n < 0 || (size_t)n >= len || n > PATHS_SOCKET_MAX) {
		if (len > 0)
			buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

static int paths_is_dir(const char *a, const char *b)
{
	char dir[4096];
	struct stat st;
	int n = snprintf(dir, sizeof(dir), "%s%s", a, b);

	if (n < 0 || (size_t)n >= sizeof(dir))
		return 0;
	return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

int paths_socket_from(const char *npusan_socket, const char *xdg_runtime_dir,
		      char *buf, size_t len)
{
	if (npusan_socket != NULL && npusan_socket[0] != '\0')
		return paths_put(buf, len, npusan_socket, "");
	if (xdg_runtime_dir != NULL && xdg_runtime_dir[0] == '/') {
		if (paths_is_dir(xdg_runtime_dir, "/npusan"))
			return paths_put(buf, len, xdg_runtime_dir,
					 "/npusan/" PATHS_SOCKET_NAME);
	} else {
		char dir[64];
		unsigned uid = (unsigned)getuid();

		/* What a daemon of ours binds without $XDG_RUNTIME_DIR. */
		if (paths_user_run_dir(NULL, uid, dir, sizeof(dir)) == 0 &&
		    paths_private_dir(dir, uid))
			return paths_put(buf, len, dir, "/" PATHS_SOCKET_NAME);
	}
	return paths_put(buf, len, PATHS_SYSTEM_SOCKET, "");
}

int paths_socket(char *buf, size_t len)
{
	return paths_socket_from(getenv("NPUSAN_SOCKET"),
				 getenv("XDG_RUNTIME_DIR"), buf, len);
}

int paths_user_run_dir(const char *xdg_runtime_dir, unsigned uid, char *buf,
		       size_t len)
{
	int n;

	if (xdg_runtime_dir != NULL && xdg_runtime_dir[0] == '/')
		n = snprintf(buf, len, "%s/npusan", xdg_runtime_dir);
	else
		n = snprintf(buf, len, "/tmp/npusan-%u", uid);
	if (n < 0 || (size_t)n >= len ||
	    (size_t)n + sizeof("/" PATHS_SOCKET_NAME) - 1 > PATHS_SOCKET_MAX) {
		if (len > 0)
			buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

int paths_user_socket(const char *xdg_runtime_dir, unsigned uid, char *buf,
		      size_t len)
{
	char dir[PATHS_SOCKET_MAX + 1];
	int err = paths_user_run_dir(xdg_runtime_dir, uid, dir, sizeof(dir));

	if (err < 0) {
		if (len > 0)
			buf[0] = '\0';
		return err;
	}
	return paths_put(buf, len, dir, "/" PATHS_SOCKET_NAME);
}

int paths_user_state_dir(const char *xdg_state_home, const char *home,
			 char *buf, size_t len)
{
	int n;

	if (xdg_state_home != NULL && xdg_state_home[0] == '/')
		n = snprintf(buf, len, "%s/npusan", xdg_state_home);
	else if (home != NULL && home[0] == '/')
		n = snprintf(buf, len, "%s/.local/state/npusan", home);
	else
		return -ENOENT;
	if (n < 0 || (size_t)n >= len) {
		if (len > 0)
			buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

int paths_user_db(const char *xdg_state_home, const char *home, char *buf,
		  size_t len)
{
	int err = paths_user_state_dir(xdg_state_home, home, buf, len);
	size_t n;

	if (err < 0)
		return err;
	n = strlen(buf);
	if (snprintf(buf + n, len - n, "/" PATHS_DB_NAME) >= (int)(len - n)) {
		buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

void paths_dir_of(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL)
		snprintf(buf, len, ".");
	else if (slash == path)
		snprintf(buf, len, "/");
	else
		snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

int paths_private_dir(const char *dir, unsigned uid)
{
	struct stat st;

	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == (uid_t)uid && (st.st_mode & 077) == 0;
}

bool paths_write_in_place(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}
