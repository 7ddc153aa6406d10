"""Engine configuration: one frozen-ish dataclass passed to every engine component."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from blink.request_limits import DEFAULT_MAX_SEQS_PER_REQUEST_SHARE


@dataclass
class EngineConfig:
    # Hugging Face hub id, local folder with config.json + *.safetensors + tokenizer files, or a
    # .gguf file (or a folder holding exactly one): blink/engine/gguf_loader.py.
    model: str
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    device: str = "cpu"  # "cpu", "cuda", "cuda:0"
    # KV pool size in bytes; the number of blocks is derived from it (not a sequence count).
    kv_cache_memory_bytes: int = 512 * 1024 * 1024
    # KV cache storage: "auto" (the model dtype), "fp8" (e4m3, scale 1.0: half of bf16's bytes,
    # so twice the blocks for the same budget) or "int8" (per-(token, KV head) scales); CPU only.
    # blink/engine/kv_cache_dtype.py.
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    max_num_seqs: int = 64
    # Share of max_num_seqs one request's n choices may hold at once (at least one sequence);
    # the embedded backend starts its other choices as earlier ones finish.
    max_seqs_per_request_share: float = DEFAULT_MAX_SEQS_PER_REQUEST_SHARE
    # Batch-priority sequences running at once (0 = up to max_num_seqs). An interactive request
    # that arrives mid-step waits for that step, whose length grows with the batch lane's share,
    # so a cap bounds the batch lane's effect on interactive TTFT (and its throughput).
    max_batch_seqs: int = 0
    # Tokens batch-priority sequences may compute per step (0 = whatever the budget leaves).
    # Admitting several batch prompts at once makes one long prefill step; capping it spreads
    # their prefill (chunked) over short steps.
    max_batch_tokens: int = 0
    # Token budget per step (prefill chunks + decodes together).
    max_num_batched_tokens: int = 1024
    # 0 = use the model's max_position_embeddings.
    max_model_len: int = 0
    enable_prefix_caching: bool = True
    # Warm prefixes: KV blocks of prefixes reused often (system prompts, few-shot blocks) kept
    # cached through churn, up to this many blocks (block_manager.py); 0 = plain LRU.
    pinned_prefix_blocks: int = 0
    enable_chunked_prefill: bool = True
    # Torch intra-op threads for the engine process; 0 = leave torch's default.
    threads: int = 0
    # Added to the engine-core process's OS niceness (0-19). A positive value lets the
    # gateway's short bursts (a cache hit, a new request's tokenisation, a batch line's
    # bookkeeping) preempt a forward pass on a shared core instead of waiting out its time slice.
    nice: int = 0
    seed: int = 0
    revision: str | None = None
    trust_remote_code: bool = False
    # Load-time weight quantization of the linear layers (layers/linear_int8.QUANTIZATION_MODES):
    # "none"; on the CPU "int8" (weight-only, per-channel scales: decode is bandwidth bound, so
    # fewer weight bytes = faster steps), "int8-dense-prefill" (also keeps the loaded weights for
    # prefill), "int8-w8a8" (prefill also quantizes activations per token); on CUDA GPUs with fp8
    # tensor cores "fp8" (layers/linear_fp8.py).
    quantization: str = "none"
    # Decode-only steps run a torch.compile'd forward (blink/engine/compiled_decode.py), built
    # and warmed at start-up.
    compile: bool = False
    # "frozen" (whole forward, weights frozen, inductor's int8 micro-GEMM; minutes to compile)
    # or "layers" (one decoder layer's graph shared by all layers; seconds). compiled_decode.py.
    compile_mode: str = "frozen"
    # Decode-only steps of eligible models (bf16, int8 linears, AVX-512 CPU) run as one C++ call
    # (blink/engine/kernels/decode_step.py), ahead of the compiled graph; False keeps the others.
    fused_decode: bool = True
    # Causal attention of fresh bf16 prefill chunks: "auto" (by CPU class: torch's SDPA on AMX
    # CPUs, Blink's AVX-512 kernel elsewhere; blink/engine/attention_dispatch.py), "kernel", "sdpa".
    prefill_attention: str = "auto"
    # Speculative decoding: None (off), "ngram" (prompt lookup) or "draft" (a smaller model
    # sharing the tokenizer, named by speculative_draft_model).
    speculative: str | None = None
    # Upper bound on proposed tokens per step; the policy lowers it when acceptance is poor.
    num_speculative_tokens: int = 5
    speculative_draft_model: str | None = None
    # Speculation is skipped while more sequences than this decode at once: verification costs
    # (1 + K) tokens per sequence, which stops paying once the batch alone saturates the CPU.
    speculative_max_batch: int = 4
    # Prompt-lookup n-gram sizes tried, longest first.
    ngram_max: int = 4
    ngram_min: int = 1
    # Grammar library for structured outputs: "llguidance" or "xgrammar"
    # (blink/engine/structured/grammar_engine.py; EBNF grammars always use xgrammar).
    structured_engine: str = "llguidance"
    # Sample constrained rows before masking where that is exact (structured/lazy.py), filling a
    # row's mask only when the grammar refuses its sample. False: always mask first (A/B runs).
    structured_lazy_mask: bool = True
