#!/usr/bin/python3
"""Differential test of `npusanctl analyze` against PyTorch's CUDA Sanitizer.

Generates deterministic pseudo-random traces in the domain where
docs/trace-format.md says npusan must equal PyTorch's CUDA Sanitizer
(CSAN) exactly, runs one `npusanctl analyze --every --json` over all of them,
replays the same operations through torch.cuda._sanitizer.EventHandler plus a
reference model of torch_npu's record_stream check, and compares the findings
of each trace as multisets.

The domain: no `gap`; pointers are multiples of 0x100 and allocations at
most 0x100 bytes, so no allocation covers another pointer; every access to
a pointer P covers the same bytes [P, P+L_P) for the whole trace (L_P <=
0x100, spelled `P` or `P+L`), and every allocation at P covers them. The
spec keeps history per byte, so accesses of different lengths from one
pointer, or an allocation smaller than an earlier access, make npusan
differ from CSAN's per-pointer history even though the spec's stated
precondition for exactness holds (see tests/diff/README.md). A read of a
pointer that the same launch writes may be shorter: it keeps no byte, just
as CSAN computes `read_only = read - written`.

Usage: csan_diff.py --npusanctl PATH [--traces N] [--ops M] [--seed S]
                    [--keep DIR] [--self-test-break MODE]

Exit status: 0 all traces agree, 1 a mismatch, 2 a harness error,
77 (CTest's skip code) when torch cannot be imported.
"""

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

# Stream ids: the default stream, small ids and pointer-like ones.
STREAMS = (0, 1, 2, 3, 0x7F3A00001000, 0x7F3A00002000)
# A stream that only `alloc` names: the trace never creates it and never
# launches on it, so only host-side syncs order it after other streams.
ALLOC_ONLY_STREAM = 0x7F3A0000F000
# Event ids named by the traces.
EVENTS = (1, 2, 3, 0x7F3B00000040)
# Fresh event ids for CSAN's rendering of `stream_wait`; no trace names them.
WAIT_EVENT_BASE = 1 << 62
# Bases of the pointer pool; every pointer is a multiple of 0x100.
POINTER_BASES = (0x1000, 0x200000, 0x7F0000000000)
TENSOR_SPAN = 0x100
OP_NAMES = ("aten::add.Tensor", "aten::mul.Tensor", "aten::copy_",
            "aten::mm", "aten::relu", "c10d::allreduce_", "aten::fill_.Scalar")
STACKS = {
    1: ("train.py:14 in step", "train.py:30 in main"),
    2: ("model.py:88 in forward", "train.py:14 in step", "train.py:30 in main"),
    3: ("comm.py:41 in all_reduce", "train.py:22 in step"),
}
PID_BASE = 1000
BATCH = 200     # trace files per npusanctl run, to bound the argument list
SHOWN = 5       # differing findings printed per side and failing trace
SHOWN_TRACES = 10   # failing traces whose differences are printed

# The operation mix (kind, weight) and the chance that a launch switching
# the current stream first waits for the previous one, tuned so that about
# half the conflicting pairs of accesses on different streams are ordered.
OP_WEIGHTS = (
    ("launch", 36), ("stream_wait", 15), ("event_record", 10),
    ("event_wait", 10), ("event_sync", 2), ("event_create", 3),
    ("event_destroy", 3), ("stream_sync", 4), ("device_sync", 2),
    ("stream_create", 1), ("alloc", 9), ("free", 8), ("record_stream", 3),
    ("flush", 1),
)
SWITCH_WAIT_RATE = 0.8


class HarnessError(Exception):
    """The harness itself failed (bad tool output, unexpected exit status)."""


# ---------------------------------------------------------------------------
# Trace generation


def access_spelling(ptr, length):
    """Returns a pointer-list element: bare `PTR` (length None) or `PTR+LEN`."""
    return f"{ptr:#x}" if length is None else f"{ptr:#x}+{length:#x}"


