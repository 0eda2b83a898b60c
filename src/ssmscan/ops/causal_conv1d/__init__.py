"""A causal depthwise convolution over a whole chunk of tokens: ``ssmscan::causal_conv1d``."""
