"""Note [eager launch plans]: recorded plans replay a launcher's ops and launches.

CPU: a fake compiled launcher that computes through the int pointers it is given (ctypes), so the
arena and the pointer offsets are exercised without a GPU; rejections (a host read, a tensor from
outside, a setting changed during the call); the ops' launchers under the interpreter replaying
bit for bit; the launch options in a plan key. GPU: replays against the
normal path, bit for bit, over configurations (``test_plans_match_normal_path_gpu``)."""

from __future__ import annotations

import ctypes
import os
import re

import pytest
import torch

from ssmscan.ops.common import launch_plan
from ssmscan.ops.common.launch_options import LaunchOptions

_NO_REPLAY = LaunchOptions(replay=False)  # the launchers' normal path, call by call


@pytest.fixture(autouse=True)
def _eager_launches():
    """The launchers' eager path: ``wrap_triton`` off, as in the ops' bodies."""
    from torch._library.triton import set_wrap_triton_enabled

    with set_wrap_triton_enabled(False):
        yield


class _Run:
    """A compiled launcher's ``run`` as the plan sees it (``launch`` and its flags)."""

    global_scratch_size = 0
    profile_scratch_size = 0
    launch_cooperative_grid = 0
    launch_pdl = 0

    def __init__(self, op):
        self.op = op
        self.calls = 0

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):  # Triton 3.6's layout
        self.launch(gridX, gridY, gridZ, stream, function, 0, 0, None, None, *args)

    def launch(self, gx, gy, gz, stream, function, coop, pdl, gs, ps, meta, lm, eh, xh, *vals):
        self.calls += 1
        self.op(*vals)


class _Compiled:
    function = "fn"
    packed_metadata = (1, 1, 0)

    def __init__(self, op):
        self.run = _Run(op)


def _floats(ptr, n):
    return (ctypes.c_float * n).from_address(ptr)


def _kernel(body):
    """A fake kernel over n floats: ``body(src, dst, i)``, given tensors or int pointers."""

    def op(src, dst, n):
        s = _floats(src if isinstance(src, int) else src.data_ptr(), n)
        d = _floats(dst if isinstance(dst, int) else dst.data_ptr(), n)
        for i in range(n):
            d[i] = body(s, i)

    return _Compiled(op)


_DOUBLE = _kernel(lambda s, i: 2.0 * s[i])
_PLUS = _kernel(lambda s, i: s[i] + 1.0)


class _Jit:
    pre_run_hooks: tuple = ()


_JIT = _Jit()


def _launch(compiled, *vals):
    """What the launcher does in eager CUDA: launch, and report to a record in progress."""
    rec = launch_plan.recorder()
    compiled.run.op(*vals)
    if rec is not None:
        rec.launched(compiled, (1,), list(vals), 0, lambda device: 0, _JIT)


@launch_plan.planned
def _chain(x, flag, *, options):
    """out = 2 x + 1 (+1 again with flag) through scratch views only the launches see (the
    fakes' launches are direct: ``options``, which a planned function is given, goes unused)."""
    n = x.numel()
    out = torch.empty_like(x)
    tmp = torch.empty((2, n), dtype=torch.float32)
    a, b = tmp.unbind(0)
    _launch(_DOUBLE, x, a, n)
    _launch(_PLUS, a, b if flag else out, n)
    if flag:
        _launch(_PLUS, b, out, n)
    return out, [out.view(-1)]


