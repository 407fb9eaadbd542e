#!/bin/sh
# Builds npusan with AddressSanitizer and UndefinedBehaviorSanitizer and runs
# the whole test suite. CI runs exactly this (.ci/run).
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh test
cmake -S . -B build/test -DCMAKE_BUILD_TYPE=Debug -DNPUSAN_SANITIZE=ON >/dev/null
cmake --build build/test -j "$(nproc)"
ctest --test-dir build/test --output-on-failure -j "$(nproc)"
