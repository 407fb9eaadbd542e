"""Watch a PyTorch job with npusan: ``npusan.torch.enable()``, or run a
script with ``python3 -m npusan.torch script.py args...``.

enable() loads libnpusan, starts the agent (as ``npusan_init()`` does:
``NPUSAN=0`` keeps it off), picks the device, registers the framework's
trace callbacks for streams, events, synchronizations, allocations and
``record_stream``, and installs the dispatch mode that turns each operator
into one launch with its memory and Python stack, in every thread of the
process: in this one and in those started later, and in those already
running where the adapter's C path is loaded. The device comes from
``NPUSAN_TORCH_DEVICE``: ``npu`` (torch_npu), ``cuda``, ``cpu`` (CPU tensors
count as device tensors, on the streams of ``npusan.torch.emulate``), or
``auto`` (the default): npu, else cuda, else cpu, said on stderr.

``NPUSAN_PYTHON_STACKS=N`` sets the Python frames kept per stack (default
32, 0 off).

The adapter never breaks the job: when libnpusan cannot be loaded, torch
cannot be hooked, the dispatch mode fails the one operator enable() runs
through it to prove it, or anything in the adapter fails later, npusan
turns off with one line on stderr and the job runs on as it would without
it. It never writes to stdout.
"""

import atexit
import os

from .. import _lib
from .._log import say as _say
from .._stack import Stacks, frames_from_env

__all__ = ["enable", "enabled"]

_running = None
_tried = False


def enabled() -> bool:
    """Whether the adapter is on."""
    return _running is not None and _running.on


def enable() -> bool:
    """Turns npusan on for this process, once; True when it is on."""
    global _tried
    if not _tried:
        _tried = True
        try:
            _enable()
        except Exception as err:
            _say(f"off: {type(err).__name__}: {err}")
    return enabled()


def _enable() -> None:
    global _running
    # Loaded before torch is imported, so that the agent registers with the
    # daemon while torch loads.
    agent, why = _lib.load()
    if agent is None:
        _say(f"off: cannot load libnpusan: {why}")
        return
    rc = agent.init()
    if rc < 0:
        _say(f"off: the agent could not start: {os.strerror(-rc)}")
        return
    if not agent.active():
        return  # NPUSAN=0
    try:
        from . import _adapter as adapter_mod  # imports torch
        from ._backends import Unavailable, select
    except ImportError as err:
        _say(f"off: {err}")
        return

    choice = os.environ.get("NPUSAN_TORCH_DEVICE", "auto")
    try:
        backend = select(choice)
    except Unavailable as err:
        _say(f"off: {err}")
        return
    if backend.name == "cpu" and choice != "cpu":
        _say("no NPU or CUDA device: CPU tensors count as device tensors "
             "(NPUSAN_TORCH_DEVICE=cpu)")
    stacks = Stacks(agent, frames_from_env(), _machinery_files())
    speedups = _lib.load_speedups(agent.path)
    hook = None
    if speedups is not None:
        hook, why = _lib.load_torchhook(agent.path)
        if why:
            adapter_mod.say_hook_unused(why)
    adapter = adapter_mod.Adapter(agent, backend, stacks, speedups, hook)
    backend.activate()
    adapter.register()
    if not adapter.start():
        return
    atexit.register(adapter.finish)
    _finish_in_workers(adapter)
    _running = adapter


def _finish_in_workers(adapter) -> None:
    """multiprocessing's workers end with os._exit(), which runs no atexit
    hook, so a worker's last operations could miss the daemon's wait and
    its NPUSAN_RECORD file. They run multiprocessing's finalizers first
    (util._exit_function()): every worker started from this process (fork,
    or forkserver and spawn, whose interpreters enable the adapter again)
    finishes the adapter as its last finalizer."""
    import multiprocessing.util as mp_util

    mp_util.register_after_fork(adapter, _finish_at_worker_exit)


def _finish_at_worker_exit(adapter) -> None:
    import multiprocessing.util as mp_util

    # The lowest priority: after the worker's own finalizers.
    mp_util.Finalize(adapter, adapter.finish, exitpriority=-(1 << 30))


def _machinery_files():
    """Where the frames between user code and the adapter come from: this
    package and PyTorch's operator and dispatch-mode plumbing; and runpy,
    whose frames sit below a script that ``python3 -m npusan.torch`` runs."""
    import runpy

    import torch._ops
    import torch.utils._python_dispatch

    # Spelled as code objects spell them (runpy is frozen: "<frozen
    # runpy>"); this package's files are named from the sys.path entry
    # that its __file__ comes from too.
    here = os.path.dirname(os.path.dirname(__file__))
    return (here + os.sep, torch._ops.OpOverload.__call__.__code__.co_filename,
            torch.utils._python_dispatch._push_mode.__code__.co_filename,
            runpy.run_path.__code__.co_filename)

