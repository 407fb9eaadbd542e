#!/bin/sh
# Builds npusan and runs its main job on the built-in default: a 4-rank
# training job (examples/demo_job.c) under `npusanctl run`, which starts a
# private daemon when none answers, prints the job's two seeded findings
# (a data race on rank 1, a missing record_stream on rank 2) and exits 1,
# as it does whenever a job has findings.
#   tools/demo.sh             the live demo
#   tools/demo.sh TRACE...    analyse recorded traces offline instead
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh build
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DNPUSAN_TESTS=OFF >/dev/null
cmake --build build/release -j "$(nproc)" \
	--target npusanctl npusand npusan npusan-demo >/dev/null
if [ $# -gt 0 ]; then
	exec build/release/npusanctl analyze "$@"
fi
exec build/release/npusanctl run --job demo -- build/release/npusan-demo
