"""Cache-test fixtures: one ONNX export of the embedder per session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exported all-MiniLM-L6-v2 (fp32 + int8), made once and shared by the session's gateways."""
    import torch

    from blink.gateway.cache.embedder import OnnxEmbedder

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("onnx")
    OnnxEmbedder(onnx_dir=path, quantize=True)
    return path
