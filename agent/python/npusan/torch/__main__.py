"""``python3 -m npusan.torch SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``):
runs a Python program under npusan, as ``python3 SCRIPT ARGS...`` would run
it, with ``npusan.torch.enable()`` called first.

``npusanctl run -- python3 -m npusan.torch train.py`` is the one-line way
to check a job; the program's exit status and output are its own.
"""

import os
import runpy
import sys

from . import enable

USAGE = ("usage: python3 -m npusan.torch SCRIPT [ARGS...]\n"
         "       python3 -m npusan.torch -m MODULE [ARGS...]\n")


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] == "-m":
        if len(argv) < 2:
            sys.stderr.write(USAGE)
            sys.exit(2)
        sys.argv = argv[1:]
        enable()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = argv
    # As `python3 SCRIPT` does: the script's directory comes first.
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    enable()
    runpy.run_path(argv[0], run_name="__main__")


main()
