"""Shared plumbing of the passes: results, graph access, splicing a traced function in for a node."""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch.fx.experimental.proxy_tensor import make_fx

_log = logging.getLogger(__name__)

__all__ = ["Decision", "PassResult"]

LOWERING_META = "ssmscan_lowering"  # node.meta key on every node a pass creates


@dataclass(frozen=True)
class Decision:
    """What a pass did (or would do) with one scan-like node."""

    node: str
    op: str
    lowered: bool
    algorithm: str | None
    reason: str

    def __str__(self) -> str:
        how = f"lowered ({self.algorithm})" if self.lowered else "left"
        return f"{self.node} [{self.op}]: {how}: {self.reason}"


@dataclass(frozen=True)
class PassResult:
    """``changed``: whether the graph was modified; ``decisions``: one entry per node considered."""

    changed: bool
    decisions: tuple[Decision, ...] = ()

    def __bool__(self) -> bool:
        return self.changed


def graph_module_of(program: Any) -> tuple[fx.GraphModule, torch.export.ExportedProgram | None]:
    if isinstance(program, torch.export.ExportedProgram):
        return program.graph_module, program
    if isinstance(program, fx.GraphModule):
        return program, None
    raise TypeError(f"expected an ExportedProgram or a GraphModule, got {type(program).__name__}")


def is_higher_order(node: fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)


def nodes_calling(gm: fx.GraphModule, target: object) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


def submodule(gm: fx.GraphModule, node: fx.Node) -> fx.GraphModule | None:
    if not isinstance(node, fx.Node) or node.op != "get_attr":
        return None
    mod = gm
    for part in str(node.target).split("."):
        mod = getattr(mod, part, None)  # type: ignore[assignment]
        if mod is None:
            return None
    return mod if isinstance(mod, fx.GraphModule) else None


def output_users(node: fx.Node, count: int) -> list[list[fx.Node]] | None:
    """The ``getitem`` users of a multi-output node, per output; None if used otherwise."""
    users: list[list[fx.Node]] = [[] for _ in range(count)]
    for u in node.users:
        if u.target is not operator.getitem or not isinstance(u.args[1], int):
            return None
        users[u.args[1]].append(u)
    return users


PROVENANCE = ("nn_module_stack", "stack_trace")  # the meta a replacement takes from its node


def trace_on_fakes(
    fn: Callable[..., Any], vals: Sequence[Any], no_grad: bool = False, **make_fx_kwargs: Any
) -> fx.GraphModule:
    """``make_fx(fn, tracing_mode="real", **make_fx_kwargs)`` on ``vals`` (the inputs' fake
    values) inside their fake mode, so symbolic sizes keep their shape environment and no guard
    is added; under ``torch.no_grad()`` when ``no_grad``."""
    mode = detect_fake_mode(list(vals))
    with mode if mode is not None else contextlib.nullcontext():
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            return make_fx(fn, tracing_mode="real", **make_fx_kwargs)(*vals)


