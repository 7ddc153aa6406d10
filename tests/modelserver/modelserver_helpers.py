"""Settings of the model-server test gateway (shared by the fixtures and the benchmark-like tests)."""

from __future__ import annotations

from pathlib import Path

from blink.config.model_server import ModelServerSettings, ServedModelSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings

LABELS = ["safe", "toxic", "spam"]


def model_server_settings(onnx_dir: Path, classifier: Path, **batching: object) -> Settings:
    return Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url="http://127.0.0.1:9/v1")],
        cache={"semantic": {"onnx_dir": str(onnx_dir), "quantize": False}},
        model_server=ModelServerSettings(
            embeddings=True, max_inputs=64,
            models=[ServedModelSettings(name="tiny-cls", kind="classifier", path=str(classifier))],
            **batching,  # type: ignore[arg-type]
        ),
    )  # fmt: skip
