"""RMS norms of the Mamba models as fused ops: ``ssmscan::rms_norm`` and ``ssmscan::gated_rms_norm``."""