def insert_traced(
    gm: fx.GraphModule,
    node: fx.Node,
    traced: fx.GraphModule,
    inputs: Sequence[fx.Node],
    tag: dict[str, str],
    inherit: Sequence[str] = (),
    what: str = "a lowering",
    bodies: bool = False,
) -> None:
    """Copy ``traced``'s graph into ``gm`` before ``node``, its placeholders bound to ``inputs``,
    and reroute ``node``'s outputs to its outputs; ``node`` is erased.

    Every new node is tagged with ``tag`` (``LOWERING_META``) and takes ``node``'s meta under the
    keys ``inherit``. With ``bodies``, a ``get_attr`` of a submodule (a loop body) registers that
    submodule on ``gm`` under a fresh name. A single-tensor ``node`` has its uses replaced; a
    multi-output one must be read through ``getitem``: each getitem that is read takes the
    matching output (which must then be a node), unread ones are erased.

    Raises:
        RuntimeError: ``traced`` holds a constant (or a body without ``bodies``), or ``node``'s
            outputs are read other than through ``getitem``; ``gm`` is left as it was.
    """
    for n in traced.graph.find_nodes(op="get_attr"):
        if not (bodies and isinstance(getattr(traced, str(n.target)), fx.GraphModule)):
            raise RuntimeError(f"{what} must not create constants")
    single = not isinstance(node.meta["val"], (list, tuple))
    users = None if single else output_users(node, len(node.meta["val"]))
    if not single and users is None:
        raise RuntimeError(f"{node.name}: outputs used other than through getitem")
    inherited = {k: node.meta[k] for k in inherit if k in node.meta}
    env: dict[fx.Node, fx.Node] = dict(
        zip([n for n in traced.graph.nodes if n.op == "placeholder"], inputs, strict=True)
    )
    outs: Any = None
    with gm.graph.inserting_before(node):
        for n in traced.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outs = n.args[0]
                break
            if n.op == "get_attr":
                attr = _fresh_attr(gm, f"{tag.get('op', 'lowered')}_body")
                gm.add_submodule(attr, getattr(traced, str(n.target)))
                new = gm.graph.get_attr(attr)
                new.meta.update(n.meta)
            else:
                new = gm.graph.node_copy(n, lambda x: env[x])
            new.meta.update(inherited)
            new.meta[LOWERING_META] = dict(tag)
            env[n] = new
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if users is None:
        assert len(outs) == 1 and isinstance(outs[0], fx.Node)
        node.replace_all_uses_with(env[outs[0]])
        gm.graph.erase_node(node)
        return
    for i, us in enumerate(users):
        for u in us:
            if u.users:
                out = outs[i]
                assert isinstance(out, fx.Node), f"{what} gave no value for a read output"
                u.replace_all_uses_with(env[out])
            gm.graph.erase_node(u)
    gm.graph.erase_node(node)


def _fresh_attr(gm: fx.GraphModule, base: str) -> str:
    i = 0
    while hasattr(gm, f"{base}_{i}"):
        i += 1
    return f"{base}_{i}"


def splice(
    gm: fx.GraphModule,
    node: fx.Node,
    fn: Callable[..., Sequence[torch.Tensor | None]],
    inputs: Sequence[fx.Node],
    tag: dict[str, str],
) -> None:
    """Replace ``node`` (whose outputs are read through ``getitem``) by ``fn(*inputs)``, traced to aten.

    ``fn`` is traced pre-dispatch on the inputs' fake values (``trace_on_fakes``); every new
    node keeps the ``val`` the trace gives it and is tagged with ``tag``. ``fn`` returns one
    entry per output of ``node``; None for an output nobody reads.
    """
    traced = trace_on_fakes(fn, [i.meta["val"] for i in inputs], pre_dispatch=True)
    insert_traced(gm, node, traced, inputs, tag)


def finish(gm: fx.GraphModule, program: torch.export.ExportedProgram | None) -> None:
    """Dead-code elimination, fresh fake values downstream, lint, recompile, signature names."""
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    _repropagate(gm)
    gm.graph.lint()
    gm.recompile()
    if program is not None:
        _sync_output_names(gm, program)


def _repropagate(gm: fx.GraphModule) -> None:
    """Recompute ``val`` on every node: a HOP's fake output strides can differ from the real ones."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [p.meta.get("val") for p in placeholders]
    if any(v is None for v in vals):
        return
    mode = detect_fake_mode(vals)
    if mode is None:
        return
    try:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*vals)
    except RuntimeError as e:
        # Some meta kernels reject symbolic pads on re-propagation; the spliced nodes keep the
        # values their trace gave them (same fake mode), downstream nodes keep theirs. Logged at
        # debug level on ``ssmscan.passes._graph`` (not silent, not an error).
        _log.debug("meta['val'] re-propagation skipped: %s", " ".join(str(e).split())[:300])


def _sync_output_names(gm: fx.GraphModule, program: torch.export.ExportedProgram) -> None:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    args = out.args[0]
    for spec, arg in zip(program.graph_signature.output_specs, args, strict=True):
        if isinstance(arg, fx.Node) and hasattr(spec.arg, "name") and spec.arg.name != arg.name:
            spec.arg = type(spec.arg)(name=arg.name)
