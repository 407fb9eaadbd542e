#!/bin/sh
# deb_install.sh - the Debian packages, installed into a fresh Debian 12
# root, run the demo: `npusanctl run --job demo -- npusan-demo` must exit 1
# with 2 findings, python3 must import npusan, the units and the metrics
# drop-in must be in place. Not in the default suite: on 2 busy cores it
# took 1 min 55 s (81 s dpkg-buildpackage, 20 s lintian, 6 s installing
# and the demo), plus 3 min the first time for the root; run it by hand,
# as root:
#   tests/service/deb_install.sh [DEBDIR]
# DEBDIR holds the .debs; without it they are built from this checkout's
# files (dpkg-buildpackage -us -uc -b in a copy under $TMPDIR, then lintian).
# The root is Debian 12 (bookworm) minbase with the packages' run-time
# dependencies, built once with debootstrap into
# ${NPUSAN_DEB_ROOT:-/var/cache/npusan/bookworm-root} (its stamp says what
# it holds, as tools/deps.sh does for the trixie root); each run installs
# into a fresh copy of it. Exit 77 (a skip) when not root or without
# debootstrap; tools/deps.sh deb installs what building needs.
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
root="${NPUSAN_DEB_ROOT:-/var/cache/npusan/bookworm-root}"
mirror="${NPUSAN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
pkgs="libuv1 libprotobuf-c1 libsqlite3-0 libmicrohttpd12 libdw1 python3"
stamp="bookworm $pkgs"

say() { echo "deb_install: $*" >&2; }

[ "$(id -u)" -eq 0 ] || { say "needs root (chroot): skip"; exit 77; }
command -v debootstrap >/dev/null || { say "no debootstrap: skip"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/npusan-deb.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

# The packages, built from the checkout's tracked files as they are now.
build_debs() {
	command -v dpkg-buildpackage >/dev/null || { say "no dpkg-buildpackage: skip"; exit 77; }
	mkdir "$work/npusan"
	git -C "$src" ls-files -z | (cd "$src" && tar --null -T - -cf -) |
		tar -C "$work/npusan" -xf -
	start=$(date +%s)
	if ! (cd "$work/npusan" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
		tail -40 "$work/build.log"
		say "dpkg-buildpackage failed"
		exit 1
	fi
	say "built the packages in $(( $(date +%s) - start )) s"
	if command -v lintian >/dev/null; then
		lintian "$work"/*.deb | tee "$work/lintian.log"
		! grep -q '^E:' "$work/lintian.log" || { say "lintian: errors"; exit 1; }
	fi
	debs="$work"
}

# The cached root, built when its stamp differs.
make_root() {
	[ "$(cat "$root/etc/npusan-root" 2>/dev/null)" != "$stamp" ] || return 0
	mkdir -p "$(dirname "$root")"
	exec 9>"$root.lock"
	flock 9
	[ "$(cat "$root/etc/npusan-root" 2>/dev/null)" != "$stamp" ] || return 0
	new="$root.new"
	rm -rf "$new"
	say "building the Debian 12 root in $root (once)"
	start=$(date +%s)
	debootstrap --variant=minbase bookworm "$new" "$mirror" >"$work/root.log" 2>&1 ||
		{ tail -20 "$work/root.log"; say "debootstrap failed"; exit 1; }
	cp /etc/resolv.conf "$new/etc/resolv.conf"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare -m sh -c 'mount -t proc proc "$1/proc" &&
		chroot "$1" apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -qq \
			--no-install-recommends $2 && chroot "$1" apt-get clean' \
		deb_install "$new" "$pkgs" >>"$work/root.log" 2>&1 ||
		{ tail -20 "$work/root.log"; say "installing into the root failed"; exit 1; }
	echo "$stamp" >"$new/etc/npusan-root"
	rm -rf "$root"
	mv "$new" "$root"
	say "built the root in $(( $(date +%s) - start )) s"
}

if [ $# -ge 1 ]; then debs=$(cd "$1" && pwd); else build_debs; fi
make_root
start=$(date +%s)
cp -a "$root" "$work/root"
mkdir -p "$work/root/debs"
for d in "$debs"/*.deb; do
	case $d in *-dbgsym_*) ;; *) cp "$d" "$work/root/debs/" ;; esac
done

# shellcheck disable=SC2016 # expanded by the inner shells
unshare -m sh -eu -c '
r=$1
mount --make-rprivate /
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/dev/shm"
mount -t tmpfs tmpfs "$r/tmp"
mount -t tmpfs tmpfs "$r/run"
exec chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 sh -eu -c "
dpkg -i /debs/*.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
dpkg -l npusan libnpusan0 libnpusan-dev python3-npusan | tail -4
test -f /lib/systemd/system/npusand.service
test -f /lib/systemd/system/npusand.socket
test -f /usr/share/npusan/npusand-metrics.conf
grep -q \"^ExecStart=/usr/bin/npusand --metrics-listen\" /usr/share/npusan/npusand-metrics.conf
python3 -c \"import npusan; print(\\\"python3: import npusan: ok\\\")\"
rc=0
npusanctl run --job demo -- npusan-demo >/tmp/demo.out 2>&1 || rc=\$?
tail -1 /tmp/demo.out
[ \$rc -eq 1 ] || { cat /tmp/demo.out; echo \"deb_install: the demo exited \$rc, not 1\"; exit 1; }
grep -q \"^npusan: job demo: 2 findings\" /tmp/demo.out ||
	{ echo \"deb_install: not 2 findings\"; exit 1; }
"' deb_install "$work/root"
say "ok: installed and ran the demo in $(( $(date +%s) - start )) s"
