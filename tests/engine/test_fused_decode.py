"""The fused C++ decode step (kernels/decode_step.py): the same logits, KV cache writes and greedy
tokens as the eager bf16 path on the same int8 weights, for Llama, Qwen2 and Qwen3, with bf16, fp8
and int8 KV caches; the fallbacks (env switch, ineligible model); the engine end to end with prefix
caching and preemption."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kernels.decode_step import MAX_ROWS, fused_decode_available
from blink.engine.layers import linear_int8
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import ModelRunner, RunSpan
from blink.engine.sampling_params import SamplingParams

# AVX-512 code; every CI and dev machine here has it, so a build failure there is a test failure,
# never a skip.
needs_avx512 = pytest.mark.skipif(not cpu_has_avx512(), reason="the fused decode step is AVX-512 code")

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
# Blocks per sequence in the runner tests (16 tokens each: prompts up to 40 + 8 decode steps fit).
_BLOCKS_PER_SEQ = 4


def _runner(path: Path, fused: bool, kv_cache_dtype: str = "auto") -> ModelRunner:
    cfg = EngineConfig(
        model=str(path), dtype="bfloat16", quantization="int8", threads=1, max_model_len=512, fused_decode=fused,
        kv_cache_dtype=kv_cache_dtype,
    )
    return ModelRunner(cfg, num_blocks=64)


def _engine(path: Path, fused: bool, **kw: object) -> LLMEngine:
    cfg = EngineConfig(
        model=str(path), dtype="bfloat16", quantization="int8", threads=1, max_model_len=512,
        fused_decode=fused, **kw,  # type: ignore[arg-type]
    )
    return LLMEngine(cfg, path)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def same_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager int8 linears use blink::int8_gemv (the same int8_matmul.h kernel as the fused step)
    at every decode batch, not only at 1-3 rows: aten's _weight_int8pack_mm, which eager uses at
    4+ rows, sums in another fp32 order, and one bf16 rounding flip then spreads through the
    layers (5% of a batch-16 step's logits differed by up to 0.05 on tiny Qwen3, argmax equal).
    With the same matmul the fused step rounds to bf16 exactly where eager does: bit-identical."""
    monkeypatch.setattr(linear_int8, "GEMV_MAX_ROWS", MAX_ROWS)  # 32 >= every batch tested here


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_logits_and_kv_writes_match_eager(arch: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(arch)
    fused, eager = _runner(path, True), _runner(path, False)
    assert fused.fused_decode and not eager.fused_decode
    g = torch.Generator().manual_seed(0)
    # Prompt lengths below, at and across the 16-token block boundary; 16 sequences.
    lengths = (3, 17, 33, 16, 40, 1, 15, 31, 32, 8, 12, 20, 25, 39, 2, 5)
    seqs = [torch.randint(0, 500, (n,), generator=g).tolist() for n in lengths]
    tables = [list(range(i * _BLOCKS_PER_SEQ, (i + 1) * _BLOCKS_PER_SEQ)) for i in range(len(seqs))]
    for r in (fused, eager):
        r.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    for rows in (1, 2, 5, 3, 5, 4, 16):
        spans = [RunSpan(str(i), [seqs[i][-1]], len(seqs[i]), tables[i]) for i in range(rows)]
        ours, ref = fused.execute_spans(spans), eager.execute_spans(spans)
        assert ours.dtype == torch.float32 and ours.shape == ref.shape == (rows, fused.vocab_size)
        assert torch.equal(ours, ref)
        assert torch.equal(fused.kv_cache, eager.kv_cache)
        for i in range(rows):
            seqs[i].append(int(ref[i].argmax()))


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
def test_long_contexts_match_eager(tiny_llama: Path) -> None:
    """Contexts past decode_attention.h's 256-position chunk: the fused step runs a head's chunks
    one after another and merges them, the eager kernel may spread them over tasks; the logits
    agree bit for bit (alone and in a batch of two)."""
    fused, eager = _runner(tiny_llama, True), _runner(tiny_llama, False)
    g = torch.Generator().manual_seed(7)
    seqs = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (300, 500)]
    tables = [list(range(i * 32, (i + 1) * 32)) for i in range(len(seqs))]
    for r in (fused, eager):
        r.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    for rows in (1, 2, 2):
        spans = [RunSpan(str(i), [seqs[i][-1]], len(seqs[i]), tables[i]) for i in range(rows)]
        ours, ref = fused.execute_spans(spans), eager.execute_spans(spans)
        assert torch.equal(ours, ref)
        for i in range(rows):
            seqs[i].append(int(ref[i].argmax()))


