"""Engine configuration: one pydantic model passed to every engine component.

It is also the embedded model's settings: ``blink.config.models.EmbeddedModel`` extends it, so
each engine setting, its bounds and its default are declared here once, and a YAML file's flat
keys (``max_num_seqs: 8`` under a model) land on these fields unchanged.

``"auto"`` (``dtype``, ``quantization``) and ``threads: 0`` are the machine's choice: the server's
embedded backend resolves them with ``blink.engine.fast_defaults.choose_serving_config`` before
the engine starts. An engine built directly with them unresolved runs the checkpoint's dtype,
no quantization and torch's threads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from blink.byte_size import ByteSize
from blink.request_limits import DEFAULT_MAX_SEQS_PER_REQUEST_SHARE


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Hugging Face hub id, local folder with config.json + *.safetensors + tokenizer files, or a
    # .gguf file (or a folder holding exactly one): blink/engine/gguf_loader.py.
    model: str
    revision: str | None = None
    trust_remote_code: bool = False
    # auto: bfloat16 where the CPU has native bf16 (AVX512-BF16 or AMX), else the checkpoint's
    # dtype (blink/engine/fast_defaults.py).
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    device: str = "cpu"  # "cpu", "cuda", "cuda:0"
    # KV pool size in bytes ("512MiB" in YAML); the number of blocks is derived from it.
    kv_cache_memory_bytes: ByteSize = 512 * 1024 * 1024
    # KV cache storage: "auto" (the model dtype), "fp8" (e4m3: half of bf16's bytes, twice the
    # blocks for the same kv_cache_memory_bytes) or "int8" (per-(token, KV head) scales); CPU,
    # bf16/fp32 models. blink/engine/kv_cache_dtype.py.
    kv_cache_dtype: Literal["auto", "fp8", "int8"] = "auto"
    block_size: int = Field(16, ge=1)
    max_num_seqs: int = Field(64, ge=1)
    # The most of max_num_seqs one request's n choices may hold at once (at least one sequence);
    # the embedded backend starts its other choices as earlier ones finish.
    max_seqs_per_request_share: float = Field(DEFAULT_MAX_SEQS_PER_REQUEST_SHARE, gt=0.0, le=1.0)
    # Token budget per step (prefill chunks + decodes together).
    max_num_batched_tokens: int = Field(1024, ge=1)
    # Batch-priority sequences running at once (0 = up to max_num_seqs). An interactive request
    # that arrives mid-step waits for that step, whose length grows with the batch lane's share,
    # so a cap bounds the batch lane's effect on interactive TTFT. 2 (with max_batch_tokens 16)
    # is the served default because it kept interactive TTFT near the no-batch figure on one CPU
    # core while 8 or 64 did not (benchmarks/RESULTS.md); raise both on GPUs.
    max_batch_seqs: int = Field(2, ge=0)
    # Tokens batch-priority sequences may compute per step (0 = whatever the budget leaves):
    # admitting several batch prompts at once would make one long prefill step for a chat to
    # wait on; the cap spreads their (chunked) prefill over short steps.
    max_batch_tokens: int = Field(16, ge=0)
    # 0 = the model's max_position_embeddings.
    max_model_len: int = Field(0, ge=0)
    enable_prefix_caching: bool = True
    # Warm prefixes: up to this many KV blocks of often-reused prefixes (system prompts, few-shot
    # blocks) stay cached while one-off prompts churn the rest (block_manager.py). Off by default:
    # pinned blocks are taken from what other prefixes could have cached.
    pinned_prefix_blocks: int = Field(0, ge=0)
    enable_chunked_prefill: bool = True
    # Torch intra-op threads of the engine process; 0 = auto (blink.engine.fast_defaults: every
    # core on machines with two or fewer, else default_threads, which leaves the gateway one or two).
    threads: int = Field(0, ge=0)
    # Added to the engine-core process's OS niceness (0-19). A positive value lets the gateway's
    # short bursts (a cache hit, a new request's tokenisation) preempt a forward pass on a shared
    # core instead of waiting out its time slice.
    engine_nice: int = Field(0, ge=0, le=19)
    # A core that owns unfinished requests yet finishes no step for this long is taken as hung
    # (a kernel spinning, a deadlock, SIGSTOP): it is killed, its requests fail as the engine's
    # death does and the supervisor restarts it, as vLLM's engine iteration timeout does. A step is
    # at most max_num_batched_tokens tokens, seconds on a CPU; raise it for a big model on a slow
    # machine. 0 turns the watchdog off.
    step_timeout_s: float = Field(120.0, ge=0.0)
    # Load-time weight quantization of the linear layers (layers/linear_int8.QUANTIZATION_MODES):
    # on the CPU "int8" (weight-only, per-channel scales: decode is bandwidth bound, so fewer
    # weight bytes = faster steps), "int8-dense-prefill" (also keeps the loaded weights for
    # prefill: faster TTFT, more memory), "int8-w8a8" (prefill also quantizes activations per
    # token); on CUDA GPUs with fp8 tensor cores "fp8" (layers/linear_fp8.py). auto: the fastest
    # mode whose quality was measured to hold, for this CPU and dtype (fast_defaults.py).
    quantization: Literal["auto", "none", "int8", "int8-dense-prefill", "int8-w8a8", "fp8"] = "auto"
    # Decode-only steps through a torch.compile'd forward, built and warmed at start-up
    # (compiled_decode.py): "frozen" (whole forward, weights frozen, inductor's int8 micro-GEMM;
    # minutes to compile) or "layers" (one decoder layer's graph shared by all layers; seconds).
    compile: bool = False
    compile_mode: Literal["frozen", "layers"] = "frozen"
    # Decode and verification steps of eligible models (AVX-512 CPU, bf16, int8 weights, bf16 KV
    # cache) run as one C++ call (kernels/decode_step.py), ahead of the compiled graph; off only
    # for A/B comparisons.
    fused_decode: bool = True
    # The other hand-written CPU kernels, each used where it builds and applies; off only for A/B
    # comparisons and fallback tests (env overrides: blink/engine/kernels/switches.py).
    # int8 decode rows through Blink's AVX-512 GEMV (off: aten's int8 matmul).
    int8_kernel: bool = True
    # int8-w8a8 prefill through the W8A8 kernels (off: int8-w8a8 runs as int8).
    w8a8_kernel: bool = True
    # Paged decode attention (and bf16 prefill attention) kernels (off: gather + torch's SDPA).
    decode_attention_kernel: bool = True
    # Fused residual-add + RMSNorm and SiLU-and-multiply for bf16 rows, and rope + K/V cache write
    # for bf16/fp32 (off: aten's ops).
    prefill_ops: bool = True
    # Causal attention of fresh bf16 prefill chunks: "auto" (Blink's AVX-512 kernel and torch's
    # SDPA raced once at start on this CPU, the faster kept; attention_dispatch.py), "kernel", "sdpa".
    prefill_attention: Literal["auto", "kernel", "sdpa"] = "auto"
    # Decode-only steps of at least this many rows leave the fused int8 step for oneDNN's GEMM on
    # the dense (int8-dense-prefill) or W8A8 (int8-w8a8) weight; 0 = by CPU class (AMX: 8 rows,
    # elsewhere never: decode_gemm_dispatch.py). Other quantization modes are unaffected.
    decode_gemm_rows: int = Field(0, ge=0)
    # The int8 GEMM of int8-w8a8's many-row linears: "auto" (by CPU class: oneDNN's int8 matmul,
    # which runs on AMX, on AMX-INT8 CPUs; torch._int_mm elsewhere: w8a8_gemm_dispatch.py),
    # "int_mm", "onednn". Both give the same bits; other quantization modes are unaffected.
    w8a8_gemm: Literal["auto", "int_mm", "onednn"] = "auto"
    # Decode-only steps replayed from captured graphs (decode_graphs.py): "auto" (CUDA graphs on
    # a CUDA device, off elsewhere), "off", or "replay" (the same padded static buffers without
    # capturing, on any device: what the CPU tests check the padding with).
    decode_graphs: Literal["auto", "off", "replay"] = "auto"
    # Speculative decoding: n-gram prompt lookup, or a smaller draft model sharing the tokenizer
    # (named by speculative_draft_model).
    speculative: Literal["none", "ngram", "draft"] = "none"
    # Upper bound on proposed tokens per step; the policy lowers it when acceptance is poor.
    num_speculative_tokens: int = Field(5, ge=1, le=16)
    speculative_draft_model: str | None = None
    # Speculation is skipped while more sequences than this decode at once: verification costs
    # (1 + K) tokens per sequence, which stops paying once the batch alone saturates the CPU.
    speculative_max_batch: int = Field(4, ge=1)
    # Prompt-lookup n-gram sizes tried, longest first.
    ngram_max: int = Field(4, ge=1)
    ngram_min: int = Field(1, ge=1)
    # Grammar library for structured outputs (response_format, guided_*, forced tool calls):
    # llguidance's masks stay cheap on length-bounded strings where xgrammar's do not
    # (benchmarks/RESULTS.md, structured outputs); EBNF grammars always use xgrammar
    # (structured/grammar_engine.py).
    structured_engine: Literal["llguidance", "xgrammar"] = "llguidance"
    # Sample constrained rows before masking where that is exact (structured/lazy.py), filling a
    # row's mask only when the grammar refuses its sample. False: always mask first (A/B runs).
    structured_lazy_mask: bool = True

    def engine_fields(self) -> dict[str, object]:
        """This config's engine fields alone (a subclass's own fields left out), for the core process."""
        return {name: getattr(self, name) for name in EngineConfig.model_fields}