def pick_elements(rng, pool, count, lengths, covered_by=None):
    """Picks up to `count` distinct pointers and spells an access for each.

    Every pointer P has one access length `lengths[P]` for the whole trace,
    so all accesses to P cover the same bytes and npusan's per-byte history
    is CSAN's per-tensor one. A read of a pointer that the same launch
    writes (`covered_by` maps it to the write's length) may be shorter,
    since it keeps no byte either way. Sometimes an element is listed twice,
    spelled identically, which is still one access.
    """
    elements = []
    for ptr in rng.sample(pool, min(count, len(pool))):
        length = lengths[ptr]
        if covered_by and ptr in covered_by:
            length = rng.randint(1, covered_by[ptr])
        spelled = None if length == 1 and rng.random() < 0.5 else length
        elements.append((ptr, spelled))
        if rng.random() < 0.05:
            elements.append((ptr, spelled))
    return elements


def generate_trace(rng, n_ops):
    """Returns a list of operations (dicts with a `kind`) for one trace.

    Launches mostly stay on a current stream, as code inside
    `with torch.npu.stream(s)` does; at a switch of the current stream the
    new one usually waits for the old one. Event operations mostly name the
    latest recorded event, so that waits, syncs and resets matter.
    """
    streams = [0] + rng.sample(STREAMS[1:], rng.randint(2, 4))
    base = rng.choice(POINTER_BASES)
    pool = [base + TENSOR_SPAN * slot
            for slot in sorted(rng.sample(range(24), rng.randint(4, 7)))]
    lengths = {ptr: rng.choice((1, TENSOR_SPAN, rng.randint(1, TENSOR_SPAN)))
               for ptr in pool}
    kinds, weights = zip(*OP_WEIGHTS)
    ops = [{"kind": "stream_create", "stream": s}
           for s in streams[1:] if rng.random() < 0.6]
    live, current, recorded = set(), 0, EVENTS[0]
    while len(ops) < n_ops:
        kind = rng.choices(kinds, weights)[0]
        op = {"kind": kind}
        if kind == "launch":
            if rng.random() < 0.2:
                previous, current = current, rng.choice(streams)
                if rng.random() < SWITCH_WAIT_RATE:
                    ops.append({"kind": "stream_wait", "stream": current,
                                "on": previous})
            writes = pick_elements(rng, pool, rng.randint(0, 3), lengths)
            covered = {ptr: lengths[ptr] for ptr, _ in writes}
            op.update(stream=current if rng.random() < 0.8
                      else rng.choice(streams),
                      op=rng.choice(OP_NAMES),
                      read=pick_elements(rng, pool, rng.randint(0, 4),
                                         lengths, covered),
                      write=writes)
        elif kind == "stream_wait":
            op.update(stream=rng.choice(streams), on=rng.choice(streams))
        elif kind == "event_record":
            recorded = rng.choice(EVENTS)
            op.update(event=recorded, stream=rng.choice(streams))
        elif kind == "event_wait":
            op.update(event=recorded if rng.random() < 0.7
                      else rng.choice(EVENTS),
                      stream=rng.choice(streams))
        elif kind in ("event_sync", "event_create", "event_destroy"):
            op.update(event=recorded if rng.random() < 0.5
                      else rng.choice(EVENTS))
        elif kind in ("stream_sync", "stream_create"):
            op.update(stream=rng.choice(streams))
        elif kind == "alloc":
            # Mostly fresh memory, sometimes a live pointer (its free missed).
            free_ptrs = [p for p in pool if p not in live]
            ptr = rng.choice(free_ptrs if free_ptrs and rng.random() < 0.85
                             else pool)
            size = rng.randint(lengths[ptr], TENSOR_SPAN)
            if lengths[ptr] == 1 and rng.random() < 0.3:
                size = 0                        # counts as one byte
            op.update(ptr=ptr, size=size,
                      stream=rng.choice(streams + [ALLOC_ONLY_STREAM])
                      if rng.random() < 0.85 else None)
            live.add(ptr)
        elif kind == "free":
            # Mostly a live allocation, sometimes memory never allocated.
            ptr = rng.choice(sorted(live) if live and rng.random() < 0.85
                             else pool)
            op.update(ptr=ptr)
            live.discard(ptr)
        elif kind == "record_stream":
            op.update(ptr=rng.choice(pool), stream=rng.choice(streams))
        if rng.random() < 0.3:
            op["stack"] = rng.choice(sorted(STACKS))
        ops.append(op)
    return ops[:n_ops]


