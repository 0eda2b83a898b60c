"""One rank of the context-parallel tests: ``python cp_worker.py RANK WORLD STORE OUT SUITE``.

Runs every case of SUITE for WORLD ranks on gloo (FileStore at STORE) and writes
``{case id: {"errors": {name: relative error}, "raised": message or None}}`` to ``OUT.RANK.json``.
Each case compares against the single-process op over the whole sequence, computed on every rank
from the same seeded inputs. Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import ssmscan
import ssmscan.distributed as sd
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import make_linear_scan_inputs, make_selective_scan_inputs, rel_error

SS_TENSORS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
SS_TIME = {"u": -1, "delta": -1, "z": -1, "B": -1, "C": -1}  # sharded along L
SS_PARAMS = ("A", "D", "delta_bias")  # replicated: gradients summed over ranks
BAD_KINDS = [
    "batch",
    "N",
    "dtype",
    "empty",
    "initial_state",
    "local",
    "linear_empty",
    "linear_shape",
    "backward_twice",
    "backward_order",
    "backward_functions",
]
# What each rank differentiates in the autograd suite (Note [unprunable exchange]):
#   subset: torch.autograd.grad over the sharded inputs only (the parameters are constants);
#   per-rank: every input requires grad, each rank asks for a different single sharded input;
#   retain: torch.autograd.grad over every input twice, retain_graph=True;
#   nograd-rank: rank 1's inputs are all constants, every rank calls backward();
#   backward: backward() through out and last_state, every input requiring grad.
GRAD_MODES = ("subset", "per-rank", "retain", "nograd-rank", "backward")
AUTOGRAD_SPLITS = {2: [1, 6], 3: [5, 1, 7], 4: [3, 1, 4, 2]}


def bounds(lengths: list[int], rank: int) -> tuple[int, int]:
    start = sum(lengths[:rank])
    return start, start + lengths[rank]


def selective_case(
    rank: int, world: int, lengths: list[int], dtype: torch.dtype, full: bool, groups: int | None
) -> dict[str, float]:
    batch, dim, N, L = 2, 4, 4, sum(lengths)
    kw = make_selective_scan_inputs(
        batch, dim, L, N, groups=groups, dtype=dtype, has_D=full, has_z=full,
        has_delta_bias=full, delta_softplus=full, has_initial_state=full, seed=1,
    )  # fmt: skip
    g = torch.Generator().manual_seed(2)
    gout = torch.randn(batch, dim, L, generator=g, dtype=torch.float64).to(dtype)
    glast = torch.randn(batch, dim, N, generator=g, dtype=torch.float64)
    leaves = {k: v.clone().requires_grad_() for k, v in kw.items() if isinstance(v, torch.Tensor)}
    ref_out, ref_last = ssmscan.selective_scan(**{**kw, **leaves}, return_last_state=True)
    ((ref_out * gout).sum() + (ref_last * glast.to(ref_last.dtype)).sum()).backward()
    lo, hi = bounds(lengths, rank)
    # the state after this rank's shard, from the single-process scan over the prefix
    prefix = {k: (v[..., :hi] if k in SS_TIME and v is not None else v) for k, v in kw.items()}
    _, ref_prefix_last = ssmscan.selective_scan(**prefix, return_last_state=True)

    mine = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor):
            if k in SS_TIME:
                v = v[..., lo:hi]
            if k == "initial_state" and rank > 0:
                continue
            mine[k] = v.detach().clone().requires_grad_()
    args = {**kw, **mine}
    if rank > 0:
        args["initial_state"] = None
    out, last = sd.selective_scan(**args, return_last_state=True)
    loss = (out * gout[..., lo:hi]).sum()
    if rank == world - 1:
        loss = loss + (last * glast.to(last.dtype)).sum()
    loss.backward()

    errors = {
        "out": rel_error(out, ref_out[..., lo:hi]),
        "last_state": rel_error(last, ref_prefix_last),
    }
    for k, leaf in mine.items():
        grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        ref = leaves[k].grad
        assert ref is not None
        if k in SS_PARAMS:
            grad = grad.clone()
            dist.all_reduce(grad)
        elif k in SS_TIME:
            ref = ref[..., lo:hi]
        errors[f"d{k}"] = rel_error(grad, ref)
    return errors


def linear_case(
    rank: int, world: int, lengths: list[int], dtype: torch.dtype, dim: int, reverse: bool
) -> dict[str, float]:
    L = sum(lengths)
    shape = (2, L, 3) if dim == 1 else (2, 3, L)
    a, b = make_linear_scan_inputs(shape, dtype=dtype, seed=3)
    g = torch.Generator().manual_seed(4)
    init = torch.randn(2, 3, generator=g, dtype=torch.float64).to(dtype)
    gh = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    ra, rb, ri = (t.clone().requires_grad_() for t in (a, b, init))
    ref = ssmscan.linear_scan(ra, rb, dim=dim, reverse=reverse, initial=ri)
    (ref * gh).sum().backward()
    lo, hi = bounds(lengths, rank)
    la, lb = (t.narrow(dim, lo, hi - lo).clone().requires_grad_() for t in (a, b))
    first = world - 1 if reverse else 0
    li = init.clone().requires_grad_() if rank == first else None
    h = sd.linear_scan(la, lb, dim=dim, reverse=reverse, initial=li)
    (h * gh.narrow(dim, lo, hi - lo)).sum().backward()
    assert ra.grad is not None and rb.grad is not None and ri.grad is not None
    errors = {
        "h": rel_error(h, ref.narrow(dim, lo, hi - lo)),
        "da": rel_error(la.grad, ra.grad.narrow(dim, lo, hi - lo)),  # type: ignore[arg-type]
        "db": rel_error(lb.grad, rb.grad.narrow(dim, lo, hi - lo)),  # type: ignore[arg-type]
    }
    if li is not None:
        errors["dinitial"] = rel_error(li.grad, ri.grad)  # type: ignore[arg-type]
    return errors


def halo_case(rank: int, world: int, lengths: list[int], width: int) -> dict[str, float]:
    x = torch.randn(2, 3, sum(lengths), generator=torch.Generator().manual_seed(5))
    padded = torch.cat([torch.zeros(2, 3, width), x], dim=-1)
    lo, hi = bounds(lengths, rank)
    gx = padded[..., lo : lo + width]  # the width steps before the shard
    mine = x[..., lo:hi].clone().requires_grad_()
    halo = sd.prefix_halo(mine, width)
    wx = torch.randn(2, 3, sum(lengths) + width, generator=torch.Generator().manual_seed(6))
    # d/dx of sum over ranks of (halo * w_halo) + (x * w_x), against the closed form
    (halo * wx[..., lo : lo + width]).sum().backward()
    ref_grad = torch.zeros(2, 3, sum(lengths))
    for r in range(world):  # every rank's halo reads x at global steps [lo_r - width, lo_r)
        lo_r = bounds(lengths, r)[0]
        for t in range(max(lo_r - width, 0), lo_r):
            ref_grad[..., t] += wx[..., lo_r + (t - (lo_r - width))]
    assert mine.grad is not None
    return {"halo": rel_error(halo, gx), "dx": rel_error(mine.grad, ref_grad[..., lo:hi])}


def _reduce_params(grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Parameter gradients summed over ranks (every rank calls this for the same names)."""
    out = dict(grads)
    for k in sorted(grads):
        if k in SS_PARAMS:
            out[k] = grads[k].clone()
            dist.all_reduce(out[k])
    return out


