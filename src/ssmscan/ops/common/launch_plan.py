"""Recorded eager launch plans: a launcher's host work done once per call signature.

Note [eager launch plans]
-------------------------
An eager call of our launchers (``triton_fwd.forward``, ``triton_bwd.backward``) is a few
Triton launches and allocations wrapped in Python that only looks at shapes, strides, dtypes,
devices and pointer alignment: the planner's inputs (``selective_scan.plan``), then the plan's
buffers and launches. At batch 1 that Python, not the GPU, sets the time of an eager call.
``planned(fn)`` keys every call by its *signature*: every argument's dtype, shape, strides,
device and address modulo 16, which arguments are the same tensor, the non-tensor arguments and
the current device (everything the planner reads). The second call with a signature (a first
one may never recur: varying lengths) runs ``fn`` normally while a ``TorchDispatchMode`` and the
launcher (``triton_launch``) record what it did: every aten op, every Triton launch (the
compiled kernel and its argument values), the result. Later calls with that signature replay
the record:

* tensors are named by slot (the arguments, each op's outputs); a replayed op runs again on
  this call's tensors, a replayed launch goes straight to Triton's compiled launcher
  (``CudaLauncher.launch``) with every pointer passed as an int (no ``data_ptr()`` call or driver
  pointer query per argument, no binding, no key);
* allocations and views used only by launches are not replayed at all: such buffers become byte
  offsets into one per-call arena (one allocation instead of one per buffer), views of the
  arguments their pointer plus the recorded offset (which depends only on shapes and strides).
  A view is an op whose schema says so *and* whose output lies in its base's storage: a schema
  only says the output *may* alias (torch 2.11 CUDA sends ``aten.contiguous`` of a transposed
  tensor to the mode as such, a fresh copy; taken for a view, a replayed backward read 381 MB
  off A's copy on the H200), so any other output stays an op in the replay. A launch taking a
  pointer other than the one its tensor's slot was made with rejects the record;
* the launches' grids, ints and constexprs are the recorded values (they derive from the key).

What makes a replay equal to the normal path: the launchers read no tensor data on the host, and
the record proves it (an op with a non-tensor result, such as ``item()``, rejects the record; so
does a tensor the record cannot name); everything else they decide
from what is in the key. Every kernel launch goes through ``launcher()`` (a launch made around it
would be missing from the replays; a test greps for one). A rejected signature runs the normal
path from then on, and so does a call while a recorded kernel has pre-run hooks.
``tests/ops/common/test_launch_plan.py`` checks the bookkeeping on CPU (with a fake compiled
launcher that writes through the int pointers), every interpreter test of the ops replays plans
(a second call with a signature), and the GPU tests compare replays with the normal path bit for
bit. Plans are not used while tracing or exporting (fake tensors), under a dispatch or
torch-function mode, functorch transforms, the profiler or a Triton launch hook, or for a call
given ``LaunchOptions(replay=False)`` or ``LaunchOptions(cache=False)`` (``launch_options``; both
on by default); the launchers behave exactly as before there.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from ssmscan.ops.common.launch_options import DEFAULT, LaunchOptions

# Recorded launches are on by default (``LaunchOptions.replay``; H200, 2026-12-01: the GPU tests
# pass, the plan GPU test clean under compute-sanitizer memcheck; host time to enqueue at (1, 1536,
# 4096) bf16 through the op: forward 254 -> 112 us, forward+backward 586 -> 248 us).
MAX_PLANS = 256  # per planned function; the oldest is dropped beyond it
ARENA_ALIGN = 256  # bytes: every arena buffer starts at a multiple (the allocator's own is 512)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
TLS = threading.local()  # .recorder: the record in progress on this thread, or None
_REJECTED = object()


def recorder() -> _Recorder | None:
    """The record in progress on this thread (the launcher reports its launches to it)."""
    return getattr(TLS, "recorder", None)


# --- keys -----------------------------------------------------------------------------------


def _arg_key(args: tuple) -> list | None:
    """The part of the key the arguments give, or None when one is not plannable (a tensor
    subclass such as a FakeTensor, an unexpected type). A tensor passed twice is part of it (the
    position of its first occurrence): a record names a tensor by one slot, so a call with B is C
    replays as such only for calls where B is C."""
    key: list[Any] = []
    add = key.append
    first: dict[int, int] = {}
    for i, a in enumerate(args):
        t = type(a)
        if a is None or t is bool:
            add(a)
        elif t is torch.Tensor or t is torch.nn.Parameter:
            j = first.setdefault(id(a), i)
            add((a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() % 16, j))
        elif t is int or t is float:
            add((t, a))
        else:
            return None
    return key


def _plannable() -> bool:
    """No tracing, mode, transform, profiler or launch hook that would need the normal path."""
    from torch._library.triton import is_wrap_triton_enabled

    from ssmscan.ops.common import triton_launch

    if is_wrap_triton_enabled():
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._are_functorch_transforms_active() or torch.autograd.profiler._is_profiler_enabled:
        return False
    return not triton_launch.launch_hooked()


@functools.cache
def _direct_launch_layout(launcher_cls: type) -> bool:
    """Whether Triton's compiled launcher class has Triton 3.6's call,
    ``__call__(gridX, gridY, gridZ, stream, function, *args)`` handing ``self.launch`` the grid,
    stream, function, cooperative / PDL flags, two scratch pointers and ``args`` unchanged: the
    layout a replay calls ``launch`` with directly. Any other (Triton 3.8 names the metadata and
    hooks, then hands ``launch`` annotations, a signature and the values as one tuple) is
    replayed through the launcher's own ``__call__``, whose arguments stay the same."""
    try:
        params = list(inspect.signature(launcher_cls.__call__).parameters)
    except (TypeError, ValueError, AttributeError):
        return False
    return params == ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]


