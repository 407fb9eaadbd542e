#!/usr/bin/python3
"""npusan.torch end to end, as a user runs it: a real npusand on a socket in
a temporary directory, each program of torch_scenarios.py run with
``python3 -m npusan.torch`` (Python -> adapter -> libnpusan -> ring ->
daemon) as a job of its own, and ``npusanctl findings --json`` giving
exactly the findings expected, with Python stacks that point at the
scenario's own lines. Each scenario runs twice: on the ``cpu`` backend
(npusan.torch.emulate), and on the ``npu`` backend with the torch_npu of
tests/python/standin, which reports through torch_npu's registries and
with its ACL handles.

Usage: test_torch_e2e.py --npusand PATH --npusanctl PATH --library PATH

Exit status: 0 passed, 1 failed, 77 (CTest's skip) without torch.
"""

import argparse
import concurrent.futures
import importlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
SCENARIOS = os.path.join(HERE, "torch_scenarios.py")
EXAMPLE = os.path.join(SOURCE, "examples", "race.py")
EXIT_SCRIPT = os.path.join(HERE, "torch_exit.py")
SPAWN_SCRIPT = os.path.join(HERE, "torch_spawn.py")
PACKAGE_DIR = os.path.join(SOURCE, "agent", "python")
STANDIN_DIR = os.path.join(HERE, "standin")
NPU_SUFFIX = "_npu"

ARGS = argparse.Namespace()
RESULTS = {}  # scenario -> (completed process, findings)


def line_of(tag: str, path: str = SCENARIOS) -> int:
    """The line of torch_scenarios.py marked "# line: TAG", or the first
    line of `path` that holds `tag`."""
    marker = f"# line: {tag}" if path == SCENARIOS else tag
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if marker in text:
                return n
    raise AssertionError(f"no line {marker} in {path}")


def frame(tag: str, function: str) -> str:
    return f"{SCENARIOS}:{line_of(tag)} in {function}"