def selective_grad_case(rank: int, world: int, lengths: list[int], mode: str) -> dict[str, float]:
    """One GRAD_MODES case, float64, against the float64 reference over the whole sequence."""
    batch, dim, N, L = 2, 4, 4, sum(lengths)
    kw = make_selective_scan_inputs(batch, dim, L, N, dtype=torch.float64, seed=11)
    g = torch.Generator().manual_seed(12)
    gout = torch.randn(batch, dim, L, generator=g, dtype=torch.float64)
    glast = torch.randn(batch, dim, N, generator=g, dtype=torch.float64)
    names = [k for k, v in kw.items() if isinstance(v, torch.Tensor)]
    ref_leaves = {k: kw[k].clone().requires_grad_() for k in names}
    ref_out, ref_last = selective_scan_reference(
        **{**kw, **ref_leaves}, return_last_state=True, compute_dtype=torch.float64
    )
    ref_loss = (ref_out * gout).sum()
    if mode == "backward":  # the last rank adds its last_state's term to its loss
        ref_loss = ref_loss + (ref_last * glast).sum()
    ref_grads = dict(zip(names, torch.autograd.grad(ref_loss, list(ref_leaves.values()))))
    lo, hi = bounds(lengths, rank)
    local = {k: (v[..., lo:hi] if k in SS_TIME else v) for k, v in kw.items()}
    sharded = [k for k in names if k in SS_TIME]
    if mode == "subset":
        wanted = sharded
    elif mode == "nograd-rank":
        wanted = [] if rank == 1 else sharded
    else:
        wanted = names
    leaves = {k: local[k].clone().requires_grad_() for k in wanted}
    out, last = sd.selective_scan(**{**local, **leaves}, return_last_state=True)
    gmine = gout[..., lo:hi]
    loss = (out * gmine).sum()
    if rank == world - 1 and mode == "backward":
        loss = loss + (last * glast).sum()
    errors = {"out": rel_error(out, ref_out[..., lo:hi])}
    grads: dict[str, torch.Tensor] = {}
    if mode == "per-rank":
        ask = sharded[rank % len(sharded)]
        grads = dict(zip([ask], torch.autograd.grad(out, [leaves[ask]], gmine)))
    elif mode == "subset":
        grads = dict(zip(wanted, torch.autograd.grad(out, [leaves[k] for k in wanted], gmine)))
    elif mode == "retain":
        for i in range(2):
            got = torch.autograd.grad(loss, list(leaves.values()), retain_graph=True)
            for k, v in _reduce_params(dict(zip(wanted, got))).items():
                ref = ref_grads[k][..., lo:hi] if k in SS_TIME else ref_grads[k]
                errors[f"d{k}-pass{i}"] = rel_error(v, ref)
    else:  # nograd-rank, backward
        assert out.requires_grad, "a rank's results must require grad when another rank's do"
        loss.backward()
        grads = {k: torch.zeros_like(v) if v.grad is None else v.grad for k, v in leaves.items()}
    if mode in ("backward", "retain"):
        errors["last_state"] = rel_error(
            last,
            selective_scan_reference(
                **{k: (v[..., :hi] if k in SS_TIME else v) for k, v in kw.items()},
                return_last_state=True,
                compute_dtype=torch.float64,
            )[1],
        )
    for k, v in _reduce_params(grads).items():
        ref = ref_grads[k][..., lo:hi] if k in SS_TIME else ref_grads[k]
        errors[f"d{k}"] = rel_error(v, ref)
    if mode == "nograd-rank" and rank != 1:
        assert set(grads) == set(sharded), f"missing gradients: {set(sharded) - set(grads)}"
    return errors