def number(value):
    """Spells a stream or event id: decimal when small, hex when large."""
    return str(value) if value < 0x10000 else f"{value:#x}"


def render_op(op):
    """Returns the trace line of one operation."""
    kind = op["kind"]
    fields = []
    if kind == "launch":
        fields = [f"stream={number(op['stream'])}", f"op={op['op']}"]
        for key in ("read", "write"):
            if op[key]:
                fields.append(key + "=" + ",".join(
                    access_spelling(p, n) for p, n in op[key]))
    elif kind == "stream_wait":
        fields = [f"stream={number(op['stream'])}", f"on={number(op['on'])}"]
    elif kind in ("alloc", "free", "record_stream"):
        fields = [f"ptr={op['ptr']:#x}"]
        if kind == "alloc":
            fields.append(f"size={op['size']}")
        if op.get("stream") is not None:
            fields.append(f"stream={number(op['stream'])}")
    else:
        if "event" in op:
            fields.append(f"event={number(op['event'])}")
        if "stream" in op:
            fields.append(f"stream={number(op['stream'])}")
    if "stack" in op:
        fields.append(f"stack={op['stack']}")
    return " ".join([kind] + fields)


def render_trace(ops, pid, seed):
    """Returns the text of one trace file."""
    lines = ["npusan-trace 1", f"# csan_diff.py seed {seed}",
             f"process pid={pid} job=csan-diff rank=0"]
    for sid, frames in STACKS.items():
        lines.append(f"stack id={sid} "
                     + " ".join(f'frame="{f}"' for f in frames))
    lines.extend(render_op(op) for op in ops)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Python reference: CSAN plus a model of torch_npu's record_stream check


