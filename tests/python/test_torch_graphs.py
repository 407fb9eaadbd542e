#!/usr/bin/python3
"""Graph capture and replay through npusan.torch and the agent (issue 14).

Three modes, one ctest entry each:

--traces     each graph example of examples/ run with NPUSAN_RECORD, on the
             adapter's C path (npusan._speedups) and its Python path: the
             version 2 trace holds the capture, its end, the replays, the
             graph's destruction and the allocations from the graph's pool
             that the example makes; and tests/diff/graph_model.py, the
             spec's independent reference model, finds in those traces
             exactly the findings --findings expects from npusan. Needs
             torch, not the engine.
--findings   each example run as a user runs it (npusanctl run, a real
             npusand), checking exactly the findings graphs.md gives for it,
             with stacks at the example's own lines, and that --fixed is
             clean.
--c-example  the same for examples/graph_workspace.c (--workspace PATH,
             the program; no torch needed), which --traces checks against
             the reference model too when given --workspace.

The last two need the engine's graph semantics: they first analyse a tiny
version 2 trace whose spec'd finding is one stale_graph_address, and exit
77 ("engine lacks graph support") when it is not found, never passing.

Exit status: 0 passed, 1 failed, 77 (CTest's skip) without torch or without
the engine's graph support.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(SOURCE, "examples")
MODEL = os.path.join(SOURCE, "tests", "diff", "graph_model.py")
STALE = os.path.join(EXAMPLES, "graph_stale.py")
BRANCHES = os.path.join(EXAMPLES, "graph_branches.py")
WORKSPACE_C = os.path.join(EXAMPLES, "graph_workspace.c")
PACKAGE_DIR = os.path.join(SOURCE, "agent", "python")

ARGS = argparse.Namespace()

# graphs.md's example, cut down: one captured read of memory freed before
# the replay, from no graph pool: exactly one stale_graph_address.
PROBE = """npusan-trace 2
stream_create stream=1
alloc ptr=0x1000 size=4096 stream=0
capture_begin stream=1 graph=1
launch stream=1 op=aten::mm read=0x1000+4096
capture_end stream=1 graph=1
free ptr=0x1000
graph_replay graph=1 stream=0
"""


def engine_has_graphs() -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".trace") as f:
        f.write(PROBE)
        f.flush()
        proc = subprocess.run([ARGS.npusanctl, "analyze", "--json", f.name],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    kinds = [json.loads(line)["kind"] for line in proc.stdout.splitlines()
             if line.startswith("{")]
    return kinds == ["stale_graph_address"]


def line_of(path: str, text: str) -> int:
    """The line of `path` that holds `text` (once)."""
    with open(path) as f:
        found = [n for n, line in enumerate(f, 1) if text in line]
    if len(found) != 1:
        raise AssertionError(f"{text!r} is on lines {found} of {path}")
    return found[0]


def frame(path: str, text: str, function: str) -> str:
    return f"{path}:{line_of(path, text)} in {function}"


def job_env(**extra) -> dict:
    env = dict(os.environ, NPUSAN_TORCH_DEVICE="cpu", **extra)
    for name in ("NPUSAN_RECORD", "NPUSAN_JOB", "NPUSAN_PYTHON_SPEEDUPS"):
        env.pop(name, None)
    env.update(extra)
    # A sanitized libnpusan's runtime (tests/CMakeLists.txt).
    if os.environ.get("NPUSAN_TEST_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["NPUSAN_TEST_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return env


def user_frames(stack):
    """`stack` without PyTorch's own frames under the innermost one."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return stack
    torch_dir = os.path.dirname(spec.origin) + os.sep
    return stack[:1] + [f for f in stack[1:] if not f.startswith(torch_dir)]


# ---- --traces ----------------------------------------------------------

def record(script: str, *argv, speedups=True) -> str:
    """The trace of `script` run with python3 -m npusan.torch."""
    path = os.path.join(ARGS.dir, f"{os.path.basename(script)}"
                        f"{''.join(argv)}{int(speedups)}.trace")
    env = job_env(NPUSAN="1", NPUSAN_LIBRARY=ARGS.library,
                  NPUSAN_RECORD=path, PYTHONPATH=PACKAGE_DIR)
    if not speedups:
        env["NPUSAN_PYTHON_SPEEDUPS"] = "0"
    proc = subprocess.run([sys.executable, "-m", "npusan.torch", script,
                           *argv], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)
    if proc.returncode != 0 or "npusan: off" in proc.stderr:
        raise AssertionError(f"{script} {argv}: {proc.returncode}: "
                             f"{proc.stderr}")
    with open(path) as f:
        return f.read()


