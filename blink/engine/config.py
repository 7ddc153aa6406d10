"""Engine configuration: one frozen-ish dataclass passed to every engine component."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class EngineConfig:
    # Hugging Face hub id or local folder with config.json + *.safetensors + tokenizer files.
    model: str
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    device: str = "cpu"  # "cpu", "cuda", "cuda:0"
    # KV pool size in bytes; the number of blocks is derived from it (not a sequence count).
    kv_cache_memory_bytes: int = 512 * 1024 * 1024
    block_size: int = 16
    max_num_seqs: int = 64
    # Token budget per step (prefill chunks + decodes together).
    max_num_batched_tokens: int = 1024
    # 0 = use the model's max_position_embeddings.
    max_model_len: int = 0
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    # Torch intra-op threads for the engine process; 0 = leave torch's default.
    threads: int = 0
    seed: int = 0
    revision: str | None = None
    trust_remote_code: bool = False
    # Extra knobs reserved for later issues (speculative decoding, quantization).
    extra: dict[str, object] = field(default_factory=dict)