def _current_device(args: tuple) -> int:
    """The current CUDA device when an argument is a CUDA tensor (the launcher's kernels are
    per current device), else -1."""
    for a in args:
        if type(a) in _PLAIN:
            return torch.cuda.current_device() if a.is_cuda else -1
    return -1


# --- recording ------------------------------------------------------------------------------


class _Slot:
    """A tensor in a template: slot ``i`` of the replay's tensor list."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


class _Recorder(TorchDispatchMode):
    """Records aten ops (as a dispatch mode) and launches (reported by the launcher) of one
    normal call; ``paused`` while a launch runs (Triton's own host work, the interpreter's
    copies, are not ours to replay)."""

    def __init__(self, args: tuple) -> None:
        super().__init__()
        # tensor -> slot by identity, held weakly: a tensor this mode still holds when it
        # returns it from an op comes back to the caller as a detached alias (an extra op)
        self.slot_of: Any = WeakIdKeyDictionary()
        self.ptr: list[int] = []  # slot -> its data pointer when made
        self.root: list[tuple[int, int]] = []  # slot -> (slot at its storage's start, offset)
        self.storage: list[int] = []  # slot -> its storage's data pointer when made (0: none)
        self.alloc: dict[int, tuple[int, torch.device]] = {}  # allocation slot -> bytes, device
        self.made: dict[int, tuple] = {}  # allocation slot -> (size, stride, dtype, device)
        self.consts: dict[int, torch.Tensor] = {}  # slot -> a tensor from outside (a placeholder)
        self.steps: list[tuple] = []
        self.jits: list[Any] = []  # kernels of the compiled launches
        self.n_args = len(args)
        self.ok = True
        self.why = ""
        self.paused = False
        for a in args:
            if type(a) in _PLAIN:
                self._new(a, None)
            else:
                self.ptr.append(0)
                self.storage.append(0)
                self.root.append((len(self.root), 0))

    def reject(self, why: str) -> None:
        if self.ok:
            self.ok, self.why = False, why

    def _new(self, t: torch.Tensor, root: tuple[int, int] | None) -> int:
        s = len(self.ptr)
        self.ptr.append(t.data_ptr())
        self.storage.append(t.untyped_storage().data_ptr())
        self.slot_of[t] = s
        self.root.append(root if root is not None else (s, 0))
        return s

    def _ref(self, x: Any) -> Any:
        """x with tensors replaced by their slots (in lists and tuples); a tensor from outside
        the call rejects the record unless it is the launcher's placeholder (a constant)."""
        if isinstance(x, torch.Tensor):
            s = self.slot_of.get(x)
            if s is None:
                if not _is_placeholder(x):
                    self.reject("a tensor from outside the call and its ops")
                s = self._new(x, None)
                self.consts[s] = x
            return _Slot(s)
        if type(x) in (list, tuple):
            return type(x)(self._ref(v) for v in x)
        return x

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused or not self.ok:
            return out
        targs, tkwargs = self._ref(args), {k: self._ref(v) for k, v in kwargs.items()}
        leaves = list(out) if isinstance(out, (tuple, list)) else [out]
        if not all(isinstance(o, torch.Tensor) for o in leaves):
            self.reject(f"{func} returned a non-tensor (a host read of tensor data)")
            return out
        view = func.is_view
        base = targs[0].i if view and targs and isinstance(targs[0], _Slot) else None
        slots: list[int] = []
        for o in leaves:
            s = self.slot_of.get(o)
            if s is None:  # a new tensor (an in-place / out= op returns its known argument)
                r = self.root[base][0] if base is not None else -1
                if r >= 0 and o.untyped_storage().data_ptr() == self.storage[r]:
                    # a view of its root's storage: its pointer is the root's plus an offset
                    s = self._new(o, (r, o.data_ptr() - self.ptr[r]))
                elif r >= 0:  # not in its base's storage after all: kept as an op in replays
                    view = False
                    s = self._new(o, None)
                else:
                    s = self._new(o, None)
                    if func in _ALLOCS:
                        self.alloc[s] = (o.untyped_storage().nbytes(), o.device)
                        self.made[s] = (tuple(o.shape), o.stride(), o.dtype, o.device)
            slots.append(s)
        single = not isinstance(out, (tuple, list))
        self.steps.append(("op", func, targs, tkwargs, slots, single, view))
        return out

    def launched(
        self, compiled: Any, grid: tuple, values: list, device: int, stream_of: Any,
        jit: Any = None,
    ) -> None:  # fmt: skip
        """A launch of a compiled kernel with these values (the launcher's eager CUDA path);
        ``jit`` its kernel (a replay declines while it has pre-run hooks)."""
        if not self.ok:
            return
        if jit is not None:
            self.jits.append(jit)
        for v in values:  # every pointer the launch takes is the one its slot was made with
            if isinstance(v, torch.Tensor):
                s = self.slot_of.get(v)
                if s is not None and self.ptr[s] != v.data_ptr():
                    self.reject(f"a launch argument's pointer is not its slot's (slot {s})")
                    return
        run = compiled.run
        run_cls: Any = type(run)
        fast = (
            hasattr(run, "launch")
            and _direct_launch_layout(run_cls)
            and not getattr(run, "global_scratch_size", 1)
            and not getattr(run, "profile_scratch_size", 1)
        )
        g = (*grid, 1, 1)
        self.steps.append(
            ("launch", compiled, (g[0], g[1], g[2]), self._ref(list(values)), device, stream_of,
             fast)
        )  # fmt: skip

    def called(self, launcher: Any, grid: tuple, args: tuple, kwargs: dict) -> None:
        """A launch through the launcher's ordinary path (the interpreter, a cache miss that
        could not be recorded as a compiled kernel): replayed as the same call."""
        if not self.ok:
            return
        self.steps.append(
            ("call", launcher, grid, self._ref(args), {k: self._ref(v) for k, v in kwargs.items()})
        )


