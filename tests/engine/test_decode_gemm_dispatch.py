"""Wide decode steps leave the fused int8 step for oneDNN's GEMM by CPU class
(decode_gemm_dispatch.py): the choice, which steps take which path in the runner, what a GEMM step
computes (exactly the bf16 model's step on int8-dense-prefill), and that verification spans and
modes without a GEMM weight keep the fused step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blink.engine import model_runner
from blink.engine.config import EngineConfig
from blink.engine.cpu_features import CpuFeatures, read_cpu_features
from blink.engine.decode_gemm_dispatch import AMX_GEMM_ROWS, choose_decode_gemm_rows
from blink.engine.errors import EngineError
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kernels.decode_step import MAX_ROWS
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import ModelRunner, RunSpan
from blink.engine.sampling_params import SamplingParams

AMX = CpuFeatures("Intel Xeon", frozenset({"amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f"}), 2)
EPYC = CpuFeatures("AMD EPYC", frozenset({"avx512_bf16", "avx512_vnni", "avx512f"}), 2)
needs_avx512 = pytest.mark.skipif(not cpu_has_avx512(), reason="the fused decode step is AVX-512 code")
_BLOCKS = 4  # per sequence: prompts up to 30 tokens + a few decode steps


def test_amx_sends_wide_steps_to_the_gemm_and_other_cpus_keep_the_fused_step() -> None:
    assert choose_decode_gemm_rows(0, AMX, MAX_ROWS) == AMX_GEMM_ROWS <= MAX_ROWS
    assert choose_decode_gemm_rows(0, EPYC, MAX_ROWS) == MAX_ROWS + 1


def test_an_explicit_row_count_wins_and_a_negative_one_is_refused() -> None:
    assert choose_decode_gemm_rows(4, EPYC, MAX_ROWS) == 4
    assert choose_decode_gemm_rows(64, AMX, MAX_ROWS) == 64
    with pytest.raises(EngineError, match="decode_gemm_rows"):
        choose_decode_gemm_rows(-1, AMX, MAX_ROWS)


def test_the_config_refuses_a_negative_row_count() -> None:
    with pytest.raises(ValueError, match="decode_gemm_rows"):
        EngineConfig(model="/m", decode_gemm_rows=-1)


def _runner(path: Path, quantization: str, **kw: object) -> ModelRunner:
    cfg = EngineConfig(model=str(path), dtype="bfloat16", quantization=quantization, threads=1,  # type: ignore[arg-type]
                       max_model_len=512, **kw)  # type: ignore[arg-type]
    return ModelRunner(cfg, num_blocks=64)


def _prefilled(runner: ModelRunner, n: int) -> list[list[int]]:
    """``n`` sequences of 3-30 prompt tokens prefilled into the runner's cache (one per block row)."""
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, 500, (int(torch.randint(3, 31, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]
    runner.execute_spans([RunSpan(str(i), s, 0, _table(i)) for i, s in enumerate(seqs)])
    return seqs


def _table(i: int) -> list[int]:
    return list(range(i * _BLOCKS, (i + 1) * _BLOCKS))


def _decode_step(runner: ModelRunner, seqs: list[list[int]]) -> torch.Tensor:
    return runner.execute_spans([RunSpan(str(i), [11 + i], len(s), _table(i)) for i, s in enumerate(seqs)])


@needs_avx512
def test_this_machines_default_keeps_every_step_the_fused_step_serves(tiny_llama: Path, fused_calls: list[int]) -> None:
    if read_cpu_features().amx:
        pytest.skip("the default under test is the one for CPUs without AMX")
    runner = _runner(tiny_llama, "int8-dense-prefill")
    assert runner.decode_gemm_rows == MAX_ROWS + 1
    seqs = _prefilled(runner, 16)
    fused_calls.clear()
    _decode_step(runner, seqs)
    assert fused_calls == [16]


@needs_avx512
def test_on_amx_the_runner_takes_the_amx_threshold(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU class is read at engine start: an AMX CPU gets the AMX row threshold."""
    monkeypatch.setattr(model_runner, "read_cpu_features", lambda: AMX)
    assert _runner(tiny_llama, "int8-w8a8").decode_gemm_rows == AMX_GEMM_ROWS
    assert _runner(tiny_llama, "int8-w8a8", decode_gemm_rows=5).decode_gemm_rows == 5


@needs_avx512
def test_modes_without_a_gemm_weight_keep_the_fused_step(tiny_llama: Path, fused_calls: list[int]) -> None:
    runner = _runner(tiny_llama, "int8", decode_gemm_rows=2)
    assert runner.decode_gemm_rows == 0
    seqs = _prefilled(runner, 4)
    fused_calls.clear()
    _decode_step(runner, seqs)
    assert fused_calls == [4]


@needs_avx512
def test_a_gemm_step_is_exactly_the_bf16_models_step(
    tiny_llama: Path, fused_calls: list[int], gemv_row_counts: list[int]
) -> None:
    """int8-dense-prefill's GEMM steps run every linear (LM head included) on the packed bf16
    weight: the logits are the unquantized bf16 model's, bit for bit; narrower steps stay fused."""
    gemm, bf16 = _runner(tiny_llama, "int8-dense-prefill", decode_gemm_rows=4), _runner(tiny_llama, "none")
    seqs = _prefilled(gemm, 5)
    _prefilled(bf16, 5)
    fused_calls.clear()
    gemv_row_counts.clear()
    ours = _decode_step(gemm, seqs)
    assert fused_calls == [] and gemv_row_counts == []
    assert torch.equal(ours, _decode_step(bf16, seqs))
    assert torch.equal(gemm.kv_cache, bf16.kv_cache)
    _decode_step(gemm, seqs[:3])
    assert fused_calls == [3]


@needs_avx512
def test_w8a8_gemm_steps_quantize_their_rows(tiny_llama: Path, fused_calls: list[int], w8a8_rows: list[int]) -> None:
    runner = _runner(tiny_llama, "int8-w8a8", decode_gemm_rows=4)
    seqs = _prefilled(runner, 6)
    fused_calls.clear()
    w8a8_rows.clear()
    logits = _decode_step(runner, seqs)
    assert fused_calls == [] and w8a8_rows and set(w8a8_rows) == {6}
    assert logits.shape == (6, runner.vocab_size) and bool(torch.isfinite(logits).all())


@needs_avx512
def test_verification_spans_stay_on_the_fused_step(tiny_llama: Path, fused_calls: list[int]) -> None:
    """Speculative verification keeps the fused step's batch-invariant rounding at any width, so
    greedy output with speculation stays what it is without it."""
    runner = _runner(tiny_llama, "int8-dense-prefill", decode_gemm_rows=2)
    seqs = _prefilled(runner, 3)
    fused_calls.clear()
    spans = [RunSpan(str(i), [7, 8, 9], len(s), _table(i), num_logits=3) for i, s in enumerate(seqs)]
    assert runner.execute_spans(spans).shape == (9, runner.vocab_size)
    assert fused_calls == [9]


@needs_avx512
def test_engine_greedy_streams_equal_the_bf16_models(tiny_llama: Path) -> None:
    """End to end: concurrent greedy streams on the GEMM path give the bf16 model's tokens."""
    def tokens(quantization: str, **kw: object) -> list[list[int]]:
        cfg = EngineConfig(model=str(tiny_llama), dtype="bfloat16", quantization=quantization, threads=1,  # type: ignore[arg-type]
                           max_model_len=512, **kw)  # type: ignore[arg-type]
        eng = LLMEngine(cfg, tiny_llama)
        for i in range(4):
            eng.add_request(f"r{i}", [5 + i, 40, 77, 3 * i + 9], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
        got: dict[str, list[int]] = {}
        while eng.has_unfinished():
            for out in eng.step():
                got.setdefault(out.request_id, []).extend(out.new_token_ids)
        return [got[f"r{i}"] for i in range(4)]

    ours = tokens("int8-dense-prefill", decode_gemm_rows=2)
    assert all(len(t) == 12 for t in ours)
    assert ours == tokens("none")