def graph_lines(trace: str):
    """The trace's graph operations, and its allocations (pool or not),
    each as (word, {field: value})."""
    out = []
    for line in trace.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("capture_begin", "capture_end", "graph_replay",
                    "graph_destroy", "alloc", "free"):
            out.append((word, dict(re.findall(r"(\w+)=(\S+)", rest))))
    return out


class Traces(unittest.TestCase):
    """What the adapter tells the agent; both paths."""

    SPEEDUPS = True

    def ops(self, script, *argv):
        trace = record(script, *argv, speedups=self.SPEEDUPS)
        self.assertTrue(trace.startswith("npusan-trace 2\n"), trace[:80])
        return graph_lines(trace)

    def test_stale(self):
        ops = self.ops(STALE)
        words = [w for w, _ in ops if w not in ("alloc", "free")]
        self.assertEqual(words, ["capture_begin", "capture_end"]
                         + ["graph_replay"] * 3 + ["graph_destroy"])
        begin = next(f for w, f in ops if w == "capture_begin")
        end = next(f for w, f in ops if w == "capture_end")
        self.assertEqual(begin, end)
        self.assertNotEqual(begin["stream"], "0")  # the capture stream
        for w, f in ops:
            if w == "graph_replay":
                self.assertEqual(f, {"graph": begin["graph"], "stream": "0"})
        # Only what the capture allocates is from the pool, on its stream.
        i, j = ops.index(("capture_begin", begin)), ops.index(
            ("capture_end", end))
        pool = [f for w, f in ops if w == "alloc" and "graph" in f]
        self.assertTrue(pool)
        self.assertEqual(pool, [f for w, f in ops[i:j]
                                if w == "alloc"])
        for f in pool:
            self.assertEqual((f["graph"], f["stream"]),
                             (begin["graph"], begin["stream"]))

    def test_branches(self):
        ops = self.ops(BRANCHES)
        begin = next(f for w, f in ops if w == "capture_begin")
        pool = [f for w, f in ops if w == "alloc" and "graph" in f]
        # mm's output on the capture stream, mul's on the side stream,
        # which joined the capture by waiting on it.
        self.assertEqual(len(pool), 2, ops)
        self.assertEqual(pool[0]["stream"], begin["stream"])
        self.assertNotIn(pool[1]["stream"], ("0", begin["stream"]))
        self.assertEqual({f["graph"] for f in pool}, {begin["graph"]})

    def test_fixed_copies(self):
        # The fixed loop frees no captured memory: every free before the
        # graph's destruction is of memory the capture never saw or of
        # its pool.
        ops = self.ops(STALE, "--fixed")
        words = [w for w, _ in ops if w not in ("alloc", "free")]
        self.assertEqual(words, ["capture_begin", "capture_end"]
                         + ["graph_replay"] * 3 + ["graph_destroy"])


class PythonPathTraces(Traces):
    SPEEDUPS = False


# The agent fails at capture_begin: npusan goes off with one line, the
# capture and the replay still run, once.
FAILING = """
import npusan.torch, torch
from npusan.torch import emulate
assert npusan.torch.enable()
def broken(*args):
    raise OSError("the agent broke")
npusan.torch._running.agent.capture_begin = broken
x = torch.ones(8)
g = emulate.Graph()
with emulate.graph(g):
    y = x * 2
g.replay()
print(float(y.sum()), npusan.torch.enabled())
"""


class Failure(unittest.TestCase):
    def test_graph_call_fails(self):
        env = job_env(NPUSAN="1", NPUSAN_LIBRARY=ARGS.library,
                      PYTHONPATH=PACKAGE_DIR)
        proc = subprocess.run([sys.executable, "-c", FAILING], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=300)
        self.assertEqual((proc.returncode, proc.stdout),
                         (0, "16.0 False\n"), proc.stderr)
        self.assertEqual(proc.stderr.count("npusan: "), 1, proc.stderr)
        self.assertIn("npusan: off: OSError: the agent broke", proc.stderr)


