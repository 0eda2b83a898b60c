"""Replace ssmscan's kernel ops by their parallel (aten) or loop (``higher_order.scan``) realization.

For backends that cannot run custom ops: ONNX, Torch-TensorRT, AOTInductor without Python. Each
``torch.ops.ssmscan.selective_scan_fwd`` / ``linear_scan_fwd`` / ``selective_state_update`` /
``ssd_scan_fwd`` node of an ``ExportedProgram`` (before or after ``run_decompositions()``) or
``GraphModule`` is traced anew from :mod:`ssmscan.ops.selective_scan.parallel` / ``loop`` (and the
``linear_scan`` and ``ssd_scan`` counterparts) with ``make_fx`` on the node's fake inputs, inside
the program's fake mode, and
spliced in its place; the loop's body becomes a submodule of the graph module. Every new node
carries a ``val``; a node is either replaced whole or left untouched, with the reason recorded.

Declined:

* ``selective_scan_fwd`` whose checkpoints output (its third) is read: only the backward reads it
  and the realizations compute none (export for inference, or keep the op);
* ``realization="parallel"`` with a dynamic length: the parallel scans (and the SSD chunks) are
  planned for a static length; ``realization="loop"`` takes any length;
* outputs used other than through ``getitem``; inputs without fake values.

Where the results run (torch 2.13 CPU, onnxscript 0.7.2, onnxruntime 1.32; tests in
``tests/passes/test_decompose_selective_scan.py``):

* ONNX: both export with ``torch.onnx.export(program, dynamo=True)`` and run in ONNX Runtime. The
  exporter translates ``higher_order.scan`` itself (``torch/onnx/_internal/exporter/_torchlib/ops/
  hop.py``: an ONNX ``Scan`` whose body is a local function), so the loop keeps a dynamic L; no
  custom translation table is needed.
* AOTInductor (CPU): ``aoti_compile_and_package`` compiles both (the loop through Inductor's
  ``scan`` -> ``while_loop`` rewrite, with a dynamic L) and ``aoti_load_package`` runs the package
  in a fresh process that never imports ssmscan.
* Torch-TensorRT: the parallel result holds only ops of its converter set
  (``check_tensorrt_ready``); the loop's ``scan`` has no converter.

Measured at batch 1, dim 128, N 16, L 1024, one thread (AMD EPYC, 2026-11-30): CPU C kernel
2.0 ms; parallel: 209 FX nodes, ONNX export 2.5 s / 124 kB, ONNX Runtime 21 ms, AOTI compile
10.5 s / run 24 ms; loop: 41 FX nodes, ONNX export 0.8 s / 31 kB, ONNX Runtime 10.7 ms, AOTI
compile 6.8 s / run 4.2 ms (linear in L: 1.2 ms at 256, 20.6 ms at 4096). On an oversubscribed
machine the AOTI loop pays an OpenMP barrier per step; set ``OMP_NUM_THREADS`` to the free cores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from ssmscan.ops.linear_scan.loop import linear_scan_loop
from ssmscan.ops.linear_scan.parallel import linear_scan_parallel
from ssmscan.ops.selective_scan.loop import selective_scan_loop
from ssmscan.ops.selective_scan.parallel import selective_scan_parallel
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.ops.ssd_scan.loop import ssd_scan_loop
from ssmscan.ops.ssd_scan.parallel import ssd_scan_parallel
from ssmscan.scan import Algorithm, choose_algorithm

from . import _graph as G

__all__ = ["SSMSCAN_OPS", "decompose_selective_scan", "explain_decompose"]

Realization = Literal["parallel", "loop"]
SSMSCAN_OPS = (
    "selective_scan_fwd",
    "linear_scan_fwd",
    "selective_state_update",
    "ssd_scan_fwd",
    "ssd_scan_fwd_cpu",
)
# Ops with the schema of another: ssd_scan_fwd's CPU kernel (its body on CPU tensors, seen where a
# graph was traced through the triton_op).
_SAME_SCHEMA = {"ssd_scan_fwd_cpu": "ssd_scan_fwd"}


@dataclass(frozen=True)
class _Plan:
    decision: G.Decision
    fn: Callable[..., Sequence[torch.Tensor | None]] | None = None
    inputs: tuple[fx.Node, ...] = ()


def decompose_selective_scan(
    program: Any, realization: Realization = "parallel", algorithm: Algorithm = "auto"
) -> G.PassResult:
    """``ssmscan::selective_scan_fwd`` / ``linear_scan_fwd`` / ``selective_state_update`` /
    ``ssd_scan_fwd`` in, their parallel aten or ``higher_order.scan`` loop realization out.

    Args:
        program: ``torch.export.ExportedProgram`` or ``torch.fx.GraphModule`` (changed in place).
        realization: ``"parallel"`` (plain aten ops, static lengths only; for Torch-TensorRT and
            ONNX at a fixed length) or ``"loop"`` (one ``higher_order.scan`` per op, any length;
            for ONNX ``Scan`` and AOTInductor).
        algorithm: the parallel scan ("auto", "hillis_steele", "blelloch", "chunked"); ignored by
            the loop. ``ssd_scan_fwd``'s parallel form is always chunked (at the node's chunk
            size); its scan across chunks uses this algorithm.

    Returns:
        A :class:`PassResult`, truthy iff the graph changed, with one decision per op node.

    Example:
        >>> import torch, ssmscan
        >>> from ssmscan.passes import decompose_selective_scan
        >>> class M(torch.nn.Module):
        ...     def forward(self, a, b):
        ...         return ssmscan.linear_scan(a, b)
        >>> ep = torch.export.export(M(), (torch.rand(2, 9), torch.randn(2, 9)))
        >>> bool(decompose_selective_scan(ep, "parallel"))
        True
        >>> any("ssmscan" in str(n.target) for n in ep.graph.nodes)
        False
    """
    if realization not in ("parallel", "loop"):
        raise ValueError(f"realization must be 'parallel' or 'loop'; got {realization!r}")
    gm, program_ = G.graph_module_of(program)
    decisions = []
    changed = False
    for node in _op_nodes(gm):
        plan = _plan(node, realization, algorithm)
        if plan.fn is not None:
            try:
                traced = _trace(plan.fn, plan.inputs)
            except Exception as e:  # leave the node whole rather than half-lowered
                reason = f"tracing the {realization} realization failed: {type(e).__name__}: {e}"
                plan = _Plan(_declined(node, reason))
            else:
                tag = {
                    "source": node.name,
                    "op": _op_name(node),
                    "algorithm": str(plan.decision.algorithm),
                    "reason": plan.decision.reason,
                }
                _splice(gm, node, traced, plan.inputs, tag)
                changed = True
        decisions.append(plan.decision)
    if changed:
        G.finish(gm, program_)
    return G.PassResult(changed, tuple(decisions))


def explain_decompose(node: fx.Node, realization: Realization | None = None) -> G.Decision:
    """What :func:`decompose_selective_scan` would do with the ssmscan op ``node``; with
    ``realization=None``, the parallel realization where it applies (static length), else the
    loop."""
    if realization is not None:
        return _plan(node, realization, "auto").decision
    parallel = _plan(node, "parallel", "auto").decision
    return parallel if parallel.lowered else _plan(node, "loop", "auto").decision


def is_ssmscan_op(node: fx.Node) -> bool:
    """Whether ``node`` calls one of the ops this pass replaces."""
    return _op_name(node) in SSMSCAN_OPS


def _op_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if is_ssmscan_op(n)]


def _op_name(node: fx.Node) -> str:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return ""
    ns, name = target._schema.name.split("::", 1)
    return name if ns == "ssmscan" else ""


def _declined(node: fx.Node, reason: str) -> G.Decision:
    return G.Decision(node.name, _op_name(node), False, None, reason)


def _bind(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name (positional and keyword, defaults filled in)."""
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    bound: dict[str, Any] = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        else:
            bound[arg.name] = arg.default_value if arg.has_default_value() else None
    return bound


