"""A gateway whose model server serves MiniLM (fp32 default + its int8 export) and a tiny random classifier."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import LiveServer
from modelserver_helpers import LABELS, model_server_settings
from onnx_models import shared_onnx_dir

from blink.modelserver.embedder import resolve_model_dir


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_onnx_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT sequence classifier (3 labels) with MiniLM's tokenizer."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-cls")
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     num_labels=3, id2label=dict(enumerate(LABELS)), label2id={v: i for i, v in enumerate(LABELS)})
    BertForSequenceClassification(cfg).eval().save_pretrained(path)
    shutil.copy(resolve_model_dir("all-MiniLM-L6-v2") / "tokenizer.json", path / "tokenizer.json")
    return path


@pytest.fixture(scope="session")
def models_gateway(onnx_dir: Path, tiny_classifier: Path) -> Iterator[LiveServer]:
    from blink.serve import build_app

    with LiveServer(build_app(model_server_settings(onnx_dir, tiny_classifier))) as server:
        yield server
