"""Speculative decoding through the fused C++ step (bf16 activations, int8 weights): greedy output
is token-for-token identical with speculation on and off for both proposers, because the fused
step verifies a 1 + K span with exactly the rounding of K + 1 one-row decode steps (int8_matmul.h
is batch-invariant). Rejected tokens' K/V stay in the cache until later steps overwrite them, so
identity over many partial acceptances also checks those overwrites."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from blink.engine.config import EngineConfig
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams

needs_avx512 = pytest.mark.skipif(not cpu_has_avx512(), reason="the fused decode step is AVX-512 code")

GREEDY = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)


def _engine(path: Path, **kw: object) -> LLMEngine:
    cfg = EngineConfig(
        model=str(path), dtype="bfloat16", quantization="int8", threads=1, max_model_len=1024,
        **kw,  # type: ignore[arg-type]
    )
    return LLMEngine(cfg, path)


def _prompts(count: int, seed: int) -> list[list[int]]:
    """Half repeat a phrase three times (n-gram lookup finds continuations), half do not."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        phrase = [rng.randrange(3, 500) for _ in range(rng.randint(4, 12))]
        out.append(phrase * 3 if i % 2 == 0 else phrase)
    return out


@needs_avx512
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_greedy_identical_through_the_fused_step(arch: str, method: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    # self_draft: the target drafts for itself through its own fused step, so every proposal is
    # accepted (the bonus token path); ngram on a random model is mostly rejected.
    spec = {"speculative": "draft", "speculative_draft_model": str(path)} if method == "self_draft" else {
        "speculative": "ngram"
    }
    base = _engine(path)
    on = _engine(path, **spec, num_speculative_tokens=4, speculative_max_batch=64)
    assert base.runner.fused_decode and on.runner.fused_decode
    prompts = _prompts(8, seed=3)
    want = base.generate(prompts, GREEDY)
    assert on.generate(prompts, GREEDY) == want  # batched verification
    for prompt, expected in zip(prompts[:3], want[:3], strict=True):
        assert on.generate([prompt], GREEDY) == [expected]  # batch 1
    stats = on.stats()
    assert stats.spec_accepted_tokens > 0 and stats.spec_tokens_per_step > 1.0
    assert stats.spec_proposed_tokens > stats.spec_accepted_tokens or method == "self_draft"
    assert not on.has_unfinished() and on.block_manager.num_free_blocks == on.block_manager.num_blocks


@needs_avx512
def test_speculation_without_the_fused_step(tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BLINK_FUSED_DECODE=off: verification runs the eager forward and still produces the full,
    well-formed output (bf16 eager rounds a span unlike one-row steps, so identity is not claimed)."""
    monkeypatch.setenv("BLINK_FUSED_DECODE", "off")
    on = _engine(tiny_llama, speculative="ngram", num_speculative_tokens=4)
    assert not on.runner.fused_decode
    outputs = on.generate(_prompts(4, seed=4), GREEDY)
    assert [len(o) for o in outputs] == [32] * 4
    assert all(0 <= t < on.runner.vocab_size for o in outputs for t in o)
    assert on.stats().spec_proposed_tokens > 0
    assert on.block_manager.num_free_blocks == on.block_manager.num_blocks
