#!/usr/bin/python3
"""Times PyTorch's CUDA Sanitizer EventHandler on the operations of a trace.

engine_bench --write-trace writes the workload the npusan engine is timed
on; this script feeds the first --max-ops of its operations to
torch.cuda._sanitizer.EventHandler, the analysis behind
TORCH_CUDA_SANITIZER, the way CUDASanitizerDispatchMode and the
torch.cuda trace callbacks drive it, so that run_bench.sh can put the two
side by side on the same operations. It needs no GPU.

The trace is parsed first, into a list of calls, and only feeding them is
timed. The parser reads the canonical lines trace_write.c produces, not
every form docs/trace-format.md allows (no comments, no blank-only
quirks), and stops at anything else.

EventHandler records a Python stack trace at every launch and allocation,
so its cost grows with the depth of the stack it is called from. Here that
stack is a few frames deep, the most favourable case for it; a training
loop calls it 20 to 40 frames deep, which --stack-depth adds.

With --engine CMD (run_bench.sh passes engine_bench --compare-only over
the same trace), the two take turns for --rounds rounds: the engine's
command, then one EventHandler run, each round giving a ratio of the two
rates on the same operations seconds apart. The ratio reported is the
median of the rounds' ratios, in wall-clock time and in each side's thread
CPU time (which leaves out the time the other core's work preempts it):
the machine's speed drifts over minutes, and a ratio of two medians taken
minutes apart carries that drift.

Usage: /usr/bin/python3 tests/bench/csan_bench.py TRACE [--max-ops N]
       [--runs R] [--stack-depth N] [--engine CMD --rounds N]
"""

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import time

# Bare values, or quoted strings with \" \\ \n \t escapes.
FIELD = re.compile(r'([a-z]+)=("(?:[^"\\]|\\.)*"|[^ \t"]*)')

LAUNCH, ALLOC, FREE, STREAM_CREATE, EVENT_CREATE, EVENT_DESTROY, \
    EVENT_RECORD, EVENT_WAIT, EVENT_SYNC, STREAM_WAIT, STREAM_SYNC, \
    DEVICE_SYNC = range(12)

# engine_bench --compare-only's line: its wall-clock and CPU-time rates.
ENGINE_LINE = re.compile(r"^engine, first (\d+) ops: (\S+) ops/s .*"
                         r"thread CPU time (\S+) ops/s$", re.M)

# Operations EventHandler has no counterpart for: counted, not fed.
SKIPPED = ("record_stream", "flush", "gap")


def num(s):
    return int(s, 16) if s.startswith("0x") else int(s, 10)