# ---- --findings and --workspace ------------------------------------------

def run_job(job: str, argv) -> tuple:
    """(the completed `npusanctl run --json`, its findings); or, with
    --traces, (None, the reference model's findings in the trace
    recorded of argv)."""
    if ARGS.traces:
        return None, model_findings(job, argv)
    env = job_env(PYTHONPATH=PACKAGE_DIR)
    proc = subprocess.run(
        [ARGS.npusanctl, "run", "--socket", ARGS.sock, "--job", job,
         "--json", "--", *argv], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, timeout=300, cwd=SOURCE)
    found = [json.loads(line) for line in proc.stdout.splitlines()
             if line.startswith("{")]
    return proc, found


def model_findings(job: str, argv) -> list:
    path = os.path.join(ARGS.dir, job + ".model.trace")
    env = job_env(NPUSAN="1", NPUSAN_RECORD=path, PYTHONPATH=PACKAGE_DIR)
    if ARGS.library:
        env["NPUSAN_LIBRARY"] = ARGS.library
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300,
                          cwd=SOURCE)
    if proc.returncode != 0:
        raise AssertionError(f"{argv}: {proc.returncode}: {proc.stderr}")
    model = subprocess.run([sys.executable, MODEL, path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    if model.returncode not in (0, 1):
        raise AssertionError(f"graph_model.py: {model.stderr}")
    return [json.loads(line) for line in model.stdout.splitlines()]


class Daemon:
    """One npusand on a socket in ARGS.dir, for the module's jobs."""

    @staticmethod
    def start() -> None:
        ARGS.sock = os.path.join(ARGS.dir, "npusand.sock")
        with open(os.path.join(ARGS.dir, "npusand.log"), "w") as log:
            ARGS.daemon = subprocess.Popen(
                [ARGS.npusand, "--socket", ARGS.sock,
                 "--db", os.path.join(ARGS.dir, "npusan.db")], stderr=log)
        for _ in range(1000):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(ARGS.sock)
                return
            except OSError:
                ARGS.daemon.poll()
                if ARGS.daemon.returncode is not None:
                    break
                time.sleep(0.01)
        raise AssertionError("npusand did not answer")

    @staticmethod
    def stop() -> None:
        ARGS.daemon.terminate()
        ARGS.daemon.wait(timeout=60)


class Checks(unittest.TestCase):
    maxDiff = None

    def assertFrames(self, access, op, type_, frames):
        """`access` is `op`'s, of `type_`, its innermost frames `frames`."""
        self.assertEqual((access["op"], access["type"],
                          user_frames(access["stack"])[:len(frames)]),
                         (op, type_, frames))

    def clean(self, job, argv):
        proc, found = run_job(job, argv)
        self.assertEqual(found, [], proc and proc.stderr)
        if proc is not None:
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def found(self, proc, found):
        """npusanctl run exits 1 on findings."""
        if proc is not None:
            self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)


class Findings(Checks):
    """The Python examples under npusanctl run, on the emulation."""

    def python(self, script, *argv):
        return [sys.executable, "-m", "npusan.torch", script, *argv]

    def test_stale(self):
        proc, found = run_job("graph_stale", self.python(STALE))
        self.found(proc, found)
        self.assertEqual([f["kind"] for f in found],
                         ["stale_graph_address"], found)
        f = found[0]
        self.assertEqual((f["detected_at"], f["access"]["stream"]),
                         ("replay", 0))
        self.assertIsNotNone(f["access"]["graph"])
        self.assertFrames(f["access"], "aten::mm", "read", [
            frame(STALE, "return torch.mm(x, w)", "model"),
            frame(STALE, "static_y = model(static_x, w)", "main")])
        self.assertEqual(f["ptr"], f["alloc"]["ptr"])
        self.assertEqual(user_frames(f["alloc"]["stack"])[:1], [
            frame(STALE, "static_x = torch.zeros(", "main")])

    def test_stale_fixed(self):
        self.clean("graph_stale_fixed", self.python(STALE, "--fixed"))

    def test_branches(self):
        proc, found = run_job("graph_branches", self.python(BRANCHES))
        self.found(proc, found)
        kinds = sorted(f["kind"] for f in found)
        self.assertEqual(kinds, ["data_race", "unjoined_capture"],
                         found)
        mm = [frame(BRANCHES, "h = torch.mm(x, w)", "branches")]
        mul = [frame(BRANCHES, "z = h * 2", "branches")]
        race = next(f for f in found if f["kind"] == "data_race")
        self.assertEqual(race["detected_at"], "capture")
        pair = sorted((race["access"], race["previous"]),
                      key=lambda a: a["op"])
        self.assertFrames(pair[0], "aten::mm", "write", mm)
        self.assertFrames(pair[1], "aten::mul.Tensor", "read", mul)
        self.assertEqual(pair[0]["graph"], pair[1]["graph"])
        self.assertIsNotNone(pair[0]["graph"])
        unjoined = next(f for f in found if f["kind"] == "unjoined_capture")
        self.assertEqual(unjoined["detected_at"], "capture_end")
        self.assertFrames(unjoined["access"], "aten::mul.Tensor", "write",
                          mul)
        self.assertEqual(unjoined["access"]["stream"], pair[1]["stream"])

    def test_branches_fixed(self):
        self.clean("graph_branches_fixed", self.python(BRANCHES, "--fixed"))


class Workspace(Checks):
    """examples/graph_workspace.c under npusanctl run."""

    def setUp(self):
        # torch2_root.sh builds only what the Python tests need.
        if ARGS.traces and not os.path.exists(ARGS.workspace):
            self.skipTest(f"{ARGS.workspace} is not built here")

    def test_workspace(self):
        proc, found = run_job("graph_workspace", [ARGS.workspace])
        self.found(proc, found)
        self.assertEqual([f["kind"] for f in found],
                         ["stale_graph_address"], found)
        f = found[0]
        c = os.path.basename(WORKSPACE_C)
        self.assertEqual((f["detected_at"], f["access"]["stream"],
                          f["access"]["graph"]), ("replay", 0, 1))
        self.assertFrames(f["access"], "npu::attention", "write", [
            f"{c}:{line_of(WORKSPACE_C, '/* line: launch */')} in attention"])
        self.assertEqual(f["alloc"]["stack"], [
            f"{c}:{line_of(WORKSPACE_C, '/* line: alloc */')} "
            "in workspace_alloc"])
        self.assertEqual(f["alloc"]["size"], 1 << 16)

    def test_workspace_fixed(self):
        self.clean("graph_workspace_fixed", [ARGS.workspace, "--fixed"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--traces", action="store_true")
    mode.add_argument("--findings", action="store_true")
    mode.add_argument("--c-example", action="store_true",
                      help="graph_workspace.c's checks only")
    ap.add_argument("--workspace", metavar="PATH",
                    help="the npusan-graph-workspace program")
    ap.add_argument("--npusand")
    ap.add_argument("--npusanctl", required=True)
    ap.add_argument("--library")
    ap.parse_args(namespace=ARGS)
    name = "test_torch_graphs"
    if ARGS.c_example and not ARGS.workspace:
        ap.error("--c-example needs --workspace")
    if not ARGS.c_example and importlib.util.find_spec("torch") is None:
        print(f"{name}: skipped: no torch")
        sys.exit(77)
    if not ARGS.traces and not engine_has_graphs():
        print(f"{name}: skipped: engine lacks graph support (npusanctl "
              "analyze does not find the stale_graph_address of a version "
              "2 trace that graphs.md gives one)")
        sys.exit(77)
    ARGS.dir = tempfile.mkdtemp(prefix="npusan-graphs-")
    cases = [Traces, PythonPathTraces, Failure, Findings]
    if ARGS.workspace:
        cases.append(Workspace)
    if not ARGS.traces:
        cases = [Workspace] if ARGS.c_example else [Findings]
        Daemon.start()
    try:
        suite = unittest.TestSuite(
            unittest.defaultTestLoader.loadTestsFromTestCase(c)
            for c in cases)
        ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    finally:
        if not ARGS.traces:
            Daemon.stop()
        shutil.rmtree(ARGS.dir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