class RecordStreamModel:
    """torch_npu's record_stream check (NPUEventHandler), over CSAN's syncs.

    Follows the seed design notes (sections 5, 8, 9) and the `record_stream
    check` paragraph of trace-format.md. One NPUTensorInfo-like dict per live
    allocation: allocation stream, recorded streams, cross-stream usages keyed
    by usage stream, and the usage streams already reported.
    """

    def __init__(self, syncs, break_seq):
        """`syncs` is the EventHandler's StreamSynchronizations; `break_seq`
        deliberately compares `>= 0` instead of `>= seq` (a negative control).
        """
        self.syncs = syncs
        self.break_seq = break_seq
        self.tensors = {}

    def alloc(self, ptr, stream):
        """spec: an `alloc` over a live allocation releases it "silently: its
        free was missed, so [it gets] no record_stream check"; "a new
        allocation at the same address is a new allocation"."""
        if stream is not None:
            # spec: "An operation that names a stream ... the trace never
            # created creates it on the spot".
            self.syncs._ensure_stream_exists(stream)
        self.tensors[ptr] = {"alloc_stream": stream, "recorded": set(),
                             "usages": {}, "reported": set()}

    def record_stream(self, ptr, stream):
        """spec: record_stream is "Ignored when no live allocation contains
        P"; seed 5.5: the stream joins NPUTensorInfo.recorded_streams."""
        self.syncs._ensure_stream_exists(stream)
        if ptr in self.tensors:
            self.tensors[ptr]["recorded"].add(stream)

    def launch(self, stream, seq, accessed, written, operator):
        """spec: "a launch on stream U with an access that belongs to an
        allocation whose allocation stream C is known and differs from U
        records a cross-stream usage (U, n) for it, updated to the latest n
        (and to whether that launch wrote any memory of the allocation)"."""
        for ptr in accessed:
            info = self.tensors.get(ptr)
            if info is None or info["alloc_stream"] in (None, stream):
                continue
            info["usages"][stream] = (seq, ptr in written, operator)

    def free(self, ptr):
        """Checks, then forgets, the allocation starting at `ptr` (if any)."""
        info = self.tensors.pop(ptr, None)
        return [] if info is None else self._check(ptr, info, "free")

    def flush(self):
        """spec: `flush` checks "every live allocation ... as if it were
        freed now, without freeing it"."""
        return [finding for ptr, info in self.tensors.items()
                for finding in self._check(ptr, info, "flush")]

    def _check(self, ptr, info, detected_at):
        """spec: "every usage (U, n) for which U was not named by
        record_stream and not n <= state[C][U] is a missing_record_stream
        finding, reported at most once per allocation and usage stream";
        seed 5.3: `creation_state.get(usage_stream, -1) >= usage_seq_num`."""
        creation = info["alloc_stream"]
        creation_state = self.syncs.current_sync_states.get(creation, {})
        findings = []
        for usage_stream, (seq, wrote, operator) in info["usages"].items():
            if usage_stream in info["recorded"] | info["reported"]:
                continue
            needed = 0 if self.break_seq else seq
            if creation_state.get(usage_stream, -1) >= needed:
                continue
            info["reported"].add(usage_stream)
            findings.append((ptr, creation, usage_stream, seq,
                             "write" if wrote else "read", detected_at,
                             operator))
        return findings


def race_key(error):
    """Returns the comparable key of a CSAN UnsynchronizedAccessError."""
    cur, prev = error.current_access, error.previous_access
    return (error.data_ptr,
            cur.stream, cur.seq_num, cur.type.name.lower(),
            prev.stream, prev.seq_num, prev.type.name.lower())


def replay(ops, sanitizer, break_mode):
    """Feeds one trace to a fresh CSAN EventHandler and record_stream model.

    Makes the calls the real framework would make for each operation and
    returns (races, record_stream findings) as lists of comparable keys.
    """
    handler = sanitizer.EventHandler()
    model = RecordStreamModel(handler.syncs, break_mode == "seq-zero")
    races, missing = [], []
    wait_event = WAIT_EVENT_BASE
    for op in ops:
        kind = op["kind"]
        if kind == "launch":
            read = {ptr for ptr, _ in op["read"]}
            written = {ptr for ptr, _ in op["write"]}
            errors = handler._handle_kernel_launch(
                op["stream"], read - written, written, set(), op["op"],
                {ptr: [] for ptr in read | written})
            races.extend(race_key(error) for error in errors)
            model.launch(op["stream"], handler.seq_num, read | written,
                         written, op["op"])
        elif kind == "stream_create":
            handler._handle_stream_creation(op["stream"])
        elif kind == "event_create":
            handler._handle_event_creation(op["event"])
        elif kind == "event_destroy":
            handler._handle_event_deletion(op["event"])
        elif kind == "event_record":
            handler._handle_event_record(op["event"], op["stream"])
        elif kind == "event_wait":
            handler._handle_event_wait(op["event"], op["stream"])
        elif kind == "event_sync":
            handler._handle_event_synchronization(op["event"])
        elif kind == "stream_wait":
            if break_mode == "no-stream-wait":
                continue
            # A.wait_stream(B): a fresh event recorded on B, waited on A.
            wait_event += 1
            handler._handle_event_creation(wait_event)
            handler._handle_event_record(wait_event, op["on"])
            handler._handle_event_wait(wait_event, op["stream"])
            handler._handle_event_deletion(wait_event)
        elif kind == "stream_sync":
            handler._handle_stream_synchronization(op["stream"])
        elif kind == "device_sync":
            handler._handle_device_synchronization()
        elif kind == "alloc":
            handler._handle_memory_allocation(op["ptr"])
            model.alloc(op["ptr"], op["stream"])
        elif kind == "free":
            missing.extend(model.free(op["ptr"]))
            handler._handle_memory_deallocation(op["ptr"])
        elif kind == "record_stream":
            model.record_stream(op["ptr"], op["stream"])
        elif kind == "flush":
            missing.extend(model.flush())
        else:
            raise HarnessError(f"unknown operation kind {kind!r}")
    return races, missing


