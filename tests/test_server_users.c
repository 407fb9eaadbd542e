/*
 * test_server_users.c - the tests of `test_server users`: the default paths
 * of a user's daemon, as its clients find them.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "paths.h"
#include "server_helpers.h"
#include "testutil.h"

/* ---- default paths ------------------------------------------------------- */

START_TEST(server_user_defaults_match_the_clients)
{
	uid_t uid = geteuid() == 0 ? 65534 : geteuid();
	char run[80], state[80], home[80];
	char env_run[112], env_state[112], env_home[96];
	const char *env[] = { env_run, env_state, env_home, NULL };
	struct td_how h = { .no_socket_arg = true, .env = env,
			    .uid = geteuid() == 0 ? uid : 0 };
	char client[PATHS_SOCKET_MAX + 1];
	struct stat st;
	struct td t;

	td_init(&t);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	snprintf(run, sizeof(run), "%s/run", t.dir);
	snprintf(state, sizeof(state), "%s/state", t.dir);
	snprintf(home, sizeof(home), "%s/home", t.dir);
	mkdir_for(run, uid);
	mkdir_for(state, uid);
	mkdir_for(home, uid);
	snprintf(env_run, sizeof(env_run), "XDG_RUNTIME_DIR=%s", run);
	snprintf(env_state, sizeof(env_state), "XDG_STATE_HOME=%s", state);
	snprintf(env_home, sizeof(env_home), "HOME=%s", home);
	ck_assert_int_lt(snprintf(t.sock, sizeof(t.sock),
				  "%s/npusan/npusand.sock", run),
			 (int)sizeof(t.sock));
	ck_assert_int_lt(snprintf(t.db, sizeof(t.db), "%s/npusan/npusan.db",
				  state),
			 (int)sizeof(t.db));
	td_start(&t, &h);
	/* Where an agent or npusanctl of that user looks, by default. */
	ck_assert_int_eq(paths_socket_from(NULL, run, client, sizeof(client)),
			 0);
	ck_assert_str_eq(client, t.sock);
	ck_assert_int_eq(lstat(t.sock, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(st.st_uid, uid);
	ck_assert_int_lt(snprintf(client, sizeof(client), "%s/npusan", run),
			 (int)sizeof(client));
	ck_assert_int_eq(lstat(client, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(lstat(t.db, &st), 0);
	if (geteuid() == 0)
		expect_serving(&t); /* root may connect to a user's 0600 */
	td_stop(&t);
}
END_TEST

START_TEST(server_user_socket_in_tmp_without_runtime_dir)
{
	/* A user without $XDG_RUNTIME_DIR: /tmp/npusan-UID, private. */
	uid_t uid = geteuid() == 0 ? 65534 : geteuid();
	char dir[64], state[80], env_state[112];
	char client[PATHS_SOCKET_MAX + 1];
	const char *env[] = { env_state, NULL };
	struct td_how h = { .no_socket_arg = true, .env = env,
			    .uid = geteuid() == 0 ? uid : 0 };
	struct stat st;
	struct td t;

	snprintf(dir, sizeof(dir), "/tmp/npusan-%u", (unsigned)uid);
	td_init(&t);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	snprintf(state, sizeof(state), "%s/state", t.dir);
	mkdir_for(state, uid);
	snprintf(env_state, sizeof(env_state), "XDG_STATE_HOME=%s", state);
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(t.sock, sizeof(t.sock), "%s/npusand.sock", dir);
	td_start(&t, &h);
	ck_assert_int_eq(lstat(dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(st.st_uid, uid);
	td_stop(&t);
	/* What that user's clients resolve (the socket is gone, the
	 * directory stays); as root we check the rule with its uid. */
	if (geteuid() != 0) {
		ck_assert_int_eq(paths_socket_from(NULL, NULL, client,
						   sizeof(client)), 0);
		ck_assert_str_eq(client, t.sock);
	} else {
		ck_assert(paths_private_dir(dir, uid));
	}
	rmdir(dir);
}
END_TEST

void server_users_add(TCase *tc)
{
	tcase_add_test(tc, server_user_defaults_match_the_clients);
	tcase_add_test(tc, server_user_socket_in_tmp_without_runtime_dir);
}
