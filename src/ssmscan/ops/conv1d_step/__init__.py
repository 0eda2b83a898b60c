"""One decode step of a causal depthwise convolution: ``ssmscan::conv1d_step``."""