def linear_grad_case(rank: int, world: int, lengths: list[int], reverse: bool) -> dict[str, float]:
    """torch.autograd.grad over b only (a and initial require grad too), float64."""
    L = sum(lengths)
    a, b = make_linear_scan_inputs((2, L, 3), dtype=torch.float64, seed=13)
    g = torch.Generator().manual_seed(14)
    init = torch.randn(2, 3, generator=g, dtype=torch.float64)
    gh = torch.randn(2, L, 3, generator=g, dtype=torch.float64)
    rb = b.clone().requires_grad_()
    ref = linear_scan_reference(a, rb, dim=1, reverse=reverse, initial=init)
    (ref_db,) = torch.autograd.grad(ref, [rb], gh)
    lo, hi = bounds(lengths, rank)
    la, lb = (t[:, lo:hi].clone().requires_grad_() for t in (a, b))
    first = world - 1 if reverse else 0
    li = init.clone().requires_grad_() if rank == first else None
    h = sd.linear_scan(la, lb, dim=1, reverse=reverse, initial=li)
    (db,) = torch.autograd.grad(h, [lb], gh[:, lo:hi])
    return {"h": rel_error(h, ref[:, lo:hi]), "db": rel_error(db, ref_db[:, lo:hi])}


def halo_grad_case(rank: int, world: int, lengths: list[int], width: int) -> dict[str, float]:
    """torch.autograd.grad of every rank's halo over its own shard, against the closed form."""
    g = torch.Generator().manual_seed(15)
    x = torch.randn(2, 3, sum(lengths), generator=g, dtype=torch.float64)
    wx = torch.randn(2, 3, sum(lengths) + width, generator=g, dtype=torch.float64)
    lo, hi = bounds(lengths, rank)
    mine = x[..., lo:hi].clone().requires_grad_()
    halo = sd.prefix_halo(mine, width)
    (dx,) = torch.autograd.grad(halo, [mine], wx[..., lo : lo + width], allow_unused=True)
    ref_grad = torch.zeros(2, 3, sum(lengths), dtype=torch.float64)
    for r in range(world):  # every rank's halo reads x at global steps [lo_r - width, lo_r)
        lo_r = bounds(lengths, r)[0]
        for t in range(max(lo_r - width, 0), lo_r):
            ref_grad[..., t] += wx[..., lo_r + (t - (lo_r - width))]
    dx = torch.zeros_like(mine) if dx is None else dx
    return {"dx": rel_error(dx, ref_grad[..., lo:hi])}


