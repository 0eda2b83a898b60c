"""Compile the fused inference kernels (``ssmscan::gated_rms_norm`` / ``rms_norm`` and
``ssmscan::conv1d_step`` / ``causal_conv1d``) for sm_90 without a GPU (run without TRITON_INTERPRET, which accepts
code the compiler rejects): every flag combination, 16-bit and float32 tensors, one-pass and
two-pass norms. Prints one "<name> ok" line per case; exits non-zero on the first failure."""

from __future__ import annotations

import itertools
import os
import sys

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET=1: this compiles for sm_90")

from ssmscan.ops.causal_conv1d import triton_fwd as chunk_conv_fwd
from ssmscan.ops.conv1d_step import triton_fwd as conv_fwd
from ssmscan.ops.rms_norm import triton_fwd as norm_fwd
from ssmscan.testing.triton_sm90 import compile_sm90


def main() -> None:
    for (xt, wt), (block, one), has_z, nbg, rnd, res in itertools.product(
        (("*bf16", "*bf16"), ("*fp32", "*bf16"), ("*fp16", "*fp32"), ("*fp32", "*fp32")),
        ((1024, True), (8192, True), (4096, False)),
        (True, False),
        (True, False),
        (True, False),
        (True, False),
    ):
        if (nbg and not has_z) or (res and (has_z or not rnd)):
            continue
        vals = dict(x=xt, z=xt if has_z else "*fp32", r="*fp32", w=wt, out=wt if rnd else xt,
                    new_r="*fp32", dim=1536, group_size=768, s_x_r=1536, s_z_r=3352, s_r_r=1536,
                    eps="fp32", BLOCK=block, ONE_PASS=one, HAS_Z=has_z, NORM_BEFORE_GATE=nbg,
                    ROUND_X=rnd, HAS_RES=res)  # fmt: skip
        compile_sm90(
            norm_fwd._gated_rms_norm_fwd_kernel, vals, min(max(block // 256, 1), 8), ["eps"]
        )
        print(
            f"norm x={xt[1:]} w={wt[1:]} block={block} z={has_z} nbg={nbg} round={rnd} "
            f"residual={res} ok"
        )
    for (xt, st), has_bias, silu, in_place in itertools.product(
        (("*bf16", "*bf16"), ("*fp32", "*fp32"), ("*fp16", "*fp32")),
        (True, False),
        (True, False),
        (False, True),
    ):
        vals = dict(x=xt, state=st, w=xt, bias=xt, out=xt, new_state=st, dim=1792, K=4,
                    s_x_b=3352, s_x_d=1, s_s_b=7168, s_s_d=4, s_s_k=1, s_w_d=4, s_w_k=1,
                    s_bias_d=1, BLOCK_D=128, KP=4, HAS_BIAS=has_bias, SILU=silu,
                    IN_PLACE=in_place)  # fmt: skip
        compile_sm90(conv_fwd._conv1d_step_fwd_kernel, vals, 4)
        print(
            f"conv1d_step x={xt[1:]} state={st[1:]} bias={has_bias} silu={silu} "
            f"in_place={in_place} ok"
        )

    # x and out token-major (Mamba-2's xBC slice) or channel-major (Mamba-1's prefill)
    layouts = {
        "token-major": dict(s_x_b=3352 * 2048, s_x_l=3352, s_x_d=1, s_o_b=1792 * 2048,
                            s_o_l=1792, s_o_d=1),
        "channel-major": dict(s_x_b=3584 * 2048, s_x_l=1, s_x_d=2048, s_o_b=1792 * 2048,
                              s_o_l=1, s_o_d=2048),
    }  # fmt: skip
    for (xt, st), has_state, has_bias, silu, layout in itertools.product(
        (("*bf16", "*fp32"), ("*fp32", "*fp32"), ("*fp16", "*fp16")),
        (True, False),
        (True, False),
        (True, False),
        layouts,
    ):
        vals = dict(x=xt, state=st, w=xt, bias=xt, out=xt, new_state=xt, L=2048, dim=1792,
                    s_s_b=7168, s_s_d=4, s_s_k=1, s_w_d=4, s_w_k=1, s_bias_d=1, K=4, KP=4,
                    BLOCK_L=32, BLOCK_D=64, HAS_STATE=has_state, HAS_BIAS=has_bias, SILU=silu,
                    **layouts[layout])  # fmt: skip
        compile_sm90(chunk_conv_fwd._causal_conv1d_fwd_kernel, vals, 4)
        print(
            f"causal_conv1d x={xt[1:]} state={st[1:]} state={has_state} bias={has_bias} "
            f"silu={silu} {layout} ok"
        )


if __name__ == "__main__":
    main()
