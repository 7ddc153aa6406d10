"""The huge-page advice lands on the block a native allocation maps, and only on new mappings."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from blink.gateway.cache.hugepages import allocate_huge

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _flags_of(address: int) -> list[str]:
    """VmFlags of the mapping holding ``address`` (``hg``: MADV_HUGEPAGE was applied)."""
    region = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            region = lo <= address < hi
        elif region and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError("address not mapped")


def _anonymous(size: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> mmap.mmap:
    """A private anonymous mapping, as malloc makes for a big block."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=prot)


def _address(m: mmap.mmap) -> int:
    view = np.frombuffer(m, dtype=np.uint8)
    try:
        return int(view.ctypes.data)
    finally:
        del view  # an exported buffer would keep the mapping from closing


@pytest.mark.skipif(not _THP.exists(), reason="this kernel has no transparent huge pages")
def test_the_block_mapped_during_the_allocation_is_advised_and_older_ones_are_not() -> None:
    # Mapped before: must stay as it was. Read-only, so the kernel cannot merge it with the new
    # block into one mapping (adjacent anonymous mappings with equal flags merge, and are advised together).
    older = _anonymous(16 << 20, mmap.PROT_READ)
    block = allocate_huge(lambda: _anonymous(32 << 20))
    try:
        assert "hg" in _flags_of(_address(block))
        assert "hg" not in _flags_of(_address(older))
        block[:4] = b"ok!!"  # still ordinary writable memory
        assert block[:4] == b"ok!!"
    finally:
        block.close()
        older.close()


def test_the_allocations_result_is_returned() -> None:
    assert allocate_huge(lambda: 42) == 42
