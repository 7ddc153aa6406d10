"""GGUF files load into the same model as the checkpoint they were converted from."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from blink.engine.config import EngineConfig
from blink.engine.errors import ModelLoadError, ModelNotAvailableError, UnsupportedModelError
from blink.engine.gguf_loader import unpermute_rows
from blink.engine.loader import resolve_model_path
from blink.engine.model_runner import ModelRunner
from tests.engine.test_models import full_logits
from tests.gguf_export import export_gguf, permute

torch.set_num_threads(1)
PROMPT_LEN = 96


def _runner(model: Path, dtype: str = "float32") -> ModelRunner:
    return ModelRunner(EngineConfig(model=str(model), dtype=dtype, kv_cache_memory_bytes=2 << 20))


def _prompt(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed))


def _rounded_through(src: Path, dst: Path, dtype: torch.dtype) -> Path:
    """A copy of ``src`` whose matrices went through ``dtype`` and back (what an F16 file holds)."""
    shutil.copytree(src, dst)
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: (v.to(dtype).float() if v.ndim >= 2 else v) for k, v in weights.items()},
              str(dst / "model.safetensors"))
    return dst


def test_permutation_round_trips() -> None:
    w = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    back = unpermute_rows(torch.from_numpy(permute(w, 3)), 3)
    assert torch.equal(back, torch.from_numpy(w))
    assert not np.array_equal(permute(w, 3), w)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_f32_file_gives_identical_logits(arch: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    hf_dir: Path = request.getfixturevalue(arch)
    file = export_gguf(hf_dir, tmp_path / "model.gguf", "F32")
    from_gguf, from_hf = _runner(file), _runner(hf_dir)
    assert from_gguf.hf_config.architectures == from_hf.hf_config.architectures
    assert from_gguf.model.shape == from_hf.model.shape  # type: ignore[attr-defined]
    ids = _prompt(from_hf.vocab_size)
    assert torch.equal(full_logits(from_gguf, ids), full_logits(from_hf, ids))


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_f16_file_gives_the_logits_of_the_f16_rounded_model(
    arch: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    hf_dir: Path = request.getfixturevalue(arch)
    file = export_gguf(hf_dir, tmp_path / "model.gguf", "F16")
    rounded = _rounded_through(hf_dir, tmp_path / "rounded", torch.float16)
    from_gguf, from_hf = _runner(file), _runner(rounded)
    ids = _prompt(from_hf.vocab_size, seed=1)
    assert torch.equal(full_logits(from_gguf, ids), full_logits(from_hf, ids))


# Measured on the briefly trained tiny Llama, held-out text, 2,000 positions, vs fp32: Q8_0 99.5%
# (its 32-weight blocks are finer than int8's per-channel scales, which give 98.7%), Q4_1 91%.
_Q8_0_MIN_AGREEMENT = 0.99


def test_q8_0_file_agrees_on_top1_on_a_trained_model(
    trained_tiny_llama: Path, tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    # Random tiny models have near-tied top logits (see trained_tiny.py): agreement needs a trained one.
    from tests.engine.test_linear_int8 import _all_logits
    from tests.engine.trained_tiny import corpus_ids, heldout_windows

    file = export_gguf(trained_tiny_llama, tmp_path / "model.gguf", "Q8_0")
    prompts = heldout_windows(corpus_ids(tiny_tokenizer_dir), 20, 100)
    config = {"dtype": "float32", "threads": 1, "max_model_len": 512}
    top1 = _all_logits(ModelRunner(EngineConfig(model=str(trained_tiny_llama), **config)), prompts).argmax(-1)
    got = _all_logits(ModelRunner(EngineConfig(model=str(file), **config)), prompts).argmax(-1)
    agreement = float((got == top1).float().mean())
    assert top1.numel() == 2000
    assert agreement >= _Q8_0_MIN_AGREEMENT, agreement


@pytest.mark.parametrize(("arch", "qtype"), [("tiny_qwen2", "Q8_0"), ("tiny_qwen3", "Q4_0"), ("tiny_llama", "Q4_1")])
def test_quantized_matrices_load_as_the_files_values(
    arch: str, qtype: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Each loaded matrix is exactly the dequantized file tensor: placement, fusion and un-permuting
    add no error of their own."""
    hf_dir: Path = request.getfixturevalue(arch)
    file = export_gguf(hf_dir, tmp_path / "model.gguf", qtype)
    qt = gguf.GGMLQuantizationType[qtype]
    rounded = tmp_path / "rounded"
    shutil.copytree(hf_dir, rounded)
    weights = load_file(str(hf_dir / "model.safetensors"))
    save_file({k: (torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(v.numpy(), qt), qt))
                   if v.ndim >= 2 else v) for k, v in weights.items()}, str(rounded / "model.safetensors"))
    from_gguf, from_hf = _runner(file), _runner(rounded)
    expected = dict(from_hf.model.named_parameters())
    for name, param in from_gguf.model.named_parameters():
        assert torch.equal(param, expected[name]), name


