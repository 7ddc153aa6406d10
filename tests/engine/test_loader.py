"""Checkpoint resolution and weight loading, on real folders (and a real offline hub client)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from blink.demo.tiny import build_tiny_checkpoint
from blink.engine.config import EngineConfig
from blink.engine.errors import ModelLoadError, ModelNotAvailableError
from blink.engine.loader import checkpoint_files, resolve_dtype, resolve_model_path
from blink.engine.model_runner import ModelRunner

torch.set_num_threads(1)
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_local_folder_is_used_as_is(tiny_llama: Path) -> None:
    assert resolve_model_path(str(tiny_llama)) == tiny_llama
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        resolve_model_path(str(tiny_llama / "model.safetensors"))
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        resolve_model_path("./no/such/folder")


def _resolve_offline(model: str, hf_home: Path) -> str:
    """Resolve in a fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE once, at import."""
    code = (
        "from blink.engine.loader import resolve_model_path\n"
        "try:\n"
        f"    resolve_model_path({model!r})\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__ + ': ' + str(exc))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home), "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    return result.stdout.strip().splitlines()[-1]


def test_hub_id_offline_is_a_clear_error(tmp_path: Path) -> None:
    line = _resolve_offline("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path)
    assert line.startswith(
        "ModelNotAvailableError: 'HuggingFaceTB/SmolLM2-135M-Instruct' is not in the local"
    )
    assert "HF_HUB_OFFLINE" in line


def test_invalid_hub_id_is_a_clear_error(tmp_path: Path) -> None:
    line = _resolve_offline("not//a valid id", tmp_path)
    assert line.startswith("ModelNotAvailableError:")


def test_dtype_resolution(tiny_llama: Path, tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    runner = ModelRunner(EngineConfig(model=str(tiny_llama), kv_cache_memory_bytes=1 << 20))
    hf = runner.hf_config
    assert resolve_dtype("auto", hf, tiny_llama, cpu) == torch.float32
    assert resolve_dtype("bfloat16", hf, tiny_llama, cpu) == torch.bfloat16
    assert resolve_dtype("float16", hf, tiny_llama, cpu) == torch.bfloat16
    assert resolve_dtype("float16", hf, tiny_llama, torch.device("cuda")) == torch.float16
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("int3", hf, tiny_llama, cpu)

    fp16 = build_tiny_checkpoint(tmp_path / "fp16", tokenizer_dir=tiny_tokenizer_dir, dtype="float16")
    runner = ModelRunner(EngineConfig(model=str(fp16), kv_cache_memory_bytes=1 << 20))
    assert runner.dtype == torch.bfloat16  # auto -> checkpoint float16 -> bfloat16 on the CPU
    assert runner.kv_cache.dtype == torch.bfloat16


def test_sharded_checkpoint_loads(tiny_llama: Path, tmp_path: Path) -> None:
    sharded = tmp_path / "sharded"
    shutil.copytree(tiny_llama, sharded)
    (sharded / "model.safetensors").unlink()
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama))
    model.save_pretrained(str(sharded), max_shard_size="40KB")
    assert len(checkpoint_files(sharded)) > 1
    runner = ModelRunner(EngineConfig(model=str(sharded), kv_cache_memory_bytes=1 << 20))
    weights = load_file(str(tiny_llama / "model.safetensors"))
    q = runner.model.model.layers[1].self_attn.qkv_proj.weight  # type: ignore[attr-defined]
    assert torch.equal(
        q[: weights["model.layers.1.self_attn.q_proj.weight"].shape[0]],
        weights["model.layers.1.self_attn.q_proj.weight"],
    )


def _rewrite_weights(src: Path, dst: Path, edit: dict[str, torch.Tensor | None]) -> Path:
    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    for name, tensor in edit.items():
        if tensor is None:
            weights.pop(name)
        else:
            weights[name] = tensor
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_missing_weight_is_reported(tiny_llama: Path, tmp_path: Path) -> None:
    folder = _rewrite_weights(
        tiny_llama, tmp_path / "missing", {"model.layers.0.self_attn.k_proj.weight": None}
    )
    with pytest.raises(ModelLoadError, match=r"model\.layers\.0\.self_attn\.qkv_proj\.weight"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))


def test_misshapen_and_unexpected_weights_are_reported(tiny_llama: Path, tmp_path: Path) -> None:
    folder = _rewrite_weights(tiny_llama, tmp_path / "shape", {"model.norm.weight": torch.ones(3)})
    with pytest.raises(ModelLoadError, match="model.norm.weight.*shape mismatch"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))
    folder = _rewrite_weights(
        tiny_llama, tmp_path / "extra", {"model.layers.9.mlp.up_proj.weight": torch.ones(2)}
    )
    with pytest.raises(ModelLoadError, match="unexpected weight"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))


def test_tied_checkpoint_with_a_redundant_head_copy(tiny_qwen2: Path, tmp_path: Path) -> None:
    weights = load_file(str(tiny_qwen2 / "model.safetensors"))
    folder = _rewrite_weights(
        tiny_qwen2, tmp_path / "with-head", {"lm_head.weight": weights["model.embed_tokens.weight"].clone()}
    )
    runner = ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))
    model = runner.model.model  # type: ignore[attr-defined]
    assert torch.equal(model.embed_tokens.weight, weights["model.embed_tokens.weight"])


def test_folder_without_safetensors(tiny_llama: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bin-only"
    folder.mkdir()
    shutil.copy(tiny_llama / "config.json", folder / "config.json")
    (folder / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="safetensors"):
        ModelRunner(EngineConfig(model=str(folder), kv_cache_memory_bytes=1 << 20))
