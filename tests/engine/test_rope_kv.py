"""blink::rope_write_kv (kernels/rope_kv.py): rotated q/k bit-identical to apply_rotary and cache
contents identical to write_kv's, in bf16 and fp32, for strided views of the fused qkv output,
separate (Qwen3-normed) q/k, odd token counts, positions past 0 and the llama3/yarn tables; the
cases it must not serve return None and write nothing; a bad slot is an error before any write;
the engine's greedy output and prompt logprobs are the same with the kernel on and off; the
runner builds it at start for bf16/fp32 models unless prefill_ops is off."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kernels.rope_kv import rope_kv_available, rope_write_kv
from blink.engine.kv_cache_dtype import FP8, INT8, write_kv
from blink.engine.layers.rope import RopeSpec, RotaryEmbedding, apply_rotary
from blink.engine.llm_engine import LLMEngine
from blink.engine.outputs import RequestOutput
from blink.engine.sampling_params import SamplingParams

# AVX-512 code; every CI and dev machine here has it, so a build failure there is a test failure.
pytestmark = pytest.mark.skipif(not cpu_has_avx512(), reason="the rope kernel is AVX-512 code")

BLOCKS, BLOCK_SIZE = 8, 16
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 256}


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    assert rope_kv_available()


def _table(head_dim: int, scaling: dict[str, object] | None = None) -> RotaryEmbedding:
    spec = RopeSpec(head_dim=head_dim, theta=10000.0, max_position_embeddings=1024,
                    rope_type=str((scaling or {}).get("rope_type", "default")), scaling=dict(scaling or {}))
    return RotaryEmbedding(spec, 1024)


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The raw bits (tells -0 from +0; NaN equal to the same NaN)."""
    ints = torch.int16 if x.element_size() == 2 else torch.int32
    return x.contiguous().view(ints)


def _case(tokens: int, heads: int, kv_heads: int, dim: int, dtype: torch.dtype, start: int, seed: int,
          scaling: dict[str, object] | None = None, blocks: int = BLOCKS):  # type: ignore[no-untyped-def]
    """q/k/v as strided views of one fused [T, (H + 2 KVH) * D] output, cos/sin as the model looks
    them up, distinct slots scattered over a pool, and two identical pools (kernel, eager)."""
    gen = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen) * 3).to(dtype)
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    views = q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)
    positions = torch.arange(start, start + tokens)
    cos, sin = _table(dim, scaling).lookup(positions, dtype)
    slots = torch.randperm(blocks * BLOCK_SIZE, generator=gen)[:tokens]
    pool = (torch.randn(2, blocks, BLOCK_SIZE, kv_heads, dim, generator=gen)).to(dtype)
    return qkv, views, cos, sin, slots, pool, pool.clone()


def _eager(q, k, v, cos, sin, slots, pool):  # type: ignore[no-untyped-def]
    """What LlamaAttention + PagedAttention did before the kernel: apply_rotary, then write_kv."""
    q_rot, k_rot = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    kvh, dim = k.shape[1], k.shape[2]
    write_kv(pool[0].view(-1, kvh, dim), slots, k_rot)
    write_kv(pool[1].view(-1, kvh, dim), slots, v)
    return q_rot, k_rot


def _assert_kernel_equals_eager(q, k, v, cos, sin, slots, pool, eager_pool) -> None:  # type: ignore[no-untyped-def]
    """The kernel's rotated q/k and the whole cache pool equal the eager path's, bit for bit
    (written slots, and no other slot touched)."""
    got = rope_write_kv(q, k, v, cos, sin, slots, pool[0], pool[1])
    assert got is not None
    for a, b in zip(got, _eager(q, k, v, cos, sin, slots, eager_pool), strict=True):
        assert a.shape == b.shape and torch.equal(_bits(a), _bits(b))
    assert torch.equal(_bits(pool), _bits(eager_pool))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "dim", "start"),
                         [(1, 9, 3, 64, 0), (7, 9, 3, 64, 37), (33, 4, 2, 128, 500), (5, 2, 1, 80, 3)])
