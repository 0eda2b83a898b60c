"""Launching Triton kernels through ``torch.library.wrap_triton`` without ``None`` pointers, and
without Triton's per-launch bookkeeping in eager.

Note [no None pointers]: our kernels take optional tensors (D, z, delta_bias, initial state,
segment scratch) guarded by constexpr flags (``HAS_D``, ``LOCAL``, ...). Triton accepts ``None``
for such a pointer and specializes it away, but that path is the least exercised one in
Inductor's and AOTInductor's launch code for user-defined kernels (the C++ launcher has to drop
the argument exactly as Triton's specialization did). ``launcher(kernel)[grid](...)`` passes a small
placeholder tensor instead of every ``None``; the constexpr flags guarantee it is never read or
written, so results are the same and the kernel signature is the same on every path.

Note [eager launch cache]: in eager (``wrap_triton`` disabled: the op's real CUDA body) a launch
through ``JITFunction.run`` binds and specializes every argument, builds a string cache key, looks
up hooks and module names and builds launch metadata for the (empty) hook chain, for our
~30-argument kernels several times per op call. ``_Launcher`` keeps, per kernel, the compiled
kernels it has launched under a key of exactly what Triton specializes on (each tensor's dtype
and 16-byte alignment; each int's range, equality to 1 and divisibility by 16; constexpr values;
launch options; the device: ``tests/ops/common/test_triton_launch.py`` checks the key against
Triton's own specialization) and launches a cached one straight through its ``run`` (the
compiled launcher). A miss goes through ``JITFunction.run`` (which compiles if needed) and caches
what it returns. A launch hook (a profiler) or a pre-run hook sends every call the ordinary way.
A launcher made with ``LaunchOptions(cache=False)`` (``launch_options``) launches every call the
ordinary way (``benchmarks/selective_scan/host_overhead.py`` times both).

What it buys is modest (H200 host, 2026-12-01, us of host time per eager call, off -> on, two
runs): fwd+bwd 1415-1533 -> 1321-1411 fp32 and 1550-1780 -> 1419-1448 bf16 at (1, 1536, 4096,
16), 823-1098 -> 637-765 fp32 at (8, 4096, 2048, 16); the forward alone moved within the noise
(250-460 us). The rest is the ~20 small torch ops around the kernels (with every launch stubbed
out the launchers still take 100-160 us forward and 320-540 us backward) and the custom-op
dispatch; mamba-ssm's C++ calls take 15-30 / 60-140 us. So batch-1 eager calls stay host-bound
(GPU time 0.17 ms forward, 0.73-0.76 ms forward+backward at (1, 1536, 4096, 16)); CUDA graphs
(``torch.compile(mode="reduce-overhead")``) remove it.

Note [kernel sources under Inductor]: a traced launch is compiled by Inductor, which writes the
kernel's source and that of every ``@triton.jit`` function it calls into the compiled graph's
wrapper module inside a plain (not raw) triple-quoted string, compiled later from that string.
So a backslash escape in our kernel sources is interpreted on the way: the inline PTX
``"...;\n\tmov..."`` of the L1 prefetch became a line break inside a string literal, and every
``torch.compile`` of a training step on the lane backward's path failed with "SyntaxError:
unterminated string literal" (torch 2.11, H200, 2026-12-02). The kernels' sources hold no
backslashes (inline PTX on one line, ``;``-separated); ``tests/ops/common/test_kernel_sources.py``
checks every kernel's sources as Inductor collects them, round trip included.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from functools import partial
from itertools import repeat
from operator import is_, itemgetter
from typing import Any

import torch

from ssmscan.ops.common import launch_plan
from ssmscan.ops.common.launch_options import DEFAULT, LaunchOptions

_INT32 = (-(2**31), 2**31 - 1)
_DUMMIES: dict[torch.device, torch.Tensor] = {}
_TRITON: list[Any] = []
_NONES = repeat(None)


class _Params:
    """Per kernel: parameter names in order, which are constexpr, defaults; the cache. A
    JITFunction or, under TRITON_INTERPRET, an InterpretedFunction (no ``params``: which are
    constexpr is only needed by the fast path, CUDA only); both keep the Python ``fn``."""

    def __init__(self, jit: Any) -> None:
        sig = inspect.signature(getattr(jit, "fn", jit)).parameters
        self.names = list(sig)
        params = getattr(jit, "params", None)
        self.const = [p.is_constexpr for p in params] if params else [False] * len(self.names)
        self.defaults = {n: p.default for n, p in sig.items() if p.default is not p.empty}
        if any(v is None for v in self.defaults.values()):  # the fast path would key a
            # placeholder for it while a cache miss compiles with None
            raise TypeError(f"launcher: kernel parameters may not default to None: {self.names}")
        self.index = {n: i for i, n in enumerate(self.names)}
        self.cache: dict[tuple, Any] = {}
        self.plans: dict[tuple, Any] = {}


_PARAMS: dict[int, _Params] = {}


def _params(jit: Any) -> _Params:
    par = _PARAMS.get(id(jit))
    if par is None:
        par = _PARAMS[id(jit)] = _Params(jit)
    return par


def _spec(v: Any, const: bool) -> Any:
    """What Triton specializes a value on (``native_specialize_impl``)."""
    if const:
        return v
    if isinstance(v, torch.Tensor):
        return (v.dtype, v.data_ptr() % 16 == 0)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return (v == 1, v % 16 == 0, _INT32[0] <= v <= _INT32[1], v >= 0)
    return type(v)  # floats: Triton specializes on the type only


def _key(values: list, const: list[bool]) -> list:
    """``[_spec(v, c) for v, c in zip(values, const)]``, inlined for the two common cases (ints,
    tensors): this runs for every argument of every eager launch."""
    key: list[Any] = []
    add = key.append
    lo, hi = _INT32
    for v, c in zip(values, const):
        if c:
            add(v)
        elif type(v) is int:  # not bool (type(True) is bool)
            add((v == 1, v % 16 == 0, lo <= v <= hi, v >= 0))
        elif isinstance(v, torch.Tensor):
            add((v.dtype, v.data_ptr() % 16 == 0))
        else:
            add(_spec(v, False))
    return key


def _hooked(hook: Any) -> bool:
    """Whether a Triton launch hook is set: Triton 3.6 keeps a ``HookChain`` (empty unless a
    profiler added to it), earlier versions ``None`` or a callable."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


