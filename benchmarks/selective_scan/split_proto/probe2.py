# ruff: noqa: B023, B007, E731  (device probes: lambdas timed at once)
"""Device A/B: prototype split kernel vs the library's new forward (op, and launch alone)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from ssmscan.ops.selective_scan import op as _op  # noqa
from ssmscan.ops.selective_scan import triton_fwd, shapes
import bench_gpu
import fwd_split
from probe_split import proto, prep_of, t

for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
    for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        kw = bench_gpu.make(*shape, dtype)
        batch, dim, L, N = shape
        t_op = t(lambda: bench_gpu.ours_fwd(kw))
        outs = shapes.empty_forward_outputs(kw["u"], kw["A"])
        lk = lambda: triton_fwd.launch(
            kw["u"],
            kw["delta"],
            kw["A"],
            kw["B"],
            kw["C"],
            kw["D"],
            kw["z"],
            kw["delta_bias"],
            None,
            True,
            *outs,
        )
        t_launch = t(lk)
        prep = prep_of(kw)
        out = torch.empty_like(kw["u"])
        ck = torch.empty(batch, dim, L // 256 + 1, 16, device="cuda")
        t_proto = t(lambda: proto(kw, 16, 32, 4, out, ck, prep))
        print(
            f"{shape} {dtn}: op {t_op:.3f} launch {t_launch:.3f} proto(TT16) {t_proto:.3f}",
            flush=True,
        )
for name, k in (
    ("lib", triton_fwd._selective_scan_fwd_kernel),
    ("proto", fwd_split.fwd_split_kernel),
):
    for dev, cache in k.device_caches.items():
        for key, ck in cache[0].items():
            print(
                name,
                "regs",
                ck.n_regs,
                "spills",
                ck.n_spills,
                "warps",
                ck.metadata.num_warps,
                "smem",
                ck.metadata.shared,
                "consts",
                str(getattr(ck.src, "constants", ""))[:300],
            )
