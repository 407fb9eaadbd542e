#!/bin/sh
# agent_bench.sh - builds agent_bench in Release and runs it: what
# npusan_launch() costs with the agent on (a consumer process draining the
# ring), off, with NPUSAN_RING_FULL=block and with NPUSAN_STACKS=16, and
# its floor (a bare ring push of the same record), with the ratio to it.
#
# $BUILD is the build directory (default ./build-bench). Arguments go to
# agent_bench: --quick (a tenth of the launches), --only N (one
# configuration, e.g. under `perf record`), --consumer-nap-us US (the
# consumer sleeps after an empty drain instead of spinning, as a daemon
# draining on a timer would). The whole run takes 10 to 20 s.
#
# The exact command line, by hand:
#   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF
#   cmake --build build-bench --target agent_bench
#   build-bench/agent_bench
#   build-bench/agent_bench --consumer-nap-us 100
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-./build-bench}

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF \
	>/dev/null
cmake --build "$build" --target agent_bench -j "$(nproc)" >/dev/null
exec "$build/agent_bench" "$@"