def _triton() -> list[Any]:
    """[triton.knobs, Triton's driver], imported once (not per launch)."""
    if not _TRITON:
        from triton import knobs
        from triton.runtime.driver import driver

        _TRITON.extend((knobs, driver))
    return _TRITON


def _dummy(like: torch.Tensor, eager: bool) -> torch.Tensor:
    """The placeholder for ``None`` pointers (Note [no None pointers]): eager, one per device;
    traced, a fresh one, so that graphs hold no constant tensor."""
    if not eager:
        return torch.empty(16, dtype=torch.float32, device=like.device)
    dummy = _DUMMIES.get(like.device)
    if dummy is None:
        dummy = _DUMMIES[like.device] = torch.empty(16, dtype=torch.float32, device=like.device)
    return dummy


def _no_nones(args: tuple, kwargs: dict, like: torch.Tensor, eager: bool) -> tuple[tuple, dict]:
    if any(map(is_, args, _NONES)) or any(map(is_, kwargs.values(), _NONES)):
        dummy = _dummy(like, eager)
        args = tuple(dummy if a is None else a for a in args)
        kwargs = {k: dummy if v is None else v for k, v in kwargs.items()}
    return args, kwargs


def _plan(par: _Params, n: int, kwargs: dict) -> tuple[Any, tuple[str, ...]]:
    """For a call with ``n`` positional arguments and these keyword names (in order): a getter
    of the remaining parameters' values in signature order from {defaults, kwargs} merged, and
    the launch options' names (``num_warps`` ...), made once per call signature."""
    sig = (n, *kwargs)
    plan = par.plans.get(sig)
    if plan is None:
        rest = par.names[n:]
        lost = [r for r in rest if r not in kwargs and r not in par.defaults]
        if lost:
            raise TypeError(f"launch of {par.names} is missing arguments {lost}")
        if len(rest) == 0:
            get: Any = lambda d: ()  # noqa: E731
        elif len(rest) == 1:
            get = lambda d, r=rest[0]: (d[r],)  # noqa: E731
        else:
            get = itemgetter(*rest)
        opts = tuple(sorted(k for k in kwargs if k not in par.index))
        plan = par.plans[sig] = (get, opts)
    return plan


