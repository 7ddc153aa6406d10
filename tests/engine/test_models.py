"""Our Llama-family implementation reproduces transformers' logits on tiny random checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from blink.demo.tiny import build_tiny_checkpoint
from blink.engine.config import EngineConfig
from blink.engine.errors import UnsupportedModelError
from blink.engine.layers.attention import AttentionMetadata, PrefillChunk
from blink.engine.model_runner import ModelRunner
from blink.engine.models.registry import SUPPORTED_ARCHITECTURES, model_factory

# Long enough that scaled RoPE variants differ from plain RoPE (their original context is 32/64).
PROMPT_LEN = 96

VARIANTS: dict[str, dict[str, Any]] = {
    "llama-untied": {"arch": "llama"},
    "llama-tied": {"arch": "llama", "tie_word_embeddings": True},
    "qwen2-tied": {"arch": "qwen2"},
    "qwen2-untied": {"arch": "qwen2", "tie_word_embeddings": False},
    "qwen3-tied": {"arch": "qwen3"},
    "qwen3-untied": {"arch": "qwen3", "tie_word_embeddings": False, "head_dim": 32},
    "mistral": {"arch": "mistral", "extra_config": {"sliding_window": None}},
    "llama-head-dim-32": {"arch": "llama", "head_dim": 32, "num_kv_heads": 1},
    "llama-biases": {"arch": "llama", "extra_config": {"attention_bias": True, "mlp_bias": True}},
    "llama3-rope": {
        "arch": "llama",
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "extra_config": {"rope_theta": 500000.0},
    },
    "linear-rope": {"arch": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "yarn-rope": {
        "arch": "qwen2",
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        "extra_config": {"rope_theta": 1000000.0},
    },
}


def full_logits(runner: ModelRunner, ids: torch.Tensor) -> torch.Tensor:
    """Logits at every position: one causal prefill written to the first ``len(ids)`` slots."""
    n = len(ids)
    meta = AttentionMetadata(slot_mapping=torch.arange(n), prefills=[PrefillChunk(0, n, 0)])
    with torch.inference_mode():
        return runner.model.compute_logits(runner.model(ids, torch.arange(n), meta))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers(
    variant: str, tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path
) -> None:
    torch.set_num_threads(1)
    kwargs = dict(VARIANTS[variant])
    arch = kwargs.pop("arch")
    path = build_tiny_checkpoint(
        tmp_path_factory.mktemp(variant), arch, tokenizer_dir=tiny_tokenizer_dir, **kwargs
    )
    runner = ModelRunner(EngineConfig(model=str(path), dtype="float32", kv_cache_memory_bytes=2 << 20))
    ids = torch.randint(0, runner.vocab_size, (PROMPT_LEN,), generator=torch.Generator().manual_seed(0))
    reference = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    with torch.no_grad():
        expected = reference(ids[None]).logits[0]
    torch.testing.assert_close(full_logits(runner, ids), expected, atol=1e-4, rtol=1e-4)


def test_tied_head_shares_the_embedding(tiny_qwen2: Path) -> None:
    runner = ModelRunner(EngineConfig(model=str(tiny_qwen2), kv_cache_memory_bytes=1 << 20))
    model: Any = runner.model
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_unsupported_architecture_names_the_supported_ones(tiny_llama: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedModelError, match="LlamaForCausalLM") as info:
        model_factory(["GPT2LMHeadModel"])
    assert "GPT2LMHeadModel" in str(info.value)
    with pytest.raises(UnsupportedModelError, match="none given"):
        model_factory(None)

    folder = tmp_path / "gpt2ish"
    shutil.copytree(tiny_llama, folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["FalconForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError) as info:
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))
    for name in SUPPORTED_ARCHITECTURES:
        assert name in str(info.value)

    # A model type transformers has never heard of is still reported as unsupported, not as a crash.
    config.update(architectures=["MadeUpForCausalLM"], model_type="made_up")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="MadeUpForCausalLM"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))


def test_unsupported_rope_type(tiny_llama: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dynamic-rope"
    shutil.copytree(tiny_llama, folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["rope_scaling"] = {"rope_type": "dynamic", "factor": 2.0}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="dynamic"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))


def test_sliding_window_caps_max_model_len(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    path = build_tiny_checkpoint(
        tmp_path / "mistral",
        "mistral",
        tokenizer_dir=tiny_tokenizer_dir,
        extra_config={"sliding_window": 256},
    )
    runner = ModelRunner(EngineConfig(model=str(path), kv_cache_memory_bytes=1 << 20))
    assert runner.max_model_len == 256
