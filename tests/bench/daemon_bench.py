#!/usr/bin/env python3
"""daemon_bench.py - npusand under load, as the daemon issue measures it.

Not a test. Generates N training-like traces (engine_bench's workload, a
different seed each), starts npusand on a private socket and database,
replays all traces at once through the real agent (npusan-replay, one
process each), and while they run keeps asking `npusanctl findings`. Prints:

  - aggregate operations/s through the daemon (from the first replayed
    operation, once every replay has read its trace ahead, until the
    daemon has analysed the last one);
  - the daemon's CPU time per operation, and the replays' (npusan-replay
    and its children, reading their traces included; what reading costs
    is printed once, replaying with the agent off, NPUSAN=0);
  - records lost (dropped at the ring) under the default drop policy with
    the replays paced to offer --rate operations/s in all, then unpaced with
    NPUSAN_RING_FULL=block (the daemon's ceiling) and with drop;
  - `npusanctl findings` latency, p50 and p99, under that load;
  - the daemon's context switches, voluntary (naps on empty rings) and
    involuntary (preempted: a daemon short of CPU, not of work).

Usage: tests/bench/daemon_bench.py --build DIR [--procs 8] [--ops 1000000]
                                   [--rate 2e6] [--only paced,block,drop]
                                   [--threads 1,2] [--traces DIR]
(DIR is a Release build: cmake -DCMAKE_BUILD_TYPE=Release).

--only picks the runs (paced: drop policy at --rate; block and drop:
unpaced). --threads runs each picked run once per number of npusand drain
threads (npusand --threads N; 0, its default, is one per CPU up to 3) and,
given two or more, prints the slope: operations/s gained per added thread.
Each run ends with a line saying whether anything was lost. --traces
keeps the generated traces in DIR and reuses those already there (the same
--procs and --ops), so that runs compared side by side replay the same.

The issue's runs, one command each:
  daemon_bench.py --build B --only block                 # the ceiling
  daemon_bench.py --build B --only paced --rate 4e6      # drop, 4 M/s offered
  daemon_bench.py --build B --only block --threads 1,2   # the slope
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid):
    """The context switches of all of pid's threads: (voluntary, involuntary).
    A drain thread's voluntary ones are mostly its naps on empty rings; the
    involuntary ones, other programs taking its CPU."""
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
    return vol, invol


def wait_socket(path, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.01)
        finally:
            s.close()
    sys.exit("daemon_bench: npusand did not start")


def count_ops(path):
    n = 0
    with open(path) as f:
        for line in f:
            w = line.split(None, 1)
            if w and w[0] not in ("npusan-trace", "process", "stack") \
                    and not w[0].startswith("#"):
                n += 1
    return n


def processes(ctl, env):
    out = subprocess.run([ctl, "list", "--json"], env=env,
                         capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def replay_cpu(args, cmd, env):
    """Runs npusan-replay; the CPU seconds it and its children took."""
    rep = subprocess.Popen([args.replay] + cmd, env=env)
    # wait4's usage takes in the replays, which npusan-replay waits for.
    _, status, usage = os.wait4(rep.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("daemon_bench: npusan-replay failed")
    return usage.ru_utime + usage.ru_stime


def run(args, traces, total_ops, policy, rate, threads):
    tmp = tempfile.mkdtemp(prefix="npusan-bench-")
    sock, db = os.path.join(tmp, "s"), os.path.join(tmp, "db")
    env = dict(os.environ, NPUSAN_SOCKET=sock, NPUSAN_RING_FULL=policy)
    env.pop("NPUSAN", None)
    d = subprocess.Popen([args.npusand, "--socket", sock, "--db", db,
                          "--log-level", "warn", "--threads", str(threads)]
                         + args.daemon_args, env=env)
    wait_socket(sock)
    cpu0, sw0 = cpu_seconds(d.pid), switches(d.pid)
    latencies, done = [], threading.Event()

    def query():
        while not done.is_set():
            t = time.perf_counter()
            subprocess.run([args.npusanctl, "findings", "--limit", "20"],
                           env=env, capture_output=True)
            latencies.append(time.perf_counter() - t)
            time.sleep(0.05)

    q = threading.Thread(target=query, daemon=True)
    pace = ["--rate", str(rate / len(traces))] if rate else []
    started = os.path.join(tmp, "started")
    t0 = []

    def clock():
        # The clock starts once every replay has read its trace ahead:
        # reading text is no part of what the daemon is measured by.
        while not os.path.exists(started) and not done.is_set():
            time.sleep(0.001)
        t0.append(time.perf_counter())
        q.start()

    c = threading.Thread(target=clock, daemon=True)
    c.start()
    # Gross: reading the traces ahead (printed once, measured apart) is in
    # it. Subtracting that measurement gave negative figures: 8 replays
    # reading at once on 2 cores cost more CPU than the replays did.
    rep_cpu = replay_cpu(args, ["--wait", "600000", "--started", started]
                         + pace + traces, env)
    while True:
        ps = processes(args.npusanctl, env)
        if len(ps) == len(traces) and all(p.get("state") == "exited"
                                          for p in ps):
            break
        time.sleep(0.02)
    c.join()
    elapsed = time.perf_counter() - t0[0]
    done.set()
    q.join()
    cpu = cpu_seconds(d.pid) - cpu0
    vol, invol = (a - b for a, b in zip(switches(d.pid), sw0))
    events = sum(p.get("events", 0) for p in ps)
    lost = sum(p.get("lost", 0) for p in ps)
    d.send_signal(signal.SIGTERM)
    d.wait()
    subprocess.run(["rm", "-rf", tmp])
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0
    how = f"paced at {rate / 1e6:g} M/s" if rate else "unpaced"
    how += f", {threads or 'default'} drain thread{'' if threads == 1 else 's'}"
    print(f"{policy}, {how}: {len(traces)} processes x "
          f"{total_ops // len(traces)} "
          f"operations: {total_ops / elapsed / 1e6:.2f} M operations/s "
          f"aggregate ({elapsed:.2f} s); daemon CPU "
          f"{cpu * 1e9 / max(events, 1):.0f} ns/operation; analysed "
          f"{events}, lost {lost} ({100.0 * lost / total_ops:.2f}%); "
          f"findings query p50 {statistics.median(lat) * 1e3:.1f} ms, "
          f"p99 {p99 * 1e3:.1f} ms over {len(lat)} queries; daemon busy "
          f"{cpu / elapsed:.2f} CPUs; replays CPU, reading included, "
          f"{rep_cpu * 1e9 / total_ops:.0f} ns/operation; daemon's "
          f"threads napped or "
          f"waited {vol} times, were preempted {invol} times")
    missing = total_ops - events - lost
    print(f"  verdict: {'nothing lost' if lost == 0 and missing == 0 else 'LOST ' + str(lost) + ' (dropped), ' + str(missing) + ' unaccounted'}",
          flush=True)
    return total_ops / elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--ops", type=int, default=1000000)
    ap.add_argument("--rate", type=float, default=2e6,
                    help="aggregate operations/s the paced runs offer")
    ap.add_argument("--daemon-arg", dest="daemon_args", action="append",
                    default=[], help="an extra npusand argument")
    ap.add_argument("--only", default="paced,block,drop",
                    help="the runs: paced (drop policy at --rate), block, "
                    "drop (both unpaced), comma-separated")
    ap.add_argument("--threads", default="0",
                    help="npusand drain threads, comma-separated: each run "
                    "once per count (0: npusand's default)")
    ap.add_argument("--traces", help="keep the traces in (and reuse them "
                    "from) this directory")
    args = ap.parse_args()
    runs = args.only.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    if not runs or any(r not in ("paced", "block", "drop") for r in runs):
        sys.exit("daemon_bench: --only takes paced, block and drop")
    b = os.path.abspath(args.build)
    args.npusand = os.path.join(b, "daemon", "npusand")
    args.npusanctl = os.path.join(b, "npusanctl")
    args.replay = os.path.join(b, "agent", "npusan-replay")
    gen = os.path.join(b, "engine_bench")
    tmp = args.traces or tempfile.mkdtemp(prefix="npusan-bench-traces-")
    os.makedirs(tmp, exist_ok=True)
    traces = []
    # engine_bench's workload has about 2.49 operations per launch.
    launches = max(1, int(args.ops / 2.49))
    for i in range(args.procs):
        path = os.path.join(tmp, f"rank{i}-{launches}.trace")
        traces.append(path)
        if os.path.exists(path):
            continue
        subprocess.run([gen, "--launches", str(launches), "--seed",
                        str(i + 1), "--runs", "1", "--compare-ops", "0",
                        "--write-trace", path + ".part"], check=True,
                       capture_output=True)
        os.rename(path + ".part", path)  # a cut-short one is not reused
    total = sum(count_ops(t) for t in traces)
    args.read_cpu = replay_cpu(args, ["--wait", "0"] + traces,
                               dict(os.environ, NPUSAN="0"))
    print(f"reading the traces ahead, agent off: "
          f"{args.read_cpu * 1e9 / total:.0f} ns/operation of the replays' "
          f"CPU (in the replays' figures below)")
    # paced: offered at the target rate, does the daemon keep up without
    # drops? block and drop: as fast as the replays go, the daemon's own
    # ceiling; the producers wait for it (block), or their excess is
    # dropped (drop).
    how = {"paced": ("drop", args.rate), "block": ("block", 0),
           "drop": ("drop", 0)}
    for r in runs:
        rates = [(t, run(args, traces, total, how[r][0], how[r][1], t))
                 for t in threads]
        if len(rates) > 1:
            (t0, r0), (t1, r1) = rates[0], rates[-1]
            print(f"  {r}: drain threads {t0} -> {t1}: "
                  f"{r0 / 1e6:.2f} -> {r1 / 1e6:.2f} M operations/s, "
                  f"slope {(r1 - r0) / (t1 - t0) / 1e6:+.2f} M/s per thread")
    if not args.traces:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
