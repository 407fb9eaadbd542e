/*
 * standalone.c - a main() for the fuzz targets without libFuzzer: runs
 * LLVMFuzzerTestOneInput over every file named, or under every directory
 * named, so that CI replays the corpus under ASan and UBSan with any
 * compiler.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "standalone: %s\n", what);
		abort();
	}
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		perror(path);
		return 1;
	}
	do {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			check(buf != NULL, "out of memory");
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	check(!ferror(f), "read error");
	fclose(f);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

/* Runs `path`, or every file under it when it is a directory. */
static int run_path(const char *path)
{
	struct dirent *e;
	struct stat st;
	int failed = 0;
	DIR *d;

	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return run_file(path);
	d = opendir(path);
	if (d == NULL) {
		perror(path);
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		char *sub;

		if (e->d_name[0] == '.')
			continue;
		check(asprintf(&sub, "%s/%s", path, e->d_name) > 0, "asprintf");
		failed |= run_path(sub);
		free(sub);
	}
	closedir(d);
	return failed;
}

int main(int argc, char **argv)
{
	int failed = 0;

	for (int i = 1; i < argc; i++)
		failed |= run_path(argv[i]);
	return failed;
}
