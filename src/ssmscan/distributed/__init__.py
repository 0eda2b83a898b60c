"""Context parallelism for scans: one long sequence sharded along time across the ranks of a
``torch.distributed`` process group (NCCL on GPU, gloo on CPU).

Each shard's effect on the next is one affine map per (batch, dim, state), so ranks exchange
O(batch * dim * N) numbers per call, never activations (Note [context-parallel scan] in
``_comm``).

``torch.compile``: verified on 2 gloo ranks with the default (graph breaks allowed): the local
scans compile, the collectives and the cross-rank checks (one per call in each direction, each
reading a small metadata tensor to the host) run eagerly between graphs; outputs and gradients
equal eager. ``fullgraph=True``
is not supported (the metadata check is data-dependent; the collectives are c10d, not
functional collectives).
"""

from ssmscan.distributed._comm import all_gather
from ssmscan.distributed.halo import prefix_halo
from ssmscan.distributed.linear_scan import linear_scan
from ssmscan.distributed.selective_scan import selective_scan

__all__ = ["all_gather", "linear_scan", "prefix_halo", "selective_scan"]
