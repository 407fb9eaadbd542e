"""``python3 -m npusan.torch SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``):
runs a Python program under npusan, as ``python3 SCRIPT ARGS...`` would run
it, with ``npusan.torch.enable()`` called first.

``npusanctl run -- python3 -m npusan.torch train.py`` is the one-line way
to check a job; the program's exit status and output are its own.

The findings are those of ``python3 SCRIPT`` with ``npusan.torch.enable()``
at its top: the program's globals live until the interpreter ends, as
they would without this module in between, so the memory they still hold
when the program returns is freed as the process ends, where no free is
checked (nothing can reuse that memory).

The program's Python children are watched too: it sets ``NPUSAN_TORCH=1``
and puts npusan's start-up hook on ``PYTHONPATH`` for them, so that each
turns npusan on as it imports torch, also those that ``multiprocessing``
starts with spawn or forkserver (npusan/torch/_autostart.py).
"""

import os
import runpy
import sys

from . import _autostart, enable

USAGE = ("usage: python3 -m npusan.torch SCRIPT [ARGS...]\n"
         "       python3 -m npusan.torch -m MODULE [ARGS...]\n")


# The program's globals, held until the interpreter ends (see above).
_program_globals = None


def _run(run, target: str, **kwargs) -> None:
    """run(target, run_name="__main__", ...), holding the globals of the
    program it runs, also when it ends with an exception (sys.exit())."""
    global _program_globals
    try:
        _program_globals = run(target, run_name="__main__", **kwargs)
    except BaseException as err:
        # The frame of the program's own code holds its globals.
        tb = err.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_name != "<module>":
            tb = tb.tb_next
        if tb is not None:
            _program_globals = tb.tb_frame.f_globals
        raise


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
        _autostart.export()
        enable()
        _run(runpy.run_module, argv[1], alter_sys=True)
        return
    sys.argv = argv
    # As `python3 SCRIPT` does: the script's directory comes first.
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    _autostart.export()
    enable()
    _run(runpy.run_path, argv[0])


main()