def test_fake_launches_replay_through_the_arena():
    x = torch.randn(37)
    first = _chain(x, True)
    assert not _chain.plans  # a signature's first call only counts
    first = _chain(x, True)  # the second records
    (plan,) = [p for p in _chain.plans.values()]
    assert isinstance(plan, launch_plan.Plan)
    # the scratch buffer and its views are pointers into the arena: only empty_like (the
    # result) and the result's view are replayed as ops
    assert plan.n_ops == 2 and plan.n_launches == 3
    assert plan.arena_bytes >= 2 * 37 * 4 and plan.arena_bytes % launch_plan.ARENA_ALIGN == 0
    calls = _PLUS.run.calls
    second = _chain(x, True)
    assert _PLUS.run.calls == calls + 2  # replayed through ``run.launch``
    torch.testing.assert_close(second[0], (2 * x + 1) + 1, rtol=0, atol=0)
    assert torch.equal(first[0], second[0]) and second[0].data_ptr() != first[0].data_ptr()
    assert second[1][0].data_ptr() == second[0].data_ptr()  # the view is of this call's output
    # another input: the same plan, this call's pointers
    y = torch.randn(37)
    torch.testing.assert_close(_chain(y, True)[0], (2 * y + 1) + 1, rtol=0, atol=0)
    assert len(_chain.plans) == 1
    # another signature (flag), another plan (from its second call)
    for _ in range(2):
        torch.testing.assert_close(_chain(y, False)[0], 2 * y + 1, rtol=0, atol=0)
    assert len(_chain.plans) == 2


@launch_plan.planned
def _reads_data(x, *, options):
    out = torch.empty_like(x)
    _launch(_DOUBLE, x, out, x.numel())
    if out[0].item() > 0:  # a host read: the result depends on the data
        out.add_(1)
    return (out,)


@launch_plan.planned
def _uses_outside_tensor(x, *, options):
    out = torch.empty_like(x)
    _launch(_DOUBLE, _OUTSIDE, out, x.numel())
    return (out,)


_OUTSIDE = torch.ones(4)


def test_records_that_cannot_be_replayed_are_rejected():
    for x in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 2.0])):  # both branches stay right
        (out,) = _reads_data(x)
        torch.testing.assert_close(out, 2 * x + (x[0] > 0), rtol=0, atol=0)
    assert any("non-tensor" in why for why in _reads_data.rejected.values())
    (out,) = _uses_outside_tensor(torch.zeros(4))
    (out,) = _uses_outside_tensor(torch.zeros(4))
    torch.testing.assert_close(out, 2 * _OUTSIDE, rtol=0, atol=0)
    assert any("outside" in why for why in _uses_outside_tensor.rejected.values())


# An op whose schema marks its output as an alias of its input but that may return a copy: on
# torch 2.11 CUDA ``aten.contiguous.default`` reached the record so (``is_view`` True, a fresh
# tensor), and a replayed backward on the H200 took a pointer 381 MB off A's copy (2026-12-01).
# A library op stands in for it here (on CPU torch 2.13 ``contiguous`` decomposes to ``clone``).
_TEST_LIB = torch.library.Library("ssmscan_plan_test", "DEF")
_TEST_LIB.define("copying_view(Tensor(a) x) -> Tensor(a)")
_TEST_LIB.impl("copying_view", lambda x: x.t().contiguous(), "CPU")


@launch_plan.planned
def _through_copying_view(x, *, options):
    y = torch.ops.ssmscan_plan_test.copying_view.default(x)
    out = torch.empty(y.shape)
    _launch(_DOUBLE, y, out, y.numel())
    return (out,)


@launch_plan.planned
def _moves_an_argument(x, other, *, options):
    # x now points elsewhere: not the pointer its slot was made with
    x.set_(other.untyped_storage(), 0, other.shape)
    out = torch.empty_like(other)
    _launch(_DOUBLE, x, out, other.numel())
    return (out,)


def test_an_op_marked_as_a_view_that_copies_is_replayed_as_an_op():
    """A view op's output outside its base's storage is no view: the op is kept in the replay
    (not turned into the base's pointer plus the record's offset, which points at freed memory)."""
    assert torch.ops.ssmscan_plan_test.copying_view.default.is_view
    for seed in range(4):  # seen, recorded, replayed twice on fresh values
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed))
        (out,) = _through_copying_view(x)
        torch.testing.assert_close(out, 2 * x.t(), rtol=0, atol=0)
    (plan,) = _through_copying_view.plans.values()
    assert isinstance(plan, launch_plan.Plan)
    ops = [str(st[1]) for st in plan.steps if st[0] == "op"]
    assert "ssmscan_plan_test.copying_view.default" in ops, ops


