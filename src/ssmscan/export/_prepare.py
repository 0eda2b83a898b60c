"""What every target exports: the model behind a wrapper that takes and returns plain tensors,
example inputs and ``dynamic_shapes`` with a dynamic batch, and the names of inputs and outputs.

A built-in :class:`~ssmscan.models.MambaLM` or :class:`~ssmscan.models.Mamba2LM` exports as
``input_ids -> logits``; with ``stateful=True`` as ``(input_ids, conv_state_0.., ssm_state_0..) -> (logits, next_conv_state_0..,
next_ssm_state_0..)``. Any other model's outputs are flattened to their tensor leaves, so that an
artifact never returns a container only ssmscan knows how to rebuild (an AOTInductor package of
``(logits, MambaState)`` would not load where ssmscan is not imported).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export import Dim
from torch.utils._sympy.numbers import int_oo

from ._signature import Signature, TensorSpec

BATCH = "batch"


class FlatOutputs(torch.nn.Module):
    """``model`` with its outputs flattened to tensors (one tensor is returned bare)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.output_paths: list[str] = []

    def forward(self, *args: Any) -> Any:
        leaves = pytree.tree_flatten_with_path(self.model(*args))[0]
        leaves = [(p, x) for p, x in leaves if isinstance(x, torch.Tensor)]
        self.output_paths = [pytree.keystr(p) for p, _ in leaves]
        return leaves[0][1] if len(leaves) == 1 else tuple(x for _, x in leaves)


class LanguageModelStep(torch.nn.Module):
    """A ``MambaLM`` or ``Mamba2LM`` as ``input_ids -> logits``, or with ``stateful`` as
    ``(input_ids, *conv_states, *ssm_states) -> (logits, *conv_states', *ssm_states')``."""

    def __init__(self, model: torch.nn.Module, stateful: bool) -> None:
        super().__init__()
        self.model = model
        self.stateful = stateful

    def forward(self, *args: torch.Tensor) -> Any:
        from ssmscan.models import MambaState

        input_ids, states = args[0], args[1:]
        n = len(states) // 2
        state = MambaState(states[:n], states[n:]) if self.stateful else None
        logits, new = self.model(input_ids, state)
        if not self.stateful:
            return logits
        return (logits, *new.conv_states, *new.ssm_states)


@dataclass
class Prepared:
    """The module to export and everything the targets need to name and check its artifact."""

    module: torch.nn.Module
    example_inputs: tuple[Any, ...]
    dynamic_shapes: Any
    input_names: list[str]
    output_names: list[str] | None  # None: named from the output pytree after tracing
    vocab_size: int | None = None
    notes: list[str] = field(default_factory=list)

    def signature(self, ep: torch.export.ExportedProgram, device: torch.device) -> Signature:
        """The signature of ``ep`` (exported from :attr:`module`), dims named after the ``Dim``s
        of :attr:`dynamic_shapes`."""
        nodes = {n.name: n for n in ep.graph.nodes}
        in_vals = [nodes[n].meta["val"] for n in ep.graph_signature.user_inputs]
        out_vals = [nodes[n].meta["val"] for n in ep.graph_signature.user_outputs]
        names = self._symbol_names(in_vals)
        dims: dict[str, tuple[int, int | None]] = {}
        for sym, name in names.items():
            vr = ep.range_constraints.get(sym)
            if vr is not None:
                hi = vr.upper
                finite = hi not in (int_oo, sympy.oo)
                dims[name] = (int(vr.lower), int(hi) if finite else None)
        ranges = id_ranges(ep, self.vocab_size)

        def spec(name: str, val: Any, value_range: tuple[int, int] | None) -> TensorSpec:
            return TensorSpec(
                name, val.dtype, tuple(dim_text(s, names) for s in val.shape), value_range
            )

        out_names = self.output_names or output_names(self.module)
        if len(out_names) != len(out_vals):
            out_names = [f"output_{i}" for i in range(len(out_vals))]
        in_names = self.input_names
        if len(in_names) != len(in_vals):
            in_names = list(ep.graph_signature.user_inputs)
        return Signature(
            tuple(
                spec(n, v, ranges.get(n_ph))
                for n, v, n_ph in zip(
                    in_names, in_vals, ep.graph_signature.user_inputs, strict=True
                )
            ),
            tuple(spec(n, v, None) for n, v in zip(out_names, out_vals, strict=True)),
            dims,
            device.type,
        )

    def _symbol_names(self, in_vals: list[Any]) -> dict[sympy.Symbol, str]:
        """Each input size symbol -> the name of the ``Dim`` that made it."""
        names: dict[sympy.Symbol, str] = {}
        specs = self.dynamic_shapes[0] if self.dynamic_shapes is not None else ()
        for val, dspec in zip(in_vals, specs, strict=False):
            if not isinstance(val, torch.Tensor) or dspec is None:
                continue
            items = dspec.items() if isinstance(dspec, dict) else enumerate(dspec)
            for d, dim in items:
                size = val.shape[d]
                name = getattr(dim, "__name__", None)
                if isinstance(size, torch.SymInt) and name and size.node.expr.is_symbol:
                    names.setdefault(size.node.expr, name)
        return names