@needs_avx512
def test_two_threads_match_one(tiny_qwen2: Path) -> None:
    """The step's rows and attention tasks split across 2 threads give the 1-thread result, also
    with a verification span whose rows read K/V that other threads' tasks write (the barrier
    between the cache writes and attention)."""
    runner = _runner(tiny_qwen2, True)
    seqs = [[5, 6, 7] * k for k in (1, 6, 11)]
    tables = [list(range(i * _BLOCKS_PER_SEQ, (i + 1) * _BLOCKS_PER_SEQ)) for i in range(len(seqs))]
    runner.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    spans = [RunSpan(str(i), [9], len(s), tables[i]) for i, s in enumerate(seqs)]
    spans[1] = RunSpan("1", [9, 4, 8, 2, 7, 3], len(seqs[1]), tables[1], num_logits=6)
    cache = runner.kv_cache.clone()
    one = runner.execute_spans(spans)
    runner.kv_cache.copy_(cache)
    with _threads(2):
        two = runner.execute_spans(spans)
    assert torch.equal(one, two)


def _prompts(count: int, seed: int) -> list[list[int]]:
    """Prompts of 5..60 tokens (crossing 16-token block boundaries), half sharing a prefix."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, 500) for _ in range(20)]
    out = []
    for i in range(count):
        body = [rng.randrange(3, 500) for _ in range(rng.randint(5, 40))]
        out.append(shared + body if i % 2 else body)
    return out


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_engine_greedy_tokens_equal_eager(arch: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(arch)
    prompts = _prompts(16, seed=1)
    outputs = {}
    for fused in (True, False):
        engine = _engine(path, fused)  # prefix caching on (the default)
        assert engine.runner.fused_decode == fused
        outputs[fused] = [engine.generate(prompts[:n], GREEDY) for n in (1, 2, 5, 16)]
    assert outputs[True] == outputs[False]
    assert all(len(o) == 24 for batch in outputs[True] for o in batch)


def _kv_bytes_per_block(path: Path, block_size: int = 16) -> int:
    c = json.loads((path / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * block_size * c["num_key_value_heads"] * head_dim * 2  # bf16


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
def test_preemption_keeps_outputs(tiny_llama: Path) -> None:
    prompts = _prompts(12, seed=2)
    expected = _engine(tiny_llama, False).generate(prompts, GREEDY)
    # 16 blocks of 16 tokens cannot hold 12 sequences of 30-85 tokens: preemption must happen.
    engine = _engine(tiny_llama, True, kv_cache_memory_bytes=_kv_bytes_per_block(tiny_llama) * 16)
    assert engine.runner.num_blocks == 16 and engine.runner.fused_decode
    tokens: dict[str, list[int]] = {}
    preemptions = 0
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, GREEDY)
        tokens[f"r{i}"] = []
    while engine.has_unfinished():
        for o in engine.step():
            tokens[o.request_id].extend(o.new_token_ids)
        preemptions += engine.last_step_preemptions
    assert preemptions > 0
    assert [tokens[f"r{i}"] for i in range(len(prompts))] == expected
    assert engine.block_manager.num_free_blocks == 16


@needs_avx512
def test_env_override_keeps_the_old_path(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLINK_FUSED_DECODE", "off")
    assert fused_decode_available()  # the kernel still builds; the override turns the setting off
    assert not _runner(tiny_llama, True).fused_decode


def test_ineligible_models_keep_the_old_path(tiny_llama: Path) -> None:
    for dtype, quantization in (("float32", "int8"), ("bfloat16", "none")):
        cfg = EngineConfig(
            model=str(tiny_llama), dtype=dtype, quantization=quantization, threads=1, max_model_len=512  # type: ignore[arg-type]
        )
        runner = ModelRunner(cfg, num_blocks=8)
        assert not runner.fused_decode
        logits = runner.execute_spans([RunSpan("a", [5, 6, 7], 0, [0])])
        assert logits.shape == (1, runner.vocab_size) and bool(torch.isfinite(logits).all())


@needs_avx512
def test_fused_step_makes_compiling_unnecessary(tiny_llama: Path) -> None:
    """The compiled graph serves only 1-3 rows, all of which the fused step takes: no compile."""
    cfg = EngineConfig(
        model=str(tiny_llama), dtype="bfloat16", quantization="int8", threads=1, max_model_len=512, compile=True
    )
    runner = ModelRunner(cfg, num_blocks=8)
    assert runner.fused_decode and runner.compile_seconds == 0.0
    logits = runner.execute_spans([RunSpan("a", [5, 6, 7], 0, [0])])
    logits = runner.execute_spans([RunSpan("a", [int(logits.argmax())], 3, [0])])
    assert logits.shape == (1, runner.vocab_size)


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
def test_smollm2_width_stays_bit_identical(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    """At SmolLM2-135M's widths (hidden 576, 9/3 heads of 64, MLP 1536) the norms' fp32 sums run
    aten's full reduction order (576 = 72 vectors of 8: the cascade and the leftover vectors), which
    the 64-wide tiny models do not reach. Summed in another order (16 lanes), ~1 normed element in
    8,000 rounded differently and these 16 x 8 steps parted from eager's."""
    from blink.demo.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(
        tmp_path / "wide", "llama", hidden_size=576, num_layers=4, num_heads=9, num_kv_heads=3,
        intermediate_size=1536, tie_word_embeddings=True, tokenizer_dir=tiny_tokenizer_dir, seed=3,
    )
    fused, eager = _runner(path, True), _runner(path, False)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 500, (20 + 2 * i,), generator=g).tolist() for i in range(16)]
    tables = [list(range(i * _BLOCKS_PER_SEQ, (i + 1) * _BLOCKS_PER_SEQ)) for i in range(16)]
    for r in (fused, eager):
        r.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    for _ in range(8):
        spans = [RunSpan(str(i), [s[-1]], len(s), tables[i]) for i, s in enumerate(seqs)]
        ours, ref = fused.execute_spans(spans), eager.execute_spans(spans)
        assert torch.equal(ours, ref)
        for i, s in enumerate(seqs):
            s.append(int(ref[i].argmax()))
    assert torch.equal(fused.kv_cache, eager.kv_cache)
    # Verification spans on 2 threads: with 3 KV heads a span's (row, head) tasks alternate
    # between the threads, so a row reads K/V the other thread wrote (the step's barrier).
    news = [torch.randint(0, 500, (6,), generator=g).tolist() for _ in range(3)]
    spans = [RunSpan(str(i), news[i], len(seqs[i]), tables[i], 6) for i in range(3)]
    with _threads(2):
        ours = fused.execute_spans(spans)
    rows = [eager.execute_spans([RunSpan(str(i), [t], len(seqs[i]) + j, tables[i])]) for i in range(3)
            for j, t in enumerate(news[i])]
    assert torch.equal(ours, torch.cat(rows))
    assert torch.equal(fused.kv_cache, eager.kv_cache)


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_verification_spans_equal_one_row_steps(
    arch: str, request: pytest.FixtureRequest, fused_calls: list[int]
) -> None:
    """A step mixing decode rows with 1 + K-token verification spans (every token needs logits)
    runs the fused step once and gives exactly the logits and KV writes of feeding the same tokens
    one row at a time through the eager path: each row sees the span's earlier rows in the cache,
    and int8_matmul.h rounds a row alike at any row count (batch invariance)."""
    path = request.getfixturevalue(arch)
    fused, eager = _runner(path, True), _runner(path, False)
    g = torch.Generator().manual_seed(5)
    # Contexts of 14 and 30 make the 5-token spans cross the 16-token block boundary.
    seqs = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (14, 9, 30, 3)]
    tables = [list(range(i * _BLOCKS_PER_SEQ, (i + 1) * _BLOCKS_PER_SEQ)) for i in range(len(seqs))]
    for r in (fused, eager):
        r.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    news = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (5, 1, 5, 3)]
    spans = [RunSpan(str(i), news[i], len(seqs[i]), tables[i], len(news[i])) for i in range(len(seqs))]
    fused_calls.clear()  # count from here on
    ours = fused.execute_spans(spans)
    assert fused_calls == [14] and ours.shape == (14, fused.vocab_size)
    rows = [
        eager.execute_spans([RunSpan(str(i), [tok], len(seqs[i]) + j, tables[i])])
        for i in range(len(seqs))
        for j, tok in enumerate(news[i])
    ]
    assert torch.equal(ours, torch.cat(rows))
    assert torch.equal(fused.kv_cache, eager.kv_cache)


