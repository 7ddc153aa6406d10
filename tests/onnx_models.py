"""The ONNX export of all-MiniLM-L6-v2 made once per test session, shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest


def shared_onnx_dir(factory: pytest.TempPathFactory) -> Path:
    """fp32 and int8 exports under the session's base temp dir (reused when another folder made them)."""
    import torch

    from blink.modelserver.embedder import ensure_onnx, resolve_model_dir

    torch.set_num_threads(1)
    path = factory.getbasetemp() / "onnx-shared"
    model_dir = resolve_model_dir("all-MiniLM-L6-v2")
    ensure_onnx(model_dir, path, quantize=True)  # writes the fp32 file too
    return path