def dim_text(size: Any, names: dict[sympy.Symbol, str]) -> int | str:
    """A static size as ``int``; a symbolic one as its expression over the ``Dim`` names."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    expr = size.node.expr
    if expr.is_number:
        return int(expr)
    return str(expr.xreplace({s: sympy.Symbol(n) for s, n in names.items()}))


def output_names(module: torch.nn.Module) -> list[str]:
    """``output`` for a single output; else ``output`` plus each leaf's path (``output_0``,
    ``output_1_conv_states_0``...)."""
    paths = getattr(module, "output_paths", [""])
    if len(paths) == 1:
        return ["output"]
    return ["output_" + re.sub(r"[^0-9A-Za-z]+", "_", p).strip("_") for p in paths]


def id_ranges(
    ep: torch.export.ExportedProgram, vocab_size: int | None
) -> dict[str, tuple[int, int]]:
    """User inputs used as the indices of an embedding -> ``(0, rows)`` (``vocab_size`` when
    smaller: the rows past it are padding, not tokens)."""
    user = set(ep.graph_signature.user_inputs)
    ranges: dict[str, tuple[int, int]] = {}
    for node in ep.graph.find_nodes(op="call_function", target=torch.ops.aten.embedding.default):
        weight, ids = node.args[0], node.args[1]
        if isinstance(ids, torch.fx.Node) and ids.op == "placeholder" and ids.name in user:
            rows = weight.meta["val"].shape[0]
            if isinstance(rows, int):
                hi = min(rows, vocab_size) if vocab_size else rows
                ranges[ids.name] = (0, min(hi, ranges.get(ids.name, (0, hi))[1]))
    return ranges


def _is_lm(model: torch.nn.Module) -> bool:
    from ssmscan.models import Mamba2LM, MambaLM

    return isinstance(model, (MambaLM, Mamba2LM))


def _zero_state(model: Any, batch: int, device: torch.device) -> Any:
    """A fresh ``MambaState`` for ``model`` (a ``MambaLM`` or ``Mamba2LM``): conv states in the
    weights' dtype, SSM states in the state dtype; one tensor per layer (torch.export takes
    aliased example inputs as one input)."""
    from ssmscan.models import Mamba2LM, MambaState

    cfg, weight = model.config, model.lm_head.weight
    sdt = torch.float64 if weight.dtype == torch.float64 else torch.float32
    if isinstance(model, Mamba2LM):
        conv_shape: tuple[int, ...] = (batch, cfg.conv_dim, cfg.d_conv)
        ssm_shape: tuple[int, ...] = (batch, cfg.nheads, cfg.headdim, cfg.d_state)
    else:
        conv_shape, ssm_shape = (batch, cfg.d_inner, cfg.d_conv), (batch, cfg.d_inner, cfg.d_state)
    n = cfg.n_layer
    return MambaState(
        tuple(torch.zeros(conv_shape, dtype=weight.dtype, device=device) for _ in range(n)),
        tuple(torch.zeros(ssm_shape, dtype=sdt, device=device) for _ in range(n)),
    )


def _positional(
    model: torch.nn.Module, example_inputs: tuple[Any, ...], dynamic_shapes: Any
) -> list[Any]:
    """``dynamic_shapes`` as one entry per positional input (a dict keyed by argument name is
    mapped through the signature of ``model.forward``)."""
    n = len(example_inputs)
    if dynamic_shapes is None:
        return [None] * n
    if isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != n:
            raise ValueError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries; example_inputs has {n}"
            )
        return list(dynamic_shapes)
    if isinstance(dynamic_shapes, dict):
        params = list(inspect.signature(model.forward).parameters)[:n]
        unknown = set(dynamic_shapes) - set(params)
        if unknown:
            raise ValueError(
                f"dynamic_shapes names {sorted(unknown)}, which are not among the positional "
                f"inputs {params} of {type(model).__name__}.forward"
            )
        return [dynamic_shapes.get(p) for p in params]
    raise TypeError(
        f"dynamic_shapes must be None, a tuple/list (one entry per input) or a dict keyed by "
        f"argument name; got {type(dynamic_shapes).__name__}"
    )


def _with_batch(spec: Any, x: torch.Tensor, batch: Any) -> Any:
    """``spec`` (one tensor's dynamic_shapes entry) with dimension 0 dynamic unless it says
    otherwise."""
    if x.dim() == 0:
        return spec
    if spec is None:
        return {0: batch}
    if isinstance(spec, dict):
        return spec if 0 in spec else {0: batch, **spec}
    if isinstance(spec, (tuple, list)) and len(spec) == x.dim():
        return type(spec)((batch, *spec[1:])) if spec[0] is None else spec
    return spec


def _input_names(model: torch.nn.Module, example_inputs: tuple[Any, ...]) -> list[str]:
    params = inspect.signature(model.forward).parameters.values()
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    names: list[str] = []
    for i, x in enumerate(example_inputs):
        if i < len(positional) and positional[i].kind != positional[i].VAR_POSITIONAL:
            base = positional[i].name
        elif positional and positional[-1].kind == positional[-1].VAR_POSITIONAL:
            base = f"{positional[-1].name}_{i - len(positional) + 1}"
        else:
            base = f"input_{i}"
        leaves = pytree.tree_flatten_with_path(x)[0]
        if len(leaves) == 1 and not leaves[0][0]:
            names.append(base)
        else:
            names += [
                base + "_" + re.sub(r"[^0-9A-Za-z]+", "_", pytree.keystr(p)).strip("_")
                for p, _ in leaves
            ]
    return names


def prepare(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Any,
    dynamic_batch: bool,
    stateful: bool,
) -> Prepared:
    """Wrap ``model``, name its inputs/outputs and add a dynamic batch (see the module doc)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            f"example_inputs must be a tuple of the model's positional inputs; got "
            f"{type(example_inputs).__name__}"
        )
    specs = _positional(model, example_inputs, dynamic_shapes)
    vocab_size = None
    module: torch.nn.Module
    if _is_lm(model):
        lm: Any = model  # a MambaLM or Mamba2LM
        module, inputs, specs, in_names, out_names = _lm_step(lm, example_inputs, specs, stateful)
        vocab_size = lm.config.vocab_size
    else:
        if stateful:
            raise ValueError(
                f"stateful=True exports a built-in ssmscan.models.MambaLM or Mamba2LM with its state as "
                f"named inputs/outputs; {type(model).__name__} is not one (its outputs are "
                "exported as they are, flattened to tensors)"
            )
        module, inputs = FlatOutputs(model), example_inputs
        in_names, out_names = _input_names(model, example_inputs), None
    # the artifact takes contiguous inputs (ExportResult.run hands them over so); a strided
    # example (a slice) would make torch.export guard on its strides
    inputs = tuple(x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs)
    notes = []
    if dynamic_batch:
        batch = Dim(BATCH, min=1)
        new_inputs = list(inputs)
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                before = specs[i]
                specs[i] = _with_batch(specs[i], x, batch)
                # a size-1 example would specialize the batch to 1: trace at batch 2
                if specs[i] is not before and x.shape[0] == 1:
                    new_inputs[i] = torch.cat([x, x])
        inputs = tuple(new_inputs)
        notes.append("batch (dimension 0 of every input) is dynamic")
    has_dynamic = any(s is not None for s in specs)
    return Prepared(
        module,
        inputs,
        (tuple(specs),) if has_dynamic else None,
        in_names,
        out_names,
        vocab_size,
        notes,
    )


