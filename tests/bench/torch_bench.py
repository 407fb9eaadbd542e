#!/usr/bin/python3
"""What a sanitizer adds to each PyTorch operator: npusan's adapter against
PyTorch's own CUDA Sanitizer (CSAN), side by side, on CPU tensors.

The same small-operator loop (an 8x8 layer: mm, add, relu, an in-place
mul_, sum, a column slice and an in-place add_ on it) runs in a process
of its own per configuration:

  baseline   no sanitizer at all;
  emulation  npusan.torch.emulate's allocator alone: CPU storages reported
             as allocations and frees through this PyTorch's trace
             callbacks, as a CUDA or NPU caching allocator reports them from
             C++; it stands in for the framework, so both sanitizers below
             run on top of it and their overhead is counted from it;
  empty-mode the emulation plus a dispatch mode that only calls each
             operator: what PyTorch's dispatch-mode machinery alone costs,
             which CSAN pays (PyTorch 1.13 runs its mode stack in Python:
             npusan's C path runs it in C for npusan's mode, ModeStack in
             npusan/_speedups_mode.c, so npusan can cost less than this);
  npusan     the emulation plus npusan.torch.enable() (NPUSAN_TORCH_DEVICE=
             cpu): the adapter's hook in PyTorch's C++ dispatcher
             (npusan._torchhook, in the build tree) and callbacks feeding
             the agent, whose ring a real npusand drains (started here on a
             socket in a temporary directory; --no-daemon leaves the agent
             with no consumer, its full ring dropping records);
  npusan-mode the same on the adapter's C dispatch mode
             (NPUSAN_TORCH_HOOK=0), as before the dispatcher hook;
  npusan-py  the same on the adapter's Python path (NPUSAN_PYTHON_SPEEDUPS=0),
             without npusan._speedups' C;
  *-idle     each npusan process also times every run with its adapter
             turned off (adapter.on false: its hook or dispatch mode and
             callbacks still installed, reporting nothing; the hook still
             reads each operator's tensors): npusan less that is what
             npusan's own code costs, measured within one process;
             npusan-mode-idle against CSAN is the least that any npusan on
             a dispatch mode can add;
  csan       the emulation plus torch.cuda._sanitizer's own
             CUDASanitizerDispatchMode and EventHandler, registered on the
             same trace callbacks, with two substitutions that let it see
             CPU tensors: its ArgumentHandler takes CPU tensors where it
             takes CUDA ones, and torch.cuda.current_stream() returns the
             emulation's current stream (cheaper than the real call, which
             builds a Stream object, so CSAN's figure is if anything low).

All configurations are started at once, each in its own process, and then
take turns, one timed run of --iters loop iterations each, for --runs
cycles (the order rotating every cycle): noise from the machine (on a
shared two-core machine, whatever runs on the other core) then falls on
all of them alike. A run is timed in CPU time of the thread that runs the
loop. A configuration's figure is the median of its runs, shown with its
fastest and slowest; the ratio is the median of the ratios taken within
each cycle. Per-operator figures divide by the operators one iteration
dispatches (counted with a dispatch mode). --stack-depth N calls the loop
N frames deeper: CSAN captures the Python stack at every operator and
allocation, so its cost grows with the depth, as it does in a training
loop 20 to 40 frames deep.

Usage: /usr/bin/python3 tests/bench/torch_bench.py --build DIR
           [--iters N] [--runs R] [--stack-depth N] [--no-daemon]
DIR is a build tree with agent/libnpusan.so and daemon/npusand (a Release
build: cmake -S . -B build/rel -DCMAKE_BUILD_TYPE=Release).
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CONFIGS = ("baseline", "emulation", "empty-mode", "npusan", "npusan-mode",
           "npusan-py", "csan")
# The npusan processes also time each run with the adapter turned off (its
# dispatch mode and callbacks still installed, returning at once), in the
# same process, so that npusan less that is what its own code costs.
IDLE = {"npusan": "npusan-idle", "npusan-mode": "npusan-mode-idle",
        "npusan-py": "npusan-py-idle"}


def workload(torch):
    """The loop body and its inputs."""
    x = torch.randn(8, 8)
    w = torch.randn(8, 8)
    b = torch.randn(8)

    def step():
        y = torch.mm(x, w)
        y = y + b
        y = torch.relu(y)
        y.mul_(0.5)
        s = y.sum()
        z = y[:, :4]
        z.add_(1.0)
        return s

    return step


def deep(n, fn):
    """fn() called n frames deeper than here."""
    if n == 0:
        return fn()
    return deep(n - 1, fn)


def count_ops(torch, step) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step()
    return Count.n


def setup_csan(torch):
    import inspect
    import types

    import torch.cuda._sanitizer as csan
    from npusan.torch import emulate

    # CSAN's own _handle_argument, with CPU tensors where it takes CUDA
    # ones, in the signature of this PyTorch's: 2.x added metadata_only (an
    # argument whose metadata alone is used is not read).
    params = inspect.signature(csan.ArgumentHandler._handle_argument).parameters
    if "metadata_only" in params:
        class CpuArgumentHandler(csan.ArgumentHandler):
            def _handle_argument(self, value, is_write, metadata_only,
                                 name=None, is_output=False):
                if isinstance(value, torch.Tensor) and value.is_cpu:
                    data_ptr = value.data_ptr()
                    if is_write:
                        self.dataptrs_written.add(data_ptr)
                    elif not metadata_only:
                        self.dataptrs_read.add(data_ptr)
                    self.tensor_aliases.setdefault(data_ptr, [])
                    if name is not None:
                        self.tensor_aliases[data_ptr].append(name)
                    if is_output:
                        self.outputs.add(data_ptr)
    else:
        class CpuArgumentHandler(csan.ArgumentHandler):
            def _handle_argument(self, value, is_write, name=None,
                                 is_output=False):
                if isinstance(value, torch.Tensor) and value.is_cpu:
                    data_ptr = value.data_ptr()
                    if is_write:
                        self.dataptrs_written.add(data_ptr)
                    else:
                        self.dataptrs_read.add(data_ptr)
                    self.tensor_aliases.setdefault(data_ptr, [])
                    if name is not None:
                        self.tensor_aliases[data_ptr].append(name)
                    if is_output:
                        self.outputs.add(data_ptr)

    current = types.SimpleNamespace()

    def current_stream(device=None):
        current.cuda_stream = emulate.current_stream_id()
        return current

    csan.ArgumentHandler = CpuArgumentHandler
    torch.cuda.current_stream = current_stream
    emulate.start()
    csan.CUDASanitizerDispatchMode().__enter__()


def child(config: str, iters: int, depth: int) -> None:
    import torch

    step = workload(torch)
    ops = count_ops(torch, step)
    if config == "emulation":
        from npusan.torch import emulate

        emulate.start()
    elif config == "empty-mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        from npusan.torch import emulate

        class Empty(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        emulate.start()
        Empty().__enter__()
    elif config in IDLE:
        import npusan.torch

        if not npusan.torch.enable():
            sys.exit("torch_bench: npusan did not turn on")
        if (npusan.torch._running.hook is not None) != (config == "npusan"):
            sys.exit(f"torch_bench: {config} without the path it names")
    elif config == "csan":
        setup_csan(torch)

    def loop(n):
        for _ in range(n):
            step()

    deep(depth, lambda: loop(max(iters // 10, 1)))
    def timed() -> float:
        # CPU time of this thread: what the job pays, without the time the
        # machine's other processes (npusand among them) take from it.
        t = time.thread_time()
        deep(depth, lambda: loop(iters))
        return time.thread_time() - t

    print(json.dumps({"ops": ops}), flush=True)
    # One timed run per line the parent sends, until it closes the pipe.
    for _ in sys.stdin:
        if config not in IDLE:
            print(json.dumps([timed()]), flush=True)
            continue
        adapter = npusan.torch._running
        on = timed()
        adapter.on = False
        idle = timed()
        adapter.on = True
        print(json.dumps([on, idle]), flush=True)


def start_daemon(build: str, tmp: str):
    sock = os.path.join(tmp, "npusand.sock")
    proc = subprocess.Popen(
        [os.path.join(build, "daemon", "npusand"), "--socket", sock,
         "--db", os.path.join(tmp, "npusan.db")],
        stderr=open(os.path.join(tmp, "npusand.log"), "w"))
    for _ in range(500):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return proc, sock
        except OSError:
            time.sleep(0.01)
    proc.kill()
    sys.exit("torch_bench: npusand did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="build tree with libnpusan and npusand")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--stack-depth", type=int, default=0)
    ap.add_argument("--no-daemon", action="store_true")
    ap.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.iters, a.stack_depth)
        return
    if not a.build:
        ap.error("--build DIR is required")
    build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="npusan-torch-bench-")
    env = dict(os.environ)
    env.update(PYTHONPATH=os.path.join(SOURCE, "agent", "python"),
               NPUSAN_LIBRARY=os.path.join(build, "agent", "libnpusan.so"),
               NPUSAN_TORCH_DEVICE="cpu", NPUSAN_JOB="torch-bench")
    for var in ("NPUSAN", "NPUSAN_RECORD", "LD_PRELOAD"):
        env.pop(var, None)
    daemon = None
    if a.no_daemon:
        env["NPUSAN_SOCKET"] = os.path.join(tmp, "absent.sock")
    else:
        daemon, env["NPUSAN_SOCKET"] = start_daemon(build, tmp)
    times = {c: [] for c in CONFIGS + tuple(IDLE.values())}
    # npusan-idle's too: what its dispatch mode costs when it records
    # nothing, the least that any npusan on a dispatch mode can add.
    ratios = {c: [] for c in ("npusan", "npusan-mode", "npusan-py",
                              "npusan-idle", "npusan-mode-idle")}
    children = {}
    try:
        for config in CONFIGS:
            child_env = dict(env)
            if config == "npusan-py":
                child_env["NPUSAN_PYTHON_SPEEDUPS"] = "0"
            if config == "npusan-mode":
                child_env["NPUSAN_TORCH_HOOK"] = "0"
            children[config] = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__),
                 "--child", config, "--iters", str(a.iters),
                 "--stack-depth", str(a.stack_depth)],
                env=child_env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
        ops = {json.loads(p.stdout.readline())["ops"]
               for p in children.values()}
        if len(ops) != 1:
            sys.exit(f"torch_bench: configurations disagree on the "
                     f"operators per iteration: {ops}")
        ops = ops.pop()
        for cycle in range(a.runs):
            order = CONFIGS[cycle % len(CONFIGS):] + \
                CONFIGS[:cycle % len(CONFIGS)]
            got = {}
            for config in order:
                p = children[config]
                p.stdin.write("run\n")
                p.stdin.flush()
                runs = json.loads(p.stdout.readline())
                got[config] = runs[0]
                times[config].append(runs[0])
                if config in IDLE:
                    times[IDLE[config]].append(runs[1])
                    got[IDLE[config]] = runs[1]
            for c in ratios:
                ratios[c].append((got[c] - got["emulation"]) /
                                 (got["csan"] - got["emulation"]))
    finally:
        for p in children.values():
            p.stdin.close()
            p.wait()
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    per_op = {c: statistics.median(t) / (a.iters * ops) * 1e6
              for c, t in times.items()}
    spread = {c: (min(t) / (a.iters * ops) * 1e6,
                  max(t) / (a.iters * ops) * 1e6)
              for c, t in times.items()}
    consumer = "no consumer" if a.no_daemon else "npusand draining"
    print(f"{ops} operators per iteration, {a.iters} iterations per run, "
          f"{a.runs} runs per configuration, stack depth "
          f"+{a.stack_depth}; npusan's agent with {consumer}")
    print(f"{'configuration':<14} {'us/op':>6} {'over baseline':>14} "
          f"{'over emulation':>15}  {'runs from':>9} {'to':>7}")
    for c in CONFIGS + tuple(IDLE.values()):
        print(f"{c:<14} {per_op[c]:6.2f} {per_op[c] - per_op['baseline']:14.2f}"
              f" {per_op[c] - per_op['emulation']:15.2f}  "
              f"{spread[c][0]:9.2f} {spread[c][1]:7.2f}")
    added = {c: per_op[c] - per_op["emulation"]
             for c in ("npusan", "npusan-mode", "npusan-py", "csan")}
    ratio = {c: statistics.median(r) for c, r in ratios.items()}
    own = {c: statistics.median(a - b for a, b in zip(times[c], times[i]))
           / (a.iters * ops) * 1e6 for c, i in IDLE.items()}
    print(f"npusan's own code: {own['npusan']:.2f} us/op "
          f"({own['npusan-py']:.2f} on its Python path); the rest of what it "
          f"adds is its hook in the dispatcher (or its dispatch mode) and "
          f"callbacks being there")
    print(f"npusan adds {added['npusan']:.2f} us/op, CSAN {added['csan']:.2f} "
          f"us/op: npusan adds {ratio['npusan']:.3f} of what CSAN adds "
          f"(target: at most 0.05); on its C dispatch mode "
          f"{ratio['npusan-mode']:.3f}, on its Python path "
          f"{ratio['npusan-py']:.3f}")
    print(f"npusan recording nothing adds {ratio['npusan-idle']:.3f} of what "
          f"CSAN adds ({ratio['npusan-mode-idle']:.3f} on its dispatch "
          f"mode)")


if __name__ == "__main__":
    main()