def _static_length(x: Any) -> int | None:
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt) and x.node.is_constant():
        return int(x)
    return None


# Tensor arguments of each op, in schema order; the rest are Python constants.
_TENSOR_ARGS = {
    "selective_scan_fwd": (
        "u",
        "delta",
        "A",
        "B",
        "C",
        "D",
        "z",
        "delta_bias",
        "initial_state",
    ),
    "linear_scan_fwd": ("a", "b", "initial"),
    "selective_state_update": (
        "state",
        "x",
        "dt",
        "A",
        "B",
        "C",
        "D",
        "z",
        "dt_bias",
        "state_batch_indices",
    ),
    "ssd_scan_fwd": (
        "x",
        "dt",
        "A",
        "B",
        "C",
        "D",
        "z",
        "dt_bias",
        "initial_states",
        "seq_idx",
    ),
}


def _plan(node: fx.Node, realization: Realization, algorithm: Algorithm) -> _Plan:
    name = _op_name(node)
    name = _SAME_SCHEMA.get(name, name)

    def left(reason: str) -> _Plan:
        return _Plan(_declined(node, reason))

    args = _bind(node)
    tensor_names = [k for k in _TENSOR_ARGS[name] if args[k] is not None]
    inputs = [args[k] for k in tensor_names]
    if not all(isinstance(n, fx.Node) and "val" in n.meta for n in inputs):
        return left("inputs carry no fake values (node.meta['val']); trace with torch.export")
    vals = node.meta.get("val")
    n_out = len(vals) if isinstance(vals, (list, tuple)) else 1
    users = G.output_users(node, n_out) if n_out > 1 else None
    if n_out > 1 and users is None:
        return left("outputs are used other than through getitem")
    if name == "selective_scan_fwd":
        assert users is not None
        if any(u.users for u in users[2]):
            readers = sorted({r.name for u in users[2] for r in u.users})
            return left(
                f"the checkpoints output is read (by {', '.join(readers)}): only the backward "
                "reads it and the realizations compute none; export for inference"
            )
        length = args["u"].meta["val"].shape[-1]
    elif name == "linear_scan_fwd":
        length = args["b"].meta["val"].shape[args["dim"]]
    elif name == "ssd_scan_fwd":
        length = args["x"].meta["val"].shape[1]
    else:
        length = 1
    static = _static_length(length)
    if realization == "parallel" and static is None:
        return left(
            f"dynamic length {length}: the parallel realization needs a static length; "
            "use realization='loop' (higher_order.scan) for a dynamic length"
        )
    consts = {k: v for k, v in args.items() if k not in _TENSOR_ARGS[name]}
    fn = _realization_fn(name, realization, algorithm, tensor_names, consts)
    if name == "selective_state_update":
        how, reason = "step", "one step of the selective scan in aten ops"
    elif realization == "loop":
        how, reason = "loop", "higher_order.scan over time (any length)"
    elif name == "ssd_scan_fwd":
        how = "chunked"
        reason = (
            f"chunked SSD form in plain aten ops (chunk {consts['chunk_size']}, static length "
            f"{static})"
        )
    else:
        how = choose_algorithm(static or 1, algorithm)
        reason = f"parallel affine {how} scan in plain aten ops (static length {static})"
    return _Plan(G.Decision(node.name, name, True, how, reason), fn, tuple(inputs))


