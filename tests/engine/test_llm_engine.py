"""Exactness of the whole engine: greedy output equals transformers, and is unchanged by
prefix caching, chunked prefill, batching with staggered arrivals and forced preemption."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.errors import InvalidParameterError, PromptTooLongError
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams
from tests.engine.engine_runs import run_staggered

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def _engine(path: Path, **kw: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="float32", threads=1, max_model_len=512, **kw)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def _prompts(engine: LLMEngine, count: int, seed: int = 0) -> list[list[int]]:
    """Mixed-length prompts (5..90 tokens) that share a system prompt, like chat traffic."""
    rng = random.Random(seed)
    words = "def class return import yield lambda while for if else print open with as".split()
    system = engine.tokenizer.encode("You are a helpful assistant for Python questions. " * 3)
    out = []
    for i in range(count):
        body = engine.tokenizer.encode(" ".join(rng.choice(words) for _ in range(rng.randint(2, 40))))
        out.append(system + body if i % 2 == 0 else body)
    return out


def _hf_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _hf_generate(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """``transformers.generate`` greedy: stops at EOS like our engine does by default."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _hf_argmax_loop(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """Full-sequence forward + argmax per step, EOS not special: the ``ignore_eos`` reference."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
def test_greedy_equals_transformers(arch: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    engine = _engine(path)
    model = _hf_model(path)
    prompts = _prompts(engine, 3, seed=1)
    natural = SamplingParams(max_tokens=24, temperature=0.0)
    for prompt, got in zip(prompts, engine.generate(prompts, natural), strict=True):
        assert got == _hf_generate(model, prompt, 24)
    ours = engine.generate(prompts, GREEDY)
    for prompt, got in zip(prompts, ours, strict=True):
        assert got == _hf_argmax_loop(model, prompt, 24)
    assert len(set(ours[0])) > 3, "degenerate model output makes this test meaningless"


@pytest.fixture(scope="module")
def reference(tiny_llama: Path) -> tuple[list[list[int]], list[list[int]]]:
    """Batch-1 outputs with caching and chunking off: the baseline every mode must equal."""
    engine = _engine(
        tiny_llama, enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=512
    )
    prompts = _prompts(engine, 16, seed=7)
    outs = [engine.generate([p], GREEDY)[0] for p in prompts]
    return prompts, outs


@pytest.mark.parametrize(
    "kw",
    [
        dict(enable_prefix_caching=True, enable_chunked_prefill=False, max_num_batched_tokens=512),
        dict(enable_prefix_caching=False, enable_chunked_prefill=True, max_num_batched_tokens=16),
        dict(enable_prefix_caching=True, enable_chunked_prefill=True, max_num_batched_tokens=32),
        dict(
            enable_prefix_caching=True, enable_chunked_prefill=True, max_num_batched_tokens=64, max_num_seqs=4
        ),
    ],
    ids=["prefix-cache", "chunked", "both", "max-seqs-4"],
)
def test_batched_modes_equal_batch_of_one(tiny_llama: Path, reference: tuple, kw: dict) -> None:
    prompts, expected = reference
    engine = _engine(tiny_llama, **kw)
    assert run_staggered(engine, prompts, GREEDY) == expected
    # Run again: now the prefix cache (when on) serves the shared system prompt.
    assert run_staggered(engine, prompts, GREEDY) == expected
    if kw["enable_prefix_caching"]:
        assert engine.block_manager.prefix_cache_hit_rate > 0


def _kv_bytes_per_block(path: Path, block_size: int = 16) -> int:
    import json

    c = json.loads((path / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * block_size * c["num_key_value_heads"] * head_dim * 4  # fp32


def test_forced_preemption_keeps_outputs(tiny_llama: Path, reference: tuple) -> None:
    prompts, expected = reference
    # 24 blocks of 16 tokens cannot hold 16 sequences of 30-130 tokens: preemption must happen.
    engine = _engine(
        tiny_llama, kv_cache_memory_bytes=_kv_bytes_per_block(tiny_llama) * 24, max_num_batched_tokens=128
    )
    assert engine.runner.num_blocks == 24
    preemptions = 0
    tokens: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, GREEDY)
        tokens[f"r{i}"] = []
    while engine.has_unfinished():
        out = engine.step()
        preemptions += engine.last_step_preemptions
        for o in out:
            tokens[o.request_id].extend(o.new_token_ids)
    assert [tokens[f"r{i}"] for i in range(len(prompts))] == expected
    assert preemptions > 0
    assert engine.block_manager.num_free_blocks == 24


def test_abort_and_finish_free_every_block(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama, enable_prefix_caching=False)
    free0 = engine.block_manager.num_free_blocks
    prompts = _prompts(engine, 6, seed=3)
    for i, p in enumerate(prompts):
        engine.add_request(f"a{i}", p, GREEDY)
    for _ in range(5):
        engine.step()
    assert engine.block_manager.num_free_blocks < free0
    for i in range(0, 6, 2):
        assert engine.abort_request(f"a{i}")
    while engine.has_unfinished():
        engine.step()
    assert engine.block_manager.num_free_blocks == free0


def test_stop_strings_and_tokens(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    prompt = _prompts(engine, 1, seed=5)[0]
    full_ids = engine.generate([prompt], GREEDY)[0]
    text = engine.tokenizer.decode(full_ids)
    # Stop at a string that appears mid-output: the text stops right before it.
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut = text.index(stop)
    engine.add_request(
        "s", prompt, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, stop=[stop])
    )
    got, reason = "", None
    while engine.has_unfinished():
        for o in engine.step():
            got += o.text
            reason = o.finish_reason if o.finished else reason
    assert got == text[:cut]
    assert reason == "stop"
    # Stop token id: output ends with that token, no text for it.
    tok = full_ids[5]
    first = full_ids.index(tok)
    engine.add_request(
        "t", prompt, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, stop_token_ids=[tok])
    )
    ids: list[int] = []
    while engine.has_unfinished():
        for o in engine.step():
            ids += o.new_token_ids
    assert ids == full_ids[: first + 1]


def test_seeded_sampling_is_reproducible_across_batches(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    prompts = _prompts(engine, 4, seed=9)
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    alone = engine.generate([prompts[0]], params)[0]
    batched = engine.generate(prompts, params)[0]
    assert alone == batched


def test_invalid_requests_raise_typed_errors(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    with pytest.raises(InvalidParameterError) as exc:
        engine.add_request("x", [1, 2, 3], SamplingParams(temperature=-1))
    assert exc.value.param == "temperature"
    with pytest.raises(PromptTooLongError):
        engine.add_request("y", [1] * 600, SamplingParams(max_tokens=4))
    with pytest.raises(PromptTooLongError) as exc2:
        engine.add_request("z", [1] * 100, SamplingParams(max_tokens=500))
    assert exc2.value.param == "max_tokens"
    with pytest.raises(InvalidParameterError):
        engine.add_request("w", [], SamplingParams(max_tokens=4))
    assert not engine.has_unfinished()


def test_top_k_beyond_the_vocabulary_is_refused(tiny_llama: Path) -> None:
    """Issue #20: top_k in [2**63, 2**64) overflowed the sampler's tensor and killed the engine."""
    engine = _engine(tiny_llama)
    vocab = engine.limits.vocab_size
    for top_k in (vocab + 1, 2**63, 2**64 - 1):
        with pytest.raises(InvalidParameterError) as exc:
            engine.add_request(f"k{top_k}", [1, 2, 3], SamplingParams(max_tokens=2, temperature=1.0, top_k=top_k))
        assert exc.value.param == "top_k"
    assert engine.generate([[1, 2, 3]], SamplingParams(max_tokens=3, temperature=1.0, top_k=vocab))[0]


def _break_seed(params: SamplingParams) -> None:
    params.seed = 2**70  # torch's manual_seed overflows: a value that slipped past validation


def _break_stop_ids(params: SamplingParams) -> None:
    params.stop_token_ids = None  # type: ignore[assignment]  # `token in None` fails mid-accept


@pytest.mark.parametrize("sabotage", [_break_seed, _break_stop_ids], ids=["sampler", "stop-check"])
def test_a_failure_inside_one_request_fails_only_that_request(tiny_llama: Path, sabotage: object) -> None:
    engine = _engine(tiny_llama, enable_prefix_caching=False)
    free0 = engine.block_manager.num_free_blocks
    prompts = _prompts(engine, 3, seed=11)
    sampled = SamplingParams(max_tokens=6, temperature=1.0, seed=5, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, SamplingParams(**{**sampled.__dict__, "stop": []}))
    sabotage(engine._requests["r1"].seq.params)  # type: ignore[operator]
    outs: dict[str, list] = {f"r{i}": [] for i in range(3)}
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id].append(o)
    bad = outs["r1"][-1]
    assert bad.finished and bad.finish_reason == "error"
    assert bad.error and "Traceback" not in bad.error and "/" not in bad.error
    for rid in ("r0", "r2"):
        assert outs[rid][-1].finish_reason == "length"
        assert sum(len(o.new_token_ids) for o in outs[rid]) == 6
    assert engine.block_manager.num_free_blocks == free0  # the failed request's blocks came back
    assert len(engine.generate([prompts[0]], GREEDY)[0]) == 24  # and the engine serves on
