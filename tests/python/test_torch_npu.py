#!/usr/bin/python3
"""npusan.torch's npu backend against the stand-in torch_npu of
tests/python/standin: what it asks of torch_npu, in processes of their own
with the real libnpusan and no daemon. (test_torch_e2e.py runs the
scenarios end to end on the same backend.)

Usage: test_torch_npu.py --library PATH

Exit status: 0 passed, 1 failed, 77 (CTest's skip) without torch.
"""

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
PACKAGE_DIR = os.path.join(SOURCE, "agent", "python")
STANDIN_DIR = os.path.join(HERE, "standin")

ARGS = argparse.Namespace()


def run_child(code: str, **env) -> subprocess.CompletedProcess:
    """`code` as a script under ``python3 -m npusan.torch``, on the npu
    backend with the stand-in torch_npu."""
    full = dict(os.environ, PYTHONPATH=PACKAGE_DIR + os.pathsep + STANDIN_DIR,
                NPUSAN="1", NPUSAN_TORCH_DEVICE="npu",
                NPUSAN_LIBRARY=ARGS.library,
                NPUSAN_SOCKET="/nonexistent/npusand.sock")
    full.pop("NPUSAN_RECORD", None)
    full.update(env)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    try:
        return subprocess.run([sys.executable, "-m", "npusan.torch", f.name],
                              env=full, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.unlink(f.name)


class NpuBackend(unittest.TestCase):
    maxDiff = None

    def test_on_in_stream_check_mode(self):
        got = run_child("""
            import torch, torch_npu, npusan.torch
            print(npusan.torch.enabled(), torch_npu._C._mode)
        """)
        self.assertEqual((got.stdout, got.stderr), ("True 0\n", ""))

    def test_operators_never_drain_the_task_queue(self):
        """The current stream is asked for on every operator: never in
        the spelling that empties torch_npu's task queue first."""
        got = run_child("""
            import torch, torch_npu
            side = torch.npu.Stream()
            x = torch.ones(64)
            with torch.npu.stream(side):
                y = x * 2
            print(torch_npu._C.task_queue_drains)
        """)
        self.assertEqual((got.stdout, got.stderr), ("0\n", ""))

    def test_torch_npu_without_the_stream_check_is_one_line(self):
        """A torch_npu whose _npu_trace has only the kernel check's
        registries would report no stream, event or allocation: npusan
        says so and stays off, and the job runs."""
        trace = os.path.join(STANDIN_DIR, "torch_npu", "utils", "_npu_trace.py")
        with tempfile.TemporaryDirectory() as shadow:
            # A sitecustomize that strips the stand-in's stream-check
            # registries before npusan looks for them.
            with open(os.path.join(shadow, "sitecustomize.py"), "w") as f:
                f.write(textwrap.dedent("""
                    import torch_npu.utils._npu_trace as t
                    for name in list(vars(t)):
                        if name.startswith("NPU") and "ACL" not in name:
                            delattr(t, name)
                """))
            got = run_child("""
                import sys, torch, npusan.torch
                x = torch.ones(4) + 1
                sys.exit(3 if npusan.torch.enabled() else 4)
            """, PYTHONPATH=os.pathsep.join((shadow, PACKAGE_DIR,
                                             STANDIN_DIR)))
        self.assertTrue(os.path.exists(trace))
        self.assertEqual((got.returncode, got.stdout), (4, ""))
        self.assertEqual(
            got.stderr, "npusan: off: this torch_npu's _npu_trace has no "
            "stream-check registries for stream_creation, "
            "stream_synchronization, event_creation, event_deletion, "
            "event_record, event_wait, event_synchronization, "
            "device_synchronization, memory_allocation, "
            "memory_deallocation\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True)
    ap.parse_args(namespace=ARGS)
    try:
        importlib.import_module("torch")
    except ImportError as err:
        print(f"test_torch_npu: skipped: no torch ({err})")
        sys.exit(77)
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