def ctl(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([ARGS.npusanctl, *argv, "--socket", ARGS.sock],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)


# Jobs that run a scenario on the adapter's Python path (ctypes into the
# library) rather than npusan._speedups', where that is built.
PYTHON_PATH_JOBS = {"race_python": "race",
                    "missing_record_stream_python": "missing_record_stream"}


def stand_in_acl():
    """The stand-in torch_npu's _acl.py (its handles), without torch."""
    path = os.path.join(STANDIN_DIR, "torch_npu", "_acl.py")
    spec = importlib.util.spec_from_file_location("standin_acl", path)
    acl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(acl)
    return acl


def run_scenario(job: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NPUSAN="1", NPUSAN_SOCKET=ARGS.sock,
               NPUSAN_JOB=job, NPUSAN_LIBRARY=ARGS.library,
               NPUSAN_TORCH_DEVICE="cpu", PYTHONPATH=PACKAGE_DIR)
    base = job
    if job.endswith(NPU_SUFFIX):
        base = job[:-len(NPU_SUFFIX)]
        env["NPUSAN_TORCH_DEVICE"] = "npu"
        env["PYTHONPATH"] = PACKAGE_DIR + os.pathsep + STANDIN_DIR
    name = PYTHON_PATH_JOBS.get(base, base)
    if base in PYTHON_PATH_JOBS:
        env["NPUSAN_PYTHON_SPEEDUPS"] = "0"
    python = [sys.executable, "-m", "npusan.torch"]
    argv = [*python, SCENARIOS, name]
    if job == "example":
        # As README.md runs it; stdout is the example's own.
        argv = [*python, os.path.relpath(EXAMPLE, SOURCE)]
    elif job == "exit_main":
        argv = [*python, EXIT_SCRIPT]
    elif job == "exit_enable":
        argv = [sys.executable, EXIT_SCRIPT, "--enable"]
    elif job == "spawn":
        # As a user runs a job: npusanctl run starts it, with nothing of
        # npusan's in the command.
        argv = [ARGS.npusanctl, "run", "--socket", ARGS.sock, "--job", job,
                "--", sys.executable, SPAWN_SCRIPT]
    env.pop("NPUSAN_RECORD", None)
    # A sanitized libnpusan's runtime (tests/CMakeLists.txt).
    if os.environ.get("NPUSAN_TEST_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["NPUSAN_TEST_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return subprocess.run(
        argv, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=300, cwd=SOURCE)


def wait_exited(jobs) -> None:
    """Until the daemon lists every job's process as exited: it drained
    the ring to its end and stored the findings first."""
    for _ in range(1000):
        out = ctl("list", "--json").stdout
        procs = [json.loads(line) for line in out.splitlines() if line]
        done = {p["job"] for p in procs if p["state"] == "exited"}
        if set(jobs) <= done:
            return
        time.sleep(0.02)
    raise AssertionError(f"not all of {jobs} exited: {out}")


def setUpModule() -> None:
    ARGS.dir = tempfile.mkdtemp(prefix="npusan-torch-e2e-")
    ARGS.sock = os.path.join(ARGS.dir, "npusand.sock")
    with open(os.path.join(ARGS.dir, "npusand.log"), "w") as log:
        ARGS.daemon = subprocess.Popen(
            [ARGS.npusand, "--socket", ARGS.sock,
             "--db", os.path.join(ARGS.dir, "npusan.db")], stderr=log)
    for _ in range(1000):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(ARGS.sock)
            break
        except OSError:
            time.sleep(0.01)
    names = [n[len("test_"):] for n in dir(Scenarios)
             if n.startswith("test_")]
    names += [n[len("test_"):] + NPU_SUFFIX for n in dir(NpuScenarios)
              if n.startswith("test_") and getattr(NpuScenarios, n)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for name, proc in zip(names, pool.map(run_scenario, names)):
            RESULTS[name] = proc
    wait_exited(names)


def tearDownModule() -> None:
    ARGS.daemon.terminate()
    ARGS.daemon.wait(timeout=60)
    shutil.rmtree(ARGS.dir, ignore_errors=True)


class Scenarios(unittest.TestCase):
    """The scenarios on the cpu backend; streams are the emulation's."""

    maxDiff = None
    SUFFIX = ""

    def stream(self, n: int) -> int:
        """The agent's id of the scenario's stream `n`: 0 the default
        stream, 1 the first stream it makes."""
        return n

    def findings(self, name: str):
        """The scenario's findings, after checking it ran cleanly."""
        name += self.SUFFIX
        proc = RESULTS[name]
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr, "")
        got = ctl("findings", "--json", "--job", name)
        self.assertIn(got.returncode, (0, 1), got.stderr)
        return [json.loads(line) for line in got.stdout.splitlines()]

    def assertAccess(self, access, stream, type_, op, frame_, depth=0):
        """`access` is by `op` on `stream`, and `frame_` is frame `depth`
        of its stack (innermost first), PyTorch's own frames under the
        innermost one not counted: which there are differs between
        versions (2.x wraps c10d's functions in a logging decorator)."""
        torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)
        stack = access["stack"][:1] + [
            f for f in access["stack"][1:]
            if not f.startswith(torch_dir + os.sep)]
        self.assertEqual(
            (access["stream"], access["type"], access["op"],
             stack[depth:depth + 1]),
            (stream, type_, op, [frame_]))

    def test_race(self, job="race"):
        found = self.findings(job)
        self.assertEqual([f["kind"] for f in found], ["data_race"])
        f = found[0]
        self.assertEqual(f["detected_at"], "launch")
        self.assertAccess(f["access"], self.stream(1), "read",
                          "aten::mul.Tensor", frame("race-read", "race"))
        self.assertAccess(f["previous"], self.stream(0), "write",
                          "aten::ones", frame("race-write", "race"))
        self.assertEqual(f["alloc"]["stream"], self.stream(0))
        self.assertEqual(f["alloc"]["size"], 256 * 4)
        self.assertEqual(f["alloc"]["stack"][:1], [frame("race-write", "race")])
        # The stack goes on to the caller, and stops at the user's code.
        self.assertEqual(f["access"]["stack"][1:],
                         [f"{SCENARIOS}:{line_of_main()} in <module>"])

    def test_race_fixed(self):
        self.assertEqual(self.findings("race_fixed"), [])

    def test_missing_record_stream(self, job="missing_record_stream"):
        found = self.findings(job)
        self.assertEqual([f["kind"] for f in found], ["missing_record_stream"])
        f = found[0]
        self.assertEqual(f["detected_at"], "free")
        self.assertIsNone(f["previous"])
        self.assertAccess(f["access"], self.stream(1), "read", "aten::sum",
                          frame("mrs-use", "missing_record_stream"))
        self.assertEqual(f["alloc"]["stream"], self.stream(0))
        self.assertEqual(f["alloc"]["ptr"], f["ptr"])
        self.assertEqual(f["alloc"]["stack"][:1],
                         [frame("mrs-alloc", "missing_record_stream")])
        # Where it was freed: where the fix (record_stream) goes. The
        # torch_npu stand-in fires its trace from Python, where the real
        # torch_npu fires it from C++ with no frame of its own, so the
        # emulation's frames below it are not skipped as leading ones.
        freed = [fr for fr in f["free"]["stack"]
                 if "/standin/" not in fr and "/npusan/torch/" not in fr]
        self.assertEqual(freed[:1],
                         [frame("mrs-free", "missing_record_stream")])

    def test_race_python(self):
        self.test_race("race_python")

    def test_missing_record_stream_python(self):
        self.test_missing_record_stream("missing_record_stream_python")

    def test_record_stream_fix(self):
        self.assertEqual(self.findings("record_stream_fix"), [])

    def test_wait_fix(self):
        self.assertEqual(self.findings("wait_fix"), [])

    def test_collective_race(self):
        found = self.findings("collective_race")
        self.assertEqual([f["kind"] for f in found], ["data_race"])
        f = found[0]
        access, stack = f["access"], f["access"]["stack"]
        self.assertEqual((access["stream"], access["type"], access["op"]),
                         (self.stream(1), "write", "c10d::allreduce_"))
        # Under the scenario's line, torch.distributed's own frames: its
        # all_reduce, and in torch 2 the logging decorator around it.
        mine = frame("coll-reduce", "collective_race")
        self.assertIn(mine, stack)
        above = stack[:stack.index(mine)]
        self.assertTrue(any(fr.endswith(" in all_reduce") for fr in above) and
                        all("/torch/distributed/" in fr for fr in above), stack)
        self.assertAccess(f["previous"], self.stream(0), "write",
                          "aten::ones", frame("coll-write", "collective_race"))

    def test_side_result_to_host(self):
        self.assertEqual(self.findings("side_result_to_host"), [])

    def test_example(self):
        """examples/race.py, as README.md shows it: its race, with stacks
        in the example's own lines."""
        proc = RESULTS["example"]
        self.assertEqual((proc.returncode, proc.stdout),
                         (0, "total: 6144.0\n"), proc.stderr)
        got = ctl("findings", "--json", "--job", "example")
        found = [json.loads(line) for line in got.stdout.splitlines()]
        self.assertEqual([f["kind"] for f in found], ["data_race"])
        here = "examples/race.py"
        self.assertAccess(
            found[0]["access"], 1, "read", "aten::mul.Tensor",
            f"{here}:{line_of('# read on the side stream', EXAMPLE)} in total")
        self.assertAccess(
            found[0]["previous"], 0, "write", "aten::full",
            f"{here}:{line_of('# written on the default stream', EXAMPLE)}"
            " in fill")

    def test_views(self):
        self.assertEqual(self.findings("views"), [])

    def test_exit_main(self, job="exit_main"):
        """python3 -m npusan.torch SCRIPT: the race, and nothing about the
        memory the script still holds when it ends."""
        found = self.findings(job)
        self.assertEqual([f["kind"] for f in found], ["data_race"])
        self.assertEqual(found[0]["access"]["stack"][:1],
                         [f"{EXIT_SCRIPT}:{line_of('exit-read', EXIT_SCRIPT)}"
                          " in <module>"])

    def test_exit_enable(self):
        """npusan.torch.enable() at the script's top: the same."""
        self.test_exit_main("exit_enable")


    def test_spawn(self):
        """torch.multiprocessing.spawn's child, a new interpreter, under
        npusanctl run: its race is found."""
        proc = RESULTS["spawn"]
        self.assertEqual(proc.returncode, 1, proc.stderr)
        got = ctl("findings", "--json", "--job", "spawn")
        found = [json.loads(line) for line in got.stdout.splitlines()]
        self.assertEqual([f["kind"] for f in found], ["data_race"])
        self.assertAccess(
            found[0]["access"], 1, "read", "aten::mul.Tensor",
            f"{SPAWN_SCRIPT}:{line_of('spawn-read', SPAWN_SCRIPT)} in worker")


class NpuScenarios(Scenarios):
    """The same scenarios on the npu backend, with the stand-in torch_npu:
    streams are ACL handles, reported through torch_npu's registries."""

    SUFFIX = NPU_SUFFIX
    # The scripts of these are written for the emulation.
    test_example = test_exit_main = test_exit_enable = test_spawn = None

    def stream(self, n: int) -> int:
        return stand_in_acl().stream_handle(n)


class Blind(unittest.TestCase):
    """A job the adapter could not watch is no clean job."""

    def test_run_with_a_device_that_is_not_there_exits_4(self):
        """NPUSAN_TORCH_DEVICE=cuda without a GPU: the adapter turns off
        with its line, the job runs on, and run says nothing was analysed
        and exits 4, not 0."""
        env = dict(os.environ, NPUSAN_SOCKET=ARGS.sock,
                   NPUSAN_TORCH_DEVICE="cuda", PYTHONPATH=PACKAGE_DIR,
                   ASAN_OPTIONS="detect_leaks=0")
        for name in ("NPUSAN_RECORD", "NPUSAN_RUN", "NPUSAN_JOB"):
            env.pop(name, None)
        code = ("import npusan.torch; npusan.torch.enable(); import torch; "
                "print('ran', float((torch.ones(2) + 1).sum()))")
        proc = subprocess.run(
            [ARGS.npusanctl, "run", "--job", "blind_cuda", "--",
             sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, timeout=300, cwd=SOURCE)
        if "npusan: off:" not in proc.stderr:
            self.skipTest("the adapter watches CUDA here: a GPU is there")
        self.assertIn("ran 4.0", proc.stdout, proc.stderr)
        self.assertIn("npusan: job blind_cuda: nothing analysed:",
                      proc.stdout, proc.stderr)
        self.assertEqual(proc.returncode, 4, proc.stdout + proc.stderr)


def line_of_main() -> int:
    with open(SCENARIOS) as f:
        for n, text in enumerate(f, 1):
            if "globals()[sys.argv[1]]()" in text:
                return n
    raise AssertionError("no call of the scenario in torch_scenarios.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npusand", required=True)
    ap.add_argument("--npusanctl", required=True)
    ap.add_argument("--library", required=True)
    ap.parse_args(namespace=ARGS)
    try:
        importlib.import_module("torch")
    except ImportError as err:
        print(f"test_torch_e2e: skipped: no torch ({err})")
        sys.exit(77)
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
