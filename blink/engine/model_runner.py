"""The device side of the engine: owns the weights and the paged KV cache, runs one forward per step.

``execute`` turns the scheduler's decision into one flattened batch: single-token rows (decodes)
first, then each prefill chunk, so every linear layer runs once over all tokens and attention
needs one SDPA call for all decodes plus one per prefill chunk. The batch layout (slots, padded
block tables, masks) is computed once per step and shared by every layer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from blink.engine.attention_dispatch import (
    PREFILL_ATTENTION_SETTINGS,
    RACE_TOKENS,
    choose_prefill_attention,
    race_prefill_attention,
)
from blink.engine.compiled_decode import MAX_BATCH, CompiledDecode
from blink.engine.config import EngineConfig
from blink.engine.cpu_features import read_cpu_features
from blink.engine.decode_gemm_dispatch import choose_decode_gemm_rows
from blink.engine.decode_graphs import CudaGraphCapture, DecodeGraphs, GraphCapture, ReplayWithoutGraph
from blink.engine.errors import EngineError, KVCacheTooSmallError
from blink.engine.kernels.attention import decode_kernel_available, prefill_kernel_available
from blink.engine.kernels.decode_step import FusedDecode, build_fused_decode
from blink.engine.kernels.prefill_ops import prefill_ops_available
from blink.engine.kernels.rope_kv import rope_kv_available
from blink.engine.kernels.switches import with_env_overrides
from blink.engine.kernels.w8a8 import onednn_w8a8_available, w8a8_available
from blink.engine.kv_cache_dtype import has_scales, resolve_kv_cache_dtype
from blink.engine.layers.attention import AttentionMetadata, PrefillChunk
from blink.engine.layers.linear_int8 import Int8Linear, quantize_model
from blink.engine.layers.packed_linear import prepack_model
from blink.engine.layers.smoothing import CALIBRATION_TOKENS, recorded_input_ranges
from blink.engine.loader import instantiate, open_checkpoint, resolve_dtype, resolve_model_path
from blink.engine.models.registry import CausalLM, model_factory
from blink.engine.w8a8_gemm_dispatch import choose_w8a8_gemm

log = logging.getLogger("blink.engine")

if TYPE_CHECKING:
    from blink.engine.scheduler import ScheduledSeq


def model_max_len(hf_config: Any, requested: int) -> int:
    """``requested`` (0 = the model's ``max_position_embeddings``), capped at a sliding window.

    Attention here is always full; a window-attention model (Mistral 7B v0.1) stays exact only
    while the context fits its window.
    """
    length = requested or int(hf_config.max_position_embeddings)
    window = getattr(hf_config, "sliding_window", None)
    uses_window = getattr(hf_config, "use_sliding_window", True)
    if window and uses_window:
        length = min(length, int(window))
    if length < 1:
        raise EngineError(f"max_model_len must be positive, got {length}")
    return length


@dataclass
class RunSpan:
    """One sequence's tokens in a forward: ``tokens`` sit at positions ``[start, start + len)``.

    ``num_logits`` is how many trailing positions need logits: 1 for a plain step, 1 + K when K
    speculative tokens are verified. The draft-model proposer builds spans directly, since its
    progress through a sequence differs from the target's.
    """

    request_id: str
    tokens: list[int]
    start: int
    block_table: list[int]
    num_logits: int = 1


class ModelRunner:
    """Loads the checkpoint named by ``config.model`` and runs forwards over scheduled tokens.

    ``calibration`` (token ids, e.g. of layers/smoothing.py's ``calibration_text()``) is run once
    through the unquantized model before ``int8-w8a8`` quantizes it, to smooth its activations.
    """

    def __init__(
        self, config: EngineConfig, num_blocks: int | None = None, model_path: Path | None = None,
        calibration: Seq[int] | None = None,
    ) -> None:
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        if config.block_size < 1:
            raise EngineError(f"block_size must be positive, got {config.block_size}")
        if config.prefill_attention not in PREFILL_ATTENTION_SETTINGS:
            raise EngineError(f"prefill_attention must be one of {PREFILL_ATTENTION_SETTINGS}")
        config = with_env_overrides(config)
        self.config = config
        self.device = torch.device(config.device)
        self.block_size = config.block_size
        # The engine resolves the checkpoint once and hands it over; a runner built alone resolves it.
        path = model_path or resolve_model_path(config.model, config.revision)
        checkpoint = open_checkpoint(path, config.trust_remote_code)
        factory = model_factory(checkpoint.architectures)
        self.hf_config = checkpoint.read_hf_config()
        self.dtype = resolve_dtype(config.dtype, self.hf_config, path, self.device)
        self.kv_cache_dtype = resolve_kv_cache_dtype(config.kv_cache_dtype, self.dtype, self.device)
        self.max_model_len = model_max_len(self.hf_config, config.max_model_len)
        model = instantiate(factory, self.hf_config, self.max_model_len, self.dtype, self.device)
        checkpoint.load_weights(model)
        model.requires_grad_(False).eval()
        self.model: CausalLM = model  # type: ignore[assignment]
        self.vocab_size = int(self.hf_config.vocab_size)
        graph_capture = self._graph_capture()
        # Decode graphs pad their batches into one scratch block past the pool's last.
        self.num_blocks = self._allocate_kv_cache(model, num_blocks, scratch=graph_capture is not None)
        self.prefill_kernel = False
        self._fused: FusedDecode | None = None
        self._decode_graph: CompiledDecode | None = None
        # Captured last, after calibration and compiling (whose forwards run eagerly).
        self._graphs: DecodeGraphs | None = None
        # "auto" unresolved (an engine built directly, not by the server): no quantization.
        self.quantization = "none" if config.quantization == "auto" else config.quantization
        # W8A8 smooths its activations with ranges measured on the unquantized model (one
        # calibration forward, layers/smoothing.py); without calibration tokens it runs unsmoothed.
        ranges = self._input_ranges(calibration) if calibration and self._w8a8_runs_here() else None
        self.smoothed_w8a8 = ranges is not None
        quantize_model(model, self.quantization, ranges,
                       int8_kernel=config.int8_kernel, w8a8_kernel=config.w8a8_kernel)
        # bf16 on the CPU: weights packed once for oneDNN (no per-call re-blocking); a no-op
        # otherwise. After quantization, so int8 layers are left as they are.
        prepack_model(model)
        for module in model.modules():
            if hasattr(module, "fused_ops"):
                module.fused_ops = config.prefill_ops
        if config.prefill_ops and self.dtype == torch.bfloat16 and self.device.type == "cpu":
            # Built now, not by the first bf16 forward: else a fresh install's first request
            # waits for the compiler.
            prefill_ops_available()
        if config.prefill_ops and self.dtype in (torch.bfloat16, torch.float32) and self.device.type == "cpu":
            rope_kv_available()  # likewise blink::rope_write_kv (rope + K/V cache write, both dtypes)
        self.decode_kernel = self._enable_decode_kernel(model)
        # Decode-only steps in one C++ call where the model is eligible (kernels/decode_step.py);
        # built now, after the KV pool exists, so no request pays the build.
        self._fused = build_fused_decode(model) if config.fused_decode else None
        self.fused_decode = self._fused is not None
        self.decode_gemm_rows = self._dispatch_decode_gemm(model)
        self.w8a8_gemm = self._dispatch_w8a8_gemm(model)
        self.compile_seconds = 0.0
        # The fused step serves every batch the graph would (1-3 rows), so compiling (minutes)
        # would only be wasted start-up time.
        if config.compile and (self._fused is None or not self._fused.serves(MAX_BATCH - 1)):
            self._compile_decode()
        if graph_capture is not None:
            self._capture_decode_graphs(graph_capture)

    def _dispatch_decode_gemm(self, model: Any) -> int:
        """Fewest rows of a decode-only step that skip the fused step for the linears' oneDNN GEMM
        (decode_gemm_dispatch.py); 0 where nothing changes (no fused step, or no GEMM weight)."""
        layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
        if self._fused is None or not any(m.has_gemm_weight for m in layers):
            return 0
        rows = choose_decode_gemm_rows(self.config.decode_gemm_rows, read_cpu_features(), self._fused.max_rows)
        for m in layers:
            m.gemm_min_rows = rows
        if rows <= self._fused.max_rows:
            log.info("decode steps of %d+ rows: oneDNN GEMM on the %s weights (setting %s); fewer: fused step",
                     rows, self.quantization, self.config.decode_gemm_rows or "auto")
        return rows

    def _dispatch_w8a8_gemm(self, model: Any) -> str:
        """The int8 GEMM of the W8A8 linears, by CPU class (w8a8_gemm_dispatch.py); "none"
        where no linear runs W8A8 (other modes, or the W8A8 kernels not built)."""
        layers = [m for m in model.modules() if isinstance(m, Int8Linear) and m.w8a8_weight is not None]
        if not layers:
            return "none"
        choice = choose_w8a8_gemm(self.config.w8a8_gemm, read_cpu_features(), onednn_w8a8_available())
        if choice == "onednn":
            for m in layers:
                m.use_onednn_gemm()
        log.info("int8-w8a8 GEMM: %s (setting %s)", "oneDNN int8 matmul" if choice == "onednn" else "torch._int_mm",
                 self.config.w8a8_gemm)
        return choice

    def _graph_capture(self) -> GraphCapture | None:
        setting = self.config.decode_graphs
        if setting == "replay":
            return ReplayWithoutGraph()
        if setting == "auto" and self.device.type == "cuda":
            return CudaGraphCapture(self.device)
        return None

    @torch.inference_mode()
    def _capture_decode_graphs(self, capture: GraphCapture) -> None:
        """Capture every (batch, width) bucket now, so no request pays for a capture."""
        started = time.perf_counter()
        graphs = DecodeGraphs(
            self.model,
            capture,
            block_size=self.block_size,
            max_blocks=-(-self.max_model_len // self.block_size),
            max_batch=self.config.max_num_seqs,
            scratch_block=self.num_blocks,
            dtype=self.dtype,
            device=self.device,
        )
        graphs.warm_up()
        self._graphs = graphs
        log.info("decode graphs: %d captured in %.1f s", graphs.num_graphs, time.perf_counter() - started)

    def _w8a8_runs_here(self) -> bool:
        """Whether ``int8-w8a8`` will run its W8A8 kernels (else calibrating would be wasted)."""
        return (self.quantization == "int8-w8a8" and self.device.type == "cpu" and self.config.w8a8_kernel
                and w8a8_available())

    def _input_ranges(self, token_ids: Seq[int]) -> dict[str, torch.Tensor] | None:
        """Per-input-channel ``max |x|`` of every quantizable linear over one prefill of up to
        CALIBRATION_TOKENS of ``token_ids``, as many as the context and the KV pool hold (None if
        fewer than two do: W8A8 then runs unsmoothed)."""
        ids = list(token_ids)[: min(CALIBRATION_TOKENS, self.max_model_len, self.num_blocks * self.block_size)]
        blocks = -(-len(ids) // self.block_size)
        if len(ids) < 2:
            return None
        with recorded_input_ranges(self.model) as ranges:
            self.execute_spans([RunSpan("calibration", ids, 0, list(range(blocks)))])
        return dict(ranges)

    @torch.inference_mode()
    def _compile_decode(self) -> None:
        """Build and warm the compiled decode forward now, so no request pays for compiling."""
        started = time.perf_counter()
        graph = CompiledDecode(self.model, self.config.compile_mode)
        graph.warm_up(self.block_size, self.dtype, self.device)
        self._decode_graph = graph
        self.compile_seconds = time.perf_counter() - started

    def _enable_decode_kernel(self, model: Any) -> bool:
        """Serve eager decodes with blink::decode_attention_cpu where it builds (CPU, AVX-512,
        head_dim a multiple of 16), and fresh bf16 prefill chunks with blink::prefill_attention_cpu
        where the CPU has AVX512-BF16 (head_dim a multiple of 32, at most 128); built now so no
        request waits for the compiler."""
        head_dim = model.shape.head_dim
        if (self.device.type != "cpu" or head_dim % 16 or not self.config.decode_attention_kernel
                or not decode_kernel_available()):
            return False
        prefill = self.dtype == torch.bfloat16 and head_dim % 32 == 0 and head_dim <= 128
        usable = prefill and prefill_kernel_available()
        shape = model.shape
        choice, race = choose_prefill_attention(
            self.config.prefill_attention, usable,
            lambda: race_prefill_attention(shape.num_heads, shape.num_kv_heads, head_dim))
        self.prefill_kernel = choice == "kernel"
        if race is not None:
            log.info("prefill attention: %s (setting auto: %d-token race on 1 thread, kernel %.2f ms, sdpa %.2f ms)",
                     choice, RACE_TOKENS, race.kernel_ms, race.sdpa_ms)
        elif prefill:
            log.info("prefill attention: %s (setting %s)", choice, self.config.prefill_attention)
        for attn in model.attention_layers():
            attn.decode_kernel = True
            attn.prefill_kernel = self.prefill_kernel
        return True

    def _allocate_kv_cache(self, model: Any, num_blocks: int | None, scratch: bool = False) -> int:
        """Size the pool from the byte budget, or to exactly ``num_blocks`` (a draft model shares
        the target's block ids, so its pool must have the same number of blocks); ``scratch`` adds
        one block past the returned count that no sequence is given."""
        layers = model.attention_layers()
        shape = model.shape
        elem = torch.empty(0, dtype=self.kv_cache_dtype).element_size()
        scaled = has_scales(self.kv_cache_dtype)
        row_bytes = shape.head_dim * elem + (4 if scaled else 0)  # + an int8 row's fp32 scale
        bytes_per_block = 2 * len(layers) * self.block_size * shape.num_kv_heads * row_bytes
        if num_blocks is None:
            num_blocks = self.config.kv_cache_memory_bytes // bytes_per_block
        if num_blocks < 1:
            raise KVCacheTooSmallError(
                f"kv_cache_memory_bytes={self.config.kv_cache_memory_bytes} is below one KV block "
                f"({bytes_per_block} bytes for this model and block_size={self.block_size})"
            )
        # Zeros, not empty: padded gathers read slots no sequence wrote, and a NaN there would
        # survive the mask (0 * NaN) and poison the output.
        self.kv_cache = torch.zeros(
            2,
            len(layers),
            num_blocks + int(scratch),
            self.block_size,
            shape.num_kv_heads,
            shape.head_dim,
            dtype=self.kv_cache_dtype,
            device=self.device,
        )
        # Ones: a padded gather reads scales of slots no sequence wrote (times zero rows).
        scales = torch.ones(self.kv_cache.shape[:-1], device=self.device) if scaled else None
        for i, attn in enumerate(layers):
            attn.k_cache = self.kv_cache[0, i]
            attn.v_cache = self.kv_cache[1, i]
            if scales is not None:
                attn.k_scale = scales[0, i]
                attn.v_scale = scales[1, i]
        return int(num_blocks)

    @torch.inference_mode()
    def execute(self, scheduled: Seq[ScheduledSeq]) -> torch.Tensor:
        """Float32 logits for each sequence's last scheduled token, plus one row per speculative
        token it carries, or one per token while its prompt logprobs are pending:
        ``[sum(item.num_logits), vocab]``, in scheduled order."""
        if not scheduled:
            return torch.empty(0, self.vocab_size, dtype=torch.float32, device=self.device)
        logits = self._graph_decode(scheduled)
        if logits is not None:
            return logits
        return self.execute_spans([self._span(item) for item in scheduled])

    def _graph_decode(self, scheduled: Seq[ScheduledSeq]) -> torch.Tensor | None:
        """Logits of a plain decode step through the decode graphs, read straight off the
        sequences; None where ``execute_spans`` decides (another path, speculation, a chunk, or a
        malformed item, which it refuses). The same inputs as via spans, without building a
        ``RunSpan`` per row: on a GPU this host work, not the replay, sets a step's time."""
        graphs, fused = self._graphs, self._fused
        n = len(scheduled)
        if graphs is None or not graphs.serves(n) or (fused is not None and fused.serves(n)):
            return None
        bs, limit = self.block_size, self.max_model_len
        tokens: list[int] = []
        positions: list[int] = []
        tables: list[list[int]] = []
        for item in scheduled:
            seq = item.seq
            pos = seq.num_computed_tokens
            if (item.num_new_tokens != 1 or item.spec_token_ids or pos >= seq.num_tokens or pos >= limit
                    or len(seq.block_table) * bs <= pos):
                return None
            tokens.append(seq.token_ids[pos])
            positions.append(pos)
            tables.append(seq.block_table)
        return graphs(tokens, positions, tables)

    @torch.inference_mode()
    def execute_spans(self, spans: Seq[RunSpan]) -> torch.Tensor:
        """Float32 logits ``[sum(num_logits), vocab]`` for the trailing positions of each span."""
        if not spans:
            return torch.empty(0, self.vocab_size, dtype=torch.float32, device=self.device)
        for span in spans:
            self._check(span)
        fused = self._fused
        # Decodes and verification spans (every token needs logits) run the fused step: one row
        # per token, so its logits come back in exactly this method's order. Prefill chunks (one
        # logits row) stay on the eager path, whose rounding the prefill tests pin.
        if fused is not None and all(s.num_logits == len(s.tokens) for s in spans) and not self._gemm_step(spans):
            groups = self._fused_groups(spans, fused)
            if groups is not None:
                out = [fused(*self._fused_inputs(g)) for g in groups]
                return out[0] if len(out) == 1 else torch.cat(out)
        graphs = self._graphs
        if graphs is not None and graphs.serves(len(spans)) and all(len(s.tokens) == 1 for s in spans):
            return graphs([s.tokens[0] for s in spans], [s.start for s in spans], [s.block_table for s in spans])
        input_ids, positions, meta, logits_rows = self._prepare(spans)
        graph = self._decode_graph
        if graph is not None and meta.num_decode == len(spans) == input_ids.shape[0] and graph.serves(len(spans)):
            tables, mask = cast(torch.Tensor, meta.decode_block_tables), cast(torch.Tensor, meta.decode_mask)
            return graph(input_ids, positions, meta.slot_mapping, tables, mask)
        hidden = self.model(input_ids, positions, meta)
        return self.model.compute_logits(hidden[logits_rows])

    def _gemm_step(self, spans: Seq[RunSpan]) -> bool:
        """A decode-only step wide enough for the GEMM path (verification spans never are)."""
        rows = self.decode_gemm_rows
        return 0 < rows <= len(spans) and all(len(s.tokens) == 1 for s in spans)

    @staticmethod
    def _span(item: ScheduledSeq) -> RunSpan:
        seq, n = item.seq, item.num_new_tokens
        start = seq.num_computed_tokens
        if n < 1 or start + n > seq.num_tokens:
            raise EngineError(
                f"{seq.request_id}: cannot compute tokens [{start}, {start + n}) of {seq.num_tokens}"
            )
        spec = item.spec_token_ids
        tokens = seq.token_ids[start : start + n] + spec if spec else seq.token_ids[start : start + n]
        return RunSpan(seq.request_id, tokens, start, seq.block_table, item.num_logits)

    def _check(self, span: RunSpan) -> None:
        end = span.start + len(span.tokens)
        if not span.tokens or not 1 <= span.num_logits <= len(span.tokens):
            raise EngineError(f"{span.request_id}: bad span of {len(span.tokens)} tokens")
        if end > self.max_model_len:
            raise EngineError(
                f"{span.request_id}: position {end - 1} is beyond max_model_len {self.max_model_len}"
            )
        if len(span.block_table) * self.block_size < end:
            raise EngineError(f"{span.request_id}: block table does not cover {end} positions")

    @staticmethod
    def _fused_groups(spans: Seq[RunSpan], fused: FusedDecode) -> list[Seq[RunSpan]] | None:
        """Consecutive groups of whole spans, each within the step's rows; None where the step
        would not serve the spans' one-row decodes either (more sequences than it takes: eager
        is faster there) or one span alone is too long. A verification step wider than the fused
        step (8 sequences x 1 + 5 tokens) thus runs as two calls, not eagerly: the fused step
        rounds each row as the one-row decode does (int8_matmul.h is batch-invariant), so
        greedy output with speculation stays identical to without it; eager rounds otherwise."""
        if not fused.serves(len(spans)):
            return None
        groups: list[Seq[RunSpan]] = []
        start = rows = 0
        for i, span in enumerate(spans):
            if not fused.serves(len(span.tokens)):
                return None
            if rows + len(span.tokens) > fused.max_rows:
                groups.append(spans[start:i])
                start, rows = i, 0
            rows += len(span.tokens)
        groups.append(spans[start:])
        return groups

    def _fused_inputs(self, spans: Seq[RunSpan]) -> tuple[torch.Tensor, ...]:
        """The fused step's per-row tensors (ids, positions, slots, tables, context lengths): one
        row per token, a span's rows at consecutive positions sharing its block table (repeated),
        each attending to its own position and all before it. No mask: the step never reads one."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        tables: list[list[int]] = []
        for span in spans:
            end = span.start + len(span.tokens)
            table = span.block_table[: (end + bs - 1) // bs]
            ids.extend(span.tokens)
            for pos in range(span.start, end):
                positions.append(pos)
                slots.append(table[pos // bs] * bs + pos % bs)
                tables.append(table)
        width = max(len(t) for t in tables)
        # Pad with block 0: any real block works, the context lengths stop before it.
        padded = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
        pos_t = torch.tensor(positions, dtype=torch.long)
        return torch.tensor(ids, dtype=torch.long), pos_t, torch.tensor(slots, dtype=torch.long), padded, pos_t + 1

    def _prepare(
        self, spans: Seq[RunSpan]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        bs = self.block_size
        decodes = [i for i, s in enumerate(spans) if len(s.tokens) == 1]
        prefills = [i for i, s in enumerate(spans) if len(s.tokens) > 1]

        input_ids: list[int] = []
        positions: list[int] = []
        slot_parts: list[torch.Tensor] = []
        # Flattened-batch rows whose logits are wanted, grouped per span in the caller's order.
        span_rows: list[list[int]] = [[] for _ in spans]
        meta = AttentionMetadata(slot_mapping=torch.empty(0, dtype=torch.long))

        if decodes:
            tables: list[list[int]] = []
            decode_slots: list[int] = []
            for row, i in enumerate(decodes):
                span = spans[i]
                pos = span.start
                input_ids.append(span.tokens[0])
                positions.append(pos)
                decode_slots.append(span.block_table[pos // bs] * bs + pos % bs)
                tables.append(span.block_table[: pos // bs + 1])
                span_rows[i] = [row]
            width = max(len(t) for t in tables)
            # Pad with block 0: any real block works, the mask hides it.
            padded = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
            ctx = torch.tensor(positions, dtype=torch.long)
            # Additive float mask made once per step: SDPA turns a bool mask into one on every
            # call, i.e. in every layer.
            hidden = torch.arange(width * bs)[None, :] > ctx[:, None]
            mask = torch.zeros(hidden.shape, dtype=self.dtype).masked_fill_(hidden, float("-inf"))
            meta.num_decode = len(decodes)
            meta.decode_block_tables = padded.to(self.device, non_blocking=True)
            meta.decode_mask = mask[:, None, None, :].to(self.device, non_blocking=True)
            meta.decode_context_lens = (ctx + 1).to(self.device, non_blocking=True)
            slot_parts.append(torch.tensor(decode_slots, dtype=torch.long))

        for i in prefills:
            span = spans[i]
            start, n = span.start, len(span.tokens)
            end = start + n
            row = len(input_ids)
            input_ids.extend(span.tokens)
            positions.extend(range(start, end))
            table = torch.tensor(span.block_table[: (end + bs - 1) // bs], dtype=torch.long)
            new_positions = torch.arange(start, end)
            slot_parts.append(table[new_positions // bs] * bs + new_positions % bs)
            chunk = PrefillChunk(start=row, end=row + n, context_len=start)
            if start > 0:
                chunk.block_table = table.to(self.device, non_blocking=True)
                chunk.mask = (torch.arange(end)[None, :] <= new_positions[:, None]).to(
                    self.device, non_blocking=True
                )
            meta.prefills.append(chunk)
            span_rows[i] = list(range(row + n - span.num_logits, row + n))

        slots = slot_parts[0] if len(slot_parts) == 1 else torch.cat(slot_parts)
        meta.slot_mapping = slots.to(self.device, non_blocking=True)
        ids_t = torch.tensor(input_ids, dtype=torch.long).to(self.device, non_blocking=True)
        pos_t = torch.tensor(positions, dtype=torch.long).to(self.device, non_blocking=True)
        logits_rows = [r for rows in span_rows for r in rows]
        rows_t = torch.tensor(logits_rows, dtype=torch.long).to(self.device, non_blocking=True)
        return ids_t, pos_t, meta, rows_t
