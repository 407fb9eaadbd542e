/*
 * paths.c - resolving the daemon's socket (see paths.h for the order).
 */
#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

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
	if (xdg_runtime_dir != NULL && xdg_runtime_dir[0] == '/' &&
	    paths_is_dir(xdg_runtime_dir, "/npusan"))
		return paths_put(buf, len, xdg_runtime_dir,
				 "/npusan/npusand.sock");
	return paths_put(buf, len, PATHS_SYSTEM_SOCKET, "");
}

int paths_socket(char *buf, size_t len)
{
	return paths_socket_from(getenv("NPUSAN_SOCKET"),
				 getenv("XDG_RUNTIME_DIR"), buf, len);
}