def launch_hooked() -> bool:
    """Whether a Triton launch hook (a profiler) is set: launches then go the ordinary way."""
    rt = _triton()[0].runtime
    return _hooked(rt.launch_enter_hook) or _hooked(rt.launch_exit_hook)


def _fast_launch(
    jit: Any,
    grid: tuple[int, ...],
    args: tuple,
    kwargs: dict,
    check: Callable[[Any], None] | None,
    like: torch.Tensor,
    capture: list | None = None,
) -> Any:
    """The eager CUDA launch (Note [eager launch cache]); with ``capture`` (a plan's record,
    Note [eager launch plans]) it appends (compiled kernel, grid, values, device, stream getter,
    kernel) for a launch a plan can replay."""
    knobs, driver = _triton()
    rt = knobs.runtime
    if _hooked(rt.launch_enter_hook) or _hooked(rt.launch_exit_hook) or jit.pre_run_hooks:
        args, kwargs = _no_nones(args, kwargs, like, True)
        return jit[grid](*args, **kwargs)
    par = _params(jit)
    get, opts = _plan(par, len(args), kwargs)
    values = [*args, *get({**par.defaults, **kwargs})]
    if any(map(is_, values, _NONES)):
        dummy = _dummy(like, True)
        values = [dummy if v is None else v for v in values]
    options = tuple([(k, kwargs[k]) for k in opts])
    device = driver.active.get_current_device()
    key = (device, options, *_key(values, par.const))
    compiled = par.cache.get(key)
    if compiled is None:
        args, kwargs = _no_nones(args, kwargs, like, True)
        if check is not None:  # compiled and checked before its first launch
            check(jit.warmup(*args, grid=grid, **kwargs))
        compiled = jit[grid](*args, **kwargs)
        if compiled is not None and not hasattr(compiled, "result"):  # not an async compile
            par.cache[key] = compiled
            if capture is not None:
                capture.append(
                    (compiled, grid, values, device, driver.active.get_current_stream, jit)
                )
        return compiled
    g = (*grid, 1, 1)
    stream = driver.active.get_current_stream(device)
    compiled.run(
        g[0],
        g[1],
        g[2],
        stream,
        compiled.function,
        compiled.packed_metadata,
        None,
        None,
        None,
        *values,
    )
    if capture is not None:
        capture.append((compiled, grid, values, device, driver.active.get_current_stream, jit))
    return compiled


def _flat(v: Any) -> Any:
    """Note [flat traced tensors]: torch 2.11's Inductor (fixed in 2.12, pytorch#181735)
    decomposes a functionalized user-kernel call by tracing it twice and asserts the two graphs
    have as many nodes; the clone of a mutated tensor with a size-1 dimension whose stride is
    symbolic (``torch.compile(dynamic=True)``: a (batch, 1, dim, NP) partial sum, a batch-1
    output) simplifies differently in the two traces, and the compile fails. Our kernels take
    only pointers and compute offsets from int arguments, so a contiguous tensor is passed as
    its 1-D view: same pointer, no such dimension."""
    if isinstance(v, torch.Tensor) and v.dim() > 1 and v.is_contiguous():
        return v.view(-1)
    return v


def _first_tensor(args: tuple, kwargs: dict) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    return next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))


