#!/bin/sh
# How much of npusan the test suite runs: builds with gcov coverage (in
# $BUILD, default build/coverage), runs the whole ctest suite there, and
# prints line and branch coverage per source file with gcovr, the files
# issue 17 sets targets for first. Not part of the suite; installs gcovr
# when it is missing (tools/deps.sh). A test that fails still counts what
# it ran, and is reported.
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-build/coverage}
tools/deps.sh coverage
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DNPUSAN_COVERAGE=ON >/dev/null
# Every object compiled afresh, and no notes file left from a source or
# target that is gone: gcovr reads every .gcno under the build, and one
# from an older layout names functions at other lines than the new one.
find "$build" \( -name '*.gcno' -o -name '*.gcda' \) -delete
cmake --build "$build" --clean-first -j "$(nproc)" >/dev/null
rc=0
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure >"$build/ctest.log" 2>&1 || rc=$?
tail -n 3 "$build/ctest.log"
[ "$rc" -eq 0 ] || echo "coverage: some tests failed (see $build/ctest.log); figures count what ran" >&2
# Sources only: tests, benchmarks and generated protobuf code are not the
# product.
gcovr --root . --object-directory "$build" --exclude 'tests/' \
	--exclude '.*\.pb-c\.c' --exclude "$build/" \
	--print-summary --sort-percentage -s >"$build/gcovr.txt" \
	2>"$build/gcovr.err" || cat "$build/gcovr.err" >&2
gcovr --root . --object-directory "$build" --exclude 'tests/' \
	--exclude '.*\.pb-c\.c' --exclude "$build/" --branches \
	>"$build/gcovr-branches.txt" 2>/dev/null || true
echo "lines, per file:"
grep -E '^(daemon|cli|common|agent|engine)/' "$build/gcovr.txt" || cat "$build/gcovr.txt"
echo
echo "branches, per file:"
grep -E '^(daemon|cli|common|agent|engine)/' "$build/gcovr-branches.txt" || true
tail -n 4 "$build/gcovr.txt"
