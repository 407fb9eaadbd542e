#!/bin/sh
# install_prefix.sh BUILD_DIR PYTHON3 [CMAKE] - the build tree installed into a
# fresh prefix works from there, and nothing of it was written elsewhere:
#  - `cmake --install BUILD_DIR --prefix TMP` (nothing configured anew)
#    writes only under TMP, as install_manifest.txt lists it;
#  - npusan.pc (through PKG_CONFIG_PATH) builds race.c against the
#    installed header and library;
#  - the installed `npusanctl run` starts the installed npusand on a
#    private socket, preloads the installed libnpusan and reports race.c's
#    data race; without the installed npusand it fails rather than taking
#    another;
#  - the installed npusan-replay finds the installed libnpusan;
#  - the installed package names the installed library (_installed.py),
#    and race.py's race in npusan.torch's CPU emulation is found under the
#    installed npusanctl with the installed package; that part skips with
#    a message where PYTHON3 has no torch.
# Exits 0, 1 on a failure, 77 when only the C part ran (no torch).
set -eu
build=$(cd "$1" && pwd)
python3=$2
cmake=${3:-cmake}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/npusan-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install_prefix: FAIL: $*" >&2; exit 1; }

# 1. Into the prefix, and nowhere else.
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
	fail "cmake --install: $(cat "$tmp/install.log")"
[ -s "$build/install_manifest.txt" ] || fail "no install_manifest.txt"
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt" || true)
[ -z "$outside" ] || fail "installed outside $prefix: $outside"
want="bin/npusanctl bin/npusand bin/npusan-replay include/npusan.h
share/bash-completion/completions/npusanctl"
# The man pages, where go-md2man made them.
if [ -f "$build/docs/man/npusanctl.1" ]; then
	want="$want share/man/man1/npusanctl.1 share/man/man1/npusand.1
share/man/man1/npusan-replay.1 share/man/man3/libnpusan.3"
fi
for f in $want; do
	[ -e "$prefix/$f" ] || fail "$f not installed"
done
pc=$(find "$prefix" -name npusan.pc)
lib=$(find "$prefix" -name libnpusan.so.0)
if [ -z "$pc" ] || [ -z "$lib" ]; then
	fail "npusan.pc or libnpusan.so.0 not installed"
fi
pydir=$(dirname "$(dirname "$(find "$prefix" -path '*/npusan/__init__.py')")")
if grep -rl "$build" "$pc" "$pydir/npusan/_installed.py" >/dev/null; then
	fail "an installed file names the build tree"
fi

# 2. A program built as a user would, against the installed tree: its
# directory moved, so that only paths relative to the .pc can work.
mv "$prefix" "$tmp/moved"
prefix=$tmp/moved
pc=$prefix/${pc#"$tmp/prefix/"}
lib=$prefix/${lib#"$tmp/prefix/"}
pydir=$prefix/${pydir#"$tmp/prefix/"}
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs npusan) || fail "pkg-config npusan"
libdir=$(pkg-config --variable=libdir npusan)
[ "$(cd "$libdir" && pwd)" = "$(dirname "$lib")" ] ||
	fail "pkg-config's libdir $libdir is not $(dirname "$lib")"
# shellcheck disable=SC2086 # pkg-config's flags are words
cc -o "$tmp/race" "$here/race.c" $flags -Wl,-rpath,"$libdir" 2>"$tmp/cc.log" ||
	fail "race.c does not build with $flags: $(cat "$tmp/cc.log")"

# npusan-replay links libnpusan: its RUNPATH ($ORIGIN/../lib) finds the
# moved tree's.
found=$(ldd "$prefix/bin/npusan-replay" |
	sed -n 's/^[[:space:]]*libnpusan.so.0 => \(.*\) (0x.*/\1/p')
if [ -z "$found" ] || [ "$(readlink -f "$found")" != "$(readlink -f "$lib")" ]; then
	fail "npusan-replay does not find $lib: $(ldd "$prefix/bin/npusan-replay")"
fi

# 3. Under the installed npusanctl, which starts the installed daemon.
unset NPUSAN_LIBRARY NPUSAN_SOCKET LD_PRELOAD PYTHONPATH
export NPUSAN_DB="$tmp/npusan.db" XDG_RUNTIME_DIR="$tmp" XDG_STATE_HOME="$tmp"
export ASAN_OPTIONS=detect_leaks=0
mkdir -m 0700 "$tmp/run"
sock=$tmp/run/npusand.sock
status=0
"$prefix/bin/npusanctl" run --socket "$sock" --job install -- "$tmp/race" \
	>"$tmp/c.out" 2>&1 || status=$?
cat "$tmp/c.out"
[ "$status" -eq 1 ] || fail "npusanctl run exited $status, not 1 (findings)"
grep -q "data race" "$tmp/c.out" || fail "no data race reported"
grep -q "install::sum" "$tmp/c.out" || fail "the race names no install::sum"
mv "$prefix/bin/npusand" "$tmp/npusand.away"
status=0
"$prefix/bin/npusanctl" run --socket "$sock" -- "$tmp/race" \
	>"$tmp/nod.out" 2>&1 || status=$?
mv "$tmp/npusand.away" "$prefix/bin/npusand"
if [ "$status" -ne 3 ] || ! grep -q "$prefix/bin/npusand" "$tmp/nod.out"; then
	fail "without its npusand, run exited $status: $(cat "$tmp/nod.out")"
fi

# 4. The installed Python package.
if ! "$python3" -c '' 2>/dev/null; then
	echo "install_prefix: SKIP the Python part: no $python3; the C part" \
	     "passed" >&2
	exit 77
fi
found=$(PYTHONPATH=$pydir "$python3" -c \
	'import npusan._lib as l; print(l.candidates()[-1])')
[ "$found" = "$lib" ] ||
	fail "the installed package looks for the agent at $found, not $lib"
if ! "$python3" -c 'import torch' 2>/dev/null; then
	echo "install_prefix: SKIP the Python part: $python3 has no torch" \
	     "(Debian's python3-torch); the C part passed" >&2
	exit 77
fi
status=0
"$prefix/bin/npusanctl" run --socket "$sock" --job install-py -- \
	"$python3" "$here/race.py" >"$tmp/py.out" 2>&1 || status=$?
cat "$tmp/py.out"
[ "$status" -eq 1 ] || fail "npusanctl run python3 exited $status, not 1"
grep -q "^package: $pydir/npusan\$" "$tmp/py.out" ||
	fail "race.py did not import the installed package"
grep -q "^library: $lib\$" "$tmp/py.out" ||
	fail "race.py did not load the installed agent"
grep -q "data race" "$tmp/py.out" || fail "no data race in race.py reported"
echo "install_prefix: ok"