class _Launcher:
    def __init__(
        self, kernel: Any, check: Callable[[Any], None] | None, options: LaunchOptions = DEFAULT
    ) -> None:
        from torch._library.triton import set_wrap_triton_enabled

        self._jit = kernel
        # wrap_triton returns the bare kernel when called with wrapping disabled (as it is in
        # the ops' eager bodies): a launcher first made in an eager call would then launch the
        # bare kernel on fake tensors when traced later (order-dependent compile failures)
        with set_wrap_triton_enabled(True):
            self._kernel = torch.library.wrap_triton(kernel)
        self._check = check
        self._cache = options.cache  # Note [eager launch cache]
        self._check_traced = options.check_traced  # Note [traced layout checks]
        self._checked: dict[int, Any] = {}  # compiled kernels checked (not via the fast path)

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
        return partial(self._launch, grid)

    def _launch(self, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
        from torch._library.triton import is_wrap_triton_enabled

        rec = launch_plan.recorder()
        if rec is not None:
            return self._recorded(rec, grid, args, kwargs)
        wrapping = is_wrap_triton_enabled()
        like = _first_tensor(args, kwargs)
        if self._cache and not wrapping and like.is_cuda:
            return _fast_launch(self._jit, grid, args, kwargs, self._check, like)
        args, kwargs = self.traced_args(args, kwargs, like)
        if self._check is not None and like.is_cuda and wrapping and self._check_traced:
            traced_check(self._jit, self._check, args, kwargs, _trace_target())
        if self._check is not None and like.is_cuda and not wrapping:
            compiled = self._jit.warmup(*args, grid=grid, **kwargs)
            if id(compiled) not in self._checked:  # the TTGIR read once per kernel
                self._check(compiled)
                self._checked[id(compiled)] = compiled
        return self._kernel[grid](*args, **kwargs)

    def traced_args(self, args: tuple, kwargs: dict, like: torch.Tensor) -> tuple[tuple, dict]:
        """The arguments of a launch that is not the eager CUDA fast path (traced, or the
        interpreter): no None (Note [no None pointers]), contiguous tensors flattened (Note [flat
        traced tensors]), every parameter passed, constexpr defaults included (the tracer checks
        the argument list against the signature and does not apply defaults: a kernel launched
        without its defaulted constexprs failed to compile)."""
        args, kwargs = _no_nones(args, kwargs, like, False)
        args = tuple(_flat(a) for a in args)
        kwargs = {k: _flat(v) for k, v in kwargs.items()}
        par = _params(self._jit)
        given = set(par.names[: len(args)]) | set(kwargs)
        missing = {n: v for n, v in par.defaults.items() if n not in given}
        if missing:
            kwargs = {**kwargs, **missing}
        return args, kwargs

    def _recorded(self, rec: Any, grid: tuple[int, ...], args: tuple, kwargs: dict) -> Any:
        """A launch inside a plan's record (Note [eager launch plans]): run as usual with the
        record paused (Triton's and the interpreter's own tensor work is not ours to replay),
        then reported as a compiled kernel's launch (eager CUDA) or as this call."""
        from torch._library.triton import is_wrap_triton_enabled

        capture: list = []
        rec.paused = True
        try:
            like = _first_tensor(args, kwargs)
            if self._cache and not is_wrap_triton_enabled() and like.is_cuda:
                result = _fast_launch(self._jit, grid, args, kwargs, self._check, like, capture)
            else:
                launch_plan.TLS.recorder = None  # the ordinary path, not recorded again
                try:
                    result = self._launch(grid, *args, **kwargs)
                finally:
                    launch_plan.TLS.recorder = rec
        finally:
            rec.paused = False
        if capture:
            rec.launched(*capture[0])
        else:
            rec.called(self, grid, args, kwargs)
        return result


# Note [traced layout checks]: a launch traced for torch.compile / export (``wrap_triton`` on)
# is compiled later by Inductor, never by our launcher, so the check an eager launch runs on every
# kernel it compiles (the lane kernels' shuffle layouts) would not run at all, and a Triton whose
# layouts differ would give wrong results silently. A traced launch with a check therefore
# compiles the kernel for the current GPU as Triton's JIT would specialize the traced arguments
# (a tensor's dtype and 16-byte alignment from its storage offset, an int's value, 1 and
# divisibility by 16; a symbolic int as a plain i32; a symbolic constexpr, such as SPLIT = nseg > 1
# under dynamic shapes, at its hint, read without a guard) and runs the check on that, once per
# specialization; its failure reaches the launcher's fallback (the 2-D / split kernels) inside
# the trace. Without a GPU to target (tracing on a CPU-only machine) there is nothing to check.
# A launcher made with ``LaunchOptions(check_traced=False)`` skips it.
_TRACE_CHECKED: dict[tuple, BaseException | None] = {}
_TRITON_TYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.int8: "i8",
    torch.uint8: "u8",
}


