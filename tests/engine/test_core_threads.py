"""The engine-core process caps its thread pools before torch starts them."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("threads", [1, 2])
def test_configure_threads_caps_intra_and_interop_pools(threads: int) -> None:
    # A fresh interpreter, as the spawned core process is: nothing has started a pool yet.
    code = (
        "from blink.engine.core_process import configure_threads\n"
        f"configure_threads({threads})\n"
        "import os, torch\n"
        "torch.ones(4096).sum()\n"
        "print(torch.get_num_threads(), torch.get_num_interop_threads(), os.environ['OMP_NUM_THREADS'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [str(threads), "1", str(threads)]