def test_a_launch_pointer_other_than_its_slots_rejects_the_record():
    for _ in range(2):  # seen, then recorded (and rejected)
        other = torch.randn(4)
        (out,) = _moves_an_argument(torch.zeros(4), other)
        torch.testing.assert_close(out, 2 * other, rtol=0, atol=0)
    assert any("pointer" in why for why in _moves_an_argument.rejected.values())


def test_no_plans_for_subclasses_modes_or_when_off():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(6)
    before = len(_chain.plans)
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(x)
        assert launch_plan._arg_key((fx,)) is None
    with torch.device("cpu"):  # a torch-function mode
        assert not launch_plan._plannable()
    for off in (_NO_REPLAY, LaunchOptions(cache=False)):  # replays need both
        for _ in range(3):
            torch.testing.assert_close(
                _chain(x, True, options=off)[0], (2 * x + 1) + 1, rtol=0, atol=0
            )
        assert len(_chain.plans) == before
    # other options, another plan: the options are part of the key
    traced_off = LaunchOptions(check_traced=False)
    for _ in range(2):
        _chain(x, True, options=traced_off)
    assert [k[1] for k in _chain.plans].count(traced_off) == 1


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
def test_op_launchers_replay_bit_for_bit_under_the_interpreter():
    """The selective scan's forward / backward launchers: the second call with a signature
    replays the record (the interpreter's launches as calls) and equals the first bit for bit,
    into fresh outputs; inputs differing in values only use the same plan."""
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd
    from ssmscan.testing import make_selective_scan_inputs

    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
    for seed in (1, 2):  # 2: other values, the same signature (replayed from its first call)
        kw = make_selective_scan_inputs(
            2, 5, 19, 4, dtype=torch.float32, device="cpu", has_initial_state=True, seed=seed,
            has_D=True, has_z=True, has_delta_bias=True, delta_softplus=True,
        )  # fmt: skip
        args = [kw[k] for k in names]
        dout = torch.randn_like(args[0])
        dlast = torch.randn(2, 5, 4)
        ref = triton_fwd.forward(*args, True, options=_NO_REPLAY)
        ref_g = triton_bwd.backward(dout, dlast, *args, ref[2], True, options=_NO_REPLAY)
        for _ in range(3 if seed == 1 else 1):  # seen, recorded, replayed
            got = triton_fwd.forward(*args, True)
            got_g = triton_bwd.backward(dout, dlast, *args, got[2], True)
            for r, g in zip(ref, got):
                assert torch.equal(r, g) and r.data_ptr() != g.data_ptr()
            for r, g in zip([*ref_g[:5], *ref_g[5]], [*got_g[:5], *got_g[5]]):
                assert torch.equal(r, g)
    for fn in (triton_fwd.forward, triton_bwd.backward):
        assert not fn.rejected
        assert any(isinstance(p, launch_plan.Plan) for p in fn.plans.values())


