#!/usr/bin/python3
"""npusan.torch's adapter against a real PyTorch, in one process: operator
classification from real schemas, the calls the dispatch mode and the trace
callbacks make (into a fake agent that records them), Python stacks, and
what happens when something fails; plus the package's start in child
processes, against the real libnpusan.

The tests of the per-operator path run twice: in Python, and (with
--speedups, the module built beside the library) in npusan._speedups' C,
each class's C twin named with a _C suffix.

Usage: test_torch_adapter.py --library PATH --npusanctl PATH
                             [--speedups PATH] [--root]

--root runs only the tests that need root, the others only without it.

Exit status: 0 passed, 1 failed, 77 (CTest's skip) without torch, or with
--root when not root.
"""

import argparse
import contextlib
import ctypes
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)),
                           "agent", "python")
LIBRARY = None  # --library
NPUSANCTL = None  # --npusanctl
SPEEDUPS = None  # npusan._speedups, with --speedups
HOOK = None  # npusan._torchhook, with --torchhook

_LAUNCH = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32,
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                           ctypes.c_size_t, ctypes.c_uint32)
_ALLOC = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64,
                          ctypes.c_uint64, ctypes.c_uint32)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_uint64)
_LAUNCH_ARGS = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32,
                                ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_size_t, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_uint32)

torch = None  # imported in main(), after the skip check


class FakeAgent:
    """libnpusan's API, recording each call as a tuple."""

    def __init__(self):
        self.calls = []
        self.strings = {}
        self.stacks = {}
        # The argument names of each launch: (read names, write names),
        # None for a launch made without them.
        self.args = []
        # A library without npusan_free_at(): frees are recorded as
        # ("free", ptr) on both paths (the e2e tests check the stack).
        self.free_at = None

    def intern(self, text: bytes) -> int:
        return self.strings.setdefault(text.decode(), len(self.strings) + 1)

    def intern_stack(self, addr: int, n: int) -> int:
        ids = tuple((ctypes.c_uint32 * n).from_address(addr))
        names = {v: k for k, v in self.strings.items()}
        return self.stacks.setdefault(tuple(names[i] for i in ids),
                                      len(self.stacks) + 1)

    def stack(self, sid: int):
        return next(k for k, v in self.stacks.items() if v == sid)

    def op(self, oid: int) -> str:
        return next(k for k, v in self.strings.items() if v == oid)

    def launch(self, stream, op, raddr, nr, waddr, nw, stack):
        def pairs(addr, n):
            if n == 0:
                return []
            flat = list((ctypes.c_uint64 * (2 * n)).from_address(addr))
            return list(zip(flat[::2], flat[1::2]))

        self.calls.append(("launch", stream, self.op(op), pairs(raddr, nr),
                           pairs(waddr, nw), stack))
        self.args.append(None)

    def launch_args(self, stream, op, raddr, rargs, nr, waddr, wargs, nw,
                    stack):
        """npusan_launch_args(): recorded as a launch, its names in
        self.args (None for an id of 0)."""
        def names(addr, n):
            if n == 0 or not addr:
                return [None] * n
            return [self.op(i) if i else None
                    for i in (ctypes.c_uint32 * n).from_address(addr)]

        self.launch(stream, op, raddr, nr, waddr, nw, stack)
        self.args[-1] = (names(rargs, nr), names(wargs, nw))

    def pointers(self):
        """C function pointers for npusan._speedups, calling back here."""
        self._c = (_LAUNCH(self.launch),
                   _ALLOC(lambda *a: self.calls.append(("alloc", *a))),
                   _FREE(lambda *a: self.calls.append(("free", *a))),
                   _LAUNCH_ARGS(self.launch_args))
        return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self._c)

    def __getattr__(self, name):
        # Every other function of the API: recorded with its arguments.
        def record(*args):
            self.calls.append((name, *args))
        return record

    def named(self, *names):
        return [c for c in self.calls if c[0] in names]


def nbytes(t) -> int:
    return t.numel() * t.element_size()


class AdapterCase(unittest.TestCase):
    """An adapter on the CPU emulation with a fake agent, its dispatch mode
    entered for each test; with `speedups`, npusan._speedups runs it."""

    speedups = False
    hook = False  # with speedups: npusan._torchhook in the mode's place
    # Whether the test breaks the stream lookup (self.broken), which the C
    # path then reaches through backend.current_stream.
    breaks_stream = False

    def setUp(self):
        from npusan._stack import Stacks
        from npusan.torch import _adapter, _backends, emulate

        self.em = emulate
        self.agent = FakeAgent()
        backend = _backends.cpu()
        backend.activate()
        # Failures.test_failing_stream_lookup breaks it.
        self.broken = None

        def current_stream(device: int) -> int:
            if self.broken is not None:
                raise self.broken
            return emulate.current_stream_id(device)

        backend.current_stream = current_stream
        # The C path reads the real backend's table unless the test's
        # breakable current_stream must be called.
        if self.breaks_stream:
            backend.stream_reader = None
        machinery = (os.path.dirname(_adapter.__file__) + os.sep,
                     torch.utils._python_dispatch.__file__)
        self.adapter = _adapter.Adapter(
            self.agent, backend, Stacks(self.agent, 32, machinery),
            SPEEDUPS if self.speedups else None,
            HOOK if self.hook else None)
        self.assertEqual(self.adapter.core is not None, self.speedups)
        self.assertEqual(self.adapter.hook is not None, self.hook)
        self.adapter.register()
        self.adapter.mode.__enter__()
        # As start() does: on PyTorch 1.13 the C path runs the mode stack.
        self.adapter.run_stack_in_c()

    def tearDown(self):
        self.adapter.mode.__exit__(None, None, None)
        self.adapter.on = False

    def launches(self):
        return self.agent.named("launch")

    def only_launch(self):
        got = self.launches()
        self.assertEqual(len(got), 1, got)
        return got[0]


