"""Mamba-2 test configurations shared by the model tests."""

from ssmscan.models import Mamba2Config

# Odd widths: d_inner 72 in 6 heads of 12 and 3 groups, N 5, d_conv 3, biases, D per channel,
# a dt clamp, padded vocab 112 -> logits sliced to 100.
ODD = Mamba2Config(
    d_model=36, n_layer=3, vocab_size=100, d_state=5, d_conv=3, headdim=12, ngroups=3,
    bias=True, D_has_hdim=True, dt_limit=(0.002, 0.05), seed=7,
)  # fmt: skip
