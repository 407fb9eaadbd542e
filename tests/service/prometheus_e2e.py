#!/usr/bin/env python3
"""npusand scraped by a real Prometheus, end to end.

Debian's prometheus server runs on loopback with the scrape configuration
README.md shows ("Monitoring a cluster"; the yaml block after the line
naming this file), its intervals shortened to 1 s, its targets replaced
by a test npusand (--metrics-listen on a free loopback port, a private
socket and database) and examples/prometheus/npusan-alerts.yml as its
rules. A job with findings (npusanctl run --job e2e -- npusan-demo) then
runs, and the test reads back through Prometheus's HTTP API:
sum by (kind) (npusan_findings_total) must equal the occurrences
`npusanctl findings --job e2e --json` counts per kind, and the alert
NpusanNewFindings must fire for each kind found. Exit 77 (a skip)
without prometheus.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

DEADLINE_S = 40  # for each wait; the whole test takes a few seconds


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_for(what, probe):
    """Calls probe() until it returns something true; that value."""
    end = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < end:
        try:
            got = probe()
            if got:
                return got
            last = "not yet"
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.2)
    sys.exit("prometheus_e2e: %s: gave up after %d s (%s)"
             % (what, DEADLINE_S, last))


def readme_scrape_config(readme):
    """The yaml block after the line naming this test in README.md."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"tests/service/prometheus_e2e\.py.*?```yaml\n(.*?)```",
                  text, re.S)
    if m is None:
        sys.exit("prometheus_e2e: no yaml block after the line naming "
                 "tests/service/prometheus_e2e.py in " + readme)
    return m.group(1)


def test_config(block, target, rules):
    """The README's block with 1 s intervals, one target and our rules."""
    subs = [
        (r"(?m)^(\s*(?:scrape|evaluation)_interval:).*$", r"\1 1s"),
        (r"(?m)^(\s*- targets:).*$", r"\1 ['%s']" % target),
        (r"(?m)^(\s*- ).*npusan-alerts\.yml\s*$", r"\1%s" % rules),
    ]
    for pattern, repl in subs:
        block, n = re.subn(pattern, repl, block)
        if n == 0:
            sys.exit("prometheus_e2e: the README's scrape configuration "
                     "has no line matching " + pattern)
    return block


def query(prom, expr):
    url = "http://%s/api/v1/query?%s" % (
        prom, urllib.parse.urlencode({"query": expr}))
    answer = json.loads(http_get(url))
    if answer["status"] != "success":
        raise ValueError(answer)
    return answer["data"]["result"]


def expected_by_kind(npusanctl, env):
    """Occurrences per kind of job e2e, as the daemon's store counts them."""
    out = subprocess.run([npusanctl, "findings", "--job", "e2e", "--json"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 1:  # 1: it printed findings
        sys.exit("prometheus_e2e: npusanctl findings exited %d\n%s"
                 % (out.returncode, out.stderr))
    try:
        rows = json.loads(out.stdout)
    except ValueError:
        rows = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    by_kind = {}
    for f in rows:
        by_kind[f["kind"]] = by_kind.get(f["kind"], 0) + f["count"]
    return by_kind


def start(argv, log, env=None):
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            env=env)


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(args, tmp, procs):
    env = dict(os.environ, NPUSAN_SOCKET=os.path.join(tmp, "npusand.sock"),
               NPUSAN_DB=os.path.join(tmp, "npusan.db"))
    for k in ("NPUSAN", "NPUSAN_RECORD"):
        env.pop(k, None)
    metrics = "127.0.0.1:%d" % free_port()
    prom = "127.0.0.1:%d" % free_port()

    procs.append(start([args.npusand, "--metrics-listen", metrics],
                       open(os.path.join(tmp, "npusand.log"), "w"), env))
    wait_for("npusand's /metrics", lambda: http_get(
        "http://%s/metrics" % metrics))

    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(test_config(readme_scrape_config(args.readme), metrics,
                            os.path.abspath(args.rules)))
    procs.append(start([args.prometheus, "--config.file=" + cfg,
                        "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                        "--web.listen-address=" + prom],
                       open(os.path.join(tmp, "prometheus.log"), "w")))
    wait_for("prometheus ready", lambda: http_get("http://%s/-/ready" % prom))
    # One scrape before the job, so that increase() in the alert rule
    # sees the counters rise from 0.
    wait_for("a first scrape of npusand", lambda: query(
        prom, 'npusan_findings_total{job="npusan",kind="data_race"} == 0'))

    job = subprocess.run([args.npusanctl, "run", "--job", "e2e", "--",
                          args.demo], env=env, capture_output=True, text=True)
    if job.returncode != 1:
        sys.exit("prometheus_e2e: npusanctl run exited %d, not 1 (findings)"
                 "\n%s%s" % (job.returncode, job.stdout, job.stderr))
    want = expected_by_kind(args.npusanctl, env)
    if sorted(want) != ["data_race", "missing_record_stream"]:
        sys.exit("prometheus_e2e: the demo's findings by kind: %s" % want)

    def counts_match():
        got = {r["metric"]["kind"]: int(float(r["value"][1])) for r in query(
            prom, 'sum by (kind) (npusan_findings_total{job="npusan"}) > 0')}
        print("prometheus_e2e: Prometheus has %s, the store %s" % (got, want))
        return got == want
    wait_for("npusan_findings_total through Prometheus", counts_match)

    def alerts_fire():
        answer = json.loads(http_get("http://%s/api/v1/alerts" % prom))
        firing = {a["labels"].get("kind") for a in answer["data"]["alerts"]
                  if a["labels"]["alertname"] == "NpusanNewFindings"
                  and a["state"] == "firing"}
        return firing == set(want)
    wait_for("NpusanNewFindings firing for each kind", alerts_fire)
    print("prometheus_e2e: ok: %s occurrences read back through Prometheus, "
          "NpusanNewFindings firing" % want)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--npusand", required=True)
    p.add_argument("--npusanctl", required=True)
    p.add_argument("--demo", required=True)
    p.add_argument("--readme", required=True)
    p.add_argument("--rules", required=True)
    p.add_argument("--prometheus", default=shutil.which("prometheus"))
    args = p.parse_args()
    if args.prometheus is None:
        print("prometheus_e2e: no prometheus (Debian's prometheus): skip")
        return 77
    tmp = tempfile.mkdtemp(prefix="npusan-prom-")
    procs = []
    ok = False
    try:
        run(args, tmp, procs)
        ok = True
    finally:
        for proc in reversed(procs):
            stop(proc)
        if ok:
            shutil.rmtree(tmp)
        else:
            print("prometheus_e2e: logs kept in " + tmp, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
