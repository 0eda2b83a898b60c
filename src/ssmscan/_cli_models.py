"""The models ``ssmscan report`` / ``export`` / ``bench`` run: built-in presets, a transformers
Mamba, or a user file; inputs and example shapes for them."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import torch

from ssmscan._cli_util import UsageError


@dataclass
class LoadedModel:
    """A model ready for the report: a module taking (batch, L) int64 ids, and its vocabulary."""

    name: str
    module: torch.nn.Module
    vocab_size: int


class _LogitsOnly(torch.nn.Module):
    """Wraps a transformers causal LM: ``input_ids -> logits`` (no cache), for export."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


def _vocab_size(module: torch.nn.Module) -> int | None:
    for owner in (getattr(module, "config", None), module):
        v = getattr(owner, "vocab_size", None)
        if isinstance(v, int) and v > 0:
            return v
    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


def _from_file(spec: str) -> LoadedModel:
    path, _, factory_name = spec.rpartition(":")
    if not path.endswith(".py") or not factory_name.isidentifier():
        raise UsageError(f"--model {spec!r}: expected tiny, hf-tiny or path/to/file.py:factory")
    if not os.path.isfile(path):
        raise UsageError(f"--model {spec!r}: no such file {path!r}")
    mod_spec = importlib.util.spec_from_file_location(f"_ssmscan_user_model_{os.getpid()}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise UsageError(f"--model {spec!r}: cannot load {path!r} as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        raise UsageError(
            f"--model {spec!r}: importing {path} raised {type(e).__name__}: {e}"
        ) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {path} has no callable {factory_name!r}")
    try:
        model = factory()
    except Exception as e:
        raise UsageError(
            f"--model {spec!r}: {factory_name}() raised {type(e).__name__}: {e}"
        ) from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"--model {spec!r}: {factory_name}() must return a torch.nn.Module; got "
            f"{type(model).__name__}"
        )
    vocab = _vocab_size(model)
    if vocab is None:
        raise UsageError(
            f"--model {spec!r}: cannot tell the vocabulary size (the model takes (batch, L) int64 "
            "token ids: give it a vocab_size attribute, a config.vocab_size, or an nn.Embedding)"
        )
    return LoadedModel(spec, model.eval(), vocab)


def load_model(spec: str) -> LoadedModel:
    """``tiny`` (or another ``MambaConfig`` preset), ``tiny-mamba2`` (or another
    ``Mamba2Config`` preset with ``-mamba2``), ``hf-tiny``, ``hf-<family>-tiny`` (a tiny
    transformers model of a family ``use_ssmscan`` supports: ``ssmscan._cli_hf_models``) or
    ``path/to/file.py:factory``.

    Args:
        spec: the ``--model`` argument. A factory is called with no arguments and returns an
            ``nn.Module`` whose forward takes (batch, L) int64 token ids; the first tensor of its
            output (a pytree) is compared across targets.

    Returns:
        A :class:`LoadedModel` in eval mode, float32, on CPU, seeded.

    Raises:
        UsageError: an unknown name, a bad ``file.py:factory``, or transformers missing for
            the ``hf-`` models.
    """
    from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, build_model

    if spec == "hf-tiny" or (spec.startswith("hf-") and spec.endswith("-tiny")):
        from ssmscan._cli_hf_models import load_hf_tiny

        return load_hf_tiny(spec)
    if spec in MambaConfig.PRESETS:
        model = build_model(spec).eval()
        return LoadedModel(spec, model, model.config.vocab_size)
    if spec.removesuffix("-mamba2") in Mamba2Config.PRESETS and spec.endswith("-mamba2"):
        model2 = Mamba2LM(Mamba2Config.preset(spec.removesuffix("-mamba2"))).eval()
        return LoadedModel(spec, model2, model2.config.vocab_size)
    if ":" in spec:
        return _from_file(spec)
    raise UsageError(
        f"unknown model {spec!r}: expected hf-tiny, hf-<family>-tiny, a preset "
        f"({', '.join(MambaConfig.PRESETS)}), "
        f"a Mamba-2 preset ({', '.join(p + '-mamba2' for p in Mamba2Config.PRESETS)}) "
        "or path/to/file.py:factory"
    )


def load_on(spec: str, device: str) -> LoadedModel:
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU here")
    loaded = load_model(spec)
    loaded.module.to(device)
    return loaded


def example_ids(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g)


def dynamic_spec(seq_len: int) -> Any:
    from torch.export import Dim

    return ({1: Dim("seq_len", min=2, max=max(65536, seq_len))},)


def first_tensor(out: Any) -> torch.Tensor:
    import torch.utils._pytree as pytree

    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise TypeError(f"the model's output has no tensor: {type(out).__name__}")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reference_outputs(loaded: LoadedModel, ids: list[torch.Tensor]) -> list[torch.Tensor]:
    """The model's first output tensor on each of ``ids`` (the eager reference every target is
    compared with).

    Raises:
        UsageError: the model's forward raises, or its output holds no tensor.
    """
    refs = []
    for x in ids:
        shape = f"({', '.join(map(str, x.shape))}) int64 ids"
        try:
            with torch.no_grad():
                out = loaded.module(x)
        except Exception as e:
            raise UsageError(
                f"--model {loaded.name!r}: its forward on {shape} raised "
                f"{type(e).__name__}: {_one_line(str(e))}"
            ) from None
        try:
            refs.append(first_tensor(out).detach().clone())
        except TypeError:
            raise UsageError(
                f"--model {loaded.name!r}: its forward on {shape} returned no tensor "
                f"(got {type(out).__name__}); it must return a tensor or a pytree holding one"
            ) from None
    return refs


def _available_bytes(device: str) -> int | None:
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on this platform
        return None


def estimate_bytes(loaded: LoadedModel, batch: int, seq_len: int) -> int:
    """A lower estimate of the memory one forward at ``(batch, seq_len)`` needs and the report
    holds: the logits (eager's reference, a target's output, their difference) and the widest
    layer's activations a few times over, in the parameters' dtype."""
    widths = [loaded.vocab_size]
    for m in loaded.module.modules():
        if isinstance(m, torch.nn.Linear):
            widths.append(m.out_features)
        elif isinstance(m, torch.nn.Embedding):
            widths.append(m.embedding_dim)
    itemsize = next((p.element_size() for p in loaded.module.parameters()), 4)
    return batch * seq_len * itemsize * (3 * loaded.vocab_size + 4 * max(widths))


def check_memory(loaded: LoadedModel, batch: int, seq_len: int, device: str) -> None:
    """Raise :class:`UsageError` when :func:`estimate_bytes` is above the memory free on
    ``device`` (checked before the first forward)."""
    need, free = estimate_bytes(loaded, batch, seq_len), _available_bytes(device)
    if free is not None and need > free:
        raise UsageError(
            f"--seq-len {seq_len} with --batch {batch} needs at least {need / 2**30:.1f} GiB for "
            f"{loaded.name}'s logits ({loaded.vocab_size} per token) and activations; "
            f"{free / 2**30:.1f} GiB is free on {device}: choose a smaller --seq-len"
        )
