"""ssmscan in one minute (CPU): the selective scan op against its float64 oracle and the
sequential loop, under torch.compile, and exported with torch.export.

    python examples/quickstart.py
"""

from __future__ import annotations

import time

import torch

import ssmscan
from ssmscan.testing import make_selective_scan_inputs, rel_error


def median_ms(fn, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[reps // 2] * 1e3


def main() -> None:
    torch.manual_seed(0)
    print(
        f"ssmscan {ssmscan.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    # 1. A Mamba-sized scan (batch 1, dim 1536, L 1024, N 16) in the real configuration.
    kw = make_selective_scan_inputs(1, 1536, 1024, 16, seed=0)
    out, last = ssmscan.selective_scan(**kw, return_last_state=True)
    assert last.shape == (1, 1536, 16)
    few = {
        k: (
            v[:, :16]
            if k in ("u", "delta", "z")
            else v[:16]
            if k in ("A", "D", "delta_bias")
            else v
        )
        for k, v in kw.items()
    }
    ref = ssmscan.selective_scan_reference(
        **{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in few.items()}
    )
    print(
        f"selective_scan (1, 1536, 1024, 16): max rel. error vs float64 oracle {rel_error(out[:, :16], ref):.1e}"
    )
    t_ours = median_ms(lambda: ssmscan.selective_scan(**kw))
    print(f"  CPU kernel forward: {t_ours:.1f} ms")

    # 2. Gradients flow to every input.
    kw_g = make_selective_scan_inputs(
        2, 64, 300, 16, groups=2, has_initial_state=True, requires_grad=True
    )
    y, h = ssmscan.selective_scan(**kw_g, return_last_state=True)
    (y.square().mean() + h.sum()).backward()
    print(
        "  gradients:",
        ", ".join(k for k, v in kw_g.items() if isinstance(v, torch.Tensor) and v.grad is not None),
    )

    # 3. torch.compile(fullgraph=True): one graph, no break.
    @torch.compile(fullgraph=True, dynamic=True)
    def block(u, delta, A, B, C, D, z, bias):
        return ssmscan.selective_scan(u, delta, A, B, C, D, z, bias, True)

    args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    torch.testing.assert_close(block(*args), out)
    print("  torch.compile(fullgraph=True, dynamic=True): matches eager")

    # 4. torch.export keeps one ssmscan node, whatever L.
    class Scan(torch.nn.Module):
        def forward(self, u, delta, A, B, C):
            return ssmscan.selective_scan(u, delta, A, B, C, delta_softplus=True)

    small = make_selective_scan_inputs(1, 8, 40, 4)
    L = torch.export.Dim("L", min=2, max=1 << 20)
    ep = torch.export.export(
        Scan(),
        tuple(small[k] for k in ("u", "delta", "A", "B", "C")),
        dynamic_shapes=({2: L}, {2: L}, None, {2: L}, {2: L}),
    )
    nodes = [str(n.target) for n in ep.graph.nodes if "ssmscan" in str(n.target)]
    print(f"  torch.export with dynamic L: {len(ep.graph.nodes)} nodes, ssmscan nodes {nodes}")

    # 5. linear_scan: the recurrence of LRU / minGRU / RG-LRU layers.
    a, b = torch.rand(4, 2048, 256) * 0.5 + 0.5, torch.randn(4, 2048, 256)
    h_lin = ssmscan.linear_scan(a, b, dim=1)
    err = rel_error(h_lin, ssmscan.linear_scan_reference(a.double(), b.double(), dim=1))
    print(f"linear_scan (4, 2048, 256) along dim 1: max rel. error vs float64 oracle {err:.1e}")


if __name__ == "__main__":
    main()