def _realization_fn(
    name: str,
    realization: Realization,
    algorithm: Algorithm,
    tensor_names: list[str],
    consts: dict[str, Any],
) -> Callable[..., Sequence[torch.Tensor | None]]:
    """The function traced in place of the node: tensors in (schema order), the node's outputs
    out (None for the checkpoints, which nobody reads)."""

    def bind(tensors: tuple[torch.Tensor, ...]) -> dict[str, Any]:
        kw: dict[str, Any] = dict.fromkeys(_TENSOR_ARGS[name])
        kw.update(zip(tensor_names, tensors))
        return kw

    if name == "selective_scan_fwd":
        scan_fn = selective_scan_parallel if realization == "parallel" else selective_scan_loop

        def selective_scan(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
            kw = bind(tensors)
            out, last = scan_fn(
                **kw, delta_softplus=bool(consts["delta_softplus"]), algorithm=algorithm
            )
            return [out, last, None]

        return selective_scan
    if name == "ssd_scan_fwd":

        def ssd_scan(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
            kw = bind(tensors)
            options: dict[str, Any] = {
                "dt_softplus": bool(consts["dt_softplus"]),
                "dt_limit": (float(consts["dt_min"]), float(consts["dt_max"])),
            }
            if realization == "parallel":
                out, last = ssd_scan_parallel(
                    **kw, **options, chunk_size=int(consts["chunk_size"]), algorithm=algorithm
                )
            else:
                out, last = ssd_scan_loop(**kw, **options)
            return [out, last]

        return ssd_scan
    if name == "linear_scan_fwd":
        lin_fn = linear_scan_parallel if realization == "parallel" else linear_scan_loop

        def linear_scan(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
            kw = bind(tensors)
            return [lin_fn(kw["a"], kw["b"], consts["dim"], consts["reverse"], kw["initial"])]

        return linear_scan

    def state_update(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
        kw = bind(tensors)
        state, B, C = kw["state"], kw["B"], kw["C"]
        if state.dim() == 4 or kw["state_batch_indices"] is not None:
            # Mamba-2's layout or picked state rows: the reference step is plain aten already
            return list(
                selective_state_update_reference(**kw, dt_softplus=bool(consts["dt_softplus"]))
            )
        sdt = torch.float64 if state.dtype == torch.float64 else torch.float32
        out, new = selective_scan_parallel(
            kw["x"].unsqueeze(-1),
            kw["dt"].unsqueeze(-1),
            kw["A"],
            B.unsqueeze(-1),
            C.unsqueeze(-1),
            kw["D"],
            kw["z"].unsqueeze(-1) if kw["z"] is not None else None,
            kw["dt_bias"],
            bool(consts["dt_softplus"]),
            state.to(sdt),
        )
        return [out.squeeze(-1), new.to(state.dtype)]

    return state_update


def _trace(fn: Callable[..., Any], inputs: Sequence[fx.Node]) -> fx.GraphModule:
    """``fn`` traced to aten on the inputs' fake values, inside their fake mode (symbolic sizes
    keep their shape environment; no guard is added)."""
    vals = [i.meta["val"] for i in inputs]
    mode = detect_fake_mode(vals)
    if mode is None:  # real example values (a GraphModule traced in real mode): fake them
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        vals = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in vals]
    with mode:
        return make_fx(fn, tracing_mode="real", pre_dispatch=False)(*vals)


def _splice(
    gm: fx.GraphModule,
    node: fx.Node,
    traced: fx.GraphModule,
    inputs: Sequence[fx.Node],
    tag: dict[str, str],
) -> None:
    """Copy ``traced`` into ``gm`` before ``node`` and reroute ``node``'s outputs to it
    (``_graph.insert_traced``: the loop body registered on ``gm``, the node's provenance on
    every new node)."""
    G.insert_traced(gm, node, traced, inputs, tag, G.PROVENANCE, "a realization", bodies=True)
