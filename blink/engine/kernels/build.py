"""Compile and load one of our C++ kernels with ``torch.utils.cpp_extension``, or say why not.

Each kernel is built once per checkout and source version the first time an engine starts, in its
own directory under torch's extensions root (``<name>-<digest>``, the digest covering torch's
version, the flags, the sources' paths and contents and our shared headers). One shared
``<name>`` directory made two checkouts (say, CI and a developer's tree) rebuild over each
other's files on every start. Any failure (no compiler, a failed build) is logged once and
reported as False so the caller keeps its aten path: engine start never fails for want of a
compiler.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# -fopenmp: at::parallel_for's OpenMP region must be compiled in; libgomp.so.1 resolves to the one
# torch already loaded (same soname), so the kernels run on torch's own thread pool.
_BASE_CFLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma", "-fopenmp"]
_LDFLAGS = ["-fopenmp"]
# Held (flock) by the process building in a directory; the kernel drops it when that process
# dies, however it dies, so a waiter never waits on a dead builder.
_FLOCK_NAME = "blink-build.flock"
# A build directory no engine has loaded for this long is removed when a sibling (same library,
# another source version or checkout) loads: each is a few MB, and a day of kernel edits leaves
# dozens. A week keeps every checkout in regular use, which rebuilds (~20 s) if it was wrong.
STALE_SECONDS = 7 * 24 * 3600
_DIGEST = re.compile(r"[0-9a-f]{16}")


def cpu_has_avx512() -> bool:
    """The AVX-512 kernels can run here (torch's own dispatch level, so it agrees with aten's)."""
    return torch.backends.cpu.get_cpu_capability() in ("AVX512", "AMX")


def build_where_avx512(what: str, fallback: str, build: Callable[[], bool]) -> bool:
    """``build()`` on a CPU with AVX-512; elsewhere False and one log line naming ``what`` and the
    path the caller keeps instead (every kernel here is AVX-512 code)."""
    if not cpu_has_avx512():
        log.info("%s needs AVX-512 (CPU capability %s); %s", what, torch.backends.cpu.get_cpu_capability(), fallback)
        return False
    return build()


def cflags(extra: list[str] | None = None) -> list[str]:
    """The compiler flags every kernel is built with, plus ``extra``."""
    return _BASE_CFLAGS + [_headers_define()] + (extra or [])


def build_directory(name: str, sources: list[Path], flags: list[str]) -> Path:
    """``<torch extensions root>/<name>-<digest>``: one directory per checkout and source version."""
    from torch.utils import cpp_extension

    digest = hashlib.sha256()
    for part in (torch.__version__, *flags, *_LDFLAGS):
        digest.update(part.encode() + b"\0")
    for source in sources:
        digest.update(str(source.resolve()).encode() + b"\0")
        digest.update(source.read_bytes())
    root = Path(cpp_extension._get_build_directory("", verbose=False))  # torch's root, honours TORCH_EXTENSIONS_DIR
    return root / f"{name}-{digest.hexdigest()[:16]}"


def load_extension(name: str, sources: list[Path], extra_cflags: list[str] | None = None) -> bool:
    """Build (or reuse) and load the op library ``name`` from ``sources``; False on any failure."""
    try:
        from torch.utils import cpp_extension

        flags = cflags(extra_cflags)
        directory = build_directory(name, sources, flags)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / _FLOCK_NAME, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # waits only for a live builder of this directory
            # torch's own lock file is created and removed by the builder; with our flock held no
            # live builder is inside, so one still here was left by a build that was killed, and
            # torch would wait on it forever (engine start would hang).
            (directory / "lock").unlink(missing_ok=True)
            os.utime(directory / _FLOCK_NAME)  # marks the last use, which pruning reads
            # Copies: torch appends its own -L/-l flags to the lists it is given, and the
            # module-level _LDFLAGS growing with each load made every later digest depend on the
            # order the libraries loaded in, so an engine rebuilt what the test run prebuilt.
            cpp_extension.load(
                name=name,
                sources=[str(s) for s in sources],
                extra_cflags=list(flags),
                extra_ldflags=list(_LDFLAGS),
                build_directory=str(directory),
                is_python_module=False,
                verbose=False,
            )
    except Exception as exc:  # noqa: BLE001 - any build/load failure means "use aten"
        log.warning("kernel library %s unavailable (%s: %s); using aten", name, type(exc).__name__, exc)
        return False
    prune_stale(name, directory)
    return True


def prune_stale(name: str, keep: Path) -> list[Path]:
    """Remove ``keep``'s sibling build directories of library ``name`` unused for STALE_SECONDS.

    Only directories this module made (a digest name and our flock file) are touched, and only
    when no builder holds their flock; a process that already loaded a removed library keeps it
    mapped. Returns what was removed; never raises.
    """
    removed: list[Path] = []
    now = time.time()
    for sibling in keep.parent.glob(f"{name}-*"):
        marker = sibling / _FLOCK_NAME
        if sibling == keep or not _DIGEST.fullmatch(sibling.name[len(name) + 1 :]):
            continue
        try:
            if now - marker.stat().st_mtime < STALE_SECONDS:
                continue
            with open(marker, "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError while a builder is inside
                shutil.rmtree(sibling)
        except OSError:
            continue
        removed.append(sibling)
    if removed:
        log.info("removed %d stale %s build(s) unused for %d days", len(removed), name, STALE_SECONDS // 86400)
    return removed


def _headers_define() -> str:
    """A define naming the digest of our shared headers (simd_exp.h, ...): torch rebuilds an
    extension when its sources or build flags change, and headers are neither."""
    digest = hashlib.sha256()
    for header in sorted(Path(__file__).parent.glob("*.h")):
        digest.update(header.read_bytes())
    return f"-DBLINK_KERNEL_HEADERS_{digest.hexdigest()[:16]}"
