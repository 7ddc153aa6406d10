"""Export a tiny Hugging Face checkpoint to GGUF, the way llama.cpp's convert_hf_to_gguf.py does.

Tests need GGUF files whose source is known exactly; none can be downloaded. This writes the same
metadata keys, llama.cpp's tensor names and (for Llama) its Q/K row permutation, with the ``gguf``
package's own writer and quantizers, so the loader is tested against the format, not against itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

_HF_TO_GGUF = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
}
_LAYER_PARTS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "Q5_K": gguf.LlamaFileType.MOSTLY_Q5_K_M,
    "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K,
}


def gguf_name(hf_name: str) -> str:
    stem, _, kind = hf_name.rpartition(".")
    if stem in _HF_TO_GGUF:
        return f"{_HF_TO_GGUF[stem]}.{kind}"
    _, _, index, part = stem.split(".", 3)  # model.layers.<i>.<part>
    return f"blk.{index}.{_LAYER_PARTS[part]}.{kind}"


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute (HF's half-split RoPE rows -> adjacent pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_tokenizer(writer: gguf.GGUFWriter, hf_dir: Path, pre: str, add_bos: str | None = None) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    raw = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok.get_vocab()
    by_id = {i: t for t, i in vocab.items()}
    added = {a.content: a for a in tok.added_tokens_decoder.values()}
    tokens, types = [], []
    for i in range(len(by_id)):
        token = by_id.get(i, f"[PAD{i}]")
        tokens.append(token)
        if token in added:
            types.append(gguf.TokenType.CONTROL if added[token].special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in raw["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for token, add in (
        (tok.bos_token, writer.add_bos_token_id),
        (tok.eos_token, writer.add_eos_token_id),
        (tok.pad_token, writer.add_pad_token_id),
    ):
        if token is not None:
            add(vocab[token])
    if add_bos is not None:
        writer.add_bos_token_id(vocab[add_bos])
    writer.add_add_bos_token(add_bos is not None)
    if tok.chat_template:
        writer.add_chat_template(tok.chat_template)


Quantizer = Callable[[np.ndarray, gguf.GGMLQuantizationType], np.ndarray]


def export_gguf(
    hf_dir: Path, out: Path, qtype: str = "F32", pre: str = "gpt-2", quantize: Quantizer = gguf.quants.quantize
) -> Path:
    """Write ``hf_dir`` (a tiny llama/qwen2/qwen3 folder) as a GGUF file with matrices in ``qtype``.

    ``quantize`` makes a matrix's raw blocks (gguf's own quantizer; tests of K-quants, which it
    cannot write, pass one of their own)."""
    config = json.loads((hf_dir / "config.json").read_text())
    arch = config["model_type"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(hf_dir.name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta") or config.get("rope_theta") or 10000.0))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(_FILE_TYPES[qtype])
    writer.add_vocab_size(config["vocab_size"])
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)
    else:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    _write_tokenizer(writer, hf_dir, pre)

    qt = gguf.GGMLQuantizationType[qtype]
    for name, w in load_file(str(hf_dir / "model.safetensors")).items():
        if name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue
        w = w.astype(np.float32)
        if arch == "llama" and ".q_proj." in name:
            w = permute(w, heads)
        elif arch == "llama" and ".k_proj." in name:
            w = permute(w, kv_heads)
        if w.ndim == 1 or qt == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name(name), w)  # norms and biases stay F32, as llama.cpp keeps them
        elif qt == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(gguf_name(name), w.astype(np.float16))
        else:
            writer.add_tensor(gguf_name(name), quantize(w, qt), raw_dtype=qt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def export_tokenizer_gguf(tokenizer_dir: Path, out: Path, pre: str, add_bos: str | None = None) -> Path:
    """A GGUF file holding only a tokenizer (what the tokenizer tests need); ``add_bos`` names a
    token llama.cpp should put before every prompt."""
    writer = gguf.GGUFWriter(str(out), "llama")
    _write_tokenizer(writer, tokenizer_dir, pre, add_bos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