def all_gather_grad_case(rank: int, world: int) -> dict[str, float]:
    """The public all_gather with ``anchors``: the last rank's x is a constant and it asks only
    for the gradient of its anchor v; the other ranks ask for v and x."""
    g = torch.Generator().manual_seed(17)
    xs, vs, ws = (torch.randn(world, 3, generator=g, dtype=torch.float64) for _ in range(3))
    v = vs[rank].clone().requires_grad_()
    last = rank == world - 1
    x = xs[rank].clone() if last else xs[rank].clone().requires_grad_()
    y = sd.all_gather(x, anchors=[v])  # (world, 3)
    out = v * y.sum(0)
    grads = torch.autograd.grad(out, [v] if last else [v, x], ws[rank])
    errors = {"y": rel_error(y, xs), "dv": rel_error(grads[0], ws[rank] * xs.sum(0))}
    if not last:
        errors["dx"] = rel_error(grads[1], (ws * vs).sum(0))
    return errors


def backward_mismatch_case(rank: int, kind: str) -> dict[str, float]:
    """Ranks out of step in their backward passes: every rank must raise, none may hang."""
    kw = make_selective_scan_inputs(2, 4, 6, 4, seed=1, requires_grad=True)
    out = sd.selective_scan(**kw)
    if kind == "backward_twice":  # rank 0 backpropagates a second time, rank 1 moves on
        out.sum().backward(retain_graph=True)
        if rank == 0:
            out.sum().backward()
        else:
            sd.selective_scan(**kw)
    else:  # two calls backpropagated in opposite orders: of one function, or of two
        if kind == "backward_order":
            other = sd.selective_scan(**kw)
        else:
            a, b = make_linear_scan_inputs((2, 5), seed=2, requires_grad=True)
            other = sd.linear_scan(a, b)
        first, second = (out, other) if rank == 0 else (other, out)
        first.sum().backward()
        second.sum().backward()
    return {}


def bad_case(rank: int, kind: str) -> dict[str, float]:
    kw = make_selective_scan_inputs(2, 4, 6, 4, seed=1, has_initial_state=True)
    if rank > 0:
        kw["initial_state"] = None
    if rank == 1:
        if kind == "batch":
            kw = make_selective_scan_inputs(3, 4, 6, 4, seed=1)
        elif kind == "N":
            kw = make_selective_scan_inputs(2, 4, 6, 8, seed=1)
        elif kind == "dtype":
            kw = make_selective_scan_inputs(2, 4, 6, 4, seed=1, dtype=torch.float64)
        elif kind == "empty":
            kw = make_selective_scan_inputs(2, 4, 0, 4, seed=1)
        elif kind == "initial_state":
            kw = make_selective_scan_inputs(2, 4, 6, 4, seed=1, has_initial_state=True)
        elif kind == "local":
            kw["delta"] = kw["delta"][..., :3]
    if kind.startswith("backward_"):
        return backward_mismatch_case(rank, kind)
    if kind == "linear_empty":
        a, b = make_linear_scan_inputs((2, 0 if rank == 1 else 5))
        sd.linear_scan(a, b)
    elif kind == "linear_shape":
        a, b = make_linear_scan_inputs((2 + rank, 5))
        sd.linear_scan(a, b)
    else:
        sd.selective_scan(**kw)
    return {}