def test_bit_identical_to_apply_rotary_and_write_kv(
    dtype: torch.dtype, tokens: int, heads: int, kv_heads: int, dim: int, start: int
) -> None:
    _, (q, k, v), cos, sin, slots, pool, eager_pool = _case(tokens, heads, kv_heads, dim, dtype, start, seed=tokens)
    _assert_kernel_equals_eager(q, k, v, cos, sin, slots, pool, eager_pool)


def test_split_across_threads() -> None:
    # 1,024 tokens x 12 head rows: many tasks of torch's pool (the suite otherwise runs 1 thread).
    _, (q, k, v), cos, sin, slots, pool, eager_pool = _case(1024, 9, 3, 64, torch.bfloat16, 0, seed=2,
                                                            blocks=80)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _assert_kernel_equals_eager(q, k, v, cos, sin, slots, pool, eager_pool)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("scaling", [YARN, LLAMA3], ids=["yarn", "llama3"])
def test_scaled_tables(scaling: dict[str, object]) -> None:
    # The kernel reads whatever table the model looked up; yarn's also scales cos/sin (mscale).
    _, (q, k, v), cos, sin, slots, pool, eager_pool = _case(64, 4, 2, 64, torch.bfloat16, 700, 5, scaling)
    _assert_kernel_equals_eager(q, k, v, cos, sin, slots, pool, eager_pool)


def test_separate_contiguous_q_and_k_as_after_qwen3_norms() -> None:
    _, (q, k, v), cos, sin, slots, pool, eager_pool = _case(10, 4, 2, 64, torch.bfloat16, 0, seed=3)
    q, k = q.contiguous(), k.contiguous()  # RMSNorm's outputs are fresh tensors
    _assert_kernel_equals_eager(q, k, v, cos, sin, slots, pool, eager_pool)


def test_extreme_values_round_as_eager() -> None:
    # Products past bf16's range (inf), subnormal products, NaN and signed zeros.
    _, (q, k, v), cos, sin, slots, pool, eager_pool = _case(4, 2, 1, 64, torch.bfloat16, 0, seed=4)
    q[0, 0, :8] = torch.tensor([3e38, -3e38, 1e-38, -1e-38, 0.0, -0.0, float("inf"), 1e-40])
    k[1, 0, 32:36] = torch.tensor([float("nan"), -0.0, 2e38, -2e38])
    got = rope_write_kv(q, k, v, cos, sin, slots, pool[0], pool[1])
    assert got is not None
    for a, b in zip(got, _eager(q, k, v, cos, sin, slots, eager_pool), strict=True):
        assert torch.equal(a.isnan(), b.isnan())
        assert torch.equal(_bits(a.nan_to_num(0.0)), _bits(b.nan_to_num(0.0)))


@pytest.mark.parametrize("cache", [FP8, INT8, torch.float32])
def test_declines_a_cache_of_another_dtype_and_writes_nothing(cache: torch.dtype) -> None:
    _, (q, k, v), cos, sin, slots, pool, _ = _case(3, 2, 1, 64, torch.bfloat16, 0, seed=6)
    caches = torch.zeros(2, *pool.shape[1:], dtype=torch.float32).to(cache)
    assert rope_write_kv(q, k, v, cos, sin, slots, caches[0], caches[1]) is None
    assert not caches.float().any()


def test_declines_fp16() -> None:
    _, (q, k, v), cos, sin, slots, pool, _ = _case(3, 2, 1, 64, torch.float16, 0, seed=7)
    before = pool.clone()
    assert rope_write_kv(q, k, v, cos, sin, slots, pool[0], pool[1]) is None
    assert torch.equal(pool, before)