@needs_avx512
def test_which_steps_the_fused_path_takes(tiny_llama: Path, fused_calls: list[int]) -> None:
    """Prefill chunks (fewer logits than tokens), more sequences than the step takes and a span
    longer than it keep the eager forward; verification spans beyond its rows run as several
    calls of whole spans, each span's logits as when it runs alone."""
    runner = _runner(tiny_llama, True)
    fused_calls.clear()  # count from here on
    vocab = runner.vocab_size
    logits = runner.execute_spans([RunSpan("a", [5, 6, 7], 0, [0, 1]), RunSpan("b", [8], 0, [2])])
    assert logits.shape == (2, vocab) and fused_calls == []
    decodes = [RunSpan(str(i), [5], 0, [i]) for i in range(MAX_ROWS + 1)]
    assert runner.execute_spans(decodes).shape == (MAX_ROWS + 1, vocab) and fused_calls == []
    long = [RunSpan("a", [5] * (MAX_ROWS + 1), 0, [0, 1, 2], num_logits=MAX_ROWS + 1)]
    assert runner.execute_spans(long).shape == (MAX_ROWS + 1, vocab) and fused_calls == []
    spans = [RunSpan(str(i), [5, 6, 7], 0, [i], num_logits=3) for i in range(MAX_ROWS // 3 + 1)]
    wide = runner.execute_spans(spans)
    assert wide.shape == (3 * len(spans), vocab) and fused_calls == [3 * (MAX_ROWS // 3), 3]
    alone = torch.cat([runner.execute_spans([s]) for s in spans])
    assert torch.equal(wide, alone)


def _cache_state(runner: ModelRunner) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The KV pool's bytes (torch.equal has no fp8 kernel) and every layer's int8 row scales."""
    scales = [t for a in runner.model.attention_layers() for t in (a.k_scale, a.v_scale)]
    return runner.kv_cache.view(torch.uint8), scales


def _same_cache(a: ModelRunner, b: ModelRunner) -> bool:
    (bytes_a, scales_a), (bytes_b, scales_b) = _cache_state(a), _cache_state(b)
    return torch.equal(bytes_a, bytes_b) and all(torch.equal(x, y) for x, y in zip(scales_a, scales_b, strict=True))


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
@pytest.mark.parametrize("kv", ["fp8", "int8"])
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_quantized_caches_match_eager(arch: str, kv: str, request: pytest.FixtureRequest) -> None:
    """With an fp8 or int8 KV cache the fused step writes the same bytes (and int8 row scales) as
    the eager path's write_kv and reads them as decode_attention_cpu / _scaled_cpu do: decode rows
    at batch 1 and 4, then a step mixing decode rows with verification spans, equal one-row eager
    steps bit for bit (Qwen3: k norm before the write)."""
    path = request.getfixturevalue(arch)
    fused, eager = _runner(path, True, kv), _runner(path, False, kv)
    assert fused.fused_decode and not eager.fused_decode
    assert fused.kv_cache.dtype == eager.kv_cache.dtype != torch.bfloat16
    g = torch.Generator().manual_seed(7)
    seqs = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (14, 9, 30, 3)]
    tables = [list(range(i * _BLOCKS_PER_SEQ, (i + 1) * _BLOCKS_PER_SEQ)) for i in range(len(seqs))]
    for r in (fused, eager):
        r.execute_spans([RunSpan(str(i), s, 0, tables[i]) for i, s in enumerate(seqs)])
    for rows in (1, 4, 1, 4):
        spans = [RunSpan(str(i), [seqs[i][-1]], len(seqs[i]), tables[i]) for i in range(rows)]
        ours, ref = fused.execute_spans(spans), eager.execute_spans(spans)
        assert torch.equal(ours, ref)
        assert _same_cache(fused, eager)
        for i in range(rows):
            seqs[i].append(int(ref[i].argmax()))
    news = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (5, 1, 4, 3)]
    spans = [RunSpan(str(i), news[i], len(seqs[i]), tables[i], len(news[i])) for i in range(len(seqs))]
    ours = fused.execute_spans(spans)
    rows = [
        eager.execute_spans([RunSpan(str(i), [tok], len(seqs[i]) + j, tables[i])])
        for i in range(len(seqs))
        for j, tok in enumerate(news[i])
    ]
    assert torch.equal(ours, torch.cat(rows))
    assert _same_cache(fused, eager)


@needs_avx512
@pytest.mark.usefixtures("same_matmul")
@pytest.mark.parametrize("kv", ["fp8", "int8"])
def test_engine_greedy_tokens_equal_eager_with_quantized_caches(kv: str, tiny_qwen3: Path) -> None:
    prompts = _prompts(8, seed=4)
    outputs = {}
    for fused in (True, False):
        engine = _engine(tiny_qwen3, fused, kv_cache_dtype=kv)
        assert engine.runner.fused_decode == fused
        outputs[fused] = [engine.generate(prompts[:n], GREEDY) for n in (1, 8)]
    assert outputs[True] == outputs[False]
    assert all(len(o) == 24 for batch in outputs[True] for o in batch)