def case_dtype(name: str) -> torch.dtype:
    """The input dtype of a case, from its id."""
    return torch.float64 if "-fp64" in name else torch.float32


def suite_cases(suite: str, world: int) -> dict[str, Callable[[int], dict[str, float]]]:
    cases: dict[str, Callable[[int], dict[str, float]]] = {}
    if suite.startswith("only:"):
        return {k: v for k, v in suite_cases("main", world).items() if k == suite[5:]}
    if suite.startswith("bad"):
        kinds = suite.split(":")[1].split(",") if ":" in suite else BAD_KINDS
        for kind in kinds:
            cases[kind] = lambda r, k=kind: bad_case(r, k)
        cases["after-errors"] = lambda r: selective_case(r, world, [5, 4], torch.float32, True, None)  # fmt: skip
        return cases
    if suite == "autograd":
        lengths = AUTOGRAD_SPLITS[world]
        tag = "+".join(map(str, lengths))
        for mode in GRAD_MODES:
            cases[f"grad-{mode}-{tag}-fp64"] = lambda r, m=mode: selective_grad_case(
                r, world, lengths, m
            )
        for reverse in (False, True):
            cases[f"grad-linear-rev{int(reverse)}-{tag}-fp64"] = lambda r, rv=reverse: (
                linear_grad_case(r, world, lengths, rv)
            )
        cases[f"grad-halo-{tag}-fp64"] = lambda r: halo_grad_case(r, world, lengths, 3)
        cases["grad-all-gather-fp64"] = lambda r: all_gather_grad_case(r, world)
        return cases
    splits = {2: [[9, 8], [1, 16]], 3: [[5, 1, 11], [6, 6, 5]]}[world]
    if world == 2:  # shards longer than the kernels' checkpoint chunk (256 steps)
        cases["selective-300+7-fp32-full"] = lambda r: selective_case(
            r, world, [300, 7], torch.float32, True, None
        )
    for lengths in splits:
        tag = "+".join(map(str, lengths))
        for dtype, dname in ((torch.float32, "fp32"), (torch.float64, "fp64")):
            cases[f"selective-{tag}-{dname}-full"] = lambda r, ls=lengths, dt=dtype: selective_case(
                r, world, ls, dt, True, None
            )
            for dim in (1, 2):
                for reverse in (False, True):
                    cases[f"linear-{tag}-{dname}-dim{dim}-rev{int(reverse)}"] = (
                        lambda r, ls=lengths, dt=dtype, d=dim, rv=reverse: linear_case(
                            r, world, ls, dt, d, rv
                        )
                    )
        cases[f"selective-{tag}-fp32-plain"] = lambda r, ls=lengths: selective_case(
            r, world, ls, torch.float32, False, None
        )
        cases[f"selective-{tag}-fp32-grouped"] = lambda r, ls=lengths: selective_case(
            r, world, ls, torch.float32, True, 2
        )
        cases[f"halo-{tag}"] = lambda r, ls=lengths: halo_case(r, world, ls, 3)
    return cases


def main() -> None:
    rank, world, store_path, out, suite = (
        int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5],
    )  # fmt: skip
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    results: dict[str, Any] = {}
    for name, case in suite_cases(suite, world).items():
        try:
            results[name] = {"errors": case(rank), "raised": None}
        except Exception as e:  # recorded; the test decides whether it was expected
            results[name] = {"errors": {}, "raised": f"{type(e).__name__}: {e}"}
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