class Classify(unittest.TestCase):
    """The schema's alias annotations, read once per operator overload."""

    def spec(self, op):
        from npusan.torch._classify import classify

        return classify(op._schema)

    def test_reads_inputs_writes_fresh_output(self):
        from npusan.torch._classify import READ

        s = self.spec(torch.ops.aten.add.Tensor)
        self.assertEqual(s.name, "aten::add.Tensor")
        self.assertEqual(s.args, ((0, "self", READ, 0), (1, "other", READ, 0)))
        self.assertEqual((s.returns, s.single_return), (((0, 0),), True))

    def test_in_place_writes_self_and_returns_nothing_new(self):
        from npusan.torch._classify import READ, WRITE

        s = self.spec(torch.ops.aten.add_.Tensor)
        self.assertEqual(s.args, ((0, "self", WRITE, 0), (1, "other", READ, 0)))
        self.assertEqual(s.returns, ())

    def test_out_argument_is_written(self):
        from npusan.torch._classify import READ, WRITE

        s = self.spec(torch.ops.aten.add.out)
        self.assertEqual(s.args, ((0, "self", READ, 0), (1, "other", READ, 0),
                                  (3, "out", WRITE, 0)))
        self.assertEqual(s.returns, ())

    def test_views_touch_nothing(self):
        for op in (torch.ops.aten.view.default, torch.ops.aten.t.default,
                   torch.ops.aten.split.Tensor, torch.ops.aten.detach.default,
                   torch.ops.aten.slice.Tensor):
            s = self.spec(op)
            self.assertEqual((s.args, s.returns), ((), ()), s.name)

    def test_factory_reads_no_input(self):
        s = self.spec(torch.ops.aten.empty_like.default)
        self.assertEqual((s.args, s.returns), ((), ((0, 0),)))
        self.assertEqual(self.spec(torch.ops.aten.new_zeros.default).args, ())

    def test_tensor_lists(self):
        from npusan.torch._classify import READ, WRITE

        s = self.spec(torch.ops.aten._foreach_add_.Scalar)
        self.assertEqual((s.args, s.returns), (((0, "self", WRITE, 1),), ()))
        s = self.spec(torch.ops.aten._foreach_add.Scalar)
        self.assertEqual((s.args, s.returns),
                         (((0, "self", READ, 1),), ((0, 1),)))

    def test_several_returns(self):
        s = self.spec(torch.ops.aten.max.dim)
        self.assertEqual((s.returns, s.single_return), (((0, 0), (1, 0)), False))

    def test_collectives_write_their_first_argument(self):
        # c10d's schemas differ between PyTorch versions (argument names,
        # optional tensor arguments added in 2.x): only the first argument
        # is written, whatever the rest are.
        from npusan.torch._classify import READ, WRITE

        c10d = torch.ops.c10d
        for op, nest in ((c10d.allreduce_.default, 1),
                         (c10d.allgather_.default, 2),
                         (c10d.recv_.default, 1)):
            s = self.spec(op)
            names = [a.name for a in op._schema.arguments]
            self.assertEqual(s.args[0], (0, names[0], WRITE, nest), s.name)
            self.assertEqual({kind for _, _, kind, _ in s.args[1:]},
                             {READ} if s.args[1:] else set(), s.name)
            self.assertTrue(all(names[pos] == name
                                for pos, name, _, _ in s.args), s.name)
            self.assertEqual(s.returns, (), s.name)
        s = self.spec(c10d.allgather_.default)
        self.assertEqual(s.args[1][:1] + s.args[1][2:], (1, READ, 1))
        s = self.spec(c10d.send.default)
        self.assertEqual({kind for _, _, kind, _ in s.args}, {READ})
        self.assertEqual(s.args[0][2:], (READ, 1))

    def test_record_stream_is_no_kernel(self):
        s = self.spec(torch.ops.aten.record_stream.default)
        self.assertTrue(s.record_stream)
        self.assertEqual((s.args, s.returns), ((), ()))


class Ranges(unittest.TestCase):
    """The bytes a tensor's view touches."""

    speedups = False

    def ranges(self, t):
        from npusan.torch._classify import strided_ranges

        fn = SPEEDUPS.strided_ranges if self.speedups else strided_ranges
        out = []
        fn(t.data_ptr(), t.element_size(), tuple(t.size()), t.stride(), out)
        return list(zip(out[::2], out[1::2]))

    def test_strided_one_dimension(self):
        x = torch.zeros(16)
        self.assertEqual(self.ranges(x[::2]),
                         [(x.data_ptr() + 8 * i, 4) for i in range(8)])

    def test_column_block_is_one_run_per_row(self):
        x = torch.zeros(8, 8)
        p = x.data_ptr()
        self.assertEqual(self.ranges(x[:, 4:]),
                         [(p + 16 + 32 * r, 16) for r in range(8)])

    def test_dense_permutation_is_one_range(self):
        x = torch.zeros(8, 4)
        self.assertEqual(self.ranges(x.t()), [(x.data_ptr(), 128)])

    def test_broadcast_dimension_adds_nothing(self):
        x = torch.zeros(4)
        self.assertEqual(self.ranges(x.expand(3, 4)), [(x.data_ptr(), 16)])

    def test_many_runs_become_their_span(self):
        x = torch.zeros(64, 64)
        self.assertEqual(self.ranges(x[:, 3]),
                         [(x.data_ptr() + 12, (63 * 64 + 1) * 4)])

    def test_empty_touches_nothing(self):
        self.assertEqual(self.ranges(torch.zeros(4, 4)[:, 0:0]), [])


