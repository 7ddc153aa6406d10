"""kv_cache_dtype="fp8": the pool holds twice the blocks, writes saturate, the decode kernel's fp8
variant reads what gather + SDPA reads, the engine's outputs do not depend on batching, prefix
caching or preemption, and top-1 agreement with the bf16 cache stays high."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.kv_cache_dtype import FP8, KVCacheDtypeError, resolve_kv_cache_dtype, write_kv
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import ModelRunner, RunSpan
from blink.engine.sampling_params import SamplingParams

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
    # The fused step reads bf16 caches only, so an fp8 engine keeps the per-layer kernels.
    assert not fp8.fused_decode


@pytest.mark.parametrize(
    ("name", "dtype", "device", "message"),
    [
        ("int4", torch.bfloat16, "cpu", "must be one of auto, fp8"),
        ("fp8", torch.float16, "cpu", "bfloat16 or float32 model"),
        ("fp8", torch.bfloat16, "cuda", "CPU only"),
    ],
)
def test_unservable_kv_cache_dtype_is_a_clear_error(name: str, dtype: torch.dtype, device: str, message: str) -> None:
    with pytest.raises(KVCacheDtypeError, match=message):
        resolve_kv_cache_dtype(name, dtype, torch.device(device))


def test_unknown_kv_cache_dtype_fails_engine_start(tiny_llama: Path) -> None:
    with pytest.raises(KVCacheDtypeError, match="kv_cache_dtype"):
        ModelRunner(_config(tiny_llama, kv_cache_dtype="fp4"))


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


def _agreement(path: Path, prompts: list[list[int]], dtype: str) -> float:
    """Top-1 agreement of the fp8-cache engine with the ``dtype``-cache one (same ``dtype`` model)."""
    ref = _decode_logits(ModelRunner(_config(path, dtype=dtype)), prompts).argmax(-1)
    fp8 = _decode_logits(ModelRunner(_config(path, dtype=dtype, kv_cache_dtype="fp8")), prompts).argmax(-1)
    assert ref.numel() == _SEQS * _STEPS
    return float((ref == fp8).float().mean())


# A briefly trained tiny model scored on held-out text (peaked logits, like a real model on real
# text). The cache's rounding alone (fp32 model): measured 99.3% >= the 99%. With a bf16
# model, bf16's own rounding adds flips: measured 98.8%, where bf16 weights + cache vs fp32 cost
# as much (99.0%, test_linear_int8.py); the bar there needs a more confident model.
@pytest.mark.parametrize(("dtype", "bar"), [("float32", 0.99), ("bfloat16", 0.98)])
def test_fp8_top1_agreement_on_a_trained_model(
    trained_tiny_llama: Path, tiny_tokenizer_dir: Path, dtype: str, bar: float
) -> None:
    from tests.engine.trained_tiny import corpus_ids, heldout_windows

    prompts = heldout_windows(corpus_ids(tiny_tokenizer_dir), _SEQS, _STEPS)
    agreement = _agreement(trained_tiny_llama, prompts, dtype)
    print(f"trained {dtype} fp8 agreement {agreement:.4f}")
    assert agreement >= bar, agreement


# The random tiny models have near-tied logits (bf16 alone agrees with fp32 on only 95%,
# test_linear_int8.py), and e4m3's ~2% rounding of every key and value flips many of those ties:
# measured (fp32 model) 77.6% Llama, 77.6% Qwen2, 92.1% Qwen3. The guard here catches a broken
# path (a wrong byte order or scale falls to chance, ~0.2% of 512 tokens).
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_fp8_top1_agreement_on_random_models(arch: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    rng = random.Random(0)
    prompts = [[rng.randrange(512) for _ in range(_STEPS)] for _ in range(_SEQS)]
    agreement = _agreement(path, prompts, "float32")
    print(f"{arch} fp8 agreement {agreement:.4f}")
    assert agreement >= 0.7, agreement


def _run(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    """Staggered arrivals (a new request every other step), greedy, outputs in request order."""
    tokens: dict[str, list[int]] = {}
    pending = list(enumerate(prompts))
    step = 0
    while pending or engine.has_unfinished():
        if pending and step % 2 == 0:
            i, p = pending.pop(0)
            engine.add_request(f"r{i}", p, GREEDY)
            tokens[f"r{i}"] = []
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
        step += 1
    return [tokens[f"r{i}"] for i in range(len(prompts))]


def test_engine_outputs_do_not_depend_on_batching_prefix_caching_or_preemption(tiny_llama: Path) -> None:
    def engine(**kw: object) -> LLMEngine:
        return LLMEngine(_config(tiny_llama, dtype="float32", kv_cache_dtype="fp8", **kw), tiny_llama)

    rng = random.Random(1)
    system = [rng.randrange(512) for _ in range(40)]
    prompts = [system + [rng.randrange(512) for _ in range(rng.randint(3, 60))] for _ in range(8)]
    alone = engine(enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=512)
    expected = [_run(alone, [p])[0] for p in prompts]
    # 12 blocks of 16 tokens cannot hold 8 sequences of 43-116 tokens at once: preemption happens.
    per_block = alone.runner.kv_cache[:, :, 0].numel()  # one byte per fp8 element
    small = engine(kv_cache_memory_bytes=12 * per_block, max_num_batched_tokens=64)
    assert small.runner.num_blocks == 12
    assert _run(small, prompts) == expected
    assert _run(small, prompts) == expected  # again: the shared system prompt now hits the prefix cache
    assert small.block_manager.prefix_cache_hit_rate > 0


def test_kv_cache_dtype_travels_from_settings_to_the_engine_config() -> None:
    from blink.backends.embedded import engine_config_from_settings
    from blink.config import ModelSettings

    assert engine_config_from_settings(ModelSettings(model="m", kv_cache_dtype="fp8")).kv_cache_dtype == "fp8"
    assert engine_config_from_settings(ModelSettings(model="m")).kv_cache_dtype == "auto"


def test_cli_rejects_an_unknown_kv_cache_dtype_before_starting() -> None:
    from typer.testing import CliRunner

    from blink.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "m", "--kv-cache-dtype", "fp4"])
    assert result.exit_code == 2
    assert "kv_cache_dtype" in result.output and "fp8" in result.output
