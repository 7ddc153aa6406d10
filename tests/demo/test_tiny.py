"""The tiny checkpoints are genuine HF folders that transformers loads and that do not degenerate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from blink.demo.tiny import EOS_TOKEN, build_tiny_checkpoint, demo_model_dir


def test_tokenizer_has_chatml_and_eos(tiny_tokenizer_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    assert tok.eos_token == EOS_TOKEN
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert ids == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    text = "def f(x):\n    return x + 1  # héllo"
    assert tok.decode(tok.encode(text)) == text
    config = json.loads((tiny_tokenizer_dir / "tokenizer_config.json").read_text())
    assert "im_start" in config["chat_template"]


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_checkpoint_loads_and_generates_varied_tokens(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids(EOS_TOKEN)
    ids = torch.tensor([tok.encode("import os\nprint(os.getcwd())")])
    out = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None)
    new = out[0, ids.shape[1] :].tolist()
    assert len(set(new)) >= 4, new


def test_qwen2_biases_and_norms(tiny_qwen2: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen2))
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.bias.abs().sum() > 0
    assert torch.equal(layer.input_layernorm.weight, torch.ones_like(layer.input_layernorm.weight))
    assert model.config.tie_word_embeddings


def test_seed_is_deterministic(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    a = build_tiny_checkpoint(tmp_path / "a", tokenizer_dir=tiny_tokenizer_dir, seed=7)
    b = build_tiny_checkpoint(tmp_path / "b", tokenizer_dir=tiny_tokenizer_dir, seed=7)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_demo_model_is_labelled_and_cached(tmp_path: Path) -> None:
    path = demo_model_dir(tmp_path)
    config = AutoConfig.from_pretrained(str(path))
    assert json.loads((path / "config.json").read_text())["blink_demo"] is True
    assert config.hidden_size == 256
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert demo_model_dir(tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["demo-model"]