class Operators(AdapterCase):
    """One launch per operator, with the right memory and stream."""

    def test_fresh_output_is_allocated_then_written(self):
        x = torch.ones(16)
        self.agent.calls.clear()
        y = x + 1
        alloc, launch = self.agent.calls
        self.assertEqual(alloc[:4], ("alloc", y.data_ptr(), 64, 0))
        self.assertEqual(launch[:5], ("launch", 0, "aten::add.Tensor",
                                      [(x.data_ptr(), 64)],
                                      [(y.data_ptr(), 64)]))
        # One stack for the operator: its launch and its allocation.
        self.assertEqual(alloc[4], launch[5])

    def test_ranges_name_their_schema_arguments(self):
        # As CSAN names them: "self", "other", "out", a fresh output
        # "output"; a tensor list's ranges share its argument's name.
        x, y = torch.ones(16), torch.ones(16)
        out = torch.empty(16)
        self.agent.calls.clear()
        self.agent.args.clear()
        z = x + y
        torch.add(x, y, out=out)
        x.add_(y)
        torch._foreach_add_([x, y], 1.0)
        self.assertEqual(self.agent.args, [
            (["self", "other"], ["output"]),
            (["self", "other"], ["out"]),
            (["other"], ["self"]),
            ([], ["self", "self"]),
        ])
        del z

    def test_current_stream_of_the_emulation(self):
        x = torch.ones(16)
        s = self.em.Stream()
        with self.em.stream(s):
            y = x * 2
        self.assertEqual(self.agent.named("alloc")[-1][3], s.id)
        self.assertEqual(self.launches()[-1][1], s.id)
        self.assertEqual(self.em.current_stream_id(), 0)
        del y

    def test_strided_fresh_output_allocates_its_extent(self):
        y = torch.empty_strided((4, 3), (1, 4))
        self.assertEqual(self.agent.named("alloc")[-1][1:3],
                         (y.data_ptr(), (1 + 3 * 1 + 2 * 4) * 4))

    def test_views_launch_nothing(self):
        x = torch.ones(4, 4)
        self.agent.calls.clear()
        x.view(16), x.t(), x[1:], x.detach()
        self.assertEqual(self.launches(), [])

    def test_in_place_on_view_writes_its_rows(self):
        x = torch.zeros(8, 8)
        v = x[:, :4]
        self.agent.calls.clear()
        v.add_(1)
        _, stream, op, reads, writes, _ = self.only_launch()
        self.assertEqual((op, reads), ("aten::add_.Tensor", []))
        self.assertEqual(writes, [(x.data_ptr() + 32 * r, 16)
                                  for r in range(8)])

    def test_out_argument(self):
        a, b, c = torch.ones(4), torch.ones(4), torch.empty(4)
        self.agent.calls.clear()
        torch.add(a, b, out=c)
        _, _, op, reads, writes, _ = self.only_launch()
        self.assertEqual((op, reads, writes),
                         ("aten::add.out", [(a.data_ptr(), 16),
                                            (b.data_ptr(), 16)],
                          [(c.data_ptr(), 16)]))

    def test_factory_reads_nothing(self):
        x = torch.ones(4)
        self.agent.calls.clear()
        y = torch.empty_like(x)
        _, _, op, reads, writes, _ = self.only_launch()
        self.assertEqual((op, reads, writes),
                         ("aten::empty_like", [], [(y.data_ptr(), 16)]))

    def test_free_when_the_last_tensor_on_a_storage_dies(self):
        x = torch.ones(16)
        p = x.data_ptr()
        v = x[4:]
        del x
        self.assertEqual(self.agent.named("free"), [])
        del v
        self.assertEqual(self.agent.named("free"), [("free", p)])

    def test_allocation_by_a_view_returning_operator(self):
        # torch.tensor() builds its data outside the dispatcher; the
        # operator that returns it (lift_fresh, a view) claims it.
        t = torch.tensor([1.0, 2.0])
        self.assertIn(("alloc", t.data_ptr(), 8, 0),
                      [c[:4] for c in self.agent.named("alloc")])

    def test_scalar_argument_is_no_tensor(self):
        x = torch.ones(4)
        self.agent.calls.clear()
        x.mul_(3)
        self.assertEqual(self.only_launch()[3:5], ([], [(x.data_ptr(), 16)]))


