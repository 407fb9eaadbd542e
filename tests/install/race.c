/*
 * race.c - a program built against an installed libnpusan (pkg-config
 * npusan), as a user's runtime shim would be: one seeded data race, a
 * kernel on stream 1 reading what a kernel on stream 0 wrote, with
 * nothing ordering them. tests/install/install_prefix.sh runs it under
 * the installed `npusanctl run`.
 */
#include <npusan.h>

int main(void)
{
	struct npusan_range buf = { 0x10000, 4096 };
	uint32_t fill = npusan_intern("install::fill");
	uint32_t sum = npusan_intern("install::sum");

	npusan_stream_create(0);
	npusan_stream_create(1);
	npusan_alloc(buf.ptr, buf.len, 0, NPUSAN_STACK_NATIVE);
	npusan_launch(0, fill, NULL, 0, &buf, 1, NPUSAN_STACK_NATIVE);
	npusan_launch(1, sum, &buf, 1, NULL, 0, NPUSAN_STACK_NATIVE);
	npusan_stream_sync(1);
	npusan_stream_sync(0);
	npusan_free(buf.ptr);
	return 0;
}
