"""Teacher-forced perplexity through the model runner, checked against transformers on the same weights."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError
from blink.engine.model_runner import ModelRunner
from blink.engine.perplexity import perplexity

TOKENS = [(i * 37 + 11) % 500 + 3 for i in range(70)]


def _runner(path: Path, **kw: object) -> ModelRunner:
    return ModelRunner(EngineConfig(model=str(path), dtype="float32", threads=1, max_model_len=256,  # type: ignore[arg-type]
                                    kv_cache_memory_bytes=8 << 20, **kw))


def _reference_nll(path: Path, ids: list[int], window: int) -> tuple[float, int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    nll, count = 0.0, 0
    with torch.inference_mode():
        for begin in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[begin : begin + window]])
            if chunk.shape[1] < 2:
                break
            logprobs = torch.log_softmax(model(chunk).logits[0, :-1].float(), -1)
            nll -= float(logprobs.gather(1, chunk[0, 1:, None]).sum())
            count += chunk.shape[1] - 1
    return nll, count


def test_matches_transformers_whatever_the_chunking(tiny_llama: Path) -> None:
    runner = _runner(tiny_llama)
    want_nll, want_count = _reference_nll(tiny_llama, TOKENS, window=32)
    want = math.exp(want_nll / want_count)
    for chunk in (32, 16, 5, 1):  # one prefill; prefill chunks reading the KV cache; decode-sized spans
        got = perplexity(runner, TOKENS, window=32, chunk=chunk)
        assert got.tokens == want_count == 31 + 31 + 5
        assert got.value == pytest.approx(want, rel=1e-4), chunk


def test_a_quantized_kv_cache_is_part_of_what_is_measured(tiny_llama: Path) -> None:
    exact = perplexity(_runner(tiny_llama), TOKENS, window=64, chunk=8).value
    int8_kv = perplexity(_runner(tiny_llama, kv_cache_dtype="int8"), TOKENS, window=64, chunk=8).value
    assert int8_kv != exact and int8_kv == pytest.approx(exact, rel=0.05)


def test_rejects_what_it_cannot_score(tiny_llama: Path) -> None:
    runner = _runner(tiny_llama)
    with pytest.raises(EngineError, match="at least two tokens"):
        perplexity(runner, [5])
    with pytest.raises(EngineError, match="window"):
        perplexity(runner, TOKENS, window=1)
    with pytest.raises(EngineError, match="max_model_len"):
        perplexity(runner, TOKENS, window=512)


def _real_smollm2() -> Path:
    """The real SmolLM2-135M-Instruct GGUF when Blink has cached it; the test is skipped otherwise."""
    from blink.demo.default_model import SMOLLM2_WHEEL, models_cache_dir
    from blink.demo.pypi_wheel import cached_file

    cached = cached_file(SMOLLM2_WHEEL, models_cache_dir())
    if cached is None:
        pytest.skip("the real SmolLM2 GGUF is not cached (run `blink models download` or see benchmarks/data/README.md)")
    return cached


def test_bf16_stays_within_one_percent_of_fp32_on_real_weights() -> None:
    """Issue #22's bound for bf16, on the first 384 tokens of the public-domain text that
    benchmarks/real_model_quality.py scores in full."""
    from blink.engine.tokenizer import Tokenizer

    path = _real_smollm2()
    text = (Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "newton_opticks_book1.txt").read_text()
    ids = Tokenizer.from_pretrained(path).encode(text, add_special_tokens=False)[:384]
    scores = {}
    for dtype in ("float32", "bfloat16"):
        runner = ModelRunner(EngineConfig(model=str(path), dtype=dtype, threads=2, max_model_len=512,  # type: ignore[arg-type]
                                          kv_cache_memory_bytes=32 << 20))
        scores[dtype] = perplexity(runner, ids, window=384, chunk=128).value
        del runner
    # A real model reads this text far better than chance (a 49,152-token vocabulary).
    assert 5 < scores["float32"] < 60
    assert scores["bfloat16"] <= scores["float32"] * 1.01
