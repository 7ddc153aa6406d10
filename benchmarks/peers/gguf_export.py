"""Write a Hugging Face Llama/Qwen2 checkpoint as a GGUF file (F16, Q8_0 or F32) for llama.cpp.

A benchmark helper, not part of Blink: it runs in the peers' environment (``gguf`` + ``numpy``,
both installed with ``llama-cpp-python``), where neither torch nor llama.cpp's own
``convert_hf_to_gguf.py`` (not shipped in the wheel) is available. It covers the checkpoints
the benchmarks build — Llama-family and Qwen2 decoders, tied or untied embeddings, bf16/fp32/f16
safetensors — and the tokenizer only as far as llama.cpp needs to load the file: the benchmarks
feed token ids, never text.

    /work/peers-venv/bin/python benchmarks/peers/gguf_export.py CHECKPOINT_DIR OUT.gguf --type Q8_0
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np

# safetensors dtype -> numpy reader; bf16 has no numpy type and is widened to fp32 by bit shift.
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as float32 arrays (8-byte header length, JSON, data)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    out: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        arr = np.frombuffer(raw[base + start:base + end], dtype=_DTYPES[meta["dtype"]]).reshape(meta["shape"])
        if meta["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float32)
    return out


def _permute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """HF Llama rotates half-split pairs; llama.cpp's ``llama`` graph rotates adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensor_map(cfg: dict[str, Any], arch: str) -> dict[str, tuple[str, int | None]]:
    """GGUF name -> (HF name, heads to permute for rope or None)."""
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    permute = arch == "llama"  # qwen2 uses llama.cpp's NEOX rope: HF layout as is
    names: dict[str, tuple[str, int | None]] = {
        "token_embd.weight": ("model.embed_tokens.weight", None),
        "output_norm.weight": ("model.norm.weight", None),
    }
    if not cfg.get("tie_word_embeddings", False):
        names["output.weight"] = ("lm_head.weight", None)
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        names.update({
            b + "attn_norm.weight": (p + "input_layernorm.weight", None),
            b + "attn_q.weight": (p + "self_attn.q_proj.weight", heads if permute else None),
            b + "attn_k.weight": (p + "self_attn.k_proj.weight", kv if permute else None),
            b + "attn_v.weight": (p + "self_attn.v_proj.weight", None),
            b + "attn_output.weight": (p + "self_attn.o_proj.weight", None),
            b + "ffn_norm.weight": (p + "post_attention_layernorm.weight", None),
            b + "ffn_gate.weight": (p + "mlp.gate_proj.weight", None),
            b + "ffn_up.weight": (p + "mlp.up_proj.weight", None),
            b + "ffn_down.weight": (p + "mlp.down_proj.weight", None),
        })
        if arch == "qwen2":
            for x in "qkv":
                names[b + f"attn_{x}.bias"] = (p + f"self_attn.{x}_proj.bias", None)
    return names


def add_tokenizer(w: gguf.GGUFWriter, model_dir: Path, vocab_size: int, cfg: dict[str, Any]) -> None:
    """The checkpoint's byte-level BPE vocabulary, padded with unused entries up to the model's rows."""
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [gguf.TokenType.UNUSED] * vocab_size
    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    for text, idx in vocab.items():
        if idx < vocab_size:
            tokens[idx] = text
            types[idx] = gguf.TokenType.CONTROL if idx in special else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, setter in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        value = cfg.get(key)
        if isinstance(value, int):
            setter(value)


def export(model_dir: Path, out: Path, qtype: str) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    arch = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}.get(
        cfg["architectures"][0])
    if arch is None:
        raise SystemExit(f"unsupported architecture {cfg['architectures'][0]} (Llama, Mistral, Qwen2)")
    tensors: dict[str, np.ndarray] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        tensors.update(read_safetensors(file))
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w = gguf.GGUFWriter(str(out), arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg.get("num_key_value_heads", heads))
    w.add_rope_dimension_count(head_dim)
    # transformers >= 5 nests rope settings under rope_parameters; older configs keep them flat.
    rope = cfg.get("rope_parameters") or {"rope_theta": cfg.get("rope_theta", 10000.0),
                                          "rope_type": (cfg.get("rope_scaling") or {}).get("rope_type", "default")}
    if rope.get("rope_type", "default") != "default":
        raise SystemExit(f"rope type {rope['rope_type']!r} is not exported (default rope only)")
    w.add_rope_freq_base(float(rope["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    file_type = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qtype]
    w.add_file_type(file_type)
    vocab_size = tensors["model.embed_tokens.weight"].shape[0]
    add_tokenizer(w, model_dir, vocab_size, cfg)
    for name, (hf, permute_heads) in tensor_map(cfg, arch).items():
        data = tensors[hf]
        if permute_heads is not None:
            data = _permute_rope(data, permute_heads)
        # Norms and biases stay F32 (llama.cpp's own converter does the same); matrices take qtype.
        if data.ndim == 1 or qtype == "F32":
            w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
        elif qtype == "F16":
            w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float16))
        else:
            q = gguf.quants.quantize(np.ascontiguousarray(data), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # shape: from the byte rows
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", default="F16", choices=["F32", "F16", "Q8_0"])
    args = ap.parse_args()
    export(args.checkpoint, args.out, args.type)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)


if __name__ == "__main__":
    main()
