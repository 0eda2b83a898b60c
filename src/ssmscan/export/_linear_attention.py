"""Mamba-2's SSD scan as ONNX opset 27's ``LinearAttention`` (``update_rule="gated"``).

The SSD recurrence per batch b, head h (group g of h), time t is gated linear attention with a
scalar decay per head::

    S_t = exp(dt_t * A[h]) * S_{t-1} + B_t[g] (x) (dt_t * x_t[h])     (state (dstate, headdim))
    y_t = C_t[g]^T S_t

so ``query = C``, ``key = B`` (both expanded from groups to heads), ``value = dt * x``,
``decay = dt * A`` (log-space, one per head), ``scale = 1``; the state is SSD's
``(headdim, dstate)`` state transposed. The time-step processing (bias, softplus, clamp), the skip
``D * x`` and the gate ``silu(z)`` stay ordinary ops around it.

How: :func:`rewrite_ssd_scan` replaces each ``ssmscan::ssd_scan_fwd`` node of an exported program
by those aten ops around one ``ssmscan::onnx_linear_attention`` node, an op with ONNX's exact
signature (packed ``(batch, T, heads * dim)`` layout) and a sequential eager implementation, so the
rewritten program still runs in PyTorch; :func:`translation_table` maps that op to the ONNX node
for ``torch.onnx.export(custom_translation_table=...)``.

The exporter builds its graph at opset 18 and converts it to 27 with ONNX's version converter,
which knows no adapter for an operator newer than the graph; the node is therefore emitted under a
staging name and domain and renamed once the model is at opset 27 (:func:`finalize`).

Declined with a ``ValueError`` naming the node (the ``Scan``-loop export takes these): ``seq_idx``
(packed sequences restart the state; ``LinearAttention`` has no reset) and float64 inputs (the
operator takes float32, float16 and bfloat16; the rewrite computes in float32 as the CPU kernel
does and returns ``x``'s dtype).

Measured with ``benchmarks/export/bench_ssd_onnx.py`` (ONNX Runtime 1.32 CPU, fp32, batch 1,
L 2048, ngroups 1, one thread, a shared 2-core machine under load, 2026-12-05): at nheads 24,
headdim 64, dstate 128 ``LinearAttention`` ran in 746 ms against 2221 ms for the ``Scan`` loop
(449 ms for the static-length parallel export); at nheads 8, headdim 32, dstate 32 the two tied
(97 ms and 100 ms; parallel 31 ms). ONNX Runtime's CPU kernel for the operator takes time linear
in T and does not use the chunked form, so the static-length parallel export stays the faster
ONNX form on CPU where the length is known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.library import custom_op

from ssmscan._library import qualname
from ssmscan.ops.ssd_scan.common import process_dt
from ssmscan.passes import _graph as G

LINEAR_ATTENTION_OPSET = 27
STAGING_DOMAIN = "ssmscan.staging"
STAGED_NAME = (
    "StagedLinearAttention"  # the converter looks adapters up by name, whatever the domain
)
_SSD_ARGS = (
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
    "dt_softplus",
    "dt_min",
    "dt_max",
    "chunk_size",
)
_TENSOR_ARGS = _SSD_ARGS[:10]


@custom_op(qualname("onnx_linear_attention"), mutates_args=())
def onnx_linear_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    past_state: torch.Tensor | None,
    decay: torch.Tensor,
    q_num_heads: int,
    kv_num_heads: int,
    scale: float,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ONNX ``LinearAttention`` with ``update_rule="gated"`` and a scalar decay per head, one
    step at a time (for running a rewritten program in PyTorch; the ONNX runtime brings its own
    kernel).

    Args:
        query: (batch, T, q_num_heads * d_k).
        key: (batch, T, kv_num_heads * d_k).
        value: (batch, T, kv_num_heads * d_v).
        past_state: optional (batch, kv_num_heads, d_k, d_v); zeros when None.
        decay: (batch, T, kv_num_heads), log-space.
        q_num_heads, kv_num_heads: head counts (equal here: every head has its own state).
        scale: output scale.
        chunk_size: ONNX's tuning hint; unused here.

    Returns:
        ``(output (batch, T, q_num_heads * d_v), present_state (batch, kv_num_heads, d_k,
        d_v))``.
    """
    batch, T, _ = query.shape
    H = kv_num_heads
    q = query.reshape(batch, T, H, -1)
    k = key.reshape(batch, T, H, -1)
    v = value.reshape(batch, T, H, -1)
    dk, dv = k.shape[-1], v.shape[-1]
    S = (
        past_state.clone()
        if past_state is not None
        else query.new_zeros(batch, H, dk, dv, dtype=query.dtype)
    )
    outs = []
    for t in range(T):
        S = torch.exp(decay[:, t, :, None, None]) * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    out = torch.stack(outs, 1) if T else value.new_zeros(batch, 0, H, dv)
    return out.reshape(batch, T, H * dv), S


