"""Compile the SSD Triton kernels for sm_90 without a GPU (run without TRITON_INTERPRET: the
interpreter accepts code the compiler rejects) over their dtypes and flags, at Mamba-2's
geometry (headdim 64, dstate 128; or those given) with the planner's H200 plan, and report each
kernel's registers and spills from ptxas. Prints one line per case; exits non-zero on the first
failure.

    PYTHONPATH=src python tests/ops/ssd_scan/sm90_compile_check.py [HEADDIM DSTATE]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET=1: this compiles for sm_90")

import torch

from ssmscan.ops.ssd_scan import triton_bwd, triton_fwd, triton_walk
from ssmscan.ops.ssd_scan.plan import H200, plan_ssd
from ssmscan.testing.triton_sm90 import SM90

FLOATS = {"dt_min", "dt_max"}


def _ptxas_report(compiled) -> str:
    """Registers and spill bytes from ptxas -v on the kernel's PTX."""
    from triton.backends.nvidia import compiler as nv

    ptxas = nv.get_ptxas(90).path
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(compiled.asm["ptx"])
    try:
        res = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True)  # fmt: skip
    finally:
        os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", res.stderr)
    spill = re.search(r"(\d+) bytes spill stores", res.stderr)
    return f"regs {regs.group(1) if regs else '?'} spill {spill.group(1) if spill else '?'}"


def _compile(kernel, values, num_warps, num_stages):
    """``triton.compile`` for sm_90 as ``ssmscan.testing.triton_sm90.compile_sm90`` does, with
    string constexprs (``PRECISION``) and float scalars (``FLOATS``, typed float64 as Inductor
    types them): a str value of a non-constexpr parameter is a pointer type, 16-byte aligned;
    ints are i32; an absent tensor (None) the float32 placeholder the launcher passes (Note [no
    None pointers])."""
    import triton

    sig, const, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        v = values[name]
        if v is None and i not in kernel.constexprs:
            v = "*fp32"
        if i in kernel.constexprs or isinstance(v, bool):
            sig[name], const[name] = "constexpr", v
        elif name in FLOATS:
            # float64: how Inductor types a Python float of a user kernel (``wrap_triton`` under
            # torch.compile); the kernels must keep float32 arithmetic whatever the scalar's type
            sig[name] = "fp64"
        elif isinstance(v, str):
            sig[name] = v
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=SM90,
                          options={"num_warps": num_warps, "num_stages": num_stages})  # fmt: skip


def _check(name, kernel, vals, warps, stages=3):
    compiled = _compile(kernel, vals, warps, stages)
    print(f"{name}: ok, {_ptxas_report(compiled)}", flush=True)


