#!/bin/sh
# Builds npusan and runs its main job on the built-in default: analysing the
# example trace, which holds one data race and one missing record_stream.
# Exits as npusanctl does: 1, because the example has findings.
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh build
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF >/dev/null
cmake --build build/release -j "$(nproc)" --target npusanctl >/dev/null
[ $# -gt 0 ] || set -- examples/demo.trace
exec build/release/npusanctl analyze "$@"
