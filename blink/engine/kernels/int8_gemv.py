"""Build and register ``torch.ops.blink.int8_gemv``, our AVX-512 int8 weight-only matmul.

aten's ``_weight_int8pack_mm`` is the bottleneck of batch-1 decode, streaming weights well below
the memory's bandwidth (benchmarks/RESULTS.md, "int8 GEMV kernel"); ``int8_gemv.cpp`` computes the same thing for 1 to
``MAX_ROWS`` bf16 rows (the kernel itself is ``int8_matmul.h``, shared with the fused decode step). The op is compiled once per machine with ``torch.utils.cpp_extension.load`` (cached in
torch's extensions directory) and registered with ``TORCH_LIBRARY_FRAGMENT`` plus a fake impl, so
``torch.compile`` calls it as an extern op inside the frozen decode graph.

Anything missing (no AVX-512, no compiler, a failed build, ``int8_kernel: false``) means the
caller keeps aten's op: engine start never fails for want of a compiler.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

from blink.engine.kernels.build import build_where_avx512, load_extension

log = logging.getLogger(__name__)

# Activation rows the kernel serves: int8_matmul.h's kMaxRows.
MAX_ROWS = 64
_SOURCE = Path(__file__).with_name("int8_gemv.cpp")  # includes int8_matmul.h


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    if not load_extension("blink_int8_gemv", [_SOURCE]):
        return False

    @torch.library.register_fake("blink::int8_gemv")
    def _fake(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], w.shape[0]))

    log.info("int8 linears of 1-%d rows can use blink::int8_gemv (AVX-512)", MAX_ROWS)
    return True


def int8_gemv_available() -> bool:
    """True when ``torch.ops.blink.int8_gemv`` can be used (builds it on the first call)."""
    return build_where_avx512("int8 GEMV kernel", "using aten", _build)
