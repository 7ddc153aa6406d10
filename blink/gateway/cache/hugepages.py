"""Back a native library's big allocation with transparent huge pages (Linux; best effort).

hnswlib mallocs its level-0 graph (vectors + links: ~1.7 KB a row, 340 MB for a 100k-row index with
room to double) in one block; glibc maps it with 4 KB pages, so every node a search visits is a TLB
miss on top of the cache miss (the embedding's weights evict the graph between lookups). With
``transparent_hugepage`` in ``madvise`` mode (Debian's default) only regions that ask get 2 MB pages,
and hnswlib exposes no allocator hook, so the block is found as the anonymous mapping that appeared
while it was allocated and is advised before it is first written (a neighbouring anonymous mapping
the kernel merged it with is advised too: a hint, harmless). Anything unexpected (another OS,
no new mapping, an older kernel) leaves the memory as it was.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("blink.cache")

T = TypeVar("T")

# <sys/mman.h>: MADV_HUGEPAGE (since Linux 2.6.38).
_MADV_HUGEPAGE = 14
# Smaller mappings are left alone: above the 8 MB stack glibc maps for each new thread (one may start
# meanwhile), below the smallest graph (10k rows past the brute-force threshold, room for 2x: ~34 MB).
_MIN_BYTES = 16 << 20


def _anonymous_regions() -> set[tuple[int, int]]:
    regions: set[tuple[int, int]] = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5:  # no path: anonymous (heap, stacks and files are named)
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if hi - lo >= _MIN_BYTES:
                    regions.add((lo, hi))
    return regions


def allocate_huge(allocate: Callable[[], T]) -> T:
    """Run ``allocate`` (which must not yet write its big block) and advise huge pages for it."""
    if not sys.platform.startswith("linux"):
        return allocate()
    try:
        before = _anonymous_regions()
    except OSError:
        return allocate()
    result = allocate()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for lo, hi in _anonymous_regions() - before:
            if libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_HUGEPAGE) != 0:
                log.debug("madvise(MADV_HUGEPAGE) failed: errno %d", ctypes.get_errno())
    except OSError:
        pass
    return result