def test_auto_dtype_follows_the_file(tiny_llama: Path, tmp_path: Path) -> None:
    f32 = export_gguf(tiny_llama, tmp_path / "f32.gguf", "F32")
    q4 = export_gguf(tiny_llama, tmp_path / "q4_1.gguf", "Q4_1")
    assert _runner(f32, "auto").dtype == torch.float32
    # Quantized matrices are served in bfloat16 (they need more than 8 bits once dequantized).
    assert _runner(q4, "auto").dtype == torch.bfloat16


def test_folder_with_one_gguf_resolves_to_it(tiny_qwen2: Path, tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    file = export_gguf(tiny_qwen2, folder / "tiny.Q8_0.gguf", "Q8_0")
    assert resolve_model_path(str(folder)) == file
    assert resolve_model_path(str(file)) == file
    export_gguf(tiny_qwen2, folder / "tiny.F32.gguf", "F32")
    with pytest.raises(ModelNotAvailableError, match="2 .gguf files"):
        resolve_model_path(str(folder))


def test_unsupported_architecture_is_a_clear_error(tmp_path: Path) -> None:
    file = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(file), "phi2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="'phi2' is not supported"):
        _runner(file)


def test_a_broken_file_is_a_load_error(tiny_qwen2: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    whole = export_gguf(tiny_qwen2, tmp_path / "whole.gguf", "F32")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for file in (garbage, truncated):
        with pytest.raises(ModelLoadError, match="is not a readable GGUF file"):
            _runner(file)


# Where each K-quant block keeps its float16 scales (d, and dmin where there is one): ggml's
# block_q4_K / block_q5_K start with d, dmin; block_q6_K ends with d.
_K_SCALE_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def _random_k_blocks(w: np.ndarray, qt: gguf.GGMLQuantizationType) -> np.ndarray:
    """Valid random K-quant blocks for ``w``'s shape (gguf cannot quantize to K-quants), a pure
    function of ``w`` so the file and the expected weights get the same blocks."""
    block, size = gguf.GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(w.tobytes()).digest()[:8], "little"))
    blocks = rng.integers(0, 256, (w.shape[0], w.shape[1] // block, size), dtype=np.uint8)
    for offset in _K_SCALE_OFFSETS[qt.name]:
        blocks[..., offset : offset + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return blocks.reshape(w.shape[0], -1)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])
def test_k_quant_matrices_load_as_the_files_values(
    qtype: str, tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    """K-quants pack 256 weights per block: a Qwen2 (no Q/K permutation) 256 wide loads each matrix
    as exactly the file's dequantized values."""
    from blink.demo.tiny import build_tiny_checkpoint

    hf_dir = build_tiny_checkpoint(tmp_path_factory.mktemp("wide-qwen2"), "qwen2", hidden_size=256, num_layers=1,
                                   intermediate_size=512, tokenizer_dir=tiny_tokenizer_dir)
    qt = gguf.GGMLQuantizationType[qtype]
    file = export_gguf(hf_dir, tmp_path / "model.gguf", qtype, quantize=_random_k_blocks)
    rounded = tmp_path / "rounded"
    shutil.copytree(hf_dir, rounded)
    weights = load_file(str(hf_dir / "model.safetensors"))
    save_file({k: (torch.from_numpy(gguf.quants.dequantize(_random_k_blocks(v.numpy(), qt), qt))
                   if v.ndim >= 2 else v) for k, v in weights.items()}, str(rounded / "model.safetensors"))
    from_gguf, from_hf = _runner(file), _runner(rounded)
    expected = dict(from_hf.model.named_parameters())
    for name, param in from_gguf.model.named_parameters():
        assert torch.isfinite(param).all() and torch.equal(param, expected[name]), name