def main() -> None:
    P, N = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (64, 128)
    for dtype, t in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        plan = plan_ssd(24, P, 1, N, dtype, H200)
        prec = triton_fwd.precision(plan, dtype)
        sizes = dict(L=2048, H=24, P=P, G=1, N=N, NC=32, PN=P * N, NBLK=8, SEG=11, CPS=94,
                     dt_min=0.0, dt_max=0.0, ends="*fp32", kseg="*fp32")  # fmt: skip
        for f32_dot in (False, True):
            common = dict(CHUNK=plan.chunk, BLOCK_P=plan.block_p, PRECISION=prec, F32_DOT=f32_dot,
                          EMULATE=False)  # fmt: skip
            vals = dict(B=f"*{t}", C=f"*{t}", cb="*fp32", L=sizes["L"], G=sizes["G"],
                        N=sizes["N"], NC=sizes["NC"], CHUNK=plan.chunk,
                        BLOCK_N=64, PRECISION=prec, F32_DOT=f32_dot,
                        EMULATE=False)  # fmt: skip
            _check(f"cb {t} f32_dot={f32_dot}", triton_fwd._ssd_scan_cb_kernel, vals, 4)
            for flags in (True, False):
                # the backward's states: float32, or x's dtype by plan.bwd_states_16
                bst = t if plan.bwd_states_16 and t != "fp32" else "fp32"
                if not flags:  # the backward's walks, once a dtype
                    dstates_tiles = dict(CHUNK=plan.chunk, BLOCK_P=plan.walk_block_p,
                                         BLOCK_N=plan.walk_block_n)  # fmt: skip
                    for all_flags in (True, False):
                        vals_s = dict(x=f"*{t}", dt=f"*{t}",
                                      dt_bias="*fp32" if all_flags else None, A="*fp32",
                                      B=f"*{t}", seg="*i64" if all_flags else None,
                                      init="*fp32" if all_flags else None, dtp="*fp32",
                                      cs="*fp32", cslo="*fp32", states=f"*{bst}", final="*fp32", **sizes,
                                      SOFTPLUS=all_flags, HAS_BIAS=all_flags, HAS_MIN=all_flags,
                                      HAS_MAX=all_flags, HAS_SEG=all_flags, HAS_INIT=all_flags,
                                      HAS_LO=True, PART=0,
                                      **dict(common, CHUNK=plan.chunk,
                                             BLOCK_P=plan.states_walk_block_p,
                                             BLOCK_N=plan.states_walk_block_n))  # fmt: skip
                        _check(f"states walk {t} f32_dot={f32_dot} flags={all_flags}",
                               triton_walk._ssd_scan_states_walk_kernel, vals_s,
                               plan.warps_states_walk, plan.states_walk_stages)  # fmt: skip
                        vals_d = dict(dout=f"*{t}", z=f"*{t}" if all_flags else None, C=f"*{t}",
                                      seg="*i64" if all_flags else None, cs="*fp32",
                                      states=f"*{bst}", dfinal="*fp32" if all_flags else None,
                                      dinit=f"*{t}" if all_flags else None, dstates=f"*{bst}",
                                      dk="*fp32", **sizes, HAS_Z=all_flags, HAS_SEG=all_flags,
                                      HAS_DFINAL=all_flags, HAS_INIT=all_flags,
                                      **dict(common, **dstates_tiles))  # fmt: skip
                        # the split walk's parts (Note [SSD split walks]) with every flag
                        for part in (0, 1, 2) if all_flags else (0,):
                            _check(f"dstates walk {t} f32_dot={f32_dot} flags={all_flags} "
                                   f"part={part}", triton_walk._ssd_scan_dstates_walk_kernel,
                                   dict(vals_d, PART=part), plan.warps_walk,
                                   plan.walk_stages)  # fmt: skip
                vals = dict(x=f"*{t}", z=f"*{t}" if flags else None, dout=f"*{t}", dt=f"*{t}",
                            dt_bias="*fp32" if flags else None, A="*fp32",
                            Dv="*fp32" if flags else None, B=f"*{t}", C=f"*{t}",
                            seg="*i64" if flags else None, dtp="*fp32", cs="*fp32", cslo="*fp32",
                            states=f"*{bst}", dstates=f"*{bst}", dk="*fp32",
                            cb="*fp32" if flags else None, dx=f"*{t}",
                            dz=f"*{t}" if flags else None, ddt="*fp32",
                            dD="*fp32" if flags else None, dA="*fp32", **sizes,
                            SOFTPLUS=flags, HAS_BIAS=flags, HAS_MIN=flags, HAS_MAX=flags,
                            HAS_D=flags, D_PER_HEAD=False, HAS_Z=flags, HAS_SEG=flags,
                            HAS_CB=flags,
                            STATE_DOT_16=bst != "fp32", DA_SUMS=plan.da_sums,
                            BLOCK_N=plan.block_n, BLOCK_K=8, **common)  # fmt: skip
                _check(f"dx {t} f32_dot={f32_dot} flags={flags} states={bst}",
                       triton_bwd._ssd_scan_bwd_dx_kernel, vals, plan.warps_dx, plan.stages)  # fmt: skip
                vals = dict(x=f"*{t}", z=f"*{t}" if flags else None, dout=f"*{t}",
                            B=f"*{t}", C=f"*{t}", seg="*i64" if flags else None, dtp="*fp32",
                            cs="*fp32", cslo="*fp32",
                            states=f"*{bst}", dstates=f"*{bst}", dB="*fp32", dC="*fp32", **sizes,
                            NS=3, HS=plan.dbc_heads, HAS_Z=flags, HAS_SEG=flags,
                            **dict(common, BLOCK_P=plan.dbc_block_p,
                                   BLOCK_N=plan.dbc_block_n))  # fmt: skip
                _check(f"dbc {t} f32_dot={f32_dot} flags={flags}",
                       triton_bwd._ssd_scan_bwd_dbc_kernel, vals, plan.warps_dbc, plan.stages)  # fmt: skip
        # the forward: its states walk and output kernel at their tiles
        st = t if plan.fwd_states_16 else "fp32"
        for flags in (True, False):
            vals = dict(x=f"*{t}", dt=f"*{t}", dt_bias="*fp32" if flags else None, A="*fp32",
                        B=f"*{t}", seg="*i64" if flags else None,
                        init="*fp32" if flags else None, dtp="*fp32", cs="*fp32", cslo=None,
                        states=f"*{st}", final="*fp32", **sizes, SOFTPLUS=flags,
                        HAS_BIAS=flags, HAS_MIN=flags, HAS_MAX=flags, HAS_SEG=flags,
                        HAS_INIT=flags, HAS_LO=False, CHUNK=plan.fwd_chunk,
                        BLOCK_P=plan.states_walk_block_p,
                        BLOCK_N=plan.states_walk_block_n, PRECISION=prec,
                        F32_DOT=plan.fwd_f32_dot, EMULATE=False)  # fmt: skip
            for part in (0, 1, 2) if flags else (0,):  # Note [SSD split walks]
                _check(f"forward states walk {t} flags={flags} part={part}",
                       triton_walk._ssd_scan_states_walk_kernel, dict(vals, PART=part),
                       plan.warps_states_walk, plan.states_walk_stages)  # fmt: skip
            vals = dict(x=f"*{t}", z=f"*{t}" if flags else None, Dv="*fp32" if flags else None,
                        B=f"*{t}", C=f"*{t}", seg="*i64" if flags else None, A="*fp32",
                        dtp="*fp32", cs="*fp32", states=f"*{st}", out=f"*{t}", **sizes,
                        HAS_D=flags, D_PER_HEAD=flags, HAS_Z=flags, HAS_SEG=flags,
                        CHUNK=plan.fwd_chunk, BLOCK_P=plan.out_block_p,
                        BLOCK_N=plan.out_block_n, PRECISION=prec,
                        F32_DOT=plan.fwd_f32_dot, EMULATE=False)  # fmt: skip
            _check(f"forward out {t} flags={flags}", triton_fwd._ssd_scan_fwd_out_kernel, vals,
                   plan.warps_out, plan.out_stages)  # fmt: skip

    for start in (True, False):
        for reverse in (True, False):
            vals = dict(ends="*fp32", kseg="*fp32", start="*fp32" if start else None, SEG=11,
                        PN=P * N, HAS_START=start, REVERSE=reverse,
                        BLOCK=plan.split_pass_block)  # fmt: skip
            _check(
                f"parts pass start={start} reverse={reverse}",
                triton_walk._ssd_scan_parts_pass_kernel,
                vals,
                4,
            )


if __name__ == "__main__":
    main()
