# ruff: noqa: B023
"""Round 10: load order in the library's backward (``tile_rs``), as probe5-9 did for the forward:
patched copies of triton_bwd.py (B_t loads of a chunk-pass tile first; every B_t / C_t of a
reverse tile loaded once at its start and shared by the recompute and the adjoint), each run
through its own ``launch`` on the same inputs, gradients compared with the unpatched module.
``python probe10.py --offline`` prints sm_90 registers / spills instead (no GPU)."""

import importlib.util
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SRC = os.path.join(
    os.path.dirname(__file__), "../../../src/ssmscan/ops/selective_scan/triton_bwd.py"
)
CHUNK_OLD = """            b_dtu = b_dt * b_u
            for j in tl.static_range(4):
                h = _state_step(
                    h, b_A2, _col(b_dt, o_t, j), _col(b_dtu, o_t, j), p_B, t0 + j, L, NP
                )
"""
CHUNK_NEW = """            b_dtu = b_dt * b_u
            for j in tl.static_range(4):
                h = tl.exp2(_col(b_dt, o_t, j)[:, None] * b_A2) * h + _col(b_dtu, o_t, j)[:, None] * Bs[j][None, :]
"""
CHUNK_LOADS_AT = "            tl.store(p_sc + k * SZ, h, mask=m_d2)\n"
CHUNK_LOADS = """            Bs = ()
            for j in tl.static_range(4):
                Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=t0 + j < L, other=0.0),)
"""
REV_AT = "            hs = tl.load(p_sc + k * SZ, mask=m_d2, other=0.0)\n"
REV_LOADS = "".join(
    f"            Bq{j} = tl.load(p_B + (t0 + {j}) * NP, mask=t0 + {j} < L, other=0.0)\n"
    f"            Cq{j} = tl.load(p_C + (t0 + {j}) * NP, mask=t0 + {j} < L, other=0.0)\n"
    for j in range(4)
)


def patch(name):
    s = open(SRC).read()
    if "chunk_pf" in name.split("+"):
        assert CHUNK_OLD in s and CHUNK_LOADS_AT in s
        s = s.replace(CHUNK_OLD, CHUNK_NEW).replace(CHUNK_LOADS_AT, CHUNK_LOADS_AT + CHUNK_LOADS)
    if "rev_pf" in name.split("+"):
        for head in ("    h = tl.exp2", "    g = G"):
            old = (
                "    b_B = tl.load(p_B + t * NP, mask=m, other=0.0)\n"
                "    b_C = tl.load(p_C + t * NP, mask=m, other=0.0)\n" + head
            )
            assert old in s, head
            s = s.replace(old, "    b_B = p_B\n    b_C = p_C\n" + head)
        assert REV_AT in s
        s = s.replace(REV_AT, REV_AT + REV_LOADS)

        def sub_call(m):
            d = m.group(2) or "0"
            return f"Bq{d}, Cq{d}, dC0, lane, t0{m.group(1) or ''},"

        s, n1 = re.subn(r"p_B, p_C, dC0, lane, t0( \+ (\d))?,", sub_call, s)

        s, n2 = re.subn(
            r"p_B,\n\s+p_C,\n\s+dB0,\n\s+lane,\n\s+dA_acc,\n\s+t0( \+ (\d))?,",
            lambda m: (
                m.group(0)
                .replace("p_B,", f"Bq{m.group(2) or '0'},")
                .replace("p_C,", f"Cq{m.group(2) or '0'},")
            ),
            s,
        )
        assert (n1, n2) == (4, 4), (n1, n2)
    path = f"/tmp/bwd_{name.replace('+', '_')}.py"
    open(path, "w").write(s)
    spec = importlib.util.spec_from_file_location(f"bwd_{name.replace('+', '_')}", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


NAMES = ["base", "chunk_pf", "rev_pf", "chunk_pf+rev_pf"]


def offline():
    import collections

    import sass_report

    for n in NAMES:
        mod = patch(n)
        v, w, _ = sass_report.bwd_values(8, 4096, 2048, 16, "fp32")
        meta, sass = sass_report.sass_of(mod._selective_scan_bwd_tile_kernel, v, w, None, n)
        ops = collections.Counter(m.split(".")[0] for _, m, _ in sass_report.parse(sass))
        print(n, meta, "total", sum(ops.values()), {k: ops[k] for k in ("LDG", "LDL", "STL")})


def main():
    import bench_gpu
    from probe_split import t

    from ssmscan.ops.selective_scan import op as _op  # noqa: F401

    mods = {n: patch(n) for n in NAMES}
    for shape in [(8, 4096, 2048, 16), (16, 1536, 1024, 16)]:
        for dtn, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            kw = bench_gpu.make(*shape, dtype)
            args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
            out, _last, ckpt = torch.ops.ssmscan.selective_scan_fwd(*args, None, True)
            dout = torch.randn_like(out)
            u, delta, A, B, C, D, z, bias = args
            ref = None
            res = []
            for n, mod in mods.items():
                g = [torch.empty_like(x) for x in (u, delta, A, B, C)]
                opt = [torch.empty_like(x) for x in (D, z, bias)]

                def run():
                    mod.launch(dout, None, u, delta, A, B, C, D, z, bias, None, ckpt, True, *g, opt)

                run()
                torch.cuda.synchronize()
                got = [*g, *opt]
                if ref is None:
                    ref = [x.clone() for x in got]
                worst = max(
                    ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
                    for a, b in zip(got, ref)
                )
                res.append(f"{n} {t(run):.3f} d{worst:.0e}")
            print(shape[:3], dtn, " | ".join(res), flush=True)


if __name__ == "__main__":
    offline() if "--offline" in sys.argv else main()
