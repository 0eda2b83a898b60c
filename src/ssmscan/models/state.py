"""``MambaState``: the recurrent state a Mamba-1 or Mamba-2 LM carries from one call to the next.

Representation: a frozen dataclass of two tuples of plain tensors (one entry per layer),
registered as a pytree node with ``torch.export.register_dataclass``. Pytree registration is what
lets ``torch.compile(fullgraph=True)`` and ``torch.export`` take it as an input and return it as an
output: both flatten it to its tensors and rebuild it, so an exported decode step has the
signature ``(input_ids, conv_0, ..., ssm_0, ...) -> (logits, conv_0', ..., ssm_0', ...)``. By
default the model never mutates a state in place; every call returns fresh tensors (no
input/output aliasing in exported programs). With ``inplace=True`` a call writes the new state
into the given one instead (Note [in-place decode] in ``ssmscan.models.mamba``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MambaState:
    """Per-layer conv and SSM states of a Mamba LM after the tokens seen so far.

    Args:
        conv_states: one tensor per layer in the model's dtype, (batch, d_inner, d_conv) for
            Mamba-1 and (batch, conv_dim, d_conv) for Mamba-2: the last ``d_conv`` inputs of the
            causal convolution (left zero-padded while fewer were seen).
        ssm_states: one float32 tensor per layer (float64 for float64 models), (batch, d_inner,
            d_state) for Mamba-1 and (batch, nheads, headdim, d_state) for Mamba-2: the scan's
            state h after the last token.

    Example:
        >>> import torch
        >>> from ssmscan.models import MambaState
        >>> s = MambaState((torch.zeros(1, 8, 4),), (torch.zeros(1, 8, 16),))
        >>> s.n_layer, s.batch_size
        (1, 1)
    """

    conv_states: tuple[torch.Tensor, ...]
    ssm_states: tuple[torch.Tensor, ...]

    def __post_init__(self) -> None:
        if len(self.conv_states) != len(self.ssm_states):
            raise ValueError(
                f"MambaState needs one conv and one ssm state per layer; got "
                f"{len(self.conv_states)} conv and {len(self.ssm_states)} ssm states"
            )

    @property
    def n_layer(self) -> int:
        """Number of layers the state covers."""
        return len(self.ssm_states)

    @property
    def batch_size(self) -> int:
        """Batch size of the state."""
        return int(self.ssm_states[0].shape[0]) if self.ssm_states else 0


def check_inplace_states(
    inplace: bool, conv_state: torch.Tensor | None, ssm_state: torch.Tensor | None
) -> None:
    """An in-place call needs both states to write into."""
    if inplace and (conv_state is None or ssm_state is None):
        raise ValueError(
            "inplace=True writes the new states into the given ones: pass both conv_state and "
            f"ssm_state (got conv_state={'None' if conv_state is None else 'a tensor'}, "
            f"ssm_state={'None' if ssm_state is None else 'a tensor'})"
        )


def write_states(
    inplace: bool,
    result: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    conv_state: torch.Tensor | None,
    ssm_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A mixer's ``(out, new_conv_state, new_ssm_state)`` as it returns it: unchanged, or with
    ``inplace`` the new states copied into ``conv_state`` / ``ssm_state`` and those returned."""
    if not inplace:
        return result
    assert conv_state is not None and ssm_state is not None  # check_inplace_states
    out, new_conv_state, new_ssm_state = result
    return out, conv_state.copy_(new_conv_state), ssm_state.copy_(new_ssm_state)


torch.export.register_dataclass(MambaState, serialized_type_name="ssmscan.models.MambaState")
