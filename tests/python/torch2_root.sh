#!/bin/sh
# The torch tests again, on PyTorch 2: in the Debian 13 root that
# tools/deps.sh builds (torch 2.6, Python 3.13), npusan is built with that
# root's compiler and Python (the adapter's C path, npusan._speedups,
# included) and its tests matching TESTS run there.
#
# Usage: torch2_root.sh SOURCE BUILD TESTS
#   SOURCE  the checkout, bind-mounted at /src in the root
#   BUILD   the build tree for the root, bind-mounted at /build (created)
#   TESTS   a ctest -R pattern
# NPUSAN_TORCH2_ROOT names the root (default /var/cache/npusan/trixie-root).
#
# Exit status: ctest's; 77 (a skip) where the root is missing or this is
# not root, who alone can chroot.
set -eu
root="${NPUSAN_TORCH2_ROOT:-/var/cache/npusan/trixie-root}"
source=$(cd "$1" && pwd)
build="$2"
tests="$3"
if [ ! -f "$root/etc/npusan-root" ]; then
	echo "torch2_root: no torch 2 root at $root (tools/deps.sh torch2 builds it, as root)"
	exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "torch2_root: running the tests in $root needs root"
	exit 77
fi
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=$(nproc)
# The mounts live in a mount namespace of their own, gone when it ends; the
# root's /tmp and /dev/shm are fresh, the agent's rings among them.
# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare -m sh -eu -c '
root=$1 source=$2 build=$3 tests=$4 jobs=$5
mount --make-rprivate /
mkdir -p "$root/src" "$root/build"
mount --bind "$source" "$root/src"
mount --bind "$build" "$root/build"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs tmpfs "$root/tmp"
exec chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PYTHONDONTWRITEBYTECODE=1 \
	LANG=C.UTF-8 sh -eu -c "
if ! { cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Debug &&
	cmake --build /build -j $jobs --target npusan npusand npusanctl npusan_speedups \
		npusan-graph-workspace npusan_torchhook
	} >/build/build.log 2>&1; then
	cat /build/build.log
	exit 1
fi
python3 -c \"import sys, torch; print(\\\"torch\\\", torch.__version__, \\\"python\\\", sys.version.split()[0])\"
ctest --test-dir /build -R \"$tests\" --output-on-failure -j $jobs
"' torch2_root "$root" "$source" "$build" "$tests" "$jobs"
