"""kv_cache_dtype="fp8" / "int8": the pool holds 2x / 1.88x the blocks, fp8 writes saturate, int8
rows round within half a step of their scale, the engine's outputs do not depend on batching,
prefix caching, preemption or the compiled graph, and top-1 agreement with the full cache stays
high. The decode kernel's variants are checked in test_decode_kernel.py."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from blink.config.models import EmbeddedModel
from blink.engine.config import EngineConfig
from blink.engine.kv_cache_dtype import (
    FP8,
    INT8,
    KVCacheDtypeError,
    resolve_kv_cache_dtype,
    to_int8,
    write_kv,
)
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import ModelRunner, RunSpan
from blink.engine.sampling_params import SamplingParams
from tests.engine.engine_runs import run_staggered

GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
_SEQS, _STEPS = 20, 100  # 2,000 teacher-forced decode positions, as the int8-weight guard scores


def _config(path: Path, **kw: object) -> EngineConfig:
    base: dict[str, object] = dict(model=str(path), dtype="bfloat16", threads=1, max_model_len=512)
    return EngineConfig(**(base | kw))  # type: ignore[arg-type]


def test_fp8_pool_has_twice_the_blocks_of_bf16(tiny_llama: Path) -> None:
    budget = 4 * 1024 * 1024
    bf16 = ModelRunner(_config(tiny_llama, kv_cache_memory_bytes=budget))
    fp8 = ModelRunner(_config(tiny_llama, kv_cache_memory_bytes=budget, kv_cache_dtype="fp8"))
    assert fp8.kv_cache.dtype == FP8 and bf16.kv_cache.dtype == torch.bfloat16
    assert fp8.num_blocks == 2 * bf16.num_blocks
    assert fp8.kv_cache.numel() * fp8.kv_cache.element_size() <= budget


def test_int8_pool_counts_its_scales(tiny_llama: Path) -> None:
    budget = 4 * 1024 * 1024
    bf16 = ModelRunner(_config(tiny_llama, kv_cache_memory_bytes=budget))
    int8 = ModelRunner(_config(tiny_llama, kv_cache_memory_bytes=budget, kv_cache_dtype="int8"))
    attn = int8.model.attention_layers()[0]
    assert int8.kv_cache.dtype == INT8 and attn.k_scale.shape == int8.kv_cache.shape[2:-1]
    # A row is head_dim bytes + a 4-byte scale (bf16: 2 * head_dim bytes).
    _, layers, _, block_size, kv_heads, head_dim = int8.kv_cache.shape
    assert int8.num_blocks == budget // (2 * layers * block_size * kv_heads * (head_dim + 4))
    assert int8.num_blocks > bf16.num_blocks
    used = int8.kv_cache.numel() + 4 * int(attn.k_scale.numel()) * 2 * len(int8.model.attention_layers())
    assert used <= budget


def test_int8_rows_round_within_half_a_step() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 3, 64) * torch.tensor([1e-3, 1.0, 300.0])[None, :, None]  # very different rows
    x[0, 0] = 0  # an all-zero row: scale 1, reads back zeros
    q, scale = to_int8(x)
    assert q.dtype == INT8 and scale.shape == (5, 3) and int(q.abs().max()) <= 127
    err = (q.float() * scale[..., None] - x).abs()
    assert bool((err <= scale[..., None] / 2 + 1e-6).all())
    assert float(scale[0, 0]) == 1.0 and not bool(q[0, 0].any())
    with pytest.raises(KVCacheDtypeError, match="scales"):
        write_kv(torch.zeros(4, 3, 64, dtype=INT8), torch.tensor([1]), x[:1])


@pytest.mark.parametrize(
    ("name", "dtype", "device", "message"),
    [
        ("int4", torch.bfloat16, "cpu", "must be one of auto, fp8, int8"),
        ("fp8", torch.float16, "cpu", "bfloat16 or float32 model"),
        ("int8", torch.bfloat16, "cuda", "CPU only"),
    ],
)
def test_unservable_kv_cache_dtype_is_a_clear_error(name: str, dtype: torch.dtype, device: str, message: str) -> None:
    with pytest.raises(KVCacheDtypeError, match=message):
        resolve_kv_cache_dtype(name, dtype, torch.device(device))


def test_unknown_kv_cache_dtype_is_refused_by_the_config(tiny_llama: Path) -> None:
    with pytest.raises(ValidationError, match="kv_cache_dtype"):
        _config(tiny_llama, kv_cache_dtype="fp4")


def test_writes_saturate_instead_of_overflowing_to_nan() -> None:
    cache = torch.zeros(4, 1, 4, dtype=FP8)
    x = torch.tensor([[[1e4, -1e4, float("inf"), 0.3]]], dtype=torch.bfloat16)
    write_kv(cache, torch.tensor([2]), x)
    got = cache[2, 0].float()
    assert got[:3].tolist() == [448.0, -448.0, 448.0]
    assert abs(float(got[3]) - 0.3) < 0.3 / 8  # 3 mantissa bits: within half a step (2^-4 relative)
    assert not bool(cache[[0, 1, 3]].float().any())


def _decode_logits(runner: ModelRunner, prompts: list[list[int]]) -> torch.Tensor:
    """Teacher-forced decode steps of every prompt in one batch: each position reads all earlier
    ones back from the cache (the path an fp8 cache changes), ``[seqs * steps, vocab]``."""
    tables = [list(range(i * 8, i * 8 + 8)) for i in range(len(prompts))]
    steps = [
        runner.execute_spans([RunSpan(f"r{i}", [p[pos]], pos, tables[i]) for i, p in enumerate(prompts)])
        for pos in range(len(prompts[0]))
    ]
    return torch.stack(steps, 1).reshape(-1, steps[0].shape[-1])


def _agreement(path: Path, prompts: list[list[int]], dtype: str, kv: str) -> float:
    """Top-1 agreement of the ``kv``-cache engine with the ``dtype``-cache one (same ``dtype`` model)."""
    ref = _decode_logits(ModelRunner(_config(path, dtype=dtype)), prompts).argmax(-1)
    got = _decode_logits(ModelRunner(_config(path, dtype=dtype, kv_cache_dtype=kv)), prompts).argmax(-1)
    assert ref.numel() == _SEQS * _STEPS
    return float((ref == got).float().mean())


# A briefly trained tiny model scored on held-out text (peaked logits, like a real model on real
# text). The cache's rounding alone (fp32 model): measured 99.3% >= the 99%. With a bf16
# model, bf16's own rounding adds flips: measured 98.8%, where bf16 weights + cache vs fp32 cost
# as much (99.0%, test_linear_int8.py); the bar there needs a more confident model.
# int8 (7 bits at each row's own scale): measured 99.9% (fp32 model), 99.3% (bf16 model).
@pytest.mark.parametrize(
    ("kv", "dtype", "bar"),
    [("fp8", "float32", 0.99), ("fp8", "bfloat16", 0.98), ("int8", "float32", 0.99), ("int8", "bfloat16", 0.99)],
)
def test_top1_agreement_on_a_trained_model(
    trained_tiny_llama: Path, tiny_tokenizer_dir: Path, kv: str, dtype: str, bar: float
) -> None:
    from tests.engine.trained_tiny import corpus_ids, heldout_windows

    prompts = heldout_windows(corpus_ids(tiny_tokenizer_dir), _SEQS, _STEPS)
    agreement = _agreement(trained_tiny_llama, prompts, dtype, kv)
    print(f"trained {dtype} {kv} agreement {agreement:.4f}")
    assert agreement >= bar, agreement


# The random tiny models have near-tied logits (bf16 alone agrees with fp32 on only 95%,
# test_linear_int8.py), and e4m3's ~2% rounding of every key and value flips many of those ties:
# measured (fp32 model) 77.6% Llama, 77.6% Qwen2, 92.1% Qwen3. The guard here catches a broken
# path (a wrong byte order or scale falls to chance, ~0.2% of 512 tokens). int8 keeps far more of
# them: measured 96.0% Llama, 96.0% Qwen2, 97.8% Qwen3.
@pytest.mark.parametrize(("kv", "bar"), [("fp8", 0.7), ("int8", 0.9)])
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_top1_agreement_on_random_models(arch: str, kv: str, bar: float, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    rng = random.Random(0)
    prompts = [[rng.randrange(512) for _ in range(_STEPS)] for _ in range(_SEQS)]
    agreement = _agreement(path, prompts, "float32", kv)
    print(f"{arch} {kv} agreement {agreement:.4f}")
    assert agreement >= bar, agreement


@pytest.mark.parametrize("kv", ["fp8", "int8"])
def test_engine_outputs_do_not_depend_on_batching_prefix_caching_or_preemption(tiny_llama: Path, kv: str) -> None:
    def engine(**kw: object) -> LLMEngine:
        return LLMEngine(_config(tiny_llama, dtype="float32", kv_cache_dtype=kv, **kw), tiny_llama)

    rng = random.Random(1)
    system = [rng.randrange(512) for _ in range(40)]
    prompts = [system + [rng.randrange(512) for _ in range(rng.randint(3, 60))] for _ in range(8)]
    alone = engine(enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=512)
    expected = [run_staggered(alone, [p], GREEDY)[0] for p in prompts]
    # 12 blocks of 16 tokens cannot hold 8 sequences of 43-116 tokens at once: preemption happens.
    elements = alone.runner.kv_cache[:, :, 0].numel()  # one byte each, + a 4-byte scale per 16 (int8)
    per_block = elements * 20 // 16 if kv == "int8" else elements
    small = engine(kv_cache_memory_bytes=12 * per_block, max_num_batched_tokens=64)
    assert small.runner.num_blocks == 12, small.runner.num_blocks
    assert run_staggered(small, prompts, GREEDY) == expected
    assert run_staggered(small, prompts, GREEDY) == expected  # again: the shared system prompt now hits the prefix cache
    assert small.block_manager.prefix_cache_hit_rate > 0


def test_kv_cache_dtype_travels_from_settings_to_the_engine_config() -> None:

    for kv in ("fp8", "int8"):
        assert _engine_config(EmbeddedModel(model="m", kv_cache_dtype=kv)).kv_cache_dtype == kv
    assert _engine_config(EmbeddedModel(model="m")).kv_cache_dtype == "auto"


def test_cli_rejects_an_unknown_kv_cache_dtype_before_starting() -> None:
    from typer.testing import CliRunner

    from blink.cli.main import app

    result = CliRunner().invoke(app, ["serve", "--model", "m", "--kv-cache-dtype", "fp4"])
    assert result.exit_code == 2
    assert "kv_cache_dtype" in result.output and "fp8" in result.output


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo's per-frame graph cache is process-wide (8 entries): graphs compiled here for other
    cache dtypes must not push test_compiled_decode.py's into recompiles, nor theirs ours."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("kv", ["fp8", "int8"])
@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_decode_reads_the_cache_like_eager(tiny_llama: Path, kv: str) -> None:
    """The compiled graph's opaque ops (blink::paged_decode_cpu for fp8, the Python paged op with
    scales for int8) write and widen as the eager path does."""
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [20] * 20]  # batch 1..3 as they finish
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    outputs = []
    for compile_ in (False, True):
        cfg = _config(tiny_llama, dtype="float32", kv_cache_dtype=kv, compile=compile_, compile_mode="layers")
        engine = LLMEngine(cfg, tiny_llama)
        assert (engine.runner.compile_seconds > 0) == compile_
        outputs.append(engine.generate(prompts, params))
    assert outputs[0] == outputs[1]


def _engine_config(ms: EmbeddedModel) -> EngineConfig:
    """What the embedded backend hands the engine for ``ms`` (its "auto" settings resolved)."""
    from blink.backends.embedded import serving_choice

    return serving_choice(ms).apply(ms)
