"""Shared fixtures: tiny random checkpoints built once per test session (no network needed)."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build the C++ kernels before the first test: cold, they take ~1 min (several on a loaded
    machine), which would otherwise count against the timeout of whichever test starts the
    first engine."""
    from blink.engine.kernels.prebuild import build_all

    build_all()


def _quiet_torch() -> None:
    # Four agents share two cores; one intra-op thread keeps test runs from fighting each other.
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer folder (vocab 512, ChatML template, eos ``<|im_end|>``)."""
    from blink.demo.tiny import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tiny-tokenizer"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """Random LlamaForCausalLM folder: untied embeddings, GQA (4 query / 2 KV heads)."""
    from blink.demo.tiny import build_tiny_checkpoint

    _quiet_torch()
    return build_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-llama"), "llama", tokenizer_dir=tiny_tokenizer_dir, seed=0
    )


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """Random Qwen2ForCausalLM folder: tied embeddings, QKV biases."""
    from blink.demo.tiny import build_tiny_checkpoint

    _quiet_torch()
    return build_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen2"), "qwen2", tokenizer_dir=tiny_tokenizer_dir, seed=1
    )


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """Random Qwen3ForCausalLM folder: tied embeddings, per-head q/k RMSNorm."""
    from blink.demo.tiny import build_tiny_checkpoint

    _quiet_torch()
    return build_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen3"), "qwen3", tokenizer_dir=tiny_tokenizer_dir, seed=2
    )


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exported all-MiniLM-L6-v2 (fp32 + int8), made once and shared by the session's gateways."""
    import torch

    from blink.modelserver.embedder import OnnxEmbedder

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("onnx")
    OnnxEmbedder(onnx_dir=path, quantize=True)
    return path