@pytest.mark.parametrize("bad", [-1, BLOCKS * BLOCK_SIZE])
def test_a_slot_outside_the_pool_is_an_error_before_any_write(bad: int) -> None:
    _, (q, k, v), cos, sin, slots, pool, _ = _case(4, 2, 1, 64, torch.bfloat16, 0, seed=8)
    slots[3] = bad
    before = pool.clone()
    with pytest.raises(RuntimeError, match="outside the cache"):
        torch.ops.blink.rope_write_kv(q, k, v, cos, sin, slots, pool[0], pool[1])
    assert torch.equal(pool, before)


def test_mismatched_shapes_are_errors_not_crashes() -> None:
    _, (q, k, v), cos, sin, slots, pool, _ = _case(4, 2, 1, 64, torch.bfloat16, 0, seed=9)
    with pytest.raises(RuntimeError, match="slots must be"):
        torch.ops.blink.rope_write_kv(q, k, v, cos, sin, slots[:3], pool[0], pool[1])
    with pytest.raises(RuntimeError, match="cos must be"):
        torch.ops.blink.rope_write_kv(q, k, v, cos[:3], sin, slots, pool[0], pool[1])
    with pytest.raises(RuntimeError, match="KV heads"):
        torch.ops.blink.rope_write_kv(q, k, v, cos, sin, slots, pool[0, ..., :32], pool[1, ..., :32])


def _prompts(count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(rng.randrange(5, 90))] for _ in range(count)]


def _run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> list[RequestOutput]:
    """Every output of every request, in step order (tokens, logprobs and prompt logprobs)."""
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
    outputs: list[RequestOutput] = []
    while engine.has_unfinished():
        outputs.extend(engine.step())
    return outputs


@pytest.mark.parametrize(("arch", "dtype"), [("tiny_llama", "bfloat16"), ("tiny_qwen3", "float32")])
def test_engine_output_identical_with_the_kernel_on_and_off(
    arch: str, dtype: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunked prefill (64-token budget: chunks start past position 0) and eager decodes; greedy
    tokens and the prompt's logprobs equal bit for bit."""
    path: Path = request.getfixturevalue(arch)
    calls: list[int] = []
    real = torch.ops.blink.rope_write_kv

    def counting(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(args[0].shape[0])
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(torch.ops.blink, "rope_write_kv", counting)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=1, prompt_logprobs=1)
    prompts = _prompts(4, seed=12)
    outputs = {}
    for switch in ("on", "aten"):
        monkeypatch.setenv("BLINK_PREFILL_OPS", switch)  # the override (kernels/switches.py)
        cfg = EngineConfig(model=str(path), dtype=dtype, threads=1, max_model_len=512,  # type: ignore[arg-type]
                           max_num_batched_tokens=64, fused_decode=False)
        engine = LLMEngine(cfg, path)
        outputs[switch] = _run(engine, prompts, params)
        if switch == "on":
            # Every layer of every step (prefill chunks and eager decode rows) went through it.
            layers = engine.runner.model.shape.num_layers  # type: ignore[attr-defined]
            assert len(calls) == engine.stats().steps * layers and max(calls) > 1
            calls.clear()
    assert calls == []
    assert outputs["on"] == outputs["aten"]
    assert sum(len(o.new_token_ids) for o in outputs["on"]) == 8 * len(prompts)


@pytest.mark.parametrize(("dtype", "prefill_ops", "built"), [("bfloat16", True, True), ("float32", True, True),
                                                            ("bfloat16", False, False)])
def test_the_runner_builds_the_kernel_at_start_not_at_the_first_request(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, prefill_ops: bool, built: bool
) -> None:
    from blink.engine import model_runner

    calls: list[bool] = []
    monkeypatch.setattr(model_runner, "rope_kv_available", lambda: calls.append(True) or True)
    model_runner.ModelRunner(EngineConfig(model=str(tiny_llama), dtype=dtype, prefill_ops=prefill_ops,  # type: ignore[arg-type]
                                          kv_cache_memory_bytes=1 << 20, threads=1))
    assert bool(calls) == built
