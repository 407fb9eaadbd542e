#!/bin/sh
# run_bench.sh - the engine benchmark, side by side with PyTorch's CUDA
# Sanitizer on the same operations.
#
# Builds engine_bench in Release (in $BUILD, default ./build-bench), runs
# it, and when /usr/bin/python3 (or $PYTHON) can import torch, times
# torch.cuda._sanitizer.EventHandler over the first $CSAN_OPS operations
# (default 200000) of the same workload. Then the two take turns for
# $ROUNDS rounds (default 5), the engine alone over those operations
# (engine_bench --compare-only) and EventHandler over them, and it prints
# the median of the rounds' ratios: on a machine whose speed drifts from
# one minute to the next, only rates taken seconds apart divide fairly.
# EventHandler is called from a shallow Python stack, its best case;
# $CSAN_DEPTH adds frames (see csan_bench.py). Arguments go to
# engine_bench (--launches, --seed, --runs, --shape flush, --trace FILE:
# a recorded trace, which is fair to EventHandler when its accesses start
# at their allocations, as an exact-pointer trace's do). Installs nothing.
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-./build-bench}
python=${PYTHON:-/usr/bin/python3}
csan_ops=${CSAN_OPS:-200000}
csan_depth=${CSAN_DEPTH:-0}
rounds=${ROUNDS:-5}

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF \
	>/dev/null
cmake --build "$build" --target engine_bench -j "$(nproc)" >/dev/null

tmp=$(mktemp -d "${TMPDIR:-/tmp}/npusan-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# sh has no pipefail: the status travels through a file.
{
	rc=0
	"$build/engine_bench" --compare-ops "$csan_ops" \
		--write-trace "$tmp/workload.trace" "$@" || rc=$?
	echo "$rc" >"$tmp/engine.rc"
} | tee "$tmp/engine.out"
rc=$(cat "$tmp/engine.rc")
[ "$rc" -eq 0 ] || exit "$rc"

if ! "$python" -c 'import torch.cuda._sanitizer' 2>/dev/null; then
	echo "csan: skipped, $python cannot import torch.cuda._sanitizer" \
		"(Debian: apt install python3-torch)"
	exit 0
fi
echo
"$python" "$src/tests/bench/csan_bench.py" "$tmp/workload.trace" \
	--max-ops "$csan_ops" --stack-depth "$csan_depth" --rounds "$rounds" \
	--engine "'$build/engine_bench' --trace '$tmp/workload.trace' \
--compare-only --compare-ops $csan_ops --runs 3"