@onnx_linear_attention.register_fake
def _(query, key, value, past_state, decay, q_num_heads, kv_num_heads, scale, chunk_size):
    batch, T, _ = query.shape
    dk = key.shape[2] // kv_num_heads
    dv = value.shape[2] // kv_num_heads
    out = query.new_empty(batch, T, q_num_heads * dv)
    return out, query.new_empty(batch, kv_num_heads, dk, dv)


def _per_head(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """(batch, L, ngroups, N) -> (batch, L, nheads * N): head h reads group h // (nheads //
    ngroups)."""
    batch, L, ngroups, N = t.shape
    rep = nheads // ngroups
    return t[:, :, :, None, :].expand(batch, L, ngroups, rep, N).reshape(batch, L, nheads * N)


def ssd_as_linear_attention(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssmscan::ssd_scan_fwd`` (without ``seq_idx``) as aten ops around one
    ``onnx_linear_attention``; arguments and results as the op's (``ssmscan.ssd_scan``).
    Arithmetic in float32, as the CPU kernel's."""
    f32 = torch.float32
    batch, L, nheads, headdim = x.shape
    d = process_dt(dt, dt_bias, dt_softplus, dt_min, dt_max, f32)  # (batch, L, nheads)
    xf = x.to(f32)
    value = (xf * d[..., None]).reshape(batch, L, nheads * headdim)
    decay = d * A.to(f32)
    past = initial_states.to(f32).transpose(-1, -2) if initial_states is not None else None
    y, present = torch.ops.ssmscan.onnx_linear_attention(
        _per_head(C.to(f32), nheads),
        _per_head(B.to(f32), nheads),
        value,
        past,
        decay,
        nheads,
        nheads,
        1.0,
        chunk_size,
    )
    y = y.reshape(batch, L, nheads, headdim)
    if D is not None:
        Df = D.to(f32)
        y = y + (Df if D.dim() == 2 else Df[:, None]) * xf
    if z is not None:
        y = y * torch.nn.functional.silu(z.to(f32))
    return y.to(x.dtype), present.transpose(-1, -2).contiguous()


def _is_ssd_scan(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.ssmscan.ssd_scan_fwd.default


def _bind(node: fx.Node) -> dict[str, Any]:
    bound = dict(zip(_SSD_ARGS, node.args, strict=False))
    bound.update(node.kwargs)
    return bound


def _why_not(node: fx.Node, args: dict[str, Any]) -> str | None:
    """Why ``node`` cannot become a ``LinearAttention`` (None: it can)."""
    if args.get("seq_idx") is not None:
        return "it takes seq_idx (packed sequences restart the state; LinearAttention has no reset)"
    x = args["x"].meta.get("val") if isinstance(args["x"], fx.Node) else None
    if x is None:
        return "its inputs carry no fake values (node.meta['val']); export with torch.export"
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return (
            f"x is {x.dtype}; LinearAttention takes float32, float16 and bfloat16 (and "
            "computes here in float32)"
        )
    if G.output_users(node, 2) is None:
        return "its outputs are used other than through getitem"
    return None


def rewrite_ssd_scan(program: torch.export.ExportedProgram) -> list[str]:
    """Every ``ssmscan::ssd_scan_fwd`` node of ``program`` -> aten ops around one
    ``ssmscan::onnx_linear_attention`` (in place); returns one note per node rewritten.

    Args:
        program: an ``ExportedProgram`` (changed in place).

    Returns:
        One line per rewritten node.

    Raises:
        ValueError: a node cannot be expressed (``seq_idx``, float64, ...); the program is left
            unchanged and the message names the node, the reason and the alternative.

    Example:
        >>> import torch, ssmscan
        >>> class M(torch.nn.Module):
        ...     def forward(self, x, dt, A, B, C):
        ...         return ssmscan.ssd_scan(x, dt, A, B, C)
        >>> args = (torch.randn(1, 9, 2, 4), torch.rand(1, 9, 2), -torch.rand(2),
        ...         torch.randn(1, 9, 1, 8), torch.randn(1, 9, 1, 8))
        >>> ep = torch.export.export(M(), args)
        >>> len(rewrite_ssd_scan(ep))
        1
        >>> sorted({n.target.name() for n in ep.graph.nodes if "ssmscan" in str(n.target)})
        ['ssmscan::onnx_linear_attention']
        >>> torch.allclose(ep.module()(*args), M()(*args), atol=1e-5)
        True
    """
    gm, ep = G.graph_module_of(program)
    nodes = [n for n in gm.graph.nodes if _is_ssd_scan(n)]
    plans = []
    for node in nodes:
        args = _bind(node)
        reason = _why_not(node, args)
        if reason is not None:
            raise ValueError(
                f"onnx_linear_attention=True cannot express ssd_scan node {node.name}: "
                f"{reason}. Export with onnx_linear_attention=False (the ONNX Scan loop) instead."
            )
        plans.append((node, args))
    notes = []
    for node, args in plans:
        present = [k for k in _TENSOR_ARGS if k != "seq_idx" and args.get(k) is not None]
        consts = {k: args[k] for k in _SSD_ARGS[10:]}

        def fn(*tensors: torch.Tensor, present: list[str] = present, consts: dict = consts):
            kw: dict[str, Any] = dict.fromkeys(k for k in _TENSOR_ARGS if k != "seq_idx")
            kw.update(zip(present, tensors, strict=True))
            return list(
                ssd_as_linear_attention(
                    **kw,
                    dt_softplus=bool(consts["dt_softplus"]),
                    dt_min=float(consts["dt_min"]),
                    dt_max=float(consts["dt_max"]),
                    chunk_size=int(consts["chunk_size"]),
                )
            )

        tag = {"source": node.name, "op": "ssd_scan_fwd", "algorithm": "linear_attention"}
        G.splice(gm, node, fn, [args[k] for k in present], tag)
        notes.append(
            f"{node.name} [ssd_scan_fwd]: ONNX LinearAttention (gated, opset "
            f"{LINEAR_ATTENTION_OPSET}): q = C, k = B, v = dt*x, decay = dt*A per head"
        )
    if notes:
        G.finish(gm, ep)
    return notes


def _staged_schema() -> Any:
    """ONNX's ``LinearAttention`` schema (inputs, outputs, types, attributes) under
    :data:`STAGED_NAME` in :data:`STAGING_DOMAIN`."""
    import onnx
    from onnx.defs import OpSchema

    real = onnx.defs.get_schema("LinearAttention", LINEAR_ATTENTION_OPSET, "")

    def attribute(a: Any) -> Any:
        if a.required:
            return OpSchema.Attribute(a.name, a.type, a.description, required=True)
        return OpSchema.Attribute(a.name, a.default_value, a.description)

    return OpSchema(
        STAGED_NAME,
        STAGING_DOMAIN,
        1,
        doc=real.doc or "",
        inputs=[
            OpSchema.FormalParameter(i.name, i.type_str, param_option=i.option) for i in real.inputs
        ],
        outputs=[
            OpSchema.FormalParameter(o.name, o.type_str, param_option=o.option)
            for o in real.outputs
        ],
        type_constraints=[
            (c.type_param_str, list(c.allowed_type_strs), c.description)
            for c in real.type_constraints
        ],
        attributes=[attribute(a) for a in real.attributes.values()],
    )


def translation_table() -> dict[Any, Callable[..., Any]]:
    """``{ssmscan::onnx_linear_attention: its ONNX translation}`` for
    ``torch.onnx.export(custom_translation_table=...)``."""
    from onnxscript.values import Op, Opset

    staged = Op(Opset(STAGING_DOMAIN, 1), STAGED_NAME, _staged_schema())

    def linear_attention(
        query: Any,
        key: Any,
        value: Any,
        past_state: Any,
        decay: Any,
        q_num_heads: int,
        kv_num_heads: int,
        scale: float,
        chunk_size: int,
    ) -> Any:
        return staged(
            query,
            key,
            value,
            past_state,
            decay,
            q_num_heads=q_num_heads,
            kv_num_heads=kv_num_heads,
            scale=scale,
            chunk_size=chunk_size,
            update_rule="gated",
            _outputs=2,
        )

    return {torch.ops.ssmscan.onnx_linear_attention.default: linear_attention}


def finalize(model: Any) -> int:
    """Move the staged ``LinearAttention`` nodes of ``model`` (an ``onnx_ir.Model`` at opset
    27, subgraphs and functions included) into ONNX's default domain; returns how many moved.

    Raises:
        ValueError: the model's default opset is below 27 (``LinearAttention`` does not exist
            there).
    """
    import onnx_ir as ir

    version = model.opset_imports.get("", None)
    if version is None or version < LINEAR_ATTENTION_OPSET:
        raise ValueError(
            f"LinearAttention needs ONNX opset {LINEAR_ATTENTION_OPSET} or newer; the exported "
            f"model is at opset {version} (ONNX's version converter did not take it there)"
        )
    graphs = [model.graph, *model.functions.values()]
    moved = 0
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
            if node.domain == STAGING_DOMAIN and node.op_type == STAGED_NAME:
                node.domain = ""
                node.op_type = "LinearAttention"
                node.version = None
                moved += 1
    model.opset_imports.pop(STAGING_DOMAIN, None)
    for fn in model.functions.values():
        fn.opset_imports.pop(STAGING_DOMAIN, None)
    return moved
