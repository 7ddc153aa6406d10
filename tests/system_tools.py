"""Debian tools some tests drive (prometheus, promtool, chromium). ``.ci/system-deps.sh`` installs
them; a missing one fails the test with the fix, rather than skipping it unnoticed."""

from __future__ import annotations

import shutil

import pytest


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"'{tool}' is not installed: run `sudo bash .ci/system-deps.sh` (Debian packages for the tests)")
    return path