class Streams(AdapterCase):
    """The emulation fires the trace callbacks; the adapter forwards them."""

    def test_wait_stream_is_an_event(self):
        a, b = self.em.Stream(), self.em.Stream()
        self.agent.calls.clear()
        a.wait_stream(b)
        # As torch.cuda's: a fresh event recorded on b, waited for on a,
        # and destroyed once collected.
        self.assertEqual([c[0] for c in self.agent.calls],
                         ["event_create", "event_record", "event_wait",
                          "event_destroy"])
        event = self.agent.calls[0][1]
        self.assertEqual(self.agent.calls[1:],
                         [("event_record", event, b.id),
                          ("event_wait", event, a.id),
                          ("event_destroy", event)])

    def test_synchronizations(self):
        s = self.em.Stream()
        e = self.em.Event()
        e.synchronize()  # never recorded: nothing to wait for
        self.em.synchronize()
        s.synchronize()
        e.record(s)
        e.synchronize()
        self.assertEqual(
            [c for c in self.agent.calls if c[0].endswith("sync")],
            [("device_sync",), ("stream_sync", s.id), ("event_sync", e.id)])

    def test_host_sync_inside_an_operator_follows_its_launch(self):
        s = torch.ones(4).sum()
        self.agent.calls.clear()
        s.item()
        self.assertEqual([c[0] for c in self.agent.calls],
                         ["launch", "stream_sync"])
        self.assertEqual(self.agent.calls[0][2:4],
                         ("aten::_local_scalar_dense", [(s.data_ptr(), 4)]))
        self.assertEqual(self.agent.calls[1], ("stream_sync", 0))
        self.assertEqual(self.adapter.inside, {})

    def test_stream_creation(self):
        s = self.em.Stream()
        self.assertIn(("stream_create", s.id), self.agent.calls)
        self.em.Stream(s.id)
        self.em.Stream(0)
        self.assertEqual(self.agent.named("stream_create"),
                         [("stream_create", s.id)])

    def test_record_stream_names_the_storage(self):
        x = torch.ones(8)
        s = self.em.Stream()
        self.em.record_stream(x[2:], s)
        self.assertEqual(self.agent.named("record_stream"),
                         [("record_stream", x.data_ptr(), s.id)])

    def test_event_destroyed_when_collected(self):
        e = self.em.Event()
        e.record()
        eid = e.id
        del e
        self.assertEqual(self.agent.named("event_destroy"),
                         [("event_destroy", eid)])


class PythonStacks(AdapterCase):
    """Stacks start at the user's line, and are named once."""

    def test_stack_points_at_the_calling_line(self):
        x = torch.ones(4)
        line = sys._getframe().f_lineno + 1
        y = x + 1
        stack = self.agent.stack(self.launches()[-1][5])
        self.assertEqual(stack[0], f"{__file__}:{line} in "
                         "test_stack_points_at_the_calling_line")
        # None of the adapter's own frames, wherever the checkout is.
        import npusan
        package = os.path.dirname(os.path.abspath(npusan.__file__)) + os.sep
        self.assertTrue(all(not f.startswith(package) for f in stack), stack)
        del y

    def test_same_line_same_stack_named_once(self):
        x = torch.ones(4)
        for _ in range(3):
            x.add_(1)
        ids = {c[5] for c in self.launches()[-3:]}
        self.assertEqual(len(ids), 1)
        self.assertEqual(len(self.agent.stacks), len(set(
            self.agent.stacks.values())))

    def test_code_made_machinery_later_is_skipped_from_then_on(self):
        x = torch.ones(4)

        def helper():
            x.add_(1)

        line = sys._getframe().f_lineno + 1
        helper()
        first = self.agent.stack(self.launches()[-1][5])
        self.assertTrue(first[0].endswith(" in helper"), first)
        # This file is machinery from now on: its frames are left out.
        self.adapter.stacks.add_machinery([__file__])
        helper()
        second = self.agent.stack(self.launches()[-1][5])
        self.assertNotIn(f"{__file__}:{line} in "
                         "test_code_made_machinery_later_is_skipped_from_"
                         "then_on", second)
        self.assertFalse(any(f.startswith(__file__) for f in second), second)

    def test_different_lines_different_stacks(self):
        x = torch.ones(4)
        x.add_(1)
        x.add_(1)
        first, second = self.launches()[-2:]
        self.assertNotEqual(first[5], second[5])


class Failures(AdapterCase):
    """A failure inside the adapter turns npusan off and nothing else."""

    breaks_stream = True

    def test_failing_stream_lookup_turns_off_with_one_line(self):
        x = torch.ones(4)
        self.broken = OSError("device gone")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            y = x + 1
            z = y * 2
        self.assertEqual(z.tolist(), [4.0] * 4)
        self.assertEqual(err.getvalue(), "npusan: off: OSError: device gone\n")
        self.assertFalse(self.adapter.on)
        calls = len(self.agent.calls)
        z.add_(1)
        self.assertEqual(len(self.agent.calls), calls)

    def test_user_exceptions_pass_through(self):
        with self.assertRaises(RuntimeError):
            torch.ones(2) + torch.ones(3)
        self.assertTrue(self.adapter.on)


