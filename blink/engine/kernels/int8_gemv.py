"""Build and register ``torch.ops.blink.int8_gemv``, our AVX-512 int8 weight-only GEMV.

aten's ``_weight_int8pack_mm`` is the bottleneck of batch-1 decode (68% of a step; it streams
5.8 GB/s on 1 thread, 9.5 GB/s on 2 here); ``int8_gemv.cpp`` computes the same thing for 1-3
rows. The op is compiled once per machine with ``torch.utils.cpp_extension.load`` (cached in
torch's extensions directory) and registered with ``TORCH_LIBRARY_FRAGMENT`` plus a fake impl, so
``torch.compile`` calls it as an extern op inside the frozen decode graph.

Anything missing (no AVX-512, no compiler, a failed build, ``BLINK_INT8_KERNEL=aten``) means the
caller keeps aten's op: engine start never fails for want of a compiler.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# Activation rows the kernel serves: the compiled decode graph's batches (< DENSE_MIN_ROWS = 4).
MAX_ROWS = 3
# ``BLINK_INT8_KERNEL=aten`` turns the kernel off (A/B benchmarks, the fallback test).
ENV_SWITCH = "BLINK_INT8_KERNEL"
_SOURCE = Path(__file__).with_name("int8_gemv.cpp")
_NAME = "blink_int8_gemv"
# A build takes ~35 s here (up to ~2 min on a loaded machine); a lock older than this was left
# by a build that was killed, and torch would wait on it forever (engine start would hang).
_STALE_LOCK_SECONDS = 600.0


def _cpu_has_avx512() -> bool:
    return torch.backends.cpu.get_cpu_capability() in ("AVX512", "AMX")


def _drop_stale_lock(lock: Path) -> None:
    try:
        if time.time() - lock.stat().st_mtime > _STALE_LOCK_SECONDS:
            lock.unlink()
            log.warning("removed a stale extension build lock %s", lock)
    except FileNotFoundError:
        pass


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    try:
        from torch.utils import cpp_extension

        _drop_stale_lock(Path(cpp_extension._get_build_directory(_NAME, verbose=False)) / "lock")
        cpp_extension.load(
            name=_NAME,
            sources=[str(_SOURCE)],
            # -fopenmp: at::parallel_for's OpenMP region must be compiled in; libgomp.so.1 resolves
            # to the one torch already loaded (same soname), so this is torch's own thread pool.
            extra_cflags=["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - any build/load failure means "use aten"
        log.warning(
            "int8 GEMV kernel unavailable (%s: %s); using aten _weight_int8pack_mm", type(exc).__name__, exc
        )
        return False

    @torch.library.register_fake("blink::int8_gemv")
    def _fake(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], w.shape[0]))

    log.info("int8 linears at 1-%d rows use blink::int8_gemv (AVX-512)", MAX_ROWS)
    return True


def int8_gemv_available() -> bool:
    """True when ``torch.ops.blink.int8_gemv`` can be used (builds it on the first call)."""
    if os.environ.get(ENV_SWITCH, "").lower() == "aten":
        return False
    if not _cpu_has_avx512():
        log.info(
            "int8 GEMV kernel needs AVX-512 (CPU capability %s); using aten",
            torch.backends.cpu.get_cpu_capability(),
        )
        return False
    return _build()