_GPU_CASES = {
    # id: (batch, dim, L, N, groups, dtype, optional inputs, initial state, dlast)
    "B2-D64-L777-N16-bf16": (2, 64, 777, 16, None, torch.bfloat16, True, False, False),
    "B1-D64-L5000-N16-fp32-segments": (1, 64, 5000, 16, None, torch.float32, True, True, True),
    "B1-D96-L1000-N16-bf16-G2-segments": (1, 96, 1000, 16, 2, torch.bfloat16, True, False, True),
    "B2-D40-L63-N4-fp16-bare": (2, 40, 63, 4, None, torch.float16, False, False, False),
    "B3-D32-L1-N16-fp32": (3, 32, 1, 16, None, torch.float32, True, True, False),
}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", list(_GPU_CASES), ids=list(_GPU_CASES))
def test_plans_match_normal_path_gpu(case):
    """Replayed plans (compiled launches with int pointers, the arena, views of the arguments)
    give the normal path's outputs and gradients bit for bit, into fresh tensors, on fresh
    inputs each call; a non-contiguous input (a transposed view) too; the main configurations
    record a plan (none rejected) that replays few ops."""
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd
    from ssmscan.testing import make_selective_scan_inputs

    batch, dim, L, N, groups, dtype, opt, init, with_dlast = _GPU_CASES[case]
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")

    def run(seed, strided, options=None):
        options = options or LaunchOptions()
        kw = make_selective_scan_inputs(
            batch, dim, L, N, groups=groups, dtype=dtype, device="cuda", has_D=opt, has_z=opt,
            has_delta_bias=opt, has_initial_state=init, seed=seed,
        )  # fmt: skip
        if strided:  # u as a (batch, L, dim) buffer's transpose
            kw["u"] = kw["u"].transpose(1, 2).contiguous().transpose(1, 2)
        args = [kw[k] for k in names]
        g = torch.Generator(device="cuda").manual_seed(seed + 100)
        dout = torch.randn(args[0].shape, generator=g, device="cuda").to(dtype)
        dlast = torch.randn(batch, dim, N, generator=g, device="cuda") if with_dlast else None
        fwd = triton_fwd.forward(*args, True, options=options)
        bwd = triton_bwd.backward(dout, dlast, *args, fwd[2], True, options=options)
        torch.cuda.synchronize()
        return [*fwd, *bwd[:5], *bwd[5]]

    for strided in (False, True):
        for seed in (1, 2, 3, 4):  # 1 is seen, 2 records, 3 and 4 replay (fresh values)
            ref = run(seed, strided, _NO_REPLAY)
            got = run(seed, strided)
            for i, (r, x) in enumerate(zip(ref, got)):
                assert torch.equal(r, x), (strided, seed, i)
                assert r.data_ptr() != x.data_ptr()
    for fn in (triton_fwd.forward, triton_bwd.backward):
        assert not fn.rejected, fn.rejected
        plans = [p for p in fn.plans.values() if isinstance(p, launch_plan.Plan)]
        assert plans and all(p.n_launches >= 1 for p in plans)


def test_direct_launch_matches_tritons_launcher_call(monkeypatch):
    """A replayed CUDA launch calls the compiled launcher's ``launch`` directly; its arguments
    must be exactly those Triton's own ``CudaLauncher.__call__`` passes for the call the
    launcher makes (``compiled.run(grid..., stream, function, metadata, None, None, None,
    *values)``), on the installed Triton (no GPU needed: ``launch`` is captured)."""
    try:
        import triton
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:
        pytest.skip("Triton's NVIDIA backend is not installed")

    seen = []

    class FakeRun:
        """Triton's launcher with its ``launch`` captured (attributes of Triton 3.6 to 3.8)."""

        __call__ = CudaLauncher.__call__
        global_scratch_size = 0
        global_scratch_align = 1
        profile_scratch_size = 0
        profile_scratch_align = 1
        launch_cooperative_grid = 0
        launch_pdl = 0
        num_ctas = 1
        gsan_enabled = False
        arg_annotations = ("annotations",)
        kernel_signature = "signature"

        def launch(self, *a):
            seen.append(a)

    run = FakeRun()
    values = [1234, 5678, 7, True]
    # Triton >= 3.7 looks the active driver up in every call (used only for profile scratch,
    # size 0 here): a stand-in, since a CPU-only machine has no active driver to create
    monkeypatch.setattr(triton.runtime.driver, "_active", object())
    CudaLauncher.__call__(run, 3, 2, 1, 99, "fn", "meta", None, None, None, *values)

    class Compiled:
        function = "fn"
        packed_metadata = "meta"

    comp = Compiled()
    comp.run = run
    rec = launch_plan._Recorder(())
    rec.launched(comp, (3, 2), values, 0, lambda device: 99)
    plan = launch_plan.Plan(rec, ())
    plan.run(())
    assert len(seen) == 2 and seen[1] == seen[0]
    # the replay calls ``launch`` itself exactly for Triton 3.6's launcher layout
    step = next(s for s in plan.steps if s[0] == "launch")
    direct = launch_plan._direct_launch_layout(CudaLauncher)
    assert (step[1] == run.launch) is direct and direct is triton.__version__.startswith("3.6")