# ---------------------------------------------------------------------------
# npusan side


def finding_key(finding):
    """Returns (kind, comparable key) of one npusanctl JSON finding."""
    access = finding["access"]
    if finding["kind"] == "data_race":
        prev = finding["previous"]
        return "race", (int(finding["ptr"], 16),
                        access["stream"], access["seq"], access["type"],
                        prev["stream"], prev["seq"], prev["type"])
    if finding["kind"] == "missing_record_stream":
        return "missing", (int(finding["ptr"], 16), finding["alloc"]["stream"],
                           access["stream"], access["seq"], access["type"],
                           finding["detected_at"], access["op"])
    raise HarnessError(f"unexpected finding kind {finding['kind']!r}")


def run_npusanctl(npusanctl, directory, names):
    """Runs `npusanctl analyze --every --json` over the trace files.

    Returns {pid: {"race": [...], "missing": [...]}} of npusan's findings.
    """
    found = collections.defaultdict(lambda: {"race": [], "missing": []})
    for start in range(0, len(names), BATCH):
        batch = names[start:start + BATCH]
        proc = subprocess.run(
            [npusanctl, "analyze", "--every", "--json", *batch],
            cwd=directory, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1):
            raise HarnessError(f"npusanctl exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        lines = proc.stdout.splitlines()
        if (proc.returncode == 1) != bool(lines):
            raise HarnessError(f"npusanctl exited {proc.returncode} "
                               f"with {len(lines)} findings")
        for line in lines:
            try:
                finding = json.loads(line)
            except json.JSONDecodeError as exc:
                raise HarnessError(f"bad JSON from npusanctl: {line!r}") from exc
            kind, key = finding_key(finding)
            found[finding["process"]["pid"]][kind].append(key)
    return found


# ---------------------------------------------------------------------------
# Comparison


def sort_key(key):
    """Orders finding keys, an unknown (None) allocation stream first."""
    return tuple(-1 if field is None else field for field in key)


def multiset_diff(ours, theirs):
    """Returns (only in ours, only in theirs) as sorted lists, with repeats."""
    a, b = collections.Counter(ours), collections.Counter(theirs)
    return (sorted((a - b).elements(), key=sort_key),
            sorted((b - a).elements(), key=sort_key))


def format_key(kind, key):
    """Formats one finding key for the mismatch report."""
    if kind == "race":
        ptr, s, n, t, ps, pn, pt = key
        return (f"data_race ptr={ptr:#x} access={number(s)}/{n}/{t} "
                f"previous={number(ps)}/{pn}/{pt}")
    ptr, alloc_stream, s, n, t, where, op = key
    alloc = "unknown" if alloc_stream is None else number(alloc_stream)
    return (f"missing_record_stream ptr={ptr:#x} alloc_stream={alloc} "
            f"usage={number(s)}/{n}/{t} op={op} at={where}")


def report_mismatch(path, npusan, python):
    """Prints the differing findings of one trace, both sides."""
    print(f"MISMATCH in {path}", file=sys.stderr)
    for kind, label in (("race", "CSAN"), ("missing", "record_stream model")):
        only_npusan, only_python = multiset_diff(npusan[kind], python[kind])
        if not (only_npusan or only_python):
            continue
        print(f"  {kind}: npusan {len(npusan[kind])}, {label} "
              f"{len(python[kind])}", file=sys.stderr)
        for side, keys in (("npusan only", only_npusan),
                           (f"{label} only", only_python)):
            for key in keys[:SHOWN]:
                print(f"    {side}: {format_key(kind, key)}", file=sys.stderr)
            if len(keys) > SHOWN:
                print(f"    {side}: ... {len(keys) - SHOWN} more",
                      file=sys.stderr)


def parse_args():
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npusanctl", required=True,
                        help="path of the npusanctl binary under test")
    parser.add_argument("--traces", type=int, default=300,
                        help="number of traces (default 300)")
    parser.add_argument("--ops", type=int, default=300,
                        help="operations per trace (default 300)")
    parser.add_argument("--seed", type=int, default=1,
                        help="trace i uses random.Random(seed + i)")
    parser.add_argument("--keep", metavar="DIR",
                        help="copy failing traces into DIR")
    parser.add_argument("--self-test-break",
                        choices=("seq-zero", "no-stream-wait"),
                        help="negative control: break the Python side on "
                             "purpose (model checks >= 0 instead of >= seq, "
                             "or replay ignores stream_wait); must fail")
    return parser.parse_args()