def _lm_step(
    model: Any, example_inputs: tuple[Any, ...], specs: list[Any], stateful: bool
) -> tuple[torch.nn.Module, tuple[Any, ...], list[Any], list[str], list[str]]:
    from ssmscan.models import MambaState

    if not 1 <= len(example_inputs) <= 2:
        raise ValueError(
            f"a MambaLM or Mamba2LM exports from (input_ids,) or (input_ids, state); got "
            f"{len(example_inputs)} example inputs"
        )
    ids = example_inputs[0]
    state = example_inputs[1] if len(example_inputs) == 2 else None
    if state is not None and not stateful:
        raise ValueError(
            "example_inputs carry a MambaState: pass stateful=True to export the state as "
            "inputs and outputs (input_ids -> logits otherwise)"
        )
    if state is not None and not isinstance(state, MambaState):
        raise TypeError(
            f"the second example input must be a MambaState; got {type(state).__name__}"
        )
    if state is not None and specs[1] is not None:
        raise ValueError(
            "dynamic_shapes for the state are derived from input_ids' (its batch); give None "
            "for the state"
        )
    n = model.config.n_layer
    in_names = ["input_ids"]
    out_names = ["logits"]
    states: tuple[torch.Tensor, ...] = ()
    if stateful:
        if state is None:
            state = _zero_state(model, ids.shape[0], ids.device)
        # distinct tensors (a state built as (zeros,) * n_layer would alias its layers)
        states = tuple(t.clone() for t in (*state.conv_states, *state.ssm_states))
        kinds = [f"conv_state_{i}" for i in range(n)] + [f"ssm_state_{i}" for i in range(n)]
        in_names += kinds
        out_names += [f"next_{k}" for k in kinds]
    ids_spec = specs[0]
    return (
        LanguageModelStep(model, stateful),
        (ids, *states),
        [ids_spec] + [None] * len(states),
        in_names,
        out_names,
    )