class StartCase(unittest.TestCase):
    """An adapter on the CPU emulation with a fake agent, registered but
    not started; with `speedups`, npusan._speedups runs it."""

    speedups = False
    hook = False

    def setUp(self):
        from npusan._stack import Stacks
        from npusan.torch import _adapter, _backends

        self.agent = FakeAgent()
        backend = _backends.cpu()
        backend.activate()
        machinery = (os.path.dirname(_adapter.__file__) + os.sep,
                     torch.utils._python_dispatch.__file__)
        self.adapter = _adapter.Adapter(
            self.agent, backend, Stacks(self.agent, 32, machinery),
            SPEEDUPS if self.speedups else None,
            HOOK if self.hook else None)
        self.adapter.register()

    def tearDown(self):
        self.adapter.leave()
        threading.setprofile(None)
        self.adapter.on = False

    def start(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            on = self.adapter.start()
        return on, err.getvalue()


class Proof(StartCase):
    """Adapter.start(), which enable() calls: the mode proves itself on one
    operator before npusan turns on, and anything failing there turns it
    off with one line, the mode gone and the job running on."""

    def test_start_proves_the_mode_and_reports_nothing(self):
        from npusan.torch._adapter import _PROBE

        self.assertEqual(self.start(), (True, ""))
        self.assertIn(_PROBE, self.adapter.specs)
        if self.hook:  # in the dispatcher: no mode on the stack
            self.assertEqual(mode_stack(), [])
            self.assertTrue(HOOK.entered())
        else:
            self.assertEqual(mode_stack(), [self.adapter.mode])
        self.assertEqual(self.agent.named("launch", "alloc", "free"), [])
        x = torch.ones(4)
        self.assertEqual(self.agent.named("alloc")[-1][1], x.data_ptr())

    def assertOff(self, on, err, line):
        self.assertFalse(on)
        self.assertFalse(self.adapter.on)
        self.assertEqual(err, line)
        self.assertEqual(mode_stack(), [])
        calls = len(self.agent.calls)
        self.assertEqual((torch.ones(2) + 1).tolist(), [2.0, 2.0])
        self.assertEqual(len(self.agent.calls), calls)

    def test_mode_torch_refuses_turns_off(self):
        # What PyTorch 2 did to the C path: a __torch_dispatch__ bound to
        # another object than the mode (here its class, which 1.13
        # refuses too).
        if self.hook:
            self.skipTest("the dispatcher hook is no dispatch mode")
        mode = self.adapter.mode
        mode.__torch_dispatch__ = types.MethodType(
            lambda cls, *args: None, type(mode))
        on, err = self.start()
        self.assertTrue(err.startswith("npusan: off: RuntimeError: "), err)
        self.assertOff(on, err, err.splitlines()[0] + "\n")

    def test_mode_that_sees_nothing_turns_off(self):
        self.adapter.mode.__enter__ = lambda: self.adapter.mode
        self.assertOff(*self.start(), "npusan: off: RuntimeError: the "
                       "dispatch mode saw no operator\n")

    def test_adapter_failing_on_the_probe_turns_off(self):
        def broken(func):
            raise ValueError("cannot classify")

        self.adapter.spec = broken
        self.assertOff(*self.start(),
                       "npusan: off: ValueError: cannot classify\n")


class HookFallback(StartCase):
    """Where the dispatcher hook cannot be used (here: built for another
    PyTorch), the adapter says so in one line and runs its C dispatch mode:
    the job runs, and its operators are recorded."""

    speedups = True

    def test_hook_for_another_torch_falls_back_to_the_mode(self):
        from npusan.torch import _adapter
        from npusan._stack import Stacks

        other = types.SimpleNamespace(TORCH_VERSION=(0, 1),
                                      install=HOOK.install)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.adapter = _adapter.Adapter(
                self.agent, self.adapter.backend,
                Stacks(self.agent, 32, ()), SPEEDUPS, other)
        self.assertEqual(err.getvalue(), (
            f"npusan: the dispatcher hook (npusan._torchhook) is not used "
            f"(built for PyTorch 0.1, running {torch.__version__}): the "
            f"dispatch mode runs instead\n"))
        self.assertIsNone(self.adapter.hook)
        self.adapter.register()
        self.assertEqual(self.start(), (True, ""))
        self.assertEqual(mode_stack(), [self.adapter.mode])
        x = torch.ones(4)
        x.add_(1)
        self.assertEqual(self.agent.named("launch")[-1][2:5],
                         ("aten::add_.Tensor", [], [(x.data_ptr(), 16)]))


class OtherModes(StartCase):
    """npusan's mode among others: each mode sees the operators, npusan
    records them as it does alone, and the modes stay as they were, on PyTorch
    1.13 with the C path's ModeStack running the stack for npusan's layer."""

    def log_mode(self, seen: list):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Log(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(func)
                return func(*args, **(kwargs or {}))

        return Log()

    def test_a_mode_on_top_sees_the_operator_npusan_launches_it(self):
        self.assertEqual(self.start(), (True, ""))
        x = torch.ones(4)
        seen = []
        with self.log_mode(seen):
            x.add_(1)
        self.assertEqual(seen, [torch.ops.aten.add_.Tensor])
        self.assertEqual(self.agent.named("launch")[-1][2:5],
                         ("aten::add_.Tensor", [], [(x.data_ptr(), 16)]))
        self.assertEqual(mode_stack(),
                         [] if self.hook else [self.adapter.mode])
        x.mul_(2)
        self.assertEqual(self.agent.named("launch")[-1][2],
                         "aten::mul_.Tensor")
        self.assertEqual(x.tolist(), [4.0] * 4)

    def test_an_operator_that_raises_leaves_the_modes_as_they_were(self):
        from npusan.torch import _adapter

        self.assertEqual(self.start(), (True, ""))
        before = _adapter.mode_stack()
        with self.assertRaises(RuntimeError):
            torch.ones(2) + torch.ones(3)
        self.assertEqual(_adapter.mode_stack(), before)
        x = torch.ones(4)
        x.add_(1)
        self.assertEqual(self.agent.named("launch")[-1][2],
                         "aten::add_.Tensor")

    def test_npusan_layer_costs_no_python_stack_mode(self):
        # PyTorch 1.13 reaches each mode through _TorchDispatchStackMode's
        # Python; with the C path, npusan's layer goes through ModeStack
        # and only the emulation's mode, below it, through PyTorch's.
        stack_mode = getattr(torch.utils._python_dispatch,
                             "_TorchDispatchStackMode", None)
        if stack_mode is None:
            self.skipTest("this PyTorch runs its mode stack in C++")
        self.assertEqual(self.start(), (True, ""))
        x = torch.ones(4)
        calls = []
        original = stack_mode.__torch_dispatch__

        def counted(mode, *args):
            calls.append(mode)
            return original(mode, *args)

        stack_mode.__torch_dispatch__ = counted
        try:
            x.add_(1)
        finally:
            stack_mode.__torch_dispatch__ = original
        self.assertEqual(len(calls), 1 if self.speedups else 2)
        self.assertEqual(self.agent.named("launch")[-1][2],
                         "aten::add_.Tensor")


def mode_stack() -> list:
    """This thread's dispatch modes of npusan's adapter (not the
    emulation's), innermost last."""
    from npusan.torch import _adapter

    return [m for m in _adapter.mode_stack()
            if type(m).__module__ == _adapter.__name__]


class Threads(StartCase):
    """Operators from every thread of the process reach the agent."""

    def ops_in_thread(self, stream, before=None):
        """Runs x * 2 on `stream` in a new thread, after `before` (an
        Event) is set; returns the thread and x."""
        x = torch.ones(8)

        def work():
            if before is not None:
                before.wait()
            with self.em.stream(stream):
                x.mul(2)

        t = threading.Thread(target=work)
        t.start()
        return t, x

    def setUp(self):
        super().setUp()
        from npusan.torch import emulate

        self.em = emulate

    def mul_launches(self):
        return [c for c in self.agent.named("launch")
                if c[2] == "aten::mul.Tensor"]

    def test_thread_started_after_enable(self):
        self.assertEqual(self.start(), (True, ""))
        s = self.em.Stream()
        t, x = self.ops_in_thread(s)
        t.join()
        self.assertEqual([c[1:4] for c in self.mul_launches()],
                         [(s.id, "aten::mul.Tensor", [(x.data_ptr(), 32)])])

    def test_thread_running_before_enable(self):
        s = self.em.Stream()
        go = threading.Event()
        t, x = self.ops_in_thread(s, go)
        on, err = self.start()
        go.set()
        t.join()
        self.assertTrue(on)
        if SPEEDUPS is not None and self.speedups:
            self.assertEqual(err, "")
            self.assertEqual(len(self.mul_launches()), 1)
        else:
            # Only the C path can reach a running thread.
            self.assertEqual(err, "npusan: 1 thread(s) started before "
                             "npusan.torch.enable() are not watched: the "
                             "adapter's C path (npusan._speedups) is not "
                             "loaded\n")

    def test_thread_leaves_the_modes_as_it_ends(self):
        # Modes still in a thread's C++ storage when its OS thread exits
        # are released there, taking the GIL: in a process that is exiting
        # meanwhile, that aborted it ("terminate called without an active
        # exception"). They are left before join() returns.
        self.assertEqual(self.start(), (True, ""))
        modes = self.adapter.thread_modes
        self.assertEqual(len(modes), 2)  # the emulation's and the adapter's
        before = [sys.getrefcount(m) for m in modes]
        t, _ = self.ops_in_thread(self.em.Stream())
        t.join()
        self.assertEqual(len(self.mul_launches()), 1)
        self.assertEqual([sys.getrefcount(m) for m in modes], before)

    def test_thread_profile_hook_of_the_user_runs_on(self):
        seen = []

        def user_hook(frame, event, arg):
            seen.append(event)
            sys.setprofile(None)

        threading.setprofile(user_hook)
        self.assertEqual(self.start(), (True, ""))
        s = self.em.Stream()
        t, _ = self.ops_in_thread(s)
        t.join()
        self.assertEqual(len(self.mul_launches()), 1)
        self.assertEqual(seen[:1], ["call"])


# A race from a worker thread: the main thread writes x on the default
# stream, a worker reads it on a side stream without waiting. ENABLE is
# where npusan.torch.enable() goes: before the worker starts, or after.
THREAD_RACE = """
    import sys, threading
    import torch
    import npusan.torch
    from npusan.torch import emulate as em

    {enable_before}
    go = threading.Event()

    def work():
        go.wait()
        with em.stream(side):
            y = x * 2  # the worker's read
        return y

    t = threading.Thread(target=work)
    t.start()
    {enable_after}
    x = torch.ones(256)
    side = em.Stream()
    go.set()
    t.join()
    em.synchronize()
    sys.exit(0 if npusan.torch.enabled() else 4)
"""


def analyze(trace: str) -> list:
    got = subprocess.run([NPUSANCTL, "analyze", "--json", trace],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60)
    if got.returncode not in (0, 1):
        raise AssertionError(got.stderr)
    return [json.loads(line) for line in got.stdout.splitlines()]


def run_child(code: str, module: bool = True,
              **env) -> subprocess.CompletedProcess:
    """Runs `code` as a script in a child, with python3 -m npusan.torch
    (`module`) or on its own."""
    full = dict(os.environ, PYTHONPATH=PACKAGE_DIR, NPUSAN_TORCH_DEVICE="cpu",
                NPUSAN_SOCKET="/nonexistent/npusand.sock")
    for var in ("NPUSAN", "NPUSAN_RECORD", "NPUSAN_LIBRARY"):
        full.pop(var, None)
    full.update(env)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    try:
        runner = ["-m", "npusan.torch"] if module else []
        return subprocess.run([sys.executable, *runner, f.name],
                              env=full, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.unlink(f.name)


class Start(unittest.TestCase):
    """python3 -m npusan.torch with the real library, or without one."""

    SCRIPT = """
        import sys, torch
        import npusan.torch
        x = torch.ones(4) + 1
        sys.exit(3 if npusan.torch.enabled() else 4)
    """

    def test_on_with_the_library(self):
        got = run_child(self.SCRIPT, NPUSAN_LIBRARY=LIBRARY)
        self.assertEqual((got.returncode, got.stdout, got.stderr), (3, "", ""))

    def test_missing_library_is_one_line_and_the_job_runs(self):
        got = run_child(self.SCRIPT, NPUSAN_LIBRARY="/nonexistent/libnpusan.so")
        self.assertEqual((got.returncode, got.stdout), (4, ""))
        self.assertEqual(len(got.stderr.splitlines()), 1, got.stderr)
        self.assertTrue(got.stderr.startswith(
            "npusan: off: cannot load libnpusan: /nonexistent/libnpusan.so"),
            got.stderr)

    HOOK_SCRIPT = """
        import sys, torch
        import npusan.torch
        x = torch.ones(4) + 1
        a = npusan.torch._running
        sys.exit(3 if a.on and a.hook is {} else 4)
    """

    def test_operators_go_through_the_dispatcher_hook(self):
        if HOOK is None:
            self.skipTest("npusan._torchhook is not built")
        got = run_child(self.HOOK_SCRIPT.format("not None"),
                        NPUSAN_LIBRARY=LIBRARY)
        self.assertEqual((got.returncode, got.stdout, got.stderr), (3, "", ""))

    def test_missing_hook_is_one_line_and_the_mode_runs(self):
        if HOOK is None:
            self.skipTest("npusan._torchhook is not built")
        with tempfile.TemporaryDirectory() as tmp:
            # The library and _speedups, without _torchhook beside them.
            for path in (LIBRARY, SPEEDUPS.__file__):
                os.symlink(os.path.abspath(path),
                           os.path.join(tmp, os.path.basename(path)))
            got = run_child(self.HOOK_SCRIPT.format("None"),
                            NPUSAN_LIBRARY=os.path.join(
                                tmp, os.path.basename(LIBRARY)))
        self.assertEqual((got.returncode, got.stdout), (3, ""), got.stderr)
        self.assertEqual(got.stderr, "npusan: the dispatcher hook "
                         "(npusan._torchhook) is not used (not built): the "
                         "dispatch mode runs instead\n")

    BACKWARD_RACE = """
        import torch
        import npusan.torch
        from npusan.torch import emulate

        npusan.torch.enable()
        x = torch.ones(4, requires_grad=True)
        y = x * 3
        with emulate.stream(emulate.Stream()):
            g = torch.ones(4)
        # backward's mul reads g on the default stream, with no wait.
        y.backward(g)
    """

    def test_race_with_a_backward_operator_is_found(self):
        # Below autograd, as CSAN's mode: backward's operators too, with
        # the autograd engine's thread-local state. In a child: PyTorch 2
        # starts autograd's threads at the first backward, which the
        # Threads cases would then count.
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "run.trace")
            got = run_child(self.BACKWARD_RACE, NPUSAN_LIBRARY=LIBRARY,
                            NPUSAN_RECORD=trace, module=False)
            self.assertEqual((got.returncode, got.stdout, got.stderr),
                             (0, "", ""))
            found = analyze(trace)
        # (_make_grads' is_same_size reads g before, without a wait too.)
        races = [(f["access"]["op"], f["previous"]["op"]) for f in found
                 if f["kind"] == "data_race"]
        self.assertIn(("aten::mul.Tensor", "aten::ones"), races, found)

    def test_npusan_0_is_silently_off(self):
        got = run_child(self.SCRIPT, NPUSAN_LIBRARY=LIBRARY, NPUSAN="0")
        self.assertEqual((got.returncode, got.stdout, got.stderr), (4, "", ""))

    def test_unknown_device_is_one_line(self):
        got = run_child(self.SCRIPT, NPUSAN_LIBRARY=LIBRARY,
                        NPUSAN_TORCH_DEVICE="tpu")
        self.assertEqual((got.returncode, got.stdout), (4, ""))
        self.assertEqual(got.stderr, "npusan: off: NPUSAN_TORCH_DEVICE=tpu: "
                         "not one of npu, cuda, cpu, auto\n")

    def test_no_torch_is_one_line_and_the_job_runs(self):
        with tempfile.TemporaryDirectory() as shadow:
            # A torch that cannot be imported, ahead of the real one.
            os.mkdir(os.path.join(shadow, "torch"))
            with open(os.path.join(shadow, "torch", "__init__.py"), "w") as f:
                f.write("raise ImportError('no torch here')\n")
            got = run_child("import sys, npusan.torch\n"
                            "sys.exit(3 if npusan.torch.enabled() else 4)\n",
                            NPUSAN_LIBRARY=LIBRARY,
                            PYTHONPATH=shadow + os.pathsep + PACKAGE_DIR)
        self.assertEqual((got.returncode, got.stdout, got.stderr),
                         (4, "", "npusan: off: no torch here\n"))

    def thread_race(self, before: bool):
        """The findings of THREAD_RACE, run with python3 (not -m), and its
        stderr."""
        enable = "npusan.torch.enable()"
        code = textwrap.dedent(THREAD_RACE).format(
            enable_before=enable if before else "",
            enable_after="" if before else enable)
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "run.trace")
            got = run_child(code, NPUSAN_LIBRARY=LIBRARY,
                            NPUSAN_RECORD=trace, module=False)
            self.assertEqual((got.returncode, got.stdout), (0, ""),
                             got.stderr)
            return analyze(trace), got.stderr

    def assertWorkerRace(self, found):
        self.assertEqual([f["kind"] for f in found], ["data_race"], found)
        access = found[0]["access"]
        self.assertEqual((access["op"], access["type"]),
                         ("aten::mul.Tensor", "read"))
        self.assertRegex(access["stack"][0], r":\d+ in work$")
        self.assertEqual(found[0]["previous"]["op"], "aten::ones")

    def test_race_from_a_thread_started_after_enable_is_found(self):
        found, err = self.thread_race(before=True)
        self.assertEqual(err, "")
        self.assertWorkerRace(found)

    def test_race_from_a_thread_started_before_enable(self):
        found, err = self.thread_race(before=False)
        if SPEEDUPS is None:
            # Only the C path reaches a thread already running.
            self.assertIn("1 thread(s) started before", err)
            self.assertEqual(found, [])
        else:
            self.assertEqual(err, "")
            self.assertWorkerRace(found)

    def test_script_arguments_and_exit_status(self):
        got = run_child("import sys; sys.exit(len(sys.argv))",
                        NPUSAN_LIBRARY=LIBRARY)
        self.assertEqual(got.returncode, 1)



class StartAsRoot(unittest.TestCase):
    """The start in fork workers, which needs root to raise a thread's
    priority back: run alone with --root, a skip (77) when not root."""

    WORKERS = """
        import multiprocessing, os, threading, torch
        import npusan.torch
        npusan.torch.enable()

        def work(n):
            # The worker's recorder starts at its first operation, on this
            # thread's CPU and niceness: one CPU, the lowest priority, so
            # that it lags far behind the operations that follow at full
            # priority, and only a wait at the worker's exit saves them.
            me = threading.get_native_id()
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            os.setpriority(os.PRIO_PROCESS, me, 19)
            x = torch.zeros(64)
            os.setpriority(os.PRIO_PROCESS, me, 0)
            for _ in range(n):
                x.add_(1)

        if __name__ == "__main__":
            ctx = multiprocessing.get_context("fork")
            procs = [ctx.Process(target=work, args=(500,)) for _ in range(4)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
    """

    def test_fork_workers_record_every_operation(self):
        # multiprocessing's fork workers end with os._exit(), right after
        # their last operation: their recordings must hold every one.
        with tempfile.TemporaryDirectory() as tmp:
            got = run_child(self.WORKERS, NPUSAN_LIBRARY=LIBRARY,
                            NPUSAN_RECORD=os.path.join(tmp, "run.%p.trace"),
                            module=False)
            self.assertEqual((got.returncode, got.stdout), (0, ""),
                             got.stderr)
            adds = []
            for name in sorted(os.listdir(tmp)):
                with open(os.path.join(tmp, name)) as f:
                    n = sum(" op=aten::add_" in line for line in f)
                if n:
                    adds.append(n)
            self.assertEqual(adds, [500] * 4)


def main() -> None:
    global torch, LIBRARY, NPUSANCTL, SPEEDUPS, HOOK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True)
    ap.add_argument("--speedups")
    ap.add_argument("--torchhook")
    ap.add_argument("--npusanctl", required=True)
    ap.add_argument("--root", action="store_true",
                    help="run only the tests that need root (StartAsRoot)")
    args = ap.parse_args()
    LIBRARY = args.library
    NPUSANCTL = args.npusanctl
    try:
        import torch as t
    except ImportError as err:
        print(f"test_torch_adapter: skipped: no torch ({err})")
        sys.exit(77)
    torch = t
    if args.root and os.geteuid() != 0:
        print("test_torch_adapter --root: skipped: needs root, to raise a "
              "thread's priority back")
        sys.exit(77)
    import torch.utils._python_dispatch  # noqa: F401

    sys.path.insert(0, PACKAGE_DIR)
    if args.speedups:
        from npusan import _lib

        SPEEDUPS = _lib.load_speedups(LIBRARY)
        if SPEEDUPS is None or not os.path.samefile(SPEEDUPS.__file__,
                                                     args.speedups):
            sys.exit(f"test_torch_adapter: {args.speedups} did not load")
        for case in (Ranges, Operators, Streams, PythonStacks, Failures,
                     Proof, Threads, OtherModes):
            twin = type(case.__name__ + "_C", (case,), {"speedups": True})
            globals()[twin.__name__] = twin
    if args.speedups and args.torchhook:
        HOOK, why = _lib.load_torchhook(LIBRARY)
        if HOOK is None or not os.path.samefile(HOOK.__file__,
                                                 args.torchhook):
            sys.exit(f"test_torch_adapter: {args.torchhook} did not load: "
                     f"{why}")
        for case in (Ranges, Operators, Streams, PythonStacks, Failures,
                     Proof, Threads, OtherModes):
            twin = type(case.__name__ + "_Hook", (case,),
                        {"speedups": True, "hook": True})
            globals()[twin.__name__] = twin
    if HOOK is None:
        del globals()["HookFallback"]
    # Without --root, every case but StartAsRoot, which has an entry of its
    # own (torch_adapter_root), so that a skip shows as one.
    names = ["StartAsRoot"] if args.root else [
        name for name, case in globals().items()
        if isinstance(case, type) and issubclass(case, unittest.TestCase)
        and name != "StartAsRoot"]
    prog = unittest.main(argv=[sys.argv[0], "-v"] + names, exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
