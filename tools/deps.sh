#!/bin/sh
# Installs the Debian packages npusan needs that are missing, and builds the
# Debian 13 root the torch 2 tests run in.
#   tools/deps.sh build   what building npusanctl needs
#   tools/deps.sh test    that, plus what the test suite needs, plus the root
#   tools/deps.sh coverage  what testing needs, plus gcovr
#   tools/deps.sh torch2  the root alone
#   tools/deps.sh deb     what building the Debian packages needs
# Installing needs root (or sudo); nothing is installed when all is present.
set -eu

build="cmake gcc make pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev check libmicrohttpd-dev"
# libdw-dev (elfutils) turns native frames into file:line in npusanctl
# (common/symbolize.c): the DWARF library GNU/Linux tooling standardises on.
# Optional to CMake, and not in $build, whose packages the torch 2 root's
# stamp names: that root runs the adapter, which needs no symbolizer.
symbolize="libdw-dev"
# go-md2man turns the man pages (docs/man/*.md) into roff. Not in $build,
# which the torch 2 root's stamp names: the root needs no man pages, and a
# new stamp would build it again on every machine.
docs="go-md2man"
# python3-torch brings PyTorch's CUDA Sanitizer, the reference the
# differential test compares npusan's engine with, and the PyTorch the
# adapter's tests run; python3-dev builds the adapter's C path
# (npusan._speedups), so that its tests cover both paths; prometheus brings
# promtool, which checks the metrics exposition and the alerting rules;
# systemd brings systemd-analyze and systemd-socket-activate, for the units
# and socket activation; groff-base brings groff, which renders the man
# pages in their test; libdebuginfod1 is the debuginfod client libdw would
# load, which the symbolizer's test checks is never used. Without them those
# tests skip (77); without libdebuginfod1 that test passes but proves nothing.
# libtorch-dev (with g++, which it needs) builds the adapter's dispatcher hook
# (npusan._torchhook, C++ against PyTorch's dispatcher), so that the torch
# tests cover it beside the dispatch mode.
test_extra="python3-torch python3-dev libtorch-dev g++ prometheus systemd groff-base libdebuginfod1"
# The Debian packages (debian/, dpkg-buildpackage -us -uc -b) and their
# check, tests/service/deb_install.sh: debhelper and dh-python build them,
# python3-dev the adapter's C path, lintian checks them, debootstrap makes
# the Debian 12 root they are installed into.
deb="debhelper dh-python python3-dev lintian debootstrap"
# Each tool a test skips without, as TOOL:PACKAGE.
test_tools="promtool:prometheus systemd-analyze:systemd systemd-socket-activate:systemd groff:groff-base go-md2man:go-md2man"

# The torch 2 root: Debian 13 (trixie) with its python3-torch (PyTorch 2.6,
# Python 3.13) and what building npusan and its C path there needs, built
# once with debootstrap into a cache outside the checkout. The torch tests
# run in it too (tests/python/torch2_root.sh), and skip (77) where it is
# missing. Its stamp records what it was built with: a root whose stamp
# differs is built again.
torch2_root="${NPUSAN_TORCH2_ROOT:-/var/cache/npusan/trixie-root}"
torch2_mirror="${NPUSAN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
torch2_pkgs="$build libc6-dev python3-torch python3-dev libtorch-dev g++"
torch2_stamp="trixie $torch2_pkgs"

say() { echo "npusan: $*" >&2; }

# The packages of $want that are missing, installed.
install_missing() {
	if ! command -v dpkg-query >/dev/null 2>&1; then
		say "not a Debian system; make sure these are installed: $want"
		return 0
	fi
	missing=""
	for p in $want; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			missing="$missing $p"
		fi
	done
	[ -n "$missing" ] || return 0
	if [ "$(id -u)" -eq 0 ]; then
		sudo=""
	elif command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		say "missing packages:$missing"
		say "install them as root: apt-get install$missing"
		return 1
	fi
	say "installing$missing"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Says what makes tests skip here, once the packages are in: a tool
# missing, not being root, no user nobody (the tests of one user against
# another run as root and nobody).
say_skips() {
	for tp in $test_tools; do
		command -v "${tp%%:*}" >/dev/null 2>&1 ||
			say "no ${tp%%:*} (Debian's ${tp#*:}): its tests will skip"
	done
	[ "$(id -u)" -eq 0 ] ||
		say "not root: the tests that run as nobody will skip"
	id nobody >/dev/null 2>&1 ||
		say "no user nobody: the tests that run as nobody will skip"
}

# Builds the torch 2 root unless it is there already; 1 where it cannot be
# built (not root, not Debian, no network), having said why.
torch2() {
	if [ "$(cat "$torch2_root/etc/npusan-root" 2>/dev/null)" = "$torch2_stamp" ]; then
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		say "the torch 2 root $torch2_root needs root to build: the torch 2 tests will skip"
		return 1
	fi
	want="debootstrap"
	install_missing || return 1
	mkdir -p "$(dirname "$torch2_root")"
	# One builder at a time; a second waits, then finds the root built.
	exec 9>"$torch2_root.lock"
	flock 9
	if [ "$(cat "$torch2_root/etc/npusan-root" 2>/dev/null)" = "$torch2_stamp" ]; then
		return 0
	fi
	new="$torch2_root.new"
	rm -rf "$new"
	say "building the torch 2 root in $torch2_root (Debian 13, once)"
	start=$(date +%s)
	if ! debootstrap --variant=minbase trixie "$new" "$torch2_mirror" >"$new.log" 2>&1; then
		say "debootstrap failed (see $new.log): the torch 2 tests will skip"
		return 1
	fi
	cp /etc/resolv.conf "$new/etc/resolv.conf"
	# apt runs in a mount namespace of its own, so that its /proc goes
	# with it, whatever happens.
	# shellcheck disable=SC2016 # expanded by the inner shell
	if ! unshare -m sh -c 'mount -t proc proc "$1/proc" &&
		chroot "$1" apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -qq \
			--no-install-recommends $2 &&
		chroot "$1" apt-get clean' torch2 "$new" "$torch2_pkgs" >>"$new.log" 2>&1; then
		say "installing into the torch 2 root failed (see $new.log): the torch 2 tests will skip"
		return 1
	fi
	echo "$torch2_stamp" >"$new/etc/npusan-root"
	rm -rf "$torch2_root" "$new.log"
	mv "$new" "$torch2_root"
	say "built the torch 2 root in $(( $(date +%s) - start )) s"
}

case "${1:-build}" in
build) want="$build $symbolize $docs"; install_missing ;;
test)
	want="$build $symbolize $docs $test_extra"
	install_missing
	say_skips
	# Where the root cannot be built, its tests skip: not an error here.
	torch2 || true
	;;
# gcovr turns gcov's counts into tools/coverage.sh's per-file figures.
coverage) want="$build $symbolize $docs $test_extra gcovr"; install_missing ;;
torch2) torch2 ;;
deb) want="$build $symbolize $docs $deb"; install_missing ;;
*) echo "usage: tools/deps.sh [build|test|coverage|torch2|deb]" >&2; exit 2 ;;
esac