def run(args, sanitizer):
    """Generates, analyzes, replays and compares; returns the exit status."""
    started = time.monotonic()
    npusanctl = os.path.abspath(args.npusanctl)
    directory = tempfile.mkdtemp(prefix="csan_diff.")
    traces, names = [], []
    for i in range(args.traces):
        ops = generate_trace(random.Random(args.seed + i), args.ops)
        name = f"trace-{args.seed + i:05d}.txt"
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(render_trace(ops, PID_BASE + i, args.seed + i))
        traces.append(ops)
        names.append(name)
    try:
        found = run_npusanctl(npusanctl, directory, names)
    except HarnessError as exc:
        raise HarnessError(f"{exc} (traces left in {directory})") from exc
    unknown = set(found) - {PID_BASE + i for i in range(args.traces)}
    if unknown:
        raise HarnessError(f"findings for unknown pids {sorted(unknown)} "
                           f"(traces left in {directory})")

    failing, compared = [], collections.Counter()
    for i, ops in enumerate(traces):
        races, missing = replay(ops, sanitizer, args.self_test_break)
        python = {"race": races, "missing": missing}
        npusan = found[PID_BASE + i]
        compared.update(race=len(races), missing=len(missing))
        if any(collections.Counter(npusan[k]) != collections.Counter(python[k])
               for k in python):
            if len(failing) < SHOWN_TRACES:
                report_mismatch(os.path.join(directory, names[i]), npusan,
                                python)
            failing.append(names[i])

    if failing and args.keep:
        os.makedirs(args.keep, exist_ok=True)
        for name in failing:
            shutil.copy(os.path.join(directory, name), args.keep)
        print(f"kept {len(failing)} failing traces in {args.keep}",
              file=sys.stderr)
    if failing and not args.keep:
        print(f"failing traces left in {directory}", file=sys.stderr)
    else:
        shutil.rmtree(directory)
    print(f"csan_diff: {args.traces} traces, {args.traces * args.ops} "
          f"operations, {compared['race']} race findings and "
          f"{compared['missing']} record_stream findings compared, "
          f"{len(failing)} traces differ, "
          f"{time.monotonic() - started:.1f} s")
    return 1 if failing else 0


def main():
    """Entry point: skips (77) without torch, 2 on a harness error."""
    args = parse_args()
    try:
        import torch.cuda._sanitizer as sanitizer  # pylint: disable=import-outside-toplevel
    except Exception as exc:  # pylint: disable=broad-except
        print(f"csan_diff: skipped, cannot import torch: {exc}",
              file=sys.stderr)
        return 77
    try:
        return run(args, sanitizer)
    except (HarnessError, OSError) as exc:
        print(f"csan_diff: harness error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
