#!/bin/sh
# Builds npusan with AddressSanitizer and UndefinedBehaviorSanitizer and runs
# the whole test suite, then the tests labelled concurrency under
# ThreadSanitizer. CI runs exactly this (.ci/run). The torch tests run on
# the host's PyTorch and, as the test torch2_root, on PyTorch 2.6 in the
# Debian 13 root that tools/deps.sh builds once (skipped where it cannot).
# Last it runs the README's first command, tools/demo.sh, in Release.
# A failing stage does not hide the later ones: every stage runs, and the
# script exits 1 at the end if any failed, naming them.
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh test
cmake -S . -B build/test -DCMAKE_BUILD_TYPE=Debug -DNPUSAN_SANITIZE=ON >/dev/null
cmake --build build/test -j "$(nproc)"
failed=""
ctest --test-dir build/test --output-on-failure -j "$(nproc)" ||
	failed="$failed asan-ubsan"

# Then ThreadSanitizer, which cannot share a build with ASan, over the tests
# labelled concurrency: only their targets are built (a Check test is named
# after its target).
cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DNPUSAN_TSAN=ON >/dev/null
targets=$(ctest --test-dir build/tsan -N -L concurrency |
	sed -n 's/^ *Test *#[0-9]*: *//p')
if [ -z "$targets" ]; then
	echo "npusan: no tests labelled concurrency" >&2
	exit 1
fi
# shellcheck disable=SC2086 # one target per word
cmake --build build/tsan -j "$(nproc)" --target $targets
# gcc 12's TSan wants its shadow memory at fixed addresses and dies
# ("unexpected memory mapping") where the kernel randomizes mmap over more
# than 28 bits, as Ubuntu's 6.x kernels do; without ASLR it runs.
run=""
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ]; then
	run="setarch $(uname -m) -R"
fi
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' build/tsan/CMakeCache.txt)
echo 'int main(void) { return 0; }' |
	"$cc" -fsanitize=thread -x c - -o build/tsan/tsan-probe
if ! $run build/tsan/tsan-probe; then
	echo "npusan: ThreadSanitizer does not run on this machine" >&2
	exit 1
fi
$run ctest --test-dir build/tsan --output-on-failure -L concurrency -j "$(nproc)" ||
	failed="$failed tsan"

# Last, the README's first command as a user runs it: a Release build (-O2,
# where gcc sees what a Debug build does not, -Wformat-truncation among it)
# and the demo job, which must print its two seeded findings and exit 1.
demo=$(tools/demo.sh 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 1 ] || ! printf '%s\n' "$demo" | grep -q \
	'npusan: job demo: 2 findings (1 data race, 1 missing record_stream)'; then
	printf '%s\n' "$demo" >&2
	echo "npusan: tools/demo.sh exited $rc without its two findings" >&2
	failed="$failed demo"
else
	echo "npusan: tools/demo.sh: the two seeded findings, exit 1"
fi
if [ -n "$failed" ]; then
	echo "npusan: failed stages:$failed" >&2
	exit 1
fi
