#!/usr/bin/python3
"""soak.py - a long run of one daemon under load, for issue notes and releases.

Not part of the suite (it runs for minutes). It starts one npusand from a
build directory (the ASan build, so that a memory error or a leak ends up
in the daemon's log), then for --duration seconds:

- --replays workers each replay one trace after another through
  npusan-replay, each copy under a job name of its own, so agents register
  and exit in a loop;
- two clients query in a loop (`list --json`, `findings --json`, `stats`);
- one `findings --follow --json` runs the whole time;
- every minute it prints the daemon's RSS and how many processes ran.

At the end it checks that every replayed process was analysed (state
exited, nothing lost, operations equal to the trace's), that `findings
--job J --json` equals `analyze --json` of the trace (ids, first_seen,
last_seen and the process object aside, which differ by design), that the
daemon stops on SIGTERM and that its log has no sanitizer report. Exit 0
when all of that holds, 1 otherwise.

    tests/soak/soak.py --build build/test --duration 600
"""
import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "WARNING: ThreadSanitizer")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build", "test"))
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--replays", type=int, default=8)
    ap.add_argument("--rate", type=int, default=0,
                    help="operations/s per replay, 0: as fast as it goes")
    return ap.parse_args()


def generated_trace(path, steps=400):
    """A training-like trace: allocations on stream 0, a side stream that
    sometimes forgets to wait (races) or to record_stream (a finding at the
    free), events, syncs, frees and reuse: a few thousand operations."""
    out = ["npusan-trace 1", "process pid=1 job=gen rank=0",
           'stack id=1 frame="train.py:10 in step" frame="train.py:30 in main"',
           'stack id=2 frame="side.py:5 in copy" frame="train.py:12 in step"',
           "stream_create stream=1", "event_create event=1"]
    for s in range(steps):
        base = 0x10000 + (s % 16) * 0x10000
        out.append(f"alloc ptr={base:#x} size=4096 stream=0 stack=1")
        out.append(f"launch stream=0 op=aten::mm write={base:#x}+4096 stack=1")
        if s % 7:
            out.append("event_record event=1 stream=0")
            out.append("event_wait event=1 stream=1")
        out.append(f"launch stream=1 op=aten::copy_ read={base:#x}+4096 "
                   f"write={base + 0x8000:#x}+64 stack=2")
        if s % 5 == 0:
            out.append(f"record_stream ptr={base:#x} stream=1")
        if s % 11 == 0:
            out.append("stream_sync stream=1")
        out.append(f"free ptr={base:#x}")
        if s % 50 == 49:
            out.append("flush")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = {name: os.path.join(args.build, rel) for name, rel in (
            ("npusand", "daemon/npusand"), ("ctl", "npusanctl"),
            ("replay", "agent/npusan-replay"))}
        self.dir = tempfile.mkdtemp(prefix="npusan-soak-")
        self.env = dict(os.environ, NPUSAN_SOCKET=os.path.join(self.dir, "s"),
                        NPUSAN_DB=os.path.join(self.dir, "db"))
        self.lock = threading.Lock()
        self.replayed = []   # (job, trace index)
        self.problems = []
        self.queries = 0
        self.stop = threading.Event()

    def ctl(self, *argv, timeout=60):
        return subprocess.run([self.bin["ctl"], *argv], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def problem(self, what):
        with self.lock:
            self.problems.append(what)
        print("soak: PROBLEM:", what, flush=True)

    def load_traces(self):
        paths = [os.path.join(TOP, "examples", "demo.trace")]
        paths += sorted(glob.glob(os.path.join(TOP, "tests/fuzz/corpus/*.trace")))
        gen = os.path.join(self.dir, "gen.trace")
        generated_trace(gen)
        paths.append(gen)
        self.traces = []
        for p in paths:
            r = self.ctl("analyze", "--json", p)
            if r.returncode not in (0, 1, 4, 5) or "cut short" in r.stderr:
                # The corpus's bad traces, and torn ones, whose replay
                # puts a gap for the torn line: not for this count.
                continue
            with open(p) as f:
                text = f.read()
            self.traces.append((p, text, normalized(r.stdout),
                                count_operations(text)))
        print(f"soak: {len(self.traces)} traces, "
              f"{sum(len(t[2]) for t in self.traces)} findings in all", flush=True)

    def start_daemon(self):
        self.log = open(os.path.join(self.dir, "npusand.log"), "w")
        self.daemon = subprocess.Popen(
            [self.bin["npusand"], "--socket", self.env["NPUSAN_SOCKET"],
             "--db", self.env["NPUSAN_DB"]], env=self.env,
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if self.ctl("stats").returncode == 0:
                return
            time.sleep(0.05)
        raise SystemExit("soak: the daemon did not come up")

    def replayer(self, worker):
        n = 0
        while not self.stop.is_set():
            idx = (worker + n) % len(self.traces)
            job = f"soak-{worker}-{n}"
            path = os.path.join(self.dir, f"w{worker}.trace")
            with open(path, "w") as f:
                f.write(with_job(self.traces[idx][1], job))
            argv = [self.bin["replay"]]
            if self.args.rate:
                argv += ["--rate", str(self.args.rate)]
            r = subprocess.run(argv + [path], env=self.env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.problem(f"replay {job} exited {r.returncode}: {r.stderr.strip()}")
            with self.lock:
                self.replayed.append((job, idx))
            n += 1

    def querier(self, which):
        cmds = [("list", "--json"), ("findings", "--json", "--limit", "50"),
                ("stats",)]
        n = 0
        while not self.stop.is_set():
            try:
                r = self.ctl(*cmds[(n + which) % len(cmds)])
            except subprocess.TimeoutExpired:
                self.problem(f"query {cmds[(n + which) % len(cmds)]} took "
                             "over 60 s")
                n += 1
                continue
            if r.returncode not in (0, 1):
                self.problem(f"query {cmds[(n + which) % len(cmds)]} exited "
                             f"{r.returncode}: {r.stderr.strip()}")
            with self.lock:
                self.queries += 1
            n += 1
            time.sleep(0.05)

    def rss_kib(self):
        try:
            with open(f"/proc/{self.daemon.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return -1

    def run(self):
        self.load_traces()
        self.start_daemon()
        follow_out = open(os.path.join(self.dir, "follow.jsonl"), "w")
        follow = subprocess.Popen([self.bin["ctl"], "findings", "--follow", "--json"],
                                  env=self.env, stdout=follow_out,
                                  stderr=subprocess.DEVNULL)
        threads = [threading.Thread(target=self.replayer, args=(w,))
                   for w in range(self.args.replays)]
        threads += [threading.Thread(target=self.querier, args=(q,)) for q in range(2)]
        for t in threads:
            t.start()
        start = time.monotonic()
        rss = []
        while time.monotonic() - start < self.args.duration:
            time.sleep(min(60, max(0, self.args.duration - (time.monotonic() - start))))
            rss.append(self.rss_kib())
            with self.lock:
                print(f"soak: {time.monotonic() - start:6.0f} s: daemon RSS "
                      f"{rss[-1] / 1024:.1f} MiB, {len(self.replayed)} processes "
                      f"replayed, {self.queries} queries", flush=True)
        self.stop.set()
        for t in threads:
            t.join()
        follow.send_signal(signal.SIGTERM)
        follow.wait(timeout=30)
        follow_out.close()
        self.check_every_process()
        self.daemon.send_signal(signal.SIGTERM)
        try:
            rc = self.daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            rc = "killed after 60 s"
        self.log.close()
        if rc != 0:
            self.problem(f"npusand exited {rc} on SIGTERM")
        self.check_log()
        with open(follow_out.name) as f:
            followed = sum(1 for _ in f)
        print(f"soak: {len(self.replayed)} processes, {self.queries} queries, "
              f"{followed} lines from --follow, RSS min/max "
              f"{min(rss) / 1024:.1f}/{max(rss) / 1024:.1f} MiB", flush=True)
        if self.problems:
            print(f"soak: FAILED with {len(self.problems)} problems; "
                  f"files in {self.dir}")
            return 1
        print("soak: passed")
        return 0

    def check_every_process(self):
        """One list and one findings answer for the whole run (tens of
        thousands of processes), grouped by job."""
        r = self.ctl("list", "--json", timeout=600)
        procs = {}
        for line in r.stdout.splitlines():
            if line:
                p = json.loads(line)
                procs.setdefault(p["job"], []).append(p)
        r = self.ctl("findings", "--json", timeout=600)
        found = {}
        for line in r.stdout.splitlines():
            if line:
                job = json.loads(line)["process"]["job"]
                found.setdefault(job, []).append(line)
        for job, idx in self.replayed:
            path, _, want, ops = self.traces[idx]
            listed = procs.get(job, [])
            if len(listed) != 1:
                self.problem(f"{job} ({path}): {len(listed)} processes listed")
                continue
            p = listed[0]
            if p["state"] != "exited" or p["events"] != ops[0] or p["lost"] != ops[1]:
                self.problem(f"{job} ({path}): state {p['state']}, "
                             f"{p['events']} of {ops[0]} operations, "
                             f"lost {p['lost']} (the trace's gaps say {ops[1]})")
            got = normalized("\n".join(found.get(job, [])))
            if got != want:
                self.problem(f"{job} ({path}): findings differ from analyze: "
                             f"{len(got)} against {len(want)}")
        print(f"soak: checked {len(self.replayed)} processes against "
              f"analyze", flush=True)

    def check_log(self):
        with open(os.path.join(self.dir, "npusand.log")) as f:
            text = f.read()
        for mark in SANITIZER_MARKS:
            if mark in text:
                self.problem(f"the daemon's log has '{mark}'")


def normalized(jsonl):
    out = []
    for line in jsonl.splitlines():
        if not line.strip():
            continue
        f = json.loads(line)
        for key in ("id", "first_seen", "last_seen", "process"):
            f.pop(key, None)
        out.append(f)
    return out


def count_operations(text):
    """The trace's operations, and the operations its gaps say were lost."""
    ops = lost = 0
    for line in text.splitlines():
        word = line.split("#", 1)[0].split()
        if not word or word[0] in ("npusan-trace", "process", "stack"):
            continue
        if word[0] != "gap":
            ops += 1
        for field in word[1:]:
            if field.startswith("lost="):
                lost += int(field[5:], 0)
    return ops, lost


def with_job(text, job):
    """The trace with its process line naming `job`; a last line without
    a newline (a torn one) stays without."""
    end = "\n" if text.endswith("\n") else ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        word = line.split("#", 1)[0].split()
        if not word:
            continue
        if word[0] == "process":
            code = line.split("#", 1)[0]  # no '#' in the corpus's jobs
            lines[i] = re.sub(r'\sjob=("(?:[^"\\]|\\.)*"|\S+)', "", code) + f" job={job}"
            return "\n".join(lines) + end
        if word[0] != "npusan-trace":
            break
    header = next(i for i, line in enumerate(lines)
                  if line.split("#", 1)[0].split())
    lines.insert(header + 1, f"process pid=1 job={job}")
    return "\n".join(lines) + end


if __name__ == "__main__":
    sys.exit(Soak(parse_args()).run())
