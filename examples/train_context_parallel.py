"""Context-parallel training of a small Mamba LM: one sequence sharded along time over 2 processes.

Each rank holds a contiguous slice of every training sequence (shards of unequal length here:
the split need not be even). The Mamba mixers are switched to their context-parallel form with
two ``ssmscan.distributed`` calls and no change to ``ssmscan.models``:

- the causal depthwise conv1d reads the ``d_conv`` inputs before the shard from earlier ranks
  (``ssmscan.distributed.prefix_halo``);
- the selective scan starts each shard from the true state carried over from the earlier shards
  (``ssmscan.distributed.selective_scan``: one (2, batch, d_inner, d_state) exchange per layer).

Everything else in the model is per token. Each rank's loss is the sum of its tokens' cross
entropy over the total token count, and parameter gradients are summed over ranks, so every rank
takes exactly the single-process step. At step 0, rank 0 checks the loss and every parameter
gradient against one process running the whole sequence.

    python examples/train_context_parallel.py            # spawns 2 processes (gloo on CPU)
    torchrun --nproc_per_node 2 examples/train_context_parallel.py   # NCCL when CUDA is present
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import tempfile
import types

import torch
import torch.distributed as dist
import torch.nn.functional as F

import ssmscan.distributed as sd
from ssmscan.models import MambaConfig, MambaLM
from ssmscan.models.mamba import MambaMixer
from ssmscan.testing import rel_error, tolerance


def context_parallel_mixer_forward(
    self: MambaMixer,
    hidden_states: torch.Tensor,
    conv_state: torch.Tensor | None = None,
    ssm_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``MambaMixer.forward`` for this rank's shard of a sequence (training: no incoming state)."""
    if conv_state is not None or ssm_state is not None:
        raise ValueError("the context-parallel mixer starts every sequence from a zero state")
    xz = self.in_proj(hidden_states).transpose(1, 2)  # (batch, 2 * d_inner, L_r)
    x, z = xz.chunk(2, dim=1)
    # Note [conv state] of ssmscan.models.mamba, with the conv state taken from earlier ranks
    xpad = torch.cat([sd.prefix_halo(x, self.d_conv), x], dim=-1)
    x = F.silu(F.conv1d(xpad[:, :, 1:], self.conv1d.weight, self.conv1d.bias, groups=self.d_inner))
    dt, B, C = self._project(x.transpose(1, 2))
    out, last = sd.selective_scan(
        x,
        dt.transpose(1, 2),
        -torch.exp(self.A_log.float()),
        B.transpose(1, 2).contiguous(),
        C.transpose(1, 2).contiguous(),
        D=self.D.float(),
        z=z,
        delta_bias=self.dt_proj.bias.float(),
        delta_softplus=True,
        return_last_state=True,
    )
    return self.out_proj(out.transpose(1, 2)), xpad[:, :, -self.d_conv :].contiguous(), last


def make_context_parallel(model: MambaLM) -> MambaLM:
    """Switch every mixer of ``model`` (in place) to its context-parallel forward."""
    for block in model.layers:
        mixer = block.mixer
        mixer.forward = types.MethodType(context_parallel_mixer_forward, mixer)  # type: ignore[method-assign]
    return model


def synthetic_batch(step: int, batch: int, length: int, vocab: int) -> torch.Tensor:
    """(batch, length + 1) tokens with structure to learn: noisy arithmetic progressions."""
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    tokens = (start + stride * torch.arange(length + 1)) % vocab
    noise = torch.rand(tokens.shape, generator=g) < 0.05
    return torch.where(noise, torch.randint(0, vocab, tokens.shape, generator=g), tokens)


def shard_bounds(length: int, world: int, rank: int) -> tuple[int, int]:
    """Unequal contiguous shards: rank r gets a share proportional to r + 2."""
    weights = [r + 2 for r in range(world)]
    cuts = [0]
    for w in weights:
        cuts.append(cuts[-1] + length * w // sum(weights))
    cuts[-1] = length
    return cuts[rank], cuts[rank + 1]


def local_loss(model: MambaLM, tokens: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Sum of the cross entropy over this rank's tokens [lo, hi), divided by all tokens."""
    logits, _ = model(tokens[:, lo:hi])
    targets = tokens[:, lo + 1 : hi + 1]
    total = targets.shape[0] * (tokens.shape[1] - 1)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") / total


def run(rank: int, world: int, args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)
    config = MambaConfig.preset("tiny")
    model = MambaLM(config).to(device)
    reference = copy.deepcopy(model) if rank == 0 else None
    make_context_parallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    lo, hi = shard_bounds(args.length, world, rank)
    # one write of the whole line: the ranks share stdout, and a separate write of the newline
    # lets another rank's line in between
    print(f"rank {rank}: tokens [{lo}, {hi}) of {args.length} on {device}\n", end="", flush=True)
    for step in range(args.steps):
        tokens = synthetic_batch(step, args.batch, args.length, config.vocab_size).to(device)
        loss = local_loss(model, tokens, lo, hi)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        for p in model.parameters():  # the step of the whole sequence: sum over the shards
            dist.all_reduce(p.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)
        if step == 0 and reference is not None:
            check_against_single_process(reference, model, tokens, total)
        optimizer.step()
        if rank == 0:
            print(f"step {step:3d}  loss {total.item():.4f}", flush=True)


def check_against_single_process(
    reference: MambaLM, model: MambaLM, tokens: torch.Tensor, loss: torch.Tensor
) -> None:
    """Rank 0: the whole sequence in one process gives the same loss and gradients."""
    ref_loss = local_loss(reference, tokens, 0, tokens.shape[1] - 1)
    ref_loss.backward()
    tol = tolerance(torch.float32)
    worst = max(
        rel_error(p.grad, q.grad)  # type: ignore[arg-type]
        for p, q in zip(model.parameters(), reference.parameters())
    )
    loss_err = abs(loss.item() - ref_loss.item()) / abs(ref_loss.item())
    print(
        f"step 0 vs one process over the whole sequence: loss {loss.item():.6f} vs "
        f"{ref_loss.item():.6f} (rel {loss_err:.1e}), worst parameter-gradient rel error "
        f"{worst:.1e} (tolerance {tol:.0e})",
        flush=True,
    )
    if not (loss_err <= tol and worst <= tol):
        raise AssertionError("context-parallel step 0 differs from the single-process step")


def worker(rank: int, world: int, args: argparse.Namespace, store_path: str | None) -> None:
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    backend = "nccl" if use_cuda else "gloo"
    if store_path is None:  # torchrun: env:// rendezvous
        dist.init_process_group(backend)
    else:
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    try:
        run(rank, world, args, device)
        dist.barrier()  # no rank tears gloo down while another is still in a collective
    finally:
        gc.collect()  # drop autograd graphs holding tensors before gloo's threads go away
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence (all ranks)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--nproc", type=int, default=2, help="processes when not under torchrun")
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(
            worker, args=(args.nproc, args, os.path.join(tmp, "store")), nprocs=args.nproc
        )


if __name__ == "__main__":
    main()
