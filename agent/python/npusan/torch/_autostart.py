"""Turns npusan.torch on in every Python process of a job, as each
imports torch: for the children that ``multiprocessing``'s spawn and
forkserver start (``torch.multiprocessing.spawn``), which are new
interpreters that never run the line that called ``enable()``.

``NPUSAN_TORCH=1`` asks for it; ``npusanctl run`` sets it (unless it is
set already) and ``python3 -m npusan.torch`` sets it for the program's
children. It acts through the ``sitecustomize`` of ``npusan/_startup``,
which both put on ``PYTHONPATH`` and which every Python process runs at
start-up. A process that never imports torch does not import it.
"""

import importlib.abc
import importlib.util
import os
import sys

# The variable that asks for it, and the directory of the sitecustomize
# that reads it.
VARIABLE = "NPUSAN_TORCH"
STARTUP_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "_startup")


def requested() -> bool:
    return os.environ.get(VARIABLE) == "1"


class _WhenTorchLoads(importlib.abc.MetaPathFinder):
    """Finds torch as the other finders do, and calls enable() once its
    module has run, before anything else can use it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_enable(module) -> None:
            exec_module(module)
            from . import enable

            enable()

        spec.loader.exec_module = exec_then_enable
        return spec


def install() -> None:
    """enable() as soon as torch has been imported (now, if it has)."""
    if "torch" in sys.modules:
        from . import enable

        enable()
    elif not any(isinstance(f, _WhenTorchLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenTorchLoads())


def export() -> None:
    """Asks it of this process's children, through their environment."""
    os.environ[VARIABLE] = "1"
    package_dir = os.path.dirname(os.path.dirname(STARTUP_DIR))
    path = os.environ.get("PYTHONPATH", "")
    entries = [e for e in path.split(os.pathsep) if e]
    for entry in (package_dir, STARTUP_DIR):
        if entry not in entries:
            entries.insert(0, entry)
    os.environ["PYTHONPATH"] = os.pathsep.join(entries)
