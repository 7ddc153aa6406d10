"""Hand-written CPU kernels, built on first use where a library op is the bottleneck."""
