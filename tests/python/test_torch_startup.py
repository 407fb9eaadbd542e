#!/usr/bin/python3
"""npusan's start-up hook (npusan/_startup/sitecustomize.py and
npusan/torch/_autostart.py): with NPUSAN_TORCH=1 and the hook on
PYTHONPATH, a Python process turns npusan.torch on as it imports torch,
neither imports torch nor turns anything on when it never does, and
still runs the sitecustomize
the hook hides. In processes of their own, with the real libnpusan and no
daemon; test_torch_e2e.py runs a spawned child under npusanctl run.

Usage: test_torch_startup.py --library PATH

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
STARTUP_DIR = os.path.join(PACKAGE_DIR, "npusan", "_startup")

ARGS = argparse.Namespace()


def run_python(code: str, path=(STARTUP_DIR, PACKAGE_DIR), argv=(),
               **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(path), NPUSAN="1",
                NPUSAN_TORCH="1", NPUSAN_TORCH_DEVICE="cpu",
                NPUSAN_LIBRARY=ARGS.library,
                NPUSAN_SOCKET="/nonexistent/npusand.sock")
    full.pop("NPUSAN_RECORD", None)
    full.update(env)
    return subprocess.run([sys.executable, *argv, "-c",
                           textwrap.dedent(code)], env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


ENABLED = """
    import torch, npusan.torch
    x = torch.ones(4) + 1
    print(npusan.torch.enabled())
"""


class Startup(unittest.TestCase):
    maxDiff = None

    def test_on_as_torch_is_imported(self):
        got = run_python(ENABLED)
        self.assertEqual((got.stdout, got.stderr), ("True\n", ""))

    def test_off_without_the_variable(self):
        got = run_python(ENABLED, NPUSAN_TORCH="0")
        self.assertEqual((got.stdout, got.stderr), ("False\n", ""))

    def test_a_process_without_torch_does_not_import_it(self):
        got = run_python("""
            import sys
            import npusan.torch
            print([m for m in sys.modules if m.split(".")[0] == "torch"],
                  npusan.torch.enabled())
        """)
        self.assertEqual((got.stdout, got.stderr), ("[] False\n", ""))

    def test_the_hidden_sitecustomize_still_runs(self):
        with tempfile.TemporaryDirectory() as other:
            with open(os.path.join(other, "sitecustomize.py"), "w") as f:
                f.write("import builtins\nbuiltins.HIDDEN_RAN = True\n")
            got = run_python("import builtins\n"
                             "print(getattr(builtins, 'HIDDEN_RAN', False))\n",
                             path=(STARTUP_DIR, PACKAGE_DIR, other))
        self.assertEqual((got.stdout, got.stderr), ("True\n", ""))

    def test_main_asks_it_of_the_programs_children(self):
        """python3 -m npusan.torch sets the variable and the path for the
        processes the program starts."""
        with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
            f.write(textwrap.dedent("""
                import subprocess, sys
                sys.exit(subprocess.run([sys.executable, "-c", '''
                import torch, npusan.torch
                print(npusan.torch.enabled())
                ''']).returncode)
            """))
            f.flush()
            got = run_python("import runpy, sys\n"
                             f"sys.argv = ['npusan.torch', {f.name!r}]\n"
                             "runpy.run_module('npusan.torch', "
                             "run_name='__main__')\n",
                             path=(PACKAGE_DIR,), NPUSAN_TORCH="")
        self.assertEqual((got.stdout, got.stderr), ("True\n", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True)
    ap.parse_args(namespace=ARGS)
    try:
        importlib.import_module("torch")
    except ImportError as err:
        print(f"test_torch_startup: skipped: no torch ({err})")
        sys.exit(77)
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
