"""GGUF files (llama.cpp's format) as checkpoints: the config from the metadata, weights dequantized.

One GGUF file carries the config, the tokenizer and (often quantized) weights; it is how most small
models are shared, and the only form of real weights reachable offline here. The engine's models
are written against Hugging Face names and configs, so this module translates rather than adding a
second model family: the metadata becomes a ``transformers`` config, and each tensor is
dequantized (``gguf.quants.dequantize``: F32/F16/BF16/Q8_0/Q4_x/Q5_x/K-quants), renamed to its HF
name and handed to the same placement code as a safetensors checkpoint (fused QKV, tied
embeddings). The serving dtype casts it, so nothing is rounded twice beyond the file's own format.

llama.cpp's converter permutes the rows of Llama's Q and K projections (its RoPE rotates adjacent
pairs, HF's rotates halves); they are permuted back here. Its Qwen2 and Qwen3 converters write Q/K
as HF has them, so those are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blink.engine.errors import ModelLoadError, ModelNotAvailableError, UnsupportedModelError

GGUF_SUFFIX = ".gguf"

# general.architecture -> the HF architecture our registry serves it with.
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
_HF_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
# Architectures whose Q/K rows llama.cpp's convert_hf_to_gguf.py permutes (LlamaModel.permute).
_PERMUTED_QK = frozenset({"llama"})

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")

# Whole-file types served in their own precision by dtype "auto"; anything quantized is served
# in bfloat16 (its dequantized values need more than 8 bits, and bf16 is the CPU's fast type).
_PLAIN_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def is_gguf(path: Path) -> bool:
    return path.suffix.lower() == GGUF_SUFFIX and path.is_file()


def find_gguf(folder: Path) -> Path | None:
    """The one ``.gguf`` file in ``folder``; None if there is none; an error if there are several."""
    files = sorted(p for p in folder.glob(f"*{GGUF_SUFFIX}") if p.is_file())
    if len(files) > 1:
        names = ", ".join(p.name for p in files[:5])
        raise ModelNotAvailableError(
            f"{str(folder)!r} holds {len(files)} .gguf files ({names}); pass the one to serve"
        )
    return files[0] if files else None


def open_reader(path: Path) -> Any:
    """A ``gguf.GGUFReader`` over the file (memory-mapped); a typed error for a broken file."""
    import gguf

    try:
        return gguf.GGUFReader(str(path), "r")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"{path.name} is not a readable GGUF file: {exc}") from exc


def field(reader: Any, key: str, default: Any = None) -> Any:
    """A metadata value as plain Python (str, int, float, bool or list); ``default`` if absent."""
    f = reader.get_field(key)
    return default if f is None else f.contents()


def _float(value: Any) -> float:
    """A float32 metadata value as the decimal it was written from (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def _arch(reader: Any) -> str:
    arch = field(reader, "general.architecture")
    if arch not in _ARCHITECTURES:
        raise UnsupportedModelError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(sorted(_ARCHITECTURES))}"
        )
    return str(arch)


def architectures(reader: Any) -> list[str]:
    return [_ARCHITECTURES[_arch(reader)]]


def _file_dtype(reader: Any) -> torch.dtype:
    """The matrices' type when they are all one plain float type, else bfloat16 (quantized)."""
    kinds = {t.tensor_type.name for t in reader.tensors if len(t.shape) >= 2}
    if len(kinds) == 1 and next(iter(kinds)) in _PLAIN_DTYPES:
        return _PLAIN_DTYPES[next(iter(kinds))]
    return torch.bfloat16


def _rope_scaling(reader: Any, arch: str) -> dict[str, Any] | None:
    kind = field(reader, f"{arch}.rope.scaling.type")
    if kind in (None, "none"):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": _float(field(reader, f"{arch}.rope.scaling.factor", 1.0))}
    raise UnsupportedModelError(f"GGUF rope scaling {kind!r} is not supported (only linear)")


def hf_config(reader: Any) -> Any:
    """A ``transformers`` config equivalent to the GGUF metadata (keys as convert_hf_to_gguf.py writes them)."""
    from transformers import AutoConfig

    arch = _arch(reader)
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise UnsupportedModelError("GGUF files with a rope_freqs tensor (Llama 3.1 RoPE scaling) are not supported")

    def need(key: str) -> Any:
        value = field(reader, f"{arch}.{key}")
        if value is None:
            raise ModelLoadError(f"GGUF metadata lacks {arch}.{key}")
        return value

    hidden = int(need("embedding_length"))
    heads = int(need("attention.head_count"))
    kv_heads = int(field(reader, f"{arch}.attention.head_count_kv", heads))
    head_dim = field(reader, f"{arch}.attention.key_length") or field(reader, f"{arch}.rope.dimension_count")
    tokens = reader.get_field("tokenizer.ggml.tokens")
    vocab = field(reader, f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else None)
    if vocab is None:
        raise ModelLoadError("GGUF metadata gives no vocabulary size")
    kwargs: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[arch]],
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": int(head_dim) if head_dim else hidden // heads,
        "intermediate_size": int(need("feed_forward_length")),
        "max_position_embeddings": int(field(reader, f"{arch}.context_length", 2048)),
        "rms_norm_eps": _float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": _float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": arch == "llama" and "blk.0.attn_q.bias" in names,
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
        "dtype": _file_dtype(reader),
    }
    scaling = _rope_scaling(reader, arch)
    if scaling is not None:
        kwargs["rope_scaling"] = scaling
    return AutoConfig.for_model(_HF_MODEL_TYPES[arch], **kwargs)


def hf_name(gguf_name: str) -> str:
    """llama.cpp's tensor name -> the Hugging Face name (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m is None or m.group(2) not in _BLOCK_NAMES:
        raise ModelLoadError(f"unexpected GGUF tensor {gguf_name!r} for this architecture")
    return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"


def unpermute_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo convert_hf_to_gguf.py's ``permute`` (rows grouped per head as [pairs, 2] -> [2, half])."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _dequantize(tensor: Any) -> torch.Tensor:
    from gguf import quants

    try:
        array = quants.dequantize(tensor.data, tensor.tensor_type)
    except (NotImplementedError, ValueError) as exc:
        raise ModelLoadError(
            f"GGUF tensor {tensor.name!r} is {tensor.tensor_type.name}, which cannot be dequantized: {exc}"
        ) from exc
    shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest dimension first
    array = np.asarray(array, dtype=np.float32).reshape(shape)
    return torch.from_numpy(array.copy() if not array.flags.writeable else array)


def named_tensors(reader: Any, config: Any) -> Iterator[tuple[str, Callable[[], torch.Tensor]]]:
    """(HF name, loader) per tensor; loading dequantizes to float32 and undoes the Q/K permutation."""
    arch = _arch(reader)
    permuted = arch in _PERMUTED_QK
    heads = int(config.num_attention_heads)
    kv_heads = int(config.num_key_value_heads)
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        n_head = heads if ".q_proj." in name else kv_heads if ".k_proj." in name else 0

        def load(tensor: Any = tensor, n_head: int = n_head) -> torch.Tensor:
            w = _dequantize(tensor)
            return unpermute_rows(w, n_head) if permuted and n_head else w

        yield name, load
