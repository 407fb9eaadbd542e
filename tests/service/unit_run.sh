#!/bin/sh
# unit_run.sh - a manual test, not in the suite: npusand.service with the
# metrics drop-in, run by a real systemd, scraped on 127.0.0.1:9464.
#   tests/service/unit_run.sh BINDIR
# BINDIR holds npusand, npusanctl and npusan-demo (a build without
# sanitizers: the unit's MemoryDenyWriteExecute= and system call filter
# are not made for ASan). Needs root and systemd as PID 1; exits 77 (a
# skip) otherwise. It puts the units in /run/systemd/system (gone at the
# next boot, and ahead of any installed copy), uses the host's
# /run/npusan and /var/lib/npusan, and removes the units when done.
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
bindir=$(cd "${1:?usage: unit_run.sh BINDIR}" && pwd)
units=/run/systemd/system
port=9464
prom=/var/lib/prometheus/node-exporter/npusan.prom

[ -d /run/systemd/system ] || { echo "unit_run: systemd is not PID 1: skip"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "unit_run: needs root: skip"; exit 77; }
for b in npusand npusanctl npusan-demo; do
	[ -x "$bindir/$b" ] || { echo "unit_run: no $bindir/$b" >&2; exit 2; }
done

cleanup() {
	systemctl stop npusand.service npusand.socket 2>/dev/null || true
	rm -rf "$units/npusand.service" "$units/npusand.socket" \
		"$units/npusand.service.d"
	systemctl daemon-reload
}
trap cleanup EXIT

subst() { sed "s|@CMAKE_INSTALL_FULL_BINDIR@|$bindir|g" "$1"; }
subst "$src/systemd/npusand.service.in" >"$units/npusand.service"
cp "$src/systemd/npusand.socket" "$units/npusand.socket"
mkdir -p "$units/npusand.service.d" /var/lib/prometheus/node-exporter
subst "$src/systemd/npusand-metrics.conf.in" >"$units/npusand.service.d/metrics.conf"
systemctl daemon-reload
systemctl start npusand.socket npusand.service

# The metric's value, from a scrape; 0 when absent.
scrape() {
	python3 - "$port" "$1" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
vals = [float(l.split()[-1]) for l in body.splitlines() if l.startswith(sys.argv[2] + " ")]
print(int(vals[0]) if vals else 0)
PY
}

i=0
until [ "$(scrape 'npusan_findings_total{kind="data_race"}' 2>/dev/null)" ]; do
	i=$((i + 1))
	[ $i -lt 50 ] || { systemctl status npusand.service; echo "unit_run: /metrics never answered" >&2; exit 1; }
	sleep 0.2
done
before=$(scrape 'npusan_findings_total{kind="data_race"}')
st=0
NPUSAN_SOCKET=/run/npusan/npusand.sock "$bindir/npusanctl" run --job unit-run -- "$bindir/npusan-demo" || st=$?
[ $st -eq 1 ] || { echo "unit_run: the demo exited $st, not 1 (findings)" >&2; exit 1; }
after=$(scrape 'npusan_findings_total{kind="data_race"}')
[ "$after" -gt "$before" ] || { echo "unit_run: data_race stayed at $after" >&2; exit 1; }
# The textfile, written every 2 s, readable by node_exporter's user.
sleep 3
[ "$(stat -c %a "$prom")" = 644 ] || { echo "unit_run: $prom is not 0644" >&2; exit 1; }
grep -q '^npusan_build_info' "$prom"
# The sandbox is still the unit's.
systemctl show -p RestrictAddressFamilies -p IPAddressDeny -p ProtectSystem npusand.service
echo "unit_run: ok: data_race $before -> $after, $prom written"
