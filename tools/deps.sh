#!/bin/sh
# Installs the Debian packages npusan needs that are missing.
#   tools/deps.sh build   what building npusanctl needs
#   tools/deps.sh test    that, plus what the test suite needs
#   tools/deps.sh coverage  what testing needs, plus gcovr
# Installing needs root (or sudo); nothing is installed when all is present.
set -eu

build="cmake gcc make pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev check libmicrohttpd-dev"
# python3-torch brings PyTorch's CUDA Sanitizer, the reference the
# differential test compares npusan's engine with, and the PyTorch the
# adapter's tests run; python3-dev builds the adapter's C path
# (npusan._speedups), so that its tests cover both paths; prometheus brings
# promtool, which checks the metrics exposition and the alerting rules;
# systemd brings systemd-analyze and systemd-socket-activate, for the units
# and socket activation. Without them those tests skip.
test_extra="python3-torch python3-dev prometheus systemd"

case "${1:-build}" in
build) want="$build" ;;
test) want="$build $test_extra" ;;
# gcovr turns gcov's counts into tools/coverage.sh's per-file figures.
coverage) want="$build $test_extra gcovr" ;;
*) echo "usage: tools/deps.sh [build|test|coverage]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "npusan: not a Debian system; make sure these are installed: $want" >&2
	exit 0
fi

missing=""
for p in $want; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -n "$missing" ] || exit 0

if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "npusan: missing packages:$missing" >&2
	echo "npusan: install them as root: apt-get install$missing" >&2
	exit 1
fi
echo "npusan: installing$missing" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
