"""Compile and load one of our C++ kernels with ``torch.utils.cpp_extension``, or say why not.

Each kernel is built once per machine (cached in torch's extensions directory) the first time an
engine starts. Any failure (no compiler, a failed build) is logged once and reported as False so
the caller keeps its aten path: engine start never fails for want of a compiler.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# A build takes ~35 s here (up to ~2 min on a loaded machine); a lock older than this was left
# by a build that was killed, and torch would wait on it forever (engine start would hang).
STALE_LOCK_SECONDS = 600.0
# -fopenmp: at::parallel_for's OpenMP region must be compiled in; libgomp.so.1 resolves to the one
# torch already loaded (same soname), so the kernels run on torch's own thread pool.
_BASE_CFLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma", "-fopenmp"]


def cpu_has_avx512() -> bool:
    """The AVX-512 kernels can run here (torch's own dispatch level, so it agrees with aten's)."""
    return torch.backends.cpu.get_cpu_capability() in ("AVX512", "AMX")


def drop_stale_lock(lock: Path) -> None:
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
            lock.unlink()
            log.warning("removed a stale extension build lock %s", lock)
    except FileNotFoundError:
        pass


def load_extension(name: str, sources: list[Path], extra_cflags: list[str] | None = None) -> bool:
    """Build (or reuse) and load the op library ``name`` from ``sources``; False on any failure."""
    try:
        from torch.utils import cpp_extension

        drop_stale_lock(Path(cpp_extension._get_build_directory(name, verbose=False)) / "lock")
        cpp_extension.load(
            name=name,
            sources=[str(s) for s in sources],
            extra_cflags=_BASE_CFLAGS + [_headers_define()] + (extra_cflags or []),
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - any build/load failure means "use aten"
        log.warning("kernel library %s unavailable (%s: %s); using aten", name, type(exc).__name__, exc)
        return False
    return True


def _headers_define() -> str:
    """A define naming the digest of our shared headers (simd_exp.h, ...): torch rebuilds an
    extension when its sources or build flags change, and headers are neither."""
    digest = hashlib.sha256()
    for header in sorted(Path(__file__).parent.glob("*.h")):
        digest.update(header.read_bytes())
    return f"-DBLINK_KERNEL_HEADERS_{digest.hexdigest()[:16]}"
