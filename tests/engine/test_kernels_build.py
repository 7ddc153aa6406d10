"""kernels/build.py: a killed build's lock must not hang engine start; a failed build means aten."""

from __future__ import annotations

import os
import time
from pathlib import Path

from blink.engine.kernels import build


def test_a_killed_builds_lock_is_dropped_a_live_one_kept(tmp_path: Path) -> None:
    stale, live = tmp_path / "stale", tmp_path / "live"
    stale.touch()
    live.touch()
    old = time.time() - 2 * build.STALE_LOCK_SECONDS
    os.utime(stale, (old, old))
    build.drop_stale_lock(stale)
    build.drop_stale_lock(live)
    build.drop_stale_lock(tmp_path / "absent")
    assert not stale.exists() and live.exists()


def test_a_source_that_does_not_compile_reports_false(tmp_path: Path) -> None:
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++;\n")
    assert build.load_extension(f"blink_test_broken_{os.getpid()}", [bad]) is False
