"""npusan's start-up hook, for the directory that ``npusanctl run`` and
``python3 -m npusan.torch`` put on PYTHONPATH: with ``NPUSAN_TORCH=1``,
npusan.torch turns on in this process as it imports torch (see
npusan/torch/_autostart.py). It then runs the sitecustomize it hides, if
another directory on the path has one (Debian's, for one)."""

import importlib.machinery
import importlib.util
import os
import sys


def _npusan() -> None:
    if os.environ.get("NPUSAN_TORCH") != "1":
        return
    try:
        from npusan.torch import _autostart

        _autostart.install()
    except Exception as err:  # never break the interpreter's start
        sys.stderr.write(f"npusan: off: {type(err).__name__}: {err}\n")


def _hidden_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_npusan()
_hidden_sitecustomize()