def _trace_target() -> Any:
    """The current GPU's Triton target, or None without an active CUDA driver."""
    try:
        from triton.runtime.driver import driver

        return driver.active.get_current_target()
    except Exception:  # no GPU, no driver: nothing to compile for
        return None


def traced_check(jit: Any, check: Callable[[Any], None], args: tuple, kwargs: dict,
                 target: Any) -> None:  # fmt: skip
    """Note [traced layout checks]: compile ``jit`` for ``target`` as the JIT would specialize
    these (possibly fake) arguments and run ``check`` on it; raise what the check raised (again
    on later calls with the same specialization). Nothing when the target is None or an argument
    cannot be typed."""
    import triton

    if target is None or not hasattr(jit, "params"):
        return
    par = _params(jit)
    values = dict(zip(par.names, args))
    values.update({k: v for k, v in kwargs.items() if k in par.index})
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in par.index))
    sig: dict[str, str] = {}
    const: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    lo, hi = _INT32
    for i, name in enumerate(par.names):
        v = values[name] if name in values else par.defaults.get(name)
        if par.const[i]:
            if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
                # dynamic shapes: a symbolic constexpr (SPLIT=nseg > 1) is checked at its hint,
                # the value this trace was made with, read without adding a guard
                if not v.node.has_hint():
                    return
                v = v.node.hint
            sig[name], const[name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            ty = _TRITON_TYPES.get(v.dtype)
            if ty is None:
                return
            sig[name] = "*" + ty
            off = v.storage_offset()  # fresh storages are aligned; a symbolic offset (dynamic
            # shapes) is not decided here (no guard): the pointer is taken as unaligned
            if type(off) is int and (off * v.element_size()) % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif type(v) is bool:
            sig[name] = "i1"
        elif type(v) is int:
            if v == 1:  # Triton specializes an int equal to 1 as a constant
                sig[name], const[name] = "constexpr", 1
            else:
                sig[name] = "i32" if lo <= v <= hi else "i64"
                if v % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, torch.SymInt):
            sig[name] = "i32"
        elif type(v) is float:
            sig[name] = "fp32"
        else:
            return
    key = (id(jit), id(check), str(target), tuple(sig.items()), tuple(const.items()),
           tuple(attrs), options)  # fmt: skip
    if key not in _TRACE_CHECKED:
        src = triton.compiler.ASTSource(fn=jit, signature=sig, constexprs=const, attrs=attrs)
        try:
            compiled = triton.compile(src, target=target, options=dict(options))
        except Exception as e:  # our stand-in specialization, not the user's trace, failed
            warnings.warn(
                f"ssmscan: could not compile {jit.fn.__name__} to check its layout before "
                f"tracing ({type(e).__name__}: {e}); the traced launch is not checked",
                stacklevel=3,
            )
            _TRACE_CHECKED[key] = None
            return
        try:
            check(compiled)
            _TRACE_CHECKED[key] = None
        except Exception as e:  # the check's verdict, kept for this specialization
            _TRACE_CHECKED[key] = e
    failure = _TRACE_CHECKED[key]
    if failure is not None:
        raise failure


_LAUNCHERS: dict[tuple[int, Any, LaunchOptions], _Launcher] = {}


def launcher(
    kernel: Any, check: Callable[[Any], None] | None = None, options: LaunchOptions = DEFAULT
) -> _Launcher:
    """``launcher(kernel)[grid](*args, **kwargs)``: ``wrap_triton`` with ``None`` tensors replaced
    by a placeholder (Note [no None pointers]), eager launches through a cache of compiled
    kernels (Note [eager launch cache]). ``check(compiled)``, if given, sees every kernel an eager
    CUDA launch compiles before its first launch (and may raise). ``options``: how it launches
    (``LaunchOptions``: the cache, traced checks). One launcher per (module-level kernel, check,
    options), made on first use."""
    key = (id(kernel), check, options)
    made = _LAUNCHERS.get(key)
    if made is None:
        made = _LAUNCHERS[key] = _Launcher(kernel, check, options)
    return made