def _is_placeholder(t: torch.Tensor) -> bool:
    """The launcher's placeholder for None pointers (Note [no None pointers]): the only tensor
    from outside a call that a plan may hold."""
    from ssmscan.ops.common import triton_launch

    return any(t is d for d in triton_launch._DUMMIES.values())


_ALLOCS = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_strided.default,
    torch.ops.aten.empty_like.default,
}


# --- the plan -------------------------------------------------------------------------------


def _slots_in(x: Any) -> list[int]:
    if isinstance(x, _Slot):
        return [x.i]
    if type(x) in (list, tuple):
        return [s for v in x for s in _slots_in(v)]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _slots_in(v)]
    return []


class Plan:
    """The replayable form of a record (Note [eager launch plans])."""

    def __init__(self, rec: _Recorder, result: Any) -> None:
        self.n_slots = len(rec.ptr)
        self.jits = tuple({id(j): j for j in rec.jits}.values())
        self.n_args = rec.n_args
        self.consts = dict(rec.consts)
        self.result = rec._ref(result)
        if not rec.ok or set(_slots_in(self.result)) & set(self.consts):
            raise _Unplannable(rec.why or "the result holds a placeholder")
        # which slots must exist as tensors: the result, every op's and call's tensors
        needed = set(_slots_in(self.result))
        kept: list[bool] = [True] * len(rec.steps)
        for i in range(len(rec.steps) - 1, -1, -1):
            step = rec.steps[i]
            if step[0] == "op":
                _, func, targs, tkwargs, outs, _single, view = step
                if (view or func in _ALLOCS) and not needed.intersection(outs):
                    kept[i] = False  # its outputs are needed only as pointers
                    continue
                needed.update(_slots_in(targs), _slots_in(tkwargs))
            elif step[0] == "call":
                needed.update(_slots_in(step[3]), _slots_in(step[4]))
        produced = set(range(self.n_args)) | set(self.consts)
        for step, keep in zip(rec.steps, kept):
            if keep and step[0] == "op":
                produced.update(step[4])
        # pointers of tensors that are not produced: offsets into the arena (allocations) or
        # from a produced tensor (views of the arguments)
        self.arena_device: torch.device | None = None
        arena: dict[int, int] = {}
        size = 0
        self.steps: list[tuple] = []
        for step, keep in zip(rec.steps, kept):
            if not keep:
                continue
            if step[0] == "launch":
                _, compiled, grid, vals, device, stream_of, fast = step
                const_vals = [None if isinstance(v, _Slot) else v for v in vals]
                refs: list[
                    tuple[int, int, int]
                ] = []  # (position, slot or -1 for the arena, offset)
                for pos, v in enumerate(vals):
                    if not isinstance(v, _Slot):
                        continue
                    if v.i in produced:
                        refs.append((pos, v.i, 0))
                        continue
                    r, off = rec.root[v.i]
                    if r in produced:
                        refs.append((pos, r, off))
                    elif r in rec.alloc:
                        if r not in arena:
                            nbytes, dev = rec.alloc[r]
                            if self.arena_device is None:
                                self.arena_device = dev
                            elif dev != self.arena_device:
                                raise _Unplannable("buffers on two devices")
                            arena[r] = size
                            size += -(-nbytes // ARENA_ALIGN) * ARENA_ALIGN
                        refs.append((pos, -1, arena[r] + off))
                    else:
                        raise _Unplannable(f"a launch argument (slot {v.i}) has no known storage")
                run = compiled.run
                fn = run.launch if fast else run
                head = (
                    (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     compiled.packed_metadata, None, None, None)
                    if fast else (compiled.function, compiled.packed_metadata, None, None, None)
                )  # fmt: skip
                self.steps.append(("launch", fn, grid, head, const_vals, refs, device, stream_of))
            elif step[0] == "op" and step[1] in _ALLOCS and not step[3].get("pin_memory"):
                # an allocation: what it made, as plain ``torch.empty`` (a third of the host
                # time of calling the aten overload)
                shape, stride, dtype, dev = rec.made[step[4][0]]
                contiguous = stride == _contiguous_strides(shape)
                self.steps.append(("empty", shape, None if contiguous else stride, dtype, dev,
                                   step[4][0]))  # fmt: skip
            elif step[0] == "op":
                _, func, targs, tkwargs, outs, single, _view = step
                consts = [None if isinstance(v, _Slot) else v for v in targs]
                arefs = [(pos, v.i) for pos, v in enumerate(targs) if isinstance(v, _Slot)]
                nested = any(_slots_in(v) for v in consts)  # e.g. a list of tensors
                self.steps.append(
                    ("op", func, consts, arefs, targs if nested else None, tkwargs,
                     bool(_slots_in(tkwargs)), outs, single)
                )  # fmt: skip
            else:
                self.steps.append(step)
        self.arena_bytes = size
        self.n_ops = sum(1 for s in self.steps if s[0] in ("op", "empty"))
        self.n_launches = sum(1 for s in self.steps if s[0] in ("launch", "call"))

    def hooked(self) -> bool:
        """Whether a kernel of the plan has pre-run hooks now (the launcher honours them: the
        call takes the normal path)."""
        return any(j.pre_run_hooks for j in self.jits)

    def run(self, args: tuple) -> Any:
        slots: list[Any] = [*args, *([None] * (self.n_slots - self.n_args))]
        for s, t in self.consts.items():
            slots[s] = t
        base = 0
        if self.arena_bytes:
            arena = torch.empty(self.arena_bytes, dtype=torch.uint8, device=self.arena_device)
            base = arena.data_ptr()
        for step in self.steps:
            kind = step[0]
            if kind == "launch":
                _, fn, grid, head, const_vals, refs, device, stream_of = step
                vals = list(const_vals)
                for pos, s, off in refs:
                    vals[pos] = (base if s < 0 else slots[s].data_ptr()) + off
                fn(grid[0], grid[1], grid[2], stream_of(device), *head, *vals)
            elif kind == "empty":
                _, size, stride, dtype, dev, out_slot = step
                slots[out_slot] = (
                    torch.empty(size, dtype=dtype, device=dev)
                    if stride is None
                    else torch.empty_strided(size, stride, dtype=dtype, device=dev)
                )
            elif kind == "op":
                _, func, consts, arefs, nested, tkwargs, kw_slots, outs, single = step
                if nested is not None:
                    a = _fill(nested, slots)
                elif arefs:
                    a = list(consts)
                    for pos, s in arefs:
                        a[pos] = slots[s]
                else:
                    a = consts
                if kw_slots:
                    out = func(*a, **{k: _fill(v, slots) for k, v in tkwargs.items()})
                else:
                    out = func(*a, **tkwargs)
                if single:
                    slots[outs[0]] = out
                else:
                    for s, o in zip(outs, out):
                        slots[s] = o
            else:  # "call"
                _, launcher, grid, targs, tkwargs = step
                launcher._launch(
                    grid, *_fill(targs, slots), **{k: _fill(v, slots) for k, v in tkwargs.items()}
                )
        return _fill(self.result, slots)


def _contiguous_strides(size: tuple) -> tuple:
    strides = []
    acc = 1
    for n in reversed(size):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _fill(x: Any, slots: list) -> Any:
    if isinstance(x, _Slot):
        return slots[x.i]
    if type(x) in (list, tuple):
        return type(x)(_fill(v, slots) for v in x)
    return x


class _Unplannable(Exception):
    pass


# --- the decorator --------------------------------------------------------------------------


class _Planned:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.plans: dict[tuple, Any] = {}
        self.seen: dict[tuple, None] = {}  # keys called once: recorded on their second call
        self.rejected: dict[tuple, str] = {}  # key -> why (tests and benchmarks read it)

    def __call__(self, *args: Any, options: LaunchOptions = DEFAULT) -> Any:
        if not (options.replay and options.cache) or not _plannable() or recorder() is not None:
            return self.fn(*args, options=options)
        ak = _arg_key(args)
        if ak is None:
            return self.fn(*args, options=options)
        key = (_current_device(args), options, *ak)
        plan = self.plans.get(key)
        if plan is not None:
            if plan is _REJECTED or plan.hooked():
                return self.fn(*args, options=options)
            return plan.run(args)
        if key not in self.seen:  # a signature seen once (varying lengths) costs no record
            _put(self.seen, key, None)
            return self.fn(*args, options=options)
        self.seen.pop(key, None)
        return self._record(key, args, options)

    def _record(self, key: tuple, args: tuple, options: LaunchOptions) -> Any:
        rec = _Recorder(args)
        TLS.recorder = rec
        try:
            with rec:
                result = self.fn(*args, options=options)
        finally:
            TLS.recorder = None
        plan: Any = _REJECTED
        if rec.ok:
            try:
                plan = Plan(rec, result)
            except _Unplannable as e:
                rec.reject(str(e))
        if plan is _REJECTED:
            _put(self.rejected, key, rec.why)
        _put(self.plans, key, plan)
        return result


def _put(d: dict, key: tuple, value: Any) -> None:
    """d[key] = value, the oldest entry dropped beyond MAX_PLANS (safe against another thread
    dropping it first)."""
    if len(d) >= MAX_PLANS:
        try:
            d.pop(next(iter(d)), None)
        except (StopIteration, RuntimeError):  # emptied or resized by another thread
            pass
    d[key] = value


def planned(fn: Callable[..., Any]) -> _Planned:
    """Decorator: run ``fn`` through recorded launches (Note [eager launch plans]). ``fn`` takes
    tensors, None, bools, ints and floats positionally and the ``LaunchOptions`` as the keyword
    ``options`` (its launches use them; the decorated function takes them as ``options=``, the
    default ``launch_options.DEFAULT``), and returns tensors (in tuples and lists); what it
    launches must follow from the key (the arguments' signature, the options and the current
    device)."""
    planned_fn = _Planned(fn)
    wraps(fn)(planned_fn)
    return planned_fn