def unquote(s):
    if not s.startswith('"'):
        return s
    out, i, body = [], 0, s[1:-1]
    while i < len(body):
        if body[i] == "\\":
            out.append({"n": "\n", "t": "\t"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def pointers(value):
    """The data pointers of a read= or write= list: CSAN knows tensors by
    their data pointer, so PTR+LEN is PTR."""
    if not value:
        return []
    return [num(e.split("+", 1)[0]) for e in value.split(",")]


class Parsed:
    def __init__(self):
        self.calls = []         # (kind, args)
        self.ops = 0            # operations, skipped ones included
        self.skipped = {}       # directive -> count
        self.launches = 0
        self.next_event = 1 << 62   # fresh events for stream_wait


def parse(path, max_ops):
    p = Parsed()
    with open(path, encoding="utf-8") as f:
        header = None
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if header is None:
                header = line.split()
                if header != ["npusan-trace", "1"]:
                    sys.exit(f"{path}:{lineno}: not an npusan-trace 1 file")
                continue
            if p.ops == max_ops:
                break
            word, _, rest = line.partition(" ")
            if word in ("stack", "process"):
                continue
            fields = {k: unquote(v) for k, v in FIELD.findall(rest)}
            p.ops += 1
            if word in SKIPPED:
                p.skipped[word] = p.skipped.get(word, 0) + 1
                continue
            call = to_call(p, word, fields)
            if call is None:
                sys.exit(f"{path}:{lineno}: unexpected line: {line[:80]}")
            p.calls.append(call)
    return p


def to_call(p, word, f):
    if word == "launch":
        reads = set(pointers(f.get("read", "")))
        writes = set(pointers(f.get("write", "")))
        p.launches += 1
        # What CUDASanitizerDispatchMode passes: read_only = read - written,
        # read_write = written, no outputs, an alias list per pointer.
        aliases = {ptr: [] for ptr in reads | writes}
        return (LAUNCH, (num(f["stream"]), reads - writes, writes, set(),
                         f["op"], aliases))
    if word == "alloc":
        return (ALLOC, (num(f["ptr"]),))
    if word == "free":
        return (FREE, (num(f["ptr"]),))
    if word == "stream_create":
        return (STREAM_CREATE, (num(f["stream"]),))
    if word == "event_create":
        return (EVENT_CREATE, (num(f["event"]),))
    if word == "event_destroy":
        return (EVENT_DESTROY, (num(f["event"]),))
    if word == "event_record":
        return (EVENT_RECORD, (num(f["event"]), num(f["stream"])))
    if word == "event_wait":
        return (EVENT_WAIT, (num(f["event"]), num(f["stream"])))
    if word == "event_sync":
        return (EVENT_SYNC, (num(f["event"]),))
    if word == "stream_wait":
        p.next_event += 1
        return (STREAM_WAIT, (p.next_event, num(f["stream"]), num(f["on"])))
    if word == "stream_sync":
        return (STREAM_SYNC, (num(f["stream"]),))
    if word == "device_sync":
        return (DEVICE_SYNC, ())
    return None


def run(calls, EventHandler):
    """Seconds one fresh EventHandler takes over the calls, in wall-clock
    and in the thread's CPU time, and the errors it reported."""
    h = EventHandler()

    # A.wait_stream(B) is B.record_event() then A.wait_event() on a new
    # Event, which the trace callbacks report as these four calls.
    def stream_wait(ev, a, b):
        h._handle_event_creation(ev)
        h._handle_event_record(ev, b)
        h._handle_event_wait(ev, a)
        h._handle_event_deletion(ev)

    table = [None] * 12
    table[LAUNCH] = h._handle_kernel_launch
    table[ALLOC] = h._handle_memory_allocation
    table[FREE] = h._handle_memory_deallocation
    table[STREAM_CREATE] = h._handle_stream_creation
    table[EVENT_CREATE] = h._handle_event_creation
    table[EVENT_DESTROY] = h._handle_event_deletion
    table[EVENT_RECORD] = h._handle_event_record
    table[EVENT_WAIT] = h._handle_event_wait
    table[EVENT_SYNC] = h._handle_event_synchronization
    table[STREAM_WAIT] = stream_wait
    table[STREAM_SYNC] = h._handle_stream_synchronization
    table[DEVICE_SYNC] = h._handle_device_synchronization
    errors = 0
    t0, c0 = time.perf_counter(), time.thread_time()
    for kind, args in calls:
        found = table[kind](*args)
        if found:
            errors += len(found)
    return (time.perf_counter() - t0, time.thread_time() - c0), errors


def nested(depth, fn):
    """fn() called `depth` frames deeper than this."""
    return fn() if depth == 0 else nested(depth - 1, fn)


def stack_depth():
    """Frames on the stack of the caller, itself included."""
    depth, f = 0, sys._getframe(1)
    while f is not None:
        depth, f = depth + 1, f.f_back
    return depth


def sci(v):
    """7.12e6, the form engine_bench prints and run_bench.sh reads."""
    m, e = f"{v:.2e}".split("e")
    return f"{m}e{int(e)}"


def engine_rates(cmd, ops):
    """(wall, cpu) ops/s of one engine_bench --compare-only run."""
    out = subprocess.run(shlex.split(cmd), check=True, capture_output=True,
                         text=True).stdout
    m = ENGINE_LINE.search(out)
    if m is None:
        sys.exit(f"csan_bench: no 'engine, first N ops' line from {cmd}")
    if int(m.group(1)) != ops:
        sys.exit(f"csan_bench: the engine timed {m.group(1)} ops, "
                 f"EventHandler {ops}")
    return float(m.group(2)), float(m.group(3))


def rounds(a, p, EventHandler):
    """The engine and EventHandler in turns; prints each round's ratios and
    their medians."""
    wall, cpu = [], []
    for r in range(a.rounds):
        e_wall, e_cpu = engine_rates(a.engine, p.ops)
        (t, c), _ = nested(a.stack_depth, lambda: run(p.calls, EventHandler))
        wall.append(e_wall * t / p.ops)
        cpu.append(e_cpu * c / p.ops)
        print(f"round {r + 1}: engine {sci(e_wall)} ops/s, EventHandler "
              f"{sci(p.ops / t)} ops/s: {wall[-1]:.0f} times; thread CPU "
              f"time {sci(e_cpu)} and {sci(p.ops / c)}: {cpu[-1]:.0f} times")
    print(f"target, against EventHandler: {statistics.median(wall):.0f} "
          f"times its ops/s, median of {a.rounds} side-by-side rounds "
          f"({min(wall):.0f} to {max(wall):.0f}); in thread CPU time "
          f"{statistics.median(cpu):.0f} times ({min(cpu):.0f} to "
          f"{max(cpu):.0f}); target at least 100")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--max-ops", type=int, default=200000,
                    help="feed the first N operations (default 200000)")
    ap.add_argument("--runs", type=int, default=3,
                    help="timed runs; the median is reported (default 3)")
    ap.add_argument("--stack-depth", type=int, default=0,
                    help="call EventHandler this many Python frames deeper "
                    "(default 0)")
    ap.add_argument("--engine", metavar="CMD",
                    help="engine_bench --compare-only command to take turns "
                    "with, over the same operations")
    ap.add_argument("--rounds", type=int, default=5,
                    help="turns with --engine (default 5)")
    a = ap.parse_args()
    if a.max_ops < 1 or a.runs < 1 or a.rounds < 1 or \
            not 0 <= a.stack_depth <= 500:
        ap.error("--max-ops, --runs and --rounds must be at least 1, "
                 "--stack-depth 0 to 500")

    import torch
    from torch.cuda._sanitizer import EventHandler

    p = parse(a.trace, a.max_ops)
    times, cpu_times, errors = [], [], 0
    for _ in range(a.runs):
        (t, c), errors = nested(a.stack_depth,
                                lambda: run(p.calls, EventHandler))
        times.append(t)
        cpu_times.append(c)
    # run() and the handler method add two frames to the caller's.
    depth = nested(a.stack_depth, stack_depth) + 2
    t, c = statistics.median(times), statistics.median(cpu_times)
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(p.skipped.items()))
    print(f"torch {torch.__version__} on Python {sys.version.split()[0]}, "
          "torch.cuda._sanitizer.EventHandler, single-threaded")
    print(f"operations: {p.ops} ({p.launches} launches), the first of "
          f"{a.trace}")
    print(f"not fed, no EventHandler counterpart: {skipped or 'none'} "
          "(counted as operations, as the C side counts them)")
    print(f"Python stack at EventHandler's methods: {depth} frames "
          f"({a.stack_depth} added by --stack-depth)")
    print(f"EventHandler, first {p.ops} ops: {sci(p.ops / t)} ops/s "
          f"({t / p.ops * 1e9:.0f} ns/op), median of {a.runs} runs; "
          f"thread CPU time {sci(p.ops / c)} ops/s")
    print(f"errors reported by EventHandler: {errors} (not deduplicated; "
          "interior pointers are separate tensors to it)")
    if a.engine:
        rounds(a, p, EventHandler)


if __name__ == "__main__":
    main()