@launch_plan.planned
def _add(x, y, *, options):
    out = torch.empty_like(x)
    _launch(_kernel(lambda s, i: s[i] + 1.0), x, out, x.numel())  # out = x + 1, then + y:
    out.add_(y)
    return (out,)


def test_a_tensor_passed_twice_is_part_of_the_key():
    """A record names a tensor by one slot: a call with the same tensor twice must not share a
    plan with calls of two tensors (nor the other way round)."""
    x, y = torch.randn(9), torch.randn(9)
    for _ in range(3):
        torch.testing.assert_close(_add(x, x)[0], (x + 1) + x, rtol=0, atol=0)
    for _ in range(3):
        torch.testing.assert_close(_add(x, y)[0], (x + 1) + y, rtol=0, atol=0)
    assert len([p for p in _add.plans.values() if isinstance(p, launch_plan.Plan)]) == 2


def test_pre_run_hooks_send_calls_the_normal_way(monkeypatch):
    """A kernel given a pre-run hook after the record (the launcher honours them): the plan
    declines and the call runs normally."""
    x = torch.randn(11)
    for _ in range(3):
        _chain(x, False)
    calls = []
    real = _chain.fn
    monkeypatch.setattr(_chain, "fn", lambda *a, **k: calls.append(1) or real(*a, **k))
    _chain(x, False)
    assert calls == []  # replayed
    monkeypatch.setattr(_Jit, "pre_run_hooks", (lambda *a, **k: None,))
    torch.testing.assert_close(_chain(x, False)[0], 2 * x + 1, rtol=0, atol=0)
    assert calls == [1]


def test_every_kernel_launch_goes_through_the_launcher():
    """A record sees launches through ``launcher()`` only: a kernel launched as ``kernel[grid]``
    directly would run in the record and be missing from every replay."""
    import pathlib

    root = pathlib.Path(launch_plan.__file__).parents[1]
    direct = re.compile(r"(?<!\))\b(_\w*_kernel)\s*\[")
    for path in root.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = direct.search(line)
            assert m is None or "launcher(" in line, f"{path}:{n}: {line.strip()}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_api_training_step_replays_on_the_engines_thread_gpu(monkeypatch):
    """A training step through ``ssmscan.selective_scan``: from the third step on, the forward
    replays on the caller's thread and the backward on the autograd engine's CUDA thread (the
    engine runs CUDA backward nodes there; a plan must hit there too)."""
    import threading

    import ssmscan
    from ssmscan.testing import make_selective_scan_inputs

    runs: list[str] = []
    real = launch_plan.Plan.run

    def counted(self, args):
        runs.append(threading.current_thread().name)
        return real(self, args)

    monkeypatch.setattr(launch_plan.Plan, "run", counted)
    kw = make_selective_scan_inputs(
        1, 64, 1024, 16, dtype=torch.bfloat16, device="cuda", has_D=True, has_z=True,
        has_delta_bias=True, delta_softplus=True,
    )  # fmt: skip
    leaves = {k: kw[k].clone().requires_grad_() for k in ("u", "delta", "A", "B", "C", "D", "z")}
    leaves["delta_bias"] = kw["delta_bias"].clone().requires_grad_()
    for step in range(4):
        runs.clear()
        out = ssmscan.selective_scan(**leaves, delta_softplus=True)
        torch.autograd.grad(out.float().square().sum(), list(leaves.values()))
        if step >= 2:
            main = threading.main_thread().name
            assert runs.count(main) >= 1 and len(runs) == 2, runs  # forward here, backward there
