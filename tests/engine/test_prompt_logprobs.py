"""Prompt logprobs from the prefill equal transformers' log-likelihood of the same tokens
(fp32, within 1e-3), with chunked prefill, a warm prefix cache and alongside other requests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blink.engine.config import EngineConfig
from blink.engine.llm_engine import LLMEngine
from blink.engine.outputs import RequestOutput, TokenLogprobOut
from blink.engine.prompt_logprobs import prompt_token_logprobs
from blink.engine.sampling_params import SamplingParams

torch.set_num_threads(1)


def _engine(path: Path, **kw: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="float32", threads=1, max_model_len=256, **kw)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def _reference(path: Path, prompt: list[int]) -> tuple[list[float], list[int]]:
    """transformers: log p(token_i | tokens_<i) for i >= 1, and each token's rank."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt])).logits[0, :-1].float(), dim=-1)
    target = torch.tensor(prompt[1:]).unsqueeze(1)
    chosen = logprobs.gather(1, target)
    return chosen.squeeze(1).tolist(), ((logprobs > chosen).sum(-1) + 1).tolist()


def _run(engine: LLMEngine, requests: dict[str, tuple[list[int], SamplingParams]]) -> dict[str, list[RequestOutput]]:
    outs: dict[str, list[RequestOutput]] = {rid: [] for rid in requests}
    for rid, (prompt, params) in requests.items():
        engine.add_request(rid, prompt, params)
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id].append(o)
    return outs


def _prompt_lps(outs: list[RequestOutput]) -> list[TokenLogprobOut | None]:
    sent = [o.prompt_logprobs for o in outs if o.prompt_logprobs is not None]
    assert len(sent) == 1, "prompt logprobs are sent exactly once"
    assert outs[0].prompt_logprobs is not None, "with the first output"
    return sent[0]


@pytest.mark.parametrize("chunked", [False, True])
def test_prompt_logprobs_equal_transformers(tiny_llama: Path, chunked: bool) -> None:
    engine = _engine(tiny_llama, enable_chunked_prefill=chunked, max_num_batched_tokens=32 if chunked else 256,
                     enable_prefix_caching=True)
    prompt = engine.tokenizer.encode("def add(a, b):\n    return a + b\n\nclass Point:\n    x: int\n" * 2)
    assert len(prompt) > 40
    want, ranks = _reference(tiny_llama, prompt)
    # Warm the prefix cache with the same prompt first: the logprob request must not use it.
    _run(engine, {"warm": (prompt, SamplingParams(max_tokens=2, temperature=0.0))})
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True, prompt_logprobs=2, logprobs=1)
    other = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    outs = _run(engine, {"lp": (prompt, params), "other": (prompt[:20], other)})
    got = _prompt_lps(outs["lp"])
    assert len(got) == len(prompt) and got[0] is None
    entries = [e for e in got[1:] if e is not None]
    assert [e.token_id for e in entries] == prompt[1:]
    assert max(abs(e.logprob - w) for e, w in zip(entries, want, strict=True)) < 1e-3
    assert [e.rank for e in entries] == ranks
    for e in entries:
        assert e.top is not None and len(e.top) == 2 and e.top[0][1] >= e.top[1][1]
        assert (e.token_id in [t for t, _ in e.top]) == (e.rank <= 2)
    # Generation after the prompt is unchanged by asking for prompt logprobs.
    plain = _run(engine, {"plain": (prompt, SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))})
    assert [t for o in outs["lp"] for t in o.new_token_ids] == [t for o in plain["plain"] for t in o.new_token_ids]
    assert all(o.prompt_logprobs is None for o in outs["other"] + plain["plain"])


def test_one_token_prompt_has_only_the_null_entry(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    outs = _run(engine, {"a": ([5], SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))})
    assert _prompt_lps(outs["a"]) == [None]


def test_prompt_token_logprobs_ranks_and_top() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    got = prompt_token_logprobs(logits, [2, 0], 1)
    assert [e.rank for e in got] == [2, 1]
    assert got[0].top is not None and got[0].top[0][0] == 1
    assert got[1].logprob == pytest.approx(float(torch.log_softmax(logits[1], -1)[0]))


def test_prompt_logprobs_survive_preemption(tiny_llama: Path) -> None:
    """A KV pool too small for the batch preempts requests mid-run; each still gets its prompt
    logprobs once, equal to those of the same prompt run alone."""
    import json

    cfg = json.loads((tiny_llama / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_block = 2 * cfg["num_hidden_layers"] * 16 * cfg["num_key_value_heads"] * head_dim * 4  # fp32
    small = _engine(tiny_llama, kv_cache_memory_bytes=per_block * 12, max_num_batched_tokens=48)
    alone = _engine(tiny_llama)
    base = small.tokenizer.encode("import os\nimport sys\n\ndef main(argv):\n    return 0\n")
    prompts = [base * (1 + i % 2) + [i + 5] for i in range(6)]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, prompt_logprobs=1)
    outs: dict[str, list[RequestOutput]] = {f"r{i}": [] for i in range(len(prompts))}
    for i, p in enumerate(prompts):
        small.add_request(f"r{i}", p, params)
    preemptions = 0
    while small.has_unfinished():
        for o in small.step():
            outs[o.request_id].append(o)
        preemptions += small.last_step_preemptions
    assert preemptions > 0 and small.block_manager.num_free_blocks == 12
    for i, p in enumerate(prompts):
        got = _prompt_lps(outs[f"r{i}"])
        want = _prompt_lps(_run(alone, {f"a{i}": (p, params)})[f"a{i}"])
        assert len(got) == len(p)
        assert max(abs(g.logprob - w.logprob) for g, w in zip(got[1:], want[1:], strict=True)  # type: ignore[union-attr]
                   ) < 1e-4
